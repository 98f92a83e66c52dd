//! Adversarial runs against the cgroup pool: a command (or someone outside
//! corral) leaves its pooled cgroup in a state that a fresh cgroup would not
//! have. The next run borrowing from the pool must behave exactly as in a
//! fresh cgroup (its own limits, its own accounting, nothing frozen or
//! killed at birth), or the cgroup must be retired.
#![cfg(target_os = "linux")]

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use corral::{Command, ContainmentChoice, LeftoverPolicy, Mechanism, Outcome};
use corral_testkit::{ready, Scratch, Watch};

/// The pool is per process: tests of this binary take turns.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn root() -> PathBuf {
    corral_testkit::writable_cgroup_v2()
        .expect("no writable cgroup v2 hierarchy here: mark the test #[needs(cgroup)]")
}

/// `sh -c SCRIPT` in the cgroup tier; `$D` is the run's own cgroup directory.
fn cg(script: &str) -> Command {
    let dir = root();
    let mut c = Command::new("/bin/sh");
    c.arg("-c")
        .arg(format!(
            "D={}/$(sed -n 's|^0::.*/||p' /proc/self/cgroup); echo \"cg=$D\"; {script}",
            dir.display()
        ))
        .containment(ContainmentChoice::Only(Mechanism::Cgroup))
        .timeout(Duration::from_secs(20));
    c
}

/// Runs `c`, asserts a clean exit 0 within 5 s, returns (cgroup dir, stdout).
fn run_ok(c: &mut Command) -> (String, String) {
    let t = Instant::now();
    let r = c.run().unwrap();
    let out = String::from_utf8_lossy(&r.stdout.bytes()).into_owned();
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "took {:?}: {r:?}",
        t.elapsed()
    );
    assert_eq!(
        r.exit_code(),
        Some(0),
        "{r:?}\nstderr: {}",
        r.stderr.text_lossy()
    );
    let dir = out
        .lines()
        .find_map(|l| l.strip_prefix("cg="))
        .unwrap_or_else(|| panic!("no cgroup in {out:?}"))
        .to_owned();
    assert!(dir.contains("/corral-"), "{dir}");
    (dir, out)
}

/// The interface files a command (as root, or the owner of a delegated
/// subtree) can write in its own cgroup with no controller enabled: the
/// descendant limits and pressure accounting. A fresh cgroup has `max`,
/// `max` and `1`; the next run must see the same, and be able to make a
/// nested cgroup as it could in a fresh one.
#[corral_testkit::needs(cgroup, root)]
#[test]
fn limits_a_command_sets_on_its_own_cgroup_never_reach_the_next_run() {
    let _g = serial();
    corral::process_wide::release_cgroup_pool();
    let show = "cat $D/cgroup.max.descendants $D/cgroup.max.depth $D/cgroup.pressure 2>/dev/null; \
                mkdir $D/nested && rmdir $D/nested && echo nested-ok";
    // What a fresh cgroup shows.
    let (_, fresh) = run_ok(&mut cg(show));
    assert!(fresh.contains("nested-ok"), "{fresh}");
    corral::process_wide::release_cgroup_pool();
    // A command limits its own cgroup and exits 0 (its cgroup is empty and
    // goes back to the pool).
    let (a, _) = run_ok(&mut cg("echo 0 > $D/cgroup.max.descendants && \
         echo 0 > $D/cgroup.max.depth && \
         { echo 0 > $D/cgroup.pressure 2>/dev/null; true; }"));
    for _ in 0..3 {
        let (b, next) = run_ok(&mut cg(show));
        let strip = |s: &str| {
            s.lines()
                .filter(|l| !l.starts_with("cg="))
                .collect::<Vec<_>>()
                .join("\n")
        };
        assert_eq!(
            strip(&next),
            strip(&fresh),
            "the run in {b} (the limited one was {a}) does not see a fresh cgroup"
        );
    }
    corral::process_wide::release_cgroup_pool();
}

/// Someone outside the run freezes a pooled cgroup while it waits: the next
/// run must not be born frozen (it exits by itself, at once).
#[corral_testkit::needs(cgroup)]
#[test]
fn a_pooled_cgroup_frozen_from_outside_is_never_borrowed() {
    let _g = serial();
    corral::process_wide::release_cgroup_pool();
    let (a, _) = run_ok(&mut cg("true"));
    std::fs::write(PathBuf::from(&a).join("cgroup.freeze"), "1").unwrap();
    for _ in 0..3 {
        let (b, _) = run_ok(&mut cg("true"));
        assert_ne!(a, b, "a frozen cgroup was borrowed");
    }
    corral::process_wide::release_cgroup_pool();
    assert!(!PathBuf::from(&a).exists(), "{a} was left behind");
}

/// Frozen and thawed again before the next borrow: harmless, whatever the
/// pool decides; the next run behaves as in a fresh cgroup.
#[corral_testkit::needs(cgroup)]
#[test]
fn a_pooled_cgroup_frozen_and_thawed_from_outside_runs_the_next_command() {
    let _g = serial();
    corral::process_wide::release_cgroup_pool();
    let (a, _) = run_ok(&mut cg("true"));
    std::fs::write(PathBuf::from(&a).join("cgroup.freeze"), "1").unwrap();
    std::fs::write(PathBuf::from(&a).join("cgroup.freeze"), "0").unwrap();
    for _ in 0..3 {
        let (_, out) = run_ok(&mut cg("cat $D/cgroup.freeze; echo alive"));
        assert!(out.contains("0\nalive"), "{out}");
    }
    corral::process_wide::release_cgroup_pool();
}

/// A command makes a nested cgroup, freezes it and exits: the nested cgroup
/// is empty, so the run's cgroup is not populated. It must not be pooled
/// (or reach the next run), and nothing of it may be left.
#[corral_testkit::needs(cgroup, root)]
#[test]
fn a_nested_frozen_cgroup_left_by_a_command_is_removed_not_pooled() {
    let _g = serial();
    corral::process_wide::release_cgroup_pool();
    let (a, _) = run_ok(&mut cg("mkdir $D/inner && echo 1 > $D/inner/cgroup.freeze"));
    for _ in 0..3 {
        let (b, out) = run_ok(&mut cg("ls -d $D/inner 2>/dev/null; echo alive"));
        assert!(out.contains("alive"), "{out}");
        assert!(
            !out.contains("/inner"),
            "{b} still holds the nested cgroup of {a}"
        );
    }
    assert!(!PathBuf::from(&a).join("inner").exists());
    corral::process_wide::release_cgroup_pool();
    assert!(!PathBuf::from(&a).exists(), "{a} was left behind");
}

/// A command moves one of its members into a sibling cgroup of corral's
/// (another pooled cgroup of this process) and exits: the cgroup the member
/// entered is populated and must never be borrowed while it is; the member
/// itself is part of the tree (same process group) and the run ends with it
/// killed under `LeftoverPolicy::Kill`.
#[corral_testkit::needs(cgroup, root)]
#[test]
fn a_member_moved_into_a_pooled_sibling_never_shares_a_run() {
    let _g = serial();
    corral::process_wide::release_cgroup_pool();
    // Two pooled cgroups: two runs at once.
    let t1 = std::thread::spawn(|| run_ok(&mut cg("sleep 0.3")).0);
    let t2 = std::thread::spawn(|| run_ok(&mut cg("sleep 0.3")).0);
    let (p1, p2) = (t1.join().unwrap(), t2.join().unwrap());
    assert_ne!(p1, p2);
    let s = Scratch::new();
    let w = Watch::new(&s);
    // The member moves itself into one of the pooled cgroups (whichever
    // is not the run's own).
    let mut c = cg(&format!(
        "\"$H\" mover >/dev/null 2>&1 & {r} pid=$(cat $CORRAL_TEST_DIR/mover.pid); \
         if [ \"$D\" = {p1} ]; then T={p2}; else T={p1}; fi; \
         echo $pid > $T/cgroup.procs && echo moved-to=$T",
        r = ready("mover"),
    ));
    c.envs(s.env()).leftovers(LeftoverPolicy::Kill);
    let (own, out) = run_ok(&mut c);
    let target = out
        .lines()
        .find_map(|l| l.strip_prefix("moved-to="))
        .unwrap_or_else(|| panic!("the member did not move: {out}"))
        .to_owned();
    assert_ne!(own, target);
    assert!(
        w.wait_dead("mover", Duration::from_secs(2)),
        "the member that moved out survived the run"
    );
    // Whatever is borrowed next is empty: a fresh command sees only itself.
    for _ in 0..4 {
        let (b, out) = run_ok(&mut cg("cat $D/cgroup.procs | wc -l"));
        let n: usize = out
            .lines()
            .last()
            .and_then(|l| l.trim().parse().ok())
            .unwrap_or(0);
        // The shell and `cat` (and `wc`, a pipe) at most: nothing foreign.
        assert!(n <= 3, "{b} held {n} processes: {out}");
    }
    corral::process_wide::release_cgroup_pool();
    s.assert_none_left();
}

/// A run that leaves a stopped (SIGSTOP) member: the leftovers policy kills
/// it (the member ignores the SIGHUP the kernel sends a stopped member of a
/// group orphaned by the root's exit, so it is there for corral to find), the cgroup is not pooled (it was killed), and the next run is born
/// alive and exits by itself.
#[corral_testkit::needs(cgroup)]
#[test]
fn a_stopped_member_left_at_exit_is_killed_and_the_next_run_is_unharmed() {
    let _g = serial();
    corral::process_wide::release_cgroup_pool();
    let s = Scratch::new();
    let w = Watch::new(&s);
    let mut c = cg(&format!(
        "\"$H\" stopped sh -c 'trap \"\" HUP; exec sleep 30' >/dev/null 2>&1 & {r} kill -STOP $(cat $CORRAL_TEST_DIR/stopped.pid)",
        r = ready("stopped")
    ));
    c.envs(s.env()).leftovers(LeftoverPolicy::Kill);
    let t = Instant::now();
    let r = c.run().unwrap();
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert!(matches!(r.outcome, Outcome::Exited(0)), "{r:?}");
    assert!(r.leftovers.killed >= 1, "{r:?}");
    assert!(w.wait_dead("stopped", Duration::from_secs(2)));
    for _ in 0..3 {
        let (_, out) = run_ok(&mut cg("echo alive"));
        assert!(out.contains("alive"));
    }
    corral::process_wide::release_cgroup_pool();
    s.assert_none_left();
}

/// CPU time: a reused cgroup reports only the borrower's share, also when
/// the earlier run's CPU was used by a member that exited just before the
/// root (its time lands in the cgroup as it exits).
#[corral_testkit::needs(cgroup)]
#[test]
fn cpu_of_a_member_that_exits_last_moment_is_not_charged_to_the_next_run() {
    let _g = serial();
    corral::process_wide::release_cgroup_pool();
    let burn = "i=0; while [ $i -lt 250000 ]; do i=$((i+1)); done";
    let (a, _) = run_ok(&mut cg(&format!("( {burn} ) & ( {burn} ) & wait")));
    for _ in 0..3 {
        let r = cg("true").run().unwrap();
        let out = String::from_utf8_lossy(&r.stdout.bytes()).into_owned();
        let u = r.usage.expect("usage");
        let cpu = u.cpu_user.unwrap_or_default() + u.cpu_system.unwrap_or_default();
        assert!(
            cpu < Duration::from_millis(60),
            "run in {out} (first was cg={a}) charged {cpu:?}"
        );
    }
    corral::process_wide::release_cgroup_pool();
}

/// The same writes made through another mount of the hierarchy: a command
/// (root) that enters a cgroup namespace and mounts cgroup2 there sees its
/// own cgroup as that mount's root, a different superblock from corral's,
/// so a watch on corral's path of the cgroup does not see the write. The
/// next run must still see a fresh cgroup's limits, and be born alive after
/// a `cgroup.kill` written (once the run's cgroup went back to the pool) by
/// a process of the tree that left the cgroup.
#[corral_testkit::needs(cgroup, root, unshare)]
#[test]
fn writes_through_a_cgroup_namespace_mount_never_reach_the_next_run() {
    let _g = serial();
    corral::process_wide::release_cgroup_pool();
    let s = Scratch::new();
    let m = s.path("mnt");
    std::fs::create_dir(&m).unwrap();
    let (ready, wrote) = (s.path("ready"), s.path("wrote"));
    let check = "cat $D/cgroup.max.descendants; mkdir $D/n && rmdir $D/n && echo nested-ok";
    // A limit, written by the root's own shell through its namespace mount.
    let (a, out) = run_ok(&mut cg(&format!(
        "unshare -C -m sh -c 'mount -t cgroup2 none {m} && echo 0 > {m}/cgroup.max.descendants && \
         echo wrote=$(cat {m}/cgroup.max.descendants); umount {m}' </dev/null",
        m = m.display()
    )));
    assert!(out.contains("wrote=0"), "the limit was not written: {out}");
    for _ in 0..3 {
        let (b, next) = run_ok(&mut cg(check));
        assert!(
            next.contains("max\nnested-ok"),
            "{a} limited itself through a namespace mount; the run in {b}: {next}"
        );
    }
    corral::process_wide::release_cgroup_pool();
    // A kill: the writer enters the namespace (its root: the run's cgroup),
    // mounts, leaves the cgroup, and writes 0.3 s after the root exited.
    let (a, _) = run_ok(&mut cg(&format!(
        "unshare -C -m sh -c 'mount -t cgroup2 none {m} && echo $$ > {top}/cgroup.procs && \
         touch {ready}; sleep 0.3; echo 1 > {m}/cgroup.kill; touch {wrote}' >/dev/null 2>&1 </dev/null & \
         while [ ! -e {ready} ]; do sleep 0.01; done",
        m = m.display(),
        top = root().display(),
        ready = ready.display(),
        wrote = wrote.display(),
    )));
    let end = Instant::now() + Duration::from_secs(10);
    while !wrote.exists() {
        assert!(Instant::now() < end, "the writer never wrote");
        std::thread::sleep(Duration::from_millis(10));
    }
    for _ in 0..3 {
        let (b, next) = run_ok(&mut cg(check));
        assert!(
            next.contains("max\nnested-ok"),
            "{a} was killed through a namespace mount; the run in {b}: {next}"
        );
    }
    corral::process_wide::release_cgroup_pool();
}

/// The host's side of [`a_pooled_cgroup_outliving_its_keeper_is_not_reused_unheld`]:
/// a cgroup run (its cgroup goes to the pool, registered with the keeper),
/// then the keeper dies (killed here, as the OOM killer or an admin might),
/// then a long run that requires crash safety. Prints `SPAWNED` and waits
/// to be killed.
#[test]
#[ignore = "run by a_pooled_cgroup_outliving_its_keeper_is_not_reused_unheld"]
fn keeper_host() {
    if std::env::var_os("ADV_KEEPER_HOST").is_none() {
        return;
    }
    let (a, _) = run_ok(&mut cg("true"));
    corral_testkit::keeper::kill_keeper(corral_testkit::keeper::own_keeper().expect("no keeper"));
    println!("KEEPER-KILLED pooled={a}");
    let mut c = cg("exec \"$H\" root");
    c.require_crash_safety(true);
    let running = c.spawn().unwrap();
    println!("SPAWNED");
    std::thread::sleep(Duration::from_secs(30));
    drop(running);
}

/// A pooled cgroup stays registered with the keeper that held it when it
/// was given back. If that keeper died, the cgroup must not be handed to a
/// run as crash-safe: the host's death must still kill the tree.
#[corral_testkit::needs(cgroup)]
#[test]
fn a_pooled_cgroup_outliving_its_keeper_is_not_reused_unheld() {
    use std::io::BufRead;
    let s = Scratch::new();
    let w = Watch::new(&s);
    let mut host = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "keeper_host",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("ADV_KEEPER_HOST", "1")
        .envs(s.env())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(host.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    for l in lines.by_ref() {
        let l = l.unwrap();
        seen.push(l.clone());
        if l == "SPAWNED" {
            break;
        }
    }
    assert!(seen.iter().any(|l| l == "SPAWNED"), "host: {seen:?}");
    let root = w.pid("root", Duration::from_secs(5));
    assert!(root.is_some(), "no root: {seen:?}");
    let _ = host.kill(); // SIGKILL: the host dies with its run held
    let _ = host.wait();
    assert!(
        w.wait_dead("root", Duration::from_secs(3)),
        "the tree outlived its host (host said {seen:?})"
    );
    s.assert_none_left();
}

/// Many threads borrow and give back at once: no two runs ever share a
/// cgroup (each sees only itself and its `cat` in it), and every run exits
/// by itself.
#[corral_testkit::needs(cgroup)]
#[test]
fn concurrent_borrowers_never_share_a_cgroup() {
    let _g = serial();
    corral::process_wide::release_cgroup_pool();
    let threads: Vec<_> = (0..6)
        .map(|_| {
            std::thread::spawn(|| {
                for _ in 0..25 {
                    let (dir, out) = run_ok(&mut cg("sleep 0.01; cat $D/cgroup.procs"));
                    let pids: Vec<&str> = out.lines().filter(|l| !l.starts_with("cg=")).collect();
                    // The shell and its `cat`; never another run's.
                    assert!(pids.len() <= 2, "{dir} held {pids:?}");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    corral::process_wide::release_cgroup_pool();
}
