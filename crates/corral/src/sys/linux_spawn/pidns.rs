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
//!    namespace (`kill(-1, sig)` then SIGCONT), and exits once the command
//!    has exited and no process is left.
//!
//! Crash safety: the init also watches a pidfd of the host process and the
//! control pipe. When the host dies (any cause, SIGKILL included) the pidfd
//! becomes readable and the init exits; the kernel then SIGKILLs every
//! process of the namespace. `PR_SET_PDEATHSIG` is not used: it fires when
//! the *thread* that spawned exits, which a host's thread pool does all the
//! time. After release with kept leftovers, corral sends a detach byte and
//! the init only waits for the namespace to empty.

use std::ffi::c_void;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::raw::c_int;

/// prctl(2) option that names the calling thread.
const PR_SET_NAME: usize = 15;

use linux_raw_sys::errno as en;
use linux_raw_sys::general as k;
use rustix::process::Pid;

use super::child::{apply_setup, exec_candidates, RawSetup};
use super::parent::{child_fd, Prepared};
use super::raw::{clone3_with, errno_of, exit_now, set_sigmask, syscall4, syscall6};
use super::raw::{sigpipe_handler, KernelSigaction, SIGSET_SIZE};
use super::stack::Stack;
use crate::sys::SpawnSpec;

/// Status-pipe message kinds (init → corral): 8 bytes, kind then value.
pub(crate) const MSG_STARTED: u32 = 1;
pub(crate) const MSG_SETUP_FAILED: u32 = 2;
pub(crate) const MSG_EXEC_FAILED: u32 = 3;
pub(crate) const MSG_EXITED: u32 = crate::sys::NS_MSG_EXITED;

/// Control bytes (corral → init), besides a signal number.
pub(crate) const CTL_DETACH: u8 = 0xfe;

/// Setup steps, reported with `MSG_SETUP_FAILED` (value = step << 16 |
/// errno).
const STEP_MOUNT_PRIVATE: i32 = 1;
const STEP_MOUNT_PROC: i32 = 2;
const STEP_SETPGID: i32 = 3;
const STEP_SIGNALFD: i32 = 4;
const STEP_PIPE: i32 = 5;
const STEP_FORK: i32 = 6;

/// The most descriptors the init keeps across its clean-up.
const MAX_KEEP: usize = 8;

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
    _init: Stack,
    _command: Stack,
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
    argv: *const *const std::os::raw::c_char,
    envp: *const *const std::os::raw::c_char,
    candidates: *const *const std::os::raw::c_char,
    n_candidates: usize,
    cwd: *const std::os::raw::c_char,
    stdio: [c_int; 3],
    /// SIGPIPE's handler for the command (see `ChildArgs::sigpipe`).
    sigpipe: usize,
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
    /// The command's ids, umask, session, descriptors to keep.
    setup: RawSetup,
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
    let userns = need_userns();
    match spawn_with(spec, userns) {
        Err(NsError::Refused(e, _)) if !userns && e.raw_os_error() == Some(en::EPERM as i32) => {
            spawn_with(spec, true)
        }
        other => other,
    }
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

    let mut keep = [-1; MAX_KEEP];
    let mut n_keep = 0;
    for fd in stdio.iter().copied().chain([
        sync_r.as_raw_fd(),
        ctl_r.as_raw_fd(),
        status_w.as_raw_fd(),
        host,
    ]) {
        if fd > 2 && n_keep < MAX_KEEP {
            keep[n_keep] = fd;
            n_keep += 1;
        }
    }
    keep[..n_keep].sort_unstable();
    let cmd_stack = Stack::new().map_err(NsError::Setup)?;
    let init_args = InitArgs {
        argv: prepared.argv.as_ptr(),
        envp: prepared.envp.as_ptr(),
        candidates: prepared.candidates.as_ptr(),
        n_candidates: prepared.candidates.len() - 1,
        cwd: prepared
            .cwd
            .as_ref()
            .map_or(std::ptr::null(), |c| c.as_ptr()),
        stdio,
        sigpipe: sigpipe_handler(spec.sigpipe_ignored),
        sync_r: sync_r.as_raw_fd(),
        ctl_r: ctl_r.as_raw_fd(),
        status_w: status_w.as_raw_fd(),
        host_pidfd: host,
        keep,
        n_keep,
        cmd_stack: cmd_stack.usable(),
        err_fd: -1,
        setup: RawSetup::new(spec.setup),
    };
    let stack = Stack::new().map_err(NsError::Setup)?;
    let (stack_low, stack_size) = stack.usable();
    let mut flags = (k::CLONE_VM | k::CLONE_NEWPID | k::CLONE_NEWNS | k::CLONE_PIDFD) as u64
        | k::CLONE_CLEAR_SIGHAND;
    if userns {
        flags |= k::CLONE_NEWUSER as u64;
    }
    let mut pidfd: c_int = -1;
    let mut args = k::clone_args {
        flags,
        pidfd: &mut pidfd as *mut c_int as u64,
        child_tid: 0,
        parent_tid: 0,
        exit_signal: k::SIGCHLD as u64,
        stack: stack_low,
        stack_size,
        tls: 0,
        set_tid: 0,
        set_tid_size: 0,
        cgroup: 0,
    };
    let all: u64 = !0;
    let mut old_mask: u64 = 0;
    // SAFETY: `old_mask` is a writable 8-byte sigset; the mask is restored
    // right after the clone on every path.
    let r = unsafe { set_sigmask(&all, &mut old_mask) };
    if r < 0 {
        return Err(NsError::Setup(io::Error::from_raw_os_error(errno_of(r))));
    }
    // SAFETY: CLONE_VM: the child shares this process's memory and runs on
    // `stack` (kept mapped until the init has exited, see
    // `PidNamespace::release_stacks`); `init_main` copies `init_args` onto
    // that stack before anything else, while this thread waits for
    // MSG_STARTED below, and never returns. Every signal is blocked in this thread, so the
    // child starts with all signals blocked and CLONE_CLEAR_SIGHAND reset
    // every handler: no host code can run in it.
    let ret = unsafe {
        clone3_with(
            &mut args,
            init_main,
            &init_args as *const InitArgs as *const c_void,
        )
    };
    // SAFETY: restores the mask saved above.
    unsafe {
        set_sigmask(&old_mask, std::ptr::null_mut());
    }
    drop(keep_owned);
    drop(sync_r);
    drop(ctl_r);
    drop(status_w);
    if ret < 0 {
        // No child: the stacks (dropped on return) were never used.
        let errno = errno_of(ret);
        let e = io::Error::from_raw_os_error(errno);
        return Err(match errno {
            x if x == en::EAGAIN as i32 || x == en::ENOMEM as i32 => NsError::Setup(e),
            _ => NsError::Refused(e, "clone3"),
        });
    }
    // SAFETY: clone3 succeeded with CLONE_PIDFD: a new close-on-exec pidfd
    // that nothing else owns.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    let pid = Pid::from_raw(ret as i32)
        .ok_or_else(|| NsError::Setup(io::Error::other("clone3 returned pid 0")))?;
    let child = NsChild {
        pid,
        pidfd,
        ctl: ctl_w,
        status: status_r,
        inner: 0,
        stacks: Some(NsStacks {
            _init: stack,
            _command: cmd_stack,
        }),
    };
    // From here on a failure must kill and reap the init (it is ours,
    // unreaped: its pid is still its own).
    let fail = |child: NsChild, e: NsError| {
        let _ = rustix::process::pidfd_send_signal(&child.pidfd, rustix::process::Signal::KILL);
        let _ = rustix::process::waitid(
            rustix::process::WaitId::Pid(child.pid),
            rustix::process::WaitIdOptions::EXITED,
        );
        Err(e)
    };
    if userns {
        if let Err(e) = write_maps(pid) {
            return fail(child, NsError::Refused(e, "writing the uid/gid maps"));
        }
    }
    if let Err(e) = rustix::io::write(&sync_w, &[1]) {
        return fail(child, NsError::Setup(e.into()));
    }
    drop(sync_w);
    // The first message: started, or why not. Blocking: the init answers
    // or dies (end of file).
    let mut msg = [0u8; 8];
    let mut got = 0;
    while got < msg.len() {
        match rustix::io::read(&child.status, &mut msg[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return fail(child, NsError::Setup(e.into())),
        }
    }
    if got < msg.len() {
        return fail(
            child,
            NsError::Setup(io::Error::other("the namespace init died while starting")),
        );
    }
    let kind = u32::from_ne_bytes([msg[0], msg[1], msg[2], msg[3]]);
    let value = i32::from_ne_bytes([msg[4], msg[5], msg[6], msg[7]]);
    let mut child = child;
    match kind {
        MSG_STARTED => child.inner = value as u32,
        MSG_EXEC_FAILED => return fail(child, NsError::Exec(io::Error::from_raw_os_error(value))),
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
            let refused = matches!(value >> 16, STEP_MOUNT_PRIVATE | STEP_MOUNT_PROC);
            return fail(
                child,
                if refused {
                    NsError::Refused(e, what)
                } else {
                    NsError::Setup(crate::error::io_context(
                        format!("namespace init: {what}"),
                        e,
                    ))
                },
            );
        }
        _ => {
            return fail(
                child,
                NsError::Setup(io::Error::other(
                    "unexpected message from the namespace init",
                )),
            )
        }
    }
    let fl = rustix::fs::fcntl_getfl(&child.status).map_err(setup)?;
    rustix::fs::fcntl_setfl(&child.status, fl | rustix::fs::OFlags::NONBLOCK).map_err(setup)?;
    Ok(child)
}

/// Sends one control byte to the init; a gone init is not an error
/// (`Ok(false)`), and never raises SIGPIPE.
pub(crate) fn send_ctl(ctl: &OwnedFd, byte: u8) -> io::Result<bool> {
    const MSG_NOSIGNAL: usize = 0x4000;
    let b = [byte];
    loop {
        // SAFETY: sendto on a descriptor we own, with one readable byte and
        // no address.
        let r = unsafe {
            syscall6(
                k::__NR_sendto,
                [
                    ctl.as_raw_fd() as usize,
                    b.as_ptr() as usize,
                    1,
                    MSG_NOSIGNAL,
                    0,
                    0,
                ],
            )
        };
        if r >= 0 {
            return Ok(true);
        }
        match errno_of(r) {
            e if e == en::EINTR as i32 => continue,
            e if e == en::EPIPE as i32 || e == en::ECONNRESET as i32 => return Ok(false),
            e => return Err(io::Error::from_raw_os_error(e)),
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

/// Writes one 8-byte message (ignoring failures: corral may be gone).
#[inline(always)]
unsafe fn report(fd: c_int, kind: u32, value: i32) {
    let mut msg = [0u8; 8];
    let a = kind.to_ne_bytes();
    let b = value.to_ne_bytes();
    let mut i = 0;
    while i < 4 {
        msg[i] = a[i];
        msg[i + 4] = b[i];
        i += 1;
    }
    loop {
        // SAFETY: `msg` is 8 readable bytes.
        let r = unsafe { syscall4(k::__NR_write, fd as usize, msg.as_ptr() as usize, 8, 0) };
        if r != -(en::EINTR as isize) {
            break;
        }
    }
}

/// Closes every descriptor above 2 that is not in `keep[..n]` (sorted).
#[inline(always)]
unsafe fn close_others(keep: &[c_int; MAX_KEEP], n: usize) {
    let mut from: usize = 3;
    let mut i = 0;
    while i < n && i < MAX_KEEP {
        let fd = keep[i] as usize;
        if fd > from {
            // SAFETY: close_range takes no pointer.
            let r = unsafe { syscall4(k::__NR_close_range, from, fd - 1, 0, 0) };
            if r < 0 {
                let mut f = from;
                while f < fd {
                    // SAFETY: close takes no pointer.
                    unsafe { syscall4(k::__NR_close, f, 0, 0, 0) };
                    f += 1;
                }
            }
        }
        if fd + 1 > from {
            from = fd + 1;
        }
        i += 1;
    }
    // SAFETY: close_range takes no pointer.
    let r = unsafe { syscall4(k::__NR_close_range, from, u32::MAX as usize, 0, 0) };
    if r < 0 {
        let mut f = from;
        while f < 4096 {
            // SAFETY: close takes no pointer.
            unsafe { syscall4(k::__NR_close, f, 0, 0, 0) };
            f += 1;
        }
    }
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

/// # Safety
/// Only in the child made by `clone3_with`, with `a` as described there.
#[inline(never)]
unsafe fn init(a: &InitArgs) -> ! {
    // `a` is the init's own copy (on its stack, see `init_main`). The
    // pointers inside (argv, envp, candidates, cwd) point into the host's
    // memory and are only used by the command before its exec, which
    // happens before MSG_STARTED.
    // SAFETY: (the whole body) raw syscalls with pointers to `a`'s memory or
    // this frame's locals, of the sizes the kernel expects; no allocation,
    // lock, TLS or panic path (indexing is bounded by constants).
    unsafe {
        // A name for `ps` and /proc/<pid>/comm (the command line is still
        // the host's: the init is a copy of it).
        let name = b"corral-init\0";
        syscall4(k::__NR_prctl, PR_SET_NAME, name.as_ptr() as usize, 0, 0);
        close_others(&a.keep, a.n_keep);

        // 2. Wait for the go byte.
        let mut b = [0u8; 1];
        loop {
            let r = syscall4(
                k::__NR_read,
                a.sync_r as usize,
                b.as_mut_ptr() as usize,
                1,
                0,
            );
            if r == 1 {
                break;
            }
            if r != -(en::EINTR as isize) {
                exit_now(127);
            }
        }
        syscall4(k::__NR_close, a.sync_r as usize, 0, 0, 0);
        let fail = |step: i32, r: isize| -> ! {
            report(a.status_w, MSG_SETUP_FAILED, (step << 16) | errno_of(r));
            exit_now(127)
        };

        // 3. Private mounts, fresh /proc.
        let root = b"/\0";
        let r = syscall6(
            k::__NR_mount,
            [
                0,
                root.as_ptr() as usize,
                0,
                (k::MS_REC | k::MS_PRIVATE) as usize,
                0,
                0,
            ],
        );
        if r < 0 {
            fail(STEP_MOUNT_PRIVATE, r);
        }
        let proc_ = b"proc\0";
        let target = b"/proc\0";
        let r = syscall6(
            k::__NR_mount,
            [
                proc_.as_ptr() as usize,
                target.as_ptr() as usize,
                proc_.as_ptr() as usize,
                (k::MS_NOSUID | k::MS_NODEV | k::MS_NOEXEC) as usize,
                0,
                0,
            ],
        );
        if r < 0 {
            fail(STEP_MOUNT_PROC, r);
        }

        // 4. Group leader; SIGCHLD through a signalfd (every signal stays
        //    blocked in the init: only SIGKILL can end it).
        let r = syscall4(k::__NR_setpgid, 0, 0, 0, 0);
        if r < 0 {
            fail(STEP_SETPGID, r);
        }
        let chld: u64 = 1 << (k::SIGCHLD - 1);
        let sigfd = syscall4(
            k::__NR_signalfd4,
            usize::MAX, // -1: a new signalfd
            &chld as *const u64 as usize,
            SIGSET_SIZE,
            (k::O_CLOEXEC | k::O_NONBLOCK) as usize,
        );
        if sigfd < 0 {
            fail(STEP_SIGNALFD, sigfd);
        }
        let mut ep = [0 as c_int; 2];
        let r = syscall4(
            k::__NR_pipe2,
            ep.as_mut_ptr() as usize,
            k::O_CLOEXEC as usize,
            0,
            0,
        );
        if r < 0 {
            fail(STEP_PIPE, r);
        }
        // The command: a vfork-style clone on its own stack (the init is
        // single-threaded and has no handlers, so sharing its memory until
        // the exec is safe, and the host's memory is not copied again).
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
        let cmd = clone3_with(
            &mut cargs,
            command_main,
            &targs as *const InitArgs as *const c_void,
        );
        if cmd < 0 {
            fail(STEP_FORK, cmd);
        }
        syscall4(k::__NR_close, ep[1] as usize, 0, 0, 0);
        let mut eb = [0u8; 4];
        let mut got: usize = 0;
        loop {
            let r = syscall4(
                k::__NR_read,
                ep[0] as usize,
                eb.as_mut_ptr().wrapping_add(got) as usize,
                4 - got,
                0,
            );
            if r == -(en::EINTR as isize) {
                continue;
            }
            if r <= 0 {
                break;
            }
            got = got.wrapping_add(r as usize);
            if got >= 4 {
                break;
            }
        }
        syscall4(k::__NR_close, ep[0] as usize, 0, 0, 0);
        if got > 0 {
            let mut st: c_int = 0;
            syscall4(
                k::__NR_wait4,
                cmd as usize,
                &mut st as *mut c_int as usize,
                0,
                0,
            );
            report(a.status_w, MSG_EXEC_FAILED, i32::from_ne_bytes(eb));
            exit_now(127);
        }
        report(a.status_w, MSG_STARTED, cmd as i32);
        // The command has its streams: let go of ours, so that only the
        // tree holds the pipes (end of file must reach corral).
        let mut fd = 0;
        while fd < 3 {
            syscall4(k::__NR_close, fd, 0, 0, 0);
            fd += 1;
        }
        let mut i = 0;
        while i < 3 {
            if a.stdio[i] > 2 {
                syscall4(k::__NR_close, a.stdio[i] as usize, 0, 0, 0);
            }
            i += 1;
        }

        // 5. The loop.
        #[repr(C)]
        struct PollFd {
            fd: c_int,
            events: i16,
            revents: i16,
        }
        let mut watching = true;
        let mut cmd_done = false;
        let mut buf = [0u8; 512];
        loop {
            let mut fds = [
                PollFd {
                    fd: sigfd as c_int,
                    events: k::POLLIN as i16,
                    revents: 0,
                },
                PollFd {
                    fd: if watching { a.ctl_r } else { -1 },
                    events: k::POLLIN as i16,
                    revents: 0,
                },
                PollFd {
                    fd: if watching { a.host_pidfd } else { -1 },
                    events: k::POLLIN as i16,
                    revents: 0,
                },
            ];
            let r = syscall6(
                k::__NR_ppoll,
                [fds.as_mut_ptr() as usize, 3, 0, 0, SIGSET_SIZE, 0],
            );
            if r < 0 && r != -(en::EINTR as isize) {
                // Cannot wait: do not spin; end the namespace.
                exit_now(126);
            }
            // The control pipe first: a host that sent the detach byte and
            // then exited (a normal end with kept leftovers) wakes this poll
            // with both ready when the init runs late (load); the byte was
            // written before the exit, so it is in the pipe now.
            if fds[1].revents != 0 && watching {
                let n = syscall4(
                    k::__NR_read,
                    a.ctl_r as usize,
                    buf.as_mut_ptr() as usize,
                    buf.len(),
                    0,
                );
                if n == 0 || (n < 0 && n != -(en::EINTR as isize) && n != -(en::EAGAIN as isize)) {
                    // corral closed the control pipe without detaching.
                    exit_now(137);
                }
                let mut j: usize = 0;
                while n > 0 && j < (n as usize) && j < buf.len() {
                    let c = buf[j];
                    if c == CTL_DETACH {
                        watching = false;
                    } else if c as u32 == k::SIGKILL {
                        exit_now(137);
                    } else if c != 0 {
                        syscall4(k::__NR_kill, usize::MAX, c as usize, 0, 0);
                        syscall4(k::__NR_kill, usize::MAX, k::SIGCONT as usize, 0, 0);
                    }
                    j += 1;
                }
            }
            if fds[2].revents != 0 && watching {
                // The host died: the kernel kills the namespace as we go.
                exit_now(137);
            }
            // Drain the signalfd, then reap everything that exited.
            loop {
                let n = syscall4(
                    k::__NR_read,
                    sigfd as usize,
                    buf.as_mut_ptr() as usize,
                    buf.len(),
                    0,
                );
                if n <= 0 {
                    break;
                }
            }
            loop {
                let mut st: c_int = 0;
                let p = syscall4(
                    k::__NR_wait4,
                    usize::MAX, // -1: any child
                    &mut st as *mut c_int as usize,
                    (k::WNOHANG | k::__WALL) as usize,
                    0,
                );
                if p == cmd {
                    report(a.status_w, MSG_EXITED, st);
                    cmd_done = true;
                    continue;
                }
                if p > 0 {
                    continue;
                }
                if p == -(en::ECHILD as isize) && cmd_done {
                    // Nothing left in the namespace.
                    exit_now(0);
                }
                break;
            }
        }
    }
}

/// The command's entry (vfork-style child of the init): exec, or report
/// the errno on the init's error pipe and exit.
extern "C" fn command_main(arg: *const c_void) -> ! {
    // SAFETY: `arg` points to the init's `targs`, alive while the init is
    // suspended (CLONE_VFORK); only raw syscalls follow.
    unsafe {
        let a = &*(arg as *const InitArgs);
        let e = command_exec(a);
        let bytes = e.to_ne_bytes();
        syscall4(
            k::__NR_write,
            a.err_fd as usize,
            bytes.as_ptr() as usize,
            4,
            0,
        );
        exit_now(127)
    }
}

/// The command's side of the init's clone: streams, mask, exec. Returns the
/// errno to report.
///
/// # Safety
/// Only in the command's child of the init.
#[inline(never)]
unsafe fn command_exec(a: &InitArgs) -> i32 {
    // SAFETY: raw syscalls on this process's own memory, as in `init`.
    unsafe {
        let dfl = KernelSigaction {
            handler: a.sigpipe,
            flags: 0,
            restorer: 0,
            mask: 0,
        };
        let r = syscall4(
            k::__NR_rt_sigaction,
            k::SIGPIPE as usize,
            &dfl as *const KernelSigaction as usize,
            0,
            SIGSET_SIZE,
        );
        if r < 0 {
            return errno_of(r);
        }
        if !a.cwd.is_null() {
            let r = syscall4(k::__NR_chdir, a.cwd as usize, 0, 0, 0);
            if r < 0 {
                return errno_of(r);
            }
        }
        let mut target = 0;
        while target < 3 {
            let src = a.stdio[target];
            if src >= 0 {
                let r = if src as usize == target {
                    syscall4(k::__NR_fcntl, src as usize, k::F_SETFD as usize, 0, 0)
                } else {
                    syscall4(k::__NR_dup3, src as usize, target, 0, 0)
                };
                if r < 0 {
                    return errno_of(r);
                }
            }
            target += 1;
        }
        if a.setup.new_session {
            let r = syscall4(k::__NR_setsid, 0, 0, 0, 0);
            if r < 0 {
                return errno_of(r);
            }
        }
        let r = apply_setup(&a.setup);
        if r != 0 {
            return r;
        }
        let empty: u64 = 0;
        let r = set_sigmask(&empty, std::ptr::null_mut());
        if r < 0 {
            return errno_of(r);
        }
        exec_candidates(a.argv, a.envp, a.candidates, a.n_candidates)
    }
}
