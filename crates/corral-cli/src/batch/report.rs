//! The batch report as data: one typed document ([`BatchDoc`]) built by
//! `corral batch` and rebuilt by `corral merge`, and everything derived
//! from it (the per-task table, the exit code, JUnit and Markdown), so a
//! merged report and an unsharded one are made by the same code.
//!
//! The document: `format_version`, `manifest`, `manifest_fingerprint`,
//! `partition` (`{index, count}` or null), `merged_from` (a merged report
//! only), `task_filters`, `plan` (every task of the selection with its
//! measured `runs` and `warmup` count, over all shards), `exit_code`,
//! `stopped`, `received_signal`, `duration_ms`, `totals`, `tasks`, `runs`
//! (each a [`BatchRun`]: the batch's fields and the run's report),
//! `not_run`, `warmup_runs`. Read back (merge), an unknown or missing key
//! anywhere is an error.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Duration;

use corral::document::RunReport;
use serde::{Deserialize, Serialize};

use super::classify::Status;
use super::summary::{percentile, secs, TaskSummary, UsageStats, WallStats};
use super::{ALL_PASSED, SOME_ERRORED, SOME_FAILED};

/// One run (or an earlier attempt) of a `corral batch --report`: the
/// batch's fields, then every field of the run's `RunReport`, then the
/// kept output. Read back, every field must be there and no other.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchRun {
    /// The task's name.
    pub task: String,
    /// The run's index within its task (from 0).
    pub run: u32,
    /// A warmup run (not measured, not a test case).
    pub warmup: bool,
    /// The shard (1-based) the partition rule gives this run.
    pub shard: u32,
    /// The run's verdict.
    pub status: Status,
    /// Why it is not `passed`, in words.
    pub reason: Option<String>,
    /// The code the program's result event gave, when the task reads one.
    pub result_code: Option<i64>,
    /// The program's result event (a JSON object it printed), when the task reads one.
    pub result_event: Option<serde_json::Value>,
    /// Cancelled because the batch stopped (fail-fast or a signal).
    pub cancelled_by_stop: bool,
    /// When it started, in milliseconds from the batch's start.
    pub started_ms: f64,
    /// From the spawn to the end of cleanup (or to the spawn error), in milliseconds.
    pub wall_ms: f64,
    /// The attempt (0 for the first).
    pub attempt: u32,
    /// Passed after a failed or errored attempt.
    pub flaky: bool,
    /// The earlier attempts that failed or errored, oldest first.
    pub attempts: Vec<BatchRun>,
    /// Where `--output-dir` put the whole stdout.
    pub stdout_file: Option<String>,
    /// Where `--output-dir` put the whole stderr.
    pub stderr_file: Option<String>,
    /// The run's report.
    #[serde(flatten)]
    pub report: RunReport,
    /// The kept output of stdout (head and tail), lossily as text.
    pub stdout_tail: String,
    /// The kept output of stderr (head and tail), lossily as text.
    pub stderr_tail: String,
}

impl BatchRun {
    /// `name#run` (`name#wN` for a warmup run).
    pub fn key(&self) -> String {
        let w = if self.warmup { "w" } else { "" };
        format!("{}#{w}{}", self.task, self.run)
    }
}

/// The version of the batch report's format (the run report's,
/// [`corral::document::FORMAT_VERSION`]).
pub const FORMAT_VERSION: u32 = corral::document::FORMAT_VERSION;

/// A `corral batch --report` (or `corral merge --report`) document.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchDoc {
    /// [`FORMAT_VERSION`] of the corral that wrote it.
    pub format_version: u32,
    /// The manifest's path, as given.
    pub manifest: String,
    /// The manifest's fingerprint (16 hex digits).
    pub manifest_fingerprint: String,
    /// The shard this report is (null: the whole selection, or merged).
    pub partition: Option<Part>,
    /// The shard reports a merged report was made of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merged_from: Option<Vec<MergedFrom>>,
    /// The `--task` patterns.
    pub task_filters: Vec<String>,
    /// Every selected task, with its runs and warmups over all shards.
    pub plan: Vec<PlanEntry>,
    /// corral's exit code for the batch.
    pub exit_code: i32,
    /// Why the batch stopped early, when it did.
    pub stopped: Option<String>,
    /// The signal that stopped the batch, when one did.
    pub received_signal: Option<i32>,
    /// The batch's wall time, in milliseconds.
    pub duration_ms: f64,
    /// Totals of `tasks`.
    pub totals: Totals,
    /// The per-task table.
    pub tasks: Vec<TaskSummary>,
    /// The measured runs.
    pub runs: Vec<BatchRun>,
    /// The planned runs that never started.
    pub not_run: Vec<NotRun>,
    /// The warmup runs.
    pub warmup_runs: Vec<BatchRun>,
}

/// One planned task of a report's `plan`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PlanEntry {
    pub task: String,
    pub runs: u32,
    pub warmup: u32,
}

/// A shard's `partition`: the K-th (1-based) of N.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Part {
    pub index: u32,
    pub count: u32,
}

/// One shard report of a merged report.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MergedFrom {
    pub file: String,
    pub partition: Option<Part>,
    pub exit_code: i32,
    pub duration_ms: f64,
}

/// A planned run that never started.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NotRun {
    pub task: String,
    pub run: u32,
    pub shard: u32,
}

impl NotRun {
    /// `name#run`.
    pub fn key(&self) -> String {
        format!("{}#{}", self.task, self.run)
    }
}

/// Totals of a report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Totals {
    pub runs: usize,
    pub passed: usize,
    pub failed: usize,
    pub errors: usize,
    pub not_run: usize,
    pub flaky: usize,
}

/// A time in milliseconds as a `Duration`, never panicking: NaN and
/// negative times are zero, times too large for a `Duration` are its
/// largest (merge refuses such reports; this is the writers' own guard).
pub fn duration_of_ms(ms: f64) -> Duration {
    if ms.is_nan() || ms <= 0.0 {
        return Duration::ZERO;
    }
    Duration::try_from_secs_f64(ms / 1e3).unwrap_or(Duration::MAX)
}

fn round_ms(x: f64) -> f64 {
    (x * 1e3).round() / 1e3
}

/// The per-task table: for each planned task (name, runs planned in this
/// report), counts from `runs`, wall time statistics, and CPU time and
/// peak memory when the runs measured them (cgroup tier).
pub fn summarize(planned: &[(String, usize)], runs: &[BatchRun]) -> Vec<TaskSummary> {
    let index: HashMap<&str, usize> = planned
        .iter()
        .enumerate()
        .map(|(i, (n, _))| (n.as_str(), i))
        .collect();
    let mut out: Vec<TaskSummary> = planned
        .iter()
        .map(|(name, runs)| TaskSummary {
            name: name.clone(),
            runs: *runs,
            ..TaskSummary::default()
        })
        .collect();
    let mut walls: Vec<Vec<f64>> = vec![Vec::new(); planned.len()];
    let mut cpus: Vec<Vec<f64>> = vec![Vec::new(); planned.len()];
    let mut mems: Vec<Vec<u64>> = vec![Vec::new(); planned.len()];
    for r in runs {
        let Some(&i) = index.get(r.task.as_str()) else {
            continue;
        };
        let s = &mut out[i];
        match r.status {
            Status::Passed => s.passed += 1,
            Status::Failed => s.failed += 1,
            Status::Error => s.errors += 1,
        }
        if r.flaky {
            s.flaky += 1;
        }
        walls[i].push(r.wall_ms);
        if let Some(u) = &r.report.usage {
            if let (Some(a), Some(b)) = (u.cpu_user_ms, u.cpu_system_ms) {
                cpus[i].push(a + b);
            }
            if let Some(m) = u.memory_peak {
                mems[i].push(m);
            }
        }
    }
    for (i, s) in out.iter_mut().enumerate() {
        s.not_run = s.runs.saturating_sub(s.passed + s.failed + s.errors);
        s.wall_ms = stats(&mut walls[i]);
        s.cpu_ms = stats(&mut cpus[i]);
        if !mems[i].is_empty() {
            let n = mems[i].len() as f64;
            s.memory_peak = Some(UsageStats {
                mean: (mems[i].iter().map(|&m| m as f64).sum::<f64>() / n).round() as u64,
                max: mems[i].iter().copied().max().unwrap_or(0),
            });
        }
    }
    out
}

/// min, median, p95 (nearest rank), max, mean and standard deviation
/// (sample, n-1; 0 for one value).
fn stats(v: &mut [f64]) -> Option<WallStats> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let d: Vec<Duration> = v.iter().map(|&x| duration_of_ms(x)).collect();
    let ms = |d: Duration| round_ms(d.as_secs_f64() * 1e3);
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = if v.len() > 1 {
        v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)
    } else {
        0.0
    };
    Some(WallStats {
        min: v[0],
        median: ms(percentile(&d, 50.0)),
        p95: ms(percentile(&d, 95.0)),
        max: v[v.len() - 1],
        mean: round_ms(mean),
        stddev: round_ms(var.sqrt()),
    })
}

/// Totals of a report.
pub fn totals(summary: &[TaskSummary]) -> Totals {
    let sum = |f: fn(&TaskSummary) -> usize| summary.iter().map(f).sum::<usize>();
    Totals {
        runs: sum(|s| s.runs),
        passed: sum(|s| s.passed),
        failed: sum(|s| s.failed),
        errors: sum(|s| s.errors),
        not_run: sum(|s| s.not_run),
        flaky: sum(|s| s.flaky),
    }
}

/// 0 every run passed; 1 a run failed and none errored; 2 a run errored.
/// Runs cancelled by a stop are errors in every count but do not decide
/// the exit code (the run that stopped the batch does). A batch stopped by
/// a signal with runs cancelled or not run is 2; so is one with runs not
/// run for any other reason.
pub fn exit_code(runs: &[BatchRun], not_run: usize, signalled: bool) -> i32 {
    let cut_short = not_run > 0 || runs.iter().any(|r| r.cancelled_by_stop);
    if signalled && cut_short {
        return SOME_ERRORED;
    }
    let mut code = ALL_PASSED;
    for r in runs.iter().filter(|r| !r.cancelled_by_stop) {
        match r.status {
            Status::Passed => {}
            Status::Failed => code = SOME_FAILED,
            Status::Error => return SOME_ERRORED,
        }
    }
    if code == ALL_PASSED && cut_short {
        return SOME_ERRORED;
    }
    code
}

/// The summary table printed at the end.
pub fn table(summary: &[TaskSummary], wall: Duration) -> String {
    let width = summary
        .iter()
        .map(|s| s.name.chars().count())
        .max()
        .unwrap_or(0)
        .clamp(5, 40);
    let mut t = String::new();
    let _ = writeln!(
        t,
        "{:<width$}  {:>5} {:>6} {:>6} {:>6} {:>7}  {:>8} {:>8} {:>8} {:>17}",
        "task", "runs", "passed", "failed", "errors", "not run", "min", "median", "p95", "mean ± σ"
    );
    let mut tot = [0usize; 5];
    for s in summary {
        let (mn, md, p95, mean) = match s.wall_ms {
            Some(w) => (
                ms_str(w.min),
                ms_str(w.median),
                ms_str(w.p95),
                format!("{} ± {}", ms_str(w.mean), ms_str(w.stddev)),
            ),
            None => ("-".into(), "-".into(), "-".into(), "-".into()),
        };
        let name: String = s.name.chars().take(width).collect();
        let _ = write!(
            t,
            "{name:<width$}  {:>5} {:>6} {:>6} {:>6} {:>7}  {mn:>8} {md:>8} {p95:>8} {mean:>17}",
            s.runs, s.passed, s.failed, s.errors, s.not_run
        );
        if s.flaky > 0 {
            let _ = write!(t, "  ({} flaky)", s.flaky);
        }
        t.push('\n');
        for (a, b) in tot
            .iter_mut()
            .zip([s.runs, s.passed, s.failed, s.errors, s.not_run])
        {
            *a += b;
        }
    }
    let _ = writeln!(
        t,
        "{:<width$}  {:>5} {:>6} {:>6} {:>6} {:>7}  wall {}",
        "total",
        tot[0],
        tot[1],
        tot[2],
        tot[3],
        tot[4],
        secs(wall)
    );
    t
}

/// Milliseconds under a second (`12.3ms`), else as the progress lines.
fn ms_str(ms: f64) -> String {
    if ms < 1000.0 {
        format!("{:.1}ms", ms.max(0.0))
    } else {
        secs(duration_of_ms(ms))
    }
}

/// The per-task table in Markdown (as hyperfine's `--export-markdown`):
/// times in milliseconds.
pub fn markdown(summary: &[TaskSummary]) -> String {
    let mut t = String::from(
        "| task | runs | passed | failed | errors | not run | mean ± σ [ms] | min [ms] | median [ms] | p95 [ms] | max [ms] | CPU mean [ms] | peak memory max [bytes] |\n\
         |:---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let f = |x: f64| format!("{x:.1}");
    for s in summary {
        let name = md_code(&s.name);
        let (mean, mn, md, p95, mx) = match s.wall_ms {
            Some(w) => (
                format!("{} ± {}", f(w.mean), f(w.stddev)),
                f(w.min),
                f(w.median),
                f(w.p95),
                f(w.max),
            ),
            None => ("-".into(), "-".into(), "-".into(), "-".into(), "-".into()),
        };
        let cpu = s.cpu_ms.map_or("-".into(), |c| f(c.mean));
        let mem = s.memory_peak.map_or("-".into(), |m| m.max.to_string());
        let _ = writeln!(
            t,
            "| {name} | {} | {} | {} | {} | {} | {mean} | {mn} | {md} | {p95} | {mx} | {cpu} | {mem} |",
            s.runs, s.passed, s.failed, s.errors, s.not_run
        );
    }
    t
}

/// A task name as a Markdown code span that stays in its table cell:
/// control characters (a newline would end the row) are shown escaped
/// (`\n`, `\u{1b}`), `|` is `\|` (GitHub's tables split cells on it even
/// in code), and the span's fence is one backtick longer than the longest
/// run of backticks in the name, padded with spaces when the name starts
/// or ends with a backtick or a space (CommonMark strips one of each).
pub fn md_code(name: &str) -> String {
    let mut body = String::new();
    for c in name.chars() {
        match c {
            '|' => body.push_str("\\|"),
            c if c.is_control() => body.extend(c.escape_debug()),
            c => body.push(c),
        }
    }
    let (mut run, mut longest) = (0, 0);
    for c in body.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    let fence = "`".repeat(longest + 1);
    let pad = if body.starts_with(['`', ' ']) || body.ends_with(['`', ' ']) {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{body}{pad}{fence}")
}

/// The planned (name, runs) of a document's `plan`.
pub fn planned(plan: &[PlanEntry]) -> Vec<(String, usize)> {
    plan.iter()
        .map(|p| (p.task.clone(), p.runs as usize))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_run_round_trips_and_refuses_unknown_or_missing_keys() {
        let run = BatchRun {
            task: "t".into(),
            run: 3,
            warmup: false,
            shard: 1,
            status: Status::Error,
            reason: Some("timed out".into()),
            result_code: None,
            result_event: Some(serde_json::json!({"type": "end", "code": 1})),
            cancelled_by_stop: false,
            started_ms: 1.0,
            wall_ms: 2.5,
            attempt: 1,
            flaky: false,
            attempts: Vec::new(),
            stdout_file: None,
            stderr_file: None,
            report: RunReport::from(&corral::Report::synthetic(
                corral::Outcome::TimedOut,
                corral::Mechanism::ProcessGroup,
            ))
            .with_command_line(None, None, 124),
            stdout_tail: "out".into(),
            stderr_tail: String::new(),
        };
        let mut outer = run.clone();
        outer.attempts.push(run.clone());
        // The batch's fields, the report's, the kept output, in order.
        let text = serde_json::to_string(&outer).unwrap();
        assert!(text.starts_with("{\"task\":\"t\",\"run\":3,"), "{text}");
        assert!(
            text.ends_with(",\"stdout_tail\":\"out\",\"stderr_tail\":\"\"}"),
            "{text}"
        );
        let v = serde_json::to_value(&outer).unwrap();
        let back: BatchRun = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(back, outer);
        assert_eq!(back.key(), "t#3");
        // A misspelt key is refused, naming it, at the top and nested.
        for (at, from, to) in [
            (None, "wall_ms", "wal_ms"),
            (None, "crash_safe", "crash_safes"),
            (Some(0), "outcome", "outcom"),
        ] {
            let mut bad = v.clone();
            let o = match at {
                None => bad.as_object_mut().unwrap(),
                Some(i) => bad["attempts"][i].as_object_mut().unwrap(),
            };
            let x = o.remove(from).unwrap();
            o.insert(to.into(), x);
            let e = serde_json::from_value::<BatchRun>(bad).unwrap_err();
            assert!(
                e.to_string().contains(to) || e.to_string().contains(from),
                "{e}"
            );
        }
        // An extra key alone is refused too (no silent skipping).
        let mut bad = v.clone();
        bad["surprise"] = true.into();
        let e = serde_json::from_value::<BatchRun>(bad).unwrap_err();
        assert!(e.to_string().contains("surprise"), "{e}");
        let mut bad = serde_json::to_value(&run.report).unwrap();
        bad["surprise"] = true.into();
        let e = serde_json::from_value::<RunReport>(bad).unwrap_err();
        assert!(e.to_string().contains("surprise"), "{e}");
    }
}
