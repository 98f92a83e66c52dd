//! The sandbox ([`crate::Sandbox`], issue 33) on Linux: built in the parent
//! ([`prepare`]: the Landlock ruleset with its rules, the seccomp BPF
//! program, the id maps, every path as a C string), entered by the child
//! just before exec ([`enter`]: raw system calls only, no allocation).
//!
//! Mechanisms (docs/MECHANISMS.md, "Sandbox", says which rule each one
//! enforces): user + mount + network namespaces when the kernel lets this
//! process make them (the whole mount tree read-only but the writable
//! paths, a private tmpfs on /tmp and /dev/shm, a network namespace of its
//! own); Landlock (files, TCP, signal and abstract-socket scoping);
//! seccomp (socket families, ptrace, io_uring; without namespaces, the
//! metadata writes Landlock cannot name); `no_new_privs`.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::raw::c_int;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use landlock::{
    Access, AccessFs, AccessNet, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreatedAttr, Scope, ABI,
};
use linux_raw_sys::general as k;

use super::raw::{self, Errno};
use crate::spec::{Network, Sandbox};

/// A child-side failure is reported as `FAIL_BASE + step * 4096 + errno`
/// (the exec-error channels carry one integer), so the parent can tell a
/// sandbox step from an exec failure and name it.
pub(crate) const FAIL_BASE: i32 = 0x0100_0000;

const STEPS: &[&str] = &[
    "unshare(user, mount, network namespaces)",
    "write the user namespace's id maps",
    "make the mounts private",
    "clone a writable path (open_tree)",
    "make the mount tree read-only (mount_setattr)",
    "mount a private tmpfs",
    "create a directory for a writable path in the private /tmp",
    "put a writable path back (move_mount)",
    "grant the private directories to Landlock",
    "bring the loopback interface up",
    "change to the working directory",
    "set no_new_privs",
    "enforce the Landlock ruleset",
    "install the seccomp filter",
    "drop every capability",
    "mask a deny_read path inside a writable one",
    "make the private /dev (a read-only tmpfs with the usual devices bound in)",
];
const S_UNSHARE: i32 = 0;
const S_MAPS: i32 = 1;
const S_PRIVATE: i32 = 2;
const S_OPEN_TREE: i32 = 3;
const S_READONLY: i32 = 4;
const S_TMPFS: i32 = 5;
const S_MKDIR: i32 = 6;
const S_MOVE: i32 = 7;
const S_GRANT_PRIVATE: i32 = 8;
const S_LOOPBACK: i32 = 9;
const S_CHDIR: i32 = 10;
const S_NNP: i32 = 11;
const S_LANDLOCK: i32 = 12;
const S_SECCOMP: i32 = 13;
const S_CAPS: i32 = 14;
const S_MASK: i32 = 15;
const S_DEV: i32 = 16;

/// The highest capability number tried in the bounding set (EINVAL above
/// the kernel's own last one is ignored).
const LAST_CAP: usize = 63;

#[inline(always)]
fn code(step: i32, e: Errno) -> i32 {
    FAIL_BASE + step * 4096 + (e.raw() & 4095)
}

/// The step and errno of a child-side failure code, if it is one.
pub(crate) fn decode(code: i32) -> Option<(&'static str, i32)> {
    if code < FAIL_BASE {
        return None;
    }
    let rest = code - FAIL_BASE;
    let step = STEPS.get((rest / 4096) as usize)?;
    Some((step, rest % 4096))
}

/// How the child comes to its namespaces.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub(crate) enum NsEntry {
    /// No namespaces (the ladder: Landlock, seccomp, no_new_privs only).
    None = 0,
    /// The child makes them (`unshare`, a forked child) and writes its maps.
    Unshare = 1,
    /// The clone made them (`CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET`);
    /// the child writes its maps.
    Cloned = 2,
    /// The child is already inside them (the PID namespace's command: its
    /// init was cloned into them and the host wrote the maps).
    Inherited = 3,
}

/// A writable path as the child re-attaches it: its path, and the
/// directories to make first when it lies inside a private directory.
struct Writable {
    path: CString,
    mkdirs: Vec<CString>,
}

/// A `deny_read` path inside a writable one, masked by a mount in the
/// child's mount namespace (Landlock's grant on the writable path is
/// inherited downward and cannot be taken back).
struct Mask {
    path: CString,
    /// A directory gets an empty read-only tmpfs of mode 000; anything
    /// else a bind of an empty mode-000 file.
    dir: bool,
}

/// The private /dev the child makes in its mount namespace: an empty
/// tmpfs (read-only once filled) holding binds of the usual character
/// devices, the pty under `Command::pty`, the `fd`/`stdin`/`stdout`/`stderr`
/// links and a mount point for the private /dev/shm. The host's /dev
/// (block devices, /dev/mem, other terminals, /dev/kmsg) is not reachable
/// under it, so Landlock grants the new /dev once instead of a device at a
/// time.
struct DevTree {
    /// The host's devices bound in (`/dev/null`, ...), those that exist.
    devices: Vec<CString>,
    /// Whether /dev/shm is made (a private tmpfs goes there).
    shm: bool,
    /// Landlock access granted beneath the new /dev.
    access: u64,
}

/// At most this many devices in the private /dev (the pty aside).
const MAX_DEVICES: usize = 8;

/// Everything the child reads, built by [`prepare`]. Shared (`Arc`) by the
/// setup of one spawn; the child only reads it.
pub(crate) struct Prepared {
    /// The Landlock ruleset with its rules (close-on-exec).
    ruleset: OwnedFd,
    /// The seccomp programs (one filter; compiled once per process and
    /// policy shape).
    seccomp: std::sync::Arc<super::seccomp::Programs>,
    /// The socket pair the network policy's notified `socket(2)`
    /// refusals' listener goes to corral over (`None` under `host`).
    pub(crate) net: Option<super::supervisor::NetFilter>,
    /// Whether namespaces are used (else the ladder).
    pub(crate) namespaces: bool,
    uid_map: CString,
    gid_map: CString,
    /// Longest-first is not needed: shortest first, so a writable path
    /// inside another is attached over it.
    writable: Vec<Writable>,
    /// The private tmpfs mount points (/tmp, /dev/shm that exist).
    private: Vec<CString>,
    /// The private /dev (namespaces; `None`: the host's /dev, read-only,
    /// with a Landlock rule per device).
    dev: Option<DevTree>,
    /// Landlock access granted beneath each private directory.
    private_access: u64,
    /// The `deny_read` paths inside writable ones.
    masks: Vec<Mask>,
    /// Where the empty mode-000 file the file masks are bound from is
    /// made (in the first private tmpfs, unlinked at once).
    mask_src: Option<(CString, CString)>,
    loopback: bool,
    /// Root: drop every capability (without namespaces).
    drop_caps: bool,
    cwd: CString,
    /// What is enforced, rule by rule (the report's `sandbox` object).
    pub(crate) enforced: crate::report::SandboxReport,
}

impl Prepared {
    /// The prepared sandbox of `setup`, if it has one.
    pub(crate) fn of(setup: &crate::spec::ChildSetup) -> Option<&Prepared> {
        setup
            .sandbox
            .as_ref()
            .and_then(|p| p.0.downcast_ref::<Prepared>())
    }

    /// The Landlock ruleset's descriptor (the PID namespace's init keeps
    /// it open for its command).
    pub(crate) fn ruleset_fd(&self) -> c_int {
        self.ruleset.as_raw_fd()
    }

    /// The descriptor the child hands the seccomp listener over (-1:
    /// none; the PID namespace's init keeps it open for its command).
    pub(crate) fn notify_fd(&self) -> c_int {
        self.net.as_ref().map_or(-1, |n| n.child_fd())
    }
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("namespaces", &self.namespaces)
            .finish_non_exhaustive()
    }
}

/// `struct landlock_path_beneath_attr` (packed in the UAPI).
#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

fn bad(reason: impl Into<String>) -> crate::Error {
    crate::Error::Sandbox {
        reason: reason.into(),
        source: None,
    }
}

fn bad_io(reason: impl Into<String>, e: io::Error) -> crate::Error {
    crate::Error::Sandbox {
        reason: reason.into(),
        source: Some(e),
    }
}

fn cstr(p: &Path) -> Result<CString, crate::Error> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| crate::Error::InvalidInput(format!("nul byte in path {p:?}")))
}

/// The Landlock ABI of the running kernel (0: none).
pub(crate) fn landlock_abi() -> i32 {
    static ABI_V: OnceLock<i32> = OnceLock::new();
    *ABI_V.get_or_init(|| {
        // SAFETY: landlock_create_ruleset(NULL, 0, VERSION) reads nothing.
        let v = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                std::ptr::null::<u8>(),
                0usize,
                1u32,
            )
        };
        v.max(0) as i32
    })
}

/// Whether this thread can make user, mount and network namespaces: a
/// forked child tries `unshare` and exits. Remembered per seccomp state of
/// the calling thread (`Seccomp` and `Seccomp_filters` in
/// /proc/thread-self/status): a filter installed later is seen at the next
/// spawn. A refusal the probe did not see fails the spawn closed.
pub(crate) fn namespaces_available() -> bool {
    static SEEN: std::sync::Mutex<Option<(String, bool)>> = std::sync::Mutex::new(None);
    if std::env::var_os("CORRAL_SANDBOX_NO_NAMESPACES").is_some_and(|v| v == "1") {
        return false;
    }
    // Without a seccomp filter on this thread (one system call tells) the
    // answer needs neither the status file nor the probe.
    // SAFETY: prctl(PR_GET_SECCOMP) takes no pointer.
    if unsafe { libc::prctl(libc::PR_GET_SECCOMP) } == 0 {
        if let Some(v) = namespaces_foreseen() {
            return v;
        }
    }
    let key: String = std::fs::read_to_string("/proc/thread-self/status")
        .map(|s| {
            s.lines()
                .filter(|l| l.starts_with("Seccomp") || l.starts_with("NoNewPrivs"))
                .collect::<Vec<_>>()
                .join(";")
        })
        .unwrap_or_default();
    if let Ok(seen) = SEEN.lock() {
        if let Some((k, v)) = seen.as_ref() {
            if *k == key {
                return *v;
            }
        }
    }
    // Without a seccomp filter, a restrictive sysctl, an AppArmor
    // restriction or a chroot, nothing refuses the namespaces: no probe
    // (a forked child, about 1.5 ms of every one-shot run). A refusal this
    // did not foresee fails the spawn closed.
    let available = match key
        .contains("Seccomp:\t0")
        .then(namespaces_foreseen)
        .flatten()
    {
        Some(v) => v,
        None => probe_namespaces(),
    };
    if let Ok(mut seen) = SEEN.lock() {
        *seen = Some((key, available));
    }
    available
}

/// Whether user, mount and network namespaces are available to a thread
/// without a seccomp filter (one may refuse unshare or clone: a container's
/// profile, the ladder tests'; only trying tells), when that can be told
/// without trying (`None`: a probe must try).
fn namespaces_foreseen() -> Option<bool> {
    let read = |p: &str| std::fs::read_to_string(p).map(|s| s.trim().to_string());
    if read("/proc/sys/user/max_user_namespaces").ok()? == "0" {
        return Some(false);
    }
    let root = rustix::process::geteuid().is_root();
    if !root {
        if read("/proc/sys/kernel/unprivileged_userns_clone").is_ok_and(|v| v == "0") {
            return Some(false);
        }
        // Ubuntu's restriction depends on the program's AppArmor profile.
        if read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").is_ok_and(|v| v != "0") {
            return None;
        }
    }
    // A chrooted process cannot make a user namespace: its root is then
    // (but for a chroot to a mount's root) not the root of a mount
    // (statx's STATX_ATTR_MOUNT_ROOT on "/"; one call, where reading
    // /proc/self/mountinfo costs a line per mount). A chroot to a mount's
    // root is not told apart: that spawn fails closed.
    let root = rustix::fs::statx(
        rustix::fs::CWD,
        "/",
        rustix::fs::AtFlags::empty(),
        rustix::fs::StatxFlags::BASIC_STATS,
    )
    .ok()?;
    let mount_root = rustix::fs::StatxAttributes::MOUNT_ROOT;
    if !root.stx_attributes_mask.contains(mount_root) || !root.stx_attributes.contains(mount_root) {
        return None;
    }
    Some(true)
}

fn probe_namespaces() -> bool {
    // The answer comes through a pipe, not the exit status: a process-wide
    // reaper (`reap_all_orphans`) may reap the child first.
    let mut fds = [0 as c_int; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return false;
    }
    // SAFETY: the child only calls unshare, write and _exit
    // (async-signal-safe) and never returns into Rust code.
    unsafe {
        let pid = libc::fork();
        if pid == 0 {
            let r = libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWNET);
            let answer: u8 = if r == 0 { b'y' } else { b'n' };
            libc::write(fds[1], (&answer as *const u8).cast(), 1);
            libc::_exit(0);
        }
        libc::close(fds[1]);
        let mut answer = 0u8;
        let got = if pid < 0 {
            0
        } else {
            loop {
                let n = libc::read(fds[0], (&mut answer as *mut u8).cast(), 1);
                if n >= 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                    break n;
                }
            }
        };
        libc::close(fds[0]);
        if pid > 0 {
            let mut status = 0;
            // Reaped here unless a process-wide reaper was first.
            while libc::waitpid(pid, &mut status, 0) < 0
                && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
            {}
        }
        got == 1 && answer == b'y'
    }
}

fn canonical_existing(p: &Path, what: &str) -> Result<PathBuf, crate::Error> {
    if !p.is_absolute() {
        return Err(crate::Error::InvalidInput(format!(
            "sandbox: {what} path {p:?} must be absolute"
        )));
    }
    std::fs::canonicalize(p).map_err(|e| {
        crate::Error::InvalidInput(format!("sandbox: {what} path {p:?} cannot be used: {e}"))
    })
}

/// `p` with its longest existing prefix resolved (a denied path need not
/// exist: if it appears later it is still unreadable).
fn canonical_prefix(p: &Path) -> Result<PathBuf, crate::Error> {
    if !p.is_absolute() {
        return Err(crate::Error::InvalidInput(format!(
            "sandbox: deny_read path {p:?} must be absolute"
        )));
    }
    let mut rest = Vec::new();
    let mut cur = p.to_path_buf();
    loop {
        if let Ok(c) = std::fs::canonicalize(&cur) {
            let mut out = c;
            for r in rest.iter().rev() {
                out.push(r);
            }
            return Ok(out);
        }
        match (cur.file_name().map(|n| n.to_owned()), cur.parent()) {
            (Some(n), Some(parent)) => {
                rest.push(n);
                cur = parent.to_path_buf();
            }
            _ => return Ok(p.to_path_buf()),
        }
    }
}

/// The read grants: everything readable but `denied`. Landlock grants are
/// hierarchical, so every sibling along the way to a denied path gets its
/// own grant (the ancestors themselves cannot be listed). Under /dev only
/// directories (listing), character devices and files are granted: no
/// block device (a raw disk would read around every rule) and not
/// /dev/mem, /dev/kmem, /dev/port, /dev/kmsg (the kernel log: syslog(2) is
/// denied too). With `private_dev` /dev gets no rule
/// at all: the child covers it with its own /dev and grants that.
fn read_rules(
    denied: &[PathBuf],
    private_dev: bool,
) -> Vec<(PathBuf, landlock::BitFlags<AccessFs>)> {
    use std::os::unix::fs::FileTypeExt;
    fn walk(
        dir: &Path,
        in_dev: bool,
        private_dev: bool,
        denied: &[PathBuf],
        out: &mut Vec<(PathBuf, landlock::BitFlags<AccessFs>)>,
    ) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            if denied.iter().any(|d| d == &p) {
                continue;
            }
            // A symbolic link needs no grant of its own (its target is
            // reached under the target's rules; granting the target here
            // could grant a denied path). Sockets and pipes cannot carry a
            // rule and are reached through their directory's.
            let Ok(t) = e.file_type() else { continue };
            if !(t.is_dir() || t.is_file() || t.is_char_device() || t.is_block_device()) {
                continue;
            }
            let dev = in_dev || p == Path::new("/dev");
            if dev && private_dev {
                continue;
            }
            if denied.iter().any(|d| d.starts_with(&p)) {
                walk(&p, dev, private_dev, denied, out);
            } else if dev && t.is_dir() {
                out.push((p.clone(), AccessFs::ReadDir.into()));
                walk(&p, true, private_dev, denied, out);
            } else if dev {
                let name = p.file_name().unwrap_or_default();
                if t.is_char_device() && !["mem", "kmem", "port", "kmsg"].iter().any(|n| name == *n)
                {
                    out.push((p, AccessFs::ReadFile.into()));
                } else if t.is_file() {
                    out.push((p, AccessFs::ReadFile | AccessFs::Execute));
                }
            } else if t.is_dir() {
                out.push((p, fs_read()));
            } else {
                out.push((p, fs_read() & AccessFs::from_file(ABI::V3)));
            }
        }
    }
    let mut out = Vec::new();
    if denied.iter().any(|d| d == Path::new("/")) {
        return out;
    }
    if denied.is_empty() {
        // Nothing is denied: every directory can be listed.
        out.push((PathBuf::from("/"), AccessFs::ReadDir.into()));
    }
    walk(Path::new("/"), false, private_dev, denied, &mut out);
    out
}

fn fs_all() -> landlock::BitFlags<AccessFs> {
    // Every filesystem right of ABI 3 (IoctlDev, ABI 5, is not handled:
    // terminals and devices keep their ioctls).
    AccessFs::from_all(ABI::V3)
}

/// What is granted beneath a writable path: everything but making device
/// nodes (root without a user namespace could make one for a raw disk).
fn fs_write() -> landlock::BitFlags<AccessFs> {
    fs_all() & !(AccessFs::MakeChar | AccessFs::MakeBlock)
}

fn fs_read() -> landlock::BitFlags<AccessFs> {
    AccessFs::ReadFile | AccessFs::ReadDir | AccessFs::Execute
}

/// Builds everything the child needs to enter the sandbox `policy` with
/// `cwd` as its working directory (`None`: the caller's).
pub(crate) fn prepare(policy: &Sandbox, cwd: Option<&Path>) -> Result<Prepared, crate::Error> {
    use crate::report::{Enforcement, SandboxReport, SandboxRule};
    let abi = landlock_abi();
    if abi < 6 {
        return Err(bad(format!(
            "Landlock ABI 6 or later is needed (signal and abstract-socket scoping); this kernel has {}",
            if abi == 0 { "no Landlock".to_string() } else { format!("ABI {abi}") }
        )));
    }
    let namespaces = namespaces_available();
    if !namespaces && policy.network == Network::Loopback {
        return Err(bad(
            "network loopback needs a network namespace, and this process cannot make one (user namespaces are off)",
        ));
    }
    let cwd = match cwd {
        Some(d) if d.is_absolute() => d.to_path_buf(),
        Some(d) => std::env::current_dir()
            .map_err(|e| bad_io("cannot read the current directory", e))?
            .join(d),
        None => {
            std::env::current_dir().map_err(|e| bad_io("cannot read the current directory", e))?
        }
    };
    let cwd = std::fs::canonicalize(&cwd)
        .map_err(|e| bad_io(format!("the working directory {cwd:?} cannot be used"), e))?;
    let mut writable = vec![cwd.clone()];
    for w in &policy.allow_write {
        writable.push(canonical_existing(w, "allow_write")?);
    }
    let private_dirs: Vec<PathBuf> = ["/tmp", "/dev/shm"]
        .iter()
        .map(PathBuf::from)
        .filter(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir()))
        .collect();
    let mut denied = Vec::new();
    for d in &policy.deny_read {
        denied.push(canonical_prefix(d)?);
    }
    // Landlock's grants are inherited downward and cannot be taken back:
    // a denied path inside a writable one (the working directory
    // included) is masked by a mount in the mount namespace instead;
    // without one it is refused, as is a writable path inside a denied
    // one (masking the denied path would hide it), rather than reported
    // as enforced.
    let mut masks = Vec::new();
    let mut unmasked = Vec::new();
    for d in &denied {
        if let Some(w) = writable.iter().find(|w| w.starts_with(d)) {
            return Err(crate::Error::InvalidInput(format!(
                "sandbox: the writable {} (the working directory or an allow_write path) lies                  inside the deny_read path {}: a writable path inside a denied one cannot be                  enforced",
                w.display(),
                d.display()
            )));
        }
        let Some(w) = writable.iter().find(|w| d.starts_with(w)) else {
            unmasked.push(d.clone());
            continue;
        };
        if !namespaces {
            return Err(crate::Error::InvalidInput(format!(
                "sandbox: deny_read path {} lies inside the writable {} (the working directory                  or an allow_write path): without a mount namespace (user namespaces are                  refused to this process) it cannot be masked, and Landlock's grants are                  inherited downward, so it would stay readable",
                d.display(),
                w.display()
            )));
        }
        let meta = std::fs::symlink_metadata(d).map_err(|e| {
            crate::Error::InvalidInput(format!(
                "sandbox: deny_read path {} lies inside the writable {} and cannot be masked: {e}                  (a path inside a writable one is masked by a mount, so it must exist)",
                d.display(),
                w.display()
            ))
        })?;
        masks.push(Mask {
            path: cstr(d)?,
            dir: meta.is_dir(),
        });
    }
    if masks.len() > MAX_WRITABLE {
        return Err(crate::Error::InvalidInput(format!(
            "sandbox: at most {MAX_WRITABLE} deny_read paths inside writable ones"
        )));
    }
    let mask_src = if masks.iter().any(|m| !m.dir) {
        let Some(first) = private_dirs.first() else {
            return Err(bad(
                "a deny_read file inside a writable path is masked from a private /tmp or /dev/shm, and neither exists here",
            ));
        };
        Some((cstr(first)?, c".corral-deny-read-mask".to_owned()))
    } else {
        None
    };
    // With a mount namespace /dev is a private tree of the usual devices
    // (granted once), unless a policy path lies in it (a writable path
    // under /dev but in /dev/shm, a denied path in or above it): then the
    // host's /dev stays, read-only, with a rule per device.
    let dev_path = Path::new("/dev");
    let private_dev = namespaces
        && std::fs::symlink_metadata(dev_path).is_ok_and(|m| m.is_dir())
        && !denied
            .iter()
            .any(|d| d.starts_with(dev_path) || dev_path.starts_with(d))
        && !writable
            .iter()
            .any(|w| w.starts_with(dev_path) && !w.starts_with("/dev/shm"));
    if !namespaces {
        // No private /tmp without a mount namespace: the host's is denied
        // instead (neither readable nor writable).
        for p in &private_dirs {
            denied.push(p.clone());
        }
    }

    // Landlock: the ruleset.
    let ll = |what: &str, e: landlock::RulesetError| bad(format!("Landlock {what}: {e}"));
    let mut rs = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(fs_all())
        .map_err(|e| ll("ruleset", e))?
        .scope(if policy.network == Network::Host {
            // `host` is not confined: the host's abstract sockets stay
            // reachable.
            Scope::Signal.into()
        } else {
            Scope::Signal | Scope::AbstractUnixSocket
        })
        .map_err(|e| ll("scoping", e))?;
    if policy.network == Network::None {
        rs = rs
            .handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)
            .map_err(|e| ll("network rights", e))?;
    }
    let mut created = rs.create().map_err(|e| ll("ruleset creation", e))?;
    created = created.no_new_privs(false);
    let path_fd =
        |p: &Path| PathFd::new(p).map_err(|e| bad(format!("Landlock: cannot open {p:?}: {e}")));
    if !namespaces {
        unmasked.clone_from(&denied);
    }
    for w in &writable {
        // A writable file gets the rights a file can carry.
        let access = if w.is_dir() {
            fs_write()
        } else {
            fs_write() & AccessFs::from_file(ABI::V3)
        };
        created = created
            .add_rule(PathBeneath::new(path_fd(w)?, access))
            .map_err(|e| ll(&format!("write rule for {w:?}"), e))?;
    }
    let devices = [
        "/dev/null",
        "/dev/zero",
        "/dev/random",
        "/dev/urandom",
        "/dev/tty",
        "/dev/full",
    ];
    let mut granted_devices = Vec::new();
    let mut dev_nodes = Vec::new();
    for d in devices {
        if private_dev {
            // Bound into the private /dev by the child, granted there.
            use std::os::unix::fs::FileTypeExt;
            if std::fs::symlink_metadata(d).is_ok_and(|m| m.file_type().is_char_device()) {
                dev_nodes.push(cstr(Path::new(d))?);
                granted_devices.push(d.to_string());
            }
            continue;
        }
        let Ok(fd) = PathFd::new(d) else { continue };
        // A device in a denied path stays writable but not readable.
        let access = if denied.iter().any(|x| Path::new(d).starts_with(x)) {
            AccessFs::WriteFile | AccessFs::Truncate
        } else {
            AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate
        };
        created = created
            .add_rule(PathBeneath::new(fd, access))
            .map_err(|e| ll(&format!("device rule for {d}"), e))?;
        granted_devices.push(d.to_string());
    }
    let ruleset: Option<OwnedFd> = created.into();
    let ruleset = ruleset.ok_or_else(|| bad("Landlock is not enforceable here"))?;
    // The read rules (with the host's /dev, most of them: a device at a
    // time)
    // are added directly: the walk knows each entry's type and gave it the
    // rights its type can carry, so the crate's fstat per rule is not
    // needed. A rule the kernel refuses fails the preparation.
    for (r, access) in read_rules(&unmasked, private_dev) {
        use std::os::unix::fs::OpenOptionsExt;
        // An entry this user cannot open stays as unreadable as it was.
        let Ok(f) = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_CLOEXEC)
            .open(&r)
        else {
            continue;
        };
        let attr = PathBeneathAttr {
            allowed_access: access.bits(),
            parent_fd: f.as_raw_fd(),
        };
        // SAFETY: `attr` is a landlock_path_beneath_attr on this stack.
        unsafe {
            raw::landlock_add_rule_path(
                ruleset.as_raw_fd(),
                &attr as *const PathBeneathAttr as usize,
            )
        }
        .map_err(|e| {
            bad_io(
                format!("Landlock: read rule for {r:?}"),
                io::Error::from_raw_os_error(e.raw()),
            )
        })?;
    }

    // seccomp: one program for the policy, compiled once per process.
    let seccomp = super::seccomp::programs((namespaces, policy.network), || {
        seccomp_rules(namespaces, policy.network)
    })
    .map_err(bad)?;
    let net = match seccomp.notify {
        Some(_) => Some(super::supervisor::NetFilter::new().map_err(bad)?),
        None => None,
    };

    // Writable paths as the child re-attaches them: shortest first.
    let mut wsorted = writable.clone();
    wsorted.sort_by_key(|p| p.as_os_str().len());
    wsorted.dedup();
    let mut ws = Vec::new();
    for w in &wsorted {
        let mut mkdirs = Vec::new();
        if let Some(priv_dir) = private_dirs.iter().find(|d| w.starts_with(d) && w != *d) {
            let mut cur = priv_dir.clone();
            for comp in w
                .strip_prefix(priv_dir)
                .unwrap_or(Path::new(""))
                .components()
            {
                cur.push(comp);
                mkdirs.push(cstr(&cur)?);
            }
        }
        ws.push(Writable {
            path: cstr(w)?,
            mkdirs,
        });
    }
    let uid = rustix::process::geteuid().as_raw();
    let gid = rustix::process::getegid().as_raw();

    // The report: the policy as enforced.
    let ns_or = |with: &str, without: Enforcement| {
        if namespaces {
            Enforcement::by(with)
        } else {
            without
        }
    };
    let mut rules = vec![
        SandboxRule::new(
            "write: only the working directory, the allow_write paths, the private /tmp and /dev/shm, the usual devices",
            Enforcement::by(if private_dev {
                "landlock, mount namespace (the rest read-only: chmod, chown, utimes, xattrs; a private read-only /dev of the usual devices)"
            } else if namespaces {
                "landlock, mount namespace (the rest read-only: chmod, chown, utimes, xattrs)"
            } else {
                "landlock, seccomp (chmod, chown, utimes, xattrs denied everywhere)"
            }),
        ),
        SandboxRule::new(
            "private /tmp and /dev/shm",
            ns_or("mount namespace (tmpfs)", Enforcement::denied_instead("the host's /tmp and /dev/shm are neither readable nor writable")),
        ),
        SandboxRule::new(
            "deny_read paths unreadable (read, list, execute)",
            Enforcement::by(if masks.is_empty() {
                "landlock"
            } else {
                "landlock; those inside a writable path: mount namespace (an empty read-only mode-000 tmpfs or file mounted over them, the tree's mount calls denied by landlock and seccomp, root's capabilities dropped)"
            }),
        ),
        SandboxRule::new(
            "no signal or ptrace outside the tree",
            Enforcement::by("landlock scoping (signals), landlock and seccomp (ptrace, process_vm_*)"),
        ),
        SandboxRule::new("no new privileges (set-uid, set-gid)", Enforcement::by("no_new_privs")),
    ];
    match policy.network {
        Network::None => rules.push(SandboxRule::new(
            "network none: no TCP, UDP or unix socket to the host, name lookups fail at once",
            Enforcement::by(if namespaces {
                "seccomp (socket(2) denied for every family; socketpair allowed), landlock (TCP bind and connect), network namespace, landlock scoping (abstract unix sockets)"
            } else {
                "seccomp (socket(2) denied for every family; socketpair allowed), landlock (TCP bind and connect), landlock scoping (abstract unix sockets)"
            }),
        )),
        Network::Loopback => rules.push(SandboxRule::new(
            "network loopback: a private loopback, nothing of the host's",
            Enforcement::by("network namespace (loopback up), seccomp (socket(AF_UNIX) denied: no host pathname socket), landlock scoping (abstract unix sockets)"),
        )),
        Network::Host => rules.push(SandboxRule::new("network host", Enforcement::not_confined())),
    }
    let mut mechanisms = vec![
        format!("landlock ABI {abi}"),
        "seccomp".to_string(),
        "no_new_privs".to_string(),
    ];
    if namespaces {
        mechanisms.insert(0, "user, mount and network namespaces".to_string());
    }
    let enforced = SandboxReport {
        network: policy.network.name().to_string(),
        allow_write: writable.iter().map(|p| p.display().to_string()).collect(),
        deny_read: denied.iter().map(|p| p.display().to_string()).collect(),
        private_tmp: namespaces,
        landlock_abi: abi as u32,
        namespaces,
        mechanisms,
        rules,
        devices: granted_devices,
        // Filled in when the run ends (`supervisor::Supervisor::finish`).
        denials: Vec::new(),
        denials_unlisted: 0,
        denials_observed: Vec::new(),
        denials_note: String::new(),
    };

    Ok(Prepared {
        ruleset,
        seccomp,
        net,
        namespaces,
        uid_map: CString::new(format!("{uid} {uid} 1\n")).expect("no nul"),
        gid_map: CString::new(format!("{gid} {gid} 1\n")).expect("no nul"),
        writable: ws,
        private: if namespaces {
            private_dirs
                .iter()
                .map(|p| cstr(p))
                .collect::<Result<_, _>>()?
        } else {
            Vec::new()
        },
        private_access: fs_write().bits(),
        dev: private_dev.then(|| DevTree {
            devices: dev_nodes,
            shm: private_dirs.iter().any(|d| d == Path::new("/dev/shm")),
            access: (AccessFs::ReadDir
                | AccessFs::ReadFile
                | AccessFs::WriteFile
                | AccessFs::Truncate)
                .bits(),
        }),
        masks,
        mask_src,
        // Under `none` no socket can be made (seccomp): its namespace's
        // loopback stays down (a socket, an ioctl less per run).
        loopback: namespaces && policy.network == Network::Loopback,
        drop_caps: uid == 0,
        cwd: cstr(&cwd)?,
        enforced,
    })
}

/// The seccomp rules: `EPERM` for the calls the policy forbids (on x86_64
/// every x32 call too: `seccomp::compile`), the network policy's
/// `socket(2)` refusals notified to corral (`supervisor`), every other
/// call allowed.
pub(super) fn seccomp_rules(
    namespaces: bool,
    network: Network,
) -> Result<super::seccomp::Rules, String> {
    use super::seccomp::{Refusal, Rules};
    use seccompiler::{SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompRule};
    let mut rules = Rules::new();
    let mut deny = |nr: u32, conditions: Vec<SeccompRule>| {
        rules.insert(
            nr,
            Refusal {
                conditions,
                notified: false,
            },
        );
    };
    #[cfg(target_arch = "x86_64")]
    let arch_only = [k::__NR_iopl, k::__NR_ioperm];
    #[cfg(not(target_arch = "x86_64"))]
    let arch_only: [u32; 0] = [];
    for nr in arch_only.into_iter().chain([
        k::__NR_ptrace,
        k::__NR_process_vm_readv,
        k::__NR_process_vm_writev,
        // io_uring can open sockets and files without these filters
        // seeing the calls.
        k::__NR_io_uring_setup,
        // Defence in depth, above all for root without a user namespace
        // (the ladder): the kernel, the clock, the host's names, files by
        // handle (around every path rule), keyrings, BPF, perf,
        // userfaultfd, fanotify, the kernel log, the mount calls (Landlock
        // refuses those too).
        k::__NR_init_module,
        k::__NR_finit_module,
        k::__NR_delete_module,
        k::__NR_kexec_load,
        k::__NR_kexec_file_load,
        k::__NR_reboot,
        k::__NR_swapon,
        k::__NR_swapoff,
        k::__NR_acct,
        k::__NR_settimeofday,
        k::__NR_clock_settime,
        k::__NR_clock_adjtime,
        k::__NR_adjtimex,
        k::__NR_sethostname,
        k::__NR_setdomainname,
        k::__NR_open_by_handle_at,
        k::__NR_keyctl,
        k::__NR_add_key,
        k::__NR_request_key,
        k::__NR_bpf,
        k::__NR_perf_event_open,
        k::__NR_userfaultfd,
        k::__NR_fanotify_init,
        k::__NR_syslog,
        k::__NR_quotactl,
        k::__NR_pivot_root,
        k::__NR_chroot,
        k::__NR_mount,
        k::__NR_umount2,
        k::__NR_fsopen,
        k::__NR_fsmount,
        k::__NR_fsconfig,
        k::__NR_fspick,
        k::__NR_move_mount,
        k::__NR_open_tree,
        k::__NR_mount_setattr,
    ]) {
        deny(nr, vec![]);
    }
    // TIOCSTI (and TIOCLINUX) would push input into a terminal the tree
    // shares with the host's shell: commands run outside the sandbox.
    let ioctl_rule = |cmd: u64| {
        SeccompCondition::new(1, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, cmd)
            .and_then(|c| SeccompRule::new(vec![c]))
            .map_err(|e| format!("seccomp rule: {e}"))
    };
    deny(
        k::__NR_ioctl,
        vec![
            // The generic ioctl numbers (x86_64 and aarch64 alike).
            ioctl_rule(0x5412)?, // TIOCSTI
            ioctl_rule(0x541C)?, // TIOCLINUX
        ],
    );
    if !namespaces {
        // No read-only mounts: the metadata writes Landlock has no right
        // for are denied everywhere.
        #[cfg(target_arch = "x86_64")]
        let legacy = [
            k::__NR_chmod,
            k::__NR_chown,
            k::__NR_lchown,
            k::__NR_utime,
            k::__NR_utimes,
            k::__NR_futimesat,
        ];
        #[cfg(not(target_arch = "x86_64"))]
        let legacy: [u32; 0] = [];
        for nr in legacy.into_iter().chain([
            k::__NR_fchmod,
            k::__NR_fchmodat,
            k::__NR_fchmodat2,
            k::__NR_fchown,
            k::__NR_fchownat,
            k::__NR_utimensat,
            k::__NR_setxattr,
            k::__NR_lsetxattr,
            k::__NR_fsetxattr,
            k::__NR_removexattr,
            k::__NR_lremovexattr,
            k::__NR_fremovexattr,
            k::__NR_setxattrat,
            k::__NR_removexattrat,
        ]) {
            deny(nr, vec![]);
        }
    }
    if let Some(r) = super::supervisor::socket_refusal(network)? {
        rules.insert(k::__NR_socket, r);
    }
    Ok(rules)
}

/// The raw view the child reads: the prepared sandbox and how the child
/// comes to its namespaces.
#[derive(Clone, Copy)]
pub(crate) struct RawSandbox {
    pub(crate) prepared: *const Prepared,
    pub(crate) entry: NsEntry,
}

/// Enters the sandbox in a child about to exec. 0, or a failure code
/// ([`FAIL_BASE`] + step and errno: see [`decode`]). `pty`: standard
/// input is the run's pty (`Command::pty`), bound into the private /dev.
///
/// # Safety
/// Only in a freshly cloned or forked child about to exec, with
/// `s.prepared` valid until then.
pub(crate) unsafe fn enter(s: &RawSandbox, pty: bool) -> i32 {
    // SAFETY: valid until the exec, as the caller promises.
    let p = unsafe { &*s.prepared };
    // SAFETY: in that child, as the caller promises.
    match unsafe { enter_steps(p, s.entry, pty) } {
        Ok(()) => 0,
        Err((step, e)) => code(step, e),
    }
}

/// # Safety
/// As for [`enter`].
#[inline(always)]
unsafe fn enter_steps(p: &Prepared, entry: NsEntry, pty: bool) -> Result<(), (i32, Errno)> {
    let ns = entry != NsEntry::None;
    if entry == NsEntry::Unshare {
        raw::unshare((k::CLONE_NEWUSER | k::CLONE_NEWNS | k::CLONE_NEWNET) as usize)
            .map_err(|e| (S_UNSHARE, e))?;
    }
    if entry == NsEntry::Unshare || entry == NsEntry::Cloned {
        write_file(c"/proc/self/setgroups", b"deny").map_err(|e| (S_MAPS, e))?;
        write_file(c"/proc/self/uid_map", p.uid_map.as_bytes()).map_err(|e| (S_MAPS, e))?;
        write_file(c"/proc/self/gid_map", p.gid_map.as_bytes()).map_err(|e| (S_MAPS, e))?;
    }
    if ns {
        raw::mount(None, c"/", None, k::MS_REC | k::MS_PRIVATE).map_err(|e| (S_PRIVATE, e))?;
        // Copies of the writable trees, made while they are still
        // writable, put back over the read-only tree below.
        let mut trees = [-1 as c_int; MAX_WRITABLE];
        let n = p.writable.len().min(MAX_WRITABLE);
        let mut i = 0;
        while i < n {
            trees[i] =
                raw::open_tree(p.writable[i].path.as_c_str()).map_err(|e| (S_OPEN_TREE, e))?;
            i += 1;
        }
        raw::mount_setattr_rdonly(c"/").map_err(|e| (S_READONLY, e))?;
        if let Some(dev) = &p.dev {
            private_dev(dev, pty, p.ruleset.as_raw_fd()).map_err(|e| (S_DEV, e))?;
        }
        for d in &p.private {
            raw::mount_data(
                Some(c"tmpfs"),
                d.as_c_str(),
                Some(c"tmpfs"),
                k::MS_NOSUID | k::MS_NODEV,
                c"mode=1777",
            )
            .map_err(|e| (S_TMPFS, e))?;
        }
        // The file masks: detached binds of one empty mode-000 file made
        // in the private tmpfs (before the writable trees go back: the
        // working directory may be /tmp itself); its name is removed
        // through the tmpfs's descriptor once they are attached.
        let mut files = [-1 as c_int; MAX_WRITABLE];
        let mut src_dir = -1;
        if let Some((dir, name)) = &p.mask_src {
            src_dir = raw::openat(
                k::AT_FDCWD,
                dir.as_c_str(),
                k::O_PATH | k::O_DIRECTORY | k::O_CLOEXEC,
            )
            .map_err(|e| (S_MASK, e))?;
            let fd = raw::openat(
                src_dir,
                name.as_c_str(),
                k::O_CREAT | k::O_EXCL | k::O_WRONLY | k::O_CLOEXEC,
            );
            raw::close(fd.map_err(|e| (S_MASK, e))?);
            let mut j = 0;
            while j < p.masks.len().min(MAX_WRITABLE) {
                if !p.masks[j].dir {
                    files[j] =
                        raw::open_tree_at(src_dir, name.as_c_str()).map_err(|e| (S_MASK, e))?;
                }
                j += 1;
            }
        }
        i = 0;
        while i < n {
            for m in &p.writable[i].mkdirs {
                match raw::mkdir(m.as_c_str(), 0o755) {
                    Ok(_) | Err(Errno::EXIST) => {}
                    Err(e) => return Err((S_MKDIR, e)),
                }
            }
            raw::move_mount(trees[i], p.writable[i].path.as_c_str()).map_err(|e| (S_MOVE, e))?;
            raw::close(trees[i]);
            i += 1;
        }
        let mut j = 0;
        while j < p.masks.len().min(MAX_WRITABLE) {
            let m = &p.masks[j];
            if m.dir {
                raw::mount_data(
                    Some(c"tmpfs"),
                    m.path.as_c_str(),
                    Some(c"tmpfs"),
                    k::MS_RDONLY | k::MS_NOSUID | k::MS_NODEV | k::MS_NOEXEC,
                    c"mode=000,size=4k",
                )
                .map_err(|e| (S_MASK, e))?;
            } else {
                raw::move_mount(files[j], m.path.as_c_str()).map_err(|e| (S_MASK, e))?;
                raw::close(files[j]);
                raw::mount_setattr_rdonly(m.path.as_c_str()).map_err(|e| (S_MASK, e))?;
            }
            j += 1;
        }
        if src_dir >= 0 {
            if let Some((_, name)) = &p.mask_src {
                raw::unlinkat(src_dir, name.as_c_str()).map_err(|e| (S_MASK, e))?;
            }
            raw::close(src_dir);
        }
        for d in &p.private {
            let fd = raw::openat(
                k::AT_FDCWD,
                d.as_c_str(),
                k::O_PATH | k::O_CLOEXEC | k::O_DIRECTORY,
            )
            .map_err(|e| (S_GRANT_PRIVATE, e))?;
            let attr = PathBeneathAttr {
                allowed_access: p.private_access,
                parent_fd: fd,
            };
            // SAFETY: `attr` is a landlock_path_beneath_attr on this stack.
            let r = unsafe {
                raw::landlock_add_rule_path(
                    p.ruleset.as_raw_fd(),
                    &attr as *const PathBeneathAttr as usize,
                )
            };
            raw::close(fd);
            r.map_err(|e| (S_GRANT_PRIVATE, e))?;
        }
        if p.loopback {
            loopback_up().map_err(|e| (S_LOOPBACK, e))?;
        }
    }
    // SAFETY: `cwd` is a NUL-terminated string alive until the exec.
    unsafe { raw::chdir(p.cwd.as_ptr()) }.map_err(|e| (S_CHDIR, e))?;
    // Root inside a user namespace keeps its capabilities there, and
    // CAP_DAC_OVERRIDE would read through a mode-000 mask: dropped too when
    // there are masks.
    if p.drop_caps && (!ns || !p.masks.is_empty()) {
        // Root without a user namespace keeps no capability: the bounding
        // set emptied (an exec cannot give one back), then every set.
        let mut cap = 0;
        while cap <= LAST_CAP {
            match raw::prctl(libc::PR_CAPBSET_DROP as u32, cap) {
                Ok(_) | Err(Errno::INVAL) => {}
                Err(e) => return Err((S_CAPS, e)),
            }
            cap += 1;
        }
        raw::capset_empty().map_err(|e| (S_CAPS, e))?;
    }
    raw::prctl(libc::PR_SET_NO_NEW_PRIVS as u32, 1).map_err(|e| (S_NNP, e))?;
    raw::landlock_restrict_self(p.ruleset.as_raw_fd()).map_err(|e| (S_LANDLOCK, e))?;
    // One filter: the notifying program with its listener handed to
    // corral, or (`host`: nothing notified) the plain one.
    match &p.net {
        // SAFETY: in that child, after every other step, as the caller
        // promises.
        Some(net) => unsafe { net.install(&p.seccomp) },
        // SAFETY: as above.
        None => unsafe { super::supervisor::install_plain(&p.seccomp) },
    }
    .map_err(|e| (S_SECCOMP, e))?;
    Ok(())
}

/// Covers /dev with the private tree `dev` describes: binds of the host's
/// devices (cloned from the read-only tree, so they stay read-only mounts:
/// a device node is written through one, its metadata is not), the pty on
/// standard input when `pty`, the usual links, the /dev/shm mount point;
/// then the tmpfs made read-only and granted to Landlock once.
#[inline(always)]
fn private_dev(dev: &DevTree, pty: bool, ruleset: c_int) -> Result<(), Errno> {
    let n = dev.devices.len().min(MAX_DEVICES);
    let mut trees = [-1 as c_int; MAX_DEVICES];
    let mut i = 0;
    while i < n {
        trees[i] = raw::open_tree_at(k::AT_FDCWD, dev.devices[i].as_c_str())?;
        i += 1;
    }
    // The pty by the path its descriptor was opened at (/dev/pts/N); one
    // elsewhere is left out (the descriptors still work, ttyname does not).
    let mut buf = [0u8; 32];
    let mut pty_path: Option<&std::ffi::CStr> = None;
    let mut pty_tree = -1;
    if pty {
        if let Ok(len) = raw::readlinkat(k::AT_FDCWD, c"/proc/self/fd/0", &mut buf[..31]) {
            let name = &buf[..len];
            if len > 9 && name.starts_with(b"/dev/pts/") && name[9..].iter().all(u8::is_ascii_digit)
            {
                if let Ok(c) = std::ffi::CStr::from_bytes_with_nul(&buf[..=len]) {
                    pty_tree = raw::open_tree_at(k::AT_FDCWD, c)?;
                    pty_path = Some(c);
                }
            }
        }
    }
    raw::mount_data(
        Some(c"tmpfs"),
        c"/dev",
        Some(c"tmpfs"),
        k::MS_NOSUID | k::MS_NODEV | k::MS_NOEXEC,
        c"mode=755",
    )?;
    i = 0;
    while i < n {
        let path = dev.devices[i].as_c_str();
        raw::mknod_file(path, 0o666)?;
        raw::move_mount(trees[i], path)?;
        raw::close(trees[i]);
        i += 1;
    }
    if let Some(path) = pty_path {
        raw::mkdir(c"/dev/pts", 0o755)?;
        raw::mknod_file(path, 0o620)?;
        raw::move_mount(pty_tree, path)?;
        raw::close(pty_tree);
    }
    raw::symlink(c"/proc/self/fd", c"/dev/fd")?;
    raw::symlink(c"/proc/self/fd/0", c"/dev/stdin")?;
    raw::symlink(c"/proc/self/fd/1", c"/dev/stdout")?;
    raw::symlink(c"/proc/self/fd/2", c"/dev/stderr")?;
    if dev.shm {
        raw::mkdir(c"/dev/shm", 0o1777)?;
    }
    raw::mount(
        None,
        c"/dev",
        None,
        k::MS_REMOUNT | k::MS_BIND | k::MS_RDONLY | k::MS_NOSUID | k::MS_NODEV | k::MS_NOEXEC,
    )?;
    let fd = raw::openat(
        k::AT_FDCWD,
        c"/dev",
        k::O_PATH | k::O_CLOEXEC | k::O_DIRECTORY,
    )?;
    let attr = PathBeneathAttr {
        allowed_access: dev.access,
        parent_fd: fd,
    };
    // SAFETY: `attr` is a landlock_path_beneath_attr on this stack.
    let r =
        unsafe { raw::landlock_add_rule_path(ruleset, &attr as *const PathBeneathAttr as usize) };
    raw::close(fd);
    r.map(|_| ())
}

/// At most this many writable paths (working directory included).
pub(crate) const MAX_WRITABLE: usize = 64;

#[inline(always)]
fn write_file(path: &std::ffi::CStr, data: &[u8]) -> Result<(), Errno> {
    let fd = raw::openat(k::AT_FDCWD, path, k::O_WRONLY | k::O_CLOEXEC)?;
    let r = raw::write(fd, data);
    raw::close(fd);
    r.map(|_| ())
}

/// `struct ifreq` for SIOCSIFFLAGS: the name, then the flags (the rest of
/// the union unused).
#[repr(C)]
struct IfreqFlags {
    name: [u8; 16],
    flags: i16,
    _pad: [u8; 22],
}

#[inline(always)]
fn loopback_up() -> Result<(), Errno> {
    let s = raw::socket(
        libc::AF_INET as u32,
        (libc::SOCK_DGRAM | libc::SOCK_CLOEXEC) as u32,
    )?;
    let mut req = IfreqFlags {
        name: [0; 16],
        flags: (libc::IFF_UP | libc::IFF_LOOPBACK | libc::IFF_RUNNING) as i16,
        _pad: [0; 22],
    };
    req.name[0] = b'l';
    req.name[1] = b'o';
    // SAFETY: SIOCSIFFLAGS reads a `struct ifreq`; `req` has its size.
    let r = unsafe {
        raw::ioctl_ptr(
            s,
            libc::SIOCSIFFLAGS as u32,
            &mut req as *mut IfreqFlags as usize,
        )
    };
    raw::close(s);
    r.map(|_| ())
}

/// Refuses, before anything runs, what the sandbox cannot be combined
/// with.
pub(crate) fn check_setup(
    setup: &crate::spec::ChildSetup,
    writable: usize,
) -> Result<(), crate::Error> {
    if setup.uid.is_some() || setup.gid.is_some() || setup.groups.is_some() {
        return Err(crate::Error::InvalidInput(
            "sandbox: changing the user, group or supplementary groups is not supported inside a sandbox".into(),
        ));
    }
    if writable + 1 > MAX_WRITABLE {
        return Err(crate::Error::InvalidInput(format!(
            "sandbox: at most {} allow_write paths",
            MAX_WRITABLE - 1
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::seccomp::tests::{arg_sets, audit_arch, linear, run};
    #[cfg(target_arch = "x86_64")]
    use super::super::seccomp::X32_SYSCALL_BIT;
    use super::super::seccomp::{compile, RET_ALLOW, RET_EPERM, RET_NOTIFY};
    use super::*;

    /// The sandbox's own policies (with and without namespaces, each
    /// network) compile, answer every native call as the linear chain of
    /// the same rules did, refuse every x32 call, notify exactly the
    /// refused `socket(2)` calls, and answer an allowed call within 14
    /// instructions the action cache can emulate.
    #[test]
    fn the_sandbox_policies_answer_as_before_and_quickly() {
        let arch = audit_arch();
        for ns in [true, false] {
            for net in [Network::None, Network::Loopback, Network::Host] {
                let rules = seccomp_rules(ns, net).unwrap();
                let old = linear(&rules);
                let plain = compile(&rules, false).unwrap();
                let notify = compile(&rules, true).unwrap();
                let mut longest = 0;
                for nr in 0..1100u32 {
                    for args in arg_sets() {
                        let (o, ..) = run(&old, arch, nr, args);
                        let (p, steps, constant) = run(&plain, arch, nr, args);
                        let (n, ..) = run(&notify, arch, nr, args);
                        assert_eq!(o, p, "{ns} {net:?} nr {nr} args {args:?}");
                        if nr == libc::SYS_socket as u32 && p == RET_EPERM {
                            assert_eq!(n, RET_NOTIFY, "{ns} {net:?} args {args:?}");
                        } else {
                            assert_eq!(n, p, "{ns} {net:?} nr {nr} args {args:?}");
                        }
                        if !rules.contains_key(&nr) {
                            assert!(constant);
                            longest = longest.max(steps);
                        }
                        #[cfg(target_arch = "x86_64")]
                        assert_eq!(run(&plain, arch, nr | X32_SYSCALL_BIT, args).0, RET_EPERM);
                    }
                }
                assert!(longest <= 14, "{ns} {net:?}: {longest} instructions");
                assert_eq!(run(&plain, arch, u32::MAX, [0; 6]).0, RET_ALLOW);
                assert!(
                    plain.len() * 3 < old.len(),
                    "{ns} {net:?}: {} against {}",
                    plain.len(),
                    old.len()
                );
            }
        }
    }
}
