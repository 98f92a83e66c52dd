//! Adversarial crash safety of `corral run`: corral SIGKILLed at awkward
//! moments of a run (the root already exited and a descendant holds the
//! output during the wait delay; the grace period after the first
//! signal), with 2+ tiers, and what the tree's fate then is.

#![cfg(linux_raw)]

mod common;

use std::time::{Duration, Instant};

use corral_testkit::{Scratch, Watch};

use common::*;

const SEC: Duration = Duration::from_secs(1);

mod libc_sig {
    pub const STOP: i32 = 19;
    pub const CONT: i32 = 18;
}

/// The keeper of corral `pid`: its child named `corral-keeper`.
fn keeper_of(pid: u32) -> rustix::fd::OwnedFd {
    let deadline = Instant::now() + 5 * SEC;
    loop {
        for t in std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .flatten()
        {
            let kids = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
            for k in kids.split_whitespace() {
                let comm = std::fs::read_to_string(format!("/proc/{k}/comm")).unwrap_or_default();
                if comm.trim() == "corral-keeper" {
                    let k: i32 = k.parse().unwrap();
                    let fd = rustix::process::pidfd_open(
                        rustix::process::Pid::from_raw(k).unwrap(),
                        rustix::process::PidfdFlags::empty(),
                    )
                    .unwrap();
                    return fd;
                }
            }
        }
        assert!(Instant::now() < deadline, "no keeper under corral {pid}");
        std::thread::sleep(ms(5));
    }
}

fn signal(fd: rustix::fd::OwnedFd, sig: i32) -> rustix::fd::OwnedFd {
    let sig = rustix::process::Signal::from_named_raw(sig).unwrap();
    let _ = rustix::process::pidfd_send_signal(&fd, sig);
    fd
}

/// corral (process-group or subreaper tier) is SIGKILLed while the root
/// has already exited (an unreaped zombie: it pins the group) and a member
/// of its group still holds the output during the wait delay. The host's
/// death re-parents the zombie root to init, which reaps it at once; the
/// keeper must still kill the group (through the root's pidfd, which
/// names the group whether or not the root is reaped), not only a root
/// that is gone.
fn sigkill_during_wait_delay(tier: &str) {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let script = format!(r#"{ROOT}"$H" plain & {} exit 0"#, wait_for("plain"));
    let keeper_tier = tier != "pid-namespace";
    let mut r = start(
        corral(
            &s,
            [
                "run",
                "--containment",
                tier,
                "--wait-delay",
                "30s",
                "-t",
                "60",
                "--",
                "sh",
                "-c",
                &script,
            ],
        ),
        Sink::Pipe,
        Sink::Null,
    );
    assert!(
        w.pid("plain", 10 * SEC).is_some(),
        "{tier}: plain never started"
    );
    assert!(w.pid("root", 10 * SEC).is_some(), "{tier}: root never seen");
    // The root exited (a zombie corral holds); plain holds stdout.
    assert!(w.wait_dead("root", 10 * SEC), "{tier}: root did not exit");
    std::thread::sleep(ms(100));
    assert!(w.is_alive("plain"));
    let root = w.pid("root", SEC).unwrap();
    // The keeper is slow (stopped here, so the order is certain): init
    // reaps the re-parented root before the keeper acts.
    let keeper = keeper_tier.then(|| signal(keeper_of(r.child.id()), libc_sig::STOP));
    r.child.kill().unwrap();
    let t = Instant::now();
    r.child.wait().unwrap();
    let reaped_by = Instant::now() + 5 * SEC;
    while keeper_tier && std::path::Path::new(&format!("/proc/{root}")).exists() {
        assert!(
            Instant::now() < reaped_by,
            "{tier}: init never reaped the root"
        );
        std::thread::sleep(ms(5));
    }
    let _keeper = keeper.map(|k| signal(k, libc_sig::CONT));
    assert!(
        w.wait_dead("plain", 3 * SEC),
        "{tier}: the root's group survived corral's death during the wait delay"
    );
    assert!(t.elapsed() <= 3 * SEC, "{tier}: {:?}", t.elapsed());
}

#[test]
fn sigkill_during_wait_delay_process_group() {
    sigkill_during_wait_delay("process-group");
}

#[test]
fn sigkill_during_wait_delay_subreaper() {
    sigkill_during_wait_delay("subreaper");
}

/// The PID-namespace tier (no keeper: the init watches corral): the same
/// moment, the command already exited and a holder of its output running.
#[corral_testkit::needs(pidns)]
#[test]
fn sigkill_during_wait_delay_pid_namespace() {
    sigkill_during_wait_delay("pid-namespace");
}

/// corral is SIGKILLed during the grace period: the first signal (TERM) was
/// sent at the timeout, the root and a helper ignore it, SIGKILL is 30 s
/// away. Every tier kills the tree within the bound.
fn sigkill_during_grace(tier: &str) {
    let s = Scratch::new();
    if tier == "pid-namespace" {
        s.namespaced();
    }
    let w = Watch::new(&s);
    let script = format!(
        r#"trap '' TERM; {ROOT}{IGN}{} touch "$CORRAL_TEST_DIR/armed"; sleep 30"#,
        wait_for("ign")
    );
    let mut r = start(
        corral(
            &s,
            [
                "run",
                "--containment",
                tier,
                "-t",
                "300ms",
                "-k",
                "30s",
                "--",
                "sh",
                "-c",
                &script,
            ],
        ),
        Sink::Null,
        Sink::Null,
    );
    for n in ["root", "ign"] {
        assert!(w.pid(n, 10 * SEC).is_some(), "{tier}: {n} never started");
    }
    assert!(s.wait_file("armed", 10 * SEC));
    // Past the timeout: TERM was sent and ignored.
    std::thread::sleep(ms(800));
    assert!(
        w.is_alive("root") && w.is_alive("ign"),
        "{tier}: TERM killed the tree"
    );
    assert!(
        r.child.try_wait().unwrap().is_none(),
        "{tier}: corral ended"
    );
    r.child.kill().unwrap();
    let t = Instant::now();
    r.child.wait().unwrap();
    for n in ["root", "ign"] {
        assert!(
            w.wait_dead(n, 3 * SEC),
            "{tier}: {n} survived corral's death during the grace period"
        );
    }
    assert!(t.elapsed() <= 3 * SEC, "{tier}: {:?}", t.elapsed());
}

#[test]
fn sigkill_during_grace_process_group() {
    sigkill_during_grace("process-group");
}

#[test]
fn sigkill_during_grace_subreaper() {
    sigkill_during_grace("subreaper");
}

#[corral_testkit::needs(cgroup)]
#[test]
fn sigkill_during_grace_cgroup() {
    sigkill_during_grace("cgroup");
}

#[corral_testkit::needs(pidns)]
#[test]
fn sigkill_during_grace_pid_namespace() {
    sigkill_during_grace("pid-namespace");
}
