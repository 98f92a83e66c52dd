//! How one run is judged: passed, failed or error, and nothing else.
//!
//! The gate comes first: only a clean lifecycle ([`Report::exit_code`] is
//! `Some`) can produce a pass or a fail. Everything else (timeout, cancel,
//! output held, a signal corral did not send, spawn, containment or cleanup
//! failure) is an error, and the result event is then never read, so a
//! `run_end 0` printed before a timeout or before output was held open can
//! never become a pass.
//!
//! After a clean lifecycle:
//! * without `result_event`: the exit code equals `expect_exit` → passed,
//!   else failed;
//! * with `result_event`: the last matching event is the result. None, or
//!   one whose field is not an integer → error (the run did not say how it
//!   went). A nonzero result → failed. A zero result passes only if the
//!   process also exited with `expect_exit` (default 0): a program that
//!   reports success and then exits 1 has not passed → failed.

use serde_json::Value;

use corral::{Error, Outcome, Report};

use super::manifest::EventRule;

/// The one thing a run ended as (the report's `status`).
/// The verdict of one batch run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The run passed (by its task's rules).
    Passed,
    /// The run failed (by its task's rules).
    Failed,
    /// The run errored (timed out, was killed, did not start, ...).
    Error,
}

/// The status as the progress lines show it.
pub fn label(s: Status) -> &'static str {
    match s {
        Status::Passed => "PASS",
        Status::Failed => "FAIL",
        Status::Error => "ERROR",
    }
}

/// A run's classification and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub status: Status,
    /// Why it did not pass (None for a pass).
    pub reason: Option<String>,
    /// The code read from the result event, when one was read.
    pub result_code: Option<i64>,
}

impl Verdict {
    fn error(reason: String) -> Verdict {
        Verdict {
            status: Status::Error,
            reason: Some(reason),
            result_code: None,
        }
    }
}

/// Longest line examined for a result event.
pub const MAX_EVENT_LINE: usize = 4 << 20;

/// Watches stdout lines and keeps only the last result event of the wanted
/// type (memory: one parsed line of at most [`MAX_EVENT_LINE`] bytes).
#[derive(Debug, Default)]
pub struct EventScanner {
    ty: String,
    last: Option<Value>,
    /// The previous piece was cut at the line limit: the next piece is the
    /// rest of an overlong line, never an event of its own.
    continuation: bool,
    /// Lines longer than the limit (never read as events).
    pub overlong: u64,
}

impl EventScanner {
    pub fn new(ty: &str) -> EventScanner {
        EventScanner {
            ty: ty.to_owned(),
            ..EventScanner::default()
        }
    }

    /// One line (or, past the limit, one piece of a line) of stdout.
    pub fn line(&mut self, line: &[u8]) {
        let was_continuation = std::mem::replace(&mut self.continuation, false);
        if line.len() >= MAX_EVENT_LINE {
            // The splitter cuts lines at the limit: this piece and the next
            // belong to a line over the limit.
            self.continuation = true;
            if !was_continuation {
                self.overlong += 1;
            }
            return;
        }
        if was_continuation || line.first() != Some(&b'{') {
            return;
        }
        let Ok(v) = serde_json::from_slice::<Value>(line) else {
            return;
        };
        if v.get("type").and_then(Value::as_str) == Some(self.ty.as_str()) {
            self.last = Some(v);
        }
    }

    /// The last matching event.
    pub fn take(&mut self) -> Option<Value> {
        self.last.take()
    }
}

/// Why the batch cancelled its runs, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    /// `--fail-fast`: this run (task name and index) did not pass.
    FailFast(String),
    /// corral received this signal (Unix; on Windows a console Ctrl-C ends
    /// corral and the job objects end the trees).
    #[cfg_attr(not(unix), allow(dead_code))]
    Signal(i32),
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StopReason::FailFast(run) => write!(f, "--fail-fast after {run}"),
            StopReason::Signal(s) => write!(f, "corral received signal {s}"),
        }
    }
}

/// Classifies one run. `event` is what the scanner kept (only looked at
/// after a clean lifecycle); `stop` is why the batch cancelled, if it did.
pub fn classify(
    result: &Result<Report, Error>,
    expect_exit: i32,
    rule: Option<&EventRule>,
    event: Option<&Value>,
    stop: Option<&StopReason>,
) -> Verdict {
    let report = match result {
        Ok(r) => r,
        Err(e) => return Verdict::error(e.full_message()),
    };
    // The gate: anything but a clean lifecycle is an error.
    let Some(code) = report.exit_code() else {
        let why = match (report.error_message(), report.outcome) {
            (Some(e), _) if !report.cleanup_errors.is_empty() => format!("cleanup failed: {e}"),
            (_, Outcome::TimedOut) => match report.timeout_kind {
                Some(corral::TimeoutKind::Idle) => {
                    "timed out (no output for the idle timeout)".into()
                }
                _ => "timed out".into(),
            },
            (_, Outcome::OutputLimit) => format!(
                "output passed the limit ({} bytes written)",
                report.stdout.total_bytes() + report.stderr.total_bytes()
            ),
            (_, Outcome::Cancelled) => match stop {
                Some(s) => format!("cancelled ({s})"),
                None => "cancelled".into(),
            },
            (_, Outcome::OutputHeld) => format!(
                "output held open past the wait delay by a descendant ({} killed)",
                report.leftovers.killed
            ),
            (_, Outcome::Signaled(s)) => {
                format!("killed by signal {s} (not sent by corral)")
            }
            (_, _) => "not a clean exit".into(),
        };
        return Verdict::error(why);
    };
    let Some(rule) = rule else {
        return if code == expect_exit {
            Verdict {
                status: Status::Passed,
                reason: None,
                result_code: None,
            }
        } else {
            Verdict {
                status: Status::Failed,
                reason: Some(format!("exit {code} (expected {expect_exit})")),
                result_code: None,
            }
        };
    };
    let Some(ev) = event else {
        return Verdict::error(format!("no {:?} event on stdout (exit {code})", rule.ty));
    };
    let Some(result_code) = ev.get(&rule.field).and_then(Value::as_i64) else {
        let got = ev
            .get(&rule.field)
            .map_or_else(|| "missing".into(), |v| v.to_string());
        return Verdict::error(format!(
            "{:?} event has no integer {:?} field ({got})",
            rule.ty, rule.field
        ));
    };
    if result_code != 0 {
        return Verdict {
            status: Status::Failed,
            reason: Some(format!(
                "{} {} {result_code} (exit {code})",
                rule.ty, rule.field
            )),
            result_code: Some(result_code),
        };
    }
    if code != expect_exit {
        return Verdict {
            status: Status::Failed,
            reason: Some(format!(
                "{} {} 0 but exit {code} (expected {expect_exit})",
                rule.ty, rule.field
            )),
            result_code: Some(0),
        };
    }
    Verdict {
        status: Status::Passed,
        reason: None,
        result_code: Some(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use corral::{CleanupError, Mechanism};

    fn report(outcome: Outcome) -> Result<Report, Error> {
        let mut r = Report::synthetic(outcome, Mechanism::ProcessGroup);
        r.pid = 1;
        Ok(r)
    }

    fn rule() -> EventRule {
        EventRule {
            ty: "run_end".into(),
            field: "exitCode".into(),
        }
    }

    fn ev(code: i64) -> Value {
        serde_json::json!({"type": "run_end", "exitCode": code})
    }

    #[test]
    fn exit_codes_without_events() {
        let c = |o, want| classify(&report(o), want, None, None, None).status;
        assert_eq!(c(Outcome::Exited(0), 0), Status::Passed);
        assert_eq!(c(Outcome::Exited(3), 0), Status::Failed);
        assert_eq!(c(Outcome::Exited(3), 3), Status::Passed);
        assert_eq!(c(Outcome::Exited(0), 3), Status::Failed);
        for o in [
            Outcome::TimedOut,
            Outcome::Cancelled,
            Outcome::OutputHeld,
            Outcome::Signaled(corral::Signal::KILL),
        ] {
            assert_eq!(c(o, 0), Status::Error, "{o:?}");
        }
        let mut r = report(Outcome::Exited(0));
        r.as_mut().unwrap().cleanup_errors = vec![CleanupError::Survivors { pids: vec![9] }];
        assert_eq!(classify(&r, 0, None, None, None).status, Status::Error);
        // Two failed steps: the reason names both, in order.
        r.as_mut()
            .unwrap()
            .cleanup_errors
            .push(CleanupError::CrashSafetyLost {
                why: "the keeper died".into(),
            });
        let v = classify(&r, 0, None, None, None);
        assert_eq!(v.status, Status::Error);
        let why = v.reason.expect("a reason");
        let (a, b) = (
            why.find("survived SIGKILL").expect("the first step"),
            why.find("the keeper died").expect("the second step"),
        );
        assert!(why.starts_with("cleanup failed: ") && a < b, "{why}");
        let e: Result<Report, Error> = Err(Error::CancelledBeforeSpawn);
        assert_eq!(classify(&e, 0, None, None, None).status, Status::Error);
    }

    #[test]
    fn events_are_read_only_after_a_clean_lifecycle() {
        let r = rule();
        let zero = ev(0);
        for o in [Outcome::TimedOut, Outcome::OutputHeld, Outcome::Cancelled] {
            let v = classify(&report(o), 0, Some(&r), Some(&zero), None);
            assert_eq!(v.status, Status::Error, "{o:?}");
            assert_eq!(v.result_code, None);
        }
        let v = classify(&report(Outcome::Exited(0)), 0, Some(&r), Some(&zero), None);
        assert_eq!((v.status, v.result_code), (Status::Passed, Some(0)));
        let one = ev(1);
        let v = classify(&report(Outcome::Exited(1)), 0, Some(&r), Some(&one), None);
        assert_eq!((v.status, v.result_code), (Status::Failed, Some(1)));
        let v = classify(&report(Outcome::Exited(0)), 0, Some(&r), Some(&one), None);
        assert_eq!(v.status, Status::Failed, "nonzero event wins over exit 0");
        let v = classify(&report(Outcome::Exited(2)), 0, Some(&r), Some(&zero), None);
        assert_eq!(v.status, Status::Failed, "event 0 but exit 2");
        let v = classify(&report(Outcome::Exited(0)), 0, Some(&r), None, None);
        assert_eq!(v.status, Status::Error, "missing event");
        let bad = serde_json::json!({"type": "run_end", "exitCode": "0"});
        let v = classify(&report(Outcome::Exited(0)), 0, Some(&r), Some(&bad), None);
        assert_eq!(v.status, Status::Error, "unparsable event");
    }

    #[test]
    fn scanner_keeps_the_last_matching_event_only() {
        let mut s = EventScanner::new("run_end");
        s.line(br#"{"type":"run_end","exitCode":1}"#);
        s.line(br#"{"type":"other","exitCode":5}"#);
        s.line(br#" {"type":"run_end","exitCode":7}"#); // does not start with {
        s.line(br#"{"type":"run_end","exitCode":0"#); // not JSON
        s.line(b"plain text");
        assert_eq!(s.take(), Some(ev(1)));
        let mut s = EventScanner::new("run_end");
        s.line(br#"{"type":"run_end","exitCode":1}"#);
        s.line(br#"{"type":"run_end","exitCode":0}"#);
        assert_eq!(s.take(), Some(ev(0)));
    }

    #[test]
    fn scanner_skips_pieces_of_overlong_lines() {
        let mut s = EventScanner::new("run_end");
        let mut long = vec![b'{'; MAX_EVENT_LINE];
        long[1] = b'x';
        s.line(&long);
        // The rest of the same line, which happens to look like an event.
        s.line(br#"{"type":"run_end","exitCode":0}"#);
        assert_eq!(s.take(), None);
        assert_eq!(s.overlong, 1);
        s.line(br#"{"type":"run_end","exitCode":0}"#);
        assert_eq!(s.take(), Some(ev(0)));
    }
}
