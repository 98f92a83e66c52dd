//! Crash safety past 512 concurrent runs: the keeper (one per corral
//! process) holds every run a process has at once, up to its descriptor
//! limit (it raises its soft limit to the hard one), not a fixed 512.
//!
//! Each test fits in `ulimit -n 1024` (soft and hard): 600 process-group
//! runs cost the host one descriptor each (the root's pidfd) and the keeper
//! one each in its own table (a limit of 1024 gives it room for 1006).
//! Its own test binary: the tests count this process's descriptors and
//! children.
#![cfg(tokio_linux)]

use std::process::Stdio;
use std::time::{Duration, Instant};

use corral::{Command, ContainmentChoice, CrashSafety, Mechanism};
use corral_testkit::{Scratch, Watch};

/// More than the 512 the keeper once held.
const RUNS: usize = 600;

const SEC: Duration = Duration::from_secs(1);

/// The tests of this binary each hold 600 descriptors (runs, or pidfds of
/// helpers): one at a time, to fit in 1024.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// The keeper children of this process (`corral-keeper`), alive.
fn keepers() -> Vec<u32> {
    keepers_of(std::process::id())
}

/// The keeper children of process `pid` (of any of its threads).
fn keepers_of(pid: u32) -> Vec<u32> {
    let mut v = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        let text = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
        for pid in text
            .split_whitespace()
            .filter_map(|p| p.parse::<u32>().ok())
        {
            if std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim() == "corral-keeper")
            {
                v.push(pid);
            }
        }
    }
    v
}

/// Descriptors of process `pid`.
fn fds_of(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// 600 concurrent async runs in the process-group tier (stdio null), all
/// alive at once: every one is crash-safe (`require_crash_safety` makes a
/// run that is not fail at spawn), the keeper holds a descriptor for each
/// of them at once, and every report says `Held`.
#[test]
fn six_hundred_concurrent_runs_are_all_crash_safe() {
    let _serial = serial();
    let _ = corral::process_wide::raise_nofile_limit();
    let s = Scratch::new();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut tokens = Vec::new();
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..RUNS {
            let mut c = Command::new("/bin/sleep");
            c.arg("120")
                .envs(s.env())
                .containment(ContainmentChoice::Only(Mechanism::ProcessGroup))
                .require_crash_safety(true)
                .stdout(corral::Output::null())
                .stderr(corral::Output::null())
                .timeout(150 * SEC);
            let running = c
                .spawn_async()
                .unwrap_or_else(|e| panic!("run {i} of {RUNS}: {e}"));
            tokens.push(running.cancel_token());
            tasks.spawn(running);
        }
        // The keeper holds all of them: one descriptor each, plus its
        // socket and the host's pidfd (once it has read the registrations
        // still queued in its socket).
        let k = keepers();
        assert_eq!(k.len(), 1, "keepers: {k:?}");
        let end = Instant::now() + 30 * SEC;
        loop {
            let held = fds_of(k[0]);
            if held >= RUNS + 2 {
                break;
            }
            assert!(
                Instant::now() < end,
                "the keeper holds {held} descriptors with {RUNS} runs alive"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        for t in &tokens {
            t.cancel();
        }
        let mut n = 0;
        while let Some(r) = tasks.join_next().await {
            let r = r.unwrap();
            assert_eq!(r.crash_safety, CrashSafety::Held, "{r:?}");
            assert_eq!(r.outcome_name(), "cancelled", "{r:?}");
            n += 1;
        }
        assert_eq!(n, RUNS);
    });
    s.assert_none_left();
    // Every run unregistered: the keeper is back to its two descriptors.
    let k = keepers();
    let end = Instant::now() + 10 * SEC;
    while fds_of(k[0]) > 2 {
        assert!(
            Instant::now() < end,
            "the keeper still holds {} descriptors",
            fds_of(k[0])
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A host with 600 live process-group runs (each a shell and a helper
/// child, in the root's group) is SIGKILLed: every tree dies within a few
/// seconds (the helpers would live 30 s). The helpers are pinned by this
/// process's own `Watch` (pidfds), never by the host.
#[test]
fn sigkill_of_a_host_with_six_hundred_runs_kills_every_tree() {
    let _serial = serial();
    let _ = corral::process_wide::raise_nofile_limit();
    let s = Scratch::new();
    let w = Watch::new(&s);
    let mut host = std::process::Command::new(std::env::current_exe().unwrap());
    host.args(["--exact", "many_runs_host", "--nocapture", "--ignored"])
        .envs(s.env())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // Killed on every path out of this test (a failed assertion included).
    struct KillOnDrop(std::process::Child);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut child = KillOnDrop(host.spawn().unwrap());
    let t0 = Instant::now();
    while !s.path("spawned").exists() {
        let exited = child.0.try_wait().unwrap();
        assert!(
            exited.is_none() && t0.elapsed() < 60 * SEC,
            "the host did not start its {RUNS} runs (exited: {exited:?})"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let names: Vec<String> = (0..RUNS).map(|i| format!("t{i}")).collect();
    for n in &names {
        assert!(w.pid(n, 20 * SEC).is_some(), "helper {n} never started");
    }
    for n in &names {
        assert!(w.is_alive(n), "helper {n} died before the host did");
    }
    // Well before the helpers would end by themselves (30 s).
    assert!(
        t0.elapsed() < 25 * SEC,
        "took {:?} to start the runs: too late to tell a kill from an exit",
        t0.elapsed()
    );
    child.0.kill().unwrap();
    let t = Instant::now();
    child.0.wait().unwrap();
    for n in &names {
        assert!(
            w.wait_dead(n, (5 * SEC).saturating_sub(t.elapsed())),
            "helper {n} survived the host's death ({:?} after it)",
            t.elapsed()
        );
    }
    s.assert_none_left();
}

/// Registrations still queued in the keeper's socket when the host dies
/// count: the keeper is stopped (SIGSTOP) while a host registers 50 runs,
/// the host is SIGKILLed, and only then does the keeper run again. It sees
/// the host gone and reads the queue before acting: every tree dies. (It
/// once acted on the host's death first and dropped what was queued.)
#[test]
fn registrations_queued_when_the_host_dies_are_honoured() {
    use rustix::process::{pidfd_open, pidfd_send_signal, Pid, PidfdFlags, Signal};
    let _serial = serial();
    let s = Scratch::new();
    let w = Watch::new(&s);
    let mut host = std::process::Command::new(std::env::current_exe().unwrap());
    host.args(["--exact", "many_runs_host", "--nocapture", "--ignored"])
        .env("CORRAL_KEEPER_TEST_RUNS", "50")
        .envs(s.env())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    struct KillOnDrop(std::process::Child);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    /// Lets the keeper run again on every path out (it then sees its host
    /// gone and ends).
    struct ContOnDrop(Option<rustix::fd::OwnedFd>);
    impl Drop for ContOnDrop {
        fn drop(&mut self) {
            if let Some(fd) = &self.0 {
                let _ = pidfd_send_signal(fd, Signal::CONT);
            }
        }
    }
    let mut child = KillOnDrop(host.spawn().unwrap());
    let host_pid = child.0.id();
    assert!(
        s.wait_file("keeper-up", 30 * SEC),
        "the host did not start its keeper ({:?})",
        child.0.try_wait()
    );
    let keeper = keepers_of(host_pid);
    assert_eq!(keeper.len(), 1, "the host's keepers: {keeper:?}");
    let keeper = keeper[0];
    let kfd = pidfd_open(Pid::from_raw(keeper as i32).unwrap(), PidfdFlags::empty()).unwrap();
    let mut cont = ContOnDrop(None);
    pidfd_send_signal(&kfd, Signal::STOP).unwrap();
    cont.0 = Some(kfd);
    std::fs::write(s.path("go"), b"").unwrap();
    let t0 = Instant::now();
    while !s.path("spawned").exists() {
        let exited = child.0.try_wait().unwrap();
        assert!(
            exited.is_none() && t0.elapsed() < 60 * SEC,
            "the host did not start its runs (exited: {exited:?})"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let names: Vec<String> = (0..50).map(|i| format!("t{i}")).collect();
    for n in &names {
        assert!(w.pid(n, 20 * SEC).is_some(), "helper {n} never started");
    }
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    drop(cont);
    let t = Instant::now();
    for n in &names {
        assert!(
            w.wait_dead(n, (5 * SEC).saturating_sub(t.elapsed())),
            "helper {n} survived the host's death ({:?} after it)",
            t.elapsed()
        );
    }
    s.assert_none_left();
}

/// The host for the tests above (run only in a child of them): starts the
/// runs (`CORRAL_KEEPER_TEST_RUNS`, else 600), each required to be
/// crash-safe, says so with the file `spawned`, and waits to be killed.
/// With a count set, it first starts its keeper, says so (`keeper-up`) and
/// waits for the file `go`.
#[test]
#[ignore = "helper: the host process of the keeper_scale host-death tests"]
fn many_runs_host() {
    let _ = corral::process_wide::raise_nofile_limit();
    let dir = std::env::var_os("CORRAL_TEST_DIR").expect("run by the test only");
    let dir = std::path::Path::new(&dir);
    let n = match std::env::var("CORRAL_KEEPER_TEST_RUNS") {
        Ok(v) => {
            // A first run starts the keeper.
            let r = Command::new("true")
                .containment(ContainmentChoice::Only(Mechanism::ProcessGroup))
                .require_crash_safety(true)
                .run()
                .unwrap();
            assert_eq!(r.exit_code(), Some(0));
            std::fs::write(dir.join("keeper-up"), b"").unwrap();
            let end = Instant::now() + 60 * SEC;
            while !dir.join("go").exists() && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(5));
            }
            v.parse().unwrap()
        }
        Err(_) => RUNS,
    };
    let mut runs = Vec::new();
    for i in 0..n {
        let mut c = Command::new("/bin/sh");
        c.args(["-c", r#""$H" "$1" & wait"#, "sh", &format!("t{i}")])
            .containment(ContainmentChoice::Only(Mechanism::ProcessGroup))
            .require_crash_safety(true)
            .stdout(corral::Output::null())
            .stderr(corral::Output::null())
            .timeout(120 * SEC);
        runs.push(c.spawn().unwrap());
    }
    std::fs::write(dir.join("spawned"), b"").unwrap();
    std::thread::sleep(120 * SEC);
    drop(runs);
}
