//! `corral batch FILE`: run the tasks of a TOML manifest, many at once,
//! each run contained like `corral run`, and classify every run as passed,
//! failed or error (see `classify`). The pieces:
//!
//! * `manifest`: reading and checking the TOML, before anything runs;
//! * `classify`: the verdict of one run, and the result-event scanner;
//! * `exec`: one run (prepare / conclude) and the executor (a bounded pool
//!   of threads today; the async API can replace it behind the same trait);
//! * `progress`: the live display, the per-run lines and the summary table;
//! * `junit`: the JUnit XML report.

/// `eprintln!` that ignores a closed or failing stderr (never panics: a
/// panic in the batch's main thread would leave the trees unsupervised).
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

mod classify;
mod exec;
mod junit;
mod manifest;
mod progress;

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use corral::{ContainmentChoice, Mechanism};
use serde::Serialize;
use serde_json::Value;

use crate::args::{BatchOpts, ContainmentArg, ProgressArg};
use crate::exit::CORRAL_FAILED;
use crate::json::JsonReport;
use classify::{Status, StopReason};
use exec::{Batch, Event, Executor, RunRecord};
use progress::{Mode, Progress, TaskSummary};

/// Every run passed.
pub const ALL_PASSED: i32 = 0;
/// A run failed and none errored.
pub const SOME_FAILED: i32 = 1;
/// A run errored, or the batch was interrupted before it was done.
pub const SOME_ERRORED: i32 = 2;

pub fn main(opts: BatchOpts) -> i32 {
    let manifest = match manifest::load(&opts.manifest) {
        Ok(m) => m,
        Err(e) => {
            say!("corral: {e}");
            return CORRAL_FAILED;
        }
    };
    for (what, p) in [("--report", &opts.report), ("--junit", &opts.junit)] {
        if let Some(p) = p {
            if let Err(e) = check_writable(p) {
                say!("corral: {what} {}: {e}", p.display());
                return CORRAL_FAILED;
            }
        }
    }
    let jobs = opts.jobs.map_or_else(
        || std::thread::available_parallelism().map_or(1, |n| n.get()),
        |j| j as usize,
    );
    let containment = match opts.containment {
        ContainmentArg::Auto => ContainmentChoice::Auto,
        ContainmentArg::Cgroup => ContainmentChoice::Only(Mechanism::Cgroup),
        ContainmentArg::ProcessGroup => ContainmentChoice::Only(Mechanism::ProcessGroup),
        ContainmentArg::Subreaper => ContainmentChoice::Only(Mechanism::Subreaper),
        ContainmentArg::PidNamespace => ContainmentChoice::Only(Mechanism::PidNamespace),
    };
    let jobs = fit_fd_limit(jobs);
    let keep = usize::try_from(opts.keep_output).unwrap_or(usize::MAX);
    let batch = Arc::new(Batch::new(
        manifest.tasks,
        opts.fail_fast,
        keep,
        containment,
    ));
    // Not `corral::enable_subreaper()` (as `run` does): a batch lives long
    // and runs thousands of trees, and orphans reparented to a subreaper
    // are not reaped by the other tiers (they pile up as zombies).
    // Before the first spawn: from here on a signal stops the batch and
    // kills every tree instead of killing corral and leaving them.
    let _signals = stop_on_signals(&batch);

    let mode = match opts.progress {
        ProgressArg::Auto if std::io::stderr().is_terminal() => Mode::Bar,
        ProgressArg::Auto | ProgressArg::Lines => Mode::Lines,
        ProgressArg::Bar => Mode::Bar,
        ProgressArg::None => Mode::None,
    };
    let mut progress = Progress::new(mode, batch.plan.len());
    let (tx, rx) = mpsc::channel();
    #[cfg(unix)]
    let executor = exec::Reactor;
    #[cfg(not(unix))]
    let executor = exec::ThreadPool;
    if let Err(e) = executor.start(batch.clone(), jobs, tx) {
        progress.finish();
        say!("corral: cannot start worker threads: {e}");
        return CORRAL_FAILED;
    }
    let mut records: Vec<RunRecord> = Vec::with_capacity(batch.plan.len());
    loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(Event::Started { job }) => progress.started(job),
            Ok(Event::Skipped { job }) => progress.skipped(job),
            Ok(Event::Finished(rec)) => {
                progress.finished(&batch, &rec);
                records.push(*rec);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
        progress.tick(&batch);
    }
    progress.finish();
    let wall = batch.start.elapsed();
    records.sort_by_key(|r| r.job);

    let mut seen = vec![false; batch.plan.len()];
    for r in &records {
        seen[r.job] = true;
    }
    let not_run: Vec<usize> = (0..batch.plan.len()).filter(|&j| !seen[j]).collect();
    let stop = batch.stop_reason();
    let code = exit_code(&records, &not_run, stop.as_ref());
    let summary = progress::summarize(&batch, &records);

    let report_to_stdout = opts.report.as_deref().is_some_and(|p| p == Path::new("-"));
    let mut text = progress::table(&summary, wall);
    if let Some(s) = &stop {
        text.push_str(&format!(
            "stopped: {s}; {} run(s) cancelled, {} not run\n",
            records.iter().filter(|r| r.cancelled_by_stop).count(),
            not_run.len()
        ));
    }
    // Written, not printed: a closed pipe must not panic corral before
    // the reports are written.
    if report_to_stdout {
        let _ = std::io::stderr().write_all(text.as_bytes());
    } else {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
    }

    let mut code = code;
    if let Some(path) = &opts.report {
        let mut json = JsonBatch::new(&batch, &records, &not_run, &summary, stop.as_ref(), code);
        json.manifest = opts.manifest.display().to_string();
        let written = serde_json::to_string_pretty(&json)
            .map_err(std::io::Error::other)
            .and_then(|mut s| {
                s.push('\n');
                if report_to_stdout {
                    std::io::stdout().write_all(s.as_bytes())
                } else {
                    write_atomic(path, s.as_bytes())
                }
            });
        if let Err(e) = written {
            say!("corral: cannot write the report {}: {e}", path.display());
            code = CORRAL_FAILED;
        }
    }
    if let Some(path) = &opts.junit {
        let name = opts.manifest.display().to_string();
        let written = junit::render(&batch, &records, &name, wall)
            .map_err(std::io::Error::other)
            .and_then(|s| write_atomic(path, s.as_bytes()));
        if let Err(e) = written {
            say!(
                "corral: cannot write the JUnit report {}: {e}",
                path.display()
            );
            code = CORRAL_FAILED;
        }
    }
    code
}

/// 0 every run passed; 1 a run failed and none errored; 2 a run errored.
/// Runs cancelled by `--fail-fast` are errors in every count but do not
/// decide the exit code (the run that stopped the batch does, so it is the
/// same whatever else happened to be running). A batch stopped by a signal
/// with runs cancelled or not run is 2.
fn exit_code(records: &[RunRecord], not_run: &[usize], stop: Option<&StopReason>) -> i32 {
    let cut_short = !not_run.is_empty() || records.iter().any(|r| r.cancelled_by_stop);
    if matches!(stop, Some(StopReason::Signal(_))) && cut_short {
        return SOME_ERRORED;
    }
    let own = records.iter().filter(|r| !r.cancelled_by_stop);
    let mut code = ALL_PASSED;
    for r in own {
        match r.status {
            Status::Error => return SOME_ERRORED,
            Status::Failed => code = SOME_FAILED,
            Status::Passed => {}
        }
    }
    if code == ALL_PASSED && cut_short {
        // Cannot happen (a stop needs a failure or a signal), but a batch
        // that did not run everything never reports "all passed".
        return SOME_ERRORED;
    }
    code
}

fn check_writable(p: &Path) -> std::io::Result<()> {
    if p == Path::new("-") {
        return Ok(());
    }
    let dir = match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("directory {} does not exist", dir.display()),
        ));
    }
    if p.is_dir() {
        return Err(std::io::Error::other("is a directory"));
    }
    Ok(())
}

/// Writes next to `path` and renames, so a reader never sees half a file.
fn write_atomic(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp{}", std::process::id()));
    let tmp = std::path::PathBuf::from(tmp);
    std::fs::write(&tmp, data)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// The `--report` JSON.
#[derive(Serialize)]
struct JsonBatch<'a> {
    manifest: String,
    exit_code: i32,
    /// Why the batch stopped early (fail-fast or a signal), if it did.
    stopped: Option<String>,
    received_signal: Option<i32>,
    duration_ms: f64,
    totals: Totals,
    tasks: &'a [TaskSummary],
    runs: Vec<JsonRun<'a>>,
    not_run: Vec<NotRun<'a>>,
}

#[derive(Serialize, Default)]
struct Totals {
    runs: usize,
    passed: usize,
    failed: usize,
    errors: usize,
    not_run: usize,
}

#[derive(Serialize)]
struct JsonRun<'a> {
    task: &'a str,
    run: u32,
    status: Status,
    reason: Option<&'a str>,
    result_code: Option<i64>,
    result_event: Option<&'a Value>,
    cancelled_by_stop: bool,
    started_ms: f64,
    wall_ms: f64,
    #[serde(flatten)]
    report: &'a JsonReport,
    stdout_tail: &'a str,
    stderr_tail: &'a str,
}

#[derive(Serialize)]
struct NotRun<'a> {
    task: &'a str,
    run: u32,
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

impl<'a> JsonBatch<'a> {
    fn new(
        batch: &'a Batch,
        records: &'a [RunRecord],
        not_run: &[usize],
        summary: &'a [TaskSummary],
        stop: Option<&StopReason>,
        exit_code: i32,
    ) -> Self {
        let mut totals = Totals {
            runs: batch.plan.len(),
            not_run: not_run.len(),
            ..Totals::default()
        };
        for r in records {
            match r.status {
                Status::Passed => totals.passed += 1,
                Status::Failed => totals.failed += 1,
                Status::Error => totals.errors += 1,
            }
        }
        JsonBatch {
            manifest: String::new(),
            exit_code,
            stopped: stop.map(ToString::to_string),
            received_signal: match stop {
                Some(StopReason::Signal(s)) => Some(*s),
                _ => None,
            },
            duration_ms: ms(batch.start.elapsed()),
            totals,
            tasks: summary,
            runs: records
                .iter()
                .map(|r| JsonRun {
                    task: &batch.tasks[r.task].name,
                    run: r.run,
                    status: r.status,
                    reason: r.reason.as_deref(),
                    result_code: r.result_code,
                    result_event: r.result_event.as_ref(),
                    cancelled_by_stop: r.cancelled_by_stop,
                    started_ms: ms(r.started),
                    wall_ms: ms(r.wall),
                    report: &r.report,
                    stdout_tail: &r.stdout,
                    stderr_tail: &r.stderr,
                })
                .collect(),
            not_run: not_run
                .iter()
                .map(|&j| NotRun {
                    task: &batch.tasks[batch.plan[j].task].name,
                    run: batch.plan[j].run,
                })
                .collect(),
        }
    }
}

/// File descriptors one run holds at most while it is supervised (pipes,
/// poller, pidfd, wake pipe, cgroup files), with room to spare.
#[cfg(unix)]
const FDS_PER_RUN: u64 = 16;

/// Makes room for `jobs` runs' file descriptors: raises the soft limit
/// towards the hard one when needed (children inherit the raised limit),
/// and when even the hard limit is too low, runs fewer at once and says so.
#[cfg(unix)]
fn fit_fd_limit(jobs: usize) -> usize {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let need = jobs as u64 * FDS_PER_RUN + 64;
    let mut lim = getrlimit(Resource::Nofile);
    let soft = lim.current.unwrap_or(u64::MAX);
    if soft >= need {
        return jobs;
    }
    let hard = lim.maximum.unwrap_or(u64::MAX);
    lim.current = Some(need.min(hard));
    let have = match setrlimit(Resource::Nofile, lim) {
        Ok(()) => need.min(hard),
        Err(_) => soft,
    };
    if have >= need {
        return jobs;
    }
    let fit = (have.saturating_sub(64) / FDS_PER_RUN).max(1) as usize;
    say!(
        "corral: the open-file limit ({have}) allows about {fit} runs at once; running {fit}, not {jobs}"
    );
    fit
}

#[cfg(not(unix))]
fn fit_fd_limit(jobs: usize) -> usize {
    jobs
}

/// SIGINT, SIGTERM and SIGHUP stop the batch: nothing more starts, and the
/// signal is passed on to every running tree as its first signal (then
/// SIGKILL at the end of the task's grace; at once without one).
#[cfg(unix)]
fn stop_on_signals(batch: &Arc<Batch>) -> Option<std::thread::JoinHandle<()>> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]).ok()?;
    let batch = batch.clone();
    std::thread::Builder::new()
        .name("corral-signals".into())
        .spawn(move || {
            for sig in signals.forever() {
                batch.stop(StopReason::Signal(sig), corral::Signal::from_raw(sig));
            }
        })
        .ok()
}

#[cfg(not(unix))]
fn stop_on_signals(_batch: &Arc<Batch>) -> Option<std::thread::JoinHandle<()>> {
    None
}
