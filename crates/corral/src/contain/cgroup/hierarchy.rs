//! Where cgroups live for this process: detection from mountinfo and
//! /proc/self/cgroup, delegation checks, the controllers enabled below.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::delegated;
use super::error::CgroupError;
use super::files::{CgroupFile, Controller, Enabled};

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

impl Hierarchy {
    /// corral's own directory in the v1 hierarchy of `ctrl`, if mounted.
    pub(crate) fn own_v1(&self, ctrl: Controller) -> Option<&PathBuf> {
        match ctrl {
            Controller::Pids => self.own_v1_pids.as_ref(),
            Controller::Memory => self.own_v1_memory.as_ref(),
        }
    }
}

fn read_override(var: &str, default: &str) -> io::Result<String> {
    // Hidden test hook: point detection at fake files.
    let path = std::env::var_os(var).map_or_else(|| PathBuf::from(default), PathBuf::from);
    read_whole(&path)
}

/// The file at `path`, read into a buffer it usually fits in: one read and
/// the one that says end of file. `fs::read_to_string` asks a `/proc` file
/// its size (0: a `statx` and an `lseek`) and then reads it in pieces
/// growing from 32 bytes, and each read of mountinfo walks the mount table
/// again (about 20 us more a run).
fn read_whole(path: &Path) -> io::Result<String> {
    use std::io::Read;
    let mut f = fs::File::open(path)?;
    let mut buf = vec![0u8; 16 * 1024];
    let mut n = 0;
    loop {
        if n == buf.len() {
            buf.resize(buf.len() * 2, 0);
        }
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(n);
    String::from_utf8(buf).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
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
    // is the leaf's parent (see `delegated`).
    if let Some(parent) = delegated::above_leaf(&h.own_v2) {
        if delegated(parent).is_ok() {
            h.own_v2 = parent.to_path_buf();
        }
    }
    if let Err(e) = delegated(&h.own_v2) {
        h.own_v2 = match delegated::beside(&h.own_v2, |p| delegated(p).is_ok()) {
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
/// it: corral then moves itself aside (`delegated`), or uses v1
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
        CgroupFile::Procs.path(own),
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
        own_v1_pids: v1(Controller::Pids.name()),
        own_v1_memory: v1(Controller::Memory.name()),
    })
}

/// Whether the memory and pids controllers are enabled for the children of
/// `own` (read once per process: corral never changes it).
pub(super) fn subtree_controllers(own: &Path) -> Enabled {
    static CACHE: OnceLock<Enabled> = OnceLock::new();
    *CACHE.get_or_init(|| subtree_controllers_now(own))
}

/// [`subtree_controllers`], read now (corral may have just enabled them).
pub(super) fn subtree_controllers_now(own: &Path) -> Enabled {
    Enabled::from_words(&CgroupFile::SubtreeControl.read_words(own))
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

    /// A file is read whole, past the first buffer too, and a `/proc` file
    /// (size 0) as it is.
    #[test]
    fn reads_whole_files() {
        let path = std::env::temp_dir().join(format!("corral-read-whole-{}", std::process::id()));
        let big: String = (0..5000).map(|i| format!("{i} ")).collect();
        assert!(big.len() > 16 * 1024);
        fs::write(&path, &big).unwrap();
        let got = read_whole(&path);
        let _ = fs::remove_file(&path);
        assert_eq!(got.unwrap(), big);
        assert_eq!(
            read_whole(Path::new("/proc/self/mountinfo")).unwrap(),
            fs::read_to_string("/proc/self/mountinfo").unwrap()
        );
        assert!(read_whole(&path).is_err());
    }

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
    fn unescapes_mount_points() {
        assert_eq!(unescape("/a\\040b"), "/a b");
        assert_eq!(unescape("/plain"), "/plain");
    }
}
