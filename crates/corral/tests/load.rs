//! The confirm window under load (promise 4, the truth): a tree that was
//! sent SIGKILL and is still dying when the window ends (hundreds of busy
//! processes on a loaded machine take longer to die than the window) is
//! waited for, not reported as survivors; the return stays bounded.
//!
//! Each test builds a tree of `N` testkit helpers that block on a FIFO,
//! then (once every helper is pinned by the watch) opens the FIFO so they
//! all busy-loop at once, cancels the run with SIGKILL and no grace, and
//! uses a confirm window far shorter than the tree takes to die: before
//! the window stretched while deaths were happening, this reported
//! `CleanupError::Survivors`.
#![cfg(target_os = "linux")]

use std::time::{Duration, Instant};

use corral::{ContainmentChoice, Mechanism, Outcome, Signal};
use corral_testkit::{needs, Scratch, Watch};

/// Helpers in the tree.
const N: usize = 300;
/// Far shorter than a few hundred busy processes take to die on two cores.
const WINDOW: Duration = Duration::from_millis(1);
/// Slack on the upper bound (a loaded 2-core CI box).
const SLACK: Duration = Duration::from_secs(3);

fn load_tree(mechanism: Mechanism) {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let fifo = s.path("go");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .expect("mkfifo");
    // Each helper waits for the FIFO's writer to come and go, then spins.
    let script = format!(
        r#"i=0; while [ $i -lt {N} ]; do i=$((i+1)); "$H" b$i sh -c 'read x < "$CORRAL_TEST_DIR/go"; while :; do :; done' & done; wait"#
    );
    let mut cmd = s.sh(&script);
    cmd.containment(ContainmentChoice::Only(mechanism))
        .timeout(Duration::from_secs(120))
        .grace(Duration::ZERO)
        .confirm_window(WINDOW);
    let running = cmd.spawn().expect("spawn");
    let names: Vec<String> = (1..=N).map(|i| format!("b{i}")).collect();
    for n in &names {
        let pid = w
            .pid(n, Duration::from_secs(60))
            .unwrap_or_else(|| panic!("helper {n} never started"));
        // Exec'd its `sh -c` (no longer the `H` script).
        let end = Instant::now() + Duration::from_secs(30);
        while std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "H")
            && Instant::now() < end
        {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    // Open the FIFO for writing (non-blocking: the readers are there) and
    // close it: every helper reading it sees end of file and spins.
    let go = rustix::fs::open(
        &fifo,
        rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::NONBLOCK,
        rustix::fs::Mode::empty(),
    );
    drop(go);
    std::thread::sleep(Duration::from_millis(300));
    running.cancel();
    let t = Instant::now();
    let r = running.wait();
    let el = t.elapsed();
    assert_eq!(r.containment, mechanism);
    assert_eq!(r.outcome, Outcome::Cancelled);
    assert_eq!(r.signals_sent, vec![Signal::KILL]);
    assert!(
        r.cleanup_error.is_none(),
        "false survivors after {el:?}: {:?}",
        r.cleanup_error
    );
    // Bounded: at most the stretched window's hard limit.
    let limit = Duration::from_secs(5).max(WINDOW * 10);
    assert!(el < limit + SLACK, "returned after {el:?}");
    for n in &names {
        assert!(
            w.wait_dead(n, Duration::from_secs(2)),
            "{n} survived the run"
        );
    }
}

#[test]
fn a_dying_tree_is_no_survivor_process_group() {
    load_tree(Mechanism::ProcessGroup);
}

#[needs(cgroup)]
#[test]
fn a_dying_tree_is_no_survivor_cgroup() {
    load_tree(Mechanism::Cgroup);
}
