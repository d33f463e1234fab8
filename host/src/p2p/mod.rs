//! Point-to-point transfers (NCCL's `ncclSend`/`ncclRecv`): [`Comm::send`], [`Comm::recv`]
//! and their `*_raw` forms on device addresses, grouped by [`crate::group_start`] /
//! [`crate::group_end`] (see [`crate::group`]).
//!
//! Matching is NCCL's: the `k`-th send from rank `a` to rank `b` on a communicator matches
//! the `k`-th receive of `b` from `a`; both must post the same count and data type (else both
//! ranks report [`Error::P2pMismatch`], naming each other and what each posted, and no data
//! moves). A send or receive outside a group is a group of one operation. Count 0 is a valid
//! operation (it is matched like any other and moves nothing).
//!
//! Each rank's operations of one group are launched at the outermost `group_end` as one
//! kernel (or several, for groups of more than `P2P_MAX_OPS` operations, see [`plan`]) on the
//! stream they were posted with; see `oxccl_device::coll::p2p` for the device protocol. On a
//! communicator whose ranks live in several processes, the data moves through the senders'
//! staging buffers, in chunks (the staging input half is cut into one slot per receiver).
//!
//! Completion is stream-ordered; failures (timeouts, aborts, mismatches) surface through
//! [`Comm::async_error`], naming the operation (`send` or `recv`), this rank and the peer.

pub(crate) mod plan;

use std::collections::VecDeque;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use oxccl_device::abi::{
    p2p_unposting, CommArgs, DataType, ErrorRecord, ERR_ABORTED, ERR_MISMATCH, ERR_TIMEOUT, P2P_ERROR_FLAG,
};

use crate::backend::{Backend, Stream};
use crate::buffer::DeviceBuffer;
use crate::coll::Staging;
use crate::comm::Comm;
use crate::error::{Error, Result};

/// Largest count of one send or receive (the posting word keeps 55 bits of it).
pub const P2P_MAX_COUNT: u64 = (1 << 55) - 1;

/// How many launches a communicator remembers for error messages.
const LAUNCHES_REMEMBERED: usize = 64;

/// One send or receive as this rank posted it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Posted {
    pub recv: bool,
    pub peer: u32,
    pub addr: u64,
    pub count: usize,
    pub dtype: DataType,
}

impl Posted {
    pub fn op_name(&self) -> &'static str {
        if self.recv {
            "recv"
        } else {
            "send"
        }
    }

    /// "a send of 100 f32 elements (400 bytes) to rank 1".
    pub fn describe(&self) -> String {
        let (dir, who) = if self.recv {
            ("recv", format!("from rank {}", self.peer))
        } else {
            ("send", format!("to rank {}", self.peer))
        };
        format!(
            "a {dir} of {} {} elements ({} bytes) {who}",
            self.count,
            self.dtype.name(),
            self.count as u128 * self.dtype.size() as u128
        )
    }
}

/// What a peer posted, decoded from its posting word; `recv` is the peer's direction.
fn describe_posting(posting: u64, recv: bool, to: u32) -> String {
    let (count, dt) = p2p_unposting(posting);
    let (dir, who) = if recv {
        ("recv", format!("from rank {to}"))
    } else {
        ("send", format!("to rank {to}"))
    };
    match DataType::from_u32(dt) {
        Some(d) => format!(
            "a {dir} of {count} {} elements ({} bytes) {who}",
            d.name(),
            count as u128 * d.size() as u128
        ),
        None => format!("a {dir} of {count} elements of unknown data type {dt} {who}"),
    }
}

/// The point-to-point state of one rank of a communicator, shared with the operations
/// pending in groups (which outlive the borrow of the [`Comm`] they were posted on).
pub(crate) struct P2pState {
    /// Keeps the communicator's memory alive while operations are pending.
    pub group: Arc<crate::comm::Group>,
    pub rank: u32,
    pub nranks: u32,
    /// The kernel-side view of this rank.
    pub comm: CommArgs,
    /// Staged mode: this rank's staging buffers and the offset of the input half in the
    /// segment.
    pub staging: Option<(Staging, u64)>,
    /// Set when the [`Comm`] is dropped: operations still pending in a group are then not
    /// launched (the communicator's memory would be freed under the kernel).
    pub closed: AtomicBool,
    pub inner: Mutex<Inner>,
}

#[derive(Default)]
pub(crate) struct Inner {
    /// Sends posted to each peer so far (the next one gets `+ 1`).
    pub send_seq: Vec<u64>,
    /// Receives posted from each peer so far.
    pub recv_seq: Vec<u64>,
    /// Launches so far.
    pub serial: u32,
    /// The last launches: (serial, operations in launch order).
    pub log: VecDeque<(u32, Vec<Posted>)>,
}

impl P2pState {
    pub fn new(
        group: Arc<crate::comm::Group>,
        rank: u32,
        nranks: u32,
        comm: CommArgs,
        staging: Option<(Staging, u64)>,
    ) -> Self {
        P2pState {
            group,
            rank,
            nranks,
            comm,
            staging,
            closed: AtomicBool::new(false),
            inner: Mutex::new(Inner {
                send_seq: vec![0; nranks as usize],
                recv_seq: vec![0; nranks as usize],
                ..Inner::default()
            }),
        }
    }

    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.group.backend
    }

    /// Bytes of the staging slot a sender keeps per receiver (staged mode): the input half
    /// cut in `nranks`, a multiple of 32.
    pub fn slot_bytes(&self) -> u64 {
        self.staging
            .map_or(0, |(st, _)| (st.half as u64 / self.nranks.max(1) as u64) & !31)
    }

    /// Remember launch `serial`'s operations.
    pub fn log_launch(inner: &mut Inner, serial: u32, ops: Vec<Posted>) {
        if inner.log.len() == LAUNCHES_REMEMBERED {
            inner.log.pop_front();
        }
        inner.log.push_back((serial, ops));
    }

    /// The error a p2p kernel recorded (`rec.block` has [`P2P_ERROR_FLAG`]).
    pub fn decode(&self, rec: &ErrorRecord) -> Result<()> {
        let serial = (rec.block >> 16) & 0x7fff;
        let slot = (rec.block & 0xffff) as usize;
        let posted = {
            let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            inner
                .log
                .iter()
                .rev()
                .find(|(s, _)| s & 0x7fff == serial)
                .and_then(|(_, ops)| ops.get(slot).copied())
        };
        let (op, ours) = match posted {
            Some(p) => (p.op_name(), p.describe()),
            None => (
                "send/recv",
                "an operation this rank no longer remembers".to_string(),
            ),
        };
        let peer = rec.peer;
        match rec.code {
            ERR_TIMEOUT => Err(Error::P2pTimeout {
                op,
                rank: self.rank,
                peer,
                what: format!(
                    "this rank posted {ours}; the peer did not post the matching operation (or stopped)"
                ),
            }),
            ERR_ABORTED => Err(Error::Aborted { op, rank: self.rank }),
            ERR_MISMATCH => Err(Error::P2pMismatch {
                op,
                rank: self.rank,
                peer,
                ours,
                theirs: describe_posting(rec.detail, posted.is_some_and(|p| !p.recv), self.rank),
            }),
            _ => Ok(()),
        }
    }
}

/// True when a recorded error came from a p2p kernel.
pub(crate) fn is_p2p_error(rec: &ErrorRecord) -> bool {
    rec.block & P2P_ERROR_FLAG != 0
}

impl Comm {
    /// Send `count` elements of `buf` to rank `peer` (NCCL's `ncclSend`). Inside a group
    /// ([`crate::group_start`]) the send is launched at the outermost [`crate::group_end`];
    /// outside, at once (a group of one).
    pub fn send(
        &self,
        buf: &DeviceBuffer,
        count: usize,
        dtype: DataType,
        peer: u32,
        stream: &Stream,
    ) -> Result<()> {
        let bytes = self.bytes_of("send", count, dtype, 1)?;
        self.need("send", "send", buf, bytes)?;
        // SAFETY: a live buffer of sufficient size.
        unsafe { self.send_raw(buf.ptr(), count, dtype, peer, stream) }
    }

    /// Receive `count` elements from rank `peer` into `buf` (NCCL's `ncclRecv`); grouping as
    /// for [`Comm::send`].
    pub fn recv(
        &self,
        buf: &mut DeviceBuffer,
        count: usize,
        dtype: DataType,
        peer: u32,
        stream: &Stream,
    ) -> Result<()> {
        let bytes = self.bytes_of("recv", count, dtype, 1)?;
        self.need("recv", "recv", buf, bytes)?;
        // SAFETY: a live buffer of sufficient size, borrowed mutably.
        unsafe { self.recv_raw(buf.ptr(), count, dtype, peer, stream) }
    }

    /// [`Comm::send`] on a raw device address, like `ncclSend`.
    ///
    /// # Safety
    /// `buf` must be a valid device address on this rank's device for `count` elements until
    /// the send completes on `stream` (it is launched at the outermost `group_end`).
    pub unsafe fn send_raw(
        &self,
        buf: u64,
        count: usize,
        dtype: DataType,
        peer: u32,
        stream: &Stream,
    ) -> Result<()> {
        self.post(
            Posted {
                recv: false,
                peer,
                addr: buf,
                count,
                dtype,
            },
            stream,
        )
    }

    /// [`Comm::recv`] on a raw device address, like `ncclRecv`.
    ///
    /// # Safety
    /// `buf` must be a valid device address on this rank's device for `count` elements until
    /// the receive completes on `stream`, and not be accessed by anything else meanwhile.
    pub unsafe fn recv_raw(
        &self,
        buf: u64,
        count: usize,
        dtype: DataType,
        peer: u32,
        stream: &Stream,
    ) -> Result<()> {
        self.post(
            Posted {
                recv: true,
                peer,
                addr: buf,
                count,
                dtype,
            },
            stream,
        )
    }

    /// Validate `p` and hand it to the group (launched now outside a group).
    ///
    /// # Safety
    /// As [`Comm::send_raw`].
    unsafe fn post(&self, p: Posted, stream: &Stream) -> Result<()> {
        let op = p.op_name();
        let _span = tracing::debug_span!(target: "oxccl::p2p", "p2p", op, rank = self.rank(), peer = p.peer, count = p.count, dtype = p.dtype.name()).entered();
        self.check_launch(op, stream)?;
        if p.peer >= self.count() {
            return Err(self.invalid(
                op,
                format!(
                    "peer {} is not a rank of this communicator ({} ranks)",
                    p.peer,
                    self.count()
                ),
            ));
        }
        self.bytes_of(op, p.count, p.dtype, 1)?;
        if p.count as u64 > P2P_MAX_COUNT {
            return Err(self.invalid(
                op,
                format!(
                    "count {} (peer {}) is above the limit {P2P_MAX_COUNT}",
                    p.count, p.peer
                ),
            ));
        }
        if p.count > 0 && p.addr == 0 {
            return Err(self.invalid(op, format!("null buffer address (peer {})", p.peer)));
        }
        let st = &self.p2p;
        if st.staging.is_some() && st.slot_bytes() < 32 {
            return Err(self.invalid(
                op,
                format!(
                    "the staging buffers ({} bytes) leave less than 32 bytes per receiver for {} ranks; raise OXCCL_STAGING_BYTES",
                    st.staging.map_or(0, |s| s.0.half),
                    self.count()
                ),
            ));
        }
        if st.staging.is_some() {
            // The kernel counts the chunks of one operation in 32 bits.
            let sub = ((st.slot_bytes() / 2) & !15).max(16);
            let chunks = (p.count as u64 * p.dtype.size() as u64).div_ceil(sub);
            if chunks >= 1 << 32 {
                return Err(self.invalid(
                    op,
                    format!(
                        "{} bytes to or from rank {} take {chunks} chunks of {sub} staging bytes (at most 2^32 - 1); raise OXCCL_STAGING_BYTES",
                        p.count as u64 * p.dtype.size() as u64,
                        p.peer
                    ),
                ));
            }
        }
        let epoch = self.epoch.load(std::sync::atomic::Ordering::Relaxed);
        crate::group::post(crate::group::Pending {
            state: self.p2p.clone(),
            stream: stream.clone(),
            op: p,
            epoch,
        })
    }
}
