//! Checks and timing of collectives on registered windows (the symmetric kernels): every
//! rank held here allocates its buffers with `mem_alloc` and registers them as windows
//! (collective: one thread per rank), then the all-reduce, all-gather and reduce-scatter run
//! on them through the usual `_raw` calls, which pick the symmetric kernels.

use oxccl_device::abi::{DataType, RedOp};

use super::{colls::Coll, time_launches, Ranks, Timing};
use crate::coll::sym_policy::{SymPolicy, SymSetting};
use crate::comm::Comm;
use crate::error::{Error, Result};
use crate::verify;
use crate::window::{Window, WIN_COLL_SYMMETRIC};

/// One rank's window buffers.
pub struct RankBufs {
    pub send: u64,
    pub recv: u64,
    send_win: Option<Window>,
    recv_win: Option<Window>,
}

/// The window buffers of the ranks held here (`send_bytes` and `recv_bytes` each).
pub struct SymBufs {
    pub ranks: Vec<RankBufs>,
    pub send_bytes: usize,
    pub recv_bytes: usize,
}

fn on_ranks<T: Send>(comms: &[Comm], f: impl Fn(&Comm) -> T + Sync) -> Vec<T> {
    std::thread::scope(|s| {
        let hs: Vec<_> = comms.iter().map(|c| s.spawn(|| f(c))).collect();
        hs.into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

impl Ranks {
    /// Switch every rank held here to the symmetric kernel family `setting` (as
    /// `OXCCL_SYM` would have when the communicator was made).
    pub fn set_sym(&self, setting: SymSetting) {
        for c in &self.comms {
            c.set_sym_policy(SymPolicy {
                setting,
                ..c.sym_policy()
            });
        }
    }
}

impl SymBufs {
    /// Allocate and register (collective over the ranks held here, each on its thread).
    pub fn new(ranks: &Ranks, send_bytes: usize, recv_bytes: usize) -> Result<Self> {
        let made = on_ranks(&ranks.comms, |c| -> Result<RankBufs> {
            let send = c.mem_alloc(send_bytes.max(1))?;
            let recv = c.mem_alloc(recv_bytes.max(1))?;
            let send_win = c.register_window(send, send_bytes.max(1), WIN_COLL_SYMMETRIC)?;
            let recv_win = c.register_window(recv, recv_bytes.max(1), WIN_COLL_SYMMETRIC)?;
            Ok(RankBufs {
                send,
                recv,
                send_win: Some(send_win),
                recv_win: Some(recv_win),
            })
        });
        Ok(SymBufs {
            ranks: made.into_iter().collect::<Result<Vec<_>>>()?,
            send_bytes,
            recv_bytes,
        })
    }

    /// Deregister (collective) and free.
    pub fn release(mut self, ranks: &Ranks) -> Result<()> {
        let taken: Vec<_> = self
            .ranks
            .iter_mut()
            .map(|b| (b.send_win.take(), b.recv_win.take(), b.send, b.recv))
            .collect();
        let results = std::thread::scope(|s| {
            let hs: Vec<_> = ranks
                .comms
                .iter()
                .zip(taken)
                .map(|(c, (sw, rw, sp, rp))| {
                    s.spawn(move || -> Result<()> {
                        if let Some(w) = sw {
                            c.deregister_window(w)?;
                        }
                        if let Some(w) = rw {
                            c.deregister_window(w)?;
                        }
                        // SAFETY: deregistered above, no kernel uses them (streams synced).
                        unsafe {
                            c.mem_free(sp)?;
                            c.mem_free(rp)?;
                        }
                        Ok(())
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect::<Vec<_>>()
        });
        results.into_iter().collect()
    }
}

/// Bytes of (send, recv) per rank for `coll` of `count` elements (NCCL's counts).
pub fn sizes(coll: Coll, n: usize, count: usize, dt: DataType) -> (usize, usize) {
    let e = count * dt.size();
    match coll {
        Coll::AllGather => (e, n * e),
        Coll::ReduceScatter => (n * e, e),
        _ => (e, e),
    }
}

/// Bytes of (send, recv) per rank for `depth` operations of `coll` in flight at once, each
/// on buffers of its own ([`check_sym_ahead`]): `depth` slots of [`sizes`], each rounded up
/// to 256 bytes so that every slot starts as aligned as the first.
pub fn sizes_ahead(coll: Coll, n: usize, count: usize, dt: DataType, depth: usize) -> (usize, usize) {
    let (s, r) = sizes(coll, n, count, dt);
    let round = |b: usize| b.max(1).div_ceil(256) * 256;
    (depth * round(s), depth * round(r))
}

/// Enqueue `coll` on every rank held here, on the window buffers at byte `send_off` and
/// `recv_off` of each rank's.
#[allow(clippy::too_many_arguments)]
fn launch_at(
    ranks: &Ranks,
    bufs: &SymBufs,
    coll: Coll,
    dt: DataType,
    op: crate::coll::Op,
    count: usize,
    send_off: usize,
    recv_off: usize,
) -> Result<()> {
    for (i, b) in bufs.ranks.iter().enumerate() {
        let (c, s) = (&ranks.comms[i], &ranks.streams[i]);
        let (send, recv) = (b.send + send_off as u64, b.recv + recv_off as u64);
        // SAFETY: inside the window buffers (the callers' offsets leave room for the
        // sizes `sizes` gives), alive until `bufs` is released.
        unsafe {
            match coll {
                Coll::AllGather => c.all_gather_raw(send, recv, count, dt, s)?,
                Coll::ReduceScatter => c.reduce_scatter_raw(send, recv, count, dt, op, s)?,
                Coll::AllReduce => c.all_reduce_raw(send, recv, count, dt, op, s)?,
                other => {
                    return Err(Error::Init(format!(
                        "{} has no symmetric kernel (all_reduce, all_gather, reduce_scatter do)",
                        other.name()
                    )))
                }
            }
        }
    }
    Ok(())
}

/// Enqueue `coll` on every rank held here, on the window buffers.
fn launch(
    ranks: &Ranks,
    bufs: &SymBufs,
    coll: Coll,
    dt: DataType,
    op: crate::coll::Op,
    count: usize,
) -> Result<()> {
    launch_at(ranks, bufs, coll, dt, op, count, 0, 0)
}

/// Run `coll` `iters` times back to back on fresh random data each time (outputs poisoned
/// before each), checking every element of every rank's output against the host reference.
/// Every operation is waited for before the next starts ([`check_sym_ahead`] lets ranks run
/// ahead). Returns the elements checked.
#[allow(clippy::too_many_arguments)]
pub fn check_sym(
    ranks: &Ranks,
    bufs: &SymBufs,
    coll: Coll,
    dt: DataType,
    red: RedOp,
    count: usize,
    iters: usize,
    seed: u64,
) -> Result<usize> {
    check_sym_ahead(ranks, bufs, coll, dt, red, count, iters, 1, seed)
}

/// [`check_sym`] with up to `depth` operations in flight: `bufs` holds `depth` slots
/// ([`sizes_ahead`]); each batch stages fresh inputs in every slot and poisons every
/// output, enqueues one operation per slot on every rank with no wait between them (so a
/// rank's kernels run ahead of its peers' as far as the protocols let them, through the
/// rotating mailbox buffers), then waits and checks every element of every slot.
#[allow(clippy::too_many_arguments)]
pub fn check_sym_ahead(
    ranks: &Ranks,
    bufs: &SymBufs,
    coll: Coll,
    dt: DataType,
    red: RedOp,
    count: usize,
    iters: usize,
    depth: usize,
    seed: u64,
) -> Result<usize> {
    let n = ranks.n();
    let op = verify::test_op(dt, red);
    let depth = depth.max(1);
    let (ss, rs) = (bufs.send_bytes / depth, bufs.recv_bytes / depth);
    let (sb, rb) = sizes(coll, n, count, dt);
    if sb > ss || rb > rs {
        return Err(Error::Init(format!(
            "check_sym_ahead: slots of {ss} / {rs} bytes cannot hold {sb} / {rb}"
        )));
    }
    let in_count = sb / dt.size();
    let mut checked = 0;
    let mut it = 0;
    while it < iters {
        let k_ops = depth.min(iters - it);
        // inputs[k][r]: operation `it + k` of rank r.
        let inputs: Vec<Vec<Vec<u8>>> = (0..k_ops)
            .map(|k| {
                (0..n)
                    .map(|r| {
                        let s = seed.wrapping_mul(7919) + 1000 * (it + k) as u64 + r as u64;
                        verify::gen_input(dt, red, in_count, s)
                    })
                    .collect()
            })
            .collect();
        for (i, b) in bufs.ranks.iter().enumerate() {
            let c = &ranks.comms[i];
            let mut send = vec![0u8; k_ops * ss];
            for (k, inp) in inputs.iter().enumerate() {
                send[k * ss..k * ss + sb].copy_from_slice(&inp[ranks.rank(i)]);
            }
            c.backend().upload(c.device(), b.send, &send)?;
            c.backend().upload(c.device(), b.recv, &vec![0xff; k_ops * rs])?;
        }
        for k in 0..k_ops {
            launch_at(ranks, bufs, coll, dt, op, count, k * ss, k * rs)?;
        }
        ranks.sync()?;
        for (i, b) in bufs.ranks.iter().enumerate() {
            let r = ranks.rank(i);
            let c = &ranks.comms[i];
            let mut outs = vec![0u8; k_ops * rs];
            c.backend().download(c.device(), &mut outs, b.recv)?;
            for (k, inp) in inputs.iter().enumerate() {
                let out = &outs[k * rs..k * rs + rb];
                let refs: Vec<&[u8]> = inp.iter().map(|v| v.as_slice()).collect();
                let res = match coll {
                    Coll::AllGather => (0..n).try_for_each(|q| {
                        let e = count * dt.size();
                        verify::check_equal(dt, "all_gather block", &inp[q], &out[q * e..(q + 1) * e])
                            .map(|_| ())
                    }),
                    Coll::ReduceScatter => {
                        verify::check_reduction_par(dt, op, &refs, r * count, out, 0, count).map(|_| ())
                    }
                    _ => verify::check_all_reduce_par(dt, op, &refs, out, count).map(|_| ()),
                };
                res.map_err(|m| {
                    Error::Verify(format!("{} iteration {}, rank {r}: {m}", coll.name(), it + k))
                })?;
                checked += rb / dt.size();
            }
        }
        it += k_ops;
    }
    Ok(checked)
}

/// Median time of one `coll` on the window buffers (launches, or graph replays per `t`).
pub fn time_sym(
    ranks: &Ranks,
    bufs: &SymBufs,
    coll: Coll,
    dt: DataType,
    red: RedOp,
    count: usize,
    t: Timing,
) -> Result<f64> {
    let op = verify::test_op(dt, red);
    time_launches(ranks, t, || launch(ranks, bufs, coll, dt, op, count))
}
