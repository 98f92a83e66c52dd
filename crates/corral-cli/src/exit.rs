//! Exit codes, in one place (coreutils `timeout` conventions plus 123).

use corral::{Error, Outcome, Report, RootStatus, SpawnErrorKind};

pub const OUTPUT_HELD: i32 = 123;
pub const TIMED_OUT: i32 = 124;
pub const CORRAL_FAILED: i32 = 125;
pub const NOT_EXECUTABLE: i32 = 126;
pub const NOT_FOUND: i32 = 127;

/// The exit code for a run that happened. `received` is a signal corral
/// received and passed on to the tree.
pub fn for_report(report: &Report, received: Option<i32>) -> i32 {
    for_run(report, received, false)
}

/// As [`for_report`]; with `preserve_status`, a timeout or held output exits
/// with the root's own status (128+N when it was killed), as
/// `timeout --preserve-status` does.
pub fn for_run(report: &Report, received: Option<i32>, preserve_status: bool) -> i32 {
    if report.cleanup_error.is_some() {
        return CORRAL_FAILED;
    }
    if let (Some(sig), Outcome::Cancelled) = (received, report.outcome) {
        return 128 + sig;
    }
    if preserve_status && matches!(report.outcome, Outcome::TimedOut | Outcome::OutputHeld) {
        if let Some(c) = report.root.and_then(RootStatus::code) {
            return c;
        }
        if let Some(s) = report.root.and_then(RootStatus::signal) {
            return 128 + s.as_raw();
        }
    }
    match report.outcome {
        Outcome::Exited(code) => code,
        Outcome::Signaled(sig) => 128 + sig.as_raw(),
        Outcome::TimedOut => TIMED_OUT,
        Outcome::OutputHeld => OUTPUT_HELD,
        // Cancelled, and any outcome a later corral adds: corral's failure.
        _ => CORRAL_FAILED,
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

/// What corral says about a run that could not start: the library's
/// message, except out of descriptors, where a shell user is told what to
/// do in the shell (`ulimit -n`) rather than which library function raises
/// the limit.
pub fn error_message(err: &Error) -> String {
    match err {
        Error::Spawn {
            kind: SpawnErrorKind::TooManyOpenFiles,
            program,
            source,
        } => format!("cannot run {program:?}: {source}{}", nofile_advice(source)),
        _ => err.to_string(),
    }
}

/// The open-file limits and what to change (Unix).
#[cfg(unix)]
fn nofile_advice(source: &std::io::Error) -> String {
    use rustix::process::{getrlimit, Resource};
    // ENFILE: the whole system's table is full, not this process's share.
    if source.raw_os_error() == Some(23) {
        return " (the system's open-file table is full: see `sysctl fs.file-max`; \
                nothing was left running)"
            .to_string();
    }
    let lim = getrlimit(Resource::Nofile);
    let show = |v: Option<u64>| v.map_or("unlimited".to_string(), |v| v.to_string());
    let raise = match (lim.current, lim.maximum) {
        (Some(soft), Some(hard)) if soft < hard => {
            format!("raise it with `ulimit -n {hard}` in the shell that runs corral")
        }
        (Some(soft), None) => {
            format!("raise it with `ulimit -n N` (N above {soft}) in the shell that runs corral")
        }
        _ => "the hard limit is reached too: raise it as root (`ulimit -Hn`, \
              limits.conf, or `LimitNOFILE=` for a service), then `ulimit -n`"
            .to_string(),
    };
    format!(
        " (open-file limit: soft {}, hard {}; every running command holds descriptors until \
         it ends; {raise}; nothing was left running)",
        show(lim.current),
        show(lim.maximum)
    )
}

#[cfg(not(unix))]
fn nofile_advice(_: &std::io::Error) -> String {
    String::new()
}
