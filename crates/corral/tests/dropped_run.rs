//! A caller that drops a run and exits leaves nothing behind.
//!
//! A *host* process (this test binary, re-run as the ignored test `host`)
//! starts a tree, waits until every helper runs, drops the run (an async
//! future that lost a `select!` against a timer, under a current-thread or
//! a multi-thread tokio runtime; or a sync `Running`), and leaves at once
//! with `std::process::exit` (as returning from `main` would: nothing that
//! the drop left for later gets to run). The test, outside the host, then
//! checks that every descendant is dead within a bound: a plain member, a
//! SIGTERM ignorer (the command has a long grace, which a dropped run must
//! not wait for) and, where the tier holds it, a `setsid` escaper. The
//! helpers are pinned by the test's own `Watch` (pidfds), never by the host.
#![cfg(tokio_linux)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use corral::{Command, ContainmentChoice, Mechanism};
use corral_testkit::{Scratch, Watch};

const SEC: Duration = Duration::from_secs(1);

#[derive(Clone, Copy, Debug)]
enum Driver {
    CurrentThread,
    MultiThread,
    Sync,
}

fn tier_name(m: Mechanism) -> &'static str {
    m.name()
}

fn helpers(via: Mechanism) -> &'static [&'static str] {
    match via {
        Mechanism::ProcessGroup => &["a", "ign"],
        _ => &["a", "ign", "esc"],
    }
}

/// A cgroup of its own for one host (cgroup tier): the host's per-command
/// cgroups are made inside it, where no other corral process looks for the
/// cgroups of a dead corral to clean up (which would hide a leak). Removed
/// on drop, whatever is left inside killed first.
struct HostCgroup(PathBuf);

impl HostCgroup {
    fn new(rep: usize, driver: Driver) -> HostCgroup {
        let own = corral_testkit::writable_cgroup_v2().expect("writable cgroup");
        let dir = own.join(format!(
            "dropped-run-{}-{rep}-{driver:?}",
            std::process::id()
        ));
        std::fs::create_dir(&dir).unwrap();
        HostCgroup(dir)
    }
}

impl Drop for HostCgroup {
    fn drop(&mut self) {
        fn remove(dir: &Path) {
            let _ = std::fs::write(dir.join("cgroup.kill"), "1");
            if let Ok(rd) = std::fs::read_dir(dir) {
                for e in rd.flatten() {
                    if e.file_type().is_ok_and(|t| t.is_dir()) {
                        remove(&e.path());
                    }
                }
            }
            for _ in 0..500 {
                if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        remove(&self.0);
    }
}

/// Runs the host for (tier, driver) `reps` times; after each, every helper
/// must be dead within 2 s of the host's exit.
fn dropped_then_exit(via: Mechanism, driver: Driver, reps: usize) {
    for rep in 0..reps {
        let cg = (via == Mechanism::Cgroup).then(|| HostCgroup::new(rep, driver));
        let s = Scratch::new();
        let w = Watch::new(&s);
        let t = Instant::now();
        let mut host = std::process::Command::new(std::env::current_exe().unwrap());
        if let Some(cg) = &cg {
            host.env("CORRAL_HOST_CGROUP", &cg.0);
        }
        let mut host = host
            .args(["--exact", "host", "--ignored", "--nocapture"])
            .envs(s.env())
            .env("CORRAL_HOST_TIER", tier_name(via))
            .env("CORRAL_HOST_DRIVER", format!("{driver:?}"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The host ends by itself; a regression must not hang the suite.
        let status = loop {
            if let Some(st) = host.try_wait().unwrap() {
                break st;
            }
            if t.elapsed() > 30 * SEC {
                let _ = host.kill();
                let _ = host.wait();
                panic!("the host did not exit within 30 s");
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let out = host.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            status.success() && text.contains("HOST-DROPPED"),
            "host failed ({status}):\n{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // The host saw every helper running before it dropped the run.
        for n in helpers(via) {
            assert!(
                w.pid(n, SEC).is_some(),
                "rep {rep}: helper {n} never pinned"
            );
            assert!(
                w.wait_dead(n, 2 * SEC),
                "rep {rep}: {via} {driver:?}: helper {n} outlived the host that dropped its run"
            );
        }
    }
}

/// The tree: a plain member, a SIGTERM ignorer, (a setsid escaper), and a
/// root that waits.
fn tree(via: Mechanism) -> String {
    let esc = if via == Mechanism::ProcessGroup {
        ""
    } else {
        r#"setsid "$H" esc & "#
    };
    format!(r#""$H" a & (trap '' TERM INT HUP; exec "$H" ign) & {esc} exec "$H" root"#)
}

/// Every helper has written its pid file, become `sleep`, and been pinned
/// by the test's Watch (else a helper killed by the drop could not be told
/// from one that never started: "helper esc never pinned", 1 of 5
/// unprivileged runs under load).
fn all_running(names: &[&str]) -> bool {
    let dir = std::env::var("CORRAL_TEST_DIR").unwrap();
    names.iter().chain(["root"].iter()).all(|n| {
        Path::new(&format!("{dir}/{n}.pinned")).exists()
            && std::fs::read_to_string(format!("{dir}/{n}.pid"))
                .ok()
                .and_then(|p| std::fs::read_to_string(format!("/proc/{}/comm", p.trim())).ok())
                .is_some_and(|c| c.trim() == "sleep")
    })
}

#[test]
#[ignore = "the host process of the dropped_run tests"]
fn host() {
    if let Some(dir) = std::env::var_os("CORRAL_HOST_CGROUP") {
        // Into the test's cgroup for this host, before corral looks.
        std::fs::write(Path::new(&dir).join("cgroup.procs"), "0").unwrap();
    }
    let via = match std::env::var("CORRAL_HOST_TIER").unwrap().as_str() {
        "process_group" => Mechanism::ProcessGroup,
        "subreaper" => {
            corral::process_wide::enable_subreaper().unwrap();
            Mechanism::Subreaper
        }
        "cgroup" => Mechanism::Cgroup,
        other => panic!("tier {other}"),
    };
    let driver = std::env::var("CORRAL_HOST_DRIVER").unwrap();
    let names = helpers(via);
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(tree(via))
        .containment(ContainmentChoice::Only(via))
        // A dropped future must not wait for a grace: nobody is left to
        // wait. (A dropped sync `Running` finishes the run, grace included,
        // before the drop returns: a shorter one keeps the test short.)
        .grace(if driver == "Sync" { SEC / 2 } else { 20 * SEC })
        .timeout(25 * SEC);
    let ready = || async {
        while !all_running(names) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    let runtime = match driver.as_str() {
        "CurrentThread" => Some(
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
        ),
        "MultiThread" => Some(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap(),
        ),
        _ => None,
    };
    match &runtime {
        Some(rt) => rt.block_on(async {
            tokio::select! {
                r = cmd.run_async() => panic!("the run ended first: {r:?}"),
                _ = ready() => {}
            }
        }),
        None => {
            let running = cmd.spawn().unwrap();
            while !all_running(names) {
                std::thread::sleep(Duration::from_millis(5));
            }
            drop(running);
        }
    }
    println!("HOST-DROPPED");
    use std::io::Write;
    let _ = std::io::stdout().flush();
    // Leave as returning from `main` would, without dropping the runtime
    // (and so without running anything the drop left to it).
    std::process::exit(0);
}

const REPS: usize = 3;

/// One test per tier and driver: `name: Tier, Driver, runs (needs)`.
macro_rules! dropped_runs {
    ($($name:ident: $mech:ident, $driver:ident, $reps:expr $(, needs $need:ident)?;)*) => {
        $(
            $(#[corral_testkit::needs($need)])?
            #[test]
            fn $name() {
                dropped_then_exit(Mechanism::$mech, Driver::$driver, $reps);
            }
        )*
    };
}

dropped_runs! {
    process_group_current_thread: ProcessGroup, CurrentThread, REPS;
    process_group_multi_thread: ProcessGroup, MultiThread, REPS;
    process_group_sync_running: ProcessGroup, Sync, 1;
    subreaper_current_thread: Subreaper, CurrentThread, REPS;
    subreaper_multi_thread: Subreaper, MultiThread, REPS;
    subreaper_sync_running: Subreaper, Sync, 1;
    cgroup_current_thread: Cgroup, CurrentThread, REPS, needs cgroup;
    cgroup_multi_thread: Cgroup, MultiThread, REPS, needs cgroup;
    cgroup_sync_running: Cgroup, Sync, 1, needs cgroup;
}
