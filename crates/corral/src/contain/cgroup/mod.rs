//! cgroup v2 containment (Linux).
//!
//! Each command gets a fresh cgroup `corral-<corral pid>-<token>-r<n>`
//! (`-<n>` in a one-shot process) under corral's own cgroup, where `<token>`
//! is drawn at random once per process: the name is unique even between
//! corrals that share a parent cgroup from different PID namespaces (where
//! both may be pid 1). No descendant can
//! exist outside it unless it moves itself out (below), so the kill never
//! races a half-placed child. A descendant that calls `setsid()` or
//! double-forks stays inside. Placement:
//!
//! * Born in it: `clone3(CLONE_INTO_CGROUP | CLONE_VFORK | CLONE_VM)` on
//!   Linux 5.7+ (x86_64, aarch64), see `sys/linux_spawn/`; the spawn costs
//!   what a vfork costs, whatever the size of the parent.
//! * Fallback: std's fork path with a pre-exec write to `cgroup.procs` (the
//!   child moves itself before it execs, while the parent is still inside
//!   `fork`). Used when clone3 is refused (old kernel, seccomp; probed once
//!   per process), and always when per-command groups of the v1
//!   `pids`/`memory` hierarchies are in use (limits on a hybrid system):
//!   clone3 can only place the child in a v2 cgroup, and writing its pid to
//!   the v1 groups from the parent after the clone would let it run (and
//!   fork) outside them first.
//!
//! * Kill: `cgroup.kill` (Linux 5.14+); older kernels: freeze, SIGKILL every
//!   member, thaw. `cgroup.kill` skips a process whose thread-group leader
//!   has exited while other threads run (seen on 6.18): members still listed
//!   in `cgroup.procs` a few milliseconds after the kill are sent SIGKILL
//!   once more, each through a pidfd whose cgroup membership is checked.
//! * Graceful signal: to the process group (kept for delivery order) and to
//!   every member of the cgroup that left the group, each through a pidfd
//!   whose cgroup membership is checked after it was opened (reuse-safe).
//! * Empty: `cgroup.events` says `populated 0`; it is pollable (POLLPRI), and
//!   the lifecycle also checks on a short timer because notifications are
//!   rate limited.
//! * Release: members left by the leftovers policy are moved to corral's own
//!   cgroup, then the directory is removed.
//! * Ownership: an exclusive `flock` held for the owner's life. A process
//!   that runs many commands holds one for all its cgroups, on its owner
//!   record `corral-owner-<pid>-<token>` (a directory beside them, made and
//!   locked before the first; its keeper holds a copy until it is done), so
//!   a running command costs no descriptor of its cgroup: the directory's
//!   is opened for the spawn (clone3) and closed at attach, and signals go
//!   by path (the path is this process's own, and no one else removes it or
//!   makes it again while the lock is held). A one-shot process locks its
//!   cgroup's own directory from just after `mkdir` until it is gone. The
//!   first cgroup a corral process makes is preceded by a cleanup of its
//!   siblings: a cgroup of these forms whose lock (its record's, or its
//!   own) can be taken is abandoned, so what is left in it is killed and
//!   it is removed (and a free record once none of its cgroups is left). A
//!   held lock, a missing owner record, another name form (an older
//!   corral), or a file system without flock means "in doubt": nothing is
//!   signalled or removed. No pid, so no PID namespace and no pid reuse,
//!   takes part in the decision (see `owner`).
//! * Pool: a run without limits borrows an empty cgroup that an earlier
//!   run of this process gave back, so the hot path has no `mkdir`/`rmdir`.
//!   A cgroup goes back only when nothing can leak from its run into the
//!   next: no limit was set (a limited run's cgroup and v1 groups are always
//!   removed), no v2 peak is accounted (`memory.peak`/`pids.peak` cannot be
//!   read per run; CPU time is reported as a difference from the borrow),
//!   the root exited by itself and nobody wrote `cgroup.kill` there (on
//!   Linux 6.18 a child later cloned into such a cgroup is killed at birth,
//!   and no file of the cgroup shows it: corral's own writes are known, any
//!   other is seen by an inotify watch on the file, read at each borrow;
//!   without the watch nothing is pooled), it held no kept member, has no nested cgroup, reads
//!   `populated 0` and not frozen, and the keeper holds it. A borrow reads
//!   `populated 0` again; one that is not empty is retired, never used.
//!   While pooled the directory stays owned (the owner record's lock: no
//!   other corral may take it) and keeps its keeper registration (removed
//!   if corral dies); at
//!   most [`POOL_MAX`](pool::POOL_MAX). `corral::process_wide::release_cgroup_pool` removes them. A
//!   one-shot process (`corral::process_wide::one_shot_process`, what `corral run`
//!   declares) pools nothing and sets no watch: its run's cgroup is removed
//!   at release, and its exit does not wait for the watch's teardown.
//! * Delegated subtrees: corral's own cgroup is used when it is delegated
//!   to this user, else its parent when that is (the runs' cgroups beside
//!   corral's); a limit's controllers are enabled there by moving corral
//!   into a shared leaf (see `delegated`).
//! * Migration: a member with write access to an ancestor's `cgroup.procs`
//!   (root, or the owner of a delegated subtree) can move itself out; no
//!   cgroup mechanism prevents that. One that stays in the root's process
//!   group is still found (a scan of the group once the cgroup is empty) and
//!   killed (SIGKILL to the pinned group after `cgroup.kill`); one that also
//!   leaves the group escapes.

mod delegated;
mod error;
mod files;
mod hierarchy;
mod limits;
mod members;
mod owner;
mod pool;

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::PathBuf;
use std::time::Instant;

use crate::contain::{AttachFailed, Attached, Containment, Limits, Mechanism, OsOp, Tracer};
use crate::report::{LimitHit, Usage};
use crate::sys::{self, Root};
use crate::Signal;

pub(crate) use error::CgroupError;
use files::{CgroupFile, Controller, Enabled, Events};
pub(crate) use hierarchy::{detect, Hierarchy};
use hierarchy::{subtree_controllers, subtree_controllers_now};
use owner::{make_dir, remove_stale, STALE};
pub(crate) use pool::drain_pool;
use pool::{cpu_usec, pool, KillWatch, Slot};

/// What `release` does with the run's cgroup, by the one read of
/// `cgroup.events` it makes (`None`: unreadable).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AtRelease {
    /// Members are left (kept by the leftovers policy, or unkillable), or
    /// it cannot be known: they are moved to corral's own cgroup so that
    /// the directory can be removed, and it is removed.
    MoveOut,
    /// Empty: it may go back to the pool, if also not frozen (`thawed`)
    /// and the give-back rule agrees (`pool::give_back_rule`); else removed.
    Empty { thawed: bool },
}

/// The release rule (see [`AtRelease`]).
fn at_release(events: Option<Events>) -> AtRelease {
    match events {
        Some(e) if !e.populated => AtRelease::Empty { thawed: !e.frozen },
        _ => AtRelease::MoveOut,
    }
}

/// A v1 group made for one command.
struct V1Group {
    controller: Controller,
    dir: PathBuf,
    /// Its `cgroup.procs`, for the child to write itself in before exec;
    /// closed at attach.
    procs: Option<File>,
}

/// A run's cgroup before its root is attached. Dropped so (the spawn
/// failed), whatever is in it is killed and it is removed. The cgroup is
/// there until `attach` moves it into the [`Held`] tree (an `Option` only
/// so that it can be moved out of a type with a `Drop`).
pub(crate) struct Unattached(Option<Cgroup>);

/// The attached tree: the cgroup, and the root's process group (pinned by
/// the unreaped root until `release`).
struct Held {
    cg: Cgroup,
    pgid: u32,
    /// Prompt reaping of the tree's orphans (subreaper processes only).
    orphans: Option<crate::contain::orphans::Registration>,
}

/// What a run's cgroup keeps from the tree's SIGKILL on.
struct Killed {
    /// When SIGKILL was sent to the tree.
    at: Instant,
    /// Members already sent a SIGKILL of their own after that (a few at
    /// most: a list, not a set).
    stragglers: Vec<u32>,
    /// The processes of the root's group on the machine right after the
    /// SIGKILL (`None` until that look): every migrant there will be.
    migrants: Option<Vec<u32>>,
}

/// A run's cgroup and what it learned (see [`Unattached`] and [`Held`]).
pub(crate) struct Cgroup {
    /// The cgroup's path, shared with its slot (one allocation a run); its
    /// parent is the parent cgroup the run's cgroups are made in.
    dir: std::sync::Arc<std::path::Path>,
    /// The directory's descriptors; `None` once it went back to the pool.
    slot: Option<Slot>,
    /// CPU time the cgroup had used when this run borrowed it (zero for a
    /// new one): usage is reported as the difference.
    cpu_base: (u64, u64),
    /// Whether the v2 memory / pids controllers are enabled for our cgroups
    /// (their accounting files exist then).
    v2: Enabled,
    /// What the tree's SIGKILL started (`None` before it: a live run keeps
    /// one pointer for it).
    killed: Option<Box<Killed>>,
    tracer: Tracer,
    /// What only a run with limits has (`None` for one without: a live
    /// run keeps one pointer for it).
    limited: Option<Box<Limited>>,
}

/// The limits of a run that has some, and what they need.
#[derive(Default)]
struct Limited {
    limits: Limits,
    v1: Vec<V1Group>,
    /// The v2 `cgroup.procs`, opened only when v1 groups are used too (the
    /// child then writes itself into each before exec).
    v2_procs: Option<File>,
    /// The run's claim on controllers corral enabled in the parent
    /// (dropped after the cgroup is gone: the last one undoes them).
    leaf_hold: Option<delegated::Hold>,
}

impl Cgroup {
    /// Creates the per-command cgroup (and v1 groups for limits). Fails if
    /// the hierarchy is not writable or a limit cannot be had.
    pub(crate) fn create(
        h: &Hierarchy,
        limits: Limits,
        tracer: Tracer,
        farewell: crate::spec::Farewell,
    ) -> Result<Unattached, CgroupError> {
        #[cfg(not(linux_raw))]
        let _ = farewell;
        STALE.call_once(|| {
            remove_stale(h);
            delegated::tidy(&h.own_v2);
        });
        // Controllers a limit needs, enabled in the parent (corral moves
        // itself aside if it stands in the way: see `delegated`).
        let want = delegated::wanted(limits);
        let leaf_hold = if want.is_empty() {
            None
        } else {
            delegated::prepare(&h.own_v2, &want)?
        };
        let v2 = match leaf_hold {
            None => subtree_controllers(&h.own_v2),
            // Just enabled, maybe: read again.
            Some(_) => subtree_controllers_now(&h.own_v2),
        };
        let poolable = Self::poolable(limits, v2);
        if leaf_hold.is_none() && poolable {
            #[cfg_attr(not(linux_raw), allow(unused_mut))]
            if let Some(mut slot) = Self::borrow() {
                // Held by the keeper with the farewell of the run that made
                // it: registered again with this run's (the new
                // registration first, so the cgroup is never unheld).
                #[cfg(linux_raw)]
                if slot
                    .keeper
                    .as_ref()
                    .is_some_and(|r| !r.has_farewell(farewell))
                {
                    let name = slot.dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
                    let name = name.to_owned();
                    slot.keeper = hold_with_keeper(&mut slot, &h.own_v2, &name, farewell);
                }
                let cpu_base = cpu_usec(&slot);
                slot.lend();
                return Ok(Unattached(Some(Self::assemble(
                    slot, cpu_base, limits, v2, tracer, None,
                ))));
            }
        }
        let (name, dir, locked) = make_dir(&h.own_v2, crate::contain::one_shot())?;
        // Watched from before the command runs, if it may be pooled.
        let (watch, epoch) = if poolable {
            let mut pool = pool();
            let epoch = pool.epoch;
            (KillWatch::add(&mut pool, &dir), epoch)
        } else {
            (None, 0)
        };
        let slot = Slot::new(dir, locked, watch, epoch);
        let mut cg = Self::assemble(slot, (0, 0), limits, v2, tracer, leaf_hold);
        // Crash safety: if this process dies before the run ends, the keeper
        // kills the cgroup and removes it. Without it (no clone3, too many
        // runs) the run is only cleaned up by the next corral's stale pass.
        #[cfg(linux_raw)]
        if let Some(slot) = cg.slot.as_mut() {
            slot.keeper = hold_with_keeper(slot, &h.own_v2, &name, farewell);
        }
        if let Err(e) = cg.apply_limits(h, &name) {
            cg.remove_dirs();
            return Err(e);
        }
        Ok(Unattached(Some(cg)))
    }

    /// A run's `Cgroup` in `slot` (new, or borrowed from the pool with
    /// `cpu_base` already used), below `parent`; `v2` says whether the v2
    /// memory and pids controllers are enabled for it.
    fn assemble(
        slot: Slot,
        cpu_base: (u64, u64),
        limits: Limits,
        v2: Enabled,
        tracer: Tracer,
        leaf_hold: Option<delegated::Hold>,
    ) -> Cgroup {
        let limited = (limits.any() || leaf_hold.is_some()).then(|| {
            Box::new(Limited {
                limits,
                leaf_hold,
                ..Limited::default()
            })
        });
        Cgroup {
            dir: slot.dir.clone(),
            slot: Some(slot),
            cpu_base,
            v2,
            killed: None,
            tracer,
            limited,
        }
    }

    /// The limits asked for (none for most runs).
    fn limits(&self) -> Limits {
        self.limited
            .as_ref()
            .map_or_else(Limits::default, |l| l.limits)
    }

    /// The run's v1 groups (limits on a hybrid host).
    fn v1(&self) -> &[V1Group] {
        self.limited.as_ref().map_or(&[], |l| &l.v1)
    }
}

/// Registers the cgroup in `slot` (named `name` below `parent`) with the
/// crash-safety keeper, and with it, once per keeper, this process's owner
/// record (for an owner-locked cgroup): the keeper holds the owner's lock
/// until it has killed and removed what it holds, so no other corral's
/// stale pass takes those cgroups for abandoned while the keeper gives them
/// their farewell. `None`: not held (see [`Attached::crash_safety`]).
#[cfg(linux_raw)]
fn hold_with_keeper(
    slot: &mut Slot,
    parent: &std::path::Path,
    name: &str,
    farewell: crate::spec::Farewell,
) -> Option<pool::KeeperReg> {
    use crate::sys::linux_spawn::keeper::register;
    let self_locked = slot.self_locked();
    let dir = slot.dir_fd().ok()?;
    if self_locked {
        return register(dir, parent, name, farewell, None).ok();
    }
    owner::with_owner(parent, |owner, lock| {
        register(dir, parent, name, farewell, Some((owner, lock)))
    })
    .ok()?
    .ok()
}

impl Cgroup {
    /// The parent cgroup the run's cgroup was made in (its directory's
    /// parent: the runs' cgroups are made right below it).
    pub(super) fn parent(&self) -> &std::path::Path {
        self.dir.parent().unwrap_or(&self.dir)
    }

    /// Where the root is born (see [`Containment::placement`]).
    fn placement(&mut self) -> io::Result<sys::Placement<'_>> {
        // Only v2: the spawn opens `cgroup.procs` through the directory if
        // it cannot be born there (no clone3). With v1 groups, every
        // `cgroup.procs` is written by the child before exec.
        let mut procs = Vec::new();
        if let Some(l) = self.limited.as_deref_mut().filter(|l| !l.v1.is_empty()) {
            if l.v2_procs.is_none() {
                l.v2_procs = Some(
                    OpenOptions::new()
                        .write(true)
                        .open(CgroupFile::Procs.path(&self.dir))?,
                );
            }
        }
        if let Some(l) = self.limited.as_deref() {
            procs.extend(l.v2_procs.as_ref().map(AsFd::as_fd));
            procs.extend(
                l.v1.iter()
                    .filter_map(|g| g.procs.as_ref().map(AsFd::as_fd)),
            );
        }
        let slot = self
            .slot
            .as_mut()
            .ok_or_else(|| io::Error::other("cgroup already released"))?;
        // Born inside with clone3 where only v2 is used: clone3 cannot
        // enter v1 groups (see the module documentation), so with those
        // the child writes itself into every `cgroup.procs` before exec.
        let cgroup_dir = match self.limited.as_ref().is_none_or(|l| l.v1.is_empty()) {
            true => Some(slot.dir_fd()?),
            false => None,
        };
        Ok(sys::Placement {
            new_group: true,
            cgroup_dir,
            cgroup_procs: procs,
            cgroup_path: Some(&self.dir),
            env: Vec::new(),
        })
    }
}

impl Containment for Unattached {
    fn mechanism(&self) -> Mechanism {
        Mechanism::Cgroup
    }

    fn placement(&mut self) -> io::Result<sys::Placement<'_>> {
        match self.0.as_mut() {
            Some(cg) => cg.placement(),
            None => Err(io::Error::other("cgroup already attached")),
        }
    }

    /// The root was born in the cgroup (or moved itself there before its
    /// exec): it cannot fail.
    fn attach(mut self: Box<Self>, root: &Root) -> Result<Box<dyn Attached>, AttachFailed> {
        let Some(cg) = self.0.take() else {
            // Not reached: only `attach` takes the cgroup, and it consumes
            // this.
            return Err(AttachFailed::holding_nothing(
                io::Error::other("cgroup already attached"),
                Mechanism::Cgroup,
                Tracer::default(),
            ));
        };
        let mut cg = cg;
        // The spawn is done: the descriptors it needed are closed (a run
        // holds none of its cgroup's while it runs, but a self-locked
        // cgroup's own lock).
        if let Some(slot) = cg.slot.as_mut() {
            slot.unpin();
        }
        if let Some(l) = cg.limited.as_deref_mut() {
            l.v2_procs = None;
            for g in &mut l.v1 {
                g.procs = None;
            }
        }
        let name = cg.dir.file_name().map(|n| n.to_string_lossy().into_owned());
        let orphans = name.and_then(|n| {
            crate::contain::orphans::register(root.id(), crate::contain::orphans::Claim::Cgroup(n))
        });
        Ok(Box::new(Held {
            cg,
            pgid: root.id(),
            orphans,
        }))
    }
}

impl Attached for Held {
    fn mechanism(&self) -> Mechanism {
        Mechanism::Cgroup
    }

    fn signal(&mut self, sig: Signal) -> io::Result<()> {
        let (cg, pgid) = (&mut self.cg, self.pgid);
        // The directory's inode names the identity in the record only: no
        // `stat` on the kill path of a run nobody traces.
        let inode = if cg.tracer.enabled() {
            fs::metadata(&cg.dir)
                .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
                .unwrap_or(0)
        } else {
            0
        };
        if sig != Signal::KILL && sig != Signal::CONT {
            // SIGCONT first (a stopped member can then act on the signal),
            // as in the process-group tier.
            cg.tracer.record(OsOp::TreeContinued {
                via: Mechanism::Cgroup,
                target: inode,
            });
            sys::signal_group(pgid, Signal::CONT)?;
            cg.signal_members(Signal::CONT, Some(pgid))?;
        }
        cg.tracer.record(OsOp::SignalTree {
            via: Mechanism::Cgroup,
            target: inode,
            signal: sig,
        });
        if sig == Signal::KILL {
            cg.killed_now();
            // The root's process group first (pinned by the unreaped root):
            // one kill(2) starts the usual tree dying at once, as the
            // `killpg` of a plain runner would, while `cgroup.kill` (a
            // path's lookup and a walk of the cgroup under its lock) follows
            // for every member that left the group. The group kill also
            // reaches a member that moved itself out of the cgroup (root,
            // or write access to an ancestor's cgroup.procs) but stayed in
            // the group.
            let _ = sys::signal_group(pgid, Signal::KILL);
            let res = cg.kill_all();
            // The look for migrants, made now rather than once the cgroup
            // is empty: from here on no process can join the group outside
            // the cgroup (each one in either has SIGKILL pending, and a
            // fork racing a group signal either gets it or fails), so the
            // candidates found now are all there will be, and the /proc
            // pass runs while the tree dies instead of after it.
            if let Some(k) = cg.killed.as_mut().filter(|k| k.migrants.is_none()) {
                k.migrants = Some(Cgroup::migrant_candidates(pgid));
            }
            return res;
        }
        // The group first (delivery order as with a process group), then
        // every member that left the group.
        sys::signal_group(pgid, sig)?;
        cg.signal_members(sig, Some(pgid))?;
        Ok(())
    }

    /// The look before a deadline's SIGKILL reads `cgroup.events` and
    /// lists the cgroup (a path lookup each in the cgroup file system).
    fn warms_up(&self) -> bool {
        true
    }

    fn warm_up(&mut self) {
        if self.cg.populated().unwrap_or(false) {
            let _ = self.cg.all_procs();
        }
    }

    /// The keeper kills the cgroup at once if this process dies from now
    /// on.
    fn terminating(&mut self) {
        #[cfg(linux_raw)]
        if let Some(k) = self.cg.slot.as_mut().and_then(|s| s.keeper.as_mut()) {
            k.set_farewell(crate::spec::Farewell::KILL);
        }
    }

    fn members(&mut self) -> io::Result<Vec<u32>> {
        if !self.cg.populated()? {
            // The cgroup is empty. Before that is taken for "the tree is
            // gone", one scan for members of the root's process group that
            // live outside it: they left the cgroup by migration (see
            // `migrated`). Only here, so a run pays for it once, when its
            // tree seems gone, and not on every check; after a SIGKILL, the
            // candidates listed right after it are looked at again instead
            // (see `signal`).
            let migrants = self.cg.killed.as_ref().and_then(|k| k.migrants.as_ref());
            return Ok(match migrants {
                Some(c) => Cgroup::migrated_of(self.pgid, c),
                None => Cgroup::migrated(self.pgid),
            });
        }
        let pids = self.cg.all_procs();
        self.cg.kill_stragglers(&pids);
        Ok(pids)
    }

    /// The cgroup's processes only: what the release moves out and counts
    /// as kept. An empty cgroup is answered without the scan for
    /// migrants that `members` makes (a clean exit whose leftovers are
    /// kept neither counts nor touches them).
    fn leftovers(&mut self) -> io::Result<Vec<u32>> {
        if !self.cg.populated()? {
            return Ok(Vec::new());
        }
        Ok(self.cg.all_procs())
    }

    #[cfg(unix)]
    fn wake_fd(&self) -> Option<(BorrowedFd<'_>, crate::contain::WakeOn)> {
        let slot = self.cg.slot.as_ref()?;
        Some((
            slot.events().ok()?.as_fd(),
            crate::contain::WakeOn::Priority,
        ))
    }

    /// Crash-safe when the keeper holds the cgroup (it kills and removes
    /// it if this process dies).
    fn crash_safety(&self, root: &Root) -> crate::report::CrashSafety {
        let keeper = self.cg.slot.as_ref().and_then(|s| s.keeper.as_ref());
        #[cfg(not(linux_raw))]
        let _ = root;
        // Once the run ended, a stopped keeper counts as lost too.
        #[cfg(linux_raw)]
        if keeper.is_some_and(|k| {
            if root.exit_seen() {
                !k.is_live_and_running()
            } else {
                !k.is_live()
            }
        }) {
            return crate::report::CrashSafety::Lost(
                "the crash-safety keeper died or was stopped (SIGSTOP) during the run; \
                 the tree would have \
                 outlived corral's own death (the next corral removes the cgroup)"
                    .into(),
            );
        }
        if keeper.is_some() {
            crate::report::CrashSafety::Held
        } else {
            crate::report::CrashSafety::Lost(
                "the crash-safety keeper does not hold the cgroup (it could not be started, \
                 or holds as many runs as it can); the tree would outlive corral's own death \
                 (the next corral removes the cgroup)"
                    .into(),
            )
        }
    }

    fn usage(&self) -> Option<(Usage, Vec<LimitHit>)> {
        Some(self.cg.usage_now())
    }

    /// What is left is counted before it is moved out (without the scan
    /// for migrated members: whatever the policy keeps is left alone
    /// anyway, and a clean run must not pay for a scan of /proc).
    fn release(self: Box<Self>, root: &mut Root) -> crate::contain::Released {
        let Held {
            cg: mut this,
            orphans,
            ..
        } = *self;
        // Only a cgroup that held no kept member goes back to the pool. One
        // read: an empty cgroup stays empty unless someone outside the tree
        // moves a process in, which the next borrow's own read would see.
        let events = match &this.slot {
            // Kept open from here: if the cgroup goes back to the pool, the
            // next borrow's check reads through it (and closes it).
            Some(s) => s.read_events().ok(),
            None => Some(Events::default()),
        };
        let plan = at_release(events);
        let clean_exit = matches!(root.peek_exit(), Ok(Some(crate::RootStatus::Exited(_))));
        let pid = root.id();
        let mut kept = Ok(0);
        // Kept (or unkillable) members leave the per-command cgroup so that
        // it can be removed; nothing is signalled from here on.
        if plan == AtRelease::MoveOut {
            kept = this.populated().map(|populated| {
                let left = if populated {
                    this.all_procs()
                } else {
                    Vec::new()
                };
                left.into_iter()
                    .filter(|&p| p != pid && !sys::linux_proc::doomed(p))
                    .count()
            });
            this.move_out();
        }
        if let Some(o) = orphans {
            o.finish();
        }
        let res = root.reap();
        this.tracer.record(OsOp::Reaped { pid });
        let pooled = match plan {
            AtRelease::Empty { thawed } => this.give_back(clean_exit, thawed),
            AtRelease::MoveOut => false,
        };
        if pooled {
            this.tracer.record(OsOp::Released {
                via: Mechanism::Cgroup,
            });
            return crate::contain::Released::counted(res, kept);
        }
        this.remove_dirs();
        this.tracer.record(OsOp::Released {
            via: Mechanism::Cgroup,
        });
        let res = if this.dir.exists() {
            Err(io::Error::other(format!(
                "could not remove {}",
                this.dir.display()
            )))
        } else {
            res
        };
        crate::contain::Released::counted(res, kept)
    }
}

impl Drop for Unattached {
    /// A cgroup never attached (the spawn failed, or it could not be set
    /// up): nothing ran in it. An attached one is let go only by
    /// [`Attached::release`], which consumes it.
    fn drop(&mut self) {
        if let Some(mut cg) = self.0.take() {
            let _ = cg.kill_all();
            cg.remove_dirs();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What one live run of this tier keeps in memory, besides its `Life`
    /// (docs/BENCHMARKS.md, figure 5): the held tree is boxed once per run,
    /// so each byte here is 10 KB at 10,000 runs.
    #[test]
    fn a_live_runs_cgroup_state_stays_small() {
        use std::mem::size_of;
        let held = size_of::<super::Held>();
        eprintln!(
            "Held {held} Cgroup {} Slot {}",
            size_of::<super::Cgroup>(),
            size_of::<super::pool::Slot>()
        );
        assert!(held <= 192, "Held grew to {held} bytes");
    }

    #[test]
    fn release_rule_table() {
        let ev = |populated, frozen| Some(Events { populated, frozen });
        let cases = [
            (ev(false, false), AtRelease::Empty { thawed: true }),
            (ev(false, true), AtRelease::Empty { thawed: false }),
            (ev(true, false), AtRelease::MoveOut),
            (ev(true, true), AtRelease::MoveOut),
            // Unreadable: members may be left; nothing is pooled.
            (None, AtRelease::MoveOut),
        ];
        for (events, want) in cases {
            assert_eq!(at_release(events), want, "{events:?}");
        }
    }
}
