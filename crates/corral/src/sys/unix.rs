//! Unix half of the platform layer: the root process handle (observed
//! without reaping), non-blocking pipes, and the one `poll` that the
//! lifecycle sleeps in.

use std::io;
use std::os::fd::OwnedFd;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::fs::{fcntl_getfl, fcntl_setfl, OFlags};
use rustix::process::{waitid, Pid, WaitId, WaitIdOptions};

use super::{ChildIo, Interest, Placement, Ready, SpawnError, SpawnSpec, WakeOn};
use crate::cancel::Wake;
use crate::report::{CrashSafety, RootStatus};
use crate::Signal;

/// The root process. Its exit is observed with `WNOWAIT`, so it stays an
/// unreaped zombie, which pins its PID and (as group leader) its process
/// group id until [`Root::reap`].
pub(crate) struct Root {
    pid: Pid,
    /// How the root's exit is seen.
    #[cfg(target_os = "linux")]
    exit: ExitSource,
    /// Set when the pidfd was seen readable (or before the first poll), so
    /// `peek_exit` asks the kernel only when there is something to see.
    #[cfg(target_os = "linux")]
    exit_hint: std::cell::Cell<bool>,
    exited: Option<RootStatus>,
    reaped: bool,
    /// Crash safety of the process-group and subreaper tiers: the keeper
    /// holds the root's pidfd until the root is reaped.
    #[cfg(linux_raw)]
    keeper: Option<super::linux_spawn::keeper::Registration>,
    /// Whether the tree dies with this process (see [`Root::crash_safety`]).
    crash: crate::report::CrashSafetyCell,
}

/// How the exit of a root is seen (Linux). The descriptors are shared
/// (`Arc`) so that an async driver can register the very same descriptor
/// with its reactor, without a duplicate: the registration holds a
/// reference, so the number is never closed (and reused) while it is
/// registered, whichever of the two is dropped first.
#[cfg(target_os = "linux")]
enum ExitSource {
    /// The root's pidfd: readable when it exits (Linux 5.3+).
    Pidfd(SharedFd),
    /// The root is a PID namespace's init: the command's exit comes through
    /// the init's status pipe (see `linux_spawn::pidns`); the init's pidfd
    /// pins it and fires if the init dies without a word.
    Namespace { init: SharedFd, status: SharedFd },
    /// No pidfd: the exit is polled on a short timer (a kernel before 5.3).
    /// `error`: `pidfd_open` failed because this process is out of
    /// descriptors; the spawn is undone and reported (see
    /// [`Root::exit_watch_error`]).
    Timer { error: Option<io::Error> },
}

#[cfg(target_os = "linux")]
impl ExitSource {
    /// The root's own pidfd (the init's, in a namespace).
    fn pidfd(&self) -> Option<&SharedFd> {
        match self {
            ExitSource::Pidfd(fd) | ExitSource::Namespace { init: fd, .. } => Some(fd),
            ExitSource::Timer { .. } => None,
        }
    }

    /// The namespace init's status pipe.
    fn ns_status(&self) -> Option<&SharedFd> {
        match self {
            ExitSource::Namespace { status, .. } => Some(status),
            _ => None,
        }
    }

    /// The descriptor that tells of the command's exit first.
    fn first(&self) -> Option<&SharedFd> {
        self.ns_status().or(self.pidfd())
    }
}

/// If this process dies while the root runs, the keeper kills the root's
/// group (see `linux_spawn::keeper`). Best effort: without it the run is
/// only not crash-safe.
#[cfg(linux_raw)]
fn keeper_holds(
    pidfd: Option<&SharedFd>,
    pid: Pid,
    farewell: crate::spec::Farewell,
) -> (
    Option<super::linux_spawn::keeper::Registration>,
    CrashSafety,
) {
    match pidfd {
        Some(fd) => {
            use std::os::fd::AsFd;
            match super::linux_spawn::keeper::register_root(
                fd.as_fd(),
                pid.as_raw_nonzero().get() as u32,
                farewell,
            ) {
                Ok(reg) => (Some(reg), CrashSafety::Held),
                Err(e) => (
                    None,
                    CrashSafety::Lost(format!(
                        "the crash-safety keeper could not take the root: {e}; \
                         the tree would outlive corral's own death"
                    )),
                ),
            }
        }
        None => (
            None,
            CrashSafety::Lost(
                "no pidfd for the root, so the crash-safety keeper cannot hold it; \
                 the tree would outlive corral's own death"
                    .into(),
            ),
        ),
    }
}

impl Root {
    /// The root `child`, held by the keeper with `farewell` (Linux).
    pub(crate) fn new(child: std::process::Child, farewell: crate::spec::Farewell) -> Root {
        #[cfg(not(linux_raw))]
        let _ = farewell;
        let pid = Pid::from_child(&child);
        // Dropping a std Child neither kills nor reaps it; the pid stays ours
        // to reap.
        drop(child);
        // The child is unreaped, so this pid cannot have been reused.
        // Without a pidfd (a kernel before 5.3) the exit is polled on a
        // short timer; out of descriptors, the spawn is undone instead.
        #[cfg(target_os = "linux")]
        let exit = match rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()) {
            Ok(fd) => ExitSource::Pidfd(Arc::new(fd)),
            Err(e) if e == rustix::io::Errno::MFILE || e == rustix::io::Errno::NFILE => {
                ExitSource::Timer {
                    error: Some(io::Error::from(e)),
                }
            }
            Err(_) => ExitSource::Timer { error: None },
        };
        #[cfg(linux_raw)]
        let (keeper, crash) = keeper_holds(exit.pidfd(), pid, farewell);
        #[cfg(not(linux_raw))]
        let crash = CrashSafety::Lost(
            "no crash-safety keeper on this platform: the tree would outlive corral's own death"
                .into(),
        );
        #[cfg(target_os = "linux")]
        roots::started(pid);
        Root {
            pid,
            #[cfg(target_os = "linux")]
            exit,
            #[cfg(target_os = "linux")]
            exit_hint: std::cell::Cell::new(true),
            exited: None,
            reaped: false,
            #[cfg(linux_raw)]
            keeper,
            crash: crash.into(),
        }
    }

    /// A root started by the clone3 path without a cgroup (a new process
    /// group only), with the pidfd it returned: the keeper holds it as it
    /// holds a root of std's path ([`Root::new`]).
    #[cfg(linux_raw)]
    pub(crate) fn from_clone3_grouped(
        pid: Pid,
        pidfd: OwnedFd,
        farewell: crate::spec::Farewell,
    ) -> Root {
        let mut root = Root::from_clone3(pid, pidfd);
        let (keeper, crash) = keeper_holds(root.exit.pidfd(), pid, farewell);
        root.keeper = keeper;
        root.crash = crash.into();
        root
    }

    /// A root started by the clone3 path, with the pidfd it returned.
    #[cfg(linux_raw)]
    pub(crate) fn from_clone3(pid: Pid, pidfd: OwnedFd) -> Root {
        roots::started(pid);
        Root {
            pid,
            exit: ExitSource::Pidfd(Arc::new(pidfd)),
            exit_hint: std::cell::Cell::new(true),
            exited: None,
            reaped: false,
            keeper: None,
            // The cgroup tier registers its cgroup with the keeper.
            crash: CrashSafety::Held.into(),
        }
    }

    /// The init of a PID namespace: its pidfd pins it; the command's exit
    /// is read from `status` (non-blocking).
    #[cfg(linux_raw)]
    pub(crate) fn from_ns_init(pid: Pid, pidfd: Arc<OwnedFd>, status: OwnedFd) -> Root {
        roots::started(pid);
        Root {
            pid,
            exit: ExitSource::Namespace {
                init: pidfd,
                status: Arc::new(status),
            },
            exit_hint: std::cell::Cell::new(true),
            exited: None,
            reaped: false,
            keeper: None,
            // The init kills the namespace when this process dies.
            crash: CrashSafety::Held.into(),
        }
    }

    /// The command's exit as the namespace init reported it; end of file
    /// without a report means the namespace was killed with the command in
    /// it (SIGKILL).
    #[cfg(target_os = "linux")]
    fn peek_ns(&mut self) -> io::Result<Option<RootStatus>> {
        let Some(fd) = self.exit.ns_status() else {
            return Ok(None);
        };
        let mut msg = [0u8; 8];
        loop {
            match rustix::io::read(fd, &mut msg) {
                Ok(8) => {
                    let kind = u32::from_ne_bytes([msg[0], msg[1], msg[2], msg[3]]);
                    let st = i32::from_ne_bytes([msg[4], msg[5], msg[6], msg[7]]);
                    if kind != NS_MSG_EXITED {
                        continue;
                    }
                    self.exited = Some(ns_status_of(st));
                    return Ok(self.exited);
                }
                Ok(0) => {
                    self.exited = Some(RootStatus::Signaled(Signal::KILL));
                    return Ok(self.exited);
                }
                Ok(_) => return Err(io::Error::other("short message from the namespace init")),
                Err(rustix::io::Errno::AGAIN) => {
                    // Nothing to read. If the init's pidfd fired, it may have
                    // died with a stray copy of the pipe's write end still
                    // open somewhere: ask the kernel, and read once more.
                    if !self.exit_hint.replace(false) {
                        return Ok(None);
                    }
                    let gone = waitid(
                        WaitId::Pid(self.pid),
                        WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT,
                    )?
                    .is_some();
                    if !gone {
                        return Ok(None);
                    }
                    match rustix::io::read(fd, &mut msg) {
                        Ok(8)
                            if u32::from_ne_bytes([msg[0], msg[1], msg[2], msg[3]])
                                == NS_MSG_EXITED =>
                        {
                            let st = i32::from_ne_bytes([msg[4], msg[5], msg[6], msg[7]]);
                            self.exited = Some(ns_status_of(st));
                        }
                        _ => self.exited = Some(RootStatus::Signaled(Signal::KILL)),
                    }
                    return Ok(self.exited);
                }
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    pub(crate) fn id(&self) -> u32 {
        self.pid.as_raw_nonzero().get() as u32
    }

    /// Why the root's exit cannot be watched, when the reason is that this
    /// process ran out of descriptors (EMFILE/ENFILE): the caller undoes
    /// the spawn and reports it. (Other reasons, an old kernel, fall back
    /// to polling the exit.)
    pub(crate) fn exit_watch_error(&mut self) -> Option<io::Error> {
        #[cfg(target_os = "linux")]
        {
            match &mut self.exit {
                ExitSource::Timer { error } => error.take(),
                _ => None,
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            None
        }
    }

    /// The root's exit status if it has exited, without reaping it.
    /// Makes the next [`peek_exit`](Self::peek_exit) ask the kernel even
    /// though no wait saw the pidfd fire (a caller that does not poll: the
    /// drop of a run after a panic).
    pub(crate) fn look_for_exit(&self) {
        #[cfg(target_os = "linux")]
        self.exit_hint.set(true);
    }

    pub(crate) fn peek_exit(&mut self) -> io::Result<Option<RootStatus>> {
        if self.exited.is_some() {
            return Ok(self.exited);
        }
        #[cfg(target_os = "linux")]
        if self.exit.ns_status().is_some() {
            return self.peek_ns();
        }
        #[cfg(target_os = "linux")]
        if self.exit.pidfd().is_some() && !self.exit_hint.replace(false) {
            return Ok(None);
        }
        let st = waitid(
            WaitId::Pid(self.pid),
            WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT,
        )?;
        if let Some(st) = st {
            // macOS can report a stopped child here; only real exits count.
            if let Some(code) = st.exit_status() {
                self.exited = Some(RootStatus::Exited(code));
            } else if let Some(sig) = st.terminating_signal() {
                // Every number as it is: a signal without a name (real-time
                // signals, numbers past the named ones) is never a SIGKILL.
                if let Some(s) = Signal::from_raw(sig) {
                    self.exited = Some(RootStatus::Signaled(s));
                }
            }
        }
        Ok(self.exited)
    }

    /// Whether the root's exit was seen (the run is ending).
    #[cfg(linux_raw)]
    pub(crate) fn exit_seen(&self) -> bool {
        self.exited.is_some()
    }

    /// The run's termination started: the keeper SIGKILLs the root's group
    /// at once if this process dies (see `Attached::terminating`).
    pub(crate) fn terminating(&mut self) {
        #[cfg(linux_raw)]
        if let Some(k) = self.keeper.as_mut() {
            k.set_farewell(crate::spec::Farewell::KILL);
        }
    }

    /// Whether the root's tree is killed if this process dies: for a root
    /// started by `std` (the process-group and subreaper tiers), whether the
    /// keeper took its pidfd.
    pub(crate) fn crash_safety(&self) -> CrashSafety {
        #[cfg(linux_raw)]
        if self.keeper.as_ref().is_some_and(|k| {
            // Once the run ended, a stopped keeper counts as lost too.
            if self.exited.is_some() {
                !k.is_live_and_running()
            } else {
                !k.is_live()
            }
        }) {
            return keeper_died();
        }
        self.crash.get()
    }

    /// Reaps the root, which releases its PID (and so its group id). Only
    /// call after its exit was observed; a root that has not exited is reaped
    /// by a background thread instead, so this never blocks.
    pub(crate) fn reap(&mut self) -> io::Result<()> {
        if self.reaped {
            return Ok(());
        }
        self.reaped = true;
        #[cfg(target_os = "linux")]
        self.exit_hint.set(true);
        // The keeper lets go of the root before its pid can be reused; if
        // it died meanwhile, the run was not crash-safe to the end.
        #[cfg(linux_raw)]
        if let Some(k) = self.keeper.take() {
            if !k.is_live_and_running() {
                self.crash = keeper_died().into();
            }
        }
        // A namespace init outlives the command while the namespace holds
        // processes: reap it now only if it has exited.
        #[cfg(target_os = "linux")]
        let exited = if self.exit.ns_status().is_some() {
            waitid(
                WaitId::Pid(self.pid),
                WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT,
            )?
            .is_some()
        } else {
            self.peek_exit()?.is_some()
        };
        #[cfg(not(target_os = "linux"))]
        let exited = self.peek_exit()?.is_some();
        if exited {
            let res = waitid(WaitId::Pid(self.pid), WaitIdOptions::EXITED);
            #[cfg(target_os = "linux")]
            roots::reaped(self.pid);
            res?;
        } else {
            let pid = self.pid;
            std::thread::Builder::new()
                .name("corral-reap".into())
                .spawn(move || {
                    let _ = waitid(WaitId::Pid(pid), WaitIdOptions::EXITED);
                    #[cfg(target_os = "linux")]
                    roots::reaped(pid);
                })?;
        }
        Ok(())
    }
}

/// A raw wait status (exited or killed; the init never asks for stops).
#[cfg(target_os = "linux")]
fn ns_status_of(st: i32) -> RootStatus {
    let sig = st & 0x7f;
    if sig == 0 {
        RootStatus::Exited((st >> 8) & 0xff)
    } else {
        RootStatus::Signaled(Signal::from_raw(sig).unwrap_or(Signal::KILL))
    }
}

/// The PID-namespace init's "command exited" message kind (see
/// `linux_spawn::pidns`, which uses this value).
#[cfg(target_os = "linux")]
pub(crate) const NS_MSG_EXITED: u32 = 4;

/// Applies process-group placement to a std command: the child becomes the
/// leader of a new group whose id is its pid. std keeps its
/// posix_spawn/vfork path for this.
fn new_process_group(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    cmd.process_group(0);
}

/// Starts the program with SIGPIPE ignored: std resets it to the default
/// action in the child (the Rust runtime ignores it in its own process),
/// then runs the pre-exec closures, so this one puts the ignore back.
fn keep_sigpipe_ignored(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the forked child before exec; it only
    // calls signal(2) (async-signal-safe) with SIG_IGN, which installs no
    // handler of this process, and allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            if libc::signal(libc::SIGPIPE, libc::SIG_IGN) == libc::SIG_ERR {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// `sig` as rustix's type: named signals, and any other valid number
/// (real-time signals), which corral only ever sends to other processes.
pub(crate) fn to_rustix(sig: Signal) -> io::Result<rustix::process::Signal> {
    if let Some(s) = rustix::process::Signal::from_named_raw(sig.as_raw()) {
        return Ok(s);
    }
    if Signal::from_raw(sig.as_raw()).is_none() {
        return Err(io::Error::other(format!("unsupported signal {sig}")));
    }
    // SAFETY: the number is a valid, nonzero signal of this platform
    // (`Signal::from_raw` checked its range). The value is only used to send
    // a signal to processes of the command's tree, never to block, consume
    // or handle a signal in this process, so the C library's own use of some
    // real-time signals is not disturbed.
    Ok(unsafe { rustix::process::Signal::from_raw_unchecked(sig.as_raw()) })
}

/// Sends `sig` to process group `pgid`. "No such process" is success: the
/// group is already empty.
pub(crate) fn signal_group(pgid: u32, sig: Signal) -> io::Result<()> {
    let pid = Pid::from_raw(pgid as i32).ok_or_else(|| io::Error::other("pgid 0"))?;
    let raw = to_rustix(sig)?;
    match rustix::process::kill_process_group(pid, raw) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::SRCH) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(target_os = "linux")]
pub(crate) use super::linux_proc::group_members;

/// Live members of process group `pgid`, from `ps` (macOS and the BSDs have
/// no /proc; this tier only needs to be correct, not fast).
#[cfg(not(target_os = "linux"))]
pub(crate) fn group_members(pgid: u32) -> io::Result<Vec<u32>> {
    let out = std::process::Command::new("/bin/ps")
        .args(["-A", "-o", "pid=,pgid=,stat="])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let pid: u32 = f.next()?.parse().ok()?;
            let pg: u32 = f.next()?.parse().ok()?;
            let stat = f.next().unwrap_or("");
            (pg == pgid && !stat.starts_with('Z')).then_some(pid)
        })
        .collect())
}

/// A descriptor the lifecycle owns and an async driver may register with
/// its reactor as it is (no duplicate): the registration keeps a reference,
/// so the descriptor is closed only once both let go, and its number can
/// never be reused (and then deregistered by mistake) while registered.
pub(crate) type SharedFd = Arc<OwnedFd>;

/// A pipe end that the lifecycle reads or writes without blocking.
pub(crate) struct PipeEnd(pub(super) SharedFd);

/// What a non-blocking read gave.
pub(crate) enum ReadResult {
    Data(usize),
    Eof,
    WouldBlock,
}

impl PipeEnd {
    /// Asks the kernel for a pipe buffer of `bytes` (Linux); returns the
    /// size it gave. Fails past `/proc/sys/fs/pipe-max-size`, or for an
    /// unprivileged user over `pipe-user-pages-soft`.
    #[cfg(target_os = "linux")]
    pub(crate) fn enlarge(&self, bytes: usize) -> io::Result<usize> {
        Ok(rustix::pipe::fcntl_setpipe_size(&self.0, bytes)?)
    }

    fn nonblocking(fd: OwnedFd) -> io::Result<PipeEnd> {
        let fl = fcntl_getfl(&fd)?;
        fcntl_setfl(&fd, fl | OFlags::NONBLOCK)?;
        Ok(PipeEnd(Arc::new(fd)))
    }

    pub(crate) fn read(&self, buf: &mut [u8]) -> io::Result<ReadResult> {
        loop {
            match rustix::io::read(&self.0, &mut *buf) {
                Ok(0) => return Ok(ReadResult::Eof),
                Ok(n) => return Ok(ReadResult::Data(n)),
                Err(rustix::io::Errno::AGAIN) => return Ok(ReadResult::WouldBlock),
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Whether every write end of this pipe (our read end) is closed:
    /// nothing more can arrive, whatever is still buffered in it (POLLHUP).
    pub(crate) fn writers_gone(&self) -> bool {
        let mut fds = [PollFd::new(&self.0, PollFlags::IN)];
        let zero = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        matches!(poll(&mut fds, Some(&zero)), Ok(n) if n > 0)
            && fds[0].revents().intersects(PollFlags::HUP | PollFlags::ERR)
    }

    /// The pipe's inode (`pipe:[N]` in `/proc/PID/fd` of every holder).
    #[cfg(target_os = "linux")]
    pub(crate) fn inode(&self) -> Option<u64> {
        // `st_ino` is narrower than u64 on some 32-bit targets.
        #[allow(clippy::unnecessary_cast)]
        rustix::fs::fstat(&self.0).ok().map(|s| s.st_ino as u64)
    }

    /// Writes what the pipe takes now; `Ok(0)` when it is full.
    pub(crate) fn write(&self, buf: &[u8]) -> io::Result<usize> {
        loop {
            match rustix::io::write(&self.0, buf) {
                Ok(n) => return Ok(n),
                Err(rustix::io::Errno::AGAIN) => return Ok(0),
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// corral's end of a pseudo-terminal (its master), made non-blocking: the
/// end the lifecycle reads, and the same descriptor for the input relay.
pub(crate) fn pty_master(fd: OwnedFd) -> io::Result<(PipeEnd, SharedFd)> {
    let end = PipeEnd::nonblocking(fd)?;
    let shared = end.0.clone();
    Ok((end, shared))
}

/// A new pipe: (our non-blocking end, the child's end). `child_writes` says
/// which direction.
pub(crate) fn pipe(child_writes: bool) -> io::Result<(PipeEnd, std::fs::File)> {
    let (r, w) = io::pipe()?;
    let (ours, theirs): (OwnedFd, OwnedFd) = if child_writes {
        (r.into(), w.into())
    } else {
        (w.into(), r.into())
    };
    Ok((PipeEnd::nonblocking(ours)?, theirs.into()))
}

fn stdio(io: ChildIo) -> Stdio {
    match io {
        ChildIo::Null => Stdio::null(),
        ChildIo::Inherit => Stdio::inherit(),
        ChildIo::File(f) => Stdio::from(f),
    }
}

/// Starts the root inside the containment: through clone3 where it can
/// (`spawn_clone3`), else through std, which keeps its posix_spawn/vfork
/// path unless the containment needs code in the child before exec. Every
/// descriptor corral opens is close-on-exec, so only the three standard
/// streams are inherited.
pub(crate) fn spawn(spec: SpawnSpec<'_>, placement: Placement<'_>) -> Result<Root, SpawnError> {
    #[cfg(linux_raw)]
    if let Some(started) = spawn_clone3(&spec, &placement) {
        return started;
    }
    let mut cmd = std::process::Command::new(spec.program);
    cmd.args(spec.args);
    if spec.env_clear {
        cmd.env_clear();
    }
    for (k, v) in spec.env {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    if let Some(d) = spec.cwd {
        cmd.current_dir(d);
    }
    cmd.stdin(stdio(spec.stdin))
        .stdout(stdio(spec.stdout))
        .stderr(stdio(spec.stderr));
    for (k, v) in &placement.env {
        cmd.env(k, v);
    }
    if placement.new_group && !spec.setup.new_session {
        new_process_group(&mut cmd);
    }
    if spec.sigpipe_ignored {
        keep_sigpipe_ignored(&mut cmd);
    }
    // Not born in the cgroup (no clone3 here): the child writes itself
    // into its `cgroup.procs`, opened through the directory for this spawn.
    #[cfg(target_os = "linux")]
    let v2_procs = match placement.cgroup_dir {
        Some(dir) => Some(
            rustix::fs::openat(
                dir,
                "cgroup.procs",
                OFlags::WRONLY | OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )
            .map_err(|e| {
                let e = io::Error::from(e);
                if crate::error::out_of_descriptors(&e) {
                    SpawnError::Spawn(e)
                } else {
                    SpawnError::Contain(io::Error::other(format!("cannot open cgroup.procs: {e}")))
                }
            })?,
        ),
        None => None,
    };
    #[cfg(target_os = "linux")]
    let procs: Vec<std::os::fd::BorrowedFd<'_>> = {
        use std::os::fd::AsFd;
        let mut v = placement.cgroup_procs.clone();
        v.extend(v2_procs.as_ref().map(|f| f.as_fd()));
        v
    };
    #[cfg(target_os = "linux")]
    if !procs.is_empty() {
        enter_cgroups_before_exec(&mut cmd, &procs);
    }
    child_setup(&mut cmd, spec.setup).map_err(SpawnError::Spawn)?;
    let child = cmd.spawn();
    // Close the parent's copies of the child's ends now.
    drop(cmd);
    match child {
        Ok(child) => Ok(Root::new(child, spec.farewell)),
        #[cfg(target_os = "linux")]
        Err(e) if e.raw_os_error() == Some(PLACEMENT_FAILED) && !procs.is_empty() => {
            Err(SpawnError::Contain(io::Error::other(format!(
                "the child could not enter its cgroup {}",
                placement
                    .cgroup_path
                    .unwrap_or(std::path::Path::new("?"))
                    .display()
            ))))
        }
        Err(e) => Err(SpawnError::Spawn(e)),
    }
}

/// The clone3 path (vfork speed, no handler of corral's reset one by one in
/// the child: `CLONE_CLEAR_SIGHAND`): a cgroup containment's root is born
/// in its cgroup; a root that only needs a new process group (process-group
/// and subreaper tiers) is started the same way without a cgroup. `None`:
/// not usable for this placement or in this process, take std's path.
#[cfg(linux_raw)]
fn spawn_clone3(
    spec: &SpawnSpec<'_>,
    placement: &Placement<'_>,
) -> Option<Result<Root, SpawnError>> {
    use super::linux_spawn::{self, Clone3Error};
    if !linux_spawn::usable() {
        return None;
    }
    let cgroup = placement.cgroup_dir;
    // The clone3 child always leads a new group; cgroup v1 placements
    // write `cgroup.procs` before exec, on std's path.
    if cgroup.is_none() && (!placement.new_group || !placement.cgroup_procs.is_empty()) {
        return None;
    }
    // `spec` is borrowed: its descriptors are closed when it drops on
    // return, or reused by the fallback.
    Some(match linux_spawn::spawn(spec, cgroup, &placement.env) {
        Ok((pid, pidfd)) if cgroup.is_some() => Ok(Root::from_clone3(pid, pidfd)),
        Ok((pid, pidfd)) => Ok(Root::from_clone3_grouped(pid, pidfd, spec.farewell)),
        Err(Clone3Error::Unsupported) => return None,
        Err(Clone3Error::Setup(e) | Clone3Error::Exec(e)) => Err(SpawnError::Spawn(e)),
        Err(Clone3Error::Clone(e)) => {
            let resources = matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::OutOfMemory
            ) || crate::error::out_of_descriptors(&e);
            Err(if resources || cgroup.is_none() {
                SpawnError::Spawn(e)
            } else {
                SpawnError::Contain(crate::error::io_context(
                    "clone3 could not start the child in its cgroup",
                    e,
                ))
            })
        }
    })
}

/// The caller's child setup ([`crate::spec::ChildSetup`]) on std's path: the
/// same raw steps as the clone3 child on Linux, run after std's own (streams,
/// directory, process group) and the cgroup placement.
fn child_setup(cmd: &mut std::process::Command, setup: &crate::spec::ChildSetup) -> io::Result<()> {
    use std::os::unix::process::CommandExt;
    if let Some(a0) = &setup.arg0 {
        cmd.arg0(a0);
    }
    if setup.is_plain() {
        return Ok(());
    }
    let new_session = setup.new_session;
    #[cfg(linux_raw)]
    {
        // The closure owns its copy: the raw view points into its vectors,
        // whose buffers do not move with them.
        let owned = setup.clone();
        let raw = super::linux_spawn::RawSetup::new(&owned);
        // SAFETY: the closure runs in the forked child before exec: setsid
        // and `apply_setup` only issue raw system calls (async-signal-safe,
        // no allocation or lock) on the values of `raw`, which point into
        // `owned`, moved into the closure with it and alive until it drops.
        unsafe {
            cmd.pre_exec(move || {
                let _keep = &owned;
                if new_session {
                    rustix::process::setsid()?;
                }
                match super::linux_spawn::apply_setup(&raw) {
                    0 => Ok(()),
                    e => Err(io::Error::from_raw_os_error(e)),
                }
            });
        }
    }
    #[cfg(not(linux_raw))]
    {
        if setup.groups.is_some() || setup.keep_fds.is_some() {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "supplementary groups and descriptors to keep need Linux",
            ));
        }
        if let Some(g) = setup.gid {
            cmd.gid(g);
        }
        if let Some(u) = setup.uid {
            cmd.uid(u);
        }
        let umask = setup.umask;
        let controlling_tty = setup.controlling_tty;
        // SAFETY: runs in the forked child before exec; umask, setsid and
        // ioctl are async-signal-safe system calls, nothing is allocated.
        unsafe {
            cmd.pre_exec(move || {
                if let Some(m) = umask {
                    rustix::process::umask(rustix::fs::Mode::from_raw_mode(m as _));
                }
                if new_session {
                    rustix::process::setsid()?;
                }
                if controlling_tty {
                    rustix::process::ioctl_tiocsctty(std::os::fd::BorrowedFd::borrow_raw(0))?;
                }
                Ok(())
            });
        }
    }
    Ok(())
}

/// The errno the child reports when it could not enter its cgroup, so the
/// parent can tell a containment failure from a spawn failure.
#[cfg(target_os = "linux")]
const PLACEMENT_FAILED: i32 = 131; // ENOTRECOVERABLE

/// Makes the child write itself into each `cgroup.procs` before exec.
#[cfg(target_os = "linux")]
fn enter_cgroups_before_exec(
    cmd: &mut std::process::Command,
    procs: &[std::os::fd::BorrowedFd<'_>],
) {
    use std::os::unix::process::CommandExt;
    let fds: Vec<i32> = procs.iter().map(std::os::fd::AsRawFd::as_raw_fd).collect();
    // SAFETY: the closure runs in the forked child before exec. It only
    // calls write(2), which is async-signal-safe, on descriptors that the
    // containment keeps open until after the spawn (the placement borrows
    // them); it allocates nothing (the Vec was built before the fork and is
    // only read).
    unsafe {
        cmd.pre_exec(move || {
            for &fd in &fds {
                let bfd = std::os::fd::BorrowedFd::borrow_raw(fd);
                if rustix::io::write(bfd, b"0").is_err() {
                    return Err(io::Error::from_raw_os_error(PLACEMENT_FAILED));
                }
            }
            Ok(())
        });
    }
}

/// Whether this process has no descriptor left now (a probe, for the
/// paths whose errors arrive as words).
#[cfg(target_os = "linux")]
pub(crate) fn descriptors_exhausted() -> bool {
    use rustix::fs::{open, Mode, OFlags};
    match open("/", OFlags::PATH | OFlags::CLOEXEC, Mode::empty()) {
        Ok(_) => false,
        Err(e) => e == rustix::io::Errno::MFILE || e == rustix::io::Errno::NFILE,
    }
}

/// Wakes the lifecycle from another thread (cancel, a signal request,
/// relay back-pressure): a flag, plus whatever sleeps on it. The async
/// driver's task is woken through its `Waker` (no descriptor at all); the
/// synchronous driver sleeps in `poll(2)`, so on its first sleep an
/// eventfd (a pipe off Linux) is made and written to from then on.
pub(crate) struct WakeCell {
    state: std::sync::Mutex<WakeState>,
}

#[derive(Default)]
struct WakeState {
    /// A wake-up not yet seen by the lifecycle.
    woken: bool,
    /// The async driver's task, while it sleeps.
    #[cfg(feature = "tokio")]
    task: Option<std::task::Waker>,
    /// Signals the owner of an async run asked for
    /// (`AsyncRunning::signal`), sent by the next step. Kept here rather
    /// than in an `Arc` of their own: one allocation per run fewer; boxed
    /// when the first comes (most runs have none: 8 bytes, not 24).
    #[cfg(feature = "tokio")]
    #[allow(clippy::box_collection)] // 8 bytes, not a `Vec`'s 24
    signals: Option<Box<Vec<Signal>>>,
    /// The write side of the synchronous driver's wake descriptor, once
    /// made (on Linux the same eventfd the poller reads).
    tx: Option<SharedFd>,
}

impl WakeCell {
    fn lock(&self) -> std::sync::MutexGuard<'_, WakeState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Wake for WakeCell {
    fn wake(&self) {
        let st = self.lock();
        Self::wake_locked(st);
    }
}

impl WakeCell {
    fn wake_locked(mut st: std::sync::MutexGuard<'_, WakeState>) {
        st.woken = true;
        #[cfg(feature = "tokio")]
        if let Some(t) = st.task.take() {
            t.wake();
        }
        if let Some(tx) = &st.tx {
            // A full pipe (or a saturated counter) already holds a wake-up;
            // any error is harmless.
            #[cfg(target_os = "linux")]
            let _ = rustix::io::write(tx, &1u64.to_ne_bytes());
            #[cfg(not(target_os = "linux"))]
            let _ = rustix::io::write(tx, &[1]);
        }
    }

    /// Queues `sig` for the next step and wakes the run.
    #[cfg(feature = "tokio")]
    pub(crate) fn push_signal(&self, sig: Signal) {
        let mut st = self.lock();
        st.signals.get_or_insert_with(Default::default).push(sig);
        Self::wake_locked(st);
    }

    /// The signals queued so far, in order.
    #[cfg(feature = "tokio")]
    pub(crate) fn take_signals(&self) -> Vec<Signal> {
        self.lock().signals.take().map_or_else(Vec::new, |v| *v)
    }
}

/// The sleeping point of the lifecycle.
pub(crate) struct Poller {
    cell: Arc<WakeCell>,
    /// The read side of the wake descriptor, made on the first sleep of
    /// the synchronous driver (never for an async run).
    rx: Option<SharedFd>,
}

/// Longest sleep when the wake descriptor could not be made (out of
/// descriptors): a wake-up is then seen through the flag at the next tick.
const WAKE_TICK: Duration = Duration::from_millis(5);

/// Timeouts at most this long are slept in one `poll`: their lateness is
/// the thread's timer slack (50 µs by default) anyway.
const EXACT_SLEEP: Duration = Duration::from_millis(10);

/// How long to ask `poll(2)` to sleep for a timer due in `d`. Linux lets a
/// `poll` timeout fire late by 0.1 % of its length (0.5 % in a niced
/// process; at most 100 ms), on top of the wake-up itself
/// (`select_estimate_accuracy`): a 300 ms deadline fired 0.3-0.5 ms late,
/// and a 60 s one could fire up to 60 ms late. So a long sleep wakes that
/// much early, and the driver's next look, finding the timer not yet due,
/// sleeps the little that is left. One more wake-up per long sleep.
fn early(d: Duration) -> Duration {
    if d <= EXACT_SLEEP {
        return d;
    }
    d - (d / 200).min(Duration::from_millis(100))
}

impl Poller {
    /// Costs no descriptor: the synchronous driver makes its wake
    /// descriptor when it first sleeps, and the async driver never does.
    pub(crate) fn new() -> io::Result<Poller> {
        Ok(Poller {
            cell: Arc::new(WakeCell {
                state: std::sync::Mutex::new(WakeState::default()),
            }),
            rx: None,
        })
    }

    /// The wake descriptor, made now if it is not yet (`None` if that
    /// failed: the caller then sleeps in short ticks).
    fn wake_rx(&mut self) -> Option<&SharedFd> {
        if self.rx.is_none() {
            #[cfg(target_os = "linux")]
            let made = rustix::event::eventfd(
                0,
                rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK,
            )
            .map(|fd| {
                let fd = Arc::new(fd);
                (fd.clone(), fd)
            });
            #[cfg(not(target_os = "linux"))]
            let made = (|| -> io::Result<(SharedFd, SharedFd)> {
                let (r, w) = io::pipe()?;
                let rx = PipeEnd::nonblocking(r.into())?.0;
                let tx: OwnedFd = w.into();
                let fl = fcntl_getfl(&tx)?;
                fcntl_setfl(&tx, fl | OFlags::NONBLOCK)?;
                Ok((rx, Arc::new(tx)))
            })()
            .map_err(|_| rustix::io::Errno::MFILE);
            if let Ok((rx, tx)) = made {
                self.cell.lock().tx = Some(tx);
                self.rx = Some(rx);
            }
        }
        self.rx.as_ref()
    }

    /// Takes a pending wake-up (the flag), if any.
    fn take_woken(&self) -> bool {
        std::mem::take(&mut self.cell.lock().woken)
    }

    /// The wake-up flag, for an async driver to wait on
    /// ([`WakeCell::poll_woken`]).
    #[cfg(feature = "tokio")]
    pub(crate) fn cell(&self) -> Arc<WakeCell> {
        self.cell.clone()
    }

    /// The same, borrowed (the async driver holds no reference of its
    /// own: figure 5).
    #[cfg(feature = "tokio")]
    pub(crate) fn cell_ref(&self) -> &WakeCell {
        &self.cell
    }

    /// The signals an async run's owner queued ([`WakeCell::push_signal`]).
    #[cfg(feature = "tokio")]
    pub(crate) fn take_signals(&self) -> Vec<Signal> {
        self.cell.take_signals()
    }
}

#[cfg(feature = "tokio")]
impl WakeCell {
    /// For an async driver: whether a wake-up is pending (taking it), else
    /// remember `cx`'s waker to be woken by the next one.
    pub(crate) fn poll_woken(&self, cx: &std::task::Context<'_>) -> bool {
        let mut st = self.lock();
        if std::mem::take(&mut st.woken) {
            return true;
        }
        match &st.task {
            Some(t) if t.will_wake(cx.waker()) => {}
            _ => st.task = Some(cx.waker().clone()),
        }
        false
    }
}

impl Poller {
    pub(crate) fn waker(&self) -> Arc<dyn Wake> {
        self.cell.clone()
    }

    /// Whether the root's exit wakes the poll; if not, the caller must not
    /// sleep long while the root runs.
    pub(crate) fn root_exit_wakes(root: &Root) -> bool {
        #[cfg(target_os = "linux")]
        {
            root.exit.pidfd().is_some()
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = root;
            false
        }
    }

    /// Sleeps until an output is readable, stdin is writable, the root
    /// exits, the tree or the caller's watched descriptor fires, a waker
    /// fires, or `timeout` passes.
    pub(crate) fn wait(
        &mut self,
        root: &Root,
        interest: Interest<'_>,
        timeout: Option<Duration>,
    ) -> io::Result<Ready> {
        let (timeout, pending) = self.sleep_length(timeout);
        let mut set = PollSet::new(self.rx.as_ref(), root, interest);
        set.sleep(timeout)?;
        let mut ready = set.ready(root);
        let fired = set.woke();
        drop(set);
        if fired {
            self.drain_wake();
        }
        ready.woken = pending || fired || self.take_woken();
        Ok(ready)
    }

    /// How long the next `poll` may sleep, and whether a wake-up is
    /// already pending (then it does not sleep at all). A sleep needs the
    /// wake descriptor (made first, so that a wake-up from now on writes to
    /// it); a zero-timeout look (the async driver) does not: the flag says
    /// it. Without the descriptor, sleeps are short ticks.
    fn sleep_length(&mut self, timeout: Option<Duration>) -> (Option<Duration>, bool) {
        if timeout != Some(Duration::ZERO) {
            self.wake_rx();
        }
        let pending = self.take_woken();
        let timeout = if pending {
            Some(Duration::ZERO)
        } else if self.rx.is_none() {
            Some(timeout.map_or(WAKE_TICK, |t| t.min(WAKE_TICK)))
        } else {
            timeout
        };
        (timeout, pending)
    }

    /// Empties the wake descriptor after it fired: an eventfd's counter is
    /// reset by one read; a pipe is drained.
    fn drain_wake(&self) {
        if let Some(rx) = &self.rx {
            let mut b = [0u8; 64];
            while matches!(rustix::io::read(rx, &mut b), Ok(n) if n > 0) {}
        }
    }
}

/// The descriptors of one [`Poller::wait`], and where each sits in the
/// `poll(2)` array.
struct PollSet<'a> {
    fds: Vec<PollFd<'a>>,
    wake: Option<usize>,
    /// The root's exit descriptors: `start..end`.
    #[cfg(target_os = "linux")]
    root: std::ops::Range<usize>,
    outputs: [Option<usize>; 2],
    stdin: Option<usize>,
    tree: Option<usize>,
    watch: Option<usize>,
}

impl<'a> PollSet<'a> {
    fn new(wake: Option<&'a SharedFd>, root: &'a Root, interest: Interest<'a>) -> PollSet<'a> {
        let Interest {
            outputs,
            stdin,
            tree,
            watch,
        } = interest;
        let mut set = PollSet {
            fds: Vec::with_capacity(6),
            wake: None,
            #[cfg(target_os = "linux")]
            root: 0..0,
            outputs: [None; 2],
            stdin: None,
            tree: None,
            watch: None,
        };
        set.wake = wake.map(|rx| set.push(PollFd::new(rx, PollFlags::IN)));
        set.add_root(root);
        set.tree = tree.map(|(fd, on)| {
            let flags = match on {
                WakeOn::Priority => PollFlags::PRI,
                WakeOn::Readable => PollFlags::IN,
            };
            set.push(PollFd::from_borrowed_fd(fd, flags))
        });
        for (i, o) in outputs.iter().enumerate() {
            set.outputs[i] = o.map(|o| set.push(PollFd::new(&o.0, PollFlags::IN)));
        }
        set.stdin = stdin.map(|s| set.push(PollFd::new(&s.0, PollFlags::OUT)));
        set.watch = watch.map(|fd| set.push(PollFd::from_borrowed_fd(fd, PollFlags::IN)));
        set
    }

    /// Adds `fd`; returns its slot.
    fn push(&mut self, fd: PollFd<'a>) -> usize {
        self.fds.push(fd);
        self.fds.len() - 1
    }

    /// The root's exit descriptors while its exit is not seen: the one
    /// that tells of it first and, for a namespace init that dies without a
    /// word (its status pipe may not reach end of file if a fork of the
    /// host holds a copy of the write end), the init's pidfd.
    fn add_root(&mut self, root: &'a Root) {
        #[cfg(target_os = "linux")]
        if root.exited.is_none() {
            let start = self.fds.len();
            if let Some(p) = root.exit.first() {
                self.push(PollFd::new(p, PollFlags::IN));
            }
            if let ExitSource::Namespace { init, .. } = &root.exit {
                self.push(PollFd::new(init, PollFlags::IN));
            }
            self.root = start..self.fds.len();
        }
        #[cfg(not(target_os = "linux"))]
        let _ = root;
    }

    /// One `poll`; an interruption by a signal is a wake-up like any other.
    fn sleep(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        let ts = timeout.map(early).map(|d| Timespec {
            tv_sec: d.as_secs().min(i64::MAX as u64) as _,
            tv_nsec: d.subsec_nanos() as _,
        });
        match poll(&mut self.fds, ts.as_ref()) {
            Ok(_) | Err(rustix::io::Errno::INTR) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    fn fired(&self, slot: Option<usize>) -> Option<PollFlags> {
        slot.map(|i| self.fds[i].revents())
            .filter(|r| !r.is_empty())
    }

    fn woke(&self) -> bool {
        self.fired(self.wake).is_some()
    }

    /// What the `poll` reported; a root exit descriptor that fired is a
    /// hint for `Root::peek_exit`.
    fn ready(&self, root: &Root) -> Ready {
        #[cfg(target_os = "linux")]
        if self.root.clone().any(|i| self.fired(Some(i)).is_some()) {
            root.exit_hint.set(true);
        }
        #[cfg(not(target_os = "linux"))]
        let _ = root;
        let closed = PollFlags::ERR | PollFlags::HUP;
        let stdin = self.fired(self.stdin);
        let watch = self.fired(self.watch);
        Ready {
            readable: [0, 1].map(|i| self.fired(self.outputs[i]).is_some()),
            stdin_writable: stdin.is_some_and(|r| !r.intersects(closed)),
            stdin_closed: stdin.is_some_and(|r| r.intersects(closed)),
            tree_event: self.fired(self.tree).is_some(),
            watched: watch.is_some(),
            watch_gone: watch.is_some_and(|r| r.intersects(closed | PollFlags::NVAL)),
            woken: false,
        }
    }
}

/// Whether process group `pgid` exists (any member, zombies included).
pub(crate) fn group_exists(pgid: u32) -> bool {
    let Some(pid) = Pid::from_raw(pgid as i32) else {
        return false;
    };
    !matches!(
        rustix::process::test_kill_process_group(pid),
        Err(rustix::io::Errno::SRCH)
    )
}

/// SIGCONT on this platform.
pub(crate) const SIGCONT: Signal = Signal::CONT;

impl Root {
    /// SIGKILLs the root alone (used when containment could not be set up;
    /// the root is unreaped, so its pid is still its own).
    pub(crate) fn kill(&mut self) {
        let _ = rustix::process::kill_process(self.pid, rustix::process::Signal::KILL);
    }
}

#[cfg(feature = "tokio")]
impl Root {
    /// A descriptor that becomes readable when the root exits (Linux
    /// pidfd), while its exit has not been seen: shared, for the async
    /// driver to register as it is.
    pub(crate) fn exit_fd(&self) -> Option<&SharedFd> {
        #[cfg(target_os = "linux")]
        if self.exited.is_none() {
            return self.exit.first();
        }
        None
    }

    /// Whether the root's exit was signalled but not yet looked at.
    pub(crate) fn exit_pending(&self) -> bool {
        #[cfg(target_os = "linux")]
        {
            self.exited.is_none()
                && matches!(self.exit, ExitSource::Pidfd(_))
                && self.exit_hint.get()
        }
        #[cfg(not(target_os = "linux"))]
        {
            false
        }
    }
}

#[cfg(feature = "tokio")]
impl PipeEnd {
    /// The descriptor itself, shared, for the async driver's reactor.
    pub(crate) fn shared(&self) -> &SharedFd {
        &self.0
    }
}

impl std::os::fd::AsFd for PipeEnd {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// What the report says when the keeper that held the root died during the
/// run.
#[cfg(linux_raw)]
fn keeper_died() -> CrashSafety {
    CrashSafety::Lost(
        "the crash-safety keeper died or was stopped (SIGSTOP) during the run; \
         the tree would have outlived corral's own death"
            .into(),
    )
}

/// The roots of this process's runs (every tier) from their spawn until
/// they are reaped, so that a zombie child of this process can be proven
/// not to be one: an unreaped root is its run's identity (promise 3), and
/// only its own `Root::reap` may reap it.
///
/// A root is added by its `Root` constructor, while the spawn holds
/// [`spawning`] (a shared lock); [`quiet`] takes the lock exclusively, so
/// while it is held no child is between its fork and its entry here: every
/// child of this process that is a root is in the set it returns.
#[cfg(target_os = "linux")]
pub(crate) mod roots {
    use std::collections::{HashMap, HashSet};
    use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

    use rustix::process::Pid;

    use super::super::per_process::PerProcess;

    /// Per process (`super::super::per_process`): a fork of the host never
    /// waits for a lock its parent held at the fork (a spawn in flight on
    /// another thread), and its roots are its own (none of its parent's is
    /// its child).
    /// (One small lock leaked per process that uses it, so that its
    /// guards can be `'static`.)
    static SPAWNING: PerProcess<&'static RwLock<()>> =
        PerProcess::new(|| Box::leak(Box::new(RwLock::new(()))));

    fn spawning_lock() -> &'static RwLock<()> {
        *SPAWNING.lock()
    }
    /// Each root's pid with a count: a root is reaped before it is taken
    /// out, and a new root may get the same pid in between (another thread
    /// spawning); counting keeps the new one in.
    static LIVE: PerProcess<Option<HashMap<u32, u32>>> = PerProcess::new(|| None);

    fn live() -> std::sync::MutexGuard<'static, Option<HashMap<u32, u32>>> {
        LIVE.lock()
    }

    /// Held by a spawn from before the fork until its `Root` exists.
    pub(crate) struct Spawning {
        _guard: RwLockReadGuard<'static, ()>,
    }

    pub(crate) fn spawning() -> Spawning {
        Spawning {
            _guard: spawning_lock().read().unwrap_or_else(|e| e.into_inner()),
        }
    }

    /// No spawn in flight while this is held.
    pub(crate) struct Quiet {
        _guard: RwLockWriteGuard<'static, ()>,
    }

    /// Waits until no spawn is in flight, and returns the unreaped roots
    /// (valid for as long as the `Quiet` is held and nothing is reaped).
    pub(crate) fn quiet() -> (Quiet, HashSet<u32>) {
        let guard = spawning_lock().write().unwrap_or_else(|e| e.into_inner());
        let set = live()
            .as_ref()
            .map(|m| m.keys().copied().collect())
            .unwrap_or_default();
        (Quiet { _guard: guard }, set)
    }

    /// Whether `pid` is an unreaped root now (a root whose spawn is still
    /// in flight may not be in yet: [`quiet`] is exact).
    pub(crate) fn is_root(pid: u32) -> bool {
        live().as_ref().is_some_and(|m| m.contains_key(&pid))
    }

    pub(super) fn started(pid: Pid) {
        *live()
            .get_or_insert_with(HashMap::new)
            .entry(pid.as_raw_nonzero().get() as u32)
            .or_insert(0) += 1;
    }

    /// After the reap (or an attempt: a root reaped by someone else is no
    /// zombie of ours either).
    pub(super) fn reaped(pid: Pid) {
        let key = pid.as_raw_nonzero().get() as u32;
        if let Some(map) = live().as_mut() {
            if let Some(n) = map.get_mut(&key) {
                *n -= 1;
                if *n == 0 {
                    map.remove(&key);
                }
            }
        }
    }
}

/// `fd` moved above 2 if it is 0, 1 or 2, for a descriptor corral keeps
/// beyond the call that opened it. A host that runs with one of its
/// standard streams closed (CPython's own subprocess tests do) gets that
/// number back from the kernel for corral's file; its later `dup2` onto
/// its stream would silently swap corral's file for the host's, and
/// corral's close would then close the host's stream. (Linux: the cgroup
/// tier and the keeper keep descriptors across runs.)
#[cfg(target_os = "linux")]
pub(crate) fn above_std(fd: std::os::fd::OwnedFd) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::AsRawFd;
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    Ok(rustix::io::fcntl_dupfd_cloexec(&fd, 3)?)
}

/// The calling thread's timer slack made 1 ns for as long as this lives
/// (Linux; elsewhere nothing): a wait that ends at a deadline then wakes
/// at it, not up to the 50 µs of default slack after it. The thread's own
/// slack is put back on drop; a thread whose slack cannot be read keeps it.
pub(crate) struct TightSlack {
    #[cfg(target_os = "linux")]
    was: Option<u64>,
}

impl TightSlack {
    pub(crate) fn new() -> TightSlack {
        #[cfg(target_os = "linux")]
        {
            let was = rustix::thread::current_timer_slack().ok();
            if was.is_some() {
                let _ = rustix::thread::set_current_timer_slack(std::num::NonZeroU64::new(1));
            }
            TightSlack { was }
        }
        #[cfg(not(target_os = "linux"))]
        TightSlack {}
    }
}

impl Drop for TightSlack {
    fn drop(&mut self) {
        #[cfg(target_os = "linux")]
        if let Some(was) = self.was {
            // 0 would mean "the default" (the process's), not this value.
            let _ = rustix::thread::set_current_timer_slack(std::num::NonZeroU64::new(was));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{early, EXACT_SLEEP};
    use std::time::Duration;

    /// A long sleep is asked for short by the most poll(2) may add to it
    /// (0.5 %, at most 100 ms); a short one exactly.
    #[test]
    fn long_sleeps_wake_early_by_the_kernels_slack() {
        let ms = Duration::from_millis;
        assert_eq!(early(Duration::ZERO), Duration::ZERO);
        assert_eq!(early(ms(3)), ms(3));
        assert_eq!(early(EXACT_SLEEP), EXACT_SLEEP);
        assert_eq!(early(ms(300)), ms(300) - Duration::from_micros(1500));
        assert_eq!(early(ms(60_000)), ms(59_900));
        assert_eq!(early(Duration::MAX), Duration::MAX - ms(100));
        for d in [ms(11), ms(300), ms(5_000), ms(60_000)] {
            let left = d - early(d);
            assert!(left > Duration::ZERO && left <= ms(100), "{d:?}: {left:?}");
        }
    }
}
