//! The host's side of the keeper: starts it, registers runs with it and
//! takes them back, and tells whether it still holds them.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::raw::c_int;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::MutexGuard;

use linux_raw_sys::errno as en;
use linux_raw_sys::general as k;

use super::process::{keeper_main, KeeperArgs};
use super::protocol::{
    rights_control, Farewell, Message, AF_UNIX, MSG_LEN, MSG_NOSIGNAL, OP_ADD, OP_ADD_MEMBER,
    OP_ADD_ROOT, OP_COOKIE, OP_DEL, OP_FAREWELL, OP_PARENT, SOCK_SEQPACKET, SOL_SOCKET,
};
use super::{MAX_SLOTS, RESERVE_FDS};
use crate::sys::linux_spawn::raw::{self, clone3_from_host, Errno, HostCloneError, Iovec, Msghdr};
use crate::sys::per_process::PerProcess;

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
        // WNOHANG: it does not block; WNOWAIT: the child's state stays as
        // it is.
        let flags = k::WEXITED | k::WSTOPPED | k::WNOHANG | k::WNOWAIT | k::__WALL;
        match raw::waitid(self.pid as u32, &mut info, flags) {
            Err(Errno::INTR) => return self.state(),
            Err(_) => return KeeperState::Gone,
            Ok(_) => {}
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
    /// What the keeper does to the tree if this process dies.
    farewell: Farewell,
}

impl Registration {
    /// Whether the keeper holds this run with `farewell` (a pooled cgroup
    /// borrowed by a run with another signal or grace is registered again).
    pub(crate) fn has_farewell(&self, farewell: crate::spec::Farewell) -> bool {
        self.farewell == Farewell::of(farewell)
    }

    /// Gives the held tree a new farewell (the run's termination started:
    /// SIGKILL at once). Sent in the socket's order, so the keeper has it
    /// before it acts on the host's death; best effort (a keeper gone
    /// holds nothing).
    pub(crate) fn set_farewell(&mut self, farewell: crate::spec::Farewell) {
        let wire = Farewell::of(farewell);
        if wire == self.farewell {
            return;
        }
        let mut msg = Message::new(OP_FAREWELL);
        msg.id = self.id;
        msg.slot = self.slot;
        msg.farewell = wire;
        let mut guard = keeper_lock();
        if let Some(c) = guard.as_mut().filter(|c| {
            c.owner == crate::sys::per_process::pid() && c.generation == self.generation
        }) {
            if send(&c.sock, &msg.encode(), None).is_ok() {
                self.farewell = wire;
            }
        }
    }

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
        let mut msg = Message::new(OP_DEL);
        msg.id = self.id;
        msg.slot = self.slot;
        let mut guard = keeper_lock();
        if let Some(c) = guard.as_mut().filter(|c| {
            c.owner == crate::sys::per_process::pid() && c.generation == self.generation
        }) {
            // Sent before the slot can be handed out again: the socket
            // keeps the order, so the keeper never sees the next run's
            // registration before this removal.
            let _ = send(&c.sock, &msg.encode(), None);
            c.give_back(self.slot);
        }
    }
}

/// Hands the keeper the root of a process-group or subreaper run: if this
/// process dies while the run is registered, the keeper kills the root's
/// process group through the root's pidfd (`PIDFD_SIGNAL_PROCESS_GROUP`,
/// Linux 6.9; the root alone before), also when the root itself was
/// already reaped. Never a stranger: the pidfd names the root's own group.
pub(crate) fn register_root(
    pidfd: BorrowedFd<'_>,
    pid: u32,
    farewell: crate::spec::Farewell,
) -> io::Result<Registration> {
    let mut msg = Message::with_pid(OP_ADD_ROOT, pid);
    msg.farewell = Farewell::of(farewell);
    with_keeper(|c| add(c, &mut msg, Some(pidfd.as_raw_fd())))
}

/// Hands the keeper a member of a subreaper tree that left the root's
/// group (seen by a scan of the tree, pinned by `pidfd`, checked against
/// its start time by the caller): if this process dies while it is
/// registered, the keeper SIGKILLs it, and the process group its pid names
/// (what it made with `setsid`/`setpgid`), through that pidfd. For members
/// the cookie cannot find (they cleared their environment).
pub(crate) fn register_member(
    pidfd: BorrowedFd<'_>,
    pid: u32,
    farewell: crate::spec::Farewell,
) -> io::Result<Registration> {
    let mut msg = Message::with_pid(OP_ADD_MEMBER, pid);
    msg.farewell = Farewell::of(farewell);
    with_keeper(|c| add(c, &mut msg, Some(pidfd.as_raw_fd())))
}

/// Hands the keeper a tree's cookie before its root is spawned: if this
/// process dies while it is registered, the keeper kills every process
/// whose environment carries it (an element of `CORRAL_TREE`), through a
/// pidfd it opened first and checked after reading the environment: the
/// root before its own registration (there is no window between the spawn
/// and the keeper's hold), and escapers that left the root's group
/// (`setsid`, double fork) but kept their environment.
pub(crate) fn register_cookie(
    cookie: &str,
    farewell: crate::spec::Farewell,
) -> io::Result<Registration> {
    let unfit = || io::Error::other("tree cookie unfit for the keeper");
    if cookie.is_empty() || cookie.bytes().any(|b| b == 0 || b == b',') {
        return Err(unfit());
    }
    let mut msg = Message::with_name(OP_COOKIE, cookie.as_bytes()).ok_or_else(unfit)?;
    msg.farewell = Farewell::of(farewell);
    with_keeper(|c| add(c, &mut msg, None))
}

/// Hands the keeper a cgroup to kill and remove if this process dies
/// before the run ends. `dir` is the cgroup's directory, `parent` the
/// directory it is in, `name` its name there. The parent directory is
/// opened and sent once per keeper: a run costs one `sendmsg` with one
/// descriptor, and the keeper one descriptor. `owner`: this process's
/// owner record (its path and its locked descriptor, see the cgroup tier's
/// `owner::Owner`), sent once per keeper too: the keeper holds it, and so
/// the lock, until it exits (it never acts on it).
pub(crate) fn register(
    dir: BorrowedFd<'_>,
    parent: &Path,
    name: &str,
    farewell: crate::spec::Farewell,
    owner: Option<(&Path, BorrowedFd<'_>)>,
) -> io::Result<Registration> {
    if name.is_empty() || name.bytes().any(|b| b == 0) {
        return Err(io::Error::other("cgroup name unfit for the keeper"));
    }
    let mut msg = Message::with_name(OP_ADD, name.as_bytes())
        .ok_or_else(|| io::Error::other("cgroup name too long for the keeper"))?;
    msg.farewell = Farewell::of(farewell);
    with_keeper(|c| {
        if let Some((path, fd)) = owner {
            parent_slot(c, path, Some(fd))?;
        }
        msg.parent = parent_slot(c, parent, None)?;
        add(c, &mut msg, Some(dir.as_raw_fd()))
    })
}

/// The keeper's slot for the directory `parent`, sent to it now if it was
/// not before: `fd`, or a descriptor opened now. (A directory sent so is
/// held until the keeper exits, and never acted on.)
fn parent_slot(c: &mut Conn, parent: &Path, fd: Option<BorrowedFd<'_>>) -> io::Result<u32> {
    if let Some((_, s)) = c.parents.iter().find(|(p, _)| p == parent) {
        return Ok(*s);
    }
    let opened = match fd {
        Some(_) => None,
        None => Some(rustix::fs::open(
            parent,
            rustix::fs::OFlags::RDONLY
                | rustix::fs::OFlags::DIRECTORY
                | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )?),
    };
    let Some(fd) = fd.or(opened.as_ref().map(AsFd::as_fd)) else {
        return Err(io::ErrorKind::NotFound.into());
    };
    let slot = c.take_slot()?;
    let mut msg = Message::new(OP_PARENT);
    msg.slot = slot;
    match send(&c.sock, &msg.encode(), Some(fd.as_raw_fd())) {
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
fn add(c: &mut Conn, msg: &mut Message, fd: Option<c_int>) -> io::Result<Registration> {
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    let slot = if msg.op == OP_COOKIE {
        c.take_cookie_slot()?
    } else {
        c.take_slot()?
    };
    msg.id = id;
    msg.slot = slot;
    match send(&c.sock, &msg.encode(), fd) {
        Ok(()) => Ok(Registration {
            id,
            slot,
            generation: c.generation,
            farewell: msg.farewell,
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
        // `c.pid` is this process's unreaped child (nothing else waits for
        // it: it has no exit signal, and only `__WALL` finds it), so the
        // pid cannot name another process.
        if raw::wait4(c.pid as isize, None, k::WNOHANG | k::__WALL) != Ok(0) {
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
    let mut control = rights_control(fd.unwrap_or(-1));
    let mut hdr = Msghdr {
        name: 0,
        namelen: 0,
        iov: &mut iov,
        iovlen: 1,
        control: std::ptr::null_mut(),
        controllen: 0,
        flags: 0,
    };
    if fd.is_some() {
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
        match unsafe { raw::sendmsg(sock.as_raw_fd(), &hdr, MSG_NOSIGNAL) } {
            Ok(_) => return Ok(()),
            Err(Errno::TOOMANYREFS) if std::time::Instant::now() < patience => {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            Err(Errno::INTR) => {}
            Err(e) => return Err(e.into()),
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
    const SO_SNDBUF: u32 = 7;
    const SO_SNDBUFFORCE: u32 = 32;
    let want: c_int = 4 << 20; // the kernel doubles it
    for opt in [SO_SNDBUFFORCE, SO_SNDBUF] {
        if raw::setsockopt_int(sock.as_raw_fd(), SOL_SOCKET as u32, opt, want).is_ok() {
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
    let Some(capacity) = Message::capacity_of_hello(hello.get(..n).unwrap_or_default()) else {
        return Err(io::Error::other("the keeper ended before it was ready"));
    };
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
    let pair = raw::socketpair(AF_UNIX, SOCK_SEQPACKET | k::O_CLOEXEC)?;
    // SAFETY: socketpair just returned these two descriptors; we own them.
    let (ours, theirs) = unsafe { (OwnedFd::from_raw_fd(pair[0]), OwnedFd::from_raw_fd(pair[1])) };
    // Kept for the process's life: never 0, 1 or 2.
    let ours = crate::sys::above_std(ours)?;
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
    // SAFETY: no CLONE_VM and no stack of its own: the child runs
    // `keeper_main` on its own copy of this thread's stack (below the frame
    // it was cloned in), as a fork's child does (no mapping to make and
    // unmap at every start: issue #20), and of `args`, with every signal
    // blocked and every handler reset, and never returns. No SIGCHLD to the
    // host when the keeper ends (it ends when the host does).
    let cloned = unsafe {
        clone3_from_host(
            0,
            (0, 0),
            0,
            0,
            keeper_main,
            &args as *const KeeperArgs as *const std::ffi::c_void,
        )
    };
    drop(theirs);
    drop(host);
    let ret = match cloned {
        Ok((pid, _)) => pid,
        Err(HostCloneError::Mask(e) | HostCloneError::Clone(e)) => return Err(e.into()),
    };
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

/// Set by `corral::one_shot_process` (through [`set_lazy`]): a keeper
/// launched from then on is lazy ([`KeeperArgs::lazy`]).
static LAZY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Makes the keepers this process launches from now on read their queue
/// every [`LAZY_PERIOD_NS`](super::process::LAZY_PERIOD_NS) and at the host's death, not at each message.
pub(crate) fn set_lazy() {
    LAZY.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Test seam: with this environment variable set to N, a keeper started in
/// this process sleeps N ms before it does anything (capped at 10 s), so
/// tests can prove that registrations sent to a keeper that has not run yet
/// are honoured when the host dies (the host never waits for the keeper).
pub(crate) const START_DELAY_ENV: &str = "CORRAL_TEST_KEEPER_START_DELAY_MS";

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
            let r = register_root(fd.as_fd(), pid, crate::spec::Farewell::KILL).unwrap();
            drop(r);
        }
        let each = t.elapsed() / n;
        // Held at once: a few hundred, then all given back.
        let held: Vec<Registration> = (0..600)
            .map(|_| register_root(fd.as_fd(), pid, crate::spec::Farewell::KILL).unwrap())
            .collect();
        drop(held);
        // A tree's cookie takes no run's place: as many runs and cookies
        // as the capacity, at once.
        let cap = capacity().unwrap() as usize;
        let n = cap.min(600);
        let roots: Vec<Registration> = (0..n)
            .map(|_| register_root(fd.as_fd(), pid, crate::spec::Farewell::KILL).unwrap())
            .collect();
        let cookies: Vec<Registration> = (0..n)
            .map(|i| {
                register_cookie(&format!("{pid}.test{i}"), crate::spec::Farewell::KILL).unwrap()
            })
            .collect();
        assert!(cookies.iter().all(|c| c.slot as usize >= cap));
        assert!(roots.iter().all(|r| (r.slot as usize) < cap));
        drop((roots, cookies));
        eprintln!("register + unregister: {each:?} each");
        let _ = child.kill();
        let _ = child.wait();
    }
}
