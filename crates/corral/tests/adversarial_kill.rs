//! Counting a killed process group (SIGSTOP to the group, a scan that
//! watches every member, then SIGKILL): a tree that forks continuously
//! while it is killed, zombies another kill ended, and a member reaped by
//! another process the moment the kill ends it. Every member must be dead
//! at return, nothing reported as a survivor that is dead, and `killed`
//! must never exceed the number of processes that really were in the
//! tree, and be exact where the tree allows it.
// Linux only: the Watch pins helpers by pidfd and `ready` reads /proc.
#![cfg(target_os = "linux")]

use std::time::{Duration, Instant};

use std::sync::{Arc, Mutex};

use corral::{ContainmentChoice, LeftoverPolicy, Mechanism, OsOp, Outcome};
use corral_testkit::Scratch;

/// Spawners that each start up to `per` children as fast as they can; each
/// child is recorded by its parent right after the fork (one line per
/// child in `forked`), and sleeps. Bounded: every process exits by itself
/// within 30 s.
fn forking_tree(spawners: usize, per: usize) -> String {
    let one = format!(
        "i=0; while [ $i -lt {per} ]; do sleep 30 & echo $! >> \"$CORRAL_TEST_DIR/forked\"; i=$((i+1)); done; exec sleep 30"
    );
    let mut s = String::new();
    for _ in 0..spawners {
        s.push_str(&format!(
            "sh -c '{one}' & echo $! >> \"$CORRAL_TEST_DIR/forked\"; "
        ));
    }
    s.push_str("sleep 0.2; exec sleep 30");
    s
}

fn forked(s: &Scratch) -> usize {
    std::fs::read_to_string(s.path("forked"))
        .unwrap_or_default()
        .lines()
        .count()
}

/// One tree at a time: the forking trees use many descriptors and
/// processes, and beside each other ran a test out of descriptors at
/// `ulimit -n 1024` (as the unprivileged CI user).
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE.lock().unwrap_or_else(|e| e.into_inner())
}

fn attack(mech: Mechanism, grace: Duration) {
    let _one = serial();
    let spawners = 4;
    for round in 0..3 {
        let s = Scratch::new();
        let ops: Arc<Mutex<Vec<OsOp>>> = Arc::default();
        let log = ops.clone();
        let t = Instant::now();
        let r = s
            .sh(&forking_tree(spawners, 400))
            .trace_ops(move |op| log.lock().unwrap().push(op.clone()))
            .containment(ContainmentChoice::Only(mech))
            .grace(grace)
            .timeout(Duration::from_millis(300 + 100 * round))
            .run()
            .unwrap();
        let el = t.elapsed();
        assert!(el < Duration::from_secs(8), "took {el:?}");
        assert_eq!(r.outcome, Outcome::TimedOut, "{r:?}");
        assert!(r.cleanup_errors.is_empty(), "{r:?}");
        // Each spawner may have one child forked but not yet recorded when
        // the kill came, and the root's own `sleep 0.2` may still run.
        let real = forked(&s) + spawners + 1;
        assert!(
            r.leftovers.killed <= real,
            "killed {} but at most {real} processes were in the tree",
            r.leftovers.killed
        );
        assert!(r.leftovers.killed >= 1, "{r:?}");
        s.assert_none_left();
        if mech == Mechanism::ProcessGroup {
            one_scan_after_the_kill(&ops.lock().unwrap(), grace, real);
        }
    }
}

/// The process-group tier scans the machine's processes once after the
/// SIGKILL, and not again to confirm (the group cannot grow after it:
/// `assert_none_left` above proves nothing was missed, in a tree forking
/// as fast as it can when the kill came); killed first, not before it
/// either. Unless the tree (up to `members` processes) may not all get a
/// descriptor: more members than the tier pins at once, or more than this
/// process's `RLIMIT_NOFILE` (the CI's `ulimit -n 1024`) allows: the
/// members the scan could not pin make the next check scan again (see `adversarial_scan::members_that_cannot_be_pinned_are_not_taken_for_gone`).
fn one_scan_after_the_kill(ops: &[OsOp], grace: Duration, members: usize) {
    if corral_testkit::invariants::scans_around_the_kill(ops).is_none() {
        // Ended in the grace (SIGTERM ends `sleep`): nothing to count.
        assert!(!grace.is_zero(), "no SIGKILL: {ops:?}");
        return;
    }
    corral_testkit::invariants::assert_one_scan_after_the_kill(ops, members, grace.is_zero());
}

#[test]
fn a_tree_forking_while_killed_first_leaves_nothing_and_never_overcounts() {
    attack(Mechanism::ProcessGroup, Duration::ZERO);
}

#[test]
fn a_tree_forking_through_a_grace_leaves_nothing_and_never_overcounts() {
    attack(Mechanism::ProcessGroup, Duration::from_millis(100));
}

#[corral_testkit::needs(cgroup)]
#[test]
fn a_tree_forking_while_killed_in_a_cgroup_leaves_nothing_and_never_overcounts() {
    attack(Mechanism::Cgroup, Duration::ZERO);
}

/// Leftovers killed after a clean exit (kill-first too, no grace): a tree
/// still forking when the root exits.
#[test]
fn leftovers_forking_after_a_clean_exit_are_all_killed() {
    let _one = serial();
    let spawners = 3;
    for _ in 0..3 {
        let s = Scratch::new();
        let mut script = forking_tree(spawners, 300);
        script = script.replace("sleep 0.2; exec sleep 30", "sleep 0.1; exit 0");
        let t = Instant::now();
        let r = s
            .sh(&script)
            .containment(ContainmentChoice::Only(Mechanism::ProcessGroup))
            .leftovers(LeftoverPolicy::Kill)
            .stdout(corral::Output::null())
            .stderr(corral::Output::null())
            .timeout(Duration::from_secs(20))
            .run()
            .unwrap();
        assert!(t.elapsed() < Duration::from_secs(8), "{:?}", t.elapsed());
        assert_eq!(r.outcome, Outcome::Exited(0), "{r:?}");
        assert!(r.cleanup_errors.is_empty(), "{r:?}");
        // As above; the root's `sleep 0.1` ended before its exit.
        let real = forked(&s) + spawners;
        assert!(
            r.leftovers.killed <= real,
            "killed {} > {real}",
            r.leftovers.killed
        );
        assert!(r.leftovers.killed >= 1, "{r:?}");
        s.assert_none_left();
    }
}

/// A member that died of someone else's SIGKILL before the timeout and was
/// never reaped (its parent became `sleep` and reaps nothing): a zombie of
/// signal 9 in the group. Only the helper alive at the timeout was killed
/// by corral, and `killed` must say 1.
fn zombie_of_another_kill(grace: Duration) {
    let _one = serial();
    use corral_testkit::{ready, Watch};
    let s = Scratch::new();
    let w = Watch::new(&s);
    let r = s
        .sh(&format!(
            "\"$H\" alive sh -c '\"$H\" victim & exec sleep 30' & {ra} {rv} \
             kill -9 $(cat \"$CORRAL_TEST_DIR/victim.pid\"); \
             while ! grep -q '^State:.*Z' /proc/$(cat \"$CORRAL_TEST_DIR/victim.pid\")/status; do sleep 0.01; done; \
             exec sleep 30",
            rv = ready("victim"),
            ra = ready("alive"),
        ))
        .containment(ContainmentChoice::Only(Mechanism::ProcessGroup))
        .grace(grace)
        .timeout(Duration::from_secs(20))
        .spawn()
        .unwrap();
    // Ended once the root is `sleep`: its loops (and their short-lived
    // `cat`, `grep`, `sleep`) are over, the tree is exactly the zombie and
    // `alive`.
    let comm = format!("/proc/{}/comm", r.id());
    let end = Instant::now() + Duration::from_secs(10);
    while std::fs::read_to_string(&comm).map_or(true, |c| c.trim() != "sleep") {
        assert!(Instant::now() < end, "the root never became sleep");
        std::thread::sleep(Duration::from_millis(5));
    }
    r.cancel();
    let r = r.wait();
    assert_eq!(r.outcome, Outcome::Cancelled, "{r:?}");
    assert!(w.wait_dead("alive", Duration::from_secs(2)));
    assert_eq!(
        r.leftovers.killed, 1,
        "grace {grace:?}: only `alive` was killed by corral: {r:?}"
    );
    s.assert_none_left();
}

#[test]
fn a_zombie_killed_by_someone_else_is_not_counted_as_killed_with_a_grace() {
    zombie_of_another_kill(Duration::from_millis(100));
}

/// No grace: the group is stopped and scanned before the SIGKILL, so the
/// zombie is found dead then, not counted. (When the kill went first and
/// the scan after it, that scan took every zombie of signal 9 for one the
/// kill had ended: the count said 2.)
#[test]
fn a_zombie_killed_by_someone_else_is_not_counted_as_killed_kill_first() {
    zombie_of_another_kill(Duration::ZERO);
}

/// Issue 37, the undercount made deterministic. `c` is a member whose
/// parent `p` left the group (`setpgid`: it outlives the kill) and waits
/// for it, so the moment the SIGKILL ends `c`, `p` reaps it: as a dying
/// parent in the tree does, or this process's orphan reaper. The trace hook
/// holds the first scan recorded after the SIGKILL until `p` has reaped
/// `c`. When the kill went first and the look after it, that scan was the
/// first look at the tree: `c` was never watched, and `killed` said 0
/// (every time). Stopped, scanned, then killed, `c` is watched before the
/// kill and counted: 1. Without grace and with one, and the order is the
/// checker's (`stop-count-kill`).
#[test]
fn a_member_reaped_by_another_process_as_the_kill_ends_it_is_counted() {
    for grace in [Duration::ZERO, Duration::from_millis(100)] {
        reaped_as_killed(grace);
    }
}

fn reaped_as_killed(grace: Duration) {
    use std::sync::atomic::Ordering::SeqCst;
    let _one = serial();
    use corral_testkit::{ready, Watch};
    let s = Scratch::new();
    let w = Watch::new(&s);
    // `p` forks `c` (the helper: records its pid, becomes `sleep 30`
    // ignoring SIGTERM, so that a grace ends in the SIGKILL), leaves the
    // group, says so, reaps `c` and writes its wait status.
    std::fs::write(
        s.path("p.pl"),
        r#"
my $dir = $ENV{CORRAL_TEST_DIR};
my $c = fork;
die "fork: $!" unless defined $c;
if ($c == 0) { exec $ENV{H}, 'c', 'sh', '-c', 'trap "" TERM; exec sleep 30'; exit 1 }
setpgrp(0, 0) or die "setpgid: $!";
open(my $l, '>', "$dir/left") or die; close $l;
waitpid($c, 0);
open(my $f, '>', "$dir/reaped.tmp") or die; print $f $?; close $f;
rename("$dir/reaped.tmp", "$dir/reaped") or die;
exit 0;
"#,
    )
    .unwrap();
    let ops: Arc<Mutex<Vec<OsOp>>> = Arc::default();
    let log = ops.clone();
    let reaped = s.path("reaped");
    let killed = std::sync::atomic::AtomicBool::new(false);
    let held = std::sync::atomic::AtomicBool::new(false);
    let r = s
        .sh(&format!(
            "\"$H\" p perl \"$CORRAL_TEST_DIR/p.pl\" & {rc} \
             until [ -e \"$CORRAL_TEST_DIR/left\" ]; do sleep 0.01; done; exec sleep 30",
            rc = ready("c"),
        ))
        .trace_ops(move |op| {
            log.lock().unwrap().push(op.clone());
            match op {
                OsOp::SignalTree {
                    signal: corral::Signal::KILL,
                    ..
                } => killed.store(true, SeqCst),
                OsOp::MembersScanned { .. } if killed.load(SeqCst) && !held.swap(true, SeqCst) => {
                    let end = Instant::now() + Duration::from_secs(10);
                    while !reaped.exists() && Instant::now() < end {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                }
                _ => {}
            }
        })
        .containment(ContainmentChoice::Only(Mechanism::ProcessGroup))
        .grace(grace)
        .timeout(Duration::from_secs(20))
        .spawn()
        .unwrap();
    let c = w.pid("c", Duration::from_secs(10)).expect("c started");
    let p = w.pid("p", Duration::from_secs(10)).expect("p started");
    // Ended once the root is `sleep`: `c` is `sleep`, `p` left the group.
    let comm = format!("/proc/{}/comm", r.id());
    let end = Instant::now() + Duration::from_secs(10);
    while std::fs::read_to_string(&comm).map_or(true, |c| c.trim() != "sleep") {
        assert!(Instant::now() < end, "the root never became sleep");
        std::thread::sleep(Duration::from_millis(5));
    }
    r.cancel();
    let r = r.wait();
    assert_eq!(r.outcome, Outcome::Cancelled, "{r:?}");
    assert!(r.cleanup_errors.is_empty(), "{r:?}");
    assert!(w.wait_dead("c", Duration::from_secs(2)));
    assert!(w.wait_dead("p", Duration::from_secs(5)), "p outlived c");
    // The premise: `p` reaped `c`, dead of SIGKILL.
    let status = std::fs::read_to_string(s.path("reaped")).unwrap_or_default();
    assert_eq!(status.trim(), "9", "c ({c}) as p ({p}) reaped it");
    assert_eq!(
        r.leftovers.killed, 1,
        "grace {grace:?}: `c` died of corral's SIGKILL: {r:?}"
    );
    let ops = ops.lock().unwrap();
    corral_testkit::invariants::assert_ok(
        Mechanism::ProcessGroup,
        &ops,
        r.pid,
        Some(&r.signals_sent),
    );
    s.assert_none_left();
}
