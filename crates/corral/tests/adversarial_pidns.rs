//! Adversarial tests of the PID-namespace tier: what a command can do to
//! its namespace and to the init, and what corral leaves in the host.
#![cfg(linux_raw)]

use std::time::{Duration, Instant};

use corral::{Command, ContainmentChoice, LeftoverPolicy, Mechanism, Outcome, Output};

const SEC: Duration = Duration::from_secs(1);

fn ns(script: &str) -> Command {
    let mut c = Command::new("/bin/sh");
    c.args(["-c", script])
        .containment(ContainmentChoice::Only(Mechanism::PidNamespace))
        .timeout(20 * SEC)
        .stdout(Output::null())
        .stderr(Output::null());
    c
}

/// Zombie children of this process whose parent-death was theirs to
/// report: (pid, comm) of every child in state Z.
fn zombie_children() -> Vec<(u32, String)> {
    let mut kids = String::new();
    for t in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        kids += &std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
        kids.push(' ');
    }
    kids.split_whitespace()
        .filter_map(|p| p.parse::<u32>().ok())
        .filter_map(|p| {
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
            let (head, rest) = stat.rsplit_once(") ")?;
            let comm = head.split_once(" (")?.1.to_owned();
            rest.starts_with('Z').then_some((p, comm))
        })
        .collect()
}

/// A run keeps a leftover (keep-on-success): the init stays, detached,
/// until the leftover ends, then exits. It is this process's child: once
/// it exited it must not stay a zombie of a host that goes on running.
#[corral_testkit::needs(pidns)]
#[test]
fn a_detached_init_is_not_left_a_zombie() {
    let r = ns("sleep 0.3 & exit 0")
        .leftovers(LeftoverPolicy::KeepOnSuccess)
        .run()
        .unwrap();
    assert!(matches!(r.outcome, Outcome::Exited(0)), "{r:?}");
    assert_eq!(r.leftovers.kept, 1, "{r:?}");
    let init = r.pid;
    // The leftover ends after 0.3 s, the init right after.
    let deadline = Instant::now() + 5 * SEC;
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{init}/stat")).unwrap_or_default();
        if stat.is_empty() {
            break; // reaped
        }
        if Instant::now() > deadline {
            panic!(
                "the detached init {init} is still there: {stat}; zombies: {:?}",
                zombie_children()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

use corral::Signal;
use corral_testkit::Scratch;

/// `sh -c SCRIPT` in the PID-namespace tier with the scratch's environment
/// (every process of the tree carries its marker).
fn ns_in(s: &Scratch, script: &str) -> Command {
    let mut c = s.sh(script);
    c.containment(ContainmentChoice::Only(Mechanism::PidNamespace))
        .timeout(20 * SEC)
        .stdout(Output::null())
        .stderr(Output::null());
    c
}

/// The command tries to kill, stop and terminate its own init (pid 1 of
/// the namespace: signals from inside without a handler are dropped) and
/// then exits 5: the run is an ordinary `Exited(5)`, no signal sent.
#[corral_testkit::needs(pidns)]
#[test]
fn the_command_cannot_kill_or_stop_its_init() {
    let s = Scratch::new();
    let t = Instant::now();
    let r = ns_in(
        &s,
        "kill -KILL 1; kill -STOP 1; kill -TERM 1; kill -SEGV 1; sleep 0.2; \
         grep -q '^State:.*[SR]' /proc/1/status || exit 9; exit 5",
    )
    .run()
    .unwrap();
    assert_eq!(r.outcome, Outcome::Exited(5), "{r:?}");
    assert!(r.signals_sent.is_empty(), "{r:?}");
    assert!(t.elapsed() < 5 * SEC);
    s.assert_none_left();
}

/// A command killed by a signal it raised itself, before the deadline and
/// with members left: `Signaled` with that signal, never `TimedOut` nor
/// the namespace's SIGKILL; the members are killed.
#[corral_testkit::needs(pidns)]
#[test]
fn a_signal_the_command_raised_itself_is_reported_as_it() {
    let s = Scratch::new();
    let r = ns_in(&s, "sleep 30 & setsid sleep 31 & kill -HUP $$")
        .wait_delay(Duration::from_millis(200))
        .run()
        .unwrap();
    assert_eq!(r.outcome, Outcome::Signaled(Signal::HUP), "{r:?}");
    assert_eq!(r.leftovers.killed, 2, "{r:?}");
    s.assert_none_left();
}

/// At the timeout, with a grace period: the command traps TERM and goes
/// on, a member is stopped (SIGSTOP), 500 others sleep, one left the
/// session. TERM (with SIGCONT) ends the stopped one and the sleepers, the
/// trapper gets SIGKILL when the grace ends; the run returns within the
/// bound, timed out, with nothing left.
#[corral_testkit::needs(pidns)]
#[test]
fn timeout_with_grace_over_a_trapper_a_stopped_member_and_a_fan_out() {
    let s = Scratch::new();
    let t = Instant::now();
    let r = ns_in(
        &s,
        "trap 'echo' TERM; sleep 40 & kill -STOP $!; \
         i=0; while [ $i -lt 500 ]; do sleep 41 & i=$((i+1)); done; \
         setsid sleep 42 & \
         touch \"$CORRAL_TEST_DIR/armed\"; while :; do sleep 0.05; done",
    )
    .timeout(Duration::from_secs(4))
    .grace(Duration::from_millis(700))
    .signal(Signal::TERM)
    .run()
    .unwrap();
    let took = t.elapsed();
    assert!(s.path("armed").exists(), "the tree never got ready: {r:?}");
    assert_eq!(r.outcome, Outcome::TimedOut, "{r:?}");
    assert_eq!(r.signals_sent, vec![Signal::TERM, Signal::KILL], "{r:?}");
    assert!(took >= Duration::from_millis(4700), "{took:?}");
    assert!(took < Duration::from_secs(8), "{took:?}");
    s.assert_none_left();
}
