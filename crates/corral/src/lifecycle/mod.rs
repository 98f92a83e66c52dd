//! The lifecycle, written once for every platform:
//!
//! ```text
//! spawn ─► contain ─► wait/drain ─► classify ─► clean up ─► release
//! ```
//!
//! * **spawn**: check cancellation, let the containment place the spawn
//!   (a `sys::Placement`, or the root started by the containment itself),
//!   start the root with only its own pipe ends inherited.
//! * **contain**: `Containment::attach` consumes the containment and returns
//!   the attached tree, which holds the tree's identity: the only thing
//!   that can signal, count or release it.
//! * **wait/drain**: one loop sleeps in the platform poller until output
//!   arrives, stdin can be written, the root exits, a waker fires (cancel,
//!   relay back-pressure) or the next timer (deadline, end of wait delay,
//!   end of grace, confirm tick) is due.
//! * **classify** and **clean up** are the [`phase`] machine
//!   (`Supervising → Grace → Confirming → Over`): a pure decision from what
//!   was observed and the clock to the next phase and the actions (signals,
//!   counting kept leftovers, reporting survivors), which [`Life::apply`]
//!   carries out.
//! * **release**: reap the root and let go of the identity, exactly once,
//!   after the last signal (`Attached::release`, which consumes the tree,
//!   from [`Life::finish`], or `Drop` after a panic).
//!
//! Reading this file top to bottom: the public handle ([`Running`]), the
//! run's state ([`Life`]), the spawn, the step ([`Life::advance`]: observe,
//! decide, apply), the effects, the report.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cancel::{CancelToken, Wake};
use crate::capture::OutputMeter;
use crate::contain::{self, Attached, Containment, OsOp, Tracer};
use crate::report::{
    CleanupError, CrashSafety, CrashSafetyCell, Leftovers, Mechanism, Outcome, Report, RootStatus,
    TimeoutKind, Timings,
};
use crate::spec::{InputKind, Settings, SharedLineCallback, Span};
use crate::sys::{self, Interest, Poller, Root, SpawnError, SpawnSpec};
use crate::{Error, Signal};

/// Completes a run's sandbox report when the run ends (the denials the
/// kernel reported during it).
pub(crate) type SandboxFinish = Box<dyn FnOnce(&mut crate::report::SandboxReport) + Send>;

mod deaths;
mod phase;
mod plan;
mod relay;
mod stdio;
mod stopped;

use phase::{later, Action, Leftover, Observed, Phase, Policy, Probe, Reason};
pub(crate) use plan::Plan;
pub use stdio::PtyWindow;
use stdio::{watched_outputs, StdinFeed, StreamSettings, Streams, Wired};

/// Reads per stream per wake-up, so one chatty stream cannot starve timers.
const READS_PER_WAKE: usize = 16;
/// When the root's exit does not wake the poller (no pidfd), poll this often.
const EXIT_POLL: Duration = Duration::from_millis(5);
/// After a termination, how long the output's last writers (members killed
/// a moment ago, still closing their descriptors) may take to go before the
/// report says the output never closed.
const CLOSE_AFTER_KILL: Duration = Duration::from_millis(100);
/// A running command. Supervision happens in [`Running::wait`]; dropping the
/// handle without waiting cancels the run and cleans up (bounded by the
/// grace and the confirm window).
#[must_use = "dropping a Running cancels the run and kills its whole tree; call .wait()"]
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
    #[cfg(tokio_unix)]
    pub(crate) fn into_life(mut self) -> Box<Life> {
        self.life.take().expect("Running holds its lifecycle")
    }

    /// Records what the sandbox enforced, for the report.
    /// `finish` completes it when the run ends (the denials observed).
    #[cfg_attr(not(linux_raw), allow(dead_code))]
    pub(crate) fn set_sandbox_report(
        &mut self,
        r: crate::report::SandboxReport,
        finish: SandboxFinish,
    ) {
        if let Some(l) = self.life.as_mut() {
            l.sandbox = Some(Box::new((r, finish)));
        }
    }

    /// The root's process id.
    pub fn id(&self) -> u32 {
        self.life.as_ref().map_or(0, |l| l.pid)
    }

    /// The window size of the run's pseudo-terminal
    /// ([`Command::pty`](crate::Command::pty)), `None` without one. The
    /// handle may be kept and used from another thread while
    /// [`wait`](Self::wait) runs.
    pub fn pty_window(&self) -> Option<PtyWindow> {
        self.life
            .as_ref()
            .and_then(|l| l.pty.as_ref())
            .map(stdio::PtyRun::window)
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

    /// Sends `sig` to the whole tree now, through the containment's identity
    /// (the process group of the unreaped leader, the cgroup, the pid
    /// namespace's init, the job), like `kill -SIG` to every process of the
    /// tree and nothing else. Safe from PID reuse: the identity is held
    /// until [`wait`](Self::wait) releases it, and `wait` consumes the
    /// handle, so no signal can follow the release.
    ///
    /// This does not end the run or change its deadline: a root that dies of
    /// the signal is reported as [`Outcome::Signaled`](crate::Outcome::Signaled)
    /// (the signal is not listed in [`Report::signals_sent`], which holds
    /// corral's own termination signals). Every signal but SIGKILL is
    /// followed by SIGCONT where the tier does so for its own signals (a
    /// stopped process must be able to act on it), so SIGSTOP does not keep
    /// the tree stopped. On Windows, `TERM` and `INT` are a CTRL_BREAK and
    /// `KILL` terminates the job.
    pub fn signal(&mut self, sig: Signal) -> io::Result<()> {
        match self.life.as_mut() {
            Some(l) => l.signal_tree(sig),
            None => Err(io::Error::other("the run is over")),
        }
    }

    /// For a process started ahead of its work (a session's warm shell,
    /// waiting for its command line): the run starts now. Its timers (the
    /// timeout, the idle timeout), its output limit, capture limit and wait
    /// delay become these, counted from now; the report's times count from
    /// now (its spawn time is zero: the spawn was before). `cancel`, if
    /// given, cancels the run too. Only before [`wait`](Self::wait), while
    /// the root is waiting and has written nothing that matters.
    #[cfg(unix)]
    pub(crate) fn start_now(&mut self, arm: &Arm) {
        if let Some(l) = self.life.as_mut() {
            l.start_now(arm);
        }
    }

    /// Supervises the run to its end and reports what happened. Returns in
    /// bounded time: at most the deadline (or root exit plus the wait delay,
    /// plus up to 1 s to drain output that nothing holds any more but is
    /// still being relayed), plus the grace, plus the confirm window (which
    /// stretches while the tree is still dying: its limit is 10 times its
    /// length or 5 s, whichever is longer, counted from the last death
    /// seen, and never more than 6 such limits from the SIGKILL).
    pub fn wait(mut self) -> Report {
        let life = self
            .life
            .take()
            .expect("Running holds its lifecycle until wait");
        life.run(None)
    }

    /// [`wait`](Self::wait), watching one more descriptor of the caller's on
    /// the way: whenever `fd` is readable, the waiting thread calls
    /// `on_ready` between two steps of the run, then goes on. It lets a
    /// single-threaded host do its own work while a run is supervised,
    /// without a thread of its own: the self-pipe of its signal handlers (a
    /// terminating signal turned into a [`CancelToken::cancel_with`] on the
    /// run's token, a `SIGCHLD` that reaps what the host must reap), a
    /// control socket, an eventfd another part of the host writes to.
    ///
    /// What the closure changes is seen at once: a cancellation from inside
    /// it ends the run (in bounded time, as from any other thread: the
    /// grace, then SIGKILL, then the confirm window), and the report says
    /// [`Outcome::Cancelled`]. The returned [`Report`] and the bound of
    /// [`wait`](Self::wait) are unchanged, provided the closure returns
    /// promptly: the run is not supervised while it runs (no timer fires, no
    /// output is read), so it must not block.
    ///
    /// The watch is level-triggered: `on_ready` must consume what made `fd`
    /// readable (drain the pipe, read the message), or it is called again
    /// at once. At a hang-up or an error on `fd` (its writers are all gone,
    /// it is not open) `on_ready` is called once more, then `fd` is no
    /// longer watched. Bytes that arrive once the run is over (while its
    /// output is flushed and its identity released) are not waited for:
    /// read `fd` once more after this returns if they matter.
    ///
    /// A panic in `on_ready` unwinds through this call; the run is then
    /// cleaned up as when the handle is dropped (its whole tree killed).
    ///
    /// Unix only: Windows and other platforms have no descriptor to watch
    /// in the run's wait; a host there uses [`wait`](Self::wait) and a
    /// thread of its own.
    #[cfg(unix)]
    pub fn wait_watching(
        mut self,
        fd: std::os::fd::BorrowedFd<'_>,
        mut on_ready: impl FnMut(),
    ) -> Report {
        let life = self
            .life
            .take()
            .expect("Running holds its lifecycle until wait");
        life.run(Some(Watch {
            fd,
            on_ready: &mut on_ready,
        }))
    }
}

/// What [`Running::start_now`] sets.
#[cfg(unix)]
#[derive(Default)]
pub(crate) struct Arm {
    pub(crate) timeout: Option<Duration>,
    pub(crate) idle_timeout: Option<Duration>,
    pub(crate) output_limit: Option<u64>,
    pub(crate) capture_limit: Option<usize>,
    pub(crate) wait_delay: Option<Duration>,
    pub(crate) cancel: Option<CancelToken>,
}

/// A descriptor of the caller's watched by the synchronous driver, and
/// what its readiness calls ([`Running::wait_watching`]).
#[cfg_attr(not(unix), allow(dead_code))]
pub(crate) struct Watch<'a> {
    #[cfg(unix)]
    fd: std::os::fd::BorrowedFd<'a>,
    on_ready: &'a mut dyn FnMut(),
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(life) = self.life.take() {
            life.cancel.cancel();
            let _ = life.run(None);
        }
    }
}

/// Signals an owner asked for (`AsyncRunning::signal`), carried out by the
/// supervising side: queued in the run's wake cell, which the request
/// also wakes (no allocation of their own).
#[cfg(tokio_unix)]
pub(crate) struct SignalRequests(Arc<sys::WakeCell>);

#[cfg(tokio_unix)]
impl SignalRequests {
    /// Queues `sig` for the next step and wakes the run.
    pub(crate) fn push(&self, sig: Signal) {
        self.0.push_signal(sig);
    }
}

/// A list most runs never add to (the signals sent, the cleanup errors):
/// 8 bytes in the run where a `Vec` is 24, boxed on the first push
/// (figure 5).
#[allow(clippy::box_collection)] // 8 bytes, not a `Vec`'s 24
struct Few<T>(Option<Box<Vec<T>>>);

impl<T> Default for Few<T> {
    fn default() -> Self {
        Few(None)
    }
}

impl<T> Few<T> {
    fn as_slice(&self) -> &[T] {
        self.0.as_deref().map_or(&[], Vec::as_slice)
    }

    fn vec_mut(&mut self) -> &mut Vec<T> {
        self.0.get_or_insert_with(Default::default)
    }

    fn take(&mut self) -> Vec<T> {
        self.0.take().map_or_else(Vec::new, |v| *v)
    }
}

/// Everything one run owns while it is supervised.
pub(crate) struct Life {
    /// `Command::require_crash_safety` (the rest of the settings is in
    /// `policy` and the streams: the run keeps no copy of them).
    require_crash_safety: bool,
    pid: u32,
    spawn_time: Span,
    root: Root,
    /// The attached tree while it is held; `None` once released (the
    /// release consumed it: nothing can signal through it any more). An
    /// `Option` only because the release happens in `finish` or in `Drop`,
    /// which cannot move it out otherwise.
    tree: Option<Box<dyn Attached>>,
    mechanism: Mechanism,
    /// Boxed `str`, not `String`: 8 bytes less a run (figure 5).
    containment_note: Option<Box<str>>,
    /// 8 bytes, not a `CrashSafety`'s 24 (figure 5).
    crash_safety: CrashSafetyCell,
    /// The run's wake cell (`Poller::waker` gives it as an `Arc<dyn Wake>`
    /// when one is needed: the run keeps no second pointer to it).
    poller: Poller,
    streams: Streams,
    /// The output limit and the idle timer's view of the streams (only
    /// with one of them set).
    meter: Option<Arc<OutputMeter>>,
    stdin: Option<Box<StdinFeed>>,
    /// The run's pseudo-terminal (`Command::pty`).
    pty: Option<stdio::PtyRun>,
    cancel: CancelToken,
    on_line: Option<SharedLineCallback>,
    tracer: Tracer,
    /// What the sandbox enforced, for the report, and what completes it
    /// when the run ends (the denials observed). Boxed: most runs have none.
    sandbox: Option<Box<(crate::report::SandboxReport, SandboxFinish)>>,
    // What was learned on the way.
    root_status: Option<RootStatus>,
    root_exit_at: Option<Instant>,
    output_closed_at: Option<Instant>,
    signals_sent: Few<Signal>,
    /// Members seen during the run, watched for how they die (the killed
    /// count).
    deaths: Option<Box<deaths::Deaths>>,
    /// Every cleanup step that failed, in order, each kept once (its first
    /// failure).
    cleanup_errors: Few<CleanupError>,
    /// The root exited cleanly and the policy keeps its leftovers: the
    /// release counts them.
    count_kept: bool,
    /// A `u32`: a live run is kept small (figure 5); no tree has 4
    /// billion processes (Linux's `pid_max` is at most 4 million).
    kept: u32,
    /// The leftovers of a clean exit seen stopped, and those sent SIGKILL
    /// for it (the keep rule, [`phase::keep_rule`]).
    /// Made when the keep rule first looks (most runs never do).
    stopped: Option<Box<stopped::Stopped>>,
    /// Where the run is (see [`phase`]).
    phase: Phase,
    /// What the decisions depend on.
    policy: Policy,
}

/// Starts one run: the plan checked, the containment chosen, the streams
/// wired, the root started and attached, the run's state assembled.
pub(crate) fn spawn(mut plan: Plan<'_>) -> Result<Running, Error> {
    check(&plan)?;
    let settings = plan.settings.clone();
    let contain::Selected {
        mut tree,
        note: containment_note,
    } = choose_containment(&plan)?;
    let io_err = |e: io::Error| Error::spawn(plan.program.to_owned(), e);
    let meter = (settings.idle_timeout.is_some() || settings.output_limit.is_some()).then(|| {
        Arc::new(OutputMeter::new(
            settings.output_limit,
            settings.idle_timeout.is_some(),
            Instant::now(),
        ))
    });
    let poller = Poller::new().map_err(io_err)?;
    let waker = poller.waker();
    let Wired {
        stdin: stdin_io,
        stdout: stdout_io,
        stderr: stderr_io,
        feed: stdin,
        streams: [out, err],
        pty,
    } = wire(&mut plan, meter.clone(), &waker, &io_err)?;
    let spec = SpawnSpec {
        program: plan.program,
        args: plan.args,
        env: plan.env,
        env_clear: plan.env_clear,
        cwd: plan.cwd,
        stdin: stdin_io,
        stdout: stdout_io,
        stderr: stderr_io,
        sigpipe_ignored: settings.sigpipe_ignored,
        setup: plan.setup,
        farewell: crate::spec::Farewell::of_settings(&settings),
    };
    let start = Instant::now();
    // `spec` is consumed: the parent's copies of the child's pipe ends are
    // closed once the child has them, so end of file can be seen once the
    // tree lets go of them.
    let mut root = start_root(spec, tree.as_mut()).map_err(|e| spawn_failed(e, &plan, &*tree))?;
    let spawn_time = start.elapsed();
    plan.tracer.record(OsOp::Spawned { pid: root.id() });
    let (tree, crash_safety) = attach(tree, &mut root, &settings)?;
    let mut life = Life {
        pid: root.id(),
        spawn_time: spawn_time.into(),
        mechanism: tree.mechanism(),
        policy: policy(&settings, start, tree.stops_to_count()),
        root,
        tree: Some(tree),
        containment_note: containment_note.map(String::into_boxed_str),
        crash_safety: crash_safety.into(),
        poller,
        streams: [out, err],
        meter,
        stdin: stdin.map(Box::new),
        pty,
        cancel: plan.cancel,
        on_line: plan.on_line,
        tracer: plan.tracer,
        sandbox: None,
        root_status: None,
        root_exit_at: None,
        output_closed_at: None,
        signals_sent: Few::default(),
        deaths: None,
        cleanup_errors: Few::default(),
        count_kept: false,
        kept: 0,
        stopped: None,
        phase: Phase::START,
        require_crash_safety: settings.require_crash_safety,
    };
    if let Some(e) = life.root.exit_watch_error() {
        // No descriptor left to watch the root's exit with: undo the spawn
        // (the drop kills the tree through its identity, waits for it and
        // releases it) and say so, rather than poll every exit on a timer.
        drop(life);
        return Err(Error::spawn(plan.program.to_owned(), e));
    }
    // Registered after the spawn: a cancel that raced the spawn is seen by
    // the first loop iteration through `cancel.state()`.
    life.cancel.register(&life.poller.waker());
    Ok(Running {
        life: Some(Box::new(life)),
    })
}

/// The plan's own checks, before anything is made: not cancelled, the
/// working directory exists, an idle timeout has output to watch.
fn check(plan: &Plan<'_>) -> Result<(), Error> {
    if plan.cancel.is_cancelled() {
        return Err(Error::CancelledBeforeSpawn);
    }
    if let Some(dir) = plan.cwd {
        if !dir.is_dir() {
            return Err(Error::Spawn {
                kind: crate::SpawnErrorKind::Other,
                program: plan.program.to_owned(),
                source: io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("working directory {} does not exist", dir.display()),
                ),
            });
        }
    }
    if plan.settings.idle_timeout.is_some()
        && plan.pty.is_none()
        && !sees_output(&plan.stdout.0, &plan.stderr.0)
    {
        return Err(Error::InvalidInput(
            "an idle timeout needs output corral sees: capture or relay stdout or stderr \
             (output inherited, sent to a file or to null cannot restart it)"
                .into(),
        ));
    }
    Ok(())
}

/// Picks and builds the containment, and makes sure the crash-safety
/// keeper runs before the spawn when the run needs one.
fn choose_containment(plan: &Plan<'_>) -> Result<contain::Selected, Error> {
    let farewell = crate::spec::Farewell::of_settings(&plan.settings);
    let selected = contain::select(plan.containment, plan.limits, plan.tracer.clone(), farewell);
    // A cgroup that could not be made for want of a descriptor is not a
    // reason to fall back to a weaker tier, nor a containment failure:
    // say what it is.
    #[cfg(target_os = "linux")]
    if matches!(
        &selected,
        Err(Error::Containment { .. }) | Ok(contain::Selected { note: Some(_), .. })
    ) && sys::descriptors_exhausted()
    {
        return Err(Error::spawn(
            plan.program.to_owned(),
            io::Error::from_raw_os_error(24),
        ));
    }
    let selected = selected?;
    let mechanism = selected.tree.mechanism();
    // The keeper is started before the spawn, for every run that needs one:
    // started at the root's registration instead (after the spawn), it
    // would leave the first run of a process uncovered for as long as the
    // keeper takes to start (a clone and its first message: milliseconds
    // under load), and a host killed then would leave its tree behind
    // (`adversarial_crash::a_parent_survives_its_forks_death_process_group`).
    // Unrequired, a keeper that cannot start is only reported (the root's
    // registration tries again and says why).
    let ahead = sys::crash_safety_ahead(mechanism);
    if plan.settings.require_crash_safety {
        ahead.map_err(|why| {
            Error::containment(mechanism, format!("crash safety required: {why}"))
        })?;
    }
    Ok(selected)
}

/// The child's three streams and corral's ends of them (the plan's
/// streams are taken; bytes for stdin stay with the command, which may run
/// again).
fn wire(
    plan: &mut Plan<'_>,
    meter: Option<Arc<OutputMeter>>,
    waker: &Arc<dyn Wake>,
    io_err: &dyn Fn(io::Error) -> Error,
) -> Result<Wired, Error> {
    let settings = &plan.settings;
    stdio::wire(
        match &plan.stdin.0 {
            InputKind::Bytes(data) => InputKind::Bytes(data.clone()),
            _ => std::mem::take(plan.stdin).0,
        },
        std::mem::take(plan.stdout).0,
        std::mem::take(plan.stderr).0,
        plan.pty,
        StreamSettings {
            capture_limit: settings.capture_limit,
            line_limit: settings.line_limit,
            lines: plan.on_line.is_some(),
            meter,
        },
        waker,
        io_err,
    )
}

/// How long before a timer that may end a run's supervision the
/// synchronous driver wakes to warm the tree's paths
/// ([`Attached::warm_up`](crate::contain::Attached::warm_up)). After a
/// sleep of tens of milliseconds the first look at a cgroup costs 50-90 µs
/// on a loaded VM, against 5-10 µs a millisecond after the last one
/// (docs/BENCHMARKS.md, figure 2): that look is the one right before a
/// deadline's SIGKILL.
const WARM_AHEAD: Duration = Duration::from_millis(1);

/// What the decisions depend on, from the settings.
fn policy(settings: &Settings, start: Instant, stop_to_count: bool) -> Policy {
    let deadline = [
        settings.timeout.get().and_then(|t| start.checked_add(t)),
        settings.deadline,
    ]
    .into_iter()
    .flatten()
    .min();
    Policy {
        deadline,
        wait_delay: settings.wait_delay,
        grace: settings.grace,
        signal: settings.signal,
        silent: settings.silent_deadline,
        confirm_window: settings.confirm_window,
        confirm_limit: Span::new(
            settings
                .confirm_window
                .get()
                .saturating_mul(phase::CONFIRM_STRETCH)
                .max(phase::CONFIRM_LIMIT_MIN),
        ),
        leftovers: settings.leftovers,
        stop_to_count,
        idle_timeout: settings.idle_timeout,
        started: start,
    }
}

/// What a failed start of the root is reported as.
fn spawn_failed(e: SpawnError, plan: &Plan<'_>, tree: &dyn Containment) -> Error {
    match e {
        SpawnError::Contain(e) | SpawnError::Spawn(e) if crate::error::out_of_descriptors(&e) => {
            Error::spawn(plan.program.to_owned(), e)
        }
        SpawnError::Contain(e) => Error::containment_io(
            tree.mechanism(),
            "could not place the command in its containment",
            e,
        ),
        SpawnError::Spawn(e) => Error::spawn(plan.program.to_owned(), e),
    }
}

/// The containment takes hold of the started root's tree; a run that
/// requires crash safety and cannot have it is undone: SIGKILL to the tree
/// through its identity, then to the root, then the release. An attach
/// that fails hands back only what can be released: the root is killed
/// (it is unreaped, so no stranger can be hit) and the identity released,
/// never signalled.
fn attach(
    tree: Box<dyn Containment>,
    root: &mut Root,
    settings: &Settings,
) -> Result<(Box<dyn Attached>, CrashSafety), Error> {
    let mechanism = tree.mechanism();
    let mut tree = match tree.attach(root) {
        Ok(tree) => tree,
        Err(failed) => {
            let (e, released) = failed.release(root);
            let _ = released.outcome(false);
            return Err(Error::containment_io(
                mechanism,
                "could not take hold of the tree",
                e,
            ));
        }
    };
    let crash_safety = tree.crash_safety(root);
    let why = match (settings.require_crash_safety, crash_safety.note()) {
        (true, Some(why)) => why,
        _ => return Ok((tree, crash_safety)),
    };
    let failed = Error::containment(mechanism, format!("crash safety required: {why}"));
    let _ = tree.signal(Signal::KILL);
    root.kill();
    let _ = tree.release(root).outcome(false);
    Err(failed)
}
impl Life {
    /// See [`Running::start_now`].
    #[cfg(unix)]
    fn start_now(&mut self, arm: &Arm) {
        let now = Instant::now();
        self.spawn_time = Duration::ZERO.into();
        let meter = (arm.idle_timeout.is_some() || arm.output_limit.is_some()).then(|| {
            Arc::new(OutputMeter::new(
                arm.output_limit,
                arm.idle_timeout.is_some(),
                now,
            ))
        });
        for s in self.streams.iter_mut().flatten() {
            s.rearm(arm.capture_limit, meter.clone());
        }
        self.meter = meter;
        // The limits as `policy` makes them from the settings, from now.
        self.policy.deadline = arm.timeout.and_then(|t| now.checked_add(t));
        self.policy.idle_timeout = arm.idle_timeout.into();
        if let Some(d) = arm.wait_delay {
            self.policy.wait_delay = d.into();
        }
        self.policy.started = now;
        if let Some(t) = &arm.cancel {
            self.cancel = t.clone();
            self.cancel.register(&self.poller.waker());
        }
    }

    /// The synchronous driver: sleep in the platform poller between steps.
    /// `watch`: the caller's descriptor, whose readiness calls its closure
    /// here, on this thread, between two steps.
    fn run(mut self: Box<Self>, mut watch: Option<Watch<'_>>) -> Report {
        while !self.advance() {
            let now = Instant::now();
            let timeout = self.next_wake(now);
            // Up to a timer that may end the run's supervision (the
            // deadline, the idle timeout), the wait stops `WARM_AHEAD`
            // short of it once, to warm the tree's paths (see
            // `Attached::warm_up`).
            let warm_at = timeout
                .filter(|&t| t > 3 * WARM_AHEAD && !self.phase.is_terminating())
                .filter(|_| self.tree.as_deref().is_some_and(|t| t.warms_up()))
                .map(|t| now + t - WARM_AHEAD);
            let timeout = warm_at.map_or(timeout, |at| Some(at - now));
            // The last leg to such a timer, after the warm-up: woken at it.
            #[cfg(unix)]
            let _slack = (warm_at.is_none()
                && timeout.is_some_and(|t| t <= 3 * WARM_AHEAD)
                && !self.phase.is_terminating()
                && self.tree.as_deref().is_some_and(|t| t.warms_up()))
            .then(sys::TightSlack::new);
            #[allow(unused_mut)] // the watch is added on Unix only
            let mut interest = interest(
                &self.phase,
                &self.streams,
                &self.stdin,
                self.tree.as_deref(),
            );
            #[cfg(unix)]
            {
                interest.watch = watch.as_ref().map(|w| w.fd);
            }
            match self.poller.wait(&self.root, interest, timeout) {
                Ok(ready) => {
                    if ready.stdin_closed {
                        self.stdin_closed();
                    } else if ready.stdin_writable {
                        self.feed_stdin();
                    }
                    if ready.tree_event {
                        self.tree_event();
                    }
                    if let (true, Some(w)) = (ready.watched, watch.as_mut()) {
                        (w.on_ready)();
                    }
                    if ready.watch_gone {
                        watch = None;
                    }
                    if warm_at.is_some_and(|at| Instant::now() >= at) {
                        if let Some(t) = self.tree.as_deref_mut() {
                            t.warm_up();
                        }
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
        self.step(false).unwrap_or(false)
    }

    /// [`advance`](Self::advance) for the async driver: `None` when the
    /// step waits for a look at the tree shared with other runs
    /// ([`Attached::look_ahead`]); the run's waker is woken when it is
    /// there, and only that wake-up needs waiting for.
    #[cfg(tokio_unix)]
    pub(crate) fn advance_looking_ahead(&mut self) -> Option<bool> {
        self.step(true)
    }

    fn step(&mut self, look_ahead: bool) -> Option<bool> {
        if self.phase.is_over() {
            return Some(true);
        }
        // Signals asked for by the owner (`AsyncRunning::signal`), sent to
        // the tree while the identity is held.
        #[cfg(tokio_unix)]
        for sig in self.poller.take_signals() {
            // The identity is held: the run is not over, nothing is released.
            if let Err(e) = self.signal_tree(sig) {
                self.note_cleanup(CleanupError::signal(e));
            }
        }
        let now = Instant::now();
        self.pump_outputs();
        self.observe_root(now);
        let open = self.outputs_open();
        if open == 0 && self.output_closed_at.is_none() && self.streams.iter().any(Option::is_some)
        {
            self.output_closed_at = Some(now);
        }
        let seen = Observed {
            root: self.root_status,
            root_exit_at: self.root_exit_at,
            open,
            cancel: self.cancel.state(),
            expired: self.cancel.expired(),
            last_output: self.last_output(),
            over_limit: self.meter.as_ref().is_some_and(|m| m.is_over()),
        };
        // The decision will look at the tree (the root has exited; a
        // clean exit, or a termination's check is due): a tier that
        // shares its look with other runs asks for it first.
        let looked = look_ahead && self.phase.looks_at_tree(&seen, now);
        if looked {
            if let Some(t) = self.tree.as_deref_mut() {
                if t.look_ahead(&self.poller.waker()) {
                    return None;
                }
            }
        }
        let policy = self.policy;
        let step = phase::decide(self.phase, &seen, self, now, &policy);
        self.apply(step);
        if looked {
            if let Some(t) = self.tree.as_deref_mut() {
                t.forget_look();
            }
        }
        Some(self.phase.is_over())
    }

    /// Carries out a decision: the actions in order, then the new phase.
    fn apply(&mut self, (next, actions): (Phase, Vec<Action>)) {
        for action in actions {
            match action {
                Action::Signal(sig) => self.send(sig),
                Action::CountKept => self.count_kept = true,
                Action::StopAndCount => self.stop_and_count(),
                Action::KillStopped(pids) => {
                    // The identity is held: the run is not released yet.
                    let via = self.mechanism;
                    if let Err(e) =
                        self.stopped
                            .get_or_insert_with(Box::default)
                            .kill(&pids, &self.tracer, via)
                    {
                        self.note_cleanup(CleanupError::signal(e));
                    }
                }
                Action::Survivors(pids) => self.note_cleanup(CleanupError::Survivors { pids }),
            }
        }
        self.phase = next;
    }

    /// The child closed its stdin: writing now would raise SIGPIPE in a host
    /// that does not ignore it, so stop feeding.
    pub(crate) fn stdin_closed(&mut self) {
        self.stdin = None;
    }

    /// The synchronous driver to the end (used when an async run is dropped
    /// outside a runtime).
    #[cfg(tokio_unix)]
    pub(crate) fn run_to_end(self: Box<Self>) -> Report {
        self.run(None)
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
    #[cfg(tokio_unix)]
    pub(crate) fn kill_now(&mut self) {
        if self.phase.is_over() {
            return;
        }
        let policy = self.policy;
        let step = phase::kill_now(self.phase, self, Instant::now(), &policy);
        self.apply(step);
        self.cancel.cancel();
        let _ = self.tree_members();
    }

    /// One zero-timeout look at every descriptor, applied like the
    /// synchronous driver applies a wait. Returns whether anything was
    /// ready (then step again before sleeping).
    #[cfg(tokio_unix)]
    pub(crate) fn poll_now(&mut self) -> bool {
        let interest = interest(
            &self.phase,
            &self.streams,
            &self.stdin,
            self.tree.as_deref(),
        );
        match self.poller.wait(&self.root, interest, Some(Duration::ZERO)) {
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

    /// For the async driver: what its wakers fire (no descriptor is
    /// involved; see `sys::WakeCell::poll_woken`).
    #[cfg(tokio_unix)]
    pub(crate) fn wake_cell(&self) -> &sys::WakeCell {
        self.poller.cell_ref()
    }

    // The descriptors an async driver registers with its reactor, shared
    // (not duplicated): see `sys::SharedFd`.

    #[cfg(tokio_unix)]
    pub(crate) fn root_fd(&self) -> Option<&sys::SharedFd> {
        self.root.exit_fd()
    }

    #[cfg(tokio_unix)]
    pub(crate) fn output_fd(&self, i: usize) -> Option<&sys::SharedFd> {
        self.streams[i]
            .as_ref()?
            .pipe
            .as_ref()
            .map(sys::PipeEnd::shared)
    }

    #[cfg(tokio_unix)]
    pub(crate) fn stdin_fd(&self) -> Option<&sys::SharedFd> {
        self.stdin.as_ref().map(|f| f.pipe.shared())
    }

    /// The owner's signal, to the whole tree through the held identity; an
    /// error once the run is over (the identity may be released).
    pub(crate) fn signal_tree(&mut self, sig: Signal) -> io::Result<()> {
        if self.phase.is_over() {
            return Err(io::Error::other("the run is over"));
        }
        self.held()?.signal(sig)
    }

    /// The queue through which another driver's owner asks for signals
    /// (asking wakes the run).
    #[cfg(tokio_unix)]
    pub(crate) fn signal_requests(&self) -> SignalRequests {
        SignalRequests(self.poller.cell())
    }

    /// The containment's descriptor fired: check the tree now.
    pub(crate) fn tree_event(&mut self) {
        self.phase.check_now(Instant::now());
    }

    /// The driver could not wait: do not spin, do not hang. Terminate the
    /// tree and report the failure.
    pub(crate) fn wait_failed(&mut self, e: io::Error) {
        self.note_cleanup(CleanupError::wait(e));
        let policy = self.policy;
        let step = phase::wait_failed(self.phase, self, Instant::now(), &policy);
        self.apply(step);
    }

    /// Builds the report once [`advance`](Self::advance) said the run is
    /// over: final drain, release.
    pub(crate) fn into_report(self: Box<Self>) -> Report {
        let outcome = match self.phase.reason() {
            Some(Reason::TimedOut | Reason::Idle) => Outcome::TimedOut,
            Some(Reason::OutputLimit) => Outcome::OutputLimit,
            Some(Reason::Cancelled) => Outcome::Cancelled,
            Some(Reason::OutputHeld) => Outcome::OutputHeld,
            Some(Reason::Leftovers) | None => match self.root_status {
                Some(RootStatus::Exited(c)) => Outcome::Exited(c),
                Some(RootStatus::Signaled(s)) => Outcome::Signaled(s),
                // The loop only ends without a termination once the root exited.
                None => Outcome::Cancelled,
            },
        };
        let timeout_kind = match self.phase.reason() {
            Some(Reason::TimedOut) => Some(TimeoutKind::Deadline),
            Some(Reason::Idle) => Some(TimeoutKind::Idle),
            _ => None,
        };
        let mut report = self.finish(outcome);
        report.timeout_kind = timeout_kind;
        report
    }

    /// When output was last seen (with an idle timeout).
    fn last_output(&self) -> Option<Instant> {
        self.meter.as_ref().map(|m| m.last_output())
    }

    /// A termination can end (the tree confirmed dead) before a step saw
    /// the end of file its death caused: once every writer is gone, the
    /// output closed now, whether or not corral read the last bytes yet.
    /// A member killed a moment ago may still be closing its descriptors
    /// (the tiers that list members through `/proc` do not count one
    /// that is exiting): after a termination, its writers get
    /// [`CLOSE_AFTER_KILL`] to go. A holder outside the tree that stays
    /// (a setsid escaper of a process group) leaves it `None`.
    fn note_output_closed(&mut self) {
        if self.output_closed_at.is_some() || self.streams.iter().all(Option::is_none) {
            return;
        }
        let closed = |streams: &Streams| {
            streams
                .iter()
                .flatten()
                .all(|s| !s.is_open() || s.writers_gone())
        };
        let until = later(Instant::now(), CLOSE_AFTER_KILL);
        loop {
            if closed(&self.streams) {
                self.output_closed_at = Some(Instant::now());
                return;
            }
            if self.signals_sent.as_slice().is_empty() || Instant::now() >= until {
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// The attached tree, while it is held.
    fn held(&mut self) -> io::Result<&mut dyn Attached> {
        match self.tree.as_deref_mut() {
            Some(tree) => Ok(tree),
            None => Err(io::Error::other("the run is over: its tree was released")),
        }
    }

    /// The inodes of the output pipes that still have a writer (Linux).
    #[cfg(target_os = "linux")]
    fn held_inodes(&self) -> Vec<u64> {
        self.streams
            .iter()
            .flatten()
            .filter(|s| s.is_open() && !s.writers_gone())
            .filter_map(|s| s.inode())
            .collect()
    }

    /// Stops the tree and looks at it, right before its SIGKILL: every
    /// member the kill will end is watched (`deaths`) while it can neither
    /// die of it nor be reaped. A stop that failed is not reported on its
    /// own (the members are still looked at): the SIGKILL that follows
    /// goes through the same identity and reports its failure.
    ///
    /// A root not seen exited may still finish an exit it had begun before
    /// the stop, orphaning a group the stop holds: the kernel's SIGHUP to
    /// the members listed here is then corral's doing (`deaths`).
    fn stop_and_count(&mut self) {
        let root_alive = self.root_status.is_none();
        let pid = self.pid;
        let mut looked: Vec<u32> = Vec::new();
        if root_alive {
            if let Ok(t) = self.held() {
                looked = t.look_before_stop();
            }
            looked.retain(|&p| p != pid);
            let deaths = self.deaths.get_or_insert_with(Box::default);
            deaths.watch_live(looked.iter().copied());
        }
        let stopped = self.held().and_then(|t| t.stop_to_count()).is_ok();
        let members = self.tree_members();
        if stopped && root_alive {
            looked.extend(members.into_iter().filter(|&p| p != pid));
            let deaths = self.deaths.get_or_insert_with(Box::default);
            deaths.stopped_look(&looked);
        }
    }

    fn send(&mut self, sig: Signal) {
        // A termination's first signal: from here on, if this process
        // dies, the tree (which has had its first signal, or SIGKILL) is
        // SIGKILLed at once, not given the farewell again (told before the
        // signal).
        if self.signals_sent.as_slice().is_empty() {
            self.root.terminating();
            if let Some(t) = self.tree.as_deref_mut() {
                t.terminating();
            }
        }
        self.signals_sent.vec_mut().push(sig);
        if let Err(e) = self.held().and_then(|t| t.signal(sig)) {
            self.note_cleanup(CleanupError::signal(e));
        }
    }

    /// Live members other than the root, remembered for the killed count.
    fn tree_members(&mut self) -> Vec<u32> {
        // Asked before the listing: a stand-in that dies in between is not
        // listed (members are live processes), and one that lives is
        // filtered out, never counted as a member that corral killed.
        let stand_in = self.tree.as_ref().and_then(|t| t.stand_in());
        match self.held().and_then(|t| t.members()) {
            Ok(m) => {
                let pid = self.pid;
                let listed = stand_in.filter(|c| m.contains(c));
                let others: Vec<u32> = m
                    .into_iter()
                    .filter(|&p| p != pid && Some(p) != stand_in)
                    .collect();
                self.deaths
                    .get_or_insert_with(Box::default)
                    .watch(others.iter().copied());
                let mut all = others;
                if self.root_status.is_none() {
                    // The root is alive (or dying) and still a member.
                    all.push(pid);
                } else if let Some(c) = listed {
                    // The root's exit was seen, but what it stood for (the
                    // command of a PID namespace whose init was killed)
                    // still lives: a survivor, by its own pid.
                    all.push(c);
                }
                all
            }
            Err(e) => {
                self.note_cleanup(CleanupError::members(e));
                Vec::new()
            }
        }
    }

    fn note_cleanup(&mut self, e: CleanupError) {
        crate::report::note_once(self.cleanup_errors.vec_mut(), e);
    }

    fn observe_root(&mut self, now: Instant) {
        if self.peek_root(now) {
            // Output written just before the exit is usually already in
            // the pipe: take it now so a prompt EOF is seen at once.
            self.pump_outputs();
        }
    }

    /// Looks at the root (reads no output); true when its exit was seen
    /// just now.
    fn peek_root(&mut self, now: Instant) -> bool {
        if self.root_status.is_some() {
            return false;
        }
        match self.root.peek_exit() {
            Ok(Some(st)) => {
                self.root_status = Some(st);
                self.root_exit_at = Some(now);
                // A termination waits for the root too: check at once.
                self.phase.check_now(now);
                self.tracer.record(OsOp::RootExited { pid: self.pid });
                true
            }
            Ok(None) => false,
            Err(e) => {
                self.note_cleanup(CleanupError::wait(e));
                false
            }
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
        let at = self
            .phase
            .next_timer(self.root_exit_at, self.last_output(), &self.policy);
        // A resting stream is read again when its rest ends.
        let at = self
            .streams
            .iter()
            .flatten()
            .filter_map(|s| s.rest_until)
            .chain(at)
            .min();
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
        if let Some(s) = self.streams[i].as_mut() {
            s.pump(self.on_line.as_ref(), max_reads);
        }
    }

    fn feed_stdin(&mut self) {
        if self.stdin.as_mut().is_some_and(|f| f.feed()) {
            self.stdin = None; // closing our end gives the child EOF
        }
    }

    /// Final drain, line flush, relay flush, release; builds the report.
    fn finish(mut self: Box<Self>, outcome: Outcome) -> Report {
        self.stdin = None;
        // Keep what the tree wrote before it died; a holder outside the tree
        // cannot keep us here (bounded number of reads, then close).
        for i in 0..2 {
            self.pump_stream(i, 64);
        }
        self.note_output_closed();
        for s in self.streams.iter_mut().flatten() {
            s.close(self.on_line.as_ref());
        }
        let flush_until = later(
            Instant::now(),
            self.policy.wait_delay.get().max(Duration::from_millis(100)),
        );
        for s in self.streams.iter_mut().flatten() {
            s.finish_relay(flush_until);
        }
        // Crash safety held at the start may have been lost since (the
        // keeper died): the report says so, and a run that required it
        // did not end cleanly.
        if self.crash_safety.is_held() {
            let now = self.tree.as_ref().map(|t| t.crash_safety(&self.root));
            if let Some(CrashSafety::Lost(why)) = now {
                if self.require_crash_safety {
                    self.note_cleanup(CleanupError::CrashSafetyLost { why: why.clone() });
                }
                self.crash_safety = CrashSafety::Lost(why).into();
            }
        }
        let (usage, limits_hit) = match self.tree.as_ref().and_then(|t| t.usage()) {
            Some((u, hits)) => (Some(u), hits),
            None => (None, Vec::new()),
        };
        // Only now: a line callback that panics in the flush above leaves
        // the release to `Drop`.
        if let Some(tree) = self.tree.take() {
            let (result, kept) = tree.release(&mut self.root).outcome(self.count_kept);
            match kept {
                Some(Ok(n)) => self.kept = u32::try_from(n).unwrap_or(u32::MAX),
                Some(Err(e)) => self.note_cleanup(CleanupError::members(e)),
                None => {}
            }
            if let Err(e) = result {
                self.note_cleanup(CleanupError::release(e));
            }
        }
        // The stopped leftovers killed by the keep rule died of a SIGKILL
        // not in `signals_sent` (sent to them, not to the tree), so the
        // deaths' count leaves them out, unless the owner also sent the
        // tree SIGKILL (then it counts them already).
        let killed = self
            .deaths
            .as_ref()
            .map_or(0, |d| d.killed(self.signals_sent.as_slice()))
            + if self.signals_sent.as_slice().contains(&Signal::KILL) {
                0
            } else {
                self.stopped.as_ref().map_or(0, |s| s.dead())
            };
        let at = |i: Option<Instant>| i.map(|t| t.saturating_duration_since(self.policy.started));
        let [out, err] = std::mem::take(&mut self.streams);
        Report {
            outcome,
            timeout_kind: None,
            root: self.root_status,
            pid: self.pid,
            containment: self.mechanism,
            containment_note: self.containment_note.take().map(String::from),
            crash_safety: self.crash_safety.take(),
            leftovers: Leftovers {
                killed,
                kept: self.kept as usize,
            },
            signals_sent: self.signals_sent.take(),
            cleanup_errors: self.cleanup_errors.take(),
            stdout: out.map(|s| s.capture).unwrap_or_default(),
            stderr: err.map(|s| s.capture).unwrap_or_default(),
            timings: Timings {
                spawn: self.spawn_time.get(),
                root_exit: at(self.root_exit_at),
                output_closed: at(self.output_closed_at),
                cleanup_done: self.policy.started.elapsed(),
            },
            usage,
            limits_hit,
            sandbox: self.sandbox.take().map(|b| {
                let (mut r, finish) = *b;
                finish(&mut r);
                r
            }),
        }
    }
}

/// The decision's questions, answered with the real tree and pipes.
impl Probe for Life {
    fn members(&mut self) -> Vec<u32> {
        self.tree_members()
    }

    /// Whether some captured stream still has a writer.
    fn output_held(&mut self) -> bool {
        self.streams
            .iter()
            .flatten()
            .any(|s| s.is_open() && !s.writers_gone())
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

    /// Whether a holder outside the tree is a fork of this process that
    /// has not exec'd yet (it lets go by itself). Where holders cannot be
    /// seen (not Linux), any holder outside the tree might be one.
    fn host_fork_holds_output(&mut self) -> bool {
        #[cfg(target_os = "linux")]
        {
            sys::linux_proc::child_holds_pipe(&self.held_inodes())
        }
        #[cfg(not(target_os = "linux"))]
        {
            true
        }
    }

    /// The live members other than the root, as the keep rule sees them
    /// (Linux: `/proc`; elsewhere all running).
    fn leftovers(&mut self) -> Vec<Leftover> {
        let (pid, stand_in) = (self.pid, self.tree.as_ref().and_then(|t| t.stand_in()));
        match self.held().and_then(|t| t.leftovers()) {
            Ok(m) => {
                let members: Vec<u32> = m
                    .into_iter()
                    .filter(|&p| p != pid && Some(p) != stand_in)
                    .collect();
                self.stopped.get_or_insert_with(Box::default).look(&members)
            }
            Err(e) => {
                self.note_cleanup(CleanupError::members(e));
                Vec::new()
            }
        }
    }

    /// Whether every member is visibly dying (Linux: `/proc`; elsewhere
    /// nothing says so, and only a shrinking tree stretches the window).
    fn all_dying(&mut self, members: &[u32]) -> bool {
        #[cfg(target_os = "linux")]
        {
            members.iter().all(|&pid| sys::linux_proc::is_dying(pid))
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = members;
            false
        }
    }
}

/// Starts the root where the containment places it: a containment that
/// starts it itself (the PID-namespace init), or `sys::spawn` with the
/// placement the containment computed.
fn start_root(spec: SpawnSpec<'_>, tree: &mut dyn Containment) -> Result<Root, SpawnError> {
    // From before the fork until the root is known as one (see
    // `sys::roots`): no zombie child is ever taken for a stray orphan
    // while it is still becoming a root.
    #[cfg(target_os = "linux")]
    let _spawning = sys::roots::spawning();
    #[cfg(target_os = "linux")]
    if let Some(root) = tree.spawn_root(&spec) {
        return root;
    }
    let placement = tree.placement().map_err(SpawnError::Contain)?;
    sys::spawn(spec, placement)
}

/// Whether corral sees some of the output (captures or relays a stream),
/// so that an idle timeout can be restarted by it.
fn sees_output(stdout: &crate::spec::OutputKind, stderr: &crate::spec::OutputKind) -> bool {
    use crate::spec::OutputKind as K;
    let seen = |k: &K| matches!(k, K::Capture | K::Relay(_) | K::RelayFile(_));
    seen(stdout) || seen(stderr)
}

/// What the next wait sleeps on: the captured pipes worth reading, stdin
/// while bytes are left, and the containment's descriptor while a
/// termination waits for the tree to empty.
fn interest<'a>(
    phase: &Phase,
    streams: &'a Streams,
    stdin: &'a Option<Box<StdinFeed>>,
    tree: Option<&'a dyn Attached>,
) -> Interest<'a> {
    #[cfg(windows)]
    let _ = (phase, tree);
    Interest {
        outputs: watched_outputs(streams),
        stdin: stdin.as_ref().map(|f| &f.pipe),
        #[cfg(unix)]
        tree: phase
            .is_terminating()
            .then(|| tree.and_then(|t| t.wake_fd()))
            .flatten(),
        #[cfg(unix)]
        watch: None,
    }
}

impl Drop for Life {
    /// A lifecycle dropped before it finished (a panic in a line callback or
    /// writer unwinding through `wait`) still leaves nothing behind: SIGKILL
    /// to the tree through its identity, then the normal path's confirm
    /// rule (`phase::confirm`: the window stretches while the tree shrinks
    /// or every member left is visibly dying, never past the hard limit),
    /// and the release (which reaps the root). No user code runs here: the
    /// line callback is dropped and no output is read.
    fn drop(&mut self) {
        if self.tree.is_none() {
            return; // released by `finish`
        }
        self.on_line = None;
        let policy = self.policy;
        if !self.phase.is_over() {
            let step = phase::kill_now(self.phase, self, Instant::now(), &policy);
            self.apply(step);
        }
        while !self.phase.is_over() {
            let now = Instant::now();
            if let Some(at) = self.phase.next_timer(self.root_exit_at, None, &policy) {
                std::thread::sleep(at.saturating_duration_since(now));
            }
            let now = Instant::now();
            // Nothing polls the root's pidfd here: ask the kernel.
            self.root.look_for_exit();
            self.peek_root(now);
            let seen = Observed {
                root: self.root_status,
                root_exit_at: self.root_exit_at,
                open: 0,
                cancel: Some(Some(Signal::KILL)),
                expired: false,
                last_output: None,
                over_limit: false,
            };
            let step = phase::decide(self.phase, &seen, self, now, &policy);
            self.apply(step);
        }
        if let Some(tree) = self.tree.take() {
            let _ = tree.release(&mut self.root).outcome(false);
        }
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::attach;
    use crate::contain::fake::{root, Call, Fake, Log};
    use crate::report::CrashSafety;
    use crate::spec::Settings;
    use crate::{Error, RootStatus, Signal};

    /// `attach` with the fake mechanism on a live root: whether it held
    /// the tree, and what the tree was asked (a tree that is held is then
    /// released here, after the root is killed).
    fn attach_fake(
        attach_fails: bool,
        crash_safety: CrashSafety,
        require: bool,
    ) -> (bool, Vec<Call>) {
        let log = Log::default();
        let tree = Box::new(Fake {
            log: log.clone(),
            attach_fails,
            crash_safety,
        });
        let settings = Settings {
            require_crash_safety: require,
            ..Settings::default()
        };
        let mut root = root();
        let held = match attach(tree, &mut root, &settings) {
            Ok((tree, _)) => {
                assert!(log.lock().unwrap().is_empty(), "held: nothing asked yet");
                root.kill();
                let _ = tree.release(&mut root).outcome(false);
                true
            }
            Err(e) => {
                assert!(matches!(e, Error::Containment { .. }), "{e:?}");
                false
            }
        };
        let calls = log.lock().unwrap().clone();
        (held, calls)
    }

    /// A run undone at its attach is released exactly once, after its root
    /// was killed (the release finds it dead, unreaped); the tree is sent
    /// SIGKILL first when it was held (crash safety required and lost),
    /// and never signalled when the attach failed.
    #[test]
    fn an_undone_attach_releases_the_tree_once_after_the_root_died() {
        let lost = || CrashSafety::Lost("test".into());
        let killed = Call::Release(Some(RootStatus::Signaled(Signal::KILL)));
        let cases = [
            // (attach fails, crash safety, required, held, calls)
            (false, lost(), false, true, vec![killed.clone()]),
            (false, CrashSafety::Held, true, true, vec![killed.clone()]),
            (
                false,
                lost(),
                true,
                false,
                vec![Call::Signal(Signal::KILL), killed.clone()],
            ),
            (true, CrashSafety::Held, false, false, vec![killed.clone()]),
        ];
        for (fails, safety, require, held, calls) in cases {
            let what = format!("attach fails {fails}, {safety:?}, required {require}");
            assert_eq!(attach_fake(fails, safety, require), (held, calls), "{what}");
        }
    }
}
/// Figure 5 holds 10,000 runs at once: each run's state stays small. What
/// only some runs use (captured streams, the keep rule's state, the deaths
/// watch, the stdin feed, the sandbox's report) is boxed when it is made,
/// so a run whose output goes elsewhere does not carry it inline.
#[cfg(all(test, target_os = "linux", target_pointer_width = "64"))]
mod size {
    #[test]
    fn a_runs_state_stays_small() {
        let life = std::mem::size_of::<super::Life>();
        // Measured: 656 (was 1600; 672 with a copy of the start, which
        // the policy holds).
        assert!(life <= 672, "Life is {life} bytes");
    }
}

/// What a live run keeps, in bytes (figure 5, docs/BENCHMARKS.md): each
/// byte is 10 KB at 10,000 runs. Bounds, not exact sizes (a newer
/// compiler may lay the types out tighter); a type that grows past its
/// bound fails here, and the figure's numbers must be measured again.
#[cfg(all(test, target_os = "linux", target_pointer_width = "64"))]
mod sizes {
    use std::mem::size_of;

    #[test]
    fn a_live_runs_state_stays_within_its_measured_size() {
        assert!(
            size_of::<super::Life>() <= 520,
            "{}",
            size_of::<super::Life>()
        );
        assert!(size_of::<crate::sys::Root>() <= 88);
        assert!(size_of::<super::phase::Phase>() <= 88);
        assert!(size_of::<super::phase::Policy>() <= 104);
        assert!(size_of::<crate::spec::Settings>() <= 120);
        assert_eq!(size_of::<crate::spec::Span>(), 12);
        assert_eq!(size_of::<crate::spec::MaybeSpan>(), 12);
    }
}
