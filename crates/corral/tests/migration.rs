//! Escape by cgroup migration: a descendant with write access to an
//! ancestor's `cgroup.procs` (root here) moves itself out of the per-command
//! cgroup. No cgroup mechanism can stop that; corral still finds and kills a
//! migrant that stayed in the root's process group (pinned by the unreaped
//! root), and reports it while it lives. Runs as root; compiled as ignored
//! (`#[needs(cgroup)]`) where no cgroup v2 hierarchy is writable.
#![cfg(target_os = "linux")]

use std::time::{Duration, Instant};

use corral::{ContainmentChoice, LeftoverPolicy, Mechanism, Outcome};
use corral_testkit::{assert_between, Scratch, Watch};

const SEC: Duration = Duration::from_secs(1);

/// The cgroup v2 path (as /proc/PID/cgroup shows it) of `pid`.
fn cgroup_of(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("0::").map(str::to_owned))
        .unwrap_or_default()
}

/// A helper `mig` that ignores SIGTERM, moves itself into corral's own
/// cgroup (the parent of the per-command one) and sleeps; the root waits
/// until it moved, then runs `then`.
fn migrant_script(then: &str) -> String {
    format!(
        r#"( trap '' TERM; exec "$H" mig sh -c 'echo $$ > "$CG_PARENT/cgroup.procs" && touch "$CORRAL_TEST_DIR/moved" && exec sleep 30' ) &
           until [ -e "$CORRAL_TEST_DIR/moved" ]; do sleep 0.01; done; {then}"#
    )
}

/// Starts `sleep 30` with a migrant beside it (timeout 500 ms, `grace`)
/// and waits until the migrant has left the cgroup: the start and the run.
fn start_with_migrant(s: &Scratch, w: &Watch, grace: Duration) -> (Instant, corral::Running) {
    let parent = corral_testkit::writable_cgroup_v2().unwrap();
    let mut c = s.sh(&migrant_script("sleep 30"));
    c.env("CG_PARENT", &parent)
        .containment(ContainmentChoice::Only(Mechanism::Cgroup))
        .timeout(Duration::from_millis(500))
        .grace(grace);
    let t = Instant::now();
    let running = c.spawn().unwrap();
    let mig = w.pid("mig", 5 * SEC).expect("the migrant never started");
    let end = Instant::now() + 5 * SEC;
    while !s.path("moved").exists() && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(s.path("moved").exists(), "the migrant never moved");
    assert_eq!(
        cgroup_of(mig),
        cgroup_of(std::process::id()),
        "the migrant is not outside the cgroup"
    );
    (t, running)
}

#[corral_testkit::needs(cgroup)]
#[test]
fn migrant_that_ignores_term_is_killed_on_timeout() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let (t, running) = start_with_migrant(&s, &w, Duration::from_millis(200));
    let r = running.wait();
    assert_eq!(r.containment, Mechanism::Cgroup);
    assert_eq!(r.outcome, Outcome::TimedOut);
    assert_between(t.elapsed(), Duration::from_millis(500), 4 * SEC);
    assert!(
        w.wait_dead("mig", 2 * SEC),
        "the migrant survived the timeout"
    );
    assert!(r.cleanup_errors.is_empty(), "{:?}", r.cleanup_errors);
    assert!(r.leftovers.killed >= 1, "{:?}", r.leftovers);
}

/// Without a grace the look for migrants is made right after the SIGKILL
/// (not once the cgroup is empty): the migrant found then is confirmed dead
/// before the run returns.
#[corral_testkit::needs(cgroup)]
#[test]
fn migrant_is_killed_by_a_deadline_without_grace() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let (t, running) = start_with_migrant(&s, &w, Duration::ZERO);
    let r = running.wait();
    assert_eq!(r.outcome, Outcome::TimedOut);
    assert_eq!(r.signals_sent, vec![corral::Signal::KILL]);
    assert_between(t.elapsed(), Duration::from_millis(500), 4 * SEC);
    // Dead when the run returned: not given time to die afterwards.
    assert!(
        w.wait_dead("mig", Duration::ZERO),
        "the migrant outlived the run"
    );
    assert!(r.cleanup_errors.is_empty(), "{:?}", r.cleanup_errors);
    assert!(r.leftovers.killed >= 1, "{:?}", r.leftovers);
}

#[corral_testkit::needs(cgroup)]
#[test]
fn migrant_left_after_a_nonzero_exit_is_killed() {
    let parent = corral_testkit::writable_cgroup_v2().unwrap();
    let s = Scratch::new();
    let w = Watch::new(&s);
    // The migrant closes its output, so the run ends with the root's exit.
    let mut c = s
        .sh(&migrant_script("exit 3")
            .replace(r#"exec "$H" mig"#, r#"exec "$H" mig >/dev/null 2>&1"#));
    c.env("CG_PARENT", &parent)
        .containment(ContainmentChoice::Only(Mechanism::Cgroup))
        .leftovers(LeftoverPolicy::KeepOnSuccess)
        .grace(Duration::from_millis(200));
    let t = Instant::now();
    let r = c.run().unwrap();
    assert_eq!(r.containment, Mechanism::Cgroup);
    assert_eq!(r.outcome, Outcome::Exited(3));
    assert_between(t.elapsed(), Duration::ZERO, 5 * SEC);
    assert!(w.pid("mig", SEC).is_some(), "the migrant never started");
    assert!(
        w.wait_dead("mig", 2 * SEC),
        "the migrant survived a nonzero exit"
    );
    assert!(r.cleanup_errors.is_empty(), "{:?}", r.cleanup_errors);
    // At least the migrant: the root exits at once, so the helper's own
    // short-lived `mv` (recording its pid) may still be alive and counted.
    assert!(r.leftovers.killed >= 1, "{:?}", r.leftovers);
}
