//! The keeper: crash safety for the cgroup tier (Linux, x86_64 and
//! aarch64). A child module of `linux_spawn` (raw-syscall helpers).
//!
//! One small process per corral process, started on the first cgroup run:
//! a fork (clone3 without `CLONE_VM`, on a stack of its own, all signals
//! blocked, every handler reset) that never execs and issues only raw
//! system calls (no allocation, lock or TLS: it is a fork of a possibly
//! multithreaded host). It starts its own session (a `kill` of corral's
//! process group does not take it along), closes every descriptor but two —
//! a `SOCK_SEQPACKET` socket to the host and a pidfd of the host — and holds,
//! for every live cgroup run, the cgroup's directory descriptor and its
//! parent's, received with `SCM_RIGHTS`.
//!
//! When the host dies, by any cause (the pidfd becomes readable; the socket
//! reaching end of file is a second witness), the keeper writes `1` to
//! `cgroup.kill` of every cgroup it holds (the kernel kills every process in
//! it and below, and only those: a directory descriptor names one cgroup,
//! never a later one with the same name), removes the directories (deepest
//! first, retried for up to 2 s while the kill completes), and exits. A run
//! that ends normally unregisters (its descriptors are closed) before the
//! host moves kept leftovers out: a kept process is never killed by the
//! keeper. Up to [`SLOTS`] runs at once are held; a run beyond that is not
//! crash-safe (the registration says so).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::raw::c_int;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// prctl(2) option that names the calling thread.
const PR_SET_NAME: usize = 15;

use linux_raw_sys::errno as en;
use linux_raw_sys::general as k;

use super::raw::{clone3_with, errno_of, set_sigmask, syscall4, syscall6};
use super::stack::Stack;
use crate::sys::linux_proc::parse_stat;

/// Runs held at once.
const SLOTS: usize = 512;
/// Longest cgroup name carried.
const NAME_MAX: usize = 64;
const OP_ADD: u8 = 1;
const OP_DEL: u8 = 2;
/// A process-group or subreaper root: its pidfd, and its pid in the name
/// bytes (4 bytes).
const OP_ADD_ROOT: u8 = 3;
/// op, id (8 bytes), name length, name.
const MSG_LEN: usize = 1 + 8 + 1 + NAME_MAX;

#[repr(C)]
struct Iovec {
    base: usize,
    len: usize,
}

#[repr(C)]
struct Msghdr {
    name: usize,
    namelen: u32,
    iov: *mut Iovec,
    iovlen: usize,
    control: *mut u8,
    controllen: usize,
    flags: c_int,
}

const AF_UNIX: usize = 1;
const SOCK_SEQPACKET: usize = 5;
const SOL_SOCKET: c_int = 1;
const SCM_RIGHTS: c_int = 1;
const MSG_NOSIGNAL: usize = 0x4000;
const MSG_CMSG_CLOEXEC: usize = 0x4000_0000;
/// cmsghdr (len, level, type) then two descriptors.
const CMSG_HDR: usize = 16;
const CMSG_LEN2: usize = CMSG_HDR + 8;

struct Conn {
    sock: OwnedFd,
    /// The process that started this keeper: a fork of the host inherits
    /// the connection but must have a keeper of its own.
    owner: u32,
    /// Registrations this keeper holds now (at most [`SLOTS`]): a run past
    /// that is told at once that it is not crash-safe, and costs the
    /// keeper nothing (with 10,000 concurrent runs, sending every one to a
    /// keeper that can only drop it made the spawns wait on the keeper).
    live: usize,
}

static KEEPER: Mutex<Option<Conn>> = Mutex::new(None);
static NEXT: AtomicU64 = AtomicU64::new(1);

/// A cgroup registered with the keeper; dropping it unregisters.
pub(crate) struct Registration {
    id: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut msg = [0u8; MSG_LEN];
        msg[0] = OP_DEL;
        msg[1..9].copy_from_slice(&self.id.to_ne_bytes());
        let mut guard = KEEPER.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = guard.as_mut().filter(|c| c.owner == std::process::id()) {
            let _ = send(&c.sock, &msg, None);
            c.live = c.live.saturating_sub(1);
        }
    }
}

/// Hands the keeper the root of a process-group or subreaper run: if this
/// process dies while the root is alive, the keeper kills the root's
/// process group through the root's pidfd (`PIDFD_SIGNAL_PROCESS_GROUP`,
/// Linux 6.9; the root alone before), and only while the root still leads
/// its own group. Never a stranger: a reaped root's pidfd signals nothing.
pub(crate) fn register_root(pidfd: BorrowedFd<'_>, pid: u32) -> io::Result<Registration> {
    let mut msg = [0u8; MSG_LEN];
    msg[0] = OP_ADD_ROOT;
    msg[9] = 4;
    msg[10..14].copy_from_slice(&pid.to_ne_bytes());
    registered(msg, [pidfd.as_raw_fd(), -1])
}

/// Hands the keeper a cgroup to kill and remove if this process dies
/// before the run ends. `dir` is the cgroup's directory, `parent` the
/// directory it is in, `name` its name there.
pub(crate) fn register(
    dir: BorrowedFd<'_>,
    parent: &std::path::Path,
    name: &str,
) -> io::Result<Registration> {
    if name.len() > NAME_MAX {
        return Err(io::Error::other("cgroup name too long for the keeper"));
    }
    let parent = rustix::fs::open(
        parent,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?;
    let mut msg = [0u8; MSG_LEN];
    msg[0] = OP_ADD;
    msg[9] = name.len() as u8;
    msg[10..10 + name.len()].copy_from_slice(name.as_bytes());
    registered(msg, [dir.as_raw_fd(), parent.as_raw_fd()])
}

/// Test seam: with this environment variable set (non-empty), the keeper
/// "cannot be started" in this process, so tests can prove that the report
/// says the run is not crash-safe (and that a run requiring it fails).
pub(crate) const FAULT_START_ENV: &str = "CORRAL_TEST_FAIL_KEEPER";

/// Starts this process's keeper if it is not running yet: whether runs
/// can be made crash-safe here.
pub(crate) fn ensure() -> io::Result<()> {
    let mut guard = KEEPER.lock().unwrap_or_else(|e| e.into_inner());
    if guard
        .as_ref()
        .is_some_and(|c| c.owner != std::process::id())
    {
        drop(guard.take());
    }
    if guard.is_none() {
        *guard = Some(start()?);
    }
    Ok(())
}

fn registered(mut msg: [u8; MSG_LEN], fds: [c_int; 2]) -> io::Result<Registration> {
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    msg[1..9].copy_from_slice(&id.to_ne_bytes());
    let mut guard = KEEPER.lock().unwrap_or_else(|e| e.into_inner());
    if guard
        .as_ref()
        .is_some_and(|c| c.owner != std::process::id())
    {
        // Inherited through a fork: the parent's keeper, not ours.
        drop(guard.take());
    }
    if guard.as_ref().is_some_and(|c| c.live >= SLOTS) {
        return Err(io::Error::other(format!(
            "the keeper already holds {SLOTS} runs: this one is not crash-safe"
        )));
    }
    for _ in 0..2 {
        if guard.is_none() {
            *guard = Some(start()?);
        }
        if let Some(c) = guard.as_mut() {
            match send(&c.sock, &msg, Some(fds)) {
                Ok(()) => {
                    c.live += 1;
                    return Ok(Registration { id });
                }
                // The keeper is gone (it should not be): start another.
                Err(e)
                    if e.raw_os_error() == Some(en::EPIPE as i32)
                        || e.raw_os_error() == Some(en::ECONNRESET as i32) =>
                {
                    *guard = None;
                }
                Err(e) => return Err(e),
            }
        }
    }
    Err(io::Error::other("the keeper could not be started"))
}

fn send(sock: &OwnedFd, msg: &[u8], fds: Option<[c_int; 2]>) -> io::Result<()> {
    let mut iov = Iovec {
        base: msg.as_ptr() as usize,
        len: msg.len(),
    };
    let mut control = [0u8; CMSG_LEN2];
    let mut hdr = Msghdr {
        name: 0,
        namelen: 0,
        iov: &mut iov,
        iovlen: 1,
        control: std::ptr::null_mut(),
        controllen: 0,
        flags: 0,
    };
    if let Some(fds) = fds {
        let n = if fds[1] < 0 { 1 } else { 2 };
        let len = CMSG_HDR + 4 * n;
        control[0..8].copy_from_slice(&(len as u64).to_ne_bytes());
        control[8..12].copy_from_slice(&SOL_SOCKET.to_ne_bytes());
        control[12..16].copy_from_slice(&SCM_RIGHTS.to_ne_bytes());
        control[16..20].copy_from_slice(&fds[0].to_ne_bytes());
        control[20..24].copy_from_slice(&fds[1].to_ne_bytes());
        hdr.control = control.as_mut_ptr();
        // CMSG_SPACE: the length rounded up to 8.
        hdr.controllen = len.div_ceil(8) * 8;
    }
    loop {
        // SAFETY: `hdr` describes `msg` and `control`, both alive and of
        // the lengths given; the socket is ours.
        let r = unsafe {
            syscall4(
                k::__NR_sendmsg,
                sock.as_raw_fd() as usize,
                &hdr as *const Msghdr as usize,
                MSG_NOSIGNAL,
                0,
            )
        };
        if r >= 0 {
            return Ok(());
        }
        if errno_of(r) != en::EINTR as i32 {
            return Err(io::Error::from_raw_os_error(errno_of(r)));
        }
    }
}

/// Starts the keeper; returns the host's end of the socket.
fn start() -> io::Result<Conn> {
    if std::env::var_os(FAULT_START_ENV).is_some_and(|v| !v.is_empty()) {
        return Err(io::Error::other(format!(
            "the keeper could not be started ({FAULT_START_ENV} is set)"
        )));
    }
    let mut pair = [0 as c_int; 2];
    // SAFETY: `pair` is two writable ints.
    let r = unsafe {
        syscall4(
            k::__NR_socketpair,
            AF_UNIX,
            SOCK_SEQPACKET | k::O_CLOEXEC as usize,
            0,
            pair.as_mut_ptr() as usize,
        )
    };
    if r < 0 {
        return Err(io::Error::from_raw_os_error(errno_of(r)));
    }
    // SAFETY: socketpair just returned these two descriptors; we own them.
    let (ours, theirs) = unsafe { (OwnedFd::from_raw_fd(pair[0]), OwnedFd::from_raw_fd(pair[1])) };
    let host = rustix::process::pidfd_open(
        rustix::process::getpid(),
        rustix::process::PidfdFlags::empty(),
    )?;
    let args = KeeperArgs {
        sock: theirs.as_raw_fd(),
        host: host.as_raw_fd(),
    };
    let stack = Stack::with_size(256 * 1024)?;
    let (low, size) = stack.usable();
    let mut cargs = k::clone_args {
        flags: k::CLONE_CLEAR_SIGHAND,
        pidfd: 0,
        child_tid: 0,
        parent_tid: 0,
        // No SIGCHLD to the host when the keeper ends (it ends when the
        // host does).
        exit_signal: 0,
        stack: low,
        stack_size: size,
        tls: 0,
        set_tid: 0,
        set_tid_size: 0,
        cgroup: 0,
    };
    let all: u64 = !0;
    let mut old: u64 = 0;
    // SAFETY: a writable sigset; restored right after the clone.
    let r = unsafe { set_sigmask(&all, &mut old) };
    if r < 0 {
        return Err(io::Error::from_raw_os_error(errno_of(r)));
    }
    // SAFETY: no CLONE_VM: the child runs `keeper_main` on its own copy of
    // `stack` and of `args`, with every signal blocked and every handler
    // reset, and never returns.
    let ret = unsafe {
        clone3_with(
            &mut cargs,
            keeper_main,
            &args as *const KeeperArgs as *const std::ffi::c_void,
        )
    };
    // SAFETY: restores the saved mask.
    unsafe {
        set_sigmask(&old, std::ptr::null_mut());
    }
    drop(stack);
    drop(theirs);
    drop(host);
    if ret < 0 {
        return Err(io::Error::from_raw_os_error(errno_of(ret)));
    }
    Ok(Conn {
        sock: ours,
        owner: std::process::id(),
        live: 0,
    })
}

#[repr(C)]
struct KeeperArgs {
    sock: c_int,
    host: c_int,
}

#[derive(Clone, Copy)]
struct Slot {
    id: u64,
    dir: c_int,
    parent: c_int,
    name_len: usize,
    name: [u8; NAME_MAX + 1],
    /// `dir` is a root's pidfd (its pid in `name[0..4]`), not a cgroup.
    root: bool,
}

extern "C" fn keeper_main(arg: *const std::ffi::c_void) -> ! {
    // SAFETY: `arg` points to this process's own copy of `KeeperArgs`.
    unsafe { keeper(&*(arg as *const KeeperArgs)) }
}

/// # Safety
/// Only in the keeper child.
#[inline(never)]
unsafe fn keeper(a: &KeeperArgs) -> ! {
    // SAFETY: (the whole body) raw syscalls on this process's own memory, with
    // sizes the kernel expects; no allocation, lock, TLS or panic path
    // (every index is checked against a constant bound).
    unsafe {
        let name = b"corral-keeper\0";
        syscall4(k::__NR_prctl, PR_SET_NAME, name.as_ptr() as usize, 0, 0);
        syscall4(k::__NR_setsid, 0, 0, 0, 0);
        // Keep only the socket and the pidfd.
        let (lo, hi) = if a.sock < a.host {
            (a.sock, a.host)
        } else {
            (a.host, a.sock)
        };
        if lo > 0 {
            close_range_or_loop(0, lo as usize - 1);
        }
        if hi > lo + 1 {
            close_range_or_loop(lo as usize + 1, hi as usize - 1);
        }
        close_range_or_loop(hi as usize + 1, u32::MAX as usize);

        let empty = Slot {
            id: 0,
            dir: -1,
            parent: -1,
            name_len: 0,
            name: [0; NAME_MAX + 1],
            root: false,
        };
        let mut slots = [empty; SLOTS];
        #[repr(C)]
        struct PollFd {
            fd: c_int,
            events: i16,
            revents: i16,
        }
        loop {
            let mut fds = [
                PollFd {
                    fd: a.sock,
                    events: k::POLLIN as i16,
                    revents: 0,
                },
                PollFd {
                    fd: a.host,
                    events: k::POLLIN as i16,
                    revents: 0,
                },
            ];
            let r = syscall6(k::__NR_ppoll, [fds.as_mut_ptr() as usize, 2, 0, 0, 8, 0]);
            if r < 0 && r != -(en::EINTR as isize) {
                break;
            }
            if fds[1].revents != 0 {
                break; // the host died
            }
            if fds[0].revents == 0 {
                continue;
            }
            let mut msg = [0u8; MSG_LEN];
            let mut control = [0u8; 64];
            let mut iov = Iovec {
                base: msg.as_mut_ptr() as usize,
                len: MSG_LEN,
            };
            let mut hdr = Msghdr {
                name: 0,
                namelen: 0,
                iov: &mut iov,
                iovlen: 1,
                control: control.as_mut_ptr(),
                controllen: control.len(),
                flags: 0,
            };
            let n = syscall4(
                k::__NR_recvmsg,
                a.sock as usize,
                &mut hdr as *mut Msghdr as usize,
                MSG_CMSG_CLOEXEC,
                0,
            );
            if n == -(en::EINTR as isize) || n == -(en::EAGAIN as isize) {
                continue;
            }
            if n <= 0 {
                break; // end of file: the host closed its end (it died)
            }
            // Descriptors that came with the message.
            let mut got = [-1 as c_int; 2];
            if hdr.controllen >= CMSG_LEN2 {
                let level = i32::from_ne_bytes([control[8], control[9], control[10], control[11]]);
                let typ = i32::from_ne_bytes([control[12], control[13], control[14], control[15]]);
                if level == SOL_SOCKET && typ == SCM_RIGHTS {
                    got[0] =
                        i32::from_ne_bytes([control[16], control[17], control[18], control[19]]);
                    got[1] =
                        i32::from_ne_bytes([control[20], control[21], control[22], control[23]]);
                }
            }
            let id = u64::from_ne_bytes([
                msg[1], msg[2], msg[3], msg[4], msg[5], msg[6], msg[7], msg[8],
            ]);
            let mut placed = false;
            let complete = got[0] >= 0 && (got[1] >= 0 || msg[0] == OP_ADD_ROOT);
            if (msg[0] == OP_ADD || msg[0] == OP_ADD_ROOT) && complete {
                let mut i = 0;
                while i < SLOTS {
                    if slots[i].dir < 0 {
                        let len = (msg[9] as usize).min(NAME_MAX);
                        let mut j = 0;
                        while j < len {
                            slots[i].name[j] = msg[10 + j];
                            j += 1;
                        }
                        slots[i].name[len] = 0;
                        slots[i].name_len = len;
                        slots[i].id = id;
                        slots[i].dir = got[0];
                        slots[i].parent = got[1];
                        slots[i].root = msg[0] == OP_ADD_ROOT;
                        placed = true;
                        break;
                    }
                    i += 1;
                }
            } else if msg[0] == OP_DEL {
                let mut i = 0;
                while i < SLOTS {
                    if slots[i].dir >= 0 && slots[i].id == id {
                        syscall4(k::__NR_close, slots[i].dir as usize, 0, 0, 0);
                        if slots[i].parent >= 0 {
                            syscall4(k::__NR_close, slots[i].parent as usize, 0, 0, 0);
                        }
                        slots[i].dir = -1;
                        slots[i].parent = -1;
                        break;
                    }
                    i += 1;
                }
            }
            if !placed {
                let mut j = 0;
                while j < 2 {
                    if got[j] >= 0 {
                        syscall4(k::__NR_close, got[j] as usize, 0, 0, 0);
                    }
                    j += 1;
                }
            }
        }

        // The host is gone: kill every held tree, then remove the cgroups.
        let mut i = 0;
        while i < SLOTS {
            if slots[i].dir >= 0 && slots[i].root {
                let pid = u32::from_ne_bytes([
                    slots[i].name[0],
                    slots[i].name[1],
                    slots[i].name[2],
                    slots[i].name[3],
                ]);
                kill_root(slots[i].dir, pid);
                slots[i].dir = -1;
            }
            i += 1;
        }
        let kill = b"cgroup.kill\0";
        let mut i = 0;
        while i < SLOTS {
            if slots[i].dir >= 0 {
                let fd = syscall4(
                    k::__NR_openat,
                    slots[i].dir as usize,
                    kill.as_ptr() as usize,
                    (k::O_WRONLY | k::O_CLOEXEC) as usize,
                    0,
                );
                if fd >= 0 {
                    let one = b"1";
                    syscall4(k::__NR_write, fd as usize, one.as_ptr() as usize, 1, 0);
                    syscall4(k::__NR_close, fd as usize, 0, 0, 0);
                }
            }
            i += 1;
        }
        // Remove: retried every 2 ms for up to 2 s (the kill completes
        // asynchronously; a populated cgroup cannot be removed).
        let mut round = 0;
        while round < 1000 {
            let mut left = false;
            let mut i = 0;
            while i < SLOTS {
                if slots[i].dir >= 0 {
                    remove_below(slots[i].dir, 0);
                    let r = syscall4(
                        k::__NR_unlinkat,
                        slots[i].parent as usize,
                        slots[i].name.as_ptr() as usize,
                        k::AT_REMOVEDIR as usize,
                        0,
                    );
                    if r == 0 || r == -(en::ENOENT as isize) {
                        slots[i].dir = -1;
                    } else {
                        left = true;
                    }
                }
                i += 1;
            }
            if !left {
                break;
            }
            let ts: [i64; 2] = [0, 2_000_000];
            syscall4(k::__NR_nanosleep, ts.as_ptr() as usize, 0, 0, 0);
            round += 1;
        }
        loop {
            syscall4(k::__NR_exit_group, 0, 0, 0, 0);
        }
    }
}

/// SIGKILLs a root's process group through its pidfd when the root still
/// leads its own group, else the root alone. A root that was reaped (its
/// pid possibly reused, so /proc may describe a stranger) makes the pidfd
/// signal fail with ESRCH: nothing outside the tree is ever hit.
///
/// # Safety
/// In the keeper only.
unsafe fn kill_root(pidfd: c_int, pid: u32) {
    const PIDFD_SIGNAL_PROCESS_GROUP: usize = 1 << 2;
    // SAFETY: raw syscalls on this frame's buffers.
    unsafe {
        // "/proc/<pid>/stat" without allocation.
        let mut path = [0u8; 32];
        let prefix = b"/proc/";
        let mut n = 0;
        while n < prefix.len() {
            path[n] = prefix[n];
            n += 1;
        }
        let mut digits = [0u8; 10];
        let mut d = 0;
        let mut v = pid;
        loop {
            digits[d] = b'0' + (v % 10) as u8;
            d += 1;
            v /= 10;
            if v == 0 || d >= digits.len() {
                break;
            }
        }
        while d > 0 {
            d -= 1;
            path[n] = digits[d];
            n += 1;
        }
        let suffix = b"/stat\0";
        let mut j = 0;
        while j < suffix.len() && n < path.len() {
            path[n] = suffix[j];
            n += 1;
            j += 1;
        }
        let mut leads = false;
        let fd = syscall4(
            k::__NR_openat,
            k::AT_FDCWD as isize as usize,
            path.as_ptr() as usize,
            (k::O_RDONLY | k::O_CLOEXEC) as usize,
            0,
        );
        if fd >= 0 {
            let mut buf = [0u8; 1024];
            let r = syscall4(
                k::__NR_read,
                fd as usize,
                buf.as_mut_ptr() as usize,
                buf.len(),
                0,
            );
            syscall4(k::__NR_close, fd as usize, 0, 0, 0);
            if r > 0 {
                let len = (r as usize).min(buf.len());
                // The shared parser allocates nothing.
                leads = parse_stat(pid, &buf[..len]).is_some_and(|s| s.pgrp == pid);
            }
        }
        if leads {
            let r = syscall4(
                k::__NR_pidfd_send_signal,
                pidfd as usize,
                k::SIGKILL as usize,
                0,
                PIDFD_SIGNAL_PROCESS_GROUP,
            );
            if r == 0 {
                return;
            }
        }
        syscall4(
            k::__NR_pidfd_send_signal,
            pidfd as usize,
            k::SIGKILL as usize,
            0,
            0,
        );
    }
}

/// Removes the cgroups below the directory `dir` (deepest first, up to
/// depth 8). Best effort.
///
/// # Safety
/// In the keeper only.
unsafe fn remove_below(dir: c_int, depth: u32) {
    if depth > 8 {
        return;
    }
    // SAFETY: raw syscalls on this frame's buffers.
    unsafe {
        // A fresh descriptor: getdents reads from its own offset.
        let dot = b".\0";
        let d = syscall4(
            k::__NR_openat,
            dir as usize,
            dot.as_ptr() as usize,
            (k::O_RDONLY | k::O_DIRECTORY | k::O_CLOEXEC) as usize,
            0,
        );
        if d < 0 {
            return;
        }
        let mut buf = [0u8; 2048];
        loop {
            let n = syscall4(
                k::__NR_getdents64,
                d as usize,
                buf.as_mut_ptr() as usize,
                buf.len(),
                0,
            );
            if n <= 0 {
                break;
            }
            let n = n as usize;
            let mut off = 0usize;
            // linux_dirent64: ino u64, off i64, reclen u16, type u8, name.
            while off + 19 < n && off + 19 < buf.len() {
                let reclen = u16::from_ne_bytes([buf[off + 16], buf[off + 17]]) as usize;
                if reclen == 0 {
                    break;
                }
                let typ = buf[off + 18];
                let name = buf.as_ptr().add(off + 19);
                let is_dot = *name == b'.'
                    && (*name.add(1) == 0 || (*name.add(1) == b'.' && *name.add(2) == 0));
                if typ == 4 && !is_dot {
                    let sub = syscall4(
                        k::__NR_openat,
                        d as usize,
                        name as usize,
                        (k::O_RDONLY | k::O_DIRECTORY | k::O_CLOEXEC) as usize,
                        0,
                    );
                    if sub >= 0 {
                        remove_below(sub as c_int, depth + 1);
                        syscall4(k::__NR_close, sub as usize, 0, 0, 0);
                    }
                    syscall4(
                        k::__NR_unlinkat,
                        d as usize,
                        name as usize,
                        k::AT_REMOVEDIR as usize,
                        0,
                    );
                }
                off += reclen;
            }
        }
        syscall4(k::__NR_close, d as usize, 0, 0, 0);
    }
}

/// # Safety
/// In the keeper only.
unsafe fn close_range_or_loop(from: usize, to: usize) {
    if from > to {
        return;
    }
    // SAFETY: close_range/close take no pointer.
    unsafe {
        if syscall4(k::__NR_close_range, from, to, 0, 0) < 0 {
            let mut f = from;
            while f <= to && f < 4096 {
                syscall4(k::__NR_close, f, 0, 0, 0);
                f += 1;
            }
        }
    }
}
