//! End-to-end tests of `corral batch`: classification, concurrency bounds,
//! fail-fast, Ctrl-C, malformed manifests, a thousand runs, and the JSON and
//! JUnit reports. Every long-lived process is a testkit helper (`"$H"
//! NAME`) pinned by a Watch created before corral runs, so each one's fate
//! is checked through its pidfd, and nothing is ever killed by name.

// Linux only: the harness (tests/common) pins helpers by pidfd and reads /proc.
#![cfg(target_os = "linux")]

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use corral_testkit::{assert_between, Scratch, Watch};
use rustix::process::{kill_process, Pid, Signal};
use serde_json::Value;

use common::*;

const SEC: Duration = Duration::from_secs(1);

fn write_manifest(s: &Scratch, text: &str) -> String {
    let p = s.path("batch.toml");
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_owned()
}

fn path_str(s: &Scratch, name: &str) -> String {
    s.path(name).to_str().unwrap().to_owned()
}

fn read_json(s: &Scratch, name: &str) -> Value {
    let text = std::fs::read_to_string(s.path(name)).unwrap_or_else(|e| panic!("no {name}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("bad JSON in {name}: {e}\n{text}"))
}

/// The runs of a report by `task#run`, each checked like a `corral run`
/// report (same fields, same rules).
fn runs_by_name(v: &Value) -> HashMap<String, Value> {
    v["runs"]
        .as_array()
        .unwrap_or_else(|| panic!("no runs in {v}"))
        .iter()
        .map(|r| {
            check_report(r);
            let status = r["status"].as_str().expect("status");
            assert!(
                ["passed", "failed", "error"].contains(&status),
                "status {status} in {r}"
            );
            (
                format!("{}#{}", r["task"].as_str().unwrap(), r["run"]),
                r.clone(),
            )
        })
        .collect()
}

/// A TOML literal string holding `s` (no `'''` inside).
fn lit(s: &str) -> String {
    assert!(!s.contains("'''"));
    format!("'''{s}'''")
}

const RUN_END_0: &str = r#"echo '{"type":"run_end","exitCode":0}'; "#;
const RUN_END_1: &str = r#"echo '{"type":"run_end","exitCode":1}'; "#;

#[test]
fn mixed_manifest_classifies_every_run_and_decides_every_descendant() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let ev = r#"result_event = { type = "run_end", field = "exitCode" }"#;
    let manifest = format!(
        r#"
[defaults]
# Generous: only the two tasks that hang are meant to time out (a tight
# default made a held-output run time out under load, its root exiting
# at 694 ms).
timeout = "20s"
wait_delay = "300ms"

[[task]]
name = "pass"
run = ["true"]

[[task]]
name = "fail"
shell = "echo to-stderr >&2; exit 3"

[[task]]
name = "exit-3-expected"
shell = "exit 3"
expect_exit = 3

[[task]]
name = "timeout"
timeout = "700ms"
shell = {timeout}

[[task]]
name = "held"
shell = {held}

[[task]]
name = "detached"
shell = {detached}

[[task]]
name = "env-cwd"
cwd = "sub"
env = {{ GREETING = "hi" }}
shell = {env_cwd}

[[task]]
name = "not-found"
run = ["/nonexistent/program"]

[[task]]
name = "ev-pass"
shell = {ev_pass}
{ev}

[[task]]
name = "ev-then-hang"
timeout = "700ms"
shell = {ev_hang}
{ev}

[[task]]
name = "ev-then-holder"
shell = {ev_holder}
{ev}

[[task]]
name = "ev-fail"
shell = {ev_fail}
{ev}

[[task]]
name = "ev-missing"
shell = "echo no event here; echo '{{\"type\":\"progress\"}}'"
{ev}

[[task]]
name = "ev-zero-exit-1"
shell = {ev_zero_exit_1}
{ev}
"#,
        timeout = lit(r#"exec "$H" hang"#),
        held = lit(&format!(r#""$H" holder & {}exit 0"#, wait_for("holder"))),
        detached = lit(&format!(
            r#""$H" daemon >/dev/null 2>&1 & {}exit 0"#,
            wait_for("daemon")
        )),
        ev_pass = lit(RUN_END_0),
        ev_hang = lit(&format!(r#"{RUN_END_0}exec "$H" ev_hang"#)),
        ev_holder = lit(&format!(
            r#"{RUN_END_0}"$H" ev_holder & {}exit 0"#,
            wait_for("ev_holder")
        )),
        ev_fail = lit(&format!("{RUN_END_1}exit 1")),
        ev_zero_exit_1 = lit(&format!("{RUN_END_0}exit 1")),
        env_cwd = lit(
            r#"test "${PWD##*/}" = sub && test "$GREETING" = hi && test "$CORRAL_TASK" = env-cwd && test "$CORRAL_RUN" = 0"#
        ),
    );
    // `cwd` is relative to the manifest's directory (the scratch).
    std::fs::create_dir(s.path("sub")).unwrap();
    let m = write_manifest(&s, &manifest);
    let (rp, jp) = (path_str(&s, "report.json"), path_str(&s, "junit.xml"));
    let d = run(
        corral(
            &s,
            ["batch", &m, "--jobs", "14", "--report", &rp, "--junit", &jp],
        ),
        8 * SEC,
    );
    d.assert_code(2);
    // Everything ran at once: the slowest is a 700 ms timeout.
    assert_between(d.elapsed(), ms(600), 5 * SEC);

    let v = read_json(&s, "report.json");
    let runs = runs_by_name(&v);
    assert_eq!(runs.len(), 14, "{v}");
    let want = [
        ("pass#0", "passed", "exited"),
        ("fail#0", "failed", "exited"),
        ("exit-3-expected#0", "passed", "exited"),
        ("timeout#0", "error", "timed_out"),
        ("held#0", "error", "output_held"),
        ("detached#0", "passed", "exited"),
        ("ev-pass#0", "passed", "exited"),
        ("ev-then-hang#0", "error", "timed_out"),
        ("ev-then-holder#0", "error", "output_held"),
        ("ev-fail#0", "failed", "exited"),
        ("ev-missing#0", "error", "exited"),
        ("ev-zero-exit-1#0", "failed", "exited"),
        ("not-found#0", "error", "spawn_failed"),
        ("env-cwd#0", "passed", "exited"),
    ];
    for (name, status, outcome) in want {
        let r = &runs[name];
        assert_eq!(r["status"], status, "{name}: {r}");
        assert_eq!(r["outcome"], outcome, "{name}: {r}");
        if status == "passed" {
            assert!(r["reason"].is_null(), "{name}: {r}");
        } else {
            assert!(r["reason"].is_string(), "{name}: {r}");
        }
    }
    // A result event is read only after a clean lifecycle.
    for name in ["ev-then-hang#0", "ev-then-holder#0"] {
        assert!(runs[name]["result_event"].is_null(), "{name}");
        assert!(runs[name]["result_code"].is_null(), "{name}");
        assert!(
            runs[name]["stdout_tail"]
                .as_str()
                .unwrap()
                .contains("run_end"),
            "the event was printed, and ignored: {}",
            runs[name]
        );
        assert!(
            runs[name]["reason"]
                .as_str()
                .unwrap()
                .contains("event was not read"),
            "{}",
            runs[name]
        );
    }
    assert_eq!(runs["ev-pass#0"]["result_code"], 0);
    assert_eq!(runs["ev-pass#0"]["result_event"]["type"], "run_end");
    assert_eq!(runs["ev-fail#0"]["result_code"], 1);
    assert_eq!(runs["ev-zero-exit-1#0"]["result_code"], 0);
    assert!(runs["ev-missing#0"]["reason"]
        .as_str()
        .unwrap()
        .contains("no \"run_end\" event"));
    assert_eq!(runs["fail#0"]["exit_code"], 3);
    assert_eq!(runs["fail#0"]["stderr_tail"], "to-stderr\n");
    // The batch's own default: nothing outlives a run.
    assert_eq!(count(&runs["detached#0"], "killed"), 1);
    assert_eq!(count(&runs["detached#0"], "kept"), 0);

    assert_eq!(v["exit_code"], 2);
    assert_eq!(v["totals"]["runs"], 14);
    assert_eq!(v["totals"]["passed"], 5);
    assert_eq!(v["totals"]["failed"], 3);
    assert_eq!(v["totals"]["errors"], 6);
    assert_eq!(v["totals"]["not_run"], 0);
    let tasks = v["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 14);
    for t in tasks {
        assert_eq!(t["runs"], 1, "{t}");
        let w = &t["wall_ms"];
        assert!(w["min"].as_f64().unwrap() <= w["median"].as_f64().unwrap());
        assert!(w["median"].as_f64().unwrap() <= w["p95"].as_f64().unwrap());
    }

    // Every descendant is dead: the timeout's and the holders' killed by
    // their runs, the detached daemon by the kill-leftovers default.
    assert_dead(&w, &["hang", "holder", "daemon", "ev_hang", "ev_holder"]);
    assert_only(&w, &["hang", "holder", "daemon", "ev_hang", "ev_holder"]);

    // The summary table, and a line per finished run on a pipe.
    let out = d.out();
    assert!(out.starts_with("task "), "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("total") && l.contains(" 14 ")),
        "{out}"
    );
    let err = d.err();
    assert_eq!(
        err.lines().filter(|l| l.starts_with("PASS ")).count(),
        5,
        "{err}"
    );
    assert!(err.contains("FAIL  fail#0"), "{err}");
    assert!(err.contains("ERROR timeout#0"), "{err}");

    // JUnit: a suite per task, a case per run, failure vs error.
    let x = std::fs::read_to_string(s.path("junit.xml")).unwrap();
    assert!(x.starts_with("<?xml"), "{x}");
    assert!(
        x.contains(r#"tests="14""#) && x.contains(r#"failures="3""#) && x.contains(r#"errors="6""#),
        "{x}"
    );
    assert_eq!(x.matches("<testsuite ").count(), 14, "{x}");
    assert_eq!(x.matches("<testcase ").count(), 14, "{x}");
    assert_eq!(x.matches("<failure ").count(), 3, "{x}");
    assert_eq!(x.matches("<error ").count(), 6, "{x}");
    assert!(x.contains(r#"type="spawn_failed""#), "{x}");
    assert!(x.contains(r#"type="timed_out""#), "{x}");
    assert!(x.contains(r#"type="output_held""#), "{x}");
    assert!(x.contains("<system-err>to-stderr"), "{x}");
    assert_eq!(
        x.matches("<testsuite").count(),
        x.matches("</testsuite>").count() + 1
    );
    assert!(x.trim_end().ends_with("</testsuites>"), "{x}");
}

#[test]
fn jobs_really_bounds_concurrency() {
    let s = Scratch::new();
    let manifest = r#"
[[task]]
name = "overlap"
repeat = 10
shell = 'date +%s%N > "$CORRAL_TEST_DIR/start.$CORRAL_RUN"; sleep 0.15; date +%s%N > "$CORRAL_TEST_DIR/end.$CORRAL_RUN"'
"#;
    let m = write_manifest(&s, manifest);
    let rp = path_str(&s, "report.json");
    let d = run(
        corral(&s, ["batch", &m, "-j", "3", "--report", &rp]),
        10 * SEC,
    );
    d.assert_code(0);
    // 10 runs of 150 ms, 3 at a time: at least 4 rounds.
    assert!(d.elapsed() >= ms(600), "{:?}", d.elapsed());
    let read = |f: String| -> i128 {
        std::fs::read_to_string(s.path(&f))
            .unwrap_or_else(|e| panic!("{f}: {e}"))
            .trim()
            .parse()
            .unwrap()
    };
    let mut edges = Vec::new();
    for i in 0..10 {
        let (a, b) = (read(format!("start.{i}")), read(format!("end.{i}")));
        assert!(a < b);
        edges.push((a, 1));
        edges.push((b, -1));
    }
    edges.sort();
    let (mut now, mut max) = (0, 0);
    for (_, d) in edges {
        now += d;
        max = max.max(now);
    }
    assert!(max <= 3, "{max} runs overlapped with --jobs 3");
    assert!(
        max >= 2,
        "runs never overlapped: --jobs 3 ran them one by one"
    );
    let v = read_json(&s, "report.json");
    assert_eq!(v["totals"]["passed"], 10);
}

#[test]
fn fail_fast_stops_scheduling_and_cancels_what_runs() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let manifest = r#"
[[task]]
name = "slow"
shell = 'exec "$H" slow'

[[task]]
name = "bad"
shell = 'sleep 0.3; exit 1'

[[task]]
name = "later"
repeat = 5
shell = 'touch "$CORRAL_TEST_DIR/later.$CORRAL_RUN"'
"#;
    let m = write_manifest(&s, manifest);
    let (rp, jp) = (path_str(&s, "report.json"), path_str(&s, "junit.xml"));
    let d = run(
        corral(
            &s,
            [
                "batch",
                &m,
                "-j",
                "2",
                "--fail-fast",
                "--report",
                &rp,
                "--junit",
                &jp,
            ],
        ),
        6 * SEC,
    );
    // The run that stopped the batch failed: 1, whatever was running too.
    d.assert_code(1);
    assert_between(d.elapsed(), ms(300), 3 * SEC);
    assert_dead(&w, &["slow"]);
    for i in 0..5 {
        assert!(!s.path(&format!("later.{i}")).exists(), "later#{i} ran");
    }
    let v = read_json(&s, "report.json");
    let runs = runs_by_name(&v);
    assert_eq!(runs["bad#0"]["status"], "failed");
    assert_eq!(runs["slow#0"]["status"], "error");
    assert_eq!(runs["slow#0"]["outcome"], "cancelled");
    assert_eq!(runs["slow#0"]["cancelled_by_stop"], true);
    assert!(runs["slow#0"]["reason"]
        .as_str()
        .unwrap()
        .contains("--fail-fast after bad#0"));
    assert_eq!(v["totals"]["not_run"], 5);
    assert_eq!(v["not_run"].as_array().unwrap().len(), 5);
    assert!(v["stopped"].as_str().unwrap().contains("fail-fast"));
    let x = std::fs::read_to_string(s.path("junit.xml")).unwrap();
    assert_eq!(x.matches("<skipped").count(), 5, "{x}");
}

#[test]
fn ctrl_c_mid_run_kills_every_tree_and_still_reports() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let manifest = r#"
[defaults]
grace = "300ms"

[[task]]
name = "sleeper"
repeat = 6
shell = '''"$H" "child$CORRAL_RUN" & exec "$H" "s$CORRAL_RUN"'''
"#;
    let m = write_manifest(&s, manifest);
    let (rp, jp) = (path_str(&s, "report.json"), path_str(&s, "junit.xml"));
    let r = start(
        corral(
            &s,
            ["batch", &m, "-j", "3", "--report", &rp, "--junit", &jp],
        ),
        Sink::Pipe,
        Sink::Pipe,
    );
    for n in ["s0", "s1", "s2", "child0", "child1", "child2"] {
        assert!(w.pid(n, FATE).is_some(), "{n} never started");
    }
    let sent = Instant::now();
    kill_process(Pid::from_raw(r.pid() as i32).unwrap(), Signal::INT).unwrap();
    let d = r.finish(6 * SEC);
    d.assert_code(2);
    // SIGINT is passed on as the first signal; the backgrounded children
    // ignore it (sh does that to asynchronous lists), so SIGKILL follows at
    // the end of the 300 ms grace.
    assert_between(sent.elapsed(), ms(250), 3 * SEC);
    assert_dead(&w, &["s0", "s1", "s2", "child0", "child1", "child2"]);
    assert_only(&w, &["s0", "s1", "s2", "child0", "child1", "child2"]);

    let v = read_json(&s, "report.json");
    let runs = runs_by_name(&v);
    assert_eq!(runs.len(), 3, "{v}");
    for r in runs.values() {
        assert_eq!(r["status"], "error", "{r}");
        assert_eq!(r["outcome"], "cancelled", "{r}");
        assert_eq!(r["received_signal"], 2, "{r}");
        assert_eq!(signals_sent(r), [2, 9], "SIGINT first, then SIGKILL: {r}");
    }
    assert_eq!(v["received_signal"], 2);
    assert_eq!(v["totals"]["not_run"], 3);
    assert_eq!(v["exit_code"], 2);
    let x = std::fs::read_to_string(s.path("junit.xml")).unwrap();
    assert_eq!(x.matches("<error ").count(), 3, "{x}");
    assert_eq!(x.matches("<skipped").count(), 3, "{x}");
    assert!(
        d.out().contains("stopped: corral received signal 2"),
        "{}",
        d.out()
    );
}

#[test]
fn malformed_manifests_exit_125_name_file_line_and_key_and_run_nothing() {
    let s = Scratch::new();
    let ran = r#"
[[task]]
name = "marker"
shell = 'touch "$CORRAL_TEST_DIR/ran"'
"#;
    let cases: &[(&str, &str, &str)] = &[
        (
            "[[task]]\nname = \"a\"\nrun = [\"true\"]\ntimout = \"1s\"\n",
            ":4:",
            "task[1].timout",
        ),
        (
            "[[task]]\nname = \"a\"\nrun = [\"true\"]\ntimeout = \"ten seconds\"\n",
            ":4:",
            "task[1].timeout",
        ),
        ("[[task]]\nname = \"a\"\n", ":2:", "task[1].run"),
        (
            "[[task]]\nname = \"a\"\nrun = [\"true\"]\nshell = \"true\"\n",
            ":4:",
            "task[1].shell",
        ),
        (
            "[[task]]\nname = \"a\"\nrun = [\"true\"]\nresult_event = { type = \"run_end\", fields = \"x\" }\n",
            ":4:",
            "task[1].result_event.fields",
        ),
        (
            "[[task]]\nname = \"a\"\nrun = [\"true\"]\nsandbox = true\nnetwork = \"bogus\"\n",
            ":5:",
            "task[1].network",
        ),
        (
            "[[task]]\nname = \"a\"\nrun = [\"true\"]\nsandbox = true\nallow_write = [\"missing\"]\n",
            ":5:",
            "task[1].allow_write[0]",
        ),
        (
            "[[task]]\nname = \"a\"\nrun = [\"true\"]\ndeny_read = [\"/\"]\n",
            ":4:",
            "task[1].deny_read",
        ),
    ];
    for (bad, line, key) in cases {
        // The good task first: a manifest is checked whole before anything
        // runs. Its lines come before the bad task's: shift the number.
        let text = format!("{}{bad}", ran.trim_start());
        let shift = ran.trim_start().lines().count();
        let m = write_manifest(&s, &text);
        let d = run(corral(&s, ["batch", &m]), 5 * SEC);
        d.assert_code(125);
        let err = d.err();
        let n: usize = line.trim_matches(':').parse().unwrap();
        let want = format!("{m}:{}:", n + shift);
        assert!(err.contains(&want), "want {want} in: {err}");
        assert!(err.contains(&format!("`{key}`")), "want {key} in: {err}");
        assert!(!s.path("ran").exists(), "a task ran despite: {err}");
    }
    let m = write_manifest(&s, ran);
    for args in [
        vec!["batch", m.as_str(), "--jobs", "0"],
        vec!["batch", m.as_str(), "--jobs", "x"],
        vec!["batch", m.as_str(), "--report", "/nonexistent/dir/r.json"],
        vec!["batch", "/nonexistent/manifest.toml"],
    ] {
        let d = run(corral(&s, &args), 5 * SEC);
        d.assert_code(125);
        assert!(!s.path("ran").exists(), "a task ran for {args:?}");
    }
}

/// Threads and open fds of a process, from /proc.
fn threads_and_fds(pid: u32) -> Option<(usize, usize)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let threads = status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))?
        .trim()
        .parse()
        .ok()?;
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count();
    Some((threads, fds))
}

#[test]
fn a_thousand_short_tasks_with_64_jobs_cost_a_constant_number_of_threads() {
    let s = Scratch::new();
    let m = write_manifest(
        &s,
        "[[task]]\nname = \"t\"\nrun = [\"true\"]\nrepeat = 1000\n",
    );
    let rp = path_str(&s, "report.json");
    let r = start(
        corral(&s, ["batch", &m, "--jobs", "64", "--report", &rp]),
        Sink::Pipe,
        Sink::Pipe,
    );
    let pid = r.pid();
    let (mut max_threads, mut max_fds) = (0, 0);
    let until = Instant::now() + 60 * SEC;
    while Instant::now() < until {
        match threads_and_fds(pid) {
            Some((t, f)) => {
                max_threads = max_threads.max(t);
                max_fds = max_fds.max(f);
            }
            None => break,
        }
        // A zombie has 0 fds and 1 thread; stop when it exits.
        std::thread::sleep(ms(20));
        if std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|st| st.contains(") Z "))
        {
            break;
        }
    }
    let d = r.finish(60 * SEC);
    d.assert_code(0);
    // main + signal thread + the one reactor thread that awaits every run
    // (+ a little slack): nothing per job. That 64 run at once is proven by
    // `jobs_really_bounds_concurrency` and by the fd count below.
    assert!(max_threads <= 6, "{max_threads} threads");
    assert!(max_fds > 64, "never ran in parallel: at most {max_fds} fds");
    assert!(max_fds < 1024, "{max_fds} fds");
    let v = read_json(&s, "report.json");
    assert_eq!(v["totals"]["runs"], 1000);
    assert_eq!(v["totals"]["passed"], 1000);
    eprintln!(
        "1000 runs with --jobs 64: {:?}, at most {max_threads} threads and {max_fds} fds",
        d.elapsed()
    );
}

#[test]
fn the_example_manifest_does_what_its_comments_say() {
    let s = Scratch::new();
    let m = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/batch.toml");
    let rp = path_str(&s, "report.json");
    let d = run(
        corral(&s, ["batch", m, "-j", "11", "--report", &rp]),
        10 * SEC,
    );
    d.assert_code(2);
    let v = read_json(&s, "report.json");
    assert_eq!(v["totals"]["runs"], 11, "{}", v["totals"]);
    assert_eq!(v["totals"]["passed"], 4, "{}", v["totals"]);
    assert_eq!(v["totals"]["failed"], 3, "{}", v["totals"]);
    assert_eq!(v["totals"]["errors"], 4, "{}", v["totals"]);
    let runs = runs_by_name(&v);
    for (name, status) in [
        ("build#0", "passed"),
        ("flaky#0", "passed"),
        ("flaky#1", "failed"),
        ("flaky#2", "passed"),
        ("agent-ok#0", "passed"),
        ("unit-test#0", "failed"),
        ("agent-says-no#0", "failed"),
        ("hangs#0", "error"),
        ("daemon-holds-output#0", "error"),
        ("agent-ok-then-hangs#0", "error"),
        ("agent-silent#0", "error"),
    ] {
        assert_eq!(runs[name]["status"], status, "{name}: {}", runs[name]);
    }
    // The benchmark example: 2 tasks of 2 warmups and 10 runs each.
    let b = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/bench.toml");
    let l = run(corral(&s, ["batch", b, "--list"]), 5 * SEC);
    l.assert_code(0);
    assert_eq!(l.out().lines().count(), 24, "{}", l.out());
    assert_eq!(
        l.out().lines().filter(|l| l.ends_with(" warmup")).count(),
        4
    );
}

// ---- Shards, merging, retries, filters, events ----

/// `task#run` -> (status, outcome) of a report's runs.
fn verdicts(v: &Value) -> std::collections::BTreeMap<String, (String, String)> {
    runs_by_name(v)
        .into_iter()
        .map(|(k, r)| {
            (
                k,
                (
                    r["status"].as_str().unwrap().to_owned(),
                    r["outcome"].as_str().unwrap().to_owned(),
                ),
            )
        })
        .collect()
}

/// A manifest with passes, failures, errors and repeats that do not divide
/// evenly by 3.
const SHARDED: &str = r#"
[defaults]
timeout = "2s"

[[task]]
name = "unit-a"
run = ["true"]
repeat = 4

[[task]]
name = "unit-b"
shell = "exit 2"
repeat = 2

[[task]]
name = "integ"
shell = 'echo "run $CORRAL_RUN"'
repeat = 3

[[task]]
name = "missing"
run = ["/nonexistent/program"]

[[task]]
name = "expect-3"
shell = "exit 3"
expect_exit = 3
repeat = 2
"#;

#[test]
fn three_shards_merged_equal_the_unsharded_run() {
    let s = Scratch::new();
    let m = write_manifest(&s, SHARDED);
    let whole = path_str(&s, "whole.json");
    let d = run(
        corral(&s, ["batch", &m, "-j", "4", "--report", &whole]),
        10 * SEC,
    );
    d.assert_code(2);
    let mut shard_files = Vec::new();
    let mut all_listed = Vec::new();
    for k in 1..=3u32 {
        let rp = path_str(&s, &format!("shard{k}.json"));
        // Shard 2 takes its index from the environment, 0-based, as a
        // Kubernetes Indexed Job gives it.
        let spec = if k == 2 {
            "env:JOB_COMPLETION_INDEX/3".to_owned()
        } else {
            format!("{k}/3")
        };
        let mut c = corral(
            &s,
            [
                "batch",
                &m,
                "-j",
                "4",
                "--partition",
                &spec,
                "--report",
                &rp,
            ],
        );
        c.env("JOB_COMPLETION_INDEX", (k - 1).to_string());
        let d = run(c, 10 * SEC);
        assert!([0, 1, 2].contains(&d.code()), "{}", d.err());
        let mut c = corral(&s, ["batch", &m, "--list", "--partition", &spec]);
        c.env("JOB_COMPLETION_INDEX", (k - 1).to_string());
        let l = run(c, 5 * SEC);
        l.assert_code(0);
        for line in l.out().lines() {
            let (name, shard) = line.split_once(' ').unwrap();
            assert_eq!(shard, format!("{k}/3"), "{line}");
            all_listed.push(name.to_owned());
        }
        let v = read_json(&s, &format!("shard{k}.json"));
        assert_eq!(v["partition"]["index"], k);
        assert_eq!(v["partition"]["count"], 3);
        // Round-robin over the 12 runs: 4 each.
        assert_eq!(v["runs"].as_array().unwrap().len(), 4, "shard {k}: {v}");
        for r in v["runs"].as_array().unwrap() {
            assert_eq!(r["shard"], k, "{r}");
        }
        shard_files.push(rp);
    }
    // --list shows the same runs, disjoint, covering the manifest.
    all_listed.sort();
    let before = all_listed.len();
    all_listed.dedup();
    assert_eq!(before, all_listed.len(), "a run listed in two shards");
    assert_eq!(all_listed.len(), 12, "{all_listed:?}");

    let (mp, jp, md) = (
        path_str(&s, "merged.json"),
        path_str(&s, "merged.xml"),
        path_str(&s, "merged.md"),
    );
    let mut args = vec![
        "merge",
        "--report",
        &mp,
        "--junit",
        &jp,
        "--export-markdown",
        &md,
    ];
    // Any order of the shards.
    args.extend([&shard_files[2], &shard_files[0], &shard_files[1]].map(String::as_str));
    let d = run(corral(&s, &args), 5 * SEC);
    // Exits as the whole batch did.
    d.assert_code(2);
    let whole_v = read_json(&s, "whole.json");
    let merged = read_json(&s, "merged.json");
    assert_eq!(verdicts(&merged), verdicts(&whole_v));
    assert_eq!(merged["totals"], whole_v["totals"], "{}", merged["totals"]);
    assert_eq!(merged["exit_code"], whole_v["exit_code"]);
    assert_eq!(
        merged["manifest_fingerprint"],
        whole_v["manifest_fingerprint"]
    );
    assert!(merged["partition"].is_null());
    assert_eq!(merged["merged_from"].as_array().unwrap().len(), 3);
    // The table is recomputed from every run: the runs and the order.
    let tasks: Vec<(&str, u64)> = merged["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["name"].as_str().unwrap(), t["runs"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        tasks,
        [
            ("unit-a", 4),
            ("unit-b", 2),
            ("integ", 3),
            ("missing", 1),
            ("expect-3", 2)
        ]
    );
    let ua = &merged["tasks"][0]["wall_ms"];
    for k in ["min", "median", "p95", "max", "mean", "stddev"] {
        assert!(ua[k].is_f64(), "{k} in {ua}");
    }
    let x = std::fs::read_to_string(s.path("merged.xml")).unwrap();
    assert_eq!(x.matches("<testcase ").count(), 12, "{x}");
    assert_eq!(x.matches("<failure ").count(), 2, "{x}");
    assert_eq!(x.matches("<error ").count(), 1, "{x}");
    let mdt = std::fs::read_to_string(s.path("merged.md")).unwrap();
    assert!(mdt.starts_with("| task |"), "{mdt}");
    assert_eq!(mdt.lines().count(), 2 + 5, "{mdt}");
    assert!(mdt.contains("| `unit-a` | 4 | 4 | 0 | 0 | 0 |"), "{mdt}");
}

#[test]
fn merge_rejects_reports_that_do_not_fit_together() {
    let s = Scratch::new();
    let m = write_manifest(&s, SHARDED);
    let other = s.path("other.toml");
    std::fs::write(&other, SHARDED.replace("repeat = 4", "repeat = 5")).unwrap();
    let other = other.to_str().unwrap().to_owned();
    for (k, man, name) in [(1, &m, "a1"), (2, &m, "a2"), (2, &other, "b2")] {
        let rp = path_str(&s, &format!("{name}.json"));
        let d = run(
            corral(
                &s,
                [
                    "batch",
                    man,
                    "--partition",
                    &format!("{k}/2"),
                    "--report",
                    &rp,
                ],
            ),
            10 * SEC,
        );
        assert!([0, 1, 2].contains(&d.code()), "{}", d.err());
    }
    let whole = path_str(&s, "whole.json");
    run(corral(&s, ["batch", &m, "--report", &whole]), 10 * SEC).assert_code(2);
    let filtered = path_str(&s, "f2.json");
    let d = run(
        corral(
            &s,
            [
                "batch",
                &m,
                "--partition",
                "2/2",
                "--task",
                "unit-*",
                "--report",
                &filtered,
            ],
        ),
        10 * SEC,
    );
    d.assert_code(1);
    let f = |n: &str| path_str(&s, &format!("{n}.json"));
    // A run moved into the other shard's report: a duplicate, and a run in
    // the wrong shard.
    let mut a1 = read_json(&s, "a1.json");
    let a2 = read_json(&s, "a2.json");
    a1["runs"]
        .as_array_mut()
        .unwrap()
        .push(a2["runs"][0].clone());
    std::fs::write(s.path("a1dup.json"), a1.to_string()).unwrap();
    // A run dropped.
    let mut a2m = a2.clone();
    let dropped = a2m["runs"].as_array_mut().unwrap().remove(1);
    let dropped_name = format!("{}#{}", dropped["task"].as_str().unwrap(), dropped["run"]);
    std::fs::write(s.path("a2miss.json"), a2m.to_string()).unwrap();
    // Another shard's run, relabelled as this shard's: a duplicate.
    let mut a2d = a2.clone();
    let mut stolen = read_json(&s, "a1.json")["runs"][0].clone();
    stolen["shard"] = 2.into();
    a2d["runs"].as_array_mut().unwrap().push(stolen);
    std::fs::write(s.path("a2dup.json"), a2d.to_string()).unwrap();
    // The same run twice in one shard's report.
    let mut a2twice = a2.clone();
    let again = a2["runs"][0].clone();
    let again_name = format!("{}#{}", again["task"].as_str().unwrap(), again["run"]);
    a2twice["runs"].as_array_mut().unwrap().push(again);
    std::fs::write(s.path("a2twice.json"), a2twice.to_string()).unwrap();
    std::fs::write(s.path("junk.json"), "{\"not\": \"a report\"}").unwrap();

    let cases: Vec<(Vec<String>, String)> = vec![
        (vec![f("a1"), f("b2")], "different manifest".into()),
        (vec![f("a1")], "shard 2/2 is missing".into()),
        (vec![f("a1"), f("f2")], "--task filters".into()),
        (vec![f("a1"), f("a2"), f("a2")], "given twice".into()),
        (vec![f("a1"), f("whole")], "not a shard".into()),
        (vec![f("a1dup"), f("a2")], "belongs to shard 2/2".into()),
        (
            vec![f("a1"), f("a2miss")],
            format!("run {dropped_name} (shard 2/2) is missing"),
        ),
        (vec![f("a1"), f("a2dup")], "belongs to shard 1/2".into()),
        (
            vec![f("a1"), f("a2twice")],
            format!("run {again_name} appears twice"),
        ),
        (
            vec![f("a1"), f("junk")],
            "not a `corral batch --report` report".into(),
        ),
        (
            vec![f("a1"), path_str(&s, "nonexistent.json")],
            "cannot read".into(),
        ),
    ];
    for (files, want) in cases {
        let mp = path_str(&s, "merged.json");
        let mut args = vec!["merge".to_owned(), "--report".into(), mp];
        args.extend(files.iter().cloned());
        let d = run(corral(&s, &args), 5 * SEC);
        d.assert_code(125);
        assert!(
            d.err().contains(&want),
            "want {want:?} for {files:?}: {}",
            d.err()
        );
        assert!(
            !s.path("merged.json").exists(),
            "written despite: {}",
            d.err()
        );
    }
    // The good pair merges, and a single unsharded report merges to itself.
    run(corral(&s, ["merge", &f("a1"), &f("a2")]), 5 * SEC).assert_code(2);
    run(corral(&s, ["merge", &f("whole")]), 5 * SEC).assert_code(2);
}

#[test]
fn partition_and_filter_usage_errors_exit_125_and_run_nothing() {
    let s = Scratch::new();
    let m = write_manifest(
        &s,
        "[[task]]\nname = \"marker\"\nshell = 'touch \"$CORRAL_TEST_DIR/ran\"'\n",
    );
    let cases: &[(&str, Option<&str>, &str)] = &[
        ("0/3", None, "from 1 to 3"),
        ("4/3", None, "from 1 to 3"),
        ("1/0", None, "at least 1"),
        ("x/3", None, "neither an integer"),
        ("3", None, "expected K/N"),
        ("1/x", None, "not a positive integer"),
        ("env:SHARD_IX/3", None, "SHARD_IX is not set"),
        ("env:SHARD_IX/3", Some("3"), "must be from 0 to 2"),
        ("env:SHARD_IX/3", Some("one"), "not a 0-based shard index"),
    ];
    for (spec, val, want) in cases {
        let mut c = corral(&s, ["batch", &m, "--partition", spec]);
        c.env_remove("SHARD_IX");
        if let Some(v) = val {
            c.env("SHARD_IX", v);
        }
        let d = run(c, 5 * SEC);
        d.assert_code(125);
        assert!(
            d.err().contains(want),
            "want {want:?} for {spec}: {}",
            d.err()
        );
        assert!(d.err().contains("--partition"), "{}", d.err());
        assert!(!s.path("ran").exists(), "ran for {spec}");
    }
    let d = run(corral(&s, ["batch", &m, "--task", "nope*"]), 5 * SEC);
    d.assert_code(125);
    assert!(d.err().contains("matches no task"), "{}", d.err());
    let d = run(
        corral(&s, ["batch", &m, "--events", "-", "--report", "-"]),
        5 * SEC,
    );
    d.assert_code(125);
    assert!(d.err().contains("both want stdout"), "{}", d.err());
    assert!(!s.path("ran").exists());
}

#[test]
fn task_filters_select_the_right_runs() {
    let s = Scratch::new();
    let m = write_manifest(
        &s,
        r#"
[[task]]
name = "unit-a"
shell = 'touch "$CORRAL_TEST_DIR/ran.$CORRAL_TASK.$CORRAL_RUN"'
repeat = 2
[[task]]
name = "unit-b"
shell = 'touch "$CORRAL_TEST_DIR/ran.$CORRAL_TASK.$CORRAL_RUN"'
[[task]]
name = "integ"
shell = 'touch "$CORRAL_TEST_DIR/ran.$CORRAL_TASK.$CORRAL_RUN"'
[[task]]
name = "lint"
shell = 'touch "$CORRAL_TEST_DIR/ran.$CORRAL_TASK.$CORRAL_RUN"'
"#,
    );
    let l = run(
        corral(
            &s,
            ["batch", &m, "--list", "--task", "unit-?", "--task", "lint"],
        ),
        5 * SEC,
    );
    l.assert_code(0);
    assert_eq!(
        l.out(),
        "unit-a#0 1/1\nunit-a#1 1/1\nunit-b#0 1/1\nlint#0 1/1\n"
    );
    assert!(std::fs::read_dir(s.dir()).unwrap().all(|e| !e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .starts_with("ran.")));
    let rp = path_str(&s, "r.json");
    let d = run(
        corral(
            &s,
            [
                "batch", &m, "--task", "*-a", "--task", "l*t", "--report", &rp,
            ],
        ),
        5 * SEC,
    );
    d.assert_code(0);
    let mut ran: Vec<String> = std::fs::read_dir(s.dir())
        .unwrap()
        .filter_map(|e| {
            let n = e.unwrap().file_name().to_string_lossy().into_owned();
            n.strip_prefix("ran.").map(str::to_owned)
        })
        .collect();
    ran.sort();
    assert_eq!(ran, ["lint.0", "unit-a.0", "unit-a.1"]);
    let v = read_json(&s, "r.json");
    assert_eq!(v["totals"]["runs"], 3);
    assert_eq!(v["task_filters"], serde_json::json!(["*-a", "l*t"]));
    let plan: Vec<&str> = v["plan"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["task"].as_str().unwrap())
        .collect();
    assert_eq!(plan, ["unit-a", "lint"]);
}

#[test]
fn a_flaky_task_passes_on_its_second_attempt_and_corral_failures_are_not_retried() {
    let s = Scratch::new();
    let m = write_manifest(
        &s,
        r#"
[defaults]
timeout = "400ms"

[[task]]
name = "flaky"
retries = 2
shell = 'echo "attempt $CORRAL_ATTEMPT"; if [ ! -e "$CORRAL_TEST_DIR/flaky.once" ]; then touch "$CORRAL_TEST_DIR/flaky.once"; exit 1; fi'

[[task]]
name = "hangs-once"
retries = 1
shell = 'if [ ! -e "$CORRAL_TEST_DIR/hang.once" ]; then touch "$CORRAL_TEST_DIR/hang.once"; exec sleep 5; fi'

[[task]]
name = "always-fails"
retries = 2
shell = 'echo "try $CORRAL_ATTEMPT" >> "$CORRAL_TEST_DIR/always.log"; exit 4'

[[task]]
name = "not-found"
retries = 3
run = ["/nonexistent/program"]

[[task]]
name = "no-cgroup-limit"
retries = 3
run = ["true"]
containment = "process-group"
memory_max = "64M"
"#,
    );
    let (rp, jp, ep) = (
        path_str(&s, "r.json"),
        path_str(&s, "j.xml"),
        path_str(&s, "events.jsonl"),
    );
    let d = run(
        corral(
            &s,
            [
                "batch", &m, "-j", "5", "--report", &rp, "--junit", &jp, "--events", &ep,
            ],
        ),
        10 * SEC,
    );
    d.assert_code(2);
    let v = read_json(&s, "r.json");
    let runs = runs_by_name(&v);
    let f = &runs["flaky#0"];
    assert_eq!(f["status"], "passed", "{f}");
    assert_eq!(f["flaky"], true, "{f}");
    assert_eq!(f["attempt"], 1, "{f}");
    assert_eq!(f["stdout_tail"], "attempt 1\n");
    let a = f["attempts"].as_array().unwrap();
    assert_eq!(a.len(), 1, "{f}");
    assert_eq!(a[0]["status"], "failed");
    assert_eq!(a[0]["exit_code"], 1);
    assert_eq!(a[0]["stdout_tail"], "attempt 0\n");
    // A timeout is the program's doing: retried.
    let h = &runs["hangs-once#0"];
    assert_eq!(
        (h["status"].as_str(), h["flaky"].as_bool()),
        (Some("passed"), Some(true))
    );
    assert_eq!(h["attempts"][0]["outcome"], "timed_out");
    // Failing every attempt: failed, with every attempt kept.
    let al = &runs["always-fails#0"];
    assert_eq!(al["status"], "failed");
    assert_eq!(al["flaky"], false);
    assert_eq!(al["attempts"].as_array().unwrap().len(), 2);
    assert_eq!(
        std::fs::read_to_string(s.path("always.log")).unwrap(),
        "try 0\ntry 1\ntry 2\n"
    );
    // Not retried: spawn and containment failures.
    for n in ["not-found#0", "no-cgroup-limit#0"] {
        assert_eq!(runs[n]["status"], "error", "{}", runs[n]);
        assert_eq!(
            runs[n]["attempts"].as_array().unwrap().len(),
            0,
            "{}",
            runs[n]
        );
    }
    assert_eq!(runs["not-found#0"]["outcome"], "spawn_failed");
    assert_eq!(runs["no-cgroup-limit#0"]["outcome"], "containment_failed");
    assert_eq!(v["totals"]["flaky"], 2);
    assert_eq!(v["totals"]["passed"], 2);
    assert_eq!(v["totals"]["failed"], 1);

    let x = std::fs::read_to_string(s.path("j.xml")).unwrap();
    assert_eq!(x.matches("<flakyFailure").count(), 1, "{x}");
    assert_eq!(x.matches("<flakyError").count(), 1, "{x}");
    assert_eq!(x.matches("<rerunFailure").count(), 2, "{x}");
    assert_eq!(x.matches("<failure").count(), 1, "{x}");

    // Events: every attempt starts and finishes; only the last is final.
    let ev: Vec<Value> = std::fs::read_to_string(s.path("events.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let of = |task: &str, what: &str| {
        ev.iter()
            .filter(|e| e["task"] == task && e["event"] == what)
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(of("always-fails", "started").len(), 3);
    let fin = of("always-fails", "finished");
    assert_eq!(fin.len(), 3);
    assert_eq!(
        fin.iter()
            .map(|e| e["will_retry"].as_bool().unwrap())
            .collect::<Vec<_>>(),
        [true, true, false]
    );
    for e in of("flaky", "finished") {
        check_report(&e);
    }
    assert_eq!(
        ev.iter()
            .filter(|e| e["event"] == "finished" && e["will_retry"] == false)
            .count(),
        5
    );
    // --retries overrides the tasks' own.
    std::fs::remove_file(s.path("always.log")).unwrap();
    let d = run(
        corral(
            &s,
            ["batch", &m, "--task", "always-fails", "--retries", "0"],
        ),
        5 * SEC,
    );
    d.assert_code(1);
    assert_eq!(
        std::fs::read_to_string(s.path("always.log")).unwrap(),
        "try 0\n"
    );
}

/// A sandboxed task whose sandbox cannot be enforced here (namespaces
/// denied, forced: a private loopback cannot be had): an error
/// (`sandbox_failed`), never retried, its command never run; the other
/// tasks run.
#[test]
fn an_unenforceable_sandbox_is_an_error_not_retried_and_runs_nothing() {
    let s = Scratch::new();
    let m = write_manifest(
        &s,
        r#"
[[task]]
name = "boxed"
retries = 3
sandbox = true
network = "loopback"
shell = 'touch "$CORRAL_TEST_DIR/boxed.ran"'

[[task]]
name = "free"
shell = 'touch "$CORRAL_TEST_DIR/free.ran"'
"#,
    );
    let rp = path_str(&s, "r.json");
    let mut c = corral(&s, ["batch", &m, "--report", &rp]);
    c.env("CORRAL_SANDBOX_NO_NAMESPACES", "1");
    let d = run(c, 10 * SEC);
    d.assert_code(2);
    let v = read_json(&s, "r.json");
    let runs = runs_by_name(&v);
    let b = &runs["boxed#0"];
    assert_eq!(b["status"], "error", "{b}");
    assert_eq!(b["outcome"], "sandbox_failed", "{b}");
    assert!(b["error"].as_str().unwrap().contains("sandbox"), "{b}");
    assert_eq!(b["attempts"].as_array().unwrap().len(), 0, "{b}");
    assert_eq!(runs["free#0"]["status"], "passed");
    assert!(!s.path("boxed.ran").exists(), "the sandboxed command ran");
    assert!(s.path("free.ran").exists());
}

#[test]
fn serial_runs_never_overlap_and_warmups_come_first_and_do_not_count() {
    let s = Scratch::new();
    let stamp = |tag: &str| {
        format!(
            r#"shell = 'date +%s%N > "$CORRAL_TEST_DIR/{tag}.$CORRAL_WARMUP.$CORRAL_RUN.start"; sleep 0.1; date +%s%N > "$CORRAL_TEST_DIR/{tag}.$CORRAL_WARMUP.$CORRAL_RUN.end"'"#
        )
    };
    let m = write_manifest(
        &s,
        &format!(
            "[[task]]\nname = \"par\"\nrepeat = 6\n{}\n\n[[task]]\nname = \"bench\"\nserial = true\nwarmup = 2\nrepeat = 3\n{}\n\n[[task]]\nname = \"par2\"\nrepeat = 4\n{}\n",
            stamp("par"),
            stamp("bench"),
            stamp("par2")
        ),
    );
    let rp = path_str(&s, "r.json");
    let d = run(
        corral(&s, ["batch", &m, "-j", "4", "--report", &rp]),
        15 * SEC,
    );
    d.assert_code(0);
    let read = |f: &str| -> i128 {
        std::fs::read_to_string(s.path(f))
            .unwrap_or_else(|e| panic!("{f}: {e}"))
            .trim()
            .parse()
            .unwrap()
    };
    let span = |tag: &str, w: u32, i: u32| {
        (
            read(&format!("{tag}.{w}.{i}.start")),
            read(&format!("{tag}.{w}.{i}.end")),
        )
    };
    let mut others = Vec::new();
    for i in 0..6 {
        others.push(span("par", 0, i));
    }
    for i in 0..4 {
        others.push(span("par2", 0, i));
    }
    let bench: Vec<(i128, i128)> = (0..3).map(|i| span("bench", 0, i)).collect();
    let warm: Vec<(i128, i128)> = (0..2).map(|i| span("bench", 1, i)).collect();
    let serial: Vec<(i128, i128)> = bench.iter().chain(&warm).copied().collect();
    for (a, b) in &serial {
        for (c, e) in others.iter().chain(serial.iter()) {
            if (a, b) == (c, e) {
                continue;
            }
            assert!(b <= c || e <= a, "serial run [{a},{b}] overlaps [{c},{e}]");
        }
    }
    // Other runs did overlap each other (so -j 4 was in force).
    let overlapping = others
        .iter()
        .enumerate()
        .any(|(i, (a, b))| others[i + 1..].iter().any(|(c, e)| a < e && c < b));
    assert!(overlapping, "the parallel runs never overlapped");
    // Warmups end before the first measured run starts.
    let last_warm = warm.iter().map(|w| w.1).max().unwrap();
    assert!(bench.iter().all(|b| b.0 >= last_warm));
    let v = read_json(&s, "r.json");
    assert_eq!(v["totals"]["runs"], 13);
    assert_eq!(v["totals"]["passed"], 13);
    let w = v["warmup_runs"].as_array().unwrap();
    assert_eq!(w.len(), 2);
    assert!(w
        .iter()
        .all(|r| r["warmup"] == true && r["task"] == "bench"));
    let b = v["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "bench")
        .unwrap();
    assert_eq!(b["runs"], 3);
    let wall = &b["wall_ms"];
    assert!(wall["mean"].as_f64().unwrap() >= 100.0, "{wall}");
    assert!(wall["stddev"].as_f64().unwrap() >= 0.0, "{wall}");
}

#[test]
fn output_dir_keeps_every_byte_while_reports_keep_head_and_tail() {
    let s = Scratch::new();
    let m = write_manifest(
        &s,
        r#"
[[task]]
name = "big/out"
shell = 'head -c 300000 /dev/zero | tr "\0" x; echo; echo err-line >&2'
[[task]]
name = "big_out"
shell = 'echo small'
"#,
    );
    let (rp, od) = (path_str(&s, "r.json"), path_str(&s, "out"));
    let d = run(
        corral(
            &s,
            [
                "batch",
                &m,
                "--keep-output",
                "1K",
                "--output-dir",
                &od,
                "--report",
                &rp,
            ],
        ),
        10 * SEC,
    );
    d.assert_code(0);
    let v = read_json(&s, "r.json");
    let runs = runs_by_name(&v);
    let r = &runs["big/out#0"];
    assert_eq!(r["stdout_bytes"], 300_001);
    assert!(
        r["stdout_tail"].as_str().unwrap().len() < 2048,
        "kept head and tail only"
    );
    let f = r["stdout_file"].as_str().unwrap();
    assert_eq!(std::fs::metadata(f).unwrap().len(), 300_001, "{f}");
    let e = r["stderr_file"].as_str().unwrap();
    assert_eq!(std::fs::read_to_string(e).unwrap(), "err-line\n");
    // Names are file-name safe and stay distinct when they sanitize alike.
    let other = runs["big_out#0"]["stdout_file"].as_str().unwrap();
    assert_ne!(f, other);
    assert_eq!(std::fs::read_to_string(other).unwrap(), "small\n");
    assert!(std::path::Path::new(f).starts_with(&od), "{f}");

    // A file that cannot be created: that run is an error of corral's (not
    // run, not retried); the others run.
    let m = write_manifest(
        &s,
        "[[task]]\nname = \"t\"\nretries = 2\nrepeat = 2\nshell = 'touch \"$CORRAL_TEST_DIR/ran.$CORRAL_RUN\"'\n",
    );
    std::fs::create_dir_all(s.path("out2/t#0.stdout")).unwrap();
    let od2 = path_str(&s, "out2");
    let d = run(
        corral(&s, ["batch", &m, "--output-dir", &od2, "--report", &rp]),
        10 * SEC,
    );
    d.assert_code(2);
    let v = read_json(&s, "r.json");
    let runs = runs_by_name(&v);
    assert_eq!(runs["t#0"]["status"], "error");
    assert!(runs["t#0"]["reason"]
        .as_str()
        .unwrap()
        .contains("cannot create"));
    assert_eq!(runs["t#0"]["attempts"].as_array().unwrap().len(), 0);
    assert!(!s.path("ran.0").exists());
    assert_eq!(runs["t#1"]["status"], "passed");
    assert!(s.path("ran.1").exists());
}

#[test]
fn the_manifest_can_come_from_standard_input() {
    let s = Scratch::new();
    let mut c = corral(&s, ["batch", "-", "--report", "-", "--progress", "none"]);
    c.stdin(std::process::Stdio::piped());
    let mut r = start(c, Sink::Pipe, Sink::Pipe);
    {
        use std::io::Write;
        let mut stdin = r.child.stdin.take().unwrap();
        stdin
            .write_all(b"[[task]]\nname = \"from-stdin\"\nshell = 'echo ok; cat'\n")
            .unwrap();
    }
    let d = r.finish(5 * SEC);
    d.assert_code(0);
    let v: Value = serde_json::from_str(&d.out()).unwrap();
    // The runs' own stdin is the null device, not the manifest.
    assert_eq!(v["runs"][0]["stdout_tail"], "ok\n");
    assert_eq!(v["manifest"], "-");
}

#[corral_testkit::needs(limits)]
#[test]
fn per_task_limits_use_the_cgroup_tier() {
    let s = Scratch::new();
    let m = write_manifest(
        &s,
        r#"
[[task]]
name = "capped"
containment = "cgroup"
memory_max = "64M"
pids_max = 4
shell = 'for i in 1 2 3 4 5 6; do sleep 0.3 & done; wait'
"#,
    );
    let rp = path_str(&s, "r.json");
    let d = run(corral(&s, ["batch", &m, "--report", &rp]), 10 * SEC);
    let v = read_json(&s, "r.json");
    let r = &v["runs"][0];
    assert_eq!(r["containment"], "cgroup", "{r}");
    assert!(
        r["limits_hit"].as_array().unwrap().contains(&"pids".into()),
        "{r}"
    );
    assert!([0, 1, 2].contains(&d.code()));
}

#[test]
fn a_stop_while_a_serial_run_waits_for_the_queue_ends_at_once() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let m = write_manifest(
        &s,
        r#"
[[task]]
name = "par"
repeat = 2
shell = 'exec "$H" "p$CORRAL_RUN"'

[[task]]
name = "ser"
serial = true
shell = 'touch "$CORRAL_TEST_DIR/ser.ran"'
"#,
    );
    let rp = path_str(&s, "r.json");
    let r = start(
        corral(&s, ["batch", &m, "-j", "3", "--report", &rp]),
        Sink::Pipe,
        Sink::Pipe,
    );
    for n in ["p0", "p1"] {
        assert!(w.pid(n, FATE).is_some(), "{n} never started");
    }
    // The serial run waits for both to end; SIGTERM must not wait for it.
    let sent = Instant::now();
    kill_process(Pid::from_raw(r.pid() as i32).unwrap(), Signal::TERM).unwrap();
    let d = r.finish(6 * SEC);
    d.assert_code(2);
    assert_between(sent.elapsed(), ms(0), 3 * SEC);
    assert_dead(&w, &["p0", "p1"]);
    assert!(!s.path("ser.ran").exists());
    let v = read_json(&s, "r.json");
    assert_eq!(v["not_run"][0]["task"], "ser", "{v}");
    assert_eq!(v["totals"]["not_run"], 1);
}

/// `corral batch` with the keeper failing to start when `fail_keeper`
/// (the test seam `CORRAL_TEST_FAIL_KEEPER=1`, in corral's environment).
/// `round` is `$ROUND` in the runs' environment.
fn keeper_batch(
    s: &Scratch,
    manifest: &str,
    round: &str,
    fail_keeper: bool,
    extra: &[&str],
) -> Done {
    let (rp, jp) = (path_str(s, "r.json"), path_str(s, "j.xml"));
    let mut args = vec![
        "batch", manifest, "-j", "3", "--report", &rp, "--junit", &jp,
    ];
    args.extend_from_slice(extra);
    let mut c = corral(s, args);
    c.env("ROUND", round);
    if fail_keeper {
        c.env("CORRAL_TEST_FAIL_KEEPER", "1");
    }
    run(c, 20 * SEC)
}

/// Every run's report (JSON and JUnit) says whether it was crash-safe. A
/// run that requires crash safety (manifest key, `[defaults]`, or
/// `--require-crash-safety` for all) and cannot have it is a corral failure:
/// an error, `containment_failed`, never retried, and the command never
/// ran. A run that does not require it goes ahead, contained as usual.
#[test]
fn crash_safety_is_reported_per_run_and_a_required_one_is_refused_not_retried() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let m = write_manifest(
        &s,
        &format!(
            r#"
[defaults]
require_crash_safety = true
containment = "process-group"
retries = 2

[[task]]
name = "optional"
require_crash_safety = false
expect_exit = 1
shell = {optional}

[[task]]
name = "required"
shell = 'echo "$CORRAL_ATTEMPT" >> "$CORRAL_TEST_DIR/required.ran"'

[[task]]
name = "explicit"
require_crash_safety = true
shell = 'echo "$CORRAL_ATTEMPT" >> "$CORRAL_TEST_DIR/explicit.ran"'
"#,
            optional = lit(&format!(
                r#""$H" "bg$ROUND" >/dev/null 2>&1 & {}exit 1"#,
                wait_for("bg$ROUND")
            )),
        ),
    );
    let ran = |name: &str| std::fs::read_to_string(s.path(name)).unwrap_or_default();

    // The keeper cannot be started: only the run that does not require
    // crash safety runs.
    let d = keeper_batch(&s, &m, "1", true, &[]);
    d.assert_code(2);
    let v = read_json(&s, "r.json");
    let runs = runs_by_name(&v);
    let o = &runs["optional#0"];
    assert_eq!(o["status"], "passed", "{o}");
    assert_eq!(o["crash_safe"], false, "{o}");
    let note = o["crash_safety_note"].as_str().unwrap_or_default();
    assert!(note.contains("keeper"), "{o}");
    // Contained as usual: its leftover was killed when it exited 1.
    assert_dead(&w, &["bg1"]);
    for n in ["required#0", "explicit#0"] {
        let r = &runs[n];
        assert_eq!(r["status"], "error", "{r}");
        assert_eq!(r["outcome"], "containment_failed", "{r}");
        assert_eq!(r["corral_exit"], 125, "{r}");
        assert!(r["crash_safe"].is_null(), "did not start: {r}");
        let why = r["reason"].as_str().unwrap_or_default();
        assert!(why.contains("crash safety required"), "{r}");
        assert_eq!(r["attempts"].as_array().unwrap().len(), 0, "retried: {r}");
    }
    assert_eq!(ran("required.ran"), "", "a refused run ran");
    assert_eq!(ran("explicit.ran"), "", "a refused run ran");
    let x = std::fs::read_to_string(s.path("j.xml")).unwrap();
    assert!(
        x.contains(r#"<property name="crash_safe" value="false"/>"#),
        "{x}"
    );
    assert!(x.contains(r#"name="crash_safety_note""#), "{x}");
    assert_eq!(x.matches(r#"type="containment_failed""#).count(), 2, "{x}");
    assert!(d.out().contains("not crash-safe: 1 run(s)"), "{}", d.out());

    // --require-crash-safety requires it of every task, whatever the
    // manifest says: nothing runs.
    let d = keeper_batch(&s, &m, "2", true, &["--require-crash-safety"]);
    d.assert_code(2);
    let runs = runs_by_name(&read_json(&s, "r.json"));
    for r in runs.values() {
        assert_eq!(r["outcome"], "containment_failed", "{r}");
        assert_eq!(r["attempts"].as_array().unwrap().len(), 0, "retried: {r}");
    }
    assert!(w.pid("bg2", ms(500)).is_none(), "a refused run ran");
    assert_eq!(ran("required.ran") + &ran("explicit.ran"), "");

    // With a keeper: every run is crash-safe, the required ones run once.
    let d = keeper_batch(&s, &m, "3", false, &["--require-crash-safety"]);
    d.assert_code(0);
    let runs = runs_by_name(&read_json(&s, "r.json"));
    for r in runs.values() {
        assert_eq!(r["status"], "passed", "{r}");
        assert_eq!(r["crash_safe"], true, "{r}");
        assert!(r["crash_safety_note"].is_null(), "{r}");
    }
    assert_dead(&w, &["bg3"]);
    assert_eq!(
        (ran("required.ran"), ran("explicit.ran")),
        ("0\n".into(), "0\n".into())
    );
    let x = std::fs::read_to_string(s.path("j.xml")).unwrap();
    assert_eq!(
        x.matches(r#"<property name="crash_safe" value="true"/>"#)
            .count(),
        3,
        "{x}"
    );
    assert!(!d.out().contains("not crash-safe"), "{}", d.out());
}

/// The namespace's init, not the keeper, kills a PID-namespace tree when
/// corral dies: a task in that tier stays crash-safe (and runs under
/// `--require-crash-safety`) when the keeper cannot be started.
#[corral_testkit::needs(pidns)]
#[test]
fn a_pid_namespace_task_is_crash_safe_without_a_keeper() {
    let s = Scratch::new();
    let m = write_manifest(
        &s,
        r#"
[[task]]
name = "ns"
containment = "pid-namespace"
shell = 'echo "pid $$"'
"#,
    );
    let d = keeper_batch(&s, &m, "0", true, &["--require-crash-safety"]);
    d.assert_code(0);
    let runs = runs_by_name(&read_json(&s, "r.json"));
    let r = &runs["ns#0"];
    assert_eq!(r["containment"], "pid_namespace", "{r}");
    assert_eq!(r["crash_safe"], true, "{r}");
    // The command ran as pid 2, under the namespace's init.
    assert_eq!(r["stdout_tail"], "pid 2\n", "{r}");
}

/// Checks, as the last run of a batch (serial: nothing else runs), that the
/// batch process (the root's parent) has no zombie child left: it waits for
/// the earlier runs' orphans (50 ms sleeps) to be over, then looks for up
/// to 3 s; exit 1 naming the zombies otherwise.
const NO_ZOMBIE_CHILDREN: &str = r#"sleep 0.5; n=0
while :; do
  z=
  for t in /proc/$PPID/task/*/children; do
    for c in $(cat "$t"); do
      read -r l < /proc/$c/stat || continue
      case "$l" in *") Z "*) z="$z $c";; esac
    done
  done 2>/dev/null
  [ -z "$z" ] && exit 0
  n=$((n+1)); [ $n -ge 100 ] && { echo "zombie children of the batch:$z" >&2; exit 1; }
  sleep 0.03
done"#;

/// `containment = "subreaper"` in a batch: the batch becomes a child
/// subreaper for it (it was always `containment_failed`), its runs are
/// contained (a `setsid` escaper and a double-forked daemon are killed at
/// the end of the run, under the batch's default `leftovers = "kill"`),
/// and the orphans that other tiers' trees leave behind, re-parented to the
/// batch now, do not pile up as zombies: `setsid` grandchildren that
/// outlive their process-group run and exit later, and grandchildren
/// killed with their run.
fn subreaper_tasks_with_other_tiers(other: &[&str]) {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let mut manifest = format!(
        r#"
[defaults]
timeout = "20s"
wait_delay = "2s"

[[task]]
name = "sr-escapers"
containment = "subreaper"
repeat = 3
shell = {}
"#,
        lit(&format!(
            r#"setsid "$H" esc$CORRAL_RUN </dev/null >/dev/null 2>&1 &
               sh -c 'setsid "$H" dbl$CORRAL_RUN </dev/null >/dev/null 2>&1 & exit 0'
               {} {} exit 0"#,
            corral_testkit::ready("esc$CORRAL_RUN"),
            corral_testkit::ready("dbl$CORRAL_RUN")
        ))
    );
    for tier in other {
        manifest.push_str(&format!(
            r#"
[[task]]
name = "orphans-{tier}"
containment = "{tier}"
repeat = 10
shell = {}
"#,
            lit(r#"for i in 1 2 3 4; do setsid sh -c 'sleep 0.05' </dev/null >/dev/null 2>&1 & done; (sleep 0.05 &); (sleep 5 </dev/null >/dev/null 2>&1 &); exit 0"#)
        ));
    }
    manifest.push_str(&format!(
        r#"
[[task]]
name = "no-zombies"
serial = true
shell = {}
"#,
        lit(NO_ZOMBIE_CHILDREN)
    ));
    let m = write_manifest(&s, &manifest);
    let rp = path_str(&s, "report.json");
    let d = run(
        corral(&s, ["batch", &m, "-j", "4", "--report", &rp]),
        60 * SEC,
    );
    let v = read_json(&s, "report.json");
    let runs = runs_by_name(&v);
    for i in 0..3 {
        let r = &runs[&format!("sr-escapers#{i}")];
        assert_eq!(r["status"], "passed", "{r}");
        assert_eq!(r["containment"], "subreaper", "{r}");
        assert!(count(r, "killed") >= 2, "{r}");
        for n in [format!("esc{i}"), format!("dbl{i}")] {
            assert!(w.pid(&n, SEC).is_some(), "{n} never started");
            assert!(w.wait_dead(&n, 2 * SEC), "{n} escaped the subreaper tier");
        }
    }
    for tier in other {
        for i in 0..10 {
            let r = &runs[&format!("orphans-{tier}#{i}")];
            assert_eq!(r["status"], "passed", "{r}");
            assert_eq!(r["containment"], tier.replace('-', "_"), "{r}");
        }
    }
    let z = &runs["no-zombies#0"];
    assert_eq!(z["status"], "passed", "{z}");
    d.assert_code(0);
    s.assert_none_left();
}

#[test]
fn subreaper_tasks_are_contained_and_process_group_orphans_reaped() {
    subreaper_tasks_with_other_tiers(&["process-group"]);
}

#[corral_testkit::needs(cgroup)]
#[test]
fn subreaper_tasks_are_contained_and_process_group_and_cgroup_orphans_reaped() {
    subreaper_tasks_with_other_tiers(&["process-group", "cgroup"]);
}
