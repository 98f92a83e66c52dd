//! The raw-syscall layer shared by the three children that run without
//! exec in corral's memory or without its runtime: the clone3 child
//! ([`super::child`]), the PID-namespace init ([`super::pidns`]) and the
//! keeper ([`super::keeper`]). Nothing here allocates, locks, touches
//! thread-locals or can panic. The instructions themselves are per
//! architecture (`arch_x86_64.rs`, `arch_aarch64.rs`).
//!
//! rustix's shape: one typed wrapper per system call, which checks the
//! kernel's value once and returns `Result<_, Errno>`. A wrapper is safe
//! when no argument can make the kernel touch memory the types do not
//! vouch for (slices with their lengths, `&CStr`, plain integers); it is
//! `unsafe` when it takes a raw pointer. Descriptors are plain integers
//! here (the children own theirs outright): a wrong one is an error from
//! the kernel, never a memory error.

use std::ffi::{c_void, CStr};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::raw::{c_char, c_int, c_ulong};

use linux_raw_sys::errno as en;
use linux_raw_sys::general as k;

pub(super) use super::arch::{clone3_with, syscall4, syscall6};

/// `rt_sigprocmask(SIG_SETMASK, set, old)` for the calling thread: the
/// old mask is written into `old` if given.
#[inline(always)]
pub(super) fn set_sigmask(set: &u64, old: Option<&mut u64>) -> Result<usize, Errno> {
    let old = old.map_or(0, |o| o as *mut u64 as usize);
    // SAFETY: `set` is a valid 8-byte sigset (the kernel's size on both
    // arches: _NSIG / 8), `old` is null or writable 8 bytes.
    check(unsafe {
        syscall4(
            k::__NR_rt_sigprocmask,
            k::SIG_SETMASK as usize,
            set as *const u64 as usize,
            old,
            SIGSET_SIZE,
        )
    })
}

/// Why [`clone3_from_host`] made no child.
#[derive(Debug)]
pub(super) enum HostCloneError {
    /// The calling thread's signal mask could not be set: nothing was cloned.
    Mask(Errno),
    /// clone3 itself failed.
    Clone(Errno),
}

/// clone3 from a host thread, as the clone3 child ([`super::parent`]), the
/// PID-namespace init ([`super::pidns`]) and the keeper
/// ([`super::keeper`]) are made: `flags` plus `CLONE_CLEAR_SIGHAND`, the
/// child on `stack` (its lowest address and size; `(0, 0)` without
/// `CLONE_VM`: the child's copy of this thread's stack) calling
/// `entry(arg)`, `exit_signal` sent to the parent when it ends, `cgroup` the
/// directory for `CLONE_INTO_CGROUP` (else 0). Every signal is blocked in
/// this thread around the call (that only delays their delivery), so the
/// child starts with all of them blocked and, its handlers reset, no code
/// of the host can run in it; the mask is restored on every path. The
/// child's pid, and its pidfd when `flags` has `CLONE_PIDFD`.
///
/// # Safety
/// As [`clone3_with`]: `stack` must be mapped, otherwise unused, and stay
/// mapped while the child runs on it (or be `(0, 0)` without `CLONE_VM`),
/// and `arg` must stay valid while the child reads it; with `CLONE_VM`,
/// `entry` must not allocate, lock, touch thread-locals or unwind.
pub(super) unsafe fn clone3_from_host(
    flags: u64,
    stack: (u64, u64),
    exit_signal: u64,
    cgroup: u64,
    entry: extern "C" fn(*const c_void) -> !,
    arg: *const c_void,
) -> Result<(i32, Option<OwnedFd>), HostCloneError> {
    let wants_pidfd = flags & u64::from(k::CLONE_PIDFD) != 0;
    let mut pidfd: c_int = -1;
    let mut args = k::clone_args {
        flags: flags | k::CLONE_CLEAR_SIGHAND,
        pidfd: if wants_pidfd {
            &mut pidfd as *mut c_int as u64
        } else {
            0
        },
        child_tid: 0,
        parent_tid: 0,
        exit_signal,
        stack: stack.0,
        stack_size: stack.1,
        tls: 0,
        set_tid: 0,
        set_tid_size: 0,
        cgroup,
    };
    let all: u64 = !0;
    let mut old: u64 = 0;
    set_sigmask(&all, Some(&mut old)).map_err(HostCloneError::Mask)?;
    // SAFETY: the stack, `entry` and `arg` are as the caller promised
    // (this function's contract is `clone3_with`'s); `args.pidfd` points
    // to `pidfd`, alive until the call returns.
    let ret = unsafe { clone3_with(&mut args, entry, arg) };
    // Restores the mask saved above.
    let _ = set_sigmask(&old, None);
    if ret < 0 {
        return Err(HostCloneError::Clone(Errno::from_ret(ret)));
    }
    let pidfd = wants_pidfd.then(|| {
        // SAFETY: clone3 succeeded with CLONE_PIDFD, so the kernel stored a
        // new close-on-exec pidfd that nothing else owns.
        unsafe { OwnedFd::from_raw_fd(pidfd) }
    });
    Ok((ret as i32, pidfd))
}

/// Adds SIGPIPE to the calling thread's blocked signals (`SIG_BLOCK`): a
/// write to a pipe or socket without a reader then fails with EPIPE only,
/// and the kernel's thread-directed SIGPIPE stays pending on this thread
/// (dropped when it exits) instead of acting on the whole process.
pub(super) fn block_sigpipe() {
    let set: u64 = 1 << (k::SIGPIPE - 1);
    // SAFETY: `set` is a valid 8-byte sigset, no old mask is asked for;
    // blocking one signal in the calling thread touches no memory of ours.
    unsafe {
        syscall4(
            k::__NR_rt_sigprocmask,
            k::SIG_BLOCK as usize,
            &set as *const u64 as usize,
            0,
            SIGSET_SIZE,
        );
    }
}

pub(super) const SIGSET_SIZE: usize = (k::_NSIG / 8) as usize;
pub(super) const SIG_DFL: usize = 0;
pub(super) const SIG_IGN: usize = 1;

/// The SIGPIPE handler the program starts with: ignored when asked
/// (`Command::sigpipe_ignored`), else the default action.
pub(super) fn sigpipe_handler(ignored: bool) -> usize {
    if ignored {
        SIG_IGN
    } else {
        SIG_DFL
    }
}

/// The kernel's `struct sigaction` (not libc's): handler, flags, restorer,
/// mask. The handler is kept as a plain address (SIG_DFL is 0, not a
/// function).
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct KernelSigaction {
    pub(super) handler: usize,
    pub(super) flags: c_ulong,
    pub(super) restorer: usize,
    pub(super) mask: u64,
}

// The layout must be the kernel's on both arches.
const _: () =
    assert!(std::mem::size_of::<KernelSigaction>() == std::mem::size_of::<k::kernel_sigaction>());
const _: () = assert!(std::mem::size_of::<u64>() == SIGSET_SIZE);

#[inline(always)]
pub(super) fn errno_of(r: isize) -> i32 {
    // r is in -4095..=-1 here.
    r.wrapping_neg() as i32
}

/// `exit_group(code)`: ends the calling process at once (no destructor,
/// no flush: the children have none).
#[inline(always)]
pub(super) fn exit_now(code: usize) -> ! {
    loop {
        // SAFETY: exit_group takes no pointer.
        unsafe {
            syscall4(k::__NR_exit_group, code, 0, 0, 0);
        }
    }
}

/// An error number from the kernel (`-r` of a failed system call).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Errno(i32);

impl Errno {
    pub(super) const INTR: Errno = Errno(en::EINTR as i32);
    pub(super) const AGAIN: Errno = Errno(en::EAGAIN as i32);
    pub(super) const CHILD: Errno = Errno(en::ECHILD as i32);
    pub(super) const CONNRESET: Errno = Errno(en::ECONNRESET as i32);
    pub(super) const NOENT: Errno = Errno(en::ENOENT as i32);
    pub(super) const TOOMANYREFS: Errno = Errno(en::ETOOMANYREFS as i32);
    pub(super) const PIPE: Errno = Errno(en::EPIPE as i32);
    pub(super) const EXIST: Errno = Errno(en::EEXIST as i32);
    pub(super) const INVAL: Errno = Errno(en::EINVAL as i32);

    /// The error of a failed system call's value `r` (in -4095..=-1).
    #[inline(always)]
    pub(super) fn from_ret(r: isize) -> Errno {
        Errno(errno_of(r))
    }

    /// The number itself, for a report.
    #[inline(always)]
    pub(crate) fn raw(self) -> i32 {
        self.0
    }
}

impl From<Errno> for std::io::Error {
    fn from(e: Errno) -> std::io::Error {
        std::io::Error::from_raw_os_error(e.0)
    }
}

/// The kernel's value as a result: `Ok(r)` for r >= 0.
#[inline(always)]
fn check(r: isize) -> Result<usize, Errno> {
    if r < 0 {
        Err(Errno(errno_of(r)))
    } else {
        Ok(r as usize)
    }
}

/// The kernel's `struct pollfd`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct PollFd {
    pub(super) fd: c_int,
    pub(super) events: i16,
    pub(super) revents: i16,
}

impl PollFd {
    /// Waits for `POLLIN` on `fd` (a negative `fd` is skipped by the kernel).
    #[inline(always)]
    pub(super) fn readable(fd: c_int) -> PollFd {
        PollFd {
            fd,
            events: k::POLLIN as i16,
            revents: 0,
        }
    }
}

/// `read(fd, buf)`.
#[inline(always)]
pub(super) fn read(fd: c_int, buf: &mut [u8]) -> Result<usize, Errno> {
    // SAFETY: the kernel writes at most `buf.len()` bytes into `buf`.
    check(unsafe {
        syscall4(
            k::__NR_read,
            fd as usize,
            buf.as_mut_ptr() as usize,
            buf.len(),
            0,
        )
    })
}

/// `write(fd, buf)`.
#[inline(always)]
pub(super) fn write(fd: c_int, buf: &[u8]) -> Result<usize, Errno> {
    // SAFETY: the kernel reads at most `buf.len()` bytes of `buf`.
    check(unsafe {
        syscall4(
            k::__NR_write,
            fd as usize,
            buf.as_ptr() as usize,
            buf.len(),
            0,
        )
    })
}

/// `close(fd)`; its result is of no use to the callers (the descriptor is
/// gone either way).
#[inline(always)]
pub(super) fn close(fd: c_int) {
    // SAFETY: close takes no pointer.
    unsafe {
        syscall4(k::__NR_close, fd as usize, 0, 0, 0);
    }
}

/// `close_range(first, last, 0)`.
#[inline(always)]
pub(super) fn close_range(first: usize, last: usize) -> Result<usize, Errno> {
    // SAFETY: close_range takes no pointer.
    check(unsafe { syscall4(k::__NR_close_range, first, last, 0, 0) })
}

/// Closes every descriptor from `first` to `last`: `close_range`, or one
/// `close` at a time below 4096 where it is missing (before Linux 5.9).
#[inline(always)]
pub(super) fn close_from_to(first: usize, last: usize) {
    if first > last {
        return;
    }
    if close_range(first, last).is_err() {
        let mut f = first;
        while f <= last && f < 4096 {
            close(f as c_int);
            f += 1;
        }
    }
}

/// `prctl(PR_SET_NAME, name)`: the calling thread's name (`comm`).
#[inline(always)]
pub(super) fn set_thread_name(name: &CStr) {
    const PR_SET_NAME: usize = 15;
    // SAFETY: the kernel reads the NUL-terminated `name` (at most 16 bytes).
    unsafe {
        syscall4(k::__NR_prctl, PR_SET_NAME, name.as_ptr() as usize, 0, 0);
    }
}

/// `setsid()`.
#[inline(always)]
pub(super) fn setsid() -> Result<usize, Errno> {
    // SAFETY: setsid takes no argument.
    check(unsafe { syscall4(k::__NR_setsid, 0, 0, 0, 0) })
}

/// `setpgid(0, 0)`: the caller leads a new process group.
#[inline(always)]
pub(super) fn setpgid_self() -> Result<usize, Errno> {
    // SAFETY: setpgid takes no pointer.
    check(unsafe { syscall4(k::__NR_setpgid, 0, 0, 0, 0) })
}

/// `getpgid(pid)`: the process group of `pid`, 0 for a kernel thread (or
/// a group whose leader is outside this PID namespace), which libc's and
/// rustix's wrappers cannot return.
#[inline(always)]
pub(crate) fn getpgid(pid: u32) -> Result<u32, Errno> {
    // SAFETY: getpgid takes no pointer.
    check(unsafe { syscall4(k::__NR_getpgid, pid as usize, 0, 0, 0) }).map(|g| g as u32)
}

/// `statmount(mnt_id, mask)` (Linux 6.8) of a mount of the caller's mount
/// namespace, `mnt_id` being its unique id (`STATX_MNT_ID_UNIQUE`), into
/// `buf`: the kernel's `struct statmount`, then the strings `mask` asks
/// for. An older kernel fails with `ENOSYS`; a `buf` too small for the
/// strings with `EOVERFLOW`.
pub(crate) fn statmount(mnt_id: u64, mask: u64, buf: &mut [u8]) -> Result<Statmount<'_>, Errno> {
    let req = k::mnt_id_req {
        size: std::mem::size_of::<k::mnt_id_req>() as u32,
        spare: 0,
        mnt_id,
        param: mask,
        mnt_ns_id: 0,
    };
    // SAFETY: `req` is a readable `mnt_id_req` whose `size` says how long
    // it is; the kernel writes at most `buf.len()` bytes into `buf`.
    check(unsafe {
        syscall4(
            k::__NR_statmount,
            &req as *const k::mnt_id_req as usize,
            buf.as_mut_ptr() as usize,
            buf.len(),
            0,
        )
    })?;
    if buf.len() < std::mem::size_of::<k::statmount>() {
        return Err(Errno(en::EOVERFLOW as i32));
    }
    // SAFETY: the kernel filled the `struct statmount` at the start of
    // `buf` (checked long enough); it is read unaligned, byte for byte,
    // and holds only integers.
    let head = unsafe { std::ptr::read_unaligned(buf.as_ptr() as *const k::statmount) };
    Ok(Statmount { head, buf })
}

/// What [`statmount`] returned: the fields the kernel filled (`mask`) and
/// its strings.
pub(crate) struct Statmount<'a> {
    head: k::statmount,
    buf: &'a [u8],
}

impl Statmount<'_> {
    /// The file system's magic number (`STATMOUNT_SB_BASIC`).
    pub(crate) fn magic(&self) -> Option<u64> {
        self.has(k::STATMOUNT_SB_BASIC)
            .then_some(self.head.sb_magic)
    }

    /// The mount's root within its file system, as the caller sees it
    /// (`STATMOUNT_MNT_ROOT`; for a cgroup file system, relative to the
    /// caller's cgroup namespace, like mountinfo's fourth field).
    pub(crate) fn root(&self) -> Option<&str> {
        self.string(k::STATMOUNT_MNT_ROOT, self.head.mnt_root)
    }

    /// The file system's own options, comma-separated
    /// (`STATMOUNT_MNT_OPTS`, Linux 6.11).
    pub(crate) fn options(&self) -> Option<&str> {
        self.string(k::STATMOUNT_MNT_OPTS, self.head.mnt_opts)
    }

    fn has(&self, bit: u32) -> bool {
        self.head.mask & u64::from(bit) != 0
    }

    /// The NUL-terminated string at `offset` past the `str` field, if the
    /// kernel filled the field `bit` names (and it is UTF-8).
    fn string(&self, bit: u32, offset: u32) -> Option<&str> {
        if !self.has(bit) {
            return None;
        }
        let start = std::mem::offset_of!(k::statmount, str_).checked_add(offset as usize)?;
        let rest = self.buf.get(start..)?;
        let end = rest.iter().position(|&b| b == 0)?;
        std::str::from_utf8(&rest[..end]).ok()
    }
}

/// `getpid()`.
#[inline(always)]
pub(super) fn getpid() -> u32 {
    // SAFETY: getpid takes no argument and cannot fail.
    unsafe { syscall4(k::__NR_getpid, 0, 0, 0, 0) as u32 }
}

/// `kill(pid, sig)` (`pid` -1: every process this one may signal).
#[inline(always)]
pub(super) fn kill(pid: isize, sig: u32) -> Result<usize, Errno> {
    // SAFETY: kill takes no pointer.
    check(unsafe { syscall4(k::__NR_kill, pid as usize, sig as usize, 0, 0) })
}

/// `nanosleep` for `sec` s and `nsec` ns (an interrupted sleep is not
/// resumed).
#[inline(always)]
pub(super) fn nanosleep(sec: i64, nsec: i64) {
    let ts = k::__kernel_timespec {
        tv_sec: sec,
        tv_nsec: nsec,
    };
    // SAFETY: the kernel reads the timespec on this frame; no remainder is
    // asked for.
    unsafe {
        syscall4(
            k::__NR_nanosleep,
            &ts as *const k::__kernel_timespec as usize,
            0,
            0,
            0,
        );
    }
}

/// `ppoll(fds, timeout, no mask)`: how many entries have events.
#[inline(always)]
pub(super) fn ppoll(
    fds: &mut [PollFd],
    timeout: Option<&mut k::__kernel_timespec>,
) -> Result<usize, Errno> {
    let t = timeout.map_or(0, |t| t as *mut k::__kernel_timespec as usize);
    // SAFETY: the kernel reads and writes the `fds.len()` pollfds and the
    // timespec (it writes the time left back), all borrowed mutably here.
    check(unsafe {
        syscall6(
            k::__NR_ppoll,
            [fds.as_mut_ptr() as usize, fds.len(), t, 0, SIGSET_SIZE, 0],
        )
    })
}

/// `wait4(pid, status, flags)` without rusage: the pid reaped (0 with
/// `WNOHANG` and nothing to reap).
#[inline(always)]
pub(super) fn wait4(pid: isize, status: Option<&mut c_int>, flags: u32) -> Result<usize, Errno> {
    let st = status.map_or(0, |s| s as *mut c_int as usize);
    // SAFETY: the kernel writes one int into `status`, if given.
    check(unsafe { syscall4(k::__NR_wait4, pid as usize, st, flags as usize, 0) })
}

/// `mount(source, target, fstype, flags, NULL)`.
#[inline(always)]
pub(super) fn mount(
    source: Option<&CStr>,
    target: &CStr,
    fstype: Option<&CStr>,
    flags: u32,
) -> Result<usize, Errno> {
    let opt = |s: Option<&CStr>| s.map_or(0, |s| s.as_ptr() as usize);
    // SAFETY: the kernel reads the NUL-terminated strings; no data.
    check(unsafe {
        syscall6(
            k::__NR_mount,
            [
                opt(source),
                target.as_ptr() as usize,
                opt(fstype),
                flags as usize,
                0,
                0,
            ],
        )
    })
}

/// `signalfd4(-1, {sig}, flags)`: a new signalfd for one signal.
#[inline(always)]
pub(super) fn signalfd_for(sig: u32, flags: u32) -> Result<c_int, Errno> {
    let set: u64 = 1 << (sig - 1);
    // SAFETY: the kernel reads the 8-byte sigset on this frame.
    check(unsafe {
        syscall4(
            k::__NR_signalfd4,
            usize::MAX, // -1: a new signalfd
            &set as *const u64 as usize,
            SIGSET_SIZE,
            flags as usize,
        )
    })
    .map(|fd| fd as c_int)
}

/// `pipe2(flags)`: the read end, then the write end.
#[inline(always)]
pub(super) fn pipe2(flags: u32) -> Result<[c_int; 2], Errno> {
    let mut ends = [0 as c_int; 2];
    // SAFETY: the kernel writes two ints into `ends`.
    check(unsafe {
        syscall4(
            k::__NR_pipe2,
            ends.as_mut_ptr() as usize,
            flags as usize,
            0,
            0,
        )
    })
    .map(|_| ends)
}

/// `rt_sigaction(sig, act, NULL)`.
#[inline(always)]
pub(super) fn sigaction(sig: u32, act: &KernelSigaction) -> Result<usize, Errno> {
    // SAFETY: the kernel reads the kernel-layout sigaction (size checked
    // above); no old action is asked for.
    check(unsafe {
        syscall4(
            k::__NR_rt_sigaction,
            sig as usize,
            act as *const KernelSigaction as usize,
            0,
            SIGSET_SIZE,
        )
    })
}

/// `chdir(path)`.
///
/// # Safety
/// `path` is a NUL-terminated string that stays valid for the call.
#[inline(always)]
pub(super) unsafe fn chdir(path: *const c_char) -> Result<usize, Errno> {
    // SAFETY: the kernel reads the string the caller vouches for.
    check(unsafe { syscall4(k::__NR_chdir, path as usize, 0, 0, 0) })
}

/// `fcntl(fd, F_SETFD, FD_CLOEXEC)`: sets close-on-exec.
#[inline(always)]
pub(super) fn set_cloexec(fd: c_int) -> Result<usize, Errno> {
    // SAFETY: fcntl(F_SETFD) takes no pointer.
    check(unsafe {
        syscall4(
            k::__NR_fcntl,
            fd as usize,
            k::F_SETFD as usize,
            k::FD_CLOEXEC as usize,
            0,
        )
    })
}

/// `close_range(first, last, CLOSE_RANGE_CLOEXEC)`: marks the descriptors
/// close-on-exec instead of closing them (Linux 5.11).
#[inline(always)]
pub(super) fn cloexec_range(first: usize, last: usize) -> Result<usize, Errno> {
    const CLOSE_RANGE_CLOEXEC: usize = 1 << 2;
    // SAFETY: close_range takes no pointer.
    check(unsafe { syscall4(k::__NR_close_range, first, last, CLOSE_RANGE_CLOEXEC, 0) })
}

/// `umask(mask)`: the previous mask (it cannot fail).
#[inline(always)]
pub(super) fn umask(mask: u32) -> u32 {
    // SAFETY: umask takes no pointer.
    unsafe { syscall4(k::__NR_umask, mask as usize, 0, 0, 0) as u32 }
}

/// `setgroups(n, groups)`.
///
/// # Safety
/// `groups` points to `n` readable `gid_t`s (or `n` is 0).
#[inline(always)]
pub(super) unsafe fn setgroups(n: usize, groups: *const u32) -> Result<usize, Errno> {
    // SAFETY: the kernel reads the `n` ids the caller vouches for.
    check(unsafe { syscall4(k::__NR_setgroups, n, groups as usize, 0, 0) })
}

/// `setregid(gid, gid)`.
#[inline(always)]
pub(super) fn setregid(gid: u32) -> Result<usize, Errno> {
    // SAFETY: setregid takes no pointer.
    check(unsafe { syscall4(k::__NR_setregid, gid as usize, gid as usize, 0, 0) })
}

/// `setreuid(uid, uid)`.
#[inline(always)]
pub(super) fn setreuid(uid: u32) -> Result<usize, Errno> {
    // SAFETY: setreuid takes no pointer.
    check(unsafe { syscall4(k::__NR_setreuid, uid as usize, uid as usize, 0, 0) })
}

/// `ioctl(fd, TIOCSCTTY, 0)`: the terminal on `fd` becomes the calling
/// session's controlling terminal.
#[inline(always)]
pub(super) fn set_controlling_tty(fd: c_int) -> Result<usize, Errno> {
    // SAFETY: TIOCSCTTY takes an integer argument, no pointer.
    check(unsafe {
        syscall4(
            k::__NR_ioctl,
            fd as usize,
            linux_raw_sys::ioctl::TIOCSCTTY as usize,
            0,
            0,
        )
    })
}

/// `execve(path, argv, envp)`: returns only on failure.
///
/// # Safety
/// `path` is a NUL-terminated string, `argv` and `envp` NULL-terminated
/// arrays of them, all valid until the call.
#[inline(always)]
pub(super) unsafe fn execve(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> Errno {
    // SAFETY: the kernel reads what the caller vouches for.
    Errno::from_ret(unsafe {
        syscall4(
            k::__NR_execve,
            path as usize,
            argv as usize,
            envp as usize,
            0,
        )
    })
}

/// `fcntl(fd, F_SETFD, 0)`: clears close-on-exec.
#[inline(always)]
pub(super) fn clear_cloexec(fd: c_int) -> Result<usize, Errno> {
    // SAFETY: fcntl(F_SETFD) takes no pointer.
    check(unsafe { syscall4(k::__NR_fcntl, fd as usize, k::F_SETFD as usize, 0, 0) })
}

/// `dup3(src, dst, 0)`.
#[inline(always)]
pub(super) fn dup3(src: c_int, dst: c_int) -> Result<usize, Errno> {
    // SAFETY: dup3 takes no pointer.
    check(unsafe { syscall4(k::__NR_dup3, src as usize, dst as usize, 0, 0) })
}

/// `openat(dir, path, flags)` (no mode: never creates).
#[inline(always)]
pub(super) fn openat(dir: c_int, path: &CStr, flags: u32) -> Result<c_int, Errno> {
    // SAFETY: the kernel reads the NUL-terminated `path`.
    check(unsafe {
        syscall4(
            k::__NR_openat,
            dir as isize as usize,
            path.as_ptr() as usize,
            flags as usize,
            0,
        )
    })
    .map(|fd| fd as c_int)
}

/// `unlinkat(dir, name, 0)`.
#[inline(always)]
pub(super) fn unlinkat(dir: c_int, name: &CStr) -> Result<usize, Errno> {
    // SAFETY: the kernel reads the NUL-terminated `name`.
    check(unsafe {
        syscall4(
            k::__NR_unlinkat,
            dir as isize as usize,
            name.as_ptr() as usize,
            0,
            0,
        )
    })
}

/// `unlinkat(dir, name, AT_REMOVEDIR)`.
#[inline(always)]
pub(super) fn rmdirat(dir: c_int, name: &CStr) -> Result<usize, Errno> {
    // SAFETY: the kernel reads the NUL-terminated `name`.
    check(unsafe {
        syscall4(
            k::__NR_unlinkat,
            dir as isize as usize,
            name.as_ptr() as usize,
            k::AT_REMOVEDIR as usize,
            0,
        )
    })
}

/// `getdents64(fd, buf)`: bytes of directory entries written into `buf`.
#[inline(always)]
pub(super) fn getdents64(fd: c_int, buf: &mut [u8]) -> Result<usize, Errno> {
    // SAFETY: the kernel writes at most `buf.len()` bytes into `buf`.
    check(unsafe {
        syscall4(
            k::__NR_getdents64,
            fd as usize,
            buf.as_mut_ptr() as usize,
            buf.len(),
            0,
        )
    })
}

/// `readlinkat(dir, path, buf)`: bytes of the target written into `buf`
/// (not NUL-terminated).
#[inline(always)]
pub(super) fn readlinkat(dir: c_int, path: &CStr, buf: &mut [u8]) -> Result<usize, Errno> {
    // SAFETY: the kernel reads the NUL-terminated `path` and writes at most
    // `buf.len()` bytes into `buf`.
    check(unsafe {
        syscall4(
            k::__NR_readlinkat,
            dir as isize as usize,
            path.as_ptr() as usize,
            buf.as_mut_ptr() as usize,
            buf.len(),
        )
    })
}

/// `pidfd_open(pid, 0)`.
#[inline(always)]
pub(super) fn pidfd_open(pid: u32) -> Result<c_int, Errno> {
    // SAFETY: pidfd_open takes no pointer.
    check(unsafe { syscall4(k::__NR_pidfd_open, pid as usize, 0, 0, 0) }).map(|fd| fd as c_int)
}

/// `pidfd_send_signal(pidfd, sig, NULL, flags)`.
#[inline(always)]
pub(super) fn pidfd_send_signal(pidfd: c_int, sig: u32, flags: u32) -> Result<usize, Errno> {
    // SAFETY: no siginfo is passed; no other pointer.
    check(unsafe {
        syscall4(
            k::__NR_pidfd_send_signal,
            pidfd as usize,
            sig as usize,
            0,
            flags as usize,
        )
    })
}

/// `clock_gettime(CLOCK_MONOTONIC)` in nanoseconds.
#[inline(always)]
pub(super) fn monotonic_ns() -> Result<u64, Errno> {
    let mut ts = k::__kernel_timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: the kernel writes one timespec into `ts`, on this frame.
    check(unsafe {
        syscall4(
            k::__NR_clock_gettime,
            k::CLOCK_MONOTONIC as usize,
            &mut ts as *mut k::__kernel_timespec as usize,
            0,
            0,
        )
    })
    .map(|_| (ts.tv_sec as u64).saturating_mul(1_000_000_000) + ts.tv_nsec as u64)
}

/// The kernel's `struct iovec`: `len` bytes at address `base`.
#[repr(C)]
pub(super) struct Iovec {
    pub(super) base: usize,
    pub(super) len: usize,
}

/// The kernel's `struct msghdr` (no address: connected sockets only).
#[repr(C)]
pub(super) struct Msghdr {
    pub(super) name: usize,
    pub(super) namelen: u32,
    pub(super) iov: *mut Iovec,
    pub(super) iovlen: usize,
    pub(super) control: *mut u8,
    pub(super) controllen: usize,
    pub(super) flags: c_int,
}

/// `sendto(fd, buf, flags, NULL, 0)` on a connected socket.
#[inline(always)]
pub(super) fn send(fd: c_int, buf: &[u8], flags: u32) -> Result<usize, Errno> {
    // SAFETY: the kernel reads at most `buf.len()` bytes of `buf`; no
    // address.
    check(unsafe {
        syscall6(
            k::__NR_sendto,
            [
                fd as usize,
                buf.as_ptr() as usize,
                buf.len(),
                flags as usize,
                0,
                0,
            ],
        )
    })
}

/// `sendmsg(fd, hdr, flags)`.
///
/// # Safety
/// `hdr`'s iovecs and control buffer are valid for reading, of the
/// lengths it gives.
#[inline(always)]
pub(super) unsafe fn sendmsg(fd: c_int, hdr: &Msghdr, flags: u32) -> Result<usize, Errno> {
    // SAFETY: the kernel reads `hdr` and what it points to, as the caller
    // vouches.
    check(unsafe {
        syscall4(
            k::__NR_sendmsg,
            fd as usize,
            hdr as *const Msghdr as usize,
            flags as usize,
            0,
        )
    })
}

/// `recvmsg(fd, hdr, flags)`: bytes received (0: end of file).
///
/// # Safety
/// `hdr`'s iovecs and control buffer are valid for writing, of the
/// lengths it gives.
#[inline(always)]
pub(super) unsafe fn recvmsg(fd: c_int, hdr: &mut Msghdr, flags: u32) -> Result<usize, Errno> {
    // SAFETY: the kernel writes into what `hdr` points to, as the caller
    // vouches, and the lengths back into `hdr`.
    check(unsafe {
        syscall4(
            k::__NR_recvmsg,
            fd as usize,
            hdr as *mut Msghdr as usize,
            flags as usize,
            0,
        )
    })
}

/// `socketpair(domain, type, 0)`: the two ends.
#[inline(always)]
pub(super) fn socketpair(domain: u32, typ: u32) -> Result<[c_int; 2], Errno> {
    let mut pair = [0 as c_int; 2];
    // SAFETY: the kernel writes two ints into `pair`.
    check(unsafe {
        syscall4(
            k::__NR_socketpair,
            domain as usize,
            typ as usize,
            0,
            pair.as_mut_ptr() as usize,
        )
    })
    .map(|_| pair)
}

/// `setsockopt(fd, level, opt, &value, sizeof(int))`.
#[inline(always)]
pub(super) fn setsockopt_int(
    fd: c_int,
    level: u32,
    opt: u32,
    value: c_int,
) -> Result<usize, Errno> {
    // SAFETY: the kernel reads the int on this frame, its size given.
    check(unsafe {
        syscall6(
            k::__NR_setsockopt,
            [
                fd as usize,
                level as usize,
                opt as usize,
                &value as *const c_int as usize,
                std::mem::size_of::<c_int>(),
                0,
            ],
        )
    })
}

/// `waitid(P_PID, pid, info, flags)` without rusage: fills the 128 bytes of
/// a `siginfo_t`.
#[inline(always)]
pub(super) fn waitid(pid: u32, info: &mut [u8; 128], flags: u32) -> Result<usize, Errno> {
    // SAFETY: the kernel writes at most a siginfo_t (128 bytes) into `info`.
    check(unsafe {
        syscall6(
            k::__NR_waitid,
            [
                k::P_PID as usize,
                pid as usize,
                info.as_mut_ptr() as usize,
                flags as usize,
                0,
                0,
            ],
        )
    })
}

/// This process's `RLIMIT_NOFILE`: soft, hard.
#[inline(always)]
pub(super) fn nofile_limit() -> Result<[u64; 2], Errno> {
    let mut lim = [0u64; 2];
    // SAFETY: the kernel writes one rlimit64 (two u64) into `lim`.
    check(unsafe {
        syscall4(
            k::__NR_prlimit64,
            0,
            k::RLIMIT_NOFILE as usize,
            0,
            lim.as_mut_ptr() as usize,
        )
    })
    .map(|_| lim)
}

/// Sets this process's `RLIMIT_NOFILE` (soft, hard).
#[inline(always)]
pub(super) fn set_nofile_limit(lim: [u64; 2]) -> Result<usize, Errno> {
    // SAFETY: the kernel reads one rlimit64 (two u64) of `lim`.
    check(unsafe {
        syscall4(
            k::__NR_prlimit64,
            0,
            k::RLIMIT_NOFILE as usize,
            lim.as_ptr() as usize,
            0,
        )
    })
}

/// `mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS |
/// MAP_NORESERVE, -1, 0)`: a new zero-filled mapping, reserved and not
/// committed.
#[inline(always)]
pub(super) fn map_anonymous(len: usize) -> Result<*mut u8, Errno> {
    // SAFETY: a new anonymous mapping replaces no memory of ours (no
    // address is asked for); no pointer is passed.
    let p = unsafe {
        syscall6(
            k::__NR_mmap,
            [
                0,
                len,
                (k::PROT_READ | k::PROT_WRITE) as usize,
                (k::MAP_PRIVATE | k::MAP_ANONYMOUS | k::MAP_NORESERVE) as usize,
                usize::MAX, // fd -1
                0,
            ],
        )
    };
    // An address may be "negative" as an isize only within -4095..0 if
    // it is an error.
    if (-4095..0).contains(&p) {
        Err(Errno::from_ret(p))
    } else {
        Ok(p as usize as *mut u8)
    }
}

// The sandbox's calls (`super::sandbox`). UAPI values not in the
// linux-raw-sys modules this crate enables are spelled here.
const AT_RECURSIVE: usize = 0x8000;
const OPEN_TREE_CLONE: usize = 1;
const MOUNT_ATTR_RDONLY: u64 = 1;
const MOVE_MOUNT_F_EMPTY_PATH: usize = 4;
const LANDLOCK_RULE_PATH_BENEATH: usize = 1;
const SECCOMP_SET_MODE_FILTER: usize = 1;
const SECCOMP_FILTER_FLAG_NEW_LISTENER: usize = 1 << 3;

/// `unshare(flags)`.
#[inline(always)]
pub(super) fn unshare(flags: usize) -> Result<usize, Errno> {
    // SAFETY: unshare takes no pointer.
    check(unsafe { syscall4(k::__NR_unshare, flags, 0, 0, 0) })
}

/// `open_tree(AT_FDCWD, path, OPEN_TREE_CLONE | AT_RECURSIVE |
/// O_CLOEXEC)`: a detached copy of the mount tree at `path`.
#[inline(always)]
pub(super) fn open_tree(path: &CStr) -> Result<c_int, Errno> {
    // SAFETY: the kernel reads the NUL-terminated `path`.
    check(unsafe {
        syscall4(
            k::__NR_open_tree,
            k::AT_FDCWD as isize as usize,
            path.as_ptr() as usize,
            OPEN_TREE_CLONE | AT_RECURSIVE | k::O_CLOEXEC as usize,
            0,
        )
    })
    .map(|fd| fd as c_int)
}

/// `open_tree(dir, name, OPEN_TREE_CLONE | O_CLOEXEC)`: a detached bind
/// of `name` in `dir`.
#[inline(always)]
pub(super) fn open_tree_at(dir: c_int, name: &CStr) -> Result<c_int, Errno> {
    // SAFETY: the kernel reads the NUL-terminated `name`.
    check(unsafe {
        syscall4(
            k::__NR_open_tree,
            dir as isize as usize,
            name.as_ptr() as usize,
            OPEN_TREE_CLONE | k::O_CLOEXEC as usize,
            0,
        )
    })
    .map(|fd| fd as c_int)
}

/// `mount_setattr(AT_FDCWD, path, AT_RECURSIVE, {attr_set: RDONLY})`:
/// every mount at and under `path` read-only.
#[inline(always)]
pub(super) fn mount_setattr_rdonly(path: &CStr) -> Result<usize, Errno> {
    // struct mount_attr { attr_set, attr_clr, propagation, userns_fd }.
    let attr: [u64; 4] = [MOUNT_ATTR_RDONLY, 0, 0, 0];
    // SAFETY: the kernel reads the string and the 32-byte `attr`.
    check(unsafe {
        syscall6(
            k::__NR_mount_setattr,
            [
                k::AT_FDCWD as isize as usize,
                path.as_ptr() as usize,
                AT_RECURSIVE,
                attr.as_ptr() as usize,
                core::mem::size_of_val(&attr),
                0,
            ],
        )
    })
}

/// `move_mount(tree, "", AT_FDCWD, target, MOVE_MOUNT_F_EMPTY_PATH)`:
/// attaches the detached tree `tree` at `target`.
#[inline(always)]
pub(super) fn move_mount(tree: c_int, target: &CStr) -> Result<usize, Errno> {
    // SAFETY: the kernel reads the two NUL-terminated strings.
    check(unsafe {
        syscall6(
            k::__NR_move_mount,
            [
                tree as usize,
                c"".as_ptr() as usize,
                k::AT_FDCWD as isize as usize,
                target.as_ptr() as usize,
                MOVE_MOUNT_F_EMPTY_PATH,
                0,
            ],
        )
    })
}

/// `mount(source, target, fstype, flags, data)`.
#[inline(always)]
pub(super) fn mount_data(
    source: Option<&CStr>,
    target: &CStr,
    fstype: Option<&CStr>,
    flags: u32,
    data: &CStr,
) -> Result<usize, Errno> {
    let opt = |s: Option<&CStr>| s.map_or(0, |s| s.as_ptr() as usize);
    // SAFETY: the kernel reads the NUL-terminated strings.
    check(unsafe {
        syscall6(
            k::__NR_mount,
            [
                opt(source),
                target.as_ptr() as usize,
                opt(fstype),
                flags as usize,
                data.as_ptr() as usize,
                0,
            ],
        )
    })
}

/// `mkdirat(AT_FDCWD, path, mode)`.
#[inline(always)]
pub(super) fn mkdir(path: &CStr, mode: u32) -> Result<usize, Errno> {
    // SAFETY: the kernel reads the NUL-terminated `path`.
    check(unsafe {
        syscall4(
            k::__NR_mkdirat,
            k::AT_FDCWD as isize as usize,
            path.as_ptr() as usize,
            mode as usize,
            0,
        )
    })
}

/// `mknodat(AT_FDCWD, path, S_IFREG | mode, 0)`: an empty regular file
/// (a mount point for a bind of a file).
#[inline(always)]
pub(super) fn mknod_file(path: &CStr, mode: u32) -> Result<usize, Errno> {
    // SAFETY: the kernel reads the NUL-terminated `path`.
    check(unsafe {
        syscall4(
            k::__NR_mknodat,
            k::AT_FDCWD as isize as usize,
            path.as_ptr() as usize,
            (k::S_IFREG | mode) as usize,
            0,
        )
    })
}

/// `symlinkat(target, AT_FDCWD, path)`.
#[inline(always)]
pub(super) fn symlink(target: &CStr, path: &CStr) -> Result<usize, Errno> {
    // SAFETY: the kernel reads the two NUL-terminated strings.
    check(unsafe {
        syscall4(
            k::__NR_symlinkat,
            target.as_ptr() as usize,
            k::AT_FDCWD as isize as usize,
            path.as_ptr() as usize,
            0,
        )
    })
}

/// `socket(domain, type, 0)`.
#[inline(always)]
pub(super) fn socket(domain: u32, typ: u32) -> Result<c_int, Errno> {
    // SAFETY: socket takes no pointer.
    check(unsafe { syscall4(k::__NR_socket, domain as usize, typ as usize, 0, 0) })
        .map(|fd| fd as c_int)
}

/// `ioctl(fd, request, arg)` with a pointer argument.
///
/// # Safety
/// `arg` is what `request` expects (the kernel reads and may write it).
#[inline(always)]
pub(super) unsafe fn ioctl_ptr(fd: c_int, request: u32, arg: usize) -> Result<usize, Errno> {
    // SAFETY: as the caller promises.
    check(unsafe { syscall4(k::__NR_ioctl, fd as usize, request as usize, arg, 0) })
}

/// `prctl(option, arg2, 0, 0, 0)`.
#[inline(always)]
pub(super) fn prctl(option: u32, arg2: usize) -> Result<usize, Errno> {
    // SAFETY: the options used take no pointer.
    check(unsafe { syscall6(k::__NR_prctl, [option as usize, arg2, 0, 0, 0, 0]) })
}

/// `landlock_add_rule(ruleset, LANDLOCK_RULE_PATH_BENEATH, attr, 0)`.
///
/// # Safety
/// `attr` points to a `struct landlock_path_beneath_attr`.
#[inline(always)]
pub(super) unsafe fn landlock_add_rule_path(ruleset: c_int, attr: usize) -> Result<usize, Errno> {
    // SAFETY: as the caller promises.
    check(unsafe {
        syscall4(
            k::__NR_landlock_add_rule,
            ruleset as usize,
            LANDLOCK_RULE_PATH_BENEATH,
            attr,
            0,
        )
    })
}

/// `landlock_restrict_self(ruleset, 0)`.
#[inline(always)]
pub(super) fn landlock_restrict_self(ruleset: c_int) -> Result<usize, Errno> {
    // SAFETY: takes no pointer.
    check(unsafe { syscall4(k::__NR_landlock_restrict_self, ruleset as usize, 0, 0, 0) })
}

/// `seccomp(SECCOMP_SET_MODE_FILTER, 0, prog)`.
///
/// # Safety
/// `prog` points to a `struct sock_fprog` whose program stays valid for the
/// call.
#[inline(always)]
pub(super) unsafe fn seccomp_filter(prog: usize) -> Result<usize, Errno> {
    // SAFETY: as the caller promises.
    check(unsafe { syscall4(k::__NR_seccomp, SECCOMP_SET_MODE_FILTER, 0, prog, 0) })
}

/// `seccomp(SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER,
/// prog)`: installs the filter and returns its user-notification listener
/// (close-on-exec).
///
/// # Safety
/// `prog` points to a valid `struct sock_fprog` whose filter outlives the
/// call.
#[inline(always)]
pub(super) unsafe fn seccomp_filter_listener(prog: usize) -> Result<c_int, Errno> {
    // SAFETY: as the caller promises.
    check(unsafe {
        syscall4(
            k::__NR_seccomp,
            SECCOMP_SET_MODE_FILTER,
            SECCOMP_FILTER_FLAG_NEW_LISTENER,
            prog,
            0,
        )
    })
    .map(|fd| fd as c_int)
}

/// `sendmsg(sock, {one byte, SCM_RIGHTS: fd}, MSG_NOSIGNAL)`: hands the
/// descriptor `fd` to whoever reads the other end of `sock`.
#[inline(always)]
pub(super) fn send_fd(sock: c_int, fd: c_int) -> Result<usize, Errno> {
    // struct cmsghdr { size_t len; int level; int type; } then the int,
    // padded to 8 bytes: 24 bytes in all on 64-bit Linux.
    #[repr(C, align(8))]
    struct Cmsg {
        len: usize,
        level: c_int,
        typ: c_int,
        fd: c_int,
        _pad: c_int,
    }
    let byte = [0u8; 1];
    let iov: [usize; 2] = [byte.as_ptr() as usize, 1];
    let cmsg = Cmsg {
        len: 16 + 4, // CMSG_LEN(sizeof(int))
        level: libc::SOL_SOCKET,
        typ: libc::SCM_RIGHTS,
        fd,
        _pad: 0,
    };
    // struct msghdr { name, namelen, iov, iovlen, control, controllen,
    // flags }, as seven machine words (namelen and flags padded).
    let msg: [usize; 7] = [
        0,
        0,
        iov.as_ptr() as usize,
        1,
        &cmsg as *const Cmsg as usize,
        std::mem::size_of::<Cmsg>(),
        0,
    ];
    // SAFETY: the kernel reads `msg`, the iovec, the byte and the control
    // message, all on this stack.
    check(unsafe {
        syscall4(
            k::__NR_sendmsg,
            sock as usize,
            msg.as_ptr() as usize,
            libc::MSG_NOSIGNAL as usize,
            0,
        )
    })
}

/// `capset` with every set empty (version 3 header, this process).
#[inline(always)]
pub(super) fn capset_empty() -> Result<usize, Errno> {
    // struct __user_cap_header_struct { version, pid }.
    let header: [u32; 2] = [0x2008_0522, 0];
    // Two struct __user_cap_data_struct { effective, permitted, inheritable }.
    let data: [u32; 6] = [0; 6];
    // SAFETY: the kernel reads the 8-byte header and the 24 bytes of data.
    check(unsafe {
        syscall4(
            k::__NR_capset,
            header.as_ptr() as usize,
            data.as_ptr() as usize,
            0,
            0,
        )
    })
}
