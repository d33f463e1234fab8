//! The C ABI called from Rust on the CPU backend (host memory is "device" memory there):
//! `ncclGroupSimulateEnd` launches nothing and estimates, `ncclCommShrink` among survivors,
//! `ncclDevCommCreate` with NCCL's requirements layout. The C programs of
//! `host/capi/tests/c` cover the same through the cdylib.

use std::ffi::{c_int, c_void, CStr};

use super::devapi::NcclTeam;
use super::devreqs::NcclDevCommRequirements;
use super::requirements::{NcclDevResourceRequirements, NcclLla2aHandle, NcclLsaBarrierHandle};
use super::types::*;
use super::*;
use crate::backend::BackendKind;

const FLOAT32: c_int = 7;
const INT32: c_int = 2;
const SUM: c_int = 0;

/// Whether the process backend is the CPU one (these tests pass host pointers).
fn cpu_or_skip() -> bool {
    if backend().kind() != BackendKind::Cpu {
        println!("skipped: the process backend is the GPU; these tests pass host memory");
        return false;
    }
    true
}

fn last() -> String {
    // SAFETY: a NUL-terminated string of the library.
    unsafe { CStr::from_ptr(ncclGetLastError(std::ptr::null_mut())) }
        .to_string_lossy()
        .into_owned()
}

fn ok(rc: NcclResult) {
    assert_eq!(rc, SUCCESS, "{}", last());
}

fn init_all(n: usize) -> Vec<NcclComm> {
    let mut comms = vec![std::ptr::null_mut(); n];
    // SAFETY: room for n handles.
    ok(unsafe { ncclCommInitAll(comms.as_mut_ptr(), n as c_int, std::ptr::null()) });
    comms
}

fn destroy(comms: &[NcclComm]) {
    for &c in comms {
        // SAFETY: handles of ours.
        ok(unsafe { ncclCommDestroy(c) });
    }
}

fn sim_info() -> NcclSimInfo {
    NcclSimInfo {
        size: std::mem::size_of::<NcclSimInfo>(),
        magic: SIM_INFO_MAGIC,
        version: VERSION_CODE as u32,
        estimated_time: -1.0,
    }
}

/// Grouped all-reduces (one per rank) and a send/recv ring into `recv`, from this thread.
fn queue_ops(comms: &[NcclComm], send: &[Vec<f32>], recv: &mut [Vec<f32>], ring: &mut [Vec<f32>]) {
    let n = comms.len();
    for r in 0..n {
        // SAFETY: buffers of `count` floats that outlive the group.
        ok(unsafe {
            ncclAllReduce(
                send[r].as_ptr() as *const c_void,
                recv[r].as_mut_ptr() as *mut c_void,
                send[r].len(),
                FLOAT32,
                SUM,
                comms[r],
                std::ptr::null_mut(),
            )
        });
    }
    for r in 0..n {
        // SAFETY: as above.
        ok(unsafe {
            ncclSend(
                send[r].as_ptr() as *const c_void,
                send[r].len(),
                FLOAT32,
                ((r + 1) % n) as c_int,
                comms[r],
                std::ptr::null_mut(),
            )
        });
        // SAFETY: as above.
        ok(unsafe {
            ncclRecv(
                ring[r].as_mut_ptr() as *mut c_void,
                ring[r].len(),
                FLOAT32,
                ((r + n - 1) % n) as c_int,
                comms[r],
                std::ptr::null_mut(),
            )
        });
    }
}

#[test]
fn simulate_end_launches_nothing_and_estimates() {
    if !cpu_or_skip() {
        return;
    }
    let n = 2;
    let comms = init_all(n);
    let count = 4099;
    let send: Vec<Vec<f32>> = (0..n).map(|r| vec![r as f32 + 1.0; count]).collect();
    let poison = vec![-7.0f32; count];
    let mut recv = vec![poison.clone(); n];
    let mut ring = vec![poison.clone(); n];

    ok(unsafe { ncclGroupStart() });
    queue_ops(&comms, &send, &mut recv, &mut ring);
    let mut info = sim_info();
    // SAFETY: an initialized simInfo.
    ok(unsafe { ncclGroupSimulateEnd(&mut info) });
    assert!(info.estimated_time > 0.0, "estimatedTime {}", info.estimated_time);
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert!(
        recv.iter().chain(&ring).all(|b| *b == poison),
        "a simulated operation ran"
    );
    // The group is over: another end is a usage error.
    assert_eq!(unsafe { ncclGroupEnd() }, INVALID_USAGE);

    // More bytes, more time.
    let big = vec![vec![1.0f32; 1 << 20]; n];
    let mut big_out = vec![vec![0.0f32; 1 << 20]; n];
    let mut big_ring = vec![vec![0.0f32; 1 << 20]; n];
    ok(unsafe { ncclGroupStart() });
    queue_ops(&comms, &big, &mut big_out, &mut big_ring);
    let mut info2 = sim_info();
    ok(unsafe { ncclGroupSimulateEnd(&mut info2) });
    assert!(info2.estimated_time > info.estimated_time);
    assert!(big_out.iter().all(|b| b.iter().all(|&x| x == 0.0)));

    // Nested: the inner end closes only (simInfo untouched); the outer one simulates.
    ok(unsafe { ncclGroupStart() });
    ok(unsafe { ncclGroupStart() });
    queue_ops(&comms, &send, &mut recv, &mut ring);
    let mut inner = sim_info();
    ok(unsafe { ncclGroupSimulateEnd(&mut inner) });
    assert_eq!(inner.estimated_time, -1.0);
    let mut outer = sim_info();
    ok(unsafe { ncclGroupSimulateEnd(&mut outer) });
    assert!(outer.estimated_time > 0.0);
    assert!(recv.iter().chain(&ring).all(|b| *b == poison));

    // A bad simInfo: refused, the group still ends with nothing launched.
    ok(unsafe { ncclGroupStart() });
    queue_ops(&comms, &send, &mut recv, &mut ring);
    let mut bad = sim_info();
    bad.magic = 0x1234;
    assert_eq!(unsafe { ncclGroupSimulateEnd(&mut bad) }, INVALID_ARGUMENT);
    assert!(last().contains("magic"), "{}", last());
    assert_eq!(unsafe { ncclGroupSimulateEnd(&mut bad) }, INVALID_USAGE);
    assert!(recv.iter().chain(&ring).all(|b| *b == poison));

    // A real group afterwards runs everything.
    ok(unsafe { ncclGroupStart() });
    queue_ops(&comms, &send, &mut recv, &mut ring);
    ok(unsafe { ncclGroupEnd() });
    let sum = (1..=n).sum::<usize>() as f32;
    for r in 0..n {
        assert!(recv[r].iter().all(|&x| x == sum), "rank {r}: all-reduce");
        assert!(
            ring[r].iter().all(|&x| x == ((r + n - 1) % n + 1) as f32),
            "rank {r}: ring"
        );
    }
    destroy(&comms);
}

#[test]
fn shrink_among_survivors_through_the_c_abi() {
    if !cpu_or_skip() {
        return;
    }
    let comms = init_all(3);
    let keys: Vec<usize> = comms.iter().map(|&c| c as usize).collect();
    // Rank 1 is excluded and never calls; 0 and 2 shrink from their own threads.
    let children: Vec<usize> = std::thread::scope(|s| {
        let hs: Vec<_> = [0usize, 2]
            .into_iter()
            .map(|r| {
                let parent = keys[r];
                s.spawn(move || {
                    let mut ex = [1 as c_int];
                    let mut child: NcclComm = std::ptr::null_mut();
                    // SAFETY: valid pointers; NULL config.
                    let rc = unsafe {
                        ncclCommShrink(
                            parent as NcclComm,
                            ex.as_mut_ptr(),
                            1,
                            &mut child,
                            std::ptr::null_mut(),
                            0,
                        )
                    };
                    assert_eq!(rc, SUCCESS, "parent rank {r}: {}", last());
                    child as usize
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let children: Vec<NcclComm> = children.into_iter().map(|c| c as NcclComm).collect();
    for (i, &c) in children.iter().enumerate() {
        let (mut n, mut me) = (0, -1);
        ok(unsafe { ncclCommCount(c, &mut n) });
        ok(unsafe { ncclCommUserRank(c, &mut me) });
        assert_eq!((n, me), (2, i as c_int));
    }
    let send = [vec![1i32; 33], vec![10i32; 33]];
    let mut recv = [vec![0i32; 33], vec![0i32; 33]];
    ok(unsafe { ncclGroupStart() });
    for i in 0..2 {
        // SAFETY: live buffers.
        ok(unsafe {
            ncclAllReduce(
                send[i].as_ptr() as *const c_void,
                recv[i].as_mut_ptr() as *mut c_void,
                33,
                INT32,
                SUM,
                children[i],
                std::ptr::null_mut(),
            )
        });
    }
    ok(unsafe { ncclGroupEnd() });
    assert!(recv.iter().all(|b| b.iter().all(|&x| x == 11)));
    // Bad arguments.
    let mut child: NcclComm = std::ptr::null_mut();
    let mut me_ex = [0 as c_int];
    assert_eq!(
        unsafe {
            ncclCommShrink(
                comms[0],
                me_ex.as_mut_ptr(),
                1,
                &mut child,
                std::ptr::null_mut(),
                0,
            )
        },
        INVALID_ARGUMENT
    );
    assert!(last().contains("must not call"), "{}", last());
    assert_eq!(
        unsafe {
            ncclCommShrink(
                comms[0],
                std::ptr::null_mut(),
                0,
                &mut child,
                std::ptr::null_mut(),
                2,
            )
        },
        INVALID_ARGUMENT
    );
    assert_eq!(
        unsafe {
            ncclCommShrink(
                comms[0],
                std::ptr::null_mut(),
                -1,
                &mut child,
                std::ptr::null_mut(),
                0,
            )
        },
        INVALID_ARGUMENT
    );
    destroy(&children);
    destroy(&comms);
}

#[test]
fn dev_comm_from_nccl_requirements() {
    if !cpu_or_skip() {
        return;
    }
    let comms = init_all(1);
    let team = NcclTeam {
        n_ranks: 1,
        rank: 0,
        stride: 1,
    };
    let mut bar = NcclLsaBarrierHandle {
        buf_handle: 999,
        n_barriers: 0,
    };
    let mut a2a = NcclLla2aHandle {
        buf_handle: 999,
        n_slots: 0,
    };
    let mut r1 = std::mem::MaybeUninit::<NcclDevResourceRequirements>::uninit();
    let mut r2 = std::mem::MaybeUninit::<NcclDevResourceRequirements>::uninit();
    ok(unsafe { ncclLsaBarrierCreateRequirement(team, 2, &mut bar, r1.as_mut_ptr()) });
    ok(unsafe { ncclLLA2ACreateRequirement(2, 8, &mut a2a, r2.as_mut_ptr()) });
    // SAFETY: written by the helpers.
    let (mut r1, mut r2) = unsafe { (r1.assume_init(), r2.assume_init()) };
    r1.next = &mut r2;
    let mut reqs = NcclDevCommRequirements {
        size: std::mem::size_of::<NcclDevCommRequirements>(),
        magic: API_MAGIC,
        version: VERSION_CODE as u32,
        resource_requirements_list: &mut r1,
        team_requirements_list: std::ptr::null_mut(),
        lsa_multimem: false,
        barrier_count: 0,
        lsa_barrier_count: 3,
        rail_gin_barrier_count: 0,
        lsa_lla2a_block_count: 0,
        lsa_lla2a_slot_count: 0,
        gin_force_enable: false,
        gin_context_count: 4,
        gin_signal_count: 0,
        gin_counter_count: 0,
        gin_connection_type: 0,
        gin_exclusive_contexts: false,
        gin_queue_depth: 0,
    };
    let mut dev = oxccl_device::api::abi::DevComm::default();
    let p = &reqs as *const NcclDevCommRequirements as *const c_void;
    ok(unsafe { ncclDevCommCreate(comms[0], p, &mut dev) });
    // The barrier (2 x (1 + 3) x 4 = 32 bytes) at 0, the LL all-to-all at 128.
    assert_eq!((bar.buf_handle, bar.n_barriers), (0, 2));
    assert_eq!((a2a.buf_handle, a2a.n_slots), (1, 8));
    assert_eq!((dev.rank, dev.nranks, dev.lsa_barrier_count), (0, 1, 3));
    assert!(dev.resource.size >= 128 + r2.buffer_size as u64);
    ok(unsafe { ncclDevCommDestroy(comms[0], &dev) });
    reqs.gin_signal_count = 4;
    let p = &reqs as *const NcclDevCommRequirements as *const c_void;
    assert_eq!(unsafe { ncclDevCommCreate(comms[0], p, &mut dev) }, INVALID_USAGE);
    assert!(last().contains("GIN"), "{}", last());
    destroy(&comms);
}

#[test]
fn config_ctas_and_comm_name_reach_the_communicator() {
    if !cpu_or_skip() {
        return;
    }
    let env_cap = crate::settings::max_blocks();
    let mut id = std::mem::MaybeUninit::<NcclUniqueId>::uninit();
    ok(unsafe { ncclGetUniqueId(id.as_mut_ptr()) });
    // SAFETY: written by ncclGetUniqueId.
    let id = unsafe { id.assume_init() };
    let mut cfg = NcclConfig {
        size: std::mem::size_of::<NcclConfig>(),
        magic: API_MAGIC,
        version: VERSION_CODE as u32,
        blocking: UNDEF_INT,
        cga_cluster_size: UNDEF_INT,
        min_ctas: 1,
        max_ctas: 1,
        net_name: std::ptr::null(),
        split_share: 1,
        traffic_class: UNDEF_INT,
        comm_name: c"named-pg".as_ptr(),
        collnet_enable: UNDEF_INT,
        cta_policy: UNDEF_INT,
        shrink_share: UNDEF_INT,
        nvls_ctas: UNDEF_INT,
        n_channels_per_net_peer: UNDEF_INT,
        nvlink_centric_sched: UNDEF_INT,
        graph_usage_mode: UNDEF_INT,
        num_rma_ctx: UNDEF_INT,
    };
    let mut comm: NcclComm = std::ptr::null_mut();
    ok(unsafe { ncclCommInitRankConfig(&mut comm, 1, id, 0, &mut cfg) });
    let c = handle::CComm::get("test", key(comm))
        .unwrap()
        .comm("test")
        .unwrap();
    assert_eq!(c.config().name.as_deref(), Some("named-pg"));
    assert_eq!(c.config().min_blocks, 1);
    if env_cap == 0 {
        // maxCTAs 1: every grid of this communicator is one block.
        assert_eq!(c.config().max_blocks, 1);
        assert_eq!(c.grid(1 << 24, oxccl_device::abi::DataType::F32).blocks, 1);
        assert_eq!(c.ll_grid(1 << 16, oxccl_device::abi::DataType::F32).blocks, 1);
    } else {
        println!("NCCL_MAX_CTAS / OXCCL_MAX_BLOCKS is set: it wins over maxCTAs, as in NCCL");
        assert_eq!(c.config().max_blocks, env_cap);
    }
    // A collective on it still computes (with one block).
    let (x, mut y) = ([3i32; 100], [0i32; 100]);
    ok(unsafe {
        ncclAllReduce(
            x.as_ptr() as *const c_void,
            y.as_mut_ptr() as *mut c_void,
            100,
            INT32,
            SUM,
            comm,
            std::ptr::null_mut(),
        )
    });
    assert_eq!(y, [3; 100]);
    // Errors on it name it.
    let rc = unsafe {
        ncclAllReduce(
            x.as_ptr() as *const c_void,
            y.as_mut_ptr() as *mut c_void,
            1,
            99,
            SUM,
            comm,
            std::ptr::null_mut(),
        )
    };
    assert_eq!(rc, INVALID_ARGUMENT);
    assert!(last().contains("(communicator \"named-pg\")"), "{}", last());
    // A split with a NULL config keeps the name; with a config, the config's.
    let mut child: NcclComm = std::ptr::null_mut();
    ok(unsafe { ncclCommSplit(comm, 0, 0, &mut child, std::ptr::null_mut()) });
    let cc = handle::CComm::get("test", key(child)).unwrap();
    assert_eq!(cc.name.as_deref(), Some("named-pg"));
    destroy(&[child, comm]);
}
