//! `corral run` with a descendant whose main thread exited while another
//! thread runs: it ignores SIGTERM and shows `Z` in
//! `/proc/PID/stat`, yet it is alive. The grace escalates to SIGKILL, the
//! leftovers policy kills it, in every tier the CLI can use.

#![cfg(target_os = "linux")]

mod common;

use std::time::Duration;

use corral_testkit::{thread_group_alive, Scratch, Watch};

use common::*;
use corral_testkit::scenario::{Count::AtLeast, Fate::Dead};
use serde_json::Value;

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

/// Runs `row`, pinning `zl` while corral runs and waiting for its leader
/// to exit; then `zl` (every thread of it) must be gone.
fn run_zl(row: &Row) -> Ran {
    let mut pid = 0;
    let ran = run_row_with(
        row,
        |_| (Sink::Pipe, Sink::Pipe),
        |s, w, _| pid = ready(s, w),
    );
    assert!(!thread_group_alive(pid));
    ran
}

fn timeout_with_grace(tier: &str) {
    let ran = run_zl(&Row {
        opts: opts(&["--containment", tier, "--timeout", "3s", "--grace", "300ms"]),
        tree: format!(r#"{ZL} exec "$H" root"#),
        hang: Some(10 * SEC),
        code: Some(124),
        fields: vec![
            ("outcome", "timed_out".into()),
            ("survivors", serde_json::json!([])),
            // No cleanup error.
            ("error", "timed out".into()),
        ],
        signals: Some(&[15, 9]),
        fates: &[("zl", Dead)],
        dead_within: Some(2 * SEC),
        ..Row::default()
    });
    assert_eq!(ran.v["containment"], tier.replace('-', "_"));
}

fn exit_1_with_leftovers_kill(tier: &str) {
    let ran = run_zl(&Row {
        opts: opts(&["--containment", tier, "--leftovers", "kill"]),
        tree: format!("{ZL} exit 1"),
        hang: Some(10 * SEC),
        code: Some(1),
        fields: vec![("outcome", "exited".into()), ("error", Value::Null)],
        killed: Some(AtLeast(1)),
        fates: &[("zl", Dead)],
        dead_within: Some(2 * SEC),
        ..Row::default()
    });
    assert_eq!(ran.v["containment"], tier.replace('-', "_"));
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
