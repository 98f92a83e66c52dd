//! Names, the ownership lock, removal and the cleanup of abandoned cgroups.

use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Once, OnceLock};
use std::time::Duration;

use super::error::CgroupError;
use super::files::{remove_tree, CgroupFile, Events};
use super::hierarchy::Hierarchy;
use super::pool::{pool, KillWatch};
use super::Cgroup;
use crate::contain::OsOp;

pub(super) static SEQ: AtomicUsize = AtomicUsize::new(0);
pub(super) static STALE: Once = Once::new();

/// This process's random token, drawn once: with it, a cgroup name is
/// unique across PID namespaces (where two corrals may both be pid 1) and
/// boots, so no two live corrals ever share a name.
pub(super) fn token() -> &'static str {
    static TOKEN: OnceLock<String> = OnceLock::new();
    TOKEN.get_or_init(|| {
        let mut b = [0u8; 8];
        // getrandom(2) (no file to open); /dev/urandom where it is missing.
        let random = match rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty()) {
            Ok(8) => Ok(()),
            _ => File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b)),
        };
        let mut v = u64::from_ne_bytes(b);
        if random.is_err() {
            // No randomness (a bare chroot on an old kernel): the clock, the
            // pid and an address still differ between any two processes in
            // practice.
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            let addr = &b as *const _ as u64;
            v = nanos ^ (u64::from(std::process::id()) << 40) ^ addr.rotate_left(17);
        }
        format!("{v:016x}")
    })
}

/// The name of this process's `seq`-th cgroup. `self_locked`: the
/// cgroup's own directory descriptor holds its ownership lock for the
/// run's life (`corral-<pid>-<token>-<n>`, the form of the releases since
/// ownership locks came: a one-shot process's, see [`make_dir`]);
/// otherwise this process's owner record holds it for all of its cgroups
/// at once (`corral-<pid>-<token>-r<n>`, see [`Owner`]).
pub(super) fn name_for(seq: usize, self_locked: bool) -> String {
    let r = if self_locked { "" } else { "r" };
    format!("corral-{}-{}-{r}{seq}", std::process::id(), token())
}

/// The name of the owner record of the process with this pid and token:
/// `corral-owner-<pid>-<token>` (see [`Owner`]).
fn owner_name(pid: &str, token: &str) -> String {
    format!("corral-owner-{pid}-{token}")
}

/// `<pid>-<token>-<tail>` taken apart: a pid, a token of 16 hexadecimal
/// digits, and what follows the dash after it.
fn split_name(rest: &str) -> Option<(&str, &str, &str)> {
    let (pid, rest) = rest.split_once('-')?;
    let (token, tail) = rest.split_once('-')?;
    let ok = pid.parse::<u32>().is_ok()
        && token.len() == 16
        && token.bytes().all(|b| b.is_ascii_hexdigit());
    ok.then_some((pid, token, tail))
}

/// Whether `tail` is a cgroup's number: decimal digits only.
fn is_number(tail: &str) -> bool {
    !tail.is_empty() && tail.bytes().all(|b| b.is_ascii_digit()) && tail.parse::<u64>().is_ok()
}

/// Whether `name` has the self-locked form [`name_for`] makes:
/// `corral-<pid>-<token>-<n>`. Directories named otherwise (an older
/// corral's `corral-<pid>-<n>`, anything else) are never touched by the
/// stale-cgroup cleanup on their own lock: their owner held none, so
/// whether they are abandoned cannot be known.
pub(super) fn locked_name(name: &str) -> bool {
    name.strip_prefix("corral-")
        .and_then(split_name)
        .is_some_and(|(_, _, n)| is_number(n))
}

/// The owner record's name for a cgroup of the owner-locked form
/// (`corral-<pid>-<token>-r<n>` → `corral-owner-<pid>-<token>`), or `None`
/// for any other name.
pub(super) fn owner_of(name: &str) -> Option<String> {
    let (pid, token, tail) = name.strip_prefix("corral-").and_then(split_name)?;
    let n = tail.strip_prefix('r')?;
    is_number(n).then(|| owner_name(pid, token))
}

/// Whether `name` is an owner record's ([`owner_name`]): the prefix its
/// cgroups' names start with (`corral-<pid>-<token>-r`) if so.
pub(super) fn runs_of_owner(name: &str) -> Option<String> {
    let rest = name.strip_prefix("corral-owner-")?;
    let (pid, token) = rest.split_once('-')?;
    let ok = pid.parse::<u32>().is_ok()
        && token.len() == 16
        && token.bytes().all(|b| b.is_ascii_hexdigit());
    ok.then(|| format!("corral-{pid}-{token}-r"))
}

/// This process's owner record below one parent cgroup: the directory
/// `corral-owner-<pid>-<token>` and an exclusive `flock` on a descriptor of
/// it, taken before this process makes its first owner-locked cgroup there
/// and held until this process (and what it forked without exec: the
/// keeper, which is sent the descriptor, see
/// `keeper::register`) is gone. It is the ownership lock of every cgroup
/// named `corral-<pid>-<token>-r<n>` beside it, so a run costs no
/// descriptor for its ownership: the stale-cgroup cleanup takes such a
/// cgroup for abandoned only with its owner's lock in hand
/// ([`remove_stale`]). The record is never removed while its process
/// lives; the next corral's cleanup removes it once the lock is free and
/// no cgroup of its owner is left.
///
/// Per process (a fork without exec makes its own: its pid, so its names,
/// differ; the parent's descriptor it inherited keeps the parent's lock
/// held while it lives, as with every descriptor a fork inherits).
struct Owner {
    parent: PathBuf,
    dir: PathBuf,
    lock: File,
}

static OWNERS: crate::sys::per_process::PerProcess<Vec<Owner>> =
    crate::sys::per_process::PerProcess::new(Vec::new);

/// Whether making a directory and taking its lock failed in a way that a
/// new attempt mends: the name is taken, or a cleaner that found the new
/// directory before it was locked removed it or holds its lock.
fn made_again(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::AlreadyExists | io::ErrorKind::NotFound | io::ErrorKind::WouldBlock
    )
}

/// Runs `f` with this process's owner record below `parent` (made now if
/// there is none): its path and its locked descriptor.
pub(super) fn with_owner<T>(
    parent: &Path,
    f: impl FnOnce(&Path, std::os::fd::BorrowedFd<'_>) -> T,
) -> Result<T, CgroupError> {
    use std::os::fd::AsFd;
    let mut owners = OWNERS.lock();
    if let Some(o) = owners.iter().find(|o| o.parent == parent) {
        return Ok(f(&o.dir, o.lock.as_fd()));
    }
    let pid = std::process::id().to_string();
    let dir = parent.join(owner_name(&pid, token()));
    // A cleaner that found the record in the instant between its `mkdir`
    // and its lock removes it (it has no cgroup yet): made again. The
    // cleaner holds the lock only while it looks for cgroups of this
    // process, of which there are none.
    let mut attempt = 0;
    let lock = loop {
        let made = match fs::create_dir(&dir) {
            Ok(()) => claim(&dir),
            Err(e) => Err(e),
        };
        match made {
            Ok(fd) => break fd,
            Err(e) if attempt < 200 && made_again(&e) => {
                attempt += 1;
                std::thread::sleep(Duration::from_micros(500));
            }
            Err(source) => {
                return Err(CgroupError::Create {
                    parent: parent.to_path_buf(),
                    source,
                })
            }
        }
    };
    let made = Owner {
        parent: parent.to_path_buf(),
        dir,
        lock,
    };
    let out = f(&made.dir, made.lock.as_fd());
    owners.push(made);
    Ok(out)
}
/// Takes the ownership lock of a cgroup directory this process just made:
/// an exclusive `flock` on an open descriptor of the directory itself, held
/// (in that descriptor) until the directory is removed, or until this
/// process dies. The lock lives on the directory's inode, which every
/// process sees whatever its PID or mount namespace, and it ends with the
/// last descriptor, never by pid reuse. Fails when a cleaner took the lock
/// first (it found the directory in the instant between `mkdir` and here,
/// empty and unlocked) or already removed the directory.
pub(super) fn claim(dir: &Path) -> io::Result<File> {
    // A read-only descriptor of the directory (also what clone3 needs).
    let fd = super::files::kept(File::open(dir)?)?;
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

/// Makes a new cgroup directory under `parent`: its name, path, and, if
/// `self_locked`, its own locked descriptor ([`claim`], held for the run's
/// life). Otherwise this process's owner record there is its ownership
/// lock ([`with_owner`], made first if there is none), and the run holds no
/// descriptor of it: the directory's is opened for the spawn only (see
/// `Slot::dir_fd`). A one-shot process (`corral run`: one cgroup, no pool)
/// makes its cgroups self-locked: an owner record would cost it a second
/// `mkdir` and leave a directory behind for the next corral to remove.
pub(super) fn make_dir(
    parent: &Path,
    self_locked: bool,
) -> Result<(String, PathBuf, Option<File>), CgroupError> {
    if !self_locked {
        with_owner(parent, |_, _| ())?;
    }
    let mut attempt = 0;
    let (name, dir, dir_fd) = loop {
        let name = name_for(SEQ.fetch_add(1, Ordering::Relaxed), self_locked);
        let dir = parent.join(&name);
        let made = fs::create_dir(&dir).and_then(|()| {
            if self_locked {
                claim(&dir).map(Some)
            } else {
                Ok(None)
            }
        });
        match made {
            Ok(fd) => break (name, dir, fd),
            // The name is taken, or (self-locked) a cleaner that found the
            // new directory before it was locked is removing it: take the
            // next number (never remove it: the cleaner does).
            Err(e) if attempt < 16 && made_again(&e) => {
                attempt += 1;
            }
            Err(source) => {
                return Err(CgroupError::Create {
                    parent: parent.to_path_buf(),
                    source,
                })
            }
        }
    };
    // A cgroup v2 directory has `cgroup.events`; its descriptor is
    // opened when first needed (see `Slot::events`).
    if let Err(source) = fs::symlink_metadata(CgroupFile::Events.path(&dir)) {
        let _ = fs::remove_dir(&dir);
        return Err(CgroupError::Open {
            path: CgroupFile::Events.path(&dir),
            source,
        });
    }
    Ok((name, dir, dir_fd))
}

impl Cgroup {
    pub(super) fn remove_dirs(&mut self) {
        if let Some(wd) = self.slot.as_mut().and_then(|s| s.watch.take()) {
            KillWatch::remove(&mut pool(), wd);
        }
        // The v1 groups first: the ownership lock (on the v2 directory, or
        // this process's owner record) stays held until everything of this
        // command is gone, so a v1 group whose v2 twin is missing was never
        // in use.
        let v1 = self
            .limited
            .as_mut()
            .map(|l| std::mem::take(&mut l.v1))
            .unwrap_or_default();
        for g in v1 {
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

/// Removes the cgroups left by corral processes that are gone: kills what is
/// still inside (its run is over) and removes the directories.
///
/// A cgroup is abandoned only when its ownership lock can be taken: the
/// lock on its own directory for the self-locked form
/// (`corral-<pid>-<token>-<n>`, see [`claim`]: also every cgroup of the
/// releases before owner records), the lock on its owner record for the
/// owner-locked form (`corral-<pid>-<token>-r<n>`, see [`Owner`]). Its
/// owner held that lock from before it made the directory until it removed
/// it (self-locked) or until it died (owner record), so the lock is free
/// only once every descriptor of the owner's is closed, i.e. the owner (and
/// anything it forked without exec, such as a keeper) is gone. Nothing here
/// depends on a pid, so a corral in another PID namespace, or one whose pid
/// was reused, is never mistaken for a dead one. When in doubt (another
/// name form, no flock, the lock held, an owner-locked cgroup whose owner
/// record is missing) nothing is signalled and nothing is removed. A
/// directory (or owner record) found in the instant between its owner's
/// `mkdir` and its lock is empty and has no cgroup: it is removed, and the
/// owner, whose lock then fails, makes another. An owner record is removed
/// once none of its cgroups is left (listed again with its lock held: its
/// owner may have made one after the first listing, before it died).
///
/// A directory with no subdirectory holds no cgroup, abandoned or not: its
/// link count says so in one `statx` ([`may_have_subdirs`]), and the listing
/// is skipped (a one-shot `corral run` pays this pass on every invocation).
pub(super) fn remove_stale(h: &Hierarchy) {
    let listed = may_have_subdirs(&h.own_v2).then(|| fs::read_dir(&h.own_v2));
    if let Some(Ok(rd)) = listed {
        let names: Vec<String> = rd
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        for name in names {
            let runs = runs_of_owner(&name);
            if runs.is_none() && !locked_name(&name) {
                continue;
            }
            let dir = h.own_v2.join(&name);
            let Ok(fd) = File::open(&dir) else { continue };
            if rustix::fs::flock(&fd, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err()
            {
                continue; // its owner lives (or flock is not available here)
            }
            // Ours now, and abandoned: what is left is killed and removed,
            // still holding the lock.
            match runs {
                None => remove_abandoned(h, &name),
                Some(prefix) => {
                    let left = fs::read_dir(&h.own_v2).map(|rd| {
                        rd.flatten()
                            .map(|e| e.file_name().to_string_lossy().into_owned())
                            .filter(|n| n.strip_prefix(&prefix).is_some_and(is_number))
                            .collect::<Vec<_>>()
                    });
                    let Ok(left) = left else { continue };
                    for run in &left {
                        remove_abandoned(h, run);
                    }
                    if left.iter().all(|run| !h.own_v2.join(run).exists()) {
                        let _ = fs::remove_dir(&dir);
                    }
                }
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
        if !may_have_subdirs(own) {
            continue;
        }
        let Ok(rd) = fs::read_dir(own) else { continue };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let ours = locked_name(&name) || owner_of(&name).is_some();
            if ours && !h.own_v2.join(&name).exists() {
                let _ = fs::remove_dir(e.path());
            }
        }
    }
}

/// Kills what is left in the abandoned cgroup `name` (its lock is held by
/// the caller), then removes its v1 groups and its directory.
fn remove_abandoned(h: &Hierarchy, name: &str) {
    let dir = h.own_v2.join(name);
    let events = CgroupFile::Events.read(&dir).unwrap_or_default();
    if Events::parse(&events).populated {
        let _ = CgroupFile::Kill.write(&dir, "1");
    }
    let v1: Vec<PathBuf> = [h.own_v1_pids.as_ref(), h.own_v1_memory.as_ref()]
        .into_iter()
        .flatten()
        .map(|own| own.join(name))
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
}

/// Whether the directory `dir` may have subdirectories: false only when its
/// link count is 2 (`.` and its entry in the parent), which on cgroupfs
/// (kernfs), as on most Unix file systems, means none: each subdirectory's
/// `..` adds one. A file system that counts otherwise (btrfs: always 1), or
/// a failed `statx`, answers true.
fn may_have_subdirs(dir: &Path) -> bool {
    fs::metadata(dir).map_or(true, |m| m.nlink() != 2)
}

#[cfg(test)]
mod tests {
    use super::{locked_name, may_have_subdirs, name_for, owner_of, runs_of_owner, token};

    /// Which names the stale pass decides on, and by which lock: its own
    /// (self-locked, also the previous releases'), or its owner record's.
    /// Every other form is in doubt. The previous release's rule (a
    /// self-locked name) never matches an owner-locked cgroup or an owner
    /// record, so it leaves them alone.
    #[test]
    fn name_forms_table() {
        let t = "00c0ffee1234abcd";
        // (name, self-locked, its owner record)
        let cases: &[(String, bool, Option<String>)] = &[
            (format!("corral-7-{t}-0"), true, None),
            (format!("corral-7-{t}-12"), true, None),
            (
                format!("corral-7-{t}-r0"),
                false,
                Some(format!("corral-owner-7-{t}")),
            ),
            (
                format!("corral-7-{t}-r12"),
                false,
                Some(format!("corral-owner-7-{t}")),
            ),
            // An older corral's form: no lock to tell.
            ("corral-7-3".into(), false, None),
            // Malformed: token length, pid, number.
            ("corral-7-00c0ffee-0".into(), false, None),
            (format!("corral-x-{t}-0"), false, None),
            (format!("corral-7-{t}-"), false, None),
            (format!("corral-7-{t}-r"), false, None),
            (format!("corral-7-{t}-r1x"), false, None),
            (format!("corral-7-{t}-+1"), false, None),
            (format!("corral-7-{t}-1-2"), false, None),
            (format!("corral-owner-7-{t}"), false, None),
            ("corral-leaf".into(), false, None),
            ("user.slice".into(), false, None),
        ];
        for (name, locked, owner) in cases {
            assert_eq!(locked_name(name), *locked, "{name}");
            assert_eq!(owner_of(name), *owner, "{name}");
        }
        // An owner record names the prefix of its cgroups; nothing else does.
        assert_eq!(
            runs_of_owner(&format!("corral-owner-7-{t}")),
            Some(format!("corral-7-{t}-r"))
        );
        for other in [
            format!("corral-7-{t}-r0"),
            format!("corral-owner-x-{t}"),
            "corral-owner-7-00c0ffee".into(),
            format!("corral-owner-7-{t}-0"),
        ] {
            assert_eq!(runs_of_owner(&other), None, "{other}");
        }
        // What this process makes is read back as made.
        let me = std::process::id();
        assert_eq!(name_for(3, true), format!("corral-{me}-{}-3", token()));
        assert!(locked_name(&name_for(3, true)));
        assert_eq!(
            owner_of(&name_for(3, false)),
            Some(format!("corral-owner-{me}-{}", token()))
        );
    }

    /// A directory with a subdirectory is always listed, whatever the file
    /// system counts; an empty one is skipped where links are counted.
    #[test]
    fn a_directory_with_a_subdirectory_is_always_listed() {
        use std::os::unix::fs::MetadataExt;
        let d = std::env::temp_dir().join(format!("corral-nlink-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir(&d).unwrap();
        let empty = std::fs::metadata(&d).unwrap().nlink() == 2;
        assert_eq!(may_have_subdirs(&d), !empty);
        std::fs::create_dir(d.join("corral-1-0000000000000000-0")).unwrap();
        let with_one = may_have_subdirs(&d);
        assert!(may_have_subdirs(&d.join("missing")));
        std::fs::remove_dir_all(&d).unwrap();
        assert!(with_one);
    }
}
