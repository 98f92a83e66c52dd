//! Running the plan: what one run is ([`Batch::prepare`] and
//! [`Batch::conclude`], shared by every executor) and how runs are
//! scheduled ([`Executor`]; today a bounded pool of threads, each
//! supervising one run at a time through the sync API).
//!
//! An executor takes jobs from [`Batch::next_job`] until it returns `None`
//! (plan done, or the batch was stopped), and reports through the channel:
//! `Started` before each spawn, then `Finished` or `Skipped`. The channel
//! closes when the executor is done, which is how the caller knows. An
//! async executor (one task per run on a runtime, a semaphore for
//! `--jobs`) plugs in by implementing the same trait with the same two
//! halves around `spawn().await`.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use corral::{CancelToken, Command, ContainmentChoice, Error, Report, Stream};
use serde_json::Value;

use super::classify::{classify, EventScanner, Status, StopReason};
use super::manifest::Task;
use crate::exit;
use crate::json::JsonReport;

/// One run of one task.
#[derive(Debug, Clone, Copy)]
pub struct Job {
    pub task: usize,
    pub run: u32,
}

/// Everything kept about a finished run.
pub struct RunRecord {
    /// Index in the plan.
    pub job: usize,
    pub task: usize,
    pub run: u32,
    pub status: Status,
    pub reason: Option<String>,
    pub result_code: Option<i64>,
    pub result_event: Option<Value>,
    /// When it started, from the batch's start.
    pub started: Duration,
    /// Spawn to the end of cleanup (or to the spawn error).
    pub wall: Duration,
    /// Cancelled because the batch stopped (fail-fast or a signal).
    pub cancelled_by_stop: bool,
    pub report: JsonReport,
    /// Kept output (head and tail), lossily as text.
    pub stdout: String,
    pub stderr: String,
}

/// What an executor reports.
pub enum Event {
    Started {
        job: usize,
    },
    Finished(Box<RunRecord>),
    /// The batch stopped before this job could start; nothing ran.
    Skipped {
        job: usize,
    },
}

/// The shared state of one batch.
pub struct Batch {
    pub tasks: Vec<Task>,
    pub plan: Vec<Job>,
    pub fail_fast: bool,
    pub keep_output: usize,
    pub containment: ContainmentChoice,
    pub start: Instant,
    /// Cancels every run (fail-fast, SIGINT, SIGTERM, SIGHUP).
    pub token: CancelToken,
    next: AtomicUsize,
    stop: Mutex<Option<StopReason>>,
}

impl Batch {
    pub fn new(
        tasks: Vec<Task>,
        fail_fast: bool,
        keep_output: usize,
        containment: ContainmentChoice,
    ) -> Batch {
        let plan = tasks
            .iter()
            .enumerate()
            .flat_map(|(task, t)| (0..t.repeat).map(move |run| Job { task, run }))
            .collect();
        Batch {
            tasks,
            plan,
            fail_fast,
            keep_output,
            containment,
            start: Instant::now(),
            token: CancelToken::new(),
            next: AtomicUsize::new(0),
            stop: Mutex::new(None),
        }
    }

    /// `name#run`, how a run is named everywhere.
    pub fn run_name(&self, job: usize) -> String {
        let j = self.plan[job];
        format!("{}#{}", self.tasks[j.task].name, j.run)
    }

    /// The next job to start, or None when the plan is done or the batch
    /// stopped.
    pub fn next_job(&self) -> Option<usize> {
        if self.token.is_cancelled() {
            return None;
        }
        let i = self.next.fetch_add(1, Ordering::SeqCst);
        (i < self.plan.len()).then_some(i)
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
    }

    pub fn stop_reason(&self) -> Option<StopReason> {
        self.stop.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The command for a job, and the scanner its stdout lines feed (when
    /// the task reads a result event).
    pub fn prepare(&self, job: usize) -> (Command, Option<Arc<Mutex<EventScanner>>>) {
        let j = self.plan[job];
        let t = &self.tasks[j.task];
        let mut cmd = Command::new(&t.argv[0]);
        cmd.args(&t.argv[1..])
            .envs(t.env.iter().map(|(k, v)| (k, v)))
            .env("CORRAL_TASK", &t.name)
            .env("CORRAL_RUN", j.run.to_string())
            .wait_delay(t.wait_delay)
            .grace(t.grace)
            .signal(t.signal)
            .leftovers(t.leftovers)
            .containment(self.containment)
            .capture_limit(self.keep_output)
            .cancel_token(&self.token);
        if let Some(d) = &t.cwd {
            cmd.current_dir(d);
        }
        if let Some(to) = t.timeout {
            cmd.timeout(to);
        }
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
        (cmd, scanner)
    }

    /// Classifies a finished run into its record.
    pub fn conclude(
        &self,
        job: usize,
        result: Result<Report, Error>,
        scanner: Option<Arc<Mutex<EventScanner>>>,
        started: Instant,
    ) -> RunRecord {
        let wall = started.elapsed();
        let j = self.plan[job];
        let t = &self.tasks[j.task];
        let stop = self.stop_reason();
        // Read only after a clean lifecycle; `classify` enforces that too.
        let clean = matches!(&result, Ok(r) if r.exit_code().is_some());
        let seen = scanner.and_then(|s| s.lock().unwrap_or_else(|e| e.into_inner()).take());
        let ignored = !clean && seen.is_some();
        let event = if clean { seen } else { None };
        let mut v = classify(
            &result,
            t.expect_exit,
            t.result_event.as_ref(),
            event.as_ref(),
            stop.as_ref(),
        );
        if ignored {
            if let (Some(r), Some(rule)) = (v.reason.as_mut(), &t.result_event) {
                r.push_str(&format!(
                    "; its {:?} event was not read (only a clean exit's is)",
                    rule.ty
                ));
            }
        }
        let received = match &stop {
            Some(StopReason::Signal(s)) => Some(*s),
            _ => None,
        };
        let (report, stdout, stderr, cancelled_by_stop) = match &result {
            Ok(r) => {
                let code = exit::for_report(r, received);
                (
                    JsonReport::from_report(r, received, code, [false, false]),
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
        }
    }

    /// Runs one job to its end on this thread.
    #[cfg_attr(unix, allow(dead_code))]
    fn run_sync(&self, job: usize, tx: &Sender<Event>) {
        let (mut cmd, scanner) = self.prepare(job);
        let _ = tx.send(Event::Started { job });
        let started = Instant::now();
        let result = cmd.run();
        if matches!(result, Err(Error::CancelledBeforeSpawn)) {
            let _ = tx.send(Event::Skipped { job });
            return;
        }
        let rec = self.conclude(job, result, scanner, started);
        if self.fail_fast && rec.status != Status::Passed && !rec.cancelled_by_stop {
            self.stop(StopReason::FailFast(self.run_name(job)), None);
        }
        let _ = tx.send(Event::Finished(Box::new(rec)));
    }
}

impl Batch {
    /// [`run_sync`](Self::run_sync) on the async API.
    #[cfg(unix)]
    async fn run_async(&self, job: usize, tx: &Sender<Event>) {
        let (mut cmd, scanner) = self.prepare(job);
        let _ = tx.send(Event::Started { job });
        let started = Instant::now();
        let result = cmd.run_async().await;
        if matches!(result, Err(Error::CancelledBeforeSpawn)) {
            let _ = tx.send(Event::Skipped { job });
            return;
        }
        let rec = self.conclude(job, result, scanner, started);
        if self.fail_fast && rec.status != Status::Passed && !rec.cancelled_by_stop {
            self.stop(StopReason::FailFast(self.run_name(job)), None);
        }
        let _ = tx.send(Event::Finished(Box::new(rec)));
    }
}

/// One thread running a tokio reactor: `jobs` runs at once, each awaited
/// through the async API, so a batch costs the same two threads (this one
/// and the caller's) whatever `--jobs` is.
#[cfg(unix)]
pub struct Reactor;

#[cfg(unix)]
impl Executor for Reactor {
    fn start(&self, batch: Arc<Batch>, jobs: usize, tx: Sender<Event>) -> io::Result<()> {
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
                            while let Some(job) = b.next_job() {
                                b.run_async(job, &tx).await;
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
    fn start(&self, batch: Arc<Batch>, jobs: usize, tx: Sender<Event>) -> io::Result<()>;
}

/// `jobs` threads, each supervising one run at a time with the sync API: a
/// batch of any size costs `jobs` threads (the library adds none for
/// captured output). Used where the async API is not available.
#[cfg_attr(unix, allow(dead_code))]
pub struct ThreadPool;

impl Executor for ThreadPool {
    fn start(&self, batch: Arc<Batch>, jobs: usize, tx: Sender<Event>) -> io::Result<()> {
        let n = jobs.clamp(1, batch.plan.len().max(1));
        let mut started = 0;
        let mut last_err = None;
        for i in 0..n {
            let (b, tx) = (batch.clone(), tx.clone());
            let spawned = std::thread::Builder::new()
                .name(format!("corral-batch-{i}"))
                .stack_size(1 << 20)
                .spawn(move || {
                    while let Some(job) = b.next_job() {
                        b.run_sync(job, &tx);
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
