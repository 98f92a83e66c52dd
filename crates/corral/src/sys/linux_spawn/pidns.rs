//! Spawn into a new PID namespace behind a small init (Linux, x86_64 and
//! aarch64). A child module of `linux_spawn`: it shares the description
//! ([`Prepared`]), the standard-stream plumbing ([`child_fd`]), the exec
//! search ([`step`]) and the raw-syscall layer ([`super::raw`]).
//!
//! `clone3(CLONE_VM | CLONE_NEWPID | CLONE_NEWNS [| CLONE_NEWUSER] |
//! CLONE_PIDFD | CLONE_CLEAR_SIGHAND)` without `CLONE_VFORK`: the child
//! shares the caller's memory (nothing is copied, so the cost does not grow
//! with the host's size) but not its descriptors, signal handlers or
//! threads, and becomes pid 1 of the new namespace. It runs [`init_main`] on
//! a stack of its own (kept mapped by the host until the init has exited,
//! [`NsStacks`]) and issues only raw system calls (no allocation, no lock,
//! no TLS, no panic path): it runs beside a possibly multithreaded host
//! whose heap and locks it must never touch. It copies its arguments onto
//! its own stack first and reads nothing of the host's afterwards (the
//! command reads the prepared argv/envp before its exec, while the host
//! still waits). It never execs: the library needs no helper executable,
//! for the CLI and for any host program alike. The price: while the init
//! lives (a detached init waiting for kept leftovers included) the host's
//! address space stays allocated even after the host exits.
//!
//! The init, in order:
//!
//! 1. keeps only the descriptors it needs (everything else the host had
//!    open, other runs' pipe ends included, is closed: a stray write end
//!    would hold another run's output open);
//! 2. waits for the go byte (the parent writes the uid/gid maps first when a
//!    user namespace is used); end of file means the parent is gone: exit;
//! 3. makes every mount private (no propagation back to the host) and mounts
//!    a fresh `/proc`, so `ps` inside shows the tree;
//! 4. becomes the leader of a new process group (as the root of every other
//!    Unix tier), forks the command, which installs its standard streams,
//!    empties its signal mask and execs; an exec failure comes back through
//!    a close-on-exec pipe;
//! 5. loops: reaps every child (orphans of the namespace are reparented to
//!    it), reports the command's wait status on the status pipe when it
//!    exits, passes the signals corral asks for on to every process of the
//!    namespace (SIGCONT, then `kill(-1, sig)`), and exits once the command
//!    has exited and no process is left.
//!
//! Crash safety: the init also watches a pidfd of the host process and the
//! control pipe. When the host dies (any cause, SIGKILL included) the pidfd
//! becomes readable and the init gives the namespace the run's farewell
//! (see [`farewell`]): without a grace it exits at once and the kernel
//! SIGKILLs every process of the namespace; with one, it sends the run's
//! SIGCONT and first signal to every process of the namespace, reaps them
//! as they exit and exits once none is left or the grace (at most
//! [`FAREWELL_GRACE_MAX`](crate::spec::FAREWELL_GRACE_MAX)) has passed —
//! the kernel then SIGKILLs what is left. `PR_SET_PDEATHSIG` is not used:
//! it fires when the *thread* that spawned exits, which a host's thread
//! pool does all the time. After release with kept leftovers, corral sends
//! a detach byte and the init only waits for the namespace to empty.

use std::ffi::c_void;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::raw::c_int;

use linux_raw_sys::errno as en;
use linux_raw_sys::general as k;
use rustix::process::Pid;

use super::child::{exec_with, ExecPlan};
use super::parent::{child_fd, Prepared};
use super::raw::{self, clone3_from_host, clone3_with, exit_now, Errno, HostCloneError, PollFd};
use super::stack::Stack;
use crate::sys::SpawnSpec;

/// Status-pipe message kinds (init → corral): 8 bytes, kind then value.
pub(crate) const MSG_STARTED: u32 = 1;
pub(crate) const MSG_SETUP_FAILED: u32 = 2;
pub(crate) const MSG_EXEC_FAILED: u32 = 3;
pub(crate) const MSG_EXITED: u32 = crate::sys::NS_MSG_EXITED;

/// Control bytes (corral → init), besides a signal number.
pub(crate) const CTL_DETACH: u8 = 0xfe;
/// The run's termination started: if the host dies from now on, the init
/// exits at once (no farewell: the tree has had its first signal).
pub(crate) const CTL_TERMINATING: u8 = 0xfd;

/// Setup steps, reported with `MSG_SETUP_FAILED` (value = step << 16 |
/// errno).
const STEP_MOUNT_PRIVATE: i32 = 1;
const STEP_MOUNT_PROC: i32 = 2;
const STEP_SETPGID: i32 = 3;
const STEP_SIGNALFD: i32 = 4;
const STEP_PIPE: i32 = 5;
const STEP_FORK: i32 = 6;

/// The most descriptors the init keeps across its clean-up.
const MAX_KEEP: usize = 9;

/// What [`spawn`] hands back.
pub(crate) struct NsChild {
    /// The init, as seen from the host.
    pub(crate) pid: Pid,
    pub(crate) pidfd: OwnedFd,
    /// corral → init: signal numbers and [`CTL_DETACH`].
    pub(crate) ctl: OwnedFd,
    /// init → corral: [`MSG_EXITED`] (non-blocking).
    pub(crate) status: OwnedFd,
    /// The command's pid inside the namespace.
    pub(crate) inner: u32,
    /// The init runs on these (it shares this process's memory): they must
    /// stay mapped until it has exited.
    pub(crate) stacks: Option<NsStacks>,
}

/// The init's and the command's stacks, in this process's memory.
/// Unmapping them while the init runs would crash it (and so end its
/// namespace): drop only once the init has exited.
pub(crate) struct NsStacks {
    init: Stack,
    command: Stack,
}

// SAFETY: the mappings are plain memory owned by this value; moving the
// owner to another thread (to unmap there once the init has exited) is
// sound.
unsafe impl Send for NsStacks {}

/// Why [`spawn`] did not start the program.
#[derive(Debug)]
pub(crate) enum NsError {
    /// The kernel refused the namespaces (or the maps, or /proc).
    Refused(io::Error, &'static str),
    /// A resource could not be had or the description was bad.
    Setup(io::Error),
    /// The command could not be executed (errno of execve).
    Exec(io::Error),
}

/// The host's own pidfd (one per process, kept open, close-on-exec). A
/// forked copy of the host opens its own (it must watch itself, not the
/// process it was forked from).
fn host_pidfd() -> Option<c_int> {
    // Per process: a fork never waits for a lock its parent held.
    static FD: crate::sys::per_process::PerProcess<Option<(u32, OwnedFd)>> =
        crate::sys::per_process::PerProcess::new(|| None);
    let me = crate::sys::per_process::pid();
    let mut g = FD.lock();
    if g.as_ref().is_none_or(|(pid, _)| *pid != me) {
        // The inherited one (a fork's) names the parent: close it.
        drop(g.take());
        let fd = rustix::process::pidfd_open(
            rustix::process::getpid(),
            rustix::process::PidfdFlags::empty(),
        )
        .ok()?;
        *g = Some((me, fd));
    }
    g.as_ref().map(|(_, f)| f.as_raw_fd())
}

/// What the init reads (its own copy, made by the fork).
#[repr(C)]
#[derive(Clone, Copy)]
struct InitArgs {
    /// The command's program, streams and setup.
    plan: ExecPlan,
    sync_r: c_int,
    ctl_r: c_int,
    status_w: c_int,
    host_pidfd: c_int,
    keep: [c_int; MAX_KEEP],
    n_keep: usize,
    /// The command's stack for the init's vfork-style clone (mapped by the
    /// parent, so the init has its own copy).
    cmd_stack: (u64, u64),
    /// The write end of the init's exec-error pipe, set by the init before
    /// the clone (the command reads it from the shared memory).
    err_fd: c_int,
    /// The run's farewell, if the host dies: its first signal (0: none)
    /// and its grace in ms (0: SIGKILL at once).
    farewell_signal: u32,
    farewell_grace_ms: u32,
}

/// Whether this process would need a user namespace for a PID namespace.
fn need_userns() -> bool {
    !rustix::process::geteuid().is_root()
}

/// Starts `spec`'s program as the child of an init that is pid 1 of a new
/// PID (and mount, and for a non-root caller user) namespace.
pub(crate) fn spawn(spec: &SpawnSpec<'_>) -> Result<NsChild, NsError> {
    // Root in the initial user namespace needs no user namespace; root of a
    // container's user namespace (euid 0 without CAP_SYS_ADMIN over its PID
    // namespace) is refused with EPERM: then try again with one.
    // A sandbox with namespaces puts the init (and so the command) in a
    // user and network namespace of its own too, root included.
    let sandbox_ns = sandbox_namespaces(spec);
    let userns = need_userns() || sandbox_ns;
    match spawn_with(spec, userns) {
        Err(NsError::Refused(e, _)) if !userns && e.raw_os_error() == Some(en::EPERM as i32) => {
            spawn_with(spec, true)
        }
        other => other,
    }
}

/// Whether `spec` has a sandbox that uses namespaces.
fn sandbox_namespaces(spec: &SpawnSpec<'_>) -> bool {
    super::sandbox::Prepared::of(spec.setup).is_some_and(|p| p.namespaces)
}

fn spawn_with(spec: &SpawnSpec<'_>, userns: bool) -> Result<NsChild, NsError> {
    // The init closes every descriptor but its own before it starts the
    // command: descriptors to keep cannot pass through it.
    if spec.setup.keep_fds.as_ref().is_some_and(|k| !k.is_empty()) {
        return Err(NsError::Setup(io::Error::new(
            io::ErrorKind::Unsupported,
            "descriptors to keep (pass_fds) cannot be passed through the PID namespace's init",
        )));
    }
    let prepared = Prepared::new(spec, std::env::vars_os(), &[]).map_err(NsError::Setup)?;
    let mut keep_owned = Vec::new();
    let stdio = [
        child_fd(&spec.stdin, 0, &mut keep_owned).map_err(NsError::Setup)?,
        child_fd(&spec.stdout, 1, &mut keep_owned).map_err(NsError::Setup)?,
        child_fd(&spec.stderr, 2, &mut keep_owned).map_err(NsError::Setup)?,
    ];
    let cloexec = rustix::pipe::PipeFlags::CLOEXEC;
    let setup = |e: rustix::io::Errno| NsError::Setup(e.into());
    let (sync_r, sync_w) = rustix::pipe::pipe_with(cloexec).map_err(setup)?;
    // A socket, not a pipe: corral writes with MSG_NOSIGNAL, so a dead
    // init never raises SIGPIPE in the host.
    let (ctl_r, ctl_w) = std::os::unix::net::UnixStream::pair().map_err(NsError::Setup)?;
    let (ctl_r, ctl_w): (OwnedFd, OwnedFd) = (ctl_r.into(), ctl_w.into());
    let (status_r, status_w) = rustix::pipe::pipe_with(cloexec).map_err(setup)?;
    let host = host_pidfd().unwrap_or(-1);
    // The sandbox's Landlock ruleset must reach the command.
    let ruleset = super::sandbox::Prepared::of(spec.setup).map_or(-1, |p| p.ruleset_fd());
    // And the socket its seccomp listener goes to corral over.
    let notify = super::sandbox::Prepared::of(spec.setup).map_or(-1, |p| p.notify_fd());
    let (keep, n_keep) = keep_list(stdio.iter().copied().chain([
        sync_r.as_raw_fd(),
        ctl_r.as_raw_fd(),
        status_w.as_raw_fd(),
        host,
        ruleset,
        notify,
    ]));
    let stacks = NsStacks {
        init: Stack::new().map_err(NsError::Setup)?,
        command: Stack::new().map_err(NsError::Setup)?,
    };
    let mut plan = prepared.plan(stdio, spec);
    let sandbox_ns = sandbox_namespaces(spec);
    if sandbox_ns {
        // The init is cloned into the namespaces and the host writes the
        // maps: the command only sets up its mounts and network.
        plan.setup.sandbox.entry = super::sandbox::NsEntry::Inherited;
    }
    let init_args = InitArgs {
        plan,
        sync_r: sync_r.as_raw_fd(),
        ctl_r: ctl_r.as_raw_fd(),
        status_w: status_w.as_raw_fd(),
        host_pidfd: host,
        keep,
        n_keep,
        cmd_stack: stacks.command.usable(),
        err_fd: -1,
        farewell_signal: spec.farewell.first.map_or(0, |s| s.as_raw() as u32),
        farewell_grace_ms: spec.farewell.grace.as_millis().min(u128::from(u32::MAX)) as u32,
    };
    let cloned = clone_init(&init_args, &stacks, userns, sandbox_ns);
    drop(keep_owned);
    drop(sync_r);
    drop(ctl_r);
    drop(status_w);
    // No child: the stacks (dropped on return) were never used.
    let (pid, pidfd) = cloned?;
    let mut child = NsChild {
        pid,
        pidfd,
        ctl: ctl_w,
        status: status_r,
        inner: 0,
        stacks: Some(stacks),
    };
    // From here on a failure must kill and reap the init (it is ours,
    // unreaped: its pid is still its own).
    match wait_started(&child, sync_w, userns) {
        Ok(inner) => child.inner = inner,
        Err(e) => {
            let _ = rustix::process::pidfd_send_signal(&child.pidfd, rustix::process::Signal::KILL);
            let _ = rustix::process::waitid(
                rustix::process::WaitId::Pid(child.pid),
                rustix::process::WaitIdOptions::EXITED,
            );
            return Err(e);
        }
    }
    let fl = rustix::fs::fcntl_getfl(&child.status).map_err(setup)?;
    rustix::fs::fcntl_setfl(&child.status, fl | rustix::fs::OFlags::NONBLOCK).map_err(setup)?;
    Ok(child)
}

/// The descriptors above 2 among `fds`, sorted, at most [`MAX_KEEP`] (the
/// init keeps these and closes every other).
fn keep_list(fds: impl IntoIterator<Item = c_int>) -> ([c_int; MAX_KEEP], usize) {
    let mut keep = [-1; MAX_KEEP];
    let mut n_keep = 0;
    for fd in fds {
        if fd > 2 && n_keep < MAX_KEEP {
            keep[n_keep] = fd;
            n_keep += 1;
        }
    }
    keep[..n_keep].sort_unstable();
    (keep, n_keep)
}

/// Clones the init (pid 1 of new PID and mount namespaces, and a user
/// namespace when `userns`) on `stacks`, with every signal blocked around
/// the clone: its pid and pidfd.
fn clone_init(
    init_args: &InitArgs,
    stacks: &NsStacks,
    userns: bool,
    netns: bool,
) -> Result<(Pid, OwnedFd), NsError> {
    let mut flags = (k::CLONE_VM | k::CLONE_NEWPID | k::CLONE_NEWNS | k::CLONE_PIDFD) as u64;
    if userns {
        flags |= k::CLONE_NEWUSER as u64;
    }
    if netns {
        flags |= k::CLONE_NEWNET as u64;
    }
    // SAFETY: CLONE_VM: the child shares this process's memory and runs on
    // the init's stack (kept mapped until the init has exited, see
    // `pid_namespace::Init::release_stacks`); `init_main` copies `init_args` onto
    // that stack before anything else, while the caller waits for
    // MSG_STARTED, and never returns. The child starts with every signal
    // blocked and every handler reset (`clone3_from_host`): no host code
    // can run in it.
    let cloned = unsafe {
        clone3_from_host(
            flags,
            stacks.init.usable(),
            k::SIGCHLD as u64,
            0,
            init_main,
            init_args as *const InitArgs as *const c_void,
        )
    };
    let (ret, pidfd) = match cloned {
        Ok(cloned) => cloned,
        Err(HostCloneError::Mask(e)) => return Err(NsError::Setup(e.into())),
        Err(HostCloneError::Clone(e)) => {
            let errno = e.raw();
            return Err(match errno {
                x if x == en::EAGAIN as i32 || x == en::ENOMEM as i32 => NsError::Setup(e.into()),
                _ => NsError::Refused(e.into(), "clone3"),
            });
        }
    };
    let pidfd = pidfd.ok_or_else(|| NsError::Setup(io::Error::other("clone3 gave no pidfd")))?;
    let pid = Pid::from_raw(ret)
        .ok_or_else(|| NsError::Setup(io::Error::other("clone3 returned pid 0")))?;
    Ok((pid, pidfd))
}

/// Writes the uid/gid maps (with `userns`), lets the init go and reads its
/// first message: the command's pid in the namespace, or why it did not
/// start. Blocking: the init answers or dies (end of file).
fn wait_started(child: &NsChild, sync_w: OwnedFd, userns: bool) -> Result<u32, NsError> {
    if userns {
        write_maps(child.pid).map_err(|e| NsError::Refused(e, "writing the uid/gid maps"))?;
    }
    rustix::io::write(&sync_w, &[1]).map_err(|e| NsError::Setup(e.into()))?;
    drop(sync_w);
    let mut msg = [0u8; 8];
    let mut got = 0;
    while got < msg.len() {
        match rustix::io::read(&child.status, &mut msg[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(NsError::Setup(e.into())),
        }
    }
    if got < msg.len() {
        return Err(NsError::Setup(io::Error::other(
            "the namespace init died while starting",
        )));
    }
    started(msg)
}

/// The init's first message, decoded: the command's pid in the namespace,
/// or the error it stands for.
fn started(msg: [u8; 8]) -> Result<u32, NsError> {
    let kind = u32::from_ne_bytes([msg[0], msg[1], msg[2], msg[3]]);
    let value = i32::from_ne_bytes([msg[4], msg[5], msg[6], msg[7]]);
    match kind {
        MSG_STARTED => Ok(value as u32),
        MSG_EXEC_FAILED => Err(NsError::Exec(io::Error::from_raw_os_error(value))),
        MSG_SETUP_FAILED => {
            let e = io::Error::from_raw_os_error(value & 0xffff);
            let what = match value >> 16 {
                STEP_MOUNT_PRIVATE => "making mounts private",
                STEP_MOUNT_PROC => "mounting /proc",
                STEP_SETPGID => "setpgid",
                STEP_SIGNALFD => "signalfd",
                STEP_PIPE => "pipe",
                _ => "fork",
            };
            Err(
                if matches!(value >> 16, STEP_MOUNT_PRIVATE | STEP_MOUNT_PROC) {
                    NsError::Refused(e, what)
                } else {
                    NsError::Setup(crate::error::io_context(
                        format!("namespace init: {what}"),
                        e,
                    ))
                },
            )
        }
        _ => Err(NsError::Setup(io::Error::other(
            "unexpected message from the namespace init",
        ))),
    }
}

/// Sends one control byte to the init; a gone init is not an error
/// (`Ok(false)`), and never raises SIGPIPE.
pub(crate) fn send_ctl(ctl: &OwnedFd, byte: u8) -> io::Result<bool> {
    const MSG_NOSIGNAL: u32 = 0x4000;
    loop {
        match raw::send(ctl.as_raw_fd(), &[byte], MSG_NOSIGNAL) {
            Ok(_) => return Ok(true),
            Err(Errno::INTR) => continue,
            Err(Errno::PIPE | Errno::CONNRESET) => return Ok(false),
            Err(e) => return Err(e.into()),
        }
    }
}

/// Maps the caller's effective uid and gid to themselves in the child's
/// user namespace (setgroups denied first, as an unprivileged gid map
/// requires).
fn write_maps(pid: Pid) -> io::Result<()> {
    let uid = rustix::process::geteuid().as_raw();
    let gid = rustix::process::getegid().as_raw();
    let p = pid.as_raw_nonzero();
    std::fs::write(format!("/proc/{p}/uid_map"), format!("{uid} {uid} 1\n"))?;
    std::fs::write(format!("/proc/{p}/setgroups"), "deny")?;
    std::fs::write(format!("/proc/{p}/gid_map"), format!("{gid} {gid} 1\n"))?;
    Ok(())
}

/// Writes one 8-byte message, kind then value (ignoring failures: corral
/// may be gone).
#[inline(always)]
fn report(fd: c_int, kind: u32, value: i32) {
    let mut msg = [0u8; 8];
    let a = kind.to_ne_bytes();
    let b = value.to_ne_bytes();
    let mut i = 0;
    while i < 4 {
        msg[i] = a[i];
        msg[i + 4] = b[i];
        i += 1;
    }
    while raw::write(fd, &msg) == Err(Errno::INTR) {}
}

/// Closes every descriptor above 2 that is not in `keep[..n]` (sorted).
#[inline(always)]
fn close_others(keep: &[c_int; MAX_KEEP], n: usize) {
    let mut from: usize = 3;
    let mut i = 0;
    while i < n && i < MAX_KEEP {
        let fd = keep[i] as usize;
        if fd > from && raw::close_range(from, fd - 1).is_err() {
            let mut f = from;
            while f < fd {
                raw::close(f as c_int);
                f += 1;
            }
        }
        if fd + 1 > from {
            from = fd + 1;
        }
        i += 1;
    }
    raw::close_from_to(from, u32::MAX as usize);
}

/// The init's whole life. Never returns.
extern "C" fn init_main(arg: *const c_void) -> ! {
    // SAFETY: `arg` points to the host's `InitArgs`, in the spawning
    // thread's frame (CLONE_VM: shared memory), valid until the host has
    // read MSG_STARTED; the host is blocked reading the status pipe until
    // then. The volatile read copies it onto the init's own stack *here*:
    // a reference to the host's frame passed down would let the compiler
    // defer its loads (a `&T` argument is assumed valid and unchanged for
    // the whole call, and `init` never returns) until after MSG_STARTED,
    // when the frame holds something else. Only raw syscalls follow.
    unsafe {
        let copy: InitArgs = std::ptr::read_volatile(arg as *const InitArgs);
        init(&copy)
    }
}

/// The init's life, as steps (numbered as in the module's documentation).
///
/// # Safety
/// Only in the child made by `clone3_with`, with `a` as described there.
#[inline(never)]
unsafe fn init(a: &InitArgs) -> ! {
    // `a` is the init's own copy (on its stack, see `init_main`). The
    // pointers inside (argv, envp, candidates, cwd) point into the host's
    // memory and are only used by the command before its exec, which
    // happens before MSG_STARTED.
    // A name for `ps` and /proc/<pid>/comm (the command line is still the
    // host's: the init is a copy of it).
    raw::set_thread_name(c"corral-init");
    // 1. Only the descriptors it needs.
    close_others(&a.keep, a.n_keep);
    // 2. The go byte.
    wait_for_go(a.sync_r);
    // 3., 4. The namespace's mounts, its group, the command.
    let sigfd = match set_up_namespace() {
        Ok(fd) => fd,
        Err((step, e)) => fail(a, step, e),
    };
    // SAFETY: in the init, with `a` its own copy.
    let cmd = unsafe { start_command(a) };
    report(a.status_w, MSG_STARTED, cmd as i32);
    let_go_of_streams(a);
    // 5. The loop.
    serve(a, sigfd, cmd)
}

/// Reports that setup step `step` failed with `e`, and exits.
fn fail(a: &InitArgs, step: i32, e: Errno) -> ! {
    report(a.status_w, MSG_SETUP_FAILED, (step << 16) | e.raw());
    exit_now(127)
}

/// Waits for the go byte on `sync_r` (the parent writes the uid/gid maps
/// first); end of file or an error means the parent is gone: exit.
fn wait_for_go(sync_r: c_int) {
    let mut b = [0u8; 1];
    loop {
        match raw::read(sync_r, &mut b) {
            Ok(1) => break,
            Err(Errno::INTR) => continue,
            _ => exit_now(127),
        }
    }
    raw::close(sync_r);
}

/// Private mounts and a fresh `/proc`; the init leads a new process group
/// and takes SIGCHLD through a signalfd (every signal stays blocked in the
/// init: only SIGKILL can end it). The signalfd, or the step that failed.
fn set_up_namespace() -> Result<c_int, (i32, Errno)> {
    raw::mount(None, c"/", None, k::MS_REC | k::MS_PRIVATE).map_err(|e| (STEP_MOUNT_PRIVATE, e))?;
    raw::mount(
        Some(c"proc"),
        c"/proc",
        Some(c"proc"),
        k::MS_NOSUID | k::MS_NODEV | k::MS_NOEXEC,
    )
    .map_err(|e| (STEP_MOUNT_PROC, e))?;
    raw::setpgid_self().map_err(|e| (STEP_SETPGID, e))?;
    raw::signalfd_for(k::SIGCHLD, k::O_CLOEXEC | k::O_NONBLOCK).map_err(|e| (STEP_SIGNALFD, e))
}

/// Starts the command: a vfork-style clone on its own stack (the init is
/// single-threaded and has no handlers, so sharing its memory until the
/// exec is safe, and the host's memory is not copied again). Its pid; if it
/// could not exec, the init reports why and exits.
///
/// # Safety
/// In the init only.
unsafe fn start_command(a: &InitArgs) -> isize {
    let ep = match raw::pipe2(k::O_CLOEXEC) {
        Ok(ep) => ep,
        Err(e) => fail(a, STEP_PIPE, e),
    };
    let mut targs = *a;
    targs.err_fd = ep[1];
    let mut cargs = k::clone_args {
        flags: (k::CLONE_VM | k::CLONE_VFORK) as u64,
        pidfd: 0,
        child_tid: 0,
        parent_tid: 0,
        exit_signal: k::SIGCHLD as u64,
        stack: a.cmd_stack.0,
        stack_size: a.cmd_stack.1,
        tls: 0,
        set_tid: 0,
        set_tid_size: 0,
        cgroup: 0,
    };
    // SAFETY: `cmd_stack` is mapped by the host for the command and unused
    // otherwise; `targs` is on this frame, which the vfork-style clone keeps
    // alive until the command exec'd or exited; `command_main` does not
    // return, allocate or lock.
    let cmd = unsafe {
        clone3_with(
            &mut cargs,
            command_main,
            &targs as *const InitArgs as *const c_void,
        )
    };
    if cmd < 0 {
        fail(a, STEP_FORK, Errno::from_ret(cmd));
    }
    raw::close(ep[1]);
    // The exec error, if any: 4 bytes, or end of file once it exec'd.
    let mut eb = [0u8; 4];
    let mut got: usize = 0;
    while got < 4 {
        match raw::read(ep[0], eb.get_mut(got..).unwrap_or_default()) {
            Err(Errno::INTR) => continue,
            Ok(n) if n > 0 => got += n,
            _ => break,
        }
    }
    raw::close(ep[0]);
    if got > 0 {
        let mut st: c_int = 0;
        let _ = raw::wait4(cmd, Some(&mut st), 0);
        report(a.status_w, MSG_EXEC_FAILED, i32::from_ne_bytes(eb));
        exit_now(127);
    }
    cmd
}

/// The command has its streams: let go of ours, so that only the tree
/// holds the pipes (end of file must reach corral).
fn let_go_of_streams(a: &InitArgs) {
    let mut fd = 0;
    while fd < 3 {
        raw::close(fd);
        fd += 1;
    }
    let mut i = 0;
    while i < 3 {
        if a.plan.stdio[i] > 2 {
            raw::close(a.plan.stdio[i]);
        }
        i += 1;
    }
}

/// The init's loop: reaps every child, reports the command's wait status,
/// passes corral's signals on to the namespace, and exits once the command
/// has exited and no process is left (or the host died, or corral closed
/// the control pipe without detaching).
fn serve(a: &InitArgs, sigfd: c_int, cmd: isize) -> ! {
    let mut watching = true;
    // The run's termination started ([`CTL_TERMINATING`]): no farewell.
    let mut terminating = false;
    let mut cmd_done = false;
    let mut buf = [0u8; 512];
    loop {
        let mut fds = [
            PollFd::readable(sigfd),
            PollFd::readable(if watching { a.ctl_r } else { -1 }),
            PollFd::readable(if watching { a.host_pidfd } else { -1 }),
        ];
        if let Err(e) = raw::ppoll(&mut fds, None) {
            if e != Errno::INTR {
                // Cannot wait: do not spin; end the namespace.
                exit_now(126);
            }
        }
        // The control pipe first: a host that sent the detach byte and
        // then exited (a normal end with kept leftovers) wakes this poll
        // with both ready when the init runs late (load); the byte was
        // written before the exit, so it is in the pipe now.
        if fds[1].revents != 0 && watching {
            watching = read_control(a, sigfd, &mut buf, &mut terminating);
        }
        if fds[2].revents != 0 && watching {
            // The host died.
            farewell(a, sigfd, terminating);
        }
        // Drain the signalfd, then reap everything that exited.
        while matches!(raw::read(sigfd, &mut buf), Ok(n) if n > 0) {}
        reap(a, cmd, &mut cmd_done);
    }
}

/// Acts on the bytes corral wrote on the control pipe: a signal to pass
/// on to every process of the namespace (after SIGCONT), SIGKILL (the init
/// exits: the kernel kills the namespace), [`CTL_TERMINATING`] (no
/// farewell from now on), or the detach byte. Whether to
/// go on watching the host (`false` once detached); if corral closed the
/// pipe without detaching: the run's farewell if the host died (its pidfd
/// follows the pipe's end of file by a moment: the host's descriptors are
/// closed before its exit is told), else the init exits.
fn read_control(a: &InitArgs, sigfd: c_int, buf: &mut [u8; 512], terminating: &mut bool) -> bool {
    let n = match raw::read(a.ctl_r, buf) {
        Ok(0) => {
            if host_died_within(a.host_pidfd, 200) {
                farewell(a, sigfd, *terminating);
            }
            exit_now(137) // corral closed it without detaching
        }
        Ok(n) => n,
        Err(Errno::INTR | Errno::AGAIN) => 0,
        Err(_) => exit_now(137),
    };
    let mut watching = true;
    let mut j: usize = 0;
    while j < n && j < buf.len() {
        let c = buf[j];
        if c == CTL_DETACH {
            watching = false;
        } else if c == CTL_TERMINATING {
            *terminating = true;
        } else if c as u32 == k::SIGKILL {
            exit_now(137);
        } else if c != 0 {
            let _ = raw::kill(-1, k::SIGCONT);
            let _ = raw::kill(-1, c as u32);
        }
        j += 1;
    }
    watching
}

/// Whether the host's pidfd is readable (it exited) within `ms`.
fn host_died_within(host: c_int, ms: i64) -> bool {
    if host < 0 {
        return false;
    }
    let mut p = [PollFd::readable(host)];
    let mut t = k::__kernel_timespec {
        tv_sec: ms / 1000,
        tv_nsec: (ms % 1000) * 1_000_000,
    };
    loop {
        match raw::ppoll(&mut p, Some(&mut t)) {
            Err(Errno::INTR) => continue,
            Ok(n) => return n > 0 && p[0].revents != 0,
            Err(_) => return false,
        }
    }
}

/// The host died: the run's farewell to the namespace, as the keeper's to
/// the trees it holds. Without a grace, or once the run's termination
/// started (`terminating`: the tree has had its first signal), the init
/// exits at once (the kernel
/// SIGKILLs every process of the namespace). With one, it sends the run's
/// SIGCONT and the run's first signal (if any) to every process of the namespace
/// (`kill(-1)`: all but the init), reaps them as they exit, and exits once
/// none is left or the grace has passed (the kernel SIGKILLs what is left
/// when the init exits): bounded by the grace, itself at most
/// [`FAREWELL_GRACE_MAX`](crate::spec::FAREWELL_GRACE_MAX).
fn farewell(a: &InitArgs, sigfd: c_int, terminating: bool) -> ! {
    let grace_ns = u64::from(a.farewell_grace_ms) * 1_000_000;
    if grace_ns == 0 || terminating {
        exit_now(137);
    }
    let start = raw::monotonic_ns().unwrap_or(0);
    if a.farewell_signal != 0 {
        let _ = raw::kill(-1, k::SIGCONT);
        let _ = raw::kill(-1, a.farewell_signal);
    }
    let mut buf = [0u8; 512];
    loop {
        loop {
            match raw::wait4(-1, None, k::WNOHANG | k::__WALL) {
                Ok(p) if p > 0 => {}
                // None left: the farewell is done.
                Err(Errno::CHILD) => exit_now(0),
                _ => break,
            }
        }
        let spent = raw::monotonic_ns()
            .unwrap_or(u64::MAX)
            .saturating_sub(start);
        if spent >= grace_ns {
            exit_now(137);
        }
        let left = grace_ns - spent;
        let mut t = k::__kernel_timespec {
            tv_sec: (left / 1_000_000_000) as i64,
            tv_nsec: (left % 1_000_000_000) as i64,
        };
        let mut fds = [PollFd::readable(sigfd)];
        if raw::ppoll(&mut fds, Some(&mut t)).is_err_and(|e| e != Errno::INTR) {
            exit_now(137);
        }
        while matches!(raw::read(sigfd, &mut buf), Ok(n) if n > 0) {}
    }
}

/// Reaps every child that exited; reports the command's status when it is
/// among them; exits once the command is done and no child is left.
fn reap(a: &InitArgs, cmd: isize, cmd_done: &mut bool) {
    loop {
        let mut st: c_int = 0;
        match raw::wait4(-1, Some(&mut st), k::WNOHANG | k::__WALL) {
            Ok(p) if p as isize == cmd => {
                report(a.status_w, MSG_EXITED, st);
                *cmd_done = true;
            }
            Ok(p) if p > 0 => {}
            // Nothing left in the namespace.
            Err(Errno::CHILD) if *cmd_done => exit_now(0),
            _ => return,
        }
    }
}

/// The command's entry (vfork-style child of the init): exec, or report
/// the errno on the init's error pipe and exit.
extern "C" fn command_main(arg: *const c_void) -> ! {
    // SAFETY: `arg` points to the init's `targs`, alive while the init is
    // suspended (CLONE_VFORK); the plan's pointers are valid until the
    // exec (see `InitArgs`); only raw syscalls follow.
    let e = unsafe {
        let a = &*(arg as *const InitArgs);
        (exec_with(&a.plan, false), a.err_fd)
    };
    let _ = raw::write(e.1, &e.0.to_ne_bytes());
    exit_now(127)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(kind: u32, value: i32) -> [u8; 8] {
        let mut m = [0u8; 8];
        m[..4].copy_from_slice(&kind.to_ne_bytes());
        m[4..].copy_from_slice(&value.to_ne_bytes());
        m
    }

    /// The init's first message: the command's pid, or the error of the
    /// step that failed (the namespace refused, a resource, the exec).
    #[test]
    fn first_message_decodes() {
        let refused = |e: &NsError| match e {
            NsError::Refused(_, what) => Some(*what),
            _ => None,
        };
        let setup = |step: i32| msg(MSG_SETUP_FAILED, (step << 16) | en::EPERM as i32);
        assert_eq!(started(msg(MSG_STARTED, 2)).ok(), Some(2));
        let cases: [([u8; 8], Option<&str>, &str); 8] = [
            (setup(STEP_MOUNT_PRIVATE), Some("making mounts private"), ""),
            (setup(STEP_MOUNT_PROC), Some("mounting /proc"), ""),
            (setup(STEP_SETPGID), None, "namespace init: setpgid"),
            (setup(STEP_SIGNALFD), None, "namespace init: signalfd"),
            (setup(STEP_PIPE), None, "namespace init: pipe"),
            (setup(STEP_FORK), None, "namespace init: fork"),
            (msg(MSG_EXEC_FAILED, en::ENOENT as i32), None, ""),
            (msg(99, 0), None, "unexpected message"),
        ];
        for (m, want_refused, text) in cases {
            let e = started(m).expect_err("an error");
            assert_eq!(refused(&e), want_refused);
            match &e {
                NsError::Setup(io) => assert!(io.to_string().contains(text), "{io}"),
                NsError::Exec(io) => assert_eq!(io.raw_os_error(), Some(en::ENOENT as i32)),
                NsError::Refused(io, _) => assert_eq!(io.raw_os_error(), Some(en::EPERM as i32)),
            }
        }
    }

    /// The init keeps the descriptors above 2 it is given, sorted, at most
    /// `MAX_KEEP`.
    #[test]
    fn keep_list_is_sorted_and_bounded() {
        let (k, n) = keep_list([9, 0, 1, 2, 5, -1, 7]);
        assert_eq!(&k[..n], &[5, 7, 9]);
        let (k, n) = keep_list(3..100);
        assert_eq!(n, MAX_KEEP);
        assert_eq!(k[0], 3);
        let (_, n) = keep_list([]);
        assert_eq!(n, 0);
    }
}
