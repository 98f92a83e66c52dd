//! A process whose main thread exited is not dead.
//!
//! The `corral-zombie-leader` helper (testkit) ignores SIGTERM, and its
//! thread-group leader exits while a second thread keeps running:
//! `/proc/PID/stat` shows `Z`, yet the process lives until a SIGKILL. In
//! every tier (process group, subreaper, cgroup) such a member must count
//! as alive: the grace escalates on it, the leftovers policy kills it, the
//! cgroup tier kills it even though `cgroup.kill` passes over it. The root
//! itself may be such a process too.
//!
//! Each test pins the helper (testkit `Watch`, pidfd) and waits until its
//! leader really is a zombie (`NAME.zombie`) before the code under test
//! can act, then checks the return bound, the report and the helper's
//! fate. The subreaper tests run in a child process of this test binary
//! (`enable_subreaper` changes the whole process).
#![cfg(target_os = "linux")]

use std::time::{Duration, Instant};

use corral::{
    Command, ContainmentChoice, LeftoverPolicy, Mechanism, Outcome, Report, RootStatus, Signal,
};
use corral_testkit::{assert_between, thread_group_alive, Scratch, Watch};

const SEC: Duration = Duration::from_secs(1);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A background helper `zl` (zombie leader, output to /dev/null), and the
/// root waits until its leader is a zombie.
const ZL_BG: &str =
    r#""$H" zl "$ZL" zl & until [ -e "$CORRAL_TEST_DIR/zl.zombie" ]; do sleep 0.01; done; "#;

/// The same, but the helper first leaves the process group and session.
const ZL_SETSID: &str =
    r#"setsid "$H" zl "$ZL" zl & until [ -e "$CORRAL_TEST_DIR/zl.zombie" ]; do sleep 0.01; done; "#;

fn cmd(s: &Scratch, via: Mechanism, script: &str) -> Command {
    let mut c = s.sh(script);
    c.containment(ContainmentChoice::Only(via));
    c
}

/// Pins `zl`, waits for its leader to be a zombie, and checks that the
/// process is nevertheless alive (the premise of every test here).
#[track_caller]
fn zombie_leader_ready(s: &Scratch, w: &Watch, name: &str) -> u32 {
    let pid = w
        .pid(name, 10 * SEC)
        .unwrap_or_else(|| panic!("helper {name} never started"));
    assert!(
        s.wait_file(&format!("{name}.zombie"), 10 * SEC),
        "the leader of {name} never exited"
    );
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat
        .rsplit_once(')')
        .map(|(_, r)| r.trim_start().as_bytes()[0]);
    assert_eq!(state, Some(b'Z'), "premise: {name}'s leader shows Z");
    assert!(thread_group_alive(pid), "premise: {name} is alive");
    pid
}

#[track_caller]
fn assert_dead(w: &Watch, name: &str, pid: u32) {
    assert!(
        w.wait_dead(name, 2 * SEC),
        "{name} (pid {pid}, leader exited, a thread alive) survived"
    );
    assert!(!thread_group_alive(pid));
}

#[track_caller]
fn assert_clean(r: &Report, via: Mechanism) {
    assert_eq!(r.containment, via);
    assert!(r.cleanup_errors.is_empty(), "{:?}", r.cleanup_errors);
}

/// One run whose helper `name`'s leader exited: the report, how long the
/// run took (spawn to the end of wait), the watch and the helper's pid.
struct ZlRun {
    r: Report,
    took: Duration,
    pid: u32,
    /// Declared before the scratch: dropped first, it kills what is left.
    w: Watch,
    _s: Scratch,
}

/// Runs `script` in tier `via` (settings by `configure`), waits (before
/// the code under test can act) until helper `name`'s leader is a zombie,
/// and asserts a clean lifecycle.
fn run_zl(via: Mechanism, script: &str, name: &str, configure: impl FnOnce(&mut Command)) -> ZlRun {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let t = Instant::now();
    let mut c = cmd(&s, via, script);
    configure(&mut c);
    let running = c.spawn().unwrap();
    let pid = zombie_leader_ready(&s, &w, name);
    let r = running.wait();
    let took = t.elapsed();
    assert_clean(&r, via);
    ZlRun {
        r,
        took,
        pid,
        w,
        _s: s,
    }
}

/// Timeout with a grace: the helper ignores SIGTERM and looks dead in
/// `/proc/PID/stat`; SIGKILL must follow at the end of the grace.
fn timeout_with_grace_escalates(via: Mechanism, script_prefix: &str) {
    let script = format!(r#"{script_prefix} exec "$H" root"#);
    let z = run_zl(via, &script, "zl", |c| {
        c.timeout(4 * SEC).grace(ms(300));
    });
    let (r, took, pid, w) = (&z.r, z.took, z.pid, &z.w);
    assert_eq!(r.outcome, Outcome::TimedOut);
    assert_eq!(r.signals_sent, vec![Signal::TERM, Signal::KILL], "{r:?}");
    assert_between(took, 4 * SEC, 4 * SEC + ms(300) + 3 * SEC);
    assert!(r.leftovers.killed >= 1, "{:?}", r.leftovers);
    assert_dead(w, "zl", pid);
    assert!(w.wait_dead("root", 2 * SEC));
}

/// The root exits 1 leaving the helper; `LeftoverPolicy::Kill` kills it.
fn nonzero_exit_kills_the_survivor(via: Mechanism, script_prefix: &str) {
    let script = format!("{script_prefix} exit 1");
    let z = run_zl(via, &script, "zl", |c| {
        c.leftovers(LeftoverPolicy::Kill).wait_delay(5 * SEC);
    });
    let (r, took, pid, w) = (&z.r, z.took, z.pid, &z.w);
    assert_eq!(r.outcome, Outcome::Exited(1), "{r:?}");
    assert_eq!(r.signals_sent, vec![Signal::KILL], "{r:?}");
    assert!(r.leftovers.killed >= 1, "{:?}", r.leftovers);
    assert_eq!(r.leftovers.kept, 0);
    assert!(took < 10 * SEC + 3 * SEC);
    assert_dead(w, "zl", pid);
}

/// The root itself is the zombie leader: not exited (its exit is not
/// reported while a thread runs); a timeout with grace ends in SIGKILL.
fn root_with_exited_leader_is_killed(via: Mechanism) {
    let z = run_zl(via, r#"exec "$H" root "$ZL" root"#, "root", |c| {
        c.timeout(3 * SEC).grace(ms(300));
    });
    let (r, took, pid, w) = (&z.r, z.took, z.pid, &z.w);
    assert_eq!(r.outcome, Outcome::TimedOut);
    assert_eq!(r.root, Some(RootStatus::Signaled(Signal::KILL)), "{r:?}");
    assert_eq!(r.signals_sent, vec![Signal::TERM, Signal::KILL], "{r:?}");
    // Slack for a loaded machine: 8.9 s was seen at a load of 24 on 2 cores.
    assert_between(took, 3 * SEC, 3 * SEC + ms(300) + 8 * SEC);
    assert_dead(w, "root", pid);
}

/// The helper keeps the root's stdout open after its leader exited (its
/// descriptors are listed only under its live thread): held output, found
/// as the tree's own holder, killed.
fn holder_whose_leader_exited_is_killed(via: Mechanism) {
    let z = run_zl(
        via,
        r#""$H" zl "$ZL" zl hold & until [ -e "$CORRAL_TEST_DIR/zl.zombie" ]; do sleep 0.01; done; echo started; exit 0"#,
        "zl",
        |c| {
            c.wait_delay(Duration::ZERO);
        },
    );
    let (r, took, pid, w) = (&z.r, z.took, z.pid, &z.w);
    assert_eq!(r.outcome, Outcome::OutputHeld, "{r:?}");
    assert_eq!(r.root, Some(RootStatus::Exited(0)));
    assert_eq!(r.stdout.bytes(), b"started\n");
    assert!(r.leftovers.killed >= 1, "{:?}", r.leftovers);
    assert!(took < 5 * SEC);
    assert_dead(w, "zl", pid);
}

// --------------------------------------------------------------- the tiers

/// One `#[test]` per scenario in a tier run in this process, in a module
/// named after the tier: `module => Mechanism, the helper's script prefix
/// (, needs)`.
macro_rules! in_process_tier {
    ($module:ident => $mech:ident, $prefix:ident $(, $needs:ident)?) => {
        mod $module {
            use super::*;
            const VIA: Mechanism = Mechanism::$mech;

            $(#[corral_testkit::needs($needs)])?
            #[test]
            fn timeout_with_grace_kills_a_member_whose_leader_exited() {
                timeout_with_grace_escalates(VIA, $prefix);
            }

            $(#[corral_testkit::needs($needs)])?
            #[test]
            fn nonzero_exit_kills_a_member_whose_leader_exited() {
                nonzero_exit_kills_the_survivor(VIA, $prefix);
            }

            $(#[corral_testkit::needs($needs)])?
            #[test]
            fn root_whose_leader_exited_is_killed() {
                root_with_exited_leader_is_killed(VIA);
            }

            $(#[corral_testkit::needs($needs)])?
            #[test]
            fn holder_whose_leader_exited_is_output_held_and_killed() {
                holder_whose_leader_exited_is_killed(VIA);
            }
        }
    };
}

in_process_tier!(process_group => ProcessGroup, ZL_BG);
in_process_tier!(cgroup => Cgroup, ZL_SETSID, cgroup);

/// The subreaper tier, in a child process of this binary
/// (`enable_subreaper` changes the whole process): each test runs its
/// `child::` twin there, with the helper both in and out of the root's
/// group.
mod subreaper {
    /// Runs `child::NAME` (an ignored test) in a child process.
    fn in_child(name: &str) {
        let out =
            corral_testkit::run_ignored_test_in_child(&format!("subreaper::child::{name}"), &[]);
        assert!(out.contains("SUBREAPER-OK"), "{out}");
    }

    #[test]
    fn timeout_with_grace_kills_a_member_whose_leader_exited() {
        in_child("timeout");
    }

    #[test]
    fn nonzero_exit_kills_a_member_whose_leader_exited() {
        in_child("nonzero_exit");
    }

    #[test]
    fn root_whose_leader_exited_is_killed() {
        in_child("root");
    }

    mod child {
        use super::super::*;
        const VIA: Mechanism = Mechanism::Subreaper;

        fn enable_subreaper() {
            corral::process_wide::enable_subreaper().expect("PR_SET_CHILD_SUBREAPER");
        }

        #[test]
        #[ignore = "run by subreaper::timeout_with_grace_kills_a_member_whose_leader_exited"]
        fn timeout() {
            enable_subreaper();
            timeout_with_grace_escalates(VIA, ZL_BG);
            timeout_with_grace_escalates(VIA, ZL_SETSID);
            println!("SUBREAPER-OK");
        }

        #[test]
        #[ignore = "run by subreaper::nonzero_exit_kills_a_member_whose_leader_exited"]
        fn nonzero_exit() {
            enable_subreaper();
            nonzero_exit_kills_the_survivor(VIA, ZL_BG);
            nonzero_exit_kills_the_survivor(VIA, ZL_SETSID);
            println!("SUBREAPER-OK");
        }

        #[test]
        #[ignore = "run by subreaper::root_whose_leader_exited_is_killed"]
        fn root() {
            enable_subreaper();
            root_with_exited_leader_is_killed(VIA);
            println!("SUBREAPER-OK");
        }
    }
}
