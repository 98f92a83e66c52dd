//! End-to-end tests of `corral run`: exit codes, the JSON report, output
//! relay, signal pass-through. Every process tree is made of testkit helpers
//! (`"$H" NAME`) pinned by a Watch created before corral runs.

// Linux only: the harness (tests/common) pins helpers by pidfd and reads /proc.
#![cfg(target_os = "linux")]

mod common;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::time::{Duration, Instant};

use corral_testkit::{assert_between, Scratch, Watch};
use rustix::process::{kill_process, Pid, Signal};

use common::*;
use corral::Mechanism;
use corral_testkit::scenario::{
    Count::AtLeast, Count::Exactly, Fate::Alive, Fate::AliveIn, Fate::Dead,
};
use serde_json::Value;

const SEC: Duration = Duration::from_secs(1);

// ---------------------------------------------------------------- exit codes

#[test]
fn exit_0_after_clean_exit() {
    let s = Scratch::new();
    let rp = report_path(&s);
    let d = run(corral(&s, ["run", "--report", &rp, "--", "true"]), 5 * SEC);
    d.assert_code(0);
    let v = read_report(s.path("report.json").as_path());
    assert_eq!(v["outcome"], "exited");
    assert_eq!(v["exit_code"], 0);
    assert_eq!(count(&v, "killed"), 0);
    assert_eq!(count(&v, "kept"), 0);
}

#[test]
fn own_exit_code_is_passed_through() {
    run_row(&Row {
        tree: "exit 3".into(),
        code: Some(3),
        fields: vec![
            ("outcome", "exited".into()),
            ("exit_code", 3.into()),
            ("signal", Value::Null),
        ],
        ..Row::default()
    });
}

#[test]
fn program_without_double_dash_and_its_own_options() {
    // Options after PROGRAM belong to the program, with or without `--`.
    let s = Scratch::new();
    let d = run(corral(&s, ["run", "sh", "-c", "exit 4"]), 5 * SEC);
    d.assert_code(4);
    let d = run(
        corral(
            &s,
            [
                "run",
                "--",
                "sh",
                "-c",
                r#"printf '%s|' "$@""#,
                "sh",
                "-t",
                "1x",
                "--report",
                "-",
            ],
        ),
        5 * SEC,
    );
    d.assert_code(0);
    assert_eq!(d.out(), "-t|1x|--report|-|");
}

#[test]
fn timeout_exits_124_and_kills_the_tree() {
    run_row(&Row {
        opts: opts(&["-t", "500ms"]),
        tree: format!(r#"{ROOT}"$H" a & {}"$H" b"#, wait_for("a")),
        code: Some(124),
        bound: Some((ms(500), 4 * SEC)),
        fields: vec![("outcome", "timed_out".into())],
        // a and b killed (the root is not counted); no grace: SIGKILL at once.
        killed: Some(Exactly(2)),
        signals: Some(&[9]),
        fates: &[("root", Dead), ("a", Dead), ("b", Dead)],
        only: true,
        ..Row::default()
    });
}

#[test]
fn bare_number_timeout_is_seconds() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let d = run(
        corral(
            &s,
            [
                "run",
                "-t",
                "0.5",
                "--",
                "sh",
                "-c",
                r#"exec "$H" sl sleep 5"#,
            ],
        ),
        // A hang guard, not the promise (checked below): the 5 s it was
        // ran out at a load of 24 on 2 cores.
        10 * SEC,
    );
    // 124 tells the timeout from the command's own end at 5 s.
    d.assert_code(124);
    assert_between(d.elapsed(), ms(500), 8 * SEC);
    assert_dead(&w, &["sl"]);
}

#[test]
fn long_duration_syntax_parses() {
    let s = Scratch::new();
    for t in ["1m30s", "90", "2h", "--timeout=1m30s"] {
        let args: Vec<&str> = if t.starts_with("--") {
            vec!["run", t, "--", "true"]
        } else {
            vec!["run", "-t", t, "--", "true"]
        };
        let d = run(corral(&s, args), 5 * SEC);
        d.assert_code(0);
        assert!(d.elapsed() < 4 * SEC);
    }
}

#[test]
fn held_output_exits_123_and_kills_the_holder() {
    for (exit, json_code) in [("exit 0", 0), ("exit 7", 7)] {
        run_row(&Row {
            opts: opts(&["--wait-delay", "300ms"]),
            tree: format!(r#""$H" gc & {}{exit}"#, wait_for("gc")),
            code: Some(123),
            bound: Some((ms(300), 3 * SEC)),
            // The root's own code is kept; the holder counted as killed.
            fields: vec![
                ("outcome", "output_held".into()),
                ("exit_code", json_code.into()),
            ],
            killed: Some(AtLeast(1)),
            fates: &[("gc", Dead)],
            ..Row::default()
        });
    }
}

#[test]
fn usage_errors_exit_125_and_run_nothing() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let helper = r#""$H" never"#;
    let cases: &[&[&str]] = &[
        &["run", "-t", "1x", "--", "sh", "-c", helper],
        &["run", "-s", "NOPE", "--", "sh", "-c", helper],
        &["run", "-s", "999", "--", "sh", "-c", helper],
        &["run", "--wait-delay", "soon", "--", "sh", "-c", helper],
        &["run", "-k", "-1", "--", "sh", "-c", helper],
        &["run", "--leftovers", "maybe", "--", "sh", "-c", helper],
        &["run"],
        &["run", "--"],
        &["run", "-t", "1s"],
        &["frobnicate"],
        &[],
    ];
    for args in cases {
        let d = run(corral(&s, args.iter()), 5 * SEC);
        assert_eq!(d.code(), 125, "corral {args:?}; stderr: {}", d.err());
        assert!(!d.err().trim().is_empty(), "corral {args:?}: no message");
    }
    assert!(
        w.pid("never", ms(200)).is_none(),
        "a usage error ran PROGRAM"
    );
}

#[test]
fn usage_error_messages_name_the_bad_value() {
    let s = Scratch::new();
    let d = run(corral(&s, ["run", "-t", "1x", "--", "true"]), 5 * SEC);
    d.assert_code(125);
    assert!(d.err().contains("1x"), "{}", d.err());
    let d = run(corral(&s, ["run", "-s", "NOPE", "--", "true"]), 5 * SEC);
    d.assert_code(125);
    assert!(d.err().contains("NOPE"), "{}", d.err());
}

/// A helper `lo` that closed its output, left behind by a root that exits
/// with `code` once `lo` is ready, under the leftovers options `o`: it is
/// `kept` (and counted so) or killed (and counted so); no wait delay
/// applies, since nothing holds the output.
fn leftover(o: &[&str], code: i32, kept: bool, fields: Vec<(&'static str, Value)>) -> Ran {
    run_row(&Row {
        opts: opts(o),
        tree: format!(r#""$H" lo >/dev/null 2>&1 & {}exit {code}"#, wait_for("lo")),
        code: Some(code),
        bound: Some((Duration::ZERO, 3 * SEC)),
        fields,
        killed: Some(Exactly(usize::from(!kept))),
        kept: Some(u64::from(kept)),
        fates: if kept {
            &[("lo", Alive)]
        } else {
            &[("lo", Dead)]
        },
        ..Row::default()
    })
}

#[test]
fn process_group_containment_is_reported() {
    leftover(
        &["--containment", "process-group"],
        2,
        false,
        vec![("containment", "process_group".into())],
    );
}

#[test]
fn containment_failure_exits_125_and_runs_nothing() {
    // Tree-wide limits need cgroups: forcing process groups with a memory
    // cap makes the requested containment unavailable.
    let s = Scratch::new();
    let w = Watch::new(&s);
    let rp = report_path(&s);
    let d = run(
        corral(
            &s,
            [
                "run",
                "--containment",
                "process-group",
                "--memory-max",
                "64M",
                "--report",
                &rp,
                "--",
                "sh",
                "-c",
                r#""$H" never"#,
            ],
        ),
        5 * SEC,
    );
    d.assert_code(125);
    let v = read_report(&s.path("report.json"));
    assert_eq!(v["outcome"], "containment_failed", "{v}");
    assert!(v["exit_code"].is_null(), "{v}");
    assert!(w.pid("never", ms(200)).is_none(), "PROGRAM ran");
}

/// A bad sandbox policy is a usage error (125) naming the bad value, and
/// nothing runs: an unknown network, a policy path that does not exist, a
/// policy option without --sandbox; the `timeout` personality (GNU's
/// command line) has no --sandbox.
#[test]
fn sandbox_usage_errors_exit_125_and_run_nothing() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let helper = r#""$H" never"#;
    let missing = s.path("missing");
    let missing = missing.to_str().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (&["run", "--sandbox", "--network", "bogus"], "bogus"),
        (&["run", "--sandbox", "--network", ""], "network"),
        (&["run", "--sandbox", "--allow-write", missing], missing),
        (&["run", "--sandbox", "--deny-read", missing], missing),
        (&["run", "--sandbox", "--allow-write", ""], "allow-write"),
        (&["run", "--allow-write", "/tmp"], "--sandbox"),
        (&["run", "--deny-read", "/tmp"], "--sandbox"),
        (&["run", "--network", "none"], "--sandbox"),
        (&["timeout", "--sandbox", "5"], "sandbox"),
    ];
    for (args, named) in cases {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--", "sh", "-c", helper]);
        if args[0] == "timeout" {
            all.retain(|a| *a != "--");
        }
        let d = run(corral(&s, &all), 5 * SEC);
        assert_eq!(d.code(), 125, "corral {all:?}; stderr: {}", d.err());
        assert!(d.err().contains(named), "corral {all:?}: {}", d.err());
    }
    // A denied path inside the writable working directory: masked (it
    // runs, and cannot read it) with namespaces; refused without them.
    std::fs::write(s.path("secret"), "s3cret").unwrap();
    let secret = s.path("secret");
    let secret = secret.to_str().unwrap();
    let d = run(
        corral(
            &s,
            [
                "run",
                "--sandbox",
                "--deny-read",
                secret,
                "--",
                "sh",
                "-c",
                "cat secret; exit 7",
            ],
        ),
        5 * SEC,
    );
    assert_eq!(d.code(), 7, "{}", d.err());
    assert!(!d.out().contains("s3cret"), "{}", d.out());
    let mut c = corral(
        &s,
        [
            "run",
            "--sandbox",
            "--deny-read",
            secret,
            "--",
            "sh",
            "-c",
            helper,
        ],
    );
    c.env("CORRAL_SANDBOX_NO_NAMESPACES", "1");
    let d = run(c, 5 * SEC);
    assert_eq!(d.code(), 125, "{}", d.err());
    assert!(d.err().contains("without a mount namespace"), "{}", d.err());
    assert!(
        w.pid("never", ms(200)).is_none(),
        "a usage error ran PROGRAM"
    );
}

/// A sandbox that cannot be enforced here (namespaces denied to corral,
/// forced, and a private loopback asked for): exit 125, the report's
/// outcome `sandbox_failed` with the reason, and nothing ran.
#[test]
fn an_unenforceable_sandbox_exits_125_and_runs_nothing() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let rp = report_path(&s);
    let mut c = corral(
        &s,
        [
            "run",
            "--sandbox",
            "--network",
            "loopback",
            "--report",
            &rp,
            "--",
            "sh",
            "-c",
            r#""$H" never"#,
        ],
    );
    c.env("CORRAL_SANDBOX_NO_NAMESPACES", "1");
    let d = run(c, 5 * SEC);
    d.assert_code(125);
    assert!(d.err().contains("namespace"), "{}", d.err());
    let v = read_report(&s.path("report.json"));
    assert_eq!(v["outcome"], "sandbox_failed", "{v}");
    assert!(v["error"].as_str().unwrap().contains("sandbox"), "{v}");
    assert_eq!(v["corral_exit"], 125, "{v}");
    assert!(w.pid("never", ms(200)).is_none(), "PROGRAM ran");
}

/// `corral run --sandbox` end to end: a write outside the working
/// directory fails and the host's file is intact; the working directory,
/// the private /tmp and an --allow-write path are writable; a --deny-read
/// path is not readable; the report says what was enforced.
#[test]
fn a_sandboxed_run_writes_only_where_allowed() {
    let s = Scratch::new();
    let work = s.path("work");
    std::fs::create_dir(&work).unwrap();
    let outside = tempfile::Builder::new()
        .prefix("corral-cli-sbx-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let o = outside.path();
    std::fs::set_permissions(o, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    std::fs::write(o.join("victim"), "host\n").unwrap();
    std::fs::write(o.join("secret"), "s3cret\n").unwrap();
    let rp = report_path(&s);
    let escape = format!(
        "echo bad > {o}/victim && exit 9; rm -f {o}/victim && exit 8; echo new > {o}/new && exit 7; exit 0",
        o = o.display()
    );
    let mut c = corral(&s, ["run", "--sandbox", "--", "sh", "-c", &escape]);
    c.current_dir(&work);
    run(c, 30 * SEC).assert_code(0);
    assert_eq!(std::fs::read_to_string(o.join("victim")).unwrap(), "host\n");
    assert!(!o.join("new").exists());
    let allowed = o.join("allowed");
    std::fs::create_dir(&allowed).unwrap();
    let work_script = format!(
        "echo in > inside && echo t > /tmp/t && cat /tmp/t && echo ok > {a}/f && if cat {o}/secret; then exit 8; fi",
        a = allowed.display(),
        o = o.display()
    );
    let secret = o.join("secret");
    let mut c = corral(
        &s,
        [
            "run".as_ref(),
            "--sandbox".as_ref(),
            "--allow-write".as_ref(),
            allowed.as_os_str(),
            "--deny-read".as_ref(),
            secret.as_os_str(),
            "--report".as_ref(),
            OsStr::new(&rp),
            "--".as_ref(),
            "sh".as_ref(),
            "-c".as_ref(),
            OsStr::new(&work_script),
        ],
    );
    c.current_dir(&work);
    let d = run(c, 30 * SEC);
    d.assert_code(0);
    assert_eq!(d.out(), "t\n");
    assert_eq!(
        std::fs::read_to_string(work.join("inside")).unwrap(),
        "in\n"
    );
    assert_eq!(std::fs::read_to_string(allowed.join("f")).unwrap(), "ok\n");
    let v = read_report(&s.path("report.json"));
    let sb = &v["sandbox"];
    assert_eq!(sb["network"], "none", "{v}");
    let listed = |k: &str, p: &std::path::Path| {
        sb[k]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x == p.to_str().unwrap())
    };
    assert!(listed("allow_write", &allowed), "{v}");
    assert!(listed("deny_read", &secret), "{v}");
}

#[test]
fn not_executable_exits_126() {
    let s = Scratch::new();
    let file = s.path("script.sh");
    std::fs::write(&file, "#!/bin/sh\nexit 0\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let rp = report_path(&s);
    for prog in [file.as_os_str(), s.dir().as_os_str()] {
        let d = run(
            corral(
                &s,
                [
                    OsStr::new("run"),
                    "--report".as_ref(),
                    rp.as_ref(),
                    "--".as_ref(),
                    prog,
                ],
            ),
            5 * SEC,
        );
        d.assert_code(126);
        let v = read_report(&s.path("report.json"));
        assert_eq!(v["outcome"], "spawn_failed");
        assert!(v["exit_code"].is_null());
        assert!(!v["error"].as_str().unwrap().is_empty());
    }
}

#[test]
fn not_found_exits_127_with_spawn_failed_report() {
    let s = Scratch::new();
    let missing = s.path("no-such-program");
    let rp = report_path(&s);
    for prog in [
        "corral-test-no-such-program-7f3a",
        missing.to_str().unwrap(),
    ] {
        let d = run(corral(&s, ["run", "--report", &rp, "--", prog]), 5 * SEC);
        d.assert_code(127);
        assert!(d.err().contains("no-such-program"), "{}", d.err());
        let v = read_report(&s.path("report.json"));
        assert_eq!(v["outcome"], "spawn_failed");
        assert!(v["exit_code"].is_null() && v["signal"].is_null(), "{v}");
        let err = v["error"].as_str().expect("error message");
        assert!(err.contains("no-such-program"), "{err}");
        assert_eq!(count(&v, "killed"), 0);
    }
}

#[test]
fn root_killed_by_its_own_signal_exits_128_plus_n() {
    // A leftover that closed its output: the run is not a clean exit 0, so
    // keep-on-success kills it.
    run_row(&Row {
        tree: format!(
            r#""$H" bg >/dev/null 2>&1 & {}kill -SEGV $$"#,
            wait_for("bg")
        ),
        code: Some(139),
        fields: vec![
            ("outcome", "signaled".into()),
            ("signal", 11.into()),
            ("exit_code", Value::Null),
        ],
        signals: Some(&[9]),
        killed: Some(Exactly(1)),
        fates: &[("bg", Dead)],
        ..Row::default()
    });
}

#[test]
fn report_write_failure_is_corral_failure() {
    let s = Scratch::new();
    let bad = s.path("no-dir/report.json");
    let d = run(
        corral(&s, ["run", "--report", bad.to_str().unwrap(), "--", "true"]),
        5 * SEC,
    );
    d.assert_code(125);
    assert!(d.err().contains("report"), "{}", d.err());
}

// ---------------------------------------------------------------- JSON report

#[test]
fn report_dash_is_one_json_object_on_stdout_after_the_programs_output() {
    // `--report -` is stdout, in `run` as in `batch`.
    let s = Scratch::new();
    let d = run(
        corral(
            &s,
            [
                "run",
                "--report",
                "-",
                "--",
                "sh",
                "-c",
                "printf 'out\\n'; printf 'err\\n' >&2; exit 3",
            ],
        ),
        5 * SEC,
    );
    d.assert_code(3);
    assert_eq!(d.err(), "err\n");
    let out = d.out();
    assert!(out.starts_with("out\n"), "program's stdout first: {out:?}");
    assert_eq!(out.trim_end().lines().count(), 2, "{out:?}");
    let last = out.trim_end().lines().last().unwrap();
    let v: serde_json::Value = serde_json::from_str(last).unwrap();
    check_report(&v);
    assert_eq!(v["outcome"], "exited");
    assert_eq!(v["exit_code"], 3);
    assert_eq!(count(&v, "stdout_bytes"), 4);
    assert_eq!(count(&v, "stderr_bytes"), 4);
}

#[test]
fn keep_on_success_keeps_a_redirected_leftover() {
    let ran = leftover(&[], 0, true, vec![("outcome", "exited".into())]);
    drop(ran); // the Watch kills it
}

#[test]
fn keep_on_success_kills_leftovers_after_nonzero_exit() {
    leftover(
        &[],
        3,
        false,
        vec![("outcome", "exited".into()), ("exit_code", 3.into())],
    );
}

#[test]
fn leftovers_kill_kills_after_exit_0() {
    leftover(
        &["--leftovers", "kill"],
        0,
        false,
        vec![("outcome", "exited".into())],
    );
}

#[test]
fn leftovers_keep_keeps_after_nonzero_exit() {
    leftover(&["--leftovers", "keep"], 3, true, vec![]);
}

#[test]
fn timeout_with_grace_sends_term_then_kill_to_an_ignorer() {
    run_row(&Row {
        opts: opts(&["-t", "300ms", "-k", "300ms"]),
        tree: format!(r#"{ROOT}{IGN}{}"$H" a"#, wait_for("ign")),
        hang: Some(6 * SEC),
        code: Some(124),
        bound: Some((ms(600), 4 * SEC)),
        fields: vec![("outcome", "timed_out".into())],
        signals: Some(&[15, 9]),
        killed: Some(AtLeast(2)),
        fates: &[("root", Dead), ("ign", Dead), ("a", Dead)],
        ..Row::default()
    });
}

#[test]
fn timeout_with_grace_wakes_a_stopped_grandchild() {
    // SIGTERM alone cannot end a stopped process; corral continues the
    // tree after the first signal, so no SIGKILL is needed and the run ends
    // long before the 5 s grace. The root stays alive (waiting for its
    // children in its TERM trap), so the group is not orphaned and the
    // kernel's own SIGHUP+SIGCONT to orphaned stopped groups cannot help.
    run_row(&Row {
        opts: opts(&["-t", "400ms", "-k", "5s"]),
        tree: format!(
            r#"{ROOT}"$H" st & {}kill -STOP $!; trap 'wait; exit 0' TERM; "$H" a & wait"#,
            wait_for("st")
        ),
        hang: Some(8 * SEC),
        code: Some(124),
        bound: Some((ms(400), ms(4000))),
        fields: vec![("outcome", "timed_out".into())],
        // TERM was enough.
        signals: Some(&[15]),
        fates: &[("root", Dead), ("st", Dead), ("a", Dead)],
        ..Row::default()
    });
}

// --------------------------------------------------------------------- relay

#[test]
fn relay_gives_eof_in_bounded_time_when_a_grandchild_holds_stdout() {
    let ran = run_row(&Row {
        opts: opts(&["--wait-delay", "300ms"]),
        tree: format!(r#""$H" gc & {}echo started; exit 0"#, wait_for("gc")),
        code: Some(123),
        fates: &[("gc", Dead)],
        ..Row::default()
    });
    let out = ran.d.stdout.as_ref().unwrap();
    assert_between(out.eof_at - ran.d.started, ms(300), ms(300) + 3 * SEC);
    assert_eq!(ran.d.out(), "started\n");
}

#[test]
fn relay_gives_eof_in_bounded_time_when_a_grandchild_holds_stderr() {
    let ran = run_row(&Row {
        opts: opts(&["--wait-delay", "300ms"]),
        tree: format!(
            r#""$H" gc >/dev/null & {}echo oops >&2; exit 0"#,
            wait_for("gc")
        ),
        code: Some(123),
        fates: &[("gc", Dead)],
        ..Row::default()
    });
    let err = ran.d.stderr.as_ref().unwrap();
    assert_between(err.eof_at - ran.d.started, ms(300), ms(300) + 3 * SEC);
    assert!(ran.d.err().starts_with("oops\n"), "{:?}", ran.d.err());
}

#[test]
fn relay_gives_eof_even_when_the_holder_escaped_the_group() {
    // A holder that left the process group (setsid) cannot be killed by
    // process-group containment (documented limit: the escapee lives on,
    // and the Watch kills it), but corral's own pipe must still close.
    let ran = run_row(&Row {
        opts: opts(&["--wait-delay", "300ms"]),
        tree: format!(r#"setsid "$H" esc & {}exit 0"#, wait_for("esc")),
        code: Some(123),
        fields: vec![("outcome", "output_held".into())],
        fates: &[("esc", AliveIn(&[Mechanism::ProcessGroup]))],
        ..Row::default()
    });
    let out = ran.d.stdout.as_ref().unwrap();
    assert_between(out.eof_at - ran.d.started, ms(300), ms(300) + 3 * SEC);
}

#[test]
fn relay_keeps_order_and_loses_nothing_on_both_streams() {
    let s = Scratch::new();
    let rp = report_path(&s);
    let script = r#"i=1; while [ $i -le 20000 ]; do echo $i; echo e$i >&2; i=$((i+1)); done"#;
    let d = run(
        corral(&s, ["run", "--report", &rp, "--", "sh", "-c", script]),
        20 * SEC,
    );
    d.assert_code(0);
    let want_out: String = (1..=20000).map(|i| format!("{i}\n")).collect();
    let want_err: String = (1..=20000).map(|i| format!("e{i}\n")).collect();
    let out = d.out();
    let err = d.err();
    if out != want_out {
        let bad = out.lines().zip(want_out.lines()).position(|(a, b)| a != b);
        panic!(
            "stdout differs: {} lines, first difference at line {bad:?}",
            out.lines().count()
        );
    }
    if err != want_err {
        let bad = err.lines().zip(want_err.lines()).position(|(a, b)| a != b);
        panic!(
            "stderr differs: {} lines, first difference at line {bad:?}",
            err.lines().count()
        );
    }
    let v = read_report(&s.path("report.json"));
    assert_eq!(count(&v, "stdout_bytes"), want_out.len() as u64);
    assert_eq!(count(&v, "stderr_bytes"), want_err.len() as u64);
}

#[test]
fn relay_keeps_up_with_a_fast_writer() {
    let s = Scratch::new();
    let rp = report_path(&s);
    let d = run(
        corral(
            &s,
            [
                "run",
                "--report",
                &rp,
                "--",
                "head",
                "-c",
                "200000000",
                "/dev/zero",
            ],
        ),
        60 * SEC,
    );
    d.assert_code(0);
    let out = d.stdout.as_ref().unwrap();
    assert_eq!(out.total, 200_000_000);
    assert!(out.bytes.iter().all(|&b| b == 0));
    let v = read_report(&s.path("report.json"));
    assert_eq!(count(&v, "stdout_bytes"), 200_000_000);
}

#[test]

fn relay_passes_a_broken_pipe_on_to_the_child() {
    use std::io::Read;
    let s = Scratch::new();
    let rp = report_path(&s);
    let mut r = start(
        corral(&s, ["run", "-t", "20s", "--report", &rp, "--", "yes"]),
        Sink::RawPipe,
        Sink::Pipe,
    );
    let mut pipe = r.child.stdout.take().unwrap();
    let mut buf = [0u8; 2];
    pipe.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"y\n");
    let closed = Instant::now();
    drop(pipe); // like `| head -1`
    let d = r.finish(25 * SEC);
    let after_close = d.exited_at - closed;
    assert!(
        after_close < 5 * SEC,
        "corral ran {after_close:?} after its reader went away (exit {:?})",
        d.status.code()
    );
    // `yes` dies of SIGPIPE, as it would without corral.
    d.assert_code(128 + 13);
    let v = read_report(&s.path("report.json"));
    assert_eq!(v["outcome"], "signaled");
    assert_eq!(v["signal"], 13);
}

#[test]
fn regular_file_stdout_and_stderr_go_to_the_child_directly() {
    let s = Scratch::new();
    let out = s.path("out.txt");
    let err = s.path("err.txt");
    let d = start(
        corral(
            &s,
            [
                "run",
                "--",
                "sh",
                "-c",
                "readlink /proc/self/fd/1; readlink /proc/self/fd/2 >&2",
            ],
        ),
        Sink::File(out.clone()),
        Sink::File(err.clone()),
    )
    .finish(5 * SEC);
    d.assert_code(0);
    let got_out = std::fs::read_to_string(&out).unwrap();
    let got_err = std::fs::read_to_string(&err).unwrap();
    assert_eq!(got_out.trim_end(), out.to_str().unwrap());
    assert_eq!(got_err.trim_end(), err.to_str().unwrap());
}

#[test]
fn pipe_stdout_is_relayed_not_handed_over() {
    // corral's stdout is our pipe; the child must get a different pipe
    // (corral's relay), so the child's fd 1 is not corral's fd 1.
    let s = Scratch::new();
    let mut r = start(
        corral(&s, ["run", "--", "sh", "-c", "readlink /proc/self/fd/1"]),
        Sink::RawPipe,
        Sink::Pipe,
    );
    let ours = std::fs::read_link(format!("/proc/{}/fd/1", r.pid())).unwrap();
    let mut text = String::new();
    std::io::Read::read_to_string(r.child.stdout.as_mut().unwrap(), &mut text).unwrap();
    let d = r.finish(5 * SEC);
    d.assert_code(0);
    assert!(text.starts_with("pipe:"), "{text}");
    assert_ne!(
        text.trim_end(),
        ours.to_str().unwrap(),
        "child got corral's own pipe"
    );
}

#[test]
fn file_outputs_are_not_waited_for() {
    // With files the child writes directly; a backgrounded holder is not
    // holding any pipe of corral's, so there is no wait delay and after
    // exit 0 it is kept.
    run_row_to(
        &Row {
            opts: opts(&["--wait-delay", "3s"]),
            tree: format!(r#""$H" gc & {}exit 0"#, wait_for("gc")),
            hang: Some(6 * SEC),
            code: Some(0),
            bound: Some((Duration::ZERO, ms(2500))),
            fields: vec![("outcome", "exited".into())],
            kept: Some(1),
            fates: &[("gc", Alive)],
            ..Row::default()
        },
        |s| (Sink::File(s.path("out.txt")), Sink::File(s.path("err.txt"))),
    );
}

// ------------------------------------------------------ signal pass-through

fn pass_through(sig: Signal, n: i64, out: Sink, grace: bool) {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let rp = report_path(&s);
    let script = format!(r#"{ROOT}"$H" a & {IGN}wait"#);
    let mut args = vec!["run", "--report", &rp];
    if grace {
        args.extend(["-k", "300ms"]);
    }
    args.extend(["--", "sh", "-c", &script]);
    let r = start(corral(&s, args), out, Sink::Pipe);
    for name in ["root", "a", "ign"] {
        assert!(
            w.pid(name, 5 * SEC).is_some(),
            "helper {name} never started"
        );
    }
    let sent = Instant::now();
    kill_process(Pid::from_raw(r.pid() as i32).unwrap(), sig).unwrap();
    let d = r.finish(10 * SEC);
    d.assert_code(128 + n as i32);
    let after = d.exited_at - sent;
    if grace {
        // The ignorer only dies of the SIGKILL at the end of the grace.
        // (4.2 s was seen at a load of 24 on 2 cores.)
        assert_between(after, ms(300), 8 * SEC);
    } else {
        assert!(after < 3 * SEC, "took {after:?}");
    }
    let v = read_report(&s.path("report.json"));
    assert_eq!(v["outcome"], "cancelled");
    let want: &[i64] = if grace { &[n, 9] } else { &[9] };
    assert_eq!(signals_sent(&v), want, "{v}");
    assert_dead(&w, &["root", "a", "ign"]);
    assert_only(&w, &["root", "a", "ign"]);
}

#[test]
fn sigterm_is_passed_on_and_exits_143() {
    pass_through(Signal::TERM, 15, Sink::Pipe, true);
}

#[test]
fn sigint_is_passed_on_and_exits_130() {
    pass_through(Signal::INT, 2, Sink::Pipe, true);
}

#[test]
fn sighup_is_passed_on_and_exits_129_with_file_stdout() {
    let s = Scratch::new();
    pass_through(Signal::HUP, 1, Sink::File(s.path("out.txt")), true);
}

#[test]
fn sigterm_without_grace_kills_at_once() {
    pass_through(Signal::TERM, 15, Sink::Pipe, false);
}

#[test]
fn sigterm_to_a_tree_that_exits_on_its_own_ends_before_the_grace() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let rp = report_path(&s);
    let script = format!(r#"{ROOT}trap 'echo bye; exit 0' TERM; "$H" a & wait"#);
    let r = start(
        corral(
            &s,
            [
                "run", "-k", "5s", "--report", &rp, "--", "sh", "-c", &script,
            ],
        ),
        Sink::Pipe,
        Sink::Pipe,
    );
    for name in ["root", "a"] {
        assert!(
            w.pid(name, 5 * SEC).is_some(),
            "helper {name} never started"
        );
    }
    let sent = Instant::now();
    kill_process(Pid::from_raw(r.pid() as i32).unwrap(), Signal::TERM).unwrap();
    let d = r.finish(10 * SEC);
    d.assert_code(143);
    assert!(d.exited_at - sent < 3 * SEC, "waited for the grace");
    // (Exactly once is checked by first_signal_reaches_each_process_once.)
    assert!(
        d.out().starts_with("bye\n"),
        "output written during the grace is relayed: {:?}",
        d.out()
    );
    let v = read_report(&s.path("report.json"));
    assert_eq!(v["outcome"], "cancelled");
    assert_eq!(signals_sent(&v), [15], "{v}");
    assert_dead(&w, &["root", "a"]);
}

#[test]

fn first_signal_reaches_each_process_once() {
    // Duplicate signals can coalesce in the kernel, so one run may miss the
    // bug; ten runs catch it with high probability (each ~40% on Linux).
    for i in 0..10 {
        let s = Scratch::new();
        let w = Watch::new(&s);
        let script = format!(
            r#"{ROOT}trap 'echo t >> "$CORRAL_TEST_DIR/terms"; sleep 0.2' TERM; "$H" a & wait; exit 0"#
        );
        let r = start(
            corral(&s, ["run", "-k", "5s", "--", "sh", "-c", &script]),
            Sink::Pipe,
            Sink::Pipe,
        );
        for name in ["root", "a"] {
            assert!(
                w.pid(name, 5 * SEC).is_some(),
                "helper {name} never started"
            );
        }
        kill_process(Pid::from_raw(r.pid() as i32).unwrap(), Signal::TERM).unwrap();
        let d = r.finish(10 * SEC);
        d.assert_code(143);
        let terms = std::fs::read_to_string(s.path("terms")).unwrap_or_default();
        assert_eq!(
            terms,
            "t\n",
            "run {i}: the root's TERM trap ran {} times",
            terms.lines().count()
        );
        assert_dead(&w, &["root", "a"]);
    }
}

// --------------------------------------------------------------- arguments

#[test]
fn invalid_utf8_argument_is_passed_through() {
    let s = Scratch::new();
    let bad = OsStr::from_bytes(b"\xff\xfeok\x80");
    let d = run(
        corral(
            &s,
            [
                OsStr::new("run"),
                "--".as_ref(),
                "printf".as_ref(),
                "%s".as_ref(),
                bad,
            ],
        ),
        5 * SEC,
    );
    d.assert_code(0);
    assert_eq!(d.stdout.as_ref().unwrap().bytes, b"\xff\xfeok\x80");
}

#[test]
fn empty_path_with_absolute_program() {
    let s = Scratch::new();
    let mut c = corral(&s, ["run", "--", "/bin/sh", "-c", "exit 5"]);
    c.env("PATH", "");
    let d = run(c, 5 * SEC);
    d.assert_code(5);
}

#[test]
fn help_and_version_exit_0() {
    let s = Scratch::new();
    let d = run(corral(&s, ["--help"]), 5 * SEC);
    d.assert_code(0);
    assert!(d.out().contains("run"), "{}", d.out());
    let d = run(corral(&s, ["run", "--help"]), 5 * SEC);
    d.assert_code(0);
    for opt in [
        "--timeout",
        "--wait-delay",
        "--kill-after",
        "--grace",
        "--signal",
        "--preserve-status",
        "--verbose",
        "--leftovers",
        "--report",
        "Exit status",
        "keep-on-success",
        "passed through",
    ] {
        assert!(d.out().contains(opt), "{opt} missing from run --help");
    }
    let d = run(corral(&s, ["batch", "--help"]), 5 * SEC);
    d.assert_code(0);
    for key in [
        "[[task]]",
        "[defaults]",
        "result_event",
        "expect_exit",
        "wait_delay",
        "repeat",
        "leftovers",
        "keep-on-success",
        "Exit status",
    ] {
        assert!(d.out().contains(key), "{key} missing from batch --help");
    }
    let d = run(corral(&s, ["--version"]), 5 * SEC);
    d.assert_code(0);
}

// ------------------------------------------------------------- the contract

#[test]
fn unknown_options_before_the_program_are_usage_errors() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let helper = r#""$H" never"#;
    for args in [
        &["run", "--bogus", "--", "sh", "-c", helper][..],
        &["run", "--timout", "1", "--", "sh", "-c", helper],
        &["run", "-x", "sh", "-c", helper],
        &["run", "-t", "1", "--bogus", "sh", "-c", helper],
    ] {
        let d = run(corral(&s, args), 5 * SEC);
        assert_eq!(d.code(), 125, "corral {args:?}; stderr: {}", d.err());
        assert!(d.err().contains("unexpected argument"), "{}", d.err());
    }
    // clap's suggestion names the option meant.
    let d = run(corral(&s, ["run", "--timout", "1", "--", "true"]), 5 * SEC);
    assert!(d.err().contains("--timeout"), "{}", d.err());
    assert!(
        w.pid("never", ms(200)).is_none(),
        "a usage error ran PROGRAM"
    );
    // After `--`, or from the first word that is not an option, everything is
    // the program's: a program may be called `--bogus`.
    let d = run(corral(&s, ["run", "--", "--bogus"]), 5 * SEC);
    d.assert_code(127);
    let d = run(
        corral(&s, ["run", "sh", "-c", "exit 6", "--bogus"]),
        5 * SEC,
    );
    d.assert_code(6);
}

#[test]
fn a_signal_outside_the_old_table_keeps_its_number() {
    // SIGSYS (seccomp), SIGPWR, SIGSTKFLT and real-time signals were reported
    // as SIGKILL (137, "signal": 9).
    let s = Scratch::new();
    let rp = report_path(&s);
    for (sig, name) in [
        ("SYS", "SIGSYS"),
        ("PWR", "SIGPWR"),
        ("STKFLT", "SIGSTKFLT"),
        ("40", "SIGRTMIN+6"),
        ("64", "SIGRTMAX"),
    ] {
        let n: i64 = match sig {
            "SYS" => 31,
            "PWR" => 30,
            "STKFLT" => 16,
            x => x.parse().unwrap(),
        };
        let script = format!("kill -s {n} $$");
        let d = run(
            corral(&s, ["run", "--report", &rp, "--", "sh", "-c", &script]),
            5 * SEC,
        );
        d.assert_code(128 + n as i32);
        let v = read_report(&s.path("report.json"));
        assert_eq!(v["outcome"], "signaled", "{sig}: {v}");
        assert_eq!(v["signal"], n, "{sig}: {v}");
        assert_eq!(v["signal_name"], name, "{sig}: {v}");
        assert_eq!(v["corral_exit"], 128 + n, "{sig}: {v}");
    }
}

#[test]
fn signal_option_takes_sys_rtmin_rtmax_and_numbers() {
    let s = Scratch::new();
    let rp = report_path(&s);
    for (arg, n) in [
        ("SYS", 31),
        ("RTMIN", 34),
        ("RTMIN+3", 37),
        ("SIGRTMAX-1", 63),
        ("40", 40),
        ("USR1", 10),
    ] {
        let d = run(
            corral(
                &s,
                [
                    "run", "-t", "100ms", "-k", "5s", "-s", arg, "--report", &rp, "--", "sleep",
                    "30",
                ],
            ),
            8 * SEC,
        );
        d.assert_code(124);
        let v = read_report(&s.path("report.json"));
        assert_eq!(v["outcome"], "timed_out", "{arg}: {v}");
        assert_eq!(signals_sent(&v), [n], "{arg}: {v}");
        assert_eq!(v["signal"], n, "the root died of it: {arg}: {v}");
    }
    // (0 is GNU's signal 0: nothing sent at the deadline; see timeout_gnu.rs.)
    for bad in ["RTMIN+31", "RTMAX-31", "65", "RTMIN+"] {
        let d = run(corral(&s, ["run", "-s", bad, "--", "true"]), 5 * SEC);
        assert_eq!(d.code(), 125, "-s {bad}: {}", d.err());
    }
}

/// A pipe whose reader is gone: writes fail with EPIPE.
fn broken_pipe() -> std::process::Stdio {
    let (r, w) = std::io::pipe().unwrap();
    drop(r);
    std::process::Stdio::from(w)
}

#[test]
fn a_broken_stderr_or_stdout_never_makes_corral_panic() {
    let s = Scratch::new();
    let exit_of = |args: &[&str], out_broken: bool, err_broken: bool| {
        let mut c = corral(&s, args);
        c.stdout(if out_broken {
            broken_pipe()
        } else {
            std::process::Stdio::null()
        });
        c.stderr(if err_broken {
            broken_pipe()
        } else {
            std::process::Stdio::null()
        });
        let mut child = c.spawn().unwrap();
        let until = Instant::now() + 10 * SEC;
        loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st.code();
            }
            if Instant::now() > until {
                let _ = child.kill();
                panic!("corral {args:?} hung");
            }
            std::thread::sleep(ms(5));
        }
    };
    // Missing program, message on a broken stderr: 127, never a panic.
    assert_eq!(
        exit_of(&["run", "--", "no-such-program-x"], false, true),
        Some(127)
    );
    assert_eq!(
        exit_of(&["run", "--", "no-such-program-x"], true, true),
        Some(127)
    );
    // The report on a broken stdout: the program's code.
    assert_eq!(
        exit_of(
            &["run", "--report", "-", "--", "sh", "-c", "exit 3"],
            true,
            true
        ),
        Some(3)
    );
    assert_eq!(
        exit_of(
            &["run", "--report", "-", "--", "sh", "-c", "exit 3"],
            true,
            false
        ),
        Some(3)
    );
    // -v on a broken stderr, after a timeout: 124.
    assert_eq!(
        exit_of(
            &["run", "-v", "-t", "100ms", "--", "sleep", "10"],
            true,
            true
        ),
        Some(124)
    );
    // Usage errors, help and version on broken streams.
    assert_eq!(
        exit_of(&["run", "--bogus", "--", "true"], true, true),
        Some(125)
    );
    assert_eq!(exit_of(&["run", "--help"], true, true), Some(0));
    assert_eq!(exit_of(&["--version"], true, true), Some(0));
    // Cleanup messages and held output on broken streams.
    assert_eq!(
        exit_of(
            &[
                "run",
                "--wait-delay",
                "100ms",
                "--",
                "sh",
                "-c",
                "sleep 10 & echo x; exit 0"
            ],
            true,
            true
        ),
        Some(123)
    );
}

#[test]
fn bytes_not_seen_are_null_not_zero() {
    let ran = run_row_to(
        &Row {
            tree: "echo out; echo err >&2".into(),
            code: Some(0),
            fields: vec![("stdout_bytes", Value::Null), ("stderr_bytes", 4.into())],
            ..Row::default()
        },
        |s| (Sink::File(s.path("out.txt")), Sink::Pipe),
    );
    let v = &ran.v;
    assert_eq!(v["output"]["stdout"], "passed_through", "{v}");
    assert_eq!(v["output"]["stderr"], "relayed", "{v}");
    assert_eq!(
        std::fs::read_to_string(ran.s.path("out.txt")).unwrap(),
        "out\n"
    );
}

#[test]
fn timeout_zero_means_no_limit() {
    for t in [["-t", "0"], ["--timeout", "0"], ["-t", "0s"]] {
        run_row(&Row {
            opts: opts(&t),
            tree: "sleep 0.3; exit 3".into(),
            code: Some(3),
            bound: Some((ms(300), 5 * SEC)),
            fields: vec![("outcome", "exited".into())],
            ..Row::default()
        });
    }
}

#[test]
fn kill_after_is_the_long_name_of_k() {
    // The root and its sleep ignore TERM (the disposition is inherited).
    run_row(&Row {
        opts: opts(&["-t", "100ms", "--kill-after", "400ms"]),
        tree: "trap '' TERM; sleep 30".into(),
        hang: Some(8 * SEC),
        code: Some(124),
        bound: Some((ms(500), 5 * SEC)),
        signals: Some(&[15, 9]),
        ..Row::default()
    });
}

#[test]
fn signal_without_kill_after_is_sent_then_sigkill_after_10s() {
    // -s alone is never ignored: SIG first, SIGKILL 10 s later.
    run_row(&Row {
        opts: opts(&["-t", "100ms", "-s", "USR1"]),
        argv: opts(&["sleep", "30"]),
        hang: Some(8 * SEC),
        code: Some(124),
        bound: Some((Duration::ZERO, 3 * SEC)),
        signals: Some(&[10]),
        fields: vec![("signal", 10.into())],
        ..Row::default()
    });
    // An ignorer gets SIGKILL when the default grace ends.
    run_row(&Row {
        opts: opts(&["-t", "100ms", "-s", "INT"]),
        tree: "trap '' INT; sleep 60".into(),
        hang: Some(20 * SEC),
        code: Some(124),
        bound: Some((ms(10_000), 18 * SEC)),
        signals: Some(&[2, 9]),
        ..Row::default()
    });
}

#[test]
fn preserve_status_exits_with_the_programs_own_status() {
    // Timed out, the root exits 7 on TERM: 7 (timed_out in the report).
    let ran = run_row(&Row {
        opts: opts(&["--preserve-status", "-t", "200ms", "-k", "5s"]),
        tree: "trap 'exit 7' TERM; sleep 30 & wait".into(),
        hang: Some(8 * SEC),
        code: Some(7),
        fields: vec![("outcome", "timed_out".into()), ("corral_exit", 7.into())],
        ..Row::default()
    });
    let s = ran.s;
    // Timed out and killed: 128+9, as coreutils.
    let d = run(
        corral(
            &s,
            [
                "run",
                "--preserve-status",
                "-t",
                "100ms",
                "--",
                "sleep",
                "30",
            ],
        ),
        8 * SEC,
    );
    d.assert_code(137);
    // Without a timeout nothing changes.
    let d = run(
        corral(&s, ["run", "--preserve-status", "--", "sh", "-c", "exit 5"]),
        5 * SEC,
    );
    d.assert_code(5);
    // Held output: the program's own code.
    let d = run(
        corral(
            &s,
            [
                "run",
                "--preserve-status",
                "--wait-delay",
                "100ms",
                "--",
                "sh",
                "-c",
                "sleep 30 & exit 4",
            ],
        ),
        8 * SEC,
    );
    d.assert_code(4);
    // corral's own failures stay.
    let d = run(
        corral(&s, ["run", "--preserve-status", "--", "no-such-program-x"]),
        5 * SEC,
    );
    d.assert_code(127);
}

#[test]
fn verbose_says_on_stderr_what_corral_did() {
    let s = Scratch::new();
    let d = run(
        corral(&s, ["run", "-v", "-t", "100ms", "--", "sleep", "30"]),
        8 * SEC,
    );
    d.assert_code(124);
    let err = d.err();
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("corral:")).collect();
    assert_eq!(lines.len(), 1, "{}", d.err());
    assert!(
        lines[0].contains("timed out") && lines[0].contains("SIGKILL"),
        "{}",
        lines[0]
    );
    let d = run(
        corral(
            &s,
            [
                "run",
                "-v",
                "--wait-delay",
                "100ms",
                "--",
                "sh",
                "-c",
                "sleep 30 & exit 0",
            ],
        ),
        8 * SEC,
    );
    d.assert_code(123);
    assert!(d.err().contains("held its output"), "{}", d.err());
    assert!(d.err().contains("1 descendant killed"), "{}", d.err());
    let d = run(
        corral(&s, ["run", "-v", "--", "sh", "-c", "kill -SYS $$"]),
        5 * SEC,
    );
    d.assert_code(159);
    assert!(d.err().contains("SIGSYS"), "{}", d.err());
    // A clean exit says nothing.
    let d = run(
        corral(&s, ["run", "-v", "--", "sh", "-c", "exit 2"]),
        5 * SEC,
    );
    d.assert_code(2);
    assert_eq!(d.err(), "");
}

#[test]
fn every_signal_that_would_kill_corral_is_passed_on() {
    // Each one, unhandled, would kill corral without a report while the tree ran on.
    for (name, n) in [
        ("USR1", 10),
        ("USR2", 12),
        ("ALRM", 14),
        ("VTALRM", 26),
        ("PROF", 27),
        ("XCPU", 24),
        ("XFSZ", 25),
        ("QUIT", 3),
        ("SYS", 31),
        ("PWR", 30),
        ("IO", 29),
        ("RTMIN+1", 35),
    ] {
        let s = Scratch::new();
        let w = Watch::new(&s);
        let rp = report_path(&s);
        let script = format!(r#"{ROOT}"$H" a & wait"#);
        let r = start(
            corral(&s, ["run", "--report", &rp, "--", "sh", "-c", &script]),
            Sink::Pipe,
            Sink::Pipe,
        );
        for h in ["root", "a"] {
            assert!(
                w.pid(h, 5 * SEC).is_some(),
                "{name}: helper {h} never started"
            );
        }
        // kill(1): rustix names no real-time signal.
        let rc = std::process::Command::new("kill")
            .args(["-s", &n.to_string(), &r.pid().to_string()])
            .status()
            .unwrap();
        assert!(rc.success());
        let d = r.finish(10 * SEC);
        let v = read_report(&s.path("report.json"));
        if name == "ALRM" {
            // SIGALRM is GNU timeout's timer: the deadline come early. The
            // library decides so (the token's expiry), and the report says
            // what the exit status says.
            d.assert_code(124);
            assert_eq!(v["outcome"], "timed_out", "{name}: {v}");
            assert_eq!(v["timeout_kind"], "deadline", "{name}: {v}");
        } else {
            d.assert_code(128 + n);
            assert_eq!(v["outcome"], "cancelled", "{name}: {v}");
            assert_eq!(v["timeout_kind"], Value::Null, "{name}: {v}");
        }
        assert_eq!(v["corral_exit"], d.code(), "{name}: {v}");
        assert_eq!(v["received_signal"], n, "{name}: {v}");
        assert_dead(&w, &["root", "a"]);
    }
}

/// `-s 0`: nothing is sent at the deadline and the run is a timeout from
/// then on, whatever the program does after it (here: exits 0 by itself
/// during the grace). The library decides it, so the report and the exit
/// status agree: 124 and timed_out (deadline); with -p the program's own
/// status, the report still timed_out. Nothing is signalled. A program
/// still running at the end of the grace is killed (SIGKILL only).
#[test]
fn a_silent_deadline_is_a_timeout_in_the_report_and_the_exit_status() {
    for (preserve, want) in [(false, 124), (true, 0)] {
        let s = Scratch::new();
        let rp = report_path(&s);
        let mut args = vec!["run", "-s", "0", "-t", "0.3s", "--report", &rp];
        if preserve {
            args.push("-p");
        }
        args.extend(["--", "sleep", "0.6"]);
        let d = run(corral(&s, &args), 10 * SEC);
        d.assert_code(want);
        assert!(d.elapsed() >= ms(550), "{:?}", d.elapsed());
        let v = read_report(&s.path("report.json"));
        assert_eq!(v["outcome"], "timed_out", "{v}");
        assert_eq!(v["timeout_kind"], "deadline", "{v}");
        assert_eq!(v["exit_code"], 0, "{v}");
        assert_eq!(v["signals_sent"], serde_json::json!([]), "{v}");
        assert_eq!(v["corral_exit"], want, "{v}");
    }
    // Still running at the end of the grace: SIGKILL, nothing before it.
    let s = Scratch::new();
    let rp = report_path(&s);
    let d = run(
        corral(
            &s,
            [
                "run", "-s", "0", "-k", "0.2", "-t", "0.2", "--report", &rp, "--", "sleep", "10",
            ],
        ),
        10 * SEC,
    );
    d.assert_code(124);
    let v = read_report(&s.path("report.json"));
    assert_eq!(v["outcome"], "timed_out", "{v}");
    assert_eq!(v["timeout_kind"], "deadline", "{v}");
    assert_eq!(v["signals_sent"], serde_json::json!([9]), "{v}");
}

// ------------------------------------------------------- out of descriptors

/// Out of descriptors, `corral run` tells a shell user what to do in the
/// shell (`ulimit -n`, with the hard limit), not which library function
/// raises the limit; exit 125 (as `--help` and the README say), the
/// report's outcome is `spawn_failed` with the same message, and nothing
/// ran. With the hard limit reached too, it says that raising it needs
/// root. (corral is started by a shell whose `ulimit` leaves it too few
/// descriptors for the run's pipes and pidfd.)
#[test]
fn out_of_descriptors_tells_a_shell_user_to_raise_ulimit() {
    let hard = rustix::process::getrlimit(rustix::process::Resource::Nofile).maximum;
    for (ulimit, hard_reached) in [("ulimit -S -n 10", false), ("ulimit -n 10", true)] {
        let s = Scratch::new();
        let w = Watch::new(&s);
        let rp = report_path(&s);
        let mut c = std::process::Command::new("/bin/sh");
        c.arg("-c")
            .arg(format!(r#"{ulimit} && exec "$0" "$@""#))
            .arg(BIN)
            .args(["run", "--report", &rp, "--", "sh", "-c", r#""$H" ran"#])
            .envs(s.env())
            .current_dir(s.dir())
            .stdin(std::process::Stdio::null());
        let d = run(c, 5 * SEC);
        d.assert_code(125);
        let err = d.err();
        assert!(err.contains("Too many open files"), "{ulimit}: {err}");
        assert!(
            !err.contains("raise_nofile_limit"),
            "{ulimit}: a library function named to a shell user: {err}"
        );
        assert!(err.contains("soft 10"), "{ulimit}: {err}");
        if hard_reached {
            assert!(err.contains("hard 10"), "{ulimit}: {err}");
            assert!(
                err.contains("hard limit is reached") && err.contains("as root"),
                "{ulimit}: {err}"
            );
        } else if let Some(h) = hard {
            assert!(
                err.contains(&format!("raise it with `ulimit -n {h}`")),
                "{ulimit}: {err}"
            );
        }
        let v = read_report(s.path("report.json").as_path());
        assert_eq!(v["outcome"], "spawn_failed");
        assert_eq!(v["corral_exit"], 125);
        let line = v["error"].as_str().unwrap_or_default();
        assert!(err.contains(line) && !line.is_empty(), "{line} / {err}");
        // Nothing ran.
        assert!(w.pid("ran", ms(300)).is_none(), "{ulimit}: the command ran");
    }
}
