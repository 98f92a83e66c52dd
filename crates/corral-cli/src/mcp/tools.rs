//! The six run tools (the session tools are `sessions`'): their declarations (name, description, input schema) and
//! what each does. A tool that fails returns a result with `isError`; only
//! an unknown tool is a protocol error.

use std::fs::File;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use corral::{Captured, Command, Input, Output, Report, Signal};
use rmcp::model::{CallToolResult, ContentBlock, ErrorData, JsonObject, Tool};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use tokio::io::AsyncWriteExt;

use super::limits::{Checked, Limits, RunArgs, OFFERED};
use super::runs::{Background, Registry, RingWriter};

/// How long `write` waits for the program to take its data.
const WRITE_BOUND: Duration = Duration::from_secs(5);
/// How long `kill` waits for the run to end before answering.
const KILL_WAIT: Duration = Duration::from_secs(6);
/// The longest `read {wait_ms}`.
const MAX_READ_WAIT: Duration = Duration::from_secs(60);

/// The tools' state: the limits and the runs.
pub struct Tools {
    pub limits: Limits,
    pub runs: Arc<Registry>,
}

type ToolResult = Result<Value, String>;

pub(crate) fn schema(v: Value) -> Arc<JsonObject> {
    match v {
        Value::Object(m) => Arc::new(m),
        _ => Arc::new(JsonObject::new()),
    }
}

/// The input schema of `run` and `start`: generated from the spec
/// (`corral::document::run_spec_schema`), its offered fields, and `input`;
/// the timeout's description says the server's default and maximum.
fn run_schema(limits: &Limits) -> Arc<JsonObject> {
    let full = corral::document::run_spec_schema();
    let mut props = Map::new();
    for k in OFFERED {
        let mut p = full["properties"][*k].clone();
        if *k == "timeout_ms" {
            if let Some(Value::String(d)) = p.get_mut("description") {
                d.push_str(&format!(
                    " This server: default {} ms, at most {} ms (0 is refused).",
                    limits.default_timeout.as_millis(),
                    limits.max_timeout.as_millis()
                ));
            }
        }
        props.insert((*k).to_owned(), p);
    }
    props.insert(
        "input".into(),
        json!({"type": "string",
               "description": "Data written to the program's stdin (then closed, for run)."}),
    );
    schema(
        json!({"type": "object", "properties": props, "additionalProperties": false,
                  "$defs": full["$defs"]}),
    )
}

/// The tools, as `tools/list` declares them.
pub fn list(limits: &Limits) -> Vec<Tool> {
    let run_schema = || run_schema(limits);
    let id = json!({"type": "string", "description": "The id start returned."});
    vec![
        Tool::new(
            "run",
            "Run a command to its end, its whole process tree contained and killed on timeout, \
             idle timeout or output limit. Returns outcome (exited, signaled, timed_out, \
             cancelled, output_held, output_limit, cleanup_failed), exit_code, signal, \
             the tails of stdout and stderr with their byte counts, killed, kept, duration_ms.",
            run_schema(),
        ),
        Tool::new(
            "start",
            "Start a command in the background (same arguments as run; stdin stays open for \
             write). Returns its id, for read, write and kill.",
            run_schema(),
        ),
        Tool::new(
            "read",
            "Output of a started run since the last read, whether it is still running, and \
             once it ended the outcome fields of run. wait_ms waits (up to 60 s) for output \
             or the end when there is none yet.",
            schema(json!({"type": "object", "properties": {
                "id": id,
                "wait_ms": {"type": "integer", "minimum": 0}
            }, "required": ["id"], "additionalProperties": false})),
        ),
        Tool::new(
            "write",
            "Write data to a started run's stdin; eof true closes it afterwards.",
            schema(json!({"type": "object", "properties": {
                "id": id,
                "data": {"type": "string"},
                "eof": {"type": "boolean"}
            }, "required": ["id"], "additionalProperties": false})),
        ),
        Tool::new(
            "kill",
            "Kill a started run's whole tree: signal (default TERM) first, SIGKILL 2 s later. \
             Returns the outcome once the tree is dead.",
            schema(json!({"type": "object", "properties": {
                "id": id,
                "signal": {"type": "string", "description": "TERM, INT, HUP, KILL, ... or a number."}
            }, "required": ["id"], "additionalProperties": false})),
        ),
        Tool::new(
            "list",
            "Every started run (the most recent finished ones too): id, argv, pid, running, outcome.",
            schema(json!({"type": "object", "properties": {}, "additionalProperties": false})),
        ),
    ]
}

/// The arguments of `run` or `start`, or a tool error saying what is wrong
/// with them.
fn run_args(tool: &str, args: Option<JsonObject>) -> Result<RunArgs, String> {
    RunArgs::parse(args.unwrap_or_default()).map_err(|e| format!("{tool}: invalid arguments: {e}"))
}

/// Arguments of a tool, or a tool error saying what is wrong with them.
pub(crate) fn parse<T: for<'de> Deserialize<'de>>(
    tool: &str,
    args: Option<JsonObject>,
) -> Result<T, String> {
    serde_json::from_value(Value::Object(args.unwrap_or_default()))
        .map_err(|e| format!("{tool}: invalid arguments: {e}"))
}

impl Tools {
    /// Carries out one call: `Err` only for an unknown tool.
    pub async fn call(
        &self,
        name: &str,
        args: Option<JsonObject>,
    ) -> Result<CallToolResult, ErrorData> {
        let r = match name {
            "run" => self.run(args).await,
            "start" => self.start(args).await,
            "read" => self.read(args).await,
            "write" => self.write(args).await,
            "kill" => self.kill(args).await,
            "list" => self.list(args),
            _ => {
                return Err(ErrorData::invalid_params(
                    format!(
                        "unknown tool {name:?} (tools: run, start, read, write, kill, list, \
                         session_start, session_run, session_close)"
                    ),
                    None,
                ))
            }
        };
        Ok(match r {
            Ok(v) => CallToolResult::structured(v),
            Err(msg) => CallToolResult::error(vec![ContentBlock::text(msg)]),
        })
    }

    /// The command of a checked run: its spec, and the call's token.
    fn command(&self, run: &Checked, token: &corral::CancelToken) -> Result<Command, String> {
        let mut cmd = Command::from_spec(&run.spec).map_err(|e| e.to_string())?;
        cmd.cancel_token(token);
        Ok(cmd)
    }

    async fn run(&self, args: Option<JsonObject>) -> ToolResult {
        let spec = self.limits.check(run_args("run", args)?)?;
        let slot = self.runs.slot()?;
        let mut cmd = self.command(&spec, &slot.token)?;
        cmd.stdin(match spec.input {
            Some(s) => Input::bytes(s.into_bytes()),
            None => Input::null(),
        });
        let running = cmd
            .spawn_async()
            .map_err(|e| crate::text::error_message(&e))?;
        drop(cmd);
        let report = running.await;
        drop(slot);
        let mut v = outcome_fields(&report);
        for (name, c) in [("stdout", &report.stdout), ("stderr", &report.stderr)] {
            let (text, omitted) = tail(c, self.limits.kept);
            v.insert(name.into(), text.into());
            v.insert(format!("{name}_omitted"), omitted.into());
        }
        Ok(Value::Object(v))
    }

    async fn start(&self, args: Option<JsonObject>) -> ToolResult {
        let spec = self.limits.check(run_args("start", args)?)?;
        let slot = self.runs.slot()?;
        let mut cmd = self.command(&spec, &slot.token)?;
        // Close-on-exec (std's pipe): no other run's program inherits it.
        let (r, w) = std::io::pipe().map_err(|e| format!("cannot make a pipe for stdin: {e}"))?;
        let stdin = tokio::net::unix::pipe::Sender::from_owned_fd(w.into())
            .map_err(|e| format!("cannot watch the stdin pipe: {e}"))?;
        cmd.stdin(Input::file(File::from(std::os::fd::OwnedFd::from(r))));
        let run = Arc::new(Background::new(
            slot.id,
            spec.argv.clone(),
            slot.token.clone(),
            Some(stdin),
            self.limits.kept,
        ));
        for stream in 0..2 {
            let w = RingWriter {
                run: run.clone(),
                stream,
            };
            if stream == 0 {
                cmd.stdout(Output::relay(w));
            } else {
                cmd.stderr(Output::relay(w));
            }
        }
        let running = cmd
            .spawn_async()
            .map_err(|e| crate::text::error_message(&e))?;
        drop(cmd);
        run.pid.store(running.id(), Ordering::Relaxed);
        // The initial input goes first: the lock is taken before `start`
        // answers, so a later `write` follows it.
        if let Some(data) = spec.input {
            let mut g = run.stdin.clone().lock_owned().await;
            tokio::spawn(async move {
                if let Some(s) = g.as_mut() {
                    // A program that exits without reading: EPIPE, dropped.
                    let _ = s.write_all(data.as_bytes()).await;
                }
            });
        }
        self.runs.add_background(run.clone());
        let id = slot.id;
        tokio::spawn(async move {
            let report = running.await;
            run.finish(report);
            *run.stdin.lock().await = None;
            drop(slot);
        });
        Ok(json!({"id": id.to_string()}))
    }

    async fn read(&self, args: Option<JsonObject>) -> ToolResult {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct A {
            id: String,
            wait_ms: Option<u64>,
        }
        let a: A = parse("read", args)?;
        let run = self.runs.get(&a.id)?;
        if let Some(ms) = a.wait_ms {
            let wait = Duration::from_millis(ms).min(MAX_READ_WAIT);
            let _ = tokio::time::timeout(wait, async {
                loop {
                    let changed = run.changed.notified();
                    tokio::pin!(changed);
                    changed.as_mut().enable();
                    if run.report().is_some() || run.has_unread() {
                        return;
                    }
                    changed.await;
                }
            })
            .await;
        }
        // The report first: once it is there, every byte is in the rings.
        let report = run.report();
        let mut v = state(&run, report.as_deref());
        let [(out, out_dropped, _), (err, err_dropped, _)] = run.take();
        v.insert("stdout".into(), String::from_utf8_lossy(&out).into());
        v.insert("stderr".into(), String::from_utf8_lossy(&err).into());
        v.insert("stdout_dropped".into(), out_dropped.into());
        v.insert("stderr_dropped".into(), err_dropped.into());
        Ok(Value::Object(v))
    }

    async fn write(&self, args: Option<JsonObject>) -> ToolResult {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct A {
            id: String,
            #[serde(default)]
            data: String,
            #[serde(default)]
            eof: bool,
        }
        let a: A = parse("write", args)?;
        let run = self.runs.get(&a.id)?;
        let written = AtomicUsize::new(0);
        let data = a.data.as_bytes();
        let done = tokio::time::timeout(WRITE_BOUND, async {
            let mut g = run.stdin.lock().await;
            let Some(s) = g.as_mut() else {
                return Err(if run.report().is_some() {
                    "the run has ended".to_string()
                } else {
                    "its stdin is closed (write eof)".to_string()
                });
            };
            while written.load(Ordering::Relaxed) < data.len() {
                let n = written.load(Ordering::Relaxed);
                match s.write(&data[n..]).await {
                    Ok(k) => written.store(n + k, Ordering::Relaxed),
                    Err(e) => return Err(format!("writing to its stdin: {e}")),
                }
            }
            if a.eof {
                *g = None;
            }
            Ok(())
        })
        .await;
        let n = written.load(Ordering::Relaxed);
        match done {
            Ok(Ok(())) => Ok(json!({"id": a.id, "written": n, "eof": a.eof})),
            Ok(Err(e)) => Err(format!(
                "run {}: {e} ({n} of {} bytes written)",
                a.id,
                data.len()
            )),
            Err(_) => Err(format!(
                "run {}: the program did not take its input within {} s ({n} of {} bytes written)",
                a.id,
                WRITE_BOUND.as_secs(),
                data.len()
            )),
        }
    }

    async fn kill(&self, args: Option<JsonObject>) -> ToolResult {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct A {
            id: String,
            signal: Option<String>,
        }
        let a: A = parse("kill", args)?;
        let sig = match &a.signal {
            None => Signal::TERM,
            Some(s) => s.parse::<Signal>().map_err(|e| e.to_string())?,
        };
        let run = self.runs.get(&a.id)?;
        let was_running = run.report().is_none();
        run.token.cancel_with(sig);
        let _ = tokio::time::timeout(KILL_WAIT, async {
            loop {
                let changed = run.changed.notified();
                tokio::pin!(changed);
                changed.as_mut().enable();
                if run.report().is_some() {
                    return;
                }
                changed.await;
            }
        })
        .await;
        let report = run.report();
        let mut v = state(&run, report.as_deref());
        v.insert("was_running".into(), was_running.into());
        Ok(Value::Object(v))
    }

    fn list(&self, args: Option<JsonObject>) -> ToolResult {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct A {}
        let _: A = parse("list", args)?;
        let runs: Vec<Value> = self
            .runs
            .background()
            .iter()
            .map(|r| {
                let report = r.report();
                let mut v = Map::new();
                v.insert("id".into(), r.id.to_string().into());
                v.insert("argv".into(), json!(r.argv));
                v.insert("pid".into(), r.pid.load(Ordering::Relaxed).into());
                v.insert("running".into(), report.is_none().into());
                match &report {
                    Some(rep) => {
                        v.insert("outcome".into(), rep.outcome_name().into());
                        v.insert("exit_code".into(), json!(rep.exit_code()));
                        v.insert("duration_ms".into(), millis(rep.duration()).into());
                    }
                    None => {
                        v.insert("duration_ms".into(), millis(r.started.elapsed()).into());
                    }
                }
                Value::Object(v)
            })
            .collect();
        Ok(json!({
            "runs": runs,
            "active": self.runs.live_count(),
            "max_runs": self.limits.max_runs,
        }))
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A background run's state: id, running, byte counts, and the outcome
/// fields once it ended.
fn state(run: &Background, report: Option<&Report>) -> Map<String, Value> {
    let mut v = match report {
        Some(r) => outcome_fields(r),
        None => {
            let [o, e] = run.totals();
            let mut v = Map::new();
            v.insert("stdout_bytes".into(), o.into());
            v.insert("stderr_bytes".into(), e.into());
            v
        }
    };
    v.insert("id".into(), run.id.to_string().into());
    v.insert("running".into(), report.is_none().into());
    v
}

/// What a run's report says, in the fields every tool uses: read through
/// the library's own accessors.
pub(crate) fn outcome_fields(r: &Report) -> Map<String, Value> {
    let mut v = Map::new();
    v.insert("outcome".into(), r.outcome_name().into());
    v.insert("exit_code".into(), json!(r.exit_code()));
    let signal = r.root.and_then(|s| s.signal()).map(|s| s.to_string());
    v.insert("signal".into(), json!(signal));
    v.insert(
        "timeout_kind".into(),
        json!(r.timeout_kind.map(|k| k.name())),
    );
    v.insert("error".into(), json!(r.error_message()));
    v.insert("stdout_bytes".into(), r.stdout.total_bytes().into());
    v.insert("stderr_bytes".into(), r.stderr.total_bytes().into());
    v.insert("killed".into(), r.leftovers.killed.into());
    v.insert("kept".into(), r.leftovers.kept.into());
    v.insert("duration_ms".into(), millis(r.duration()).into());
    v.insert("pid".into(), r.pid.into());
    v.insert("containment".into(), r.containment.name().into());
    v.insert("crash_safe".into(), r.crash_safety.is_held().into());
    v
}

/// The last `kept` bytes of a capture (as text) and how many came before.
pub(crate) fn tail(c: &Captured, kept: usize) -> (String, u64) {
    let all = if c.is_truncated() {
        c.tail()
    } else {
        c.bytes()
    };
    let from = all.len().saturating_sub(kept);
    let omitted = c.total_bytes().saturating_sub((all.len() - from) as u64);
    (String::from_utf8_lossy(&all[from..]).into_owned(), omitted)
}
