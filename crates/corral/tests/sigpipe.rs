//! `Command::sigpipe_ignored`: the program starts with SIGPIPE ignored only
//! when asked (std's default otherwise: the Rust runtime's own ignored
//! SIGPIPE is not passed on), in every spawn path: std's (process group,
//! subreaper), clone3 (cgroup) and the PID namespace's init.

#![cfg(target_os = "linux")]

use corral::{Command, ContainmentChoice, Mechanism};

/// The SigIgn mask of the program, read from its own /proc status.
fn sigign(mech: Mechanism, ignored: bool) -> u64 {
    let r = Command::new("cat")
        .arg("/proc/self/status")
        .containment(ContainmentChoice::Only(mech))
        .sigpipe_ignored(ignored)
        .run()
        .unwrap();
    let text = r.stdout.text_lossy();
    let line = text.lines().find(|l| l.starts_with("SigIgn:")).unwrap();
    u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap()
}

const PIPE: u64 = 1 << (13 - 1);

fn check(mech: Mechanism) {
    assert_eq!(sigign(mech, false) & PIPE, 0, "{mech:?}: default");
    assert_ne!(sigign(mech, true) & PIPE, 0, "{mech:?}: asked");
}

#[test]
fn process_group_tier() {
    check(Mechanism::ProcessGroup);
}

#[test]
fn subreaper_tier() {
    corral::process_wide::enable_subreaper().unwrap();
    check(Mechanism::Subreaper);
}

#[corral_testkit::needs(cgroup)]
#[test]
fn cgroup_tier() {
    check(Mechanism::Cgroup);
}

#[corral_testkit::needs(pidns)]
#[test]
fn pid_namespace_tier() {
    check(Mechanism::PidNamespace);
}
