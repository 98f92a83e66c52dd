//! Subreaper containment (Linux without a writable cgroup): corral as child
//! subreaper walks the root's descendants through /proc and kills escapers
//! that left the process group (`setsid`, double fork), reaps the orphans
//! that re-parent to it, and tells concurrent commands' orphans apart.
//!
//! `enable_subreaper` changes the whole process, so these tests live in a
//! binary of their own. They run one at a time (a lock), because each one
//! ends by checking that the test process has no zombie children left, and
//! they force the tier with `ContainmentChoice::Only(Mechanism::Subreaper)`.
#![cfg(target_os = "linux")]

use std::sync::{Mutex, MutexGuard, Once};
use std::time::{Duration, Instant};

use corral::{Command, ContainmentChoice, Error, Mechanism, Outcome, Report};
use corral_testkit::scenario::{escapers, tree, Fate::Dead, Row, Tier};
use corral_testkit::{assert_between, Scratch, Watch};

const TERM: &[corral::Signal] = &[corral::Signal::TERM];

const SEC: Duration = Duration::from_secs(1);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

static SERIAL: Mutex<()> = Mutex::new(());

/// Enables the subreaper (once) and serialises the tests.
fn setup() -> MutexGuard<'static, ()> {
    static ENABLE: Once = Once::new();
    ENABLE.call_once(|| corral::process_wide::enable_subreaper().expect("PR_SET_CHILD_SUBREAPER"));
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn subreaper() -> ContainmentChoice {
    ContainmentChoice::Only(Mechanism::Subreaper)
}

/// `sh -c SCRIPT` with the scratch's environment under the subreaper tier.
fn sr(s: &Scratch, script: &str) -> Command {
    let mut c = s.sh(script);
    c.containment(subreaper());
    c
}

/// (pid, state) of every child of this process.
fn own_children() -> Vec<(u32, u8)> {
    let me = std::process::id();
    let mut out = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{me}/task"))
        .unwrap()
        .flatten()
    {
        let kids = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
        for pid in kids
            .split_whitespace()
            .filter_map(|p| p.parse::<u32>().ok())
        {
            let stat = std::fs::read(format!("/proc/{pid}/stat")).unwrap_or_default();
            if let Some(close) = stat.iter().rposition(|&b| b == b')') {
                if let Some(&st) = stat.get(close + 2) {
                    out.push((pid, st));
                }
            }
        }
    }
    out
}

/// No child of this process is a zombie (waits up to 2 s for the keeper and
/// for children that are still dying).
#[track_caller]
fn assert_no_zombie_children() {
    let end = Instant::now() + 2 * SEC;
    loop {
        let z: Vec<u32> = own_children()
            .into_iter()
            .filter(|&(_, st)| st == b'Z')
            .map(|(p, _)| p)
            .collect();
        if z.is_empty() {
            return;
        }
        if Instant::now() >= end {
            let stats: Vec<String> = z
                .iter()
                .map(|p| std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default())
                .collect();
            // Reaped before failing: they are this process's own children,
            // and left in place they would fail every later test of this
            // binary too (one failure reported once, not six times).
            for &p in &z {
                let _ = rustix::process::waitid(
                    rustix::process::WaitId::Pid(rustix::process::Pid::from_raw(p as i32).unwrap()),
                    rustix::process::WaitIdOptions::EXITED | rustix::process::WaitIdOptions::NOHANG,
                );
            }
            panic!("zombie children of the test process: {stats:?}");
        }
        std::thread::sleep(ms(10));
    }
}

#[track_caller]
fn assert_dead(w: &Watch, names: &[&str]) {
    for n in names {
        assert!(w.pid(n, 3 * SEC).is_some(), "helper {n} never started");
        assert!(w.wait_dead(n, 2 * SEC), "helper {n} survived");
    }
}

#[track_caller]
fn assert_alive(w: &Watch, names: &[&str]) {
    for n in names {
        assert!(w.pid(n, 3 * SEC).is_some(), "helper {n} never started");
        assert!(w.is_alive(n), "helper {n} is dead, expected alive");
    }
}

fn check_subreaper(r: &Report) {
    assert_eq!(r.containment, Mechanism::Subreaper);
    assert!(r.containment_note.is_none(), "{:?}", r.containment_note);
    assert!(r.cleanup_errors.is_empty(), "{:?}", r.cleanup_errors);
}

/// Waits until helper `name` has exec'd its command and is pinned. (Its
/// pid file alone was not enough: the helper's `mv` that wrote it could
/// still be alive when the root exited, and was counted as a second kept
/// leftover, 1 of 20 root runs.)
fn wait_file(name: &str) -> String {
    corral_testkit::started(name)
}

/// Runs `row` in the subreaper tier (serialised with the other tests),
/// asserts it and the tier's report, runs `after` on the result, then
/// checks that nothing of the tree is left and that the test process has
/// no zombie child.
#[track_caller]
fn run_row(row: &Row, after: impl FnOnce(&Tier, &Report)) {
    let _g = setup();
    let t = Tier::new(Mechanism::Subreaper);
    let r = t.run(row);
    check_subreaper(&r);
    after(&t, &r);
    t.scratch.assert_none_left();
    drop(t);
    assert_no_zombie_children();
}

#[test]
fn setsid_escaper_holding_the_pipe_is_killed() {
    run_row(&escapers::setsid_pipe_holder(), |_, _| {});
}

#[test]
fn double_forked_daemon_is_killed_on_timeout() {
    // It is an orphan of corral before corral ever looks at the tree.
    run_row(&escapers::double_forked_daemon(), |_, _| {});
}

#[test]
fn nonzero_exit_kills_a_setsid_survivor() {
    run_row(&escapers::setsid_survivor_of_nonzero_exit(4), |_, _| {});
}

#[test]
fn exit_0_setsid_survivor_is_kept_and_left_alone() {
    let _g = setup();
    let t = Tier::new(Mechanism::Subreaper);
    let r = t.run(&escapers::setsid_survivor_kept());
    check_subreaper(&r);
    let w = &t.watch;
    let kept = w.pid("keep", SEC).unwrap();
    // It is now an orphan of this process (corral is the subreaper)...
    let ppid = std::fs::read_to_string(format!("/proc/{kept}/stat")).unwrap();
    let me = std::process::id().to_string();
    assert_eq!(
        ppid.rsplit_once(')').unwrap().1.split_whitespace().nth(1),
        Some(me.as_str())
    );
    std::thread::sleep(ms(200));
    assert_alive(w, &["keep"]);
    // ...and no later command takes it for one of its own.
    let s2 = Scratch::new();
    let w2 = Watch::new(&s2);
    let r2 = sr(
        &s2,
        &format!(
            r#"setsid "$H" other >/dev/null 2>&1 & {} sleep 30"#,
            wait_file("other")
        ),
    )
    .timeout(2 * SEC)
    .run()
    .unwrap();
    check_subreaper(&r2);
    assert_eq!(r2.outcome, Outcome::TimedOut);
    assert_dead(&w2, &["other"]);
    assert_alive(w, &["keep"]);
    // When it dies, the keeper reaps it: no zombie is left.
    drop(t);
    drop(w2);
    assert_no_zombie_children();
}

#[test]
fn kept_leftover_forking_after_release_leaves_no_zombie() {
    let _g = setup();
    let s = Scratch::new();
    let w = Watch::new(&s);
    // The kept process starts a child only after the run ended; when the
    // kept process dies, that child is re-parented to this process.
    let r = sr(
        &s,
        &format!(
            r#"setsid "$H" k sh -c 'until [ -e "$CORRAL_TEST_DIR/go" ]; do sleep 0.01; done; "$H" late_child & exec sleep 30' >/dev/null 2>&1 &
               {} exit 0"#,
            wait_file("k")
        ),
    )
    .run()
    .unwrap();
    check_subreaper(&r);
    assert_eq!(r.exit_code(), Some(0));
    // k, and maybe its `sleep 0.01` of the moment.
    assert!(r.leftovers.kept >= 1, "{:?}", r.leftovers);
    std::fs::write(s.path("go"), b"").unwrap();
    let late = w
        .pid("late_child", 3 * SEC)
        .expect("late_child never started");
    // The scenario is a running late child: wait until it has exec'd its
    // `sleep`. (A child mid-exec when k dies is the scenario of
    // `late_orphan_mid_exec_is_adopted_and_reaped`.)
    let end = Instant::now() + 5 * SEC;
    while std::fs::read_to_string(format!("/proc/{late}/comm")).is_ok_and(|c| c.trim() != "sleep") {
        assert!(Instant::now() < end, "late_child never became sleep");
        std::thread::sleep(ms(2));
    }
    w.signal("k", rustix::process::Signal::KILL);
    assert!(w.wait_dead("k", 2 * SEC));
    std::thread::sleep(ms(100));
    assert_alive(&w, &["late_child"]);
    // Both die (the Watch kills the child): the keeper reaps them.
    drop(w);
    assert_no_zombie_children();
}

/// A session of its own that starts a new helper every 10 ms.
const FORKER: &str = r#"setsid "$H" forker sh -c 'i=0; while :; do i=$((i+1)); "$H" f$i & sleep 0.01; done' >/dev/null 2>&1 &
           sleep 30"#;

/// Every helper the watch saw is dead.
#[track_caller]
fn all_seen_dead(t: &Tier) {
    let names = t.watch.names();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    assert_dead(&t.watch, &names);
}

#[test]
fn forking_escaper_is_killed_until_none_is_left() {
    run_row(
        &Row {
            tree: tree(FORKER),
            timeout: Some(ms(600)),
            bound: Some((ms(600), 4 * SEC)),
            outcome: Some(Outcome::TimedOut),
            fates: &[("forker", Dead)],
            ..Row::default()
        },
        |t, _| {
            let names = t.watch.names();
            assert!(names.len() > 5, "the forker barely ran: {names:?}");
            all_seen_dead(t);
        },
    );
}

#[test]
fn forking_escaper_children_found_during_the_grace_get_the_first_signal() {
    // Every process of the escaper's session dies on SIGTERM; the ones it
    // forked just before its death arrive as orphans during the grace.
    run_row(
        &Row {
            tree: tree(FORKER),
            timeout: Some(ms(500)),
            grace: Some(3 * SEC),
            bound: Some((ms(500), ms(2500))),
            outcome: Some(Outcome::TimedOut),
            signals: Some(TERM.into()),
            fates: &[("forker", Dead)],
            ..Row::default()
        },
        |t, _| all_seen_dead(t),
    );
}

#[test]
fn grace_reaches_a_setsid_escaper_before_the_kill() {
    // The escaper reports SIGTERM by writing a file, then exits. Everything
    // left at once on SIGTERM: no SIGKILL was needed (the signals sent say
    // so); the time only bounds the return, with slack for a loaded machine
    // (2.8 s has been seen at a load of 24 on 2 cores).
    run_row(
        &Row {
            tree: tree(
                r#"setsid "$H" term sh -c 'trap "touch \"$CORRAL_TEST_DIR/got-term\"; exit 0" TERM; touch "$CORRAL_TEST_DIR/ready"; while :; do sleep 0.01; done' >/dev/null 2>&1 &
           until [ -e "$CORRAL_TEST_DIR/ready" ]; do sleep 0.01; done; sleep 30"#,
            ),
            timeout: Some(ms(1000)),
            grace: Some(2 * SEC),
            bound: Some((ms(1000), 8 * SEC)),
            outcome: Some(Outcome::TimedOut),
            signals: Some(TERM.into()),
            fates: &[("term", Dead)],
            ..Row::default()
        },
        |t, _| {
            assert!(
                t.scratch.path("got-term").exists(),
                "SIGTERM never reached the escaper"
            );
            assert!(
                t.scratch.path("ready").exists(),
                "the escaper was not ready in time"
            );
        },
    );
}

#[test]
fn concurrent_commands_kill_only_their_own_escapers() {
    let _g = setup();
    let s = Scratch::new();
    let w = Watch::new(&s);
    // Each tree has a setsid child (an orphan once the root dies) and a
    // double-forked daemon (an orphan of corral at once).
    let script = |p: &str| {
        format!(
            r#"setsid "$H" {p}_esc >/dev/null 2>&1 &
               ( setsid sh -c '"$H" {p}_daemon >/dev/null 2>&1 &' & )
               {} {} sleep 30"#,
            wait_file(&format!("{p}_esc")),
            wait_file(&format!("{p}_daemon"))
        )
    };
    let t = Instant::now();
    let a = sr(&s, &script("a")).timeout(ms(600)).spawn().unwrap();
    let b = sr(&s, &script("b")).timeout(ms(2500)).spawn().unwrap();
    let hb = std::thread::spawn(move || b.wait());
    let ra = a.wait();
    check_subreaper(&ra);
    assert_eq!(ra.outcome, Outcome::TimedOut);
    assert!(t.elapsed() < ms(2000), "A took {:?}", t.elapsed());
    assert_dead(&w, &["a_esc", "a_daemon"]);
    // B is still running: its escapers are untouched by A's kill loop.
    assert!(t.elapsed() < ms(2400), "too slow to check B's tree");
    assert_alive(&w, &["b_esc", "b_daemon"]);
    let rb = hb.join().unwrap();
    check_subreaper(&rb);
    assert_eq!(rb.outcome, Outcome::TimedOut);
    assert_between(t.elapsed(), ms(2500), ms(2500) + 2 * SEC);
    assert_dead(&w, &["b_esc", "b_daemon"]);
    s.assert_none_left();
    drop(w);
    assert_no_zombie_children();
}

#[test]
fn unknown_orphan_is_left_alone() {
    // An orphan that cleared its environment (no tree cookie), left the
    // group and was never seen below the root cannot be told from a child
    // the host started itself: corral neither signals nor reaps it.
    let _g = setup();
    let s = Scratch::new();
    let w = Watch::new(&s);
    let r = sr(
        &s,
        r#"( env -i PATH="$PATH" CORRAL_TEST_DIR="$CORRAL_TEST_DIR" CORRAL_TEST_MARK="$CORRAL_TEST_MARK" setsid "$H" anon >/dev/null 2>&1 & )
           until [ -e "$CORRAL_TEST_DIR/anon.pid" ] && [ "$(cat /proc/$(cat "$CORRAL_TEST_DIR/anon.pid")/comm 2>/dev/null)" != H ] && [ -e "$CORRAL_TEST_DIR/anon.pinned" -o ! -e "$CORRAL_TEST_DIR/.watched" ]; do sleep 0.01; done; sleep 30"#,
    )
    .timeout(ms(500))
    .run()
    .unwrap();
    check_subreaper(&r);
    assert_eq!(r.outcome, Outcome::TimedOut);
    let anon = w.pid("anon", SEC).unwrap();
    std::thread::sleep(ms(100));
    assert_alive(&w, &["anon"]);
    // It is ours to reap (the test stands in for the host here).
    drop(w);
    let pid = rustix::process::Pid::from_raw(anon as i32).unwrap();
    rustix::process::waitid(
        rustix::process::WaitId::Pid(pid),
        rustix::process::WaitIdOptions::EXITED,
    )
    .unwrap();
    assert_no_zombie_children();
}

#[test]
fn the_report_and_the_trace_name_the_tier() {
    let _g = setup();
    let ops: std::sync::Arc<Mutex<Vec<corral::OsOp>>> = Default::default();
    let o = ops.clone();
    let r = Command::new("/bin/sh")
        .args(["-c", "sleep 30"])
        .containment(subreaper())
        .timeout(ms(100))
        .trace_ops(move |op: &corral::OsOp| o.lock().unwrap().push(op.clone()))
        .run()
        .unwrap();
    check_subreaper(&r);
    assert_eq!(r.outcome, Outcome::TimedOut);
    let ops = ops.lock().unwrap();
    let released = ops
        .iter()
        .filter(|op| {
            matches!(
                op,
                corral::OsOp::Released {
                    via: Mechanism::Subreaper
                }
            )
        })
        .count();
    assert_eq!(released, 1, "{ops:?}");
    // No signal after the reap.
    let reaped = ops
        .iter()
        .position(|op| matches!(op, corral::OsOp::Reaped { .. }))
        .unwrap();
    assert!(
        !ops[reaped..]
            .iter()
            .any(|op| matches!(op, corral::OsOp::SignalTree { .. })),
        "{ops:?}"
    );
    assert!(ops.iter().any(|op| matches!(
        op,
        corral::OsOp::SignalTree {
            via: Mechanism::Subreaper,
            ..
        }
    )));
    assert_no_zombie_children();
}

#[test]
fn auto_and_only_without_and_with_the_subreaper() {
    // In a child process: the subreaper must not be enabled there yet, and
    // detection is pointed at a read-only fake cgroup hierarchy.
    let _g = setup();
    let s = Scratch::new();
    let before: Vec<u32> = own_children().into_iter().map(|(p, _)| p).collect();
    let text =
        corral_testkit::run_ignored_test_in_child("selection_child", &s.fake_readonly_cgroup_env());
    assert!(text.contains("SELECTION-OK"), "{text}");
    // The child's crash-safety keeper outlives it by a moment; this process
    // is a subreaper, so it inherits the keeper (re-parented while the child
    // exited, before the child could be waited for) and must reap it, as
    // any subreaper reaps the orphans of programs it starts itself. Each
    // inherited process is waited for until it has exited and is reaped: a
    // fixed look (say 2 s) would leave a late keeper as a zombie nobody
    // reaps, and the zombie check of every later test of this binary would
    // fail on it.
    let inherited: Vec<u32> = own_children()
        .into_iter()
        .map(|(p, _)| p)
        .filter(|p| !before.contains(p))
        .collect();
    for pid in inherited {
        let child = rustix::process::Pid::from_raw(pid as i32).unwrap();
        let end = Instant::now() + 20 * SEC;
        loop {
            match rustix::process::waitid(
                rustix::process::WaitId::Pid(child),
                rustix::process::WaitIdOptions::EXITED | rustix::process::WaitIdOptions::NOHANG,
            ) {
                Ok(Some(_)) => break,
                Ok(None) => {}
                // Reaped by another thread of this process (corral's keeper
                // of leftovers adopts some late orphans): gone all the same.
                Err(rustix::io::Errno::CHILD) => break,
                Err(e) => panic!("waitid on inherited process {pid}: {e}"),
            }
            assert!(
                Instant::now() < end,
                "inherited process {pid} still alive 20 s after the child exited: {}",
                std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default()
            );
            std::thread::sleep(ms(10));
        }
    }
}

/// Runs only inside `auto_and_only_without_and_with_the_subreaper`.
#[test]
#[ignore = "helper of auto_and_only_without_and_with_the_subreaper"]
fn selection_child() {
    assert!(std::env::var_os("CORRAL_MOUNTINFO").is_some());
    match Command::new("/bin/true").containment(subreaper()).run() {
        Err(Error::Containment {
            mechanism, reason, ..
        }) => {
            assert_eq!(mechanism, Mechanism::Subreaper);
            assert!(reason.contains("enable_subreaper"), "{reason}");
        }
        other => panic!("expected a containment error, got {other:?}"),
    }
    let r = Command::new("/bin/true").run().unwrap();
    assert_eq!(r.containment, Mechanism::ProcessGroup);
    let note = r.containment_note.unwrap();
    assert!(note.contains("subreaper not enabled"), "{note}");

    corral::process_wide::enable_subreaper().unwrap();
    let r = Command::new("/bin/true").run().unwrap();
    assert_eq!(r.containment, Mechanism::Subreaper);
    let note = r.containment_note.unwrap();
    assert!(note.contains("cgroup unavailable"), "{note}");
    let r = Command::new("/bin/true")
        .containment(subreaper())
        .run()
        .unwrap();
    assert_eq!(r.containment, Mechanism::Subreaper);
    // Limits still need a cgroup.
    match Command::new("/bin/true")
        .containment(subreaper())
        .pids_max(10)
        .run()
    {
        Err(Error::Containment { .. }) => {}
        other => panic!("a limit that cannot be had must be an error, got {other:?}"),
    }
    println!("SELECTION-OK");
}

fn orphans_reaped_never_the_hosts_child(tier: Mechanism) {
    // The host's own child exits and stays a zombie until the host waits
    // for it; meanwhile a run leaves short-lived orphans in every tier. The
    // orphans are reaped while the run goes on, the host's child is not.
    let _g = setup();
    let mut host_child = std::process::Command::new("sh")
        .args(["-c", "exit 7"])
        .spawn()
        .unwrap();
    let hc = host_child.id();
    let end = Instant::now() + 5 * SEC;
    while !own_children().contains(&(hc, b'Z')) {
        assert!(Instant::now() < end, "the host's child never exited");
        std::thread::sleep(ms(5));
    }
    let s = Scratch::new();
    let w = Watch::new(&s);
    let mut c = s.sh(
        r#"echo $$ > "$CORRAL_TEST_DIR/root.pid"; for i in $(seq 100); do (sleep 0.01 &); done; touch "$CORRAL_TEST_DIR/burst"; sleep 1"#,
    );
    c.containment(ContainmentChoice::Only(tier));
    let t = Instant::now();
    let running = c.spawn().unwrap();
    let end = Instant::now() + 10 * SEC;
    while !s.path("burst").exists() {
        assert!(Instant::now() < end, "{tier}: the burst never ended");
        std::thread::sleep(ms(5));
    }
    std::thread::sleep(ms(300));
    let zombies: Vec<u32> = own_children()
        .into_iter()
        .filter(|&(p, st)| st == b'Z' && p != hc)
        .map(|(p, _)| p)
        .collect();
    assert!(w.is_alive("root"), "{tier}: the root ended early");
    assert!(
        zombies.is_empty(),
        "{tier}: orphans not reaped during the run: {zombies:?}"
    );
    assert!(
        own_children().contains(&(hc, b'Z')),
        "{tier}: the host's child was reaped by corral"
    );
    let r = running.wait();
    assert_between(t.elapsed(), SEC, 10 * SEC);
    assert_eq!(r.containment, tier);
    assert_eq!(r.outcome, Outcome::Exited(0), "{tier}: {r:?}");
    assert!(
        r.cleanup_errors.is_empty(),
        "{tier}: {:?}",
        r.cleanup_errors
    );
    assert_dead(&w, &["root"]);
    s.assert_none_left();
    let st = host_child
        .wait()
        .expect("the host's child is still the host's");
    assert_eq!(st.code(), Some(7));
    assert_no_zombie_children();
}

#[test]
fn orphans_are_reaped_during_the_run_but_never_a_child_of_the_host_process_group() {
    orphans_reaped_never_the_hosts_child(Mechanism::ProcessGroup);
}

#[test]
fn orphans_are_reaped_during_the_run_but_never_a_child_of_the_host_subreaper() {
    orphans_reaped_never_the_hosts_child(Mechanism::Subreaper);
}

#[corral_testkit::needs(cgroup)]
#[test]
fn orphans_are_reaped_during_the_run_but_never_a_child_of_the_host_cgroup() {
    orphans_reaped_never_the_hosts_child(Mechanism::Cgroup);
}

fn concurrent_runs_leaving_orphans(tier: Mechanism) {
    // Many runs at once, each leaving orphans that die while its root is a
    // zombie waiting for its release: the orphan reaper takes the orphans
    // and never a root, so every run still reads its own root's exit.
    let _g = setup();
    let s = std::sync::Arc::new(Scratch::new());
    let t = Instant::now();
    let threads: Vec<_> = (0..8)
        .map(|i| {
            let s = s.clone();
            std::thread::spawn(move || {
                for j in 0..5 {
                    let code = 3 + (i * 5 + j) % 100;
                    let r = s
                        .sh(&format!(
                            "for k in 1 2 3 4; do (true &); done; (sleep 0.05 &); exit {code}"
                        ))
                        .containment(ContainmentChoice::Only(tier))
                        .run()
                        .unwrap();
                    assert_eq!(r.containment, tier);
                    assert_eq!(r.outcome, Outcome::Exited(code), "{tier}: {r:?}");
                    assert!(
                        r.cleanup_errors.is_empty(),
                        "{tier}: {:?}",
                        r.cleanup_errors
                    );
                }
            })
        })
        .collect();
    for th in threads {
        th.join().unwrap();
    }
    assert_between(t.elapsed(), Duration::ZERO, 30 * SEC);
    s.assert_none_left();
    assert_no_zombie_children();
}

#[test]
fn concurrent_runs_leaving_orphans_keep_their_roots_until_release_process_group() {
    concurrent_runs_leaving_orphans(Mechanism::ProcessGroup);
}

#[test]
fn concurrent_runs_leaving_orphans_keep_their_roots_until_release_subreaper() {
    concurrent_runs_leaving_orphans(Mechanism::Subreaper);
}

#[corral_testkit::needs(cgroup)]
#[test]
fn concurrent_runs_leaving_orphans_keep_their_roots_until_release_cgroup() {
    concurrent_runs_leaving_orphans(Mechanism::Cgroup);
}

/// A late orphan whose environment reads empty when its kept parent dies
/// (as a process's does for a moment while it is in `execve`) is still
/// recognised by its cookie once it can be read, adopted and reaped: no
/// zombie is left until this process exits. (A single look when the kept
/// process exits would miss a child mid-exec.)
/// The helper empties what `/proc/PID/environ` shows with `prctl(PR_SET_MM)`
/// (root only) and restores it 300 ms after it was re-parented.
#[corral_testkit::needs(root)]
#[test]
fn late_orphan_mid_exec_is_adopted_and_reaped() {
    let _g = setup();
    let s = Scratch::new();
    let w = Watch::new(&s);
    let mut cmd = sr(
        &s,
        &format!(
            r#"setsid "$H" k sh -c 'until [ -e "$CORRAL_TEST_DIR/go" ]; do sleep 0.01; done; "$H" late "$BE" late & until [ -e "$CORRAL_TEST_DIR/late.blank" ] || [ -e "$CORRAL_TEST_DIR/late.failed" ]; do sleep 0.01; done; exit 0' >/dev/null 2>&1 &
               {} exit 0"#,
            wait_file("k")
        ),
    );
    cmd.env("BE", corral_testkit::blank_environ());
    let r = cmd.run().unwrap();
    check_subreaper(&r);
    assert_eq!(r.exit_code(), Some(0));
    assert!(r.leftovers.kept >= 1, "{:?}", r.leftovers);
    std::fs::write(s.path("go"), b"").unwrap();
    let late = w.pid("late", 5 * SEC).expect("late never started");
    // k exits once `late` reads empty; `late` is re-parented to this
    // process, restores its environment 300 ms later and exits 1 s after.
    let end = Instant::now() + 10 * SEC;
    while !s.path("late.restored").exists() {
        if let Ok(why) = std::fs::read_to_string(s.path("late.failed")) {
            panic!("the helper could not empty its environment: {why}");
        }
        assert!(Instant::now() < end, "late never restored its environment");
        std::thread::sleep(ms(5));
    }
    assert!(w.wait_dead("k", 2 * SEC), "k did not exit");
    let parent = std::fs::read_to_string(format!("/proc/{late}/stat"))
        .ok()
        .and_then(|st| {
            let rest = st[st.rfind(')')? + 1..].to_owned();
            rest.split_whitespace().nth(1)?.parse::<u32>().ok()
        });
    assert_eq!(
        parent,
        Some(std::process::id()),
        "late was not re-parented here"
    );
    assert!(w.wait_dead("late", 5 * SEC), "late did not exit");
    drop(w);
    assert_no_zombie_children();
}
