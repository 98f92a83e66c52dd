//! The parent side of the clone3 spawn: ordinary Rust that builds
//! everything the child reads ([`Prepared`], [`ChildArgs`]), blocks
//! signals, issues the clone3 and reads the child's report.

use std::ffi::{c_void, CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::os::raw::{c_char, c_int};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicI32, Ordering};

use linux_raw_sys::errno as en;
use linux_raw_sys::general as k;
use rustix::process::Pid;

use super::child::{child_main, ChildArgs, ExecPlan, RawSetup, NO_REPORT};
use super::raw::sigpipe_handler;
use super::raw::{clone3_from_host, HostCloneError};
use super::sandbox::NsEntry;
use super::stack::Stack;
use super::{mode, Clone3Error, Mode, DEFAULT_PATH, UNSUPPORTED};
use crate::sys::{ChildIo, SpawnSpec};

fn cstring(s: &OsStr) -> io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("nul byte found in provided data: {s:?}"),
        )
    })
}

/// The child's environment: the parent's (unless cleared) with the changes
/// applied in order. A changed variable keeps its place; a new one is added
/// at the end.
fn child_env(
    env_clear: bool,
    parent: impl IntoIterator<Item = (OsString, OsString)>,
    changes: &[(OsString, Option<OsString>)],
) -> Vec<(OsString, OsString)> {
    let mut vars: Vec<(OsString, OsString)> = if env_clear {
        Vec::new()
    } else {
        parent.into_iter().collect()
    };
    for (key, value) in changes {
        match value {
            Some(v) => match vars.iter_mut().find(|(k, _)| k == key) {
                Some(slot) => slot.1 = v.clone(),
                None => vars.push((key.clone(), v.clone())),
            },
            None => vars.retain(|(k, _)| k != key),
        }
    }
    vars
}

/// `KEY=VALUE` strings for `envp`.
fn env_block(vars: &[(OsString, OsString)]) -> io::Result<Vec<CString>> {
    vars.iter()
        .map(|(k, v)| {
            let mut kv = Vec::with_capacity(k.len() + v.len() + 1);
            kv.extend_from_slice(k.as_bytes());
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            cstring(OsStr::from_bytes(&kv))
        })
        .collect()
}

/// The paths `execve` is tried on, in order, as `execvp` does: the program
/// itself when it contains a `/`; otherwise the program in each `PATH`
/// entry (an empty entry is the current directory). `path` is the child's
/// `PATH` (its environment is what `execvp` searches); `None` uses the
/// default. An empty program name has no candidate (ENOENT).
fn path_candidates(program: &OsStr, path: Option<&OsStr>) -> Vec<OsString> {
    let name = program.as_bytes();
    if name.is_empty() {
        return Vec::new();
    }
    if name.contains(&b'/') {
        return vec![program.to_owned()];
    }
    let path = path.map_or(DEFAULT_PATH.as_bytes(), OsStr::as_bytes);
    path.split(|&b| b == b':')
        .map(|dir| {
            if dir.is_empty() {
                program.to_owned()
            } else {
                let mut p = Vec::with_capacity(dir.len() + name.len() + 1);
                p.extend_from_slice(dir);
                if !dir.ends_with(b"/") {
                    p.push(b'/');
                }
                p.extend_from_slice(name);
                OsString::from(OsStr::from_bytes(&p))
            }
        })
        .collect()
}

/// Everything the child needs, as C strings and NULL-terminated pointer
/// arrays. The pointer arrays point into the `CString`s owned here (their
/// heap buffers do not move when the struct does).
pub(super) struct Prepared {
    pub(super) _argv: Vec<CString>,
    pub(super) argv: Vec<*const c_char>,
    pub(super) _envp: Vec<CString>,
    pub(super) envp: Vec<*const c_char>,
    pub(super) _candidates: Vec<CString>,
    pub(super) candidates: Vec<*const c_char>,
    pub(super) cwd: Option<CString>,
}

fn pointers(strings: &[CString]) -> Vec<*const c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

impl Prepared {
    /// What the child execs with: these arrays, `stdio` as its standard
    /// streams, `spec`'s SIGPIPE choice and setup. The plan points into
    /// `self`, which must outlive the child's exec.
    pub(super) fn plan(&self, stdio: [c_int; 3], spec: &SpawnSpec<'_>) -> ExecPlan {
        ExecPlan {
            argv: self.argv.as_ptr(),
            envp: self.envp.as_ptr(),
            candidates: self.candidates.as_ptr(),
            n_candidates: self.candidates.len() - 1,
            cwd: self.cwd.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
            stdio,
            sigpipe: sigpipe_handler(spec.sigpipe_ignored),
            setup: RawSetup::new(spec.setup),
        }
    }

    /// `extra_env` is set after the command's own changes (the
    /// containment's variables, as on std's path).
    pub(super) fn new(
        spec: &SpawnSpec<'_>,
        parent_env: impl IntoIterator<Item = (OsString, OsString)>,
        extra_env: &[(OsString, OsString)],
    ) -> io::Result<Prepared> {
        let mut argv = Vec::with_capacity(spec.args.len() + 1);
        argv.push(cstring(spec.setup.arg0.as_deref().unwrap_or(spec.program))?);
        for a in spec.args {
            argv.push(cstring(a)?);
        }
        let mut vars = child_env(spec.env_clear, parent_env, spec.env);
        if !extra_env.is_empty() {
            let extra: Vec<(OsString, Option<OsString>)> = extra_env
                .iter()
                .map(|(k, v)| (k.clone(), Some(v.clone())))
                .collect();
            vars = child_env(false, vars, &extra);
        }
        let envp = env_block(&vars)?;
        let path = vars
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.as_os_str());
        let candidates = path_candidates(spec.program, path)
            .iter()
            .map(|c| cstring(c))
            .collect::<io::Result<Vec<_>>>()?;
        let candidates = skip_missing(candidates);
        let cwd = spec.cwd.map(|d| cstring(d.as_os_str())).transpose()?;
        Ok(Prepared {
            argv: pointers(&argv),
            _argv: argv,
            envp: pointers(&envp),
            _envp: envp,
            // The child walks `candidates` by count; the NULL at the end is
            // never read but keeps the shape of the other arrays.
            candidates: pointers(&candidates),
            _candidates: candidates,
            cwd,
        })
    }
}

/// Drops the absolute candidates before the first one that may exist. A
/// failed `execve` in the child costs far more than an `access(2)` here,
/// and a PATH can be long. The candidates after it are kept unchecked: the
/// child tries them only if that one fails, as `execvp` would, and a
/// missing one then costs one failed `execve` (so one pass of `access`
/// calls, which stops at the first hit, is all a run pays for). Relative
/// candidates are kept (they resolve against the child's working
/// directory), and so is everything when nothing would be left, so the
/// child still reports the error `execvp` would.
fn skip_missing(candidates: Vec<CString>) -> Vec<CString> {
    if candidates.len() < 2 {
        return candidates;
    }
    // Only "does not exist" drops a candidate: any other error (a symlink
    // loop, a name too long, a denied directory) is what execvp would stop
    // at or remember, so the child must still meet it. Checked with the
    // effective ids, as execve uses.
    let exists = |c: &CString| {
        !c.as_bytes().starts_with(b"/")
            || !matches!(
                rustix::fs::accessat(
                    rustix::fs::CWD,
                    c.as_c_str(),
                    rustix::fs::Access::EXISTS,
                    rustix::fs::AtFlags::EACCESS,
                ),
                Err(rustix::io::Errno::NOENT | rustix::io::Errno::NOTDIR)
            )
    };
    match candidates.iter().position(exists) {
        Some(first) => {
            let mut candidates = candidates;
            candidates.drain(..first);
            candidates
        }
        None => candidates,
    }
}

/// The descriptor the child installs as `target`, or -1 to inherit.
/// Opens /dev/null for `Null`; moves a source that sits in 0..=2 at another
/// place above 2 (it could be overwritten by an earlier dup3 otherwise).
/// Descriptors made here are pushed to `keep` (closed after the clone).
pub(super) fn child_fd(io: &ChildIo, target: i32, keep: &mut Vec<OwnedFd>) -> io::Result<c_int> {
    let fd = match io {
        ChildIo::Inherit => return Ok(-1),
        ChildIo::Null => {
            use rustix::fs::{Mode, OFlags};
            let null =
                rustix::fs::open("/dev/null", OFlags::RDWR | OFlags::CLOEXEC, Mode::empty())?;
            let raw = null.as_raw_fd();
            keep.push(null);
            raw
        }
        ChildIo::File(f) => f.as_raw_fd(),
    };
    if (0..=2).contains(&fd) && fd != target {
        // SAFETY: `fd` is open for the duration of this call (owned by the
        // spec or by `keep`).
        let src = unsafe { BorrowedFd::borrow_raw(fd) };
        let moved = rustix::io::fcntl_dupfd_cloexec(src, 3)?;
        let raw = moved.as_raw_fd();
        keep.push(moved);
        return Ok(raw);
    }
    Ok(fd)
}

/// The three descriptors the child installs as 0, 1 and 2 (see
/// [`child_fd`]), with one `/dev/null` shared by every `Null` stream (as a
/// shell's `>/dev/null 2>&1` does; it has no offset or state to share), so
/// a run with all three null opens it once.
fn child_stdio(spec: &SpawnSpec<'_>, keep: &mut Vec<OwnedFd>) -> io::Result<[c_int; 3]> {
    let mut null: Option<c_int> = None;
    let mut out = [-1; 3];
    for (target, io) in [&spec.stdin, &spec.stdout, &spec.stderr]
        .into_iter()
        .enumerate()
    {
        out[target] = match (io, null) {
            (ChildIo::Null, Some(fd)) => fd,
            _ => {
                let fd = child_fd(io, target as i32, keep)?;
                if matches!(io, ChildIo::Null) {
                    null = Some(fd);
                }
                fd
            }
        };
    }
    Ok(out)
}

/// One child stack kept between spawns: a spawn takes it (or maps a new
/// one) and gives it back once clone3 returned, when the child no longer
/// uses it (CLONE_VFORK: it exec'd into a new address space or exited). A
/// run then pays no `mmap`/`mprotect`/`munmap` and no fresh-page faults
/// for it; concurrent spawns map their own.
/// Per process: a fork never waits for a lock its parent held.
static SPARE_STACK: crate::sys::per_process::PerProcess<Option<Stack>> =
    crate::sys::per_process::PerProcess::new(|| None);

fn take_stack() -> io::Result<Stack> {
    let spare = SPARE_STACK.lock().take();
    match spare {
        Some(s) => Ok(s),
        None => Stack::new(),
    }
}

/// Keeps `stack` for the next spawn if none is kept (else unmaps it).
/// Only after clone3 returned (see [`SPARE_STACK`]).
fn spare_stack(stack: Stack) {
    let mut spare = SPARE_STACK.lock();
    if spare.is_none() {
        *spare = Some(stack);
    }
}

/// Errnos that mean "clone3 (or CLONE_INTO_CGROUP, CLONE_CLEAR_SIGHAND) is
/// not available to this process": kernel before 5.3 (ENOSYS) or 5.7
/// (E2BIG/EINVAL for the larger struct or an unknown flag), or a seccomp
/// filter (ENOSYS, EPERM).
fn means_unsupported(errno: i32) -> bool {
    [en::ENOSYS, en::EPERM, en::EINVAL, en::E2BIG]
        .iter()
        .any(|&e| e as i32 == errno)
}

/// Starts the program of `spec` as the leader of a new process group,
/// inside the cgroup whose directory is `cgroup` when one is given (born
/// there: `CLONE_INTO_CGROUP`), else in corral's own cgroup (the
/// process-group and subreaper tiers), with `extra_env` set in its
/// environment after the command's own variables. Returns its pid and a
/// pidfd (close-on-exec). The caller keeps ownership of the spec's
/// descriptors (close them after a success; reuse them after
/// `Unsupported`).
pub(crate) fn spawn(
    spec: &SpawnSpec<'_>,
    cgroup: Option<BorrowedFd<'_>>,
    extra_env: &[(OsString, OsString)],
) -> Result<(Pid, OwnedFd), Clone3Error> {
    let prepared =
        Prepared::new(spec, std::env::vars_os(), extra_env).map_err(Clone3Error::Setup)?;
    let mut keep = Vec::new();
    let stdio = child_stdio(spec, &mut keep).map_err(Clone3Error::Setup)?;
    let stack = take_stack().map_err(Clone3Error::Setup)?;
    let (stack_low, stack_size) = stack.usable();

    let mut plan = prepared.plan(stdio, spec);
    // A sandbox with namespaces: the clone makes them, the child writes
    // its id maps (a CLONE_VM child cannot unshare a user namespace).
    let sandbox_ns = plan.setup.sandbox_namespaces() == Some(true);
    if sandbox_ns {
        plan.setup.sandbox.entry = NsEntry::Cloned;
    }
    let child_args = ChildArgs {
        plan,
        err: AtomicI32::new(NO_REPORT),
    };
    let flags = (k::CLONE_VM | k::CLONE_VFORK | k::CLONE_PIDFD) as u64
        | cgroup.map_or(0, |_| k::CLONE_INTO_CGROUP)
        | if sandbox_ns {
            (k::CLONE_NEWUSER | k::CLONE_NEWNS | k::CLONE_NEWNET) as u64
        } else {
            0
        };
    let cgroup = cgroup.map_or(0, |fd| fd.as_raw_fd() as u64);
    // SAFETY: CLONE_VM | CLONE_VFORK with the stack of `stack` (mapped,
    // unused, unmapped only after this returns); the child reads
    // `child_args` and what it points to (`prepared`, `stdio` descriptors in
    // `spec` and `keep`) and stores to `child_args.err`, all alive until the
    // end of this function, and this thread is suspended until the child
    // exec'd or exited. `child_main` does not allocate, lock or unwind, and
    // starts with every signal blocked (`clone3_from_host`), so no handler
    // can run on its stack before it resets the dispositions.
    let cloned = unsafe {
        clone3_from_host(
            flags,
            (stack_low, stack_size),
            k::SIGCHLD as u64,
            cgroup,
            child_main,
            (&child_args as *const ChildArgs).cast::<c_void>(),
        )
    };
    // The child is done with all of these (exec'd or exited).
    spare_stack(stack);
    drop(keep);

    let (ret, pidfd) = match cloned {
        Ok(cloned) => cloned,
        Err(HostCloneError::Mask(e)) => return Err(Clone3Error::Setup(e.into())),
        Err(HostCloneError::Clone(e)) => return Err(unsupported_or_failed(e.raw())),
    };
    let pidfd =
        pidfd.ok_or_else(|| Clone3Error::Setup(io::Error::other("clone3 gave no pidfd")))?;
    let pid = Pid::from_raw(ret).ok_or_else(|| {
        Clone3Error::Setup(io::Error::other("clone3 returned pid 0 in the parent"))
    })?;

    // The child exec'd, or stored the errno of the step that failed and
    // exited (or was killed before it could say why: then it is a zombie
    // we own, reported as spawned, as its exit status will tell).
    match child_args.err.load(Ordering::SeqCst) {
        NO_REPORT => Ok((pid, pidfd)),
        errno => {
            // It exits by itself after reporting; reap it: it is ours.
            let _ = rustix::process::waitid(
                rustix::process::WaitId::Pid(pid),
                rustix::process::WaitIdOptions::EXITED,
            );
            Err(Clone3Error::Exec(io::Error::from_raw_os_error(errno)))
        }
    }
}

/// The error of a failed clone3 (`errno`): `Unsupported` (the caller falls
/// back to std's spawn) for a kernel or a call without it, unless clone3 is
/// required.
fn unsupported_or_failed(errno: i32) -> Clone3Error {
    if means_unsupported(errno) && mode() != Mode::Require {
        // Only a kernel without clone3 (ENOSYS) or without these
        // clone_args (E2BIG) is a property of the process; EPERM (an
        // LSM, seccomp) and EINVAL (e.g. a thread that unshared its pid
        // namespace) may concern this call only: fall back for it alone.
        if errno == en::ENOSYS as i32 || errno == en::E2BIG as i32 {
            UNSUPPORTED.store(true, Ordering::Relaxed);
        }
        return Clone3Error::Unsupported;
    }
    Clone3Error::Clone(io::Error::from_raw_os_error(errno))
}

#[cfg(test)]
mod tests {
    use super::super::child::{exhausted_errno, step, Step};
    use super::*;
    use std::path::Path;

    fn os(s: &str) -> OsString {
        OsString::from(s)
    }

    #[test]
    fn env_changes_apply_in_order_and_keep_places() {
        let parent = vec![(os("A"), os("1")), (os("B"), os("2")), (os("C"), os("3"))];
        let changes = vec![
            (os("B"), Some(os("two"))),
            (os("D"), Some(os("4"))),
            (os("A"), None),
            (os("D"), Some(os("four"))),
            (os("E"), None),
        ];
        let got = child_env(false, parent.clone(), &changes);
        assert_eq!(
            got,
            vec![
                (os("B"), os("two")),
                (os("C"), os("3")),
                (os("D"), os("four"))
            ]
        );
        let cleared = child_env(true, parent, &[(os("X"), Some(os("y")))]);
        assert_eq!(cleared, vec![(os("X"), os("y"))]);
    }

    #[test]
    fn env_block_is_key_equals_value_and_rejects_nul() {
        let b = env_block(&[(os("K"), os("v=w")), (os("E"), os(""))]).unwrap();
        assert_eq!(b[0].as_bytes(), b"K=v=w");
        assert_eq!(b[1].as_bytes(), b"E=");
        let bad = env_block(&[(os("K"), os("a\0b"))]).unwrap_err();
        assert_eq!(bad.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn path_search_order_matches_execvp() {
        let c = path_candidates(OsStr::new("ls"), Some(OsStr::new("/a:/b/::rel")));
        assert_eq!(c, vec![os("/a/ls"), os("/b/ls"), os("ls"), os("rel/ls")]);
        // A slash anywhere: no search.
        assert_eq!(
            path_candidates(OsStr::new("./x"), Some(OsStr::new("/a"))),
            vec![os("./x")]
        );
        assert_eq!(path_candidates(OsStr::new("d/x"), None), vec![os("d/x")]);
        // No PATH: glibc's default.
        assert_eq!(
            path_candidates(OsStr::new("sh"), None),
            vec![os("/bin/sh"), os("/usr/bin/sh")]
        );
        // An empty PATH is one empty entry: the current directory.
        assert_eq!(
            path_candidates(OsStr::new("sh"), Some(OsStr::new(""))),
            vec![os("sh")]
        );
        assert!(path_candidates(OsStr::new(""), None).is_empty());
    }

    #[test]
    fn exec_errors_map_like_execvp() {
        assert_eq!(step(en::ENOENT as i32), Step::Next);
        assert_eq!(step(en::ENOTDIR as i32), Step::Next);
        assert_eq!(step(en::EACCES as i32), Step::NextDenied);
        assert_eq!(step(en::ENOEXEC as i32), Step::Stop);
        assert_eq!(step(en::E2BIG as i32), Step::Stop);
        assert_eq!(exhausted_errno(en::ENOENT as i32, true), en::EACCES as i32);
        assert_eq!(exhausted_errno(en::ENOENT as i32, false), en::ENOENT as i32);
        assert!(means_unsupported(en::ENOSYS as i32));
        assert!(means_unsupported(en::E2BIG as i32));
        assert!(!means_unsupported(en::EAGAIN as i32));
        assert!(!means_unsupported(en::EACCES as i32));
    }

    #[test]
    fn containment_variables_are_set_after_the_commands_own() {
        let env = [(os("A"), Some(os("cmd"))), (os("B"), Some(os("b")))];
        let spec = SpawnSpec {
            program: OsStr::new("/bin/prog"),
            args: &[],
            env: &env,
            env_clear: true,
            cwd: None,
            stdin: ChildIo::Null,
            stdout: ChildIo::Null,
            stderr: ChildIo::Null,
            sigpipe_ignored: false,
            setup: &crate::spec::ChildSetup::default(),
            farewell: crate::spec::Farewell::KILL,
        };
        let extra = [(os("A"), os("tier")), (os("C"), os("c"))];
        let p = Prepared::new(&spec, Vec::new(), &extra).unwrap();
        let got: Vec<&[u8]> = p._envp.iter().map(|c| c.as_bytes()).collect();
        assert_eq!(got, [&b"A=tier"[..], b"B=b", b"C=c"]);
        assert!(p.envp[3].is_null());
    }

    #[test]
    fn prepared_description_is_nul_terminated_and_uses_the_child_path() {
        let args = [os("a b"), OsString::from_vec(vec![0xff, b'x'])];
        let env = [(os("PATH"), Some(os("/p1:/p2")))];
        let spec = SpawnSpec {
            program: OsStr::new("prog"),
            args: &args,
            env: &env,
            env_clear: true,
            cwd: Some(Path::new("/tmp")),
            stdin: ChildIo::Null,
            stdout: ChildIo::Null,
            stderr: ChildIo::Null,
            sigpipe_ignored: false,
            setup: &crate::spec::ChildSetup::default(),
            farewell: crate::spec::Farewell::KILL,
        };
        let p = Prepared::new(&spec, Vec::new(), &[]).unwrap();
        assert_eq!(p.argv.len(), 4);
        assert!(p.argv[3].is_null());
        assert_eq!(p._argv[0].as_bytes(), b"prog");
        assert_eq!(p._argv[2].as_bytes(), &[0xff, b'x']);
        assert_eq!(p.envp.len(), 2);
        assert_eq!(p._envp[0].as_bytes(), b"PATH=/p1:/p2");
        assert_eq!(p._candidates[0].as_bytes(), b"/p1/prog");
        assert_eq!(p._candidates[1].as_bytes(), b"/p2/prog");
        assert!(p.candidates[2].is_null());
        assert_eq!(p.cwd.as_ref().unwrap().as_bytes(), b"/tmp");

        let nul = [os("a\0b")];
        let spec = SpawnSpec { args: &nul, ..spec };
        let e = Prepared::new(&spec, Vec::new(), &[]).err().unwrap();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }

    use std::os::unix::ffi::OsStringExt;

    #[test]
    fn missing_absolute_candidates_are_skipped_but_never_all() {
        let c = |v: &[&str]| {
            v.iter()
                .map(|s| CString::new(*s).unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            skip_missing(c(&["/nonexistent-corral/x", "rel/x", "/bin/sh"])),
            c(&["rel/x", "/bin/sh"])
        );
        let none = c(&["/nonexistent-corral/a", "/nonexistent-corral/b"]);
        assert_eq!(skip_missing(none.clone()), none);
        // Past the first that exists nothing is checked (the child tries
        // the rest only if that one fails, as execvp would).
        assert_eq!(
            skip_missing(c(&[
                "/nonexistent-corral/a",
                "/bin/sh",
                "/nonexistent-corral/b"
            ])),
            c(&["/bin/sh", "/nonexistent-corral/b"])
        );
    }
}
