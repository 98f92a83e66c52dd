//! The keeper process itself: a fork of the host that never execs, holds
//! the runs the host registers and, when the host dies, kills and removes
//! them. It issues only raw system calls (no allocation, lock or TLS).

use std::os::raw::c_int;

use linux_raw_sys::general as k;

use super::protocol::{
    received_fds, Message, GRACE_MAX_MS, MSG_CMSG_CLOEXEC, MSG_DONTWAIT, MSG_LEN, MSG_NOSIGNAL,
    NAME_MAX, OP_ADD, OP_ADD_MEMBER, OP_ADD_ROOT, OP_COOKIE, OP_DEL, OP_FAREWELL, OP_HELLO,
    OP_PARENT,
};
use super::{MAX_SLOTS, RESERVE_FDS};
use crate::sys::linux_spawn::raw::{self, exit_now, Errno, Iovec, Msghdr, PollFd};
use std::ffi::CStr;

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

/// Where a held tree's farewell is (a slot's `state`): held (0, so a
/// fresh slot is), or done with (killed, or found gone).
const HELD: u8 = 0;
const DONE: u8 = 1;

#[repr(C)]
struct Slot {
    id: u64,
    fd: c_int,
    parent: u32,
    /// The run's farewell: its SIGKILL this long after the host's death
    /// (0: at once), and its first signal before (0: none).
    grace_ms: u32,
    kind: u8,
    signal: u8,
    /// [`HELD`] or [`DONE`] once the host died.
    state: u8,
    /// A root: its first signal reached its whole group. A cookie: looks
    /// at every process in a row that found none of its carriers.
    quiet: u8,
    /// A cookie: the last look found a carrier.
    seen: u8,
    name: [u8; NAME_MAX + 1],
}

const _: () = assert!(std::mem::size_of::<Slot>() == 96);

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
fn make_table() -> Table {
    let mut usable = 0u64;
    if let Ok([soft, hard]) = raw::nofile_limit() {
        usable = soft;
        if hard > soft && raw::set_nofile_limit([hard, hard]).is_ok() {
            usable = hard;
        }
    }
    let mut table = Table {
        base: std::ptr::null_mut(),
        len: 0,
        high: 0,
        half: 0,
        cookie_high: 0,
    };
    // Where the mapping cannot be reserved (strict overcommit, a low
    // RLIMIT_AS), a smaller table: half as many slots each time.
    let mut len = (usable.saturating_sub(2 + RESERVE_FDS) as usize).min(MAX_SLOTS);
    while len > 0 {
        // Twice: as many cookie slots (no descriptor) again.
        if let Ok(p) = raw::map_anonymous(2 * len * std::mem::size_of::<Slot>()) {
            table.base = p.cast::<Slot>();
            table.len = 2 * len;
            table.half = len;
            table.cookie_high = len;
            break;
        }
        len /= 2;
    }
    table
}

/// The keeper's life, as steps: detach from the host, map the table and
/// say how many slots it has, hold what the host sends until it dies, then
/// kill every held tree and remove the cgroups.
///
/// # Safety
/// Only in the keeper child.
#[inline(never)]
unsafe fn keeper(a: &KeeperArgs) -> ! {
    detach(a);
    let mut table = make_table();
    send_hello(a.sock, &table);
    // SAFETY: each step is called in the keeper child, its only thread,
    // on this process's own memory (no allocation, lock, TLS or panic
    // path; every slot index is checked against the table's length).
    unsafe {
        serve_until_host_dies(a, &mut table);
        farewell(&table);
        remove_cgroups(&table);
    }
    exit_now(0)
}

/// Sleeps the test delay, if any, takes the keeper's name, starts its own
/// session and closes every descriptor but the socket and the host's pidfd.
fn detach(a: &KeeperArgs) {
    if a.delay_ms > 0 {
        raw::nanosleep(
            i64::from(a.delay_ms / 1000),
            i64::from(a.delay_ms % 1000) * 1_000_000,
        );
    }
    raw::set_thread_name(c"corral-keeper");
    let _ = raw::setsid();
    // Keep only the socket and the pidfd.
    let (lo, hi) = if a.sock < a.host {
        (a.sock, a.host)
    } else {
        (a.host, a.sock)
    };
    if lo > 0 {
        raw::close_from_to(0, lo as usize - 1);
    }
    if hi > lo + 1 {
        raw::close_from_to(lo as usize + 1, hi as usize - 1);
    }
    raw::close_from_to(hi as usize + 1, u32::MAX as usize);
}

/// Tells the host the table's capacity, in the keeper's first message.
fn send_hello(sock: c_int, table: &Table) {
    let mut hello = Message::new(OP_HELLO);
    // Slots past the first half hold cookies (no descriptor).
    hello.slot = (table.len / 2) as u32;
    let _ = raw::send(sock, &hello.encode(), MSG_NOSIGNAL);
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
        let mut fds = [PollFd::readable(a.sock), PollFd::readable(a.host)];
        if a.lazy {
            fds[0].events = 0;
        }
        // Rebuilt each round: ppoll writes the time left back.
        let mut period = k::__kernel_timespec {
            tv_sec: 0,
            tv_nsec: LAZY_PERIOD_NS,
        };
        let r = raw::ppoll(&mut fds, a.lazy.then_some(&mut period));
        if r.is_err_and(|e| e != Errno::INTR) {
            return;
        }
        let host_gone = fds[1].revents != 0;
        let period_over = a.lazy && r == Ok(0);
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
        raw::nanosleep(0, KEEPER_NAP_NS);
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
        let n = match unsafe { raw::recvmsg(sock, &mut hdr, MSG_CMSG_CLOEXEC | MSG_DONTWAIT) } {
            // ECONNRESET: the host died with a message of the keeper's
            // (its first) unread, which the kernel reports once, before
            // the messages still queued here: read on, they count.
            Err(Errno::INTR | Errno::CONNRESET) => continue,
            Err(Errno::AGAIN) => return true,
            Ok(0) | Err(_) => return false,
            Ok(n) => n,
        };
        match Message::decode(msg.get(..n).unwrap_or_default()) {
            // SAFETY: in the keeper.
            Ok(m) => unsafe { serve(table, &m, &control, hdr.controllen) },
            // Not a message of this layout (the host never sends one):
            // ignored, its descriptors closed.
            Err(_) => {
                for fd in received_fds(&control, hdr.controllen) {
                    raw::close(fd);
                }
            }
        }
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
            raw::close(fd);
        }
    }
    let slot = msg.slot as usize;
    let kind = kind_of(msg.op);
    if msg.op == OP_FAREWELL {
        // SAFETY: in the keeper; the slot is bounds-checked.
        if let Some(s) = unsafe { table.at(slot) } {
            if (s.kind == CGROUP || s.kind == ROOT || s.kind == COOKIE || s.kind == MEMBER)
                && s.id == msg.id
            {
                s.grace_ms = msg.farewell.grace_ms.min(GRACE_MAX_MS);
                s.signal = msg.farewell.signal;
            }
        }
    } else if msg.op == OP_DEL {
        // SAFETY: in the keeper; the slot is bounds-checked.
        if let Some(s) = unsafe { table.at(slot) } {
            if (s.kind == CGROUP || s.kind == ROOT || s.kind == COOKIE || s.kind == MEMBER)
                && s.id == msg.id
            {
                if s.fd >= 0 {
                    raw::close(s.fd);
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
        raw::close(got);
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
        raw::close(s.fd);
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
    s.grace_ms = msg.farewell.grace_ms.min(GRACE_MAX_MS);
    s.signal = msg.farewell.signal;
    s.state = HELD;
    s.quiet = 0;
    s.seen = 0;
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

/// The host is gone: every held tree gets its run's farewell. Trees
/// without a grace are killed at once, as they always were (each root's
/// group and each member, `cgroup.kill` of each cgroup, then rounds of a
/// look at every process for the cookies); the others get their run's
/// SIGCONT and first signal (see [`first_signals`]), then SIGKILL once
/// their own grace has passed since the host's death, unless they are gone
/// before. Every slot keeps its own time: one run's grace never delays
/// another's kill. Bounded: [`GRACE_MAX_MS`] and [`COOKIE_FOR_MS`].
///
/// While a grace runs, a second keeper (a fork, [`start_second`]) stands
/// by: if this one dies before it is done (killed by someone, the OOM
/// killer) or stops for too long, the second SIGKILLs every held tree at
/// once.
///
/// # Safety
/// In the keeper only.
unsafe fn farewell(table: &Table) {
    let death = raw::monotonic_ns().unwrap_or(0);
    // SAFETY: in the keeper.
    if !unsafe { until_done(table, death, true) } {
        return;
    }
    // SAFETY: in the keeper.
    let done = unsafe { start_second(table) };
    // SAFETY: in the keeper.
    unsafe { first_signals(table) };
    // SAFETY: in the keeper.
    unsafe { until_done(table, death, false) };
    if done >= 0 {
        // Done: the second has nothing to do.
        let _ = raw::write(done, &[1]);
        raw::close(done);
    }
}

/// Kills each held tree whose grace has passed since `death` (the
/// monotonic clock, ns) and sets aside those that are gone, every few
/// milliseconds, until none is left or the bound is reached; `once`: one
/// pass only (the first, at the host's death: the trees without a grace).
/// Whether anything is left.
///
/// # Safety
/// In the keeper only.
unsafe fn until_done(table: &Table, death: u64, once: bool) -> bool {
    let elapsed = || raw::monotonic_ns().unwrap_or(0).saturating_sub(death) / 1_000_000;
    let bound = u64::from(GRACE_MAX_MS) + COOKIE_FOR_MS + 500;
    let mut last_look: Option<u64> = None;
    loop {
        let now = elapsed();
        // The cookie rounds (a look at every process) while a cookie's
        // tree is being killed, and every [`COOKIE_PROBE_MS`] while one
        // only waits (to see its tree gone early).
        let look = last_look.is_none_or(|t| now.saturating_sub(t) >= COOKIE_PROBE_MS);
        // SAFETY: in the keeper.
        let (pending, killing) = unsafe { kill_due(table, now, look) };
        if look || killing {
            last_look = Some(now);
        }
        if !pending || once {
            return pending;
        }
        if now > bound {
            return true;
        }
        raw::nanosleep(0, if killing { 2_000_000 } else { 5_000_000 });
    }
}

/// One pass at `now` (ms since the host's death): kills what is due
/// (roots' groups and members, then `cgroup.kill`, then a cookie round),
/// and sets aside what is gone. Whether anything is left, and whether a
/// cookie's tree is being killed (the next round comes soon). `look`:
/// whether to look at every process for cookies not due yet.
///
/// # Safety
/// In the keeper only.
unsafe fn kill_due(table: &Table, now: u64, look: bool) -> (bool, bool) {
    let due = |s: &Slot| now >= u64::from(s.grace_ms);
    let mut pending = false;
    let mut i = 0;
    while i < table.high {
        // SAFETY: in the keeper; the slot is bounds-checked and no other
        // reference to it is alive.
        if let Some(s) = unsafe { table.at(i) } {
            if s.state == HELD && (s.kind == ROOT || s.kind == MEMBER) {
                if due(s) {
                    if s.kind == ROOT {
                        kill_root(s.fd);
                    } else {
                        kill_member(s.fd);
                    }
                    s.state = DONE;
                } else if group_gone(s.fd) {
                    s.state = DONE;
                } else {
                    pending = true;
                }
            }
        }
        i += 1;
    }
    let mut i = 0;
    while i < table.high {
        // SAFETY: as above.
        if let Some(s) = unsafe { table.at(i) } {
            if s.kind == CGROUP && s.state == HELD {
                if due(s) {
                    if let Ok(fd) = raw::openat(s.fd, c"cgroup.kill", k::O_WRONLY | k::O_CLOEXEC) {
                        let _ = raw::write(fd, b"1");
                        raw::close(fd);
                    }
                    s.state = DONE;
                } else if !populated(s.fd) {
                    s.state = DONE;
                } else {
                    pending = true;
                }
            }
        }
        i += 1;
    }
    // The cookies: a round when one is due, or to look.
    let mut waiting = false;
    let mut any_due = false;
    let mut i = table.half;
    while i < table.cookie_high {
        // SAFETY: as above.
        if let Some(s) = unsafe { table.at(i) } {
            if s.kind == COOKIE && s.state == HELD {
                waiting = true;
                any_due |= due(s);
                s.seen = 0;
            }
        }
        i += 1;
    }
    if !waiting || !(any_due || look) {
        return (pending || waiting, false);
    }
    let me = raw::getpid();
    // SAFETY: in the keeper.
    let own = proc_is_own(me) && unsafe { cookie_round(table, me, now) };
    let mut killing = false;
    let mut i = table.half;
    while i < table.cookie_high {
        // SAFETY: as above.
        if let Some(s) = unsafe { table.at(i) } {
            if s.kind == COOKIE && s.state == HELD {
                s.quiet = if s.seen != 0 {
                    0
                } else {
                    s.quiet.saturating_add(1)
                };
                // Two looks in a row found none (a process in `execve`
                // shows an empty environment for a moment); or the rounds
                // of its kill have run their time; or `/proc` is not this
                // process's (nothing can be found by pid).
                if !own || s.quiet >= 2 || now >= u64::from(s.grace_ms) + COOKIE_FOR_MS {
                    s.state = DONE;
                } else {
                    pending = true;
                    killing |= due(s);
                }
            }
        }
        i += 1;
    }
    (pending, killing)
}

/// Whether the process group of the process a pidfd holds (a root's, or
/// a member's own) has no member left, nor the process itself: `ESRCH` to
/// signal 0. Before Linux 6.9 (no group signal through a pidfd): whether
/// the process exited.
fn group_gone(pidfd: c_int) -> bool {
    // ESRCH: no member left; EINVAL: before 6.9.
    raw::pidfd_send_signal(pidfd, 0, PIDFD_SIGNAL_PROCESS_GROUP).is_err() && pidfd_exited(pidfd)
}

/// Whether a cgroup (its directory) or one below it has a process:
/// `populated 1` in its `cgroup.events` (unreadable: taken as populated).
fn populated(dir: c_int) -> bool {
    let Ok(fd) = raw::openat(dir, c"cgroup.events", k::O_RDONLY | k::O_CLOEXEC) else {
        return true;
    };
    let mut buf = [0u8; 256];
    let n = raw::read(fd, &mut buf).unwrap_or(0);
    raw::close(fd);
    events_populated(buf.get(..n).unwrap_or_default())
}

/// `cgroup.events` says `populated 1`, or does not say `populated 0`.
fn events_populated(text: &[u8]) -> bool {
    const KEY: &[u8] = b"populated ";
    let mut i = 0;
    while i + KEY.len() < text.len() {
        if (i == 0 || text[i - 1] == b'\n') && text[i..].starts_with(KEY) {
            return text[i + KEY.len()] != b'0';
        }
        i += 1;
    }
    true
}

/// Sends each held tree with a grace SIGCONT, then its run's first signal
/// (a stopped member acts on it), as the lifecycle does at the deadline:
/// each root's process group through its pidfd (the root alone before
/// Linux 6.9), each member through its pidfd, then each process that is in
/// a held cgroup or carries a held cookie and was not reached through its
/// group already (each process gets it once). Those are found by one look
/// at every process made *before* any signal is sent (see [`first_round`]),
/// so that what a signal handler starts to clean up (the `touch` of a
/// shell's trap) is left alone, as the lifecycle leaves it.
///
/// # Safety
/// In the keeper only.
unsafe fn first_signals(table: &Table) {
    let mut more = false;
    for i in (0..table.high).chain(table.half..table.cookie_high) {
        // SAFETY: in the keeper; the slot is bounds-checked, read only.
        if let Some(s) = unsafe { table.at(i) } {
            more |= (s.kind == CGROUP || s.kind == COOKIE)
                && s.state == HELD
                && s.grace_ms > 0
                && s.signal != 0;
        }
    }
    let me = raw::getpid();
    let mut targets = Targets::none();
    if more && proc_is_own(me) {
        targets = Targets::new();
        // SAFETY: in the keeper.
        unsafe { first_round(table, me, &mut targets) };
    }
    let mut i = 0;
    while i < table.high {
        // SAFETY: in the keeper; the slot is bounds-checked and no other
        // reference to it is alive.
        if let Some(s) = unsafe { table.at(i) } {
            let sig = u32::from(s.signal);
            if s.state == HELD && s.grace_ms > 0 && sig != 0 {
                // SIGCONT first, then the signal, as the lifecycle does (a
                // root that died of the signal before a later SIGCONT would
                // orphan its group with a member still stopped: SIGHUP).
                if s.kind == ROOT {
                    let _ = raw::pidfd_send_signal(s.fd, k::SIGCONT, PIDFD_SIGNAL_PROCESS_GROUP);
                    if raw::pidfd_send_signal(s.fd, sig, PIDFD_SIGNAL_PROCESS_GROUP).is_ok() {
                        s.quiet = 1;
                    } else {
                        let _ = raw::pidfd_send_signal(s.fd, k::SIGCONT, 0);
                        let _ = raw::pidfd_send_signal(s.fd, sig, 0);
                    }
                } else if s.kind == MEMBER {
                    let _ = raw::pidfd_send_signal(s.fd, k::SIGCONT, 0);
                    let _ = raw::pidfd_send_signal(s.fd, sig, 0);
                }
            }
        }
        i += 1;
    }
    let mut j = 0;
    while j < targets.len {
        // SAFETY: `j` is below the count of targets written.
        let t = unsafe { *targets.base.add(j) };
        j += 1;
        // SAFETY: in the keeper.
        if unsafe { reached(table, t.pid, t.pgrp) } {
            continue;
        }
        // The same process as in the look: its pid and start time (a pid
        // is not reused within a tick), alive once they were read.
        let Ok(pfd) = raw::pidfd_open(t.pid) else {
            continue;
        };
        if stat_of(t.pid).is_some_and(|(_, start)| start == t.start) && !pidfd_exited(pfd) {
            let _ = raw::pidfd_send_signal(pfd, k::SIGCONT, 0);
            let _ = raw::pidfd_send_signal(pfd, u32::from(t.sig), 0);
        }
        raw::close(pfd);
    }
}

/// A process the first signals are for: its pid, start time (ticks since
/// boot) and process group, and the signal.
#[derive(Clone, Copy)]
#[repr(C)]
struct Target {
    start: u64,
    pid: u32,
    pgrp: u32,
    sig: u8,
}

/// Most processes one look finds for the first signals (the others get
/// only the SIGKILL at the grace's end): 64 Ki, in a mapping made when the
/// host died (reserved, not committed: 2 MiB at most).
const TARGETS_MAX: usize = 1 << 16;

/// The targets a look found: `len` of them at `base` (an anonymous mapping
/// of [`TARGETS_MAX`]; none if it cannot be made).
struct Targets {
    base: *mut Target,
    len: usize,
    cap: usize,
}

impl Targets {
    fn none() -> Targets {
        Targets {
            base: std::ptr::null_mut(),
            len: 0,
            cap: 0,
        }
    }

    fn new() -> Targets {
        match raw::map_anonymous(TARGETS_MAX * std::mem::size_of::<Target>()) {
            Ok(p) => Targets {
                base: p.cast::<Target>(),
                len: 0,
                cap: TARGETS_MAX,
            },
            Err(_) => Targets::none(),
        }
    }

    /// Adds `t`; `false` once full.
    fn push(&mut self, t: Target) -> bool {
        if self.len >= self.cap {
            return false;
        }
        // SAFETY: `len` is below the mapping's capacity; the mapping is
        // this process's, readable and writable.
        unsafe { self.base.add(self.len).write(t) };
        self.len += 1;
        true
    }
}

/// The look at every process of [`first_signals`], before any signal: each
/// that is in a held cgroup (the cgroup's first signal) or else carries a
/// held cookie (the cookie's), with its start time and process group.
/// Never the wrong process: the pid is opened as a pidfd first, its files
/// read after, and it is taken only if the process had not exited once they
/// were read (the files were then its own).
///
/// # Safety
/// In the keeper only.
unsafe fn first_round(table: &Table, me: u32, targets: &mut Targets) {
    let Ok(d) = raw::openat(
        k::AT_FDCWD,
        c"/proc",
        k::O_RDONLY | k::O_DIRECTORY | k::O_CLOEXEC,
    ) else {
        return;
    };
    let mut buf = [0u8; 4096];
    let mut room = targets.cap > 0;
    while room {
        let Ok(n @ 1..) = raw::getdents64(d, &mut buf) else {
            break;
        };
        let mut entries = Dirents::new(&buf, n);
        while let Some((_, name)) = entries.next() {
            let Some(pid) = pid_of_name(name.to_bytes()) else {
                continue;
            };
            if pid == me {
                continue;
            }
            let Ok(pfd) = raw::pidfd_open(pid) else {
                continue;
            };
            // SAFETY: in the keeper.
            let mut sig = unsafe { cgroup_signal(table, pid) };
            if sig == 0 {
                // SAFETY: in the keeper.
                sig = unsafe { environ_scan(table, pid, |s| (s.grace_ms > 0).then_some(s.signal)) }
                    .unwrap_or(0);
            }
            if sig != 0 {
                if let Some((pgrp, start)) = stat_of(pid) {
                    if !pidfd_exited(pfd) {
                        room = targets.push(Target {
                            start,
                            pid,
                            pgrp,
                            sig,
                        });
                    }
                }
            }
            raw::close(pfd);
            if !room {
                break;
            }
        }
    }
    raw::close(d);
}

/// Whether `pid` (in process group `pgrp`) got its first signal already:
/// through the group of a held root (its process group is the root's pid,
/// which the root's pidfd keeps from being reused while the group lives),
/// or as a held member.
///
/// # Safety
/// In the keeper only.
unsafe fn reached(table: &Table, pid: u32, pgrp: u32) -> bool {
    let mut i = 0;
    while i < table.high {
        // SAFETY: bounds-checked slot, read only.
        if let Some(s) = unsafe { table.at(i) } {
            let p = u32::from_ne_bytes([s.name[0], s.name[1], s.name[2], s.name[3]]);
            let signalled = s.state == HELD && s.grace_ms > 0 && s.signal != 0;
            if signalled
                && ((s.kind == ROOT && s.quiet == 1 && p == pgrp) || (s.kind == MEMBER && p == pid))
            {
                return true;
            }
        }
        i += 1;
    }
    false
}

/// `/proc/<pid>/<file>`, NUL-terminated, in `path`.
fn proc_path<'a>(path: &'a mut [u8; 48], pid: u32, file: &[u8]) -> Option<&'a CStr> {
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
    path.get_mut(at)?.clone_from(&b'/');
    at += 1;
    path.get_mut(at..at + file.len())?.copy_from_slice(file);
    path.get_mut(at + file.len())?.clone_from(&0);
    CStr::from_bytes_until_nul(path).ok()
}

/// The process group and start time (clock ticks since boot) of `pid`
/// (`/proc/<pid>/stat`).
fn stat_of(pid: u32) -> Option<(u32, u64)> {
    let mut path = [0u8; 48];
    let fd = raw::openat(
        k::AT_FDCWD,
        proc_path(&mut path, pid, b"stat")?,
        k::O_RDONLY | k::O_CLOEXEC,
    )
    .ok()?;
    let mut buf = [0u8; 1024];
    let n = raw::read(fd, &mut buf).unwrap_or(0);
    raw::close(fd);
    stat_fields(buf.get(..n)?)
}

/// The process group and the start time in a `/proc/<pid>/stat` line:
/// `pid (comm) S ppid pgrp ...`, the comm ending at the last `)`, the start
/// time the 20th field after it.
fn stat_fields(stat: &[u8]) -> Option<(u32, u64)> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    let mut fields = stat
        .get(close + 1..)?
        .split(|&b| b == b' ')
        .filter(|f| !f.is_empty());
    let number = |f: &[u8]| -> Option<u64> {
        if f.is_empty() || f.len() > 20 || !f.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let mut v: u64 = 0;
        for &b in f {
            v = v.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
        }
        Some(v)
    };
    let pgrp = u32::try_from(number(fields.nth(2)?)?).ok()?;
    let start = number(fields.nth(16)?)?;
    Some((pgrp, start))
}

/// The first signal of the held cgroup (with a grace) `pid` is in, or
/// below: its `0::` line in `/proc/<pid>/cgroup` has the cgroup's name as
/// a component. 0: none.
///
/// # Safety
/// In the keeper only.
unsafe fn cgroup_signal(table: &Table, pid: u32) -> u8 {
    let mut any = false;
    let mut i = 0;
    while i < table.high {
        // SAFETY: bounds-checked slot, read only.
        if let Some(s) = unsafe { table.at(i) } {
            any |= s.kind == CGROUP && s.state == HELD && s.grace_ms > 0 && s.signal != 0;
        }
        i += 1;
    }
    if !any {
        return 0;
    }
    let mut path = [0u8; 48];
    let Some(p) = proc_path(&mut path, pid, b"cgroup") else {
        return 0;
    };
    let Ok(fd) = raw::openat(k::AT_FDCWD, p, k::O_RDONLY | k::O_CLOEXEC) else {
        return 0;
    };
    // The `0::` line (cgroup v2), whole: a path is at most 4096 bytes.
    let mut line = [0u8; 4200];
    let mut len = 0;
    let mut at_start = true;
    let mut in_v2 = false;
    let mut done = false;
    let mut buf = [0u8; 1024];
    let mut reads = 0;
    while !done && reads < 64 {
        reads += 1;
        let n = match raw::read(fd, &mut buf) {
            Err(Errno::INTR) => continue,
            Ok(n @ 1..) => n,
            _ => break,
        };
        for &b in buf.iter().take(n) {
            if b == b'\n' {
                if in_v2 {
                    done = true;
                    break;
                }
                at_start = true;
                len = 0;
                continue;
            }
            if at_start || !in_v2 {
                // Gathering the line's start until it is `0::` or not.
                if len < 3 {
                    line[len] = b;
                    len += 1;
                    at_start = false;
                    if len == 3 {
                        in_v2 = &line[..3] == b"0::";
                        len = 0;
                    }
                }
                continue;
            }
            if len < line.len() {
                line[len] = b;
                len += 1;
            }
        }
    }
    raw::close(fd);
    if !in_v2 {
        return 0;
    }
    let cg = &line[..len];
    let mut i = 0;
    while i < table.high {
        // SAFETY: bounds-checked slot, read only.
        if let Some(s) = unsafe { table.at(i) } {
            if s.kind == CGROUP && s.state == HELD && s.grace_ms > 0 && s.signal != 0 {
                let n = s.name.iter().position(|&b| b == 0).unwrap_or(NAME_MAX);
                if has_component(cg, &s.name[..n]) {
                    return s.signal;
                }
            }
        }
        i += 1;
    }
    0
}

/// Whether the cgroup path `path` (`/a/b/c`) has `name` as one of its
/// components.
fn has_component(path: &[u8], name: &[u8]) -> bool {
    if name.is_empty() {
        return false;
    }
    path.split(|&b| b == b'/').any(|c| c == name)
}

/// Whether `/proc` is this process's namespace's (pids are opened as
/// pidfds by number): `/proc/self` names `me`.
fn proc_is_own(me: u32) -> bool {
    let mut link = [0u8; 16];
    let n = raw::readlinkat(k::AT_FDCWD, c"/proc/self", &mut link).unwrap_or(0);
    let mut own: u32 = 0;
    let mut j = 0;
    if n == 0 {
        return false;
    }
    while j < n && j < link.len() {
        if !link[j].is_ascii_digit() {
            return false;
        }
        own = own
            .saturating_mul(10)
            .saturating_add((link[j] - b'0') as u32);
        j += 1;
    }
    own == me
}

/// What the second keeper reads (its own copy, made by the fork).
#[repr(C)]
struct SecondArgs {
    base: *mut Slot,
    len: usize,
    high: usize,
    half: usize,
    cookie_high: usize,
    /// The pipe's read end (end of file without a byte: the first keeper
    /// died) and its write end (the first's, closed here).
    done_r: c_int,
    done_w: c_int,
}

/// How long the second keeper waits for the first to be done before it
/// takes the first for stuck (stopped) and kills every held tree.
const SECOND_PATIENCE_MS: u64 = GRACE_MAX_MS as u64 + COOKIE_FOR_MS + 3_000;

/// Starts the second keeper: a fork of this one (its own copy of the table
/// and of every descriptor) that waits on a pipe. A byte: the first is
/// done, it exits. End of file without one (the first died), or nothing
/// within [`SECOND_PATIENCE_MS`] (the first is stopped): it SIGKILLs every
/// tree still held at once and removes the cgroups. The write end, kept
/// here (-1 if the second could not be started: the grace runs without
/// it).
///
/// # Safety
/// In the keeper only.
unsafe fn start_second(table: &Table) -> c_int {
    let Ok([r, w]) = raw::pipe2(k::O_CLOEXEC) else {
        return -1;
    };
    let args = SecondArgs {
        base: table.base,
        len: table.len,
        high: table.high,
        half: table.half,
        cookie_high: table.cookie_high,
        done_r: r,
        done_w: w,
    };
    let mut cargs = k::clone_args {
        flags: 0,
        pidfd: 0,
        child_tid: 0,
        parent_tid: 0,
        exit_signal: 0,
        stack: 0,
        stack_size: 0,
        tls: 0,
        set_tid: 0,
        set_tid_size: 0,
        cgroup: 0,
    };
    // SAFETY: no CLONE_VM: the child runs `second_main` on its own copy of
    // this stack (below this frame) and of the table and `args`, with every
    // signal blocked (as in this process), and never returns.
    let ret = unsafe {
        raw::clone3_with(
            &mut cargs,
            second_main,
            &args as *const SecondArgs as *const std::ffi::c_void,
        )
    };
    raw::close(r);
    if ret < 0 {
        raw::close(w);
        return -1;
    }
    w
}

extern "C" fn second_main(arg: *const std::ffi::c_void) -> ! {
    // SAFETY: `arg` points to this process's own copy of `SecondArgs`
    // (a fork's copy of the first keeper's frame).
    unsafe { second(&*(arg as *const SecondArgs)) }
}

/// The second keeper's life (see [`start_second`]).
///
/// # Safety
/// Only in the second keeper.
unsafe fn second(a: &SecondArgs) -> ! {
    raw::close(a.done_w);
    let mut left = SECOND_PATIENCE_MS as i64;
    let mut byte = [0u8; 1];
    let first_done = loop {
        let mut fds = [PollFd::readable(a.done_r)];
        let mut t = k::__kernel_timespec {
            tv_sec: left / 1000,
            tv_nsec: (left % 1000) * 1_000_000,
        };
        let before = raw::monotonic_ns().unwrap_or(0);
        match raw::ppoll(&mut fds, Some(&mut t)) {
            Ok(0) => break false,
            Err(Errno::INTR) => {}
            Err(_) => break false,
            Ok(_) => break raw::read(a.done_r, &mut byte) == Ok(1),
        }
        let spent = raw::monotonic_ns().unwrap_or(0).saturating_sub(before) / 1_000_000;
        left = left.saturating_sub(spent as i64);
        if left <= 0 {
            break false;
        }
    };
    if !first_done {
        let table = Table {
            base: a.base,
            len: a.len,
            high: a.high,
            half: a.half,
            cookie_high: a.cookie_high,
        };
        // Every grace is over: SIGKILL at once.
        for i in (0..table.high).chain(table.half..table.cookie_high) {
            // SAFETY: this process's own copy of the table, one thread;
            // the slot is bounds-checked.
            if let Some(s) = unsafe { table.at(i) } {
                s.grace_ms = 0;
            }
        }
        // SAFETY: in a keeper, on its own table.
        unsafe {
            until_done(&table, raw::monotonic_ns().unwrap_or(0), false);
            remove_cgroups(&table);
        }
    }
    exit_now(0)
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
        raw::nanosleep(0, 2_000_000);
        round += 1;
    }
}

/// Removes the cgroup in slot `i` (directory `fd`, in the directory of
/// slot `parent`) and what is below it; `false` if it is still there.
///
/// # Safety
/// In the keeper only.
unsafe fn remove_cgroup(table: &Table, i: usize, fd: c_int, parent: usize) -> bool {
    remove_below(fd, 0);
    // SAFETY: in the keeper; the slots are bounds-checked and each
    // reference ends before the next is made.
    let pfd = match unsafe { table.at(parent) } {
        Some(p) if p.kind == PARENT => p.fd,
        _ => -1,
    };
    // SAFETY: as above.
    let Some(s) = (unsafe { table.at(i) }) else {
        return true;
    };
    let r = match CStr::from_bytes_until_nul(&s.name) {
        Ok(name) => raw::rmdirat(pfd, name),
        Err(_) => Ok(0),
    };
    if r.is_ok() || r == Err(Errno::NOENT) || pfd < 0 {
        s.kind = EMPTY;
        true
    } else {
        false
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
fn kill_root(pidfd: c_int) {
    if raw::pidfd_send_signal(pidfd, k::SIGKILL, PIDFD_SIGNAL_PROCESS_GROUP).is_ok() {
        return;
    }
    // Before 6.9 (EINVAL), or no member left in the group (ESRCH): the
    // root alone, while it is not reaped.
    let _ = raw::pidfd_send_signal(pidfd, k::SIGKILL, 0);
}

/// `pidfd_send_signal`'s flag: the process group the pidfd's pid names
/// (Linux 6.9).
const PIDFD_SIGNAL_PROCESS_GROUP: u32 = 1 << 2;

/// How long at most the rounds of a cookie's kill run (each a look at
/// every process, then a 2 ms nap) after its grace: 1 s, whatever keeps
/// forking and however many processes the machine has.
const COOKIE_FOR_MS: u64 = 1_000;
/// How often a cookie whose grace runs is looked for (to see its tree gone
/// before the grace ends).
const COOKIE_PROBE_MS: u64 = 50;

/// The variable whose comma-separated elements are the cookies of the
/// trees a process belongs to (`contain::orphans::COOKIE_VAR`).
const COOKIE_PREFIX: &[u8] = b"CORRAL_TREE=";

/// One look at every process at `now` (ms since the host's death): marks
/// each held cookie carried by a live process as seen, and SIGKILLs (its
/// process group too, where the kernel can: Linux 6.9) each live process
/// whose environment carries a held cookie whose grace has passed.
/// Whether `/proc` could be read.
///
/// Never the wrong process: a pid is opened as a pidfd first, its
/// environment read after, and the signal goes through the pidfd only if
/// the process it holds had not exited once the environment was read (the
/// pid was then its own all along, so the environment read was its own).
///
/// # Safety
/// In the keeper only.
unsafe fn cookie_round(table: &Table, me: u32, now: u64) -> bool {
    let Ok(d) = raw::openat(
        k::AT_FDCWD,
        c"/proc",
        k::O_RDONLY | k::O_DIRECTORY | k::O_CLOEXEC,
    ) else {
        return false;
    };
    let mut buf = [0u8; 4096];
    while let Ok(n @ 1..) = raw::getdents64(d, &mut buf) {
        let mut entries = Dirents::new(&buf, n);
        while let Some((_, name)) = entries.next() {
            // The name: digits up to its NUL, or not a process.
            let Some(pid) = pid_of_name(name.to_bytes()) else {
                continue;
            };
            if pid == me {
                continue;
            }
            let Ok(pfd) = raw::pidfd_open(pid) else {
                continue;
            };
            // SAFETY: in the keeper.
            let kill = unsafe {
                environ_scan(table, pid, |s| {
                    s.seen = 1;
                    (now >= u64::from(s.grace_ms)).then_some(())
                })
            };
            if kill.is_some() && !pidfd_exited(pfd) {
                let _ = raw::pidfd_send_signal(pfd, k::SIGKILL, PIDFD_SIGNAL_PROCESS_GROUP);
                let _ = raw::pidfd_send_signal(pfd, k::SIGKILL, 0);
            }
            raw::close(pfd);
        }
    }
    raw::close(d);
    true
}

/// The pid a `/proc` entry's name spells (1 to 9 digits, not 0), if any.
fn pid_of_name(name: &[u8]) -> Option<u32> {
    if name.is_empty() || name.len() > 9 {
        return None;
    }
    let mut pid: u32 = 0;
    for &b in name {
        if !b.is_ascii_digit() {
            return None;
        }
        pid = pid * 10 + (b - b'0') as u32;
    }
    (pid != 0).then_some(pid)
}

/// The entries of a `getdents64` buffer, `n` bytes of it: each entry's
/// type and name. No allocation, no panic: a malformed
/// record ends the walk.
struct Dirents<'a> {
    buf: &'a [u8],
    n: usize,
    off: usize,
}

impl<'a> Dirents<'a> {
    fn new(buf: &'a [u8], n: usize) -> Dirents<'a> {
        Dirents {
            buf,
            n: n.min(buf.len()),
            off: 0,
        }
    }

    fn next(&mut self) -> Option<(u8, &'a CStr)> {
        // linux_dirent64: ino (8), off (8), reclen (2), type (1), name.
        if self.off + 19 >= self.n {
            return None;
        }
        let b = self.buf;
        let reclen = u16::from_ne_bytes([b[self.off + 16], b[self.off + 17]]) as usize;
        if reclen == 0 {
            return None;
        }
        let typ = b[self.off + 18];
        let name = b.get(self.off + 19..self.n)?;
        self.off += reclen;
        Some((typ, CStr::from_bytes_until_nul(name).ok()?))
    }
}

/// Whether the process a pidfd holds has exited (its pidfd readable).
fn pidfd_exited(pfd: c_int) -> bool {
    let mut p = [PollFd::readable(pfd)];
    let mut zero = k::__kernel_timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    raw::ppoll(&mut p, Some(&mut zero)) != Ok(0) || p[0].revents != 0
}

/// Reads `/proc/<pid>/environ` and calls `on` with each held cookie
/// slot (not done with) that an element of its `CORRAL_TREE` variable
/// names, until `on` returns a value (which is returned). Read in pieces,
/// matched as it streams: no allocation, whatever the environment's size.
///
/// # Safety
/// In the keeper only.
unsafe fn environ_scan<T>(
    table: &Table,
    pid: u32,
    mut on: impl FnMut(&mut Slot) -> Option<T>,
) -> Option<T> {
    let mut path = [0u8; 48];
    let path = proc_path(&mut path, pid, b"environ")?;
    let fd = raw::openat(k::AT_FDCWD, path, k::O_RDONLY | k::O_CLOEXEC).ok()?;
    let mut m = CookieMatch::new();
    let mut buf = [0u8; 4096];
    let mut hit = None;
    // At most 4 MiB of environment are read.
    let mut left = 1024;
    let mut feed = |b: u8, hit: &mut Option<T>| {
        // SAFETY: in the keeper.
        if let Some(i) = unsafe { m.feed(b, table) } {
            // SAFETY: in the keeper; the index is a held slot's, and no
            // other reference to it is alive.
            if let Some(s) = unsafe { table.at(i) } {
                *hit = on(s);
            }
        }
    };
    while hit.is_none() && left > 0 {
        let n = match raw::read(fd, &mut buf) {
            Err(Errno::INTR) => continue,
            Ok(n @ 1..) => n,
            // The end: the last variable ends there.
            _ => {
                feed(0, &mut hit);
                break;
            }
        };
        let mut i = 0;
        while i < n && i < buf.len() && hit.is_none() {
            feed(buf[i], &mut hit);
            i += 1;
        }
        left -= 1;
    }
    raw::close(fd);
    hit
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

    /// Takes one byte; the slot of a held cookie when an element just
    /// ended that is one.
    ///
    /// # Safety
    /// In the keeper only.
    unsafe fn feed(&mut self, b: u8, table: &Table) -> Option<usize> {
        let in_value = self.prefix == COOKIE_PREFIX.len();
        if b == 0 || (in_value && b == b',') {
            let hit = if in_value {
                // SAFETY: as the caller.
                unsafe { self.held_slot(table) }
            } else {
                None
            };
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
        None
    }

    /// The held slot (not done with) whose cookie is the element just
    /// read, if any.
    ///
    /// # Safety
    /// In the keeper only.
    unsafe fn held_slot(&self, table: &Table) -> Option<usize> {
        if self.len == 0 || self.len > NAME_MAX {
            return None;
        }
        let mut i = table.half;
        while i < table.cookie_high {
            // SAFETY: bounds-checked slot, read only.
            if let Some(s) = unsafe { table.at(i) } {
                if s.kind == COOKIE
                    && s.state == HELD
                    && s.name[self.len] == 0
                    && s.name[..self.len] == self.elem[..self.len]
                {
                    return Some(i);
                }
            }
            i += 1;
        }
        None
    }
}

/// SIGKILLs a member held by its pidfd, and the process group its pid
/// names (Linux 6.9; `ESRCH` when it leads none): both through the pidfd,
/// so never a stranger.
fn kill_member(pidfd: c_int) {
    let _ = raw::pidfd_send_signal(pidfd, k::SIGKILL, PIDFD_SIGNAL_PROCESS_GROUP);
    let _ = raw::pidfd_send_signal(pidfd, k::SIGKILL, 0);
}

/// Removes the cgroups below the directory `dir` (deepest first, up to
/// depth 8). Best effort.
fn remove_below(dir: c_int, depth: u32) {
    if depth > 8 {
        return;
    }
    let flags = k::O_RDONLY | k::O_DIRECTORY | k::O_CLOEXEC;
    let Ok(d) = raw::openat(dir, c".", flags) else {
        return;
    };
    let mut buf = [0u8; 2048];
    while let Ok(n @ 1..) = raw::getdents64(d, &mut buf) {
        let mut entries = Dirents::new(&buf, n);
        while let Some((typ, name)) = entries.next() {
            if typ != DT_DIR || name == c"." || name == c".." {
                continue;
            }
            if let Ok(sub) = raw::openat(d, name, flags) {
                remove_below(sub, depth + 1);
                raw::close(sub);
            }
            let _ = raw::rmdirat(d, name);
        }
    }
    raw::close(d);
}

/// `d_type` of a directory.
const DT_DIR: u8 = 4;

#[cfg(test)]
mod tests {
    use super::*;

    /// A table of `n` run slots and `n` cookie slots, on the heap (the
    /// keeper maps its own; the rules are the same).
    struct TestTable {
        slots: Vec<Slot>,
        table: Table,
    }

    impl TestTable {
        fn new(n: usize, cookies: &[&[u8]]) -> TestTable {
            let mut slots: Vec<Slot> = (0..2 * n)
                .map(|_| Slot {
                    id: 0,
                    fd: -1,
                    parent: 0,
                    grace_ms: 0,
                    kind: EMPTY,
                    signal: 0,
                    state: HELD,
                    quiet: 0,
                    seen: 0,
                    name: [0; NAME_MAX + 1],
                })
                .collect();
            for (i, c) in cookies.iter().enumerate() {
                let s = &mut slots[n + i];
                s.kind = COOKIE;
                s.name[..c.len()].copy_from_slice(c);
            }
            let table = Table {
                base: slots.as_mut_ptr(),
                len: 2 * n,
                high: 0,
                half: n,
                cookie_high: n + cookies.len(),
            };
            TestTable { slots, table }
        }
    }

    /// Whether an `environ` image (NUL-separated variables) carries a held
    /// cookie, fed one byte at a time and then the end (a 0), as
    /// `environ_has_cookie` does.
    fn matches(t: &TestTable, environ: &[u8]) -> bool {
        assert!(!t.slots.is_empty());
        let mut m = CookieMatch::new();
        // SAFETY: one thread; the table's slots are alive in `t`.
        environ
            .iter()
            .chain([&0])
            .any(|&b| unsafe { m.feed(b, &t.table) }.is_some())
    }

    /// The cookie rule: an element of `CORRAL_TREE`, whole, matches a held
    /// cookie; a prefix, a longer element, another variable, a cookie no
    /// slot holds, do not.
    #[test]
    fn cookies_match_whole_elements_of_the_tree_variable() {
        let t = TestTable::new(4, &[b"12.a", b"7.b"]);
        let cases: [(&[u8], bool); 12] = [
            (b"CORRAL_TREE=12.a", true),
            (b"CORRAL_TREE=7.b", true),
            (b"CORRAL_TREE=1.x,12.a,9.z", true),
            (b"CORRAL_TREE=1.x,7.b", true),
            (b"A=1\0CORRAL_TREE=7.b\0B=2", true),
            (b"CORRAL_TREE=12.ab", false),
            (b"CORRAL_TREE=12.", false),
            (b"CORRAL_TREE=", false),
            (b"CORRAL_TREE=,,", false),
            (b"X_CORRAL_TREE=12.a", false),
            (b"OTHER=12.a", false),
            (b"CORRAL_TREE=99.q", false),
        ];
        for (environ, want) in cases {
            assert_eq!(
                matches(&t, environ),
                want,
                "{}",
                String::from_utf8_lossy(environ)
            );
        }
        // No cookie held: nothing matches.
        assert!(!matches(&TestTable::new(2, &[]), b"CORRAL_TREE=12.a"));
        // An element longer than any cookie can be is not a match.
        let long = [b"CORRAL_TREE=".as_slice(), &[b'x'; NAME_MAX + 5]].concat();
        assert!(!matches(&t, &long));
    }

    /// The files of the first signal's look: a process group from `stat`
    /// (a comm with spaces and parentheses), a cgroup's name as a whole
    /// component of a `0::` path, `populated` from `cgroup.events`, and
    /// `/proc/<pid>/<file>` paths.
    #[test]
    fn first_signal_files_are_read_within_bounds() {
        let tail = b" 0 0 0 0 0 0 0 0 20 0 1 0 123456 0 0";
        let line = |head: &[u8]| [head, tail.as_slice()].concat();
        assert_eq!(
            stat_fields(&line(b"42 (sh) S 1 42 42 0 -1 4194304")),
            Some((42, 123_456))
        );
        assert_eq!(
            stat_fields(&line(b"7 (a) b (c)) R 3 9 9 0 -1 0")),
            Some((9, 123_456))
        );
        // The real thing: this process's own.
        let me = std::fs::read(format!("/proc/{}/stat", std::process::id())).unwrap();
        let (pgrp, start) = stat_fields(&me).unwrap();
        assert_eq!(
            pgrp,
            rustix::process::getpgrp().as_raw_nonzero().get() as u32
        );
        assert!(start > 0);
        assert_eq!(stat_fields(b"7 (x) R 3"), None);
        assert_eq!(stat_fields(&line(b"7 (x) R 3 -1 0 0 0 0")), None);
        assert_eq!(stat_fields(b"no parenthesis"), None);
        assert_eq!(stat_fields(&line(b"7 (x) R 3 99999999999 0 0 0 0")), None);
        let name = b"corral-1-abcd-0";
        assert!(has_component(b"/user.slice/corral-1-abcd-0", name));
        assert!(has_component(b"/a/corral-1-abcd-0/sub", name));
        assert!(!has_component(b"/a/corral-1-abcd-01", name));
        assert!(!has_component(b"/a/xcorral-1-abcd-0", name));
        assert!(!has_component(b"/", b""));
        assert!(events_populated(b"populated 1\nfrozen 0\n"));
        assert!(!events_populated(b"populated 0\nfrozen 0\n"));
        assert!(!events_populated(b"frozen 1\npopulated 0\n"));
        assert!(events_populated(b""));
        assert!(events_populated(b"xpopulated 0\n"));
        let mut buf = [0u8; 48];
        assert_eq!(
            proc_path(&mut buf, 4_194_304, b"environ").unwrap(),
            c"/proc/4194304/environ"
        );
        let mut buf = [0u8; 48];
        assert_eq!(proc_path(&mut buf, 0, b"stat").unwrap(), c"/proc/0/stat");
        let mut buf = [0u8; 48];
        assert!(proc_path(&mut buf, u32::MAX, &[b'x'; 40]).is_none());
    }

    /// A `/proc` entry is a process when its name is 1 to 9 digits, not 0.
    #[test]
    fn proc_entries_name_pids() {
        let cases: [(&[u8], Option<u32>); 8] = [
            (b"1", Some(1)),
            (b"4194304", Some(4_194_304)),
            (b"999999999", Some(999_999_999)),
            (b"1234567890", None),
            (b"0", None),
            (b"", None),
            (b"self", None),
            (b"12a", None),
        ];
        for (name, want) in cases {
            assert_eq!(pid_of_name(name), want, "{}", String::from_utf8_lossy(name));
        }
    }

    /// Directory records are walked by their length, each name up to its
    /// NUL; a zero length or a truncated buffer ends the walk.
    #[test]
    fn dirents_are_walked_by_record_length() {
        fn record(typ: u8, name: &[u8]) -> Vec<u8> {
            let len = (19 + name.len() + 1).div_ceil(8) * 8;
            let mut r = vec![0u8; len];
            r[16..18].copy_from_slice(&(len as u16).to_ne_bytes());
            r[18] = typ;
            r[19..19 + name.len()].copy_from_slice(name);
            r
        }
        let buf = [
            record(DT_DIR, b"."),
            record(8, b"file"),
            record(DT_DIR, b"run-1"),
        ]
        .concat();
        let walk = |n: usize| {
            let mut d = Dirents::new(&buf, n);
            let mut out = Vec::new();
            while let Some((typ, name)) = d.next() {
                out.push((typ, name.to_bytes().to_vec()));
            }
            out
        };
        assert_eq!(
            walk(buf.len()),
            [
                (DT_DIR, b".".to_vec()),
                (8, b"file".to_vec()),
                (DT_DIR, b"run-1".to_vec())
            ]
        );
        assert_eq!(walk(0), []);
        assert_eq!(walk(24 + 24 + 19).len(), 2);
        let mut zero = buf.clone();
        zero[24 + 16] = 0;
        zero[24 + 17] = 0;
        let mut d = Dirents::new(&zero, zero.len());
        assert!(d.next().is_some() && d.next().is_none());
    }
}
