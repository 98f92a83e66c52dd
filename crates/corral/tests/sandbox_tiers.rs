//! The promises hold inside a sandbox (issue 33): in every containment
//! tier, a sandboxed tree with a `setsid` escaper, a double-forked daemon
//! and a timeout is still killed whole and counted exactly, and the
//! sandbox holds (a write outside fails) in that tier's spawn path.

#![cfg(target_os = "linux")]

mod sandbox_common;

use corral::Outcome;
use corral::{Mechanism, Sandbox};
use corral_testkit::scenario::{escapers, ms, tree, Count, Fate, Row, Tier};
use sandbox_common::*;

fn sandboxed_row(mechanism: Mechanism, row: &Row) {
    let t = Tier::new(mechanism);
    let dir = t.scratch.dir().to_path_buf();
    let r = t.run_with(
        row,
        |c| {
            c.current_dir(&dir).sandbox(Sandbox::new());
        },
        |_, _| {},
    );
    assert!(r.sandbox.is_some(), "{r:?}");
}

fn sandbox_holds_in(mechanism: Mechanism) {
    let mut v = Victims::new();
    let f = v.file("f", "keep");
    let t = Tier::new(mechanism);
    let mut c = command(
        &t.scratch,
        "echo x >> \"$F\"; echo x > \"$OUT/new\"; echo in > ./inside; exit 0",
        Sandbox::new(),
    );
    c.env("F", &f)
        .env("OUT", v.dir())
        .containment(corral::ContainmentChoice::Only(mechanism));
    let r = c.run().unwrap();
    assert_eq!(r.containment, mechanism);
    assert_eq!(r.exit_code(), Some(0), "{r:?}");
    assert_eq!(
        std::fs::read_to_string(t.scratch.path("inside")).unwrap(),
        "in\n"
    );
    v.assert_untouched();
}

#[corral_testkit::needs(cgroup)]
#[test]
fn cgroup_tier_kills_a_setsid_escaper_under_a_sandbox() {
    sandboxed_row(Mechanism::Cgroup, &escapers::setsid_pipe_holder());
    sandboxed_row(Mechanism::Cgroup, &escapers::double_forked_daemon());
    sandbox_holds_in(Mechanism::Cgroup);
}

#[corral_testkit::needs(pidns)]
#[test]
fn pid_namespace_tier_kills_a_setsid_escaper_under_a_sandbox() {
    sandboxed_row(Mechanism::PidNamespace, &escapers::setsid_pipe_holder());
    sandboxed_row(Mechanism::PidNamespace, &escapers::double_forked_daemon());
    sandbox_holds_in(Mechanism::PidNamespace);
}

#[test]
fn subreaper_tier_kills_a_setsid_escaper_under_a_sandbox() {
    sandboxed_row(Mechanism::Subreaper, &escapers::setsid_pipe_holder());
    sandboxed_row(Mechanism::Subreaper, &escapers::double_forked_daemon());
    sandbox_holds_in(Mechanism::Subreaper);
}

#[test]
fn process_group_tier_runs_under_a_sandbox() {
    // The process group holds what stays in the group (a setsid escaper
    // is out of its reach with or without a sandbox).
    sandboxed_row(Mechanism::ProcessGroup, &group_timeout());
    sandbox_holds_in(Mechanism::ProcessGroup);
}

/// A helper in the root's group and a timeout: the helper and the root
/// shell's `sleep` child killed and counted (the root is not a leftover).
fn group_timeout() -> Row {
    Row {
        tree: tree(r#""$H" kid & sleep 30"#),
        timeout: Some(ms(500)),
        bound: Some((ms(500), std::time::Duration::from_secs(3))),
        outcome: Some(Outcome::TimedOut),
        killed: Some(Count::Exactly(2).into()),
        fates: &[("kid", Fate::Dead)],
        ..Row::default()
    }
}
