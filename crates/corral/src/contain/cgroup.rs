//! cgroup v2 containment (Linux).
//!
//! Each command gets a fresh cgroup `corral-<corral pid>-<token>-<n>` under
//! corral's own cgroup, where `<token>` is drawn at random once per process:
//! the name is unique even between corrals that share a parent cgroup from
//! different PID namespaces (where both may be pid 1). No descendant can
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
//! * Ownership: the creator holds an exclusive `flock` on a descriptor of
//!   the directory from just after `mkdir` until the directory is gone (or
//!   it dies). The first cgroup a corral process makes is preceded by a
//!   cleanup of its siblings: a directory of this name form whose lock can be
//!   taken is abandoned, so what is left in it is killed and it is removed.
//!   A held lock, another name form (an older corral), or a file system
//!   without flock means "in doubt": nothing is signalled or removed. No
//!   pid, so no PID namespace and no pid reuse, takes part in the decision.
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
//!   While pooled the directory keeps its ownership lock (no other corral
//!   may take it) and its keeper registration (removed if corral dies); at
//!   most [`POOL_MAX`]. `corral::release_cgroup_pool` removes them. A
//!   one-shot process (`corral::one_shot_process`, what `corral run`
//!   declares) pools nothing and sets no watch: its run's cgroup is removed
//!   at release, and its exit does not wait for the watch's teardown.
//! * Delegated subtrees: corral's own cgroup is used when it is delegated
//!   to this user, else its parent when that is (the runs' cgroups beside
//!   corral's); a limit's controllers are enabled there by moving corral
//!   into a shared leaf (see `cgroup_delegated`).
//! * Migration: a member with write access to an ancestor's `cgroup.procs`
//!   (root, or the owner of a delegated subtree) can move itself out; no
//!   cgroup mechanism prevents that. One that stays in the root's process
//!   group is still found (a scan of the group once the cgroup is empty) and
//!   killed (SIGKILL to the pinned group after `cgroup.kill`); one that also
//!   leaves the group escapes.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Once, OnceLock};
use std::time::{Duration, Instant};

use super::{Containment, Limits, Mechanism, OsOp, Tracer};
use crate::report::{LimitHit, Usage};
use crate::sys::{self, Root};
use crate::Signal;

/// Members still listed this long after `cgroup.kill` get a SIGKILL of
/// their own (a dying tree is normally gone by then; what is left is what
/// `cgroup.kill` skipped, or a process slow to die that a second SIGKILL
/// does not hurt).
const STRAGGLERS_AFTER: Duration = Duration::from_millis(5);

/// Where cgroups live for this process.
#[derive(Debug, Clone)]
pub(crate) struct Hierarchy {
    /// corral's own cgroup v2 directory (children are created here).
    pub(crate) own_v2: PathBuf,
    /// corral's own directories in the v1 `pids` and `memory` hierarchies,
    /// when those are mounted (hybrid systems).
    pub(crate) own_v1_pids: Option<PathBuf>,
    pub(crate) own_v1_memory: Option<PathBuf>,
}

/// Why the cgroup tier cannot be had for a run: the step that failed, in
/// words (`Display`), and the OS error behind it (`source`), if any.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CgroupError {
    /// Detection could not read a file of /proc.
    #[error("cannot read {path}")]
    Read {
        path: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("no cgroup v2 hierarchy is mounted")]
    NoV2Mount,
    #[error("this process has no cgroup v2 membership")]
    NoV2Membership,
    /// The per-command directory could not be made.
    #[error(
        "cannot create a cgroup under {} (corral needs a writable, delegated cgroup v2 subtree)",
        parent.display()
    )]
    Create {
        parent: PathBuf,
        #[source]
        source: io::Error,
    },
    /// corral's own cgroup is not a subtree delegated to this user: its
    /// directory (to make the runs' cgroups in) or its `cgroup.procs` (the
    /// kernel asks for write access to the common ancestor's `cgroup.procs`
    /// to place a process in a cgroup below it) is not writable.
    #[error(
        "cannot create a cgroup under {} ({what} is not writable by this user: corral needs a \
         delegated cgroup v2 subtree it sits in)",
        parent.display()
    )]
    NotDelegated {
        parent: PathBuf,
        what: &'static str,
        #[source]
        source: io::Error,
    },
    /// A limit needs a controller enabled for the runs' cgroups, and the
    /// kernel's "no internal processes" rule refuses it while these
    /// processes (not corral's: it moved itself aside) sit in the parent.
    #[error(
        "cannot enable the controllers a limit needs in {}: other processes sit in it (pids {pids}), \
         and the kernel enables a controller for child cgroups only in a cgroup with no process \
         of its own (start corral in a cgroup of its own: systemd-run --user --scope -p \
         Delegate=yes corral ...)",
        parent.display()
    )]
    Occupied { parent: PathBuf, pids: String },
    /// corral's own cgroup is not delegated, but a cgroup beside it is: a
    /// process can be placed only where the user may write the
    /// `cgroup.procs` of a cgroup above both where it is and where it goes.
    #[error(
        "{reason}; {} beside it is delegated to this user, but the kernel places a process \
         only below a cgroup whose cgroup.procs the user may write and that holds both where it \
         is and where it goes: start corral inside the delegated cgroup (echo $$ > {}/cgroup.procs \
         first)",
        sibling.display(),
        sibling.display()
    )]
    DelegatedBeside { reason: String, sibling: PathBuf },
    /// A v1 group for a limit could not be made.
    #[error(
        "cannot create {} (a limit here is a group in the v1 hierarchy: corral's group there must \
         be writable by this user, delegated as its cgroup v2 is)",
        dir.display()
    )]
    CreateV1 {
        dir: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot open {}", path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A limit could not be written.
    #[error("cannot set {file}")]
    SetLimit {
        file: &'static str,
        #[source]
        source: io::Error,
    },
    /// A limit was asked for a controller that is nowhere.
    #[error("the {controller} controller is available neither in cgroup v2 nor in a v1 hierarchy")]
    NoController { controller: &'static str },
}

impl CgroupError {
    /// The OS error behind it, taken out.
    fn into_source(self) -> Option<io::Error> {
        match self {
            CgroupError::Read { source, .. }
            | CgroupError::Create { source, .. }
            | CgroupError::NotDelegated { source, .. }
            | CgroupError::CreateV1 { source, .. }
            | CgroupError::Open { source, .. }
            | CgroupError::SetLimit { source, .. } => Some(source),
            CgroupError::NoV2Mount
            | CgroupError::NoV2Membership
            | CgroupError::Occupied { .. }
            | CgroupError::DelegatedBeside { .. }
            | CgroupError::NoController { .. } => None,
        }
    }
}

/// Detection's answer is kept for the life of the process and handed out
/// again: an OS error is copied by its errno (or its kind and text).
impl Clone for CgroupError {
    fn clone(&self) -> Self {
        fn copy(e: &io::Error) -> io::Error {
            match e.raw_os_error() {
                Some(code) => io::Error::from_raw_os_error(code),
                None => io::Error::new(e.kind(), e.to_string()),
            }
        }
        match self {
            CgroupError::Read { path, source } => CgroupError::Read {
                path,
                source: copy(source),
            },
            CgroupError::NoV2Mount => CgroupError::NoV2Mount,
            CgroupError::NoV2Membership => CgroupError::NoV2Membership,
            CgroupError::Create { parent, source } => CgroupError::Create {
                parent: parent.clone(),
                source: copy(source),
            },
            CgroupError::NotDelegated {
                parent,
                what,
                source,
            } => CgroupError::NotDelegated {
                parent: parent.clone(),
                what,
                source: copy(source),
            },
            CgroupError::CreateV1 { dir, source } => CgroupError::CreateV1 {
                dir: dir.clone(),
                source: copy(source),
            },
            CgroupError::Open { path, source } => CgroupError::Open {
                path: path.clone(),
                source: copy(source),
            },
            CgroupError::SetLimit { file, source } => CgroupError::SetLimit {
                file,
                source: copy(source),
            },
            CgroupError::NoController { controller } => CgroupError::NoController { controller },
            CgroupError::DelegatedBeside { reason, sibling } => CgroupError::DelegatedBeside {
                reason: reason.clone(),
                sibling: sibling.clone(),
            },
            CgroupError::Occupied { parent, pids } => CgroupError::Occupied {
                parent: parent.clone(),
                pids: pids.clone(),
            },
        }
    }
}

impl From<super::cgroup_delegated::LeafError> for CgroupError {
    fn from(e: super::cgroup_delegated::LeafError) -> CgroupError {
        use super::cgroup_delegated::LeafError;
        match e {
            LeafError::Occupied { parent, pids } => CgroupError::Occupied { parent, pids },
            LeafError::NotDelegated { parent, source } => CgroupError::NotDelegated {
                parent,
                what: "its cgroup.subtree_control",
                source,
            },
            LeafError::Io { path, source } => CgroupError::Open { path, source },
            LeafError::Enable { source } => CgroupError::SetLimit {
                file: "cgroup.subtree_control",
                source,
            },
        }
    }
}

/// The run's error: the step as the reason, the OS error as the source.
impl From<CgroupError> for crate::Error {
    fn from(e: CgroupError) -> crate::Error {
        let reason = e.to_string();
        match e.into_source() {
            Some(source) => crate::Error::containment_io(Mechanism::Cgroup, reason, source),
            None => crate::Error::containment(Mechanism::Cgroup, reason),
        }
    }
}

fn read_override(var: &str, default: &str) -> io::Result<String> {
    // Hidden test hook: point detection at fake files.
    let path = std::env::var_os(var).map_or_else(|| PathBuf::from(default), PathBuf::from);
    fs::read_to_string(path)
}

/// Finds the cgroup v2 mount and corral's own cgroup in it, from
/// /proc/self/mountinfo and /proc/self/cgroup. Read once per process (the
/// test hooks `CORRAL_MOUNTINFO` / `CORRAL_PROC_CGROUP` too); later calls
/// return the same answer.
pub(crate) fn detect() -> Result<Hierarchy, CgroupError> {
    static CACHED: OnceLock<Result<Hierarchy, CgroupError>> = OnceLock::new();
    CACHED.get_or_init(detect_now).clone()
}

fn detect_now() -> Result<Hierarchy, CgroupError> {
    let mountinfo =
        read_override("CORRAL_MOUNTINFO", "/proc/self/mountinfo").map_err(|source| {
            CgroupError::Read {
                path: "mountinfo",
                source,
            }
        })?;
    let cgroup = read_override("CORRAL_PROC_CGROUP", "/proc/self/cgroup").map_err(|source| {
        CgroupError::Read {
            path: "/proc/self/cgroup",
            source,
        }
    })?;
    let mut h = detect_from(&mountinfo, &cgroup)?;
    // Started by a process that a corral moved aside: the delegated cgroup
    // is the leaf's parent (see `cgroup_delegated`).
    if let Some(parent) = super::cgroup_delegated::above_leaf(&h.own_v2) {
        if delegated(parent).is_ok() {
            h.own_v2 = parent.to_path_buf();
        }
    }
    if let Err(e) = delegated(&h.own_v2) {
        h.own_v2 = match super::cgroup_delegated::beside(&h.own_v2, |p| delegated(p).is_ok()) {
            Ok(parent) => parent,
            Err(Some(sibling)) => {
                return Err(CgroupError::DelegatedBeside {
                    reason: e.to_string(),
                    sibling,
                })
            }
            Err(None) => return Err(e),
        };
    }
    Ok(h)
}

/// Whether this process may use its own cgroup `own` as the parent of the
/// runs' cgroups: root, or a subtree delegated to this user (systemd's
/// `Delegate=yes`, a `chown` by root) that corral sits in.
///
/// Asked of the effective user (`AT_EACCESS`): the directory must be
/// writable (the runs' cgroups are made in it) and its `cgroup.procs` too
/// (placing a process in a cgroup, by `clone3` or by a write, needs write
/// access to the `cgroup.procs` of the common ancestor of where it is and
/// where it goes: corral's own cgroup). The "no internal processes" rule
/// does not stand in the way: it forbids processes only in a cgroup that
/// distributes domain controllers to its children, and runs without limits
/// need none (`cgroup.kill`, `cgroup.events` and `cgroup.freeze` are in
/// every cgroup); limits need the controllers enabled in `own`'s
/// `cgroup.subtree_control`, which the kernel refuses while corral sits in
/// it: corral then moves itself aside (`cgroup_delegated`), or uses v1
/// groups where the controllers are v1. A directory whose files were not handed over with it
/// (`chown` of the directory alone) is no delegation: `auto` falls back
/// instead of failing at the spawn.
fn delegated(own: &Path) -> Result<(), CgroupError> {
    use rustix::fs::{accessat, Access, AtFlags, CWD};
    let check = |path: PathBuf, what: &'static str, access: Access| {
        accessat(CWD, &path, access, AtFlags::EACCESS).map_err(|e| CgroupError::NotDelegated {
            parent: own.to_path_buf(),
            what,
            source: e.into(),
        })
    };
    check(
        own.to_path_buf(),
        "the directory",
        Access::WRITE_OK | Access::EXEC_OK,
    )?;
    check(
        own.join("cgroup.procs"),
        "its cgroup.procs",
        Access::WRITE_OK,
    )?;
    Ok(())
}

fn unescape(s: &str) -> String {
    // mountinfo escapes space, tab, newline and backslash as \ooo.
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 4], 8) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

struct Mount {
    root: String,
    point: PathBuf,
    fstype: String,
    superopts: String,
}

fn mounts(mountinfo: &str) -> Vec<Mount> {
    mountinfo
        .lines()
        .filter_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            let f: Vec<&str> = pre.split(' ').collect();
            let p: Vec<&str> = post.split(' ').collect();
            Some(Mount {
                root: unescape(f.get(3)?),
                point: PathBuf::from(unescape(f.get(4)?)),
                fstype: (*p.first()?).to_owned(),
                superopts: p.get(2).copied().unwrap_or("").to_owned(),
            })
        })
        .collect()
}

/// Joins a mount point with a cgroup path seen from a mount whose root is
/// `root` (cgroup namespaces make the two differ).
fn join(m: &Mount, path: &str) -> PathBuf {
    let rel = path.strip_prefix(m.root.as_str()).unwrap_or(path);
    m.point.join(rel.trim_start_matches('/'))
}

pub(crate) fn detect_from(mountinfo: &str, cgroup: &str) -> Result<Hierarchy, CgroupError> {
    let ms = mounts(mountinfo);
    let v2 = ms
        .iter()
        .find(|m| m.fstype == "cgroup2")
        .ok_or(CgroupError::NoV2Mount)?;
    let own = cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .ok_or(CgroupError::NoV2Membership)?;
    let v1 = |ctrl: &str| -> Option<PathBuf> {
        let m = ms
            .iter()
            .find(|m| m.fstype == "cgroup" && m.superopts.split(',').any(|o| o == ctrl))?;
        let path = cgroup.lines().find_map(|l| {
            let mut it = l.splitn(3, ':');
            let _id = it.next()?;
            let ctrls = it.next()?;
            let p = it.next()?;
            ctrls.split(',').any(|c| c == ctrl).then_some(p)
        })?;
        Some(join(m, path))
    };
    Ok(Hierarchy {
        own_v2: join(v2, own),
        own_v1_pids: v1("pids"),
        own_v1_memory: v1("memory"),
    })
}

static SEQ: AtomicUsize = AtomicUsize::new(0);

/// Whether the memory and pids controllers are enabled for the children of
/// `own` (read once per process: corral never changes it).
fn subtree_controllers(own: &Path) -> (bool, bool) {
    static CACHE: OnceLock<(bool, bool)> = OnceLock::new();
    *CACHE.get_or_init(|| subtree_controllers_now(own))
}

/// [`subtree_controllers`], read now (corral may have just enabled them).
fn subtree_controllers_now(own: &Path) -> (bool, bool) {
    let text = fs::read_to_string(own.join("cgroup.subtree_control")).unwrap_or_default();
    let has = |c: &str| text.split_whitespace().any(|w| w == c);
    (has("memory"), has("pids"))
}
static STALE: Once = Once::new();

/// A v1 group made for one command.
struct V1Group {
    dir: PathBuf,
    procs: File,
}

#[cfg(linux_raw)]
type KeeperReg = crate::sys::linux_spawn::keeper::Registration;
#[cfg(not(linux_raw))]
type KeeperReg = ();

/// What a cgroup directory keeps across runs when it goes back to the pool:
/// its open descriptors (the directory's holds the ownership lock) and its
/// registration with the keeper.
struct Slot {
    dir: PathBuf,
    /// The directory itself, for clone3(CLONE_INTO_CGROUP); holds the lock.
    dir_fd: File,
    /// `cgroup.events`, kept open only once a termination waits on it
    /// (POLLPRI) or the cgroup is pooled; other reads open it for the read
    /// ([`Slot::read_events`]). So a run costs its cgroup one descriptor,
    /// the directory's, until a termination. (`cgroup.procs` is opened
    /// only by a spawn that is not born in the cgroup: see `placement`.)
    events: OnceLock<File>,
    /// Registration with the crash-safety keeper (dropped: unregistered).
    keeper: Option<KeeperReg>,
    /// `cpu.stat` and `cgroup.stat`, opened once and re-read in place by
    /// the runs that reuse the cgroup.
    cpu_stat: std::sync::OnceLock<Option<File>>,
    cg_stat: std::sync::OnceLock<Option<File>>,
    /// The inotify watch on this cgroup's `cgroup.kill` (see
    /// [`KillWatch`]); a cgroup without one is never pooled.
    watch: Option<i32>,
    /// The pool's epoch when this cgroup was made or borrowed: it goes back
    /// only if no event was lost since ([`Pool::epoch`]).
    epoch: u64,
}

impl Slot {
    /// Reads one of the slot's kept files from its start.
    fn read_kept(&self, which: &std::sync::OnceLock<Option<File>>, name: &str) -> Option<String> {
        let f = which
            .get_or_init(|| File::open(self.dir.join(name)).ok())
            .as_ref()?;
        let mut buf = [0u8; 1024];
        let n = f.read_at(&mut buf, 0).ok()?;
        Some(String::from_utf8_lossy(&buf[..n]).into_owned())
    }

    /// (populated, frozen), through the kept descriptor if there is one.
    fn read_events(&self) -> io::Result<(bool, bool)> {
        match self.events.get() {
            Some(f) => events_of(f),
            None => events_of(&File::open(self.dir.join("cgroup.events"))?),
        }
    }

    /// `cgroup.events`, opened now and kept if it is not yet.
    fn events(&self) -> io::Result<&File> {
        if let Some(f) = self.events.get() {
            return Ok(f);
        }
        let f = File::open(self.dir.join("cgroup.events"))?;
        Ok(self.events.get_or_init(|| f))
    }

    fn cpu_stat(&self) -> String {
        self.read_kept(&self.cpu_stat, "cpu.stat")
            .unwrap_or_default()
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
static POOL: crate::sys::per_process::PerProcess<Pool> =
    crate::sys::per_process::PerProcess::new(|| Pool {
        slots: Vec::new(),
        retired: Vec::new(),
        killed: std::collections::BTreeSet::new(),
        epoch: u64::from(std::process::id()) << 32,
        owner: std::process::id(),
        inotify: None,
    });

struct Pool {
    slots: Vec<Slot>,
    /// Retired cgroups that could not be removed yet (something outside
    /// corral moved a process in while they waited). They keep their
    /// ownership lock, so no other corral's stale pass kills what is in
    /// them while this process lives; removal is tried again at the next
    /// borrow and by [`drain_pool`].
    retired: Vec<Slot>,
    /// Watches whose `cgroup.kill` (or another interface file that a later
    /// run would see: see [`harmless_write`]) was written, read from
    /// [`KillWatch`] but not yet acted on: such a cgroup is never borrowed
    /// or given back. An entry goes when its watch is removed (`IN_IGNORED`).
    killed: std::collections::BTreeSet<i32>,
    /// Raised when the watch's event queue overflowed: a write may have
    /// been missed, so every cgroup made or borrowed before is distrusted.
    epoch: u64,
    /// The process these belong to: a child forked without exec inherits
    /// a copy of this state, but the cgroups (and the inotify queue, whose
    /// events a read would take from the parent) stay the parent's.
    owner: u32,
    /// The [`KillWatch`] instance of `owner`.
    inotify: Option<std::os::fd::OwnedFd>,
}

impl Pool {
    /// Forgets what this process inherited through a fork: the pooled
    /// cgroups are the parent's (their descriptors are closed here, nothing
    /// is removed; a keeper registration is not the child's to end), and
    /// so is the inotify queue. Cgroups in use by the parent's runs at the
    /// fork are distrusted (a new epoch).
    fn adopt(&mut self) -> &mut Pool {
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
struct KillWatch;

impl KillWatch {
    fn fd(pool: &mut Pool) -> Option<BorrowedFd<'_>> {
        use rustix::fs::inotify::{init, CreateFlags};
        if pool.inotify.is_none() {
            pool.inotify = init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK).ok();
        }
        pool.inotify.as_ref().map(AsFd::as_fd)
    }

    /// Starts watching `dir`'s `cgroup.kill`: through the directory, as
    /// the file itself is write-only (`--w-------`) and a watch needs read
    /// access, which only root has there; the events name the file.
    fn add(pool: &mut Pool, dir: &Path) -> Option<i32> {
        use rustix::fs::inotify::{add_watch, WatchFlags};
        add_watch(
            Self::fd(pool)?,
            dir,
            WatchFlags::MODIFY | WatchFlags::ONLYDIR,
        )
        .ok()
    }

    /// Stops watching (the cgroup is being removed).
    fn remove(pool: &mut Pool, wd: i32) {
        if let Some(fd) = Self::fd(pool) {
            let _ = rustix::fs::inotify::remove_watch(fd, wd);
        }
        // Its IN_IGNORED may still be queued: forget the watch now.
        pool.killed.remove(&wd);
    }

    /// Reads every queued event into `pool`.
    fn drain(pool: &mut Pool) {
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
fn harmless_write(name: &[u8]) -> bool {
    matches!(name, b"cgroup.procs" | b"cgroup.threads")
        || name.ends_with(b".events")
        || name.ends_with(b".events.local")
}

/// At most this many cgroups wait in the pool (each holds a keeper slot, an
/// inotify watch and four descriptors).
const POOL_MAX: usize = 16;

/// The pool, as this process's own (see [`Pool::adopt`]).
fn pool() -> std::sync::MutexGuard<'static, Pool> {
    let mut pool = POOL.lock();
    pool.adopt();
    pool
}

/// Reads `cgroup.events` through its descriptor: (populated, frozen).
fn events_of(events: &File) -> io::Result<(bool, bool)> {
    let mut buf = [0u8; 256];
    let n = events.read_at(&mut buf, 0)?;
    let text = std::str::from_utf8(&buf[..n]).unwrap_or("");
    Ok((
        text.lines().any(|l| l.trim() == "populated 1"),
        text.lines().any(|l| l.trim() == "frozen 1"),
    ))
}

/// The cgroup's own cumulative CPU time, (user, system) in microseconds.
fn cpu_usec(slot: &Slot) -> (u64, u64) {
    let cpu = slot.cpu_stat();
    (
        kv(&cpu, "user_usec").unwrap_or(0),
        kv(&cpu, "system_usec").unwrap_or(0),
    )
}

/// Whether the keeper that holds `slot` is still there (see
/// `Registration::is_live`): a pooled cgroup whose keeper died is retired,
/// never lent to a run as crash-safe.
fn held(slot: &Slot) -> bool {
    #[cfg(linux_raw)]
    return slot.keeper.as_ref().is_some_and(KeeperReg::is_live);
    #[cfg(not(linux_raw))]
    return slot.keeper.is_some();
}

/// Removes every pooled cgroup (see [`super::release_cgroup_pool`]).
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
fn retire(pool: &mut Pool, slot: Slot) {
    if let Some(wd) = slot.watch {
        KillWatch::remove(pool, wd);
    }
    if remove_tree(&slot.dir).is_err() && slot.dir.exists() {
        pool.retired.push(slot);
    }
}

/// Tries again to remove the retired cgroups still present.
fn retry_retired(pool: &mut Pool) {
    if !pool.retired.is_empty() {
        pool.retired
            .retain(|slot| remove_tree(&slot.dir).is_err() && slot.dir.exists());
    }
}

pub(crate) struct Cgroup {
    dir: PathBuf,
    parent: PathBuf,
    /// The directory's descriptors; `None` once it went back to the pool.
    slot: Option<Slot>,
    /// CPU time the cgroup had used when this run borrowed it (zero for a
    /// new one): usage is reported as the difference.
    cpu_base: (u64, u64),
    v1: Vec<V1Group>,
    /// The v2 `cgroup.procs`, opened only when v1 groups are used too (the
    /// child then writes itself into each before exec).
    v2_procs: Option<File>,
    v1_memory: Option<PathBuf>,
    v1_pids: Option<PathBuf>,
    limits: Limits,
    /// Whether the v2 memory / pids controllers are enabled for our cgroups
    /// (their accounting files exist then).
    v2_memory: bool,
    v2_pids: bool,
    pgid: Option<u32>,
    /// When SIGKILL was sent to the tree.
    killed_at: Option<Instant>,
    /// Members already sent a SIGKILL of their own after that.
    stragglers: std::collections::HashSet<u32>,
    /// Prompt reaping of the tree's orphans (subreaper processes only).
    orphans: Option<super::orphans::Registration>,
    released: bool,
    tracer: Tracer,
    /// The run's claim on controllers corral enabled in the parent
    /// (dropped after the cgroup is gone: the last one undoes them).
    leaf_hold: Option<super::cgroup_delegated::Hold>,
}

fn write_file(path: &Path, data: &str) -> io::Result<()> {
    let mut f = OpenOptions::new().write(true).open(path)?;
    f.write_all(data.as_bytes())
}

/// This process's random token, drawn once: with it, a cgroup name is
/// unique across PID namespaces (where two corrals may both be pid 1) and
/// boots, so no two live corrals ever share a name.
fn token() -> &'static str {
    static TOKEN: OnceLock<String> = OnceLock::new();
    TOKEN.get_or_init(|| {
        let mut b = [0u8; 8];
        let random = File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b));
        let mut v = u64::from_ne_bytes(b);
        if random.is_err() {
            // No /dev/urandom (a bare chroot): the clock, the pid and an
            // address still differ between any two processes in practice.
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            let addr = &b as *const _ as u64;
            v = nanos ^ (u64::from(std::process::id()) << 40) ^ addr.rotate_left(17);
        }
        format!("{v:016x}")
    })
}

fn name_for(seq: usize) -> String {
    format!("corral-{}-{}-{}", std::process::id(), token(), seq)
}

/// Whether `name` has the form [`name_for`] makes: `corral-<pid>-<token>-<n>`.
/// Directories named otherwise (an older corral's `corral-<pid>-<n>`,
/// anything else) are never touched by the stale-cgroup cleanup: their owner
/// held no lock, so whether they are abandoned cannot be known.
fn locked_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("corral-") else {
        return false;
    };
    let parts: Vec<&str> = rest.split('-').collect();
    parts.len() == 3
        && parts[0].parse::<u32>().is_ok()
        && parts[1].len() == 16
        && parts[1].bytes().all(|b| b.is_ascii_hexdigit())
        && parts[2].parse::<u64>().is_ok()
}

/// Takes the ownership lock of a cgroup directory this process just made:
/// an exclusive `flock` on an open descriptor of the directory itself, held
/// (in that descriptor) until the directory is removed, or until this
/// process dies. The lock lives on the directory's inode, which every
/// process sees whatever its PID or mount namespace, and it ends with the
/// last descriptor, never by pid reuse. Fails when a cleaner took the lock
/// first (it found the directory in the instant between `mkdir` and here,
/// empty and unlocked) or already removed the directory.
fn claim(dir: &Path) -> io::Result<File> {
    // A read-only descriptor of the directory (also what clone3 needs).
    let fd = File::open(dir)?;
    match rustix::fs::flock(&fd, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {}
        Err(rustix::io::Errno::WOULDBLOCK) => return Err(io::ErrorKind::WouldBlock.into()),
        // A file system without flock: the directory is unlocked, so no
        // cleaner will ever call it abandoned (it is merely never cleaned).
        Err(_) => {}
    }
    // Locked: a cleaner that got here first removed the directory.
    use std::os::unix::fs::MetadataExt;
    let (mine, there) = (fd.metadata()?, fs::metadata(dir)?);
    if (mine.dev(), mine.ino()) != (there.dev(), there.ino()) {
        return Err(io::ErrorKind::NotFound.into());
    }
    Ok(fd)
}

impl Cgroup {
    /// Creates the per-command cgroup (and v1 groups for limits). Fails if
    /// the hierarchy is not writable or a limit cannot be had.
    pub(crate) fn create(
        h: &Hierarchy,
        limits: Limits,
        tracer: Tracer,
    ) -> Result<Cgroup, CgroupError> {
        STALE.call_once(|| {
            remove_stale(h);
            super::cgroup_delegated::tidy(&h.own_v2);
        });
        // Controllers a limit needs, enabled in the parent (corral moves
        // itself aside if it stands in the way: see `cgroup_delegated`).
        let want = super::cgroup_delegated::wanted(limits);
        let leaf_hold = if want.is_empty() {
            None
        } else {
            super::cgroup_delegated::prepare(&h.own_v2, &want)?
        };
        let (v2_memory, v2_pids) = match leaf_hold {
            None => subtree_controllers(&h.own_v2),
            // Just enabled, maybe: read again.
            Some(_) => subtree_controllers_now(&h.own_v2),
        };
        if leaf_hold.is_none() && Self::poolable(limits, v2_memory, v2_pids) {
            if let Some(slot) = Self::borrow() {
                let cpu_base = cpu_usec(&slot);
                return Ok(Cgroup {
                    dir: slot.dir.clone(),
                    parent: h.own_v2.clone(),
                    slot: Some(slot),
                    cpu_base,
                    v1: Vec::new(),
                    v2_procs: None,
                    v1_memory: None,
                    v1_pids: None,
                    limits,
                    v2_memory,
                    v2_pids,
                    pgid: None,
                    killed_at: None,
                    stragglers: std::collections::HashSet::new(),
                    orphans: None,
                    released: false,
                    tracer,
                    leaf_hold: None,
                });
            }
        }
        let mut attempt = 0;
        let (name, dir, dir_fd) = loop {
            let name = name_for(SEQ.fetch_add(1, Ordering::Relaxed));
            let dir = h.own_v2.join(&name);
            let made = fs::create_dir(&dir).and_then(|()| claim(&dir));
            match made {
                Ok(fd) => break (name, dir, fd),
                // The name is taken, or a cleaner that found the new
                // directory before it was locked is removing it: take the
                // next number (never remove it: the cleaner does).
                Err(e)
                    if attempt < 16
                        && matches!(
                            e.kind(),
                            io::ErrorKind::AlreadyExists
                                | io::ErrorKind::NotFound
                                | io::ErrorKind::WouldBlock
                        ) =>
                {
                    attempt += 1;
                }
                Err(source) => {
                    return Err(CgroupError::Create {
                        parent: h.own_v2.clone(),
                        source,
                    })
                }
            }
        };
        let cleanup = |path: PathBuf, source: io::Error| {
            let _ = fs::remove_dir(&dir);
            CgroupError::Open { path, source }
        };
        // A cgroup v2 directory has `cgroup.events`; its descriptor is
        // opened when first needed (see `Slot::events`).
        if let Err(e) = fs::symlink_metadata(dir.join("cgroup.events")) {
            return Err(cleanup(dir.join("cgroup.events"), e));
        }
        // Watched from before the command runs, if it may be pooled.
        let (watch, epoch) = if Self::poolable(limits, v2_memory, v2_pids) {
            let mut pool = pool();
            let epoch = pool.epoch;
            (KillWatch::add(&mut pool, &dir), epoch)
        } else {
            (None, 0)
        };
        let mut cg = Cgroup {
            dir: dir.clone(),
            parent: h.own_v2.clone(),
            slot: Some(Slot {
                dir: dir.clone(),
                dir_fd,
                events: OnceLock::new(),
                keeper: None,
                cpu_stat: std::sync::OnceLock::new(),
                cg_stat: std::sync::OnceLock::new(),
                watch,
                epoch,
            }),
            cpu_base: (0, 0),
            v1: Vec::new(),
            v2_procs: None,
            v1_memory: None,
            v1_pids: None,
            limits,
            v2_memory,
            v2_pids,
            pgid: None,
            killed_at: None,
            stragglers: std::collections::HashSet::new(),
            orphans: None,
            released: false,
            tracer,
            leaf_hold,
        };
        // Crash safety: if this process dies before the run ends, the keeper
        // kills the cgroup and removes it. Without it (no clone3, too many
        // runs) the run is only cleaned up by the next corral's stale pass.
        #[cfg(linux_raw)]
        if let Some(slot) = cg.slot.as_mut() {
            slot.keeper =
                crate::sys::linux_spawn::keeper::register(slot.dir_fd.as_fd(), &h.own_v2, &name)
                    .ok();
        }
        if let Err(e) = cg.apply_limits(h, &name) {
            cg.remove_dirs();
            return Err(e);
        }
        Ok(cg)
    }

    /// Whether a run may use a pooled cgroup: it asks for no limit (a
    /// limited run gets a new cgroup, removed after it, so no limit can
    /// reach a later run), and no peak is accounted in v2 (`memory.peak`
    /// and `pids.peak` cannot be read as a per-run difference; CPU time
    /// can, and is).
    /// In a one-shot process ([`crate::one_shot_process`]) nothing is
    /// pooled: no run would borrow it, and the watch that pooling needs
    /// costs the process's exit an SRCU grace period (see [`KillWatch`]).
    fn poolable(limits: Limits, v2_memory: bool, v2_pids: bool) -> bool {
        !limits.any() && !v2_memory && !v2_pids && !super::one_shot()
    }

    /// A pooled cgroup proven empty now (`populated 0`, not frozen) and
    /// whose `cgroup.kill` nobody wrote ([`KillWatch`]): one that fails is
    /// retired.
    fn borrow() -> Option<Slot> {
        let mut pool = pool();
        retry_retired(&mut pool);
        if pool.slots.is_empty() {
            return None;
        }
        KillWatch::drain(&mut pool);
        loop {
            let slot = pool.slots.pop()?;
            let trusted = slot.epoch == pool.epoch
                && slot.watch.is_some_and(|wd| !pool.killed.contains(&wd))
                && held(&slot);
            if trusted && matches!(slot.events().and_then(events_of), Ok((false, false))) {
                return Some(slot);
            }
            retire(&mut pool, slot);
        }
    }

    /// Puts the cgroup back in the pool if it can serve another run: it was
    /// poolable, its root exited by itself and corral never killed the tree
    /// (once `cgroup.kill` was written to a cgroup, Linux 6.18 kills every
    /// child later cloned into it with `CLONE_INTO_CGROUP` at birth: found
    /// by trying; a write by anyone else is caught by [`KillWatch`] at the
    /// next borrow), the keeper holds it (so it is removed if corral dies),
    /// no v1 group belongs to it, it was empty and not frozen when the run
    /// ended (`empty_thawed`, read by `release`; the next borrow reads it
    /// again), the command left no nested cgroup, and the pool has room.
    /// Otherwise the caller removes it.
    fn give_back(&mut self, clean_exit: bool, empty_thawed: bool) -> bool {
        let fit = Self::poolable(self.limits, self.v2_memory, self.v2_pids)
            && clean_exit
            && empty_thawed
            && self.killed_at.is_none()
            && self.v1.is_empty()
            && self.leaf_hold.is_none()
            && self.slot.as_ref().is_some_and(|s| {
                s.keeper.is_some()
                    && s.watch.is_some()
                    && s.read_kept(&s.cg_stat, "cgroup.stat")
                        .is_some_and(|t| kv(&t, "nr_descendants") == Some(0))
            });
        if !fit {
            return false;
        }
        let mut pool = pool();
        let Some(slot) = self.slot.as_ref() else {
            return false;
        };
        if pool.slots.len() >= POOL_MAX
            || slot.epoch != pool.epoch
            || slot.watch.is_some_and(|wd| pool.killed.contains(&wd))
        {
            return false;
        }
        if let Some(slot) = self.slot.take() {
            if self.tracer.enabled() {
                let inode = fs::metadata(&self.dir).map_or(0, |m| m.ino());
                self.tracer.record(OsOp::CgroupPooled { inode });
            }
            pool.slots.push(slot);
        }
        true
    }

    fn v2_has(&self, ctrl: &str) -> bool {
        fs::read_to_string(self.dir.join("cgroup.controllers"))
            .is_ok_and(|s| s.split_whitespace().any(|c| c == ctrl))
    }

    fn apply_limits(&mut self, h: &Hierarchy, name: &str) -> Result<(), CgroupError> {
        if !self.limits.any() {
            return Ok(());
        }
        let want = [
            (
                "pids",
                self.limits.pids_max,
                "pids.max",
                h.own_v1_pids.as_ref(),
                "pids.max",
            ),
            (
                "memory",
                self.limits.memory_max,
                "memory.max",
                h.own_v1_memory.as_ref(),
                "memory.limit_in_bytes",
            ),
        ];
        for (ctrl, value, v2_file, v1_own, v1_file) in want {
            // Accounting (peak, events) is wanted even without a limit; a
            // limit must be had or the run fails.
            if self.v2_has(ctrl) {
                if let Some(v) = value {
                    write_file(&self.dir.join(v2_file), &v.to_string()).map_err(|source| {
                        CgroupError::SetLimit {
                            file: v2_file,
                            source,
                        }
                    })?;
                }
                continue;
            }
            let Some(own) = v1_own else {
                if value.is_some() {
                    return Err(CgroupError::NoController { controller: ctrl });
                }
                continue;
            };
            if value.is_none() {
                continue;
            }
            let dir = own.join(name);
            fs::create_dir(&dir).map_err(|source| CgroupError::CreateV1 {
                dir: dir.clone(),
                source,
            })?;
            let procs = OpenOptions::new()
                .write(true)
                .open(dir.join("cgroup.procs"));
            let procs = match procs {
                Ok(p) => p,
                Err(source) => {
                    let _ = fs::remove_dir(&dir);
                    return Err(CgroupError::Open {
                        path: dir.join("cgroup.procs"),
                        source,
                    });
                }
            };
            self.v1.push(V1Group {
                dir: dir.clone(),
                procs,
            });
            if ctrl == "memory" {
                self.v1_memory = Some(dir.clone());
            } else {
                self.v1_pids = Some(dir.clone());
            }
            if let Some(v) = value {
                write_file(&dir.join(v1_file), &v.to_string()).map_err(|source| {
                    CgroupError::SetLimit {
                        file: v1_file,
                        source,
                    }
                })?;
            }
        }
        Ok(())
    }

    /// Whether any process is left in the cgroup (re-arms the POLLPRI
    /// notification by reading through the watched descriptor).
    fn populated(&self) -> io::Result<bool> {
        match &self.slot {
            Some(s) => s.read_events().map(|(p, _)| p),
            // Back in the pool: it was proven empty then.
            None => Ok(false),
        }
    }

    fn procs_of(dir: &Path, out: &mut Vec<u32>) {
        if let Ok(s) = fs::read_to_string(dir.join("cgroup.procs")) {
            out.extend(s.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
        }
        // Nested cgroups made by the command itself are part of the tree.
        if let Ok(rd) = fs::read_dir(dir) {
            for e in rd.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    Self::procs_of(&e.path(), out);
                }
            }
        }
    }

    fn all_procs(&self) -> Vec<u32> {
        let mut v = Vec::new();
        Self::procs_of(&self.dir, &mut v);
        v
    }

    /// Live members of the root's process group (pinned by the unreaped
    /// root, so every one descends from the tree) outside the cgroup: a
    /// process with write access to an ancestor's `cgroup.procs` (root, or
    /// the owner of a delegated subtree) can move itself out, and no cgroup
    /// mechanism can stop it. Those that also left the group are not found
    /// (the PID-namespace tier holds them).
    fn migrated(&self) -> Vec<u32> {
        match self.pgid {
            Some(pgid) if !self.released => sys::group_members(pgid).unwrap_or_default(),
            _ => Vec::new(),
        }
    }

    fn check_live(&self) -> io::Result<()> {
        if self.released {
            return Err(io::Error::other(
                "cgroup already released; refusing to signal",
            ));
        }
        Ok(())
    }

    /// Signals each member through a pidfd, after checking that the pinned
    /// process is still in this cgroup (so a reused pid is never hit).
    /// Members already reached through the process group (`skip_pgid`) are
    /// skipped, so each process gets the signal once.
    fn signal_members(&self, sig: Signal, skip_pgid: Option<u32>) -> io::Result<()> {
        self.signal_pids(&self.all_procs(), sig, skip_pgid)
    }

    /// Signals each of `pids` that is still in this cgroup, through a pidfd
    /// opened before the membership check (so a reused pid is never hit).
    fn signal_pids(&self, pids: &[u32], sig: Signal, skip_pgid: Option<u32>) -> io::Result<()> {
        let rsig = sys::to_rustix(sig)?;
        let rel = self.dir.strip_prefix(&self.parent).unwrap_or(&self.dir);
        let marker = format!("/{}", rel.display());
        for &pid in pids {
            let Some(p) = rustix::process::Pid::from_raw(pid as i32) else {
                continue;
            };
            let Ok(fd) = rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty())
            else {
                continue;
            };
            let cg = fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
            let inside = cg
                .lines()
                .find_map(|l| l.strip_prefix("0::"))
                .is_some_and(|p| p.ends_with(&marker) || p.contains(&format!("{marker}/")));
            let in_group = skip_pgid
                .is_some_and(|pgid| sys::linux_proc::stat_of(pid).is_some_and(|s| s.pgrp == pgid));
            if inside && !in_group {
                self.tracer.record(OsOp::SignalMember {
                    via: Mechanism::Cgroup,
                    pid,
                    signal: sig,
                });
                let _ = rustix::process::pidfd_send_signal(&fd, rsig);
            }
        }
        Ok(())
    }

    /// After SIGKILL: members that are still listed a little later get a
    /// SIGKILL of their own, once each. `cgroup.kill` passes over a process
    /// whose leader thread already exited while other threads run; one
    /// signal to the process (what `kill(2)` does) ends it.
    fn kill_stragglers(&mut self, listed: &[u32]) {
        if self
            .killed_at
            .is_none_or(|t| t.elapsed() < STRAGGLERS_AFTER)
        {
            return;
        }
        let new: Vec<u32> = listed
            .iter()
            .copied()
            .filter(|p| !self.stragglers.contains(p))
            .collect();
        if new.is_empty() {
            return;
        }
        self.stragglers.extend(new.iter().copied());
        let _ = self.signal_pids(&new, Signal::KILL, None);
    }

    fn kill_all(&mut self) -> io::Result<()> {
        self.killed_at.get_or_insert_with(Instant::now);
        match write_file(&self.dir.join("cgroup.kill"), "1") {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                // Before Linux 5.14: freeze (no fork, no exit can race us),
                // kill every member, thaw.
                write_file(&self.dir.join("cgroup.freeze"), "1")?;
                let end = Instant::now() + Duration::from_millis(200);
                let mut frozen = false;
                while Instant::now() < end {
                    let ev = fs::read_to_string(self.dir.join("cgroup.events")).unwrap_or_default();
                    if ev.lines().any(|l| l.trim() == "frozen 1") {
                        frozen = true;
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                if frozen {
                    // Frozen members neither exit nor fork: their pids are
                    // theirs until the SIGKILL below lands.
                    for pid in self.all_procs() {
                        if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
                            self.tracer.record(OsOp::SignalMember {
                                via: Mechanism::Cgroup,
                                pid,
                                signal: Signal::KILL,
                            });
                            let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
                        }
                    }
                } else {
                    // Not confirmed frozen: through pidfds checked for
                    // membership, so a reused pid is never hit.
                    let _ = self.signal_members(Signal::KILL, None);
                }
                write_file(&self.dir.join("cgroup.freeze"), "0")
            }
            Err(e) => Err(e),
        }
    }

    fn move_out(&self) {
        if !self.populated().unwrap_or(true) {
            return; // nothing left in the cgroup
        }
        // corral's own cgroup (the leaf, if it moved itself aside).
        let home = super::cgroup_delegated::home(&self.parent);
        for _ in 0..20 {
            let pids = self.all_procs();
            if pids.is_empty() {
                break;
            }
            for pid in pids {
                let _ = write_file(&home.join("cgroup.procs"), &pid.to_string());
                for g in &self.v1 {
                    if let Some(parent) = g.dir.parent() {
                        let _ = write_file(&parent.join("cgroup.procs"), &pid.to_string());
                    }
                }
            }
        }
    }

    fn remove_dirs(&mut self) {
        if let Some(wd) = self.slot.as_mut().and_then(|s| s.watch.take()) {
            KillWatch::remove(&mut pool(), wd);
        }
        // The v1 groups first: the ownership lock (on the v2 directory)
        // stays held until everything of this command is gone, so a v1
        // group whose v2 twin is missing was never in use.
        for g in self.v1.drain(..) {
            for _ in 0..50 {
                if fs::remove_dir(&g.dir).is_ok() || !g.dir.exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        let inode = self
            .tracer
            .enabled()
            .then(|| fs::metadata(&self.dir).map_or(0, |m| m.ino()));
        for _ in 0..50 {
            // Depth first: the command may have made cgroups of its own.
            match remove_tree(&self.dir) {
                Ok(()) => {
                    if let Some(inode) = inode {
                        self.tracer.record(OsOp::CgroupRemoved { inode });
                    }
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                Err(_) => std::thread::sleep(Duration::from_millis(2)),
            }
        }
    }
}

fn kv(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

fn read_kv(path: &Path, key: &str) -> Option<u64> {
    kv(&fs::read_to_string(path).ok()?, key)
}

fn read_u64(path: &Path) -> Option<u64> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

impl Containment for Cgroup {
    fn mechanism(&self) -> Mechanism {
        Mechanism::Cgroup
    }

    fn placement(&mut self) -> io::Result<sys::Placement<'_>> {
        let slot = self
            .slot
            .as_ref()
            .ok_or_else(|| io::Error::other("cgroup already released"))?;
        // Only v2: the spawn opens `cgroup.procs` through the directory if
        // it cannot be born there (no clone3). With v1 groups, every
        // `cgroup.procs` is written by the child before exec.
        let mut procs = Vec::new();
        if !self.v1.is_empty() {
            if self.v2_procs.is_none() {
                self.v2_procs = Some(
                    OpenOptions::new()
                        .write(true)
                        .open(self.dir.join("cgroup.procs"))?,
                );
            }
            procs.extend(self.v2_procs.as_ref().map(AsFd::as_fd));
        }
        procs.extend(self.v1.iter().map(|g| g.procs.as_fd()));
        Ok(sys::Placement {
            new_group: true,
            // Born inside with clone3 where only v2 is used: clone3 cannot
            // enter v1 groups (see the module documentation), so with those
            // the child writes itself into every `cgroup.procs` before exec.
            cgroup_dir: self.v1.is_empty().then(|| slot.dir_fd.as_fd()),
            cgroup_procs: procs,
            cgroup_path: Some(&self.dir),
            env: Vec::new(),
        })
    }

    fn attach(&mut self, root: &Root) -> io::Result<()> {
        self.pgid = Some(root.id());
        let name = self
            .dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned());
        self.orphans = name
            .and_then(|n| super::orphans::register(root.id(), super::orphans::Claim::Cgroup(n)));
        Ok(())
    }

    fn signal(&mut self, sig: Signal) -> io::Result<()> {
        self.check_live()?;
        let inode = fs::metadata(&self.dir)
            .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
            .unwrap_or(0);
        self.tracer.record(OsOp::SignalTree {
            via: Mechanism::Cgroup,
            target: inode,
            signal: sig,
        });
        if sig == Signal::KILL {
            self.killed_at.get_or_insert_with(Instant::now);
            let res = self.kill_all();
            // A member that moved itself out of the cgroup (root, or write
            // access to an ancestor's cgroup.procs) but stayed in the process
            // group, which the unreaped root pins.
            if let Some(pgid) = self.pgid {
                let _ = sys::signal_group(pgid, Signal::KILL);
            }
            return res;
        }
        // The group first (delivery order as with a process group), then
        // every member that left the group.
        if let Some(pgid) = self.pgid {
            sys::signal_group(pgid, sig)?;
        }
        self.signal_members(sig, self.pgid)?;
        if sig != Signal::CONT {
            if let Some(pgid) = self.pgid {
                sys::signal_group(pgid, Signal::CONT)?;
            }
            self.signal_members(Signal::CONT, self.pgid)?;
        }
        Ok(())
    }

    fn members(&mut self) -> io::Result<Vec<u32>> {
        if !self.populated()? {
            // The cgroup is empty. Before that is taken for "the tree is
            // gone", one scan for members of the root's process group that
            // live outside it: they left the cgroup by migration (see
            // `migrated`). Only here, so a run pays for it once, when its
            // tree seems gone, and not on every check.
            return Ok(self.migrated());
        }
        let pids = self.all_procs();
        if !self.released {
            self.kill_stragglers(&pids);
        }
        Ok(pids)
    }

    /// Without the scan for migrated members: whatever the policy keeps is
    /// left alone anyway, and a clean run must not pay for a scan of /proc.
    fn count_kept(&mut self, root: &mut Root) -> io::Result<usize> {
        if !self.populated()? {
            return Ok(0);
        }
        let pid = root.id();
        Ok(self.all_procs().into_iter().filter(|&p| p != pid).count())
    }

    #[cfg(unix)]
    fn wake_fd(&self) -> Option<(BorrowedFd<'_>, super::WakeOn)> {
        let slot = self.slot.as_ref()?;
        Some((slot.events().ok()?.as_fd(), super::WakeOn::Priority))
    }

    /// Crash-safe when the keeper holds the cgroup (it kills and removes
    /// it if this process dies).
    fn crash_safety(&self, root: &Root) -> crate::report::CrashSafety {
        let keeper = self.slot.as_ref().and_then(|s| s.keeper.as_ref());
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
        let cpu = match &self.slot {
            Some(slot) => slot.cpu_stat(),
            None => fs::read_to_string(self.dir.join("cpu.stat")).unwrap_or_default(),
        };
        // This run's share: a pooled cgroup's counters include earlier runs.
        let cpu_field = |key: &str, base: u64| {
            kv(&cpu, key).map(|v| Duration::from_micros(v.saturating_sub(base)))
        };
        let mut usage = Usage {
            cpu_user: cpu_field("user_usec", self.cpu_base.0),
            cpu_system: cpu_field("system_usec", self.cpu_base.1),
            memory_peak: None,
            pids_peak: None,
        };
        let mut hits = Vec::new();
        // The memory and pids files exist only where those controllers are
        // enabled for our cgroups; do not probe for them otherwise.
        if self.v2_memory {
            usage.memory_peak = read_u64(&self.dir.join("memory.peak"));
            if read_kv(&self.dir.join("memory.events"), "oom_kill").unwrap_or(0) > 0 {
                hits.push(LimitHit::Memory);
            }
        }
        if self.v2_pids {
            usage.pids_peak = read_u64(&self.dir.join("pids.peak"));
            if read_kv(&self.dir.join("pids.events"), "max").unwrap_or(0) > 0 {
                hits.push(LimitHit::Pids);
            }
        }
        if let Some(m) = &self.v1_memory {
            usage.memory_peak = usage
                .memory_peak
                .or(read_u64(&m.join("memory.max_usage_in_bytes")));
            if read_kv(&m.join("memory.oom_control"), "oom_kill").unwrap_or(0) > 0
                && !hits.contains(&LimitHit::Memory)
            {
                hits.push(LimitHit::Memory);
            }
        }
        if let Some(p) = &self.v1_pids {
            usage.pids_peak = usage.pids_peak.or(read_u64(&p.join("pids.peak")));
            if read_kv(&p.join("pids.events"), "max").unwrap_or(0) > 0
                && !hits.contains(&LimitHit::Pids)
            {
                hits.push(LimitHit::Pids);
            }
        }
        Some((usage, hits))
    }

    fn release(&mut self, root: &mut Root) -> io::Result<()> {
        if self.released {
            return Ok(());
        }
        self.released = true;
        // Only a cgroup that held no kept member goes back to the pool. One
        // read: an empty cgroup stays empty unless someone outside the tree
        // moves a process in, which the next borrow's own read would see.
        let events = match &self.slot {
            Some(s) => s.read_events(),
            None => Ok((false, false)),
        };
        let was_empty = matches!(events, Ok((false, _)));
        let clean_exit = matches!(root.peek_exit(), Ok(Some(crate::RootStatus::Exited(_))));
        // Kept (or unkillable) members leave the per-command cgroup so that
        // it can be removed; nothing is signalled from here on.
        if !was_empty {
            self.move_out();
        }
        if let Some(o) = self.orphans.take() {
            o.finish();
        }
        let pid = root.id();
        let res = root.reap();
        self.tracer.record(OsOp::Reaped { pid });
        if was_empty && self.give_back(clean_exit, matches!(events, Ok((false, false)))) {
            self.tracer.record(OsOp::Released {
                via: Mechanism::Cgroup,
            });
            return res;
        }
        self.remove_dirs();
        self.tracer.record(OsOp::Released {
            via: Mechanism::Cgroup,
        });
        if self.dir.exists() {
            return Err(io::Error::other(format!(
                "could not remove {}",
                self.dir.display()
            )));
        }
        res
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // A Cgroup dropped without release (spawn failed): nothing ran in it.
        if !self.released {
            self.released = true;
            let _ = self.kill_all();
            self.remove_dirs();
        }
    }
}

/// Removes a cgroup directory and the cgroups below it, leaves first.
fn remove_tree(dir: &Path) -> io::Result<()> {
    if let Ok(rd) = fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                let _ = remove_tree(&e.path());
            }
        }
    }
    fs::remove_dir(dir)
}

/// Removes the cgroups left by corral processes that are gone: kills what is
/// still inside (its run is over) and removes the directories.
///
/// A directory is abandoned only when its ownership lock (see [`claim`]) can
/// be taken: its owner held it from the moment it made the directory until
/// it removed it, so the lock is free only once every descriptor of the
/// owner's is closed, i.e. the owner (and anything it forked without exec,
/// such as a keeper) is gone. Nothing here depends on a pid, so a corral in
/// another PID namespace, or one whose pid was reused, is never mistaken
/// for a dead one. When in doubt (another name form, no flock, the lock
/// held) nothing is signalled and nothing is removed. A directory found in
/// the instant between its owner's `mkdir` and its lock is empty: it is
/// removed, and the owner, whose lock then fails, takes another name.
fn remove_stale(h: &Hierarchy) {
    if let Ok(rd) = fs::read_dir(&h.own_v2) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !locked_name(&name) {
                continue;
            }
            let dir = e.path();
            let Ok(fd) = File::open(&dir) else { continue };
            if rustix::fs::flock(&fd, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err()
            {
                continue; // its owner lives (or flock is not available here)
            }
            // Ours now, and abandoned: kill what is left, then remove the
            // v1 groups and the directory, still holding the lock.
            let events = fs::read_to_string(dir.join("cgroup.events")).unwrap_or_default();
            if events.lines().any(|l| l.trim() == "populated 1") {
                let _ = write_file(&dir.join("cgroup.kill"), "1");
            }
            let v1: Vec<PathBuf> = [h.own_v1_pids.as_ref(), h.own_v1_memory.as_ref()]
                .into_iter()
                .flatten()
                .map(|own| own.join(&name))
                .filter(|d| d.exists())
                .collect();
            for _ in 0..100 {
                for d in &v1 {
                    let _ = fs::remove_dir(d);
                }
                if remove_tree(&dir).is_ok() && v1.iter().all(|d| !d.exists()) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            drop(fd);
        }
    }
    // v1 groups whose v2 directory is gone (the owner removes the v1 groups
    // first, under its lock): nothing uses them; removed only when empty,
    // never signalled.
    for own in [h.own_v1_pids.as_ref(), h.own_v1_memory.as_ref()]
        .into_iter()
        .flatten()
    {
        let Ok(rd) = fs::read_dir(own) else { continue };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if locked_name(&name) && !h.own_v2.join(&name).exists() {
                let _ = fs::remove_dir(e.path());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
    const PROC: &str = "8:pids:/
4:memory:/a/b
0::/user.slice/x.scope
";

    #[test]
    fn finds_hybrid_hierarchies() {
        let h = detect_from(HYBRID, PROC).unwrap();
        assert_eq!(
            h.own_v2,
            PathBuf::from("/sys/fs/cgroup/unified/user.slice/x.scope")
        );
        assert_eq!(h.own_v1_pids, Some(PathBuf::from("/sys/fs/cgroup/pids")));
        assert_eq!(
            h.own_v1_memory,
            Some(PathBuf::from("/sys/fs/cgroup/memory/a/b"))
        );
    }

    #[test]
    fn finds_unified_hierarchy_and_namespace_root() {
        let mi = "30 1 0:26 /ns /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n";
        let h = detect_from(mi, "0::/ns/app\n").unwrap();
        assert_eq!(h.own_v2, PathBuf::from("/sys/fs/cgroup/app"));
        assert!(h.own_v1_pids.is_none());
    }

    #[test]
    fn reports_missing_v2() {
        let mi = "35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n";
        assert!(matches!(
            detect_from(mi, "4:memory:/\n"),
            Err(CgroupError::NoV2Mount)
        ));
        assert!(matches!(
            detect_from(HYBRID, "4:memory:/\n"),
            Err(CgroupError::NoV2Membership)
        ));
    }

    #[test]
    fn errors_keep_the_os_error_as_the_source() {
        use std::error::Error as _;
        let e = CgroupError::Create {
            parent: PathBuf::from("/sys/fs/cgroup/x"),
            source: io::Error::from_raw_os_error(13),
        };
        // The cached detection hands out copies: the errno survives.
        let copy = e.clone();
        let os = copy.source().and_then(|s| s.downcast_ref::<io::Error>());
        assert_eq!(os.and_then(io::Error::raw_os_error), Some(13));
        let note = crate::error::chain_text(&e);
        assert!(note.starts_with("cannot create a cgroup under /sys/fs/cgroup/x (corral needs a writable, delegated cgroup v2 subtree): "), "{note}");
        match crate::Error::from(e) {
            err @ crate::Error::Containment { .. } => {
                let text = err.to_string();
                assert!(
                    text.contains("cannot create a cgroup under /sys/fs/cgroup/x"),
                    "{text}"
                );
                let os = err.source().and_then(|s| s.downcast_ref::<io::Error>());
                assert_eq!(os.and_then(io::Error::raw_os_error), Some(13));
                let crate::Error::Containment {
                    mechanism, reason, ..
                } = err
                else {
                    unreachable!()
                };
                assert_eq!(mechanism, Mechanism::Cgroup);
                assert!(
                    !reason.contains("os error"),
                    "the OS error is the source, not the reason: {reason}"
                );
            }
            other => panic!("{other:?}"),
        }
        let missing = crate::Error::from(CgroupError::NoController { controller: "pids" });
        assert!(missing.source().is_none());
        assert!(missing
            .to_string()
            .contains("the pids controller is available neither"));
    }

    #[test]
    fn unescapes_mount_points() {
        assert_eq!(unescape("/a\\040b"), "/a b");
        assert_eq!(unescape("/plain"), "/plain");
    }
}
