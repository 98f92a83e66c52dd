//! `corral::process_wide::one_shot_process`: a process that runs one command at a time
//! and exits after (what `corral run` declares) pays only for what one run
//! needs. Its own test binary: the setting is process-wide.
//!
//! Proven here: nothing is pooled and no inotify instance is made (its
//! teardown at exit waits for an SRCU grace period); each run's cgroup is
//! removed at its release; runs stay crash-safe with a keeper started in
//! the background and never waited for; `reap_orphans_now` reaps an orphan
//! (no reaping thread is started in a one-shot process); the keeper is not
//! woken by each registration (it reads its queue every 50 ms).
#![cfg(linux_raw)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use corral::{Command, ContainmentChoice, CrashSafety, Mechanism, OsOp};

/// Descriptors of this process that are inotify instances.
fn inotify_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .filter(|e| {
            std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy().contains("inotify"))
        })
        .count()
}

#[corral_testkit::needs(cgroup)]
#[test]
fn a_one_shot_process_pools_nothing_and_removes_each_cgroup() {
    corral::process_wide::one_shot_process();
    corral::process_wide::start_keeper();
    assert!(corral::process_wide::one_shot());
    let ops: Arc<Mutex<Vec<OsOp>>> = Arc::default();
    for _ in 0..3 {
        ops.lock().unwrap().clear();
        let seen = ops.clone();
        let r = Command::new("true")
            .containment(ContainmentChoice::Only(Mechanism::Cgroup))
            .timeout(Duration::from_secs(20))
            .trace_ops(move |op| seen.lock().unwrap().push(op.clone()))
            .run()
            .unwrap();
        assert_eq!(r.exit_code(), Some(0), "{r:?}");
        assert!(matches!(r.crash_safety, CrashSafety::Held), "{r:?}");
        let ops = ops.lock().unwrap();
        assert!(
            !ops.iter().any(|o| matches!(o, OsOp::CgroupPooled { .. })),
            "a one-shot process pooled a cgroup: {ops:?}"
        );
        assert!(
            ops.iter().any(|o| matches!(o, OsOp::CgroupRemoved { .. })),
            "the run's cgroup was not removed at its release: {ops:?}"
        );
    }
    assert_eq!(
        inotify_fds(),
        0,
        "a one-shot process made an inotify instance"
    );
    assert_eq!(
        corral::process_wide::release_cgroup_pool(),
        0,
        "nothing was pooled"
    );
}

#[test]
fn a_one_shot_process_reaps_orphans_when_asked() {
    corral::process_wide::one_shot_process();
    corral::process_wide::enable_subreaper().unwrap();
    corral::process_wide::reap_all_orphans();
    // The root exits at once; its child, re-parented here, exits 200 ms
    // later and stays a zombie child of this process until reaped.
    let s = corral_testkit::Scratch::new();
    let pidfile = s.path("orphan.pid");
    let script = format!(
        "sh -c 'echo $$ > {}; sleep 0.2' & exit 0",
        pidfile.display()
    );
    let r = Command::new("sh")
        .arg("-c")
        .arg(&script)
        .containment(ContainmentChoice::Only(Mechanism::ProcessGroup))
        .leftovers(corral::LeftoverPolicy::KeepOnSuccess)
        .timeout(Duration::from_secs(20))
        .run()
        .unwrap();
    assert_eq!(r.exit_code(), Some(0), "{r:?}");
    let end = Instant::now() + Duration::from_secs(10);
    let pid: u32 = loop {
        if let Some(p) = std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            break p;
        }
        assert!(Instant::now() < end, "the orphan never started");
        std::thread::sleep(Duration::from_millis(5));
    };
    // Once it is a zombie child of ours, reap_orphans_now takes it.
    let state = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|t| t.rsplit(')').next().map(|r| r.trim().chars().next()))
            .flatten()
    };
    loop {
        if state(pid) == Some('Z') {
            break;
        }
        assert!(Instant::now() < end, "the orphan never became a zombie");
        std::thread::sleep(Duration::from_millis(5));
    }
    // No thread reaps it meanwhile.
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        state(pid),
        Some('Z'),
        "something reaped it without being asked"
    );
    assert!(corral::process_wide::reap_orphans_now() >= 1);
    assert_eq!(state(pid), None, "still there after reap_orphans_now");
}

/// The keeper of this process: the child of one of its threads that named
/// itself `corral-keeper` (it does so once it runs; waited for up to 10 s).
fn own_keeper() -> u32 {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let children: Vec<u32> = std::fs::read_dir("/proc/self/task")
            .unwrap()
            .flatten()
            .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
            .flat_map(|c| {
                c.split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .collect::<Vec<u32>>()
            })
            .collect();
        if let Some(&p) = children.iter().find(|p| {
            std::fs::read_to_string(format!("/proc/{p}/comm"))
                .is_ok_and(|c| c.trim() == "corral-keeper")
        }) {
            return p;
        }
        assert!(Instant::now() < end, "no keeper named itself in 10 s");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Voluntary context switches of `pid` (each sleep it woke from).
fn wake_ups(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap()
}

#[test]
fn a_one_shot_keeper_is_not_woken_by_each_registration() {
    corral::process_wide::one_shot_process();
    corral::process_wide::start_keeper();
    let keeper = own_keeper();
    let before = wake_ups(keeper);
    let started = Instant::now();
    // 40 runs, each registered with the keeper and unregistered (two
    // messages a run): a keeper woken by each message would wake about
    // once a run; this one reads its queue every 50 ms.
    let runs = 40;
    for _ in 0..runs {
        let r = Command::new("true")
            .containment(ContainmentChoice::Only(Mechanism::ProcessGroup))
            .timeout(Duration::from_secs(20))
            .run()
            .unwrap();
        assert_eq!(r.exit_code(), Some(0), "{r:?}");
        assert!(matches!(r.crash_safety, CrashSafety::Held), "{r:?}");
    }
    let elapsed = started.elapsed();
    let woke = wake_ups(keeper) - before;
    // One wake-up per period, one for scheduling slack at either end (the
    // other tests of this binary run in parallel and register too).
    let bound = elapsed.as_millis() as u64 / 50 + 3;
    assert!(
        woke <= bound,
        "the keeper woke {woke} times in {elapsed:?} of {runs} runs (at most {bound} expected)"
    );
    assert!(
        woke < runs,
        "woken about once a run: {woke} for {runs} runs"
    );
}
