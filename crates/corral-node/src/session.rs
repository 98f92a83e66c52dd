//! `Session` for Node: a persistent shell session (`corral::Session`). Each
//! `run` blocks a worker thread of libuv's pool (an `AsyncTask`), never the
//! event loop; index.js wraps it as `corral.Session` and shapes the result
//! as `run()`'s.

use std::sync::Arc;
use std::time::Duration;

use corral::{Error, RunOptions, SessionOptions};
use napi::bindgen_prelude::{AsyncTask, Buffer};
use napi::{Env, Error as JsError, Result, Status, Task};
use napi_derive::napi;

use super::{done_of, invalid, parse_containment};

/// How a session starts.
#[napi(object)]
pub struct SessionStartOptions {
    /// The first working directory.
    pub cwd: Option<String>,
    /// Variables added to the session's first environment (JSON object).
    pub env: Option<String>,
    /// Start from an empty environment.
    pub env_clear: Option<bool>,
    /// The shell (bash, else sh, on PATH by default).
    pub shell: Option<String>,
    /// As `run()`'s.
    pub containment: Option<String>,
    /// As `run()`'s.
    pub require_crash_safety: Option<bool>,
}

/// The limits of one command, in milliseconds and bytes.
#[napi(object)]
pub struct SessionRunOptions {
    pub timeout: Option<f64>,
    pub idle_timeout: Option<f64>,
    pub max_output: Option<f64>,
    pub max_buffer: Option<f64>,
    pub wait_delay: Option<f64>,
}

/// A finished command: the report's JSON (with `session_id`, `jobs`,
/// `session_ended`) and the captured bytes.
#[napi(object)]
pub struct SessionRunDone {
    pub json: String,
    pub stdout: Buffer,
    pub stderr: Buffer,
}

fn ms(v: f64, what: &str) -> Result<Duration> {
    Duration::try_from_secs_f64(v / 1000.0).map_err(|_| {
        invalid(format!(
            "{what} must be a non-negative number of milliseconds"
        ))
    })
}

fn js_error(e: Error) -> JsError {
    match e {
        Error::SessionClosed => JsError::new(Status::GenericFailure, "ERR_CORRAL_SESSION_CLOSED"),
        e => JsError::from_reason(e.full_message()),
    }
}

/// A persistent shell session.
#[napi(js_name = "NativeSession")]
pub struct NativeSession {
    inner: Arc<corral::Session>,
}

pub struct RunTask {
    session: Arc<corral::Session>,
    command: String,
    options: RunOptions,
}

impl Task for RunTask {
    type Output = (String, Vec<u8>, Vec<u8>);
    type JsValue = SessionRunDone;

    fn compute(&mut self) -> Result<Self::Output> {
        let r = self
            .session
            .run(&self.command, &self.options)
            .map_err(js_error)?;
        let jobs: Vec<serde_json::Value> = r
            .jobs
            .iter()
            .map(|j| serde_json::json!({"pid": j.pid, "command": j.command}))
            .collect();
        let ended = r.ended.as_ref().map(|e| e.to_string());
        let session_id = r.session_id.clone();
        let done = done_of(r.report);
        let mut doc: serde_json::Value =
            serde_json::from_str(&done.json).map_err(|e| JsError::from_reason(e.to_string()))?;
        if let Some(o) = doc.as_object_mut() {
            o.insert("session_id".into(), session_id.into());
            o.insert("jobs".into(), jobs.into());
            o.insert("session_ended".into(), ended.into());
        }
        Ok((doc.to_string(), done.stdout, done.stderr))
    }

    fn resolve(&mut self, _env: Env, (json, out, err): Self::Output) -> Result<SessionRunDone> {
        Ok(SessionRunDone {
            json,
            stdout: out.into(),
            stderr: err.into(),
        })
    }
}

pub struct CloseTask(Arc<corral::Session>);

impl Task for CloseTask {
    type Output = ();
    type JsValue = ();
    fn compute(&mut self) -> Result<()> {
        self.0.close();
        Ok(())
    }
    fn resolve(&mut self, _env: Env, _: ()) -> Result<()> {
        Ok(())
    }
}

#[napi]
impl NativeSession {
    #[napi(constructor)]
    pub fn new(o: SessionStartOptions) -> Result<NativeSession> {
        let mut so = SessionOptions::new();
        if let Some(s) = &o.shell {
            so.shell(s);
        }
        if let Some(c) = &o.cwd {
            so.current_dir(c);
        }
        if o.env_clear == Some(true) {
            so.env_clear();
        }
        if let Some(env) = &o.env {
            let m: std::collections::BTreeMap<String, String> =
                serde_json::from_str(env).map_err(|e| invalid(format!("env: {e}")))?;
            for (k, v) in m {
                if k.is_empty() || k.contains(['=', '\0']) || v.contains('\0') {
                    return Err(invalid(format!("env: invalid variable {k:?}")));
                }
                so.env(k, v);
            }
        }
        if let Some(c) = &o.containment {
            so.containment(parse_containment(c)?);
        }
        so.require_crash_safety(o.require_crash_safety == Some(true));
        let inner = corral::Session::start(&so).map_err(js_error)?;
        Ok(NativeSession {
            inner: Arc::new(inner),
        })
    }

    /// The session's id.
    #[napi(getter)]
    pub fn id(&self) -> String {
        self.inner.id().to_owned()
    }

    /// How the session ended, in words (null while it is open).
    #[napi(getter)]
    pub fn ended(&self) -> Option<String> {
        self.inner.ended().map(|e| e.to_string())
    }

    /// Runs one command line (on a worker thread).
    #[napi(ts_return_type = "Promise<SessionRunDone>")]
    pub fn run(&self, command: String, o: SessionRunOptions) -> Result<AsyncTask<RunTask>> {
        let mut ro = RunOptions::new();
        if let Some(t) = o.timeout.filter(|t| *t > 0.0) {
            ro.timeout(ms(t, "timeout")?);
        }
        if let Some(t) = o.idle_timeout.filter(|t| *t > 0.0) {
            ro.idle_timeout(ms(t, "idleTimeout")?);
        }
        if let Some(n) = o.max_output {
            ro.output_limit(n.max(0.0) as u64);
        }
        if let Some(n) = o.max_buffer {
            ro.capture_limit(n.max(0.0) as usize);
        }
        if let Some(t) = o.wait_delay {
            ro.wait_delay(ms(t, "waitDelay")?);
        }
        Ok(AsyncTask::new(RunTask {
            session: self.inner.clone(),
            command,
            options: ro,
        }))
    }

    /// The live background jobs as JSON: `[{pid, command}]`.
    #[napi]
    pub fn jobs(&self) -> String {
        let jobs: Vec<serde_json::Value> = self
            .inner
            .jobs()
            .iter()
            .map(|j| serde_json::json!({"pid": j.pid, "command": j.command}))
            .collect();
        serde_json::Value::from(jobs).to_string()
    }

    /// Kills the job with this pid (and what it started).
    #[napi]
    pub fn kill_job(&self, pid: u32) -> bool {
        match self.inner.jobs().into_iter().find(|j| j.pid == pid) {
            Some(j) => self.inner.kill_job(&j),
            None => false,
        }
    }

    /// Closes the session (on a worker thread: a command in flight is
    /// waited for): its background jobs are killed.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn close(&self) -> AsyncTask<CloseTask> {
        AsyncTask::new(CloseTask(self.inner.clone()))
    }

    /// Closes the session now, blocking (for `process.on('exit')`).
    #[napi]
    pub fn close_sync(&self) {
        self.inner.close();
    }
}
