//! Command-line syntax.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use corral::{LeftoverPolicy, Signal};

/// Run commands with a deadline; contain and kill their whole process tree.
#[derive(Parser, Debug)]
#[command(name = "corral", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Cmd,
}

#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// Run one command under a deadline.
    ///
    /// Exit status: the program's own code after a clean exit; 124 timed
    /// out; 123 output held past the wait delay (holders killed); 125 corral
    /// failed (usage, containment or cleanup); 126 found but not executable;
    /// 127 not found; 128+N killed by signal N (not sent by corral) or
    /// corral received signal N and passed it on.
    Run(RunOpts),
    /// Run the tasks of a TOML manifest, many at once, and classify each run.
    ///
    /// Every run ends as exactly one of passed, failed (a clean lifecycle
    /// and the wrong exit code or a nonzero result event) or error (timeout,
    /// cancel, output held, signal, spawn, containment or cleanup failure, a
    /// result event missing or unparsable). See the README.
    ///
    /// Exit status: 0 every run passed; 1 a run failed and none errored; 2 a
    /// run errored (or the batch was interrupted); 125 bad manifest or usage.
    Batch(BatchOpts),
}

#[derive(Args, Debug)]
pub struct BatchOpts {
    /// The manifest (TOML): a `[defaults]` table and `[[task]]` tables.
    #[arg(value_name = "FILE")]
    pub manifest: PathBuf,

    /// Runs at once [default: the number of CPUs].
    #[arg(short = 'j', long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub jobs: Option<u32>,

    /// After the first failed or errored run, start nothing more and cancel
    /// what runs.
    #[arg(long)]
    pub fail_fast: bool,

    /// Write a JSON report of every run to FILE (`-` for stdout; the summary
    /// then goes to stderr).
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,

    /// Write a JUnit XML report to FILE (a testsuite per task, a testcase
    /// per run).
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,

    /// Bytes of each run's stdout and stderr kept for the reports (head and
    /// tail; the middle is counted, not kept).
    #[arg(long, value_parser = parse_bytes, default_value = "32K", value_name = "BYTES")]
    pub keep_output: u64,

    /// Progress display: auto (a live bar when stderr is a terminal, else a
    /// line per finished run), bar, lines, or none.
    #[arg(long, value_enum, default_value_t = ProgressArg::Auto)]
    pub progress: ProgressArg,

    /// Containment mechanism for every run (see `corral run --help`).
    #[arg(long, value_enum, default_value_t = ContainmentArg::Auto)]
    pub containment: ContainmentArg,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProgressArg {
    Auto,
    Bar,
    Lines,
    None,
}

#[derive(Args, Debug)]
pub struct RunOpts {
    /// Time allowed (e.g. 500ms, 1m30s; a bare number means seconds).
    #[arg(short = 't', long, value_parser = parse_duration, value_name = "DURATION")]
    pub timeout: Option<Duration>,

    /// After the program exits, how long its descendants may hold its
    /// output open before they are killed.
    #[arg(long, value_parser = parse_duration, default_value = "2s", value_name = "DURATION")]
    pub wait_delay: Duration,

    /// Time between the first signal and SIGKILL (0: SIGKILL at once).
    #[arg(short = 'k', long, value_parser = parse_duration, default_value = "0", value_name = "DURATION")]
    pub grace: Duration,

    /// First signal sent when a grace is set (name or number).
    #[arg(short = 's', long, value_parser = parse_signal, default_value = "TERM", value_name = "SIGNAL")]
    pub signal: Signal,

    /// What happens to descendants still running when the program exits.
    #[arg(long, value_enum, default_value_t = Leftovers::KeepOnSuccess)]
    pub leftovers: Leftovers,

    /// Containment mechanism: auto uses a cgroup when one can be had (Linux),
    /// else the subreaper tier (Linux), else a process group; the report
    /// says which and why. pid-namespace (Linux, also unprivileged: the
    /// command runs as pid 2 under a small init) is only used when asked.
    #[arg(long, value_enum, default_value_t = ContainmentArg::Auto)]
    pub containment: ContainmentArg,

    /// Cap the whole tree's memory (bytes; K, M, G suffixes). Needs cgroups.
    #[arg(long, value_parser = parse_bytes, value_name = "BYTES")]
    pub memory_max: Option<u64>,

    /// Cap the number of processes alive at once in the tree. Needs cgroups.
    #[arg(long, value_name = "N")]
    pub pids_max: Option<u64>,

    /// After the final SIGKILL, how long to wait for the tree to be gone
    /// before reporting survivors.
    #[arg(long, value_parser = parse_duration, default_value = "1s", value_name = "DURATION")]
    pub confirm_window: Duration,

    /// Write a JSON report of the run to FILE (`-` for stderr).
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,

    /// The program and its arguments (bytes are passed through unchanged).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROGRAM"
    )]
    pub command: Vec<OsString>,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Leftovers {
    KeepOnSuccess,
    Kill,
    Keep,
}

impl From<Leftovers> for LeftoverPolicy {
    fn from(l: Leftovers) -> Self {
        match l {
            Leftovers::KeepOnSuccess => LeftoverPolicy::KeepOnSuccess,
            Leftovers::Kill => LeftoverPolicy::Kill,
            Leftovers::Keep => LeftoverPolicy::Keep,
        }
    }
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContainmentArg {
    Auto,
    Cgroup,
    ProcessGroup,
    Subreaper,
    PidNamespace,
}

/// Bytes with an optional binary suffix: `1048576`, `512K`, `64M`, `2G`.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m: u64 = match c.to_ascii_uppercase() {
                'K' => 1 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                'T' => 1 << 40,
                _ => {
                    return Err(format!(
                        "invalid size {s:?} (use e.g. 1048576, 512K, 64M, 2G)"
                    ))
                }
            };
            (&t[..i], m)
        }
        _ => (t, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("invalid size {s:?} (use e.g. 1048576, 512K, 64M, 2G)"))
}

/// A duration as people type it: `500ms`, `1m30s`, `2h`, or a bare number
/// of seconds (`10`, `0.5`) as coreutils `timeout` takes it.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err("empty duration".into());
    }
    if t.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        let secs: f64 = t.parse().map_err(|_| format!("invalid duration {s:?}"))?;
        return Duration::try_from_secs_f64(secs)
            .map_err(|e| format!("invalid duration {s:?}: {e}"));
    }
    humantime::parse_duration(t).map_err(|e| {
        format!(
            "invalid duration {s:?}: {e} (use e.g. 500ms, 10s, 1m30s, 2h, or a number of seconds)"
        )
    })
}

fn parse_signal(s: &str) -> Result<Signal, String> {
    s.parse::<Signal>().map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("0.5").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("2h").unwrap(), Duration::from_secs(7200));
        assert!(parse_duration("").is_err());
        assert!(parse_duration("abc").is_err());
        assert!(parse_duration("-1").is_err());
        assert!(parse_duration("1.2.3").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_bytes("1024").unwrap(), 1024);
        assert_eq!(parse_bytes("64M").unwrap(), 64 << 20);
        assert_eq!(parse_bytes("2g").unwrap(), 2 << 30);
        assert!(parse_bytes("x").is_err());
        assert!(parse_bytes("12Q").is_err());
    }

    #[test]
    fn cli_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
