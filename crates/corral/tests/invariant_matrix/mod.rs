//! "Never the wrong process", proved on the recorded OS operations
//! (`Command::trace_ops`) rather than on PID-reuse luck, in every Linux
//! containment tier: each row runs a real tree with its operations traced,
//! asserts what the row states (return bound, outcome, signals, fate of
//! every helper), and checks the record with
//! [`corral_testkit::invariants::check`]: the identity used to signal (the
//! unreaped root or zombie group leader, the namespace's init, the cgroup
//! directory) is held from `Spawned` until the last signal, released
//! exactly once and last; at most one SIGKILL to the tree and nothing after
//! it; member signals (through verified pidfds) only carry the tree's
//! signal; no signal after the reap; the signals recorded are the report's.
//!
//! [`tiers!`] makes one `#[test]` per row and tier, in a module named after
//! the tier (`cgroup::timeout`), marked `needs(cgroup)` / `needs(pidns)`
//! where the tier needs it.

use std::sync::{Arc, Barrier};
use std::time::Duration;

use corral::{CancelToken, Error, LeftoverPolicy, Mechanism, OsOp, Outcome, Report, Signal};
use corral_testkit::invariants;
use corral_testkit::scenario::{
    ms, traced, tree, Count::Exactly, Fate::Alive, Fate::AliveIn, Fate::Dead, PerTier, Row, Tier,
    SLACK,
};

/// Generates one `#[test]` per row for each tier given as
/// `module => Mechanism (needs)`.
macro_rules! tiers {
    ($($module:ident => $mech:ident $needs:tt;)*) => {
        $(
            mod $module {
                $crate::invariant_matrix::tiers!(@tests $mech $needs
                    timeout
                    held_output
                    nonzero_exit_with_survivor
                    nonzero_exit_with_term_ignoring_survivor_and_grace
                    cancel
                    cancel_with_a_signal_override_and_grace
                    clean_exit
                    clean_exit_without_leftovers
                    clean_exit_under_kill_policy
                    clean_exit_with_a_stopped_leftover
                    grace_with_term_ignorer
                    grace_with_a_tree_that_dies_on_term
                    cancel_during_grace_sends_nothing_more
                    held_output_with_grace_and_term_ignorer
                    escaper_outside_the_group
                    thirty_two_cancellers_with_grace
                    dropped_without_wait
                    many_short_runs_racing_cancel
                    spawn_failures_signal_nothing
                );
            }
        )*
    };
    (@tests $mech:ident () $($name:ident)*) => {
        $(
            #[test]
            fn $name() {
                $crate::invariant_matrix::$name(corral::Mechanism::$mech)
            }
        )*
    };
    (@tests $mech:ident $needs:tt $($name:ident)*) => {
        $(
            #[corral_testkit::needs $needs]
            #[test]
            fn $name() {
                $crate::invariant_matrix::$name(corral::Mechanism::$mech)
            }
        )*
    };
}
pub(crate) use tiers;

/// Checks the invariants on one run's record.
#[track_caller]
fn check(m: Mechanism, ops: &[OsOp], r: &Report) {
    invariants::assert_ok(m, ops, r.pid, Some(&r.signals_sent));
}

/// Runs `row` in tier `m` with its OS operations traced, runs `during` on
/// another thread (with a cancel token for the run) once the helpers are
/// pinned, asserts the row, and checks the invariants on the record.
/// Returns the report and the record.
fn scenario(
    m: Mechanism,
    row: Row,
    during: impl FnOnce(CancelToken) + Send + 'static,
) -> (Report, Vec<OsOp>) {
    let t = Tier::new(m);
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
    check(m, &ops, &r);
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

fn position(ops: &[OsOp], f: impl Fn(&OsOp) -> bool) -> Option<usize> {
    ops.iter().position(f)
}

/// In the cgroup tier, a run that signalled SIGKILL removes its cgroup.
#[track_caller]
fn removed_if_cgroup(m: Mechanism, ops: &[OsOp]) {
    if m == Mechanism::Cgroup {
        assert!(
            ops.iter().any(|o| matches!(o, OsOp::CgroupRemoved { .. })),
            "{ops:?}"
        );
    }
}

const KILL: &[Signal] = &[Signal::KILL];
const TERM_KILL: &[Signal] = &[Signal::TERM, Signal::KILL];

pub fn timeout(m: Mechanism) {
    let (_, ops) = scenario(
        m,
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
    removed_if_cgroup(m, &ops);
}

pub fn held_output(m: Mechanism) {
    let (_, ops) = scenario(
        m,
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
    // The root had exited before the tree was signalled: the signal went
    // through an identity still held (a group pinned by its unreaped, zombie
    // leader; the cgroup; the namespace's init).
    let exited = position(&ops, |o| matches!(o, OsOp::RootExited { .. }));
    let signal = position(&ops, |o| matches!(o, OsOp::SignalTree { .. })).expect("SignalTree");
    if m != Mechanism::PidNamespace {
        assert!(exited.expect("RootExited") < signal, "{ops:?}");
    }
    removed_if_cgroup(m, &ops);
}

pub fn nonzero_exit_with_survivor(m: Mechanism) {
    scenario(
        m,
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

pub fn nonzero_exit_with_term_ignoring_survivor_and_grace(m: Mechanism) {
    scenario(
        m,
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

pub fn cancel(m: Mechanism) {
    scenario(
        m,
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

pub fn cancel_with_a_signal_override_and_grace(m: Mechanism) {
    // The CLI passes on the signal it got: INT first, then KILL.
    scenario(
        m,
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

pub fn clean_exit(m: Mechanism) {
    let (_, ops) = scenario(
        m,
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
    assert!(!ops.iter().any(|o| matches!(
        o,
        OsOp::SignalTree { .. } | OsOp::SignalMember { .. } | OsOp::KillAgain { .. }
    )));
    // A cgroup that held a kept member never goes back to the pool.
    removed_if_cgroup(m, &ops);
}

pub fn clean_exit_without_leftovers(m: Mechanism) {
    let (r, ops) = scenario(
        m,
        Row {
            // The helper ends by itself before the root exits.
            tree: tree(r#""$H" c sleep 0.2; echo ok"#),
            bound: Some((Duration::ZERO, SLACK)),
            outcome: Some(Outcome::Exited(0)),
            signals: Some([].as_slice().into()),
            kept: Some(0),
            fates: &[("c", Dead)],
            ..Row::default()
        },
        nothing,
    );
    assert!(!ops.iter().any(|o| matches!(
        o,
        OsOp::SignalTree { .. } | OsOp::SignalMember { .. } | OsOp::KillAgain { .. }
    )));
    // An empty cgroup never killed goes back to the pool when the keeper
    // holds it (so that corral's death still removes it).
    if m == Mechanism::Cgroup && r.crash_safety == corral::CrashSafety::Held {
        assert!(
            ops.iter().any(|o| matches!(o, OsOp::CgroupPooled { .. })),
            "{ops:?}"
        );
    }
}

/// A clean exit 0 with a running leftover (`c`, which ignores SIGHUP) and
/// a stopped one (`st`): the keep rule kills `st` through a pidfd
/// (`KillStopped`, once, while the identity is held, no tree signal) and
/// keeps `c`. In the process-group and cgroup tiers of this host (no
/// subreaper: the root's orphans go to init) the root's exit orphans the
/// group with `st` stopped, so the kernel has sent it SIGHUP and SIGCONT
/// before corral decides: `st` is dying, not stopped, and corral sends
/// nothing at all.
pub fn clean_exit_with_a_stopped_leftover(m: Mechanism) {
    let by_corral = [Mechanism::Subreaper, Mechanism::PidNamespace];
    let stopped = r#"until [ -e "$CORRAL_TEST_DIR/st.pinned" ] && grep -q '^State:[[:space:]]*T' /proc/$(cat "$CORRAL_TEST_DIR/st.pid" 2>/dev/null)/status 2>/dev/null; do sleep 0.01; done; "#;
    let (r, ops) = scenario(
        m,
        Row {
            tree: format!(
                r#""$H" c sh -c 'trap "" HUP; exec sleep 30' >/dev/null 2>&1 & "$H" st sh -c 'kill -STOP $$; exec sleep 30' >/dev/null 2>&1 & {}{stopped}echo ok"#,
                corral_testkit::ready("c")
            ),
            wait_delay: Some(Duration::from_secs(5)),
            // The tree starts up to three helpers and waits for them (a hang
            // guard here); the promise, after the root's exit, is below.
            bound: Some((Duration::ZERO, SLACK * 3)),
            outcome: Some(Outcome::Exited(0)),
            signals: Some([].as_slice().into()),
            killed: Some(PerTier::In(
                &[Mechanism::Subreaper, Mechanism::PidNamespace],
                Exactly(1),
                Exactly(0),
            )),
            kept: Some(1),
            fates: &[("c", Alive), ("st", Dead)],
            ..Row::default()
        },
        nothing,
    );
    let kills: Vec<u32> = ops
        .iter()
        .filter_map(|o| match o {
            OsOp::KillStopped { pid, .. } => Some(*pid),
            _ => None,
        })
        .collect();
    assert_eq!(kills.len(), usize::from(by_corral.contains(&m)), "{ops:?}");
    assert!(r.cleanup_errors.is_empty(), "{r:?}");
    let exit = r.timings.root_exit.expect("the root's exit was seen");
    corral_testkit::assert_between(r.timings.cleanup_done - exit, Duration::ZERO, SLACK);
    assert!(!ops.iter().any(|o| matches!(
        o,
        OsOp::SignalTree { .. } | OsOp::SignalMember { .. } | OsOp::KillAgain { .. }
    )));
    removed_if_cgroup(m, &ops);
}

pub fn clean_exit_under_kill_policy(m: Mechanism) {
    let (_, ops) = scenario(
        m,
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
    // The root exited by itself, but the tree was killed: never pooled.
    removed_if_cgroup(m, &ops);
}

pub fn grace_with_term_ignorer(m: Mechanism) {
    scenario(
        m,
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

pub fn grace_with_a_tree_that_dies_on_term(m: Mechanism) {
    scenario(
        m,
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

pub fn cancel_during_grace_sends_nothing_more(m: Mechanism) {
    // Timed out at 200 ms (TERM), cancelled at 300 ms inside the grace: the
    // cancel must not add a signal; SIGKILL comes once, at the grace's end.
    scenario(
        m,
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

pub fn held_output_with_grace_and_term_ignorer(m: Mechanism) {
    scenario(
        m,
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

pub fn escaper_outside_the_group(m: Mechanism) {
    // A TERM-ignoring member in a session of its own (outside the root's
    // group) holding the output: the tiers that hold it (cgroup, subreaper,
    // PID namespace) reach it through their own identity or a verified
    // pidfd, never by a bare pid. A process group cannot reach it: only the
    // group is signalled (it empties at SIGTERM), and the escaper lives on.
    let pg = m == Mechanism::ProcessGroup;
    let (_, ops) = scenario(
        m,
        Row {
            tree: format!(
                r#""$H" esc setsid sh -c 'trap "" TERM; exec sleep 30' & {}exit 0"#,
                corral_testkit::ready("esc")
            ),
            wait_delay: Some(ms(200)),
            grace: Some(ms(300)),
            bound: Some(if pg {
                (ms(200), ms(200) + SLACK)
            } else {
                (ms(500), ms(500) + SLACK)
            }),
            outcome: Some(Outcome::OutputHeld),
            signals: Some(PerTier::In(
                &[Mechanism::ProcessGroup],
                &[Signal::TERM],
                TERM_KILL,
            )),
            fates: &[("esc", AliveIn(&[Mechanism::ProcessGroup]))],
            ..Row::default()
        },
        nothing,
    );
    if matches!(m, Mechanism::Subreaper | Mechanism::Cgroup) {
        // Outside the group: signalled one by one through a pidfd.
        for sig in [Signal::TERM, Signal::KILL] {
            let sent = ops
                .iter()
                .any(|o| matches!(o, OsOp::SignalMember { signal, .. } if *signal == sig));
            // cgroup.kill reaches every member itself: no member SIGKILL
            // is needed there.
            if m == Mechanism::Subreaper || sig == Signal::TERM {
                assert!(sent, "{sig:?} not sent to the member: {ops:?}");
            }
        }
    }
}

pub fn thirty_two_cancellers_with_grace(m: Mechanism) {
    let t = Tier::new(m);
    let token = CancelToken::new();
    let mut cmd = t.sh(r#"trap "" TERM; "$H" ign sh -c 'trap "" TERM; exec sleep 30' & wait"#);
    cmd.cancel_token(&token).grace(ms(200));
    let ops = traced(&mut cmd);
    let running = cmd.spawn().unwrap();
    t.pin(&["ign"]);
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
    check(m, &ops.lock().unwrap(), &r);
    assert_eq!(r.outcome, Outcome::Cancelled);
    assert_eq!(r.signals_sent, vec![Signal::TERM, Signal::KILL]);
    t.assert_dead(&["ign"]);
}

pub fn dropped_without_wait(m: Mechanism) {
    let t = Tier::new(m);
    let mut cmd = t.sh(r#""$H" a & "$H" b & wait"#);
    let ops = traced(&mut cmd);
    let running = cmd.spawn().unwrap();
    let pid = running.id();
    t.pin(&["a", "b"]);
    drop(running);
    let ops = ops.lock().unwrap().clone();
    // No report: the signals are checked here, the rest by the checker.
    invariants::assert_ok(m, &ops, pid, None);
    let kills: Vec<_> = ops
        .iter()
        .filter_map(|o| match o {
            OsOp::SignalTree { signal, .. } => Some(*signal),
            _ => None,
        })
        .collect();
    assert_eq!(kills, vec![Signal::KILL], "{ops:?}");
    removed_if_cgroup(m, &ops);
    t.assert_dead(&["a", "b"]);
}

pub fn many_short_runs_racing_cancel(m: Mechanism) {
    // Exit and cancellation race; whichever wins, the record is well-formed.
    for i in 0..40u64 {
        // A scratch per run: in a PID namespace a helper is found by its
        // pid inside the namespace, which the kept helper of an earlier
        // run (another namespace) may have too.
        let t = Tier::new(m);
        let name = format!("r{i}");
        let mut cmd = t.sh(&format!(
            r#""$H" k{i} >/dev/null 2>&1 & exec "$H" {name} true"#
        ));
        cmd.leftovers(if i % 2 == 0 {
            LeftoverPolicy::Kill
        } else {
            LeftoverPolicy::KeepOnSuccess
        });
        let ops = traced(&mut cmd);
        let running = cmd.spawn().unwrap();
        t.pin(&[&format!("k{i}")]);
        let token = running.cancel_token();
        let th = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_micros(i * 100));
            token.cancel();
        });
        let r = running.wait();
        th.join().unwrap();
        check(m, &ops.lock().unwrap(), &r);
        let k = format!("k{i}");
        match r.outcome {
            Outcome::Exited(0) => {
                if i % 2 == 0 {
                    assert_eq!(r.signals_sent, vec![Signal::KILL]);
                    t.assert_dead(&[&k]);
                } else {
                    assert!(r.signals_sent.is_empty(), "{r:?}");
                    assert_eq!(r.leftovers.kept, 1);
                    assert!(t.watch.is_alive(&k));
                }
            }
            Outcome::Cancelled => {
                assert_eq!(r.signals_sent, vec![Signal::KILL]);
                t.assert_dead(&[&k]);
            }
            other => panic!("run {i}: {other:?}: {r:?}"),
        }
    }
}

pub fn spawn_failures_signal_nothing(m: Mechanism) {
    let t = Tier::new(m);
    let mut cmd = t.command("corral-no-such-program-7d2e");
    let ops = traced(&mut cmd);
    let err = cmd.spawn().unwrap_err();
    assert!(matches!(err, Error::Spawn { .. }), "{err:?}");
    let ops = ops.lock().unwrap().clone();
    assert!(
        !ops.iter().any(|o| matches!(
            o,
            OsOp::SignalTree { .. }
                | OsOp::SignalMember { .. }
                | OsOp::KillAgain { .. }
                | OsOp::Spawned { .. }
        )),
        "{ops:?}"
    );

    let token = CancelToken::new();
    token.cancel();
    let mut cmd = t.command("/bin/true");
    cmd.cancel_token(&token);
    let ops = traced(&mut cmd);
    assert!(matches!(
        cmd.spawn().unwrap_err(),
        Error::CancelledBeforeSpawn
    ));
    assert!(ops.lock().unwrap().is_empty());
}
