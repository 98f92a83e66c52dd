//! `corral run` keeps what runs, and only that (issue #37, part 5): after a
//! clean exit 0 under `keep-on-success` (and any exit under `keep`), a
//! stopped leftover is killed and counted in `killed`, never kept. Kept
//! with it, it would orphan its process group with a stopped member when
//! corral (the CLI is a child subreaper, the parent of every orphan of the
//! tree; a PID namespace's init is corral's child) exits, and the kernel
//! would then send the whole group SIGHUP and SIGCONT, ending the kept
//! ones too. Each tier the CLI can use, with the issue's shape (two plain
//! `sleep`s and one stopped shell) and with a stopped leftover alone; the
//! report's counts are checked, then, a second after corral has exited,
//! that what was kept runs and what was killed is gone.

#![cfg(target_os = "linux")]

mod common;

use std::time::Duration;

use common::*;
use corral_testkit::scenario::{
    Count::Exactly,
    Fate::{self, Alive, Dead},
};

/// Shell text that waits until helper `name` is stopped (and pinned).
fn stopped(name: &str) -> String {
    format!(
        r#"until [ -e "$CORRAL_TEST_DIR/{name}.pinned" -o ! -e "$CORRAL_TEST_DIR/.watched" ] && grep -q '^State:[[:space:]]*T' /proc/$(cat "$CORRAL_TEST_DIR/{name}.pid" 2>/dev/null)/status 2>/dev/null; do sleep 0.01; done; "#
    )
}

/// The tree: `running` plain sleeps (`a`, `b`) and a shell that stops
/// itself (`st`), all detached from the output, then `exit CODE` once
/// every one is ready (and `st` stopped).
fn tree(running: &[&str], code: i32) -> String {
    let mut t = String::new();
    for n in running {
        t.push_str(&format!(r#""$H" {n} >/dev/null 2>&1 & "#));
    }
    t.push_str(r#""$H" st sh -c ': ; kill -STOP $$; exec sleep 27' >/dev/null 2>&1 & "#);
    for n in running {
        t.push_str(&wait_for(n));
    }
    t.push_str(&stopped("st"));
    t.push_str(&format!("exit {code}"));
    t
}

fn check(tier: &str, policy: &str, code: i32, running: &'static [&'static str]) {
    let fates: &'static [(&'static str, Fate)] = match running.len() {
        2 => &[("a", Alive), ("b", Alive), ("st", Dead)],
        1 => &[("a", Alive), ("st", Dead)],
        _ => &[("st", Dead)],
    };
    let ran = run_row(&Row {
        opts: opts(&["--containment", tier, "--leftovers", policy]),
        tree: tree(running, code),
        code: Some(code),
        hang: Some(Duration::from_secs(20)),
        fields: vec![
            ("outcome", "exited".into()),
            ("cleanup_errors", serde_json::json!([])),
            ("survivors", serde_json::json!([])),
        ],
        signals: Some(&[]),
        killed: Some(Exactly(1)),
        kept: Some(running.len() as u64),
        fates,
        only: true,
        ..Row::default()
    });
    assert_eq!(ran.v["containment"], tier.replace('-', "_"), "{}", ran.v);
    // corral has exited (its group orphaned, if it was going to be): still
    // true a second later.
    std::thread::sleep(Duration::from_secs(1));
    assert_alive(&ran.w, running);
    assert_dead(&ran.w, &["st"]);
}

#[test]
fn stopped_leftover_killed_running_ones_kept_process_group() {
    check("process-group", "keep-on-success", 0, &["a", "b"]);
}

#[test]
fn stopped_leftover_killed_running_ones_kept_subreaper() {
    check("subreaper", "keep-on-success", 0, &["a", "b"]);
}

#[corral_testkit::needs(cgroup)]
#[test]
fn stopped_leftover_killed_running_ones_kept_cgroup() {
    check("cgroup", "keep-on-success", 0, &["a", "b"]);
}

#[corral_testkit::needs(pidns)]
#[test]
fn stopped_leftover_killed_running_ones_kept_pid_namespace() {
    check("pid-namespace", "keep-on-success", 0, &["a", "b"]);
}

#[test]
fn stopped_leftover_alone_is_killed_process_group() {
    check("process-group", "keep-on-success", 0, &[]);
}

#[test]
fn stopped_leftover_alone_is_killed_subreaper() {
    check("subreaper", "keep-on-success", 0, &[]);
}

#[corral_testkit::needs(cgroup)]
#[test]
fn stopped_leftover_alone_is_killed_cgroup() {
    check("cgroup", "keep-on-success", 0, &[]);
}

#[corral_testkit::needs(pidns)]
#[test]
fn stopped_leftover_alone_is_killed_pid_namespace() {
    check("pid-namespace", "keep-on-success", 0, &[]);
}

/// `--leftovers keep` keeps after any exit: the same rule.
#[test]
fn stopped_leftover_killed_under_keep_after_exit_3_subreaper() {
    check("subreaper", "keep", 3, &["a"]);
}
