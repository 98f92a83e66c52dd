//! `corral run --wait-delay 0` (issue #9, item 5): with corral's stdout a
//! pipe, the output goes through the splice relay thread, which sees end of
//! file a moment after the root's exit. A zero wait delay is no grace for
//! holders, not a demand that end of file was already read: `echo hi | cat`
//! is a clean exit every time, and a grandchild that really holds the pipe
//! is still `output_held` (exit 123) and dies.

#![cfg(unix)]

mod common;

use std::time::Duration;

use corral_testkit::{assert_between, Scratch, Watch};

use common::*;

const SEC: Duration = Duration::from_secs(1);

#[test]
fn echo_through_a_pipe_is_a_clean_exit_every_time() {
    let s = Scratch::new();
    let rp = report_path(&s);
    for i in 0..20 {
        let d = run(
            corral(
                &s,
                [
                    "run",
                    "--wait-delay",
                    "0",
                    "--report",
                    &rp,
                    "--",
                    "echo",
                    "hi",
                ],
            ),
            5 * SEC,
        );
        let v = read_report(&s.path("report.json"));
        assert_eq!(d.code(), 0, "run {i}: {v}");
        assert_eq!(d.out(), "hi\n", "run {i}");
        assert_eq!(v["outcome"], "exited", "run {i}: {v}");
        assert_eq!(count(&v, "killed"), 0, "run {i}: {v}");
        assert!(signals_sent(&v).is_empty(), "run {i}: {v}");
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
        let s = Scratch::new();
        let w = Watch::new(&s);
        let rp = report_path(&s);
        let script = format!(r#""$H" gc & {} echo started; exit 0"#, wait_for("gc"));
        let d = run(
            corral(
                &s,
                [
                    "run",
                    "--wait-delay",
                    "0",
                    "--report",
                    &rp,
                    "--",
                    "sh",
                    "-c",
                    &script,
                ],
            ),
            5 * SEC,
        );
        d.assert_code(123);
        assert_between(d.elapsed(), Duration::ZERO, 3 * SEC);
        assert_eq!(d.out(), "started\n", "run {i}");
        let v = read_report(&s.path("report.json"));
        assert_eq!(v["outcome"], "output_held", "run {i}: {v}");
        assert!(count(&v, "killed") >= 1, "run {i}: the holder counted: {v}");
        assert!(w.pid("gc", SEC).is_some());
        assert!(w.wait_dead("gc", 2 * SEC), "run {i}: the holder survived");
    }
}
