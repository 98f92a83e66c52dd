//! Failures that keep a command from running at all.

use std::ffi::OsString;
use std::io;

use crate::report::Mechanism;

/// Why a spawn failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SpawnErrorKind {
    /// The program was not found (exit 127 in the CLI).
    NotFound,
    /// The program was found but could not be executed (exit 126).
    PermissionDenied,
    /// This process (EMFILE) or the whole system (ENFILE) has no file
    /// descriptor left for the run's pipes, pidfd or containment. Nothing
    /// was left running. The error's message names the process's
    /// `RLIMIT_NOFILE`; [`raise_nofile_limit`](crate::process_wide::raise_nofile_limit)
    /// raises the soft limit to the hard one. See that function for what a
    /// run holds.
    TooManyOpenFiles,
    /// Anything else (bad working directory, out of resources, ...).
    Other,
}

/// An error that kept the command from running. Nothing of the command is
/// left behind when one of these is returned.
///
/// `Display` is this error's own message, without its source (the OS error
/// behind it), which [`source`](std::error::Error::source) gives: a
/// reporter that walks the chain prints each cause once.
/// [`Error::full_message`] is the whole chain on one line, as corral's
/// command line, Python and Node packages show it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The program could not be started.
    #[error("cannot run {program:?}{}", hint(*kind))]
    Spawn {
        /// What kind of spawn failure.
        kind: SpawnErrorKind,
        /// The program as given.
        program: OsString,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The requested containment could not be set up; the command was not
    /// run (or was killed before it could run any code).
    #[error("containment {mechanism} is not available: {reason}")]
    Containment {
        /// The mechanism that failed.
        mechanism: Mechanism,
        /// Why, in words (the step that failed, or what is missing).
        reason: String,
        /// The OS error, when an OS operation failed (none when the
        /// mechanism is simply not there, for example no cgroup v2 mount).
        #[source]
        source: Option<io::Error>,
    },
    /// The requested sandbox cannot be enforced here (kernel, privileges, a
    /// missing mechanism); nothing was run. `reason` names what is missing.
    #[error("the sandbox cannot be enforced here: {reason}")]
    Sandbox {
        /// What is missing, in words.
        reason: String,
        /// The OS error, when an OS operation failed.
        #[source]
        source: Option<io::Error>,
    },
    /// The run was cancelled before the command was started; nothing was
    /// spawned.
    #[error("cancelled before the command was started")]
    CancelledBeforeSpawn,
    /// The command's configuration is invalid.
    #[error("invalid command: {0}")]
    InvalidInput(String),
    /// The session has ended (a command ended its shell, or it was
    /// closed): nothing was run.
    #[error("the session is closed")]
    SessionClosed,
}

impl Error {
    /// The kind of spawn failure, if this is one.
    pub fn spawn_kind(&self) -> Option<SpawnErrorKind> {
        match self {
            Error::Spawn { kind, .. } => Some(*kind),
            _ => None,
        }
    }

    /// This error and its sources on one line, joined by `: ` (for example
    /// `cannot run "nope": No such file or directory (os error 2)`).
    pub fn full_message(&self) -> String {
        chain_text(self)
    }

    /// The name used in JSON reports (`spawn_failed`, `containment_failed`,
    /// `cancelled`).
    pub fn outcome_name(&self) -> &'static str {
        match self {
            Error::Spawn { .. } | Error::InvalidInput(_) => "spawn_failed",
            Error::Containment { .. } => "containment_failed",
            Error::Sandbox { .. } => "sandbox_failed",
            Error::CancelledBeforeSpawn => "cancelled",
            Error::SessionClosed => "session_closed",
        }
    }

    /// A containment failure without an OS error behind it.
    pub(crate) fn containment(mechanism: Mechanism, reason: impl Into<String>) -> Error {
        Error::Containment {
            mechanism,
            reason: reason.into(),
            source: None,
        }
    }

    /// A containment failure: `step` failed with the OS error `source`.
    pub(crate) fn containment_io(
        mechanism: Mechanism,
        step: impl Into<String>,
        source: io::Error,
    ) -> Error {
        Error::Containment {
            mechanism,
            reason: step.into(),
            source: Some(source),
        }
    }

    pub(crate) fn spawn(program: OsString, source: io::Error) -> Error {
        let kind = match source.kind() {
            _ if out_of_descriptors(&source) => SpawnErrorKind::TooManyOpenFiles,
            io::ErrorKind::NotFound => SpawnErrorKind::NotFound,
            io::ErrorKind::PermissionDenied => SpawnErrorKind::PermissionDenied,
            _ if is_exec_format_error(&source) => SpawnErrorKind::PermissionDenied,
            _ => SpawnErrorKind::Other,
        };
        Error::Spawn {
            kind,
            program,
            source,
        }
    }
}

/// EMFILE (24) or ENFILE (23), the same numbers on every Unix corral
/// supports.
pub(crate) fn out_of_descriptors(e: &io::Error) -> bool {
    cfg!(unix) && matches!(e.raw_os_error(), Some(23 | 24))
}

/// What the message of a spawn error adds to the OS error: for
/// [`SpawnErrorKind::TooManyOpenFiles`], the limit that applies (the OS
/// error itself, with its errno, stays the source).
fn hint(kind: SpawnErrorKind) -> String {
    #[cfg(unix)]
    if kind == SpawnErrorKind::TooManyOpenFiles {
        let lim = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        let show = |v: Option<u64>| v.map_or("unlimited".to_string(), |v| v.to_string());
        return format!(
            " (RLIMIT_NOFILE: soft {}, hard {}; every running command holds descriptors \
             until it ends; corral::process_wide::raise_nofile_limit() raises the soft \
             limit to the hard one)",
            show(lim.current),
            show(lim.maximum)
        );
    }
    let _ = kind;
    String::new()
}

/// Raises this process's soft limit on open file descriptors
/// (`RLIMIT_NOFILE`) to its hard limit, and returns the new soft limit
/// (`None`: unlimited).
///
/// corral never changes the limit by itself: it is process-wide, and it is
/// inherited by every program the process starts (some older programs
/// still use `select(2)`, which cannot handle descriptors past 1023). A
/// host that runs many commands at once calls this at start, as Go's
/// runtime does for every Go program. Raising the hard limit needs
/// `CAP_SYS_RESOURCE` (and stays below `/proc/sys/fs/nr_open` on Linux);
/// this function does not try. On macOS the soft limit is raised to at most
/// `OPEN_MAX` (10240), above which `setrlimit` fails there.
///
/// What a run holds while it runs (Linux): the root's pidfd; one pipe per
/// captured stream (and stdin's while bytes are fed); in the cgroup tier
/// the cgroup's directory and its `cgroup.procs` and `cgroup.events`; a
/// synchronous [`Running::wait`](crate::Running::wait) also one eventfd.
/// The async API registers these descriptors with the reactor as they are
/// (no duplicates) and wakes its task without a descriptor. So with
/// `Output::null()` streams a process-group run holds one descriptor and a
/// cgroup run four; with both streams captured, two more. A spawn that
/// finds no descriptor left fails with
/// [`SpawnErrorKind::TooManyOpenFiles`] and leaves nothing running.
#[cfg(unix)]
pub fn raise_nofile_limit() -> io::Result<Option<u64>> {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut lim = getrlimit(Resource::Nofile);
    let mut want = lim.maximum;
    if cfg!(target_vendor = "apple") {
        want = Some(want.map_or(10240, |h| h.min(10240)));
    }
    if lim.current.is_some() && (want.is_none() || want > lim.current) {
        lim.current = want;
        setrlimit(Resource::Nofile, lim)?;
    }
    Ok(getrlimit(Resource::Nofile).current)
}

fn is_exec_format_error(e: &io::Error) -> bool {
    // ENOEXEC (8 on every Unix corral supports): found, but not a runnable
    // program. coreutils maps it to 126 as well.
    cfg!(unix) && e.raw_os_error() == Some(8)
}

/// An OS error with the step that failed. `Display` is `step: error` (the
/// CLI prints one line), `source()` is the OS error itself.
// Used by the Linux (and Windows) spawn paths only.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
#[derive(Debug, thiserror::Error)]
#[error("{step}: {source}")]
struct Step {
    step: String,
    #[source]
    source: io::Error,
}

/// `source` with the step that failed in words, kept as an `io::Error` (of
/// the same kind) whose `source()` is the original OS error, so the errno
/// is not flattened into text.
// Used by the Linux (and Windows) spawn paths only.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) fn io_context(step: impl Into<String>, source: io::Error) -> io::Error {
    io::Error::new(
        source.kind(),
        Step {
            step: step.into(),
            source,
        },
    )
}

/// `e` and its sources, joined by `: ` (for one-line notes).
pub(crate) fn chain_text(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        let part = s.to_string();
        // A wrapper whose text already ends with its source's adds nothing.
        if !text.ends_with(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        next = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn io_context_keeps_kind_errno_and_text() {
        let e = io_context("opening x", io::Error::from_raw_os_error(2));
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().starts_with("opening x: "), "{e}");
        let os = e.source().and_then(|s| s.downcast_ref::<io::Error>());
        assert_eq!(os.and_then(io::Error::raw_os_error), Some(2));
        // One line: the wrapper's text already holds its source's.
        assert_eq!(chain_text(&e), e.to_string());
    }
}
