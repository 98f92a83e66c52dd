//! Subreaper containment (Linux without a writable cgroup).
//!
//! corral's process is made a *child subreaper* (`PR_SET_CHILD_SUBREAPER`,
//! see [`enable_subreaper`]): a descendant whose parent dies is re-parented
//! to corral instead of to init, `setsid()` and double-fork escapers
//! included. Each command still gets its own process group (signals go to
//! the group first, so the delivery order is the same as with a process
//! group), and in addition the containment tracks the root's descendants
//! through `/proc/<pid>/task/<tid>/children`:
//!
//! * **Walk.** Every scan starts from the root (unreaped, so its pid is
//!   pinned), from every descendant remembered from earlier scans that is
//!   still the same process, and from the orphans re-parented to corral that
//!   belong to this command (below), and follows `children` recursively. A
//!   scan ends with a second look at corral's own children, so that a
//!   process re-parented while the walk ran is not missed.
//! * **Identity.** Every descendant is remembered with its start time
//!   (`/proc/<pid>/stat` field 22). A signal goes to a descendant only
//!   through a pidfd opened first and checked afterwards against the
//!   remembered start time, so a reused pid is never hit.
//! * **Kill "until none is left".** The lifecycle sends SIGKILL once and then
//!   asks for the members until there are none: every later scan sends the
//!   last signal to each member outside the group that has not had it yet
//!   (a process that keeps forking, an orphan that just arrived), and after
//!   SIGKILL signals the group again.
//! * **Reaping.** Orphans of this command that died as children of corral are
//!   reaped in every scan (`waitid` on a pidfd, `WNOHANG`), and while the run
//!   goes on by the orphan reaper (`orphans.rs`: those in the root's group
//!   or already seen). A root is never
//!   reaped here: the root of this command is reaped only in `release`, and
//!   the roots of other commands are never touched.
//!
//! ## Which command an orphan belongs to
//!
//! Several commands may run at once in one process, and all their orphans
//! end up as children of the same process. A child of corral that is not a
//! live root of any command is attributed to command X when, first match:
//!
//! 1. it is a process remembered (pid and start time) as X's descendant;
//! 2. its environment carries X's tree cookie: every root is started with
//!    `CORRAL_TREE=<corral pid>.<n>` (appended, comma-separated, to a value
//!    inherited from corral's own environment, so nested corrals work), and
//!    the variable is inherited by every descendant that does not clear its
//!    environment;
//! 3. it is still in X's process group (pinned by X's unreaped root);
//! 4. its session or process group was created inside X's tree: it is the
//!    id of a session or group used by one of X's processes (other than
//!    corral's own session and group and the other roots' groups), and it is
//!    still in use. Sessions and groups are only inherited (a group is
//!    joined only within its session), so the process descends from a
//!    member of X. This catches what was never seen alive and can no longer
//!    show its cookie: a zombie forked just before its parent was killed;
//! 5. (zombies only) its pid is such a session or group id: it was the
//!    leader, e.g. the middle process of a double fork.
//!
//! Rules 4 and 5 rely on the kernel never handing out a pid that is still
//! in use as a session or group id; a link is dropped as soon as a scan
//! finds no process of the tree using it.
//!
//! **Unknown orphans** (none of the above: a process that cleared its
//! environment, made its own session and was never seen while it was still
//! below the root) are
//! attributed to no command: they are neither signalled nor reaped, because
//! they may just as well be children the host program started itself. Use
//! cgroup containment where nothing may escape.
//!
//! ## corral's own death
//!
//! The cookie is handed to the crash-safety keeper before the root is
//! spawned (`keeper::register_cookie`) and taken back at release: if this
//! process dies meanwhile, the keeper kills the root's group and every
//! process whose environment carries the cookie (rule 2 above; rules 1 and
//! 3-5 need this process's memory or its place as subreaper, which die with
//! it). The cookie's number is `orphans::fresh_seq`: random per process, so
//! it names one tree even after this process's pid is reused.
//!
//! ## Kept leftovers
//!
//! Processes left alive by the leftovers policy are handed, at release, to a
//! process-wide keeper thread that reaps them (through pidfds) when they
//! exit, together with their descendants that are re-parented to corral
//! later (recognised by a cookie of a finished command; one whose
//! environment reads empty, as during an `execve`, is looked at again for
//! up to 2 s). They are never signalled again.

use std::collections::{HashMap, HashSet};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex};

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::process::{
    pidfd_open, pidfd_send_signal, waitid, Pid, PidfdFlags, WaitId, WaitIdOptions,
};

use super::cookie_hold::CookieHold;
pub(crate) use super::orphans::enabled;
pub use super::orphans::reap_all_orphans;
use super::orphans::{self, cookies, cookies_in, environ, COOKIE_VAR};
use super::{AttachFailed, Attached, Containment, Mechanism, OsOp, Tracer};
use crate::sys::{self, linux_proc, Root};
use crate::Signal;

/// Scan rounds (walk, then corral's own children again) per scan.
const ROUNDS: usize = 8;

/// Members outside the root's group handed to the crash-safety keeper per
/// run, at most (each costs the keeper a descriptor; beyond, the cookie and
/// the group are what it has).
const HANDED_MAX: usize = 64;

#[cfg(linux_raw)]
type MemberReg = crate::sys::linux_spawn::keeper::Registration;
#[cfg(not(linux_raw))]
type MemberReg = ();

/// Commands of this process under subreaper containment, from creation to
/// release: (command number, root pid once attached). Per process: a fork
/// has none of its parent's, and never waits for a lock its parent held.
static LIVE: crate::sys::per_process::PerProcess<Vec<(u64, Option<u32>)>> =
    crate::sys::per_process::PerProcess::new(Vec::new);

fn live() -> std::sync::MutexGuard<'static, Vec<(u64, Option<u32>)>> {
    LIVE.lock()
}

/// Makes this process a child subreaper, so that `auto` containment can use
/// the subreaper tier where no writable cgroup exists, and
/// `ContainmentChoice::Only(Mechanism::Subreaper)` can be asked for.
///
/// This changes the whole process: from now on, every orphaned descendant of
/// the process is re-parented to it rather than to init. corral only
/// signals and reaps the orphans it can attribute to one of its commands
/// (see the module documentation); a host that starts children by other
/// means keeps reaping its own children as before. Call it once, early (the
/// attribute is not inherited by children and is kept across `exec`).
pub fn enable_subreaper() -> io::Result<()> {
    rustix::process::set_child_subreaper(Some(rustix::process::getpid()))?;
    orphans::note_subreaper();
    Ok(())
}

/// The fields of `/proc/<pid>/stat` this module uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat {
    state: u8,
    ppid: u32,
    pgrp: u32,
    session: u32,
    /// Start time after boot, in clock ticks (field 22).
    start: u64,
    /// The leader shows `Z` but another thread of the process still runs
    /// (it called `pthread_exit`): alive (set by [`stat`]).
    threads_alive: bool,
}

impl Stat {
    fn dead(&self) -> bool {
        (self.state == b'Z' || self.state == b'X') && !self.threads_alive
    }
}

fn stat(pid: u32) -> Option<Stat> {
    let st = linux_proc::stat_of(pid)?;
    let mut s = Stat {
        state: st.state,
        ppid: st.ppid,
        pgrp: st.pgrp,
        session: st.session,
        start: st.start,
        threads_alive: false,
    };
    if s.dead() {
        s.threads_alive = linux_proc::thread_group_alive(pid);
    }
    Some(s)
}

/// The children of every thread of `pid`. The kernel documents the list as
/// possibly incomplete while processes are being re-parented; scans repeat.
fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for t in tasks.flatten() {
        let mut p = t.path();
        p.push("children");
        if let Ok(s) = std::fs::read_to_string(&p) {
            out.extend(
                s.split_ascii_whitespace()
                    .filter_map(|x| x.parse::<u32>().ok()),
            );
        }
    }
    out
}

fn cookie_for(seq: u64) -> String {
    format!("{}.{}", std::process::id(), seq)
}

/// A pidfd for `pid`, only if it is still the process that started at
/// `start` (checked after opening, so the descriptor cannot refer to a
/// process that reused the pid).
fn open_verified(pid: u32, start: u64) -> Option<OwnedFd> {
    let fd = pidfd_open(Pid::from_raw(pid as i32)?, PidfdFlags::empty()).ok()?;
    (stat(pid)?.start == start).then_some(fd)
}

fn send_verified(tracer: &Tracer, pid: u32, start: u64, sig: Signal) {
    let Ok(rsig) = sys::to_rustix(sig) else {
        return;
    };
    if let Some(fd) = open_verified(pid, start) {
        tracer.record(OsOp::SignalMember {
            via: Mechanism::Subreaper,
            pid,
            signal: sig,
        });
        let _ = pidfd_send_signal(&fd, rsig);
    }
}

/// Reaps `pid` if it is still the zombie child of ours that started at
/// `start`. Never blocks.
fn reap_verified(pid: u32, start: u64) {
    let me = std::process::id();
    let Some(fd) = open_verified(pid, start) else {
        return;
    };
    if stat(pid).is_none_or(|s| s.ppid != me || !s.dead()) {
        return;
    }
    let opts = WaitIdOptions::EXITED | WaitIdOptions::NOHANG;
    match waitid(WaitId::PidFd(fd.as_fd()), opts) {
        Err(rustix::io::Errno::INVAL) | Err(rustix::io::Errno::NOSYS) => {
            // No P_PIDFD (before Linux 5.4): the pid is an unreaped zombie of
            // ours, checked above, so it cannot have been reused.
            if let Some(p) = Pid::from_raw(pid as i32) {
                let _ = waitid(WaitId::Pid(p), opts);
            }
        }
        _ => {}
    }
}

/// One live or dead process attributed to the command in a scan.
#[derive(Debug, Clone, Copy)]
struct Member {
    pid: u32,
    stat: Stat,
}

/// What a scan of one tree holds fixed: its root, this process, the roots
/// of the other runs (never this tree's), and this process's own session
/// and group (shared with the host and every root: they never link a
/// process to this tree).
struct Scope {
    root: u32,
    me: u32,
    other_roots: HashSet<u32>,
    own: Option<Stat>,
}

impl Scope {
    fn new(seq: u64, root: u32) -> Scope {
        let me = std::process::id();
        let other_roots = live()
            .iter()
            .filter(|&&(s, _)| s != seq)
            .filter_map(|&(_, r)| r)
            .collect();
        Scope {
            root,
            me,
            other_roots,
            own: stat(me),
        }
    }

    /// Never a member found by the walk: the root (pinned, counted apart)
    /// and the other runs' roots.
    fn skip(&self, pid: u32) -> bool {
        pid == self.root || self.other_roots.contains(&pid)
    }

    /// A session or group id that never links a process to this tree.
    fn foreign(&self, id: u32) -> bool {
        self.own.is_some_and(|o| id == o.session || id == o.pgrp) || self.other_roots.contains(&id)
    }
}

/// What the tier knows of its tree when it meets an orphan of corral.
struct Seen<'a> {
    /// The start time the tier remembered for this pid, if any.
    known_start: Option<u64>,
    root: u32,
    /// Sessions and groups made inside the tree and still in use.
    links: &'a HashSet<u32>,
    /// The other runs' unreaped roots (those being spawned included),
    /// taken after the orphan was listed: never this tree's, and their
    /// pids, which are their groups' ids, never link to it.
    roots: &'a HashSet<u32>,
}

/// The subreaper tier's attribution rule for a child of corral that the
/// walk did not reach (an orphan re-parented to corral): it is this tree's
/// when the tier saw it before (same start time), it is in the root's
/// group, or in a session or group made inside the tree, or (dead) its pid
/// is such a session or group leader's, or (alive) it carries the tree's
/// cookie in its environment (`cookie`, read only then: a zombie's
/// environment cannot be read).
///
/// Another run's root is never this tree's, and a link whose number is
/// another run's root links nothing: a link is kept from the last scan, and
/// when every process of that session or group died since, the number is
/// free; a new root that got it as its pid has it as its group id (and
/// its members too), and was adopted, killed and reaped as this tree's
/// orphan (the other run then failed with ECHILD: issue 37's soak).
fn adopted(pid: u32, s: &Stat, seen: &Seen<'_>, cookie: impl FnOnce() -> bool) -> bool {
    if seen.roots.contains(&pid) {
        return false;
    }
    let link = |id: u32| seen.links.contains(&id) && !seen.roots.contains(&id);
    seen.known_start == Some(s.start)
        || s.pgrp == seen.root
        || link(s.session)
        || link(s.pgrp)
        || (s.dead() && link(pid))
        || (!s.dead() && cookie())
}

/// The members of the reaped root `root`'s group that the release takes
/// as leftovers, of those `listed` after the reap: none if the group's id
/// is now another run's root's (`roots`: every unreaped root, read after
/// the listing; the group died after it was seen to exist and a new root
/// got its number), and never a root, the root itself or one already
/// `kept`.
fn group_leftovers(root: u32, listed: Vec<u32>, roots: &HashSet<u32>, kept: &[u32]) -> Vec<u32> {
    if roots.contains(&root) {
        return Vec::new();
    }
    listed
        .into_iter()
        .filter(|&p| p != root && !roots.contains(&p) && !kept.contains(&p))
        .collect()
}

/// The subreaper tier's straggler rule: which members found after the
/// tree was sent `sig` get it now. Only members outside the root's group
/// (the group is signalled as one) not yet reached; after SIGKILL every
/// such member, after a graceful signal only the orphans re-parented to
/// corral (`me`): a process whose parent still lives may be what a signal
/// handler started to clean up, and is left to finish within the grace.
fn late_targets(
    sig: Signal,
    members: &[Member],
    root: u32,
    me: u32,
    reached: &HashSet<(u32, u64)>,
) -> Vec<Member> {
    members
        .iter()
        .filter(|m| m.stat.pgrp != root && !reached.contains(&(m.pid, m.stat.start)))
        .filter(|m| sig == Signal::KILL || m.stat.ppid == me)
        .copied()
        .collect()
}

/// This command's place in [`LIVE`], from creation to release (removed
/// when dropped: at release, or with a containment never attached).
struct Entry(u64);

impl Drop for Entry {
    fn drop(&mut self) {
        live().retain(|&(seq, _)| seq != self.0);
    }
}

/// A subreaper tree to be: its number and cookie, and the keeper's hold
/// on the cookie once `placement` took it.
pub(crate) struct Subreaper {
    entry: Entry,
    cookie: String,
    /// The keeper's hold on the tree by its cookie, from before the spawn
    /// until release: if this process dies, every process carrying the
    /// cookie is killed (the root before its own registration, escapers).
    keeper: Option<CookieHold>,
    /// What the keeper does to the tree if this process dies.
    farewell: crate::spec::Farewell,
    tracer: Tracer,
}

/// The attached tree: the root (unreaped, so its pid and its group id are
/// pinned) and what the scans learned of its descendants.
struct Tree {
    entry: Entry,
    cookie: String,
    /// The root's pid (= its process group id).
    root: u32,
    /// Every descendant seen alive and not yet seen dead: pid → start time.
    known: HashMap<u32, u64>,
    /// Session and process group ids created inside the tree and still in
    /// use by one of its processes.
    links: HashSet<u32>,
    /// The last signal sent to the tree: members outside the group that
    /// are found later get it too (SIGKILL: "until none is left").
    last_signal: Option<Signal>,
    /// Members outside the group that got `last_signal` (pid, start time).
    reached: HashSet<(u32, u64)>,
    /// `known`, as last published for the orphan reaper, and its
    /// registration (see `orphans.rs`; none outside a subreaper process).
    shared_known: Arc<Mutex<HashMap<u32, u64>>>,
    orphans: Option<super::orphans::Registration>,
    /// See [`Subreaper`]'s (none if it was never taken).
    keeper: Option<CookieHold>,
    /// Members seen outside the root's group and handed to the keeper
    /// (pinned by a pidfd it holds), while the run lasts.
    handed: HashMap<(u32, u64), MemberReg>,
    /// See [`Subreaper`]'s.
    #[cfg_attr(not(linux_raw), allow(dead_code))]
    farewell: crate::spec::Farewell,
    tracer: Tracer,
}

impl Subreaper {
    pub(crate) fn new(tracer: Tracer, farewell: crate::spec::Farewell) -> Subreaper {
        let seq = orphans::fresh_seq();
        live().push((seq, None));
        Subreaper {
            entry: Entry(seq),
            cookie: cookie_for(seq),
            keeper: None,
            farewell,
            tracer,
        }
    }
}

impl Tree {
    /// Hands the members outside the root's group that the keeper does not
    /// hold yet to it (at most [`HANDED_MAX`] a run): if this process dies
    /// during the termination (a grace period), they die too, also when
    /// they cleared their environment (so the cookie cannot find them).
    fn hand_to_keeper(&mut self, members: &[Member], root: u32) {
        if self.keeper.is_none() {
            return; // not held (yet)
        }
        for m in members.iter().filter(|m| m.stat.pgrp != root) {
            if self.handed.len() >= HANDED_MAX {
                return;
            }
            let key = (m.pid, m.stat.start);
            if self.handed.contains_key(&key) {
                continue;
            }
            #[cfg(linux_raw)]
            if let Some(fd) = open_verified(m.pid, m.stat.start) {
                if let Ok(reg) = crate::sys::linux_spawn::keeper::register_member(
                    fd.as_fd(),
                    m.pid,
                    self.farewell,
                ) {
                    self.handed.insert(key, reg);
                }
            }
            #[cfg(not(linux_raw))]
            self.handed.insert(key, ());
        }
    }

    /// Finds the live members other than the root (and remembers them), and
    /// reaps this command's dead orphans.
    fn scan(&mut self, root: u32) -> Vec<Member> {
        self.scan_with(root, true)
    }

    /// [`Tree::scan`], with or without the look at the root's process
    /// group (a scan of all of `/proc`: the slow part of a scan). `release`
    /// does without it, and looks at the group after the reap only if the
    /// group still exists.
    fn scan_with(&mut self, root: u32, group_scan: bool) -> Vec<Member> {
        let scope = Scope::new(self.entry.0, root);
        let (mut found, mut queue) = self.seeds(&scope, group_scan);
        let mut walked: HashSet<u32> = HashSet::new();
        for _ in 0..ROUNDS {
            Self::walk(&scope, &mut found, &mut queue, &mut walked);
            // Sessions and groups made inside the tree (rules 4 and 5).
            for s in found.values() {
                for id in [s.session, s.pgrp] {
                    if !scope.foreign(id) {
                        self.links.insert(id);
                    }
                }
            }
            if !self.adopt_orphans(&scope, &mut found, &mut queue) {
                break;
            }
        }
        self.settle(&found, scope.me)
    }

    /// Where a scan starts: the root, the descendants remembered from
    /// earlier scans (as long as they are the same process, wherever they
    /// were re-parented to) and, with `group_scan`, the root's process
    /// group (pinned by the unreaped root: members found the way the
    /// process-group tier finds them, should an orphan have gone elsewhere
    /// than to corral).
    fn seeds(&self, scope: &Scope, group_scan: bool) -> (HashMap<u32, Stat>, Vec<u32>) {
        let root = scope.root;
        let mut found: HashMap<u32, Stat> = HashMap::new();
        let mut queue: Vec<u32> = vec![root];
        for (&pid, &start) in &self.known {
            if let Some(s) = stat(pid).filter(|s| s.start == start) {
                if !scope.skip(pid) {
                    found.insert(pid, s);
                    queue.push(pid);
                }
            }
        }
        let group = if group_scan {
            sys::group_members(root)
        } else {
            Ok(Vec::new())
        };
        for pid in group.unwrap_or_default() {
            if scope.skip(pid) || found.contains_key(&pid) {
                continue;
            }
            if let Some(s) = stat(pid).filter(|s| s.pgrp == root) {
                found.insert(pid, s);
                queue.push(pid);
            }
        }
        (found, queue)
    }

    /// Walks down from every queued process to its children.
    fn walk(
        scope: &Scope,
        found: &mut HashMap<u32, Stat>,
        queue: &mut Vec<u32>,
        walked: &mut HashSet<u32>,
    ) {
        // Every run's unreaped root, taken (once, with no spawn in flight)
        // only when a listed child turns out to be re-parented to us.
        let mut roots: Option<HashSet<u32>> = None;
        while let Some(p) = queue.pop() {
            if !walked.insert(p) {
                continue;
            }
            let kids = children(p);
            // The list belongs to `p` only if `p` is still the process
            // we attributed (the root is pinned).
            if p != scope.root && stat(p).map(|s| s.start) != found.get(&p).map(|s| s.start) {
                continue;
            }
            for c in kids {
                if scope.skip(c) || found.contains_key(&c) {
                    continue;
                }
                // Still a child of `p`, or re-parented to us meanwhile.
                let Some(s) = stat(c).filter(|s| s.ppid == p || s.ppid == scope.me) else {
                    continue;
                };
                // A child of ours now, not of `p`: re-parented since the
                // listing, or the listed pid died and was reused by a new
                // run's root (a small `pid_max` wraps within a scan: issue
                // 37's soak, where that root was then reaped as this tree's
                // dead orphan and its own release failed with ECHILD). The
                // roots are read after the `stat`: a root it saw is in.
                if s.ppid == scope.me && s.ppid != p {
                    let roots = roots.get_or_insert_with(|| sys::roots::quiet().1);
                    if roots.contains(&c) {
                        continue;
                    }
                }
                found.insert(c, s);
                if !s.dead() {
                    queue.push(c);
                }
            }
        }
    }

    /// Orphans re-parented to corral that belong to this tree
    /// ([`adopted`]); whether any was found (another round then).
    fn adopt_orphans(
        &self,
        scope: &Scope,
        found: &mut HashMap<u32, Stat>,
        queue: &mut Vec<u32>,
    ) -> bool {
        let mut more = false;
        // Every run's unreaped root, read after the children were listed,
        // with no spawn in flight (`sys::roots`): a root listed here is in
        // it, even one whose run has not attached yet (not in `scope`).
        // Taken once, and only if some child is left to attribute.
        let mut roots: Option<HashSet<u32>> = None;
        for c in children(scope.me) {
            if scope.skip(c) || found.contains_key(&c) {
                continue;
            }
            let Some(s) = stat(c).filter(|s| s.ppid == scope.me) else {
                continue;
            };
            let roots = roots.get_or_insert_with(|| {
                let (_quiet, mut all) = sys::roots::quiet();
                all.extend(scope.other_roots.iter().copied());
                all.remove(&scope.root);
                all
            });
            let seen = Seen {
                known_start: self.known.get(&c).copied(),
                root: scope.root,
                links: &self.links,
                roots,
            };
            if adopted(c, &s, &seen, || cookies(c).contains(&self.cookie)) {
                found.insert(c, s);
                if !s.dead() {
                    queue.push(c);
                }
                more = true;
            }
        }
        more
    }

    /// Ends a scan: reaps the dead orphans of this tree, remembers the live
    /// members (and publishes them for the orphan reaper), keeps the links
    /// still in use; returns the live members.
    fn settle(&mut self, found: &HashMap<u32, Stat>, me: u32) -> Vec<Member> {
        let mut members = Vec::new();
        self.known.clear();
        let mut still_used: HashSet<u32> = HashSet::new();
        for (&pid, &s) in found {
            if s.dead() && s.ppid == me {
                reap_verified(pid, s.start);
                continue;
            }
            // A session or group stays linked while a process that is not
            // about to be reaped by us still uses it (so its number cannot be
            // reused).
            still_used.insert(s.session);
            still_used.insert(s.pgrp);
            if !s.dead() {
                self.known.insert(pid, s.start);
                members.push(Member { pid, stat: s });
            }
        }
        self.links.retain(|id| still_used.contains(id));
        if self.orphans.is_some() {
            self.shared_known
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone_from(&self.known);
        }
        members
    }

    /// Sends `sig` to every member outside the root's group (the group
    /// itself is signalled by the caller).
    fn signal_outside(tracer: &Tracer, members: &[Member], root: u32, sig: Signal) {
        for m in members.iter().filter(|m| m.stat.pgrp != root) {
            send_verified(tracer, m.pid, m.stat.start, sig);
        }
    }

    /// Sends the last signal (SIGCONT first for a graceful one) to members
    /// outside the group that have not had it yet.
    ///
    /// After SIGKILL that is every such member. After a graceful signal it
    /// is only the orphans re-parented to corral (their parent died, e.g. of
    /// that signal, right after forking them): a process whose parent still
    /// lives may be what a signal handler started to clean up, and must be
    /// left to finish within the grace, as under a process group.
    fn catch_up(&mut self, members: &[Member], root: u32) {
        let Some(sig) = self.last_signal else { return };
        let new = late_targets(sig, members, root, std::process::id(), &self.reached);
        if sig != Signal::KILL && sig != Signal::CONT {
            Self::signal_outside(&self.tracer, &new, root, Signal::CONT);
        }
        Self::signal_outside(&self.tracer, &new, root, sig);
        self.reached
            .extend(new.iter().map(|m| (m.pid, m.stat.start)));
    }
}

impl Containment for Subreaper {
    fn mechanism(&self) -> Mechanism {
        Mechanism::Subreaper
    }

    fn placement(&mut self) -> io::Result<sys::Placement<'_>> {
        let value = orphans::cookie_value(&self.cookie);
        if self.keeper.is_none() {
            self.keeper = Some(CookieHold::take(
                &self.cookie,
                Mechanism::Subreaper,
                &self.tracer,
                self.farewell,
            ));
        }
        Ok(sys::Placement {
            new_group: true,
            env: vec![(COOKIE_VAR.into(), value)],
            ..sys::Placement::default()
        })
    }

    /// The root is this command's: it cannot fail.
    fn attach(self: Box<Self>, root: &Root) -> Result<Box<dyn Attached>, AttachFailed> {
        let pid = root.id();
        let shared_known = Arc::<Mutex<HashMap<u32, u64>>>::default();
        let orphans = super::orphans::register(
            pid,
            super::orphans::Claim::Tree {
                known: shared_known.clone(),
                cookie: self.cookie.clone(),
            },
        );
        if let Some(e) = live().iter_mut().find(|e| e.0 == self.entry.0) {
            e.1 = Some(pid);
        }
        let Subreaper {
            entry,
            cookie,
            keeper,
            farewell,
            tracer,
        } = *self;
        Ok(Box::new(Tree {
            entry,
            cookie,
            root: pid,
            known: HashMap::new(),
            links: HashSet::new(),
            last_signal: None,
            reached: HashSet::new(),
            shared_known,
            orphans,
            keeper,
            handed: HashMap::new(),
            farewell,
            tracer,
        }))
    }
}

impl Attached for Tree {
    fn mechanism(&self) -> Mechanism {
        Mechanism::Subreaper
    }

    /// The cookie's hold and every member handed to the keeper, and those
    /// handed from now on: SIGKILL at once if this process dies.
    fn terminating(&mut self) {
        self.farewell = crate::spec::Farewell::KILL;
        if let Some(k) = self.keeper.as_mut() {
            k.terminating();
        }
        #[cfg(linux_raw)]
        for r in self.handed.values_mut() {
            r.set_farewell(crate::spec::Farewell::KILL);
        }
    }

    fn signal(&mut self, sig: Signal) -> io::Result<()> {
        let root = self.root;
        let members = self.scan(root);
        if sig != Signal::KILL && sig != Signal::CONT {
            // A stopped member cannot act on the signal until continued:
            // SIGCONT first, as in the process-group tier (a root that died
            // of the signal first could orphan a stopped member's group).
            self.tracer.record(OsOp::TreeContinued {
                via: Mechanism::Subreaper,
                target: root as u64,
            });
            sys::signal_group(root, Signal::CONT)?;
            Self::signal_outside(&self.tracer, &members, root, Signal::CONT);
        }
        self.tracer.record(OsOp::SignalTree {
            via: Mechanism::Subreaper,
            target: root as u64,
            signal: sig,
        });
        // The group first: the same delivery order as the process-group tier.
        sys::signal_group(root, sig)?;
        Self::signal_outside(&self.tracer, &members, root, sig);
        // Then (off the signal's path) what the keeper must kill should
        // this process die before the tree is gone.
        self.hand_to_keeper(&members, root);
        self.last_signal = Some(sig);
        self.reached = members
            .iter()
            .filter(|m| m.stat.pgrp != root)
            .map(|m| (m.pid, m.stat.start))
            .collect();
        Ok(())
    }

    fn members(&mut self) -> io::Result<Vec<u32>> {
        let root = self.root;
        let members = self.scan(root);
        // Whatever appeared outside the group since the last signal (a
        // process that keeps forking, an orphan that just arrived) gets it
        // now: after SIGKILL this is "kill until none is left".
        self.catch_up(&members, root);
        if self.last_signal == Some(Signal::KILL) {
            // The group is pinned by the root; anything that joined it
            // since dies too.
            self.tracer.record(OsOp::KillAgain {
                via: Mechanism::Subreaper,
                target: root as u64,
            });
            let _ = sys::signal_group(root, Signal::KILL);
        }
        self.hand_to_keeper(&members, root);
        let mut pids: Vec<u32> = members.iter().map(|m| m.pid).collect();
        if stat(root).is_some_and(|s| !s.dead()) {
            pids.push(root);
        }
        Ok(pids)
    }

    /// The root's registration (its group), and the tree's cookie.
    fn crash_safety(&self, root: &Root) -> crate::report::CrashSafety {
        let by_root = root.crash_safety();
        match self.keeper.as_ref().and_then(CookieHold::lost) {
            Some(why) if by_root.is_held() => crate::report::CrashSafety::Lost(why),
            _ => by_root,
        }
    }

    /// What the release's last look found is the count of what it left
    /// (one scan, which the hand-over to the keeper needs anyway).
    fn release(mut self: Box<Self>, root: &mut Root) -> super::Released {
        // The keeper lets go of the tree first: what the policy keeps is
        // never killed by it.
        self.keeper = None;
        // A last look: reap dead orphans, and hand what the policy keeps
        // (or what could not be killed) to the keeper. Nothing is
        // signalled from here on. The walk only: the root's group is looked
        // at after the reap, and only if it still exists (with its leader
        // reaped, a group exists only while a member lives, and its id
        // cannot be reused meanwhile), so a run whose tree is gone costs no
        // scan of /proc.
        let mut kept = self.scan_with(self.root, false);
        // And of the members it was handed.
        self.handed.clear();
        keeper::adopt(kept.iter().map(|m| (m.pid, m.stat.start)));
        if let Some(o) = self.orphans.take() {
            o.finish();
        }
        let pid = root.id();
        let res = root.reap();
        self.tracer.record(OsOp::Reaped { pid });
        if sys::group_exists(pid) {
            let listed = sys::group_members(pid).unwrap_or_default();
            // Every run's unreaped root, read after the listing with no
            // spawn in flight: if the group died between the look and the
            // listing, its id (the reaped root's pid) may be a new run's
            // root's already, and its group that run's (issue 37: taken
            // here, that root was handed to the leftover keeper, which
            // reaped it: the other run's release failed with ECHILD).
            let roots = if listed.is_empty() {
                HashSet::new()
            } else {
                sys::roots::quiet().1
            };
            let seen: Vec<u32> = kept.iter().map(|m| m.pid).collect();
            let more: Vec<Member> = group_leftovers(pid, listed, &roots, &seen)
                .into_iter()
                .filter_map(|p| {
                    stat(p)
                        .filter(|s| s.pgrp == pid && !s.dead())
                        .map(|s| Member { pid: p, stat: s })
                })
                .collect();
            keeper::adopt(more.iter().map(|m| (m.pid, m.stat.start)));
            kept.extend(more);
        }
        // Deregistered only after the reap: until then no other command may
        // take the root for an orphan.
        let Tree { entry, tracer, .. } = *self;
        drop(entry);
        tracer.record(OsOp::Released {
            via: Mechanism::Subreaper,
        });
        let live = kept
            .iter()
            .filter(|m| !sys::linux_proc::doomed(m.pid))
            .count();
        super::Released::counted(res, Ok(live))
    }
}

/// Whether the live child `pid` of this process, whose environment carries
/// `cookies`, is a leftover of a finished command of this process
/// (`prefix` is `"<own pid>."`): no live run's root, and some cookie of
/// ours names a run no longer in `live` (read after the cookies).
fn finished_leftover(
    pid: u32,
    cookies: &[String],
    prefix: &str,
    live: &[(u64, Option<u32>)],
) -> bool {
    if live.iter().any(|e| e.1 == Some(pid)) {
        return false;
    }
    cookies.iter().any(|k| {
        k.strip_prefix(prefix)
            .and_then(|n| n.parse::<u64>().ok())
            .is_some_and(|n| !live.iter().any(|e| e.0 == n))
    })
}

/// The process-wide keeper of leftovers of finished commands: reaps them
/// when they exit, never signals them.
mod keeper {
    use super::*;
    use std::time::{Duration, Instant};

    struct Kept {
        pid: u32,
        fd: OwnedFd,
    }

    struct State {
        procs: Vec<Kept>,
        running: bool,
    }

    /// Per process: a fork keeps none of its parent's kept processes and
    /// starts its own thread (`sys::per_process`).
    static STATE: crate::sys::per_process::PerProcess<State> =
        crate::sys::per_process::PerProcess::new(|| State {
            procs: Vec::new(),
            running: false,
        });

    fn state() -> std::sync::MutexGuard<'static, State> {
        STATE.lock()
    }

    /// Starts keeping these processes (pid, start time).
    pub(super) fn adopt(procs: impl Iterator<Item = (u32, u64)>) {
        let mut st = state();
        for (pid, start) in procs {
            if st.procs.iter().any(|k| k.pid == pid) {
                continue;
            }
            if let Some(fd) = open_verified(pid, start) {
                st.procs.push(Kept { pid, fd });
            }
        }
        if !st.procs.is_empty() && !st.running {
            let started = std::thread::Builder::new()
                .name("corral-keeper".into())
                .spawn(run)
                .is_ok();
            st.running = started;
        }
    }

    /// Starts keeping these processes, pinned by the caller.
    fn adopt_pinned(procs: Vec<Kept>) {
        let mut st = state();
        for k in procs {
            if !st.procs.iter().any(|p| p.pid == k.pid) {
                st.procs.push(k);
            }
        }
    }

    /// How long children of ours whose environment reads empty are looked
    /// at again, and how often.
    const UNDECIDED_FOR: Duration = Duration::from_secs(2);
    const UNDECIDED_EVERY: Duration = Duration::from_millis(10);

    /// Live children of ours that carry a cookie of one of our finished
    /// commands: leftovers re-parented to us after their command ended.
    /// Also whether some child could not be told yet: its environment reads
    /// empty, as it does for a moment while a process is in `execve` (the
    /// new address space has no environment yet), so it must be looked at
    /// again (or it stays a zombie until this process exits).
    fn late_orphans(known: &HashSet<u32>) -> (Vec<Kept>, bool) {
        let me = std::process::id();
        let prefix = format!("{me}.");
        let mut undecided = false;
        let mut late = Vec::new();
        for c in children(me) {
            if known.contains(&c) {
                continue;
            }
            // Pinned first: if it has not exited after the reads below,
            // they were its own (the pid was not reused meanwhile; a start
            // time alone is a 10 ms tick, which a reused pid can share).
            let Some(fd) =
                Pid::from_raw(c as i32).and_then(|p| pidfd_open(p, PidfdFlags::empty()).ok())
            else {
                continue;
            };
            if stat(c).is_none_or(|s| s.ppid != me || s.dead()) {
                continue;
            }
            let env = environ(c);
            if exited(&fd) {
                continue;
            }
            if env.is_empty() {
                undecided = true;
                continue;
            }
            // The runs alive now, read after the environment: a run is in
            // before its root exists, so a root whose cookie was read is
            // seen live here (issue 37's soak: a snapshot taken before the
            // listing missed the runs started since, and their roots were
            // kept, then reaped here, as leftovers of finished runs).
            if finished_leftover(c, &cookies_in(&env), &prefix, &live()) {
                late.push(Kept { pid: c, fd });
            }
        }
        (late, undecided)
    }

    fn run() {
        // While some child of ours reads as an empty environment: look
        // again every `UNDECIDED_EVERY` until this time.
        let mut recheck_until: Option<Instant> = None;
        loop {
            let fds: Vec<OwnedFd> = state()
                .procs
                .iter()
                .filter_map(|k| k.fd.try_clone().ok())
                .collect();
            let mut pfds: Vec<PollFd<'_>> =
                fds.iter().map(|f| PollFd::new(f, PollFlags::IN)).collect();
            let ts = if recheck_until.is_some() {
                Timespec {
                    tv_sec: 0,
                    tv_nsec: UNDECIDED_EVERY.as_nanos() as i64,
                }
            } else {
                Timespec {
                    tv_sec: 1,
                    tv_nsec: 0,
                }
            };
            let _ = poll(&mut pfds, Some(&ts));
            let any_exit = pfds.iter().any(|p| !p.revents().is_empty());
            drop(pfds);
            let late = if any_exit || recheck_until.is_some() {
                let known: HashSet<u32> = state().procs.iter().map(|k| k.pid).collect();
                let (late, undecided) = late_orphans(&known);
                let now = Instant::now();
                recheck_until = match recheck_until {
                    _ if !undecided => None,
                    None => Some(now + UNDECIDED_FOR),
                    Some(t) if now >= t => None,
                    keep => keep,
                };
                late
            } else {
                Vec::new()
            };
            let mut st = state();
            st.procs.retain(|k| {
                let opts = WaitIdOptions::EXITED | WaitIdOptions::NOHANG;
                match waitid(WaitId::PidFd(k.fd.as_fd()), opts) {
                    Ok(Some(_)) => false, // reaped
                    Ok(None) => true,     // our child, alive
                    // Not our child: its own parent reaps it once it exits;
                    // keep watching while it lives (it may become ours).
                    Err(_) => !exited(&k.fd),
                }
            });
            drop(st);
            if !late.is_empty() {
                adopt_pinned(late);
            }
            let mut st = state();
            if st.procs.is_empty() && recheck_until.is_none() {
                st.running = false;
                return;
            }
        }
    }

    fn exited(fd: &OwnedFd) -> bool {
        let mut p = [PollFd::new(fd, PollFlags::IN)];
        let ts = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        matches!(poll(&mut p, Some(&ts)), Ok(n) if n > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOT: u32 = 100;
    const ME: u32 = 10;

    /// A leftover of a finished run: a cookie of ours whose run is gone;
    /// never a live run's root, nor a child of a run that is live (its
    /// cookie is in `live`: read after the environment, a run started
    /// since an earlier look is in), nor one that carries only another
    /// process's cookies.
    #[test]
    fn only_the_cookies_of_finished_runs_make_a_leftover() {
        let c = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let live = [(7, Some(200)), (8, None)];
        assert!(finished_leftover(300, &c(&["10.6"]), "10.", &live));
        assert!(!finished_leftover(300, &c(&["10.7"]), "10.", &live));
        assert!(!finished_leftover(300, &c(&["10.8"]), "10.", &live));
        assert!(!finished_leftover(200, &c(&["10.6"]), "10.", &live));
        assert!(!finished_leftover(
            300,
            &c(&["11.6", "10.g6"]),
            "10.",
            &live
        ));
        assert!(finished_leftover(
            300,
            &c(&["11.6", "10.8", "10.5"]),
            "10.",
            &live
        ));
        assert!(!finished_leftover(300, &[], "10.", &live));
    }

    fn st(state: u8, ppid: u32, pgrp: u32, session: u32, start: u64) -> Stat {
        Stat {
            state,
            ppid,
            pgrp,
            session,
            start,
            threads_alive: false,
        }
    }

    #[test]
    fn adoption_rule_table() {
        let links: HashSet<u32> = [300, 400, 500].into_iter().collect();
        // 500: a link whose number is now another run's root (its pid,
        // reused after every process of that group died).
        let roots: HashSet<u32> = [500, 600].into_iter().collect();
        let seen = |known_start| Seen {
            known_start,
            root: ROOT,
            links: &links,
            roots: &roots,
        };
        let alive = |pgrp, session| st(b'S', ME, pgrp, session, 5);
        let zombie = |pgrp, session| st(b'Z', ME, pgrp, session, 5);
        let leader_thread_gone = Stat {
            threads_alive: true,
            ..zombie(9, 9)
        };
        /// (name, pid, stat, remembered start, carries the cookie, adopted)
        type Case = (&'static str, u32, Stat, Option<u64>, bool, bool);
        let cases: &[Case] = &[
            ("seen before", 50, alive(9, 9), Some(5), false, true),
            (
                "a reused pid of one seen",
                50,
                alive(9, 9),
                Some(4),
                false,
                false,
            ),
            ("in the root's group", 50, alive(ROOT, 9), None, false, true),
            (
                "in a session made inside",
                50,
                alive(9, 300),
                None,
                false,
                true,
            ),
            (
                "in a group made inside",
                50,
                alive(400, 9),
                None,
                false,
                true,
            ),
            ("alive with the cookie", 50, alive(9, 9), None, true, true),
            ("alive without", 50, alive(9, 9), None, false, false),
            (
                "the dead leader of a session made inside",
                300,
                zombie(300, 300),
                None,
                false,
                true,
            ),
            ("a dead stranger", 50, zombie(9, 9), None, false, false),
            // Issue 37: another run's root, dead or alive, whose pid (its
            // group id) reused a stale link's number, or that carries the
            // cookie, is never this tree's; nor is a member of its group.
            (
                "another run's dead root on a stale link",
                500,
                zombie(500, 9),
                None,
                false,
                false,
            ),
            (
                "another run's live root on a stale link",
                500,
                alive(500, 9),
                None,
                true,
                false,
            ),
            (
                "another run's root in a session made inside",
                600,
                zombie(600, 300),
                None,
                false,
                false,
            ),
            (
                "a member of another run's group on a stale link",
                50,
                alive(500, 9),
                None,
                false,
                false,
            ),
            // A zombie's environment cannot be read: no cookie counts.
            ("dead, cookie ignored", 50, zombie(9, 9), None, true, false),
            // A zombie leader whose other threads run is alive.
            (
                "threads still run",
                50,
                leader_thread_gone,
                None,
                true,
                true,
            ),
        ];
        for (name, pid, s, known, cookie, want) in cases {
            assert_eq!(adopted(*pid, s, &seen(*known), || *cookie), *want, "{name}");
        }
        // The environment is read only when nothing else decides.
        let read = std::cell::Cell::new(false);
        assert!(adopted(50, &alive(ROOT, 9), &seen(None), || {
            read.set(true);
            false
        }));
        assert!(!read.get());
    }

    /// Issue 37: the root's group after its reap may be another run's
    /// already (its id reused as a new root's pid): nothing of it is taken.
    #[test]
    fn group_leftover_rule_table() {
        let set = |v: &[u32]| v.iter().copied().collect::<HashSet<u32>>();
        // (name, listed, roots, kept, taken)
        type Case = (&'static str, Vec<u32>, HashSet<u32>, Vec<u32>, Vec<u32>);
        let cases: Vec<Case> = vec![
            (
                "the group's members",
                vec![71, 72],
                set(&[9]),
                vec![],
                vec![71, 72],
            ),
            (
                "not the root, not one kept",
                vec![ROOT, 71, 72],
                set(&[]),
                vec![72],
                vec![71],
            ),
            (
                "the id is another run's root now",
                vec![ROOT, 71],
                set(&[ROOT]),
                vec![],
                vec![],
            ),
            ("never a root", vec![71, 9], set(&[9]), vec![], vec![71]),
        ];
        for (name, listed, roots, kept, want) in cases {
            assert_eq!(group_leftovers(ROOT, listed, &roots, &kept), want, "{name}");
        }
    }

    #[test]
    fn late_signal_rule_table() {
        let m = |pid, ppid, pgrp| Member {
            pid,
            stat: st(b'S', ppid, pgrp, 1, u64::from(pid)),
        };
        let in_group = m(51, ROOT, ROOT);
        let child_of_member = m(52, 60, 9);
        let orphan = m(53, ME, 9);
        let reached_one = m(54, ME, 9);
        let members = [in_group, child_of_member, orphan, reached_one];
        let reached: HashSet<(u32, u64)> = [(54, 54)].into_iter().collect();
        // (signal, pids that get it now)
        let cases: &[(Signal, &[u32])] = &[
            // Every member outside the group not yet reached.
            (Signal::KILL, &[52, 53]),
            // Graceful: only the orphans of corral; a process whose parent
            // lives may be a handler's clean-up.
            (Signal::TERM, &[53]),
            (Signal::INT, &[53]),
        ];
        for (sig, want) in cases {
            let got: Vec<u32> = late_targets(*sig, &members, ROOT, ME, &reached)
                .iter()
                .map(|m| m.pid)
                .collect();
            assert_eq!(got, *want, "{sig:?}");
        }
        // A reused pid (another start time) is not the one reached.
        let reborn = Member {
            pid: 54,
            stat: st(b'S', ME, 9, 1, 99),
        };
        let got = late_targets(Signal::KILL, &[reborn], ROOT, ME, &reached);
        assert_eq!(got.len(), 1);
    }

    #[test]
    fn own_stat_is_readable() {
        let s = stat(std::process::id()).unwrap();
        assert!(!s.dead());
        assert!(s.start > 0);
    }
}
