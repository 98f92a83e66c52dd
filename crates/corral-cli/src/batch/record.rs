//! What is kept about a finished run of a batch: the record the executor
//! makes and the events, the display and the reporters read. A leaf above
//! `classify`.

use std::time::Duration;

use corral::document::RunReport;
use serde_json::Value;

use super::classify::Status;

/// Everything kept about a finished run.
#[derive(Clone)]
pub struct RunRecord {
    /// Index in the plan.
    pub job: usize,
    pub task: usize,
    pub run: u32,
    pub status: Status,
    pub reason: Option<String>,
    pub result_code: Option<i64>,
    pub result_event: Option<Value>,
    /// When it started, from the batch's start.
    pub started: Duration,
    /// Spawn to the end of cleanup (or to the spawn error).
    pub wall: Duration,
    /// Cancelled because the batch stopped (fail-fast or a signal).
    pub cancelled_by_stop: bool,
    /// The `corral run --report` object of the attempt.
    pub report: RunReport,
    /// Kept output (head and tail), lossily as text.
    pub stdout: String,
    pub stderr: String,
    /// 0 for the first attempt.
    pub attempt: u32,
    /// Earlier attempts that failed or errored (oldest first).
    pub attempts: Vec<RunRecord>,
    /// Passed after a failed or errored attempt.
    pub flaky: bool,
    /// Would another attempt be allowed by the rules (not by the count)?
    pub retryable: bool,
    /// Where `--output-dir` put the full streams.
    pub stdout_file: Option<String>,
    pub stderr_file: Option<String>,
}
