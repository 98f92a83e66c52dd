//! `corral run --wait-delay 0`: with corral's stdout a
//! pipe, the output goes through the splice relay thread, which sees end of
//! file a moment after the root's exit. A zero wait delay is no grace for
//! holders, not a demand that end of file was already read: `echo hi | cat`
//! is a clean exit every time, and a grandchild that really holds the pipe
//! is still `output_held` (exit 123) and dies.

// Linux only: the harness (tests/common) pins helpers by pidfd and reads /proc.
#![cfg(target_os = "linux")]

mod common;

use std::time::Duration;

use corral_testkit::scenario::{Count::AtLeast, Count::Exactly, Fate::Dead};
use corral_testkit::Scratch;

use common::*;

const SEC: Duration = Duration::from_secs(1);

#[test]
fn echo_through_a_pipe_is_a_clean_exit_every_time() {
    for i in 0..20 {
        let ran = run_row(&Row {
            opts: opts(&["--wait-delay", "0"]),
            argv: opts(&["echo", "hi"]),
            code: Some(0),
            fields: vec![("outcome", "exited".into())],
            killed: Some(Exactly(0)),
            signals: Some(&[]),
            ..Row::default()
        });
        assert_eq!(ran.d.out(), "hi\n", "run {i}");
    }
}

#[test]
fn megabytes_through_a_pipe_arrive_whole() {
    let s = Scratch::new();
    for i in 0..5 {
        let d = run(
            corral(
                &s,
                [
                    "run",
                    "--wait-delay",
                    "0",
                    "--",
                    "head",
                    "-c",
                    "8388608",
                    "/dev/zero",
                ],
            ),
            10 * SEC,
        );
        d.assert_code(0);
        assert_eq!(d.stdout.as_ref().unwrap().total, 8 << 20, "run {i}");
    }
}

#[test]
fn a_real_holder_is_output_held_and_dies() {
    for i in 0..5 {
        let ran = run_row(&Row {
            opts: opts(&["--wait-delay", "0"]),
            tree: format!(r#""$H" gc & {} echo started; exit 0"#, wait_for("gc")),
            code: Some(123),
            bound: Some((Duration::ZERO, 3 * SEC)),
            fields: vec![("outcome", "output_held".into())],
            // The holder counted.
            killed: Some(AtLeast(1)),
            fates: &[("gc", Dead)],
            ..Row::default()
        });
        assert_eq!(ran.d.out(), "started\n", "run {i}");
    }
}
