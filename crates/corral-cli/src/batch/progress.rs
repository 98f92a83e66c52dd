//! What the user sees while the batch runs (on stderr): a live bar on a
//! terminal, one line per finished run on a pipe; and the summary table at
//! the end.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::classify::{label, Status};
use super::error::BatchError;
use super::events::BatchEvent;
use super::exec::Batch;
use super::record::RunRecord;
use super::reporter::Reporter;
use super::summary::secs;

/// How progress is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Bar,
    Lines,
    None,
}

/// The live display: a reporter of the batch's events.
pub struct Progress {
    batch: Arc<Batch>,
    mode: Mode,
    bar: Option<ProgressBar>,
    running: HashMap<usize, Instant>,
    done: usize,
    total: usize,
    counts: [usize; 3],
}

impl Progress {
    pub fn new(mode: Mode, batch: Arc<Batch>) -> Progress {
        let total = batch.plan.len();
        let bar = (mode == Mode::Bar).then(|| {
            let pb = ProgressBar::with_draw_target(
                Some(total as u64),
                ProgressDrawTarget::stderr_with_hz(10),
            );
            pb.set_style(
                ProgressStyle::with_template(
                    "{spinner} {elapsed_precise} [{bar:25}] {pos}/{len} done  {msg}",
                )
                .expect("a valid template")
                .progress_chars("=> "),
            );
            pb
        });
        Progress {
            batch,
            mode,
            bar,
            running: HashMap::new(),
            done: 0,
            total,
            counts: [0; 3],
        }
    }

    fn started(&mut self, job: usize) {
        self.running.insert(job, Instant::now());
    }

    fn skipped(&mut self, job: usize) {
        self.running.remove(&job);
    }

    /// An attempt failed or errored and runs again.
    fn retrying(&mut self, rec: &RunRecord) {
        let line = format!("RETRY {}", run_line(&self.batch, rec));
        match (&self.bar, self.mode) {
            (Some(pb), _) => pb.println(line),
            (None, Mode::Lines) => say!("{line}"),
            _ => {}
        }
    }

    fn finished(&mut self, rec: &RunRecord) {
        self.running.remove(&rec.job);
        self.done += 1;
        self.counts[rec.status as usize] += 1;
        let line = run_line(&self.batch, rec);
        match (&self.bar, self.mode) {
            (Some(pb), _) => {
                if rec.status != Status::Passed {
                    pb.println(line);
                }
                pb.set_position(self.done as u64);
            }
            (None, Mode::Lines) => say!("{line}"),
            _ => {}
        }
    }

    /// Refreshes the bar's message: counts, running, queued, slowest.
    fn refresh(&mut self) {
        let Some(pb) = &self.bar else { return };
        let queued = self.total - self.done - self.running.len();
        let mut msg = format!(
            "{} passed, {} failed, {} errors · {} running · {} queued",
            self.counts[0],
            self.counts[1],
            self.counts[2],
            self.running.len(),
            queued
        );
        if let Some((job, at)) = self.running.iter().min_by_key(|(_, at)| **at) {
            let _ = write!(
                msg,
                " · slowest {} ({})",
                self.batch.run_name(*job),
                secs(at.elapsed())
            );
        }
        pb.set_message(msg);
    }

    /// Clears the bar (before the table is printed).
    pub fn finish(&mut self) {
        if let Some(pb) = self.bar.take() {
            pb.finish_and_clear();
        }
    }
}

impl Reporter for Progress {
    fn event(&mut self, event: &BatchEvent) -> Result<(), BatchError> {
        match event {
            BatchEvent::AttemptStarted { job, .. } => self.started(*job),
            BatchEvent::AttemptFinished {
                record,
                will_retry: true,
            } => self.retrying(record),
            BatchEvent::AttemptFinished { record, .. } => self.finished(record),
            BatchEvent::JobSkipped { job } => self.skipped(*job),
            BatchEvent::RunFinished(_) => self.finish(),
        }
        Ok(())
    }

    fn tick(&mut self) {
        self.refresh();
    }
}

/// `PASS  name#0  0.12s` / `FAIL  name#1  0.30s  exit 3 (expected 0)`.
pub fn run_line(batch: &Batch, rec: &RunRecord) -> String {
    let mut s = format!(
        "{:<5} {}  {}",
        label(rec.status),
        batch.run_name(rec.job),
        secs(rec.wall)
    );
    if rec.attempt > 0 {
        let _ = write!(s, "  (attempt {})", rec.attempt + 1);
    }
    if rec.flaky {
        s.push_str("  flaky");
    }
    if batch.plan[rec.job].warmup {
        s.push_str("  (warmup, not counted)");
    }
    if let Some(r) = &rec.reason {
        let _ = write!(s, "  {r}");
    }
    if rec.status != Status::Passed {
        if let Some(last) = last_line(&rec.stderr) {
            let _ = write!(s, "  | stderr: {last}");
        }
    }
    s
}

/// The last non-blank line, cut to 120 characters.
fn last_line(text: &str) -> Option<String> {
    let l = text.lines().rev().find(|l| !l.trim().is_empty())?;
    Some(l.trim().chars().take(120).collect())
}
