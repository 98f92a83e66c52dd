//! Exit codes, in one place (coreutils `timeout` conventions plus 123).

use corral::{Error, Outcome, Report, SpawnErrorKind};

pub const OUTPUT_HELD: i32 = 123;
pub const TIMED_OUT: i32 = 124;
pub const CORRAL_FAILED: i32 = 125;
pub const NOT_EXECUTABLE: i32 = 126;
pub const NOT_FOUND: i32 = 127;

/// The exit code for a run that happened. `received` is a signal corral
/// received and passed on to the tree.
pub fn for_report(report: &Report, received: Option<i32>) -> i32 {
    if report.cleanup_error.is_some() {
        return CORRAL_FAILED;
    }
    if let (Some(sig), Outcome::Cancelled) = (received, report.outcome) {
        return 128 + sig;
    }
    match report.outcome {
        Outcome::Exited(code) => code,
        Outcome::Signaled(sig) => 128 + sig.as_raw(),
        Outcome::TimedOut => TIMED_OUT,
        Outcome::OutputHeld => OUTPUT_HELD,
        Outcome::Cancelled => CORRAL_FAILED,
    }
}

/// The exit code for a run that could not start.
pub fn for_error(err: &Error, received: Option<i32>) -> i32 {
    match err {
        Error::Spawn {
            kind: SpawnErrorKind::NotFound,
            ..
        } => NOT_FOUND,
        Error::Spawn {
            kind: SpawnErrorKind::PermissionDenied,
            ..
        } => NOT_EXECUTABLE,
        Error::CancelledBeforeSpawn => received.map_or(CORRAL_FAILED, |s| 128 + s),
        _ => CORRAL_FAILED,
    }
}
