//! The numbers of a batch, per task (runs, verdicts, wall and CPU time,
//! memory) and how a duration is shown: what the summary table, the
//! report and the merge compute and print. A leaf.

use std::time::Duration;

/// A duration as the table shows it: `0.12s`, `42.0s`, `12m05s`.
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
