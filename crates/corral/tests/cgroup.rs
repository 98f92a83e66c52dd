//! cgroup v2 containment: escapers that leave the process group are still
//! contained, limits stop runaway trees, and no cgroup directory is left.
//! Runs as root (CI); where no cgroup v2 hierarchy is writable, or the
//! limits cannot be set, the tests are compiled as ignored
//! (`#[needs(cgroup)]`, `#[needs(limits)]`).
#![cfg(target_os = "linux")]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use corral::{ContainmentChoice, Error, LimitHit, Mechanism};
use corral_testkit::scenario::{escapers, Row, Tier};
use corral_testkit::{Scratch, Watch};

const SEC: Duration = Duration::from_secs(1);

/// corral's own cgroup v2 directory, if it can create children there.
fn writable_cgroup() -> Option<PathBuf> {
    corral_testkit::writable_cgroup_v2()
}

macro_rules! need_cgroup {
    () => {
        match writable_cgroup() {
            Some(d) => d,
            // `#[needs(cgroup)]` has already checked: a test here without
            // it must not pass silently.
            None => panic!("no writable cgroup v2 hierarchy here: mark the test #[needs(cgroup)]"),
        }
    };
}

/// Empty cgroups this process keeps for reuse (the pool) at most.
const POOL_MAX: usize = 16;

/// No `corral-<this pid>-*` directory is left under `dir` with a process
/// in it, and no more empty ones than the pool keeps (plus concurrent runs).
fn assert_no_cgroup_left(dir: &std::path::Path) {
    let prefix = format!("corral-{}-", std::process::id());
    let end = Instant::now() + SEC;
    loop {
        let mine: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(&prefix))
            .collect();
        let populated = |n: &String| {
            std::fs::read_to_string(dir.join(n).join("cgroup.events"))
                .is_ok_and(|e| e.lines().any(|l| l == "populated 1"))
        };
        let left: Vec<String> = if mine.len() <= POOL_MAX {
            mine.into_iter().filter(populated).collect()
        } else {
            mine
        };
        // Other tests of this binary run concurrently: only fail if some
        // directory stays for long.
        if left.is_empty() || Instant::now() >= end {
            // Concurrent runs may hold a directory briefly; require that none
            // of those seen now is still there after the other runs finish is
            // too strong here, so only check that nothing piles up.
            assert!(left.len() <= 4, "cgroup directories left behind: {left:?}");
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn cgroup_only() -> ContainmentChoice {
    ContainmentChoice::Only(Mechanism::Cgroup)
}

/// Runs `row` in the cgroup tier, asserts it, runs `after` on the result,
/// and checks that no cgroup directory is left.
#[track_caller]
fn run_row(row: &Row, after: impl FnOnce(&Tier, &corral::Report)) {
    let dir = need_cgroup!();
    let t = Tier::new(Mechanism::Cgroup);
    let r = t.run(row);
    after(&t, &r);
    assert_no_cgroup_left(&dir);
}

#[corral_testkit::needs(cgroup)]
#[test]
fn setsid_escaper_holding_the_pipe_is_killed() {
    run_row(&escapers::setsid_pipe_holder(), |_, _| {});
}

#[corral_testkit::needs(cgroup)]
#[test]
fn double_forked_daemon_is_killed_on_timeout() {
    run_row(&escapers::double_forked_daemon(), |_, _| {});
}

#[corral_testkit::needs(cgroup)]
#[test]
fn setsid_child_that_redirected_output_dies_with_a_nonzero_exit() {
    run_row(&escapers::setsid_survivor_of_nonzero_exit(4), |_, _| {});
}

#[corral_testkit::needs(cgroup)]
#[test]
fn setsid_child_is_kept_and_released_after_exit_0() {
    run_row(&escapers::setsid_survivor_kept(), |t, _| {
        let pid = t.watch.pid("keep", SEC).unwrap();
        // Released: it now lives in corral's own cgroup, not a per-command
        // one.
        let cg = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
        assert!(
            !cg.contains("corral-"),
            "kept child still in a corral cgroup: {cg}"
        );
    });
}

#[corral_testkit::needs(limits)]
#[test]
fn fork_bomb_stops_at_pids_max() {
    let dir = need_cgroup!();
    let s = Scratch::new();
    let _w = Watch::new(&s);
    let t = Instant::now();
    let r = s
        .sh(r#"bomb() { bomb & bomb & wait; }; bomb"#)
        .containment(cgroup_only())
        .leftovers(corral::LeftoverPolicy::Kill)
        .pids_max(64)
        .timeout(Duration::from_secs(2))
        .run();
    // `#[needs(limits)]` checked that the limit can be set here.
    let r = r.unwrap();
    // The bomb either runs into the deadline or gives up when forks fail;
    // either way it was stopped inside the tree and nothing of it is left.
    assert!(r.limits_hit.contains(&LimitHit::Pids), "{:?}", r.limits_hit);
    assert_eq!(r.leftovers.kept, 0);
    assert!(
        s.marked_processes().is_empty(),
        "fork bomb processes survived: {:?}",
        s.marked_processes()
    );
    if let Some(peak) = r.usage.and_then(|u| u.pids_peak) {
        assert!(peak <= 64, "pids peak {peak}");
    }
    assert!(t.elapsed() <= 5 * SEC, "took {:?}", t.elapsed());
    assert!(r.cleanup_errors.is_empty(), "{:?}", r.cleanup_errors);
    assert_no_cgroup_left(&dir);
}

#[corral_testkit::needs(limits)]
#[test]
fn allocation_past_memory_max_is_stopped() {
    let dir = need_cgroup!();
    let s = Scratch::new();
    let r = s
        // Holds 200 MiB in a pipe-fed buffer: tail keeps the whole input.
        .sh("head -c 200000000 /dev/zero | tail -c 200000000 > /dev/null")
        .containment(cgroup_only())
        .memory_max(32 << 20)
        .timeout(Duration::from_secs(20))
        .run();
    // `#[needs(limits)]` checked that the limit can be set here.
    let r = r.unwrap();
    assert!(r.limits_hit.contains(&LimitHit::Memory), "{r:?}");
    assert_ne!(r.exit_code(), Some(0));
    if let Some(peak) = r.usage.and_then(|u| u.memory_peak) {
        assert!(peak <= (33 << 20), "memory peak {peak}");
    }
    assert_no_cgroup_left(&dir);
}

#[corral_testkit::needs(cgroup)]
#[test]
fn many_concurrent_runs_each_get_their_own_cgroup() {
    let dir = need_cgroup!();
    // Every run waits until all 16 are in their cgroups (a run that ended
    // gives its cgroup back to the pool, for a later run to reuse).
    let s = Scratch::new();
    let gate = s.dir().join("gate");
    std::fs::create_dir(&gate).unwrap();
    let handles: Vec<_> = (0..16)
        .map(|i| {
            let script = format!(
                r#"cat /proc/self/cgroup; touch "{g}/{i}"; n=0
                   until [ "$(ls "{g}" | wc -l)" -ge 16 ] || [ $n -ge 1000 ]; do sleep 0.01; n=$((n+1)); done"#,
                g = gate.display()
            );
            std::thread::spawn(move || {
                corral::Command::new("/bin/sh")
                    .args(["-c", &script])
                    .containment(cgroup_only())
                    .run()
                    .unwrap()
            })
        })
        .collect();
    let mut seen = std::collections::HashSet::new();
    for h in handles {
        let r = h.join().unwrap();
        assert_eq!(r.exit_code(), Some(0));
        let text = String::from_utf8(r.stdout.bytes()).unwrap();
        let line = text
            .lines()
            .find(|l| l.starts_with("0::"))
            .unwrap()
            .to_owned();
        assert!(line.contains("/corral-"), "{line}");
        assert!(seen.insert(line), "two runs shared a cgroup");
    }
    assert_no_cgroup_left(&dir);
}

/// The wait to a deadline stops a moment short of it to warm the cgroup's
/// paths, then sleeps its last leg with a 1 ns timer slack (so the SIGKILL
/// lands at the deadline): the caller's thread gets its own slack back, and
/// the run ends as any timeout does.
#[corral_testkit::needs(cgroup)]
#[test]
fn a_deadline_leaves_the_waiting_threads_timer_slack_as_it_was() {
    let dir = need_cgroup!();
    let s = Scratch::new();
    let w = Watch::new(&s);
    // SAFETY: prctl(PR_SET_TIMERSLACK) changes this thread's timer slack
    // only; no pointer is passed.
    let set = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 77_777 as libc::c_ulong) };
    assert_eq!(set, 0, "PR_SET_TIMERSLACK failed");
    let t = Instant::now();
    let running = s
        .sh(r#""$H" child sleep 30 & exec "$H" root sleep 30"#)
        .containment(cgroup_only())
        .timeout(Duration::from_millis(1500))
        .grace(Duration::ZERO)
        .spawn()
        .unwrap();
    for name in ["child", "root"] {
        assert!(w.pid(name, 5 * SEC).is_some(), "{name} never started");
    }
    let r = running.wait();
    // SAFETY: PR_GET_TIMERSLACK reads this thread's timer slack.
    let now = unsafe { libc::prctl(libc::PR_GET_TIMERSLACK) };
    assert_eq!(now, 77_777, "the run changed the caller's timer slack");
    assert_eq!(r.outcome, corral::Outcome::TimedOut);
    assert_eq!(r.containment, Mechanism::Cgroup);
    corral_testkit::assert_between(t.elapsed(), Duration::from_millis(1500), 6 * SEC);
    assert!(r.cleanup_errors.is_empty(), "{:?}", r.cleanup_errors);
    assert_eq!(r.leftovers.killed, 1, "{:?}", r.leftovers);
    for name in ["child", "root"] {
        assert!(w.wait_dead(name, Duration::ZERO), "{name} outlived the run");
    }
    assert_no_cgroup_left(&dir);
}

#[test]
fn read_only_hierarchy_falls_back_to_process_group_or_fails_clearly() {
    // Detection pointed at a fake hierarchy whose mount point does not
    // exist: corral cannot create a cgroup there.
    let s = Scratch::new();
    // Run in a child process so the environment override affects only it.
    let text =
        corral_testkit::run_ignored_test_in_child("fallback_child", &s.fake_readonly_cgroup_env());
    assert!(text.contains("FALLBACK-OK"), "{text}");
}

/// Runs only inside `read_only_hierarchy_falls_back...` (which sets the
/// fake detection files).
#[test]
#[ignore = "helper of read_only_hierarchy_falls_back_to_process_group_or_fails_clearly"]
fn fallback_child() {
    assert!(std::env::var_os("CORRAL_MOUNTINFO").is_some());
    let r = corral::Command::new("/bin/true").run().unwrap();
    assert_eq!(r.containment, Mechanism::ProcessGroup);
    let note = r.containment_note.clone().unwrap();
    assert!(note.contains("cgroup unavailable"), "{note}");
    match corral::Command::new("/bin/true")
        .containment(cgroup_only())
        .run()
    {
        Err(Error::Containment {
            mechanism,
            reason,
            source,
        }) => {
            assert_eq!(mechanism, Mechanism::Cgroup);
            assert!(reason.contains("cannot create a cgroup"), "{reason}");
            // The mount point does not exist: the OS error is kept as the
            // source, not flattened into the reason.
            let source = source.expect("the OS error behind the reason");
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound, "{source}");
        }
        other => panic!("expected a containment error, got {other:?}"),
    }
    match corral::Command::new("/bin/true").pids_max(10).run() {
        Err(Error::Containment { .. }) => {}
        other => panic!("a limit that cannot be had must be an error, got {other:?}"),
    }
    println!("FALLBACK-OK");
}
