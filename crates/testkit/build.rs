//! Builds the compiled test helpers in `helpers/` with the host `rustc`
//! (they have no dependencies). Only when the target is the host and Linux:
//! the helpers use Linux system calls, and tests run only there.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=helpers/zombie_leader.rs");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let exe = out.join("corral-zombie-leader");
    println!(
        "cargo:rustc-env=CORRAL_ZOMBIE_LEADER={}",
        exe.to_str().expect("OUT_DIR is UTF-8")
    );
    let host = std::env::var("HOST").unwrap_or_default();
    let target = std::env::var("TARGET").unwrap_or_default();
    let linux = std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|o| o == "linux");
    if host != target || !linux {
        // Nothing to run the helper on: `zombie_leader()` reports it missing.
        let _ = std::fs::remove_file(&exe);
        return;
    }
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let status = Command::new(rustc)
        .args([
            "--edition",
            "2021",
            "-O",
            "--crate-name",
            "corral_zombie_leader",
            "-o",
        ])
        .arg(&exe)
        .arg("helpers/zombie_leader.rs")
        .status()
        .expect("running rustc for the zombie-leader helper");
    assert!(status.success(), "building helpers/zombie_leader.rs failed");
}
