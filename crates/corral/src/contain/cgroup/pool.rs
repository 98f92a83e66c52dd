//! The pool of empty cgroups a run without limits borrows.

use std::fs::{self, File};
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::files::{kept, kv, remove_tree, CgroupFile, Enabled, Events};
use super::Cgroup;
use crate::contain::{Limits, OsOp};

#[cfg(linux_raw)]
pub(super) type KeeperReg = crate::sys::linux_spawn::keeper::Registration;
#[cfg(not(linux_raw))]
pub(super) type KeeperReg = ();

/// What a cgroup directory keeps across runs when it goes back to the pool:
/// its open descriptors and its registration with the keeper. A live run's
/// slot holds no descriptor but, in a self-locked cgroup, the directory's
/// (its ownership lock): the directory's is opened for the spawn and closed
/// at attach ([`Slot::unpin`]), the kept files are let go when a run
/// borrows the slot ([`Slot::lend`]), and `cgroup.events` is kept only once
/// a termination waits on it.
pub(super) struct Slot {
    pub(super) dir: std::sync::Arc<Path>,
    /// The directory itself, for clone3(CLONE_INTO_CGROUP) and the
    /// keeper's registration: opened when first needed and closed at
    /// attach, unless `self_locked`.
    dir_fd: Option<File>,
    /// `dir_fd` holds the cgroup's ownership lock (a one-shot process's
    /// cgroup, see `owner::make_dir`): it is kept until the directory is
    /// removed. Otherwise this process's owner record holds it.
    self_locked: bool,
    /// `cgroup.events`, opened when a termination waits on it (POLLPRI)
    /// and kept from then on (closed by the next borrow if the cgroup is
    /// pooled); other reads open it for the read ([`Slot::read_events`]).
    /// So a running command costs its cgroup no descriptor until a
    /// termination. (`cgroup.procs` is opened only by a spawn that is not
    /// born in the cgroup: see `placement`.)
    pub(super) events: OnceLock<File>,
    /// Registration with the crash-safety keeper (dropped: unregistered).
    pub(super) keeper: Option<KeeperReg>,
    /// The inotify watch on this cgroup's `cgroup.kill` (see
    /// [`KillWatch`]); a cgroup without one is never pooled.
    pub(super) watch: Option<i32>,
    /// The pool's epoch when this cgroup was made or borrowed: it goes back
    /// only if no event was lost since ([`Pool::epoch`]).
    pub(super) epoch: u64,
}

impl Slot {
    /// A new cgroup's slot: its directory and, if self-locked, its locked
    /// descriptor, its watch (if it may be pooled) and the pool's epoch
    /// then.
    pub(super) fn new(dir: PathBuf, locked: Option<File>, watch: Option<i32>, epoch: u64) -> Slot {
        Slot {
            dir: dir.into(),
            self_locked: locked.is_some(),
            dir_fd: locked,
            events: OnceLock::new(),
            keeper: None,
            watch,
            epoch,
        }
    }

    /// Whether the directory's own descriptor holds the cgroup's lock.
    #[cfg_attr(not(linux_raw), allow(dead_code))]
    pub(super) fn self_locked(&self) -> bool {
        self.self_locked
    }

    /// The directory's descriptor, opened now if it is not open.
    pub(super) fn dir_fd(&mut self) -> io::Result<BorrowedFd<'_>> {
        if self.dir_fd.is_none() {
            self.dir_fd = Some(kept(File::open(&self.dir)?)?);
        }
        match &self.dir_fd {
            Some(f) => Ok(f.as_fd()),
            None => Err(io::ErrorKind::NotFound.into()),
        }
    }

    /// The spawn is done: the directory's descriptor is closed, unless it
    /// holds the cgroup's own lock. Signals, reads and the removal go by
    /// path (the path is this process's own: see `owner::with_owner`).
    pub(super) fn unpin(&mut self) {
        if !self.self_locked {
            self.dir_fd = None;
        }
    }

    /// A run borrows this pooled slot: the files kept while it waited are
    /// closed (each was read by the borrow), so that the run holds no
    /// descriptor of its cgroup while it runs.
    pub(super) fn lend(&mut self) {
        self.events = OnceLock::new();
    }

    /// Reads one of the slot's kept files from its start.
    pub(super) fn read_kept(&self, file: CgroupFile) -> Option<String> {
        let f = File::open(file.path(&self.dir)).ok()?;
        let mut buf = [0u8; 1024];
        let n = f.read_at(&mut buf, 0).ok()?;
        Some(String::from_utf8_lossy(&buf[..n]).into_owned())
    }

    /// `cgroup.events`, through the kept descriptor if there is one.
    pub(super) fn read_events(&self) -> io::Result<Events> {
        match self.events.get() {
            Some(f) => events_of(f),
            None => events_of(&File::open(CgroupFile::Events.path(&self.dir))?),
        }
    }

    /// `cgroup.events`, opened now and kept if it is not yet.
    pub(super) fn events(&self) -> io::Result<&File> {
        if let Some(f) = self.events.get() {
            return Ok(f);
        }
        let f = kept(File::open(CgroupFile::Events.path(&self.dir))?)?;
        Ok(self.events.get_or_init(|| f))
    }

    pub(super) fn cpu_stat(&self) -> String {
        self.read_kept(CgroupFile::CpuStat).unwrap_or_default()
    }
}

/// Empty cgroups of this process, made by earlier runs and proven empty
/// when they came back; a run without limits borrows one instead of making
/// and removing a directory (see the module docs, "Pool").
///
/// Per process (a fork never waits for a lock its parent held at the fork,
/// see `sys::per_process`): a fork starts with an empty pool of its own,
/// whose epochs (the pid in the high half) no cgroup of the parent's runs
/// carries, so none is ever pooled in the fork.
pub(super) static POOL: crate::sys::per_process::PerProcess<Pool> =
    crate::sys::per_process::PerProcess::new(|| Pool {
        slots: Vec::new(),
        retired: Vec::new(),
        killed: std::collections::BTreeSet::new(),
        epoch: u64::from(std::process::id()) << 32,
        owner: std::process::id(),
        inotify: None,
    });

pub(super) struct Pool {
    pub(super) slots: Vec<Slot>,
    /// Retired cgroups that could not be removed yet (something outside
    /// corral moved a process in while they waited). This process's owner
    /// record stays locked, so no other corral's stale pass kills what is
    /// in them while this process lives; removal is tried again at the next
    /// borrow and by [`drain_pool`].
    pub(super) retired: Vec<Slot>,
    /// Watches whose `cgroup.kill` (or another interface file that a later
    /// run would see: see [`harmless_write`]) was written, read from
    /// [`KillWatch`] but not yet acted on: such a cgroup is never borrowed
    /// or given back. An entry goes when its watch is removed (`IN_IGNORED`).
    pub(super) killed: std::collections::BTreeSet<i32>,
    /// Raised when the watch's event queue overflowed: a write may have
    /// been missed, so every cgroup made or borrowed before is distrusted.
    pub(super) epoch: u64,
    /// The process these belong to: a child forked without exec inherits
    /// a copy of this state, but the cgroups (and the inotify queue, whose
    /// events a read would take from the parent) stay the parent's.
    pub(super) owner: u32,
    /// The [`KillWatch`] instance of `owner`.
    pub(super) inotify: Option<std::os::fd::OwnedFd>,
}

impl Pool {
    /// Forgets what this process inherited through a fork: the pooled
    /// cgroups are the parent's (their descriptors are closed here, nothing
    /// is removed; a keeper registration is not the child's to end), and
    /// so is the inotify queue. Cgroups in use by the parent's runs at the
    /// fork are distrusted (a new epoch).
    pub(super) fn adopt(&mut self) -> &mut Pool {
        let me = std::process::id();
        if self.owner != me {
            self.slots.clear();
            self.retired.clear();
            self.killed.clear();
            self.inotify = None;
            self.epoch += 1;
            self.owner = me;
        }
        self
    }
}

/// Writes to the `cgroup.kill` of cgroups that may be pooled, seen through
/// one inotify instance per process (`IN_MODIFY` on the cgroup's directory
/// naming `cgroup.kill`: a write or a truncating open). Once `cgroup.kill` was written to a cgroup, Linux 6.18 kills
/// every child later cloned into it with `CLONE_INTO_CGROUP` at birth
/// (found by trying), and nothing in the cgroup's files shows that it was:
/// a command that can write its own cgroup's `cgroup.kill` (the owner of a
/// delegated subtree, root) would otherwise leave a cgroup in the pool that
/// kills the next run's root. The same holds for every other interface
/// file a command can write in its own cgroup (see [`harmless_write`]): a
/// `cgroup.max.descendants` of 0 would make the next run's `mkdir` of a
/// nested cgroup fail, a `cgroup.freeze` would freeze it. The check costs
/// one non-blocking `read` per borrow. Without inotify (its limits reached)
/// nothing is pooled.
///
/// The instance is never closed while the process lives; its close at the
/// process's exit waits for an SRCU grace period in the kernel (the marks
/// of the watches are freed only after one: 7-19 ms measured here), which
/// the process's parent sees as a slower exit. A one-shot process
/// ([`crate::one_shot_process`]) pools nothing, so it makes no instance.
pub(super) struct KillWatch;

impl KillWatch {
    pub(super) fn fd(pool: &mut Pool) -> Option<BorrowedFd<'_>> {
        use rustix::fs::inotify::{init, CreateFlags};
        if pool.inotify.is_none() {
            pool.inotify = init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK)
                .ok()
                .and_then(|fd| kept(File::from(fd)).ok())
                .map(std::os::fd::OwnedFd::from);
        }
        pool.inotify.as_ref().map(AsFd::as_fd)
    }

    /// Starts watching `dir`'s `cgroup.kill`: through the directory, as
    /// the file itself is write-only (`--w-------`) and a watch needs read
    /// access, which only root has there; the events name the file.
    pub(super) fn add(pool: &mut Pool, dir: &Path) -> Option<i32> {
        use rustix::fs::inotify::{add_watch, WatchFlags};
        add_watch(
            Self::fd(pool)?,
            dir,
            WatchFlags::MODIFY | WatchFlags::ONLYDIR,
        )
        .ok()
    }

    /// Stops watching (the cgroup is being removed).
    pub(super) fn remove(pool: &mut Pool, wd: i32) {
        if let Some(fd) = Self::fd(pool) {
            let _ = rustix::fs::inotify::remove_watch(fd, wd);
        }
        // Its IN_IGNORED may still be queued: forget the watch now.
        pool.killed.remove(&wd);
    }

    /// Reads every queued event into `pool`.
    pub(super) fn drain(pool: &mut Pool) {
        use rustix::fs::inotify::{ReadFlags, Reader};
        let Some(fd) = Self::fd(pool) else { return };
        let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 4096];
        // The events are gathered first: the reader borrows the descriptor
        // (and so `pool`).
        let mut seen = Vec::new();
        let mut reader = Reader::new(fd, &mut buf);
        loop {
            match reader.next() {
                Ok(ev) => {
                    // A write to any interface file but those that change
                    // nothing a later run would see taints the cgroup.
                    let name = ev.file_name().map(std::ffi::CStr::to_bytes);
                    let flags = ev.events();
                    if !name.is_some_and(harmless_write) || !flags.contains(ReadFlags::MODIFY) {
                        seen.push((ev.wd(), flags));
                    }
                }
                Err(rustix::io::Errno::INTR) => continue,
                // AGAIN: nothing more queued.
                Err(_) => break,
            }
        }
        for (wd, flags) in seen {
            if flags.contains(ReadFlags::QUEUE_OVERFLOW) {
                pool.epoch += 1;
            } else if flags.contains(ReadFlags::IGNORED) {
                pool.killed.remove(&wd);
            } else {
                pool.killed.insert(wd);
            }
        }
    }
}

/// Whether a write to this file of a cgroup leaves nothing behind that a
/// later run in it would see: moving processes in (`cgroup.procs` by the
/// fallback placement, `cgroup.threads`), and the kernel's own change
/// notifications (`cgroup.events`, `*.events`, `*.events.local`). Any other
/// write (`cgroup.kill`; `cgroup.freeze`; a limit the command set on its own
/// cgroup as root or as the owner of a delegated subtree, such as
/// `cgroup.max.descendants`, `cgroup.max.depth`, `cgroup.pressure`,
/// `cgroup.subtree_control`, `cgroup.type`) keeps the cgroup out of the pool.
pub(super) fn harmless_write(name: &[u8]) -> bool {
    [CgroupFile::Procs, CgroupFile::Threads]
        .iter()
        .any(|f| f.name().as_bytes() == name)
        || name.ends_with(b".events")
        || name.ends_with(b".events.local")
}

/// At most this many cgroups wait in the pool (each holds a keeper slot, an
/// inotify watch and at most three descriptors: `cgroup.events`,
/// `cpu.stat`, `cgroup.stat`).
pub(super) const POOL_MAX: usize = 16;

/// The pool, as this process's own (see [`Pool::adopt`]).
pub(super) fn pool() -> std::sync::MutexGuard<'static, Pool> {
    let mut pool = POOL.lock();
    pool.adopt();
    pool
}

/// Reads `cgroup.events` through its descriptor.
pub(super) fn events_of(events: &File) -> io::Result<Events> {
    let mut buf = [0u8; 256];
    let n = events.read_at(&mut buf, 0)?;
    Ok(Events::parse(std::str::from_utf8(&buf[..n]).unwrap_or("")))
}

/// The cgroup's own cumulative CPU time, (user, system) in microseconds.
pub(super) fn cpu_usec(slot: &Slot) -> (u64, u64) {
    let cpu = slot.cpu_stat();
    (
        kv(&cpu, "user_usec").unwrap_or(0),
        kv(&cpu, "system_usec").unwrap_or(0),
    )
}

/// Whether the keeper that holds `slot` is still there (see
/// `Registration::is_live`): a pooled cgroup whose keeper died is retired,
/// never lent to a run as crash-safe.
pub(super) fn held(slot: &Slot) -> bool {
    #[cfg(linux_raw)]
    return slot.keeper.as_ref().is_some_and(KeeperReg::is_live);
    #[cfg(not(linux_raw))]
    return slot.keeper.is_some();
}

/// Removes every pooled cgroup (see [`crate::contain::release_cgroup_pool`]).
pub(crate) fn drain_pool() -> usize {
    let mut pool = pool();
    let slots = std::mem::take(&mut pool.slots);
    let n = slots.len();
    for slot in slots {
        retire(&mut pool, slot);
    }
    retry_retired(&mut pool);
    n
}

/// Removes a pooled cgroup for good. Only an empty one is removed (rmdir
/// refuses otherwise); one that something entered while it waited stays
/// in [`Pool::retired`], locked (never killed: what is in it is not a
/// run's), until it can be removed or this process ends (then the next
/// corral's stale pass takes it).
pub(super) fn retire(pool: &mut Pool, slot: Slot) {
    if let Some(wd) = slot.watch {
        KillWatch::remove(pool, wd);
    }
    if remove_tree(&slot.dir).is_err() && slot.dir.exists() {
        pool.retired.push(slot);
    }
}

/// Tries again to remove the retired cgroups still present.
pub(super) fn retry_retired(pool: &mut Pool) {
    if !pool.retired.is_empty() {
        pool.retired
            .retain(|slot| remove_tree(&slot.dir).is_err() && slot.dir.exists());
    }
}

/// Why a cgroup is not lent to a run or taken back into the pool (the
/// pool rules' answer; the cgroup is then removed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Unfit {
    /// The run asked for a limit, v2 peaks are accounted, or the process
    /// is one-shot (see [`Cgroup::poolable`]).
    NotPoolable,
    /// The root did not exit by itself (killed, signalled, not seen).
    RootNotClean,
    /// Members were left, or the cgroup is frozen (or unreadable).
    NotEmpty,
    /// corral killed the tree (`cgroup.kill` written).
    Killed,
    /// The run had v1 groups or held controllers in the parent.
    Limited,
    /// No keeper holds it (it would outlive corral's death).
    NotHeld,
    /// No `cgroup.kill` watch: a write by someone else could not be seen.
    Unwatched,
    /// An interface file was written while it was in use or pooled.
    Written,
    /// The command left a nested cgroup (or `cgroup.stat` is unreadable).
    Nested,
    /// The watch's queue overflowed since it was made or borrowed.
    Stale,
    /// The pool holds [`POOL_MAX`] already.
    Full,
}

/// What a run's cgroup showed when the run ended: the facts the
/// give-back rule reads before the pool is locked.
#[derive(Debug, Clone, Copy)]
pub(super) struct Returned {
    /// [`Cgroup::poolable`].
    pub(super) poolable: bool,
    /// The root exited by itself.
    pub(super) clean_exit: bool,
    /// `populated 0` and not frozen, read at release.
    pub(super) empty_thawed: bool,
    /// corral sent SIGKILL to the tree.
    pub(super) killed: bool,
    /// v1 groups or a hold on the parent's controllers belong to the run.
    pub(super) limited: bool,
    /// A keeper registration holds it.
    pub(super) keeper: bool,
    /// Its `cgroup.kill` is watched.
    pub(super) watched: bool,
}

/// The pool's view of one cgroup, read under its lock.
#[derive(Debug, Clone, Copy)]
pub(super) struct InPool {
    /// Cgroups waiting in the pool now.
    pub(super) pooled: usize,
    /// No event was lost since the cgroup was made or borrowed.
    pub(super) same_epoch: bool,
    /// Its watch saw a write to an interface file.
    pub(super) written: bool,
}

/// Whether a cgroup may serve runs after its own (see
/// [`Cgroup::poolable`]): no limit, no v2 peak accounted, not one-shot.
pub(super) fn may_pool(limited: bool, v2_peaks: bool, one_shot: bool) -> bool {
    !limited && !v2_peaks && !one_shot
}

/// The give-back rule: whether a finished run's cgroup goes back to the
/// pool. `nested` (the `nr_descendants` of `cgroup.stat`, a read) and
/// `pool` (the pool's lock) are asked only once every earlier fact allows
/// it, in this order.
pub(super) fn give_back_rule(
    run: &Returned,
    nested: impl FnOnce() -> Option<u64>,
    pool: impl FnOnce() -> InPool,
) -> Result<(), Unfit> {
    let checks = [
        (run.poolable, Unfit::NotPoolable),
        (run.clean_exit, Unfit::RootNotClean),
        (run.empty_thawed, Unfit::NotEmpty),
        (!run.killed, Unfit::Killed),
        (!run.limited, Unfit::Limited),
        (run.keeper, Unfit::NotHeld),
        (run.watched, Unfit::Unwatched),
    ];
    if let Some(&(_, why)) = checks.iter().find(|(ok, _)| !ok) {
        return Err(why);
    }
    if nested() != Some(0) {
        return Err(Unfit::Nested);
    }
    let pool = pool();
    if pool.pooled >= POOL_MAX {
        return Err(Unfit::Full);
    }
    if !pool.same_epoch {
        return Err(Unfit::Stale);
    }
    if pool.written {
        return Err(Unfit::Written);
    }
    Ok(())
}

/// A pooled cgroup, as a borrow sees it with the pool locked.
#[derive(Debug, Clone, Copy)]
pub(super) struct Pooled {
    /// No event was lost since it was given back.
    pub(super) same_epoch: bool,
    /// Its `cgroup.kill` is watched.
    pub(super) watched: bool,
    /// Its watch saw a write to an interface file.
    pub(super) written: bool,
    /// The keeper that holds it is alive.
    pub(super) held: bool,
}

/// The lend rule: whether a pooled cgroup may serve the next run. `events`
/// (a read of `cgroup.events`) is asked only when the pool's own facts
/// allow it; it must say empty and not frozen.
pub(super) fn lend_rule(
    slot: &Pooled,
    events: impl FnOnce() -> Option<Events>,
) -> Result<(), Unfit> {
    if !slot.same_epoch {
        return Err(Unfit::Stale);
    }
    if !slot.watched {
        return Err(Unfit::Unwatched);
    }
    if slot.written {
        return Err(Unfit::Written);
    }
    if !slot.held {
        return Err(Unfit::NotHeld);
    }
    if events() != Some(Events::default()) {
        return Err(Unfit::NotEmpty);
    }
    Ok(())
}

impl Cgroup {
    /// Whether a run may use a pooled cgroup: it asks for no limit (a
    /// limited run gets a new cgroup, removed after it, so no limit can
    /// reach a later run), and no peak is accounted in v2 (`memory.peak`
    /// and `pids.peak` cannot be read as a per-run difference; CPU time
    /// can, and is).
    /// In a one-shot process ([`crate::one_shot_process`]) nothing is
    /// pooled: no run would borrow it, and the watch that pooling needs
    /// costs the process's exit an SRCU grace period (see [`KillWatch`]).
    pub(super) fn poolable(limits: Limits, v2: Enabled) -> bool {
        may_pool(limits.any(), v2.any(), crate::contain::one_shot())
    }

    /// A pooled cgroup proven empty now (`populated 0`, not frozen) and
    /// whose `cgroup.kill` nobody wrote ([`KillWatch`]): one that fails is
    /// retired.
    pub(super) fn borrow() -> Option<Slot> {
        let mut pool = pool();
        retry_retired(&mut pool);
        if pool.slots.is_empty() {
            return None;
        }
        KillWatch::drain(&mut pool);
        loop {
            let slot = pool.slots.pop()?;
            let facts = Pooled {
                same_epoch: slot.epoch == pool.epoch,
                watched: slot.watch.is_some(),
                written: slot.watch.is_some_and(|wd| pool.killed.contains(&wd)),
                held: held(&slot),
            };
            if lend_rule(&facts, || slot.read_events().ok()).is_ok() {
                return Some(slot);
            }
            retire(&mut pool, slot);
        }
    }

    /// Puts the cgroup back in the pool if it can serve another run
    /// ([`give_back_rule`]): it was poolable, its root exited by itself and
    /// corral never killed the tree (once `cgroup.kill` was written to a
    /// cgroup, Linux 6.18 kills every child later cloned into it with
    /// `CLONE_INTO_CGROUP` at birth: found by trying; a write by anyone
    /// else is caught by [`KillWatch`] at the next borrow), the keeper
    /// holds it (so it is removed if corral dies), no v1 group belongs to
    /// it, it was empty and not frozen when the run ended (`empty_thawed`,
    /// read by `release`; the next borrow reads it again), the command left
    /// no nested cgroup, and the pool has room. Otherwise the caller
    /// removes it.
    pub(super) fn give_back(&mut self, clean_exit: bool, empty_thawed: bool) -> bool {
        let Some(slot) = self.slot.as_ref() else {
            return false;
        };
        let run = Returned {
            poolable: Self::poolable(self.limits(), self.v2),
            clean_exit,
            empty_thawed,
            killed: self.killed.is_some(),
            limited: self
                .limited
                .as_ref()
                .is_some_and(|l| !l.v1.is_empty() || l.leaf_hold.is_some()),
            keeper: slot.keeper.is_some(),
            watched: slot.watch.is_some(),
        };
        let mut locked = None;
        let verdict = give_back_rule(
            &run,
            || {
                slot.read_kept(CgroupFile::Stat)
                    .and_then(|t| kv(&t, "nr_descendants"))
            },
            || {
                let pool = pool();
                let facts = InPool {
                    pooled: pool.slots.len(),
                    same_epoch: slot.epoch == pool.epoch,
                    written: slot.watch.is_some_and(|wd| pool.killed.contains(&wd)),
                };
                locked = Some(pool);
                facts
            },
        );
        let (Ok(()), Some(mut pool)) = (verdict, locked) else {
            return false;
        };
        if let Some(slot) = self.slot.take() {
            if self.tracer.enabled() {
                let inode = fs::metadata(&self.dir).map_or(0, |m| m.ino());
                self.tracer.record(OsOp::CgroupPooled { inode });
            }
            pool.slots.push(slot);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run whose cgroup may go back, facts one by one spoiled below.
    const CLEAN: Returned = Returned {
        poolable: true,
        clean_exit: true,
        empty_thawed: true,
        killed: false,
        limited: false,
        keeper: true,
        watched: true,
    };
    const ROOM: InPool = InPool {
        pooled: 0,
        same_epoch: true,
        written: false,
    };

    #[test]
    fn give_back_rule_table() {
        /// (name, the run's facts, nr_descendants, the pool's facts, answer)
        type Case = (
            &'static str,
            Returned,
            Option<u64>,
            InPool,
            Result<(), Unfit>,
        );
        let cases: &[Case] = &[
            ("clean", CLEAN, Some(0), ROOM, Ok(())),
            (
                "limited or one-shot",
                Returned {
                    poolable: false,
                    ..CLEAN
                },
                Some(0),
                ROOM,
                Err(Unfit::NotPoolable),
            ),
            (
                "root killed by a signal",
                Returned {
                    clean_exit: false,
                    ..CLEAN
                },
                Some(0),
                ROOM,
                Err(Unfit::RootNotClean),
            ),
            (
                "members kept",
                Returned {
                    empty_thawed: false,
                    ..CLEAN
                },
                Some(0),
                ROOM,
                Err(Unfit::NotEmpty),
            ),
            (
                "corral killed the tree",
                Returned {
                    killed: true,
                    ..CLEAN
                },
                Some(0),
                ROOM,
                Err(Unfit::Killed),
            ),
            (
                "v1 groups or a leaf hold",
                Returned {
                    limited: true,
                    ..CLEAN
                },
                Some(0),
                ROOM,
                Err(Unfit::Limited),
            ),
            (
                "no keeper",
                Returned {
                    keeper: false,
                    ..CLEAN
                },
                Some(0),
                ROOM,
                Err(Unfit::NotHeld),
            ),
            (
                "no watch",
                Returned {
                    watched: false,
                    ..CLEAN
                },
                Some(0),
                ROOM,
                Err(Unfit::Unwatched),
            ),
            ("a nested cgroup", CLEAN, Some(1), ROOM, Err(Unfit::Nested)),
            (
                "cgroup.stat unreadable",
                CLEAN,
                None,
                ROOM,
                Err(Unfit::Nested),
            ),
            (
                "pool full",
                CLEAN,
                Some(0),
                InPool {
                    pooled: POOL_MAX,
                    ..ROOM
                },
                Err(Unfit::Full),
            ),
            (
                "one below full",
                CLEAN,
                Some(0),
                InPool {
                    pooled: POOL_MAX - 1,
                    ..ROOM
                },
                Ok(()),
            ),
            (
                "watch queue overflowed",
                CLEAN,
                Some(0),
                InPool {
                    same_epoch: false,
                    ..ROOM
                },
                Err(Unfit::Stale),
            ),
            (
                "cgroup.kill written by the command",
                CLEAN,
                Some(0),
                InPool {
                    written: true,
                    ..ROOM
                },
                Err(Unfit::Written),
            ),
            (
                "first failing fact wins",
                Returned {
                    clean_exit: false,
                    killed: true,
                    ..CLEAN
                },
                Some(3),
                InPool {
                    written: true,
                    ..ROOM
                },
                Err(Unfit::RootNotClean),
            ),
        ];
        for (name, run, nested, pool, want) in cases {
            let got = give_back_rule(run, || *nested, || *pool);
            assert_eq!(got, *want, "{name}");
        }
    }

    #[test]
    fn give_back_rule_reads_and_locks_only_when_the_run_allows() {
        let reads = std::cell::Cell::new(0);
        let locks = std::cell::Cell::new(0);
        let killed = Returned {
            killed: true,
            ..CLEAN
        };
        let got = give_back_rule(
            &killed,
            || {
                reads.set(reads.get() + 1);
                Some(0)
            },
            || {
                locks.set(locks.get() + 1);
                ROOM
            },
        );
        assert_eq!(got, Err(Unfit::Killed));
        assert_eq!((reads.get(), locks.get()), (0, 0));
        let got = give_back_rule(
            &CLEAN,
            || {
                reads.set(reads.get() + 1);
                Some(2)
            },
            || {
                locks.set(locks.get() + 1);
                ROOM
            },
        );
        assert_eq!(got, Err(Unfit::Nested));
        assert_eq!((reads.get(), locks.get()), (1, 0));
    }

    #[test]
    fn lend_rule_table() {
        const OK: Pooled = Pooled {
            same_epoch: true,
            watched: true,
            written: false,
            held: true,
        };
        let empty = Some(Events::default());
        /// (name, the pool's facts, what cgroup.events says, answer)
        type Case = (&'static str, Pooled, Option<Events>, Result<(), Unfit>);
        let cases: &[Case] = &[
            ("empty and trusted", OK, empty, Ok(())),
            (
                "populated (moved in from outside)",
                OK,
                Some(Events {
                    populated: true,
                    frozen: false,
                }),
                Err(Unfit::NotEmpty),
            ),
            (
                "frozen by the command",
                OK,
                Some(Events {
                    populated: false,
                    frozen: true,
                }),
                Err(Unfit::NotEmpty),
            ),
            ("events unreadable", OK, None, Err(Unfit::NotEmpty)),
            (
                "watch overflowed",
                Pooled {
                    same_epoch: false,
                    ..OK
                },
                empty,
                Err(Unfit::Stale),
            ),
            (
                "no watch",
                Pooled {
                    watched: false,
                    ..OK
                },
                empty,
                Err(Unfit::Unwatched),
            ),
            (
                "written while pooled",
                Pooled {
                    written: true,
                    ..OK
                },
                empty,
                Err(Unfit::Written),
            ),
            (
                "keeper died",
                Pooled { held: false, ..OK },
                empty,
                Err(Unfit::NotHeld),
            ),
        ];
        for (name, slot, events, want) in cases {
            assert_eq!(lend_rule(slot, || *events), *want, "{name}");
        }
        // A slot the pool distrusts is retired without a read.
        let read = std::cell::Cell::new(false);
        let stale = Pooled {
            same_epoch: false,
            ..OK
        };
        let _ = lend_rule(&stale, || {
            read.set(true);
            empty
        });
        assert!(!read.get());
    }

    #[test]
    fn may_pool_table() {
        // (limited, v2 peaks accounted, one-shot) -> poolable
        let cases = [
            ((false, false, false), true),
            ((true, false, false), false),
            ((false, true, false), false),
            ((false, false, true), false),
            ((true, true, true), false),
        ];
        for ((limited, peaks, one_shot), want) in cases {
            assert_eq!(
                may_pool(limited, peaks, one_shot),
                want,
                "{limited} {peaks} {one_shot}"
            );
        }
    }

    #[test]
    fn harmless_writes_change_nothing_a_later_run_sees() {
        let cases: &[(&[u8], bool)] = &[
            (b"cgroup.procs", true),
            (b"cgroup.threads", true),
            (b"cgroup.events", true),
            (b"memory.events", true),
            (b"memory.events.local", true),
            (b"cgroup.kill", false),
            (b"cgroup.freeze", false),
            (b"cgroup.max.descendants", false),
            (b"cgroup.subtree_control", false),
            (b"pids.max", false),
        ];
        for (name, want) in cases {
            assert_eq!(
                harmless_write(name),
                *want,
                "{}",
                String::from_utf8_lossy(name)
            );
        }
    }
}
