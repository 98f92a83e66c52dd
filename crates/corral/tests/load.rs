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
//!
//! The panic rows do the same through the drop path: a line callback
//! panics once the tree spins, the panic unwinds through `wait`, and the
//! run's `Drop` must kill the tree and wait for it by the same rule (the
//! window stretched while the tree dies) before it releases: when the
//! panic reaches the caller, every helper is dead. Before, the drop waited
//! the plain 1 ms window and released a tree still alive.
#![cfg(target_os = "linux")]

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use corral::{ContainmentChoice, Mechanism, Outcome, Signal};
use corral_testkit::{needs, Scratch, Watch};

/// Helpers in the tree.
const N: usize = 300;
/// Far shorter than a few hundred busy processes take to die on two cores.
const WINDOW: Duration = Duration::from_millis(1);
/// Slack on the upper bound (a loaded 2-core CI box).
const SLACK: Duration = Duration::from_secs(3);
/// The documented bound on the confirm: the limit (10 windows, at least
/// 5 s) moves with each death while the tree keeps dying, up to 6 limits
/// from the SIGKILL.
const CAP: Duration = Duration::from_secs(30);

/// How the run ends.
#[derive(Clone, Copy, PartialEq)]
enum End {
    /// `cancel()`, then `wait()`: the report must show no survivors.
    Cancel,
    /// A line callback panics inside `wait()`.
    Panic,
}

fn load_tree(mechanism: Mechanism, end: End) {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let fifo = s.fifo("go");
    // Each helper waits for the FIFO's writer to come and go, then spins.
    // In the panic rows the root itself also waits for the FIFO, lets the
    // helpers spin a moment and prints the line the callback panics on.
    let root_end = match end {
        End::Cancel => "wait",
        End::Panic => r#"read x < "$CORRAL_TEST_DIR/go"; sleep 0.3; echo boom; wait"#,
    };
    let script = format!(
        r#"i=0; while [ $i -lt {N} ]; do i=$((i+1)); "$H" b$i sh -c 'read x < "$CORRAL_TEST_DIR/go"; while :; do :; done' & done; {root_end}"#
    );
    let mut cmd = s.sh(&script);
    // What corral did to the tree, for the message should a helper live.
    let ops: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = ops.clone();
    cmd.trace_ops(move |op| log.lock().unwrap().push(format!("{op:?}")));
    cmd.containment(ContainmentChoice::Only(mechanism))
        .timeout(Duration::from_secs(120))
        .grace(Duration::ZERO)
        .confirm_window(WINDOW);
    // When the callback's panic started. It unwinds with `resume_unwind`,
    // which skips the panic hook: a backtrace printed on two cores shared
    // with 300 spinning processes takes seconds, and the bound is on the
    // drop path, not on the hook.
    let panicked_at: Arc<OnceLock<Instant>> = Arc::default();
    if end == End::Panic {
        let at = panicked_at.clone();
        cmd.on_line(move |_, line| {
            if line == b"boom" {
                let _ = at.set(Instant::now());
                std::panic::resume_unwind(Box::new("a callback bug under load"));
            }
        });
    }
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
    // The root is pinned too (it is no helper): the panic rows check it.
    let root = running.id();
    if end == End::Panic {
        let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| running.wait()));
        assert!(res.is_err(), "the callback's panic reaches the caller");
        let el = panicked_at.get().expect("the callback panicked").elapsed();
        // Bounded: from the panic, at most the stretched window's cap.
        assert!(el < CAP + SLACK, "the panic came back after {el:?}");
        // Every helper is dead when the panic reaches the caller: nothing
        // is waited for here.
        let alive: Vec<&String> = names.iter().filter(|n| w.is_alive(n)).collect();
        assert!(
            alive.is_empty(),
            "{} of {N} helpers still alive after the panic ({el:?}): {:?}; \
             what corral did: {:?}; the first of them: {}",
            alive.len(),
            &alive[..alive.len().min(5)],
            ops.lock().unwrap(),
            alive.first().map_or(String::new(), |n| w
                .pid(n, Duration::ZERO)
                .map_or(String::new(), proc_state))
        );
        // The root was released (reaped): its pid names no zombie of ours.
        assert!(
            !zombie_child_of_ours(root),
            "the root {root} was left a zombie"
        );
        return;
    }
    std::thread::sleep(Duration::from_millis(300));
    running.cancel();
    let t = Instant::now();
    let r = running.wait();
    let el = t.elapsed();
    assert_eq!(r.containment, mechanism);
    assert_eq!(r.outcome, Outcome::Cancelled);
    assert_eq!(r.signals_sent, vec![Signal::KILL]);
    assert!(
        r.cleanup_errors.is_empty(),
        "false survivors after {el:?}: {:?}",
        r.cleanup_errors
    );
    // Bounded: at most the stretched window's cap.
    assert!(el < CAP + SLACK, "returned after {el:?}");
    for n in &names {
        assert!(
            w.wait_dead(n, Duration::from_secs(2)),
            "{n} survived the run"
        );
    }
}

#[test]
fn a_dying_tree_is_no_survivor_process_group() {
    load_tree(Mechanism::ProcessGroup, End::Cancel);
}

#[needs(cgroup)]
#[test]
fn a_dying_tree_is_no_survivor_cgroup() {
    load_tree(Mechanism::Cgroup, End::Cancel);
}

#[test]
fn a_panic_under_load_leaves_nothing_process_group() {
    load_tree(Mechanism::ProcessGroup, End::Panic);
}

#[needs(cgroup)]
#[test]
fn a_panic_under_load_leaves_nothing_cgroup() {
    load_tree(Mechanism::Cgroup, End::Panic);
}

/// What /proc says of `pid`: its state, group and pending signals.
fn proc_state(pid: u32) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let keep = ["State:", "PPid:", "SigPnd:", "ShdPnd:", "SigBlk:"];
    let lines: Vec<&str> = status
        .lines()
        .filter(|l| keep.iter().any(|k| l.starts_with(k)))
        .collect();
    format!("pid {pid}: {lines:?}; stat {}", stat.trim())
}

/// Whether `pid` is a zombie whose parent is this test process.
fn zombie_child_of_ours(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return false;
    };
    let mut f = rest.split_whitespace();
    let state = f.next();
    let ppid = f.next().and_then(|p| p.parse::<u32>().ok());
    state == Some("Z") && ppid == Some(std::process::id())
}
