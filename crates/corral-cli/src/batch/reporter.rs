//! The reporters: each consumes the batch's events ([`BatchEvent`]) and
//! makes one output of it, so the executor knows none of them (nextest's
//! runner/reporter split). The live display is `progress::Progress`; here
//! are the `--events` log, the summary table, and the report files
//! (`--report`, `--junit`, `--export-markdown`), the last three shared with
//! `corral merge`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{json, Value};

use super::error::BatchError;
use super::events::{BatchEvent, RunEnd};
use super::exec::Batch;
use super::record::RunRecord;
use super::report::BatchRun;
use super::{junit, report};

/// One output of a batch, made from its events.
pub trait Reporter {
    /// Takes one event. An error is what this reporter could not write;
    /// the batch goes on and ends in failure.
    fn event(&mut self, event: &BatchEvent) -> Result<(), BatchError>;

    /// Called about ten times a second while the batch runs.
    fn tick(&mut self) {}
}

/// `--events`: one JSON object per line, flushed as it is written. The
/// first write error is kept (and reported at the end); nothing more is
/// written after it.
pub struct EventLog {
    batch: Arc<Batch>,
    out: Box<dyn Write>,
    name: String,
    failed: Option<std::io::Error>,
}

impl EventLog {
    /// The log to stdout (`-`) or to a file (created now).
    pub fn open(batch: Arc<Batch>, path: &Path) -> Result<EventLog, BatchError> {
        let out: Box<dyn Write> = if path == Path::new("-") {
            Box::new(std::io::stdout())
        } else {
            let f = crate::outfile::create(path, crate::outfile::Links::FollowTrusted).map_err(
                |source| BatchError::Unwritable {
                    what: "--events",
                    path: path.to_owned(),
                    source,
                },
            )?;
            Box::new(f)
        };
        Ok(EventLog {
            batch,
            out,
            name: path.display().to_string(),
            failed: None,
        })
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

impl Reporter for EventLog {
    fn event(&mut self, event: &BatchEvent) -> Result<(), BatchError> {
        match event {
            BatchEvent::AttemptStarted { job, attempt, at } => {
                let j = self.batch.plan[*job];
                let line = json!({
                    "event": "started",
                    "task": self.batch.tasks[j.task].name,
                    "run": j.run,
                    "warmup": j.warmup,
                    "shard": j.shard,
                    "attempt": attempt,
                    "started_ms": corral::document::ms(*at),
                });
                self.write(&line);
            }
            BatchEvent::AttemptFinished { record, will_retry } => {
                let line = finished_line(&self.batch, record, *will_retry);
                self.write(&line);
            }
            BatchEvent::JobSkipped { .. } => {}
            BatchEvent::RunFinished(_) => {
                if let Some(source) = self.failed.take() {
                    return Err(BatchError::Events {
                        name: self.name.clone(),
                        source,
                    });
                }
            }
        }
        Ok(())
    }
}

/// A `finished` event: the report's run object, plus `event` and
/// `will_retry` (another attempt follows this one).
fn finished_line(batch: &Batch, rec: &RunRecord, will_retry: bool) -> Value {
    let mut v = serde_json::to_value(run_doc(batch, rec)).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        o.insert("event".into(), Value::from("finished"));
        o.insert("will_retry".into(), Value::from(will_retry));
    }
    v
}

/// One run (or attempt) as the report shows it: the batch's fields, then
/// every field of a `corral run --report`, then the kept output.
pub fn run_doc(batch: &Batch, r: &RunRecord) -> BatchRun {
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
        started_ms: corral::document::ms(r.started),
        wall_ms: corral::document::ms(r.wall),
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

/// The per-task table and its notes, at the end: on stdout, or on stderr
/// when stdout carries the report or the events.
pub struct Table {
    pub to_stderr: bool,
}

impl Reporter for Table {
    fn event(&mut self, event: &BatchEvent) -> Result<(), BatchError> {
        let BatchEvent::RunFinished(end) = event else {
            return Ok(());
        };
        let mut text = report::table(&end.doc.tasks, end.wall);
        text.push_str(&end.notes);
        // Written, not printed: a closed pipe must not panic corral before
        // the reports are written.
        if self.to_stderr {
            let _ = std::io::stderr().write_all(text.as_bytes());
        } else {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
        }
        Ok(())
    }
}

/// A report file written at the end: which one, and where.
pub struct ReportFile {
    pub kind: FileKind,
    pub path: PathBuf,
}

/// The files a batch or a merge writes at its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// `--report`: the JSON document (`-`: stdout).
    Json,
    /// `--junit`: JUnit XML.
    JUnit,
    /// `--export-markdown`: the per-task table in Markdown.
    Markdown,
}

impl ReportFile {
    /// The reporters for the files asked for, in the order they are
    /// written.
    pub fn all(report: Option<&Path>, junit: Option<&Path>, markdown: Option<&Path>) -> Vec<Self> {
        [
            (FileKind::Json, report),
            (FileKind::JUnit, junit),
            (FileKind::Markdown, markdown),
        ]
        .into_iter()
        .filter_map(|(kind, p)| {
            p.map(|p| ReportFile {
                kind,
                path: p.to_owned(),
            })
        })
        .collect()
    }

    fn write(&self, end: &RunEnd) -> std::io::Result<()> {
        let path = self.path.as_path();
        match self.kind {
            FileKind::Json => {
                let mut s =
                    serde_json::to_string_pretty(&end.doc).map_err(std::io::Error::other)?;
                s.push('\n');
                if path == Path::new("-") {
                    let mut o = std::io::stdout().lock();
                    o.write_all(s.as_bytes()).and_then(|()| o.flush())
                } else {
                    crate::outfile::write_atomic(path, s.as_bytes())
                }
            }
            FileKind::JUnit => {
                let s = junit::render(&end.doc, &end.title).map_err(std::io::Error::other)?;
                crate::outfile::write_atomic(path, s.as_bytes())
            }
            FileKind::Markdown => {
                crate::outfile::write_atomic(path, report::markdown(&end.doc.tasks).as_bytes())
            }
        }
    }
}

impl Reporter for ReportFile {
    fn event(&mut self, event: &BatchEvent) -> Result<(), BatchError> {
        let BatchEvent::RunFinished(end) = event else {
            return Ok(());
        };
        self.write(end).map_err(|source| {
            let path = self.path.clone();
            match self.kind {
                FileKind::Json => BatchError::Report { path, source },
                FileKind::JUnit => BatchError::JUnit { path, source },
                FileKind::Markdown => BatchError::Markdown { path, source },
            }
        })
    }
}

/// Hands the end of a run to each reporter; the errors, in order.
pub fn end_run(reporters: &mut [Box<dyn Reporter>], end: RunEnd) -> Vec<BatchError> {
    let event = BatchEvent::RunFinished(Box::new(end));
    reporters
        .iter_mut()
        .filter_map(|r| r.event(&event).err())
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::{Duration, Instant};

    use super::*;
    use crate::batch::exec::{RunOptions, Selection};
    use crate::batch::{document, manifest};

    /// A writer into a buffer the test keeps, or one that always fails.
    struct Sink(Option<Arc<Mutex<Vec<u8>>>>);

    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            match &self.0 {
                Some(b) => b.lock().unwrap().write(buf),
                None => Err(std::io::Error::other("boom")),
            }
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn batch() -> Arc<Batch> {
        let text = "[[task]]\nname = \"a\"\nrun = [\"true\"]\nretries = 1\nrepeat = 2\n";
        let tasks = manifest::parse("m.toml", text, Path::new(".")).unwrap();
        Arc::new(Batch::new(
            tasks,
            Selection {
                tasks: vec![true],
                partition: None,
            },
            RunOptions {
                fail_fast: false,
                keep_output: 1024,
                containment: corral::ContainmentChoice::Auto,
                retries: None,
                output_dir: None,
                require_crash_safety: false,
            },
        ))
    }

    /// A record of job `job` without running anything (a spawn error).
    fn record(batch: &Batch, job: usize) -> Box<RunRecord> {
        let (_, prep) = batch.prepare(job, 0);
        let err = corral::Error::InvalidInput("no".into());
        Box::new(batch.conclude(job, Err(err), prep, Instant::now()))
    }

    fn end(batch: &Batch) -> BatchEvent {
        let doc = document(batch, &[], &[], None, Duration::ZERO);
        BatchEvent::RunFinished(Box::new(RunEnd {
            doc,
            wall: Duration::ZERO,
            notes: String::new(),
            title: "m.toml".into(),
        }))
    }

    /// The `--events` log is made from the events alone: a line per
    /// attempt started and finished, none for a skipped job, and its
    /// write error only at the end.
    #[test]
    fn the_event_log_is_made_from_the_events() {
        let b = batch();
        let buf = Arc::new(Mutex::new(Vec::new()));
        let mut log = EventLog {
            batch: b.clone(),
            out: Box::new(Sink(Some(buf.clone()))),
            name: "mem".into(),
            failed: None,
        };
        let events = [
            BatchEvent::AttemptStarted {
                job: 1,
                attempt: 0,
                at: Duration::from_micros(1500),
            },
            BatchEvent::AttemptFinished {
                record: record(&b, 1),
                will_retry: true,
            },
            BatchEvent::JobSkipped { job: 0 },
            BatchEvent::AttemptFinished {
                record: record(&b, 1),
                will_retry: false,
            },
            end(&b),
        ];
        for e in &events {
            log.event(e).unwrap();
        }
        let text = String::from_utf8(buf.lock().unwrap().clone()).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert_eq!(
            lines[0],
            json!({"event": "started", "task": "a", "run": 1, "warmup": false,
                   "shard": 1, "attempt": 0, "started_ms": 1.5})
        );
        for (line, retry) in lines[1..].iter().zip([true, false]) {
            assert_eq!(line["event"], "finished");
            assert_eq!(line["will_retry"], retry);
            assert_eq!(line["task"], "a");
            assert_eq!(line["run"], 1);
            assert_eq!(line["status"], "error");
        }

        let mut broken = EventLog {
            batch: b.clone(),
            out: Box::new(Sink(None)),
            name: "mem".into(),
            failed: None,
        };
        for e in &events[..4] {
            assert!(broken.event(e).is_ok());
        }
        let err = broken.event(&events[4]).unwrap_err();
        assert_eq!(
            crate::batch::error::render(&err),
            "cannot write the events to mem: boom"
        );
    }

    /// The table and the report files act on the end of the run only.
    #[test]
    fn end_reporters_ignore_the_run_time_events() {
        let b = batch();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.json");
        let mut f = ReportFile {
            kind: FileKind::Json,
            path: path.clone(),
        };
        f.event(&BatchEvent::JobSkipped { job: 0 }).unwrap();
        assert!(!path.exists());
        f.event(&end(&b)).unwrap();
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(v["plan"][0]["task"], "a");
        let mut missing = ReportFile {
            kind: FileKind::Markdown,
            path: dir.path().join("no/such/dir/m.md"),
        };
        let err = missing.event(&end(&b)).unwrap_err();
        assert!(matches!(err, BatchError::Markdown { .. }), "{err:?}");
        assert!(!err.to_string().contains("No such file"), "{err}");
    }
}
