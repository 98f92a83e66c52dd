//! Exit codes, in one place (coreutils `timeout` conventions plus 123).

use corral::{Error, Outcome, Report, RootStatus, SpawnErrorKind};

pub const OUTPUT_LIMIT: i32 = 122;
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
    if !report.cleanup_errors.is_empty() {
        return CORRAL_FAILED;
    }
    if let (Some(sig), Outcome::Cancelled) = (received, report.outcome) {
        return 128 + sig;
    }
    if preserve_status
        && matches!(
            report.outcome,
            Outcome::TimedOut | Outcome::OutputHeld | Outcome::OutputLimit
        )
    {
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
        Outcome::OutputLimit => OUTPUT_LIMIT,
        // Cancelled, and any outcome a later corral adds: corral's failure.
        _ => CORRAL_FAILED,
    }
}

/// The exit code of a run that timed out although its outcome is not
/// `TimedOut` (a SIGALRM received, or the program exited after the silent
/// deadline of `-s 0`): 124, or with `preserve_status` the program's own.
pub fn for_timed_out(report: &Report, preserve_status: bool) -> i32 {
    if preserve_status {
        if let Some(c) = report.root.and_then(RootStatus::code) {
            return c;
        }
        if let Some(s) = report.root.and_then(RootStatus::signal) {
            return 128 + s.as_raw();
        }
    }
    TIMED_OUT
}

/// How the `timeout` personality ends: an exit status, or the signal the
/// command died of, raised on itself (as GNU timeout does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gnu {
    Code(i32),
    Raise(corral::Signal),
}

/// GNU timeout's status: 124 when timed out (the command's own with
/// `--preserve-status`; 137 whenever SIGKILL ended it after the timeout);
/// otherwise the command's status, or its fatal signal raised again.
/// corral's own failures (cleanup) are 125.
pub fn for_gnu(report: &Report, timed_out: bool, preserve_status: bool) -> Gnu {
    if !report.cleanup_errors.is_empty() {
        return Gnu::Code(CORRAL_FAILED);
    }
    let Some(root) = report.root else {
        return Gnu::Code(CORRAL_FAILED);
    };
    match (root.code(), root.signal()) {
        (_, Some(s)) if timed_out && s == corral::Signal::KILL => Gnu::Code(128 + s.as_raw()),
        _ if timed_out && !preserve_status => Gnu::Code(TIMED_OUT),
        (Some(c), _) => Gnu::Code(c),
        (_, Some(s)) if timed_out => Gnu::Code(128 + s.as_raw()),
        (_, Some(s)) => Gnu::Raise(s),
        _ => Gnu::Code(CORRAL_FAILED),
    }
}

/// Ends this process with `sig`, as the command ended (core dumps off, the
/// handler reset, the signal unblocked); returns only when the signal does
/// not end a process (the caller then exits 128+N).
#[cfg(unix)]
pub fn raise(sig: corral::Signal) {
    let n = sig.as_raw();
    // SAFETY: plain libc calls on this process: no core file for a signal
    // that is only passed on (setrlimit), the default action restored for
    // `n` (no handler of ours runs), `n` unblocked in this thread, raised.
    unsafe {
        let none = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        libc::setrlimit(libc::RLIMIT_CORE, &none);
        libc::signal(n, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, n);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(n);
    }
}

#[cfg(not(unix))]
pub fn raise(_sig: corral::Signal) {}

/// GNU timeout's message for a run that could not start.
pub fn gnu_error_message(err: &Error, command: &str) -> String {
    match err {
        Error::Spawn { source, .. } => {
            let text = source.to_string();
            let text = match text.find(" (os error") {
                Some(i) => &text[..i],
                None => &text,
            };
            format!(
                "failed to run command {}: {text}",
                crate::text::quote(command)
            )
        }
        _ => err.full_message(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use corral::{Mechanism, Signal};

    fn report(outcome: Outcome, root: RootStatus) -> Report {
        let mut r = Report::synthetic(outcome, Mechanism::ProcessGroup);
        r.root = Some(root);
        r
    }

    #[test]
    fn gnu_statuses() {
        let term = RootStatus::Signaled(Signal::TERM);
        let kill = RootStatus::Signaled(Signal::KILL);
        let t = |root, timed_out, p| for_gnu(&report(Outcome::TimedOut, root), timed_out, p);
        assert_eq!(t(term, true, false), Gnu::Code(124));
        assert_eq!(t(term, true, true), Gnu::Code(143));
        // SIGKILL after the timeout: 137, with or without -p.
        assert_eq!(t(kill, true, false), Gnu::Code(137));
        assert_eq!(t(kill, true, true), Gnu::Code(137));
        // Exited after the timeout (it handled the signal, or -s 0).
        assert_eq!(t(RootStatus::Exited(3), true, false), Gnu::Code(124));
        assert_eq!(t(RootStatus::Exited(3), true, true), Gnu::Code(3));
        // Not timed out: the command's status, or its signal raised again.
        let e = |o, root| for_gnu(&report(o, root), false, false);
        assert_eq!(e(Outcome::Exited(2), RootStatus::Exited(2)), Gnu::Code(2));
        assert_eq!(
            e(
                Outcome::Signaled(Signal::INT),
                RootStatus::Signaled(Signal::INT)
            ),
            Gnu::Raise(Signal::INT)
        );
        // A signal received and passed on: the command's own status.
        assert_eq!(e(Outcome::Cancelled, RootStatus::Exited(42)), Gnu::Code(42));
        assert_eq!(e(Outcome::Cancelled, term), Gnu::Raise(Signal::TERM));
        // Output held past the wait delay: the command's status.
        assert_eq!(e(Outcome::OutputHeld, RootStatus::Exited(0)), Gnu::Code(0));
        // No root status (it never ran): corral's failure.
        let r = Report::synthetic(Outcome::Cancelled, Mechanism::ProcessGroup);
        assert_eq!(for_gnu(&r, false, false), Gnu::Code(125));
    }

    #[test]
    fn corral_run_timed_out_late() {
        let r = report(Outcome::Exited(3), RootStatus::Exited(3));
        assert_eq!(for_timed_out(&r, false), 124);
        assert_eq!(for_timed_out(&r, true), 3);
        let r = report(Outcome::Cancelled, RootStatus::Signaled(Signal::KILL));
        assert_eq!(for_timed_out(&r, true), 137);
    }

    #[test]
    fn any_failed_cleanup_step_is_corrals_failure() {
        let mut r = report(Outcome::Exited(0), RootStatus::Exited(0));
        assert_eq!(for_report(&r, None), 0);
        r.cleanup_errors = vec![
            corral::CleanupError::Survivors { pids: vec![7] },
            corral::CleanupError::CrashSafetyLost { why: "gone".into() },
        ];
        assert_eq!(for_report(&r, None), 125);
        assert_eq!(for_run(&r, Some(15), true), 125);
        assert_eq!(for_gnu(&r, false, false), Gnu::Code(125));
        r.cleanup_errors.remove(0);
        assert_eq!(for_report(&r, None), 125);
    }
}
