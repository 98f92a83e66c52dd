//! Prompt reaping of orphans while runs go on (Linux, child subreaper).
//!
//! Once [`enable_subreaper`](crate::process_wide::enable_subreaper) was called, every
//! orphaned descendant of this process is re-parented to it, in every tier.
//! An orphan that exits stays a zombie until its new parent reaps it, and a
//! zombie keeps its pid, and its place in `pids.max`: a long run that leaves
//! short-lived orphans behind would pile up zombies and run out of pids.
//!
//! One process-wide thread reaps them as they die. It sleeps in
//! `waitid(P_ALL, WEXITED | WNOWAIT)`, which wakes when any child becomes a
//! zombie and reaps nothing, then looks at every zombie child of the process
//! (`/proc/self/task/*/children`) and reaps, through a pidfd checked after
//! it was opened, only those it can attribute exactly to a run that is
//! registered here (between `attach` and `release`):
//!
//! * cgroup tier: the zombie is in the run's cgroup (names are unique);
//! * process-group and subreaper tiers: the zombie is in the run's process
//!   group (pinned by the unreaped root), or (subreaper tier) it is a
//!   descendant the tier has already seen (pid and start time), or it was
//!   seen here alive, as a child of this process, carrying the run's tree
//!   cookie in its environment (read once per process; a zombie's cannot
//!   be read). An orphan that left the group and died before any look at
//!   it stays a zombie until the tier's own scans (termination, release).
//!
//! Never reaped here: the root of any registered run (it pins the run's
//! identity and is reaped only in `release`), and anything not attributed,
//! such as the children the host program started itself. While such a
//! zombie is present `waitid` would not sleep, so the thread then looks again
//! every [`POLL`] instead. Without a registered run the thread parks.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use rustix::process::{pidfd_open, waitid, Pid, PidfdFlags, WaitId, WaitIdOptions};

use crate::sys::linux_proc::{self, Stat};
use crate::sys::per_process::PerProcess;

/// How often the thread looks while a zombie it must not reap is present.
const POLL: Duration = Duration::from_millis(5);

/// The environment variable that carries the subreaper tier's tree cookies.
pub(super) const COOKIE_VAR: &str = "CORRAL_TREE";

/// A fresh tree number: a per-process random base plus a counter, so that
/// a cookie (`<pid>.<n>`) names one tree even after this process's pid is
/// reused by a later corral (the keeper of a dead host kills by cookie).
pub(super) fn fresh_seq() -> u64 {
    use std::hash::BuildHasher;
    static BASE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let base =
        *BASE.get_or_init(|| std::collections::hash_map::RandomState::new().hash_one(0u8) >> 1);
    base.wrapping_add(SEQ.fetch_add(1, Ordering::Relaxed))
}

/// The `CORRAL_TREE` value for a root: `cookie` appended to what this
/// process inherited (nested corrals), comma-separated.
pub(super) fn cookie_value(cookie: &str) -> std::ffi::OsString {
    let mut value = std::ffi::OsString::new();
    if let Some(outer) = std::env::var_os(COOKIE_VAR).filter(|v| !v.is_empty()) {
        value.push(outer);
        value.push(",");
    }
    value.push(cookie);
    value
}

/// Set by [`enable_subreaper`](crate::process_wide::enable_subreaper). The process-wide
/// child-subreaper switch lives here, below the tiers that read it.
static SUBREAPER: AtomicBool = AtomicBool::new(false);

/// Set by [`reap_all_orphans`]: this process starts no children of its own
/// other than through corral.
static ALL_ORPHANS: AtomicBool = AtomicBool::new(false);

/// Notes that this process made itself a child subreaper.
pub(super) fn note_subreaper() {
    SUBREAPER.store(true, Ordering::SeqCst);
    if ALL_ORPHANS.load(Ordering::SeqCst) && !super::one_shot() {
        start_thread(&mut registry());
    }
}

/// Declares that this process starts no child processes of its own other
/// than through corral (the CLI does this), so that every zombie child that
/// is not the root of a run is an orphan corral may reap, attributed or not.
///
/// Without it, a zombie orphan that nothing attributes to a run (one that
/// left the tree's process group, with `setsid` say, and died before any
/// look at it saw it alive: its environment, and the tree cookie in it, can
/// no longer be read) stays a zombie child of this process until the
/// process exits, because it may as well be a child the host started
/// itself and will wait for. With it, such zombies are reaped as they
/// appear, while runs go on and after they ended, in every tier, once
/// [`enable_subreaper`](crate::process_wide::enable_subreaper) was called.
///
/// Never reaped, whatever is declared: the root of a run, from before its
/// spawn until its own release reaps it (a zombie root is its run's
/// identity: promise 3). A zombie child is taken for a stray orphan only
/// while no spawn is in flight, checked against every root started and not
/// yet reaped.
///
/// Do not call this in a program that waits for children it started by
/// other means (`std::process::Command`): corral could reap them first, and
/// their `wait` would fail.
pub fn reap_all_orphans() {
    ALL_ORPHANS.store(true, Ordering::SeqCst);
    // A one-shot process starts the thread with its run (`register`): its
    // first pass would only compete with the run's start for the CPU.
    if enabled() && !super::one_shot() {
        start_thread(&mut registry());
    }
    // A thread parked for want of runs looks again.
    wake();
}

/// Reaps now the zombie orphans the reaping thread would reap (those of
/// registered runs; with [`reap_all_orphans`] every zombie child that is
/// no root), and again while a pass finds some; returns how many. For a
/// one-shot process ([`one_shot_process`](crate::process_wide::one_shot_process)), which
/// starts no reaping thread: it calls this when SIGCHLD arrives for a child
/// that is not a run's root (as `corral run` does), so that orphans dying
/// during a long run are reaped as they die. Does nothing (0) unless
/// [`enable_subreaper`](crate::process_wide::enable_subreaper) was called.
pub fn reap_orphans_now() -> usize {
    if !enabled() {
        return 0;
    }
    let mut total = 0;
    loop {
        let reaped = if all_orphans() {
            // No spawn in flight meanwhile, as in the thread.
            let (_quiet, roots) = crate::sys::roots::quiet();
            let mut reg = registry();
            pass(&mut reg, None, Some(&roots))
        } else {
            let mut reg = registry();
            if reg.entries.is_empty() {
                0
            } else {
                pass(&mut reg, None, None)
            }
        };
        total += reaped;
        if reaped == 0 {
            return total;
        }
    }
}

fn all_orphans() -> bool {
    ALL_ORPHANS.load(Ordering::SeqCst) && enabled()
}

/// Whether [`enable_subreaper`](crate::process_wide::enable_subreaper) was called and
/// the attribute is still set.
pub(crate) fn enabled() -> bool {
    SUBREAPER.load(Ordering::SeqCst) && matches!(rustix::process::child_subreaper(), Ok(Some(_)))
}

/// The tree cookies in `pid`'s environment (empty if unreadable, e.g. a
/// zombie). A process whose leader thread exited shows an empty
/// `/proc/PID/environ`; its live threads still show the environment.
pub(super) fn cookies(pid: u32) -> Vec<String> {
    cookies_in(&environ(pid))
}

/// `pid`'s environment block as `/proc` shows it: empty when unreadable (a
/// zombie), and for a moment while the process is in `execve` (the new
/// address space has no environment yet); see the subreaper tier's keeper.
pub(super) fn environ(pid: u32) -> Vec<u8> {
    let mut env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    if env.is_empty() {
        if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
            env = tasks
                .flatten()
                .filter_map(|t| std::fs::read(t.path().join("environ")).ok())
                .find(|e| !e.is_empty())
                .unwrap_or_default();
        }
    }
    env
}

/// The tree cookies in an environment block.
pub(super) fn cookies_in(env: &[u8]) -> Vec<String> {
    let prefix = format!("{COOKIE_VAR}=");
    env.split(|&b| b == 0)
        .filter_map(|kv| kv.strip_prefix(prefix.as_bytes()))
        .flat_map(|v| {
            String::from_utf8_lossy(v)
                .split(',')
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// What makes a zombie child part of a run.
pub(crate) enum Claim {
    /// In this cgroup (the directory's name, unique across namespaces).
    Cgroup(String),
    /// In the root's process group.
    Group,
    /// In the root's process group, or one of `known` (pid → start time,
    /// as the subreaper tier's scans found them), or seen alive as a child
    /// of this process carrying `cookie` in its environment.
    Tree {
        known: Arc<Mutex<HashMap<u32, u64>>>,
        cookie: String,
    },
}

struct Entry {
    id: u64,
    root: u32,
    claim: Claim,
    /// Children of this process seen alive with this run's cookie (pid →
    /// start time): their zombies are the run's too.
    learned: HashMap<u32, u64>,
}

struct Registry {
    entries: Vec<Entry>,
    /// Live children of this process whose environment was already read
    /// (pid → start time), so that it is read once per process.
    checked: BTreeMap<u32, u64>,
    thread: bool,
    /// Wakes the reaping thread (per process, as the registry's lock).
    wake: Arc<Condvar>,
}

/// Per process: a fork of the host starts with its own (empty) registry and
/// its own reaping thread, never waiting for a lock its parent held at the
/// fork (`sys::per_process`).
static REGISTRY: PerProcess<Registry> = PerProcess::new(|| Registry {
    entries: Vec::new(),
    checked: BTreeMap::new(),
    thread: false,
    wake: Arc::new(Condvar::new()),
});
static IDS: AtomicU64 = AtomicU64::new(0);

fn registry() -> std::sync::MutexGuard<'static, Registry> {
    REGISTRY.lock()
}

/// Wakes the reaping thread.
fn wake() {
    let w = registry().wake.clone();
    w.notify_all();
}

/// A run registered for prompt reaping; [`finish`](Self::finish) (or drop)
/// ends it. Must end before the root is reaped.
pub(crate) struct Registration {
    id: u64,
}

/// Registers the run whose unreaped root is `root`, if this process is a
/// child subreaper (otherwise no orphan ever comes to it: nothing to do).
pub(crate) fn register(root: u32, claim: Claim) -> Option<Registration> {
    if !enabled() {
        return None;
    }
    let id = IDS.fetch_add(1, Ordering::Relaxed);
    let mut reg = registry();
    reg.entries.push(Entry {
        id,
        root,
        claim,
        learned: HashMap::new(),
    });
    // A one-shot process starts no thread: its host calls
    // `reap_orphans_now` on SIGCHLD (see there).
    if !super::one_shot() {
        start_thread(&mut reg);
    }
    let w = reg.wake.clone();
    drop(reg);
    w.notify_all();
    Some(Registration { id })
}

/// Starts the reaping thread if it is not running.
fn start_thread(reg: &mut Registry) {
    if !reg.thread {
        reg.thread = std::thread::Builder::new()
            .name("corral-orphans".into())
            .spawn(run)
            .is_ok();
    }
}

impl Registration {
    /// A last pass for this run's zombies, then the end of the registration
    /// (the root may be reaped after this).
    ///
    /// In a one-shot process the last pass is left out: it reads
    /// `/proc/self/task/*/children`, and the `/proc` entries a process made
    /// for itself are torn down when its parent reaps it, which then costs
    /// that parent more than the pass saves (a third of a `corral run true`
    /// measured here). The process exits right after its run, and the
    /// zombies of orphans that died in the run's last moment go to init
    /// with it.
    pub(crate) fn finish(self) {
        let mut reg = registry();
        if !super::one_shot() {
            let _ = pass(&mut reg, Some(self.id), None);
        }
        reg.entries.retain(|e| e.id != self.id);
        drop(reg);
        std::mem::forget(self);
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        registry().entries.retain(|e| e.id != self.id);
    }
}

fn stat(pid: u32) -> Option<Stat> {
    linux_proc::stat_of(pid)
}

/// The children of every thread of this process.
fn own_children() -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for t in tasks.flatten() {
        if let Ok(s) = std::fs::read_to_string(t.path().join("children")) {
            out.extend(
                s.split_ascii_whitespace()
                    .filter_map(|x| x.parse::<u32>().ok()),
            );
        }
    }
    out
}

/// `/proc/<pid>/cgroup` (empty if it cannot be read).
fn cgroup_of(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default()
}

/// Whether the cgroup v2 path in `proc_cgroup` (the text of
/// `/proc/<pid>/cgroup`) has a component named `name`.
fn in_cgroup(proc_cgroup: &str, name: &str) -> bool {
    proc_cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .is_some_and(|p| p.split('/').any(|c| c == name))
}

/// What a pass does with one child of this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Look {
    /// A registered run's root, the keeper, gone, or no longer a child of
    /// this process: never touched.
    Leave,
    /// Alive: its environment says which run it belongs to, while it can
    /// still be read.
    Learn,
    /// A zombie child: reaped if a run claims it ([`claimed`]).
    Zombie,
}

/// The first half of the attribution rule: `reserved` (the root of a
/// registered run, or the keeper) is never touched, whatever its state;
/// otherwise the child's `stat` (if it could be read) says whether it is
/// still a child of this process (`me`), alive or a zombie.
fn look(reserved: bool, stat: Option<&Stat>, me: u32) -> Look {
    match stat {
        _ if reserved => Look::Leave,
        Some(s) if s.ppid == me && s.is_dead() => Look::Zombie,
        Some(s) if s.ppid == me => Look::Learn,
        _ => Look::Leave,
    }
}

/// The second half of the attribution rule: whether the zombie child
/// `pid` (its `stat`) belongs to the run of `e`: in the run's cgroup (read
/// from `proc_cgroup`, asked only for a cgroup claim), in the root's
/// process group, or (tree claim) a descendant the tier or this watch saw
/// alive with the same start time.
fn claimed(e: &Entry, pid: u32, s: &Stat, proc_cgroup: impl FnOnce() -> String) -> bool {
    match &e.claim {
        Claim::Cgroup(name) => in_cgroup(&proc_cgroup(), name),
        Claim::Group => s.pgrp == e.root,
        Claim::Tree { known, .. } => {
            s.pgrp == e.root
                || e.learned.get(&pid) == Some(&s.start)
                || known.lock().unwrap_or_else(|p| p.into_inner()).get(&pid) == Some(&s.start)
        }
    }
}

/// Reaps the zombie children attributed to a registered run (to `only`, if
/// given). Runs with the registry locked, so no registration ends (and no
/// root is reaped) meanwhile. The roots of registered runs are skipped
/// without a look: with many runs at once, they are most of the children.
/// Returns how many it reaped.
///
/// With `unknown_roots` (the roots of every run started and not yet reaped,
/// taken with no spawn in flight: see `sys::roots`, and held so until this
/// returns), zombies attributed to no run are reaped too, except those
/// roots: see [`reap_all_orphans`].
fn pass(reg: &mut Registry, only: Option<u64>, unknown_roots: Option<&HashSet<u32>>) -> usize {
    let mut reaped = 0;
    let me = std::process::id();
    let mut roots: HashSet<u32> = reg.entries.iter().map(|e| e.root).collect();
    if let Some(r) = unknown_roots {
        roots.extend(r.iter().copied());
    }
    let children = own_children();
    // The crash-safety keeper: a child of this process, never an orphan.
    #[cfg(linux_raw)]
    let keeper = crate::sys::linux_spawn::keeper::pid_of_own_keeper();
    #[cfg(not(linux_raw))]
    let keeper: Option<u32> = None;
    let listed: HashSet<u32> = children.iter().copied().collect();
    reg.checked.retain(|p, _| listed.contains(p));
    for e in &mut reg.entries {
        e.learned.retain(|p, _| listed.contains(p));
    }
    let entries = &mut reg.entries;
    for c in children {
        let reserved = roots.contains(&c) || keeper == Some(c);
        let s = if reserved { None } else { stat(c) };
        let look = look(reserved, s.as_ref(), me);
        let Some(s) = s.filter(|_| look != Look::Leave) else {
            continue;
        };
        if look == Look::Learn {
            // A live orphan: its environment says which run it belongs to
            // while it can still be read (a zombie's cannot).
            if reg.checked.get(&c) != Some(&s.start) {
                reg.checked.insert(c, s.start);
                let tags = cookies(c);
                // Still the process whose start time was read.
                if stat(c).is_some_and(|t| t.start == s.start) {
                    for e in entries.iter_mut() {
                        if let Claim::Tree { cookie, .. } = &e.claim {
                            if tags.contains(cookie) {
                                e.learned.insert(c, s.start);
                            }
                        }
                    }
                }
            }
            continue;
        }
        // Pinned, then checked again: still the same zombie child of ours.
        let Some(fd) =
            Pid::from_raw(c as i32).and_then(|p| pidfd_open(p, PidfdFlags::empty()).ok())
        else {
            continue;
        };
        let Some(s) = stat(c).filter(|t| *t == s) else {
            continue;
        };
        // Any zombie child that is no root, when this process starts no
        // children of its own (the roots are skipped above).
        let ours = unknown_roots.is_some()
            || entries
                .iter()
                .filter(|e| only.is_none_or(|id| e.id == id))
                .any(|e| claimed(e, c, &s, || cgroup_of(c)));
        // Never a root of any run, registered or not yet (issue 37: roots
        // are reaped by their own release only).
        if !ours || crate::sys::roots::is_root(c) {
            continue;
        }
        let opts = WaitIdOptions::EXITED | WaitIdOptions::NOHANG;
        match waitid(WaitId::PidFd(fd.as_fd()), opts) {
            Ok(Some(_)) => reaped += 1,
            // No P_PIDFD (before Linux 5.4): the pid is an unreaped zombie
            // child of ours, checked above, so it cannot have been reused.
            Err(rustix::io::Errno::INVAL) | Err(rustix::io::Errno::NOSYS) => {
                if let Some(p) = Pid::from_raw(c as i32) {
                    if let Ok(Some(_)) = waitid(WaitId::Pid(p), opts) {
                        reaped += 1;
                    }
                }
            }
            // Not reapable yet (a zombie leader whose other threads still
            // run), or reaped by someone else meanwhile.
            _ => {}
        }
    }
    reaped
}

/// Whether some child of this process is a zombie now (reaps nothing).
fn zombie_left() -> bool {
    let opts = WaitIdOptions::EXITED | WaitIdOptions::NOWAIT | WaitIdOptions::NOHANG;
    matches!(waitid(WaitId::All, opts), Ok(Some(_)))
}

fn run() {
    loop {
        let reaped = if all_orphans() {
            // No spawn in flight from here until the pass is done: every
            // root is in `roots` (lock order: spawns take `roots` first,
            // then, in `attach`, the registry).
            let (_quiet, roots) = crate::sys::roots::quiet();
            let mut reg = registry();
            pass(&mut reg, None, Some(&roots))
        } else {
            let mut reg = registry();
            while reg.entries.is_empty() && !all_orphans() {
                let w = reg.wake.clone();
                reg = w.wait(reg).unwrap_or_else(|e| e.into_inner());
            }
            if all_orphans() {
                continue;
            }
            pass(&mut reg, None, None)
        };
        if zombie_left() {
            // More died while this pass ran: at once again. A zombie that is
            // not ours to reap (a root, the host's child) would keep `waitid`
            // from sleeping: then look again a little later instead.
            if reaped == 0 {
                std::thread::sleep(POLL);
            }
            continue;
        }
        // Sleeps until a child of this process is a zombie; reaps nothing.
        match waitid(WaitId::All, WaitIdOptions::EXITED | WaitIdOptions::NOWAIT) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            // No child at all: nothing can be re-parented here (every
            // descendant descends from a child) until a run starts one.
            Err(rustix::io::Errno::CHILD) if all_orphans() => {
                let reg = registry();
                let w = reg.wake.clone();
                let _ = w
                    .wait_timeout(reg, Duration::from_secs(1))
                    .unwrap_or_else(|e| e.into_inner());
            }
            // No waitid: look again later.
            Err(_) => std::thread::sleep(POLL),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(ppid: u32, state: u8, pgrp: u32, start: u64) -> Stat {
        Stat {
            pid: 50,
            state,
            ppid,
            pgrp,
            session: 1,
            flags: 0,
            threads: 1,
            start,
            exit_code: None,
        }
    }

    #[test]
    fn look_rule_table() {
        const ME: u32 = 10;
        // (name, reserved, stat, answer)
        let cases: &[(&str, bool, Option<Stat>, Look)] = &[
            (
                "a live child: learn its cookies",
                false,
                Some(stat(ME, b'S', 50, 1)),
                Look::Learn,
            ),
            (
                "a zombie child",
                false,
                Some(stat(ME, b'Z', 50, 1)),
                Look::Zombie,
            ),
            ("dead (X)", false, Some(stat(ME, b'X', 50, 1)), Look::Zombie),
            (
                "stopped is alive",
                false,
                Some(stat(ME, b'T', 50, 1)),
                Look::Learn,
            ),
            (
                "a run's root, even a zombie",
                true,
                Some(stat(ME, b'Z', 50, 1)),
                Look::Leave,
            ),
            ("the keeper", true, Some(stat(ME, b'S', 50, 1)), Look::Leave),
            (
                "reaped by someone else, pid reused",
                false,
                Some(stat(77, b'Z', 50, 1)),
                Look::Leave,
            ),
            ("gone", false, None, Look::Leave),
        ];
        for (name, reserved, s, want) in cases {
            assert_eq!(look(*reserved, s.as_ref(), ME), *want, "{name}");
        }
    }

    #[test]
    fn attribution_rule_table() {
        const ROOT: u32 = 100;
        let known = Arc::new(Mutex::new(HashMap::from([(61, 7)])));
        let entry = |claim: Claim, learned: &[(u32, u64)]| Entry {
            id: 0,
            root: ROOT,
            claim,
            learned: learned.iter().copied().collect(),
        };
        let cg = "corral-1-00000000000000ab-3";
        let inside = format!("0::/user.slice/{cg}\n");
        let nested = format!("0::/user.slice/{cg}/inner\n");
        let prefix = format!("0::/user.slice/{cg}0\n");
        let tree = || Claim::Tree {
            known: known.clone(),
            cookie: "1.2".into(),
        };
        // (name, entry, pid, stat, /proc/<pid>/cgroup, claimed)
        let cases: Vec<(&str, Entry, u32, Stat, &str, bool)> = vec![
            (
                "in the run's cgroup",
                entry(Claim::Cgroup(cg.into()), &[]),
                60,
                stat(1, b'Z', 9, 1),
                &inside,
                true,
            ),
            (
                "in a cgroup the command made below it",
                entry(Claim::Cgroup(cg.into()), &[]),
                60,
                stat(1, b'Z', 9, 1),
                &nested,
                true,
            ),
            (
                "a cgroup whose name only starts the same",
                entry(Claim::Cgroup(cg.into()), &[]),
                60,
                stat(1, b'Z', 9, 1),
                &prefix,
                false,
            ),
            (
                "cgroup claim: the group does not count",
                entry(Claim::Cgroup(cg.into()), &[]),
                60,
                stat(1, b'Z', ROOT, 1),
                "0::/other\n",
                false,
            ),
            (
                "in the root's group",
                entry(Claim::Group, &[]),
                60,
                stat(1, b'Z', ROOT, 1),
                "",
                true,
            ),
            (
                "another group",
                entry(Claim::Group, &[]),
                60,
                stat(1, b'Z', 99, 1),
                "",
                false,
            ),
            (
                "tree: in the group",
                entry(tree(), &[]),
                60,
                stat(1, b'Z', ROOT, 1),
                "",
                true,
            ),
            (
                "tree: seen by the tier's scans",
                entry(tree(), &[]),
                61,
                stat(1, b'Z', 99, 7),
                "",
                true,
            ),
            (
                "tree: a reused pid of one the tier saw",
                entry(tree(), &[]),
                61,
                stat(1, b'Z', 99, 8),
                "",
                false,
            ),
            (
                "tree: seen alive here with the cookie",
                entry(tree(), &[(62, 4)]),
                62,
                stat(1, b'Z', 99, 4),
                "",
                true,
            ),
            (
                "tree: a reused pid of one seen alive",
                entry(tree(), &[(62, 4)]),
                62,
                stat(1, b'Z', 99, 5),
                "",
                false,
            ),
            (
                "tree: never seen, another group",
                entry(tree(), &[]),
                63,
                stat(1, b'Z', 99, 1),
                "",
                false,
            ),
        ];
        for (name, e, pid, s, text, want) in cases {
            assert_eq!(claimed(&e, pid, &s, || text.to_owned()), want, "{name}");
        }
        // Only a cgroup claim reads /proc/<pid>/cgroup.
        let read = std::cell::Cell::new(false);
        let group = entry(Claim::Group, &[]);
        let _ = claimed(&group, 60, &stat(1, b'Z', ROOT, 1), || {
            read.set(true);
            String::new()
        });
        assert!(!read.get());
    }
}
