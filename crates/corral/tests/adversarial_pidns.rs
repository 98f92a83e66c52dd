//! Adversarial tests of the PID-namespace tier: what a command can do to
//! its namespace and to the init, and what corral leaves in the host.
#![cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]

use std::time::{Duration, Instant};

use corral::{Command, ContainmentChoice, LeftoverPolicy, Mechanism, Outcome, Output};

const SEC: Duration = Duration::from_secs(1);

fn ns(script: &str) -> Command {
    let mut c = Command::new("/bin/sh");
    c.args(["-c", script])
        .containment(ContainmentChoice::Only(Mechanism::PidNamespace))
        .timeout(20 * SEC)
        .stdout(Output::null())
        .stderr(Output::null());
    c
}

/// Zombie children of this process whose parent-death was theirs to
/// report: (pid, comm) of every child in state Z.
fn zombie_children() -> Vec<(u32, String)> {
    let mut kids = String::new();
    for t in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        kids += &std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
        kids.push(' ');
    }
    kids.split_whitespace()
        .filter_map(|p| p.parse::<u32>().ok())
        .filter_map(|p| {
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
            let (head, rest) = stat.rsplit_once(") ")?;
            let comm = head.split_once(" (")?.1.to_owned();
            rest.starts_with('Z').then_some((p, comm))
        })
        .collect()
}

/// A run keeps a leftover (keep-on-success): the init stays, detached,
/// until the leftover ends, then exits. It is this process's child: once
/// it exited it must not stay a zombie of a host that goes on running.
#[corral_testkit::needs(pidns)]
#[test]
fn a_detached_init_is_not_left_a_zombie() {
    let r = ns("sleep 0.3 & exit 0")
        .leftovers(LeftoverPolicy::KeepOnSuccess)
        .run()
        .unwrap();
    assert!(matches!(r.outcome, Outcome::Exited(0)), "{r:?}");
    assert_eq!(r.leftovers.kept, 1, "{r:?}");
    let init = r.pid;
    // The leftover ends after 0.3 s, the init right after.
    let deadline = Instant::now() + 5 * SEC;
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{init}/stat")).unwrap_or_default();
        if stat.is_empty() {
            break; // reaped
        }
        if Instant::now() > deadline {
            panic!("the detached init {init} is still there: {stat}; zombies: {:?}", zombie_children());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
