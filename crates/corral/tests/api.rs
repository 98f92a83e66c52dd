//! The public API added for growth and ergonomics: `Running::signal` and
//! `AsyncRunning::signal` (to the whole tree, through the held identity,
//! never after the release), `Report::check`, typed errors with their OS
//! sources, stdio conversions, and the `serde` form of a report.

#![cfg(target_os = "linux")]

use std::error::Error as _;
use std::time::{Duration, Instant};

use corral::{
    CleanupError, Command, ContainmentChoice, Error, Input, Mechanism, OsOp, Outcome, Output,
    Report, Signal,
};
use corral_testkit::scenario::traced;
use corral_testkit::{assert_between, ready, Scratch, Watch};

const SEC: Duration = Duration::from_secs(1);

/// The user's signal went through the tree's identity after the spawn and
/// before the root was reaped and the identity released, and nothing was
/// signalled after the release.
#[track_caller]
fn check_signal_order(ops: &[OsOp], sig: Signal, pid: u32) {
    let at = |f: &dyn Fn(&OsOp) -> bool| ops.iter().position(f);
    let spawned = at(&|o| matches!(o, OsOp::Spawned { .. })).expect("Spawned");
    let user = at(&|o| matches!(o, OsOp::SignalTree { signal, .. } if *signal == sig))
        .unwrap_or_else(|| panic!("{sig} never sent: {ops:?}"));
    let reaped = at(&|o| matches!(o, OsOp::Reaped { .. })).expect("Reaped");
    let released = at(&|o| matches!(o, OsOp::Released { .. })).expect("Released");
    assert!(
        spawned < user && user < reaped && reaped < released,
        "{ops:?}"
    );
    assert_eq!(
        released,
        ops.len() - 1,
        "nothing after the release: {ops:?}"
    );
    match &ops[user] {
        OsOp::SignalTree { via, target, .. } => {
            assert_eq!(*via, Mechanism::ProcessGroup, "{ops:?}");
            assert_eq!(*target, u64::from(pid), "the group of the root: {ops:?}");
        }
        _ => unreachable!(),
    }
}

#[test]
fn signal_reaches_the_tree_through_the_held_identity() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    // A tree: the root traps USR1 (and says so), two helpers below it.
    let script = format!(
        r#"trap 'echo got-usr1' USR1; "$H" a & "$H" b & {}{}echo ready; while :; do sleep 0.05; done"#,
        ready("a"),
        ready("b")
    );
    let mut cmd = s.sh(&script);
    cmd.containment(ContainmentChoice::Only(Mechanism::ProcessGroup))
        .timeout(20 * SEC);
    let ops = traced(&mut cmd);
    let started = Instant::now();
    let mut running = cmd.spawn().unwrap();
    let pid = running.id();
    assert!(s.wait_file("a.pid", 5 * SEC) && s.wait_file("b.pid", 5 * SEC));
    let (a, b) = (w.pid("a", 5 * SEC).unwrap(), w.pid("b", 5 * SEC).unwrap());
    // An outsider that must not be touched.
    let mut outsider = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    // Wait until the tree is set up (the helpers run `sleep`).
    let end = Instant::now() + 5 * SEC;
    while [a, b].iter().any(|p| {
        std::fs::read_to_string(format!("/proc/{p}/comm")).map_or(true, |c| c.trim() != "sleep")
    }) && Instant::now() < end
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    running.signal(Signal::TERM).unwrap();
    let r = running.wait();
    assert_between(started.elapsed(), Duration::ZERO, 10 * SEC);
    // The root died of the caller's signal: reported as such, not as a
    // termination by corral.
    assert_eq!(r.outcome, Outcome::Signaled(Signal::TERM), "{r:?}");
    assert!(
        r.signals_sent.is_empty() || r.signals_sent == [Signal::KILL],
        "{r:?}"
    );
    assert!(
        w.wait_dead("a", 5 * SEC) && w.wait_dead("b", 5 * SEC),
        "helpers survived"
    );
    assert!(
        outsider.try_wait().unwrap().is_none(),
        "the outsider was signalled"
    );
    outsider.kill().unwrap();
    outsider.wait().unwrap();
    check_signal_order(&ops.lock().unwrap(), Signal::TERM, pid);
}

#[test]
fn a_non_terminating_signal_leaves_the_run_going() {
    let s = Scratch::new();
    let mut cmd =
        s.sh(r#"trap 'echo got-usr1; exit 4' USR1; : > "$CORRAL_TEST_DIR/trapped"; while :; do sleep 0.02; done"#);
    cmd.containment(ContainmentChoice::Only(Mechanism::ProcessGroup))
        .timeout(20 * SEC);
    let ops = traced(&mut cmd);
    let mut running = cmd.spawn().unwrap();
    let pid = running.id();
    // The trap is set once the marker exists.
    assert!(
        s.wait_file("trapped", 10 * SEC),
        "the shell never set its trap"
    );
    running.signal(Signal::from_raw(10).unwrap()).unwrap();
    let r = running.wait();
    assert_eq!(r.outcome, Outcome::Exited(4), "the trap ran: {r:?}");
    assert_eq!(r.check().unwrap_err().outcome, Outcome::Exited(4));
    assert!(r.stdout.text_lossy().contains("got-usr1"), "{r:?}");
    check_signal_order(&ops.lock().unwrap(), Signal::from_raw(10).unwrap(), pid);
}

#[cfg(feature = "tokio")]
#[test]
fn async_signal_is_carried_out_by_the_driver_before_the_release() {
    let s = Scratch::new();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut cmd =
        s.sh(r#"trap 'exit 5' USR1; : > "$CORRAL_TEST_DIR/trapped"; while :; do sleep 0.02; done"#);
    cmd.containment(ContainmentChoice::Only(Mechanism::ProcessGroup))
        .timeout(20 * SEC);
    let ops = traced(&mut cmd);
    let r = rt.block_on(async {
        let running = cmd.spawn_async().unwrap();
        let pid = running.id();
        let end = Instant::now() + 10 * SEC;
        while !s.path("trapped").exists() {
            assert!(Instant::now() < end, "the shell never set its trap");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        running.signal(Signal::from_raw(10).unwrap());
        (running.await, pid)
    });
    let (r, pid) = r;
    assert_eq!(r.outcome, Outcome::Exited(5), "{r:?}");
    check_signal_order(&ops.lock().unwrap(), Signal::from_raw(10).unwrap(), pid);
}

#[test]
fn check_is_ok_only_for_a_clean_exit_0() {
    let ok = Command::new("true").run().unwrap();
    assert_eq!(ok.check().unwrap().pid, ok.pid);
    let three = Command::new("sh").args(["-c", "exit 3"]).run().unwrap();
    let e = three.check().unwrap_err();
    assert_eq!(e.outcome, Outcome::Exited(3));
    assert_eq!(e.to_string(), "the command exited with code 3");
    assert!(e.source().is_none());
    let slow = Command::new("sleep")
        .arg("10")
        .timeout(Duration::from_millis(100))
        .run()
        .unwrap();
    let e = slow.check().unwrap_err();
    assert_eq!(e.outcome, Outcome::TimedOut);
    assert_eq!(e.to_string(), "the command timed out");
    // A cleanup failure is an error even after exit 0; every failed step is
    // named, in order, and the first is the source.
    let mut dirty = Report::synthetic(Outcome::Exited(0), Mechanism::ProcessGroup);
    dirty.cleanup_errors = vec![CleanupError::Survivors { pids: vec![42] }];
    let e = dirty.check().unwrap_err();
    assert!(e.to_string().contains("survived SIGKILL"), "{e}");
    assert!(e.source().is_some());
    dirty.cleanup_errors.push(CleanupError::CrashSafetyLost {
        why: "the keeper died".into(),
    });
    let e = dirty.check().unwrap_err();
    let shown = e.to_string();
    let (a, b) = (
        shown.find("survived SIGKILL").expect("the first step"),
        shown.find("the keeper died").expect("the second step"),
    );
    assert!(a < b, "{shown}");
    assert_eq!(e.cleanup_errors.len(), 2);
    assert!(e.source().unwrap().to_string().contains("survived SIGKILL"));
    // Usable with `?`.
    fn via_question_mark() -> Result<usize, Box<dyn std::error::Error>> {
        let r = Command::new("sh").args(["-c", "echo hi"]).run()?;
        Ok(r.check()?.stdout.bytes().len())
    }
    assert_eq!(via_question_mark().unwrap(), 3);
}

#[test]
fn containment_errors_keep_the_os_error_as_source() {
    // A cgroup that cannot be had (limits need one) says why; the subreaper
    // tier without `enable_subreaper` has no OS error behind it.
    let e = Command::new("true")
        .containment(ContainmentChoice::Only(Mechanism::Subreaper))
        .run();
    if let Err(e @ Error::Containment { .. }) = e {
        assert!(e.source().is_none(), "{e:?}");
        assert!(e.to_string().contains("subreaper"), "{e}");
    }
    let e = Command::new("/nonexistent/program").run().unwrap_err();
    let src = e.source().expect("the OS error");
    let io = src.downcast_ref::<std::io::Error>().expect("an io::Error");
    assert_eq!(io.kind(), std::io::ErrorKind::NotFound);
}

#[test]
fn cleanup_errors_keep_their_io_source() {
    let e = CleanupError::Survivors { pids: vec![1, 2] };
    assert!(e.io_error().is_none() && e.source().is_none());
    assert_eq!(e.survivors(), &[1, 2]);
    let r = Report::synthetic(Outcome::Exited(0), Mechanism::ProcessGroup);
    assert!(r.cleanup_errors.is_empty());
}

#[test]
fn stdio_converts_like_std() {
    let s = Scratch::new();
    let input = s.path("in.txt");
    std::fs::write(&input, b"from a file\n").unwrap();
    let out = s.path("out.txt");
    let r = Command::new("cat")
        .stdin(std::fs::File::open(&input).unwrap())
        .stdout(std::fs::File::create(&out).unwrap())
        .run()
        .unwrap();
    assert!(r.success(), "{r:?}");
    assert_eq!(std::fs::read(&out).unwrap(), b"from a file\n");
    // A pipe end, as an OwnedFd.
    let (reader, mut writer) = std::io::pipe().unwrap();
    std::io::Write::write_all(&mut writer, b"piped\n").unwrap();
    drop(writer);
    let r = Command::new("cat")
        .stdin(std::os::fd::OwnedFd::from(reader))
        .run()
        .unwrap();
    assert_eq!(r.stdout.bytes(), b"piped\n");
    // Bytes and text.
    let r = Command::new("cat").stdin("text\n").run().unwrap();
    assert_eq!(r.stdout.bytes(), b"text\n");
    let r = Command::new("cat").stdin(b"bytes".to_vec()).run().unwrap();
    assert_eq!(r.stdout.bytes(), b"bytes");
    // A std child's stdout feeds a corral run.
    let mut producer = std::process::Command::new("echo")
        .arg("from std")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let r = Command::new("cat")
        .stdin(producer.stdout.take().unwrap())
        .stdout(Output::capture())
        .run()
        .unwrap();
    producer.wait().unwrap();
    assert_eq!(r.stdout.bytes(), b"from std\n");
    let _ = Input::null();
}

#[cfg(feature = "serde")]
#[test]
fn a_report_serialises_to_the_documented_fields() {
    let r = Command::new("sh")
        .args(["-c", "echo out; exit 2"])
        .run()
        .unwrap();
    let v = serde_json::to_value(&r).unwrap();
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    let documented = [
        "outcome",
        "timeout_kind",
        "exit_code",
        "signal",
        "signal_name",
        "containment",
        "containment_note",
        "crash_safe",
        "crash_safety_note",
        "killed",
        "kept",
        "duration_ms",
        "stdout_bytes",
        "stderr_bytes",
        "error",
        "pid",
        "signals_sent",
        "cleanup_errors",
        "survivors",
        "timings_ms",
        "usage",
        "limits_hit",
        "sandbox",
    ];
    for k in documented {
        assert!(keys.contains(&k), "{k} missing: {v}");
    }
    assert_eq!(keys.len(), documented.len(), "{v}");
    // On Linux x86_64/aarch64 the keeper holds every run; elsewhere the
    // report says why not.
    assert_eq!(v["crash_safe"], r.crash_safety.is_held(), "{v}");
    assert_eq!(
        v["crash_safety_note"].as_str(),
        r.crash_safety.note(),
        "{v}"
    );
    #[cfg(linux_raw)]
    assert_eq!(r.crash_safety, corral::CrashSafety::Held, "{v}");
    assert_eq!(v["outcome"], "exited");
    assert_eq!(v["exit_code"], 2);
    assert_eq!(v["stdout_bytes"], 4);
    assert_eq!(v["pid"], r.pid);
    let killed = Command::new("sh")
        .args(["-c", "kill -SEGV $$"])
        .run()
        .unwrap();
    let v = serde_json::to_value(&killed).unwrap();
    assert_eq!(v["outcome"], "signaled");
    assert_eq!(v["signal"], 11);
    assert_eq!(v["signal_name"], "SIGSEGV");
    assert_eq!(
        serde_json::to_value(killed.outcome).unwrap(),
        serde_json::json!({"signaled": 11})
    );
    assert_eq!(
        serde_json::to_value(Outcome::TimedOut).unwrap(),
        "timed_out"
    );
    assert_eq!(serde_json::to_value(Mechanism::Cgroup).unwrap(), "cgroup");
}
