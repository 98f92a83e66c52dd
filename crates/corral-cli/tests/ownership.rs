//! Promise 3 at the edges: a corral never touches another live corral's
//! cgroup, whatever PID namespace either runs in, and still cleans up the
//! cgroup of a corral that died. Runs the real binary; compiled as ignored
//! (`#[needs(...)]`) where no cgroup v2 hierarchy is writable or `unshare`
//! cannot make a PID namespace.

#![cfg(target_os = "linux")]

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use corral_testkit::{assert_between, Scratch, Watch};

use common::*;

const SEC: Duration = Duration::from_secs(1);

/// Writes this shell's pid *as the mounted /proc sees it* (the host's pid
/// inside a PID namespace that kept the host's /proc) as helper `name`, so
/// the test's Watch can pin it from outside the namespace.
fn host_pid_as(name: &str) -> String {
    format!(
        r#"read p _ < /proc/self/stat; echo $p > "$CORRAL_TEST_DIR/{name}.tmp" && mv "$CORRAL_TEST_DIR/{name}.tmp" "$CORRAL_TEST_DIR/{name}.pid"; "#
    )
}

/// Asserts that the abandoned cgroup `dir` is gone (or goes within 3 s).
#[track_caller]
fn assert_removed(dir: &Path) {
    let end = Instant::now() + 3 * SEC;
    while dir.exists() && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !dir.exists(),
        "the abandoned cgroup {dir:?} was not removed"
    );
}

/// `[unshare ARGS --] corral run --containment cgroup --report R -- sh -c S`
/// with the scratch environment.
fn corral_in(s: &Scratch, ns: &[&str], report: &Path, script: &str) -> Command {
    let mut args: Vec<String> = Vec::new();
    let program = if ns.is_empty() {
        BIN.to_owned()
    } else {
        args.extend(ns.iter().map(|a| (*a).to_owned()));
        args.push("--".into());
        args.push(BIN.into());
        "unshare".to_owned()
    };
    args.extend(
        [
            "run",
            "--containment",
            "cgroup",
            "--report",
            report.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            script,
        ]
        .map(str::to_owned),
    );
    let mut c = Command::new(program);
    c.args(args)
        .envs(s.env())
        .current_dir(s.dir())
        .stdin(std::process::Stdio::null());
    c
}

/// Corral A runs a tree that lives three seconds; while it runs, corral B
/// (in `b_ns`) starts, makes its own cgroup next to A's and runs a tree for
/// a second. Both trees live to their natural end and both corrals report a
/// clean exit.
fn a_survives_b(a_ns: &[&str], b_ns: &[&str]) {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let script_a = format!(
        r#"{} ( {} exec sleep 3 ) & wait; echo natural-end"#,
        host_pid_as("a"),
        host_pid_as("ac"),
    );
    let ra = s.path("a.json");
    let a = start(corral_in(&s, a_ns, &ra, &script_a), Sink::Pipe, Sink::Pipe);
    assert!(w.pid("a", 5 * SEC).is_some(), "A's root never started");
    assert!(w.pid("ac", 5 * SEC).is_some(), "A's child never started");

    let rb = s.path("b.json");
    // With a private /proc, B's processes cannot name their host pids (and
    // die with B, the init of their namespace, anyway).
    let watch_b = !b_ns.contains(&"--mount-proc");
    let pid_b = if watch_b {
        host_pid_as("b")
    } else {
        String::new()
    };
    let script_b = format!(r#"{pid_b} sleep 1; echo natural-end"#);
    let b = start(corral_in(&s, b_ns, &rb, &script_b), Sink::Pipe, Sink::Pipe);
    if watch_b {
        assert!(w.pid("b", 5 * SEC).is_some(), "B's root never started");
    }
    let b = b.finish(10 * SEC);
    b.assert_code(0);
    assert_between(b.elapsed(), Duration::from_millis(900), 9 * SEC);
    assert!(b.out().contains("natural-end"), "B's output: {}", b.out());
    if watch_b {
        assert_dead(&w, &["b"]);
    }
    let vb = read_report(&rb);
    assert_eq!(vb["containment"], "cgroup", "{vb}");
    assert_eq!(vb["outcome"], "exited", "{vb}");
    // B is done; A's tree is untouched.
    std::thread::sleep(Duration::from_millis(200));
    assert_alive(&w, &["a", "ac"]);

    let t = Instant::now();
    let a = a.finish(15 * SEC);
    a.assert_code(0);
    assert_between(a.elapsed(), Duration::from_millis(2800), 12 * SEC);
    assert!(a.out().contains("natural-end"), "A's output: {}", a.out());
    let va = read_report(&ra);
    assert_eq!(va["containment"], "cgroup", "{va}");
    assert_eq!(va["outcome"], "exited", "{va}");
    assert_eq!(va["exit_code"], 0, "{va}");
    assert!(va["cleanup_errors"] == serde_json::json!([]), "{va}");
    assert!(t.elapsed() > Duration::from_millis(500), "A ended early");
    assert_dead(&w, &["a", "ac"]);
}

#[corral_testkit::needs(cgroup, unshare, root, pidns)]
#[test]
fn two_corrals_in_two_pid_namespaces_sharing_a_parent_cgroup() {
    // Both corrals are pid 1 of their namespace.
    a_survives_b(&["-fp"], &["-fp"]);
}

#[corral_testkit::needs(cgroup, unshare, root, pidns)]
#[test]
fn namespaced_corral_leaves_a_host_corral_alone() {
    // B's private /proc cannot see A's pid at all.
    a_survives_b(&[], &["-fp", "--mount-proc"]);
}

#[corral_testkit::needs(cgroup, unshare, root, pidns)]
#[test]
fn host_corral_leaves_a_namespaced_corral_alone() {
    a_survives_b(&["-fp"], &[]);
}

#[corral_testkit::needs(cgroup, unshare, pidns, userns)]
#[test]
fn unprivileged_user_namespaces_leave_each_other_alone() {
    // `unshare -Urfp`: a user namespace too (root inside maps to the
    // caller), as CI sandboxes make them.
    a_survives_b(&["-Urfp"], &["-Urfp"]);
}

/// The cgroups of this test's corral `pid` under `parent`.
fn dirs_of(parent: &Path, pid: u32) -> Vec<std::path::PathBuf> {
    let prefix = format!("corral-{pid}-");
    std::fs::read_dir(parent)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect()
}

#[corral_testkit::needs(cgroup)]
#[test]
fn cgroup_of_a_corral_that_died_is_killed_and_removed_by_the_next() {
    let parent = corral_testkit::writable_cgroup_v2().unwrap();
    let s = Scratch::new();
    let w = Watch::new(&s);
    let ra = s.path("a.json");
    let mut a = start(
        corral_in(&s, &[], &ra, r#""$H" left; exit 0"#),
        Sink::Null,
        Sink::Null,
    );
    assert!(w.pid("left", 5 * SEC).is_some(), "helper never started");
    let dirs = dirs_of(&parent, a.pid());
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    // corral dies without cleaning up (its own child: killed by its pid).
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    // From here on any corral that starts on this machine may clean it up
    // (it is abandoned); the next one of ours certainly does.

    let rb = s.path("b.json");
    let b = start(corral_in(&s, &[], &rb, "true"), Sink::Pipe, Sink::Pipe).finish(10 * SEC);
    b.assert_code(0);
    assert!(
        w.wait_dead("left", FATE),
        "the abandoned tree was not killed"
    );
    assert_removed(&dirs[0]);
}

#[corral_testkit::needs(cgroup)]
#[test]
fn cgroups_in_doubt_are_left_alone_and_abandoned_ones_are_cleaned() {
    // Next to where corral makes its cgroups: one in an older name form (no
    // lock to tell); of the self-locked form (`corral-<pid>-<token>-<n>`, a
    // one-shot corral's and the previous releases'), one whose lock a live
    // process (this test) holds and one that nobody holds; of the
    // owner-locked form (`corral-<pid>-<token>-r<n>`), one whose owner
    // record is missing, one whose owner record this test holds, and one
    // whose owner record nobody holds. Only the two nobody holds are
    // abandoned: their processes are killed and they are removed, with the
    // free owner record.
    let parent = corral_testkit::writable_cgroup_v2().unwrap();
    let s = Scratch::new();
    let me = std::process::id();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let token = |i: u64| format!("{:016x}", u64::from(nanos) << 8 | i);
    let old = parent.join(format!("corral-{me}-{}", 900_000 + nanos % 1000));
    let held = parent.join(format!("corral-{me}-{}-0", token(0)));
    let free = parent.join(format!("corral-{me}-{}-1", token(1)));
    let orphan = parent.join(format!("corral-{me}-{}-r0", token(2)));
    let owned_held = parent.join(format!("corral-{me}-{}-r0", token(3)));
    let owner_held = parent.join(format!("corral-owner-{me}-{}", token(3)));
    let owned_free = parent.join(format!("corral-{me}-{}-r4", token(4)));
    let owner_free = parent.join(format!("corral-owner-{me}-{}", token(4)));
    struct Dirs(Vec<std::path::PathBuf>);
    impl Drop for Dirs {
        fn drop(&mut self) {
            for d in &self.0 {
                for _ in 0..200 {
                    if std::fs::remove_dir(d).is_ok() || !d.exists() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
    }
    // Dropped after the Watch, which kills the helpers first; the owner
    // records last (after their cgroups).
    let dirs = Dirs(vec![
        old.clone(),
        held.clone(),
        free.clone(),
        orphan.clone(),
        owned_held.clone(),
        owned_free.clone(),
        owner_held.clone(),
        owner_free.clone(),
    ]);
    let w = Watch::new(&s);
    let lock = |d: &Path| {
        let f = std::fs::File::open(d).unwrap();
        rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive).unwrap();
        f
    };
    // The owner records are made and locked before their cgroups, as
    // corral does.
    std::fs::create_dir(&owner_held).unwrap();
    std::fs::create_dir(&owner_free).unwrap();
    let owner_held_lock = lock(&owner_held);
    // Held while its helper moves in, so that no corral starting meanwhile
    // (other tests) takes it for abandoned before the scene is set.
    let owner_free_lock = lock(&owner_free);
    for d in [&old, &held, &free, &orphan, &owned_held, &owned_free] {
        std::fs::create_dir(d).unwrap();
    }
    let held_lock = lock(&held);
    let free_lock = lock(&free);
    let mut kids = Vec::new();
    let scene = [
        ("old", &old),
        ("held", &held),
        ("free", &free),
        ("orphan", &orphan),
        ("ownedheld", &owned_held),
        ("ownedfree", &owned_free),
    ];
    for (name, d) in scene {
        kids.push(
            Command::new("sh")
                .args([
                    "-c",
                    &format!(r#"echo $$ > "$D/cgroup.procs" && exec "$H" {name}"#),
                ])
                .env("D", d)
                .envs(s.env())
                .spawn()
                .unwrap(),
        );
        assert!(
            w.pid(name, 5 * SEC).is_some(),
            "helper {name} never started"
        );
    }
    // The owners of `free` and `owned_free` are gone.
    drop(free_lock);
    drop(owner_free_lock);
    let rb = s.path("b.json");
    let b = start(corral_in(&s, &[], &rb, "true"), Sink::Pipe, Sink::Pipe).finish(10 * SEC);
    b.assert_code(0);
    for name in ["free", "ownedfree"] {
        assert!(
            w.wait_dead(name, FATE),
            "the abandoned cgroup's process {name} lives"
        );
    }
    assert_removed(&free);
    assert_removed(&owned_free);
    assert_removed(&owner_free);
    assert_alive(&w, &["old", "held", "orphan", "ownedheld"]);
    for d in [&old, &held, &orphan, &owned_held, &owner_held] {
        assert!(d.exists(), "{d:?} was removed");
    }
    drop(w); // kills the helpers
    for mut k in kids {
        let _ = k.wait();
    }
    drop(held_lock);
    drop(owner_held_lock);
    drop(dirs);
}
