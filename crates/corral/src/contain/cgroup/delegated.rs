//! Limits inside a delegated cgroup v2 subtree (Linux).
//!
//! A run with a limit needs the `memory`/`pids` controllers in its own
//! cgroup, so enabled in the `cgroup.subtree_control` of the cgroup the runs'
//! cgroups are made in (the *parent*: corral's own cgroup, or the delegated
//! cgroup above it, see `hierarchy::detect`). The kernel's "no internal
//! processes" rule refuses that (`EBUSY`) while a process sits in the parent
//! itself, and an unprivileged corral in a delegated subtree (`systemd-run
//! --user --scope -p Delegate=yes corral ...`, a cgroup root handed over)
//! sits exactly there. So, for a run that needs a controller:
//!
//! 1. A shared `flock` on the parent's directory, held while this process
//!    has a run that uses what corral enabled there: the exclusive lock is
//!    what undoing it takes (step 4), so no corral ever takes a controller
//!    away from another corral's running limits.
//! 2. Enable the controllers. If the kernel refuses because corral itself
//!    sits in the parent, corral moves itself (and its keeper) into the
//!    shared leaf `<parent>/corral-leaf` (made if missing, never removed
//!    while a shared lock is held, so it is never lost between its `mkdir`
//!    and the move) and tries again. Other corrals moving themselves at the
//!    same moment are out within microseconds: the refusal is retried for
//!    up to [`PATIENCE`].
//! 3. Still refused: another process sits in the parent (the user's shell,
//!    a corral without limits, a host's other child). corral does not move
//!    processes that are not its own: it moves itself back, and the run
//!    fails with the pids that stand in the way (exit 125).
//! 4. When this process's last such run ends, it takes the exclusive lock
//!    (without waiting: a corral that holds the shared lock still needs the
//!    controllers, and the last one out does this): the controllers are
//!    disabled again (those this process enabled; those another corral did,
//!    only if every child of the parent is corral's), corral
//!    moves itself and its keeper back, and the leaf is removed. Leaves and
//!    controllers of a corral killed before this are undone the same way by
//!    the next corral there, at its first cgroup ([`tidy`]); a systemd scope
//!    removes its whole subtree anyway.
//!
//! The state is per process; the parent is the one detection found. A
//! corral started by a process that a corral moved aside is born in the
//! leaf: detection takes the leaf's parent as its own (`above_leaf`).
//!
//! Test hook: `CORRAL_TEST_V2_CONTROLLERS` names more controllers every
//! cgroup run asks for (the tests use `hugetlb` where memory and pids are
//! v1 groups).

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::files::CgroupFile;
use crate::contain::Limits;

/// Why the controllers cannot be had (made a `CgroupError` by the caller).
#[derive(Debug)]
pub(crate) enum LeafError {
    /// Other processes sit in the parent (their pids).
    Occupied { parent: PathBuf, pids: String },
    /// The parent's `cgroup.subtree_control` is not the user's.
    NotDelegated { parent: PathBuf, source: io::Error },
    /// A step on `path` failed (`mkdir` of the leaf, a move, a lock).
    Io { path: PathBuf, source: io::Error },
    /// The kernel refused to enable a controller for another reason.
    Enable { source: io::Error },
}

/// The shared leaf corral processes move themselves into.
pub(crate) const LEAF: &str = "corral-leaf";

/// How long a refusal to enable a controller is retried while other
/// processes leave the parent.
const PATIENCE: Duration = Duration::from_millis(1000);

/// Test hook: more v2 controllers every cgroup run asks for (space
/// separated), so the mechanism can be tested where `memory`/`pids` are
/// bound to v1 (hybrid systems offer only a few controllers in v2).
const EXTRA_VAR: &str = "CORRAL_TEST_V2_CONTROLLERS";

struct State {
    /// The parent's directory, locked shared while `holds > 0`.
    lock: Option<File>,
    holds: usize,
    /// corral sits in the leaf (it moved itself).
    moved: bool,
    /// Controllers this process enabled in the parent.
    enabled: Vec<String>,
}

static STATE: crate::sys::per_process::PerProcess<State> =
    crate::sys::per_process::PerProcess::new(|| State {
        lock: None,
        holds: 0,
        moved: false,
        enabled: Vec::new(),
    });

/// A run's claim on the controllers corral enabled in the parent; dropped
/// when the run's cgroup is gone.
pub(crate) struct Hold {
    parent: PathBuf,
}

impl Drop for Hold {
    fn drop(&mut self) {
        let mut st = STATE.lock();
        st.holds = st.holds.saturating_sub(1);
        if st.holds == 0 {
            undo(&mut st, &self.parent);
        }
    }
}

/// The v2 controllers a run with `limits` needs in its cgroup.
pub(crate) fn wanted(limits: Limits) -> Vec<String> {
    let mut want = Vec::new();
    if limits.memory_max.is_some() {
        want.push("memory".to_owned());
    }
    if limits.pids_max.is_some() {
        want.push("pids".to_owned());
    }
    if let Some(extra) = std::env::var_os(EXTRA_VAR) {
        for c in extra.to_string_lossy().split_whitespace() {
            if !want.iter().any(|w| w == c) {
                want.push(c.to_owned());
            }
        }
    }
    want
}

/// Makes the controllers of `want` that the parent offers (the others are
/// left to v1 groups or to the limit's own error) enabled for the runs'
/// cgroups in `parent`, moving corral into the leaf if it stands in the way
/// (see the module docs). `None`: nothing to hold (no controller wanted).
pub(crate) fn prepare(parent: &Path, want: &[String]) -> Result<Option<Hold>, LeafError> {
    // The hierarchy's real root (it has no `cgroup.type`) has no "no
    // internal processes" rule, and what it enables is the whole system's
    // choice: left alone. A cgroup namespace's root (a container's) is an
    // ordinary cgroup and follows the rule.
    let at_root = !CgroupFile::Type.path(parent).exists();
    let offered = CgroupFile::Controllers.read_words(parent);
    let want: Vec<&String> = want.iter().filter(|c| offered.contains(c)).collect();
    if want.is_empty() || at_root {
        return Ok(None);
    }
    let mut st = STATE.lock();
    if st.lock.is_none() {
        st.lock = Some(lock_shared(parent)?);
        // Born in the leaf (its starter was moved aside by a corral): it
        // goes back to the parent with the others when undone.
        st.moved = st.moved || in_leaf(parent);
    }
    // From here on the run holds the lock: a failure gives it back.
    st.holds += 1;
    let hold = Hold {
        parent: parent.to_path_buf(),
    };
    let res = enable(&mut st, parent, &want);
    drop(st);
    res.map(|()| Some(hold))
}

/// The shared lock on the parent, waited for while another corral undoes
/// (that takes a moment; at most [`PATIENCE`] is waited).
fn lock_shared(parent: &Path) -> Result<File, LeafError> {
    use rustix::fs::{flock, FlockOperation};
    let open = |source| LeafError::Io {
        path: parent.to_path_buf(),
        source,
    };
    let dir = File::open(parent).map_err(open)?;
    let end = Instant::now() + PATIENCE;
    loop {
        match flock(&dir, FlockOperation::NonBlockingLockShared) {
            Ok(()) => return Ok(dir),
            Err(rustix::io::Errno::WOULDBLOCK) if Instant::now() < end => {
                std::thread::sleep(Duration::from_millis(2));
            }
            // No flock here: nothing can be coordinated, but nothing is
            // undone either (undo needs the exclusive lock).
            Err(rustix::io::Errno::WOULDBLOCK) => {
                return Err(open(io::ErrorKind::WouldBlock.into()))
            }
            Err(_) => return Ok(dir),
        }
    }
}

fn enable(st: &mut State, parent: &Path, want: &[&String]) -> Result<(), LeafError> {
    let control = CgroupFile::SubtreeControl;
    let end = Instant::now() + PATIENCE;
    loop {
        let on = control.read_words(parent);
        let missing: Vec<&String> = want.iter().copied().filter(|c| !on.contains(c)).collect();
        if missing.is_empty() {
            return Ok(());
        }
        let line = missing
            .iter()
            .map(|c| format!("+{c}"))
            .collect::<Vec<_>>()
            .join(" ");
        match control.write(parent, &line) {
            Ok(()) => {
                for c in missing {
                    if !st.enabled.contains(c) {
                        st.enabled.push(c.clone());
                    }
                }
                return Ok(());
            }
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::BUSY.raw_os_error()) => {
                if !st.moved && sits_in(parent) {
                    move_into_leaf(st, parent)?;
                    continue;
                }
                if Instant::now() < end {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                }
                let pids = CgroupFile::Procs.read_words(parent);
                // Nothing was enabled: corral may go back where it was.
                move_back(st, parent);
                return Err(LeafError::Occupied {
                    parent: parent.to_path_buf(),
                    pids: pids.join(" "),
                });
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem
                ) || e.raw_os_error() == Some(rustix::io::Errno::PERM.raw_os_error()) =>
            {
                return Err(LeafError::NotDelegated {
                    parent: parent.to_path_buf(),
                    source: e,
                })
            }
            Err(source) => return Err(LeafError::Enable { source }),
        }
    }
}

/// The cgroup above `own` if `own` is a corral leaf.
pub(crate) fn above_leaf(own: &Path) -> Option<&Path> {
    own.file_name()
        .is_some_and(|n| n == LEAF)
        .then(|| own.parent())
        .flatten()
}

/// Whether this process sits in the leaf of `parent`.
fn in_leaf(parent: &Path) -> bool {
    CgroupFile::Procs
        .read_words(&parent.join(LEAF))
        .iter()
        .any(|p| p.parse::<u32>().ok() == Some(std::process::id()))
}

/// Whether this process sits in `parent` itself.
fn sits_in(parent: &Path) -> bool {
    CgroupFile::Procs
        .read_words(parent)
        .iter()
        .any(|p| p.parse::<u32>().ok() == Some(std::process::id()))
}

fn keeper_pid() -> Option<u32> {
    #[cfg(linux_raw)]
    return crate::sys::linux_spawn::keeper::pid_of_own_keeper();
    #[cfg(not(linux_raw))]
    return None;
}

/// Moves this process (every thread: `cgroup.procs`) and its keeper (an
/// unreaped child, so its pid is its own) into `dir`.
fn move_to(dir: &Path) -> io::Result<()> {
    CgroupFile::Procs.write(dir, "0")?;
    if let Some(k) = keeper_pid() {
        let _ = CgroupFile::Procs.write(dir, &k.to_string());
    }
    Ok(())
}

fn move_into_leaf(st: &mut State, parent: &Path) -> Result<(), LeafError> {
    let leaf = parent.join(LEAF);
    match fs::create_dir(&leaf) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(source) => return Err(LeafError::Io { path: leaf, source }),
    }
    move_to(&leaf).map_err(|source| LeafError::Io {
        path: CgroupFile::Procs.path(&leaf),
        source,
    })?;
    st.moved = true;
    Ok(())
}

/// Back into the parent (possible only while no domain controller is
/// enabled there); the leaf is left for [`undo`].
fn move_back(st: &mut State, parent: &Path) {
    if st.moved && move_to(parent).is_ok() {
        st.moved = false;
    }
}

/// The last run of this process that held the controllers ended (see the
/// module docs, step 4).
fn undo(st: &mut State, parent: &Path) {
    use rustix::fs::{flock, FlockOperation};
    let Some(lock) = st.lock.take() else { return };
    if flock(&lock, FlockOperation::NonBlockingLockExclusive).is_err() {
        // Another corral still uses the controllers: it undoes them, and
        // removes the leaf once this process (still in it) is gone.
        return;
    }
    let leaf = parent.join(LEAF);
    let leaf_exists = leaf.exists();
    let only_corral = fs::read_dir(parent).is_ok_and(|rd| {
        rd.flatten().all(|e| {
            !e.file_type().is_ok_and(|t| t.is_dir())
                || e.file_name().to_string_lossy().starts_with("corral-")
        })
    });
    // What corral enabled: what this process enabled itself, whatever else
    // is below (no one relied on it before); and, while the leaf exists and
    // every cgroup below is corral's, everything enabled (a process sat in
    // the parent before corral moved aside, so nothing was enabled there
    // then, and no one else uses them now).
    let on = CgroupFile::SubtreeControl.read_words(parent);
    let ours: Vec<&String> = on
        .iter()
        .filter(|c| (leaf_exists && only_corral) || st.enabled.contains(c))
        .collect();
    let disabled = ours.is_empty() || {
        let line = ours
            .iter()
            .map(|c| format!("-{c}"))
            .collect::<Vec<_>>()
            .join(" ");
        CgroupFile::SubtreeControl.write(parent, &line).is_ok()
    };
    if disabled {
        st.enabled.clear();
        move_back(st, parent);
        if !st.moved && leaf_exists {
            // A corral that was in it may still be exiting.
            let end = Instant::now() + Duration::from_millis(200);
            while fs::remove_dir(&leaf).is_err() && leaf.exists() && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
    drop(lock);
}

/// Undoes what a corral that died holding the controllers left in
/// `parent` (it never reached step 4: SIGKILL), once per process, at its
/// first cgroup run: with the exclusive lock (no corral uses them), the
/// same as the last one out does.
pub(crate) fn tidy(parent: &Path) {
    if !parent.join(LEAF).exists() {
        return;
    }
    let mut st = STATE.lock();
    if st.lock.is_some() {
        return;
    }
    let Ok(dir) = File::open(parent) else { return };
    st.lock = Some(dir);
    st.moved = st.moved || in_leaf(parent);
    undo(&mut st, parent);
}

/// Where corral sits: the leaf once it moved itself (kept members of a run
/// go there: the parent accepts no process while controllers are enabled).
pub(crate) fn home(parent: &Path) -> PathBuf {
    if STATE.lock().moved {
        parent.join(LEAF)
    } else {
        parent.to_path_buf()
    }
}

/// corral's own cgroup `own` is not delegated: the cgroup the runs'
/// cgroups can be made in instead (`Ok`), else a delegated cgroup beside
/// it that cannot be used (`Err(Some)`) or none (`Err(None)`).
///
/// * Its parent, when that is delegated (directory and `cgroup.procs`
///   writable): the kernel places a process from `own` into a cgroup made
///   in the parent because the user may write the parent's `cgroup.procs`
///   (the common ancestor of where it is and where it goes) and the new
///   cgroup's (it made it). The runs' cgroups are then siblings of `own`;
///   kept members of a run are moved to the parent.
/// * A delegated cgroup beside `own` (not above it) cannot be used: the
///   common ancestor is not the user's. The error says which one is, and
///   how to start corral inside it.
pub(crate) fn beside(own: &Path, delegated: fn(&Path) -> bool) -> Result<PathBuf, Option<PathBuf>> {
    let Some(parent) = own.parent().filter(|p| CgroupFile::Procs.path(p).exists()) else {
        return Err(None);
    };
    if delegated(parent) {
        return Ok(parent.to_path_buf());
    }
    let sibling = fs::read_dir(parent).ok().and_then(|rd| {
        rd.flatten()
            .map(|e| e.path())
            .filter(|p| p != own && CgroupFile::Procs.path(p).exists())
            .find(|p| delegated(p))
    });
    Err(sibling)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leaf_names_its_parent() {
        let p = Path::new("/sys/fs/cgroup/user.slice/x.scope/corral-leaf");
        assert_eq!(
            above_leaf(p),
            Some(Path::new("/sys/fs/cgroup/user.slice/x.scope"))
        );
        assert_eq!(above_leaf(Path::new("/sys/fs/cgroup/x.scope")), None);
        assert_eq!(above_leaf(Path::new("/sys/fs/cgroup/corral-leafy")), None);
    }

    #[test]
    fn limits_want_their_controllers() {
        let none = Limits {
            memory_max: None,
            pids_max: None,
        };
        let both = Limits {
            memory_max: Some(1 << 20),
            pids_max: Some(20),
        };
        if std::env::var_os(EXTRA_VAR).is_none() {
            assert!(wanted(none).is_empty());
            assert_eq!(wanted(both), ["memory", "pids"]);
        }
    }
}
