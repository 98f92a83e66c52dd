//! `corral batch FILE`: run the tasks of a TOML manifest, many at once,
//! each run contained like `corral run`, and classify every run as passed,
//! failed or error (see `classify`); `corral merge`: the reports of a
//! batch's shards back into one. The pieces:
//!
//! * `manifest`: reading and checking the TOML, before anything runs, and
//!   the manifest's fingerprint;
//! * `classify`: the verdict of one run, and the result-event scanner;
//! * `exec`: the plan (filters, shards, warmups), one run and its retries,
//!   the scheduler (`serial`, warmups first) and the executors;
//! * `progress`: the live display and the per-run lines;
//! * `report`: the report document and what is derived from it (table,
//!   totals, exit code, Markdown), shared with `merge`;
//! * `junit`: the JUnit XML, from the report document;
//! * `merge`: `corral merge`.

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
pub mod merge;
mod progress;
mod report;

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use corral::{ContainmentChoice, Mechanism};
use serde_json::{json, Value};

use crate::args::{BatchOpts, ContainmentArg, ProgressArg};
use crate::exit::CORRAL_FAILED;
use classify::StopReason;
use corral::document::BatchRun;
use exec::{Batch, Event, Executor, Partition, RunOptions, RunRecord, Selection};
use progress::{Mode, Progress, TaskSummary};
use report::BatchDoc;

/// Every run passed.
pub const ALL_PASSED: i32 = 0;
/// A run failed and none errored.
pub const SOME_FAILED: i32 = 1;
/// A run errored, or the batch was interrupted before it was done.
pub const SOME_ERRORED: i32 = 2;

pub fn main(opts: BatchOpts) -> i32 {
    match run_batch(opts) {
        Ok(code) => code,
        Err(msg) => {
            say!("corral: {msg}");
            CORRAL_FAILED
        }
    }
}

/// Where a stream of output goes: stdout (`-`) or a file.
fn is_stdout(p: Option<&Path>) -> bool {
    p.is_some_and(|p| p == Path::new("-"))
}

/// `K/N`: K from 1 to N, or `env:VAR` holding a 0-based index (from 0 to
/// N-1, as Kubernetes' JOB_COMPLETION_INDEX, Nomad's NOMAD_ALLOC_INDEX and
/// GitHub's strategy.job-index count).
pub fn parse_partition(
    spec: &str,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Partition, String> {
    let bad = |why: String| format!("--partition {spec:?}: {why}");
    let (k, n) = spec.rsplit_once('/').ok_or_else(|| {
        bad("expected K/N (the K-th of N shards, 1 <= K <= N), or env:VAR/N".into())
    })?;
    let count: u32 = n
        .trim()
        .parse()
        .map_err(|_| bad(format!("the shard count {n:?} is not a positive integer")))?;
    if count == 0 {
        return Err(bad("the shard count must be at least 1".into()));
    }
    let k = k.trim();
    let index = if let Some(var) = k.strip_prefix("env:") {
        let val = env(var).ok_or_else(|| {
            bad(format!(
                "the environment variable {var} is not set (it should hold a 0-based shard index)"
            ))
        })?;
        let i: u32 = val.trim().parse().map_err(|_| {
            bad(format!(
                "{var}={val:?} is not a 0-based shard index (an integer from 0 to {})",
                count - 1
            ))
        })?;
        if i >= count {
            return Err(bad(format!(
                "{var}={i}, but a 0-based index for {count} shard(s) must be from 0 to {}",
                count - 1
            )));
        }
        i + 1
    } else {
        let i: u32 = k.parse().map_err(|_| {
            bad(format!(
                "the shard {k:?} is neither an integer from 1 to {count} nor env:VAR"
            ))
        })?;
        if i == 0 || i > count {
            return Err(bad(format!(
                "the shard must be from 1 to {count} (1-based; for a 0-based index use env:VAR)"
            )));
        }
        i
    };
    Ok(Partition { index, count })
}

/// A shell-style glob on a whole name: `*` any run of characters, `?` one
/// character; everything else literal.
pub fn glob(pat: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pat.chars().collect(), name.chars().collect());
    let (mut i, mut j) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while j < n.len() {
        if i < p.len() && (p[i] == '?' || (p[i] != '*' && p[i] == n[j])) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some((i, j));
            i += 1;
        } else if let Some((si, sj)) = star {
            i = si + 1;
            j = sj + 1;
            star = Some((si, sj + 1));
        } else {
            return false;
        }
    }
    p[i..].iter().all(|&c| c == '*')
}

fn run_batch(opts: BatchOpts) -> Result<i32, String> {
    if is_stdout(opts.events.as_deref()) && is_stdout(opts.report.as_deref()) {
        return Err(
            "--events - and --report - both want stdout; send one of them to a file".into(),
        );
    }
    let partition = opts
        .partition
        .as_deref()
        .map(|s| parse_partition(s, |v| std::env::var(v).ok()))
        .transpose()?;
    let manifest = manifest::load(&opts.manifest).map_err(|e| e.to_string())?;
    let fingerprint = manifest::fingerprint(&manifest.tasks);
    let mut selected = vec![opts.tasks.is_empty(); manifest.tasks.len()];
    for pat in &opts.tasks {
        let mut any = false;
        for (i, t) in manifest.tasks.iter().enumerate() {
            if glob(pat, &t.name) {
                selected[i] = true;
                any = true;
            }
        }
        if !any {
            let names: Vec<&str> = manifest.tasks.iter().map(|t| t.name.as_str()).collect();
            return Err(format!(
                "--task {pat:?} matches no task (tasks: {})",
                names.join(", ")
            ));
        }
    }
    for (what, p) in [
        ("--report", &opts.report),
        ("--junit", &opts.junit),
        ("--events", &opts.events),
        ("--export-markdown", &opts.export_markdown),
    ] {
        if let Some(p) = p {
            check_writable(p).map_err(|e| format!("{what} {}: {e}", p.display()))?;
        }
    }
    if let Some(d) = &opts.output_dir {
        std::fs::create_dir_all(d)
            .map_err(|e| format!("--output-dir {}: cannot create it: {e}", d.display()))?;
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
    let keep = usize::try_from(opts.keep_output).unwrap_or(usize::MAX);
    let batch = Arc::new(Batch::new(
        manifest.tasks,
        Selection {
            tasks: selected,
            partition,
        },
        RunOptions {
            fail_fast: opts.fail_fast,
            keep_output: keep,
            containment,
            retries: opts.retries,
            output_dir: opts.output_dir.clone(),
            require_crash_safety: opts.require_crash_safety,
        },
    ));
    if opts.list {
        let (k, n) = partition.map_or((1, 1), |p| (p.index, p.count));
        let mut out = String::new();
        for j in &batch.plan {
            let name = exec::job_name(&batch.tasks, j);
            let _ = j.shard;
            if j.warmup {
                out.push_str(&format!("{name} {k}/{n} warmup\n"));
            } else {
                out.push_str(&format!("{name} {k}/{n}\n"));
            }
        }
        let mut o = std::io::stdout().lock();
        let _ = o.write_all(out.as_bytes()).and_then(|()| o.flush());
        return Ok(ALL_PASSED);
    }
    let mut events = match opts.events.as_deref() {
        None => None,
        Some(p) if p == Path::new("-") => Some(Events::new(Box::new(std::io::stdout()), "-")),
        Some(p) => {
            let f = crate::outfile::create(p, crate::outfile::Links::FollowTrusted)
                .map_err(|e| format!("--events {}: {e}", p.display()))?;
            Some(Events::new(Box::new(f), &p.display().to_string()))
        }
    };
    let jobs = fit_fd_limit(jobs);
    // The subreaper only when a run asks for the subreaper tier: it changes
    // the whole process (every orphan of every tree, in every tier, comes
    // here, and `auto` then falls back to the subreaper tier rather than a
    // process group). A batch lives long and runs thousands of trees, so
    // their orphans must not pile up as zombies: the batch starts no child
    // of its own, so every zombie child that is not a run's root is reaped
    // (`reap_all_orphans`), whatever tier its tree ran in.
    #[cfg(target_os = "linux")]
    if wants_subreaper(&batch) {
        let _ = corral::enable_subreaper();
        corral::reap_all_orphans();
    }
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
        return Err(format!("cannot start worker threads: {e}"));
    }
    let mut records: Vec<RunRecord> = Vec::with_capacity(batch.plan.len());
    loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(Event::Started { job, attempt, at }) => {
                progress.started(job);
                if let Some(ev) = &mut events {
                    let j = batch.plan[job];
                    ev.write(&json!({
                        "event": "started",
                        "task": batch.tasks[j.task].name,
                        "run": j.run,
                        "warmup": j.warmup,
                        "shard": j.shard,
                        "attempt": attempt,
                        "started_ms": ms(at),
                    }));
                }
            }
            Ok(Event::Skipped { job }) => progress.skipped(job),
            Ok(Event::Retrying(rec)) => {
                progress.retrying(&batch, &rec);
                if let Some(ev) = &mut events {
                    ev.write(&event_line(&batch, &rec, true));
                }
            }
            Ok(Event::Finished(rec)) => {
                progress.finished(&batch, &rec);
                if let Some(ev) = &mut events {
                    ev.write(&event_line(&batch, &rec, false));
                }
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
    let not_run: Vec<usize> = (0..batch.plan.len())
        .filter(|&j| !seen[j] && !batch.plan[j].warmup)
        .collect();
    let stop = batch.stop_reason();
    let mut doc = document(&batch, &records, &not_run, stop.as_ref(), wall);
    doc.manifest = opts.manifest.display().to_string();
    doc.manifest_fingerprint = fingerprint;
    doc.task_filters = opts.tasks.clone();
    let mut code = doc.exit_code;
    let summary = here_summary(&batch, &doc);
    doc.totals = report::totals(&summary);
    doc.tasks = summary.clone();

    let text_to_stderr = is_stdout(opts.report.as_deref()) || is_stdout(opts.events.as_deref());
    let mut text = report::table(&summary, wall);
    if let Some(s) = &stop {
        text.push_str(&format!(
            "stopped: {s}; {} run(s) cancelled, {} not run\n",
            records.iter().filter(|r| r.cancelled_by_stop).count(),
            not_run.len()
        ));
    }
    if let Some(line) = not_crash_safe(&records) {
        text.push_str(&line);
    }
    if let Some(p) = partition {
        text.push_str(&format!(
            "shard {}/{} of manifest {}\n",
            p.index, p.count, doc.manifest_fingerprint
        ));
    }
    // Written, not printed: a closed pipe must not panic corral before
    // the reports are written.
    if text_to_stderr {
        let _ = std::io::stderr().write_all(text.as_bytes());
    } else {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
    }
    if let Some(ev) = &events {
        if let Some(e) = &ev.failed {
            say!("corral: cannot write the events to {}: {e}", ev.name);
            code = CORRAL_FAILED;
        }
    }
    let title = opts.manifest.display().to_string();
    if !write_outputs(
        &doc,
        &summary,
        &title,
        opts.report.as_deref(),
        opts.junit.as_deref(),
        opts.export_markdown.as_deref(),
    ) {
        code = CORRAL_FAILED;
    }
    Ok(code)
}

/// A line for the end of the table when runs (warmups and earlier attempts
/// included) were not crash-safe: they ran, contained, but corral's own
/// death would have left their trees running.
fn not_crash_safe(records: &[RunRecord]) -> Option<String> {
    let mut n = 0;
    let mut note = None;
    for r in records
        .iter()
        .flat_map(|r| std::iter::once(r).chain(&r.attempts))
    {
        if r.report.crash_safe == Some(false) {
            n += 1;
            if note.is_none() {
                note.clone_from(&r.report.crash_safety_note);
            }
        }
    }
    (n > 0).then(|| {
        format!(
            "not crash-safe: {n} run(s) would have outlived corral's own death ({}); \
             --require-crash-safety refuses to run them\n",
            note.as_deref().unwrap_or("no reason given")
        )
    })
}

/// The per-task table of this invocation: the tasks with a run here, each
/// with its measured runs here.
fn here_summary(batch: &Batch, doc: &BatchDoc) -> Vec<TaskSummary> {
    let mut planned: Vec<(String, usize)> = Vec::new();
    for j in batch.plan.iter().filter(|j| !j.warmup) {
        let name = &batch.tasks[j.task].name;
        match planned.last_mut() {
            Some((n, c)) if n == name => *c += 1,
            _ => planned.push((name.clone(), 1)),
        }
    }
    report::summarize(&planned, &doc.runs)
}

/// Writes the JSON report, the JUnit XML and the Markdown table asked
/// for; false when one could not be written (said on stderr).
pub(crate) fn write_outputs(
    doc: &BatchDoc,
    summary: &[TaskSummary],
    title: &str,
    report: Option<&Path>,
    junit: Option<&Path>,
    markdown: Option<&Path>,
) -> bool {
    let mut ok = true;
    if let Some(path) = report {
        let written = serde_json::to_string_pretty(doc)
            .map_err(std::io::Error::other)
            .and_then(|mut s| {
                s.push('\n');
                if path == Path::new("-") {
                    let mut o = std::io::stdout().lock();
                    o.write_all(s.as_bytes()).and_then(|()| o.flush())
                } else {
                    crate::outfile::write_atomic(path, s.as_bytes())
                }
            });
        if let Err(e) = written {
            say!("corral: cannot write the report {}: {e}", path.display());
            ok = false;
        }
    }
    if let Some(path) = junit {
        let written = junit::render(doc, title)
            .map_err(std::io::Error::other)
            .and_then(|s| crate::outfile::write_atomic(path, s.as_bytes()));
        if let Err(e) = written {
            say!(
                "corral: cannot write the JUnit report {}: {e}",
                path.display()
            );
            ok = false;
        }
    }
    if let Some(path) = markdown {
        if let Err(e) = crate::outfile::write_atomic(path, report::markdown(summary).as_bytes()) {
            say!(
                "corral: cannot write the Markdown table {}: {e}",
                path.display()
            );
            ok = false;
        }
    }
    ok
}

/// `--events`: one JSON object per line, flushed as it is written. The
/// first write error is kept (and reported at the end); nothing more is
/// written after it.
struct Events {
    out: Box<dyn Write>,
    name: String,
    failed: Option<std::io::Error>,
}

impl Events {
    fn new(out: Box<dyn Write>, name: &str) -> Events {
        Events {
            out,
            name: name.to_owned(),
            failed: None,
        }
    }

    fn write(&mut self, v: &Value) {
        if self.failed.is_some() {
            return;
        }
        let mut line = v.to_string();
        line.push('\n');
        if let Err(e) = self
            .out
            .write_all(line.as_bytes())
            .and_then(|()| self.out.flush())
        {
            self.failed = Some(e);
        }
    }
}

/// A `finished` event: the report's run object, plus `event` and
/// `will_retry` (another attempt follows this one).
fn event_line(batch: &Batch, rec: &RunRecord, will_retry: bool) -> Value {
    let mut v = serde_json::to_value(run_doc(batch, rec)).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        o.insert("event".into(), Value::from("finished"));
        o.insert("will_retry".into(), Value::from(will_retry));
    }
    v
}

fn ms(d: Duration) -> f64 {
    corral::document::ms(d)
}

/// One run (or attempt) as the report shows it: the batch's fields, then
/// every field of a `corral run --report`, then the kept output.
fn run_doc(batch: &Batch, r: &RunRecord) -> BatchRun {
    let j = batch.plan[r.job];
    BatchRun {
        task: batch.tasks[r.task].name.clone(),
        run: r.run,
        warmup: j.warmup,
        shard: j.shard,
        status: r.status,
        reason: r.reason.clone(),
        result_code: r.result_code,
        result_event: r.result_event.clone(),
        cancelled_by_stop: r.cancelled_by_stop,
        started_ms: ms(r.started),
        wall_ms: ms(r.wall),
        attempt: r.attempt,
        flaky: r.flaky,
        attempts: r.attempts.iter().map(|a| run_doc(batch, a)).collect(),
        stdout_file: r.stdout_file.clone(),
        stderr_file: r.stderr_file.clone(),
        report: r.report.clone(),
        stdout_tail: r.stdout.clone(),
        stderr_tail: r.stderr.clone(),
    }
}

/// The report document of this invocation (`manifest`, its fingerprint,
/// the filters, `tasks` and `totals` are filled in by the caller).
fn document(
    batch: &Batch,
    records: &[RunRecord],
    not_run: &[usize],
    stop: Option<&StopReason>,
    wall: Duration,
) -> BatchDoc {
    let (warm, measured): (Vec<&RunRecord>, Vec<&RunRecord>) =
        records.iter().partition(|r| batch.plan[r.job].warmup);
    let runs: Vec<BatchRun> = measured.iter().map(|r| run_doc(batch, r)).collect();
    let received = match stop {
        Some(StopReason::Signal(s)) => Some(*s),
        _ => None,
    };
    let code = report::exit_code(&runs, not_run.len(), received.is_some());
    let plan = batch
        .tasks
        .iter()
        .enumerate()
        .filter(|(i, _)| batch.selected[*i])
        .map(|(_, t)| report::PlanEntry {
            task: t.name.clone(),
            runs: t.repeat,
            warmup: t.warmup,
        })
        .collect();
    BatchDoc {
        format_version: report::FORMAT_VERSION,
        manifest: String::new(),
        manifest_fingerprint: String::new(),
        partition: batch.partition.map(|p| report::Part {
            index: p.index,
            count: p.count,
        }),
        merged_from: None,
        task_filters: Vec::new(),
        plan,
        exit_code: code,
        stopped: stop.map(ToString::to_string),
        received_signal: received,
        duration_ms: ms(wall),
        totals: report::Totals::default(),
        tasks: Vec::new(),
        runs,
        not_run: not_run
            .iter()
            .map(|&j| {
                let p = batch.plan[j];
                report::NotRun {
                    task: batch.tasks[p.task].name.clone(),
                    run: p.run,
                    shard: p.shard,
                }
            })
            .collect(),
        warmup_runs: warm.iter().map(|r| run_doc(batch, r)).collect(),
    }
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

/// Whether a run of this batch asks for the subreaper tier: its task's
/// `containment` key (with `[defaults]` applied), or `--containment` for a
/// task without one.
#[cfg(target_os = "linux")]
fn wants_subreaper(batch: &Batch) -> bool {
    batch
        .plan
        .iter()
        .any(|j| match batch.tasks[j.task].containment {
            Some(manifest::ContainmentKey::Subreaper) => true,
            Some(_) => false,
            None => batch.opts.containment == ContainmentChoice::Only(Mechanism::Subreaper),
        })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob("unit-*", "unit-a"));
        assert!(glob("unit-*", "unit-"));
        assert!(!glob("unit-*", "unit"));
        assert!(glob("*", ""));
        assert!(glob("a?c", "abc"));
        assert!(!glob("a?c", "ac"));
        assert!(glob("*-b*", "x-b-y"));
        assert!(glob("a*b*c", "aXbYbZc"));
        assert!(!glob("a*b*c", "aXbYbZ"));
        assert!(glob("exact", "exact"));
        assert!(!glob("exact", "exact2"));
        assert!(glob("é*", "école"));
    }

    #[test]
    fn partitions() {
        let none = |_: &str| None;
        assert_eq!(
            parse_partition("2/3", none),
            Ok(Partition { index: 2, count: 3 })
        );
        let env = |v: &str| (v == "IX").then(|| "0".to_owned());
        assert_eq!(
            parse_partition("env:IX/4", env),
            Ok(Partition { index: 1, count: 4 })
        );
        for bad in [
            "0/3",
            "4/3",
            "1/0",
            "a/3",
            "3",
            "/3",
            "1/",
            "env:NOPE/2",
            "-1/3",
        ] {
            assert!(parse_partition(bad, none).is_err(), "{bad}");
        }
    }

    #[test]
    fn round_robin_shards() {
        let shards: Vec<u32> = (0..7).map(|i| exec::shard_of(i, 3)).collect();
        assert_eq!(shards, [1, 2, 3, 1, 2, 3, 1]);
    }
}
