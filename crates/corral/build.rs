//! Names corral's repeated cfg predicates once, so the code says
//! `#[cfg(linux_raw)]` instead of spelling the predicate out each time:
//!
//! - `linux_raw`: Linux on an architecture corral's raw system-call layer
//!   covers (x86_64, aarch64): the clone3 spawn path, the PID-namespace
//!   init and the crash-safety keeper (`sys/linux_spawn`).
//! - `tokio_unix`: the `tokio` feature on a Unix target (the async API).
//! - `tokio_linux`: the `tokio` feature on Linux.

fn main() {
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let linux = var("CARGO_CFG_TARGET_OS") == "linux";
    let unix = var("CARGO_CFG_TARGET_FAMILY")
        .split(',')
        .any(|f| f == "unix");
    let raw_arch = matches!(var("CARGO_CFG_TARGET_ARCH").as_str(), "x86_64" | "aarch64");
    let tokio = std::env::var_os("CARGO_FEATURE_TOKIO").is_some();
    for (alias, holds) in [
        ("linux_raw", linux && raw_arch),
        ("tokio_unix", tokio && unix),
        ("tokio_linux", tokio && linux),
    ] {
        println!("cargo:rustc-check-cfg=cfg({alias})");
        if holds {
            println!("cargo:rustc-cfg={alias}");
        }
    }
    // The fuzz targets' entry points (`fuzz/`: cargo fuzz passes it).
    println!("cargo:rustc-check-cfg=cfg(fuzzing)");
    println!("cargo:rerun-if-changed=build.rs");
}
