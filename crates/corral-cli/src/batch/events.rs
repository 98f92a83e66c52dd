//! The batch's typed event stream: what the executor says while the plan
//! runs (each attempt started and finished, a job skipped), and the end of
//! the run (the report document and the text that goes with it). The
//! executor sends the run-time events through a channel and knows no
//! reporter; the driver hands every event to each reporter in turn
//! (`reporter`), and `corral merge` sends a merged report's `RunFinished`
//! to the same end-of-run reporters.

use std::time::Duration;

use super::record::RunRecord;
use super::report::BatchDoc;

/// One event of a batch.
pub enum BatchEvent {
    /// An attempt of a job starts (`at`: from the batch's start).
    AttemptStarted {
        job: usize,
        attempt: u32,
        at: Duration,
    },
    /// An attempt ended. `will_retry`: another attempt of the job follows;
    /// otherwise this is the job's final record, with its earlier attempts.
    AttemptFinished {
        record: Box<RunRecord>,
        will_retry: bool,
    },
    /// The batch stopped before this job could start; nothing ran.
    JobSkipped { job: usize },
    /// The run is over (or a merged report is ready).
    RunFinished(Box<RunEnd>),
}

/// The end of a batch (or of a merge): what the end-of-run reporters
/// write.
pub struct RunEnd {
    /// The report document, its per-task table and totals filled in.
    pub doc: BatchDoc,
    /// The wall time the table shows.
    pub wall: Duration,
    /// Lines printed after the table (why the batch stopped, runs that
    /// were not crash-safe, the shard, the merged shards).
    pub notes: String,
    /// The JUnit report's title (the manifest's path).
    pub title: String,
}
