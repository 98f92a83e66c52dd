//! The session tools: `session_start` (cwd, env) → session_id,
//! `session_run` (session_id, command, timeout_ms, ...) → the result `run`
//! returns plus the session's fields, `session_close`. A session is a
//! `corral::Session`: each command a contained tree of its own, the
//! shell's state (directory, variables, functions, options) carried over.
//! The server's limits hold: `--root` for the directory, the default and
//! maximum timeout for each command, `--max-runs` for the commands going
//! at once (a session_run takes a run's place) and for the open sessions.
//! Closing a session, or the server's end, kills its background jobs; the
//! crash-safety keeper does if the server is killed outright.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use corral::{RunOptions, Session, SessionOptions};
use rmcp::model::{JsonObject, Tool};
use serde::Deserialize;
use serde_json::{json, Value};

use rmcp::model::{CallToolResult, ContentBlock};

use super::limits::Limits;
use super::runs::Registry;
use super::tools::{outcome_fields, parse, schema, tail, Tools};

/// The open sessions, by id.
#[derive(Default)]
pub struct Sessions {
    open: Mutex<BTreeMap<String, Arc<Session>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The three tools' declarations.
pub fn list(limits: &Limits) -> Vec<Tool> {
    let id = json!({"type": "string", "description": "The id session_start returned."});
    vec![
        Tool::new(
            "session_start",
            "Start a persistent shell session (bash, else sh): the working directory, \
             variables, functions, aliases and shell options one session_run sets are there \
             for the next. cwd (inside the server's root) and env (object of additions) are \
             the first state; PAGER=cat, GIT_PAGER=cat, GIT_EDITOR=true, TERM=dumb unless env \
             sets them. Returns session_id.",
            schema(json!({"type": "object", "properties": {
                "cwd": {"type": "string", "description": "The first working directory (inside the server's root; relative to it)."},
                "env": {"type": "object", "additionalProperties": {"type": "string"},
                        "description": "Variables added to the session's environment (exported)."}
            }, "additionalProperties": false})),
        ),
        Tool::new(
            "session_run",
            "Run one command line in a session: a fresh shell with the session's state, its \
             whole process tree contained and killed on its own timeout, idle timeout or \
             output limit (the session survives). stdin is at end of file. Returns what run \
             returns, plus session_id, jobs (background processes this command left running: \
             pid, command) and session_ended (set when the command ended the shell: exit, \
             exec, a signal; the session is then closed).",
            schema(json!({"type": "object", "properties": {
                "session_id": id,
                "command": {"type": "string", "description": "A shell command line."},
                "timeout_ms": {"type": "integer", "minimum": 1, "description": format!(
                    "The command's deadline. This server: default {} ms, at most {} ms.",
                    limits.default_timeout.as_millis(), limits.max_timeout.as_millis())},
                "idle_timeout_ms": {"type": "integer", "minimum": 1},
                "max_output": {"type": "integer", "minimum": 1,
                               "description": "Bytes stdout and stderr may carry together."}
            }, "required": ["session_id", "command"], "additionalProperties": false})),
        ),
        Tool::new(
            "session_close",
            "Close a session: every process it started that is still running (its background \
             jobs) is killed.",
            schema(json!({"type": "object", "properties": {"session_id": id},
                          "required": ["session_id"], "additionalProperties": false})),
        ),
    ]
}

/// Cancels a command's token when its request goes away before the end
/// (the client cancelled it): the blocking run is not dropped with it.
struct CancelOnDrop(Option<corral::CancelToken>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(t) = self.0.take() {
            t.cancel_with(corral::Signal::KILL);
        }
    }
}

impl Sessions {
    /// Carries out a session tool; `None` for another tool.
    pub async fn call(
        &self,
        tools: &Tools,
        name: &str,
        args: Option<JsonObject>,
    ) -> Option<CallToolResult> {
        let r = match name {
            "session_start" => self.start(&tools.limits, args),
            "session_run" => self.run(&tools.limits, &tools.runs, args).await,
            "session_close" => self.close(args).await,
            _ => return None,
        };
        Some(match r {
            Ok(v) => CallToolResult::structured(v),
            Err(msg) => CallToolResult::error(vec![ContentBlock::text(msg)]),
        })
    }

    fn get(&self, id: &str) -> Result<Arc<Session>, String> {
        lock(&self.open)
            .get(id)
            .cloned()
            .ok_or_else(|| format!("no session with id {id:?} (closed, or never started)"))
    }

    pub fn start(&self, limits: &Limits, args: Option<JsonObject>) -> Result<Value, String> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct A {
            cwd: Option<PathBuf>,
            env: Option<BTreeMap<String, String>>,
        }
        let a: A = parse("session_start", args)?;
        let mut o = SessionOptions::new();
        o.current_dir(limits.cwd(a.cwd.as_deref())?)
            .require_crash_safety(limits.require_crash_safety);
        for (k, v) in a.env.into_iter().flatten() {
            if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
                return Err(format!("env: invalid variable {k:?}"));
            }
            o.env(k, v);
        }
        let mut open = lock(&self.open);
        if open.len() >= limits.max_runs {
            return Err(format!(
                "{} sessions are open, the most the server allows (--max-runs); close one",
                open.len()
            ));
        }
        let s = Session::start(&o).map_err(|e| crate::text::error_message(&e))?;
        let id = s.id().to_owned();
        open.insert(id.clone(), Arc::new(s));
        Ok(json!({"session_id": id}))
    }

    pub async fn run(
        &self,
        limits: &Limits,
        runs: &Arc<Registry>,
        args: Option<JsonObject>,
    ) -> Result<Value, String> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct A {
            session_id: String,
            command: String,
            timeout_ms: Option<u64>,
            idle_timeout_ms: Option<u64>,
            max_output: Option<u64>,
        }
        let a: A = parse("session_run", args)?;
        let session = self.get(&a.session_id)?;
        let timeout = match a.timeout_ms.map(Duration::from_millis) {
            None => limits.default_timeout,
            Some(d) if d.is_zero() => return Err("timeout_ms must be more than 0".into()),
            Some(d) if d > limits.max_timeout => {
                return Err(format!(
                    "timeout_ms {} is more than the server's --max-timeout ({} ms)",
                    d.as_millis(),
                    limits.max_timeout.as_millis()
                ))
            }
            Some(d) => d,
        };
        if a.command.contains('\0') {
            return Err("command may not contain NUL".into());
        }
        let slot = runs.slot()?;
        let mut o = RunOptions::new();
        o.timeout(timeout)
            .grace(super::limits::KILL_AFTER)
            .capture_limit(limits.kept.saturating_mul(2))
            .cancel_token(&slot.token);
        if let Some(ms) = a.idle_timeout_ms {
            if ms == 0 {
                return Err("idle_timeout_ms must be more than 0".into());
            }
            o.idle_timeout(Duration::from_millis(ms));
        }
        if let Some(n) = a.max_output {
            o.output_limit(n);
        }
        let s = session.clone();
        let mut guard = CancelOnDrop(Some(slot.token.clone()));
        let done = tokio::task::spawn_blocking(move || s.run(&a.command, &o))
            .await
            .map_err(|e| format!("session_run: {e}"))?;
        guard.0 = None;
        drop(slot);
        let r = match done {
            Ok(r) => r,
            Err(corral::Error::SessionClosed) => {
                lock(&self.open).remove(session.id());
                return Err(format!("session {} is closed", session.id()));
            }
            Err(e) => return Err(crate::text::error_message(&e)),
        };
        let mut v = outcome_fields(&r.report);
        for (name, c) in [("stdout", &r.stdout), ("stderr", &r.stderr)] {
            let (text, omitted) = tail(c, limits.kept);
            v.insert(name.into(), text.into());
            v.insert(format!("{name}_omitted"), omitted.into());
        }
        v.insert("session_id".into(), r.session_id.clone().into());
        let jobs: Vec<Value> = r
            .jobs
            .iter()
            .map(|j| json!({"pid": j.pid, "command": j.command}))
            .collect();
        v.insert("jobs".into(), jobs.into());
        v.insert(
            "session_ended".into(),
            json!(r.ended.as_ref().map(|e| e.to_string())),
        );
        if r.ended.is_some() {
            lock(&self.open).remove(session.id());
        }
        Ok(Value::Object(v))
    }

    pub async fn close(&self, args: Option<JsonObject>) -> Result<Value, String> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct A {
            session_id: String,
        }
        let a: A = parse("session_close", args)?;
        let s = lock(&self.open)
            .remove(&a.session_id)
            .ok_or_else(|| format!("no session with id {:?}", a.session_id))?;
        // Waits for a command in flight, then kills the jobs.
        tokio::task::spawn_blocking(move || s.close())
            .await
            .map_err(|e| format!("session_close: {e}"))?;
        Ok(json!({"session_id": a.session_id, "closed": true}))
    }

    /// The server's end: every session closed (their jobs killed).
    pub fn close_all(&self) {
        let all: Vec<Arc<Session>> = std::mem::take(&mut *lock(&self.open))
            .into_values()
            .collect();
        for s in all {
            s.close();
        }
    }
}
