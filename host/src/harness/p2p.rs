//! Checks of send/recv ([`Comm::send`](crate::Comm::send), [`Comm::recv`](crate::Comm::recv))
//! in one group per call: random inputs (every rank draws every rank's from the same seeds,
//! so processes agree), receive buffers poisoned with 0xff and followed by a poisoned tail,
//! every received element compared bit for bit with what its sender sent, the tails and the
//! send buffers checked unchanged.

use oxccl_device::abi::{DataType, RedOp};

use super::colls::{buffer, download, fail, Coll};
use super::{Case, Ranks};
use crate::error::Result;
use crate::group::{group_end, group_start};
use crate::verify::check_equal;

/// Which ranks exchange data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum P2pPattern {
    /// Rank `r` sends `count` elements to `r + 1` and receives from `r - 1` (mod `n`; one
    /// rank sends to itself).
    Ring,
    /// Every rank sends block `q` of its input (`count` elements) to every rank `q`, itself
    /// included, and receives block `q` of its output from rank `q`.
    AllPairs,
}

impl P2pPattern {
    /// The pattern `check_coll` runs for a case: all-pairs for `in_place` (send/recv has no
    /// in-place form, so the flag picks the pattern), else the ring.
    pub fn of_case(in_place: bool) -> Self {
        if in_place {
            P2pPattern::AllPairs
        } else {
            P2pPattern::Ring
        }
    }

    /// The peers rank `r` of `n` sends to (in order; block `i` of its input goes to the
    /// `i`-th) and receives from.
    fn peers(self, r: usize, n: usize) -> (Vec<usize>, Vec<usize>) {
        match self {
            P2pPattern::Ring => (vec![(r + 1) % n], vec![(r + n - 1) % n]),
            P2pPattern::AllPairs => ((0..n).collect(), (0..n).collect()),
        }
    }
}

/// Poisoned elements past every receive buffer's data, checked untouched.
const TAIL: usize = 13;

/// Run `pattern` with `case.count` elements per message, every local rank's operations in one
/// group (posted receives first on even ranks, sends first on odd ones), and check every rank.
/// Returns the number of elements checked.
pub fn check_send_recv(ranks: &Ranks, case: Case, pattern: P2pPattern) -> Result<usize> {
    let (n, dt, count) = (ranks.n(), case.dtype, case.count);
    let bytes = count * dt.size();
    let blocks = match pattern {
        P2pPattern::Ring => 1,
        P2pPattern::AllPairs => n,
    };
    let ins = super::colls::inputs(n, dt, RedOp::Sum, blocks * count, case.seed);
    let mut sends = Vec::with_capacity(ranks.comms.len());
    let mut recvs = Vec::with_capacity(ranks.comms.len());
    for c in &ranks.comms {
        let r = c.rank() as usize;
        sends.push(buffer(c, (blocks * bytes).max(1), Some(&pad(&ins[r], 1)))?);
        recvs.push(buffer(c, blocks * bytes + TAIL * dt.size(), None)?);
    }
    group_start();
    let posted = (|| -> Result<()> {
        for (i, c) in ranks.comms.iter().enumerate() {
            let r = c.rank() as usize;
            let s = &ranks.streams[i];
            let (to, from) = pattern.peers(r, n);
            let send_all = || -> Result<()> {
                for (b, &q) in to.iter().enumerate() {
                    // SAFETY: block `b` of a live buffer of `blocks * count` elements.
                    unsafe { c.send_raw(sends[i].ptr() + (b * bytes) as u64, count, dt, q as u32, s)? };
                }
                Ok(())
            };
            let recv_all = || -> Result<()> {
                for (b, &q) in from.iter().enumerate() {
                    // SAFETY: block `b` of a live buffer of `blocks * count` elements.
                    unsafe { c.recv_raw(recvs[i].ptr() + (b * bytes) as u64, count, dt, q as u32, s)? };
                }
                Ok(())
            };
            if r.is_multiple_of(2) {
                recv_all()?;
                send_all()?;
            } else {
                send_all()?;
                recv_all()?;
            }
        }
        Ok(())
    })();
    let ended = group_end();
    posted?;
    ended?;
    ranks.sync()?;
    let mut checked = 0;
    for (i, c) in ranks.comms.iter().enumerate() {
        let r = c.rank() as usize;
        let (_, from) = pattern.peers(r, n);
        let mut want = Vec::with_capacity(blocks * bytes + TAIL * dt.size());
        for &q in &from {
            // Rank q sent me its block at my position in its list of receivers.
            let (to_q, _) = pattern.peers(q, n);
            let b = to_q.iter().position(|&x| x == r).unwrap_or(0);
            want.extend_from_slice(&ins[q][b * bytes..(b + 1) * bytes]);
        }
        want.resize(blocks * bytes + TAIL * dt.size(), 0xff);
        let got = download(&recvs[i], want.len())?;
        check_equal(dt, "recv (data and poisoned tail)", &want, &got)
            .map_err(|m| fail(Coll::SendRecv, r, m))?;
        let sent = download(&sends[i], blocks * bytes)?;
        check_equal(dt, "send (must be untouched)", &ins[r], &sent)
            .map_err(|m| fail(Coll::SendRecv, r, m))?;
        checked += blocks * count;
    }
    Ok(checked)
}

/// `data`, at least `min` bytes long (0xff-padded), so that empty buffers are real ones.
fn pad(data: &[u8], min: usize) -> Vec<u8> {
    let mut v = data.to_vec();
    if v.len() < min {
        v.resize(min, 0xff);
    }
    v
}

/// Post one ring step (every local rank sends `count` elements of `send` to the next rank and
/// receives from the previous one into `recv`) in one group; the timed body of `perf`.
pub(super) fn ring_step(
    ranks: &Ranks,
    bufs: &mut [(crate::buffer::DeviceBuffer, crate::buffer::DeviceBuffer)],
    count: usize,
    dt: DataType,
) -> Result<()> {
    let n = ranks.n();
    group_start();
    let posted = (|| -> Result<()> {
        for (i, (s, o)) in bufs.iter_mut().enumerate() {
            let (c, st) = (&ranks.comms[i], &ranks.streams[i]);
            let r = c.rank() as usize;
            c.recv(o, count, dt, ((r + n - 1) % n) as u32, st)?;
            c.send(s, count, dt, ((r + 1) % n) as u32, st)?;
        }
        Ok(())
    })();
    let ended = group_end();
    posted.and(ended)
}
