//! The clone3 child's side: runs in the parent's memory, on its own stack,
//! between clone3 and exec. No allocation, lock, thread-local or panic
//! path: everything it reads was built by the parent side
//! ([`super::parent`]) and it only issues raw system calls
//! ([`super::raw`]).

use std::ffi::c_void;
use std::os::raw::{c_char, c_int};
use std::sync::atomic::{AtomicI32, Ordering};

use linux_raw_sys::errno as en;
use linux_raw_sys::general as k;

use super::raw::{errno_of, set_sigmask, syscall4, KernelSigaction, SIGSET_SIZE, SIG_DFL};

/// What the search does after `execve` failed on one candidate with
/// `errno`, as glibc's `execvp` does.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Step {
    /// Not there: try the next candidate.
    Next,
    /// There but not executable: try the next, and report EACCES if no
    /// other candidate works.
    NextDenied,
    /// A real failure of this program: stop and report it.
    Stop,
}

// Runs in the child: no allocation, no panic.
#[inline(always)]
pub(super) fn step(errno: i32) -> Step {
    const ENOENT: i32 = en::ENOENT as i32;
    const ENOTDIR: i32 = en::ENOTDIR as i32;
    const ESTALE: i32 = en::ESTALE as i32;
    const ENODEV: i32 = en::ENODEV as i32;
    const ETIMEDOUT: i32 = en::ETIMEDOUT as i32;
    const EACCES: i32 = en::EACCES as i32;
    match errno {
        ENOENT | ENOTDIR | ESTALE | ENODEV | ETIMEDOUT => Step::Next,
        EACCES => Step::NextDenied,
        _ => Step::Stop,
    }
}

/// The errno reported after every candidate failed without a `Stop`.
#[inline(always)]
pub(super) fn exhausted_errno(last: i32, denied: bool) -> i32 {
    if denied {
        en::EACCES as i32
    } else {
        last
    }
}

/// What the child reads. Lives on the parent's stack for the whole clone
/// (the parent thread is suspended until the child exec'd or exited).
#[repr(C)]
pub(super) struct ChildArgs {
    pub(super) argv: *const *const c_char,
    pub(super) envp: *const *const c_char,
    pub(super) candidates: *const *const c_char,
    pub(super) n_candidates: usize,
    /// NULL: keep the parent's directory.
    pub(super) cwd: *const c_char,
    /// Descriptor to install as 0, 1, 2; -1 keeps the inherited one.
    /// None of them is in 0..=2 unless it is already at its own place.
    pub(super) stdio: [c_int; 3],
    /// SIGPIPE's handler for the program: SIG_DFL, or SIG_IGN when the
    /// caller asked for an ignored SIGPIPE to be passed on.
    pub(super) sigpipe: usize,
    /// Where the child stores the errno of the step that failed before it
    /// exits. It shares the parent's memory (CLONE_VM) and the parent
    /// thread sleeps until the child exec'd or exited (CLONE_VFORK), so
    /// the parent reads it once clone3 returned: no pipe is needed.
    /// [`NO_REPORT`] until then.
    pub(super) err: AtomicI32,
    /// Ids, umask, session, descriptors to keep ([`apply_setup`]).
    pub(super) setup: RawSetup,
}

/// The value of [`ChildArgs::err`] when the child exec'd (or died before it
/// could say why).
pub(super) const NO_REPORT: i32 = -1;

/// The child's whole life: runs on its own stack, in the parent's memory,
/// right after clone3 returned 0. Never returns.
pub(super) extern "C" fn child_main(args: *const c_void) -> ! {
    // SAFETY: `args` points to the parent's `ChildArgs`, alive and unchanged
    // (but for the child's own atomic store to `err`) until the child
    // exec's or exits (the parent thread is suspended by CLONE_VFORK and
    // nothing else knows the address). Every pointer in it is valid as
    // documented on `ChildArgs`. `child_exec` only issues raw syscalls and
    // reads that memory.
    unsafe {
        let a = &*args.cast::<ChildArgs>();
        let errno = child_exec(a);
        // An atomic store to memory the parent reads after clone3 returned
        // (the kernel orders the exit before the parent's wake-up).
        a.err.store(errno, Ordering::SeqCst);
    }
    // exit_group does not return; the loop only gives the function its
    // `!` type without a panic path.
    loop {
        // SAFETY: exit_group takes no pointer; it ends this child only (it
        // is its own thread group: no CLONE_THREAD).
        unsafe {
            syscall4(k::__NR_exit_group, 127, 0, 0, 0);
        }
    }
}

/// Sets the child up and execs. Returns the errno to report when it could
/// not; on success it does not return.
///
/// # Safety
/// Only in the child made by `clone3_with` (from `parent::spawn`), with `a` as described on
/// [`ChildArgs`].
#[inline(never)]
unsafe fn child_exec(a: &ChildArgs) -> i32 {
    // SAFETY: (the whole body) each syscall gets pointers into `a` (valid, see
    // `ChildArgs`) or into this frame's locals, with the sizes the kernel
    // expects. No allocation, lock, TLS access or panic path is used: the
    // one loop is bounded by a count from `a`, arithmetic is wrapping,
    // arrays are read through raw pointers or iterators.
    unsafe {
        // 1. Signal dispositions. CLONE_CLEAR_SIGHAND already reset every
        //    caught signal to the default in the child's own copy of the
        //    table (the parent's handlers are untouched), so no handler of
        //    the parent can ever run here. Ignored signals stay ignored
        //    across exec, except SIGPIPE, which Rust programs ignore and std
        //    resets for the child: it gets the caller's choice (default
        //    action unless `Command::sigpipe_ignored`).
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

        // 2. Leader of a new process group (pgid = pid); of a new session
        //    too when asked (setsid makes the same group).
        let r = if a.setup.new_session {
            syscall4(k::__NR_setsid, 0, 0, 0, 0)
        } else {
            syscall4(k::__NR_setpgid, 0, 0, 0, 0)
        };
        if r < 0 {
            return errno_of(r);
        }

        // 3. Working directory.
        if !a.cwd.is_null() {
            let r = syscall4(k::__NR_chdir, a.cwd as usize, 0, 0, 0);
            if r < 0 {
                return errno_of(r);
            }
        }

        // 4. Standard streams. A source already at its place only loses
        //    close-on-exec; the parent moved any other source out of 0..=2,
        //    so no dup3 here overwrites a source still to be installed.
        for (target, &src) in a.stdio.iter().enumerate() {
            if src < 0 {
                continue;
            }
            let r = if src as usize == target {
                syscall4(k::__NR_fcntl, src as usize, k::F_SETFD as usize, 0, 0)
            } else {
                syscall4(k::__NR_dup3, src as usize, target, 0, 0)
            };
            if r < 0 {
                return errno_of(r);
            }
        }

        // 4b. The caller's setup: umask, signals, ids, descriptors.
        let r = apply_setup(&a.setup);
        if r != 0 {
            return r;
        }

        // 5. An empty signal mask for the program: a caller thread that
        //    blocks SIGTERM must not hand that on to a tree that corral will
        //    signal. Dispositions are all default or ignore now, so a signal
        //    that arrives from here on is handled by the kernel alone.
        let empty: u64 = 0;
        let r = set_sigmask(&empty, std::ptr::null_mut());
        if r < 0 {
            return errno_of(r);
        }

        // 6. Exec, trying each candidate as execvp does.
        exec_candidates(a.argv, a.envp, a.candidates, a.n_candidates)
    }
}

/// Execs each of the `n` candidate paths in turn with `argv` and `envp`,
/// as execvp does, and returns the errno to report when none could be
/// executed (on success it does not return). Raw system calls only: no
/// allocation, lock, TLS or panic path. Shared by the clone3 child and the
/// PID-namespace init's command.
///
/// # Safety
/// Only in a freshly cloned child about to exec; `argv`, `envp` and the
/// `n` entries of `candidates` are NUL-terminated arrays / strings that
/// stay valid until the exec.
#[inline(always)]
pub(super) unsafe fn exec_candidates(
    argv: *const *const std::os::raw::c_char,
    envp: *const *const std::os::raw::c_char,
    candidates: *const *const std::os::raw::c_char,
    n: usize,
) -> i32 {
    let mut last = en::ENOENT as i32;
    let mut denied = false;
    let mut i: usize = 0;
    while i < n {
        // SAFETY: `i < n`, so the entry is in bounds; the pointers are
        // valid as the caller promises, and execve only reads them.
        let r = unsafe {
            let path = *candidates.add(i);
            syscall4(
                k::__NR_execve,
                path as usize,
                argv as usize,
                envp as usize,
                0,
            )
        };
        // execve returned: it failed.
        let e = errno_of(r);
        match step(e) {
            Step::Next => last = e,
            Step::NextDenied => {
                last = e;
                denied = true;
            }
            Step::Stop => return e,
        }
        i = i.wrapping_add(1);
    }
    exhausted_errno(last, denied)
}

/// close_range's flag: mark close-on-exec instead of closing (Linux 5.11).
const CLOSE_RANGE_CLOEXEC: usize = 1 << 2;

/// [`ChildSetup`](crate::spec::ChildSetup) as the raw child reads it: plain
/// values and pointers into the parent's vectors, which outlive the clone.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct RawSetup {
    groups: *const u32,
    /// usize::MAX: do not call setgroups.
    n_groups: usize,
    /// -1: unchanged.
    gid: i64,
    uid: i64,
    umask: i64,
    pub(super) new_session: bool,
    close_fds: bool,
    keep: *const i32,
    n_keep: usize,
    /// The descriptors to mark close-on-exec one by one when close_range
    /// is not available: 3 up to this (the soft RLIMIT_NOFILE, capped).
    fd_limit: usize,
    restore_signals: bool,
    controlling_tty: bool,
}

// SAFETY: the pointers are only read, by a child about to exec, while the
// vectors they point into are alive (see `RawSetup::new`); moving the view
// to another thread (std's pre_exec closure must be Send + Sync) changes
// nothing about that.
unsafe impl Send for RawSetup {}
// SAFETY: as for Send: only reads.
unsafe impl Sync for RawSetup {}

impl RawSetup {
    /// Points into `s`, which must stay alive and unchanged until the
    /// child has exec'd.
    pub(crate) fn new(s: &crate::spec::ChildSetup) -> RawSetup {
        let fd_limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .current
            .map_or(65536, |n| n.min(65536)) as usize;
        RawSetup {
            groups: s.groups.as_ref().map_or(std::ptr::null(), |g| g.as_ptr()),
            n_groups: s.groups.as_ref().map_or(usize::MAX, Vec::len),
            gid: s.gid.map_or(-1, i64::from),
            uid: s.uid.map_or(-1, i64::from),
            umask: s.umask.map_or(-1, i64::from),
            new_session: s.new_session,
            close_fds: s.keep_fds.is_some(),
            keep: s.keep_fds.as_ref().map_or(std::ptr::null(), |k| k.as_ptr()),
            n_keep: s.keep_fds.as_ref().map_or(0, Vec::len),
            fd_limit,
            restore_signals: s.restore_signals,
            controlling_tty: s.controlling_tty,
        }
    }
}

/// Makes the terminal on standard input (the slave of `Command::pty`) the
/// controlling terminal of the session the child has just made (`setsid`):
/// `isatty` is true on its streams, `/dev/tty` opens, and the terminal's
/// foreground group is the child's. Returns 0 or the errno. One raw system
/// call: every spawn path calls it (through [`apply_setup`]) after the
/// session and the streams are in place.
///
/// # Safety
/// Only in a freshly cloned or forked child about to exec.
#[inline(always)]
pub(crate) unsafe fn pty_attach() -> i32 {
    // SAFETY: ioctl(0, TIOCSCTTY, 0) takes no pointer.
    let r = unsafe {
        syscall4(
            k::__NR_ioctl,
            0,
            linux_raw_sys::ioctl::TIOCSCTTY as usize,
            0,
            0,
        )
    };
    if r < 0 {
        errno_of(r)
    } else {
        0
    }
}

/// Applies `s` in a child about to exec, in `subprocess`'s order: umask,
/// signals, groups, group id, user id, then the descriptors. Returns 0, or
/// the errno of the step that failed. Raw system calls only (no allocation,
/// lock, TLS or panic path). The session (or process group) and the
/// streams are the caller's steps, done before (the controlling terminal,
/// first here, needs both).
///
/// # Safety
/// Only in a freshly cloned or forked child about to exec; the pointers in
/// `s` are valid as [`RawSetup::new`] requires.
pub(crate) unsafe fn apply_setup(s: &RawSetup) -> i32 {
    // SAFETY: (the whole body) each syscall gets plain values or pointers
    // into the parent's vectors (valid: see `RawSetup::new`) with their
    // lengths; loops are bounded by counts from `s`.
    unsafe {
        if s.controlling_tty {
            let r = pty_attach();
            if r != 0 {
                return r;
            }
        }
        if s.umask >= 0 {
            syscall4(k::__NR_umask, s.umask as usize, 0, 0, 0);
        }
        if s.restore_signals {
            let dfl = KernelSigaction {
                handler: SIG_DFL,
                flags: 0,
                restorer: 0,
                mask: 0,
            };
            let r = syscall4(
                k::__NR_rt_sigaction,
                k::SIGXFSZ as usize,
                &dfl as *const KernelSigaction as usize,
                0,
                SIGSET_SIZE,
            );
            if r < 0 {
                return errno_of(r);
            }
        }
        if s.n_groups != usize::MAX {
            let r = syscall4(k::__NR_setgroups, s.n_groups, s.groups as usize, 0, 0);
            if r < 0 {
                return errno_of(r);
            }
        }
        if s.gid >= 0 {
            let r = syscall4(k::__NR_setregid, s.gid as usize, s.gid as usize, 0, 0);
            if r < 0 {
                return errno_of(r);
            }
        }
        if s.uid >= 0 {
            let r = syscall4(k::__NR_setreuid, s.uid as usize, s.uid as usize, 0, 0);
            if r < 0 {
                return errno_of(r);
            }
        }
        if s.close_fds {
            // Close-on-exec rather than closed: the spawn's own descriptors
            // (the exec-error pipe of std's path) must live until the exec.
            let r = syscall4(
                k::__NR_close_range,
                3,
                u32::MAX as usize,
                CLOSE_RANGE_CLOEXEC,
                0,
            );
            if r < 0 {
                let mut fd: usize = 3;
                while fd < s.fd_limit {
                    syscall4(
                        k::__NR_fcntl,
                        fd,
                        k::F_SETFD as usize,
                        k::FD_CLOEXEC as usize,
                        0,
                    );
                    fd = fd.wrapping_add(1);
                }
            }
            let mut i: usize = 0;
            while i < s.n_keep {
                let fd = *s.keep.add(i);
                // A descriptor that is not open is not an error (as in
                // subprocess): it is simply not there.
                syscall4(k::__NR_fcntl, fd as usize, k::F_SETFD as usize, 0, 0);
                i = i.wrapping_add(1);
            }
        }
        0
    }
}
