//! What happened: the typed outcome of one run and everything measured on
//! the way.

use std::time::Duration;

use crate::capture::Captured;
use crate::Signal;

/// How the root process itself ended, as the OS reported it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RootStatus {
    /// It exited with this code.
    Exited(i32),
    /// It was ended by this signal. On Windows: corral's own job termination
    /// is reported as SIGKILL and STATUS_CONTROL_C_EXIT as SIGINT; every
    /// other ending is an exit code.
    Signaled(Signal),
}

/// The one thing that happened to a run. Exactly one of these holds.
///
/// Only [`Outcome::Exited`] is an ordinary result, and only when the
/// [`Report`] has no [`cleanup_error`](Report::cleanup_error); use
/// [`Report::exit_code`] to ask that question.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The root exited with this code by itself (corral sent the root no
    /// signal before it exited) and its output was drained. Leftovers may
    /// have been signalled afterwards by the leftovers policy
    /// ([`Report::signals_sent`]).
    Exited(i32),
    /// The root was ended by a signal that corral did not send.
    Signaled(Signal),
    /// The deadline passed; the tree was terminated.
    TimedOut,
    /// The run was cancelled; the tree was terminated.
    Cancelled,
    /// The root exited but its captured output was still held open by a
    /// descendant when the wait delay ended; the holders were killed. The
    /// root's own status is in [`Report::root`].
    OutputHeld,
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
        }
    }
}

/// Why the lifecycle could not end cleanly after the command ran.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CleanupError {
    /// Processes of the tree were still alive when the confirm window after
    /// the last SIGKILL ended (for example in uninterruptible sleep).
    #[error("{} process(es) of the tree survived SIGKILL past the confirm window: {pids:?}", pids.len())]
    Survivors {
        /// Their process ids, as seen last.
        pids: Vec<u32>,
    },
    /// Signalling the tree failed with an error other than "already gone".
    #[error("could not signal the process tree: {0}")]
    Signal(String),
    /// Releasing the tree's identity (reaping the root, removing a cgroup,
    /// closing a job) failed.
    #[error("could not release the process tree: {0}")]
    Release(String),
}

/// Durations since the run began (just before the spawn).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
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
pub struct Leftovers {
    /// Processes other than the root that were killed by corral.
    pub killed: usize,
    /// Processes other than the root left running by the leftovers policy.
    pub kept: usize,
}

/// Tree-wide resource usage, read from the cgroup (cgroup containment only;
/// each field is present when the kernel provides it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
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

/// Everything about one run.
#[derive(Debug, Clone)]
pub struct Report {
    /// What happened.
    pub outcome: Outcome,
    /// The root's real exit status, when it was observed (also after a
    /// timeout or with held output).
    pub root: Option<RootStatus>,
    /// The root's process id.
    pub pid: u32,
    /// The containment mechanism used.
    pub containment: Mechanism,
    /// Why a better mechanism was not used, when `auto` fell back.
    pub containment_note: Option<String>,
    /// Leftover processes killed or kept.
    pub leftovers: Leftovers,
    /// The signals corral sent to the tree, in order.
    pub signals_sent: Vec<Signal>,
    /// A failure after the command ran. When set, the run is not a clean
    /// exit whatever the outcome says.
    pub cleanup_error: Option<CleanupError>,
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
}

impl Report {
    /// The exit code, only when the command merely exited with it: no
    /// timeout, no cancellation, no held output, no signal, no cleanup error.
    ///
    /// This is the one question a caller should ask before treating a run as
    /// an ordinary result (for example before trusting a result line that the
    /// program printed).
    pub fn exit_code(&self) -> Option<i32> {
        match (self.outcome, &self.cleanup_error) {
            (Outcome::Exited(code), None) => Some(code),
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
    /// `cleanup_failed` when cleanup failed.
    pub fn outcome_name(&self) -> &'static str {
        if self.cleanup_error.is_some() {
            "cleanup_failed"
        } else {
            self.outcome.name()
        }
    }

    /// Total duration from spawn to the end of cleanup.
    pub fn duration(&self) -> Duration {
        self.timings.cleanup_done
    }
}

/// A containment mechanism, as named in reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
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

impl std::str::FromStr for Mechanism {
    type Err = String;

    /// Parses a report name (`pid_namespace`) or a command-line spelling
    /// (`pid-namespace`).
    fn from_str(s: &str) -> Result<Mechanism, String> {
        Ok(match s.replace('-', "_").as_str() {
            "process_group" => Mechanism::ProcessGroup,
            "cgroup" => Mechanism::Cgroup,
            "subreaper" => Mechanism::Subreaper,
            "job_object" => Mechanism::JobObject,
            "pid_namespace" => Mechanism::PidNamespace,
            _ => return Err(format!("unknown containment {s:?}")),
        })
    }
}

impl std::fmt::Display for Mechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
