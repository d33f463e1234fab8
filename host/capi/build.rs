//! SONAME libnccl.so.2: what programs linked against NCCL ask the loader for. (rustc's own
//! version script already exports only the `#[no_mangle]` symbols, unversioned.)
fn main() {
    // Only this file decides the link arguments (not the package's other files, such as
    // the C test programs).
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libnccl.so.2");
}
