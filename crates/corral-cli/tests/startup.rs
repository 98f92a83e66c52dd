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
