//! Collectives on communicators whose ranks live in several processes: through each rank's
//! staging buffers.
//!
//! A peer in another process cannot load or store this rank's user buffers (they are in
//! this process's address space), but it has this rank's segment mapped
//! (`crate::comm::segment`). The segment holds two staging halves, `S` (inputs) and `R`
//! (outputs), of the same size on every rank. A collective is cut into pieces that fit
//! them; for each piece, on the caller's stream:
//! 1. copy this rank's part of the input into `S` (the layout the collective's kernel expects
//!    for the piece: one block per rank for reduce-scatter, all-to-all and scatter);
//! 2. run the collective's usual kernel on `S` and `R` for the piece (peers load and store
//!    each other's `S` and `R` through their mappings; the addresses published at the entry
//!    barrier are translated by `oxccl_device::prims::barrier::wait_payload`);
//! 3. copy the piece's output from `R` into the user's output buffer.
//!
//! The all-reduce copies less: its kernel takes this rank's own user buffers besides the
//! staging addresses it publishes (`AllReduceArgs::local_send`), so only what peers read
//! goes into `S` (everything for one-shot, all but the own two-shot chunk otherwise) and
//! only what peers wrote comes out of `R` (nothing for one-shot: the kernel stores the
//! result into the user's output itself). For two ranks that is 4 bytes of device-memory
//! traffic per input byte instead of 6.
//!
//! Reuse of `S` and `R` is ordered by the stream and the kernel's barriers: a piece's copy
//! into `S` comes after the previous piece's kernel passed its exit barrier (no peer reads
//! `S` any more), and peers store into `R` only after the next entry barrier, which this rank
//! reaches after its copy out of `R`. Operations of one communicator must therefore be issued
//! in the same order on every rank and on one stream per rank at a time, as for every
//! collective here.
//!
//! The piece size depends only on the collective's shape, the rank count, the data type and
//! the staging size (checked equal on every rank at init), never on which side of the
//! collective a rank is, so every rank cuts the same pieces. Each piece carries a fingerprint
//! derived from the whole call's, so a rank calling something else is reported on the first
//! piece. In-place calls work: every piece reads its input before it writes its output, and
//! later pieces never read what earlier pieces wrote.

use oxccl_device::abi::{
    counts_hash, piece_fingerprint, DataType, COLL_ALL_GATHER, COLL_ALL_GATHER_V, COLL_ALL_REDUCE,
    COLL_ALL_TO_ALL, COLL_BROADCAST, COLL_GATHER, COLL_REDUCE, COLL_REDUCE_SCATTER, COLL_SCATTER,
};

use oxccl_device::abi::ALGO_ONE_SHOT;
use oxccl_device::coll::all_reduce::two_shot_range;

use super::launch::{Call, VLayout};
use super::{coll_name, Op};
use crate::backend::Stream;
use crate::comm::Comm;
use crate::error::Result;

/// This rank's staging halves (addresses in this process).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Staging {
    pub send: u64,
    pub recv: u64,
    /// Bytes of each half.
    pub half: usize,
}

/// The fingerprint of piece `piece` of a call whose own fingerprint is `fp`.
fn piece_fp(fp: u64, piece: usize) -> u64 {
    piece_fingerprint(fp, piece as u64, 0x5747)
}

/// A byte offset in one of the four buffers a staged call touches on its rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Loc {
    UserSend(usize),
    UserRecv(usize),
    StageSend(usize),
    StageRecv(usize),
}

/// One copy of a piece: `bytes` from `src` to `dst`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Move {
    pub dst: Loc,
    pub src: Loc,
    pub bytes: usize,
}

/// One piece of a staged call on one rank: copies into the staging input, the collective's
/// kernel on the staging buffers, copies out of the staging output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Piece {
    pub before: Vec<Move>,
    /// The kernel's count (NCCL's convention for the collective, as in [`Call::count`]).
    pub count: usize,
    /// All-gather-v: the piece's counts and displacements (elements, per rank).
    pub v: Option<(Vec<usize>, Vec<usize>)>,
    /// Bytes that size the kernel's grid (the same on every rank).
    pub grid_bytes: usize,
    pub after: Vec<Move>,
}

/// How a collective's buffer is laid out around its count on one side: one block of `count`
/// elements, one per rank, or not touched by this rank.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    None,
    Single,
    PerRank,
}

/// (input side, output side) of collective `coll` on a rank that `is_root` or not.
fn sides(coll: u32, is_root: bool) -> (Side, Side) {
    use Side::*;
    match coll {
        COLL_ALL_REDUCE => (Single, Single),
        COLL_BROADCAST => (if is_root { Single } else { None }, Single),
        COLL_REDUCE => (Single, if is_root { Single } else { None }),
        COLL_ALL_GATHER => (Single, PerRank),
        COLL_REDUCE_SCATTER => (PerRank, Single),
        COLL_ALL_TO_ALL => (PerRank, PerRank),
        COLL_GATHER => (Single, if is_root { PerRank } else { None }),
        COLL_SCATTER => (if is_root { PerRank } else { None }, Single),
        _ => (None, None),
    }
}

/// The shape of a staged call: what every rank must agree on, plus this rank's place.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Shape<'a> {
    pub coll: u32,
    /// NCCL's count (for all-gather-v: unused, see `v`).
    pub count: usize,
    pub nranks: usize,
    pub rank: usize,
    pub root: usize,
    /// Bytes per element.
    pub size: usize,
    /// Bytes of each staging half.
    pub half: usize,
    /// All-gather-v's counts and displacements (elements).
    pub v: Option<(&'a [usize], &'a [usize])>,
}

/// The pieces of a staged call on `s.rank`, or why it cannot be staged. Every rank gets the
/// same number of pieces with the same kernel counts (they depend only on what all ranks
/// agree on); only the copies differ.
pub(crate) fn plan(s: &Shape) -> std::result::Result<Vec<Piece>, String> {
    let (n, es) = (s.nranks.max(1), s.size);
    let blocks = if matches!(s.coll, COLL_ALL_REDUCE | COLL_BROADCAST | COLL_REDUCE) {
        1
    } else {
        n
    };
    let per = s.half / (es * blocks);
    if per == 0 {
        return Err(format!(
            "the staging buffers ({} bytes) cannot hold one {es}-byte element per rank for {blocks} blocks; raise OXCCL_STAGING_BYTES",
            s.half
        ));
    }
    if let Some((counts, displs)) = s.v {
        let longest = counts.iter().copied().max().unwrap_or(0);
        let piece_displs: Vec<usize> = (0..n).map(|q| q * per).collect();
        return Ok((0..longest)
            .step_by(per)
            .map(|off| {
                let c: Vec<usize> = counts.iter().map(|&c| c.saturating_sub(off).min(per)).collect();
                let total: usize = c.iter().sum();
                let before = vec![Move {
                    dst: Loc::StageSend(0),
                    src: Loc::UserSend(off * es),
                    bytes: c[s.rank] * es,
                }];
                let after = (0..n)
                    .map(|q| Move {
                        dst: Loc::UserRecv((displs[q] + off) * es),
                        src: Loc::StageRecv(q * per * es),
                        bytes: c[q] * es,
                    })
                    .collect();
                Piece {
                    before,
                    count: c[s.rank],
                    v: Some((c, piece_displs.clone())),
                    grid_bytes: total * es,
                    after,
                }
            })
            .collect());
    }
    let (input, output) = sides(s.coll, s.rank == s.root);
    let count = s.count;
    Ok((0..count)
        .step_by(per)
        .map(|off| {
            let k = per.min(count - off);
            let kb = k * es;
            // Block `q` of a per-rank buffer: element `q * count + off` for the user, byte
            // `q * kb` in the staging halves.
            let moves = |side: Side,
                         user: fn(usize) -> Loc,
                         stage: fn(usize) -> Loc,
                         into_stage: bool|
             -> Vec<Move> {
                let pair = |u: Loc, st: Loc| {
                    let (dst, src) = if into_stage { (st, u) } else { (u, st) };
                    Move { dst, src, bytes: kb }
                };
                match side {
                    Side::None => Vec::new(),
                    Side::Single => vec![pair(user(off * es), stage(0))],
                    Side::PerRank => (0..n)
                        .map(|q| pair(user((q * count + off) * es), stage(q * kb)))
                        .collect(),
                }
            };
            Piece {
                before: moves(input, Loc::UserSend, Loc::StageSend, true),
                count: k,
                v: None,
                grid_bytes: kb * blocks,
                after: moves(output, Loc::UserRecv, Loc::StageRecv, false),
            }
        })
        .collect())
}

impl Comm {
    fn stage_moves(&self, stream: &Stream, st: Staging, send: u64, recv: u64, moves: &[Move]) -> Result<()> {
        let addr = |l: Loc| match l {
            Loc::UserSend(o) => send + o as u64,
            Loc::UserRecv(o) => recv + o as u64,
            Loc::StageSend(o) => st.send + o as u64,
            Loc::StageRecv(o) => st.recv + o as u64,
        };
        for m in moves.iter().filter(|m| m.bytes > 0) {
            self.group
                .backend
                .copy_async(stream, addr(m.dst), addr(m.src), m.bytes)?;
        }
        Ok(())
    }

    fn staged_plan(
        &self,
        name: &'static str,
        call: &Call,
        v: Option<(&[usize], &[usize])>,
    ) -> Result<(Staging, Vec<Piece>)> {
        let st = self
            .staging()
            .ok_or_else(|| self.invalid(name, "no staging buffers".into()))?;
        let shape = Shape {
            coll: call.coll,
            count: call.count,
            nranks: self.count() as usize,
            rank: self.rank() as usize,
            root: call.root.unwrap_or(0) as usize,
            size: call.dtype.size(),
            half: st.half,
            v,
        };
        let pieces = plan(&shape).map_err(|m| self.invalid(name, m))?;
        Ok((st, pieces))
    }

    /// A [`Call`] collective through the staging buffers (see the module docs); `fp` is the
    /// whole call's fingerprint; `v` carries all-gather-v's counts and displacements.
    ///
    /// # Safety
    /// As [`Comm::launch`].
    pub(crate) unsafe fn launch_staged(
        &self,
        call: Call,
        fp: u64,
        v: Option<(&[usize], &[usize])>,
        stream: &Stream,
    ) -> Result<()> {
        let name = coll_name(call.coll);
        let (st, pieces) = self.staged_plan(name, &call, v)?;
        for (j, p) in pieces.iter().enumerate() {
            self.stage_moves(stream, st, call.send, call.recv, &p.before)?;
            let piece = Call {
                send: st.send,
                recv: st.recv,
                count: p.count,
                v: p.v.as_ref().map(|(c, d)| VLayout {
                    displ: d[self.rank() as usize],
                    total: c.iter().sum(),
                    hash: counts_hash(c, d),
                }),
                ..call
            };
            self.launch_direct(piece, p.grid_bytes, piece_fp(fp, j), stream)?;
            self.stage_moves(stream, st, call.send, call.recv, &p.after)?;
        }
        Ok(())
    }

    /// All-gather-v through the staging buffers.
    ///
    /// # Safety
    /// As [`Comm::all_gather_v_raw`], with `counts` and `displs` validated.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn all_gather_v_staged(
        &self,
        send: u64,
        recv: u64,
        counts: &[usize],
        displs: &[usize],
        dtype: DataType,
        fp: u64,
        stream: &Stream,
    ) -> Result<()> {
        let call = Call {
            coll: COLL_ALL_GATHER_V,
            send,
            recv,
            count: counts[self.rank() as usize],
            dtype,
            op: None,
            root: None,
            v: None,
        };
        self.launch_staged(call, fp, Some((counts, displs)), stream)
    }

    /// All-reduce through the staging buffers.
    ///
    /// # Safety
    /// As [`Comm::all_reduce_raw`]; `count > 0`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn all_reduce_staged(
        &self,
        send: u64,
        recv: u64,
        count: usize,
        dtype: DataType,
        op: Op,
        fp: u64,
        stream: &Stream,
    ) -> Result<()> {
        let call = Call {
            coll: COLL_ALL_REDUCE,
            send,
            recv,
            count,
            dtype,
            op: Some(op),
            root: None,
            v: None,
        };
        let (st, pieces) = self.staged_plan("all_reduce", &call, None)?;
        let es = dtype.size();
        let mut off = 0usize;
        for (j, p) in pieces.iter().enumerate() {
            let k = p.count;
            let (ps, pr) = (send + (off * es) as u64, recv + (off * es) as u64);
            // Only the part peers read goes into S, and only the part peers wrote comes out
            // of R: one-shot peers read all of it and write nothing here; two-shot peers
            // read and write everything but this rank's own chunk, which its kernel reads
            // from and writes to the user buffers directly.
            let algo = self.choose_algo((k * es) as u64);
            let own = if algo == ALGO_ONE_SHOT {
                None
            } else {
                let (lo, hi) = two_shot_range(k as u64, self.count(), self.rank(), es as u64);
                Some((lo as usize, hi as usize))
            };
            let (before, after) = all_reduce_moves(k, es, own);
            self.stage_moves(stream, st, ps, pr, &before)?;
            self.all_reduce_direct(
                st.send,
                st.recv,
                k,
                dtype,
                op,
                // The algorithm is in the fingerprint: ranks whose overrides differ would
                // copy different parts.
                Some(piece_fingerprint(fp, j as u64, (0x5748 << 32) | algo as u64)),
                Some((ps, pr)),
                stream,
            )?;
            self.stage_moves(stream, st, ps, pr, &after)?;
            off += k;
        }
        Ok(())
    }
}

/// The copies of one staged all-reduce piece of `k` elements of `es` bytes: the whole piece
/// into S (one-shot, `own = None`), or everything but the own two-shot chunk `[lo, hi)` into
/// S before the kernel and out of R after it. Offsets are relative to the piece.
pub(crate) fn all_reduce_moves(k: usize, es: usize, own: Option<(usize, usize)>) -> (Vec<Move>, Vec<Move>) {
    let Some((lo, hi)) = own else {
        let m = Move {
            dst: Loc::StageSend(0),
            src: Loc::UserSend(0),
            bytes: k * es,
        };
        return (vec![m], Vec::new());
    };
    let parts = [(0, lo), (hi, k)];
    let into = parts
        .iter()
        .filter(|(a, b)| b > a)
        .map(|&(a, b)| Move {
            dst: Loc::StageSend(a * es),
            src: Loc::UserSend(a * es),
            bytes: (b - a) * es,
        })
        .collect();
    let out = parts
        .iter()
        .filter(|(a, b)| b > a)
        .map(|&(a, b)| Move {
            dst: Loc::UserRecv(a * es),
            src: Loc::StageRecv(a * es),
            bytes: (b - a) * es,
        })
        .collect();
    (into, out)
}

#[cfg(test)]
mod tests;
