//! The crash-safety keeper dies while a run goes on (killed as the OOM
//! killer or an administrator might): the report must not go on saying the
//! tree was crash-safe, and a run that required crash safety does not end
//! cleanly. The keeper is per process, so this binary is its own process and
//! its tests take turns.
#![cfg(linux_raw)]

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use corral::{CleanupError, Command, ContainmentChoice, Mechanism, Outcome, Report};
use corral_testkit::{keeper, Scratch};

fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn keepers() -> Vec<(i32, bool)> {
    keeper::keepers_of(std::process::id())
}

/// Kills this process's live keeper and waits for its death.
fn kill_keeper() {
    keeper::kill_keeper(keeper::own_keeper().expect("no keeper while a run is registered"));
}

/// A run in `mechanism` that waits for the gate file (at most 30 s), whose
/// keeper is killed while it waits; returns its report.
fn run_losing_the_keeper(mechanism: Mechanism, require: bool) -> Report {
    let s = Scratch::new();
    let gate = s.dir().join("gate");
    let mut c = Command::new("/bin/sh");
    c.arg("-c")
        .arg(
            "i=0; while [ ! -e \"$1\" ] && [ $i -lt 3000 ]; do sleep 0.01; i=$((i+1)); done; \
             echo done",
        )
        .arg("sh")
        .arg(&gate)
        .containment(ContainmentChoice::Only(mechanism))
        .timeout(Duration::from_secs(60))
        .require_crash_safety(require);
    let running = c.spawn().expect("spawn");
    kill_keeper();
    std::fs::write(&gate, b"").unwrap();
    let t = Instant::now();
    let r = running.wait();
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "took {:?}",
        t.elapsed()
    );
    assert_eq!(r.outcome, Outcome::Exited(0), "{r:?}");
    assert_eq!(r.stdout.text_lossy().trim(), "done", "{r:?}");
    r
}

fn check_tier(mechanism: Mechanism) {
    let _g = serial();
    // Not required: the run is an ordinary exit, and the report says the
    // crash safety it had at the start was lost.
    let r = run_losing_the_keeper(mechanism, false);
    let why = r.crash_safety.note().unwrap_or_else(|| panic!("{r:?}"));
    assert!(
        why.contains("died or was stopped (SIGSTOP) during the run"),
        "{why}"
    );
    assert!(r.cleanup_errors.is_empty(), "{r:?}");
    assert!(r.check().is_ok());

    // A later run gets a new keeper: crash-safe again.
    let r = Command::new("true")
        .containment(ContainmentChoice::Only(mechanism))
        .run()
        .unwrap();
    assert!(r.crash_safety.is_held(), "{r:?}");
    // The dead keeper was reaped when it was replaced: one keeper, alive
    // (the new one names itself once it runs, which is not waited for).
    let one_alive = |k: &[(i32, bool)]| k.len() == 1 && !k[0].1;
    let until = Instant::now() + Duration::from_secs(10);
    let mut k = keepers();
    while !one_alive(&k) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
        k = keepers();
    }
    assert!(one_alive(&k), "keepers (pid, zombie): {k:?}");

    // Required: held at the start (a new keeper), lost during the run; the
    // run does not end cleanly.
    let r = run_losing_the_keeper(mechanism, true);
    assert!(!r.crash_safety.is_held(), "{r:?}");
    assert!(
        matches!(r.cleanup_errors[..], [CleanupError::CrashSafetyLost { .. }]),
        "{r:?}"
    );
    assert!(r.check().is_err());
}

#[test]
fn a_keeper_dying_during_a_process_group_run_is_reported() {
    check_tier(Mechanism::ProcessGroup);
}

#[corral_testkit::needs(cgroup)]
#[test]
fn a_keeper_dying_during_a_cgroup_run_is_reported() {
    check_tier(Mechanism::Cgroup);
}
