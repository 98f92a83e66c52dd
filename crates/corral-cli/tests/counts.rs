//! What `corral run -v` and the report say about a timeout: the deadline
//! (not the run's length), and `killed` counting only processes that died
//! of corral's signals, in each tier the CLI can use here.
#![cfg(target_os = "linux")]

use std::process::Command;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_corral");

/// SIGINT is ignored by the whole tree; the `sleep` finishes by itself
/// (it prints `slept-ok`), so corral signalled a member that survived.
const TREE: &str = r#"trap "" INT; sleep 2; echo slept-ok >&2; true"#;

fn run(tier_args: &[&str]) -> (String, serde_json::Value, Duration) {
    let dir = corral_testkit::Scratch::new();
    let report = dir.path("r.json");
    let t0 = Instant::now();
    let out = Command::new(BIN)
        .args(["run", "-v", "-s", "INT", "-t", "500ms"])
        .args(tier_args)
        .arg("--report")
        .arg(&report)
        .args(["--", "sh", "-c", TREE])
        .output()
        .expect("corral runs");
    let took = t0.elapsed();
    assert_eq!(out.status.code(), Some(124), "{out:?}");
    let r: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report).expect("report")).expect("JSON");
    (String::from_utf8_lossy(&out.stderr).into_owned(), r, took)
}

fn check(tier_args: &[&str]) {
    let (stderr, r, took) = run(tier_args);
    // The sleep ran to its end: nothing died of SIGINT.
    assert!(stderr.contains("slept-ok"), "{stderr}");
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(10),
        "{took:?}"
    );
    assert_eq!(r["outcome"], "timed_out", "{r}");
    assert_eq!(r["signals_sent"], serde_json::json!([2]), "{r}");
    assert_eq!(r["killed"], 0, "{r}");
    assert!(
        stderr.contains("timed out after 500ms (the run took "),
        "-v gives the deadline: {stderr}"
    );
    assert!(stderr.contains("0 descendants killed"), "{stderr}");
}

#[test]
fn a_signalled_member_that_survives_is_not_killed_auto() {
    check(&[]);
}

#[test]
fn a_signalled_member_that_survives_is_not_killed_process_group() {
    check(&["--containment", "process-group", "-k", "5s"]);
}

#[test]
fn a_signalled_member_that_survives_is_not_killed_subreaper() {
    check(&["--containment", "subreaper"]);
}

#[corral_testkit::needs(pidns)]
#[test]
fn a_signalled_member_that_survives_is_not_killed_pid_namespace() {
    check(&["--containment", "pid-namespace"]);
}
