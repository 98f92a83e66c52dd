//! Running the plan: what one run is ([`Batch::prepare`] and
//! [`Batch::conclude`], shared by every executor), which runs this
//! invocation has (`--task`, `--partition`, warmups: [`Batch::new`]), in
//! which order they may start (the scheduler: [`Batch::take`] hands out
//! jobs in plan order, and holds the queue while a `serial` run or a task's
//! warmups are not done), and how they are awaited ([`Executor`]: one
//! tokio reactor thread on Unix, a bounded pool of threads elsewhere).
//!
//! An executor takes jobs until there are none (plan done, or the batch
//! was stopped), runs each job's attempts through the one attempt loop
//! ([`Batch::run_job`]: retries, flakiness, fail-fast) and sends typed
//! events ([`BatchEvent`]) through the channel: `AttemptStarted` before each
//! attempt, `AttemptFinished` after it (`will_retry` when another follows),
//! or `JobSkipped`. It knows no reporter. The channel closes when the
//! executor is done, which is how the caller knows.

use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use corral::{CancelToken, Command, ContainmentChoice, Error, Output, Report, Stream};
use serde_json::Value;

use super::classify::{classify, EventScanner, Status, StopReason, Verdict};
use super::events::BatchEvent;
use super::manifest::Task;
use super::record::RunRecord;

/// `name#run`, or `name#wN` for a warmup run.
pub fn job_name(tasks: &[Task], j: &Job) -> String {
    let w = if j.warmup { "w" } else { "" };
    format!("{}#{w}{}", tasks[j.task].name, j.run)
}

/// What the conclusion of one attempt needs besides its result.
pub struct Prepared {
    pub scanner: Option<Arc<Mutex<EventScanner>>>,
    /// `--output-dir` files (stdout, stderr).
    pub files: [Option<String>; 2],
    /// An output file could not be created: the attempt does not run.
    pub open_error: Option<String>,
    /// Writing an output file failed (the run's stream was then closed).
    pub write_error: Arc<Mutex<Option<String>>>,
    pub attempt: u32,
}

/// An `--output-dir` file that remembers its first write error, so the run
/// that lost output says so.
struct OutputFile {
    f: std::fs::File,
    path: String,
    failed: Arc<Mutex<Option<String>>>,
}

impl OutputFile {
    fn note<T>(&self, r: io::Result<T>) -> io::Result<T> {
        if let Err(e) = &r {
            self.failed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get_or_insert_with(|| format!("cannot write {} (--output-dir): {e}", self.path));
        }
        r
    }
}

impl io::Write for OutputFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let r = self.f.write(buf);
        self.note(r)
    }
    fn flush(&mut self) -> io::Result<()> {
        let r = self.f.flush();
        self.note(r)
    }
}
use crate::exit;
use crate::json::JsonReport;
use corral::document::RunReport;

/// One run of one task.
#[derive(Debug, Clone, Copy)]
pub struct Job {
    pub task: usize,
    pub run: u32,
    /// A warmup run: shown, never counted.
    pub warmup: bool,
    /// The shard (1-based) this run belongs to (warmups: this shard).
    pub shard: u32,
}

/// How the runs of one manifest are split across `count` shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Partition {
    /// 1-based.
    pub index: u32,
    pub count: u32,
}

/// Which runs this invocation runs.
pub struct Selection {
    /// Tasks selected by `--task` (all when there is no pattern).
    pub tasks: Vec<bool>,
    pub partition: Option<Partition>,
}

/// Options that apply to every run.
pub struct RunOptions {
    pub fail_fast: bool,
    pub keep_output: usize,
    pub containment: ContainmentChoice,
    /// `--retries`: used for tasks without a `retries` key.
    pub retries: Option<u32>,
    pub output_dir: Option<PathBuf>,
    /// `--require-crash-safety`: required of every run, whatever the
    /// tasks say.
    pub require_crash_safety: bool,
}

/// The shared state of one batch.
pub struct Batch {
    pub tasks: Vec<Task>,
    /// What this invocation runs, in order: per task, its warmups (when
    /// it has a measured run here), then its measured runs in this shard.
    pub plan: Vec<Job>,
    pub selected: Vec<bool>,
    pub partition: Option<Partition>,
    pub opts: RunOptions,
    /// File stem per task for `--output-dir` (unique, file-name safe).
    stems: Vec<String>,
    pub start: Instant,
    /// Cancels every run (fail-fast, SIGINT, SIGTERM, SIGHUP).
    pub token: CancelToken,
    sched: Mutex<Sched>,
    wake: Condvar,
    #[cfg(unix)]
    notify: tokio::sync::Notify,
    stop: Mutex<Option<StopReason>>,
}

/// The scheduler's state: the next job in plan order, and what runs.
struct Sched {
    next: usize,
    running: usize,
    serial_running: bool,
    /// Per task: warmups not finished yet (its measured runs wait).
    warm_left: Vec<u32>,
}

/// What the scheduler says to a worker.
enum Take {
    Job(usize),
    Wait,
    Done,
}

/// The shard (1-based) of the `ordinal`-th measured run of the selection:
/// round-robin, so a task's repeats spread over the shards and every shard
/// gets within one run of the same count.
pub fn shard_of(ordinal: usize, count: u32) -> u32 {
    (ordinal % count as usize) as u32 + 1
}

/// The longest stem kept whole, in bytes (a file name is at most 255 on
/// most file systems; `#w123.retry9.stderr` follows the stem).
const STEM_MAX: usize = 160;

/// A file-name-safe stem for each task name, unique by construction: the
/// encoding is one-to-one (ASCII letters, digits, `_`, `-` and a `.` that
/// is not first stand for themselves; every other byte, `%` included, is
/// `%XX`), so two names can only share a stem if they are the same name,
/// and a stem never holds `/`, `#`, or starts with `.` (no `..`, no hidden
/// file). A stem longer than [`STEM_MAX`] is cut and ends in `~N`, N the
/// task's place in the manifest (`~` is never part of an encoded name, so
/// a cut stem cannot meet an uncut one, nor another cut one).
pub fn file_stems(tasks: &[Task]) -> Vec<String> {
    tasks
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let mut s = String::new();
            for (n, &b) in t.name.as_bytes().iter().enumerate() {
                if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || (b == b'.' && n > 0) {
                    s.push(char::from(b));
                } else {
                    s.push_str(&format!("%{b:02X}"));
                }
            }
            if s.is_empty() || s.len() > STEM_MAX {
                s.truncate(STEM_MAX);
                s.push_str(&format!("~{i}"));
            }
            s
        })
        .collect()
}

impl Batch {
    pub fn new(tasks: Vec<Task>, sel: Selection, opts: RunOptions) -> Batch {
        let count = sel.partition.map_or(1, |p| p.count);
        let here = sel.partition.map_or(1, |p| p.index);
        let mut selection = Vec::new();
        for (task, t) in tasks.iter().enumerate() {
            if !sel.tasks[task] {
                continue;
            }
            for run in 0..t.repeat {
                let shard = shard_of(selection.len(), count);
                selection.push(Job {
                    task,
                    run,
                    warmup: false,
                    shard,
                });
            }
        }
        let mut per_task: Vec<Vec<Job>> = vec![Vec::new(); tasks.len()];
        for j in selection.iter().filter(|j| j.shard == here) {
            per_task[j.task].push(*j);
        }
        let mut plan = Vec::new();
        let mut warm_left = vec![0; tasks.len()];
        for ((task, t), mine) in tasks.iter().enumerate().zip(per_task) {
            if mine.is_empty() {
                continue;
            }
            warm_left[task] = t.warmup;
            plan.extend((0..t.warmup).map(|run| Job {
                task,
                run,
                warmup: true,
                shard: here,
            }));
            plan.extend(mine);
        }
        let stems = file_stems(&tasks);
        Batch {
            tasks,
            plan,
            selected: sel.tasks,
            partition: sel.partition,
            opts,
            stems,
            start: Instant::now(),
            token: CancelToken::new(),
            sched: Mutex::new(Sched {
                next: 0,
                running: 0,
                serial_running: false,
                warm_left,
            }),
            wake: Condvar::new(),
            #[cfg(unix)]
            notify: tokio::sync::Notify::new(),
            stop: Mutex::new(None),
        }
    }

    /// `name#run` (`name#w0` for a warmup), how a run is named everywhere.
    pub fn run_name(&self, job: usize) -> String {
        job_name(&self.tasks, &self.plan[job])
    }

    fn take(&self) -> Take {
        if self.token.is_cancelled() {
            return Take::Done;
        }
        let mut s = self.sched.lock().unwrap_or_else(|e| e.into_inner());
        if s.next >= self.plan.len() {
            return Take::Done;
        }
        if s.serial_running {
            return Take::Wait;
        }
        let j = self.plan[s.next];
        if !j.warmup && s.warm_left[j.task] > 0 {
            return Take::Wait;
        }
        if self.tasks[j.task].serial {
            if s.running > 0 {
                return Take::Wait;
            }
            s.serial_running = true;
        }
        let job = s.next;
        s.next += 1;
        s.running += 1;
        Take::Job(job)
    }

    /// A job taken with `take` is over (finished or skipped).
    fn done(&self, job: usize) {
        {
            let mut s = self.sched.lock().unwrap_or_else(|e| e.into_inner());
            let j = self.plan[job];
            s.running -= 1;
            if self.tasks[j.task].serial {
                s.serial_running = false;
            }
            if j.warmup {
                s.warm_left[j.task] = s.warm_left[j.task].saturating_sub(1);
            }
        }
        self.wake_all();
    }

    fn wake_all(&self) {
        self.wake.notify_all();
        #[cfg(unix)]
        self.notify.notify_waiters();
    }

    /// The next job to start, waiting while a serial run or a task's
    /// warmups hold the queue; None when the plan is done or the batch
    /// stopped.
    #[cfg_attr(unix, allow(dead_code))]
    fn next_job_blocking(&self) -> Option<usize> {
        loop {
            match self.take() {
                Take::Job(j) => return Some(j),
                Take::Done => return None,
                Take::Wait => {
                    let g = self.sched.lock().unwrap_or_else(|e| e.into_inner());
                    // Re-checked on every wake; the timeout covers a stop
                    // (cancel) that raced with the check.
                    let _ = self.wake.wait_timeout(g, Duration::from_millis(50));
                }
            }
        }
    }

    #[cfg(unix)]
    async fn next_job(&self) -> Option<usize> {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            match self.take() {
                Take::Job(j) => return Some(j),
                Take::Done => return None,
                Take::Wait => notified.await,
            }
        }
    }

    pub fn retries(&self, task: usize) -> u32 {
        self.opts.retries.unwrap_or(self.tasks[task].retries)
    }

    /// Stops the batch: nothing more starts, every running tree is
    /// cancelled (the first reason wins).
    pub fn stop(&self, why: StopReason, signal: Option<corral::Signal>) {
        {
            let mut s = self.stop.lock().unwrap_or_else(|e| e.into_inner());
            if s.is_some() {
                return;
            }
            *s = Some(why);
        }
        match signal {
            Some(sig) => self.token.cancel_with(sig),
            None => self.token.cancel(),
        }
        self.wake_all();
    }

    pub fn stop_reason(&self) -> Option<StopReason> {
        self.stop.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The command of one attempt of a job, and what its conclusion needs
    /// (the scanner its stdout lines feed, the `--output-dir` files).
    pub fn prepare(&self, job: usize, attempt: u32) -> (Command, Prepared) {
        let j = self.plan[job];
        let t = &self.tasks[j.task];
        let mut cmd = self.command(j, attempt);
        let out = self.output_files(&mut cmd, j, attempt);
        // The library delivers lines of up to 4 MiB whole and longer ones in
        // pieces of that size: MAX_EVENT_LINE matches it, so the scanner
        // can tell a piece from a line.
        let scanner = t.result_event.as_ref().map(|rule| {
            let s = Arc::new(Mutex::new(EventScanner::new(&rule.ty)));
            let feed = s.clone();
            cmd.on_line(move |stream, line| {
                if stream == Stream::Stdout {
                    feed.lock().unwrap_or_else(|e| e.into_inner()).line(line);
                }
            });
            s
        });
        let prep = Prepared {
            scanner,
            files: out.files,
            open_error: out.open_error,
            write_error: out.write_error,
            attempt,
        };
        (cmd, prep)
    }

    /// The task's command line, environment and limits: its spec, then
    /// what the batch adds (the run's variables, `--containment` for a
    /// task without its own, `--require-crash-safety`, the kept output,
    /// the batch's cancellation).
    fn command(&self, j: Job, attempt: u32) -> Command {
        let t = &self.tasks[j.task];
        let mut spec = t.spec.clone();
        let env = spec.env.get_or_insert_with(Default::default);
        for (k, v) in [
            ("CORRAL_TASK", t.name.clone()),
            ("CORRAL_RUN", j.run.to_string()),
            ("CORRAL_ATTEMPT", attempt.to_string()),
            ("CORRAL_WARMUP", if j.warmup { "1" } else { "0" }.to_owned()),
        ] {
            env.insert(k.into(), v.into());
        }
        spec.require_crash_safety |= self.opts.require_crash_safety;
        spec.capture_limit = Some(self.opts.keep_output as u64);
        let mut cmd = match Command::from_spec(&spec) {
            Ok(cmd) => cmd,
            // The manifest's checks give every task a program.
            Err(_) => Command::new(""),
        };
        if spec.containment.is_none() {
            cmd.containment(self.opts.containment);
        }
        cmd.cancel_token(&self.token);
        cmd
    }

    /// `--output-dir`: every byte goes to the run's files as it comes
    /// (the library's relay writer thread), while the capture keeps only
    /// head and tail for the reports.
    fn output_files(&self, cmd: &mut Command, j: Job, attempt: u32) -> OutputFiles {
        let mut out = OutputFiles::default();
        let Some(dir) = &self.opts.output_dir else {
            return out;
        };
        let stem = output_stem(&self.stems[j.task], j, attempt);
        for (i, ext) in ["stdout", "stderr"].into_iter().enumerate() {
            let path = dir.join(format!("{stem}.{ext}"));
            match crate::outfile::create(&path, crate::outfile::Links::Replace) {
                Ok(f) => {
                    let w = OutputFile {
                        f,
                        path: path.display().to_string(),
                        failed: out.write_error.clone(),
                    };
                    if i == 0 {
                        cmd.stdout(Output::relay(w));
                    } else {
                        cmd.stderr(Output::relay(w));
                    }
                    out.files[i] = Some(path.display().to_string());
                }
                Err(e) => {
                    out.open_error.get_or_insert(format!(
                        "cannot create {} (--output-dir): {e}",
                        path.display()
                    ));
                }
            }
        }
        out
    }

    /// Classifies a finished run into its record.
    pub fn conclude(
        &self,
        job: usize,
        result: Result<Report, Error>,
        prep: Prepared,
        started: Instant,
    ) -> RunRecord {
        let Prepared {
            scanner,
            files: [stdout_file, stderr_file],
            attempt,
            write_error,
            ..
        } = prep;
        let write_error = write_error.lock().unwrap_or_else(|e| e.into_inner()).take();
        let write_error = write_error.or_else(|| short_file(&result, [&stdout_file, &stderr_file]));
        let wall = started.elapsed();
        let j = self.plan[job];
        let stop = self.stop_reason();
        let seen = scanner.and_then(|s| s.lock().unwrap_or_else(|e| e.into_inner()).take());
        let (v, event) = self.verdict(j.task, &result, seen, stop.as_ref(), write_error.as_deref());
        let retryable = retryable(
            v.status,
            write_error.is_some(),
            match &result {
                Ok(r) => Some((
                    r.cleanup_errors.is_empty(),
                    r.outcome == corral::Outcome::Cancelled,
                )),
                Err(_) => None,
            },
        );
        let (report, stdout, stderr, cancelled_by_stop) = report_of(&result, stop.as_ref(), wall);
        RunRecord {
            job,
            task: j.task,
            run: j.run,
            status: v.status,
            reason: v.reason,
            result_code: v.result_code,
            result_event: event,
            started: started.saturating_duration_since(self.start),
            wall,
            cancelled_by_stop,
            report,
            stdout,
            stderr,
            attempt,
            attempts: Vec::new(),
            flaky: false,
            retryable,
            stdout_file,
            stderr_file,
        }
    }

    /// The verdict of a run, and the result event it is judged by (read
    /// only after a clean lifecycle; `classify` enforces that too). Output
    /// that could not be kept is corral's failure: an error, whatever the
    /// program did.
    fn verdict(
        &self,
        task: usize,
        result: &Result<Report, Error>,
        seen: Option<Value>,
        stop: Option<&StopReason>,
        write_error: Option<&str>,
    ) -> (Verdict, Option<Value>) {
        let t = &self.tasks[task];
        let clean = matches!(result, Ok(r) if r.exit_code().is_some());
        let ignored = !clean && seen.is_some();
        let event = if clean { seen } else { None };
        let mut v = classify(
            result,
            t.expect_exit,
            t.result_event.as_ref(),
            event.as_ref(),
            stop,
        );
        if ignored {
            if let (Some(r), Some(rule)) = (v.reason.as_mut(), &t.result_event) {
                r.push_str(&format!(
                    "; its {:?} event was not read (only a clean exit's is)",
                    rule.ty
                ));
            }
        }
        if let Some(e) = write_error {
            v.status = Status::Error;
            v.reason = Some(match v.reason.take() {
                Some(r) => format!("{e}; {r}"),
                None => e.to_owned(),
            });
        }
        (v, event)
    }

    /// Runs one job, every attempt, to its end: until an attempt passes,
    /// one is not retryable, the task's retries are spent or the batch
    /// stops. `run` runs one attempt's command (the sync API on a worker
    /// thread, the async API on the reactor): the one thing the executors
    /// do differently. Sends `AttemptStarted` before each attempt and
    /// `AttemptFinished` after it (`will_retry` when another follows), or
    /// `JobSkipped` when the batch stopped before the job started.
    async fn run_job<F, Fut>(&self, job: usize, tx: &Sender<BatchEvent>, mut run: F)
    where
        F: FnMut(Command) -> Fut,
        Fut: Future<Output = Result<Report, Error>>,
    {
        let task = self.plan[job].task;
        let mut earlier: Vec<RunRecord> = Vec::new();
        let mut attempt = 0;
        loop {
            let (cmd, prep) = self.prepare(job, attempt);
            let at = self.start.elapsed();
            let _ = tx.send(BatchEvent::AttemptStarted { job, attempt, at });
            let started = Instant::now();
            // An attempt whose output files could not be made does not run
            // (an error of corral's, not retried).
            let result = match &prep.open_error {
                Some(e) => Err(Error::InvalidInput(e.clone())),
                None => run(cmd).await,
            };
            if matches!(result, Err(Error::CancelledBeforeSpawn)) {
                self.end_cancelled(job, earlier, tx);
                return;
            }
            let mut rec = self.conclude(job, result, prep, started);
            let again = will_retry(
                rec.retryable,
                rec.attempt,
                self.retries(task),
                self.token.is_cancelled(),
            );
            if !again {
                rec.flaky = rec.status == Status::Passed && !earlier.is_empty();
                rec.attempts = earlier;
                self.finish(job, rec, tx);
                return;
            }
            let _ = tx.send(BatchEvent::AttemptFinished {
                record: Box::new(rec.clone()),
                will_retry: true,
            });
            earlier.push(rec);
            attempt += 1;
        }
    }

    /// Sends the final record of a job, and stops the batch under
    /// `--fail-fast` when it did not pass.
    fn finish(&self, job: usize, rec: RunRecord, tx: &Sender<BatchEvent>) {
        let j = self.plan[job];
        if self.opts.fail_fast
            && !j.warmup
            && rec.status != Status::Passed
            && !rec.cancelled_by_stop
        {
            self.stop(StopReason::FailFast(self.run_name(job)), None);
        }
        let _ = tx.send(BatchEvent::AttemptFinished {
            record: Box::new(rec),
            will_retry: false,
        });
    }

    /// The batch stopped before an attempt could start: a job that never
    /// started is skipped; one with earlier attempts ends as its last one.
    fn end_cancelled(&self, job: usize, mut earlier: Vec<RunRecord>, tx: &Sender<BatchEvent>) {
        let event = match earlier.pop() {
            None => BatchEvent::JobSkipped { job },
            Some(mut last) => {
                last.attempts = earlier;
                BatchEvent::AttemptFinished {
                    record: Box::new(last),
                    will_retry: false,
                }
            }
        };
        let _ = tx.send(event);
    }
}

/// The `--output-dir` files of one attempt.
#[derive(Default)]
struct OutputFiles {
    /// (stdout, stderr).
    files: [Option<String>; 2],
    open_error: Option<String>,
    write_error: Arc<Mutex<Option<String>>>,
}

/// `stem#run` (`stem#wN` for a warmup), `.retryN` for a later attempt.
fn output_stem(task_stem: &str, j: Job, attempt: u32) -> String {
    let mut stem = format!("{task_stem}#");
    if j.warmup {
        stem.push('w');
    }
    stem.push_str(&j.run.to_string());
    if attempt > 0 {
        stem.push_str(&format!(".retry{attempt}"));
    }
    stem
}

/// Every byte the run wrote is in its `--output-dir` file, or the run
/// says not: the first file shorter (or longer) than the stream.
fn short_file(result: &Result<Report, Error>, files: [&Option<String>; 2]) -> Option<String> {
    let Ok(r) = result else { return None };
    for (file, total) in files
        .into_iter()
        .zip([r.stdout.total_bytes(), r.stderr.total_bytes()])
    {
        let Some(f) = file else { continue };
        let len = std::fs::metadata(f).map_or(0, |m| m.len());
        if len != total {
            return Some(format!(
                "{f} (--output-dir) has {len} of the {total} bytes the run wrote"
            ));
        }
    }
    None
}

/// The run's `corral run --report` object, its kept output, and whether
/// the batch's stop cancelled it.
fn report_of(
    result: &Result<Report, Error>,
    stop: Option<&StopReason>,
    wall: Duration,
) -> (RunReport, String, String, bool) {
    let received = match stop {
        Some(StopReason::Signal(s)) => Some(*s),
        _ => None,
    };
    let (report, stdout, stderr, cancelled_by_stop) = match result {
        Ok(r) => {
            let code = exit::for_report(r, received);
            (
                JsonReport::from_report(r, received, code),
                r.stdout.text_lossy(),
                r.stderr.text_lossy(),
                stop.is_some() && r.outcome == corral::Outcome::Cancelled,
            )
        }
        Err(e) => {
            let code = exit::for_error(e, received);
            (
                JsonReport::from_error(e, received, code, wall),
                String::new(),
                String::new(),
                false,
            )
        }
    };
    (report.into_document(), stdout, stderr, cancelled_by_stop)
}

/// Whether an attempt that did not pass may run again (the count aside).
/// Retried: what the program did (failed, timed out, held its output, died
/// by a signal corral did not send, a missing result event). Never
/// retried: what corral or the machine did (spawn failure: `ran` is None;
/// containment or cleanup failure; output lost) and cancellations. `ran`:
/// (cleanup was clean, the run was cancelled).
pub fn retryable(status: Status, lost_output: bool, ran: Option<(bool, bool)>) -> bool {
    status != Status::Passed
        && !lost_output
        && matches!(ran, Some((clean_cleanup, cancelled)) if clean_cleanup && !cancelled)
}

/// Whether another attempt follows this one: it may be retried, the
/// task's retries are not spent, and the batch has not stopped.
pub fn will_retry(retryable: bool, attempt: u32, retries: u32, stopped: bool) -> bool {
    retryable && attempt < retries && !stopped
}

/// Drives a future whose every await is ready at once (the attempt loop
/// over the sync API) on this thread.
#[cfg_attr(unix, allow(dead_code))]
fn block_on_ready<F: Future>(fut: F) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::yield_now();
    }
}

/// One thread running a tokio reactor: `jobs` runs at once, each awaited
/// through the async API, so a batch costs the same two threads (this one
/// and the caller's) whatever `--jobs` is.
#[cfg(unix)]
pub struct Reactor;

#[cfg(unix)]
impl Executor for Reactor {
    fn start(&self, batch: Arc<Batch>, jobs: usize, tx: Sender<BatchEvent>) -> io::Result<()> {
        let n = jobs.clamp(1, batch.plan.len().max(1));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        std::thread::Builder::new()
            .name("corral-batch".into())
            .spawn(move || {
                rt.block_on(async move {
                    let mut set = tokio::task::JoinSet::new();
                    for _ in 0..n {
                        let (b, tx) = (batch.clone(), tx.clone());
                        set.spawn(async move {
                            while let Some(job) = b.next_job().await {
                                b.run_job(job, &tx, |mut cmd| async move { cmd.run_async().await })
                                    .await;
                                b.done(job);
                            }
                        });
                    }
                    drop(tx);
                    while set.join_next().await.is_some() {}
                });
            })?;
        Ok(())
    }
}

/// Runs a batch's plan, at most `jobs` runs at once.
pub trait Executor {
    /// Starts running; returns once the work is under way. The events
    /// channel closes (every sender dropped) when every job has finished or
    /// been skipped.
    fn start(&self, batch: Arc<Batch>, jobs: usize, tx: Sender<BatchEvent>) -> io::Result<()>;
}

/// `jobs` threads, each supervising one run at a time with the sync API: a
/// batch of any size costs `jobs` threads (the library adds none for
/// captured output). Used where the async API is not available.
#[cfg_attr(unix, allow(dead_code))]
pub struct ThreadPool;

impl Executor for ThreadPool {
    fn start(&self, batch: Arc<Batch>, jobs: usize, tx: Sender<BatchEvent>) -> io::Result<()> {
        let n = jobs.clamp(1, batch.plan.len().max(1));
        let mut started = 0;
        let mut last_err = None;
        for i in 0..n {
            let (b, tx) = (batch.clone(), tx.clone());
            let spawned = std::thread::Builder::new()
                .name(format!("corral-batch-{i}"))
                .stack_size(1 << 20)
                .spawn(move || {
                    while let Some(job) = b.next_job_blocking() {
                        block_on_ready(
                            b.run_job(job, &tx, |mut cmd| std::future::ready(cmd.run())),
                        );
                        b.done(job);
                    }
                });
            match spawned {
                Ok(_) => started += 1,
                // Fewer threads than asked is slower, not wrong.
                Err(e) => {
                    last_err = Some(e);
                    break;
                }
            }
        }
        match (started, last_err) {
            (0, Some(e)) => Err(e),
            (_, Some(e)) => {
                say!("corral: started {started} of {n} worker threads: {e}");
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_retried() {
        use Status::{Error, Failed, Passed};
        // (status, output lost, ran: (clean cleanup, cancelled), retryable)
        let table = [
            (Failed, false, Some((true, false)), true),
            (Error, false, Some((true, false)), true),
            (Passed, false, Some((true, false)), false),
            (Failed, true, Some((true, false)), false),
            (Failed, false, Some((false, false)), false),
            (Error, false, Some((true, true)), false),
            (Error, false, None, false),
            (Failed, true, None, false),
        ];
        for (status, lost, ran, want) in table {
            assert_eq!(
                retryable(status, lost, ran),
                want,
                "{status:?} lost={lost} ran={ran:?}"
            );
        }
    }

    #[test]
    fn when_another_attempt_follows() {
        // (retryable, attempt, retries, stopped, again)
        let table = [
            (true, 0, 1, false, true),
            (true, 1, 1, false, false),
            (true, 0, 0, false, false),
            (true, 0, 3, true, false),
            (false, 0, 3, false, false),
            (true, 2, 3, false, true),
            (true, u32::MAX - 1, u32::MAX, false, true),
        ];
        for (r, attempt, retries, stopped, want) in table {
            assert_eq!(
                will_retry(r, attempt, retries, stopped),
                want,
                "{r} {attempt}/{retries} stopped={stopped}"
            );
        }
    }

    #[test]
    fn output_file_stems() {
        let job = |run, warmup| Job {
            task: 0,
            run,
            warmup,
            shard: 1,
        };
        let table = [
            (job(0, false), 0, "t#0"),
            (job(3, false), 0, "t#3"),
            (job(1, true), 0, "t#w1"),
            (job(2, false), 1, "t#2.retry1"),
            (job(0, true), 9, "t#w0.retry9"),
        ];
        for (j, attempt, want) in table {
            assert_eq!(output_stem("t", j, attempt), want);
        }
    }

    /// (job, attempt, will_retry) of every event an executor sends, in
    /// order, for a batch of a failing task run twice with one retry.
    #[cfg(unix)]
    fn attempts_seen(executor: &dyn Executor) -> Vec<(usize, u32, Option<bool>)> {
        let text = "[[task]]\nname = \"f\"\nrun = [\"false\"]\nrepeat = 2\nretries = 1\n";
        let tasks =
            super::super::manifest::parse("m.toml", text, std::path::Path::new(".")).unwrap();
        let batch = Arc::new(Batch::new(
            tasks,
            Selection {
                tasks: vec![true],
                partition: None,
            },
            RunOptions {
                fail_fast: false,
                keep_output: 1024,
                containment: ContainmentChoice::Auto,
                retries: None,
                output_dir: None,
                require_crash_safety: false,
            },
        ));
        let (tx, rx) = std::sync::mpsc::channel();
        executor.start(batch, 1, tx).unwrap();
        rx.iter()
            .map(|e| match e {
                BatchEvent::AttemptStarted { job, attempt, .. } => (job, attempt, None),
                BatchEvent::AttemptFinished { record, will_retry } => {
                    assert_eq!(record.status, Status::Failed);
                    assert_eq!(record.attempts.len(), if will_retry { 0 } else { 1 });
                    (record.job, record.attempt, Some(will_retry))
                }
                BatchEvent::JobSkipped { job } => (job, u32::MAX, None),
                BatchEvent::RunFinished(_) => unreachable!("the executor never ends the run"),
            })
            .collect()
    }

    /// One attempt loop: the thread pool (sync API) and the reactor (async
    /// API) send the same events for the same plan (`false` is a Unix
    /// program).
    #[cfg(unix)]
    #[test]
    fn both_executors_send_the_same_attempts() {
        let want = vec![
            (0, 0, None),
            (0, 0, Some(true)),
            (0, 1, None),
            (0, 1, Some(false)),
            (1, 0, None),
            (1, 0, Some(true)),
            (1, 1, None),
            (1, 1, Some(false)),
        ];
        assert_eq!(attempts_seen(&ThreadPool), want);
        assert_eq!(attempts_seen(&Reactor), want);
    }

    #[test]
    fn ready_futures_run_on_the_calling_thread() {
        let mut n = 0;
        let got = block_on_ready(async {
            for i in 0..3 {
                n += std::future::ready(i).await;
            }
            n
        });
        assert_eq!(got, 3);
    }
}
