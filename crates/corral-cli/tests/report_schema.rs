//! The JSON report follows its documented schema (docs/report-schema.json)
//! for real runs of every kind: a clean exit, a timeout, output held, a
//! spawn failure, and batch's per-run reports. (Every report read by the
//! other CLI tests is checked against the schema as well, in
//! `common::check_report`.)

// Linux only: the harness (tests/common) pins helpers by pidfd and reads /proc.
#![cfg(target_os = "linux")]

mod common;

use std::time::Duration;

use corral_testkit::{Scratch, Watch};
use serde_json::Value;

use common::*;

const SEC: Duration = Duration::from_secs(1);

/// Runs `corral run --report FILE ARGS...`, checks the exit code, and
/// returns the report, validated against the schema.
fn report_of(s: &Scratch, args: &[&str], code: i32) -> Value {
    let rp = report_path(s);
    let mut all = vec!["run", "--report", &rp];
    all.extend_from_slice(args);
    let d = run(corral(s, all), 10 * SEC);
    d.assert_code(code);
    let v = read_report(&s.path("report.json"));
    assert_schema(&v);
    v
}

#[test]
fn the_schema_rejects_what_it_must() {
    let s = Scratch::new();
    let good = report_of(&s, &["--", "true"], 0);
    let mut extra = good.clone();
    extra["surprise"] = Value::Bool(true);
    assert!(!report_schema().is_valid(&extra), "unknown field accepted");
    let mut missing = good.clone();
    missing.as_object_mut().unwrap().remove("corral_exit");
    assert!(
        !report_schema().is_valid(&missing),
        "missing field accepted"
    );
    let mut wrong = good.clone();
    wrong["outcome"] = "finished".into();
    assert!(
        !report_schema().is_valid(&wrong),
        "unknown outcome accepted"
    );
    let mut wrong = good;
    wrong["signals_sent"] = serde_json::json!(["SIGTERM"]);
    assert!(
        !report_schema().is_valid(&wrong),
        "signal names in signals_sent accepted"
    );
}

#[test]
fn clean_exit_report_follows_the_schema() {
    let s = Scratch::new();
    let v = report_of(&s, &["--", "sh", "-c", "echo out; echo err >&2; exit 0"], 0);
    assert_eq!(v["outcome"], "exited");
    assert_eq!(v["exit_code"], 0);
    assert_eq!(v["error"], Value::Null);
    assert_eq!(v["corral_exit"], 0);
    assert!(v["timings_ms"]["spawn"].is_number(), "{v}");
}

#[test]
fn timeout_report_follows_the_schema() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let v = report_of(
        &s,
        &["-t", "300ms", "--", "sh", "-c", r#"exec "$H" sleeper"#],
        124,
    );
    assert_eq!(v["outcome"], "timed_out");
    assert_eq!(v["error"], "timed out");
    assert_eq!(v["signal"], 9, "{v}");
    assert_eq!(v["signal_name"], "SIGKILL", "{v}");
    assert_eq!(v["signals_sent"], serde_json::json!([9]), "{v}");
    assert_dead(&w, &["sleeper"]);
}

#[test]
fn output_held_report_follows_the_schema() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let script = format!(r#""$H" gc & {}exit 0"#, wait_for("gc"));
    let v = report_of(
        &s,
        &["--wait-delay", "200ms", "--", "sh", "-c", &script],
        123,
    );
    assert_eq!(v["outcome"], "output_held");
    assert_eq!(v["exit_code"], 0);
    assert!(v["error"].is_string(), "{v}");
    assert_eq!(v["output"]["stdout"], "relayed", "{v}");
    assert_dead(&w, &["gc"]);
}

#[test]
fn spawn_failure_report_follows_the_schema() {
    let s = Scratch::new();
    let v = report_of(&s, &["--", "/nonexistent/corral-test-program"], 127);
    assert_eq!(v["outcome"], "spawn_failed");
    assert_eq!(v["pid"], Value::Null);
    assert_eq!(v["timings_ms"], Value::Null);
    assert!(v["error"].as_str().unwrap().contains("cannot run"), "{v}");
}

#[test]
fn batch_runs_embed_the_same_report() {
    let s = Scratch::new();
    let m = s.path("batch.toml");
    std::fs::write(
        &m,
        "[[task]]\nname = \"ok\"\nrun = [\"true\"]\n\n\
         [[task]]\nname = \"missing\"\nrun = [\"/nonexistent/corral-test-program\"]\n",
    )
    .unwrap();
    let rp = report_path(&s);
    let d = run(
        corral(&s, ["batch", m.to_str().unwrap(), "--report", &rp]),
        20 * SEC,
    );
    d.assert_code(2);
    let text = std::fs::read_to_string(s.path("report.json")).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    let runs = v["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 2, "{v}");
    for r in runs {
        // Every field of the report is there (a missing one fails the
        // schema's `required`), next to the batch's own.
        assert_schema(&report_fields(r));
    }
}
