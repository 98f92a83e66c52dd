//! Builds the compiled test helpers in `helpers/` with the host `rustc`
//! (they have no dependencies). Only when the target is the host and Linux:
//! the helpers use Linux system calls, and tests run only there.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let host = std::env::var("HOST").unwrap_or_default();
    let target = std::env::var("TARGET").unwrap_or_default();
    let linux = std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|o| o == "linux");
    for (src, crate_name, exe_name, var) in [
        (
            "helpers/zombie_leader.rs",
            "corral_zombie_leader",
            "corral-zombie-leader",
            "CORRAL_ZOMBIE_LEADER",
        ),
        (
            "helpers/blank_environ.rs",
            "corral_blank_environ",
            "corral-blank-environ",
            "CORRAL_BLANK_ENVIRON",
        ),
    ] {
        println!("cargo:rerun-if-changed={src}");
        let exe = out.join(exe_name);
        println!(
            "cargo:rustc-env={var}={}",
            exe.to_str().expect("OUT_DIR is UTF-8")
        );
        if host != target || !linux {
            // Nothing to run the helper on: its path function reports it
            // missing.
            let _ = std::fs::remove_file(&exe);
            continue;
        }
        let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
        let status = Command::new(rustc)
            .args(["--edition", "2021", "-O", "--crate-name", crate_name, "-o"])
            .arg(&exe)
            .arg(src)
            .status()
            .unwrap_or_else(|e| panic!("running rustc for {src}: {e}"));
        assert!(status.success(), "building {src} failed");
    }
}
