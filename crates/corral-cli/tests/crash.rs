//! Crash safety of `corral run` and the `pid-namespace` tier from the
//! command line: SIGKILL corral mid-run and every process of the tree is
//! gone within 1 s (every tier; in the process-group and subreaper tiers,
//! escapers that kept the tree's cookie in their environment); with a
//! grace (`-k`), the tree gets the run's first signal first and SIGKILL
//! the grace later (the farewell); a normal exit still keeps what
//! keep-on-success keeps.

#![cfg(linux_raw)]

mod common;

use std::time::{Duration, Instant};

use corral_testkit::{Scratch, Watch};

use common::*;
use corral_testkit::scenario::{Fate::Alive, Fate::Dead};

const SEC: Duration = Duration::from_secs(1);

/// A tree with a plain child, a setsid escaper, a double-forked daemon and
/// a TERM ignorer, under a 60 s timeout that never fires.
fn tree_script() -> String {
    format!(
        r#"{ROOT}"$H" plain & setsid "$H" esc >/dev/null 2>&1 &
           ( setsid sh -c '"$H" daemon >/dev/null 2>&1 &' & )
           {IGN}{}{}{}{} sleep 30"#,
        wait_for("plain"),
        wait_for("esc"),
        wait_for("daemon"),
        wait_for("ign")
    )
}

const ALL: [&str; 5] = ["root", "plain", "esc", "daemon", "ign"];

/// SIGKILLs corral (run with `opts` in `tier`) once the whole tree of
/// [`tree_script`] runs; then every helper of `must_die` is gone within
/// 1.2 s, and in the cgroup tier so is the run's cgroup.
fn sigkill_corral(tier: &str, opts: &[&str], must_die: &[&str]) {
    let s = Scratch::new();
    if tier == "pid-namespace" {
        s.namespaced();
    }
    let w = Watch::new(&s);
    let script = tree_script();
    let mut args = vec!["run", "--containment", tier, "-t", "60"];
    args.extend(opts);
    args.extend(["--", "sh", "-c", &script]);
    let mut r = start(corral(&s, args), Sink::Null, Sink::Null);
    for n in ALL {
        assert!(
            w.pid(n, 10 * SEC).is_some(),
            "{tier}: helper {n} never started"
        );
    }
    std::thread::sleep(ms(50));
    r.child.kill().unwrap();
    let t = Instant::now();
    r.child.wait().unwrap();
    for n in must_die {
        let left = (SEC + ms(200)).saturating_sub(t.elapsed());
        assert!(w.wait_dead(n, left), "{tier}: {n} survived corral's death");
    }
    if must_die.len() == ALL.len() {
        assert!(t.elapsed() <= SEC + ms(200), "{tier}: {:?}", t.elapsed());
    }
    if tier == "cgroup" {
        // The run's cgroup is removed too.
        let pid = r.child.id();
        let deadline = Instant::now() + SEC;
        let root = corral_testkit::writable_cgroup_v2().unwrap();
        loop {
            let left: Vec<_> = std::fs::read_dir(&root)
                .unwrap()
                .flatten()
                .filter(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .starts_with(&format!("corral-{pid}-"))
                })
                .collect();
            if left.is_empty() {
                break;
            }
            assert!(Instant::now() < deadline, "cgroups left: {left:?}");
            std::thread::sleep(ms(10));
        }
    }
    // The Watch kills whatever is left (the escapers of the weak tiers).
}

/// The strong tiers (cgroup, PID namespace): the whole tree dies with
/// corral, escapers too (no grace: SIGKILL at once).
fn sigkill_corral_mid_run(tier: &str) {
    sigkill_corral(tier, &[], &ALL);
}

/// The process-group and subreaper tiers: the keeper kills the root's
/// process group, and every process that carries the tree's cookie
/// (`CORRAL_TREE`): escapers that left the group (setsid, double fork)
/// die too.
fn sigkill_corral_weak_tier(tier: &str) {
    sigkill_corral(tier, &[], &ALL);
}

#[test]
fn sigkill_of_corral_kills_the_process_group_tree() {
    sigkill_corral_weak_tier("process-group");
}

#[test]
fn sigkill_of_corral_kills_the_subreaper_tree_escapers_included() {
    sigkill_corral_weak_tier("subreaper");
}

/// `corral run` (auto) as `nobody`, from a root test run: what every
/// unprivileged user gets (the subreaper tier, the CLI being a child
/// subreaper). SIGKILL corral: the whole tree dies, escapers included.
#[corral_testkit::needs(root)]
#[test]
fn sigkill_of_corral_auto_as_nobody_kills_the_tree_escapers_included() {
    let s = Scratch::new();
    // The helpers (run as nobody) write their pid files here.
    std::fs::set_permissions(s.dir(), std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let w = Watch::new(&s);
    let script = tree_script();
    let mut c = std::process::Command::new("setpriv");
    c.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--",
        BIN,
    ])
    .args(["run", "-t", "60", "--", "sh", "-c", &script])
    .envs(s.env())
    .current_dir(s.dir())
    .stdin(std::process::Stdio::null());
    let mut r = start(c, Sink::Null, Sink::Null);
    for n in ALL {
        assert!(w.pid(n, 10 * SEC).is_some(), "helper {n} never started");
    }
    // Unprivileged: not a cgroup (none is writable by nobody here).
    let root = w.pid("root", SEC).unwrap();
    let cg = std::fs::read_to_string(format!("/proc/{root}/cgroup")).unwrap_or_default();
    let env = std::fs::read(format!("/proc/{root}/environ")).unwrap_or_default();
    assert!(
        env.split(|&b| b == 0)
            .any(|kv| kv.starts_with(b"CORRAL_TREE=")),
        "auto as nobody is the subreaper tier (cookie): {cg}"
    );
    std::thread::sleep(ms(50));
    r.child.kill().unwrap();
    let t = Instant::now();
    r.child.wait().unwrap();
    for n in ALL {
        let left = (SEC + ms(200)).saturating_sub(t.elapsed());
        assert!(
            w.wait_dead(n, left),
            "auto as nobody: {n} survived corral's death"
        );
    }
}

#[corral_testkit::needs(cgroup)]
#[test]
fn sigkill_of_corral_kills_the_cgroup_tree() {
    sigkill_corral_mid_run("cgroup");
}

#[corral_testkit::needs(pidns)]
#[test]
fn sigkill_of_corral_kills_the_pid_namespace_tree() {
    sigkill_corral_mid_run("pid-namespace");
}

// ---------------------------------------------------------------------------
// The farewell: when corral dies, the tree gets the run's first signal, and
// SIGKILL only after the run's grace (GNU `timeout` 9.9 gives its command
// its `-s` signal when it is killed itself: coreutils' timeout-group.sh).
// ---------------------------------------------------------------------------

/// A helper `name` that traps TERM: it touches `NAME.term` and exits (its
/// `sleep` child dies of the TERM too); it touches `NAME.armed` once its
/// trap is set.
fn trapper(name: &str) -> String {
    format!(
        r#""$H" {name} sh -c 'trap "touch \"$CORRAL_TEST_DIR/{name}.term\"; exit 0" TERM; touch "$CORRAL_TEST_DIR/{name}.armed"; sleep 30 & wait' "#
    )
}

/// What corral's death must do to the tree.
#[derive(Clone, Copy, Debug)]
enum Farewell {
    /// `-s TERM -k GRACE`: TERM first (the trappers leave their mark and
    /// exit), the TERM ignorer SIGKILLed GRACE later.
    Graceful(Duration),
    /// `-s 0 -k GRACE`: nothing first, SIGKILL GRACE later.
    Silent(Duration),
    /// `-t` alone: SIGKILL at once (no TERM: no mark).
    AtOnce,
}

/// SIGKILLs `corral run --containment TIER -t 60` (with the farewell's
/// options) once its tree runs: a root, a TERM trapper in the root's group,
/// a `setsid` TERM trapper (an escaper), and a TERM ignorer. Then checks
/// the farewell: who got TERM, who was alive when, and that every process
/// of the tree is gone within the bound (in the cgroup tier, the run's
/// cgroup too).
fn farewell(tier: &str, how: Farewell) {
    let s = Scratch::new();
    if tier == "pid-namespace" {
        s.namespaced();
    }
    let w = Watch::new(&s);
    let script = format!(
        r#"{ROOT}{} & setsid {} >/dev/null 2>&1 & {IGN}{}{}{} sleep 30"#,
        trapper("trap"),
        trapper("esc"),
        corral_testkit::started("trap"),
        corral_testkit::started("esc"),
        wait_for("ign"),
    );
    let mut args: Vec<String> = ["run", "--containment", tier, "-t", "60"]
        .map(String::from)
        .to_vec();
    let g = match how {
        Farewell::Graceful(g) => {
            args.extend([
                "-s".into(),
                "TERM".into(),
                "-k".into(),
                format!("{}ms", g.as_millis()),
            ]);
            g
        }
        Farewell::Silent(g) => {
            args.extend([
                "-s".into(),
                "0".into(),
                "-k".into(),
                format!("{}ms", g.as_millis()),
            ]);
            g
        }
        Farewell::AtOnce => Duration::ZERO,
    };
    args.extend(["--".into(), "sh".into(), "-c".into(), script]);
    let mut r = start(corral(&s, args), Sink::Null, Sink::Null);
    for n in ["root", "trap", "esc", "ign"] {
        assert!(
            w.pid(n, 10 * SEC).is_some(),
            "{tier}: helper {n} never started"
        );
    }
    for n in ["trap", "esc"] {
        assert!(
            s.wait_file(&format!("{n}.armed"), 10 * SEC),
            "{tier}: {n} never set its trap"
        );
    }
    std::thread::sleep(ms(50));
    r.child.kill().unwrap();
    let t = Instant::now();
    r.child.wait().unwrap();
    let marked = |n: &str| s.path(&format!("{n}.term")).exists();
    match how {
        Farewell::Graceful(_) => {
            // The trappers get TERM, leave their mark and exit, well
            // before the grace ends; the root dies of it.
            for n in ["trap", "esc", "root"] {
                let left = (g / 2).saturating_sub(t.elapsed());
                assert!(w.wait_dead(n, left), "{tier}: {n} did not die of the TERM");
            }
            for n in ["trap", "esc"] {
                assert!(marked(n), "{tier}: {n} got no TERM");
            }
            // The ignorer lives on until the grace ends.
            std::thread::sleep((g / 2).saturating_sub(t.elapsed()));
            assert!(
                w.is_alive("ign"),
                "{tier}: the TERM ignorer was killed before its grace ({:?})",
                t.elapsed()
            );
        }
        Farewell::Silent(_) => {
            // Nothing is sent first: all live on until the grace ends.
            std::thread::sleep((g / 2).saturating_sub(t.elapsed()));
            for n in ["root", "trap", "esc", "ign"] {
                assert!(
                    w.is_alive(n),
                    "{tier}: {n} died before the grace of -s 0 ({:?})",
                    t.elapsed()
                );
            }
        }
        Farewell::AtOnce => {}
    }
    // SIGKILL the grace later: every process is gone (1.5 s of slack).
    for n in ["root", "trap", "esc", "ign"] {
        let left = (g + ms(1500)).saturating_sub(t.elapsed());
        assert!(
            w.wait_dead(n, left),
            "{tier}: {n} survived corral's death ({how:?})"
        );
    }
    if !matches!(how, Farewell::Graceful(_)) {
        for n in ["trap", "esc"] {
            assert!(!marked(n), "{tier}: {n} got a TERM ({how:?})");
        }
    }
    // Their `sleep` children too (every process of the tree carries the
    // scratch's marker).
    s.assert_none_left();
    if tier == "cgroup" {
        let pid = r.child.id();
        let root = corral_testkit::writable_cgroup_v2().unwrap();
        let deadline = Instant::now() + 2 * SEC;
        loop {
            let left: Vec<_> = std::fs::read_dir(&root)
                .unwrap()
                .flatten()
                .filter(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .starts_with(&format!("corral-{pid}-"))
                })
                .collect();
            if left.is_empty() {
                break;
            }
            assert!(Instant::now() < deadline, "{tier}: cgroups left: {left:?}");
            std::thread::sleep(ms(10));
        }
    }
}

/// Every farewell in `tier`: TERM then SIGKILL 2 s later, nothing then
/// SIGKILL 1 s later (`-s 0`), SIGKILL at once.
fn farewells(tier: &str) {
    farewell(tier, Farewell::Graceful(2 * SEC));
    farewell(tier, Farewell::Silent(SEC));
    farewell(tier, Farewell::AtOnce);
}

#[test]
fn sigkill_of_corral_gives_the_process_group_tree_its_farewell() {
    farewells("process-group");
}

#[test]
fn sigkill_of_corral_gives_the_subreaper_tree_its_farewell() {
    farewells("subreaper");
}

#[corral_testkit::needs(cgroup)]
#[test]
fn sigkill_of_corral_gives_the_cgroup_tree_its_farewell() {
    farewells("cgroup");
}

#[corral_testkit::needs(pidns)]
#[test]
fn sigkill_of_corral_gives_the_pid_namespace_its_farewell() {
    farewells("pid-namespace");
}

/// Whether the process a pidfd holds has exited (the pidfd is readable).
fn exited(fd: &std::os::fd::OwnedFd) -> bool {
    let mut fds = [rustix::event::PollFd::new(fd, rustix::event::PollFlags::IN)];
    let zero = rustix::event::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    rustix::event::poll(&mut fds, Some(&zero)).map_or(true, |n| n > 0)
}

/// The children of `pid` (`/proc/PID/task/PID/children`).
fn children(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// The child of `pid` that is a keeper (named `corral-keeper`), if any.
fn keeper_child(pid: u32) -> Option<u32> {
    children(pid).into_iter().find(|c| {
        std::fs::read_to_string(format!("/proc/{c}/comm"))
            .is_ok_and(|n| n.trim() == "corral-keeper")
    })
}

/// The keeper SIGKILLed while a grace runs (the last resort killed, as by
/// the OOM killer): its second, a fork it made when the host died, SIGKILLs
/// the tree at once instead of leaving the TERM ignorer running. And a
/// keeper done with its farewell leaves no second behind.
fn keeper_killed_during_the_grace(tier: &str) {
    use rustix::process::{pidfd_open, pidfd_send_signal, Pid, PidfdFlags, Signal};
    let s = Scratch::new();
    let w = Watch::new(&s);
    let script = format!(r#"{ROOT}{IGN}{} sleep 30"#, wait_for("ign"));
    let args = [
        "run",
        "--containment",
        tier,
        "-t",
        "60",
        "-s",
        "TERM",
        "-k",
        "8s",
        "--",
        "sh",
        "-c",
        &script,
    ];
    let mut r = start(corral(&s, args), Sink::Null, Sink::Null);
    for n in ["root", "ign"] {
        assert!(
            w.pid(n, 10 * SEC).is_some(),
            "{tier}: helper {n} never started"
        );
    }
    let keeper = keeper_child(r.child.id()).expect("corral's keeper");
    // Pinned: the signal below reaches the keeper and no other process.
    let keeper_fd = pidfd_open(Pid::from_raw(keeper as i32).unwrap(), PidfdFlags::empty()).unwrap();
    r.child.kill().unwrap();
    r.child.wait().unwrap();
    // The farewell started: the root died of its TERM, the second stands by.
    assert!(w.wait_dead("root", 5 * SEC), "{tier}: the root got no TERM");
    let end = Instant::now() + 5 * SEC;
    let second = loop {
        if let Some(p) = keeper_child(keeper) {
            break p;
        }
        assert!(Instant::now() < end, "{tier}: the keeper started no second");
        std::thread::sleep(ms(10));
    };
    let second_fd = pidfd_open(Pid::from_raw(second as i32).unwrap(), PidfdFlags::empty()).unwrap();
    assert!(
        w.is_alive("ign"),
        "{tier}: the TERM ignorer died before its grace"
    );
    pidfd_send_signal(&keeper_fd, Signal::KILL).unwrap();
    let t = Instant::now();
    assert!(
        w.wait_dead("ign", ms(1500)),
        "{tier}: the keeper killed during the grace left the tree running"
    );
    assert!(t.elapsed() < 3 * SEC);
    s.assert_none_left();
    // The second is done too.
    let end = Instant::now() + 3 * SEC;
    while !exited(&second_fd) {
        assert!(
            Instant::now() < end,
            "{tier}: the second keeper is still there"
        );
        std::thread::sleep(ms(10));
    }

    // A farewell that ends by itself: the keeper and its second both exit.
    let s = Scratch::new();
    let w = Watch::new(&s);
    let script = format!(r#"{ROOT}{IGN}{} sleep 30"#, wait_for("ign"));
    let args = [
        "run",
        "--containment",
        tier,
        "-t",
        "60",
        "-s",
        "TERM",
        "-k",
        "500ms",
        "--",
        "sh",
        "-c",
        &script,
    ];
    let mut r = start(corral(&s, args), Sink::Null, Sink::Null);
    for n in ["root", "ign"] {
        assert!(
            w.pid(n, 10 * SEC).is_some(),
            "{tier}: helper {n} never started"
        );
    }
    let keeper = keeper_child(r.child.id()).expect("corral's keeper");
    let keeper_fd = pidfd_open(Pid::from_raw(keeper as i32).unwrap(), PidfdFlags::empty()).unwrap();
    r.child.kill().unwrap();
    r.child.wait().unwrap();
    let end = Instant::now() + 5 * SEC;
    let mut second = None;
    loop {
        second = second.or_else(|| keeper_child(keeper));
        let gone = |p: u32| {
            std::fs::read_to_string(format!("/proc/{p}/stat")).map_or(true, |st| st.contains(") Z"))
        };
        if gone(keeper) && second.is_none_or(gone) {
            break;
        }
        assert!(
            Instant::now() < end,
            "{tier}: a keeper stayed after its farewell"
        );
        std::thread::sleep(ms(10));
    }
    drop(keeper_fd);
    assert!(w.wait_dead("ign", SEC), "{tier}: the ignorer survived");
}

#[test]
fn keeper_killed_during_the_grace_process_group() {
    keeper_killed_during_the_grace("process-group");
}

#[corral_testkit::needs(cgroup)]
#[test]
fn keeper_killed_during_the_grace_cgroup() {
    keeper_killed_during_the_grace("cgroup");
}

/// A normal exit of corral keeps what keep-on-success keeps, in the tiers
/// with a keeper or a watching init.
fn normal_exit_keeps_kept_leftovers(tier: &str) {
    let ran = run_row(&Row {
        opts: opts(&["--containment", tier]),
        tree: format!(
            r#"setsid "$H" kept >/dev/null 2>&1 & {} exit 0"#,
            wait_for("kept")
        ),
        code: Some(0),
        fates: &[("kept", Alive)],
        ..Row::default()
    });
    std::thread::sleep(ms(1200));
    assert_alive(&ran.w, &["kept"]);
}

#[corral_testkit::needs(cgroup)]
#[test]
fn normal_exit_keeps_kept_leftovers_cgroup() {
    normal_exit_keeps_kept_leftovers("cgroup");
}

#[corral_testkit::needs(pidns)]
#[test]
fn normal_exit_keeps_kept_leftovers_pid_namespace() {
    normal_exit_keeps_kept_leftovers("pid-namespace");
}

#[corral_testkit::needs(pidns)]
#[test]
fn pid_namespace_tier_from_the_cli() {
    // The timeout leaves the root time to see both helpers pinned (a /proc
    // scan by the Watch) and print its pid: at 700 ms the deadline came
    // first at a load of 100 on 2 cores and nothing was printed.
    let ran = run_row(&Row {
        opts: opts(&["--containment", "pid-namespace", "-t", "2s", "-k", "200ms"]),
        tree: format!(
            r#"setsid "$H" esc >/dev/null 2>&1 & {IGN}{}{} echo $$; sleep 30"#,
            wait_for("esc"),
            wait_for("ign")
        ),
        hang: Some(8 * SEC),
        code: Some(124),
        bound: Some((2 * SEC, ms(6300))),
        fields: vec![
            ("containment", "pid_namespace".into()),
            ("outcome", "timed_out".into()),
        ],
        fates: &[("esc", Dead), ("ign", Dead)],
        ..Row::default()
    });
    assert_eq!(ran.d.out().trim(), "2");
    check_report(&ran.v);

    for (tree, argv, code) in [("exit 9", vec![], 9), ("", opts(&["/nonexistent/x"]), 127)] {
        run_row(&Row {
            opts: opts(&["--containment", "pid-namespace"]),
            tree: tree.into(),
            argv,
            code: Some(code),
            ..Row::default()
        });
    }
}

/// A signal to corral is passed on to the whole namespace (the init sends
/// it to every process), and corral exits 128+N once the tree is gone.
#[corral_testkit::needs(pidns)]
#[test]
fn sigterm_to_corral_reaches_the_namespace() {
    // esc dies of the TERM; ign only of the SIGKILL after the grace.
    run_row_with(
        &Row {
            opts: opts(&["--containment", "pid-namespace", "-k", "300ms"]),
            tree: format!(
                r#"setsid "$H" esc >/dev/null 2>&1 & {IGN}{}{} sleep 30"#,
                wait_for("esc"),
                wait_for("ign")
            ),
            code: Some(143),
            fates: &[("esc", Dead), ("ign", Dead)],
            ..Row::default()
        },
        |_| (Sink::Pipe, Sink::Pipe),
        |_, w, r| {
            for n in ["esc", "ign"] {
                assert!(w.pid(n, 10 * SEC).is_some(), "helper {n} never started");
            }
            let pid = rustix::process::Pid::from_raw(r.pid() as i32).unwrap();
            rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
        },
    );
}

/// Where the kernel refuses namespaces, the explicit choice fails with exit
/// 125 and says what to change, and `auto` is unaffected. Made here with a
/// user namespace whose `user.max_user_namespaces` is 0 and a corral
/// without capabilities in it (needs `unshare` and `setpriv`).
#[corral_testkit::needs(unshare, userns)]
#[test]
fn refused_namespace_is_exit_125_with_the_setting_to_change() {
    let script = format!(
        "echo 0 > /proc/sys/user/max_user_namespaces || exit 99; \
         setpriv --bounding-set -all --inh-caps -all {BIN} run --containment pid-namespace -- true; \
         echo explicit=$?; {BIN} run -- true; echo auto=$?"
    );
    let out = std::process::Command::new("unshare")
        .args(["-Ur", "sh", "-c", &script])
        .output()
        .expect("`#[needs(unshare)]` checked that unshare runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("explicit="),
        "cannot build a refusing user namespace: {:?} {stdout} {stderr}",
        out.status
    );
    assert!(stdout.contains("explicit=125"), "{stdout} {stderr}");
    assert!(stdout.contains("auto=0"), "{stdout} {stderr}");
    assert!(
        stderr.contains("max_user_namespaces"),
        "the message names the setting: {stderr}"
    );
}

// ---------------------------------------------------------------------------
// A keeper that cannot be started: the report says the run is not
// crash-safe; `--require-crash-safety` refuses to run it.
// ---------------------------------------------------------------------------

/// `corral run --containment TIER --report FILE -- sh -c SCRIPT`, with the
/// keeper failing to start when `fail_keeper`.
fn keeper_run(s: &Scratch, tier: &str, fail_keeper: bool, extra: &[&str], script: &str) -> Done {
    let report = report_path(s);
    let mut args = vec!["run", "--containment", tier, "--report", &report];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--", "sh", "-c", script]);
    let mut c = corral(s, args);
    if fail_keeper {
        c.env("CORRAL_TEST_FAIL_KEEPER", "1");
    }
    run(c, 10 * SEC)
}

fn keeper_failure_is_reported(tier: &str) {
    let s = Scratch::new();
    // Without the fault: crash-safe.
    keeper_run(&s, tier, false, &[], "exit 0").assert_code(0);
    let v = read_report(&s.path("report.json"));
    assert_eq!(v["crash_safe"], true, "{tier}: {v}");
    assert!(v["crash_safety_note"].is_null(), "{tier}: {v}");
    // With it: the run goes ahead (exit 0 stays exit 0), and the report
    // says that corral's death would have left the tree running.
    keeper_run(&s, tier, true, &[], "exit 0").assert_code(0);
    let v = read_report(&s.path("report.json"));
    assert_eq!(v["outcome"], "exited", "{tier}: {v}");
    assert_eq!(v["crash_safe"], false, "{tier}: {v}");
    let note = v["crash_safety_note"].as_str().unwrap_or_default();
    assert!(note.contains("keeper"), "{tier}: {v}");
}

#[test]
fn keeper_failure_is_reported_process_group() {
    keeper_failure_is_reported("process-group");
}

#[test]
fn keeper_failure_is_reported_subreaper() {
    keeper_failure_is_reported("subreaper");
}

#[corral_testkit::needs(cgroup)]
#[test]
fn keeper_failure_is_reported_cgroup() {
    keeper_failure_is_reported("cgroup");
}

/// The namespace's init, not the keeper, kills the tree when corral dies:
/// a keeper that cannot start changes nothing there.
#[corral_testkit::needs(pidns)]
#[test]
fn keeper_failure_does_not_concern_the_pid_namespace() {
    let s = Scratch::new();
    keeper_run(
        &s,
        "pid-namespace",
        true,
        &["--require-crash-safety"],
        "exit 0",
    )
    .assert_code(0);
    let v = read_report(&s.path("report.json"));
    assert_eq!(v["crash_safe"], true, "{v}");
}

/// `--require-crash-safety` without a keeper: containment_failed (125)
/// before the command runs; with one, the run is as usual.
fn crash_safety_required(tier: &str) {
    let s = Scratch::new();
    let d = keeper_run(
        &s,
        tier,
        true,
        &["--require-crash-safety"],
        r#"touch "$CORRAL_TEST_DIR/ran""#,
    );
    d.assert_code(125);
    let v = read_report(&s.path("report.json"));
    assert_eq!(v["outcome"], "containment_failed", "{tier}: {v}");
    let err = v["error"].as_str().unwrap_or_default();
    assert!(err.contains("crash safety"), "{tier}: {v}");
    assert!(!s.path("ran").exists(), "{tier}: the command ran");
    keeper_run(
        &s,
        tier,
        false,
        &["--require-crash-safety"],
        r#"touch "$CORRAL_TEST_DIR/ran""#,
    )
    .assert_code(0);
    assert!(s.path("ran").exists(), "{tier}: the command did not run");
    let v = read_report(&s.path("report.json"));
    assert_eq!(v["crash_safe"], true, "{tier}: {v}");
}

#[test]
fn crash_safety_required_process_group() {
    crash_safety_required("process-group");
}

#[corral_testkit::needs(cgroup)]
#[test]
fn crash_safety_required_cgroup() {
    crash_safety_required("cgroup");
}

// ---------------------------------------------------------------------------
// A one-shot `corral run` killed right after its spawn. The CLI starts its
// keeper in the background and never waits for it: a registration is queued
// in the keeper's socket, and honoured when the keeper runs, even if corral
// is already dead by then.
// ---------------------------------------------------------------------------

/// SIGKILLs `corral run --containment TIER` while it is held right after
/// its spawn (the test seam `CORRAL_TEST_HANDOVER_DELAY_MS`: nothing after
/// the spawn has run), once the root and its plain child are up; with
/// `keeper_late`, the keeper sleeps 600 ms before it does anything
/// (`CORRAL_TEST_KEEPER_START_DELAY_MS`), so corral dies before its keeper
/// ever ran. Both must die, within the keeper's delay and 1.2 s, and in the
/// cgroup tier the run's cgroup is removed.
fn sigkill_right_after_spawn(tier: &str, keeper_late: bool) {
    let s = Scratch::new();
    if tier == "pid-namespace" {
        s.namespaced();
    }
    let w = Watch::new(&s);
    let script = format!(r#"{ROOT}"$H" plain & {} sleep 30"#, wait_for("plain"));
    let mut c = corral(
        &s,
        [
            "run",
            "--containment",
            tier,
            "-t",
            "60",
            "--",
            "sh",
            "-c",
            &script,
        ],
    );
    c.env("CORRAL_TEST_HANDOVER_DELAY_MS", "20000");
    let grace = if keeper_late {
        c.env("CORRAL_TEST_KEEPER_START_DELAY_MS", "600");
        ms(600)
    } else {
        ms(0)
    };
    let t0 = Instant::now();
    let mut r = start(c, Sink::Null, Sink::Null);
    for n in ["root", "plain"] {
        assert!(
            w.pid(n, 10 * SEC).is_some(),
            "{tier}: helper {n} never started"
        );
    }
    if keeper_late {
        assert!(
            t0.elapsed() < ms(500),
            "{tier}: the tree took too long to start for this test to mean anything"
        );
    }
    r.child.kill().unwrap();
    let t = Instant::now();
    r.child.wait().unwrap();
    for n in ["root", "plain"] {
        let left = (grace + SEC + ms(200)).saturating_sub(t.elapsed());
        assert!(
            w.wait_dead(n, left),
            "{tier}: {n} survived corral's death right after the spawn (keeper late: {keeper_late})"
        );
    }
    if tier == "cgroup" {
        let pid = r.child.id();
        let root = corral_testkit::writable_cgroup_v2().unwrap();
        let deadline = Instant::now() + SEC;
        loop {
            let left: Vec<_> = std::fs::read_dir(&root)
                .unwrap()
                .flatten()
                .filter(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .starts_with(&format!("corral-{pid}-"))
                })
                .collect();
            if left.is_empty() {
                break;
            }
            assert!(Instant::now() < deadline, "cgroups left: {left:?}");
            std::thread::sleep(ms(10));
        }
    }
}

#[test]
fn sigkill_right_after_spawn_process_group() {
    sigkill_right_after_spawn("process-group", false);
    sigkill_right_after_spawn("process-group", true);
}

#[test]
fn sigkill_right_after_spawn_subreaper() {
    sigkill_right_after_spawn("subreaper", false);
    sigkill_right_after_spawn("subreaper", true);
}

#[corral_testkit::needs(cgroup)]
#[test]
fn sigkill_right_after_spawn_cgroup() {
    sigkill_right_after_spawn("cgroup", false);
    sigkill_right_after_spawn("cgroup", true);
}

#[corral_testkit::needs(pidns)]
#[test]
fn sigkill_right_after_spawn_pid_namespace() {
    sigkill_right_after_spawn("pid-namespace", false);
}

/// A one-shot run pools nothing: its cgroup is gone when corral returns
/// (removed by corral itself, not left to the keeper after corral's exit),
/// and the report still says the run was crash-safe, also when the keeper
/// had not run yet when the run ended.
#[corral_testkit::needs(cgroup)]
#[test]
fn a_one_shot_run_removes_its_cgroup_before_it_returns() {
    let s = Scratch::new();
    let root = corral_testkit::writable_cgroup_v2().unwrap();
    for keeper_late in [false, true] {
        let report = report_path(&s);
        let mut c = corral(
            &s,
            [
                "run",
                "--containment",
                "cgroup",
                "--report",
                &report,
                "--",
                "true",
            ],
        );
        if keeper_late {
            c.env("CORRAL_TEST_KEEPER_START_DELAY_MS", "300");
        }
        let mut child = c
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let pid = child.id();
        assert!(child.wait().unwrap().success());
        let left: Vec<_> = std::fs::read_dir(&root)
            .unwrap()
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(&format!("corral-{pid}-"))
            })
            .collect();
        assert!(left.is_empty(), "left behind by a one-shot run: {left:?}");
        let v = read_report(&s.path("report.json"));
        assert_eq!(v["crash_safe"], true, "keeper late: {keeper_late}: {v}");
    }
}
