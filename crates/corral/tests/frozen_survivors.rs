//! Survivors that cannot be killed are reported, all of them, in every
//! tier.
//!
//! The command (`sh`) starts a child and waits; the test moves both into a
//! cgroup-v1 freezer cgroup and freezes it (a v1-frozen process does not
//! act on SIGKILL until it is thawed), then the deadline passes. Whatever
//! the tier, the report must name both as survivors: the command by its
//! own pid (in the PID-namespace tier the root is the namespace's init,
//! which the SIGKILL ends; the command it stood for is still alive) and the
//! child. The freezer cgroup is thawed and removed by a guard, so the
//! killed processes then die.
#![cfg(target_os = "linux")]

use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};

use corral::{ContainmentChoice, Mechanism, Outcome, Output};
use corral_testkit::freezer::Frozen;
use corral_testkit::{Scratch, Watch};

const SEC: Duration = Duration::from_secs(1);

/// One test at a time: each freezes processes of its own, and the
/// subreaper is enabled once for the binary.
static SERIAL: Mutex<()> = Mutex::new(());

/// Once the command (`"$H" child & echo go ...`) and its child run,
/// freezes both: the processes carrying the scratch's marker (host pids,
/// whatever the tier). Returns their pids.
fn freeze_command_and_child(s: &Scratch, watch: &Watch, frozen: &Frozen) -> Vec<u32> {
    assert!(s.wait_file("go", 10 * SEC), "the command did not start");
    assert!(watch.pid("child", 10 * SEC).is_some(), "no child");
    let end = Instant::now() + 5 * SEC;
    let marked = loop {
        let m = s.marked_processes();
        if m.len() == 2 {
            break m;
        }
        assert!(Instant::now() < end, "marked processes: {m:?}");
        std::thread::sleep(Duration::from_millis(10));
    };
    for &p in &marked {
        frozen.take(p);
    }
    frozen.freeze();
    marked
}

fn frozen_command_and_child_are_both_survivors(tier: Mechanism) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if tier == Mechanism::Subreaper {
        static ENABLE: Once = Once::new();
        ENABLE.call_once(|| {
            corral::process_wide::enable_subreaper().expect("PR_SET_CHILD_SUBREAPER")
        });
    }
    let s = Scratch::new();
    if tier == Mechanism::PidNamespace {
        s.namespaced();
    }
    let watch = Watch::new(&s);
    let frozen = Frozen::new(&format!("{tier}"));
    let mut cmd = s.sh(r#""$H" child & echo go > "$CORRAL_TEST_DIR/go"; wait"#);
    cmd.containment(ContainmentChoice::Only(tier))
        .timeout(2 * SEC)
        .confirm_window(Duration::from_millis(300))
        .stdout(Output::null())
        .stderr(Output::null());
    let running = cmd.spawn().expect("spawn");
    let marked = freeze_command_and_child(&s, &watch, &frozen);
    let t = Instant::now();
    let r = running.wait();
    let el = t.elapsed();
    assert_eq!(r.outcome, Outcome::TimedOut, "{r:?}");
    let mut survivors: Vec<u32> = r
        .cleanup_errors
        .iter()
        .flat_map(|e| e.survivors().iter().copied())
        .collect();
    survivors.sort_unstable();
    let mut want = marked.clone();
    want.sort_unstable();
    assert_eq!(
        survivors, want,
        "{tier}: the report must name the command and its child as survivors: {r:?}"
    );
    // Bounded even so: the confirm limit from the SIGKILL, with slack.
    assert!(el < 40 * SEC, "{el:?}");
    drop(frozen);
    s.assert_none_left();
}

#[corral_testkit::needs(root, freezer_v1, pidns)]
#[test]
fn frozen_survivors_pid_namespace() {
    frozen_command_and_child_are_both_survivors(Mechanism::PidNamespace);
}

#[corral_testkit::needs(root, freezer_v1)]
#[test]
fn frozen_survivors_process_group() {
    frozen_command_and_child_are_both_survivors(Mechanism::ProcessGroup);
}

#[corral_testkit::needs(root, freezer_v1)]
#[test]
fn frozen_survivors_subreaper() {
    frozen_command_and_child_are_both_survivors(Mechanism::Subreaper);
}

#[corral_testkit::needs(root, freezer_v1, cgroup)]
#[test]
fn frozen_survivors_cgroup() {
    frozen_command_and_child_are_both_survivors(Mechanism::Cgroup);
}

/// Two cleanup steps fail in one run, both for real: the run requires crash
/// safety and its keeper is killed (the crash safety is lost), then the
/// command and its child are frozen so that they survive the SIGKILL after
/// the deadline. The report keeps both failures, in the order they
/// happened (the survivors when the confirm window ends, the lost crash
/// safety when the run is released), each naming its step.
#[cfg(linux_raw)]
#[corral_testkit::needs(root, freezer_v1)]
#[test]
fn two_failed_cleanup_steps_are_both_reported_in_order() {
    use corral::CleanupStep;
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let s = Scratch::new();
    let watch = Watch::new(&s);
    let frozen = Frozen::new("two-steps");
    let mut cmd = s.sh(r#""$H" child & echo go > "$CORRAL_TEST_DIR/go"; wait"#);
    cmd.containment(ContainmentChoice::Only(Mechanism::ProcessGroup))
        .require_crash_safety(true)
        .timeout(2 * SEC)
        .confirm_window(Duration::from_millis(300))
        .stdout(Output::null())
        .stderr(Output::null());
    let running = cmd.spawn().expect("spawn");
    corral_testkit::keeper::kill_keeper(
        corral_testkit::keeper::own_keeper().expect("no keeper while a run is registered"),
    );
    let marked = freeze_command_and_child(&s, &watch, &frozen);
    let t = Instant::now();
    let r = running.wait();
    assert!(t.elapsed() < 40 * SEC, "{:?}", t.elapsed());
    assert_eq!(r.outcome, Outcome::TimedOut, "{r:?}");
    let steps: Vec<CleanupStep> = r.cleanup_errors.iter().map(|e| e.step()).collect();
    assert_eq!(
        steps,
        [CleanupStep::ConfirmDeath, CleanupStep::CrashSafety],
        "{r:?}"
    );
    let mut survivors = r.cleanup_errors[0].survivors().to_vec();
    survivors.sort_unstable();
    let mut want = marked.clone();
    want.sort_unstable();
    assert_eq!(survivors, want, "{r:?}");
    assert_eq!(r.outcome_name(), "cleanup_failed");
    assert_eq!(r.exit_code(), None);
    let shown = r.check().unwrap_err().to_string();
    let a = shown.find("survived SIGKILL").expect("the first step");
    let b = shown.find("crash safety").expect("the second step");
    assert!(a < b, "{shown}");
    #[cfg(feature = "serde")]
    {
        let v = serde_json::to_value(&r).unwrap();
        let names: Vec<&str> = v["cleanup_errors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["step"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["confirm_death", "crash_safety"], "{v}");
    }
    drop(frozen);
    s.assert_none_left();
}
