//! Device communicators (NCCL's `ncclDevCommCreate` / `ncclDevCommDestroy`) and the
//! communicator's properties (`ncclCommQueryProperties`).
//!
//! # Resource window
//! Creating a device communicator allocates one zeroed window (`mem_alloc`, registered
//! [`WIN_COLL_SYMMETRIC`], the same layout on every rank):
//!
//! ```text
//! [0, resource_bytes)                                   the caller's buffer
//! [lsa_barrier_offset, + count * lsa_size * 8)          LSA barrier lines, [count][lsa_size] u64
//! [lsa_epoch_offset, + count * 8)                       this rank's persisted barrier epochs
//! ```
//!
//! Both offsets are rounded up to 128 bytes. Line `(b, s)` of rank `q`'s copy is written
//! only by LSA rank `s` (see [`DevComm`]). GIN resources (signals, counters, hybrid
//! barriers) are refused: this build has no GIN transport.

use std::sync::Arc;

use oxccl_device::api::abi::{device_api_header, parse_requirements, LayoutError, DEVICE_API_VERSION};

use super::{registry, DevComm, DevCommRequirements, Window, GIN_TYPE_NONE, WIN_COLL_SYMMETRIC};
use crate::backend::Backend;
use crate::comm::Comm;
use crate::error::{Error, Result};

/// Alignment of the regions of the resource window.
const RESOURCE_ALIGN: u64 = 128;

/// What a communicator supports (NCCL's `ncclCommProperties_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommProperties {
    pub rank: u32,
    pub nranks: u32,
    /// The device index (NCCL's `cudaDev`); `nvml_device` is the same index here.
    pub cu_device: i32,
    pub nvml_device: i32,
    /// Windows and device communicators work on this communicator.
    pub device_api_support: bool,
    /// Multicast (NVLS) objects: never created by oxccl.
    pub multimem_support: bool,
    /// `GIN_TYPE_*`: none on this build.
    pub gin_type: u32,
    /// Ranks of this rank's LSA team (every rank: one node), and how many LSA teams.
    pub lsa_size: u32,
    pub n_lsa_teams: u32,
    /// One-sided host RMA (`ncclPutSignal`): not on this build.
    pub host_rma_support: bool,
    pub railed_gin_type: u32,
}

/// Offsets of the resource window's regions and its size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ResourceLayout {
    pub barrier_offset: u64,
    pub epoch_offset: u64,
    pub bytes: u64,
}

impl ResourceLayout {
    pub fn new(resource_bytes: u64, barriers: u32, lsa_size: u32) -> Option<Self> {
        let up = |x: u64| {
            x.checked_add(RESOURCE_ALIGN - 1)
                .map(|v| v / RESOURCE_ALIGN * RESOURCE_ALIGN)
        };
        let barrier_offset = up(resource_bytes)?;
        let lines = (barriers as u64).checked_mul(lsa_size as u64)?.checked_mul(8)?;
        let epoch_offset = up(barrier_offset.checked_add(lines)?)?;
        let bytes = epoch_offset.checked_add(barriers as u64 * 8)?;
        Some(ResourceLayout {
            barrier_offset,
            epoch_offset,
            bytes,
        })
    }
}

/// A device communicator of this rank: the [`DevComm`] kernels take, and its resource
/// window. Destroy it with [`Comm::dev_comm_destroy`] (collective); dropping it unmaps and
/// frees locally.
pub struct DevCommHandle {
    dev: DevComm,
    window: Option<Window>,
    /// The resource window's `mem_alloc` block.
    ptr: u64,
    backend: Arc<dyn Backend>,
    rank: u32,
}

impl std::fmt::Debug for DevCommHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DevCommHandle").field("dev", &self.dev).finish()
    }
}

impl DevCommHandle {
    /// The device communicator (pass it by value to kernels).
    pub fn dev_comm(&self) -> DevComm {
        self.dev
    }

    /// The resource window.
    pub fn resource_window(&self) -> Option<&Window> {
        self.window.as_ref()
    }

    /// The `mem_alloc` address of this rank's resource memory (what the window maps).
    pub fn resource_ptr(&self) -> u64 {
        self.ptr
    }
}

impl Drop for DevCommHandle {
    fn drop(&mut self) {
        drop(self.window.take());
        if self.ptr != 0 {
            // SAFETY: the handle's own block; its window is gone, kernels are the caller's
            // business as for any drop of device memory.
            let r = unsafe { registry::free(&*self.backend, "dev_comm drop", self.rank, self.ptr) };
            if let Err(e) = r {
                tracing::warn!(target: "oxccl::window", rank = self.rank, "dropping a device communicator: {e}");
            }
        }
    }
}

fn layout_error(e: LayoutError) -> String {
    match e {
        LayoutError::BadMagic { found } => format!(
            "requirements have magic {found:#x}, not {:#x} (initialize them with DevCommRequirements::new)",
            oxccl_device::api::abi::DEV_COMM_REQUIREMENTS_MAGIC
        ),
        LayoutError::TooNew { caller, library } => format!(
            "requirements of Device API version {caller}, newer than this library's {library} (rebuild the caller against this oxccl, or update oxccl)"
        ),
        LayoutError::BadSize { size } => {
            format!("requirements declare {size} bytes, not a valid size for their version")
        }
    }
}

/// The bytes of `r` as the C layout has them (as many as its `size` says, at most this
/// build's layout).
fn requirement_bytes(r: &DevCommRequirements) -> Vec<u8> {
    let mut b = vec![0u8; 48];
    b[0..8].copy_from_slice(&r.size.min(48).to_le_bytes());
    b[8..12].copy_from_slice(&r.magic.to_le_bytes());
    b[12..16].copy_from_slice(&r.version.to_le_bytes());
    b[16..24].copy_from_slice(&r.resource_bytes.to_le_bytes());
    b[24..28].copy_from_slice(&r.lsa_barrier_count.to_le_bytes());
    b[28..32].copy_from_slice(&r.barrier_count.to_le_bytes());
    b[32..36].copy_from_slice(&r.gin_signal_count.to_le_bytes());
    b[36..40].copy_from_slice(&r.gin_counter_count.to_le_bytes());
    b[40..44].copy_from_slice(&r.lsa_multimem.to_le_bytes());
    b[44..48].copy_from_slice(&r.reserved.to_le_bytes());
    b.truncate((r.size as usize).clamp(16, 48));
    b
}

impl Comm {
    /// What this communicator supports (NCCL's `ncclCommQueryProperties`).
    pub fn query_properties(&self) -> CommProperties {
        CommProperties {
            rank: self.rank(),
            nranks: self.count(),
            cu_device: self.cu_device(),
            nvml_device: self.cu_device(),
            device_api_support: true,
            multimem_support: false,
            gin_type: GIN_TYPE_NONE,
            lsa_size: self.count(),
            n_lsa_teams: 1,
            host_rma_support: false,
            railed_gin_type: GIN_TYPE_NONE,
        }
    }

    /// A device communicator (NCCL's `ncclDevCommCreate`). Collective: every rank calls it
    /// with the same requirements. `reqs` is read by its own size and version (an older
    /// caller's missing fields are 0; a newer version is refused with
    /// [`Error::LayoutVersion`]); GIN resources are refused with [`Error::Unsupported`].
    /// See the module doc of `window::devcomm` for the resource window.
    pub fn dev_comm_create(&self, reqs: &DevCommRequirements) -> Result<DevCommHandle> {
        self.dev_comm_create_from_bytes(&requirement_bytes(reqs))
    }

    /// As [`Comm::dev_comm_create`] from the requirements' bytes in the C layout (at least
    /// what their `size` field says; for the C ABI).
    pub fn dev_comm_create_from_bytes(&self, reqs: &[u8]) -> Result<DevCommHandle> {
        const OP: &str = "dev_comm_create";
        self.check_live(OP)?;
        let rank = self.rank();
        let lsa_size = self.count();
        // Local checks and the allocation; their failure is published, not kept to
        // ourselves, so that every rank returns.
        let local = (|| {
            let r = parse_requirements(reqs).map_err(|e| Error::LayoutVersion {
                op: OP,
                rank,
                what: layout_error(e),
            })?;
            if r.lsa_multimem != 0 {
                return Err(Error::Unsupported {
                    op: OP,
                    rank,
                    what: "multimem pointers asked (lsa_multimem) but this build never creates a multicast object (query_properties: multimem_support false)".into(),
                });
            }
            if r.barrier_count > 0 || r.gin_signal_count > 0 || r.gin_counter_count > 0 {
                return Err(Error::Unsupported {
                    op: OP,
                    rank,
                    what: format!(
                        "GIN resources asked ({} hybrid barriers, {} signals, {} counters) but there is no GIN transport (gin_type none)",
                        r.barrier_count, r.gin_signal_count, r.gin_counter_count
                    ),
                });
            }
            let lay =
                ResourceLayout::new(r.resource_bytes, r.lsa_barrier_count, lsa_size).ok_or_else(|| {
                    Error::InvalidArgument {
                        op: OP,
                        rank,
                        what: format!(
                            "{} resource bytes and {} barriers overflow",
                            r.resource_bytes, r.lsa_barrier_count
                        ),
                    }
                })?;
            let bytes = usize::try_from(lay.bytes).map_err(|_| Error::InvalidArgument {
                op: OP,
                rank,
                what: format!("{} resource bytes", lay.bytes),
            })?;
            let ptr = self.mem_alloc(bytes.max(1))?;
            Ok((r, lay, ptr))
        })();
        let blob = match &local {
            Ok((r, _, _)) => {
                let mut b = vec![0u8];
                b.extend_from_slice(&r.resource_bytes.to_le_bytes());
                b.extend_from_slice(&r.lsa_barrier_count.to_le_bytes());
                b
            }
            Err(e) => [&[1u8][..], e.to_string().as_bytes()].concat(),
        };
        let free = |ptr: u64| {
            // SAFETY: our fresh block, never used.
            let _ = unsafe { self.mem_free(ptr) };
        };
        let all = match (self.host_all_gather(OP, &blob), &local) {
            (Ok(all), _) => all,
            (Err(e), Ok((_, _, ptr))) => {
                free(*ptr);
                return Err(e);
            }
            (Err(e), Err(_)) => return Err(e),
        };
        let (r, lay, ptr) = local?;
        let mismatch = all.iter().enumerate().find_map(|(q, b)| match b.first() {
            Some(0) if *b == blob => None,
            Some(0) => Some((
                q,
                "asked for other requirements (resource bytes or LSA barriers differ)".to_string(),
            )),
            _ => Some((
                q,
                format!(
                    "failed: {}",
                    String::from_utf8_lossy(b.get(1..).unwrap_or_default())
                ),
            )),
        });
        if let Some((q, what)) = mismatch {
            free(ptr);
            return Err(Error::Window {
                op: OP,
                rank,
                peer: q as u32,
                what: format!("rank {q} {what}"),
            });
        }
        let window = match self.register_window(ptr, lay.bytes.max(1) as usize, WIN_COLL_SYMMETRIC) {
            Ok(w) => w,
            Err(e) => {
                free(ptr);
                return Err(e);
            }
        };
        let dev = DevComm {
            header: device_api_header::<DevComm>(),
            rank,
            nranks: self.count(),
            lsa_rank: rank,
            lsa_size,
            resource: window.desc(),
            lsa_barrier_offset: lay.barrier_offset,
            lsa_epoch_offset: lay.epoch_offset,
            lsa_barrier_count: r.lsa_barrier_count,
            gin_type: GIN_TYPE_NONE,
            abort_flag: self.device_abort_flag(),
            timeout_ns: self.config().timeout_ns,
        };
        tracing::debug!(target: "oxccl::window", rank, version = DEVICE_API_VERSION, bytes = lay.bytes, "device communicator created");
        Ok(DevCommHandle {
            dev,
            window: Some(window),
            ptr,
            backend: self.backend().clone(),
            rank,
        })
    }

    /// Destroy a device communicator (NCCL's `ncclDevCommDestroy`; collective): deregisters
    /// its resource window ([`Comm::deregister_window`]) and frees its memory.
    pub fn dev_comm_destroy(&self, mut h: DevCommHandle) -> Result<()> {
        let dereg = match h.window.take() {
            Some(w) => self.deregister_window(w),
            None => Ok(()),
        };
        let ptr = std::mem::take(&mut h.ptr);
        // SAFETY: the handle's block; its window was deregistered (every rank's kernels are
        // done with it).
        let freed = unsafe { self.mem_free(ptr) };
        dereg.and(freed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_regions_are_aligned_and_in_order() {
        let l = ResourceLayout::new(1000, 3, 4).unwrap();
        assert_eq!(l.barrier_offset, 1024);
        assert_eq!(l.epoch_offset, 1024 + 128);
        assert_eq!(l.bytes, 1024 + 128 + 24);
        let z = ResourceLayout::new(0, 0, 8).unwrap();
        assert_eq!((z.barrier_offset, z.epoch_offset, z.bytes), (0, 0, 0));
        assert!(ResourceLayout::new(u64::MAX - 3, 1, 1).is_none());
    }
}
