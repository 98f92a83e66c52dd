//! Adversarial crash safety of a library host: a host that forks (without
//! exec) while its other threads run commands, and the fork runs commands
//! too. The keeper is per process, so this binary is its own process.
#![cfg(linux_raw)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use corral::{Command, ContainmentChoice, Mechanism, Outcome, Output};
use corral_testkit::{ready, Scratch, Watch};

const SEC: Duration = Duration::from_secs(1);

/// The keeper is per process: the tests of this binary take turns.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn cmd(m: Mechanism, program: &str) -> Command {
    let mut c = Command::new(program);
    c.containment(ContainmentChoice::Only(m))
        .timeout(Duration::from_secs(10))
        // No pipe a fork could inherit and hold.
        .stdout(Output::null())
        .stderr(Output::null());
    c
}

/// A host forks while other threads of it register runs with its keeper
/// (the keeper's lock held for a moment at every spawn and every end). The
/// fork inherits the lock as it was: held by a thread that does not exist
/// in the fork. The fork's own runs must not wait for that lock (they have
/// a keeper of their own): every fork runs a command and exits within a
/// bound.
fn fork_while_other_threads_run(m: Mechanism) {
    let _one = serial();
    let stop = Arc::new(AtomicBool::new(false));
    let busy: Vec<_> = (0..2)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let r = cmd(m, "true").run().unwrap();
                    assert!(matches!(r.outcome, Outcome::Exited(0)), "{r:?}");
                }
            })
        })
        .collect();
    // The busy threads run (and so started this process's keeper).
    std::thread::sleep(Duration::from_millis(100));
    let mut hung = 0;
    for _ in 0..150 {
        // SAFETY: the child only runs corral (allocation is fork-safe in
        // glibc) and leaves with _exit; the parent waits for it below.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let ok = std::panic::catch_unwind(|| {
                if m == Mechanism::Subreaper {
                    // Not inherited through fork (prctl(2)).
                    corral::process_wide::enable_subreaper().unwrap();
                }
                let r = cmd(m, "true").run().unwrap();
                matches!(r.outcome, Outcome::Exited(0)) && r.crash_safety.is_held()
            })
            .unwrap_or(false);
            // SAFETY: ends the fork without the parent's exit handlers.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut status = 0;
        loop {
            // SAFETY: waits for the child forked above, with a valid
            // status pointer.
            let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if r == pid {
                assert!(
                    libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
                    "the fork's run failed: {status:#x}"
                );
                break;
            }
            if Instant::now() > deadline {
                hung += 1;
                if std::env::var_os("ADV_GDB").is_some() {
                    let o = std::process::Command::new("gdb")
                        .args(["-p", &pid.to_string(), "-batch", "-ex", "bt"])
                        .output()
                        .unwrap();
                    eprintln!("{}", String::from_utf8_lossy(&o.stdout));
                }
                // SAFETY: `pid` is our unreaped child: no other process.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                    libc::waitpid(pid, &mut status, 0);
                }
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        if hung > 0 {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for t in busy {
        t.join().unwrap();
    }
    assert_eq!(hung, 0, "a fork hung in corral (an inherited lock)");
}

#[test]
fn a_fork_taken_while_other_threads_run_commands_can_run_its_own_process_group() {
    fork_while_other_threads_run(Mechanism::ProcessGroup);
}

#[corral_testkit::needs(cgroup)]
#[test]
fn a_fork_taken_while_other_threads_run_commands_can_run_its_own_cgroup() {
    fork_while_other_threads_run(Mechanism::Cgroup);
}

#[corral_testkit::needs(pidns)]
#[test]
fn a_fork_taken_while_other_threads_run_commands_can_run_its_own_pid_namespace() {
    fork_while_other_threads_run(Mechanism::PidNamespace);
}

/// This process's live keeper.
fn keeper_pid() -> Option<i32> {
    corral_testkit::keeper::own_keeper()
}

/// The command stops the keeper (SIGSTOP: same user, no mask blocks it)
/// and exits 0. Had corral died then, the keeper could not have acted: the
/// report must not say the run was crash-safe. Once continued, the same
/// keeper holds the next run.
fn command_stops_the_keeper(m: Mechanism) {
    let _one = serial();
    // Started by a first run.
    let r = cmd(m, "true").run().unwrap();
    assert!(r.crash_safety.is_held(), "{r:?}");
    let keeper = keeper_pid().expect("no keeper");
    let mut c = cmd(m, "sh");
    // Ends once the keeper is stopped (a SIGSTOP takes effect a moment
    // after `kill` returns).
    c.args([
        "-c",
        &format!(
            "kill -STOP {keeper}; until grep -q ') T ' /proc/{keeper}/stat; do sleep 0.01; done"
        ),
    ]);
    let r = c.run().unwrap();
    let stopped = std::fs::read_to_string(format!("/proc/{keeper}/stat")).unwrap();
    // Continue it before asserting (it holds the runs of this process).
    let _ = std::process::Command::new("kill")
        .args(["-CONT", &keeper.to_string()])
        .status();
    assert!(stopped.contains(") T "), "{stopped}");
    assert!(matches!(r.outcome, Outcome::Exited(0)), "{r:?}");
    match &r.crash_safety {
        corral::CrashSafety::Lost(why) => assert!(why.contains("stopped"), "{why}"),
        other => panic!("a run whose keeper was stopped said {other:?}"),
    }
    let r = cmd(m, "true").run().unwrap();
    assert!(r.crash_safety.is_held(), "{r:?}");
    assert_eq!(
        keeper_pid(),
        Some(keeper),
        "the continued keeper was replaced"
    );
}

#[test]
fn a_command_that_stops_the_keeper_is_not_reported_crash_safe_process_group() {
    command_stops_the_keeper(Mechanism::ProcessGroup);
}

#[corral_testkit::needs(cgroup)]
#[test]
fn a_command_that_stops_the_keeper_is_not_reported_crash_safe_cgroup() {
    command_stops_the_keeper(Mechanism::Cgroup);
}

/// A host starts a run, then forks (without exec); the fork starts a run of
/// its own. Then the parent is SIGKILLed: the parent's tree dies (its
/// keeper, or its namespace's init, watches the parent), the fork's tree
/// is left alone and its run ends normally, still crash-safe (the fork has
/// a keeper, or a host pidfd, of its own).
fn fork_survives_its_parents_death(tier: &str, kill_fork: bool) {
    // One at a time (light on a loaded machine). In the PID-namespace row
    // two namespaces have the same inner pids: a watch that went by pid
    // alone could pin as `cb` (pid 4 in the fork's namespace) a short-lived
    // marked `cat` of the parent's own `ready` loop (pid 4 in the parent's
    // namespace) and see it "die". So the watch checks each helper's PID
    // namespace too (`NAME.ns`).
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let s = Scratch::new();
    if tier == "pid-namespace" {
        s.namespaced();
    }
    let w = Watch::new(&s);
    let mut host = std::process::Command::new(std::env::current_exe().unwrap());
    host.args(["--exact", "fork_host", "--nocapture", "--ignored"])
        .env("CORRAL_FORK_TIER", tier)
        .envs(s.env())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut parent = host.spawn().unwrap();
    for n in ["pa", "cb"] {
        assert!(
            w.pid(n, 10 * SEC).is_some(),
            "{tier}: helper {n} never started"
        );
    }
    if kill_fork {
        // The other way round: the fork dies, the parent's run goes on.
        assert!(s.wait_file("fork.pid", 10 * SEC));
        let fork: i32 = std::fs::read_to_string(s.path("fork.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // The fork is the parent's unreaped child while the parent lives
        // (the parent only waits for its run): the pid is the fork's.
        let fd = rustix::process::pidfd_open(
            rustix::process::Pid::from_raw(fork).unwrap(),
            rustix::process::PidfdFlags::empty(),
        )
        .unwrap();
        rustix::process::pidfd_send_signal(&fd, rustix::process::Signal::KILL).unwrap();
        assert!(
            w.wait_dead("cb", 3 * SEC),
            "{tier}: the fork's tree survived the fork's death"
        );
        std::thread::sleep(Duration::from_millis(200));
        assert!(
            w.is_alive("pa"),
            "{tier}: the parent's tree died with the fork"
        );
        parent.kill().unwrap();
        parent.wait().unwrap();
        assert!(w.wait_dead("pa", 3 * SEC), "{tier}: pa survived the parent");
        return;
    }
    parent.kill().unwrap();
    let t = Instant::now();
    parent.wait().unwrap();
    assert!(
        w.wait_dead("pa", 3 * SEC),
        "{tier}: the parent's tree survived the parent's death"
    );
    assert!(t.elapsed() < 3 * SEC);
    assert!(
        w.is_alive("cb"),
        "{tier}: the fork's tree died with the parent"
    );
    std::fs::write(s.path("pa.gone"), b"").unwrap();
    // The fork's run ends by itself (its command kills cb after 1 s).
    assert!(
        s.wait_file("fork.done", 15 * SEC),
        "{tier}: the fork's run never ended"
    );
    let done = std::fs::read_to_string(s.path("fork.done")).unwrap();
    assert_eq!(done.trim(), "Exited(7) held", "{tier}");
    assert!(w.wait_dead("cb", SEC));
}

#[test]
fn a_fork_survives_its_parents_death_process_group() {
    fork_survives_its_parents_death("process-group", false);
}

#[corral_testkit::needs(cgroup)]
#[test]
fn a_fork_survives_its_parents_death_cgroup() {
    fork_survives_its_parents_death("cgroup", false);
}

#[corral_testkit::needs(pidns)]
#[test]
fn a_fork_survives_its_parents_death_pid_namespace() {
    fork_survives_its_parents_death("pid-namespace", false);
}

/// The host of `fork_survives_its_parents_death` (run only in that child).
#[test]
#[ignore = "helper: the host process of fork_survives_its_parents_death (run only in that child)"]
fn fork_host() {
    let Ok(tier) = std::env::var("CORRAL_FORK_TIER") else {
        return;
    };
    let m: Mechanism = tier.replace('-', "_").parse().unwrap();
    let dir = std::env::var("CORRAL_TEST_DIR").unwrap();
    let mut a = cmd(m, "/bin/sh");
    a.args(["-c", &format!(r#""$H" pa & {} wait"#, ready("pa"))])
        .timeout(60 * SEC);
    let running = a.spawn().unwrap();
    // SAFETY: this helper runs alone in its process (one test thread); the
    // child only runs corral and leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let me = std::process::id().to_string();
        let _ = std::fs::write(format!("{dir}/fork.tmp"), me);
        let _ = std::fs::rename(format!("{dir}/fork.tmp"), format!("{dir}/fork.pid"));
        let mut b = cmd(m, "/bin/sh");
        // cb runs until the test saw the parent die and the tree of pa
        // go; then the command ends it and exits 7. (`/bin/true` first: in
        // the PID-namespace tier cb is then pid 4 in its namespace, pa pid 3
        // in the parent's. Inner pids alone do not tell processes apart
        // (the parent's tree has a pid 4 too, marked): the Watch checks
        // the namespace each helper names.)
        b.args([
            "-c",
            &format!(
                r#"/bin/true; "$H" cb & {} until [ -e "$CORRAL_TEST_DIR/pa.gone" ]; do sleep 0.01; done; kill $!; exit 7"#,
                ready("cb")
            ),
        ])
        .timeout(60 * SEC);
        let line = match b.run() {
            Ok(r) => format!(
                "{:?} {}",
                r.outcome,
                if r.crash_safety.is_held() {
                    "held"
                } else {
                    "lost"
                }
            ),
            Err(e) => format!("error {e}"),
        };
        let _ = std::fs::write(format!("{dir}/fork.tmp"), line);
        let _ = std::fs::rename(format!("{dir}/fork.tmp"), format!("{dir}/fork.done"));
        // SAFETY: ends the fork without the parent's exit handlers.
        unsafe { libc::_exit(0) };
    }
    let _ = running.wait();
}

/// One library host, runs in three tiers at once (cgroup, PID namespace,
/// process group), and earlier runs of each that ended with a kept
/// leftover (keep-on-success). The host is SIGKILLed: every live tree dies
/// within the bound, every kept leftover of a finished run lives on.
#[corral_testkit::needs(cgroup, pidns)]
#[test]
fn host_death_with_runs_in_three_tiers_kills_the_live_and_keeps_the_kept() {
    let s = Scratch::new();
    s.namespaced();
    let w = Watch::new(&s);
    let mut host = std::process::Command::new(std::env::current_exe().unwrap());
    host.args(["--exact", "three_tier_host", "--nocapture", "--ignored"])
        .env("CORRAL_THREE_TIER_HOST", "1")
        .envs(s.env())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut parent = host.spawn().unwrap();
    let live = ["live_cg", "live_ns", "live_pg"];
    let kept = ["kept_cg", "kept_ns", "kept_pg"];
    for n in live.iter().chain(&kept) {
        assert!(w.pid(n, 15 * SEC).is_some(), "helper {n} never started");
    }
    assert!(s.wait_file("all.started", 15 * SEC));
    parent.kill().unwrap();
    let t = Instant::now();
    parent.wait().unwrap();
    for n in live {
        assert!(w.wait_dead(n, 3 * SEC), "{n} survived the host's death");
    }
    assert!(t.elapsed() < 3 * SEC, "{:?}", t.elapsed());
    std::thread::sleep(ms(300));
    for n in kept {
        assert!(w.is_alive(n), "the kept leftover {n} died with the host");
    }
    // The Watch kills the kept ones.
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The host of `host_death_with_runs_in_three_tiers_...` (only in that
/// child).
#[test]
#[ignore = "helper: the host process of host_death_with_runs_in_three_tiers_kills_the_live_and_keeps_the_kept"]
fn three_tier_host() {
    if std::env::var_os("CORRAL_THREE_TIER_HOST").is_none() {
        return;
    }
    let dir = std::env::var("CORRAL_TEST_DIR").unwrap();
    let tiers = [
        ("cg", Mechanism::Cgroup),
        ("ns", Mechanism::PidNamespace),
        ("pg", Mechanism::ProcessGroup),
    ];
    // Finished runs, each keeping a leftover.
    for (t, m) in tiers {
        let mut c = cmd(m, "/bin/sh");
        c.args([
            "-c",
            &format!(
                r#"/bin/true; /bin/true; "$H" kept_{t} & {} exit 0"#,
                ready(&format!("kept_{t}"))
            ),
        ])
        .leftovers(corral::LeftoverPolicy::KeepOnSuccess);
        let r = c.run().unwrap();
        assert!(matches!(r.outcome, Outcome::Exited(0)), "{r:?}");
    }
    // Live runs, each with a setsid escaper (a plain child in the process
    // group tier, which escapers leave by design).
    let running: Vec<_> = tiers
        .iter()
        .map(|(t, m)| {
            let mut c = cmd(*m, "/bin/sh");
            let setsid = if *t == "pg" { "" } else { "setsid " };
            c.args([
                "-c",
                &format!(
                    r#"{setsid}"$H" live_{t} & {} sleep 30"#,
                    ready(&format!("live_{t}"))
                ),
            ])
            .timeout(60 * SEC);
            c.spawn().unwrap()
        })
        .collect();
    std::fs::write(format!("{dir}/all.started"), b"").unwrap();
    for r in running {
        let _ = r.wait();
    }
}

/// The subreaper tier (the process a child subreaper): as
/// `a_fork_taken_while_other_threads_run_commands_can_run_its_own_*`, in a
/// child process of its own (the switch is process-wide).
///
/// `contain::orphans`' registry (and `contain::subreaper`'s `LIVE`/`STATE`,
/// `sys::roots`) are per process: a plain static `Mutex` would be inherited
/// held when the parent's reaper thread or a run held it at the fork, and
/// the fork would hang in `orphans::registry()`.
#[test]
fn a_fork_taken_while_other_threads_run_commands_can_run_its_own_subreaper() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "subreaper_fork_host", "--nocapture", "--ignored"])
        .env("CORRAL_SUBREAPER_FORK_HOST", "1")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("SUBREAPER FORKS OK"),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
#[ignore = "helper: the host process of a_fork_taken_while_other_threads_run_commands_can_run_its_own_subreaper"]
fn subreaper_fork_host() {
    if std::env::var_os("CORRAL_SUBREAPER_FORK_HOST").is_none() {
        return;
    }
    corral::process_wide::enable_subreaper().unwrap();
    fork_while_other_threads_run(Mechanism::Subreaper);
    println!("SUBREAPER FORKS OK");
}

#[test]
fn a_parent_survives_its_forks_death_process_group() {
    fork_survives_its_parents_death("process-group", true);
}

#[corral_testkit::needs(cgroup)]
#[test]
fn a_parent_survives_its_forks_death_cgroup() {
    fork_survives_its_parents_death("cgroup", true);
}

#[corral_testkit::needs(pidns)]
#[test]
fn a_parent_survives_its_forks_death_pid_namespace() {
    fork_survives_its_parents_death("pid-namespace", true);
}
