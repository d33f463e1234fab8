//! Cooperation width as a type (NCCL's `ncclCoopThread`, `ncclCoopWarp`, `ncclCoopCta`):
//! a group of threads that call a coop-taking function together, each knowing its rank in
//! the group, the group's size, and how to meet.
//!
//! On the host target (the CPU backend, one thread per block), every coop is one thread.

use crate::arch;
use crate::exec::ExecCtx;

/// A group of threads that act together.
pub trait Coop: Copy {
    /// This thread's rank in the group, `0..size()`.
    fn thread_rank(&self) -> u32;
    /// Threads in the group.
    fn size(&self) -> u32;
    /// Every thread of the group meets; memory is ordered among them (as `bar.sync`).
    fn sync(&self);
    /// [`Coop::sync`] that also returns whether `p` held in any thread of the group.
    fn sync_any(&self, p: bool) -> bool;
}

/// One thread.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Thread;

/// The calling thread's full warp (every lane must call together).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Warp;

/// The calling thread's block (x dimension; every thread of the block must call together).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    thread: u32,
    size: u32,
}

impl Coop for Thread {
    #[inline(always)]
    fn thread_rank(&self) -> u32 {
        0
    }
    #[inline(always)]
    fn size(&self) -> u32 {
        1
    }
    #[inline(always)]
    fn sync(&self) {}
    #[inline(always)]
    fn sync_any(&self, p: bool) -> bool {
        p
    }
}

impl Coop for Warp {
    #[inline(always)]
    fn thread_rank(&self) -> u32 {
        arch::lane_id()
    }
    #[inline(always)]
    fn size(&self) -> u32 {
        arch::WARP_SIZE
    }
    #[inline(always)]
    fn sync(&self) {
        arch::sync_warp()
    }
    #[inline(always)]
    fn sync_any(&self, p: bool) -> bool {
        arch::sync_warp_any(p)
    }
}

impl Block {
    /// The block of the thread `ctx` describes.
    #[inline(always)]
    pub const fn new(ctx: &ExecCtx) -> Self {
        Block {
            thread: ctx.thread,
            size: ctx.block_dim,
        }
    }

    /// The calling thread's block: from the special registers on the GPU; one thread on the
    /// host.
    #[inline(always)]
    pub fn current() -> Self {
        #[cfg(target_arch = "nvptx64")]
        {
            Block::new(&ExecCtx::current())
        }
        #[cfg(not(target_arch = "nvptx64"))]
        {
            Block::new(&ExecCtx::host_block(0, 1))
        }
    }
}

impl Coop for Block {
    #[inline(always)]
    fn thread_rank(&self) -> u32 {
        self.thread
    }
    #[inline(always)]
    fn size(&self) -> u32 {
        self.size
    }
    #[inline(always)]
    fn sync(&self) {
        arch::sync_threads()
    }
    #[inline(always)]
    fn sync_any(&self, p: bool) -> bool {
        arch::sync_threads_or(p)
    }
}

/// `OXCCL_COOP_THREAD`: [`CoopAny`] kind of [`Thread`].
pub const COOP_THREAD: u32 = 0;
/// `OXCCL_COOP_WARP`: [`CoopAny`] kind of [`Warp`].
pub const COOP_WARP: u32 = 1;
/// `OXCCL_COOP_BLOCK`: [`CoopAny`] kind of [`Block::current`].
pub const COOP_BLOCK: u32 = 2;

/// A coop chosen at run time by its `COOP_*` kind (the C API's coop argument); an unknown
/// kind acts as [`Thread`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CoopAny {
    kind: u32,
}

impl CoopAny {
    /// The coop of kind `kind` (`COOP_*`).
    #[inline(always)]
    pub const fn new(kind: u32) -> Self {
        CoopAny { kind }
    }

    /// The `COOP_*` kind.
    #[inline(always)]
    pub const fn kind(&self) -> u32 {
        self.kind
    }
}

impl Coop for CoopAny {
    #[inline(always)]
    fn thread_rank(&self) -> u32 {
        match self.kind {
            COOP_WARP => Warp.thread_rank(),
            COOP_BLOCK => Block::current().thread_rank(),
            _ => Thread.thread_rank(),
        }
    }
    #[inline(always)]
    fn size(&self) -> u32 {
        match self.kind {
            COOP_WARP => Warp.size(),
            COOP_BLOCK => Block::current().size(),
            _ => Thread.size(),
        }
    }
    #[inline(always)]
    fn sync(&self) {
        match self.kind {
            COOP_WARP => Warp.sync(),
            COOP_BLOCK => Block::current().sync(),
            _ => Thread.sync(),
        }
    }
    #[inline(always)]
    fn sync_any(&self, p: bool) -> bool {
        match self.kind {
            COOP_WARP => Warp.sync_any(p),
            COOP_BLOCK => Block::current().sync_any(p),
            _ => Thread.sync_any(p),
        }
    }
}
