//! The keeper process itself: a fork of the host that never execs, holds
//! the runs the host registers and, when the host dies, kills and removes
//! them. It issues only raw system calls (no allocation, lock or TLS).

use std::os::raw::c_int;

use linux_raw_sys::errno as en;
use linux_raw_sys::general as k;

use super::protocol::{
    received_fds, Iovec, Message, Msghdr, MSG_CMSG_CLOEXEC, MSG_DONTWAIT, MSG_LEN, MSG_NOSIGNAL,
    NAME_MAX, OP_ADD, OP_ADD_MEMBER, OP_ADD_ROOT, OP_COOKIE, OP_DEL, OP_HELLO, OP_PARENT,
};
use super::{MAX_SLOTS, RESERVE_FDS};
use crate::sys::linux_spawn::raw::{exit_now, syscall4, syscall6};

/// prctl(2) option that names the calling thread.
const PR_SET_NAME: usize = 15;
/// The keeper's nap after reading its queue (see the serve loop).
const KEEPER_NAP_NS: i64 = 2_000_000;
/// How often the keeper of a one-shot host reads its queue while the host
/// lives (see the serve loop): a full queue blocks the host's `sendmsg` at
/// most this long (plus the keeper's scheduling), well within `send`'s
/// patience for descriptors in flight.
pub(super) const LAZY_PERIOD_NS: i64 = 50_000_000;

#[repr(C)]
pub(super) struct KeeperArgs {
    pub(super) sock: c_int,
    pub(super) host: c_int,
    /// Test seam ([`START_DELAY_ENV`]): how long the keeper sleeps before
    /// anything else (0: not at all).
    pub(super) delay_ms: u32,
    /// The host is a one-shot process (`corral::one_shot_process`): the
    /// keeper is not woken by each message but reads its queue every
    /// [`LAZY_PERIOD_NS`] and when the host dies (see the serve loop).
    pub(super) lazy: bool,
}

/// What a slot of the keeper's table holds (0: nothing, so a fresh
/// anonymous mapping is an empty table).
const EMPTY: u8 = 0;
/// A cgroup: `fd` is its directory, `parent` the slot of the directory it
/// is in, `name` its name there.
const CGROUP: u8 = 1;
/// A root: `fd` is its pidfd, its pid in `name[0..4]`.
const ROOT: u8 = 2;
/// A directory cgroups are in: `fd`.
const PARENT: u8 = 3;
/// A tree's cookie, in `name` (no descriptor: `fd` is -1).
const COOKIE: u8 = 4;
/// A member outside the root's group: `fd` is its pidfd.
const MEMBER: u8 = 5;

#[repr(C)]
struct Slot {
    id: u64,
    fd: c_int,
    parent: u32,
    kind: u8,
    name: [u8; NAME_MAX + 1],
}

const _: () = assert!(std::mem::size_of::<Slot>() == 88);

pub(super) extern "C" fn keeper_main(arg: *const std::ffi::c_void) -> ! {
    // SAFETY: `arg` points to this process's own copy of `KeeperArgs`.
    unsafe { keeper(&*(arg as *const KeeperArgs)) }
}

/// The keeper's table: `len` slots at `base`, an anonymous mapping made by
/// the keeper itself (reserved, not committed: a page is only used once a
/// slot in it is). `high` is one past the highest slot ever filled.
struct Table {
    base: *mut Slot,
    len: usize,
    high: usize,
    /// Where the cookie slots start (half of `len`), and one past the
    /// highest cookie slot ever filled.
    half: usize,
    cookie_high: usize,
}

impl Table {
    /// The slot at `i`, if there is one.
    ///
    /// # Safety
    /// In the keeper only; no other reference to the slot is alive.
    #[allow(clippy::mut_from_ref)]
    unsafe fn at(&self, i: usize) -> Option<&mut Slot> {
        if i < self.len {
            // SAFETY: `i` is within the mapping, which is readable and
            // writable and zero-filled (a valid `Slot`); the keeper is one
            // thread and the caller holds no other reference to it.
            Some(unsafe { &mut *self.base.add(i) })
        } else {
            None
        }
    }
}

/// Raises the keeper's soft descriptor limit to its hard one and maps its
/// table: one slot per descriptor it can hold beyond the socket, the host's
/// pidfd and [`RESERVE_FDS`] (at most [`MAX_SLOTS`]); fewer if the mapping
/// cannot be made that large, none if it cannot be made at all (the host
/// then registers nothing, and says so).
///
/// # Safety
/// In the keeper only.
unsafe fn make_table() -> Table {
    // SAFETY: prlimit64 and mmap on this frame's buffers; no pointer is
    // kept but the new mapping's.
    unsafe {
        let mut lim = [0u64; 2];
        let mut usable = 0u64;
        if syscall4(
            k::__NR_prlimit64,
            0,
            k::RLIMIT_NOFILE as usize,
            0,
            lim.as_mut_ptr() as usize,
        ) == 0
        {
            usable = lim[0];
            if lim[1] > lim[0] {
                let raised = [lim[1], lim[1]];
                if syscall4(
                    k::__NR_prlimit64,
                    0,
                    k::RLIMIT_NOFILE as usize,
                    raised.as_ptr() as usize,
                    0,
                ) == 0
                {
                    usable = lim[1];
                }
            }
        }
        let len = (usable.saturating_sub(2 + RESERVE_FDS) as usize).min(MAX_SLOTS);
        let mut table = Table {
            base: std::ptr::null_mut(),
            len: 0,
            high: 0,
            half: 0,
            cookie_high: 0,
        };
        // Where the mapping cannot be reserved (strict overcommit, a low
        // RLIMIT_AS), a smaller table: half as many slots each time.
        let mut len = len;
        // Twice: as many cookie slots (no descriptor) again.
        while len > 0 {
            let p = syscall6(
                k::__NR_mmap,
                [
                    0,
                    2 * len * std::mem::size_of::<Slot>(),
                    (k::PROT_READ | k::PROT_WRITE) as usize,
                    (k::MAP_PRIVATE | k::MAP_ANONYMOUS | k::MAP_NORESERVE) as usize,
                    usize::MAX, // fd -1
                    0,
                ],
            );
            if !(-4095..0).contains(&p) {
                table.base = p as usize as *mut Slot;
                table.len = 2 * len;
                table.half = len;
                table.cookie_high = len;
                break;
            }
            len /= 2;
        }
        table
    }
}

/// The keeper's life, as steps: detach from the host, map the table and
/// say how many slots it has, hold what the host sends until it dies, then
/// kill every held tree and remove the cgroups.
///
/// # Safety
/// Only in the keeper child.
#[inline(never)]
unsafe fn keeper(a: &KeeperArgs) -> ! {
    // SAFETY: each step is called in the keeper child, its only thread,
    // on this process's own memory (no allocation, lock, TLS or panic
    // path; every slot index is checked against the table's length).
    unsafe {
        detach(a);
        let mut table = make_table();
        send_hello(a.sock, &table);
        serve_until_host_dies(a, &mut table);
        kill_held(&table);
        remove_cgroups(&table);
        exit_now(0)
    }
}

/// Sleeps the test delay, if any, takes the keeper's name, starts its own
/// session and closes every descriptor but the socket and the host's pidfd.
///
/// # Safety
/// In the keeper only.
unsafe fn detach(a: &KeeperArgs) {
    // SAFETY: nanosleep reads a timespec of this frame, prctl a
    // NUL-terminated name of static memory; setsid and the closes take no
    // pointer (the descriptors closed are the keeper's own copies).
    unsafe {
        if a.delay_ms > 0 {
            nap(
                i64::from(a.delay_ms / 1000),
                i64::from(a.delay_ms % 1000) * 1_000_000,
            );
        }
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
    }
}

/// `nanosleep` for `sec` seconds and `nsec` nanoseconds (an interrupted
/// sleep is not resumed).
///
/// # Safety
/// In the keeper only.
unsafe fn nap(sec: i64, nsec: i64) {
    let ts = k::__kernel_timespec {
        tv_sec: sec,
        tv_nsec: nsec,
    };
    // SAFETY: nanosleep reads the timespec on this frame; no remainder is
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

/// Tells the host the table's capacity, in the keeper's first message.
///
/// # Safety
/// In the keeper only.
unsafe fn send_hello(sock: c_int, table: &Table) {
    let mut hello = Message::new(OP_HELLO);
    // Slots past the first half hold cookies (no descriptor).
    hello.slot = (table.len / 2) as u32;
    let hello = hello.encode();
    // SAFETY: sendto reads the `MSG_LEN` bytes of `hello`, on this frame.
    unsafe {
        syscall6(
            k::__NR_sendto,
            [
                sock as usize,
                hello.as_ptr() as usize,
                MSG_LEN,
                MSG_NOSIGNAL,
                0,
                0,
            ],
        );
    }
}

/// The kernel's `struct pollfd`.
#[repr(C)]
struct PollFd {
    fd: c_int,
    events: i16,
    revents: i16,
}

/// Holds what the host sends until the host dies (its pidfd is readable,
/// the socket reaches end of file) or the poll fails; every message queued
/// by then is read first: a run that was told it is crash-safe is.
///
/// # Safety
/// In the keeper only.
unsafe fn serve_until_host_dies(a: &KeeperArgs, table: &mut Table) {
    loop {
        // A one-shot host's keeper is not woken by each message: it
        // sleeps until the host dies (its pidfd; the socket's hang-up
        // too) or its period ends, then reads everything queued. A
        // run of `true` then costs the host no wake-up of the keeper
        // (a wake-up that, on a loaded machine, can take the CPU from
        // the host), and nothing is lost: queued registrations are
        // read before the keeper acts, as after its nap below.
        let mut fds = [
            PollFd {
                fd: a.sock,
                events: if a.lazy { 0 } else { k::POLLIN as i16 },
                revents: 0,
            },
            PollFd {
                fd: a.host,
                events: k::POLLIN as i16,
                revents: 0,
            },
        ];
        // Rebuilt each round: ppoll writes the time left back.
        let period = k::__kernel_timespec {
            tv_sec: 0,
            tv_nsec: LAZY_PERIOD_NS,
        };
        let timeout = if a.lazy {
            &period as *const k::__kernel_timespec as usize
        } else {
            0
        };
        // SAFETY: ppoll reads and writes the two pollfds and the timespec
        // on this frame (or waits without a timeout); no signal mask.
        let r = unsafe {
            syscall6(
                k::__NR_ppoll,
                [fds.as_mut_ptr() as usize, 2, timeout, 0, 8, 0],
            )
        };
        if r < 0 && r != -(en::EINTR as isize) {
            return;
        }
        let host_gone = fds[1].revents != 0;
        let period_over = a.lazy && r == 0;
        if fds[0].revents == 0 && !host_gone && !period_over {
            continue;
        }
        // SAFETY: in the keeper.
        if !unsafe { read_queue(a.sock, table) } || host_gone {
            return; // end of file (the host closed its end: it died), or its pidfd said so
        }
        if a.lazy {
            continue; // the period is its nap
        }
        // A short nap before looking again: a busy host's messages
        // (two a process-group run) are then read in batches, not with
        // a wake-up each, which took CPU from the host's next run. A
        // message waits at most this long; the host's death is seen at
        // most this late, and its queued messages are still read first.
        // SAFETY: in the keeper.
        unsafe { nap(0, KEEPER_NAP_NS) };
    }
}

/// Applies every message waiting in the socket; `false` at end of file
/// (the host closed its end: it died).
///
/// # Safety
/// In the keeper only.
unsafe fn read_queue(sock: c_int, table: &mut Table) -> bool {
    loop {
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
        // SAFETY: recvmsg writes at most `MSG_LEN` bytes into `msg` and 64
        // into `control`, both on this frame, as `hdr` (also here) says.
        let n = unsafe {
            syscall4(
                k::__NR_recvmsg,
                sock as usize,
                &mut hdr as *mut Msghdr as usize,
                MSG_CMSG_CLOEXEC | MSG_DONTWAIT,
                0,
            )
        };
        // ECONNRESET: the host died with a message of the keeper's
        // (its first) unread, which the kernel reports once, before
        // the messages still queued here: read on, they count.
        if n == -(en::EINTR as isize) || n == -(en::ECONNRESET as isize) {
            continue;
        }
        if n == -(en::EAGAIN as isize) {
            return true;
        }
        if n <= 0 {
            return false;
        }
        // SAFETY: in the keeper.
        unsafe { serve(table, &Message::decode(&msg), &control, hdr.controllen) };
    }
}

/// What a slot holds after message `op`: [`EMPTY`] for a removal (or an
/// unknown kind).
fn kind_of(op: u8) -> u8 {
    match op {
        OP_ADD => CGROUP,
        OP_ADD_ROOT => ROOT,
        OP_PARENT => PARENT,
        OP_COOKIE => COOKIE,
        OP_ADD_MEMBER => MEMBER,
        _ => EMPTY,
    }
}

/// Applies one message from the host to the table: the descriptor that
/// came with it is held in the slot the host chose, or closed.
///
/// # Safety
/// In the keeper only.
unsafe fn serve(table: &mut Table, msg: &Message, control: &[u8; 64], controllen: usize) {
    // The descriptors that came with the message (the host sends at most
    // one; any other is closed).
    let mut got: c_int = -1;
    for fd in received_fds(control, controllen) {
        if got < 0 {
            got = fd;
        } else {
            // SAFETY: in the keeper, a descriptor it just received.
            unsafe { close(fd) };
        }
    }
    let slot = msg.slot as usize;
    let kind = kind_of(msg.op);
    if msg.op == OP_DEL {
        // SAFETY: in the keeper; the slot is bounds-checked.
        if let Some(s) = unsafe { table.at(slot) } {
            if (s.kind == CGROUP || s.kind == ROOT || s.kind == COOKIE || s.kind == MEMBER)
                && s.id == msg.id
            {
                if s.fd >= 0 {
                    // SAFETY: the slot's own descriptor, closed once.
                    unsafe { close(s.fd) };
                }
                s.kind = EMPTY;
            }
        }
    } else if kind != EMPTY && (got >= 0 || kind == COOKIE) {
        // SAFETY: in the keeper.
        if unsafe { hold(table, slot, kind, msg, got) } {
            got = -1;
        }
    }
    if got >= 0 {
        // SAFETY: a descriptor received and not held.
        unsafe { close(got) };
    }
}

/// Puts what `msg` registers (of `kind`, with descriptor `fd` or -1) in
/// `slot`; `false` if the table has no such slot.
///
/// # Safety
/// In the keeper only.
unsafe fn hold(table: &mut Table, slot: usize, kind: u8, msg: &Message, fd: c_int) -> bool {
    // SAFETY: in the keeper; the slot is bounds-checked.
    let Some(s) = (unsafe { table.at(slot) }) else {
        return false;
    };
    if s.kind != EMPTY && s.fd >= 0 {
        // Not given back first (the host never does this).
        // SAFETY: the slot's own descriptor, replaced.
        unsafe { close(s.fd) };
    }
    let len = msg.name_len as usize;
    let mut j = 0;
    while j < len && j < NAME_MAX {
        s.name[j] = msg.name[j];
        j += 1;
    }
    s.name[j] = 0;
    s.id = msg.id;
    s.fd = fd;
    s.parent = msg.parent;
    s.kind = kind;
    if kind == COOKIE {
        if slot >= table.cookie_high {
            table.cookie_high = slot + 1;
        }
    } else if slot >= table.high {
        table.high = slot + 1;
    }
    true
}

/// `close(fd)`, its result ignored.
///
/// # Safety
/// In the keeper only; `fd` is its own and not used after.
unsafe fn close(fd: c_int) {
    // SAFETY: close takes no pointer.
    unsafe {
        syscall4(k::__NR_close, fd as usize, 0, 0, 0);
    }
}

/// The host is gone: kills every held root's group and member, writes
/// `cgroup.kill` of every held cgroup, then kills the trees held by their
/// cookie (after `cgroup.kill`, which is one write a tree; this looks at
/// every process, in rounds).
///
/// # Safety
/// In the keeper only.
unsafe fn kill_held(table: &Table) {
    let kill = b"cgroup.kill\0";
    let mut i = 0;
    while i < table.high {
        // SAFETY: in the keeper; the slot is bounds-checked and no other
        // reference to it is alive.
        if let Some(s) = unsafe { table.at(i) } {
            // SAFETY: the slot's descriptors are the keeper's; openat reads
            // the NUL-terminated name above, write one byte of static memory.
            unsafe {
                if s.kind == ROOT {
                    kill_root(s.fd);
                    s.kind = EMPTY;
                } else if s.kind == MEMBER {
                    kill_member(s.fd);
                    s.kind = EMPTY;
                }
            }
        }
        i += 1;
    }
    let mut i = 0;
    while i < table.high {
        // SAFETY: as above.
        if let Some(s) = unsafe { table.at(i) } {
            if s.kind == CGROUP {
                // SAFETY: openat reads the NUL-terminated name, relative
                // to the cgroup's directory; write reads one static byte.
                unsafe {
                    let fd = syscall4(
                        k::__NR_openat,
                        s.fd as usize,
                        kill.as_ptr() as usize,
                        (k::O_WRONLY | k::O_CLOEXEC) as usize,
                        0,
                    );
                    if fd >= 0 {
                        let one = b"1";
                        syscall4(k::__NR_write, fd as usize, one.as_ptr() as usize, 1, 0);
                        close(fd as c_int);
                    }
                }
            }
        }
        i += 1;
    }
    let mut cookies = false;
    let mut i = table.half;
    while i < table.cookie_high {
        // SAFETY: as above.
        cookies |= unsafe { table.at(i) }.is_some_and(|s| s.kind == COOKIE);
        i += 1;
    }
    if cookies {
        // SAFETY: in the keeper.
        unsafe { kill_by_cookies(table) };
    }
}

/// Removes every held cgroup (and what is below it): retried every 2 ms
/// for up to 2 s (the kill completes asynchronously; a populated cgroup
/// cannot be removed).
///
/// # Safety
/// In the keeper only.
unsafe fn remove_cgroups(table: &Table) {
    let mut round = 0;
    while round < 1000 {
        let mut left = false;
        let mut i = 0;
        while i < table.high {
            // SAFETY: in the keeper, the slot bounds-checked.
            let (kind, fd, parent) = match unsafe { table.at(i) } {
                Some(s) => (s.kind, s.fd, s.parent as usize),
                None => break,
            };
            // SAFETY: in the keeper; the descriptors are its own.
            if kind == CGROUP && !unsafe { remove_cgroup(table, i, fd, parent) } {
                left = true;
            }
            i += 1;
        }
        if !left {
            break;
        }
        // SAFETY: in the keeper.
        unsafe { nap(0, 2_000_000) };
        round += 1;
    }
}

/// Removes the cgroup in slot `i` (directory `fd`, in the directory of
/// slot `parent`) and what is below it; `false` if it is still there.
///
/// # Safety
/// In the keeper only.
unsafe fn remove_cgroup(table: &Table, i: usize, fd: c_int, parent: usize) -> bool {
    // SAFETY: in the keeper; the slots are bounds-checked and each
    // reference ends before the next is made; unlinkat reads the slot's
    // NUL-terminated name.
    unsafe {
        remove_below(fd, 0);
        let pfd = match table.at(parent) {
            Some(p) if p.kind == PARENT => p.fd,
            _ => -1,
        };
        let r = match table.at(i) {
            Some(s) => syscall4(
                k::__NR_unlinkat,
                pfd as isize as usize,
                s.name.as_ptr() as usize,
                k::AT_REMOVEDIR as usize,
                0,
            ),
            None => 0,
        };
        if r == 0 || r == -(en::ENOENT as isize) || pfd < 0 {
            if let Some(s) = table.at(i) {
                s.kind = EMPTY;
            }
            true
        } else {
            false
        }
    }
}

/// SIGKILLs a root's process group through its pidfd
/// (`PIDFD_SIGNAL_PROCESS_GROUP`, Linux 6.9), else the root alone.
///
/// The kernel signals every process whose process group is the group the
/// pidfd's pid names (`PIDTYPE_PGID` of that `struct pid`), whether or not
/// the root is still alive or was reaped: the pidfd pins the `struct pid`,
/// and its number stays allocated while any process still has it as its
/// group id, so no later process can be in that group unless it joined the
/// root's own group. So the group is killed also when the root was already
/// reaped by the time the keeper acts — a zombie root re-parented to init
/// by the host's death is reaped at once, and before, the keeper looked
/// the root up in `/proc`, found nothing and spared its group. Nothing
/// outside the tree is hit: a group with no member left is `ESRCH`.
///
/// # Safety
/// In the keeper only.
unsafe fn kill_root(pidfd: c_int) {
    const PIDFD_SIGNAL_PROCESS_GROUP: usize = 1 << 2;
    // SAFETY: raw syscalls with no pointer.
    unsafe {
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
        // Before 6.9 (EINVAL), or no member left in the group (ESRCH):
        // the root alone, while it is not reaped.
        syscall4(
            k::__NR_pidfd_send_signal,
            pidfd as usize,
            k::SIGKILL as usize,
            0,
            0,
        );
    }
}

/// Rounds of [`kill_by_cookies`] at most (each a look at every process,
/// then a 2 ms nap), and for how long at most: 1 s, whatever keeps forking
/// and however many processes the machine has.
const COOKIE_ROUNDS: u32 = 400;
const COOKIE_FOR_NS: u64 = 1_000_000_000;

/// `CLOCK_MONOTONIC` in nanoseconds (0 if it cannot be read).
///
/// # Safety
/// In the keeper only.
unsafe fn monotonic_ns() -> u64 {
    let mut ts = k::__kernel_timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: one timespec of this frame.
    let r = unsafe {
        syscall4(
            k::__NR_clock_gettime,
            k::CLOCK_MONOTONIC as usize,
            &mut ts as *mut k::__kernel_timespec as usize,
            0,
            0,
        )
    };
    if r < 0 {
        return 0;
    }
    (ts.tv_sec as u64).saturating_mul(1_000_000_000) + ts.tv_nsec as u64
}
/// The variable whose comma-separated elements are the cookies of the
/// trees a process belongs to (`contain::orphans::COOKIE_VAR`).
const COOKIE_PREFIX: &[u8] = b"CORRAL_TREE=";

/// Kills every process that carries one of the cookies held: rounds of a
/// look at every process in `/proc`, until two rounds in a row find none
/// alive (a process in `execve` shows an empty environment for a moment),
/// at most [`COOKIE_ROUNDS`].
///
/// Never the wrong process: a pid is opened as a pidfd first, its
/// environment read after, and the signal goes through the pidfd only if
/// the process it holds had not exited once the environment was read (the
/// pid was then its own all along, so the environment read was its own).
///
/// # Safety
/// In the keeper only.
unsafe fn kill_by_cookies(table: &Table) {
    // SAFETY: raw syscalls on this frame's buffers.
    unsafe {
        let me = syscall4(k::__NR_getpid, 0, 0, 0, 0) as u32;
        // The pids in `/proc` must be this process's namespace's (the
        // pidfds are opened by number): `/proc/self` names this process.
        let mut link = [0u8; 16];
        let self_path = b"/proc/self\0";
        let n = syscall4(
            k::__NR_readlinkat,
            k::AT_FDCWD as isize as usize,
            self_path.as_ptr() as usize,
            link.as_mut_ptr() as usize,
            link.len(),
        );
        let mut own: u32 = 0;
        let mut j = 0;
        while n > 0 && j < n as usize {
            if !link[j].is_ascii_digit() {
                return;
            }
            own = own * 10 + (link[j] - b'0') as u32;
            j += 1;
        }
        if own != me {
            return;
        }
        let start = monotonic_ns();
        let mut empty = 0;
        let mut round = 0;
        while round < COOKIE_ROUNDS
            && empty < 2
            && monotonic_ns().saturating_sub(start) < COOKIE_FOR_NS
        {
            if cookie_round(table, me) == 0 {
                empty += 1;
            } else {
                empty = 0;
            }
            let ts: [i64; 2] = [0, 2_000_000];
            syscall4(k::__NR_nanosleep, ts.as_ptr() as usize, 0, 0, 0);
            round += 1;
        }
    }
}

/// One look at every process: SIGKILLs (its process group too, where the
/// kernel can: Linux 6.9) each live one whose environment carries a held
/// cookie. How many it found.
///
/// # Safety
/// In the keeper only.
unsafe fn cookie_round(table: &Table, me: u32) -> u32 {
    const PIDFD_SIGNAL_PROCESS_GROUP: usize = 1 << 2;
    // SAFETY: raw syscalls on this frame's buffers.
    unsafe {
        let proc_dir = b"/proc\0";
        let d = syscall4(
            k::__NR_openat,
            k::AT_FDCWD as isize as usize,
            proc_dir.as_ptr() as usize,
            (k::O_RDONLY | k::O_DIRECTORY | k::O_CLOEXEC) as usize,
            0,
        );
        if d < 0 {
            return 0;
        }
        let mut found = 0;
        let mut buf = [0u8; 4096];
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
            while off + 19 < n {
                let reclen = u16::from_ne_bytes([buf[off + 16], buf[off + 17]]) as usize;
                if reclen == 0 {
                    break;
                }
                // The name: digits up to its NUL, or not a process.
                let mut pid: u32 = 0;
                let mut j = off + 19;
                let mut digits = 0;
                while j < n && buf[j] != 0 {
                    let b = buf[j];
                    if !b.is_ascii_digit() || digits >= 9 {
                        digits = 0;
                        break;
                    }
                    pid = pid * 10 + (b - b'0') as u32;
                    digits += 1;
                    j += 1;
                }
                off += reclen;
                if digits == 0 || pid == 0 || pid == me {
                    continue;
                }
                let pfd = syscall4(k::__NR_pidfd_open, pid as usize, 0, 0, 0);
                if pfd < 0 {
                    continue;
                }
                if environ_has_cookie(table, pid) && !pidfd_exited(pfd as c_int) {
                    found += 1;
                    syscall4(
                        k::__NR_pidfd_send_signal,
                        pfd as usize,
                        k::SIGKILL as usize,
                        0,
                        PIDFD_SIGNAL_PROCESS_GROUP,
                    );
                    syscall4(
                        k::__NR_pidfd_send_signal,
                        pfd as usize,
                        k::SIGKILL as usize,
                        0,
                        0,
                    );
                }
                syscall4(k::__NR_close, pfd as usize, 0, 0, 0);
            }
        }
        syscall4(k::__NR_close, d as usize, 0, 0, 0);
        found
    }
}

/// Whether the process a pidfd holds has exited (its pidfd readable).
///
/// # Safety
/// In the keeper only.
unsafe fn pidfd_exited(pfd: c_int) -> bool {
    #[repr(C)]
    struct PollFd {
        fd: c_int,
        events: i16,
        revents: i16,
    }
    let mut p = [PollFd {
        fd: pfd,
        events: k::POLLIN as i16,
        revents: 0,
    }];
    let zero = k::__kernel_timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: one pollfd and a timespec of this frame.
    let r = unsafe {
        syscall6(
            k::__NR_ppoll,
            [
                p.as_mut_ptr() as usize,
                1,
                &zero as *const k::__kernel_timespec as usize,
                0,
                8,
                0,
            ],
        )
    };
    r != 0 || p[0].revents != 0
}

/// Whether `/proc/<pid>/environ` has a `CORRAL_TREE` variable with one of
/// the held cookies as an element (read in pieces, matched as it streams:
/// no allocation, whatever the environment's size).
///
/// # Safety
/// In the keeper only.
unsafe fn environ_has_cookie(table: &Table, pid: u32) -> bool {
    // "/proc/" + up to 10 digits + "/environ" + NUL.
    let mut path = [0u8; 32];
    let head = b"/proc/";
    path[..head.len()].copy_from_slice(head);
    let mut at = head.len();
    let mut digits = [0u8; 10];
    let mut nd = 0;
    let mut v = pid;
    loop {
        digits[nd] = b'0' + (v % 10) as u8;
        nd += 1;
        v /= 10;
        if v == 0 || nd == digits.len() {
            break;
        }
    }
    while nd > 0 {
        nd -= 1;
        path[at] = digits[nd];
        at += 1;
    }
    let tail = b"/environ";
    path[at..at + tail.len()].copy_from_slice(tail);
    // SAFETY: raw syscalls on this frame's buffers; slots reached through
    // `Table::at` (bounds-checked), read only.
    unsafe {
        let fd = syscall4(
            k::__NR_openat,
            k::AT_FDCWD as isize as usize,
            path.as_ptr() as usize,
            (k::O_RDONLY | k::O_CLOEXEC) as usize,
            0,
        );
        if fd < 0 {
            return false;
        }
        let mut m = CookieMatch::new();
        let mut buf = [0u8; 4096];
        let mut hit = false;
        // At most 4 MiB (an environment is smaller).
        let mut left = 1024;
        while !hit && left > 0 {
            let n = syscall4(
                k::__NR_read,
                fd as usize,
                buf.as_mut_ptr() as usize,
                buf.len(),
                0,
            );
            if n == -(en::EINTR as isize) {
                continue;
            }
            if n <= 0 {
                // The end: a last variable without its NUL still counts.
                hit = m.feed(0, table);
                break;
            }
            let mut i = 0;
            while i < n as usize && !hit {
                hit = m.feed(buf[i], table);
                i += 1;
            }
            left -= 1;
        }
        syscall4(k::__NR_close, fd as usize, 0, 0, 0);
        hit
    }
}

/// A streaming match of `CORRAL_TREE=<a>,<b>,...` elements against the
/// held cookies, one byte of `environ` at a time.
struct CookieMatch {
    /// Bytes of [`COOKIE_PREFIX`] matched at the start of this variable;
    /// `usize::MAX`: this variable is another one.
    prefix: usize,
    /// In the value of the variable: the element so far.
    elem: [u8; NAME_MAX + 1],
    len: usize,
}

impl CookieMatch {
    fn new() -> CookieMatch {
        CookieMatch {
            prefix: 0,
            elem: [0; NAME_MAX + 1],
            len: 0,
        }
    }

    /// Takes one byte; true when an element just ended that is a held
    /// cookie.
    ///
    /// # Safety
    /// In the keeper only.
    unsafe fn feed(&mut self, b: u8, table: &Table) -> bool {
        let in_value = self.prefix == COOKIE_PREFIX.len();
        if b == 0 || (in_value && b == b',') {
            // SAFETY: as the caller.
            let hit = in_value && unsafe { self.is_held(table) };
            self.len = 0;
            if b == 0 {
                self.prefix = 0;
            }
            return hit;
        }
        if in_value {
            if self.len < self.elem.len() {
                self.elem[self.len] = b;
            }
            self.len += 1;
        } else if self.prefix != usize::MAX {
            if COOKIE_PREFIX[self.prefix] == b {
                self.prefix += 1;
            } else {
                self.prefix = usize::MAX;
            }
        }
        false
    }

    /// Whether the element just read is the cookie of a held slot.
    ///
    /// # Safety
    /// In the keeper only.
    unsafe fn is_held(&self, table: &Table) -> bool {
        if self.len == 0 || self.len > NAME_MAX {
            return false;
        }
        let mut i = table.half;
        while i < table.cookie_high {
            // SAFETY: bounds-checked slot, read only.
            if let Some(s) = unsafe { table.at(i) } {
                if s.kind == COOKIE
                    && s.name[self.len] == 0
                    && s.name[..self.len] == self.elem[..self.len]
                {
                    return true;
                }
            }
            i += 1;
        }
        false
    }
}

/// SIGKILLs a member held by its pidfd, and the process group its pid
/// names (Linux 6.9; `ESRCH` when it leads none): both through the pidfd,
/// so never a stranger.
///
/// # Safety
/// In the keeper only.
unsafe fn kill_member(pidfd: c_int) {
    const PIDFD_SIGNAL_PROCESS_GROUP: usize = 1 << 2;
    // SAFETY: raw syscalls with no pointer.
    unsafe {
        syscall4(
            k::__NR_pidfd_send_signal,
            pidfd as usize,
            k::SIGKILL as usize,
            0,
            PIDFD_SIGNAL_PROCESS_GROUP,
        );
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
