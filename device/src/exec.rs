//! The execution context a kernel function runs in: which thread of which block.
//!
//! On the GPU it is read from the special registers; the CPU backend builds one per host
//! thread, with `block_dim == 1` (one thread per block), so that kernels written as
//! "for my share of the work, strided by the number of threads" run unchanged.

use crate::arch;

/// Thread and block coordinates (x dimension only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExecCtx {
    pub thread: u32,
    pub block_dim: u32,
    pub block: u32,
    pub grid_dim: u32,
}

impl ExecCtx {
    /// The calling GPU thread's context.
    #[cfg(target_arch = "nvptx64")]
    #[inline(always)]
    pub fn current() -> Self {
        ExecCtx {
            thread: arch::thread_idx_x(),
            block_dim: arch::block_dim_x(),
            block: arch::block_idx_x(),
            grid_dim: arch::grid_dim_x(),
        }
    }

    /// A host thread standing for block `block` of `grid_dim` (one thread per block).
    pub const fn host_block(block: u32, grid_dim: u32) -> Self {
        ExecCtx {
            thread: 0,
            block_dim: 1,
            block,
            grid_dim,
        }
    }

    /// Index of this thread in the grid.
    #[inline(always)]
    pub fn global_thread(&self) -> usize {
        self.block as usize * self.block_dim as usize + self.thread as usize
    }

    /// Threads in the grid.
    #[inline(always)]
    pub fn global_threads(&self) -> usize {
        self.grid_dim as usize * self.block_dim as usize
    }

    /// Block-wide barrier returning whether `p` held in any thread of the block.
    #[inline(always)]
    pub fn sync_threads_or(&self, p: bool) -> bool {
        arch::sync_threads_or(p)
    }

    /// Block-wide barrier (`bar.sync`); every thread of the block must call it.
    #[inline(always)]
    pub fn sync_threads(&self) {
        arch::sync_threads()
    }
}
