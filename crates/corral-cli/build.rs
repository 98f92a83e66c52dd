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
    println!("cargo:rerun-if-changed=build.rs");
}
