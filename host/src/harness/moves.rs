//! Checks of all-to-all, gather, scatter and all-gather-v, as in [`super::colls`]: random
//! inputs (every rank's, including buffers NCCL ignores off the root, so reading the wrong
//! one shows), outputs poisoned with 0xff, every element of every rank compared bit for bit,
//! and every byte the collective must leave alone checked unchanged (inputs, non-root
//! outputs, the gaps between all-gather-v blocks and a tail past its last block).

use oxccl_device::abi::{DataType, RedOp};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::colls::{buffer, check_root, download, fail, inputs, Coll};
use super::{Case, Ranks};
use crate::buffer::DeviceBuffer;
use crate::error::{Error, Result};
use crate::verify::check_equal;

/// Fails unless `buf` (when there is one) still holds `want`.
fn unchanged(coll: Coll, r: usize, dt: DataType, want: &[u8], buf: Option<&DeviceBuffer>) -> Result<()> {
    if let Some(b) = buf {
        check_equal(dt, "send (must be untouched)", want, &download(b, want.len())?)
            .map_err(|m| fail(coll, r, m))?;
    }
    Ok(())
}

/// Block `q` (of `len` bytes) of `buf`.
fn block(buf: &[u8], q: usize, len: usize) -> &[u8] {
    &buf[q * len..(q + 1) * len]
}

/// All-to-all `case.count` elements per block. Out of place: checks every block of every
/// rank's output, and the inputs unchanged. In place: checks that every rank rejects the
/// call with [`Error::InvalidArgument`] (as NCCL has no in-place all-to-all) and leaves the
/// buffer alone.
pub fn check_all_to_all(ranks: &Ranks, case: Case) -> Result<usize> {
    let (n, dt, count) = (ranks.n(), case.dtype, case.count);
    let bytes = count * dt.size();
    let ins = inputs(n, dt, RedOp::Sum, n * count, case.seed);
    if case.in_place {
        for (i, c) in ranks.comms.iter().enumerate() {
            let r = c.rank() as usize;
            // At least one byte, so the address is a real one even for count 0.
            let mut init = ins[r].clone();
            init.resize((n * bytes).max(1), 0xff);
            let buf = buffer(c, init.len(), Some(&init))?;
            // SAFETY: a live buffer of `n * count` elements; the call must be rejected
            // before anything is launched.
            let res = unsafe { c.all_to_all_raw(buf.ptr(), buf.ptr(), count, dt, &ranks.streams[i]) };
            match res {
                Err(Error::InvalidArgument { op: "all_to_all", .. }) => {}
                other => {
                    return Err(fail(
                        Coll::AllToAll,
                        r,
                        format!("in place must be an invalid argument, got {other:?}"),
                    ))
                }
            }
            check_equal(
                dt,
                "buffer (must be untouched)",
                &init,
                &download(&buf, init.len())?,
            )
            .map_err(|m| fail(Coll::AllToAll, r, m))?;
        }
        return Ok(0);
    }
    let mut sends = Vec::with_capacity(n);
    let mut recvs = Vec::with_capacity(n);
    for c in &ranks.comms {
        let r = c.rank() as usize;
        sends.push(buffer(c, n * bytes, Some(&ins[r]))?);
        recvs.push(buffer(c, n * bytes, None)?);
    }
    for (i, c) in ranks.comms.iter().enumerate() {
        c.all_to_all(&sends[i], &mut recvs[i], count, dt, &ranks.streams[i])?;
    }
    ranks.sync()?;
    for (i, recv) in recvs.iter().enumerate() {
        let r = ranks.rank(i);
        // Block q of my output is block r of rank q's input.
        let want: Vec<u8> = (0..n).flat_map(|q| block(&ins[q], r, bytes).to_vec()).collect();
        check_equal(dt, "recv", &want, &download(recv, n * bytes)?)
            .map_err(|m| fail(Coll::AllToAll, r, m))?;
        unchanged(Coll::AllToAll, r, dt, &ins[r], Some(&sends[i]))?;
    }
    Ok(n * n * count)
}

/// Gather `case.count` elements per rank into `root`. Checks root's output against the
/// concatenation of the inputs, the other ranks' outputs still poisoned (out of place) and
/// their buffers unchanged (in place), and every input unchanged.
pub fn check_gather(ranks: &Ranks, case: Case, root: u32) -> Result<usize> {
    check_root(ranks, root)?;
    let (n, dt, count, root) = (ranks.n(), case.dtype, case.count, root as usize);
    let bytes = count * dt.size();
    let ins = inputs(n, dt, RedOp::Sum, count, case.seed);
    let want = ins.concat();
    let poison = vec![0xffu8; n * bytes];
    let mut sends = Vec::with_capacity(n);
    let mut recvs = Vec::with_capacity(n);
    for c in &ranks.comms {
        let r = c.rank() as usize;
        if case.in_place && r == root {
            let mut init = poison.clone();
            init[r * bytes..(r + 1) * bytes].copy_from_slice(&ins[r]);
            recvs.push(buffer(c, n * bytes, Some(&init))?);
        } else if case.in_place {
            recvs.push(buffer(c, bytes, Some(&ins[r]))?);
        } else {
            sends.push(buffer(c, bytes, Some(&ins[r]))?);
            recvs.push(buffer(c, n * bytes, None)?);
        }
    }
    for (i, c) in ranks.comms.iter().enumerate() {
        let s = &ranks.streams[i];
        if case.in_place {
            c.gather_in_place(&mut recvs[i], count, dt, root as u32, s)?;
        } else {
            c.gather(&sends[i], &mut recvs[i], count, dt, root as u32, s)?;
        }
    }
    ranks.sync()?;
    for (i, recv) in recvs.iter().enumerate() {
        let r = ranks.rank(i);
        let res = if r == root {
            check_equal(dt, "recv", &want, &download(recv, n * bytes)?)
        } else if case.in_place {
            check_equal(
                dt,
                "non-root buffer (must be untouched)",
                &ins[r],
                &download(recv, bytes)?,
            )
        } else {
            check_equal(
                dt,
                "non-root recv (must be untouched)",
                &poison,
                &download(recv, n * bytes)?,
            )
        };
        res.map_err(|m| fail(Coll::Gather, r, m))?;
        unchanged(Coll::Gather, r, dt, &ins[r], sends.get(i))?;
    }
    Ok(n * count)
}

/// Scatter `case.count` elements per rank from `root`. Every rank's input (`n * count`,
/// out of place) holds random data of its own, so reading the wrong one shows. Checks
/// every rank's output against its block of root's input, and root's input unchanged (in
/// place: root's whole buffer, its own block included).
pub fn check_scatter(ranks: &Ranks, case: Case, root: u32) -> Result<usize> {
    check_root(ranks, root)?;
    let (n, dt, count, root) = (ranks.n(), case.dtype, case.count, root as usize);
    let bytes = count * dt.size();
    let ins = inputs(n, dt, RedOp::Sum, n * count, case.seed);
    let mut sends = Vec::with_capacity(n);
    let mut recvs = Vec::with_capacity(n);
    for c in &ranks.comms {
        let r = c.rank() as usize;
        if case.in_place && r == root {
            recvs.push(buffer(c, n * bytes, Some(&ins[r]))?);
        } else if case.in_place {
            recvs.push(buffer(c, bytes, None)?);
        } else {
            sends.push(buffer(c, n * bytes, Some(&ins[r]))?);
            recvs.push(buffer(c, bytes, None)?);
        }
    }
    for (i, c) in ranks.comms.iter().enumerate() {
        let s = &ranks.streams[i];
        if case.in_place {
            c.scatter_in_place(&mut recvs[i], count, dt, root as u32, s)?;
        } else {
            c.scatter(&sends[i], &mut recvs[i], count, dt, root as u32, s)?;
        }
    }
    ranks.sync()?;
    let src = &ins[root];
    for (i, recv) in recvs.iter().enumerate() {
        let r = ranks.rank(i);
        let res = if case.in_place && r == root {
            check_equal(
                dt,
                "root's buffer (must be untouched)",
                src,
                &download(recv, n * bytes)?,
            )
        } else {
            check_equal(dt, "recv", block(src, r, bytes), &download(recv, bytes)?)
        };
        res.map_err(|m| fail(Coll::Scatter, r, m))?;
        unchanged(Coll::Scatter, r, dt, &ins[r], sends.get(i))?;
    }
    Ok(n * count)
}

/// A random all-gather-v layout for `n` ranks from `seed`: counts up to `max_count` (about
/// one in four 0), the blocks in a random rank order, with random gaps (often none) before
/// each. Blocks never overlap.
pub fn v_layout(n: usize, max_count: usize, seed: u64) -> (Vec<usize>, Vec<usize>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x05ee_da11_9a7e_u64);
    let counts: Vec<usize> = (0..n)
        .map(|_| {
            if rng.random_range(0..4) == 0 {
                0
            } else {
                rng.random_range(0..=max_count)
            }
        })
        .collect();
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        order.swap(i, rng.random_range(0..=i));
    }
    let mut displs = vec![0; n];
    let mut at = 0;
    for q in order {
        if rng.random::<bool>() {
            at += rng.random_range(0..=max_count / 4 + 3);
        }
        displs[q] = at;
        at += counts[q];
    }
    (counts, displs)
}

/// Elements of poisoned tail past the last all-gather-v block, checked untouched.
const TAIL: usize = 17;

/// All-gather-v with `counts` and `displs` (valid for `ranks.n()` ranks). Every rank's output
/// (the blocks' extent plus a tail) must hold every block at its displacement and 0xff in
/// the gaps and the tail.
pub fn check_all_gather_v(
    ranks: &Ranks,
    dt: DataType,
    counts: &[usize],
    displs: &[usize],
    in_place: bool,
    seed: u64,
) -> Result<usize> {
    let (n, size) = (ranks.n(), dt.size());
    let extent = counts.iter().zip(displs).map(|(c, d)| c + d).max().unwrap_or(0);
    let out_bytes = (extent + TAIL) * size;
    let ins: Vec<Vec<u8>> = (0..n)
        .map(|r| crate::verify::gen_input(dt, RedOp::Sum, counts[r], seed.wrapping_mul(1000) + r as u64))
        .collect();
    let place = |buf: &mut [u8], q: usize| {
        buf[displs[q] * size..(displs[q] + counts[q]) * size].copy_from_slice(&ins[q]);
    };
    let mut want = vec![0xffu8; out_bytes];
    for q in 0..n {
        place(&mut want, q);
    }
    let mut sends = Vec::with_capacity(n);
    let mut recvs = Vec::with_capacity(n);
    for c in &ranks.comms {
        let r = c.rank() as usize;
        let mut init = vec![0xffu8; out_bytes];
        if in_place {
            place(&mut init, r);
        } else {
            sends.push(buffer(c, counts[r] * size, Some(&ins[r]))?);
        }
        recvs.push(buffer(c, out_bytes, Some(&init))?);
    }
    for (i, c) in ranks.comms.iter().enumerate() {
        let s = &ranks.streams[i];
        if in_place {
            c.all_gather_v_in_place(&mut recvs[i], counts, displs, dt, s)?;
        } else {
            c.all_gather_v(&sends[i], &mut recvs[i], counts, displs, dt, s)?;
        }
    }
    ranks.sync()?;
    for (i, recv) in recvs.iter().enumerate() {
        let r = ranks.rank(i);
        check_equal(
            dt,
            "recv (blocks, gaps and tail)",
            &want,
            &download(recv, out_bytes)?,
        )
        .map_err(|m| fail(Coll::AllGatherV, r, m))?;
        unchanged(Coll::AllGatherV, r, dt, &ins[r], sends.get(i))?;
    }
    Ok(n * counts.iter().sum::<usize>())
}
