//! All-gather-v (NCCL's `ncclAllGatherV` shape): rank `r`'s `counts[r]` elements into every
//! rank's output at element `displs[r]`. `counts` and `displs` (one per rank) must be the
//! same on every rank: their hash is in the fingerprint, so ranks that disagree report
//! [`crate::Error::Mismatch`]. See `oxccl_device::coll::all_gather_v` for the algorithm.
//!
//! Checked here: one count and one displacement per rank, no overflow, and blocks that do
//! not overlap (overlapping blocks would be written by several ranks at once, with a result
//! depending on the order of their stores, and in place a rank's input could be overwritten
//! before it is sent). Gaps between blocks are allowed and are not written.

use oxccl_device::abi::{coll_fingerprint, counts_hash, DataType, COLL_ALL_GATHER_V};

use super::launch::{Call, VLayout};
use crate::backend::Stream;
use crate::buffer::DeviceBuffer;
use crate::comm::Comm;
use crate::error::Result;

const OP: &str = "all_gather_v";

/// Validated layout of one call.
struct Layout {
    /// Elements the output must hold: the end of the last block.
    extent: usize,
    launch: VLayout,
}

impl Comm {
    /// All-gather-v: this rank's `send` (`counts[rank]` elements) into every rank's `recv`
    /// at element `displs[rank]`; `recv` holds at least `max(displs[q] + counts[q])`.
    pub fn all_gather_v(
        &self,
        send: &DeviceBuffer,
        recv: &mut DeviceBuffer,
        counts: &[usize],
        displs: &[usize],
        dtype: DataType,
        stream: &Stream,
    ) -> Result<()> {
        let l = self.v_layout(counts, displs, dtype)?;
        let me = self.rank() as usize;
        self.need(OP, "send", send, self.bytes_of(OP, counts[me], dtype, 1)?)?;
        self.need(OP, "recv", recv, self.bytes_of(OP, l.extent, dtype, 1)?)?;
        // SAFETY: live buffers of sufficient size; `recv` is borrowed mutably.
        unsafe { self.all_gather_v_raw(send.ptr(), recv.ptr(), counts, displs, dtype, stream) }
    }

    /// In-place all-gather-v: `buf` is the output and this rank's input is already at
    /// element `displs[rank]` of it.
    pub fn all_gather_v_in_place(
        &self,
        buf: &mut DeviceBuffer,
        counts: &[usize],
        displs: &[usize],
        dtype: DataType,
        stream: &Stream,
    ) -> Result<()> {
        let l = self.v_layout(counts, displs, dtype)?;
        self.need(OP, "", buf, self.bytes_of(OP, l.extent, dtype, 1)?)?;
        let mine = self.bytes_of(OP, displs[self.rank() as usize], dtype, 1)? as u64;
        // SAFETY: live buffer of sufficient size, borrowed mutably; this rank's block lies
        // in it (`displs[rank] + counts[rank] <= extent`).
        unsafe { self.all_gather_v_raw(buf.ptr() + mine, buf.ptr(), counts, displs, dtype, stream) }
    }

    /// All-gather-v on raw device addresses (in place when
    /// `send == recv + displs[rank] * size`).
    ///
    /// # Safety
    /// `send` (`counts[rank]` elements) and `recv` (`max(displs[q] + counts[q])` elements)
    /// must be valid device addresses on this rank's device until the operation completes on
    /// `stream`, and not be accessed by anything else meanwhile; they overlap only in the
    /// in-place form.
    pub unsafe fn all_gather_v_raw(
        &self,
        send: u64,
        recv: u64,
        counts: &[usize],
        displs: &[usize],
        dtype: DataType,
        stream: &Stream,
    ) -> Result<()> {
        let l = self.v_layout(counts, displs, dtype)?;
        let me = self.rank() as usize;
        if (counts[me] > 0 && send == 0) || (l.launch.total > 0 && recv == 0) {
            return Err(self.invalid(OP, "null buffer address".into()));
        }
        if l.launch.total == 0 {
            return Ok(());
        }
        if self.staging().is_some() {
            let fp = coll_fingerprint(COLL_ALL_GATHER_V, l.launch.hash, dtype as u32, 0, 0);
            return self.all_gather_v_staged(send, recv, counts, displs, dtype, fp, stream);
        }
        let call = Call {
            coll: COLL_ALL_GATHER_V,
            send,
            recv,
            count: counts[me],
            dtype,
            op: None,
            root: None,
            v: Some(l.launch),
        };
        // The grid is sized by the whole output (the same on every rank).
        self.launch(call, self.bytes_of(OP, l.launch.total, dtype, 1)?, stream)
    }

    /// Checks `counts` and `displs` (see the module docs) and derives the launch layout.
    fn v_layout(&self, counts: &[usize], displs: &[usize], dtype: DataType) -> Result<Layout> {
        let n = self.count() as usize;
        if counts.len() != n || displs.len() != n {
            return Err(self.invalid(
                OP,
                format!(
                    "{} counts and {} displacements for {n} ranks (one of each per rank)",
                    counts.len(),
                    displs.len()
                ),
            ));
        }
        let mut blocks = Vec::with_capacity(n);
        let (mut extent, mut total) = (0usize, 0usize);
        for (q, (&c, &d)) in counts.iter().zip(displs).enumerate() {
            let end = d
                .checked_add(c)
                .filter(|&e| e.checked_mul(dtype.size()).is_some());
            let Some(end) = end else {
                return Err(self.invalid(
                    OP,
                    format!("rank {q}'s block (displacement {d}, count {c}) overflows the address space"),
                ));
            };
            // At most `extent` once the blocks are known not to overlap.
            total = total.saturating_add(c);
            if c > 0 {
                extent = extent.max(end);
                blocks.push((d, end, q));
            }
        }
        blocks.sort_unstable();
        for w in blocks.windows(2) {
            let ((d0, e0, q0), (d1, _, q1)) = (w[0], w[1]);
            if d1 < e0 {
                return Err(self.invalid(
                    OP,
                    format!("rank {q0}'s block (elements {d0}..{e0}) and rank {q1}'s (from {d1}) overlap"),
                ));
            }
        }
        Ok(Layout {
            extent,
            launch: VLayout {
                displ: displs[self.rank() as usize],
                total,
                hash: counts_hash(counts, displs),
            },
        })
    }
}
