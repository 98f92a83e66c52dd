//! What one start of `corral` loads (issue #20: a one-shot invocation pays
//! for every shared library at every start). The command reads its parent's
//! memory map: in the process-group tier its parent is corral itself.

#![cfg(all(target_os = "linux", target_env = "gnu"))]

mod common;

use std::time::Duration;

use corral_testkit::Scratch;

use common::*;

/// corral's own mappings, as its command sees them (`/proc/$PPID/maps`).
fn corral_maps() -> String {
    let s = Scratch::new();
    let d = run(
        corral(
            &s,
            [
                "run",
                "--containment",
                "process-group",
                "--",
                "sh",
                "-c",
                "cat /proc/$PPID/maps",
            ],
        ),
        Duration::from_secs(20),
    );
    d.assert_code(0);
    let maps = d.stdout.expect("stdout is piped").text();
    // Read from the right process: corral's executable and glibc are there.
    assert!(maps.contains(BIN), "not corral's map:\n{maps}");
    assert!(maps.contains("libc.so"), "no libc in:\n{maps}");
    maps
}

/// indicatif's `pow` is the executable's own: `libm.so.6` is never mapped.
#[test]
fn corral_does_not_load_libm() {
    let maps = corral_maps();
    assert!(
        !maps
            .lines()
            .any(|l| l.contains("/libm.so") || l.contains("/libm-")),
        "libm is mapped:\n{maps}"
    );
}

/// GCC's unwinder is linked in (where the toolchain has `libgcc_eh.a`):
/// `libgcc_s.so.1` is never mapped.
#[cfg(static_unwinder)]
#[test]
fn corral_does_not_load_libgcc_s() {
    let maps = corral_maps();
    assert!(!maps.contains("libgcc_s"), "libgcc_s is mapped:\n{maps}");
}

/// Started with descriptors 0, 1 and 2 closed, corral opens /dev/null on
/// them before anything else (as std's start does): the command gets
/// /dev/null there, nothing corral opens takes those numbers, and corral
/// says the command's code (no panic, no write into its own report file).
#[test]
fn closed_standard_descriptors_are_dev_null() {
    use std::os::unix::process::CommandExt;
    let s = Scratch::new();
    let out = s.path("fds.txt");
    let report = s.path("report.json");
    let script = format!(
        "fds=$(readlink /proc/$$/fd/0 /proc/$$/fd/1 /proc/$$/fd/2); echo \"$fds\" > '{}'; exit 3",
        out.display()
    );
    let mut c = corral(
        &s,
        [
            "run",
            "--report",
            report.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            &script,
        ],
    );
    // SAFETY: between fork and exec only close(2), which is async-signal-safe.
    unsafe {
        c.pre_exec(|| {
            for fd in 0..3 {
                libc::close(fd);
            }
            Ok(())
        });
    }
    let status = c.status().unwrap();
    assert_eq!(status.code(), Some(3));
    let fds = std::fs::read_to_string(&out).unwrap();
    assert_eq!(fds, "/dev/null\n/dev/null\n/dev/null\n");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(v["exit_code"], 3, "{v}");
}
