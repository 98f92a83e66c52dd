//! What happened: the typed outcome of one run and everything measured on
//! the way.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use crate::capture::Captured;
use crate::Signal;

/// How the root process itself ended, as the OS reported it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum RootStatus {
    /// It exited with this code.
    Exited(i32),
    /// It was ended by this signal. On Windows: corral's own job termination
    /// is reported as SIGKILL and STATUS_CONTROL_C_EXIT as SIGINT; every
    /// other ending is an exit code.
    Signaled(Signal),
}

impl RootStatus {
    /// The exit code, when the root exited.
    pub fn code(self) -> Option<i32> {
        match self {
            RootStatus::Exited(c) => Some(c),
            RootStatus::Signaled(_) => None,
        }
    }

    /// The signal, when the root was ended by one.
    pub fn signal(self) -> Option<Signal> {
        match self {
            RootStatus::Signaled(s) => Some(s),
            RootStatus::Exited(_) => None,
        }
    }
}

/// The one thing that happened to a run. Exactly one of these holds.
///
/// Only [`Outcome::Exited`] is an ordinary result, and only when the
/// [`Report`]'s [`cleanup_errors`](Report::cleanup_errors) is empty; use
/// [`Report::exit_code`] to ask that question.
///
/// With the `serde` feature it serialises as its [name](Outcome::name)
/// alone, or with the code or signal number for `exited` and `signaled`:
/// `"timed_out"`, `{"exited": 3}`, `{"signaled": 9}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum Outcome {
    /// The root exited with this code by itself (corral sent the root no
    /// signal before it exited) and its output was drained. Leftovers may
    /// have been signalled afterwards by the leftovers policy
    /// ([`Report::signals_sent`]).
    Exited(i32),
    /// The root was ended by a signal that corral did not send.
    Signaled(#[cfg_attr(feature = "serde", serde(with = "crate::signal::as_number"))] Signal),
    /// The deadline passed, or the idle timeout (no output for that long):
    /// the tree was terminated. [`Report::timeout_kind`] says which.
    TimedOut,
    /// The run was cancelled; the tree was terminated.
    Cancelled,
    /// The root exited but its captured output was still held open by a
    /// descendant when the wait delay ended; the holders were killed. The
    /// root's own status is in [`Report::root`].
    OutputHeld,
    /// The program wrote more than the output limit
    /// ([`Command::output_limit`](crate::Command::output_limit)) to its
    /// captured or relayed streams; the tree was terminated.
    OutputLimit,
}

/// Which limit ended a [`Outcome::TimedOut`] run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub enum TimeoutKind {
    /// The deadline ([`Command::timeout`](crate::Command::timeout) or
    /// [`Command::deadline`](crate::Command::deadline)).
    Deadline,
    /// No output for the idle timeout ([`Command::idle_timeout`](crate::Command::idle_timeout)).
    Idle,
}

impl TimeoutKind {
    /// The name used in JSON reports: `deadline` or `idle`.
    pub fn name(self) -> &'static str {
        match self {
            TimeoutKind::Deadline => "deadline",
            TimeoutKind::Idle => "idle",
        }
    }
}

impl Outcome {
    /// The name used in JSON reports (`exited`, `signaled`, `timed_out`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Exited(_) => "exited",
            Outcome::Signaled(_) => "signaled",
            Outcome::TimedOut => "timed_out",
            Outcome::Cancelled => "cancelled",
            Outcome::OutputHeld => "output_held",
            Outcome::OutputLimit => "output_limit",
        }
    }
}

/// Why the lifecycle could not end cleanly after the command ran.
///
/// The OS error is kept as the [`source`](std::error::Error::source) (shared,
/// so that a [`Report`] stays `Clone`); the `Display` form names the step and
/// includes the OS error, so one line says everything.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum CleanupError {
    /// Processes of the tree were still alive when the confirm window after
    /// the last SIGKILL ended (for example in uninterruptible sleep).
    #[error("{} process(es) of the tree survived SIGKILL past the confirm window: {pids:?}", pids.len())]
    Survivors {
        /// Their process ids, as seen last.
        pids: Vec<u32>,
    },
    /// Signalling the tree failed with an error other than "already gone".
    #[error("could not signal the process tree: {source}")]
    Signal {
        /// The OS error.
        #[source]
        source: Arc<io::Error>,
    },
    /// Listing the tree's members (to confirm its death, or to count the
    /// leftovers the policy keeps) failed.
    #[error("could not list the process tree's members: {source}")]
    Members {
        /// The OS error.
        #[source]
        source: Arc<io::Error>,
    },
    /// Waiting for the run's events (the root's exit, output, the tree)
    /// failed: the tree was terminated rather than left unsupervised.
    #[error("waiting on the run failed: {source}")]
    Wait {
        /// The OS error.
        #[source]
        source: Arc<io::Error>,
    },
    /// Releasing the tree's identity (reaping the root, removing a cgroup,
    /// closing a job) failed.
    #[error("could not release the process tree: {source}")]
    Release {
        /// The OS error.
        #[source]
        source: Arc<io::Error>,
    },
    /// Crash safety was required
    /// ([`Command::require_crash_safety`](crate::Command::require_crash_safety))
    /// and held at the start, but was lost during the run (the keeper
    /// died): for part of the run the tree would have outlived corral.
    #[error("crash safety was required but lost during the run: {why}")]
    CrashSafetyLost {
        /// What happened (as in [`CrashSafety::Lost`]).
        why: String,
    },
}

/// A lifecycle step after the command ran that can fail: what a
/// [`CleanupError`] names ([`CleanupError::step`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub enum CleanupStep {
    /// Confirming the tree's death after the last SIGKILL
    /// ([`CleanupError::Survivors`]).
    ConfirmDeath,
    /// Signalling the tree ([`CleanupError::Signal`]).
    Signal,
    /// Listing the tree's members ([`CleanupError::Members`]).
    Members,
    /// Waiting for the run's events ([`CleanupError::Wait`]).
    Wait,
    /// Releasing the tree's identity ([`CleanupError::Release`]).
    Release,
    /// Keeping the required crash safety ([`CleanupError::CrashSafetyLost`]).
    CrashSafety,
}

impl CleanupStep {
    /// The name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            CleanupStep::ConfirmDeath => "confirm_death",
            CleanupStep::Signal => "signal",
            CleanupStep::Members => "members",
            CleanupStep::Wait => "wait",
            CleanupStep::Release => "release",
            CleanupStep::CrashSafety => "crash_safety",
        }
    }
}

impl std::fmt::Display for CleanupStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl CleanupError {
    /// The step that failed.
    pub fn step(&self) -> CleanupStep {
        match self {
            CleanupError::Survivors { .. } => CleanupStep::ConfirmDeath,
            CleanupError::Signal { .. } => CleanupStep::Signal,
            CleanupError::Members { .. } => CleanupStep::Members,
            CleanupError::Wait { .. } => CleanupStep::Wait,
            CleanupError::Release { .. } => CleanupStep::Release,
            CleanupError::CrashSafetyLost { .. } => CleanupStep::CrashSafety,
        }
    }

    /// The OS error behind this failure, if there is one (every kind but
    /// [`Survivors`](CleanupError::Survivors) and
    /// [`CrashSafetyLost`](CleanupError::CrashSafetyLost)).
    pub fn io_error(&self) -> Option<&io::Error> {
        match self {
            CleanupError::Survivors { .. } | CleanupError::CrashSafetyLost { .. } => None,
            CleanupError::Signal { source }
            | CleanupError::Members { source }
            | CleanupError::Wait { source }
            | CleanupError::Release { source } => Some(source),
        }
    }

    /// The processes that survived, for [`Survivors`](CleanupError::Survivors)
    /// (empty otherwise).
    pub fn survivors(&self) -> &[u32] {
        match self {
            CleanupError::Survivors { pids } => pids,
            _ => &[],
        }
    }

    pub(crate) fn signal(e: io::Error) -> CleanupError {
        CleanupError::Signal {
            source: Arc::new(e),
        }
    }

    pub(crate) fn members(e: io::Error) -> CleanupError {
        CleanupError::Members {
            source: Arc::new(e),
        }
    }

    pub(crate) fn wait(e: io::Error) -> CleanupError {
        CleanupError::Wait {
            source: Arc::new(e),
        }
    }

    pub(crate) fn release(e: io::Error) -> CleanupError {
        CleanupError::Release {
            source: Arc::new(e),
        }
    }
}

/// Durations since the run began (just before the spawn).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Timings {
    /// How long the spawn itself took.
    pub spawn: Duration,
    /// When the root's exit was observed, if it was.
    pub root_exit: Option<Duration>,
    /// When every captured stream reached end of file, if they did.
    pub output_closed: Option<Duration>,
    /// When cleanup (signals, death confirmed, identity released) was done.
    pub cleanup_done: Duration,
}

/// Counts of processes left in the tree when the root had gone.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leftovers {
    /// Processes other than the root that died of a signal corral sent
    /// them (`signals_sent`): a member that was signalled and survived it
    /// (ignored it, then exited by itself) or died of something else is
    /// not counted. Each member is watched from the moment it is first
    /// listed (Linux: a pidfd, whose exit status the kernel keeps once the
    /// member is reaped, Linux 6.15; the zombie's `/proc/PID/stat` before
    /// that); where no status can be read, a member that is gone counts
    /// as killed only when corral sent SIGKILL. A member that appeared
    /// after the last listing is not in it, so in the process-group tier
    /// without a grace (SIGKILL first, counted after, so that the kill is
    /// not delayed by a scan) this is *at least* the number killed.
    /// Survivors are always confirmed. A stopped leftover that the
    /// leftovers policy would keep is killed instead, through a pidfd (see
    /// [`LeftoverPolicy`](crate::LeftoverPolicy)): it counts here once dead,
    /// though its SIGKILL is not in `signals_sent` (which lists the
    /// signals sent to the whole tree).
    pub killed: usize,
    /// Processes other than the root left running by the leftovers policy:
    /// none of them stopped or dying when corral let go of the tree.
    pub kept: usize,
}

/// Tree-wide resource usage, read from the cgroup (cgroup containment only;
/// each field is present when the kernel provides it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Usage {
    /// CPU time in user mode, the whole tree.
    pub cpu_user: Option<Duration>,
    /// CPU time in kernel mode, the whole tree.
    pub cpu_system: Option<Duration>,
    /// Peak memory of the whole tree, in bytes.
    pub memory_peak: Option<u64>,
    /// Most processes alive at once in the tree.
    pub pids_peak: Option<u64>,
}

/// A tree-wide limit that the tree ran into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub enum LimitHit {
    /// The memory limit: the OOM killer killed a process of the tree.
    Memory,
    /// The process-count limit: a fork failed.
    Pids,
}

impl LimitHit {
    /// `memory` or `pids`.
    pub fn name(self) -> &'static str {
        match self {
            LimitHit::Memory => "memory",
            LimitHit::Pids => "pids",
        }
    }
}

/// Whether the tree is killed if corral itself dies (crashes, is sent
/// SIGKILL) while the run is going: promise 2 holds even then only when
/// this is [`Held`](CrashSafety::Held).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum CrashSafety {
    /// Yes: by the crash-safety keeper (a small process per corral process
    /// that kills the cgroup, or the root's process group, when corral
    /// dies: the cgroup, process-group and subreaper tiers on Linux), by
    /// the namespace's init (PID namespace), by closing the job (Windows).
    #[default]
    Held,
    /// No, and why (the keeper could not be started, a platform without
    /// one). The run itself is contained as usual; only corral's own death
    /// would leave the tree running. Under
    /// [`Command::require_crash_safety`](crate::Command::require_crash_safety)
    /// the run fails with [`Error::Containment`](crate::Error) instead.
    Lost(String),
}

/// A [`CrashSafety`] in 8 bytes instead of 24, kept by every live run
/// (figure 5): `Held` is `None`, the reason of a `Lost` (rare) boxed.
#[derive(Clone, Default, Debug)]
#[allow(clippy::box_collection)] // 8 bytes, not a `String`'s 24
pub(crate) struct CrashSafetyCell(Option<Box<String>>);

impl CrashSafetyCell {
    pub(crate) fn is_held(&self) -> bool {
        self.0.is_none()
    }

    /// (A Unix root's; Windows keeps its own.)
    #[cfg_attr(not(unix), allow(dead_code))]
    pub(crate) fn get(&self) -> CrashSafety {
        match &self.0 {
            None => CrashSafety::Held,
            Some(why) => CrashSafety::Lost(String::clone(why)),
        }
    }

    pub(crate) fn take(&mut self) -> CrashSafety {
        match self.0.take() {
            None => CrashSafety::Held,
            Some(why) => CrashSafety::Lost(*why),
        }
    }
}

impl From<CrashSafety> for CrashSafetyCell {
    fn from(c: CrashSafety) -> CrashSafetyCell {
        match c {
            CrashSafety::Held => CrashSafetyCell(None),
            CrashSafety::Lost(why) => CrashSafetyCell(Some(Box::new(why))),
        }
    }
}

impl CrashSafety {
    /// Whether the tree dies with corral.
    pub fn is_held(&self) -> bool {
        matches!(self, CrashSafety::Held)
    }

    /// Why it does not, when it does not.
    pub fn note(&self) -> Option<&str> {
        match self {
            CrashSafety::Held => None,
            CrashSafety::Lost(why) => Some(why),
        }
    }
}

/// Everything about one run.
///
/// With the `serde` feature, a `Report` serialises as its
/// `corral::document::RunReport` document: the run report of the
/// documented JSON schema (docs/report-schema.json, the object `corral run
/// --report` writes, without the three fields only the command line knows:
/// `output`, `received_signal`, `corral_exit`). Captured output is not part
/// of it (only its byte counts).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Report {
    /// What happened.
    pub outcome: Outcome,
    /// Which limit fired on a [`Outcome::TimedOut`] run (`None` otherwise).
    pub timeout_kind: Option<TimeoutKind>,
    /// The root's real exit status, when it was observed (also after a
    /// timeout or with held output).
    pub root: Option<RootStatus>,
    /// The root's process id.
    pub pid: u32,
    /// The containment mechanism used.
    pub containment: Mechanism,
    /// Why a better mechanism was not used, when `auto` fell back.
    pub containment_note: Option<String>,
    /// Whether the tree would have been killed had corral itself died.
    pub crash_safety: CrashSafety,
    /// Leftover processes killed or kept.
    pub leftovers: Leftovers,
    /// The signals corral sent to the tree, in order.
    pub signals_sent: Vec<Signal>,
    /// Every step after the command ran that failed, in the order they
    /// failed; a step that failed more than once (in a loop) is kept once,
    /// with its first error. When not empty, the run is not a clean exit
    /// whatever the outcome says.
    pub cleanup_errors: Vec<CleanupError>,
    /// Captured standard output (empty if not captured).
    pub stdout: Captured,
    /// Captured standard error (empty if not captured).
    pub stderr: Captured,
    /// Timings of the lifecycle steps.
    pub timings: Timings,
    /// Tree-wide usage (cgroup containment only).
    pub usage: Option<Usage>,
    /// Limits the tree ran into (see [`Command::memory_max`](crate::Command::memory_max)).
    pub limits_hit: Vec<LimitHit>,
    /// What the sandbox enforced (`None`: no sandbox).
    pub sandbox: Option<SandboxReport>,
}

impl Report {
    /// The exit code, only when the command merely exited with it: no
    /// timeout, no cancellation, no held output, no signal, no cleanup error.
    ///
    /// This is the one question a caller should ask before treating a run as
    /// an ordinary result (for example before trusting a result line that the
    /// program printed).
    pub fn exit_code(&self) -> Option<i32> {
        match self.outcome {
            Outcome::Exited(code) if self.cleanup_errors.is_empty() => Some(code),
            _ => None,
        }
    }

    /// Whether every lifecycle step was clean (an exit with any code).
    pub fn is_clean(&self) -> bool {
        self.exit_code().is_some()
    }

    /// Whether the command exited 0 with a clean lifecycle.
    pub fn success(&self) -> bool {
        self.exit_code() == Some(0)
    }

    /// The outcome's name for reports: the [`Outcome::name`], or
    /// `cleanup_failed` when a cleanup step failed.
    pub fn outcome_name(&self) -> &'static str {
        if !self.cleanup_errors.is_empty() {
            "cleanup_failed"
        } else {
            self.outcome.name()
        }
    }

    /// A report of a run that did not happen: `outcome`, pid 0, containment
    /// `mechanism`, and every other field empty. For testing code that
    /// consumes reports (the fields are public and can be set after).
    /// Feature `test-util`.
    #[cfg(any(test, feature = "test-util"))]
    pub fn synthetic(outcome: Outcome, mechanism: Mechanism) -> Report {
        Report {
            outcome,
            timeout_kind: None,
            root: None,
            pid: 0,
            containment: mechanism,
            containment_note: None,
            crash_safety: CrashSafety::Held,
            leftovers: Leftovers::default(),
            signals_sent: Vec::new(),
            cleanup_errors: Vec::new(),
            stdout: Captured::default(),
            stderr: Captured::default(),
            timings: Timings::default(),
            usage: None,
            limits_hit: Vec::new(),
            sandbox: None,
        }
    }

    /// Total duration from spawn to the end of cleanup.
    pub fn duration(&self) -> Duration {
        self.timings.cleanup_done
    }

    /// `Ok(self)` only when the command exited 0 with a clean lifecycle (as
    /// [`success`](Self::success)); otherwise a [`RunError`] saying what
    /// happened instead: a nonzero exit, a signal, a timeout, cancellation,
    /// held output, or a cleanup failure (even after exit 0). For callers
    /// who want `?`:
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let report = corral::Command::new("make").arg("check").run()?;
    /// let out = report.check()?.stdout.bytes();
    /// # let _ = out; Ok(()) }
    /// ```
    ///
    /// A caller for whom a nonzero code is an answer, not a failure, uses
    /// [`exit_code`](Self::exit_code) instead.
    pub fn check(&self) -> Result<&Report, RunError> {
        if self.success() {
            Ok(self)
        } else {
            Err(RunError {
                outcome: self.outcome,
                root: self.root,
                cleanup_errors: self.cleanup_errors.clone(),
            })
        }
    }

    /// The message the JSON report carries in `error`: every cleanup
    /// failure (in order, separated by `; `), or what kept the run from being an ordinary exit (none for an exit or
    /// a signal the root died of by itself).
    pub fn error_message(&self) -> Option<String> {
        if !self.cleanup_errors.is_empty() {
            return Some(cleanup_message(&self.cleanup_errors));
        }
        match self.outcome {
            Outcome::TimedOut => Some(match self.timeout_kind {
                Some(TimeoutKind::Idle) => "timed out: no output for the idle timeout".into(),
                _ => "timed out".into(),
            }),
            Outcome::OutputLimit => Some("output passed the limit".into()),
            Outcome::Cancelled => Some("cancelled".into()),
            Outcome::OutputHeld => Some(format!(
                "output still held open by a descendant when the wait delay ended; {} holder(s) killed",
                self.leftovers.killed
            )),
            _ => None,
        }
    }
}

/// A run that did not end in a clean exit 0: the error of [`Report::check`].
///
/// Its `Display` says what happened (`the command exited with code 2`,
/// `the command timed out`, ...); after a cleanup failure it names every
/// step that failed, with its error (the list is
/// [`cleanup_errors`](RunError::cleanup_errors); the first is also the
/// [`source`](std::error::Error::source)).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RunError {
    /// What happened.
    pub outcome: Outcome,
    /// The root's real exit status, when it was observed.
    pub root: Option<RootStatus>,
    /// Every cleanup step that failed, in order (as
    /// [`Report::cleanup_errors`]).
    pub cleanup_errors: Vec<CleanupError>,
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&run_error_message(self.outcome, &self.cleanup_errors))
    }
}

impl std::error::Error for RunError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.cleanup_errors
            .first()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// Adds a cleanup failure to the run's list, unless its step already
/// failed: a step retried in a loop (a wait, a signal) is kept once, with
/// its first error.
pub(crate) fn note_once(errors: &mut Vec<CleanupError>, e: CleanupError) {
    if errors.iter().all(|seen| seen.step() != e.step()) {
        errors.push(e);
    }
}

/// The cleanup failures in one line: each step's error, in order.
fn cleanup_message(errors: &[CleanupError]) -> String {
    let all: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
    all.join("; ")
}

fn run_error_message(outcome: Outcome, cleanup: &[CleanupError]) -> String {
    if !cleanup.is_empty() {
        return format!("the run did not end cleanly: {}", cleanup_message(cleanup));
    }
    match outcome {
        Outcome::Exited(c) => format!("the command exited with code {c}"),
        Outcome::Signaled(s) => format!("the command was killed by {s} (signal {})", s.as_raw()),
        Outcome::TimedOut => "the command timed out".into(),
        Outcome::Cancelled => "the run was cancelled".into(),
        Outcome::OutputHeld => {
            "a descendant held the command's output open past the wait delay".into()
        }
        Outcome::OutputLimit => "the command's output passed the limit".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn cleanup_errors_name_the_step_and_keep_the_os_error() {
        let cases = [
            (
                CleanupError::signal(io::Error::from(io::ErrorKind::PermissionDenied)),
                "could not signal the process tree: ",
            ),
            (
                CleanupError::members(io::Error::from(io::ErrorKind::NotFound)),
                "could not list the process tree's members: ",
            ),
            (
                CleanupError::wait(io::Error::from(io::ErrorKind::Interrupted)),
                "waiting on the run failed: ",
            ),
            (
                CleanupError::release(io::Error::from(io::ErrorKind::Other)),
                "could not release the process tree: ",
            ),
        ];
        for (e, prefix) in cases {
            let shown = e.to_string();
            assert!(shown.starts_with(prefix), "{shown}");
            let io = e.io_error().expect("an OS error");
            assert!(shown.ends_with(&io.to_string()), "{shown}");
            let src = e.source().expect("a source");
            assert!(
                src.downcast_ref::<Arc<io::Error>>().is_some()
                    || src.downcast_ref::<io::Error>().is_some()
            );
            assert!(e.survivors().is_empty());
            // A report with it is not clean, whatever the outcome.
            let mut r = Report::synthetic(Outcome::Exited(0), Mechanism::ProcessGroup);
            r.cleanup_errors = vec![e.clone()];
            assert_eq!(r.exit_code(), None);
            assert_eq!(r.outcome_name(), "cleanup_failed");
            assert_eq!(r.error_message(), Some(shown));
            assert!(r.check().is_err());
        }
    }

    #[test]
    fn every_failed_step_is_kept_once_in_order() {
        let eperm = || io::Error::from_raw_os_error(1);
        let mut list = Vec::new();
        note_once(
            &mut list,
            CleanupError::wait(io::Error::from_raw_os_error(4)),
        );
        note_once(&mut list, CleanupError::signal(eperm()));
        // The wait loop fails again with another error: kept once, the first.
        note_once(
            &mut list,
            CleanupError::wait(io::Error::from_raw_os_error(9)),
        );
        note_once(&mut list, CleanupError::release(eperm()));
        let steps: Vec<CleanupStep> = list.iter().map(CleanupError::step).collect();
        assert_eq!(
            steps,
            [CleanupStep::Wait, CleanupStep::Signal, CleanupStep::Release]
        );
        assert_eq!(
            list[0].io_error().and_then(io::Error::raw_os_error),
            Some(4)
        );

        let mut r = Report::synthetic(Outcome::Exited(0), Mechanism::ProcessGroup);
        r.cleanup_errors = list.clone();
        assert_eq!(r.exit_code(), None);
        assert_eq!(r.outcome_name(), "cleanup_failed");
        let msg = r.error_message().expect("a message");
        let parts: Vec<String> = list.iter().map(|e| e.to_string()).collect();
        assert_eq!(msg, parts.join("; "));
        let err = r.check().unwrap_err();
        assert_eq!(err.cleanup_errors.len(), 3);
        let shown = err.to_string();
        let mut at = 0;
        for p in &parts {
            let i = shown[at..].find(p.as_str()).expect("every step, in order") + at;
            at = i + p.len();
        }
        assert!(
            shown.starts_with("the run did not end cleanly: "),
            "{shown}"
        );
    }

    #[test]
    fn run_error_says_what_happened() {
        let r = |o| Report::synthetic(o, Mechanism::ProcessGroup);
        assert!(r(Outcome::Exited(0)).check().is_ok());
        let msg = |o| r(o).check().unwrap_err().to_string();
        assert_eq!(msg(Outcome::Exited(1)), "the command exited with code 1");
        assert_eq!(
            msg(Outcome::Signaled(Signal::KILL)),
            "the command was killed by SIGKILL (signal 9)"
        );
        assert_eq!(msg(Outcome::TimedOut), "the command timed out");
        assert_eq!(msg(Outcome::Cancelled), "the run was cancelled");
        assert!(msg(Outcome::OutputHeld).contains("wait delay"));
    }
}

/// A containment mechanism, as named in reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub enum Mechanism {
    /// A new process group per command (every Unix). Holds every descendant
    /// that does not call `setsid`/`setpgid`.
    ProcessGroup,
    /// A fresh cgroup v2 per command (Linux). Holds every descendant.
    Cgroup,
    /// A process group plus corral as child subreaper walking /proc (Linux
    /// without a writable cgroup).
    Subreaper,
    /// A Windows Job Object. Holds every descendant (no breakaway).
    JobObject,
    /// A new PID namespace (Linux, as root or unprivileged through a user
    /// namespace) whose pid 1 is a small init and whose only other first
    /// process is the command. Holds every descendant; the namespace's end
    /// is the kernel's proof that the tree is gone.
    PidNamespace,
}

impl Mechanism {
    /// The name used in reports and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::ProcessGroup => "process_group",
            Mechanism::Cgroup => "cgroup",
            Mechanism::Subreaper => "subreaper",
            Mechanism::JobObject => "job_object",
            Mechanism::PidNamespace => "pid_namespace",
        }
    }
}

/// The error for a containment name that is not known.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown containment {0:?}")]
pub struct UnknownMechanism(pub String);

impl std::str::FromStr for Mechanism {
    type Err = UnknownMechanism;

    /// Parses a report name (`pid_namespace`) or a command-line spelling
    /// (`pid-namespace`).
    fn from_str(s: &str) -> Result<Mechanism, UnknownMechanism> {
        Ok(match s.replace('-', "_").as_str() {
            "process_group" => Mechanism::ProcessGroup,
            "cgroup" => Mechanism::Cgroup,
            "subreaper" => Mechanism::Subreaper,
            "job_object" => Mechanism::JobObject,
            "pid_namespace" => Mechanism::PidNamespace,
            _ => return Err(UnknownMechanism(s.to_owned())),
        })
    }
}

impl std::fmt::Display for Mechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What a sandbox ([`Command::sandbox`](crate::Command::sandbox))
/// enforced: the policy as enforced (paths resolved), rule by rule with the
/// mechanism that enforces it, and the mechanisms in use.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct SandboxReport {
    /// The network policy (`none`, `loopback`, `host`).
    pub network: String,
    /// The writable paths as enforced (the working directory first), resolved.
    pub allow_write: Vec<String>,
    /// The paths denied to reading as enforced, resolved (without
    /// namespaces the host's /tmp and /dev/shm are among them).
    pub deny_read: Vec<String>,
    /// Whether /tmp and /dev/shm are private, empty and gone after the run
    /// (else they are denied instead).
    pub private_tmp: bool,
    /// The devices granted reading and writing.
    pub devices: Vec<String>,
    /// The Landlock ABI in use.
    pub landlock_abi: u32,
    /// Whether user, mount and network namespaces are used (else the
    /// ladder without them: Landlock, seccomp, no_new_privs).
    pub namespaces: bool,
    /// The mechanisms in use, in words.
    pub mechanisms: Vec<String>,
    /// Each rule of the policy and how it is enforced.
    pub rules: Vec<SandboxRule>,
    /// What was denied, as the kernel told corral (not guessed from exit
    /// codes or output): each distinct denial with its exact count, in the
    /// order first seen, at most 64 (see `denials_unlisted`). Only the
    /// kinds `denials_observed` marks observed can appear here.
    pub denials: Vec<SandboxDenial>,
    /// Denied attempts not listed in `denials` (its cap was reached).
    pub denials_unlisted: u64,
    /// For each kind of denial (`files`, `network`, `processes`): whether
    /// corral observes it, how, or why not.
    pub denials_observed: Vec<SandboxObservation>,
    /// What is and is not observed, in one sentence.
    pub denials_note: String,
}

/// One denial the kernel reported to corral during a sandboxed run.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct SandboxDenial {
    /// `network` (the only kind observed today).
    pub kind: String,
    /// The refused system call, e.g. `socket`.
    pub operation: String,
    /// What it named: for `socket`, the family and type (`AF_INET
    /// SOCK_STREAM`); the call is refused before any address exists.
    pub target: String,
    /// How many times it was attempted and refused.
    pub count: u64,
}

impl SandboxDenial {
    #[cfg_attr(not(linux_raw), allow(dead_code))]
    pub(crate) fn new(kind: &str, operation: &str, target: String, count: u64) -> SandboxDenial {
        SandboxDenial {
            kind: kind.to_string(),
            operation: operation.to_string(),
            target,
            count,
        }
    }
}

/// Whether one kind of denial is observed in a sandboxed run.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct SandboxObservation {
    /// `files`, `network` or `processes`.
    pub kind: String,
    /// Whether denials of this kind are listed in `denials`.
    pub observed: bool,
    /// How they are observed, or why not.
    pub how: String,
}

impl SandboxObservation {
    #[cfg_attr(not(linux_raw), allow(dead_code))]
    pub(crate) fn new(kind: &str, observed: bool, how: impl Into<String>) -> SandboxObservation {
        SandboxObservation {
            kind: kind.to_string(),
            observed,
            how: how.into(),
        }
    }
}

/// One rule of a sandbox and how it is enforced.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct SandboxRule {
    /// The rule, in words.
    pub rule: String,
    /// `enforced`, `denied_instead` (a stricter rule holds in its place) or
    /// `not_confined` (the policy asks for nothing here).
    pub status: String,
    /// The mechanisms that enforce it, or what holds instead.
    pub by: String,
}

/// How a rule is enforced (the builder of [`SandboxRule`]).
#[cfg(linux_raw)]
pub(crate) struct Enforcement {
    status: &'static str,
    by: String,
}

#[cfg(linux_raw)]
impl Enforcement {
    pub(crate) fn by(mechanisms: &str) -> Enforcement {
        Enforcement {
            status: "enforced",
            by: mechanisms.to_string(),
        }
    }
    pub(crate) fn denied_instead(what: &str) -> Enforcement {
        Enforcement {
            status: "denied_instead",
            by: what.to_string(),
        }
    }
    pub(crate) fn not_confined() -> Enforcement {
        Enforcement {
            status: "not_confined",
            by: String::new(),
        }
    }
}

#[cfg(linux_raw)]
impl SandboxRule {
    pub(crate) fn new(rule: &str, e: Enforcement) -> SandboxRule {
        SandboxRule {
            rule: rule.to_string(),
            status: e.status.to_string(),
            by: e.by,
        }
    }
}
