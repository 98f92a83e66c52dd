//! "Never the wrong process", proved on the recorded OS operations
//! (`Command::trace_ops`) rather than on PID-reuse luck: for every scenario,
//!
//! * `Spawned` comes first (once), with the root's pid;
//! * every `SignalTree` comes after `Spawned` and before `Reaped`, through
//!   the process group whose id is the root's pid;
//! * at most one SIGKILL per run, and it is the last signal;
//! * `RootExited`, when present, comes once and before `Reaped`;
//! * exactly one `Reaped` and exactly one `Released`, `Released` last;
//! * the signals recorded are exactly the report's `signals_sent`.

#![cfg(target_os = "linux")]

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use corral::{
    CancelToken, Command, ContainmentChoice, Error, LeftoverPolicy, Mechanism, OsOp, Outcome,
    Report, Signal,
};
use corral_testkit::scenario::{
    traced, tree, Count::Exactly, Fate::Alive, Fate::Dead, Row, Tier, SLACK,
};
use corral_testkit::{Scratch, Watch};

/// `sh -c SCRIPT` with the scratch's environment, contained by a process
/// group (the mechanism these tests are about).
fn sh(s: &Scratch, script: &str) -> Command {
    let mut c = s.sh(script);
    c.containment(ContainmentChoice::Only(Mechanism::ProcessGroup));
    c
}

/// A command contained by a process group.
fn pg_command(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new(program);
    c.containment(ContainmentChoice::Only(Mechanism::ProcessGroup));
    c
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Waits for the named helpers to appear and exec their command.
fn pin(w: &Watch, names: &[&str]) {
    for n in names {
        let pid = w
            .pid(n, Duration::from_secs(5))
            .unwrap_or_else(|| panic!("helper {n} never started"));
        let end = Instant::now() + Duration::from_secs(5);
        while std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "H")
            && Instant::now() < end
        {
            std::thread::sleep(ms(2));
        }
    }
}

#[track_caller]
fn assert_all_dead(w: &Watch, names: &[&str]) {
    for n in names {
        assert!(w.wait_dead(n, Duration::from_secs(2)), "helper {n} alive");
    }
}

/// Checks the ordering invariants on one run's record.
#[track_caller]
fn check(ops: &[OsOp], r: &Report) {
    let pid = r.pid;
    let ctx = || format!("ops: {ops:?}\nreport: {r:?}");
    assert!(
        matches!(ops.first(), Some(OsOp::Spawned { pid: p }) if *p == pid),
        "Spawned must come first\n{}",
        ctx()
    );
    let count = |f: &dyn Fn(&OsOp) -> bool| ops.iter().filter(|o| f(o)).count();
    assert_eq!(
        count(&|o| matches!(o, OsOp::Spawned { .. })),
        1,
        "{}",
        ctx()
    );
    assert_eq!(count(&|o| matches!(o, OsOp::Reaped { .. })), 1, "{}", ctx());
    assert_eq!(
        count(&|o| matches!(o, OsOp::Released { .. })),
        1,
        "{}",
        ctx()
    );
    assert!(
        matches!(
            ops.last(),
            Some(OsOp::Released {
                via: Mechanism::ProcessGroup
            })
        ),
        "Released must come last\n{}",
        ctx()
    );
    let reaped = ops
        .iter()
        .position(|o| matches!(o, OsOp::Reaped { .. }))
        .unwrap();
    assert!(
        matches!(ops[reaped], OsOp::Reaped { pid: p } if p == pid),
        "{}",
        ctx()
    );

    let mut signals = Vec::new();
    let mut kills = 0;
    for (i, op) in ops.iter().enumerate() {
        match op {
            OsOp::SignalTree {
                via,
                target,
                signal,
            } => {
                assert!(
                    i > 0 && i < reaped,
                    "signal at {i} outside (Spawned, Reaped)\n{}",
                    ctx()
                );
                assert_eq!(*via, Mechanism::ProcessGroup, "{}", ctx());
                assert_eq!(
                    *target,
                    pid as u64,
                    "signal not to the root's group\n{}",
                    ctx()
                );
                assert_eq!(kills, 0, "a signal after SIGKILL\n{}", ctx());
                if *signal == Signal::KILL {
                    kills += 1;
                }
                signals.push(*signal);
            }
            OsOp::RootExited { pid: p } => {
                assert_eq!(*p, pid, "{}", ctx());
                assert!(i < reaped, "RootExited after Reaped\n{}", ctx());
            }
            _ => {}
        }
    }
    assert!(kills <= 1, "more than one SIGKILL\n{}", ctx());
    assert!(
        count(&|o| matches!(o, OsOp::RootExited { .. })) <= 1,
        "{}",
        ctx()
    );
    assert_eq!(
        signals,
        r.signals_sent,
        "recorded signals differ from the report\n{}",
        ctx()
    );
}

/// Runs `row` in the process-group tier with its OS operations traced,
/// runs `during` on another thread (with a cancel token for the run) once
/// the helpers are pinned, asserts the row, and checks the invariants on
/// the record. Returns the report and the record.
fn scenario(row: Row, during: impl FnOnce(CancelToken) + Send + 'static) -> (Report, Vec<OsOp>) {
    let t = Tier::new(Mechanism::ProcessGroup);
    let mut ops = None;
    let mut th = None;
    let r = t.run_with(
        &row,
        |c| ops = Some(traced(c)),
        |running, _| {
            let token = running.cancel_token();
            th = Some(std::thread::spawn(move || during(token)));
        },
    );
    th.unwrap().join().unwrap();
    let ops = ops.unwrap().lock().unwrap().clone();
    check(&ops, &r);
    (r, ops)
}

fn nothing(_: CancelToken) {}

/// Cancels after `after`.
fn cancel_after(after: Duration) -> impl FnOnce(CancelToken) + Send + 'static {
    move |t| {
        std::thread::sleep(after);
        t.cancel();
    }
}

const KILL: &[Signal] = &[Signal::KILL];
const TERM_KILL: &[Signal] = &[Signal::TERM, Signal::KILL];

#[test]
fn timeout() {
    let (_, ops) = scenario(
        Row {
            tree: tree(r#""$H" a & "$H" b sh -c '"$H" c & while :; do :; done' & wait"#),
            timeout: Some(ms(300)),
            bound: Some((ms(300), ms(300) + SLACK)),
            outcome: Some(Outcome::TimedOut),
            signals: Some(KILL.into()),
            fates: &[("a", Dead), ("b", Dead), ("c", Dead)],
            ..Row::default()
        },
        nothing,
    );
    // The root died of our SIGKILL: its exit was seen before the reap.
    assert!(ops.iter().any(|o| matches!(o, OsOp::RootExited { .. })));
}

#[test]
fn held_output() {
    let (_, ops) = scenario(
        Row {
            tree: tree(r#""$H" gc & echo x; exit 0"#),
            wait_delay: Some(ms(250)),
            bound: Some((ms(250), ms(250) + SLACK)),
            outcome: Some(Outcome::OutputHeld),
            fates: &[("gc", Dead)],
            ..Row::default()
        },
        nothing,
    );
    // The root had exited before the group was signalled: the signal went
    // to a group pinned by its unreaped (zombie) leader.
    let exited = ops
        .iter()
        .position(|o| matches!(o, OsOp::RootExited { .. }))
        .expect("RootExited");
    let signal = ops
        .iter()
        .position(|o| matches!(o, OsOp::SignalTree { .. }))
        .expect("SignalTree");
    assert!(exited < signal, "{ops:?}");
}

#[test]
fn nonzero_exit_with_survivor() {
    scenario(
        Row {
            tree: tree(r#""$H" c >/dev/null 2>&1 & exit 9"#),
            bound: Some((Duration::ZERO, SLACK)),
            outcome: Some(Outcome::Exited(9)),
            signals: Some(KILL.into()),
            killed: Some(Exactly(1).into()),
            fates: &[("c", Dead)],
            ..Row::default()
        },
        nothing,
    );
}

#[test]
fn nonzero_exit_with_term_ignoring_survivor_and_grace() {
    scenario(
        Row {
            tree: format!(
                r#""$H" c sh -c 'trap "" TERM; exec sleep 30' >/dev/null 2>&1 & {}exit 9"#,
                corral_testkit::ready("c")
            ),
            grace: Some(ms(250)),
            bound: Some((ms(250), ms(250) + SLACK)),
            outcome: Some(Outcome::Exited(9)),
            signals: Some(TERM_KILL.into()),
            fates: &[("c", Dead)],
            ..Row::default()
        },
        nothing,
    );
}

#[test]
fn cancel() {
    scenario(
        Row {
            tree: tree(r#""$H" a & "$H" b & wait"#),
            bound: Some((ms(150), ms(150) + SLACK)),
            outcome: Some(Outcome::Cancelled),
            signals: Some(KILL.into()),
            fates: &[("a", Dead), ("b", Dead)],
            ..Row::default()
        },
        cancel_after(ms(150)),
    );
}

#[test]
fn cancel_with_a_signal_override_and_grace() {
    // The CLI passes on the signal it got: INT first, then KILL.
    scenario(
        Row {
            tree: tree(r#"trap "" INT; "$H" a sh -c 'trap "" INT; exec sleep 30' & wait"#),
            grace: Some(ms(200)),
            bound: Some((ms(300), ms(300) + SLACK)),
            outcome: Some(Outcome::Cancelled),
            signals: Some([Signal::INT, Signal::KILL].as_slice().into()),
            fates: &[("a", Dead)],
            ..Row::default()
        },
        |t| {
            std::thread::sleep(ms(100));
            t.cancel_with(Signal::INT);
        },
    );
}

/// `"$H" c` detached (output closed), then the root exits 0 at once.
const DETACHED_EXIT_0: &str = r#""$H" c >/dev/null 2>&1 & echo ok"#;

#[test]
fn clean_exit() {
    let (_, ops) = scenario(
        Row {
            tree: tree(DETACHED_EXIT_0),
            wait_delay: Some(Duration::from_secs(5)),
            bound: Some((Duration::ZERO, SLACK)),
            outcome: Some(Outcome::Exited(0)),
            signals: Some([].as_slice().into()),
            kept: Some(1),
            // Kept leftovers keep running (the Watch kills them on drop).
            fates: &[("c", Alive)],
            ..Row::default()
        },
        nothing,
    );
    assert!(!ops.iter().any(|o| matches!(o, OsOp::SignalTree { .. })));
}

#[test]
fn clean_exit_under_kill_policy() {
    scenario(
        Row {
            tree: tree(DETACHED_EXIT_0),
            leftovers: Some(LeftoverPolicy::Kill),
            bound: Some((Duration::ZERO, SLACK)),
            outcome: Some(Outcome::Exited(0)),
            signals: Some(KILL.into()),
            killed: Some(Exactly(1).into()),
            fates: &[("c", Dead)],
            ..Row::default()
        },
        nothing,
    );
}

#[test]
fn grace_with_term_ignorer() {
    scenario(
        Row {
            tree: tree(r#""$H" ign sh -c 'trap "" TERM; exec sleep 30' & "$H" b & wait"#),
            timeout: Some(ms(200)),
            grace: Some(ms(300)),
            bound: Some((ms(500), ms(500) + SLACK)),
            outcome: Some(Outcome::TimedOut),
            signals: Some(TERM_KILL.into()),
            fates: &[("ign", Dead), ("b", Dead)],
            ..Row::default()
        },
        nothing,
    );
}

#[test]
fn grace_with_a_tree_that_dies_on_term() {
    scenario(
        Row {
            tree: tree(r#""$H" a & "$H" b & wait"#),
            timeout: Some(ms(200)),
            grace: Some(Duration::from_secs(5)),
            bound: Some((ms(200), ms(200) + SLACK)),
            outcome: Some(Outcome::TimedOut),
            signals: Some([Signal::TERM].as_slice().into()),
            fates: &[("a", Dead), ("b", Dead)],
            ..Row::default()
        },
        nothing,
    );
}

#[test]
fn cancel_during_grace_sends_nothing_more() {
    // Timed out at 200 ms (TERM), cancelled at 300 ms inside the grace: the
    // cancel must not add a signal; SIGKILL comes once, at the grace's end.
    scenario(
        Row {
            tree: tree(r#"trap "" TERM; "$H" ign sh -c 'trap "" TERM; exec sleep 30' & wait"#),
            timeout: Some(ms(200)),
            grace: Some(ms(400)),
            bound: Some((ms(600), ms(600) + SLACK)),
            outcome: Some(Outcome::TimedOut),
            signals: Some(TERM_KILL.into()),
            fates: &[("ign", Dead)],
            ..Row::default()
        },
        cancel_after(ms(300)),
    );
}

#[test]
fn held_output_with_grace_and_term_ignorer() {
    scenario(
        Row {
            tree: format!(
                r#""$H" gc sh -c 'trap "" TERM; exec sleep 30' & {}exit 0"#,
                corral_testkit::ready("gc")
            ),
            wait_delay: Some(ms(200)),
            grace: Some(ms(300)),
            bound: Some((ms(500), ms(500) + SLACK)),
            outcome: Some(Outcome::OutputHeld),
            signals: Some(TERM_KILL.into()),
            fates: &[("gc", Dead)],
            ..Row::default()
        },
        nothing,
    );
}

#[test]
fn thirty_two_cancellers_with_grace() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let token = CancelToken::new();
    let mut cmd = sh(
        &s,
        r#"trap "" TERM; "$H" ign sh -c 'trap "" TERM; exec sleep 30' & wait"#,
    );
    cmd.cancel_token(&token).grace(ms(200));
    let ops = traced(&mut cmd);
    let running = cmd.spawn().unwrap();
    pin(&w, &["ign"]);
    let barrier = Arc::new(Barrier::new(33));
    let threads: Vec<_> = (0..32)
        .map(|_| {
            let (b, t) = (barrier.clone(), token.clone());
            std::thread::spawn(move || {
                b.wait();
                t.cancel();
                t.cancel();
            })
        })
        .collect();
    barrier.wait();
    let r = running.wait();
    for t in threads {
        t.join().unwrap();
    }
    check(&ops.lock().unwrap(), &r);
    assert_eq!(r.outcome, Outcome::Cancelled);
    assert_eq!(r.signals_sent, vec![Signal::TERM, Signal::KILL]);
    assert_all_dead(&w, &["ign"]);
}

#[test]
fn dropped_without_wait() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let mut cmd = sh(&s, r#""$H" a & "$H" b & wait"#);
    let ops = traced(&mut cmd);
    let running = cmd.spawn().unwrap();
    let pid = running.id();
    pin(&w, &["a", "b"]);
    drop(running);
    let ops = ops.lock().unwrap().clone();
    // No report: check the ordering by hand with a synthetic one.
    let kills: Vec<_> = ops
        .iter()
        .filter_map(|o| match o {
            OsOp::SignalTree { signal, target, .. } => Some((*signal, *target)),
            _ => None,
        })
        .collect();
    assert_eq!(kills, vec![(Signal::KILL, pid as u64)], "{ops:?}");
    assert!(matches!(ops.first(), Some(OsOp::Spawned { pid: p }) if *p == pid));
    assert!(matches!(ops.last(), Some(OsOp::Released { .. })), "{ops:?}");
    let reaped = ops
        .iter()
        .position(|o| matches!(o, OsOp::Reaped { .. }))
        .expect("Reaped");
    assert_eq!(reaped, ops.len() - 2, "{ops:?}");
    assert_all_dead(&w, &["a", "b"]);
}

#[test]
fn many_short_runs_racing_cancel() {
    // Exit and cancellation race; whichever wins, the record is well-formed.
    let s = Scratch::new();
    let w = Watch::new(&s);
    for i in 0..40u64 {
        let name = format!("r{i}");
        let mut cmd = sh(
            &s,
            &format!(r#""$H" k{i} >/dev/null 2>&1 & exec "$H" {name} true"#),
        );
        cmd.leftovers(if i % 2 == 0 {
            LeftoverPolicy::Kill
        } else {
            LeftoverPolicy::KeepOnSuccess
        });
        let ops = traced(&mut cmd);
        let running = cmd.spawn().unwrap();
        pin(&w, &[&format!("k{i}")]);
        let token = running.cancel_token();
        let th = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_micros(i * 100));
            token.cancel();
        });
        let r = running.wait();
        th.join().unwrap();
        check(&ops.lock().unwrap(), &r);
        match r.outcome {
            Outcome::Exited(0) => {
                if i % 2 == 0 {
                    assert_eq!(r.signals_sent, vec![Signal::KILL]);
                    assert!(w.wait_dead(&format!("k{i}"), Duration::from_secs(2)));
                } else {
                    assert!(r.signals_sent.is_empty(), "{r:?}");
                    assert_eq!(r.leftovers.kept, 1);
                    assert!(w.is_alive(&format!("k{i}")));
                }
            }
            Outcome::Cancelled => {
                assert_eq!(r.signals_sent, vec![Signal::KILL]);
                assert!(w.wait_dead(&format!("k{i}"), Duration::from_secs(2)));
            }
            other => panic!("run {i}: {other:?}: {r:?}"),
        }
    }
}

#[test]
fn spawn_failures_signal_nothing() {
    let mut cmd = pg_command("corral-no-such-program-7d2e");
    let ops = traced(&mut cmd);
    let err = cmd.spawn().unwrap_err();
    assert!(matches!(err, Error::Spawn { .. }), "{err:?}");
    let ops = ops.lock().unwrap().clone();
    assert!(
        !ops.iter()
            .any(|o| matches!(o, OsOp::SignalTree { .. } | OsOp::Spawned { .. })),
        "{ops:?}"
    );

    let token = CancelToken::new();
    token.cancel();
    let mut cmd = pg_command("/bin/true");
    cmd.cancel_token(&token);
    let ops = traced(&mut cmd);
    assert!(matches!(
        cmd.spawn().unwrap_err(),
        Error::CancelledBeforeSpawn
    ));
    assert!(ops.lock().unwrap().is_empty());
}
