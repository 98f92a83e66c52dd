//! `corral._corral`: the Rust core of the Python package `corral`.
//!
//! It binds the library's public API only. One `Job` per run:
//!
//! * On Unix every run is driven by the library's async driver on one shared
//!   current-thread tokio runtime (one thread for the whole process, whatever
//!   the number of runs). Python threads wait on the job's condition variable
//!   with the GIL released, waking every 20 ms to run Python's
//!   signal handlers (so Ctrl-C reaches a waiting `run()`); asyncio callers
//!   register a callback, called once the report is in by one shared
//!   notifier thread (the runtime thread never waits for the GIL).
//! * On Windows (no async driver in the library) each run is waited on by a
//!   thread of its own.
//!
//! A job dropped before its report arrived (a handle collected by the
//! garbage collector) cancels its run: the tree is killed, never leaked.
//! `_shutdown` (called from an `atexit` hook) cancels every live run and waits
//! for the cleanups, bounded.

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

use corral::document::{PtySpec, RunReport, RunSpec, SandboxSpec};
use corral::{
    CancelToken, Captured, Command, ContainmentChoice, Error, Input, LeftoverPolicy, Mechanism,
    Output, Report, Signal, SpawnErrorKind,
};
use corral_bindings::{lock, os_errno, Signaller, EMFILE};

#[cfg(unix)]
mod session;
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

create_exception!(
    _corral,
    ContainmentUnavailable,
    PyException,
    "The requested containment could not be set up; nothing was run."
);

create_exception!(
    _corral,
    SandboxUnavailable,
    PyException,
    "The requested sandbox cannot be enforced here; nothing was run."
);

/// How often a waiting Python thread wakes to run signal handlers.
const SIGNAL_SLICE: Duration = Duration::from_millis(20);

/// Set by `_shutdown`: the interpreter is exiting, completion callbacks are
/// no longer called.
static SHUTTING_DOWN: AtomicBool = AtomicBool::new(false);

/// Every run not yet finished, for `_shutdown`.
static LIVE: Mutex<Vec<Weak<Shared>>> = Mutex::new(Vec::new());

enum State {
    Running,
    Done(Box<Report>),
    /// The report was converted for Python (kept in `Job::result`).
    Taken,
}

/// What the driver and the Python side share for one run.
struct Shared {
    state: Mutex<State>,
    /// Called (with the GIL) once the report is in.
    callback: Mutex<Option<Py<PyAny>>>,
    done: Condvar,
    cancel: CancelToken,
    /// The process that started the run: a forked child inherits the
    /// memory of its parent's jobs but not the thread that drives them.
    owner: u32,
    /// Asks the driver to send a signal to the whole tree (the run goes
    /// on); None once the report is in, or where the driver cannot.
    signaller: Mutex<Option<Signaller>>,
}

/// The thread that calls completion callbacks (with the GIL), so that the
/// runtime thread never waits for the GIL: a Python thread holding it for
/// long cannot delay any run's deadline or output draining. Re-created in a
/// forked child.
///
/// It must never touch the interpreter once finalisation has begun: CPython
/// ends a thread that asks for the GIL then with `pthread_exit`, whose
/// forced unwinding cannot pass through Rust frames (glibc's "FATAL:
/// exception not rethrown", SIGABRT). And a callback can lose the GIL in the
/// middle (the eval loop hands it over every few milliseconds), so checking
/// a flag before attaching is not enough: the main thread can finish
/// `asyncio.run` and start finalising while the callback waits to get the
/// GIL back. Hence the gate: the thread holds it from the `SHUTTING_DOWN`
/// check until it has let go of the GIL, and `_shutdown` (the `atexit` hook,
/// which CPython runs before finalisation) takes it, with the GIL released,
/// to set the flag: after that no callback runs or is running.
struct Notifier {
    pid: u32,
    tx: mpsc::Sender<Py<PyAny>>,
    gate: Arc<Mutex<()>>,
}

static NOTIFY: Mutex<Option<Notifier>> = Mutex::new(None);

fn notify(cb: Py<PyAny>) {
    let mut g = lock(&NOTIFY);
    let pid = std::process::id();
    if let Some(n) = g.as_ref() {
        if n.pid == pid {
            if let Err(mpsc::SendError(cb)) = n.tx.send(cb) {
                // The thread is gone (it never exits on its own): drop the
                // callback; its waiter still sees the report through `poll`.
                drop(cb);
            }
            return;
        }
    }
    // A new gate per thread: one inherited through fork may be held by a
    // thread that does not exist in the child.
    let gate = Arc::new(Mutex::new(()));
    let (tx, rx) = mpsc::channel::<Py<PyAny>>();
    let held = gate.clone();
    let spawned = std::thread::Builder::new()
        .name("corral-notify".into())
        .spawn(move || {
            for cb in rx {
                let _gate = lock(&held);
                if SHUTTING_DOWN.load(Ordering::SeqCst) {
                    // Dropped without the GIL: pyo3 defers the decref, the
                    // interpreter is not touched.
                    drop(cb);
                    continue;
                }
                Python::attach(|py| {
                    if let Err(e) = cb.call0(py) {
                        e.write_unraisable(py, None);
                    }
                });
            }
        });
    if spawned.is_ok() {
        let _ = tx.send(cb);
        *g = Some(Notifier { pid, tx, gate });
    }
}

/// Stops the notifier calling into Python for good, once any callback it
/// is running is over (see [`Notifier`]); the GIL must be released.
fn close_notifier() {
    let me = std::process::id();
    let gate = lock(&NOTIFY)
        .as_ref()
        .filter(|n| n.pid == me)
        .map(|n| n.gate.clone());
    let _gate = gate.as_ref().map(|g| lock(g));
    SHUTTING_DOWN.store(true, Ordering::SeqCst);
}

impl Shared {
    fn finish(&self, report: Report) {
        lock(&self.signaller).take();
        *lock(&self.state) = State::Done(Box::new(report));
        self.done.notify_all();
        let cb = lock(&self.callback).take();
        lock(&LIVE).retain(|w| w.strong_count() > 0 && !std::ptr::eq(w.as_ptr(), self));
        if let Some(cb) = cb {
            notify(cb);
        }
    }

    fn is_done(&self) -> bool {
        !matches!(*lock(&self.state), State::Running)
    }

    /// Waits until the report is in or `until` passes; true when it is in.
    fn wait_until(&self, until: Option<Instant>) -> bool {
        let mut st = lock(&self.state);
        loop {
            if !matches!(*st, State::Running) {
                return true;
            }
            match until {
                None => st = self.done.wait(st).unwrap_or_else(|e| e.into_inner()),
                Some(t) => {
                    let now = Instant::now();
                    if now >= t {
                        return false;
                    }
                    st = self
                        .done
                        .wait_timeout(st, t - now)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
            }
        }
    }
}

mod driver {
    //! Runs are driven by the driver the bindings share (`corral_bindings`:
    //! one runtime thread on Unix, a waiting thread per run elsewhere).
    use super::*;

    /// Spawns `cmd`; the report reaches `shared` (and its signaller is set
    /// before the run can end).
    pub(super) fn start(
        cmd: &mut Command,
        shared: Arc<Shared>,
        program: &OsStr,
    ) -> Result<u32, Error> {
        let finished = shared.clone();
        corral_bindings::start(
            cmd,
            program,
            |signaller| *lock(&shared.signaller) = Some(signaller),
            move |report| finished.finish(report),
        )
    }
}

/// One run. Dropping it before the run ended cancels the run.
#[pyclass(frozen, module = "corral._corral")]
struct Job {
    shared: Arc<Shared>,
    pid: u32,
    /// The report as a dict, once converted.
    result: Mutex<Option<Py<PyDict>>>,
    /// The conversion failed (the report is gone).
    lost: AtomicBool,
}

impl Drop for Job {
    fn drop(&mut self) {
        if !self.shared.is_done() {
            self.shared.cancel.cancel();
        }
    }
}

#[pymethods]
impl Job {
    /// The root's process id.
    #[getter]
    fn pid(&self) -> u32 {
        self.pid
    }

    /// Cancels the run (idempotent): the tree is terminated (first signal,
    /// SIGKILL after the grace).
    fn cancel(&self) {
        self.shared.cancel.cancel();
    }

    /// Cancels with this first signal (a name such as "INT" or a number).
    fn cancel_with(&self, signal: &Bound<'_, PyAny>) -> PyResult<()> {
        self.shared.cancel.cancel_with(parse_signal(signal)?);
        Ok(())
    }

    /// Sends this signal (a name or a number) to the whole tree without
    /// ending the run (a root that dies of it is reported as signaled).
    /// Returns False when the run is already over (nothing is sent: the
    /// identity is released) or the platform's driver cannot.
    fn signal(&self, signal: &Bound<'_, PyAny>) -> PyResult<bool> {
        let sig = parse_signal(signal)?;
        Ok(match lock(&self.shared.signaller).as_ref() {
            Some(f) => {
                f(sig);
                true
            }
            None => false,
        })
    }

    /// Whether the report is in.
    fn done(&self) -> bool {
        self.shared.is_done()
    }

    /// The report as a dict if the run has ended, else None.
    fn poll(&self, py: Python<'_>) -> PyResult<Option<Py<PyDict>>> {
        if self.shared.is_done() {
            self.result(py).map(Some)
        } else {
            Ok(None)
        }
    }

    /// Waits for the report (the GIL released), at most `timeout` seconds
    /// (None: no limit). Python signal handlers run while waiting; an
    /// exception from one (KeyboardInterrupt) is raised and the run goes on
    /// (the caller decides whether to cancel). Returns None on timeout.
    #[pyo3(signature = (timeout=None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<Py<PyDict>>> {
        self.check_owner()?;
        let until = timeout
            .map(|t| secs(t, "timeout"))
            .transpose()?
            .map(|d| Instant::now() + d);
        loop {
            let slice_end = Instant::now() + SIGNAL_SLICE;
            let end = until.map_or(slice_end, |u| u.min(slice_end));
            let shared = &self.shared;
            if py.detach(|| shared.wait_until(Some(end))) {
                return self.result(py).map(Some);
            }
            py.check_signals()?;
            if until.is_some_and(|u| Instant::now() >= u) {
                return Ok(None);
            }
        }
    }

    /// Waits for the report without running signal handlers, at most
    /// `timeout` seconds (for cleanup after an interrupt). None on timeout.
    fn wait_quiet(&self, py: Python<'_>, timeout: f64) -> PyResult<Option<Py<PyDict>>> {
        self.check_owner()?;
        let until = Instant::now() + secs(timeout, "timeout")?;
        let shared = &self.shared;
        if py.detach(|| shared.wait_until(Some(until))) {
            self.result(py).map(Some)
        } else {
            Ok(None)
        }
    }

    /// Calls `callback()` once the report is in: from the runtime thread
    /// (with the GIL) later, or never if it is already in. Returns whether
    /// the callback was registered (False: the report is already in).
    fn on_done(&self, callback: Py<PyAny>) -> bool {
        // The state lock is held while registering, so `finish` either sees
        // the callback or this sees the report.
        let st = lock(&self.shared.state);
        if !matches!(*st, State::Running) {
            return false;
        }
        *lock(&self.shared.callback) = Some(callback);
        true
    }
}

impl Job {
    fn check_owner(&self) -> PyResult<()> {
        if self.shared.owner != std::process::id() && !self.shared.is_done() {
            return Err(PyRuntimeError::new_err(
                "this run was started by the parent process (before fork); only it can wait for it",
            ));
        }
        Ok(())
    }

    /// The report as a dict (converted once; later calls share it). Only one
    /// thread converts: it takes the report out of the slot; another thread
    /// asking meanwhile waits for the dict with the GIL released, so that no
    /// thread ever holds the GIL while waiting for a thread that needs it.
    fn result(&self, py: Python<'_>) -> PyResult<Py<PyDict>> {
        loop {
            if let Some(d) = lock(&self.result).as_ref() {
                return Ok(d.clone_ref(py));
            }
            let report = {
                let mut st = lock(&self.shared.state);
                match std::mem::replace(&mut *st, State::Taken) {
                    State::Done(report) => Some(report),
                    State::Taken => None,
                    State::Running => {
                        *st = State::Running;
                        return Err(PyRuntimeError::new_err("the run has not ended"));
                    }
                }
            };
            match report {
                Some(report) => {
                    let d = match report_dict(py, *report) {
                        Ok(d) => d.unbind(),
                        Err(e) => {
                            self.lost.store(true, Ordering::SeqCst);
                            return Err(e);
                        }
                    };
                    *lock(&self.result) = Some(d.clone_ref(py));
                    return Ok(d);
                }
                None if self.lost.load(Ordering::SeqCst) => {
                    return Err(PyRuntimeError::new_err(
                        "the report could not be converted (out of memory?)",
                    ))
                }
                None => py.detach(|| std::thread::sleep(Duration::from_millis(1))),
            }
        }
    }
}

fn secs(t: f64, what: &str) -> PyResult<Duration> {
    Duration::try_from_secs_f64(t).map_err(|_| {
        PyValueError::new_err(format!(
            "{what} must be a non-negative number of seconds, not {t}"
        ))
    })
}

fn parse_signal(s: &Bound<'_, PyAny>) -> PyResult<Signal> {
    if let Ok(n) = s.extract::<i32>() {
        return Signal::from_raw(n)
            .ok_or_else(|| PyValueError::new_err(format!("unknown signal {n}")));
    }
    let name: String = s.extract()?;
    name.parse::<Signal>()
        .map_err(|e| PyValueError::new_err(e.to_string()))
}

fn parse_mechanism(name: &str) -> PyResult<ContainmentChoice> {
    if name == "auto" {
        return Ok(ContainmentChoice::Auto);
    }
    name.parse::<Mechanism>()
        .map(ContainmentChoice::Only)
        .map_err(|e| {
            PyValueError::new_err(format!(
                "{e} (auto, cgroup, pid_namespace, subreaper, process_group, job_object)"
            ))
        })
}

/// How a stream is connected, as the Python layer passes it.
#[derive(FromPyObject)]
enum Stdio {
    /// "capture", "inherit", "null", "stdout" (stderr only).
    Mode(String),
    /// An open file descriptor (duplicated; the caller keeps its own).
    Fd(i64),
}

#[cfg(unix)]
fn dup_fd(fd: i64) -> PyResult<std::fs::File> {
    use std::os::fd::{BorrowedFd, RawFd};
    let raw = RawFd::try_from(fd).map_err(|_| PyValueError::new_err("bad file descriptor"))?;
    if raw < 0 {
        return Err(PyValueError::new_err("bad file descriptor"));
    }
    // SAFETY: the Python layer passes a descriptor its caller owns and keeps
    // open for the duration of this call (a file object's fileno() or an int
    // given as in `subprocess`); it is only borrowed to duplicate it.
    let b = unsafe { BorrowedFd::borrow_raw(raw) };
    let owned = b.try_clone_to_owned()?;
    Ok(std::fs::File::from(owned))
}

#[cfg(windows)]
fn dup_fd(_fd: i64) -> PyResult<std::fs::File> {
    Err(PyValueError::new_err(
        "file descriptors as stdin/stdout/stderr are not supported on Windows yet",
    ))
}

fn output_of(s: Option<Stdio>, relay: Option<i64>, stderr: bool) -> PyResult<Output> {
    if let Some(fd) = relay {
        // A pipe corral reads (so the wait delay applies to it) and moves,
        // in order, into this descriptor: `corral.Popen`'s PIPE.
        return Ok(Output::relay_file(dup_fd(fd)?));
    }
    Ok(match s {
        None => Output::capture(),
        Some(Stdio::Fd(fd)) => Output::file(dup_fd(fd)?),
        Some(Stdio::Mode(m)) => match m.as_str() {
            "capture" => Output::capture(),
            "inherit" => Output::inherit(),
            "null" => Output::null(),
            "stdout" if stderr => Output::merge_with_stdout(),
            other => return Err(PyValueError::new_err(format!("bad output mode {other:?}"))),
        },
    })
}

/// What an EMFILE/ENFILE error says beyond the OS's text: the limit that
/// applies, and what to do about it (in Python's terms).
fn nofile_hint() -> String {
    #[cfg(unix)]
    {
        let lim = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        let show = |v: Option<u64>| v.map_or_else(|| "unlimited".to_owned(), |v| v.to_string());
        format!(
            " (RLIMIT_NOFILE: soft {}, hard {}; every running command holds descriptors until \
             it ends; corral.raise_nofile_limit() raises the soft limit to the hard one)",
            show(lim.current),
            show(lim.maximum)
        )
    }
    #[cfg(not(unix))]
    {
        String::new()
    }
}

fn spawn_error(e: Error) -> PyErr {
    match e {
        Error::Spawn {
            kind,
            program,
            source,
        } => {
            let program = program.to_string_lossy().into_owned();
            let errno = match (os_errno(&source), kind) {
                (Some(n), _) => Some(n),
                // Typed as out of descriptors without an errno in sight:
                // still the errno `subprocess` users test for.
                (None, SpawnErrorKind::TooManyOpenFiles) => Some(EMFILE),
                (None, _) => None,
            };
            let mut text = os_strerror(&source);
            if kind == SpawnErrorKind::TooManyOpenFiles {
                text.push_str(&nofile_hint());
            }
            match errno {
                // OSError(errno, strerror, filename) becomes FileNotFoundError,
                // PermissionError, ... as in `subprocess`; EMFILE stays a
                // plain OSError with that errno.
                Some(errno) => PyOSError::new_err((errno, text, program)),
                None => PyOSError::new_err(format!("cannot run {program:?}: {text}")),
            }
        }
        Error::Containment { .. } => {
            ContainmentUnavailable::new_err(python_names(&e.full_message()))
        }
        Error::Sandbox { .. } => SandboxUnavailable::new_err(e.full_message()),
        Error::InvalidInput(m) => PyValueError::new_err(m),
        other => PyRuntimeError::new_err(other.full_message()),
    }
}

/// The library's messages name its Rust API where a step is missing; a
/// Python caller is told the Python name of the same step.
fn python_names(text: &str) -> String {
    text.replace(
        "corral::process_wide::enable_subreaper",
        "corral.enable_subreaper()",
    )
}

/// The OS's text for an error, without Rust's " (os error N)" suffix.
fn os_strerror(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.rfind(" (os error") {
        Some(i) => s[..i].to_owned(),
        None => s,
    }
}

/// Starts a run. Arguments are checked and converted by the Python layer
/// (`corral.run` / `corral.spawn`); see there. The streams are taken here;
/// every other keyword is an option of the run, mapped by [`spec_of`].
#[pyfunction]
#[pyo3(signature = (argv, *, input=None, stdin="null".to_owned(), stdin_fd=None, stdout=None,
    stderr=None, stdout_relay=None, stderr_relay=None, **options))]
#[allow(clippy::too_many_arguments)]
fn start(
    py: Python<'_>,
    argv: Vec<OsString>,
    input: Option<Vec<u8>>,
    stdin: String,
    stdin_fd: Option<i64>,
    stdout: Option<Stdio>,
    stderr: Option<Stdio>,
    stdout_relay: Option<i64>,
    stderr_relay: Option<i64>,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<Job> {
    let spec = spec_of(argv, options)?;
    let mut cmd = Command::from_spec(&spec).map_err(|e| PyValueError::new_err(e.to_string()))?;
    let program = spec
        .executable
        .clone()
        .or_else(|| spec.argv.as_ref().and_then(|a| a.first().cloned()))
        .unwrap_or_default();
    cmd.stdin(input_of(input, stdin_fd, &stdin)?);
    cmd.stdout(output_of(stdout, stdout_relay, false)?);
    cmd.stderr(output_of(stderr, stderr_relay, true)?);
    launch(py, cmd, &program)
}

/// The spec `start` would run, as JSON (a test seam: each keyword of
/// `start` reaches the library's spec).
#[pyfunction]
#[pyo3(signature = (argv, **options))]
fn _spec(argv: Vec<OsString>, options: Option<&Bound<'_, PyDict>>) -> PyResult<String> {
    let spec = spec_of(argv, options)?;
    serde_json::to_string(&spec).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// `sandbox=`: True (the default policy), False, or a dict with the keys
/// `allow_write` and `deny_read` (lists of paths) and `network` (a name),
/// as `corral.Sandbox` gives it.
fn sandbox_of(v: &Bound<'_, PyAny>) -> PyResult<Option<SandboxSpec>> {
    let typed =
        |e: String| pyo3::exceptions::PyTypeError::new_err(format!("start(): bad sandbox: {e}"));
    if let Ok(b) = v.extract::<bool>() {
        return Ok(b.then(SandboxSpec::default));
    }
    let d = v
        .cast::<PyDict>()
        .map_err(|_| typed("True, False or a corral.Sandbox".into()))?;
    let mut spec = SandboxSpec::default();
    for (k, v) in d.iter() {
        let k: String = k.extract()?;
        if v.is_none() {
            continue;
        }
        match k.as_str() {
            "allow_write" => {
                spec.allow_write = v.extract().map_err(|e: PyErr| typed(e.to_string()))?
            }
            "deny_read" => spec.deny_read = v.extract().map_err(|e: PyErr| typed(e.to_string()))?,
            "network" => {
                let name: String = v.extract().map_err(|e: PyErr| typed(e.to_string()))?;
                spec.network = name.parse().map_err(PyValueError::new_err)?;
            }
            other => return Err(typed(format!("unknown key {other:?}"))),
        }
    }
    Ok(Some(spec))
}

/// The one mapping of `start`'s keywords (the Python layer's names, checked
/// there) onto the library's spec of the run: everything but the streams.
/// A keyword given as None is left at its default; an unknown one is a
/// TypeError, as for any function.
fn spec_of(argv: Vec<OsString>, options: Option<&Bound<'_, PyDict>>) -> PyResult<RunSpec> {
    if argv.is_empty() {
        return Err(PyValueError::new_err("args must name a program"));
    }
    let arg0 = argv[0].clone();
    let mut spec = RunSpec::argv(argv);
    // CPython ignores SIGPIPE: without the restore the child inherits
    // that, as `subprocess` does (restore_signals=True by default).
    #[cfg(unix)]
    {
        spec.restore_signals = true;
    }
    for (k, v) in options.into_iter().flat_map(|d| d.iter()) {
        let k: String = k.extract()?;
        if v.is_none() {
            continue;
        }
        let typed =
            |e: PyErr| pyo3::exceptions::PyTypeError::new_err(format!("start(): bad {k}: {e}"));
        let secs_of =
            |what: &str| -> PyResult<Duration> { secs(v.extract().map_err(typed)?, what) };
        match k.as_str() {
            "cwd" => spec.cwd = Some(v.extract::<PathBuf>().map_err(typed)?),
            "env" => {
                let vars: Vec<(OsString, OsString)> = v.extract().map_err(typed)?;
                spec.env_clear = true;
                spec.env = Some(vars.into_iter().collect());
            }
            "timeout" => spec.timeout_ms = Some(secs_of("timeout")?),
            "grace" => spec.grace_ms = Some(secs_of("grace")?),
            "wait_delay" => spec.wait_delay_ms = Some(secs_of("wait_delay")?),
            "idle_timeout" => spec.idle_timeout_ms = Some(secs_of("idle_timeout")?),
            "confirm_window" => spec.confirm_window_ms = Some(secs_of("confirm_window")?),
            "max_output" => spec.max_output = Some(v.extract().map_err(typed)?),
            "capture_limit" => spec.capture_limit = Some(v.extract().map_err(typed)?),
            "memory_max" => spec.memory_max = Some(v.extract().map_err(typed)?),
            "pids_max" => spec.pids_max = Some(v.extract().map_err(typed)?),
            "signal" => spec.signal = Some(parse_signal(&v)?),
            "leftovers" => {
                spec.leftovers = Some(leftover_policy(&v.extract::<String>().map_err(typed)?)?)
            }
            "containment" => {
                let name: String = v.extract().map_err(typed)?;
                spec.containment = Some(parse_mechanism(&name)?.into());
            }
            "require_crash_safety" => spec.require_crash_safety = v.extract().map_err(typed)?,
            // `executable=`: that program runs, argv[0] kept as its first
            // argument.
            "program" => {
                let program: OsString = v.extract().map_err(typed)?;
                if program != arg0 {
                    spec.executable = Some(program);
                }
            }
            "keep_fds" => {
                let fds: Vec<i32> = v.extract().map_err(typed)?;
                if cfg!(unix) {
                    spec.close_other_fds = Some(fds);
                }
            }
            "restore_signals" => {
                let yes: bool = v.extract().map_err(typed)?;
                if cfg!(unix) {
                    spec.restore_signals = yes;
                    spec.sigpipe_ignored = !yes;
                }
            }
            "new_session" => spec.new_session = v.extract().map_err(typed)?,
            "uid" => spec.uid = Some(v.extract().map_err(typed)?),
            "gid" => spec.gid = Some(v.extract().map_err(typed)?),
            "groups" => spec.groups = Some(v.extract().map_err(typed)?),
            "umask" => spec.umask = Some(v.extract().map_err(typed)?),
            "pty" => {
                let (cols, rows): (u16, u16) = v.extract().map_err(typed)?;
                spec.pty = Some(PtySpec { cols, rows });
            }
            "sandbox" => spec.sandbox = sandbox_of(&v)?,
            other => {
                return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                    "start() got an unexpected keyword argument '{other}'"
                )))
            }
        }
    }
    Ok(spec)
}

/// The child's stdin: `input=` bytes, else a descriptor, else the named mode.
fn input_of(input: Option<Vec<u8>>, stdin_fd: Option<i64>, stdin: &str) -> PyResult<Input> {
    Ok(match (input, stdin_fd) {
        (Some(data), _) => Input::bytes(data),
        (None, Some(fd)) => Input::file(dup_fd(fd)?),
        (None, None) => match stdin {
            "null" => Input::null(),
            "inherit" => Input::inherit(),
            other => return Err(PyValueError::new_err(format!("bad stdin mode {other:?}"))),
        },
    })
}

/// The leftovers policy named `name` (`_` and `-` alike).
fn leftover_policy(name: &str) -> PyResult<LeftoverPolicy> {
    match name.replace('_', "-").as_str() {
        "kill" => Ok(LeftoverPolicy::Kill),
        "keep" => Ok(LeftoverPolicy::Keep),
        "keep-on-success" => Ok(LeftoverPolicy::KeepOnSuccess),
        other => Err(PyValueError::new_err(format!(
            "unknown leftovers policy {other:?} (kill, keep-on-success, keep)"
        ))),
    }
}

/// Starts `cmd` (GIL released) as a live run that `_shutdown` can cancel.
fn launch(py: Python<'_>, mut cmd: Command, program: &OsStr) -> PyResult<Job> {
    let cancel = CancelToken::new();
    cmd.cancel_token(&cancel);
    let shared = Arc::new(Shared {
        state: Mutex::new(State::Running),
        callback: Mutex::new(None),
        done: Condvar::new(),
        cancel,
        owner: std::process::id(),
        signaller: Mutex::new(None),
    });
    lock(&LIVE).push(Arc::downgrade(&shared));
    let for_driver = shared.clone();
    let pid = py
        .detach(move || driver::start(&mut cmd, for_driver, program))
        .map_err(spawn_error)?;
    Ok(Job {
        shared,
        pid,
        result: Mutex::new(None),
        lost: AtomicBool::new(false),
    })
}

/// Cancels every live run and waits (GIL released) until their cleanups are
/// done, at most `timeout` seconds. Returns how many runs were still live.
/// Called at interpreter exit; completion callbacks are no longer called.
#[pyfunction]
#[pyo3(signature = (timeout=30.0))]
fn _shutdown(py: Python<'_>, timeout: f64) -> PyResult<usize> {
    py.detach(close_notifier);
    let until = Instant::now() + secs(timeout, "timeout")?;
    let live: Vec<Arc<Shared>> = lock(&LIVE).iter().filter_map(Weak::upgrade).collect();
    let me = std::process::id();
    let live: Vec<Arc<Shared>> = live
        .into_iter()
        .filter(|s| s.owner == me && !s.is_done())
        .collect();
    for s in &live {
        s.cancel.cancel();
    }
    py.detach(|| {
        for s in &live {
            s.wait_until(Some(until));
        }
    });
    Ok(live.len())
}

/// Makes this process a child subreaper (Linux), so that `containment="auto"`
/// can fall back to the subreaper tier when no cgroup can be had. Process-wide
/// and permanent: orphans of every child of this process are then re-parented
/// to it.
#[pyfunction]
fn enable_subreaper() -> PyResult<()> {
    #[cfg(target_os = "linux")]
    {
        corral::process_wide::enable_subreaper().map_err(PyErr::from)
    }
    #[cfg(not(target_os = "linux"))]
    {
        Err(PyOSError::new_err(
            "the subreaper tier exists only on Linux",
        ))
    }
}

/// Raises this process's soft limit on open file descriptors
/// (`RLIMIT_NOFILE`) to its hard limit and returns the new soft limit
/// (None: unlimited). corral never changes it by itself (children inherit
/// it); a host that runs many commands at once calls this at start. On
/// Windows there is no such limit: returns None.
#[pyfunction]
fn raise_nofile_limit() -> PyResult<Option<u64>> {
    #[cfg(unix)]
    {
        corral::process_wide::raise_nofile_limit().map_err(PyErr::from)
    }
    #[cfg(not(unix))]
    {
        Ok(None)
    }
}

fn captured<'py>(py: Python<'py>, c: &Captured) -> PyResult<Bound<'py, PyBytes>> {
    let head = c.head();
    let tail = c.tail();
    PyBytes::new_with(py, head.len() + tail.len(), |buf| {
        buf[..head.len()].copy_from_slice(head);
        buf[head.len()..].copy_from_slice(&tail);
        Ok(())
    })
}

fn dur(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// A JSON value as the Python object `json.loads` would give.
fn json_to_py<'py>(py: Python<'py>, v: &serde_json::Value) -> PyResult<Bound<'py, PyAny>> {
    use serde_json::Value;
    Ok(match v {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => b.into_pyobject(py)?.to_owned().into_any(),
        Value::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => u.into_pyobject(py)?.into_any(),
            (None, Some(i)) => i.into_pyobject(py)?.into_any(),
            _ => n.as_f64().unwrap_or(f64::NAN).into_pyobject(py)?.into_any(),
        },
        Value::String(s) => s.into_pyobject(py)?.into_any(),
        Value::Array(a) => {
            let l = PyList::empty(py);
            for x in a {
                l.append(json_to_py(py, x)?)?;
            }
            l.into_any()
        }
        Value::Object(o) => {
            let d = PyDict::new(py);
            for (k, x) in o {
                d.set_item(k, json_to_py(py, x)?)?;
            }
            d.into_any()
        }
    })
}

/// The document's fields that Python shows in its own form (seconds, signal
/// names): left out of the converted document, set below from the report.
const PYTHON_FORM: [&str; 4] = ["duration_ms", "timings_ms", "usage", "signals_sent"];

/// The report as Python's dict: the report document
/// ([`corral::document::RunReport`]) converted once, then what Python
/// shows in its own form (times in seconds, signal names) or only Python
/// has (`returncode`, `cleanup_error` (every failed cleanup step in one line), the omitted counts, the streams).
fn report_dict(py: Python<'_>, r: Report) -> PyResult<Bound<'_, PyDict>> {
    let mut doc = serde_json::to_value(RunReport::from(&r))
        .map_err(|e| PyRuntimeError::new_err(format!("the report could not be converted: {e}")))?;
    if let Some(o) = doc.as_object_mut() {
        for k in PYTHON_FORM {
            o.remove(k);
        }
    }
    let d = json_to_py(py, &doc)?.cast_into::<PyDict>()?;
    d.set_item("returncode", r.exit_code())?;
    let sent = PyList::empty(py);
    for s in &r.signals_sent {
        match s.name() {
            Some(n) => sent.append(n)?,
            None => sent.append(s.as_raw())?,
        }
    }
    d.set_item("signals_sent", sent)?;
    // Every failed step in one line (the list is the document's
    // `cleanup_errors`).
    let cleanup_error = match r.cleanup_errors.is_empty() {
        true => None,
        false => r.error_message(),
    };
    d.set_item("cleanup_error", cleanup_error)?;
    d.set_item("duration", dur(r.duration()))?;
    let t = PyDict::new(py);
    t.set_item("spawn", dur(r.timings.spawn))?;
    t.set_item("root_exit", r.timings.root_exit.map(dur))?;
    t.set_item("output_closed", r.timings.output_closed.map(dur))?;
    t.set_item("cleanup_done", dur(r.timings.cleanup_done))?;
    d.set_item("timings", t)?;
    match &r.usage {
        Some(u) => {
            let ud = PyDict::new(py);
            ud.set_item("cpu_user", u.cpu_user.map(dur))?;
            ud.set_item("cpu_system", u.cpu_system.map(dur))?;
            ud.set_item("memory_peak", u.memory_peak)?;
            ud.set_item("pids_peak", u.pids_peak)?;
            d.set_item("usage", ud)?;
        }
        None => d.set_item("usage", py.None())?,
    }
    d.set_item("stdout_omitted", r.stdout.omitted())?;
    d.set_item("stderr_omitted", r.stderr.omitted())?;
    // Streams last, one at a time, each freed once copied: the peak is the
    // captured bytes plus one stream's copy.
    let Report { stdout, stderr, .. } = r;
    d.set_item("stdout", captured(py, &stdout)?)?;
    drop(stdout);
    d.set_item("stderr", captured(py, &stderr)?)?;
    Ok(d)
}

/// The Rust core of the `corral` package. Use the `corral` module itself.
#[pymodule]
fn _corral(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(start, m)?)?;
    m.add_function(wrap_pyfunction!(_spec, m)?)?;
    m.add_function(wrap_pyfunction!(_shutdown, m)?)?;
    m.add_function(wrap_pyfunction!(enable_subreaper, m)?)?;
    m.add_function(wrap_pyfunction!(raise_nofile_limit, m)?)?;
    m.add_class::<Job>()?;
    #[cfg(unix)]
    session::register(m)?;
    m.add(
        "ContainmentUnavailable",
        m.py().get_type::<ContainmentUnavailable>(),
    )?;
    m.add(
        "SandboxUnavailable",
        m.py().get_type::<SandboxUnavailable>(),
    )?;
    m.add("MULTI_THREADED_DRIVER", cfg!(not(unix)))?;
    // The package's version is the crate's (maturin builds the wheel's
    // metadata from the same Cargo version): one source.
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
