//! The JSON report: one [`RunReport`] per run, of the schema in
//! docs/report-schema.json (generated from that type). A run's fields come
//! from the library's `RunReport::from(&Report)`; the command line adds what
//! only it knows: `output`, `received_signal`, `corral_exit`.

use serde::Serialize;

use corral::document::{OutcomeName, OutputPaths, RunReport, StreamPath};
use corral::{Error, Report};

/// One run's report, ready to be written.
#[derive(Serialize)]
#[serde(transparent)]
pub struct JsonReport(RunReport);

/// How one of corral's streams reached the program: `relayed` (a pipe or
/// socket: counted, holders waited for at most the wait delay) or
/// `passed_through` (a terminal or file: written directly, not counted, not
/// waited for; leftovers policy only).
fn path(relayed: bool) -> StreamPath {
    if relayed {
        StreamPath::Relayed
    } else {
        StreamPath::PassedThrough
    }
}

impl JsonReport {
    /// The report of a `corral run`: `relayed` says which of corral's
    /// streams went through corral (counted); the others were passed through
    /// to the program and their counts are null.
    pub fn from_run(r: &Report, received: Option<i32>, exit: i32, relayed: [bool; 2]) -> Self {
        let mut j = Self::from_report(r, received, exit).0;
        if !relayed[0] {
            j.stdout_bytes = None;
        }
        if !relayed[1] {
            j.stderr_bytes = None;
        }
        j.output = Some(Some(OutputPaths {
            stdout: path(relayed[0]),
            stderr: path(relayed[1]),
        }));
        JsonReport(j)
    }

    /// A report whose output was captured (every byte counted).
    pub fn from_report(r: &Report, received: Option<i32>, exit: i32) -> Self {
        let mut j = RunReport::from(r);
        if let (Some(s), corral::Outcome::Cancelled, true) =
            (received, r.outcome, r.cleanup_errors.is_empty())
        {
            j.error = Some(format!("cancelled by signal {s}"));
        }
        JsonReport(j.with_command_line(None, received, exit))
    }

    /// The report of a run that could not start.
    pub fn from_error(
        e: &Error,
        received: Option<i32>,
        exit: i32,
        elapsed: std::time::Duration,
    ) -> Self {
        let containment = match e {
            Error::Containment { mechanism, .. } => Some(*mechanism),
            _ => None,
        };
        let outcome = OutcomeName::from_name(e.outcome_name()).unwrap_or(OutcomeName::SpawnFailed);
        let j =
            RunReport::not_started(outcome, containment, elapsed, crate::text::error_message(e));
        JsonReport(j.with_command_line(None, received, exit))
    }

    /// The report as its document (batch embeds it in each run).
    pub fn into_document(self) -> RunReport {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use corral::{CleanupError, Mechanism, Outcome};

    #[test]
    fn every_failed_cleanup_step_is_in_the_json_report_in_order() {
        let mut r = Report::synthetic(Outcome::Exited(0), Mechanism::ProcessGroup);
        r.cleanup_errors = vec![
            CleanupError::Survivors { pids: vec![41, 42] },
            CleanupError::CrashSafetyLost {
                why: "the keeper died".into(),
            },
        ];
        let exit = crate::exit::for_report(&r, None);
        assert_eq!(exit, 125);
        let v = serde_json::to_value(JsonReport::from_run(&r, None, exit, [true; 2])).unwrap();
        assert_eq!(v["outcome"], "cleanup_failed");
        assert_eq!(v["corral_exit"], 125);
        assert!(v["exit_code"].is_null() || v["exit_code"] == 0, "{v}");
        let steps: Vec<&str> = v["cleanup_errors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["step"].as_str().unwrap())
            .collect();
        assert_eq!(steps, ["confirm_death", "crash_safety"], "{v}");
        assert_eq!(v["survivors"], serde_json::json!([41, 42]));
        let error = v["error"].as_str().unwrap();
        let a = error.find("survived SIGKILL").expect("the first step");
        let b = error.find("the keeper died").expect("the second step");
        assert!(a < b, "{error}");
        // A cancellation passed on by a signal says so only when cleanup was clean.
        let mut c = Report::synthetic(Outcome::Cancelled, Mechanism::ProcessGroup);
        let v = serde_json::to_value(JsonReport::from_report(&c, Some(15), 143)).unwrap();
        assert_eq!(v["error"], "cancelled by signal 15");
        c.cleanup_errors = r.cleanup_errors.clone();
        let v = serde_json::to_value(JsonReport::from_report(&c, Some(15), 125)).unwrap();
        assert!(
            v["error"].as_str().unwrap().contains("the keeper died"),
            "{v}"
        );
    }
}
