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

use super::raw::{self, set_sigmask, KernelSigaction, SIG_DFL};
use super::sandbox::{NsEntry, Prepared, RawSandbox};

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

/// What a child needs to run the program, for the one exec step every
/// child that execs shares ([`exec_with`]): the clone3 child and the
/// PID-namespace init's command. Built by the parent side
/// ([`super::parent::Prepared::plan`]); every pointer stays valid until
/// the child exec'd or exited.
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct ExecPlan {
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
    /// Ids, umask, session, descriptors to keep ([`apply_setup`]).
    pub(super) setup: RawSetup,
}

/// What the child reads. Lives on the parent's stack for the whole clone
/// (the parent thread is suspended until the child exec'd or exited).
#[repr(C)]
pub(super) struct ChildArgs {
    pub(super) plan: ExecPlan,
    /// Where the child stores the errno of the step that failed before it
    /// exits. It shares the parent's memory (CLONE_VM) and the parent
    /// thread sleeps until the child exec'd or exited (CLONE_VFORK), so
    /// the parent reads it once clone3 returned: no pipe is needed.
    /// [`NO_REPORT`] until then.
    pub(super) err: AtomicI32,
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
    // exit_group ends this child only (it is its own thread group: no
    // CLONE_THREAD).
    raw::exit_now(127)
}

/// Sets the child up and execs. Returns the errno to report when it could
/// not; on success it does not return.
///
/// # Safety
/// Only in the child made by `clone3_with` (from `parent::spawn`), with `a` as described on
/// [`ChildArgs`].
#[inline(never)]
unsafe fn child_exec(a: &ChildArgs) -> i32 {
    // SAFETY: in that child; the plan's pointers are valid (see `ChildArgs`).
    unsafe { exec_with(&a.plan, true) }
}

/// The exec step every child that runs a program shares: signal
/// dispositions, process group or session, working directory, standard
/// streams, the caller's setup (umask, signals, ids, descriptors), an empty
/// signal mask, then the exec. Returns the errno of the step that failed;
/// on success it does not return. `new_group`: lead a new process group
/// (the clone3 child; the namespace's command stays in its init's group).
///
/// # Safety
/// Only in a freshly cloned child about to exec, with every pointer of
/// `p` valid until then (see [`ExecPlan`]).
#[inline(always)]
pub(super) unsafe fn exec_with(p: &ExecPlan, new_group: bool) -> i32 {
    // 1. Signal dispositions. CLONE_CLEAR_SIGHAND already reset every
    //    caught signal to the default in the child's own copy of the
    //    table (the parent's handlers are untouched), so no handler of
    //    the parent can ever run here. Ignored signals stay ignored
    //    across exec, except SIGPIPE, which Rust programs ignore and std
    //    resets for the child: it gets the caller's choice (default
    //    action unless `Command::sigpipe_ignored`).
    let pipe = KernelSigaction {
        handler: p.sigpipe,
        flags: 0,
        restorer: 0,
        mask: 0,
    };
    if let Err(e) = raw::sigaction(k::SIGPIPE, &pipe) {
        return e.raw();
    }
    // 2. Leader of a new process group (pgid = pid); of a new session
    //    too when asked (setsid makes the same group).
    let group = if p.setup.new_session {
        raw::setsid()
    } else if new_group {
        raw::setpgid_self()
    } else {
        Ok(0)
    };
    if let Err(e) = group {
        return e.raw();
    }
    // 3. Working directory.
    if !p.cwd.is_null() {
        // SAFETY: `cwd` is NUL-terminated and valid (see `ExecPlan`).
        if let Err(e) = unsafe { raw::chdir(p.cwd) } {
            return e.raw();
        }
    }
    // 4. Standard streams. A source already at its place only loses
    //    close-on-exec; the parent moved any other source out of 0..=2,
    //    so no dup3 here overwrites a source still to be installed.
    let mut target = 0;
    while target < 3 {
        let src = p.stdio[target];
        let r = if src < 0 {
            Ok(0)
        } else if src == target as c_int {
            raw::clear_cloexec(src)
        } else {
            raw::dup3(src, target as c_int)
        };
        if let Err(e) = r {
            return e.raw();
        }
        target += 1;
    }
    // 5. The caller's setup: umask, signals, ids, descriptors.
    // SAFETY: in the child about to exec, as `apply_setup` asks.
    let r = unsafe { apply_setup(&p.setup) };
    if r != 0 {
        return r;
    }
    // 6. An empty signal mask for the program: a caller thread that
    //    blocks SIGTERM must not hand that on to a tree that corral will
    //    signal. Dispositions are all default or ignore now, so a signal
    //    that arrives from here on is handled by the kernel alone.
    let empty: u64 = 0;
    if let Err(e) = set_sigmask(&empty, None) {
        return e.raw();
    }
    // 7. Exec, trying each candidate as execvp does.
    // SAFETY: the arrays are valid until the exec (see `ExecPlan`).
    unsafe { exec_candidates(p.argv, p.envp, p.candidates, p.n_candidates) }
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
        let e = unsafe { raw::execve(*candidates.add(i), argv, envp) }.raw();
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
    /// The sandbox to enter last (`prepared` null: none).
    pub(super) sandbox: RawSandbox,
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
            sandbox: RawSandbox {
                prepared: Prepared::of(s).map_or(std::ptr::null(), |p| p as *const Prepared),
                // A forked child (std's path) makes its namespaces itself;
                // the clone3 and PID-namespace paths say otherwise.
                entry: match Prepared::of(s) {
                    Some(p) if p.namespaces => NsEntry::Unshare,
                    _ => NsEntry::None,
                },
            },
        }
    }

    /// Whether a sandbox is to be entered, and with namespaces.
    pub(super) fn sandbox_namespaces(&self) -> Option<bool> {
        if self.sandbox.prepared.is_null() {
            None
        } else {
            Some(self.sandbox.entry != NsEntry::None)
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
    match raw::set_controlling_tty(0) {
        Ok(_) => 0,
        Err(e) => e.raw(),
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
    if s.controlling_tty {
        // SAFETY: in the child about to exec, as the caller promises.
        let r = unsafe { pty_attach() };
        if r != 0 {
            return r;
        }
    }
    if s.umask >= 0 {
        raw::umask(s.umask as u32);
    }
    let dfl = KernelSigaction {
        handler: SIG_DFL,
        flags: 0,
        restorer: 0,
        mask: 0,
    };
    if s.restore_signals {
        if let Err(e) = raw::sigaction(k::SIGXFSZ, &dfl) {
            return e.raw();
        }
    }
    if s.n_groups != usize::MAX {
        // SAFETY: `groups` holds `n_groups` ids (see `RawSetup::new`).
        if let Err(e) = unsafe { raw::setgroups(s.n_groups, s.groups) } {
            return e.raw();
        }
    }
    if s.gid >= 0 {
        if let Err(e) = raw::setregid(s.gid as u32) {
            return e.raw();
        }
    }
    if s.uid >= 0 {
        if let Err(e) = raw::setreuid(s.uid as u32) {
            return e.raw();
        }
    }
    if !s.sandbox.prepared.is_null() {
        // SAFETY: in the child about to exec; `prepared` is alive until
        // the exec (it is owned by the setup `s` points into).
        let r = unsafe { super::sandbox::enter(&s.sandbox, s.controlling_tty) };
        if r != 0 {
            return r;
        }
    }
    if s.close_fds {
        // SAFETY: `keep` holds `n_keep` descriptors (see `RawSetup::new`).
        unsafe { mark_cloexec_but(s) };
    }
    0
}

/// Marks every descriptor from 3 up close-on-exec but the `n_keep` of
/// `s.keep`. Close-on-exec rather than closed: the spawn's own descriptors
/// (the exec-error pipe of std's path) must live until the exec.
///
/// # Safety
/// As for [`apply_setup`].
#[inline(always)]
unsafe fn mark_cloexec_but(s: &RawSetup) {
    if raw::cloexec_range(3, u32::MAX as usize).is_err() {
        let mut fd: usize = 3;
        while fd < s.fd_limit {
            let _ = raw::set_cloexec(fd as c_int);
            fd = fd.wrapping_add(1);
        }
    }
    let mut i: usize = 0;
    while i < s.n_keep {
        // SAFETY: `i < n_keep`, within the parent's vector.
        let fd = unsafe { *s.keep.add(i) };
        // A descriptor that is not open is not an error (as in
        // subprocess): it is simply not there.
        let _ = raw::clear_cloexec(fd);
        i = i.wrapping_add(1);
    }
}
