//! An unprivileged corral in a cgroup v2 subtree delegated to its user
//! (issue 23, item 10): `auto` uses the cgroup tier there, and a subtree
//! that is only half handed over (the directory, not its `cgroup.procs`)
//! is no delegation: `auto` falls back to the subreaper tier with a note
//! that names what is missing, instead of failing the run at the spawn.
//!
//! This machine has no user systemd (`systemd-run --user --scope -p
//! Delegate=yes`), so root makes the delegated subtree the way systemd
//! does: a cgroup whose directory and `cgroup.procs`, `cgroup.threads` and
//! `cgroup.subtree_control` belong to the user, with the process that
//! becomes corral moved into it by root before it drops its privileges.

#![cfg(target_os = "linux")]

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use corral_testkit::{Scratch, Watch};

use common::*;

const SEC: Duration = Duration::from_secs(1);
/// `nobody`.
const USER: u32 = 65534;

/// A cgroup made by root under this process's own cgroup, handed to
/// [`USER`] (`files`: which of its files too); removed on drop.
struct Delegated(PathBuf);

impl Delegated {
    fn new(tag: &str, files: &[&str]) -> Delegated {
        let own = corral_testkit::writable_cgroup_v2().expect("needs(cgroup) checked it");
        let dir = own.join(format!("corral-delegated-{}-{tag}", std::process::id()));
        std::fs::create_dir(&dir).unwrap();
        let chown = |p: &Path| {
            std::os::unix::fs::chown(p, Some(USER), Some(USER)).unwrap();
        };
        chown(&dir);
        for f in files {
            chown(&dir.join(f));
        }
        Delegated(dir)
    }
}

impl Drop for Delegated {
    fn drop(&mut self) {
        // The runs' cgroups below are corral's to remove; whatever is left
        // (a failed test) goes first, deepest first.
        let end = Instant::now() + 5 * SEC;
        loop {
            if let Ok(rd) = std::fs::read_dir(&self.0) {
                for e in rd.flatten() {
                    if e.file_type().is_ok_and(|t| t.is_dir()) {
                        let _ = std::fs::remove_dir(e.path());
                    }
                }
            }
            if std::fs::remove_dir(&self.0).is_ok() || Instant::now() > end {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// `corral run --report R ARGS...` as [`USER`], started by a root shell
/// that first moves itself into `cg` (so corral sits in it, as under
/// `systemd-run --user --scope -p Delegate=yes`). Returns the report.
fn corral_as_user_in(s: &Scratch, cg: &Path, args: &[&str]) -> (Done, serde_json::Value) {
    let report = s.path("report.json");
    let mut c = std::process::Command::new("sh");
    c.arg("-c")
        .arg(r#"echo $$ > "$1/cgroup.procs" && shift && exec "$@""#)
        .arg("sh")
        .arg(cg)
        .args([
            "setpriv",
            &format!("--reuid={USER}"),
            &format!("--regid={USER}"),
            "--clear-groups",
            "--",
            BIN,
            "run",
            "--report",
        ])
        .arg(&report)
        .args(args)
        .envs(s.env())
        .current_dir(s.dir())
        .stdin(std::process::Stdio::null());
    let done = run(c, 30 * SEC);
    let v = read_report(&report);
    (done, v)
}

fn open_scratch() -> Scratch {
    let s = Scratch::new();
    // The helpers and corral (run as USER) write their files here.
    std::fs::set_permissions(s.dir(), std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    s
}

/// A subtree delegated to the user, corral in it: `auto` is the cgroup
/// tier, crash-safe, the run's cgroup is below the delegated one, and a
/// `setsid` escaper dies at the deadline with the rest of the tree.
#[corral_testkit::needs(root, cgroup)]
#[test]
fn auto_in_a_delegated_subtree_is_the_cgroup_tier() {
    let s = open_scratch();
    let w = Watch::new(&s);
    let cg = Delegated::new(
        "full",
        &["cgroup.procs", "cgroup.threads", "cgroup.subtree_control"],
    );
    let script = format!(
        r#"setsid "$H" esc & "$H" kid & {}{} cat /proc/self/cgroup > "$CORRAL_TEST_DIR/cg"; sleep 30"#,
        wait_for("esc"),
        wait_for("kid")
    );
    let (done, v) = corral_as_user_in(
        &s,
        &cg.0,
        &["-t", "1", "-k", "0", "--", "sh", "-c", &script],
    );
    assert_eq!(v["containment"], "cgroup", "{v}\n{}", done.err());
    assert_eq!(v["containment_note"], serde_json::Value::Null, "{v}");
    assert_eq!(v["crash_safe"], true, "{v}");
    assert_eq!(v["outcome"], "timed_out", "{v}");
    let line = std::fs::read_to_string(s.path("cg")).unwrap();
    let name = cg.0.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        line.contains(&format!("/{name}/corral-")),
        "the run's cgroup is not below the delegated one: {line}"
    );
    for n in ["esc", "kid"] {
        assert!(w.wait_dead(n, 2 * SEC), "{n} survived the deadline");
    }
}

/// The directory handed over, its `cgroup.procs` not: the kernel would
/// refuse to place the command (EACCES at the spawn, exit 125 before);
/// `auto` falls back to the subreaper tier and says why.
#[corral_testkit::needs(root, cgroup)]
#[test]
fn auto_in_a_half_delegated_subtree_falls_back_and_says_why() {
    let s = open_scratch();
    let _w = Watch::new(&s);
    let cg = Delegated::new("half", &["cgroup.subtree_control"]);
    let (done, v) = corral_as_user_in(&s, &cg.0, &["--", "true"]);
    done.assert_code(0);
    assert_eq!(v["containment"], "subreaper", "{v}");
    let note = v["containment_note"].as_str().unwrap_or_default();
    assert!(
        note.contains("cgroup.procs is not writable") && note.contains("Delegate=yes"),
        "{note}"
    );
}
