//! Collectives on registered windows: the symmetric kernels (`oxccl_device::coll::sym`).
//!
//! When every buffer of an all-reduce, all-gather or reduce-scatter lies in a window this
//! rank registered ([`Comm::register_window`]), the call runs on the symmetric kernels: peers'
//! copies are reached by pointer arithmetic on the window, so nothing is staged and no
//! addresses are exchanged per call. Every rank must then pass window buffers; a rank that
//! does not runs another kernel and the ranks time out with an error naming the peer. The
//! Simple kernels, which load and store peers' copies of the user's buffers, run only on
//! `WIN_COLL_SYMMETRIC` windows, whose users promise the same window and offsets on every
//! rank (NCCL's contract); the kernels check that promise at their entry barrier and report
//! a mismatch instead of touching the wrong bytes (`oxccl_device::abi::sym_placement`).
//! Calls the table gives to Simple on default windows run the classic kernels. LL and
//! Lamport touch only this rank's own buffers and the scratch mailboxes: any window will do.
//!
//! # Resources ([`SymRes`], made once per communicator with its first registered window)
//! - a scratch window (comm-owned `mem_alloc` memory, registered like a user's) holding three
//!   areas: Simple (barrier lines only), LL and Lamport (barrier lines and mailbox lines for
//!   `OXCCL_SYM_LL_MAX_BYTES` per rank, see `oxccl_device::abi::sym`); the Lamport area is
//!   poisoned once by the init kernel, after which the ranks meet (the init contract);
//! - the sequence slots (`SymArgs::state`): local device memory where the kernels keep the
//!   operation count, so a launch replayed from a CUDA graph runs as the next operation.
//!
//! # Kernels
//! One kernel per (protocol, data type) holds every kind and operator; the one-shot
//! all-reduce with `Sum` of LL and Lamport, the common small all-reduce, runs on kernels of
//! its own (`oxccl_device::abi::sym_sum_kernel_runs`, chosen by the GPU backend's
//! `launch_sym` and by the CPU backend's dispatch alike), a fraction of the general kernel's
//! size, so that its hot path is short. From seven ranks in one process, small one-shot
//! all-reduces and reduce-scatters with `Sum` and all-gathers run on the grouped kernels
//! (`oxccl_device::abi::sym_grouped_kernel_runs`, asked for with `SYM_FLAG_GROUPED`), which
//! poll a line's peers four at a time (`OXCCL_SYM_GROUPED`; [`super::sym_table::grouped`]).
//!
//! # Choice (the symmetric tuner, printed by `oxccl tuner`; `OXCCL_SYM` forces a kernel)
//! `auto` follows the measured table of [`super::sym_table`] (kernel and CTA count by
//! collective, payload per rank and whether the ranks span processes); `OXCCL_SYM_CTAS`
//! forces the CTA count. `OXCCL_SYM=simple` picks one-shot up to [`ONE_SHOT_MAX`], two-shot
//! beyond. `ll` and `lamport` run the all-reduce one-shot, `ll-twoshot` and
//! `lamport-twoshot` two-shot (the other collectives as under `ll` / `lamport`); past the
//! mailbox capacity (one-shot: `OXCCL_SYM_LL_MAX_BYTES` per rank; two-shot:
//! `sym_two_shot_lines` lines of a slot, about `nranks / 2` times that) they fall back to
//! Simple.

use std::sync::Arc;

use oxccl_device::abi::{
    sym_header_line, sym_line_data, sym_scratch_bytes, sym_slot_lines, sym_two_shot_lines, DataType, Header,
    SymArgs, SymInitArgs, SYM_FINGERPRINT_BITS, SYM_KIND_ALL_GATHER, SYM_KIND_ALL_REDUCE_ONE_SHOT,
    SYM_KIND_ALL_REDUCE_TWO_SHOT, SYM_KIND_REDUCE_SCATTER, SYM_PROTO_LAMPORT, SYM_PROTO_LL, SYM_PROTO_SIMPLE,
    SYM_STATE_BYTES,
};
use oxccl_device::api::abi::{WindowDesc, WIN_COLL_SYMMETRIC};

use super::sym_policy::{SymPolicy, SymSetting};
use super::Op;
use crate::backend::{Backend, Grid, Stream};
use crate::comm::Comm;
use crate::error::{Error, Result};
use crate::window::Window;

/// Largest all-reduce (bytes per rank) `OXCCL_SYM=simple` runs one-shot.
pub const ONE_SHOT_MAX: u64 = 256 << 10;

/// A communicator's symmetric-kernel resources on this rank.
pub(crate) struct SymRes {
    /// `Some` until dropped (unmapped before its memory is freed).
    scratch: Option<Window>,
    scratch_mem: u64,
    /// Offsets of the Simple, LL and Lamport areas in the scratch window.
    areas: [u64; 3],
    slot_lines: u32,
    /// LL/Lamport capacity per rank (bytes).
    max_bytes: u64,
    state: u64,
    backend: Arc<dyn Backend>,
    device: usize,
}

impl SymRes {
    fn scratch(&self) -> WindowDesc {
        self.scratch.as_ref().map(|w| w.desc()).unwrap_or_default()
    }
}

impl Drop for SymRes {
    fn drop(&mut self) {
        drop(self.scratch.take());
        // SAFETY: allocated in `sym_setup`; the communicator is going away (its streams were
        // synchronized), so no kernel uses them; the scratch window was unmapped above.
        unsafe {
            self.backend.free(self.device, self.state, SYM_STATE_BYTES);
            if let Err(e) =
                crate::window::free_block(&*self.backend, "symmetric scratch", 0, self.scratch_mem)
            {
                tracing::warn!(target: "oxccl::coll", "freeing the symmetric scratch: {e}");
            }
        }
    }
}

/// How a symmetric launch runs ([`Comm::sym_plan`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SymPlan {
    pub grid: Grid,
    /// On the grouped kernels (`SYM_FLAG_GROUPED`).
    pub grouped: bool,
    /// Blocks per rank the kernel it runs may have resident (the occupancy bound).
    pub max: u32,
}

/// Which kernel runs a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SymChoice {
    pub kind: u32,
    pub proto: u32,
}

impl SymChoice {
    /// Short name (`sym/lamport`, `sym/ll (two-shot)`, `sym/simple (one-shot)`, ...).
    pub fn name(&self) -> &'static str {
        match (self.proto, self.kind) {
            (SYM_PROTO_LAMPORT, SYM_KIND_ALL_REDUCE_TWO_SHOT) => "sym/lamport (two-shot)",
            (SYM_PROTO_LAMPORT, _) => "sym/lamport",
            (SYM_PROTO_LL, SYM_KIND_ALL_REDUCE_TWO_SHOT) => "sym/ll (two-shot)",
            (SYM_PROTO_LL, _) => "sym/ll",
            (_, SYM_KIND_ALL_REDUCE_ONE_SHOT) => "sym/simple (one-shot)",
            (_, SYM_KIND_ALL_REDUCE_TWO_SHOT) => "sym/simple (two-shot)",
            _ => "sym/simple",
        }
    }
}

/// The symmetric kernel for collective `kind` (`SYM_KIND_ALL_REDUCE_ONE_SHOT` for any
/// all-reduce, `SYM_KIND_ALL_GATHER`, `SYM_KIND_REDUCE_SCATTER`) with `payload` bytes per
/// rank of `dtype` on `nranks` ranks, an LL/Lamport capacity of `ll_max` bytes per rank,
/// under `setting` (`OXCCL_SYM`), on a communicator whose ranks span processes or not;
/// `None` when the classic kernels run instead (`off`, or `auto` where they measured
/// faster).
#[allow(clippy::too_many_arguments)]
pub fn choose(
    kind: u32,
    payload: u64,
    dtype: DataType,
    nranks: u32,
    ll_max: u64,
    setting: SymSetting,
    spans: bool,
) -> Option<SymChoice> {
    let all_reduce = kind == SYM_KIND_ALL_REDUCE_ONE_SHOT || kind == SYM_KIND_ALL_REDUCE_TWO_SHOT;
    let simple = |k: u32| SymChoice {
        kind: if all_reduce { k } else { kind },
        proto: SYM_PROTO_SIMPLE,
    };
    let fits = payload <= ll_max;
    // The two-shot's lines of a slot against the slot's data lines (the kernel's own check).
    let size = dtype.size() as u64;
    let two_shot_fits = |proto| {
        let lines = sym_two_shot_lines(payload / size, size, nranks, sym_line_data(proto, dtype));
        all_reduce && lines <= sym_header_line(sym_slot_lines(ll_max))
    };
    let two_shot = |proto| SymChoice {
        kind: SYM_KIND_ALL_REDUCE_TWO_SHOT,
        proto,
    };
    let mailbox = |proto| SymChoice {
        kind: if all_reduce {
            SYM_KIND_ALL_REDUCE_ONE_SHOT
        } else {
            kind
        },
        proto,
    };
    use SymSetting as S;
    match setting {
        S::Off => None,
        S::SimpleOneShot => Some(simple(SYM_KIND_ALL_REDUCE_ONE_SHOT)),
        S::SimpleTwoShot => Some(simple(SYM_KIND_ALL_REDUCE_TWO_SHOT)),
        S::Ll if fits => Some(mailbox(SYM_PROTO_LL)),
        S::Lamport if fits => Some(mailbox(SYM_PROTO_LAMPORT)),
        S::LlTwoShot if two_shot_fits(SYM_PROTO_LL) => Some(two_shot(SYM_PROTO_LL)),
        S::LamportTwoShot if two_shot_fits(SYM_PROTO_LAMPORT) => Some(two_shot(SYM_PROTO_LAMPORT)),
        S::LlTwoShot if !all_reduce && fits => Some(mailbox(SYM_PROTO_LL)),
        S::LamportTwoShot if !all_reduce && fits => Some(mailbox(SYM_PROTO_LAMPORT)),
        // Forced LL or Lamport past the mailbox capacity, or Simple: Simple.
        S::Simple | S::Ll | S::Lamport | S::LlTwoShot | S::LamportTwoShot => {
            Some(simple(if payload <= ONE_SHOT_MAX {
                SYM_KIND_ALL_REDUCE_ONE_SHOT
            } else {
                SYM_KIND_ALL_REDUCE_TWO_SHOT
            }))
        }
        // `auto`: the measured table (`super::sym_table`), whose mailbox rows apply where
        // the payload fits the mailbox.
        S::Auto => super::sym_table::auto(
            super::sym_table::SymColl::of_kind(kind),
            payload,
            nranks,
            spans,
            fits,
            two_shot_fits(SYM_PROTO_LL) && two_shot_fits(SYM_PROTO_LAMPORT),
        ),
    }
}

/// The collective's name and a description of the call a symmetric fingerprint
/// (`oxccl_device::abi::sym_fingerprint`, 43 bits: count, dtype, op, kind, proto) stands for.
pub(crate) fn describe_fingerprint(fp: u64) -> (&'static str, String) {
    let count = fp & 0xFFFF_FFFF;
    let dtype = DataType::from_u32(((fp >> 32) & 0xF) as u32).map_or("an unknown type", |d| d.name());
    let op = oxccl_device::abi::RedOp::from_u32(((fp >> 36) & 0x7) as u32)
        .map_or("an unknown operator", |o| o.name());
    let kind = ((fp >> 39) & 0x3) as u32;
    let proto = ((fp >> 41) & 0x3) as u32;
    let coll = match kind {
        SYM_KIND_ALL_GATHER => "all_gather",
        SYM_KIND_REDUCE_SCATTER => "reduce_scatter",
        _ => "all_reduce",
    };
    let choice = SymChoice { kind, proto }.name();
    let what = if kind == SYM_KIND_ALL_GATHER {
        format!("{coll} of {count} x {dtype} ({choice})")
    } else {
        format!("{coll} of {count} x {dtype} with {op} ({choice})")
    };
    (coll, what)
}

/// The collective's name and the two calls of a symmetric mismatch record (this rank's
/// fingerprint `ours`, the peer's `theirs`). Calls that agree in every field but the Simple
/// kernels' placement bits (`oxccl_device::abi::sym_placement`) were made on buffers at other
/// places in their windows.
pub(crate) fn describe_mismatch(ours: u64, theirs: u64) -> (&'static str, String, String) {
    let (coll, mut a) = describe_fingerprint(ours);
    let mut b = describe_fingerprint(theirs).1;
    let call_bits = (1u64 << SYM_FINGERPRINT_BITS) - 1;
    if (ours ^ theirs) & call_bits == 0 {
        a.push_str(" on buffers at one window and offsets");
        b.push_str(" on buffers at another window or other offsets (the Simple symmetric kernels need the same window and offsets on every rank)");
    }
    (coll, a, b)
}

impl Comm {
    /// The error of a symmetric kernel's record other than a mismatch
    /// ([`oxccl_device::abi::SYM_ERROR_FLAG`]): `epoch` holds the op's sequence number, and
    /// `detail` the op's fingerprint (timeout, abort) or the value a kernel refused.
    pub(crate) fn sym_error(&self, rec: &oxccl_device::abi::ErrorRecord) -> Error {
        use oxccl_device::abi::{ERR_ABORTED, ERR_TIMEOUT, SYM_ERROR_FLAG};
        let block = rec.block & !SYM_ERROR_FLAG;
        let (op, what) = describe_fingerprint(rec.detail);
        match rec.code {
            ERR_TIMEOUT => Error::SymTimeout {
                op,
                rank: self.rank(),
                peer: rec.peer,
                block,
                seq: rec.epoch,
                what,
            },
            ERR_ABORTED => Error::Aborted { op, rank: self.rank() },
            _ => Error::InvalidUsage {
                op: "symmetric collective",
                what: format!(
                    "rank {}: the kernel of symmetric operation {} (block {block}) refused value {} (an unknown collective, operator or size)",
                    self.rank(),
                    rec.epoch,
                    rec.detail
                ),
            },
        }
    }

    /// Make this communicator's symmetric resources if it has none yet (collective: called
    /// by every rank from `register_window`, after the user's window was registered).
    pub(crate) fn sym_setup(&self) -> Result<()> {
        const OP: &str = "register_window (symmetric scratch)";
        if self.sym.lock().unwrap_or_else(|p| p.into_inner()).is_some() {
            return Ok(());
        }
        let n = self.count();
        let max_bytes = self.config().sym_ll_capacity();
        // Each rank lays its scratch out from its own `OXCCL_SYM_LL_MAX_BYTES`, and a writer
        // addresses a peer's mailbox lines with its own layout: ranks that differ would store
        // into the wrong area or past the peer's scratch. Every rank sees the same gathered
        // values, so all of them fail here, naming the ranks, or none does.
        let all = self.host_all_gather(OP, &max_bytes.to_le_bytes())?;
        let theirs = |b: &Vec<u8>| b.as_slice().try_into().map_or(0, u64::from_le_bytes);
        if let Some((q, b)) = all.iter().enumerate().find(|(_, b)| theirs(b) != max_bytes) {
            return Err(Error::InvalidSetting {
                setting: "OXCCL_SYM_LL_MAX_BYTES",
                value: self.config().sym_ll_max_bytes.to_string(),
                what: format!(
                    "rank {} uses {max_bytes} bytes of symmetric mailbox per rank, rank {q} {}; every rank of a communicator must set the same",
                    self.rank(),
                    theirs(b)
                ),
            });
        }
        let round = |x: u64| x.div_ceil(4096) * 4096;
        let simple = round(sym_scratch_bytes(
            SYM_KIND_ALL_REDUCE_TWO_SHOT,
            SYM_PROTO_SIMPLE,
            n,
            0,
        ));
        let ll = round(sym_scratch_bytes(
            SYM_KIND_ALL_REDUCE_ONE_SHOT,
            SYM_PROTO_LL,
            n,
            max_bytes,
        ));
        let lamport = round(sym_scratch_bytes(
            SYM_KIND_ALL_REDUCE_ONE_SHOT,
            SYM_PROTO_LAMPORT,
            n,
            max_bytes,
        ));
        let total = (simple + ll + lamport) as usize;
        let mem = self.mem_alloc(total)?;
        let scratch = match crate::window::register_internal(self, OP, &[(mem, total)]) {
            Ok(w) => w,
            Err(e) => {
                // SAFETY: just allocated, never used.
                let _ = unsafe { self.mem_free(mem) };
                return Err(e);
            }
        };
        let backend = self.backend().clone();
        let device = self.device();
        let state = backend.alloc(device, SYM_STATE_BYTES)?;
        let res = SymRes {
            areas: [0, simple, simple + ll],
            slot_lines: sym_slot_lines(max_bytes) as u32,
            max_bytes,
            scratch: Some(scratch),
            scratch_mem: mem,
            state,
            backend: backend.clone(),
            device,
        };
        // The init contract: poison this rank's Lamport lines, wait, then meet the peers.
        let init = SymInitArgs::for_area(&res.scratch(), res.areas[2], res.slot_lines as u64);
        let stream = backend.create_stream(device)?;
        let grid = Grid {
            blocks: (init.lines.div_ceil(4096) as u32).clamp(1, 64),
            threads: backend.block_threads(),
        };
        backend.launch_sym_init(&stream, grid, &init)?;
        backend.synchronize(&stream)?;
        self.host_barrier(OP)?;
        tracing::debug!(target: "oxccl::coll", rank = self.rank(), total, max_bytes, "symmetric scratch ready");
        *self.sym.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(res));
        Ok(())
    }

    /// The kernel a call on window buffers would use (for the tuner table and tests).
    pub fn sym_choice(&self, kind: u32, payload: u64, dtype: DataType) -> Option<SymChoice> {
        let ll_max = self
            .sym
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map_or(self.config().sym_ll_capacity(), |r| r.max_bytes);
        choose(
            kind,
            payload,
            dtype,
            self.count(),
            ll_max,
            self.sym_policy().setting,
            self.spans_processes(),
        )
    }

    /// Run `kind` on window buffers if `send` and `recv` lie in registered windows (and the
    /// symmetric kernels are not switched off): `Ok(true)` when launched. `count` is as the
    /// kernel counts it, `payload` the bytes per rank the choice goes by, `send_bytes` and
    /// `recv_bytes` this rank's buffer extents.
    ///
    /// # Safety
    /// As the collective's `_raw` form.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn try_sym(
        &self,
        op_name: &'static str,
        kind: u32,
        send: u64,
        send_bytes: usize,
        recv: u64,
        recv_bytes: usize,
        count: usize,
        payload: u64,
        dtype: DataType,
        op: Option<Op>,
        stream: &Stream,
    ) -> Result<bool> {
        let Some(res) = self.sym.lock().unwrap_or_else(|p| p.into_inner()).clone() else {
            return Ok(false);
        };
        let (Some((sw, so)), Some((rw, ro))) = (
            self.find_window(send, send_bytes),
            self.find_window(recv, recv_bytes),
        ) else {
            return Ok(false);
        };
        let spans = self.spans_processes();
        let policy = self.sym_policy();
        let Some(choice) = choose(
            kind,
            payload,
            dtype,
            self.count(),
            res.max_bytes,
            policy.setting,
            spans,
        ) else {
            return Ok(false);
        };
        // The Simple kernels reach peers' copies of the user's buffers at this rank's offsets:
        // only on collective-symmetric windows, whose users promise the same window and
        // offsets on every rank (NCCL's contract; the kernels check it, `sym_placement`).
        // Buffers of default windows may lie anywhere on each rank: the classic kernels
        // (the mailbox protocols touch only this rank's buffers and run on any window).
        if choice.proto == SYM_PROTO_SIMPLE && sw.flags & rw.flags & WIN_COLL_SYMMETRIC == 0 {
            return Ok(false);
        }
        self.check_launch(op_name, stream)?;
        let c = self.args();
        let args = SymArgs {
            header: Header::of::<SymArgs>(),
            kind: choice.kind,
            proto: choice.proto,
            send: sw,
            recv: rw,
            scratch: res.scratch(),
            send_offset: so,
            recv_offset: ro,
            scratch_offset: res.areas[choice.proto as usize],
            count: count as u64,
            dtype: dtype as u32,
            op: op.map_or(0, |o| o.red_op() as u32),
            scalar: match op {
                Some(Op::PreMulSum { scalar_bits }) => scalar_bits,
                _ => 0,
            },
            seq: 0,
            abort_flag: c.abort_flag,
            timeout_ns: c.timeout_ns,
            error: c.error,
            slot_lines: res.slot_lines,
            flags: if self.group.devices == 1 {
                oxccl_device::abi::SYM_FLAG_ONE_DEVICE
            } else {
                0
            },
            state: res.state,
        };
        let plan = self.plan_with(choice, args.op, payload, dtype, &policy, spans);
        let grid = plan.grid;
        let mut args = args;
        if plan.grouped {
            args.flags |= oxccl_device::abi::SYM_FLAG_GROUPED;
        }
        // Programmatic dependent launch only where this op's grid and the next op's waiting
        // grid fit beside every other rank's on the device (SYM_FLAG_EARLY_NEXT's doc).
        if grid.blocks.saturating_mul(2) <= plan.max && policy.pdl {
            args.flags |= oxccl_device::abi::SYM_FLAG_EARLY_NEXT;
        }
        let grouped = plan.grouped;
        tracing::trace!(target: "oxccl::coll", op = op_name, choice = choice.name(), grouped, ?grid, "launch symmetric");
        self.group.backend.launch_sym(stream, grid, &args)?;
        Ok(true)
    }

    /// How a launch of `choice` with operator `op` (`RedOp` value) and `payload` bytes per
    /// rank of `dtype` runs under this rank's policy: its grid (the table's CTA count within
    /// the backend's and the config's bounds), whether on the grouped kernels (where
    /// [`super::sym_table::grouped`] wants them and their occupancy holds that grid: the grid
    /// never changes for them, so ranks with other grouped settings still launch the same
    /// one), and the bound on blocks per rank of the kernel it runs.
    pub fn sym_plan(&self, choice: SymChoice, op: u32, payload: u64, dtype: DataType) -> SymPlan {
        self.plan_with(
            choice,
            op,
            payload,
            dtype,
            &self.sym_policy(),
            self.spans_processes(),
        )
    }

    /// [`Comm::sym_plan`] under `policy`, on ranks spanning processes or not (the launch
    /// path passes the snapshot it chose the kernel with, read once per call).
    fn plan_with(
        &self,
        choice: SymChoice,
        op: u32,
        payload: u64,
        dtype: DataType,
        policy: &SymPolicy,
        spans: bool,
    ) -> SymPlan {
        let backend = &self.group.backend;
        let rpd = self.group.ranks_per_device;
        let max = backend.max_sym_blocks_per_rank(rpd, choice.proto, dtype);
        let (lo, hi) = self.config().block_range(max);
        let grid = Grid {
            blocks: super::sym_table::ctas(choice, payload, dtype, hi, policy.ctas).max(lo),
            threads: backend.block_threads(),
        };
        let mut plan = SymPlan {
            grid,
            grouped: false,
            max,
        };
        if super::sym_table::grouped(choice, op, payload, self.count(), spans, policy.grouped) {
            let gmax = backend.max_sym_grouped_blocks_per_rank(rpd, choice.proto, dtype);
            if grid.blocks <= gmax {
                plan.grouped = true;
                plan.max = max.min(gmax);
            }
        }
        plan
    }

    /// The scratch window's descriptor and the sequence slots (tests).
    #[doc(hidden)]
    pub fn sym_scratch_for_tests(&self) -> Option<(WindowDesc, u64, u64)> {
        self.sym
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|r| (r.scratch(), r.state, r.scratch_mem))
    }
}
