//! `corral run` with a descendant whose main thread exited while another
//! thread runs (issue #9, item 2): it ignores SIGTERM and shows `Z` in
//! `/proc/PID/stat`, yet it is alive. The grace escalates to SIGKILL, the
//! leftovers policy kills it, in every tier the CLI can use.

#![cfg(target_os = "linux")]

mod common;

use std::time::Duration;

use corral_testkit::{thread_group_alive, Scratch, Watch};

use common::*;

const SEC: Duration = Duration::from_secs(1);

const ZL: &str =
    r#""$H" zl "$ZL" zl & until [ -e "$CORRAL_TEST_DIR/zl.zombie" ]; do sleep 0.01; done; "#;

/// Pins `zl` and waits until its leader has exited (the helper is alive).
fn ready(s: &Scratch, w: &Watch) -> u32 {
    let pid = w.pid("zl", 10 * SEC).expect("zl never started");
    assert!(
        s.wait_file("zl.zombie", 10 * SEC),
        "zl's leader never exited"
    );
    pid
}

fn timeout_with_grace(tier: &str) {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let rp = report_path(&s);
    let script = format!(r#"{ZL} exec "$H" root"#);
    let r = start(
        corral(
            &s,
            [
                "run",
                "--containment",
                tier,
                "--timeout",
                "3s",
                "--grace",
                "300ms",
                "--report",
                &rp,
                "--",
                "sh",
                "-c",
                &script,
            ],
        ),
        Sink::Pipe,
        Sink::Pipe,
    );
    let pid = ready(&s, &w);
    let d = r.finish(10 * SEC);
    d.assert_code(124);
    let v = read_report(&s.path("report.json"));
    assert_eq!(v["outcome"], "timed_out", "{tier}: {v}");
    assert_eq!(signals_sent(&v), vec![15, 9], "{tier}: {v}");
    assert_eq!(v["survivors"], serde_json::json!([]), "{tier}: {v}");
    assert_eq!(v["error"], "timed out", "{tier}: no cleanup error: {v}");
    assert!(w.wait_dead("zl", 2 * SEC), "{tier}: zl survived");
    assert!(!thread_group_alive(pid));
}

fn exit_1_with_leftovers_kill(tier: &str) {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let rp = report_path(&s);
    let script = format!("{ZL} exit 1");
    let r = start(
        corral(
            &s,
            [
                "run",
                "--containment",
                tier,
                "--leftovers",
                "kill",
                "--report",
                &rp,
                "--",
                "sh",
                "-c",
                &script,
            ],
        ),
        Sink::Pipe,
        Sink::Pipe,
    );
    let pid = ready(&s, &w);
    let d = r.finish(10 * SEC);
    d.assert_code(1);
    let v = read_report(&s.path("report.json"));
    assert_eq!(v["outcome"], "exited", "{tier}: {v}");
    assert!(count(&v, "killed") >= 1, "{tier}: {v}");
    assert!(v["error"].is_null(), "{tier}: {v}");
    assert!(w.wait_dead("zl", 2 * SEC), "{tier}: zl survived");
    assert!(!thread_group_alive(pid));
}

#[test]
fn timeout_with_grace_sends_sigkill_and_reports_it_process_group() {
    timeout_with_grace("process-group");
}

#[test]
fn timeout_with_grace_sends_sigkill_and_reports_it_subreaper() {
    timeout_with_grace("subreaper");
}

#[corral_testkit::needs(cgroup)]
#[test]
fn timeout_with_grace_sends_sigkill_and_reports_it_cgroup() {
    timeout_with_grace("cgroup");
}

#[test]
fn exit_1_with_leftovers_kill_kills_it_process_group() {
    exit_1_with_leftovers_kill("process-group");
}

#[test]
fn exit_1_with_leftovers_kill_kills_it_subreaper() {
    exit_1_with_leftovers_kill("subreaper");
}

#[corral_testkit::needs(cgroup)]
#[test]
fn exit_1_with_leftovers_kill_kills_it_cgroup() {
    exit_1_with_leftovers_kill("cgroup");
}
