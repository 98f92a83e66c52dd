//! Zombie orphans nothing can attribute (subreaper tier; Linux).
//!
//! A descendant that left the tree's process group (`setsid`) and died
//! before any scan saw it alive reaches corral as a zombie: its environment
//! (and the tree cookie in it) can no longer be read, and its session and
//! group are its own. Before, nothing reaped such a zombie: it stayed a
//! zombie child of corral until corral exited, one per run, so a long-lived
//! host (a batch of thousands of runs) piled them up.
//!
//! With `corral::process_wide::reap_all_orphans()` (what the CLI declares: it starts no
//! children of its own) every zombie child that is not a run's root is
//! reaped; a root, whose unreaped zombie is its run's identity, never is.
//!
//! This binary enables the subreaper and declares that for the whole
//! process (a binary of its own), so its tests run one at a time.
#![cfg(target_os = "linux")]

use std::sync::{Mutex, MutexGuard, Once};
use std::time::{Duration, Instant};

use corral::{ContainmentChoice, Mechanism, Outcome};
use corral_testkit::Scratch;

const SEC: Duration = Duration::from_secs(1);

static SERIAL: Mutex<()> = Mutex::new(());

/// Scratch directories, made before `reap_all_orphans`: making one runs
/// `install(1)` as a child of this process and waits for it, which a
/// process that declared it starts no children of its own must not do
/// (corral may reap it first).
static SCRATCHES: Mutex<Vec<Scratch>> = Mutex::new(Vec::new());

/// Enables the subreaper and `reap_all_orphans` (once), serialises the
/// tests, and hands out a scratch directory.
fn setup() -> (MutexGuard<'static, ()>, Scratch) {
    static ENABLE: Once = Once::new();
    ENABLE.call_once(|| {
        let mut pool = SCRATCHES.lock().unwrap();
        pool.extend((0..4).map(|_| Scratch::new()));
        corral::process_wide::enable_subreaper().expect("PR_SET_CHILD_SUBREAPER");
        corral::process_wide::reap_all_orphans();
    });
    let g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let s = SCRATCHES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .pop()
        .expect("a scratch directory per test");
    (g, s)
}

/// (state, ppid) of `pid`, if it exists.
fn state_ppid(pid: u32) -> Option<(u8, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    let mut f = rest.split_whitespace();
    let state = f.next()?.bytes().next()?;
    let ppid = f.next()?.parse().ok()?;
    Some((state, ppid))
}

/// Zombie children of this process among `pids`.
fn our_zombies(pids: &[u32]) -> Vec<u32> {
    let me = std::process::id();
    pids.iter()
        .copied()
        .filter(|&p| state_ppid(p) == Some((b'Z', me)))
        .collect()
}

/// Every pid written to a `*.zpid` file of the scratch directory.
fn zpids(s: &Scratch) -> Vec<u32> {
    std::fs::read_dir(s.dir())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".zpid"))
        .filter_map(|e| std::fs::read_to_string(e.path()).ok()?.trim().parse().ok())
        .collect()
}

/// Runs `runs` commands whose root starts a `setsid` grandchild that dies
/// at once (before the root exits: it reaches corral as a zombie) and one
/// that dies right after the root exits (re-parented alive, dead before a
/// scan may see it). Each grandchild writes its pid to `NAME.zpid` first.
/// Returns the grandchildren's pids.
fn run_many(s: &Scratch, runs: usize, leftovers: corral::LeftoverPolicy) -> Vec<u32> {
    let script = r#"
        setsid sh -c 'echo $$ > "$CORRAL_TEST_DIR/$CORRAL_I.a.zpid"; exit 0' </dev/null >/dev/null 2>&1 &
        r=$$
        setsid sh -c 'echo $$ > "$CORRAL_TEST_DIR/$CORRAL_I.b.zpid"; while read -r l < /proc/'$r'/stat; do case "$l" in *") Z "*) exit 0;; esac; done' </dev/null >/dev/null 2>&1 &
        until [ -e "$CORRAL_TEST_DIR/$CORRAL_I.a.zpid" ] && [ -e "$CORRAL_TEST_DIR/$CORRAL_I.b.zpid" ]; do :; done
        exec sleep 0.02
    "#;
    for i in 0..runs {
        let t = Instant::now();
        let r = s
            .sh(script)
            .env("CORRAL_I", i.to_string())
            .containment(ContainmentChoice::Only(Mechanism::Subreaper))
            .leftovers(leftovers)
            .run()
            .unwrap();
        assert!(t.elapsed() < 10 * SEC, "run {i} took {:?}", t.elapsed());
        assert_eq!(r.containment, Mechanism::Subreaper);
        assert_eq!(r.outcome, Outcome::Exited(0), "run {i}: {r:?}");
        assert!(
            r.cleanup_errors.is_empty(),
            "run {i}: {:?}",
            r.cleanup_errors
        );
    }
    let pids = zpids(s);
    assert_eq!(pids.len(), 2 * runs, "every grandchild wrote its pid");
    pids
}

/// Waits up to 2 s for no zombie child of ours to be left among `pids`.
#[track_caller]
fn assert_reaped(pids: &[u32]) {
    let end = Instant::now() + 2 * SEC;
    loop {
        let z = our_zombies(pids);
        if z.is_empty() {
            return;
        }
        if Instant::now() >= end {
            for &p in &z {
                // Reaped here so that they do not outlive the test.
                let _ = rustix::process::waitid(
                    rustix::process::WaitId::Pid(rustix::process::Pid::from_raw(p as i32).unwrap()),
                    rustix::process::WaitIdOptions::EXITED | rustix::process::WaitIdOptions::NOHANG,
                );
            }
            panic!(
                "{} of {} grandchildren left zombie children of corral: {z:?}",
                z.len(),
                pids.len()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn unattributable_zombie_orphans_are_reaped_keep_on_success() {
    let (_g, s) = setup();
    let pids = run_many(&s, 30, corral::LeftoverPolicy::KeepOnSuccess);
    assert_reaped(&pids);
}

#[test]
fn unattributable_zombie_orphans_are_reaped_kill() {
    let (_g, s) = setup();
    let pids = run_many(&s, 30, corral::LeftoverPolicy::Kill);
    assert_reaped(&pids);
}

/// Runs in three tiers at once, each root exiting with its own code while
/// a grandchild holds its output for 100 ms (so the root is, most times,
/// an unreaped zombie, its run's identity, for a while) and a `setsid` grandchild
/// dies unseen: the stray zombies are reaped while runs go on, and never a
/// root: every run reads its own root's exit and releases it cleanly.
fn identities_kept(tiers: &[Mechanism]) {
    let (_g, s) = setup();
    let s = std::sync::Arc::new(s);
    let t = Instant::now();
    let threads: Vec<_> = tiers
        .iter()
        .enumerate()
        .flat_map(|(k, &tier)| (0..2).map(move |j| (k * 2 + j, tier)))
        .map(|(i, tier)| {
            let s = s.clone();
            std::thread::spawn(move || {
                for j in 0..10 {
                    let code = 3 + (i * 10 + j) % 100;
                    let script = format!(
                        r#"setsid sh -c 'echo $$ > "$CORRAL_TEST_DIR/{i}-{j}.zpid"; exit 0' </dev/null >/dev/null 2>&1 &
                           (sleep 0.1) &
                           until [ -e "$CORRAL_TEST_DIR/{i}-{j}.zpid" ]; do :; done
                           exec sh -c 'exit {code}'"#
                    );
                    let r = s
                        .sh(&script)
                        .containment(ContainmentChoice::Only(tier))
                        .wait_delay(5 * SEC)
                        .timeout(20 * SEC)
                        .run()
                        .unwrap();
                    assert_eq!(r.containment, tier);
                    assert_eq!(r.outcome, Outcome::Exited(code as i32), "{tier}: {r:?}");
                    assert!(r.cleanup_errors.is_empty(), "{tier}: {:?}", r.cleanup_errors);
                }
            })
        })
        .collect();
    for th in threads {
        th.join().unwrap();
    }
    assert!(t.elapsed() < 60 * SEC, "took {:?}", t.elapsed());
    s.assert_none_left();
    let pids = zpids(&s);
    assert_eq!(pids.len(), tiers.len() * 2 * 10);
    assert_reaped(&pids);
}

#[test]
fn stray_zombies_are_reaped_and_never_a_root_process_group_and_subreaper() {
    identities_kept(&[Mechanism::Subreaper, Mechanism::ProcessGroup]);
}

#[corral_testkit::needs(cgroup)]
#[test]
fn stray_zombies_are_reaped_and_never_a_root_with_cgroup() {
    identities_kept(&[
        Mechanism::Subreaper,
        Mechanism::ProcessGroup,
        Mechanism::Cgroup,
    ]);
}
