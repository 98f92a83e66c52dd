//! `corral batch FILE`: run the tasks of a TOML manifest, many at once,
//! each run contained like `corral run`, and classify every run as passed,
//! failed or error (see `classify`); `corral merge`: the reports of a
//! batch's shards back into one. The pieces:
//!
//! * `manifest`: reading and checking the TOML, before anything runs, and
//!   the manifest's fingerprint;
//! * `classify`: the verdict of one run, and the result-event scanner;
//! * `exec`: the plan (filters, shards, warmups), one run and its retries
//!   (one attempt loop), the scheduler (`serial`, warmups first) and the
//!   executors;
//! * `events`: the typed event stream the executor sends ([`BatchEvent`]);
//! * `reporter`: the outputs, each made from the events by its own
//!   reporter (the `--events` log, the table, the report files);
//! * `progress`: the live display and the per-run lines (a reporter);
//! * `error`: [`BatchError`], every failure of a batch or a merge, said
//!   once with its sources by [`exit_code`];
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
mod error;
mod events;
pub(crate) mod exec;
mod junit;
pub(crate) mod manifest;
pub mod merge;
mod progress;
mod record;
pub(crate) mod report;
mod reporter;
mod summary;

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use corral::{ContainmentChoice, Mechanism};

use crate::args::{BatchOpts, ContainmentArg, ProgressArg};
use crate::exit::CORRAL_FAILED;
use classify::StopReason;
use error::BatchError;
use events::{BatchEvent, RunEnd};
use exec::{Batch, Executor, Partition, RunOptions, Selection};
use progress::{Mode, Progress};
use record::RunRecord;
use report::{BatchDoc, BatchRun};
use reporter::{EventLog, ReportFile, Reporter, Table};
use summary::TaskSummary;

/// Every run passed.
pub const ALL_PASSED: i32 = 0;
/// A run failed and none errored.
pub const SOME_FAILED: i32 = 1;
/// A run errored, or the batch was interrupted before it was done.
pub const SOME_ERRORED: i32 = 2;

pub fn main(opts: BatchOpts) -> i32 {
    exit_code(run_batch(opts))
}

/// How a batch or a merge ended: its exit code, and what its reporters
/// could not write (each makes the exit code corral's failure).
struct Ended {
    code: i32,
    errors: Vec<BatchError>,
}

/// The exit code of a batch or a merge; its errors are said on stderr,
/// each with its sources: the one place they are rendered.
fn exit_code(result: Result<Ended, BatchError>) -> i32 {
    let (code, errors) = match result {
        Ok(end) => (end.code, end.errors),
        Err(e) => (CORRAL_FAILED, vec![e]),
    };
    for e in &errors {
        say!("corral: {}", error::render(e));
    }
    if errors.is_empty() {
        code
    } else {
        CORRAL_FAILED
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
) -> Result<Partition, BatchError> {
    let bad = |why: String| BatchError::Partition {
        spec: spec.to_owned(),
        why,
    };
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

fn run_batch(opts: BatchOpts) -> Result<Ended, BatchError> {
    if is_stdout(opts.events.as_deref()) && is_stdout(opts.report.as_deref()) {
        return Err(BatchError::BothStdout);
    }
    let partition = opts
        .partition
        .as_deref()
        .map(|s| parse_partition(s, |v| std::env::var(v).ok()))
        .transpose()?;
    let manifest = load_manifest(&opts.manifest)?;
    let fingerprint = manifest::fingerprint(&manifest.tasks);
    let names: Vec<&str> = manifest.tasks.iter().map(|t| t.name.as_str()).collect();
    let selected = select(&names, &opts.tasks)?;
    check_outputs(&opts)?;
    let batch = Arc::new(Batch::new(
        manifest.tasks,
        Selection {
            tasks: selected,
            partition,
        },
        run_options(&opts),
    ));
    if opts.list {
        list(&batch, partition);
        return Ok(Ended {
            code: ALL_PASSED,
            errors: Vec::new(),
        });
    }
    let mut reporters = end_reporters(&opts, &batch)?;
    let jobs = fit_fd_limit(opts.jobs.map_or_else(
        || std::thread::available_parallelism().map_or(1, |n| n.get()),
        |j| j as usize,
    ));
    // The subreaper only when a run asks for the subreaper tier: it changes
    // the whole process (every orphan of every tree, in every tier, comes
    // here, and `auto` then falls back to the subreaper tier rather than a
    // process group). A batch lives long and runs thousands of trees, so
    // their orphans must not pile up as zombies: the batch starts no child
    // of its own, so every zombie child that is not a run's root is reaped
    // (`reap_all_orphans`), whatever tier its tree ran in.
    #[cfg(target_os = "linux")]
    if wants_subreaper(&batch) {
        let _ = corral::process_wide::enable_subreaper();
        corral::process_wide::reap_all_orphans();
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
    let mut errors = Vec::new();
    let records = drive(&batch, jobs, mode, &mut reporters, &mut errors)?;
    let end = run_end(&batch, &opts, &records, fingerprint);
    let code = end.doc.exit_code;
    errors.extend(reporter::end_run(&mut reporters, end));
    Ok(Ended { code, errors })
}

/// The tasks `--task` selects (every task without a pattern); a pattern
/// that matches no task is an error.
fn select(names: &[&str], patterns: &[String]) -> Result<Vec<bool>, BatchError> {
    let mut selected = vec![patterns.is_empty(); names.len()];
    for pat in patterns {
        let mut any = false;
        for (i, name) in names.iter().enumerate() {
            if glob(pat, name) {
                selected[i] = true;
                any = true;
            }
        }
        if !any {
            return Err(BatchError::NoTask {
                pattern: pat.clone(),
                tasks: names.iter().map(|&n| n.to_owned()).collect(),
            });
        }
    }
    Ok(selected)
}

/// Before anything runs: every output file can be written, and the
/// `--output-dir` exists.
fn check_outputs(opts: &BatchOpts) -> Result<(), BatchError> {
    for (what, p) in [
        ("--report", &opts.report),
        ("--junit", &opts.junit),
        ("--events", &opts.events),
        ("--export-markdown", &opts.export_markdown),
    ] {
        if let Some(p) = p {
            check_writable(p).map_err(|source| BatchError::Unwritable {
                what,
                path: p.clone(),
                source,
            })?;
        }
    }
    if let Some(d) = &opts.output_dir {
        std::fs::create_dir_all(d).map_err(|source| BatchError::OutputDir {
            path: d.clone(),
            source,
        })?;
    }
    Ok(())
}

fn run_options(opts: &BatchOpts) -> RunOptions {
    let containment = match opts.containment {
        ContainmentArg::Auto => ContainmentChoice::Auto,
        ContainmentArg::Cgroup => ContainmentChoice::Only(Mechanism::Cgroup),
        ContainmentArg::ProcessGroup => ContainmentChoice::Only(Mechanism::ProcessGroup),
        ContainmentArg::Subreaper => ContainmentChoice::Only(Mechanism::Subreaper),
        ContainmentArg::PidNamespace => ContainmentChoice::Only(Mechanism::PidNamespace),
    };
    RunOptions {
        fail_fast: opts.fail_fast,
        keep_output: usize::try_from(opts.keep_output).unwrap_or(usize::MAX),
        containment,
        retries: opts.retries,
        output_dir: opts.output_dir.clone(),
        require_crash_safety: opts.require_crash_safety,
    }
}

/// `--list`: the runs of this invocation, one a line, on stdout.
fn list(batch: &Batch, partition: Option<Partition>) {
    let (k, n) = partition.map_or((1, 1), |p| (p.index, p.count));
    let mut out = String::new();
    for j in &batch.plan {
        let name = exec::job_name(&batch.tasks, j);
        if j.warmup {
            out.push_str(&format!("{name} {k}/{n} warmup\n"));
        } else {
            out.push_str(&format!("{name} {k}/{n}\n"));
        }
    }
    let mut o = std::io::stdout().lock();
    let _ = o.write_all(out.as_bytes()).and_then(|()| o.flush());
}

/// The reporters of the batch's end, in the order they report: the table,
/// the `--events` log (opened now), the report files.
fn end_reporters(
    opts: &BatchOpts,
    batch: &Arc<Batch>,
) -> Result<Vec<Box<dyn Reporter>>, BatchError> {
    let to_stderr = is_stdout(opts.report.as_deref()) || is_stdout(opts.events.as_deref());
    let mut reporters: Vec<Box<dyn Reporter>> = vec![Box::new(Table { to_stderr })];
    if let Some(p) = &opts.events {
        reporters.push(Box::new(EventLog::open(batch.clone(), p)?));
    }
    for f in ReportFile::all(
        opts.report.as_deref(),
        opts.junit.as_deref(),
        opts.export_markdown.as_deref(),
    ) {
        reporters.push(Box::new(f));
    }
    Ok(reporters)
}

/// Runs the plan on the executor and hands each of its events to every
/// reporter (the live display first); returns the jobs' final records, in
/// plan order, once the executor is done.
fn drive(
    batch: &Arc<Batch>,
    jobs: usize,
    mode: Mode,
    reporters: &mut Vec<Box<dyn Reporter>>,
    errors: &mut Vec<BatchError>,
) -> Result<Vec<RunRecord>, BatchError> {
    let (tx, rx) = mpsc::channel();
    #[cfg(unix)]
    let executor = exec::Reactor;
    #[cfg(not(unix))]
    let executor = exec::ThreadPool;
    executor
        .start(batch.clone(), jobs, tx)
        .map_err(BatchError::Workers)?;
    reporters.insert(0, Box::new(Progress::new(mode, batch.clone())));
    let mut records: Vec<RunRecord> = Vec::with_capacity(batch.plan.len());
    loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(event) => {
                errors.extend(reporters.iter_mut().filter_map(|r| r.event(&event).err()));
                if let BatchEvent::AttemptFinished {
                    record,
                    will_retry: false,
                } = event
                {
                    records.push(*record);
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
        for r in reporters.iter_mut() {
            r.tick();
        }
    }
    records.sort_by_key(|r| r.job);
    Ok(records)
}

/// The end of the batch: its report document and the table's notes.
fn run_end(batch: &Batch, opts: &BatchOpts, records: &[RunRecord], fingerprint: String) -> RunEnd {
    let wall = batch.start.elapsed();
    let mut seen = vec![false; batch.plan.len()];
    for r in records {
        seen[r.job] = true;
    }
    let not_run: Vec<usize> = (0..batch.plan.len())
        .filter(|&j| !seen[j] && !batch.plan[j].warmup)
        .collect();
    let stop = batch.stop_reason();
    let mut doc = document(batch, records, &not_run, stop.as_ref(), wall);
    doc.manifest = opts.manifest.display().to_string();
    doc.manifest_fingerprint = fingerprint;
    doc.task_filters = opts.tasks.clone();
    let summary = here_summary(batch, &doc);
    doc.totals = report::totals(&summary);
    doc.tasks = summary;
    let cancelled = records.iter().filter(|r| r.cancelled_by_stop).count();
    let mut notes = String::new();
    if let Some(s) = &stop {
        notes.push_str(&format!(
            "stopped: {s}; {cancelled} run(s) cancelled, {} not run\n",
            not_run.len()
        ));
    }
    if let Some(line) = not_crash_safe(records) {
        notes.push_str(&line);
    }
    if let Some(p) = batch.partition {
        notes.push_str(&format!(
            "shard {}/{} of manifest {}\n",
            p.index, p.count, doc.manifest_fingerprint
        ));
    }
    RunEnd {
        doc,
        wall,
        notes,
        title: opts.manifest.display().to_string(),
    }
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
    let runs: Vec<BatchRun> = measured
        .iter()
        .map(|r| reporter::run_doc(batch, r))
        .collect();
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
        duration_ms: corral::document::ms(wall),
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
        warmup_runs: warm.iter().map(|r| reporter::run_doc(batch, r)).collect(),
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
        .any(|j| match batch.tasks[j.task].spec.containment {
            Some(corral::document::Containment::Subreaper) => true,
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

/// The spec of the first task of manifest text (the test of every spec
/// field's reach, `crate::surfaces`).
#[cfg(all(test, unix))]
pub(crate) fn first_task_spec(text: &str) -> Result<corral::document::RunSpec, String> {
    let tasks = manifest::parse("surfaces.toml", text, std::path::Path::new("/base"))
        .map_err(|e| e.to_string())?;
    tasks
        .into_iter()
        .next()
        .map(|t| t.spec)
        .ok_or_else(|| "no task".to_owned())
}

/// Reads and checks the manifest at `path` (`-`: standard input).
fn load_manifest(path: &Path) -> Result<manifest::Manifest, BatchError> {
    if path == Path::new("-") {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin().lock(), &mut text)
            .map_err(BatchError::ManifestStdin)?;
        // Relative `cwd`s are relative to corral's working directory.
        let tasks = manifest::parse("<stdin>", &text, Path::new("."))?;
        return Ok(manifest::Manifest { tasks });
    }
    let file = path.display().to_string();
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(source) => return Err(BatchError::ManifestRead { file, source }),
    };
    let base = path
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    let tasks = manifest::parse(&file, &text, &base)?;
    Ok(manifest::Manifest { tasks })
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
            parse_partition("2/3", none).ok(),
            Some(Partition { index: 2, count: 3 })
        );
        let env = |v: &str| (v == "IX").then(|| "0".to_owned());
        assert_eq!(
            parse_partition("env:IX/4", env).ok(),
            Some(Partition { index: 1, count: 4 })
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
    fn task_selection() {
        let names = ["unit-a", "unit-b", "lint"];
        let pats = |p: &[&str]| p.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let table: [(&[&str], Option<[bool; 3]>); 6] = [
            (&[], Some([true, true, true])),
            (&["unit-*"], Some([true, true, false])),
            (&["lint", "unit-b"], Some([false, true, true])),
            (&["*"], Some([true, true, true])),
            (&["unit-?"], Some([true, true, false])),
            (&["unit-*", "nope"], None),
        ];
        for (p, want) in table {
            let got = select(&names, &pats(p)).ok();
            assert_eq!(got, want.map(|w| w.to_vec()), "{p:?}");
        }
        let e = select(&names, &pats(&["x*"])).unwrap_err();
        assert_eq!(
            error::render(&e),
            "--task \"x*\" matches no task (tasks: unit-a, unit-b, lint)"
        );
    }

    #[test]
    fn report_files_in_the_order_they_are_written() {
        use reporter::FileKind;
        let p = |s: &'static str| Some(Path::new(s));
        let kinds = |v: Vec<ReportFile>| v.into_iter().map(|f| f.kind).collect::<Vec<_>>();
        assert_eq!(
            kinds(ReportFile::all(p("r"), p("j"), p("m"))),
            [FileKind::Json, FileKind::JUnit, FileKind::Markdown]
        );
        assert_eq!(
            kinds(ReportFile::all(None, p("j"), None)),
            [FileKind::JUnit]
        );
        assert!(ReportFile::all(None, None, None).is_empty());
    }

    #[test]
    fn the_exit_code_is_corral_failed_after_any_error() {
        let ended = |code, errors: usize| {
            Ok(Ended {
                code,
                errors: (0..errors).map(|_| BatchError::BothStdout).collect(),
            })
        };
        let table = [
            (ended(ALL_PASSED, 0), ALL_PASSED),
            (ended(SOME_FAILED, 0), SOME_FAILED),
            (ended(SOME_ERRORED, 0), SOME_ERRORED),
            (ended(ALL_PASSED, 1), CORRAL_FAILED),
            (ended(SOME_FAILED, 2), CORRAL_FAILED),
            (Err(BatchError::BothStdout), CORRAL_FAILED),
        ];
        for (result, want) in table {
            assert_eq!(exit_code(result), want);
        }
    }

    #[test]
    fn round_robin_shards() {
        let shards: Vec<u32> = (0..7).map(|i| exec::shard_of(i, 3)).collect();
        assert_eq!(shards, [1, 2, 3, 1, 2, 3, 1]);
    }
}
