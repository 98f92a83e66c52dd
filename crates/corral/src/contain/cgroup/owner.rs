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

pub(super) fn name_for(seq: usize) -> String {
    format!("corral-{}-{}-{}", std::process::id(), token(), seq)
}

/// Whether `name` has the form [`name_for`] makes: `corral-<pid>-<token>-<n>`.
/// Directories named otherwise (an older corral's `corral-<pid>-<n>`,
/// anything else) are never touched by the stale-cgroup cleanup: their owner
/// held no lock, so whether they are abandoned cannot be known.
pub(super) fn locked_name(name: &str) -> bool {
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
pub(super) fn claim(dir: &Path) -> io::Result<File> {
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

/// Makes a new cgroup directory under `parent` and takes its ownership
/// lock ([`claim`]): its name, path and locked descriptor.
pub(super) fn make_dir(parent: &Path) -> Result<(String, PathBuf, File), CgroupError> {
    let mut attempt = 0;
    let (name, dir, dir_fd) = loop {
        let name = name_for(SEQ.fetch_add(1, Ordering::Relaxed));
        let dir = parent.join(&name);
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
///
/// A directory with no subdirectory holds no cgroup, abandoned or not: its
/// link count says so in one `statx` ([`may_have_subdirs`]), and the listing
/// is skipped (a one-shot `corral run` pays this pass on every invocation).
pub(super) fn remove_stale(h: &Hierarchy) {
    let listed = may_have_subdirs(&h.own_v2).then(|| fs::read_dir(&h.own_v2));
    if let Some(Ok(rd)) = listed {
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
            let events = CgroupFile::Events.read(&dir).unwrap_or_default();
            if Events::parse(&events).populated {
                let _ = CgroupFile::Kill.write(&dir, "1");
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
        if !may_have_subdirs(own) {
            continue;
        }
        let Ok(rd) = fs::read_dir(own) else { continue };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if locked_name(&name) && !h.own_v2.join(&name).exists() {
                let _ = fs::remove_dir(e.path());
            }
        }
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
    use super::may_have_subdirs;

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
