//! The lifecycle, written once for every platform:
//!
//! ```text
//! spawn ─► contain ─► wait/drain ─► classify ─► clean up ─► release
//! ```
//!
//! * **spawn**: check cancellation, let the containment prepare the spawn,
//!   start the root with only its own pipe ends inherited.
//! * **contain**: the containment takes hold of the tree's identity.
//! * **wait/drain**: one loop sleeps in the platform poller until output
//!   arrives, stdin can be written, the root exits, a waker fires (cancel,
//!   relay back-pressure) or the next timer (deadline, end of wait delay,
//!   end of grace, confirm tick) is due.
//! * **classify**: the first of: clean exit (root exited and every captured
//!   stream at EOF), deadline, cancellation, wait delay over (output held).
//! * **clean up**: terminate (first signal, SIGKILL at the end of the grace
//!   if any member is left, decided by the whole tree), or apply the
//!   leftovers policy after a clean exit; then confirm that the tree is empty
//!   within the confirm window, else report the survivors.
//! * **release**: reap the root and let go of the identity, exactly once,
//!   after the last signal.

use std::collections::{HashSet, VecDeque};
use std::io::{self, Write};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::cancel::{CancelToken, Wake};
use crate::capture::{Captured, LineSplitter};
use crate::command::{Command, InputKind, OutputKind, Settings, SharedLineCallback, Stream};
use crate::contain::{self, Containment, Mechanism, OsOp, Tracer};
use crate::report::{CleanupError, Leftovers, Outcome, Report, RootStatus, Timings};
use crate::sys::{self, ChildIo, PipeEnd, Poller, ReadResult, Root, SpawnError, SpawnSpec};
use crate::{Error, LeftoverPolicy, Signal};

const READ_CHUNK: usize = 128 * 1024;
/// Reads per stream per wake-up, so one chatty stream cannot starve timers.
const READS_PER_WAKE: usize = 16;
/// Batching of busy captured streams (see `pump_stream`).
#[cfg(target_os = "linux")]
const BATCH_AFTER: usize = 1 << 20;
#[cfg(target_os = "linux")]
const BATCH_SMALL: usize = 64 * 1024;
#[cfg(target_os = "linux")]
const BATCH_PIPE: usize = 1 << 20;
#[cfg(target_os = "linux")]
const BATCH_WAIT: Duration = Duration::from_micros(100);
/// Bytes queued for a relay writer before corral stops reading that stream.
const RELAY_QUEUE_LIMIT: usize = 1 << 20;
/// When the root's exit does not wake the poller (no pidfd), poll this often.
const EXIT_POLL: Duration = Duration::from_millis(5);
/// First and longest interval between membership checks while terminating.
const CHECK_FIRST: Duration = Duration::from_micros(500);
const CHECK_MAX: Duration = Duration::from_millis(10);
/// After the wait delay, output still has a writer, no process of the tree
/// holds it, but a fork of the host does (another thread's spawn between
/// `fork` and `exec` holds a copy of every descriptor for a moment): it is
/// given this long to let go before the output counts as held. (Where the
/// holders cannot be seen, not on Linux, any holder outside the tree is.)
const FOREIGN_HOLD: Duration = Duration::from_millis(200);
/// After the wait delay, with every writer of the output gone (nothing
/// holds it: what is left is output already written, still being read or
/// relayed), how long corral keeps draining before it ends the run anyway
/// (a relay consumer that does not read must not hold the return).
const DRAIN_LIMIT: Duration = Duration::from_secs(1);

/// A running command. Supervision happens in [`Running::wait`]; dropping the
/// handle without waiting cancels the run and cleans up (bounded by the
/// grace and the confirm window).
pub struct Running {
    life: Option<Box<Life>>,
}

impl std::fmt::Debug for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Running").field("id", &self.id()).finish()
    }
}

impl Running {
    /// Hands the lifecycle to another driver (the async one).
    #[cfg(all(feature = "tokio", unix))]
    pub(crate) fn into_life(mut self) -> Box<Life> {
        self.life.take().expect("Running holds its lifecycle")
    }

    /// The root's process id.
    pub fn id(&self) -> u32 {
        self.life.as_ref().map_or(0, |l| l.pid)
    }

    /// Cancels the run (idempotent; any thread may use
    /// [`cancel_token`](Self::cancel_token) for that).
    pub fn cancel(&self) {
        if let Some(l) = &self.life {
            l.cancel.cancel();
        }
    }

    /// A token that cancels this run from any thread.
    pub fn cancel_token(&self) -> CancelToken {
        self.life
            .as_ref()
            .map(|l| l.cancel.clone())
            .unwrap_or_default()
    }

    /// Supervises the run to its end and reports what happened. Returns in
    /// bounded time: at most the deadline (or root exit plus the wait delay,
    /// plus up to 1 s to drain output that nothing holds any more but is
    /// still being relayed), plus the grace, plus the confirm window.
    pub fn wait(mut self) -> Report {
        let life = self
            .life
            .take()
            .expect("Running holds its lifecycle until wait");
        life.run()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(life) = self.life.take() {
            life.cancel.cancel();
            let _ = life.run();
        }
    }
}

/// Why the tree is being terminated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reason {
    TimedOut,
    Cancelled,
    OutputHeld,
    /// The root exited cleanly; the policy says its leftovers die.
    Leftovers,
}

struct Termination {
    reason: Reason,
    /// SIGKILL is due at this time (None once it was sent).
    kill_at: Option<Instant>,
    /// Give up confirming at this time (set when SIGKILL is sent).
    confirm_until: Option<Instant>,
    next_check: Instant,
    interval: Duration,
}

struct StreamIo {
    which: Stream,
    pipe: Option<PipeEnd>,
    capture: Captured,
    lines: Option<LineSplitter>,
    relay: Option<Relay>,
    /// A busy stream in a large pipe is not waited on until then, so that
    /// a wake reads a batch instead of each small write (see `pump_stream`).
    rest_until: Option<Instant>,
    /// The pipe was enlarged for batching (Linux), or could not be.
    #[cfg(target_os = "linux")]
    enlarged: Option<bool>,
    /// A zero-copy relay thread owns the pipe instead (Linux).
    #[cfg(target_os = "linux")]
    splice: Option<sys::linux_splice::SpliceRelay>,
}

impl StreamIo {
    /// Whether the child's side may still write to this stream.
    fn is_open(&self) -> bool {
        #[cfg(target_os = "linux")]
        if let Some(sp) = &self.splice {
            return sp.is_open();
        }
        self.pipe.is_some()
    }

    /// Whether nothing can be written to this stream any more (every write
    /// end of the child's pipe is closed), even if bytes are still in it.
    fn writers_gone(&self) -> bool {
        #[cfg(target_os = "linux")]
        if let Some(sp) = &self.splice {
            return sp.writers_gone();
        }
        self.pipe.as_ref().is_none_or(PipeEnd::writers_gone)
    }

    /// The inode of the child's pipe (Linux), to find who holds it.
    #[cfg(target_os = "linux")]
    fn inode(&self) -> Option<u64> {
        if let Some(sp) = &self.splice {
            return sp.inode();
        }
        self.pipe.as_ref().and_then(PipeEnd::inode)
    }
}

struct StdinFeed {
    pipe: PipeEnd,
    data: std::sync::Arc<[u8]>,
    pos: usize,
}

/// Everything one run owns while it is supervised.
pub(crate) struct Life {
    settings: Settings,
    pid: u32,
    start: Instant,
    deadline: Option<Instant>,
    spawn_time: Duration,
    root: Root,
    tree: Box<dyn Containment>,
    mechanism: Mechanism,
    containment_note: Option<String>,
    poller: Poller,
    waker: Arc<dyn Wake>,
    streams: [Option<StreamIo>; 2],
    stdin: Option<StdinFeed>,
    cancel: CancelToken,
    on_line: Option<SharedLineCallback>,
    tracer: Tracer,
    // What was learned on the way.
    root_status: Option<RootStatus>,
    root_exit_at: Option<Instant>,
    output_closed_at: Option<Instant>,
    /// The wait delay ended with output still open but no writer left:
    /// draining since then (bounded by `DRAIN_LIMIT`).
    draining_since: Option<Instant>,
    /// The wait delay ended with output held by a fork of the host, not by
    /// the tree: it counts as held from this time on (`FOREIGN_HOLD`).
    foreign_hold_until: Option<Instant>,
    signals_sent: Vec<Signal>,
    seen_members: HashSet<u32>,
    cleanup_error: Option<CleanupError>,
    kept: usize,
    term: Option<Termination>,
    done: bool,
    /// `finish` ran: the identity was released and the report built.
    finished: bool,
}

pub(crate) fn spawn(cmd: &mut Command) -> Result<Running, Error> {
    let cancel = cmd.cancel.clone().unwrap_or_default();
    if cancel.is_cancelled() {
        return Err(Error::CancelledBeforeSpawn);
    }
    let settings = cmd.settings.clone();
    if let Some(dir) = &cmd.cwd {
        if !dir.is_dir() {
            return Err(Error::Spawn {
                kind: crate::SpawnErrorKind::Other,
                program: cmd.program.clone(),
                source: io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("working directory {} does not exist", dir.display()),
                ),
            });
        }
    }
    let contain::Selected {
        mut tree,
        note: containment_note,
    } = contain::select(cmd.containment, cmd.limits, cmd.tracer.clone())?;
    let mechanism = tree.mechanism();

    let io_err = |e: io::Error| Error::spawn(cmd.program.clone(), e);
    let poller = Poller::new().map_err(io_err)?;
    let waker = poller.waker();

    let stdin_kind = match &cmd.stdin.0 {
        InputKind::Bytes(data) => InputKind::Bytes(data.clone()),
        _ => std::mem::take(&mut cmd.stdin).0,
    };
    let (stdin_io, stdin) = match stdin_kind {
        InputKind::Null => (ChildIo::Null, None),
        InputKind::Inherit => (ChildIo::Inherit, None),
        InputKind::File(f) => (ChildIo::File(f), None),
        InputKind::Bytes(data) => {
            let (ours, theirs) = sys::pipe(false).map_err(io_err)?;
            let feed = StdinFeed {
                pipe: ours,
                data,
                pos: 0,
            };
            (ChildIo::File(theirs), Some(feed))
        }
    };

    let limit = settings.capture_limit;
    let new_stream =
        |which, pipe: Option<PipeEnd>, relay: Option<Box<dyn Write + Send>>| StreamIo {
            which,
            pipe,
            capture: Captured::with_cap(limit),
            lines: cmd
                .on_line
                .as_ref()
                .map(|_| LineSplitter::new(settings.line_limit)),
            rest_until: None,
            #[cfg(target_os = "linux")]
            enlarged: None,
            relay: relay.map(|w| Relay::start(w, waker.clone())),
            #[cfg(target_os = "linux")]
            splice: None,
        };
    // Wires one output: a pipe we read (capture or relay) or a handle given
    // to the child as is.
    let wire = |which: Stream, kind: OutputKind| -> Result<(ChildIo, Option<StreamIo>), Error> {
        Ok(match kind {
            OutputKind::Capture => {
                let (ours, theirs) = sys::pipe(true).map_err(io_err)?;
                (
                    ChildIo::File(theirs),
                    Some(new_stream(which, Some(ours), None)),
                )
            }
            OutputKind::Relay(w) => {
                let (ours, theirs) = sys::pipe(true).map_err(io_err)?;
                (
                    ChildIo::File(theirs),
                    Some(new_stream(which, Some(ours), Some(w))),
                )
            }
            #[cfg(target_os = "linux")]
            OutputKind::RelayFile(dest) => {
                let (ours, theirs) = sys::pipe(true).map_err(io_err)?;
                let relay = sys::linux_splice::SpliceRelay::start(ours, dest, waker.clone())
                    .map_err(io_err)?;
                let mut s = new_stream(which, None, None);
                s.splice = Some(relay);
                (ChildIo::File(theirs), Some(s))
            }
            #[cfg(not(target_os = "linux"))]
            OutputKind::RelayFile(dest) => {
                let (ours, theirs) = sys::pipe(true).map_err(io_err)?;
                let w: Box<dyn Write + Send> = Box::new(dest);
                (
                    ChildIo::File(theirs),
                    Some(new_stream(which, Some(ours), Some(w))),
                )
            }
            OutputKind::Inherit => (ChildIo::Inherit, None),
            OutputKind::Null => (ChildIo::Null, None),
            OutputKind::File(f) => (ChildIo::File(f), None),
            OutputKind::MergeWithStdout => {
                return Err(Error::InvalidInput(
                    "only stderr can be merged with stdout".into(),
                ))
            }
        })
    };
    let (stdout_io, out) = wire(Stream::Stdout, std::mem::take(&mut cmd.stdout).0)?;
    let (stderr_io, err) = match std::mem::take(&mut cmd.stderr).0 {
        OutputKind::MergeWithStdout => match (&stdout_io, &out) {
            (ChildIo::File(f), Some(_)) => (ChildIo::File(f.try_clone().map_err(io_err)?), None),
            _ => {
                return Err(Error::InvalidInput(
                    "stderr can be merged with stdout only when stdout is captured".into(),
                ))
            }
        },
        kind => wire(Stream::Stderr, kind)?,
    };

    let spec = SpawnSpec {
        program: &cmd.program,
        args: &cmd.args,
        env: &cmd.env,
        env_clear: cmd.env_clear,
        cwd: cmd.cwd.as_deref(),
        stdin: stdin_io,
        stdout: stdout_io,
        stderr: stderr_io,
    };
    let start = Instant::now();
    // `spec` is consumed: the parent's copies of the child's pipe ends are
    // closed once the child has them, so end of file can be seen once the
    // tree lets go of them.
    let mut root = match sys::spawn(spec, tree.as_mut()) {
        Ok(root) => root,
        Err(SpawnError::Contain(e)) => {
            return Err(Error::Containment {
                mechanism,
                reason: e.to_string(),
            })
        }
        Err(SpawnError::Spawn(e)) => return Err(Error::spawn(cmd.program.clone(), e)),
    };
    let spawn_time = start.elapsed();
    let pid = root.id();
    cmd.tracer.record(OsOp::Spawned { pid });

    if let Err(e) = tree.attach(&root) {
        // The root is unreaped, so killing it by pid cannot hit a stranger.
        root.kill();
        let _ = tree.release(&mut root);
        return Err(Error::Containment {
            mechanism,
            reason: format!("could not take hold of the tree: {e}"),
        });
    }

    let deadline = [
        settings.timeout.and_then(|t| start.checked_add(t)),
        settings.deadline,
    ]
    .into_iter()
    .flatten()
    .min();

    let life = Life {
        pid,
        start,
        deadline,
        spawn_time,
        root,
        tree,
        mechanism,
        containment_note,
        poller,
        waker,
        streams: [out, err],
        stdin,
        cancel,
        on_line: cmd.on_line.clone(),
        tracer: cmd.tracer.clone(),
        root_status: None,
        root_exit_at: None,
        output_closed_at: None,
        draining_since: None,
        foreign_hold_until: None,
        signals_sent: Vec::new(),
        seen_members: HashSet::new(),
        cleanup_error: None,
        kept: 0,
        term: None,
        done: false,
        finished: false,
        settings,
    };
    // Registered after the spawn: a cancel that raced the spawn is seen by
    // the first loop iteration through `cancel.state()`.
    life.cancel.register(&life.waker);
    Ok(Running {
        life: Some(Box::new(life)),
    })
}

impl Life {
    /// The synchronous driver: sleep in the platform poller between steps.
    fn run(mut self: Box<Self>) -> Report {
        while !self.advance() {
            let timeout = self.next_wake(Instant::now());
            let outputs = watched_outputs(&self.streams);
            let stdin = self.stdin.as_ref().map(|f| &f.pipe);
            let watch_tree = self.term.is_some();
            match self.poller.wait(
                &self.root,
                outputs,
                stdin,
                self.tree.as_ref(),
                watch_tree,
                timeout,
            ) {
                Ok(ready) => {
                    if ready.stdin_closed {
                        self.stdin_closed();
                    } else if ready.stdin_writable {
                        self.feed_stdin();
                    }
                    if ready.tree_event {
                        self.tree_event();
                    }
                }
                Err(e) => {
                    self.wait_failed(e);
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
        self.into_report()
    }

    /// One step of the state machine with what can be seen now: read the
    /// output that is there, look at the root, classify, move a termination
    /// on. Never blocks on the tree. Returns true when the run is over (then
    /// call [`into_report`](Self::into_report)).
    pub(crate) fn advance(&mut self) -> bool {
        if self.done {
            return true;
        }
        let now = Instant::now();
        self.pump_outputs();
        self.observe_root(now);
        let open = self.outputs_open();
        if open == 0 && self.output_closed_at.is_none() && self.streams.iter().any(Option::is_some)
        {
            self.output_closed_at = Some(now);
        }
        if self.term.is_none() {
            // Output that nothing holds but that could not be drained in
            // time (a relay consumer that does not read) ends like EOF.
            let drained_out = self
                .draining_since
                .is_some_and(|d| now >= later(d, DRAIN_LIMIT));
            let open = if drained_out { 0 } else { open };
            self.term = self.classify(now, open);
            if self.term.is_none() && self.root_status.is_some() && open == 0 {
                self.done = true; // clean exit, leftovers kept (or none)
                return true;
            }
        }
        if let Some(mut t) = self.term.take() {
            let over = now >= t.next_check && self.step_termination(&mut t, now);
            self.term = Some(t);
            if over {
                self.done = true;
                return true;
            }
        }
        false
    }

    /// The child closed its stdin: writing now would raise SIGPIPE in a host
    /// that does not ignore it, so stop feeding.
    pub(crate) fn stdin_closed(&mut self) {
        self.stdin = None;
    }

    /// The synchronous driver to the end (used when an async run is dropped
    /// outside a runtime).
    #[cfg(all(feature = "tokio", unix))]
    pub(crate) fn run_to_end(self: Box<Self>) -> Report {
        self.run()
    }

    /// The run's owner went away (a dropped future): the tree must be dead,
    /// or at least have been sent SIGKILL, before this returns, because
    /// nothing guarantees that anything runs after it (the host may return
    /// from `main`). So: SIGKILL to the whole tree at once (no grace:
    /// nobody waits for it; a termination in its grace is escalated), then
    /// one membership check, which also signals what appeared since (the
    /// subreaper tier's "until none is left", the cgroup tier's
    /// stragglers). No output is read here (no user callback runs inside a
    /// drop). Bounded: a few system calls and at most two scans of `/proc`.
    /// Confirming and releasing are left to the caller's continuation.
    #[cfg(all(feature = "tokio", unix))]
    pub(crate) fn kill_now(&mut self) {
        if self.done {
            return;
        }
        let now = Instant::now();
        match self.term.as_mut() {
            None => {
                let t = self.start_termination(Reason::Cancelled, Some(Signal::KILL), now);
                self.term = Some(t);
            }
            Some(t) if t.kill_at.is_some() => {
                t.kill_at = None;
                t.confirm_until = Some(later(now, self.settings.confirm_window));
                t.next_check = now;
                t.interval = CHECK_FIRST;
                self.send(Signal::KILL);
            }
            // SIGKILL was sent already.
            Some(_) => {}
        }
        self.cancel.cancel();
        let _ = self.tree_members();
    }

    /// One zero-timeout look at every descriptor, applied like the
    /// synchronous driver applies a wait. Returns whether anything was
    /// ready (then step again before sleeping).
    #[cfg(all(feature = "tokio", unix))]
    pub(crate) fn poll_now(&mut self) -> bool {
        let outputs = watched_outputs(&self.streams);
        let stdin = self.stdin.as_ref().map(|f| &f.pipe);
        let watch_tree = self.term.is_some();
        match self.poller.wait(
            &self.root,
            outputs,
            stdin,
            self.tree.as_ref(),
            watch_tree,
            Some(Duration::ZERO),
        ) {
            Ok(ready) => {
                let any = ready.readable.iter().any(|&r| r)
                    || ready.stdin_writable
                    || ready.stdin_closed
                    || ready.tree_event
                    || ready.woken
                    || self.root.exit_pending();
                if ready.stdin_closed {
                    self.stdin_closed();
                } else if ready.stdin_writable {
                    self.feed_stdin();
                }
                if ready.tree_event {
                    self.tree_event();
                }
                any
            }
            Err(e) => {
                self.wait_failed(e);
                true
            }
        }
    }

    #[cfg(all(feature = "tokio", unix))]
    pub(crate) fn wake_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.poller.wake_fd()
    }

    #[cfg(all(feature = "tokio", unix))]
    pub(crate) fn root_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.root.exit_fd()
    }

    #[cfg(all(feature = "tokio", unix))]
    pub(crate) fn output_fd(&self, i: usize) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.streams[i]
            .as_ref()?
            .pipe
            .as_ref()
            .map(std::os::fd::AsFd::as_fd)
    }

    #[cfg(all(feature = "tokio", unix))]
    pub(crate) fn stdin_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.stdin
            .as_ref()
            .map(|f| std::os::fd::AsFd::as_fd(&f.pipe))
    }

    /// The containment's descriptor fired: check the tree now.
    pub(crate) fn tree_event(&mut self) {
        if let Some(t) = self.term.as_mut() {
            t.next_check = Instant::now();
        }
    }

    /// The driver could not wait: do not spin, do not hang. Terminate the
    /// tree and report the failure.
    pub(crate) fn wait_failed(&mut self, e: io::Error) {
        self.note_cleanup(CleanupError::Signal(format!("waiting failed: {e}")));
        if self.term.is_none() {
            self.term = Some(self.start_termination(Reason::Cancelled, None, Instant::now()));
        }
    }

    /// Builds the report once [`advance`](Self::advance) said the run is
    /// over: final drain, release.
    pub(crate) fn into_report(self: Box<Self>) -> Report {
        let outcome = match self.term.as_ref().map(|t| t.reason) {
            Some(Reason::TimedOut) => Outcome::TimedOut,
            Some(Reason::Cancelled) => Outcome::Cancelled,
            Some(Reason::OutputHeld) => Outcome::OutputHeld,
            Some(Reason::Leftovers) | None => match self.root_status {
                Some(RootStatus::Exited(c)) => Outcome::Exited(c),
                Some(RootStatus::Signaled(s)) => Outcome::Signaled(s),
                // The loop only ends without a termination once the root exited.
                None => Outcome::Cancelled,
            },
        };
        self.finish(outcome)
    }

    /// Decides whether the run must now be terminated, and starts it.
    fn classify(&mut self, now: Instant, open: usize) -> Option<Termination> {
        if let Some(status) = self.root_status {
            if open == 0 {
                // Clean exit: the leftovers policy decides.
                let kill = match self.settings.leftovers {
                    LeftoverPolicy::Kill => true,
                    LeftoverPolicy::Keep => false,
                    LeftoverPolicy::KeepOnSuccess => status != RootStatus::Exited(0),
                };
                if !kill {
                    self.kept = match self.tree.count_kept(&mut self.root) {
                        Ok(n) => n,
                        Err(e) => {
                            self.note_cleanup(CleanupError::Release(format!(
                                "could not count the processes left running: {e}"
                            )));
                            0
                        }
                    };
                    return None;
                }
                if self.tree_members().is_empty() {
                    return None;
                }
                return Some(self.start_termination(Reason::Leftovers, None, now));
            }
        }
        if let Some(sig) = self.cancel.state() {
            return Some(self.start_termination(Reason::Cancelled, sig, now));
        }
        if self.deadline.is_some_and(|d| now >= d) {
            return Some(self.start_termination(Reason::TimedOut, None, now));
        }
        if let Some(exit_at) = self.root_exit_at {
            if self.draining_since.is_none() && now >= later(exit_at, self.settings.wait_delay) {
                // The wait delay is the grace for holders, not a deadline
                // for reading: output is held only while a descendant
                // still has it open. With every writer gone, what is left
                // is already written; it is drained (the pipes or the relay
                // wake the loop), and the run ends cleanly at end of file.
                if !self.output_held() {
                    self.draining_since = Some(now);
                    return None;
                }
                // Held by the tree, or by a process the tier cannot see (a
                // setsid escaper of a process group): at once. Held only by
                // a fork of the host that has not exec'd yet: once it had
                // `FOREIGN_HOLD` to let go.
                if !self.tree_holds_output() && self.host_fork_holds_output(now) {
                    return None;
                }
                if !self.output_held() {
                    // Let go in the meantime.
                    self.draining_since = Some(now);
                    return None;
                }
                return Some(self.start_termination(Reason::OutputHeld, None, now));
            }
        }
        None
    }

    /// Whether a live member of the tree has an output pipe that still has
    /// a writer (Linux: their `/proc/PID/fd`; elsewhere: any live member).
    fn tree_holds_output(&mut self) -> bool {
        let members = self.tree_members();
        #[cfg(target_os = "linux")]
        {
            let inodes = self.held_inodes();
            if inodes.is_empty() {
                return !members.is_empty();
            }
            members
                .iter()
                .any(|&pid| sys::linux_proc::holds_pipe(pid, &inodes))
        }
        #[cfg(not(target_os = "linux"))]
        {
            !members.is_empty()
        }
    }

    /// The inodes of the output pipes that still have a writer (Linux).
    #[cfg(target_os = "linux")]
    fn held_inodes(&self) -> Vec<u64> {
        self.streams
            .iter()
            .flatten()
            .filter(|s| s.is_open() && !s.writers_gone())
            .filter_map(StreamIo::inode)
            .collect()
    }

    /// Whether a holder outside the tree is a fork of this process that
    /// has not exec'd yet (it lets go by itself), and `FOREIGN_HOLD` since
    /// it was first seen has not passed: then the output is not held yet.
    fn host_fork_holds_output(&mut self, now: Instant) -> bool {
        let until = *self
            .foreign_hold_until
            .get_or_insert_with(|| later(now, FOREIGN_HOLD));
        if now >= until {
            return false;
        }
        #[cfg(target_os = "linux")]
        {
            sys::linux_proc::child_holds_pipe(&self.held_inodes())
        }
        #[cfg(not(target_os = "linux"))]
        {
            true
        }
    }

    /// Whether some captured stream still has a writer.
    fn output_held(&self) -> bool {
        self.streams
            .iter()
            .flatten()
            .any(|s| s.is_open() && !s.writers_gone())
    }

    fn start_termination(
        &mut self,
        reason: Reason,
        sig: Option<Signal>,
        now: Instant,
    ) -> Termination {
        let first = sig.unwrap_or(self.settings.signal);
        let graceful = !self.settings.grace.is_zero() && first != Signal::KILL;
        let kill_first = !graceful && self.tree.count_after_kill();
        if !kill_first {
            let _ = self.tree_members();
        }
        let mut t = Termination {
            reason,
            kill_at: None,
            confirm_until: None,
            next_check: now,
            interval: CHECK_FIRST,
        };
        if graceful {
            self.send(first);
            t.kill_at = Some(later(now, self.settings.grace));
        } else {
            self.send(Signal::KILL);
            if kill_first {
                // Counted (and pinned) while they die: "at least".
                let _ = self.tree_members();
            }
            t.confirm_until = Some(later(now, self.settings.confirm_window));
        }
        t.next_check = now + t.interval;
        t
    }

    /// One check of a termination in progress. Returns true when done.
    fn step_termination(&mut self, t: &mut Termination, now: Instant) -> bool {
        let members = self.tree_members();
        if members.is_empty() && self.root_status.is_some() {
            return true;
        }
        if let Some(kill_at) = t.kill_at {
            if now >= kill_at {
                // Escalation is decided by the whole tree, not the root.
                self.send(Signal::KILL);
                t.kill_at = None;
                t.confirm_until = Some(later(now, self.settings.confirm_window));
                t.interval = CHECK_FIRST;
            }
        } else if t.confirm_until.is_some_and(|c| now >= c) {
            let mut pids: Vec<u32> = members;
            pids.sort_unstable();
            self.note_cleanup(CleanupError::Survivors { pids });
            return true;
        }
        t.next_check = now + t.interval;
        t.interval = (t.interval * 2).min(CHECK_MAX);
        false
    }

    fn send(&mut self, sig: Signal) {
        self.signals_sent.push(sig);
        if let Err(e) = self.tree.signal(sig) {
            self.note_cleanup(CleanupError::Signal(e.to_string()));
        }
    }

    /// Live members other than the root, remembered for the killed count.
    fn tree_members(&mut self) -> Vec<u32> {
        match self.tree.members() {
            Ok(m) => {
                let pid = self.pid;
                let others: Vec<u32> = m.into_iter().filter(|&p| p != pid).collect();
                self.seen_members.extend(others.iter().copied());
                let mut all = others;
                if self.root_status.is_none() {
                    // The root is alive (or dying) and still a member.
                    all.push(pid);
                }
                all
            }
            Err(e) => {
                self.note_cleanup(CleanupError::Signal(format!(
                    "could not list the tree's members: {e}"
                )));
                Vec::new()
            }
        }
    }

    fn note_cleanup(&mut self, e: CleanupError) {
        if self.cleanup_error.is_none() {
            self.cleanup_error = Some(e);
        }
    }

    fn observe_root(&mut self, now: Instant) {
        if self.root_status.is_some() {
            return;
        }
        match self.root.peek_exit() {
            Ok(Some(st)) => {
                self.root_status = Some(st);
                self.root_exit_at = Some(now);
                // A termination waits for the root too: check at once.
                if let Some(t) = self.term.as_mut() {
                    t.next_check = now;
                }
                self.tracer.record(OsOp::RootExited { pid: self.pid });
                // Output written just before the exit is usually already in
                // the pipe: take it now so a prompt EOF is seen at once.
                self.pump_outputs();
            }
            Ok(None) => {}
            Err(e) => self.note_cleanup(CleanupError::Release(format!(
                "could not observe the root's exit: {e}"
            ))),
        }
    }

    fn outputs_open(&self) -> usize {
        self.streams
            .iter()
            .flatten()
            .filter(|s| s.is_open())
            .count()
    }

    /// How long a driver may sleep before the next timer is due.
    pub(crate) fn next_wake(&self, now: Instant) -> Option<Duration> {
        let term = self.term.as_ref();
        let mut at: Option<Instant> = None;
        let mut consider = |t: Option<Instant>| {
            if let Some(t) = t {
                at = Some(at.map_or(t, |a| a.min(t)));
            }
        };
        match term {
            Some(t) => consider(Some(t.next_check)),
            None => {
                consider(self.deadline);
                match (self.draining_since, self.foreign_hold_until) {
                    (Some(d), _) => consider(Some(later(d, DRAIN_LIMIT))),
                    (None, Some(f)) => consider(Some(f)),
                    (None, None) => consider(
                        self.root_exit_at
                            .map(|e| later(e, self.settings.wait_delay)),
                    ),
                }
            }
        }
        for s in self.streams.iter().flatten() {
            consider(s.rest_until);
        }
        let mut d = at.map(|t| t.saturating_duration_since(now));
        if self.root_status.is_none() && !Poller::root_exit_wakes(&self.root) {
            d = Some(d.map_or(EXIT_POLL, |d| d.min(EXIT_POLL)));
        }
        d
    }

    /// Reads whatever the captured streams have now, without blocking.
    fn pump_outputs(&mut self) {
        for i in 0..2 {
            self.pump_stream(i, READS_PER_WAKE);
        }
    }

    fn pump_stream(&mut self, i: usize, max_reads: usize) {
        let Some(s) = self.streams[i].as_mut() else {
            return;
        };
        if s.relay.as_ref().is_some_and(Relay::is_broken) {
            // The relay's reader went away: close our end too, so the child
            // sees EPIPE/SIGPIPE exactly as it would in a plain pipeline
            // instead of being drained forever.
            s.pipe = None;
            return;
        }
        // One read buffer per thread, shared by every run it supervises: a
        // thousand runs awaited on one thread do not each hold 128 KiB.
        thread_local! {
            static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        let got = BUF.with_borrow_mut(|buf| {
            if buf.len() < READ_CHUNK {
                buf.resize(READ_CHUNK, 0);
            }
            Self::read_into(s, self.on_line.as_ref(), buf, max_reads)
        });
        s.rest_until = None;
        // Batching for a busy stream (Linux): a writer of small chunks wakes
        // a reader per chunk, and each wake costs a poll and a read. Once a
        // stream has carried BATCH_AFTER bytes, its pipe is enlarged, and
        // after a wake that found little the pipe is left out of the wait
        // for BATCH_WAIT, so the next wake reads a batch. The root, the tree
        // and the timers are still waited on; only this pipe's data waits
        // (at most BATCH_WAIT), and the writer does not block meanwhile.
        #[cfg(target_os = "linux")]
        if s.pipe.is_some() && got < BATCH_SMALL && s.capture.total_bytes() >= BATCH_AFTER as u64 {
            let big = *s.enlarged.get_or_insert_with(|| {
                s.pipe
                    .as_ref()
                    .and_then(|p| p.enlarge(BATCH_PIPE).ok())
                    .is_some_and(|n| n >= BATCH_PIPE)
            });
            if big {
                s.rest_until = Some(later(Instant::now(), BATCH_WAIT));
            }
        }
        #[cfg(not(target_os = "linux"))]
        let _ = got;
    }

    fn read_into(
        s: &mut StreamIo,
        on_line: Option<&SharedLineCallback>,
        buf: &mut [u8],
        max_reads: usize,
    ) -> usize {
        let mut got = 0;
        for _ in 0..max_reads {
            let Some(pipe) = s.pipe.as_ref() else {
                return got;
            };
            if s.relay.as_ref().is_some_and(|r| r.is_full()) {
                return got;
            }
            // Straight into the capture's head or tail ring where it can
            // take the read; through the shared buffer otherwise.
            let (res, asked, direct) = match s.capture.spare(buf.len()) {
                Some(region) => (pipe.read(region), region.len(), true),
                None => (pipe.read(buf), buf.len(), false),
            };
            match res {
                Ok(ReadResult::Data(n)) => {
                    let data = if direct {
                        s.capture.commit(n)
                    } else {
                        s.capture.push(&buf[..n]);
                        &buf[..n]
                    };
                    if let Some(r) = s.relay.as_ref() {
                        r.push(data);
                    }
                    if let (Some(lines), Some(cb)) = (s.lines.as_mut(), on_line) {
                        let which = s.which;
                        let mut cb = cb.lock().unwrap_or_else(|e| e.into_inner());
                        lines.feed(data, &mut |l| cb(which, l));
                    }
                    // A short read drained the pipe; a full one (of a region
                    // that may end before the buffer's size) may not have.
                    got += n;
                    if n < asked {
                        return got;
                    }
                }
                Ok(ReadResult::WouldBlock) => return got,
                Ok(ReadResult::Eof) | Err(_) => {
                    s.pipe = None;
                    return got;
                }
            }
        }
        got
    }

    fn feed_stdin(&mut self) {
        let Some(f) = self.stdin.as_mut() else { return };
        let done = match f.pipe.write(&f.data[f.pos..]) {
            Ok(n) => {
                f.pos += n;
                f.pos >= f.data.len()
            }
            // The child closed its stdin (EPIPE) or it broke: stop feeding.
            Err(_) => true,
        };
        if done {
            self.stdin = None; // closing our end gives the child EOF
        }
    }

    /// Final drain, line flush, relay flush, release; builds the report.
    fn finish(mut self: Box<Self>, outcome: Outcome) -> Report {
        self.finished = true;
        self.stdin = None;
        // Keep what the tree wrote before it died; a holder outside the tree
        // cannot keep us here (bounded number of reads, then close).
        for i in 0..2 {
            self.pump_stream(i, 64);
            if let Some(s) = self.streams[i].as_mut() {
                s.pipe = None;
                if let (Some(lines), Some(cb)) = (s.lines.as_mut(), self.on_line.as_ref()) {
                    let which = s.which;
                    let mut cb = cb.lock().unwrap_or_else(|e| e.into_inner());
                    lines.finish(&mut |l| cb(which, l));
                }
            }
        }
        let flush_until = later(
            Instant::now(),
            self.settings.wait_delay.max(Duration::from_millis(100)),
        );
        for s in self.streams.iter_mut().flatten() {
            if let Some(r) = s.relay.take() {
                r.finish(flush_until);
            }
            #[cfg(target_os = "linux")]
            if let Some(sp) = s.splice.take() {
                // What the tree wrote before it ended is still relayed.
                let n = sp.finish(Duration::from_millis(100), flush_until);
                s.capture.count_uncaptured(n);
            }
        }
        let (usage, limits_hit) = match self.tree.usage() {
            Some((u, hits)) => (Some(u), hits),
            None => (None, Vec::new()),
        };
        if let Err(e) = self.tree.release(&mut self.root) {
            self.note_cleanup(CleanupError::Release(e.to_string()));
        }
        let killed = if self.signals_sent.is_empty() {
            0
        } else {
            self.seen_members.len()
        };
        let at = |i: Option<Instant>| i.map(|t| t.saturating_duration_since(self.start));
        let [out, err] = std::mem::take(&mut self.streams);
        Report {
            outcome,
            root: self.root_status,
            pid: self.pid,
            containment: self.mechanism,
            containment_note: self.containment_note.take(),
            leftovers: Leftovers {
                killed,
                kept: self.kept,
            },
            signals_sent: std::mem::take(&mut self.signals_sent),
            cleanup_error: self.cleanup_error.take(),
            stdout: out.map(|s| s.capture).unwrap_or_default(),
            stderr: err.map(|s| s.capture).unwrap_or_default(),
            timings: Timings {
                spawn: self.spawn_time,
                root_exit: at(self.root_exit_at),
                output_closed: at(self.output_closed_at),
                cleanup_done: self.start.elapsed(),
            },
            usage,
            limits_hit,
        }
    }
}

impl Drop for Life {
    /// A lifecycle dropped before it finished (a panic in a line callback or
    /// writer unwinding through `wait`) still leaves nothing behind: SIGKILL
    /// to the tree through its identity, a bounded wait for it to empty, and
    /// the release (which reaps the root).
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        self.finished = true;
        let _ = self.tree.signal(Signal::KILL);
        let until = later(Instant::now(), self.settings.confirm_window);
        while Instant::now() < until {
            let gone = self.tree.members().map(|m| m.is_empty()).unwrap_or(true);
            if gone {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let _ = self.tree.release(&mut self.root);
    }
}

/// `t + d`, where a duration too large for the clock (`Duration::MAX` for
/// "forever") means a time so far away that it never comes.
fn later(t: Instant, d: Duration) -> Instant {
    const FAR: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
    t.checked_add(d.min(FAR))
        .or_else(|| t.checked_add(FAR))
        .unwrap_or(t)
}

/// The captured pipes worth waiting on (not those whose relay is full).
fn watched_outputs(streams: &[Option<StreamIo>; 2]) -> [Option<&PipeEnd>; 2] {
    let now = streams
        .iter()
        .flatten()
        .any(|s| s.rest_until.is_some())
        .then(Instant::now);
    [0, 1].map(|i| {
        streams[i]
            .as_ref()
            .filter(|s| s.relay.as_ref().is_none_or(|r| !r.is_full()))
            .filter(|s| match (s.rest_until, now) {
                (Some(r), Some(now)) => r <= now,
                _ => true,
            })
            .and_then(|s| s.pipe.as_ref())
    })
}

/// Copies one stream, in order, to a writer on its own thread, so that a
/// slow consumer slows the child (back-pressure) and never the timers.
struct Relay {
    shared: Arc<RelayShared>,
    thread: Option<JoinHandle<()>>,
}

struct RelayShared {
    q: Mutex<RelayQueue>,
    cv: Condvar,
    waker: Arc<dyn Wake>,
}

#[derive(Default)]
struct RelayQueue {
    chunks: VecDeque<Vec<u8>>,
    bytes: usize,
    closed: bool,
    broken: bool,
    /// The writer thread flushed and is about to end.
    done: bool,
}

impl Relay {
    fn start(mut w: Box<dyn Write + Send>, waker: Arc<dyn Wake>) -> Relay {
        let shared = Arc::new(RelayShared {
            q: Mutex::new(RelayQueue::default()),
            cv: Condvar::new(),
            waker,
        });
        let sh = shared.clone();
        let thread = std::thread::Builder::new()
            .name("corral-relay".into())
            .spawn(move || {
                loop {
                    let chunk = {
                        let mut q = sh.q.lock().unwrap_or_else(|e| e.into_inner());
                        loop {
                            if let Some(c) = q.chunks.pop_front() {
                                break Some(c);
                            }
                            if q.closed {
                                break None;
                            }
                            q = sh.cv.wait(q).unwrap_or_else(|e| e.into_inner());
                        }
                    };
                    let Some(chunk) = chunk else { break };
                    // A writer that panics is a broken writer, not a dead
                    // relay that would stall the child forever.
                    let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        w.write_all(&chunk).is_ok()
                    }))
                    .unwrap_or(false);
                    let mut q = sh.q.lock().unwrap_or_else(|e| e.into_inner());
                    let was_full = q.bytes >= RELAY_QUEUE_LIMIT;
                    q.bytes -= chunk.len();
                    if !ok {
                        // The consumer went away: keep capturing, stop relaying.
                        q.broken = true;
                        q.bytes -= q.chunks.iter().map(Vec::len).sum::<usize>();
                        q.chunks.clear();
                    }
                    sh.cv.notify_all();
                    drop(q);
                    if was_full || !ok {
                        sh.waker.wake();
                    }
                }
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| w.flush()));
                let mut q = sh.q.lock().unwrap_or_else(|e| e.into_inner());
                q.done = true;
                sh.cv.notify_all();
            })
            .ok();
        Relay { shared, thread }
    }

    fn is_broken(&self) -> bool {
        let q = self.shared.q.lock().unwrap_or_else(|e| e.into_inner());
        q.broken
    }

    fn is_full(&self) -> bool {
        let q = self.shared.q.lock().unwrap_or_else(|e| e.into_inner());
        q.bytes >= RELAY_QUEUE_LIMIT
    }

    fn push(&self, data: &[u8]) {
        let mut q = self.shared.q.lock().unwrap_or_else(|e| e.into_inner());
        if q.broken || self.thread.is_none() {
            return;
        }
        q.bytes += data.len();
        q.chunks.push_back(data.to_vec());
        self.shared.cv.notify_all();
    }

    /// Closes the queue and waits for the writer (its writes and its final
    /// flush) until `until` at most; a writer stuck past that is left to
    /// finish on its own thread.
    fn finish(mut self, until: Instant) {
        let mut q = self.shared.q.lock().unwrap_or_else(|e| e.into_inner());
        q.closed = true;
        self.shared.cv.notify_all();
        while !q.done && self.thread.is_some() {
            let now = Instant::now();
            if now >= until {
                return; // the consumer is stuck; Drop detaches the thread
            }
            q = self
                .shared
                .cv
                .wait_timeout(q, until - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        drop(q);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Relay {
    /// A relay dropped without `finish` (a spawn that failed after the
    /// outputs were wired) still ends its thread and lets go of the writer.
    fn drop(&mut self) {
        let mut q = self.shared.q.lock().unwrap_or_else(|e| e.into_inner());
        q.closed = true;
        self.shared.cv.notify_all();
    }
}
