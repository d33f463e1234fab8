//! Without a CUDA driver, GPU paths return a typed error (never a panic) and the CPU backend
//! still works.

use oxccl::backend::gpu::GpuBackend;
use oxccl::Error;

#[test]
fn gpu_backend_without_driver_is_a_clear_error() {
    match GpuBackend::new() {
        Ok(_) => eprintln!("skipped: a CUDA driver and GPU are present on this machine"),
        Err(Error::CudaDriverMissing { searched }) => {
            assert!(searched.iter().any(|s| s.contains("libcuda")), "{searched:?}");
            let msg = Error::CudaDriverMissing { searched }.to_string();
            assert!(msg.contains("LD_LIBRARY_PATH"), "{msg}");
        }
        Err(Error::NoCudaDevice) => eprintln!("skipped: a driver but no device"),
        Err(e) => panic!("unexpected error kind: {e}"),
    }
    // Backend auto-selection falls back to the CPU with the reason.
    let (b, why) = oxccl::backend::auto();
    if b.kind() == oxccl::BackendKind::Cpu {
        assert!(why.is_some());
    }
}

#[test]
fn nccl_debug_maps_onto_the_filter() {
    assert_eq!(oxccl::logging::filter_from_nccl("INFO", ""), "oxccl=info");
    assert_eq!(oxccl::logging::filter_from_nccl("WARN", "ALL"), "oxccl=warn");
    assert_eq!(
        oxccl::logging::filter_from_nccl("TRACE", "INIT,COLL"),
        "oxccl=warn,oxccl::init=trace,oxccl::coll=trace"
    );
}
