//! An unprivileged corral in a cgroup v2 subtree delegated to its user:
//! `auto` uses the cgroup tier there, and a subtree
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

/// The set-up of a delegation test: a scratch [`USER`] may write in, a
/// cgroup delegated to [`USER`] (`files`: which of its files too), and the
/// watch. Bound as `let Setup { s, cg, w } = ..` (dropped in reverse), or
/// kept whole (fields drop in order): either way the watch kills the
/// helpers before the cgroup is removed, so a failed assertion leaves
/// nothing behind.
struct Setup {
    w: Watch,
    cg: Delegated,
    s: Scratch,
}

fn set_up(tag: &str, files: &[&str]) -> Setup {
    let s = open_scratch();
    let cg = Delegated::new(tag, files);
    let w = Watch::new(&s);
    Setup { w, cg, s }
}

/// `corral run --report R ARGS...` as [`USER`] in the cgroups `cgs` (see
/// [`as_user_in`]), with `env`, run to its end; the report is [`report`].
fn corral_as_user(s: &Scratch, cgs: &[&Path], env: &[(&str, &str)], args: &[&str]) -> Done {
    run(
        as_user_in(s, cgs, env, &s.path("report.json"), args),
        30 * SEC,
    )
}

/// The report of the last [`corral_as_user`] in `s`.
fn report(s: &Scratch) -> serde_json::Value {
    read_report(&s.path("report.json"))
}

/// `corral run --report R ARGS...` as [`USER`], started by a root shell
/// that first moves itself into `cg` (so corral sits in it, as under
/// `systemd-run --user --scope -p Delegate=yes`). Returns the report.
fn corral_as_user_in(s: &Scratch, cg: &Path, args: &[&str]) -> (Done, serde_json::Value) {
    let done = corral_as_user(s, &[cg], &[], args);
    (done, report(s))
}

/// The run was contained by the cgroup tier, with no note.
#[track_caller]
fn assert_cgroup_tier(v: &serde_json::Value, done: &Done) {
    assert_eq!(v["containment"], "cgroup", "{v}\n{}", done.err());
    assert_eq!(v["containment_note"], serde_json::Value::Null, "{v}");
}

/// The command of [`corral_as_user_in`]: the root shell joins every cgroup
/// of `cgs` (a v2 one, v1 groups), corral gets `env` too. A v2 cgroup whose
/// children have controllers (other corrals moved aside and enabled them)
/// accepts no process: the shell then joins its `corral-leaf`, as a process
/// started by a moved corral would be.
fn as_user_in(
    s: &Scratch,
    cgs: &[&Path],
    env: &[(&str, &str)],
    report: &Path,
    args: &[&str],
) -> std::process::Command {
    let mut c = std::process::Command::new("sh");
    c.arg("-c")
        .arg(r#"n=$1; shift; t=0; until echo $$ > "$1/cgroup.procs" || echo $$ > "$1/corral-leaf/cgroup.procs"; do t=$((t+1)); [ $t -lt 100 ] || exit 99; sleep 0.01; done 2>/dev/null; shift; n=$((n-1)); while [ "$n" -gt 0 ]; do echo $$ > "$1/cgroup.procs" || exit 99; shift; n=$((n-1)); done; exec "$@""#)
        .arg("sh")
        .arg(cgs.len().to_string())
        .args(cgs)
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
        .arg(report)
        .args(args)
        .envs(s.env())
        .envs(env.iter().copied())
        .current_dir(s.dir())
        .stdin(std::process::Stdio::null());
    c
}

/// Every delegated cgroup file root hands over (as systemd's `Delegate=yes`).
const FULL: &[&str] = &["cgroup.procs", "cgroup.threads", "cgroup.subtree_control"];

/// The cgroups directly below `dir`, by name.
fn children(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn words(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// What corral made in the delegated cgroup `dir` is gone: no cgroup below
/// it, no controller left enabled for its children (waited for a moment:
/// the last corral out undoes what the others left).
#[track_caller]
fn assert_clean(dir: &Path, keep: &[&str]) {
    let end = Instant::now() + 3 * SEC;
    loop {
        let left: Vec<String> = children(dir)
            .into_iter()
            .filter(|c| !keep.contains(&c.as_str()))
            .collect();
        let on = words(&dir.join("cgroup.subtree_control"));
        if left.is_empty() && on.is_empty() {
            return;
        }
        assert!(
            Instant::now() < end,
            "corral left cgroups {left:?} or controllers {on:?} in {}",
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The hugetlb controller, which this hybrid machine offers in cgroup v2
/// (memory and pids are bound to v1 here), enabled for the children of this
/// process's cgroup (the hierarchy's root: `needs(v2hugetlb)`). It stands
/// in for memory/pids: the kernel's "no internal processes" rule is the
/// same for every domain controller. Left enabled (other tests may run).
fn hugetlb_offered() {
    let own = corral_testkit::own_cgroup_v2().unwrap();
    if !words(&own.join("cgroup.subtree_control")).contains(&"hugetlb".to_owned()) {
        std::fs::write(own.join("cgroup.subtree_control"), "+hugetlb").unwrap();
    }
}

/// The test hook that makes every cgroup run ask for these v2 controllers
/// (as a limit asks for memory or pids).
const HOOK: (&str, &str) = ("CORRAL_TEST_V2_CONTROLLERS", "hugetlb");

/// A v1 group of `controller` made by root and handed to [`USER`]; removed
/// on drop.
struct DelegatedV1(PathBuf);

impl DelegatedV1 {
    fn new(controller: &str, tag: &str) -> DelegatedV1 {
        let own = corral_testkit::v1_hierarchy(controller).unwrap();
        let dir = own.join(format!("corral-delegated-{}-{tag}", std::process::id()));
        std::fs::create_dir(&dir).unwrap();
        for p in [dir.clone(), dir.join("cgroup.procs"), dir.join("tasks")] {
            std::os::unix::fs::chown(&p, Some(USER), Some(USER)).unwrap();
        }
        DelegatedV1(dir)
    }
}

impl Drop for DelegatedV1 {
    fn drop(&mut self) {
        let end = Instant::now() + 5 * SEC;
        while std::fs::remove_dir(&self.0).is_err() && self.0.exists() && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
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
    let Setup { s, cg, w } = set_up("full", FULL);
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
    assert_cgroup_tier(&v, &done);
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
    let Setup { s, cg, w: _w } = set_up("half", &["cgroup.subtree_control"]);
    let (done, v) = corral_as_user_in(&s, &cg.0, &["--", "true"]);
    done.assert_code(0);
    assert_eq!(v["containment"], "subreaper", "{v}");
    let note = v["containment_note"].as_str().unwrap_or_default();
    assert!(
        note.contains("cgroup.procs is not writable") && note.contains("Delegate=yes"),
        "{note}"
    );
}

/// A fork bomb under `--pids-max 20` and a memory hog under `--memory-max`,
/// as [`USER`] in a delegated subtree where memory and pids are v2
/// controllers: corral cannot enable them while it sits in the delegated
/// cgroup (exit 125 before), so it moves itself into `corral-leaf` beside
/// the runs' cgroups, enables them, and undoes both when it is done.
#[corral_testkit::needs(root, cgroup, v2limits)]
#[test]
fn v2_limits_in_a_delegated_subtree() {
    let cg = Delegated::new("v2limits", FULL);
    limits_enforced(&[&cg.0]);
}

/// The same limits on a hybrid system, where they are v1 groups: root
/// delegates corral's v1 `pids` and `memory` groups too (as systemd does
/// for the legacy hierarchies), and corral makes each run's groups there.
#[corral_testkit::needs(root, cgroup, v1limits)]
#[test]
fn v1_limits_in_a_delegated_subtree() {
    let cg = Delegated::new("v1limits", FULL);
    let pids = DelegatedV1::new("pids", "v1limits");
    let mem = DelegatedV1::new("memory", "v1limits");
    limits_enforced(&[&cg.0, &pids.0, &mem.0]);
}

/// corral as [`USER`] in the delegated cgroups `cgs` (v2 first): a fork
/// bomb of helpers stops at `--pids-max 20` (every helper and a `setsid`
/// escaper dead after the deadline), a memory hog is killed at
/// `--memory-max 64M`; each outcome as the cgroup tier reports it, and
/// nothing corral made is left in any of `cgs`.
fn limits_enforced(cgs: &[&Path]) {
    let s = open_scratch();
    let w = Watch::new(&s);
    let bomb = format!(
        r#"setsid "$H" esc & {} (i=0; while [ $i -lt 100 ]; do "$H" b$i & i=$((i+1)); done; wait); exec sleep 30"#,
        wait_for("esc")
    );
    // The bomb is a subshell (the shell dies when a fork fails); the root
    // then becomes `sleep` without a fork, so the deadline ends the run.
    let done = corral_as_user(
        &s,
        cgs,
        &[],
        &[
            "--pids-max",
            "20",
            "-t",
            "3",
            "-k",
            "0",
            "--",
            "sh",
            "-c",
            &bomb,
        ],
    );
    let v = report(&s);
    assert_cgroup_tier(&v, &done);
    assert_eq!(v["outcome"], "timed_out", "{v}");
    assert_eq!(v["limits_hit"], serde_json::json!(["pids"]), "{v}");
    assert!(
        v["usage"]["pids_peak"].as_u64().is_some_and(|p| p <= 20),
        "{v}"
    );
    assert_eq!(count(&v, "kept"), 0, "{v}");
    // Every helper that could be forked is gone, the escaper too.
    let names = w.names();
    assert!(names.len() <= 20, "{names:?}");
    for n in &names {
        assert!(w.wait_dead(n, FATE), "{n} survived");
    }
    assert_dead(&w, &["esc"]);
    let hog = r#"exec python3 -c 'a = [b"x" * (1 << 20) for i in range(1000)]'"#;
    let done = corral_as_user(
        &s,
        cgs,
        &[],
        &["--memory-max", "64M", "-t", "20", "--", "sh", "-c", hog],
    );
    let v = report(&s);
    assert_eq!(v["containment"], "cgroup", "{v}\n{}", done.err());
    assert_eq!(v["limits_hit"], serde_json::json!(["memory"]), "{v}");
    assert_eq!(v["outcome"], "signaled", "{v}");
    assert_eq!(v["signal"], 9, "{v}");
    for g in cgs {
        assert_clean(g, &[]);
    }
}

/// The leaf mechanism on the kernel, with the hugetlb controller standing in
/// for memory/pids (see [`hugetlb_offered`]): corral, as [`USER`] in the
/// delegated cgroup, moves itself into `corral-leaf`, enables the
/// controller, runs in a sibling cgroup that has it, kills the tree at the
/// deadline, and leaves the delegated cgroup as it found it.
#[corral_testkit::needs(root, cgroup, v2hugetlb)]
#[test]
fn a_controller_is_enabled_by_moving_corral_into_a_leaf() {
    hugetlb_offered();
    let Setup { s, cg, w } = set_up("leaf", FULL);
    let script = format!(
        r#"setsid "$H" esc & {} c=$(sed -n 's/^0:://p' /proc/self/cgroup); p=$(sed -n 's/^0:://p' /proc/$PPID/cgroup); echo "$c $p $(cat /sys/fs/cgroup/unified$c/cgroup.controllers)" > "$CORRAL_TEST_DIR/cg"; sleep 30"#,
        wait_for("esc")
    );
    let done = corral_as_user(
        &s,
        &[&cg.0],
        &[HOOK],
        &["-t", "1", "-k", "0", "--", "sh", "-c", &script],
    );
    let v = report(&s);
    assert_cgroup_tier(&v, &done);
    assert_eq!(v["outcome"], "timed_out", "{v}");
    assert_eq!(v["crash_safe"], true, "{v}");
    let seen = std::fs::read_to_string(s.path("cg")).unwrap();
    let name = cg.0.file_name().unwrap().to_string_lossy().into_owned();
    let f: Vec<&str> = seen.split_whitespace().collect();
    assert!(f[0].contains(&format!("/{name}/corral-")), "{seen}");
    assert!(
        f[1].ends_with(&format!("/{name}/corral-leaf")),
        "corral did not move aside: {seen}"
    );
    assert!(
        f[2..].contains(&"hugetlb"),
        "the run's cgroup lacks the controller: {seen}"
    );
    assert_dead(&w, &["esc"]);
    assert_clean(&cg.0, &[]);
}

/// Eight corrals start at once in one delegated cgroup, each moving itself
/// into the shared leaf: none is refused (a corral still on its way out is
/// waited for), none loses the leaf to another's cleanup, every run's
/// cgroup has the controller, and the last one out undoes everything.
#[corral_testkit::needs(root, cgroup, v2hugetlb)]
#[test]
fn several_corrals_move_aside_at_once() {
    hugetlb_offered();
    let Setup { s, cg, w: _w } = set_up("many", FULL);
    for round in 0..3 {
        let runs: Vec<(PathBuf, Run)> = (0..8)
            .map(|i| {
                let report = s.path(&format!("r{round}-{i}.json"));
                let script = format!(
                    r#"sleep 0.{i}; c=$(sed -n 's/^0:://p' /proc/self/cgroup); cat /sys/fs/cgroup/unified$c/cgroup.controllers > "$CORRAL_TEST_DIR/c{round}-{i}""#
                );
                let c = as_user_in(
                    &s,
                    &[&cg.0],
                    &[HOOK],
                    &report,
                    &["--containment", "cgroup", "--", "sh", "-c", &script],
                );
                (report, start(c, Sink::Pipe, Sink::Pipe))
            })
            .collect();
        for (i, (report, r)) in runs.into_iter().enumerate() {
            let done = r.finish(30 * SEC);
            assert_eq!(done.code(), 0, "run {round}-{i}: {}", done.err());
            let v = read_report(&report);
            assert_eq!(v["containment"], "cgroup", "{v}");
            let ctl = std::fs::read_to_string(s.path(&format!("c{round}-{i}"))).unwrap();
            assert!(
                ctl.split_whitespace().any(|c| c == "hugetlb"),
                "run {round}-{i}: {ctl}"
            );
        }
        assert_clean(&cg.0, &[]);
    }
}

/// Another process (a user's shell, say) sits in the delegated cgroup:
/// corral cannot move it, so the controller cannot be had. `--containment
/// cgroup` fails with 125 and names the pid; `auto` falls back and says
/// why; corral moved itself back, removed the leaf, and left the other
/// process where it was.
#[corral_testkit::needs(root, cgroup, v2hugetlb)]
#[test]
fn another_process_in_the_delegated_cgroup_is_named() {
    hugetlb_offered();
    // The cgroup is removed after the watch killed the shell (a failed
    // assertion must not leave the cgroup behind).
    let Setup { s, cg, w } = set_up("occupied", FULL);
    let mut shell = std::process::Command::new(s.path("H"))
        .arg("shell")
        .envs(s.env())
        .spawn()
        .unwrap();
    let pid = w.pid("shell", FATE).expect("helper shell started");
    // Once it is `sleep` (its own `mv` child is gone), so only it joins.
    let end = Instant::now() + FATE;
    while std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default() != "sleep\n" {
        assert!(Instant::now() < end, "helper shell never became sleep");
        std::thread::sleep(Duration::from_millis(5));
    }
    std::fs::write(cg.0.join("cgroup.procs"), pid.to_string()).unwrap();
    let done = corral_as_user(
        &s,
        &[&cg.0],
        &[HOOK],
        &["--containment", "cgroup", "--", "true"],
    );
    done.assert_code(125);
    let err = done.err();
    assert!(
        err.contains("other processes sit in it") && err.contains(&pid.to_string()),
        "{err}"
    );
    let done = corral_as_user(&s, &[&cg.0], &[HOOK], &["--", "true"]);
    done.assert_code(0);
    let v = report(&s);
    assert_eq!(v["containment"], "subreaper", "{v}");
    assert!(
        v["containment_note"]
            .as_str()
            .is_some_and(|n| n.contains("other processes sit in it")),
        "{v}"
    );
    assert_alive(&w, &["shell"]);
    // The shell stays where it was (corral's keeper, there too, ends a
    // moment after corral).
    let end = Instant::now() + FATE;
    while words(&cg.0.join("cgroup.procs")) != vec![pid.to_string()] {
        assert!(
            Instant::now() < end,
            "{:?}",
            words(&cg.0.join("cgroup.procs"))
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_clean(&cg.0, &[]);
    let _ = shell.kill();
    let _ = shell.wait();
}

/// Parent-only delegation: the user owns a cgroup (its directory and
/// files), but corral sits in a child of it that root made and kept. The
/// kernel lets the user place a process from there into a cgroup made in
/// the delegated parent (write access to the common ancestor's
/// `cgroup.procs`, and to the new cgroup's): `auto` uses it, with the runs'
/// cgroups beside corral's own.
#[corral_testkit::needs(root, cgroup)]
#[test]
fn a_delegated_parent_is_used_for_the_runs_cgroups() {
    let Setup { s, cg, w } = set_up("parent", FULL);
    let inner = cg.0.join("inner");
    std::fs::create_dir(&inner).unwrap();
    let script = format!(
        r#"setsid "$H" esc & "$H" kid & {}{} cat /proc/self/cgroup > "$CORRAL_TEST_DIR/cg"; sleep 30"#,
        wait_for("esc"),
        wait_for("kid")
    );
    let (done, v) = corral_as_user_in(
        &s,
        &inner,
        &["-t", "1", "-k", "0", "--", "sh", "-c", &script],
    );
    assert_cgroup_tier(&v, &done);
    assert_eq!(v["outcome"], "timed_out", "{v}");
    assert_eq!(v["crash_safe"], true, "{v}");
    let line = std::fs::read_to_string(s.path("cg")).unwrap();
    let name = cg.0.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        line.contains(&format!("/{name}/corral-")),
        "the run's cgroup is not beside corral's: {line}"
    );
    assert_dead(&w, &["esc", "kid"]);
    assert_clean(&cg.0, &["inner"]);
}

/// Parent-only delegation and a controller for the runs' cgroups (hugetlb
/// standing in for a limit's): the delegated parent holds no process of its
/// own, so corral enables it there directly (no leaf), and disables it after.
#[corral_testkit::needs(root, cgroup, v2hugetlb)]
#[test]
fn a_delegated_parent_gets_the_controllers_directly() {
    hugetlb_offered();
    let Setup { s, cg, w: _w } = set_up("parentctl", FULL);
    let inner = cg.0.join("inner");
    std::fs::create_dir(&inner).unwrap();
    let script = r#"c=$(sed -n 's/^0:://p' /proc/self/cgroup); p=$(sed -n 's/^0:://p' /proc/$PPID/cgroup); echo "$p $(cat /sys/fs/cgroup/unified$c/cgroup.controllers)" > "$CORRAL_TEST_DIR/ctl""#;
    let done = corral_as_user(&s, &[&inner], &[HOOK], &["--", "sh", "-c", script]);
    done.assert_code(0);
    let v = report(&s);
    assert_eq!(v["containment"], "cgroup", "{v}");
    let ctl = std::fs::read_to_string(s.path("ctl")).unwrap();
    assert!(ctl.split_whitespace().any(|c| c == "hugetlb"), "{ctl}");
    // corral stayed where it was: it was never in the way.
    assert!(
        ctl.split_whitespace()
            .next()
            .is_some_and(|p| p.ends_with("/inner")),
        "{ctl}"
    );
    assert_clean(&cg.0, &["inner"]);
}

/// A cgroup beside corral's is delegated, corral's own and its parent are
/// not: the kernel would refuse to place the command there (the common
/// ancestor is root's). `auto` falls back, and the note names the
/// delegated cgroup and how to start corral inside it.
#[corral_testkit::needs(root, cgroup)]
#[test]
fn a_delegated_cgroup_beside_corral_is_named_in_the_note() {
    let s = open_scratch();
    let _w = Watch::new(&s);
    let own = corral_testkit::writable_cgroup_v2().unwrap();
    let top = own.join(format!("corral-delegated-{}-beside", std::process::id()));
    std::fs::create_dir(&top).unwrap();
    let top = Delegated(top);
    let (mine, theirs) = (top.0.join("mine"), top.0.join("theirs"));
    std::fs::create_dir(&mine).unwrap();
    std::fs::create_dir(&theirs).unwrap();
    for p in [
        theirs.clone(),
        theirs.join("cgroup.procs"),
        theirs.join("cgroup.subtree_control"),
    ] {
        std::os::unix::fs::chown(&p, Some(USER), Some(USER)).unwrap();
    }
    let (done, v) = corral_as_user_in(&s, &mine, &["--", "true"]);
    done.assert_code(0);
    assert_eq!(v["containment"], "subreaper", "{v}");
    let note = v["containment_note"].as_str().unwrap_or_default();
    assert!(
        note.contains(&format!("{} beside it is delegated", theirs.display()))
            && note.contains("echo $$ >"),
        "{note}"
    );
}

/// On a hybrid system with only the v2 cgroup delegated, a limit (a v1
/// group) cannot be had: exit 125, and the message says that corral's v1
/// group must be delegated too; nothing is left in the delegated cgroup.
#[corral_testkit::needs(root, cgroup, v1limits)]
#[test]
fn v1_limits_need_the_v1_groups_delegated_too() {
    let Setup { s, cg, w: _w } = set_up("v1missing", FULL);
    let done = corral_as_user(&s, &[&cg.0], &[], &["--pids-max", "20", "--", "true"]);
    done.assert_code(125);
    let err = done.err();
    assert!(
        err.contains("a limit here is a group in the v1 hierarchy")
            && err.contains("Permission denied"),
        "{err}"
    );
    assert_clean(&cg.0, &[]);
}

/// A corral killed (SIGKILL) while it holds the controllers never undoes
/// them: its keeper kills the tree and removes the run's cgroup, and the
/// leaf and the enabled controller stay (the delegated cgroup then accepts
/// no process; the next corral is started in the leaf). The next corral,
/// even one without limits, undoes them at its first run.
#[corral_testkit::needs(root, cgroup, v2hugetlb)]
#[test]
fn the_next_corral_undoes_what_a_killed_one_left() {
    hugetlb_offered();
    let Setup { s, cg, w } = set_up("killed", FULL);
    let report = s.path("report.json");
    let script = format!(r#""$H" kid & {} sleep 30"#, wait_for("kid"));
    let r = start(
        as_user_in(
            &s,
            &[&cg.0],
            &[HOOK],
            &report,
            &["-t", "20", "--", "sh", "-c", &script],
        ),
        Sink::Null,
        Sink::Null,
    );
    assert!(w.pid("kid", 10 * SEC).is_some(), "the tree never started");
    // setpriv execs corral: the started process is corral itself.
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(r.pid() as i32).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    let _ = r.finish(10 * SEC);
    assert_dead(&w, &["kid"]);
    let end = Instant::now() + 3 * SEC;
    while children(&cg.0) != ["corral-leaf"] {
        assert!(Instant::now() < end, "{:?}", children(&cg.0));
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(words(&cg.0.join("cgroup.subtree_control")).contains(&"hugetlb".to_owned()));
    let (done, v) = corral_as_user_in(&s, &cg.0, &["--", "true"]);
    done.assert_code(0);
    assert_eq!(v["containment"], "cgroup", "{v}");
    assert_clean(&cg.0, &[]);
}

/// A corral without limits runs in the delegated cgroup (it stays where it
/// was started: it needs no controller), and another asks for one: the
/// first stands in the way like any other process, so the second fails
/// with 125 naming it, and the first's run is untouched.
#[corral_testkit::needs(root, cgroup, v2hugetlb)]
#[test]
fn a_corral_without_limits_in_the_way_is_named() {
    hugetlb_offered();
    let Setup { s, cg, w } = set_up("mixed", FULL);
    let first_report = s.path("first.json");
    let first = start(
        as_user_in(
            &s,
            &[&cg.0],
            &[],
            &first_report,
            &[
                "--",
                "sh",
                "-c",
                &format!(r#""$H" kid & {} sleep 2"#, wait_for("kid")),
            ],
        ),
        Sink::Null,
        Sink::Null,
    );
    assert!(
        w.pid("kid", 10 * SEC).is_some(),
        "the first run never started"
    );
    let done = corral_as_user(
        &s,
        &[&cg.0],
        &[HOOK],
        &["--containment", "cgroup", "--", "true"],
    );
    done.assert_code(125);
    let err = done.err();
    assert!(
        err.contains("other processes sit in it") && err.contains(&first.pid().to_string()),
        "{err}"
    );
    let done = first.finish(30 * SEC);
    assert_eq!(done.code(), 0);
    let v = read_report(&first_report);
    assert_eq!(v["containment"], "cgroup", "{v}");
    assert_eq!(v["outcome"], "exited", "{v}");
    // Kept by the default policy (exit 0, output passed through): moved to
    // corral's own cgroup, so the run's could be removed.
    assert_eq!(count(&v, "kept"), 1, "{v}");
    assert_alive(&w, &["kid"]);
    let kid = w.pid("kid", FATE).unwrap();
    assert!(words(&cg.0.join("cgroup.procs")).contains(&kid.to_string()));
    assert_clean(&cg.0, &[]);
    w.signal("kid", rustix::process::Signal::KILL);
    assert_dead(&w, &["kid"]);
}
