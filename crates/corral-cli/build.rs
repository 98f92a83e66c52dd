//! Names the library's `linux_raw` cfg (see `crates/corral/build.rs`) for
//! the CLI's tests of the crash-safety keeper: Linux on x86_64 or aarch64.
//!
//! Also links GCC's unwinder into the `corral` executable instead of loading
//! `libgcc_s.so.1` at every start (see [`link_unwinder_statically`]).

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let raw = var("CARGO_CFG_TARGET_OS") == "linux"
        && matches!(var("CARGO_CFG_TARGET_ARCH").as_str(), "x86_64" | "aarch64");
    println!("cargo:rustc-check-cfg=cfg(linux_raw)");
    println!("cargo:rustc-check-cfg=cfg(static_unwinder)");
    if raw {
        println!("cargo:rustc-cfg=linux_raw");
    }
    if var("CARGO_CFG_TARGET_OS") == "linux" && var("CARGO_CFG_TARGET_ENV") == "gnu" {
        link_unwinder_statically(&var);
    }
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=RUSTC_LINKER");
}

/// std on `*-linux-gnu` links its unwinder as `-lgcc_s`, so every start of
/// `corral` maps `libgcc_s.so.1`, relocates it and runs its constructor
/// (`__cpu_indicator_init`, whose `cpuid`s a VM traps): about 0.3 ms of the
/// few milliseconds a `corral run true` costs (issue #20, docs/BENCHMARKS.md).
///
/// rustc has no switch for `gcc -static-libgcc`; a linker script named
/// `libgcc_s.so` in a directory searched first makes `-lgcc_s` read GCC's
/// static unwinder, `libgcc_eh.a`, the archive `-static-libgcc` links. Only
/// when the linker says where that archive is (a native build, or a linker
/// named for the target); otherwise the link is std's usual one.
fn link_unwinder_statically(var: &impl Fn(&str) -> String) {
    let linker = std::env::var("RUSTC_LINKER").ok();
    if linker.is_none() && var("TARGET") != var("HOST") {
        return;
    }
    let Some(archive) = static_unwinder(linker.as_deref().unwrap_or("cc")) else {
        return;
    };
    let dir = PathBuf::from(var("OUT_DIR")).join("static-unwinder");
    let script = format!("INPUT({})\n", archive.display());
    let written = std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::write(dir.join("libgcc_s.so"), script));
    if written.is_ok() {
        println!("cargo:rustc-link-search=native={}", dir.display());
        // Tells the CLI's tests that `corral` does without libgcc_s.
        println!("cargo:rustc-cfg=static_unwinder");
    }
}

/// Where `linker` finds `libgcc_eh.a`, if it is a GCC-style driver that
/// has one (an absolute path to a file; a driver without it echoes the bare
/// name back).
fn static_unwinder(linker: &str) -> Option<PathBuf> {
    let out = Command::new(linker)
        .arg("-print-file-name=libgcc_eh.a")
        .output()
        .ok()?;
    let path = PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
    let usable = out.status.success()
        && path.is_absolute()
        && Path::new(&path).is_file()
        && !path.to_string_lossy().contains(['(', ')', '\n']);
    usable.then_some(path)
}
