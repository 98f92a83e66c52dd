//! End-to-end tests of `corral batch`: classification, concurrency bounds,
//! fail-fast, Ctrl-C, malformed manifests, a thousand runs, and the JSON and
//! JUnit reports. Every long-lived process is a testkit helper (`"$H"
//! NAME`) pinned by a Watch created before corral runs, so each one's fate
//! is checked through its pidfd, and nothing is ever killed by name.

#![cfg(unix)]

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
timeout = "700ms"
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
}
