//! `corral._corral.Session`: a persistent shell session (`corral::Session`)
//! for Python. The package's `corral.Session` wraps it and turns each
//! command's report into a `corral.Result`.

use std::path::PathBuf;
use std::sync::{mpsc, Arc};
use std::time::Duration;

use corral::{CancelToken, Error, RunOptions, SessionOptions};
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use super::{parse_mechanism, report_dict, secs, spawn_error};

pyo3::create_exception!(
    _corral,
    SessionClosed,
    PyException,
    "The session has ended (a command ended its shell, or it was closed)."
);

/// A persistent shell session (see `corral.Session`).
#[pyclass(frozen, module = "corral._corral")]
pub struct Session {
    inner: Arc<corral::Session>,
}

fn error(e: Error) -> PyErr {
    match e {
        Error::SessionClosed => SessionClosed::new_err("the session is closed"),
        e => spawn_error(e),
    }
}

#[pymethods]
impl Session {
    #[new]
    #[pyo3(signature = (*, shell=None, cwd=None, env=None, env_clear=false,
                        containment="auto".to_owned(), require_crash_safety=false))]
    fn new(
        shell: Option<PathBuf>,
        cwd: Option<PathBuf>,
        env: Option<Vec<(String, String)>>,
        env_clear: bool,
        containment: String,
        require_crash_safety: bool,
    ) -> PyResult<Session> {
        let mut o = SessionOptions::new();
        if let Some(s) = shell {
            o.shell(s);
        }
        if let Some(c) = cwd {
            o.current_dir(c);
        }
        if env_clear {
            o.env_clear();
        }
        for (k, v) in env.into_iter().flatten() {
            if k.is_empty() || k.contains(['=', '\0']) || v.contains('\0') {
                return Err(PyValueError::new_err(format!(
                    "env: invalid variable {k:?}"
                )));
            }
            o.env(k, v);
        }
        o.containment(parse_mechanism(&containment)?)
            .require_crash_safety(require_crash_safety);
        let inner = corral::Session::start(&o).map_err(error)?;
        Ok(Session {
            inner: Arc::new(inner),
        })
    }

    /// The session's id.
    #[getter]
    fn id(&self) -> String {
        self.inner.id().to_owned()
    }

    /// How the session ended, in words (None while it is open).
    #[getter]
    fn ended(&self) -> Option<String> {
        self.inner.ended().map(|e| e.to_string())
    }

    /// Runs one command line; the report as a dict with `session_id`,
    /// `jobs` (pid, command) and `session_ended`. The GIL is released;
    /// Ctrl-C kills the command's tree, waits for it, and re-raises.
    #[pyo3(signature = (command, *, timeout=None, idle_timeout=None, max_output=None,
                        capture_limit=None, wait_delay=None, grace=None))]
    #[allow(clippy::too_many_arguments)]
    fn run(
        &self,
        py: Python<'_>,
        command: String,
        timeout: Option<f64>,
        idle_timeout: Option<f64>,
        max_output: Option<u64>,
        capture_limit: Option<usize>,
        wait_delay: Option<f64>,
        grace: Option<f64>,
    ) -> PyResult<Py<PyDict>> {
        let mut o = RunOptions::new();
        if let Some(t) = timeout {
            o.timeout(secs(t, "timeout")?);
        }
        if let Some(t) = idle_timeout {
            o.idle_timeout(secs(t, "idle_timeout")?);
        }
        if let Some(n) = max_output {
            o.output_limit(n);
        }
        if let Some(n) = capture_limit {
            o.capture_limit(n);
        }
        if let Some(t) = wait_delay {
            o.wait_delay(secs(t, "wait_delay")?);
        }
        if let Some(t) = grace {
            o.grace(secs(t, "grace")?);
        }
        let token = CancelToken::new();
        o.cancel_token(&token);
        let (tx, rx) = mpsc::channel();
        // Shared with the waits below, which need a `Sync` receiver.
        let rx = std::sync::Mutex::new(rx);
        let s = self.inner.clone();
        std::thread::Builder::new()
            .name("corral-session".into())
            .spawn(move || {
                let _ = tx.send(s.run(&command, &o));
            })
            .map_err(|e| PyErr::new::<pyo3::exceptions::PyOSError, _>(e.to_string()))?;
        let mut interrupted = None;
        let result = loop {
            let wait = || corral_bindings::lock(&rx).recv_timeout(Duration::from_millis(50));
            match py.detach(wait) {
                Ok(r) => break r,
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(pyo3::exceptions::PyRuntimeError::new_err(
                        "the session's run ended without a report",
                    ))
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if interrupted.is_none() {
                        if let Err(e) = py.check_signals() {
                            token.cancel();
                            interrupted = Some(e);
                        }
                    }
                }
            }
        };
        if let Some(e) = interrupted {
            return Err(e);
        }
        let r = result.map_err(error)?;
        let jobs = PyList::empty(py);
        for j in &r.jobs {
            jobs.append((j.pid, j.command.clone()))?;
        }
        let ended = r.ended.as_ref().map(|e| e.to_string());
        let session_id = r.session_id.clone();
        let d = report_dict(py, r.report)?;
        d.set_item("session_id", session_id)?;
        d.set_item("jobs", jobs)?;
        d.set_item("session_ended", ended)?;
        Ok(d.unbind())
    }

    /// The live background jobs: (pid, command line) pairs.
    fn jobs(&self, py: Python<'_>) -> Vec<(u32, String)> {
        let s = self.inner.clone();
        py.detach(move || s.jobs().into_iter().map(|j| (j.pid, j.command)).collect())
    }

    /// Kills the job with this pid (and what it started): whether it was
    /// running.
    fn kill_job(&self, py: Python<'_>, pid: u32) -> bool {
        let s = self.inner.clone();
        py.detach(move || match s.jobs().into_iter().find(|j| j.pid == pid) {
            Some(j) => s.kill_job(&j),
            None => false,
        })
    }

    /// Closes the session: its background jobs are killed.
    fn close(&self, py: Python<'_>) {
        let s = self.inner.clone();
        py.detach(move || s.close());
    }
}

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Session>()?;
    m.add("SessionClosed", m.py().get_type::<SessionClosed>())?;
    Ok(())
}
