//! Where cgroups live for this process: detection from mountinfo and
//! /proc/self/cgroup, delegation checks, the controllers enabled below.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use linux_raw_sys::general::{CGROUP2_SUPER_MAGIC, CGROUP_SUPER_MAGIC};

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

fn read_override(var: &str, default: &str, first: usize) -> io::Result<String> {
    // Hidden test hook: point detection at fake files.
    let path = std::env::var_os(var).map_or_else(|| PathBuf::from(default), PathBuf::from);
    read_whole(&path, first)
}

/// The file at `path`, read into a buffer of `first` bytes, which it
/// usually fits in (grown as needed): one read and the one that says end of
/// file. `fs::read_to_string` asks a `/proc` file
/// its size (0: a `statx` and an `lseek`) and then reads it in pieces
/// growing from 32 bytes, and each read of mountinfo walks the mount table
/// again (about 20 us more a run).
fn read_whole(path: &Path, first: usize) -> io::Result<String> {
    use std::io::Read;
    let mut f = fs::File::open(path)?;
    let mut buf = vec![0u8; first.max(64)];
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
    let cgroup =
        read_override("CORRAL_PROC_CGROUP", "/proc/self/cgroup", 1024).map_err(|source| {
            CgroupError::Read {
                path: "/proc/self/cgroup",
                source,
            }
        })?;
    // The usual mount points first (no mountinfo: see `from_known_mounts`),
    // unless a test points detection at its own mountinfo.
    let known = match std::env::var_os("CORRAL_MOUNTINFO") {
        None => from_known_mounts(&cgroup, probe_mount),
        Some(_) => None,
    };
    let mut h = match known {
        Some(h) => h,
        None => {
            let mountinfo = read_override("CORRAL_MOUNTINFO", "/proc/self/mountinfo", 16 * 1024)
                .map_err(|source| CgroupError::Read {
                    path: "mountinfo",
                    source,
                })?;
            detect_from(&mountinfo, &cgroup)?
        }
    };
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
fn join(root: &str, point: &Path, path: &str) -> PathBuf {
    let rel = path.strip_prefix(root).unwrap_or(path);
    point.join(rel.trim_start_matches('/'))
}

/// Where the cgroup v2 hierarchy is mounted wherever systemd mounts it:
/// alone (`/sys/fs/cgroup`) or beside the v1 hierarchies (hybrid).
const V2_POINTS: [&str; 2] = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"];

/// Where systemd mounts the v1 hierarchy of a controller (`pids`, `memory`).
const V1_PARENT: &str = "/sys/fs/cgroup";

/// What [`probe_mount`] learns of the mount whose root is a directory.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SeenMount {
    /// The file system's magic number (`statfs`'s `f_type`).
    magic: u64,
    /// The mount's root within its hierarchy (mountinfo's fourth field).
    root: String,
    /// The file system's options (a v1 hierarchy names its controllers).
    options: Option<String>,
}

/// The mount whose root is `point`, asked of the kernel by `statx` (the
/// mount's id, and that `point` is its root) and `statmount` (Linux 6.8;
/// the options 6.11). `None` when `point` is no mount root or the kernel
/// cannot say.
#[cfg(linux_raw)]
fn probe_mount(point: &Path) -> Option<SeenMount> {
    use linux_raw_sys::general as k;
    use rustix::fs::{statx, AtFlags, StatxAttributes, StatxFlags, CWD};
    let st = statx(
        CWD,
        point,
        AtFlags::SYMLINK_NOFOLLOW | AtFlags::NO_AUTOMOUNT,
        StatxFlags::from_bits_retain(k::STATX_MNT_ID_UNIQUE),
    )
    .ok()?;
    let root_known = st.stx_attributes_mask.contains(StatxAttributes::MOUNT_ROOT);
    if st.stx_mask & k::STATX_MNT_ID_UNIQUE == 0
        || !root_known
        || !st.stx_attributes.contains(StatxAttributes::MOUNT_ROOT)
    {
        return None;
    }
    let mut buf = [0u8; 2048];
    let mask = k::STATMOUNT_SB_BASIC | k::STATMOUNT_MNT_ROOT | k::STATMOUNT_MNT_OPTS;
    let sm = crate::sys::linux_spawn::statmount(st.stx_mnt_id, u64::from(mask), &mut buf).ok()?;
    Some(SeenMount {
        magic: sm.magic()?,
        root: sm.root()?.to_owned(),
        options: sm.options().map(str::to_owned),
    })
}

#[cfg(not(linux_raw))]
fn probe_mount(_point: &Path) -> Option<SeenMount> {
    None
}

/// The hierarchies found at the usual mount points ([`V2_POINTS`],
/// [`V1_PARENT`]), each checked by `probe` (its file system, its root), or
/// `None` when anything is not as expected: then mountinfo is read.
///
/// Reading mountinfo makes the kernel print every mount of the namespace
/// (50-90 us of a one-shot `corral run`, issue #20); a few `statx` and
/// `statmount` calls find the same answer where cgroups are mounted as
/// systemd mounts them. A controller no v1 hierarchy has (no line of
/// /proc/self/cgroup names it) is on v2 or nowhere, whatever is mounted.
pub(crate) fn from_known_mounts(
    cgroup: &str,
    probe: impl Fn(&Path) -> Option<SeenMount>,
) -> Option<Hierarchy> {
    let own = cgroup.lines().find_map(|l| l.strip_prefix("0::"))?;
    let (v2_root, v2_point) = V2_POINTS.iter().find_map(|point| {
        let seen = probe(Path::new(point))?;
        (seen.magic == u64::from(CGROUP2_SUPER_MAGIC)).then(|| (seen.root, Path::new(point)))
    })?;
    let v1 = |ctrl: Controller| -> Option<Option<PathBuf>> {
        let Some(path) = v1_membership(cgroup, ctrl.name()) else {
            return Some(None);
        };
        let point = Path::new(V1_PARENT).join(ctrl.name());
        let seen = probe(&point)?;
        let names_it = seen
            .options
            .as_deref()
            .is_some_and(|o| o.split(',').any(|o| o == ctrl.name()));
        if seen.magic != u64::from(CGROUP_SUPER_MAGIC) || !names_it {
            return None;
        }
        join_below(&seen.root, &point, path).map(Some)
    };
    Some(Hierarchy {
        own_v2: join_below(&v2_root, v2_point, own)?,
        own_v1_pids: v1(Controller::Pids)?,
        own_v1_memory: v1(Controller::Memory)?,
    })
}

/// [`join`], only for a `path` at or below the mount's root (else the
/// cgroup is not reachable through this mount).
fn join_below(root: &str, point: &Path, path: &str) -> Option<PathBuf> {
    let below = path == root
        || path
            .strip_prefix(root.trim_end_matches('/'))
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'));
    below.then(|| join(root, point, path))
}

/// The path of the line of /proc/self/cgroup whose v1 hierarchy has
/// controller `ctrl`.
fn v1_membership<'a>(cgroup: &'a str, ctrl: &str) -> Option<&'a str> {
    cgroup.lines().find_map(|l| {
        let mut it = l.splitn(3, ':');
        let _id = it.next()?;
        let ctrls = it.next()?;
        let p = it.next()?;
        ctrls.split(',').any(|c| c == ctrl).then_some(p)
    })
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
        Some(join(&m.root, &m.point, v1_membership(cgroup, ctrl)?))
    };
    Ok(Hierarchy {
        own_v2: join(&v2.root, &v2.point, own),
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
        let got = read_whole(&path, 16 * 1024);
        let small = read_whole(&path, 100);
        let _ = fs::remove_file(&path);
        assert_eq!(got.unwrap(), big);
        assert_eq!(small.unwrap(), big);
        for first in [16, 1024, 16 * 1024] {
            assert_eq!(
                read_whole(Path::new("/proc/self/mountinfo"), first).unwrap(),
                fs::read_to_string("/proc/self/mountinfo").unwrap()
            );
        }
        assert!(read_whole(&path, 1024).is_err());
    }

    /// Where the kernel can say (statmount, Linux 6.11) and cgroups are
    /// mounted where systemd mounts them, the fast path answers, and its
    /// answer is mountinfo's.
    #[test]
    fn known_mounts_agree_with_mountinfo() {
        let cgroup = read_whole(Path::new("/proc/self/cgroup"), 1024).unwrap();
        let mountinfo = read_whole(Path::new("/proc/self/mountinfo"), 16 * 1024).unwrap();
        let v2_usual = V2_POINTS.iter().any(|p| {
            probe_mount(Path::new(p)).is_some_and(|m| m.magic == u64::from(CGROUP2_SUPER_MAGIC))
        });
        let v1_usual = [Controller::Pids, Controller::Memory].iter().all(|c| {
            v1_membership(&cgroup, c.name()).is_none()
                || probe_mount(&Path::new(V1_PARENT).join(c.name()))
                    .is_some_and(|m| m.options.is_some())
        });
        let known = from_known_mounts(&cgroup, probe_mount);
        if v2_usual && v1_usual {
            assert!(known.is_some(), "{cgroup}\n{mountinfo}");
        }
        let Some(known) = known else { return };
        let read = detect_from(&mountinfo, &cgroup).unwrap();
        assert_eq!(known.own_v2, read.own_v2);
        assert_eq!(known.own_v1_pids, read.own_v1_pids);
        assert_eq!(known.own_v1_memory, read.own_v1_memory);
    }

    /// A mount of the fake kernel: its point, magic, root and options.
    type Point = (&'static str, u32, &'static str, Option<&'static str>);

    /// A fake kernel: the mounts at `points`.
    fn fake(points: &[Point]) -> impl Fn(&Path) -> Option<SeenMount> {
        let points: Vec<(PathBuf, SeenMount)> = points
            .iter()
            .map(|&(p, magic, root, options)| {
                let seen = SeenMount {
                    magic: u64::from(magic),
                    root: root.to_owned(),
                    options: options.map(str::to_owned),
                };
                (PathBuf::from(p), seen)
            })
            .collect();
        move |point: &Path| {
            points
                .iter()
                .find(|(p, _)| p == point)
                .map(|(_, seen)| seen.clone())
        }
    }

    const V2: u32 = CGROUP2_SUPER_MAGIC;
    const V1: u32 = CGROUP_SUPER_MAGIC;
    const TMPFS: u32 = 0x0102_1994;

    /// Each row: the mounts, /proc/self/cgroup, and the answer (`None`:
    /// read mountinfo instead).
    #[test]
    fn known_mounts_rule_table() {
        let hybrid = [
            ("/sys/fs/cgroup", TMPFS, "/", Some("mode=755")),
            ("/sys/fs/cgroup/unified", V2, "/", None),
            ("/sys/fs/cgroup/pids", V1, "/", Some("pids")),
            ("/sys/fs/cgroup/memory", V1, "/", Some("rw,memory")),
        ];
        let pure = [("/sys/fs/cgroup", V2, "/", Some("nsdelegate"))];
        type Want = Option<(&'static str, Option<&'static str>, Option<&'static str>)>;
        let rows: Vec<(&[Point], &str, Want)> = vec![
            // Pure v2, no v1 hierarchy named: found without mountinfo.
            (
                &pure,
                "0::/user.slice/a\n",
                Some(("/sys/fs/cgroup/user.slice/a", None, None)),
            ),
            // Hybrid: v2 beside v1, each controller at its own mount.
            (
                &hybrid,
                "8:pids:/\n4:memory:/a/b\n0::/x.scope\n",
                Some((
                    "/sys/fs/cgroup/unified/x.scope",
                    Some("/sys/fs/cgroup/pids/"),
                    Some("/sys/fs/cgroup/memory/a/b"),
                )),
            ),
            // A controller no v1 hierarchy has is nobody's v1 business.
            (
                &hybrid,
                "4:memory:/m\n0::/\n",
                Some((
                    "/sys/fs/cgroup/unified/",
                    None,
                    Some("/sys/fs/cgroup/memory/m"),
                )),
            ),
            // A mount rooted below the hierarchy's root (a cgroup namespace
            // seen from outside it, a bind mount): the path is joined
            // below the root...
            (
                &[("/sys/fs/cgroup", V2, "/ns", None)],
                "0::/ns/app\n",
                Some(("/sys/fs/cgroup/app", None, None)),
            ),
            // ...and a cgroup outside the mount cannot be reached through it.
            (
                &[("/sys/fs/cgroup", V2, "/ns", None)],
                "0::/other/app\n",
                None,
            ),
            (
                &[("/sys/fs/cgroup", V2, "/ns", None)],
                "0::/nsx/app\n",
                None,
            ),
            // No v2 line, no v2 at the usual places: mountinfo decides.
            (&pure, "4:memory:/\n", None),
            (&[("/sys/fs/cgroup", TMPFS, "/", None)], "0::/\n", None),
            (&[], "0::/\n", None),
            // A v1 controller mounted elsewhere, or a kernel that does not
            // say a mount's options (before 6.11), or a mount there of
            // another controller: mountinfo decides.
            (&hybrid[..2], "8:pids:/\n0::/\n", None),
            (
                &[
                    ("/sys/fs/cgroup/unified", V2, "/", None),
                    ("/sys/fs/cgroup/pids", V1, "/", None),
                ],
                "8:pids:/\n0::/\n",
                None,
            ),
            (
                &[
                    ("/sys/fs/cgroup/unified", V2, "/", None),
                    ("/sys/fs/cgroup/pids", V1, "/", Some("cpu,cpuacct")),
                ],
                "8:pids:/\n0::/\n",
                None,
            ),
            (
                &[
                    ("/sys/fs/cgroup/unified", V2, "/", None),
                    ("/sys/fs/cgroup/pids", TMPFS, "/", Some("pids")),
                ],
                "8:pids:/\n0::/\n",
                None,
            ),
        ];
        for (i, (mounts, cgroup, want)) in rows.into_iter().enumerate() {
            let got = from_known_mounts(cgroup, fake(mounts)).map(|h| {
                let s = |p: Option<PathBuf>| p.map(|p| p.to_string_lossy().into_owned());
                (
                    h.own_v2.to_string_lossy().into_owned(),
                    s(h.own_v1_pids),
                    s(h.own_v1_memory),
                )
            });
            let want =
                want.map(|(v2, p, m)| (v2.to_owned(), p.map(str::to_owned), m.map(str::to_owned)));
            assert_eq!(got, want, "row {i}: {cgroup:?}");
        }
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
