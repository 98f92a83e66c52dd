//! What the user sees while the batch runs (on stderr): a live bar on a
//! terminal, one line per finished run on a pipe; and the summary table at
//! the end.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::classify::{label, Status};
use super::error::BatchError;
use super::events::BatchEvent;
use super::exec::{Batch, RunRecord};
use super::reporter::Reporter;

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

pub fn secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 10.0 {
        format!("{s:.2}s")
    } else if s < 600.0 {
        format!("{s:.1}s")
    } else {
        format!("{}m{:02}s", d.as_secs() / 60, d.as_secs() % 60)
    }
}

/// Per-task numbers for the summary and the reports.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskSummary {
    pub name: String,
    pub runs: usize,
    pub passed: usize,
    pub failed: usize,
    pub errors: usize,
    pub not_run: usize,
    /// Passed after a failed or errored attempt (counted in `passed`).
    pub flaky: usize,
    pub wall_ms: Option<WallStats>,
    /// The tree's CPU time (user + system) per run, when measured (cgroup).
    pub cpu_ms: Option<WallStats>,
    /// The tree's peak memory per run in bytes, when measured (cgroup).
    pub memory_peak: Option<UsageStats>,
}

/// Statistics of one quantity over a task's runs, in milliseconds.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WallStats {
    pub min: f64,
    pub median: f64,
    pub p95: f64,
    pub max: f64,
    pub mean: f64,
    /// Sample standard deviation (n - 1); 0 for a single run.
    pub stddev: f64,
}

#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageStats {
    pub mean: u64,
    pub max: u64,
}

/// The nearest-rank percentile `p` (0..=100) of sorted values.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let n = sorted.len();
    let rank = ((p / 100.0) * n as f64).ceil() as usize;
    sorted[rank.clamp(1, n) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<Duration> = (1..=20).map(Duration::from_secs).collect();
        assert_eq!(percentile(&v, 50.0), Duration::from_secs(10));
        assert_eq!(percentile(&v, 95.0), Duration::from_secs(19));
        assert_eq!(percentile(&v[..1], 95.0), Duration::from_secs(1));
        assert_eq!(percentile(&v[..2], 50.0), Duration::from_secs(1));
    }
}
