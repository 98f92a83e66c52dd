//! Names the library's `linux_raw` cfg (see `crates/corral/build.rs`) for
//! the CLI's tests of the crash-safety keeper: Linux on x86_64 or aarch64.

fn main() {
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let raw = var("CARGO_CFG_TARGET_OS") == "linux"
        && matches!(var("CARGO_CFG_TARGET_ARCH").as_str(), "x86_64" | "aarch64");
    println!("cargo:rustc-check-cfg=cfg(linux_raw)");
    if raw {
        println!("cargo:rustc-cfg=linux_raw");
    }
    // `corral` linked as a position-dependent executable on Linux/glibc:
    // its 7,700 relative relocations (vtables and other tables of pointers
    // in `.data.rel.ro`) are resolved by the linker, not by `ld.so` at every
    // start, so those pages stay clean file pages instead of ~30
    // copy-on-write faults an invocation (`perf stat`: page faults 294-298 ->
    // 263-271 for `corral run -- true`, `corral --version` 155 -> 126; the
    // loader's start 295,000 -> 144,000 cycles, `LD_DEBUG=statistics`).
    // What it gives up: the executable's own image sits at a fixed address
    // (shared libraries, heap, stack and mappings stay randomized). Only the
    // binary: the library, the Python and Node packages are untouched.
    if var("CARGO_CFG_TARGET_OS") == "linux" && var("CARGO_CFG_TARGET_ENV") == "gnu" {
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
