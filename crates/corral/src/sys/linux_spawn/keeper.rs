//! The keeper: crash safety for the cgroup, subreaper and process-group
//! tiers (Linux, x86_64 and aarch64). A child module of `linux_spawn`
//! (raw-syscall helpers).
//!
//! One small process per corral process, started on the first run that
//! needs it (or earlier, by `corral::start_keeper`), and never waited for:
//! what the host sends before the keeper runs is queued in the socket. A
//! fork (clone3 without `CLONE_VM`, on a stack of its own, all signals
//! blocked, every handler reset) that never execs and issues only raw
//! system calls (no allocation, lock or TLS: it is a fork of a possibly
//! multithreaded host). It starts its own session (a `kill` of corral's
//! process group does not take it along), closes every descriptor but two —
//! a `SOCK_SEQPACKET` socket to the host and a pidfd of the host — and holds,
//! for every live cgroup run, the cgroup's directory descriptor (and, once,
//! the directory it is in), and for every process-group or subreaper run
//! the tree's cookie (sent before the spawn, so the root is covered before
//! its own registration reaches the keeper) and the root's pidfd, received
//! with `SCM_RIGHTS`, and the pidfds of the subreaper tree's members that a
//! scan saw outside the root's group.
//!
//! When the host dies, by any cause (the pidfd becomes readable; the socket
//! reaching end of file is a second witness), the keeper kills each held
//! root's process group (see `kill_root`) and each held member, then every
//! process whose
//! environment carries a held cookie (see `kill_by_cookies`: `setsid` and
//! double-fork escapers, and a root not registered yet), writes `1` to
//! `cgroup.kill` of every cgroup it holds (the kernel kills every process in
//! it and below, and only those: a directory descriptor names one cgroup,
//! never a later one with the same name), removes the directories (deepest
//! first, retried for up to 2 s while the kill completes), and exits. A run
//! that ends normally unregisters (its descriptors are closed) before the
//! host moves kept leftovers out: a kept process is never killed by the
//! keeper.
//!
//! The table is an anonymous mapping the keeper makes at its start, one
//! 88-byte slot per descriptor it can hold (its soft descriptor limit raised
//! to the hard one, less a reserve; at most [`MAX_SLOTS`]) and as many
//! again for tree cookies (which hold no descriptor, so a cookie never takes
//! a run's place), reserved and not committed; it tells the host its
//! capacity in its first message. The host
//! picks the slot of each registration (a free list), so adding and removing
//! cost the keeper O(1); every run costs it one descriptor (a cgroup's
//! parent directory is sent once). A run past the capacity is not crash-safe
//! (the registration says so).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::raw::c_int;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::MutexGuard;

use crate::sys::per_process::PerProcess;

/// prctl(2) option that names the calling thread.
const PR_SET_NAME: usize = 15;

use linux_raw_sys::errno as en;
use linux_raw_sys::general as k;

use super::raw::{clone3_with, errno_of, set_sigmask, syscall4, syscall6};
use super::stack::Stack;

/// Most runs one keeper holds, whatever its descriptor limit (the table is
/// reserved, not committed, at this size: 88 bytes a slot).
const MAX_SLOTS: usize = 1 << 20;
/// Descriptors the keeper keeps free for its own work after the host died
/// (`cgroup.kill`, `/proc/<pid>/stat`, the removal walk: at most 11 at
/// once), beyond the socket and the host's pidfd.
const RESERVE_FDS: u64 = 16;
/// The keeper's nap after reading its queue (see the serve loop).
const KEEPER_NAP_NS: i64 = 2_000_000;
/// How often the keeper of a one-shot host reads its queue while the host
/// lives (see the serve loop): a full queue blocks the host's `sendmsg` at
/// most this long (plus the keeper's scheduling), well within `send`'s
/// patience for descriptors in flight.
const LAZY_PERIOD_NS: i64 = 50_000_000;
/// Longest cgroup name carried.
const NAME_MAX: usize = 64;
/// A cgroup: its directory, the slot of the directory it is in, its name.
const OP_ADD: u8 = 1;
/// Unregisters the slot (when the id matches).
const OP_DEL: u8 = 2;
/// A process-group or subreaper root: its pidfd, and its pid in the name
/// bytes (4 bytes).
const OP_ADD_ROOT: u8 = 3;
/// A directory cgroups are in (sent once per directory, held until the
/// keeper ends).
const OP_PARENT: u8 = 4;
/// Keeper to host, once, when it is ready: how many slots it has.
const OP_HELLO: u8 = 5;
/// A tree's cookie (the `CORRAL_TREE` element its processes inherit), in
/// the name bytes, sent before the root is spawned; no descriptor.
const OP_COOKIE: u8 = 6;
/// A member of a subreaper tree seen outside the root's group: its pidfd,
/// its pid in the name bytes (4 bytes).
const OP_ADD_MEMBER: u8 = 7;
/// op, id (8 bytes), slot (4), parent slot (4), name length, name.
const MSG_LEN: usize = 1 + 8 + 4 + 4 + 1 + NAME_MAX;
const AT_ID: usize = 1;
const AT_SLOT: usize = 9;
const AT_PARENT: usize = 13;
const AT_NAME_LEN: usize = 17;
const AT_NAME: usize = 18;

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
const MSG_DONTWAIT: usize = 0x40;
const MSG_CMSG_CLOEXEC: usize = 0x4000_0000;
/// cmsghdr (len, level, type) then one descriptor.
const CMSG_HDR: usize = 16;
const CMSG_LEN1: usize = CMSG_HDR + 4;

struct Conn {
    sock: OwnedFd,
    /// The keeper's pid: an unreaped child of `owner` (so never reused
    /// while this is kept), reaped once it is found dead.
    pid: i32,
    /// The process that started this keeper: a fork of the host inherits
    /// the connection but must have a keeper of its own.
    owner: u32,
    /// Which keeper of this process this is: a registration with an
    /// earlier one (that died) must not free a slot of this one.
    generation: u64,
    /// Slots the keeper has (it told us in its first message): every slot
    /// holds one descriptor, and the keeper has room for all of them. Until
    /// that message is read, the capacity it will have ([`expected_capacity`]:
    /// the same computation from the same descriptor limit).
    capacity: u32,
    /// The keeper's first message was not read yet. Nobody waits for it:
    /// registrations are queued in the socket, and the keeper reads them
    /// after it sent it; it is read, if it has come, whenever the host
    /// talks to the keeper or asks whether it holds a run
    /// ([`Registration::is_live`], [`Registration::is_live_and_running`]).
    hello_pending: bool,
    /// Slots below this were handed out at least once.
    fresh: u32,
    /// Slots handed out and given back (reused before fresh ones).
    free: Vec<u32>,
    /// Cookie slots (no descriptor: the keeper's table has as many again
    /// past `capacity`), handed out like the others: `capacity +
    /// cookie_fresh` is the next fresh one.
    cookie_fresh: u32,
    cookie_free: Vec<u32>,
    /// Directories cgroups are in, each sent once, with its slot.
    parents: Vec<(PathBuf, u32)>,
}

impl Conn {
    /// Whether the keeper is still there. It sends nothing after its
    /// first message (read at its start), so a readable socket means end of
    /// file: the keeper died (killed by someone; the OOM killer).
    fn alive(&self) -> bool {
        self.state() != KeeperState::Gone
    }

    /// Whether the keeper runs, is stopped, or is gone, in one `waitid`
    /// that changes nothing (`WNOWAIT`; `__WALL` because it has no exit
    /// signal). Its pid is this process's unreaped child, so the answer is
    /// about the keeper and no other process. Stopped (`T`, or `t` under a
    /// tracer): a process of the same user, the command itself included,
    /// can send it SIGSTOP, which no mask blocks; stopped, it cannot act on
    /// the host's death until it is continued. Gone: it exited (killed by
    /// someone; the OOM killer), or it is not this process's child (a fork
    /// never asks: the owner is checked first).
    fn state(&self) -> KeeperState {
        // siginfo_t: 128 bytes; si_code at 8, si_pid at 16 (64-bit).
        let mut info = [0u8; 128];
        // SAFETY: waitid writes at most a siginfo_t (128 bytes) into
        // `info`; the rusage pointer is null. WNOHANG: it does not block;
        // WNOWAIT: the child's state stays as it is.
        let r = unsafe {
            syscall6(
                k::__NR_waitid,
                [
                    k::P_PID as usize,
                    self.pid as usize,
                    info.as_mut_ptr() as usize,
                    (k::WEXITED | k::WSTOPPED | k::WNOHANG | k::WNOWAIT | k::__WALL) as usize,
                    0,
                    0,
                ],
            )
        };
        if r == -(en::EINTR as isize) {
            return self.state();
        }
        if r < 0 {
            return KeeperState::Gone;
        }
        let code = i32::from_ne_bytes([info[8], info[9], info[10], info[11]]);
        let pid = i32::from_ne_bytes([info[16], info[17], info[18], info[19]]);
        if pid == 0 {
            KeeperState::Running
        } else if code == k::CLD_STOPPED as i32 || code == k::CLD_TRAPPED as i32 {
            KeeperState::Stopped
        } else {
            KeeperState::Gone
        }
    }

    /// A free cookie slot (past `capacity`: a cookie costs the keeper no
    /// descriptor, so it does not take a run's place).
    fn take_cookie_slot(&mut self) -> io::Result<u32> {
        if let Some(s) = self.cookie_free.pop() {
            return Ok(s);
        }
        if self.cookie_fresh < self.capacity {
            self.cookie_fresh += 1;
            return Ok(self.capacity + self.cookie_fresh - 1);
        }
        Err(io::Error::other(format!(
            "the keeper already holds {} trees by their cookie: this one is not crash-safe",
            self.capacity
        )))
    }

    /// Whether `slot` is one the keeper has: a run's slot below its
    /// capacity, or a cookie slot in the second half of its table
    /// (`capacity` more, see [`Conn::take_cookie_slot`]).
    fn has_slot(&self, slot: u32) -> bool {
        slot < self.capacity.saturating_mul(2)
    }

    /// Gives `slot` back to its free list.
    fn give_back(&mut self, slot: u32) {
        if slot >= self.capacity {
            self.cookie_free.push(slot);
        } else {
            self.free.push(slot);
        }
    }

    /// A free slot, or why there is none. A run past the keeper's capacity
    /// is told at once that it is not crash-safe, and costs the keeper
    /// nothing.
    fn take_slot(&mut self) -> io::Result<u32> {
        if let Some(s) = self.free.pop() {
            return Ok(s);
        }
        if self.fresh < self.capacity {
            self.fresh += 1;
            return Ok(self.fresh - 1);
        }
        Err(io::Error::other(format!(
            "the keeper already holds {} runs (its descriptor limit; \
             `corral::raise_nofile_limit` raises it for keepers started later): \
             this one is not crash-safe",
            self.capacity
        )))
    }
}

/// What [`Conn::state`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KeeperState {
    Running,
    Stopped,
    Gone,
}

/// This process's keeper connection, under its lock: a fork of the host
/// makes its own and never waits for a lock its parent held at the fork
/// (see [`PerProcess`]).
static KEEPER: PerProcess<Option<Conn>> = PerProcess::new(|| None);

fn keeper_lock() -> MutexGuard<'static, Option<Conn>> {
    KEEPER.lock()
}

static NEXT: AtomicU64 = AtomicU64::new(1);

/// The keeper's pid (low half) and the pid of the process that started it
/// (high half), read without the keeper lock by [`pid_of_own_keeper`].
static KEEPER_PID: AtomicU64 = AtomicU64::new(0);

/// The pid of this process's keeper, if it started one: a child of this
/// process that is never an orphan of a run (the orphan reaper leaves it
/// alone without reading its `/proc` files).
pub(crate) fn pid_of_own_keeper() -> Option<u32> {
    let v = KEEPER_PID.load(Ordering::Relaxed);
    let (owner, pid) = ((v >> 32) as u32, v as u32);
    (pid != 0 && owner == crate::sys::per_process::pid()).then_some(pid)
}
static GENERATION: AtomicU64 = AtomicU64::new(1);

/// A run registered with the keeper; dropping it unregisters.
pub(crate) struct Registration {
    id: u64,
    slot: u32,
    generation: u64,
}

impl Registration {
    /// Whether the keeper this run was registered with still holds it: this
    /// process's keeper, the same one, and alive. A cgroup kept for later
    /// runs (the pool) holds its registration across runs; once its keeper
    /// died, nothing would kill its tree at this process's death.
    pub(crate) fn is_live(&self) -> bool {
        let mut guard = keeper_lock();
        guard.as_mut().is_some_and(|c| {
            c.owner == crate::sys::per_process::pid()
                && c.generation == self.generation
                // Its first message, if it came: a registration past the
                // capacity it has is not held. Not come yet: what was sent
                // is queued and honoured once it runs (as with a stopped
                // keeper, below).
                && read_hello(c, None).is_ok()
                && c.has_slot(self.slot)
                && c.alive()
        })
    }

    /// [`Registration::is_live`], and the keeper not stopped: asked when a
    /// run ends. A process of the same user (the command itself) can stop
    /// the keeper (SIGSTOP, which no mask blocks); stopped, it cannot act
    /// on the host's death until it is continued, so a run that ends with
    /// it stopped was not crash-safe. (At the start a stopped keeper is
    /// taken as a busy one: what it is sent is queued and honoured once it
    /// runs.) The connection is kept: continued, it holds the next run.
    pub(crate) fn is_live_and_running(&self) -> bool {
        let mut guard = keeper_lock();
        guard.as_mut().is_some_and(|c| {
            c.owner == crate::sys::per_process::pid()
                && c.generation == self.generation
                && c.state() == KeeperState::Running
                // Its first message, if it came (not waited for: on a busy
                // machine the keeper may not have run yet, and what was
                // sent is queued for it; its capacity is then the one its
                // descriptor limit gives, see `expected_capacity`).
                && read_hello(c, None).is_ok()
                && c.has_slot(self.slot)
        })
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut msg = [0u8; MSG_LEN];
        msg[0] = OP_DEL;
        msg[AT_ID..AT_ID + 8].copy_from_slice(&self.id.to_ne_bytes());
        msg[AT_SLOT..AT_SLOT + 4].copy_from_slice(&self.slot.to_ne_bytes());
        let mut guard = keeper_lock();
        if let Some(c) = guard.as_mut().filter(|c| {
            c.owner == crate::sys::per_process::pid() && c.generation == self.generation
        }) {
            // Sent before the slot can be handed out again: the socket
            // keeps the order, so the keeper never sees the next run's
            // registration before this removal.
            let _ = send(&c.sock, &msg, None);
            c.give_back(self.slot);
        }
    }
}

/// Hands the keeper the root of a process-group or subreaper run: if this
/// process dies while the run is registered, the keeper kills the root's
/// process group through the root's pidfd (`PIDFD_SIGNAL_PROCESS_GROUP`,
/// Linux 6.9; the root alone before), also when the root itself was
/// already reaped. Never a stranger: the pidfd names the root's own group.
pub(crate) fn register_root(pidfd: BorrowedFd<'_>, pid: u32) -> io::Result<Registration> {
    let mut msg = [0u8; MSG_LEN];
    msg[0] = OP_ADD_ROOT;
    msg[AT_NAME_LEN] = 4;
    msg[AT_NAME..AT_NAME + 4].copy_from_slice(&pid.to_ne_bytes());
    with_keeper(|c| add(c, &mut msg, Some(pidfd.as_raw_fd())))
}

/// Hands the keeper a member of a subreaper tree that left the root's
/// group (seen by a scan of the tree, pinned by `pidfd`, checked against
/// its start time by the caller): if this process dies while it is
/// registered, the keeper SIGKILLs it, and the process group its pid names
/// (what it made with `setsid`/`setpgid`), through that pidfd. For members
/// the cookie cannot find (they cleared their environment).
pub(crate) fn register_member(pidfd: BorrowedFd<'_>, pid: u32) -> io::Result<Registration> {
    let mut msg = [0u8; MSG_LEN];
    msg[0] = OP_ADD_MEMBER;
    msg[AT_NAME_LEN] = 4;
    msg[AT_NAME..AT_NAME + 4].copy_from_slice(&pid.to_ne_bytes());
    with_keeper(|c| add(c, &mut msg, Some(pidfd.as_raw_fd())))
}

/// Hands the keeper a tree's cookie before its root is spawned: if this
/// process dies while it is registered, the keeper kills every process
/// whose environment carries it (an element of `CORRAL_TREE`), through a
/// pidfd it opened first and checked after reading the environment: the
/// root before its own registration (there is no window between the spawn
/// and the keeper's hold), and escapers that left the root's group
/// (`setsid`, double fork) but kept their environment.
pub(crate) fn register_cookie(cookie: &str) -> io::Result<Registration> {
    if cookie.is_empty() || cookie.len() > NAME_MAX || cookie.bytes().any(|b| b == 0 || b == b',') {
        return Err(io::Error::other("tree cookie unfit for the keeper"));
    }
    let mut msg = [0u8; MSG_LEN];
    msg[0] = OP_COOKIE;
    msg[AT_NAME_LEN] = cookie.len() as u8;
    msg[AT_NAME..AT_NAME + cookie.len()].copy_from_slice(cookie.as_bytes());
    with_keeper(|c| add(c, &mut msg, None))
}

/// Hands the keeper a cgroup to kill and remove if this process dies
/// before the run ends. `dir` is the cgroup's directory, `parent` the
/// directory it is in, `name` its name there. The parent directory is
/// opened and sent once per keeper: a run costs one `sendmsg` with one
/// descriptor, and the keeper one descriptor.
pub(crate) fn register(dir: BorrowedFd<'_>, parent: &Path, name: &str) -> io::Result<Registration> {
    if name.len() > NAME_MAX {
        return Err(io::Error::other("cgroup name too long for the keeper"));
    }
    let mut msg = [0u8; MSG_LEN];
    msg[0] = OP_ADD;
    msg[AT_NAME_LEN] = name.len() as u8;
    msg[AT_NAME..AT_NAME + name.len()].copy_from_slice(name.as_bytes());
    with_keeper(|c| {
        let parent_slot = parent_slot(c, parent)?;
        msg[AT_PARENT..AT_PARENT + 4].copy_from_slice(&parent_slot.to_ne_bytes());
        add(c, &mut msg, Some(dir.as_raw_fd()))
    })
}

/// The keeper's slot for the directory `parent`, sent to it now if it was
/// not before.
fn parent_slot(c: &mut Conn, parent: &Path) -> io::Result<u32> {
    if let Some((_, s)) = c.parents.iter().find(|(p, _)| p == parent) {
        return Ok(*s);
    }
    let fd = rustix::fs::open(
        parent,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?;
    let slot = c.take_slot()?;
    let mut msg = [0u8; MSG_LEN];
    msg[0] = OP_PARENT;
    msg[AT_SLOT..AT_SLOT + 4].copy_from_slice(&slot.to_ne_bytes());
    match send(&c.sock, &msg, Some(fd.as_raw_fd())) {
        Ok(()) => {
            c.parents.push((parent.to_path_buf(), slot));
            Ok(slot)
        }
        Err(e) => {
            c.free.push(slot);
            Err(e)
        }
    }
}

/// Sends `msg` (an add) with `fd`, if any, in a free slot.
fn add(c: &mut Conn, msg: &mut [u8; MSG_LEN], fd: Option<c_int>) -> io::Result<Registration> {
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    let slot = if msg[0] == OP_COOKIE {
        c.take_cookie_slot()?
    } else {
        c.take_slot()?
    };
    msg[AT_ID..AT_ID + 8].copy_from_slice(&id.to_ne_bytes());
    msg[AT_SLOT..AT_SLOT + 4].copy_from_slice(&slot.to_ne_bytes());
    match send(&c.sock, msg, fd) {
        Ok(()) => Ok(Registration {
            id,
            slot,
            generation: c.generation,
        }),
        Err(e) => {
            c.give_back(slot);
            Err(e)
        }
    }
}

/// Test seam: with this environment variable set (non-empty), the keeper
/// "cannot be started" in this process, so tests can prove that the report
/// says the run is not crash-safe (and that a run requiring it fails).
pub(crate) const FAULT_START_ENV: &str = "CORRAL_TEST_FAIL_KEEPER";

/// Starts this process's keeper if it is not running yet: whether runs
/// can be made crash-safe here.
pub(crate) fn ensure() -> io::Result<()> {
    with_keeper(|_| Ok(()))
}

/// How many runs this process's keeper can hold at once (starting it if
/// it is not running yet).
#[cfg(test)]
pub(crate) fn capacity() -> io::Result<u32> {
    with_keeper(|c| {
        read_hello(c, Some(HELLO_PATIENCE))?;
        Ok(c.capacity)
    })
}

/// Runs `f` on this process's keeper connection, under the lock, starting
/// the keeper first if needed (and once more if it turns out to be gone).
fn with_keeper<T>(mut f: impl FnMut(&mut Conn) -> io::Result<T>) -> io::Result<T> {
    let mut guard = keeper_lock();
    if guard
        .as_ref()
        .is_some_and(|c| c.owner != crate::sys::per_process::pid())
    {
        // Inherited through a fork: the parent's keeper, not ours.
        drop(guard.take());
    }
    if let Some(c) = guard.as_mut().filter(|c| c.hello_pending) {
        // Its first message, if it came (not waited for). End of file: it
        // died before it was ready, and another is started.
        if read_hello(c, None).is_err() {
            reap_dead(guard.take());
        }
    }
    if guard.as_ref().is_some_and(|c| !c.alive()) {
        // The keeper died: a registration sent to it now would be lost
        // without an error (its socket may still take a message), and a
        // run that requires crash safety must get a keeper that holds it.
        reap_dead(guard.take());
    }
    for _ in 0..2 {
        if guard.is_none() {
            *guard = Some(launch()?);
        }
        if let Some(c) = guard.as_mut() {
            match f(c) {
                // The keeper is gone (it should not be): start another.
                Err(e)
                    if e.raw_os_error() == Some(en::EPIPE as i32)
                        || e.raw_os_error() == Some(en::ECONNRESET as i32) =>
                {
                    reap_dead(guard.take());
                }
                r => return r,
            }
        }
    }
    Err(io::Error::other("the keeper could not be started"))
}

/// Reaps a keeper of this process found dead (its socket at end of file),
/// so that it does not stay a zombie child of the host. Its socket closes
/// while it exits, a moment before it can be reaped: a few tries, bounded
/// (a keeper that is somehow still there is left alone, never waited for).
fn reap_dead(conn: Option<Conn>) {
    let Some(c) = conn else { return };
    if c.owner != crate::sys::per_process::pid() {
        return; // a fork's inherited keeper is not our child
    }
    // Its pid is free once it is reaped below: no longer the keeper's.
    let _ = KEEPER_PID.compare_exchange(
        (u64::from(c.owner) << 32) | u64::from(c.pid as u32),
        0,
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    drop(c.sock);
    for _ in 0..100 {
        // SAFETY: wait4 with a null status and rusage pointer: no memory is
        // written. `c.pid` is this process's unreaped child (nothing else
        // waits for it: it has no exit signal, and only `__WALL` finds it),
        // so the pid cannot name another process.
        let r = unsafe {
            syscall4(
                k::__NR_wait4,
                c.pid as usize,
                0,
                (k::WNOHANG | k::__WALL) as usize,
                0,
            )
        };
        if r != 0 {
            return; // reaped, or not ours to reap (ECHILD)
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

fn send(sock: &OwnedFd, msg: &[u8], fd: Option<c_int>) -> io::Result<()> {
    let mut iov = Iovec {
        base: msg.as_ptr() as usize,
        len: msg.len(),
    };
    // CMSG_SPACE(4): the length rounded up to 8.
    let mut control = [0u8; CMSG_LEN1.div_ceil(8) * 8];
    let mut hdr = Msghdr {
        name: 0,
        namelen: 0,
        iov: &mut iov,
        iovlen: 1,
        control: std::ptr::null_mut(),
        controllen: 0,
        flags: 0,
    };
    if let Some(fd) = fd {
        control[0..8].copy_from_slice(&(CMSG_LEN1 as u64).to_ne_bytes());
        control[8..12].copy_from_slice(&SOL_SOCKET.to_ne_bytes());
        control[12..16].copy_from_slice(&SCM_RIGHTS.to_ne_bytes());
        control[16..20].copy_from_slice(&fd.to_ne_bytes());
        hdr.control = control.as_mut_ptr();
        hdr.controllen = control.len();
    }
    // Descriptors in flight (sent, not yet received) count against the
    // sender's RLIMIT_NOFILE without CAP_SYS_RESOURCE: past it `sendmsg`
    // fails with ETOOMANYREFS until the keeper reads its queue, which it
    // does as soon as it runs. Wait for that, within a bound.
    let patience = std::time::Instant::now() + std::time::Duration::from_secs(2);
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
        let e = errno_of(r);
        if e == en::ETOOMANYREFS as i32 && std::time::Instant::now() < patience {
            std::thread::sleep(std::time::Duration::from_millis(1));
            continue;
        }
        if e != en::EINTR as i32 {
            return Err(io::Error::from_raw_os_error(e));
        }
    }
}

/// Lets many registrations wait in the socket for a keeper that is not
/// scheduled yet (thousands of runs starting at once on a busy machine):
/// `sendmsg` blocks, under the keeper lock, once the host's send buffer is
/// full (about 200 messages at the default `wmem_default`; the kernel
/// charges each its full buffer size). Asks for 8 MiB (`SO_SNDBUFFORCE`
/// with `CAP_NET_ADMIN`, else `SO_SNDBUF`, which the kernel caps at
/// `net.core.wmem_max`); best effort. Queued messages are not lost if the
/// host dies: the keeper reads them all before it acts.
fn enlarge_send_buffer(sock: &OwnedFd) {
    const SO_SNDBUF: usize = 7;
    const SO_SNDBUFFORCE: usize = 32;
    let want: c_int = 4 << 20; // the kernel doubles it
    for opt in [SO_SNDBUFFORCE, SO_SNDBUF] {
        // SAFETY: `want` is an int that outlives the call, its size given.
        let r = unsafe {
            syscall6(
                k::__NR_setsockopt,
                [
                    sock.as_raw_fd() as usize,
                    SOL_SOCKET as usize,
                    opt,
                    &want as *const c_int as usize,
                    std::mem::size_of::<c_int>(),
                    0,
                ],
            )
        };
        if r == 0 {
            return;
        }
    }
}

/// Starts this process's keeper if it is not running yet, without waiting
/// for its first message: the first registration reads it (see
/// [`with_keeper`]). A failure is left for that registration to meet
/// again (it starts the keeper the usual way, and says why it could not).
pub(crate) fn start_in_background() {
    let mut guard = keeper_lock();
    if guard
        .as_ref()
        .is_some_and(|c| c.owner != crate::sys::per_process::pid())
    {
        drop(guard.take());
    }
    if guard.is_none() {
        *guard = launch().ok();
    }
}

/// How long a run that asks whether the keeper held it waits for the
/// keeper's first message (a running keeper sends it at once).
#[cfg(test)]
const HELLO_PATIENCE: std::time::Duration = std::time::Duration::from_secs(2);

/// Reads the keeper's first message, its capacity, if it has not been read
/// yet: without waiting (`wait` None: still pending if it has not come), or
/// waiting at most `wait`. End of file instead: it died before it was
/// ready (it holds the only other end). A capacity below the one assumed
/// until now (the keeper could not map its whole table) takes back the
/// slots past it: registrations in them are not held.
fn read_hello(c: &mut Conn, wait: Option<std::time::Duration>) -> io::Result<()> {
    if !c.hello_pending {
        return Ok(());
    }
    // Readable (the message, or end of file) within `wait`, or at once.
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let end = std::time::Instant::now() + wait.unwrap_or_default();
    loop {
        let left = end.saturating_duration_since(std::time::Instant::now());
        let mut fds = [PollFd::new(&c.sock, PollFlags::IN)];
        let ts = Timespec {
            tv_sec: left.as_secs() as i64,
            tv_nsec: i64::from(left.subsec_nanos()),
        };
        match poll(&mut fds, Some(&ts)) {
            Err(rustix::io::Errno::INTR) => continue,
            Ok(0) => return Ok(()), // not come: still pending
            _ => break,
        }
    }
    let mut hello = [0u8; MSG_LEN];
    let n = loop {
        match rustix::io::read(&c.sock, &mut hello) {
            Err(rustix::io::Errno::INTR) => continue,
            r => break r?,
        }
    };
    if n < AT_SLOT + 4 || hello[0] != OP_HELLO {
        return Err(io::Error::other(
            "the keeper ended before it was ready".to_string(),
        ));
    }
    let capacity = u32::from_ne_bytes([
        hello[AT_SLOT],
        hello[AT_SLOT + 1],
        hello[AT_SLOT + 2],
        hello[AT_SLOT + 3],
    ]);
    if capacity < c.capacity {
        c.free.retain(|&s| s < capacity);
        c.fresh = c.fresh.min(capacity);
        c.parents.retain(|&(_, s)| s < capacity);
    }
    c.capacity = capacity;
    c.hello_pending = false;
    Ok(())
}

/// The capacity a keeper started now will tell: one slot per descriptor
/// its limit allows (the hard limit, which it raises its soft one to) less
/// the socket, the host's pidfd and [`RESERVE_FDS`], at most [`MAX_SLOTS`]
/// (see `make_table`), assumed until its first message says.
fn expected_capacity() -> u32 {
    let hard = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .maximum
        .unwrap_or(u64::MAX);
    (hard.saturating_sub(2 + RESERVE_FDS) as usize).min(MAX_SLOTS) as u32
}

/// Clones the keeper; its first message is not read yet.
fn launch() -> io::Result<Conn> {
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
    enlarge_send_buffer(&ours);
    let host = rustix::process::pidfd_open(
        rustix::process::getpid(),
        rustix::process::PidfdFlags::empty(),
    )?;
    let args = KeeperArgs {
        sock: theirs.as_raw_fd(),
        host: host.as_raw_fd(),
        delay_ms: std::env::var(START_DELAY_ENV)
            .ok()
            .and_then(|v| v.parse::<u32>().ok())
            .map_or(0, |ms| ms.min(10_000)),
        lazy: LAZY.load(std::sync::atomic::Ordering::SeqCst),
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
    KEEPER_PID.store(
        (u64::from(crate::sys::per_process::pid()) << 32) | u64::from(ret as u32),
        Ordering::Relaxed,
    );
    Ok(Conn {
        sock: ours,
        pid: ret as i32,
        owner: crate::sys::per_process::pid(),
        generation: GENERATION.fetch_add(1, Ordering::Relaxed),
        capacity: expected_capacity(),
        hello_pending: true,
        fresh: 0,
        free: Vec::new(),
        cookie_fresh: 0,
        cookie_free: Vec::new(),
        parents: Vec::new(),
    })
}

#[repr(C)]
struct KeeperArgs {
    sock: c_int,
    host: c_int,
    /// Test seam ([`START_DELAY_ENV`]): how long the keeper sleeps before
    /// anything else (0: not at all).
    delay_ms: u32,
    /// The host is a one-shot process (`corral::one_shot_process`): the
    /// keeper is not woken by each message but reads its queue every
    /// [`LAZY_PERIOD_NS`] and when the host dies (see the serve loop).
    lazy: bool,
}

/// Set by `corral::one_shot_process` (through [`set_lazy`]): a keeper
/// launched from then on is lazy ([`KeeperArgs::lazy`]).
static LAZY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Makes the keepers this process launches from now on read their queue
/// every [`LAZY_PERIOD_NS`] and at the host's death, not at each message.
pub(crate) fn set_lazy() {
    LAZY.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Test seam: with this environment variable set to N, a keeper started in
/// this process sleeps N ms before it does anything (capped at 10 s), so
/// tests can prove that registrations sent to a keeper that has not run yet
/// are honoured when the host dies (the host never waits for the keeper).
pub(crate) const START_DELAY_ENV: &str = "CORRAL_TEST_KEEPER_START_DELAY_MS";

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

extern "C" fn keeper_main(arg: *const std::ffi::c_void) -> ! {
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

/// # Safety
/// Only in the keeper child.
#[inline(never)]
unsafe fn keeper(a: &KeeperArgs) -> ! {
    // SAFETY: (the whole body) raw syscalls on this process's own memory, with
    // sizes the kernel expects; no allocation, lock, TLS or panic path
    // (every slot index is checked against the table's length).
    unsafe {
        if a.delay_ms > 0 {
            let nap = k::__kernel_timespec {
                tv_sec: i64::from(a.delay_ms / 1000),
                tv_nsec: i64::from(a.delay_ms % 1000) * 1_000_000,
            };
            syscall4(
                k::__NR_nanosleep,
                &nap as *const k::__kernel_timespec as usize,
                0,
                0,
                0,
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

        let mut table = make_table();
        let mut hello = [0u8; MSG_LEN];
        hello[0] = OP_HELLO;
        // Slots past the first half hold cookies (no descriptor).
        let cap = ((table.len / 2) as u32).to_ne_bytes();
        hello[AT_SLOT..AT_SLOT + 4].copy_from_slice(&cap);
        syscall6(
            k::__NR_sendto,
            [
                a.sock as usize,
                hello.as_ptr() as usize,
                MSG_LEN,
                MSG_NOSIGNAL,
                0,
                0,
            ],
        );

        #[repr(C)]
        struct PollFd {
            fd: c_int,
            events: i16,
            revents: i16,
        }
        'serve: loop {
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
            let r = syscall6(
                k::__NR_ppoll,
                [fds.as_mut_ptr() as usize, 2, timeout, 0, 8, 0],
            );
            if r < 0 && r != -(en::EINTR as isize) {
                break;
            }
            // The host died. Its registrations still in the socket's queue
            // are read first: a run that was told it is crash-safe is.
            let host_gone = fds[1].revents != 0;
            let period_over = a.lazy && r == 0;
            if fds[0].revents == 0 && !host_gone && !period_over {
                continue;
            }
            // Every message waiting, then back to the poll.
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
                let n = syscall4(
                    k::__NR_recvmsg,
                    a.sock as usize,
                    &mut hdr as *mut Msghdr as usize,
                    MSG_CMSG_CLOEXEC | MSG_DONTWAIT,
                    0,
                );
                // ECONNRESET: the host died with a message of the keeper's
                // (its first) unread, which the kernel reports once, before
                // the messages still queued here: read on, they count.
                if n == -(en::EINTR as isize) || n == -(en::ECONNRESET as isize) {
                    continue;
                }
                if n == -(en::EAGAIN as isize) {
                    break;
                }
                if n <= 0 {
                    break 'serve; // end of file: the host closed its end (it died)
                }
                serve(&mut table, &msg, &control, hdr.controllen);
            }
            if host_gone {
                break;
            }
            if a.lazy {
                continue; // the period is its nap
            }
            // A short nap before looking again: a busy host's messages
            // (two a process-group run) are then read in batches, not with
            // a wake-up each, which took CPU from the host's next run. A
            // message waits at most this long; the host's death is seen at
            // most this late, and its queued messages are still read first.
            let nap = k::__kernel_timespec {
                tv_sec: 0,
                tv_nsec: KEEPER_NAP_NS,
            };
            syscall4(
                k::__NR_nanosleep,
                &nap as *const k::__kernel_timespec as usize,
                0,
                0,
                0,
            );
        }

        // The host is gone: kill every held tree, then remove the cgroups.
        let mut i = 0;
        while i < table.high {
            if let Some(s) = table.at(i) {
                if s.kind == ROOT {
                    kill_root(s.fd);
                    s.kind = EMPTY;
                } else if s.kind == MEMBER {
                    kill_member(s.fd);
                    s.kind = EMPTY;
                }
            }
            i += 1;
        }
        let kill = b"cgroup.kill\0";
        let mut i = 0;
        while i < table.high {
            if let Some(s) = table.at(i) {
                if s.kind == CGROUP {
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
                        syscall4(k::__NR_close, fd as usize, 0, 0, 0);
                    }
                }
            }
            i += 1;
        }
        // Then the trees held by their cookie (after `cgroup.kill`, which
        // is one write a tree; this looks at every process, in rounds).
        let mut cookies = false;
        let mut i = table.half;
        while i < table.cookie_high {
            cookies |= table.at(i).is_some_and(|s| s.kind == COOKIE);
            i += 1;
        }
        if cookies {
            kill_by_cookies(&table);
        }
        // Remove: retried every 2 ms for up to 2 s (the kill completes
        // asynchronously; a populated cgroup cannot be removed).
        let mut round = 0;
        while round < 1000 {
            let mut left = false;
            let mut i = 0;
            while i < table.high {
                let (kind, fd, parent) = match table.at(i) {
                    Some(s) => (s.kind, s.fd, s.parent as usize),
                    None => break,
                };
                if kind == CGROUP {
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

/// Applies one message from the host to the table: the descriptor that
/// came with it is held in the slot the host chose, or closed.
///
/// # Safety
/// In the keeper only.
unsafe fn serve(table: &mut Table, msg: &[u8; MSG_LEN], control: &[u8; 64], controllen: usize) {
    // SAFETY: raw close on descriptors this process received; slots
    // reached through `Table::at` (bounds-checked).
    unsafe {
        // The descriptors that came with the message (the host sends at
        // most one; any other is closed).
        let mut got: c_int = -1;
        if controllen >= CMSG_LEN1 {
            let len = u64::from_ne_bytes([
                control[0], control[1], control[2], control[3], control[4], control[5], control[6],
                control[7],
            ]) as usize;
            let level = i32::from_ne_bytes([control[8], control[9], control[10], control[11]]);
            let typ = i32::from_ne_bytes([control[12], control[13], control[14], control[15]]);
            if level == SOL_SOCKET && typ == SCM_RIGHTS {
                let mut off = CMSG_HDR;
                while off + 4 <= len.min(controllen).min(control.len()) {
                    let fd = i32::from_ne_bytes([
                        control[off],
                        control[off + 1],
                        control[off + 2],
                        control[off + 3],
                    ]);
                    if got < 0 {
                        got = fd;
                    } else {
                        syscall4(k::__NR_close, fd as usize, 0, 0, 0);
                    }
                    off += 4;
                }
            }
        }
        let id = u64::from_ne_bytes([
            msg[AT_ID],
            msg[AT_ID + 1],
            msg[AT_ID + 2],
            msg[AT_ID + 3],
            msg[AT_ID + 4],
            msg[AT_ID + 5],
            msg[AT_ID + 6],
            msg[AT_ID + 7],
        ]);
        let slot = u32::from_ne_bytes([
            msg[AT_SLOT],
            msg[AT_SLOT + 1],
            msg[AT_SLOT + 2],
            msg[AT_SLOT + 3],
        ]) as usize;
        let parent = u32::from_ne_bytes([
            msg[AT_PARENT],
            msg[AT_PARENT + 1],
            msg[AT_PARENT + 2],
            msg[AT_PARENT + 3],
        ]);
        let kind = match msg[0] {
            OP_ADD => CGROUP,
            OP_ADD_ROOT => ROOT,
            OP_PARENT => PARENT,
            OP_COOKIE => COOKIE,
            OP_ADD_MEMBER => MEMBER,
            _ => EMPTY,
        };
        if msg[0] == OP_DEL {
            if let Some(s) = table.at(slot) {
                if (s.kind == CGROUP || s.kind == ROOT || s.kind == COOKIE || s.kind == MEMBER)
                    && s.id == id
                {
                    if s.fd >= 0 {
                        syscall4(k::__NR_close, s.fd as usize, 0, 0, 0);
                    }
                    s.kind = EMPTY;
                }
            }
        } else if kind != EMPTY && (got >= 0 || kind == COOKIE) {
            if let Some(s) = table.at(slot) {
                if s.kind != EMPTY && s.fd >= 0 {
                    // Not given back first (the host never does this).
                    syscall4(k::__NR_close, s.fd as usize, 0, 0, 0);
                }
                let len = (msg[AT_NAME_LEN] as usize).min(NAME_MAX);
                let mut j = 0;
                while j < len {
                    s.name[j] = msg[AT_NAME + j];
                    j += 1;
                }
                s.name[len] = 0;
                s.id = id;
                s.fd = got;
                s.parent = parent;
                s.kind = kind;
                got = -1;
                if kind == COOKIE {
                    if slot >= table.cookie_high {
                        table.cookie_high = slot + 1;
                    }
                } else if slot >= table.high {
                    table.high = slot + 1;
                }
            }
        }
        if got >= 0 {
            syscall4(k::__NR_close, got as usize, 0, 0, 0);
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::time::Instant;

    /// The keeper's capacity follows its descriptor limit (the hard one,
    /// which it raises its soft limit to), not a fixed table.
    #[test]
    fn capacity_is_the_hard_descriptor_limit_less_a_reserve() {
        let hard = rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .maximum
            .unwrap_or(u64::MAX);
        let want = (hard.saturating_sub(2 + RESERVE_FDS) as usize).min(MAX_SLOTS);
        assert_eq!(capacity().unwrap() as usize, want);
        assert!(want > 512, "hard limit {hard}");
    }

    /// Registering and unregistering a root, thousands of times in a row
    /// (slots are reused; the keeper is never full), and what one costs.
    #[test]
    fn registrations_are_reused_and_cheap() {
        use std::os::unix::process::CommandExt;
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .unwrap();
        let pid = child.id();
        let fd = rustix::process::pidfd_open(
            rustix::process::Pid::from_child(&child),
            rustix::process::PidfdFlags::empty(),
        )
        .unwrap();
        ensure().unwrap();
        let n = 5_000;
        let t = Instant::now();
        for _ in 0..n {
            let r = register_root(fd.as_fd(), pid).unwrap();
            drop(r);
        }
        let each = t.elapsed() / n;
        // Held at once: a few hundred, then all given back.
        let held: Vec<Registration> = (0..600)
            .map(|_| register_root(fd.as_fd(), pid).unwrap())
            .collect();
        drop(held);
        // A tree's cookie takes no run's place: as many runs and cookies
        // as the capacity, at once.
        let cap = capacity().unwrap() as usize;
        let n = cap.min(600);
        let roots: Vec<Registration> = (0..n)
            .map(|_| register_root(fd.as_fd(), pid).unwrap())
            .collect();
        let cookies: Vec<Registration> = (0..n)
            .map(|i| register_cookie(&format!("{pid}.test{i}")).unwrap())
            .collect();
        assert!(cookies.iter().all(|c| c.slot as usize >= cap));
        assert!(roots.iter().all(|r| (r.slot as usize) < cap));
        drop((roots, cookies));
        eprintln!("register + unregister: {each:?} each");
        let _ = child.kill();
        let _ = child.wait();
    }
}
