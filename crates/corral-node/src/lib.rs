//! The native core of the npm package `corral` (a Node-API addon).
//!
//! It binds the library's public API only; index.js checks and converts the
//! options and shapes results and errors. One [`Job`] per run:
//!
//! * On Unix every run is driven by the library's async driver on one shared
//!   current-thread tokio runtime (one thread for the whole process, whatever
//!   the number of runs); the event loop never waits for a run. The report
//!   comes back through a thread-safe function (a libuv async handle, no
//!   thread), which keeps the event loop alive while the run lives, as a
//!   `ChildProcess` does.
//! * On Windows (no async driver in the library) each run is waited on by a
//!   thread of its own.
//!
//! A `Job` collected by the garbage collector before its report arrived
//! cancels its run (the tree is killed, never leaked); on `process.exit`
//! index.js kills its environment's live runs ([`Job::kill_now`]) and waits
//! for their cleanups, bounded ([`Job::wait_done`]). When the Node process dies without either (a
//! signal, a crash), the library's crash-safety keeper kills the tree.
//!
//! The report is the library's own serialisation (feature `serde`, the
//! schema in docs/report-schema.json), passed to JavaScript as JSON text.

use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use corral::document::{Containment, OutcomeName, RunReport, RunSpec, SandboxSpec};
use corral::{
    CancelToken, Command, ContainmentChoice, Error, Input, LeftoverPolicy, Mechanism, Output,
    Report, Signal, SpawnErrorKind,
};
use corral_bindings::{lock, os_errno, EMFILE};
use napi::bindgen_prelude::{Buffer, FnArgs, Function};
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::{Error as JsError, Result, Status};
use napi_derive::napi;

#[cfg(unix)]
mod session;
mod types;

/// What the driver and the JavaScript side share for one run.
struct Shared {
    done: Mutex<bool>,
    finished: Condvar,
    cancel: CancelToken,
}

impl Shared {
    fn is_done(&self) -> bool {
        *lock(&self.done)
    }

    fn wait_until(&self, until: Instant) -> bool {
        let mut d = lock(&self.done);
        while !*d {
            let now = Instant::now();
            if now >= until {
                return false;
            }
            d = self
                .finished
                .wait_timeout(d, until - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        true
    }
}

/// The completion callback: `(reportJson, stdout, stderr)`.
type DoneFn = ThreadsafeFunction<Done, (), FnArgs<(String, Buffer, Buffer)>, Status, false>;
/// A streaming callback: one chunk of output, in order. At most a few
/// chunks are queued: a slow consumer applies back-pressure to the child.
type ChunkFn = ThreadsafeFunction<Vec<u8>, (), Buffer, Status, false, false, 16>;

/// A finished run, as it crosses to the JavaScript thread.
struct Done {
    json: String,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

/// The report of a finished run, converted once: the library's JSON and the
/// captured bytes (head then tail).
fn done_of(report: Report) -> Done {
    let json = serde_json::to_string(&report).unwrap_or_else(|e| {
        format!(
            "{{\"outcome\":{:?},\"error\":{:?}}}",
            report.outcome_name(),
            format!("the report could not be serialised: {e}")
        )
    });
    let Report { stdout, stderr, .. } = report;
    let bytes = |c: &corral::Captured| {
        let mut v = Vec::with_capacity(c.head().len() + c.tail().len());
        v.extend_from_slice(c.head());
        v.extend_from_slice(&c.tail());
        v
    };
    Done {
        json,
        stdout: bytes(&stdout),
        stderr: bytes(&stderr),
    }
}

/// Ends one run: marks it done (under the lock [`Job`]'s drop reads) and
/// hands the report to JavaScript.
fn finish(shared: &Shared, report: Report, on_done: &DoneFn) {
    let done = done_of(report);
    *lock(&shared.done) = true;
    shared.finished.notify_all();
    // Fails only when Node is tearing the environment down: nobody is left
    // to tell.
    let _ = on_done.call(done, ThreadsafeFunctionCallMode::NonBlocking);
}

/// Ends a run that could not start (started on the runtime thread).
fn finish_failed(shared: &Shared, json: String, on_done: &DoneFn) {
    *lock(&shared.done) = true;
    shared.finished.notify_all();
    let done = Done {
        json,
        stdout: Vec::new(),
        stderr: Vec::new(),
    };
    let _ = on_done.call(done, ThreadsafeFunctionCallMode::NonBlocking);
}

mod driver {
    //! Runs are driven by the driver the bindings share (`corral_bindings`:
    //! one runtime thread on Unix, a waiting thread per run elsewhere).
    use super::*;

    /// Spawns `cmd`; the report reaches `on_done`.
    pub(super) fn start(
        cmd: &mut Command,
        shared: Arc<Shared>,
        on_done: DoneFn,
        program: &OsStr,
    ) -> std::result::Result<u32, Error> {
        corral_bindings::start(
            cmd,
            program,
            |_| {},
            move |report| finish(&shared, report, &on_done),
        )
    }

    /// Starts the run on the runtime thread: the caller (the event loop)
    /// does not wait for the spawn. A failure to start reaches `on_done`.
    pub(super) fn start_later(
        cmd: Command,
        shared: Arc<Shared>,
        on_done: DoneFn,
        program: &OsStr,
    ) -> std::result::Result<u32, Error> {
        corral_bindings::start_later(cmd, program, move |result| match result {
            Ok(report) => finish(&shared, report, &on_done),
            Err((e, took)) => finish_failed(&shared, failed_start(&e, took), &on_done),
        })
    }
}

/// The error numbers used here (with `corral_bindings::EMFILE`): the same
/// on every Unix that matters (Linux, macOS, the BSDs), and what libuv
/// reports on Windows.
const ENOENT: i32 = 2;
const EACCES: i32 = 13;
const ENOTDIR: i32 = 20;

/// The report of a run that could not start, in the schema's field names
/// (every field present), plus `errno` (the OS error number, for Node's
/// `ENOENT`-style codes) and `syscall`.
fn failed_start(e: &Error, elapsed: Duration) -> String {
    let containment = match e {
        Error::Containment { mechanism, .. } => Some(*mechanism),
        _ => None,
    };
    let errno = match e {
        Error::Spawn { source, kind, .. } => os_errno(source).or(match (kind, source.kind()) {
            // No OS error number in sight (a step's own message): the one
            // Node's callers test for, from the kinds.
            (SpawnErrorKind::TooManyOpenFiles, _) => Some(EMFILE),
            (SpawnErrorKind::NotFound, _) | (_, std::io::ErrorKind::NotFound) => Some(ENOENT),
            (SpawnErrorKind::PermissionDenied, _) | (_, std::io::ErrorKind::PermissionDenied) => {
                Some(EACCES)
            }
            (_, std::io::ErrorKind::NotADirectory) => Some(ENOTDIR),
            _ => None,
        }),
        Error::Containment {
            source: Some(s), ..
        } => os_errno(s),
        _ => None,
    };
    let outcome = OutcomeName::from_name(e.outcome_name()).unwrap_or(OutcomeName::SpawnFailed);
    let doc = RunReport::not_started(outcome, containment, elapsed, e.full_message());
    let mut v = serde_json::to_value(doc).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        o.insert("errno".into(), errno.into());
        o.insert(
            "invalid_input".into(),
            matches!(e, Error::InvalidInput(_)).into(),
        );
    }
    v.to_string()
}

/// The options index.js passes, already checked and converted.
#[napi(object)]
pub struct StartOptions {
    pub cwd: Option<String>,
    /// Replaces the environment: `[name, value, name, value, ...]`.
    pub env: Option<Vec<String>>,
    /// Bytes for stdin, then end of file.
    pub input: Option<Buffer>,
    /// Make stdin a pipe whose write end [`Job::take_stdin`] gives.
    pub stdin_pipe: Option<bool>,
    /// "inherit": the caller's own stdin; absent: the null device.
    pub stdin_mode: Option<String>,
    /// Relay stdout / stderr into a pipe whose read end
    /// [`Job::take_stdout`] / [`Job::take_stderr`] gives (not captured).
    pub stdout_pipe: Option<bool>,
    pub stderr_pipe: Option<bool>,
    /// Hand the stream to the child as is ("inherit") or discard it
    /// ("ignore"); absent: capture.
    pub stdout_mode: Option<String>,
    pub stderr_mode: Option<String>,
    pub timeout_ms: Option<f64>,
    pub kill_signal: Option<String>,
    pub kill_after_ms: Option<f64>,
    pub wait_delay_ms: Option<f64>,
    /// No output for this long ends the run (0: none).
    pub idle_timeout_ms: Option<f64>,
    /// Bytes stdout and stderr may carry together (the library's output
    /// limit).
    pub output_limit: Option<f64>,
    pub capture_limit: Option<f64>,
    /// Cancel the run (with `kill_signal`) once either stream has passed
    /// this many bytes (execFile's `maxBuffer`).
    pub cancel_after_bytes: Option<f64>,
    pub containment: Option<String>,
    pub leftovers: Option<String>,
    pub require_crash_safety: Option<bool>,
    pub memory_max: Option<f64>,
    pub pids_max: Option<f64>,
    /// Confine the tree (index.js checked the policy: absolute paths that
    /// exist, a network name).
    pub sandbox: Option<bool>,
    pub sandbox_allow_write: Option<Vec<String>>,
    pub sandbox_deny_read: Option<Vec<String>>,
    pub sandbox_network: Option<String>,
    /// Spawn on the runtime thread (the pid is not known when `start`
    /// returns; a failure to start reaches `onDone` with a report carrying
    /// `errno`).
    pub deferred: Option<bool>,
}

fn ms(v: f64, what: &str) -> Result<Duration> {
    Duration::try_from_secs_f64(v / 1000.0).map_err(|_| {
        JsError::new(
            Status::InvalidArg,
            format!("{what} must be a non-negative number of milliseconds, not {v}"),
        )
    })
}

fn invalid(msg: String) -> JsError {
    JsError::new(Status::InvalidArg, msg)
}

fn parse_signal(s: &str) -> Result<Signal> {
    s.parse::<Signal>().map_err(|e| invalid(e.to_string()))
}

fn parse_containment(name: &str) -> Result<ContainmentChoice> {
    if name == "auto" {
        return Ok(ContainmentChoice::Auto);
    }
    name.replace('-', "_")
        .parse::<Mechanism>()
        .map(ContainmentChoice::Only)
        .map_err(|e| invalid(e.to_string()))
}

fn parse_leftovers(name: &str) -> Result<LeftoverPolicy> {
    match name.replace('_', "-").as_str() {
        "kill" => Ok(LeftoverPolicy::Kill),
        "keep" => Ok(LeftoverPolicy::Keep),
        "keep-on-success" => Ok(LeftoverPolicy::KeepOnSuccess),
        other => Err(invalid(format!(
            "unknown leftovers policy {other:?} (kill, keep-on-success, keep)"
        ))),
    }
}

/// A whole number of bytes from JavaScript (`Infinity`: no limit).
fn bytes(v: f64) -> usize {
    if v.is_finite() {
        v.max(0.0) as usize
    } else {
        usize::MAX / 4
    }
}

/// Output relayed chunk by chunk to a JavaScript callback (`onStdout`).
struct ChunkWriter(ChunkFn);

impl Write for ChunkWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self
            .0
            .call(buf.to_vec(), ThreadsafeFunctionCallMode::Blocking)
        {
            Status::Ok => Ok(buf.len()),
            // Node is going away: nobody reads any more.
            s => Err(std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                format!("the JavaScript callback is gone ({s})"),
            )),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn chunk_fn(f: Function<'_, Buffer, ()>) -> Result<ChunkFn> {
    f.build_threadsafe_function::<Vec<u8>>()
        .callee_handled::<false>()
        .max_queue_size::<16>()
        .build_callback(|ctx| Ok(Buffer::from(ctx.value)))
}

/// The pipes of a `spawn`: the ends index.js wraps as streams.
#[derive(Default)]
struct Pipes {
    stdin: Option<std::fs::File>,
    stdout: Option<std::fs::File>,
    stderr: Option<std::fs::File>,
}

#[cfg(unix)]
fn pipe() -> Result<(std::fs::File, std::fs::File)> {
    use std::os::fd::OwnedFd;
    // std's pipe: close-on-exec on every Unix (pipe2 where there is one).
    let (r, w) =
        std::io::pipe().map_err(|e| JsError::from_reason(format!("cannot make a pipe: {e}")))?;
    Ok((
        std::fs::File::from(OwnedFd::from(r)),
        std::fs::File::from(OwnedFd::from(w)),
    ))
}

#[cfg(not(unix))]
fn pipe() -> Result<(std::fs::File, std::fs::File)> {
    Err(JsError::from_reason(
        "stdin/stdout/stderr streams are not supported on this platform yet",
    ))
}

fn output(
    mode: Option<&str>,
    pipe_end: Option<std::fs::File>,
    on_chunk: Option<Function<'_, Buffer, ()>>,
) -> Result<Output> {
    if let Some(w) = pipe_end {
        return Ok(Output::relay_file(w));
    }
    if let Some(f) = on_chunk {
        return Ok(Output::relay(ChunkWriter(chunk_fn(f)?)));
    }
    Ok(match mode {
        None | Some("pipe") => Output::capture(),
        Some("inherit") => Output::inherit(),
        Some("ignore") => Output::null(),
        Some(other) => return Err(invalid(format!("bad output mode {other:?}"))),
    })
}

/// The one mapping of the options index.js passes (its own names, already
/// checked there) onto the library's spec of the run: everything but the
/// streams.
fn spec_of(argv: &[String], o: &StartOptions) -> Result<RunSpec> {
    if argv.is_empty() {
        return Err(invalid("argv must name a program".into()));
    }
    let positive = |v: Option<f64>, what: &str| match v {
        Some(t) if t > 0.0 => ms(t, what).map(Some),
        _ => Ok(None),
    };
    let mut spec = RunSpec::argv(argv.iter().cloned());
    spec.cwd = o.cwd.as_ref().map(PathBuf::from);
    if let Some(vars) = &o.env {
        // `env` replaces the environment, as child_process's does.
        spec.env_clear = true;
        spec.env = Some(
            vars.chunks(2)
                .filter_map(|kv| match kv {
                    [k, v] => Some((k.into(), v.into())),
                    _ => None,
                })
                .collect(),
        );
    }
    spec.timeout_ms = positive(o.timeout_ms, "timeout")?;
    spec.signal = o.kill_signal.as_deref().map(parse_signal).transpose()?;
    spec.grace_ms = o.kill_after_ms.map(|t| ms(t, "killAfter")).transpose()?;
    spec.wait_delay_ms = o.wait_delay_ms.map(|t| ms(t, "waitDelay")).transpose()?;
    spec.idle_timeout_ms = positive(o.idle_timeout_ms, "idleTimeout")?;
    spec.max_output = o
        .output_limit
        .filter(|n| n.is_finite())
        .map(|n| bytes(n) as u64);
    spec.capture_limit = o.capture_limit.map(|n| bytes(n) as u64);
    spec.containment = o
        .containment
        .as_deref()
        .map(parse_containment)
        .transpose()?
        .map(Containment::from);
    spec.leftovers = o.leftovers.as_deref().map(parse_leftovers).transpose()?;
    spec.memory_max = o.memory_max.map(|n| bytes(n) as u64);
    spec.pids_max = o.pids_max.map(|n| bytes(n) as u64);
    spec.require_crash_safety = o.require_crash_safety == Some(true);
    if o.sandbox == Some(true) {
        let paths = |v: &Option<Vec<String>>| -> Vec<PathBuf> {
            v.iter().flatten().map(PathBuf::from).collect()
        };
        spec.sandbox = Some(SandboxSpec {
            allow_write: paths(&o.sandbox_allow_write),
            deny_read: paths(&o.sandbox_deny_read),
            network: match &o.sandbox_network {
                Some(n) => n.parse().map_err(invalid)?,
                None => corral::Network::None,
            },
        });
    }
    Ok(spec)
}

/// The spec the options map to, as JSON (a test seam: each option of
/// index.js reaches the spec).
#[napi]
pub fn spec_json(argv: Vec<String>, options: StartOptions) -> Result<String> {
    let spec = spec_of(&argv, &options)?;
    serde_json::to_string(&spec).map_err(|e| JsError::from_reason(e.to_string()))
}

/// Builds the command from checked options; the pipes for `spawn` are made
/// here and their parent ends returned.
fn command(
    argv: &[String],
    o: &StartOptions,
    on_stdout: Option<Function<'_, Buffer, ()>>,
    on_stderr: Option<Function<'_, Buffer, ()>>,
) -> Result<(Command, Pipes)> {
    let mut cmd = Command::from_spec(&spec_of(argv, o)?).map_err(|e| invalid(e.to_string()))?;
    let mut pipes = Pipes::default();
    if let Some(data) = &o.input {
        cmd.stdin(Input::bytes(data.to_vec()));
    } else if o.stdin_pipe == Some(true) {
        let (r, w) = pipe()?;
        cmd.stdin(Input::file(r));
        pipes.stdin = Some(w);
    } else if o.stdin_mode.as_deref() == Some("inherit") {
        cmd.stdin(Input::inherit());
    }
    let mut out_end = None;
    if o.stdout_pipe == Some(true) {
        let (r, w) = pipe()?;
        pipes.stdout = Some(r);
        out_end = Some(w);
    }
    let mut err_end = None;
    if o.stderr_pipe == Some(true) {
        let (r, w) = pipe()?;
        pipes.stderr = Some(r);
        err_end = Some(w);
    }
    cmd.stdout(output(o.stdout_mode.as_deref(), out_end, on_stdout)?);
    cmd.stderr(output(o.stderr_mode.as_deref(), err_end, on_stderr)?);
    Ok((cmd, pipes))
}

/// Cancels the run once a stream has passed `limit` bytes (counted from the
/// library's line callback: each line's bytes and its newline).
fn cancel_after(cmd: &mut Command, cancel: CancelToken, limit: u64, signal: Option<Signal>) {
    /// The line splitter's longest piece: a piece that long may not end in
    /// a newline.
    const PIECE: usize = 4 << 20;
    let seen = [AtomicU64::new(0), AtomicU64::new(0)];
    let fired = AtomicBool::new(false);
    cmd.on_line(move |stream, line| {
        let i = usize::from(stream == corral::Stream::Stderr);
        let n = line.len() as u64 + u64::from(line.len() < PIECE);
        let total = seen[i].fetch_add(n, Ordering::Relaxed) + n;
        if total > limit && !fired.swap(true, Ordering::Relaxed) {
            match signal {
                Some(s) => cancel.cancel_with(s),
                None => cancel.cancel(),
            }
        }
    });
}

/// One run, as JavaScript holds it. Collected before the run ended, it
/// cancels the run.
#[napi]
pub struct Job {
    shared: Arc<Shared>,
    pid: u32,
    failure: Option<String>,
    pipes: Mutex<Pipes>,
}

impl Drop for Job {
    fn drop(&mut self) {
        if !self.shared.is_done() {
            self.shared.cancel.cancel();
        }
    }
}

#[cfg(unix)]
fn take_fd(f: Option<std::fs::File>) -> Option<i32> {
    use std::os::fd::IntoRawFd;
    f.map(IntoRawFd::into_raw_fd)
}

#[cfg(not(unix))]
fn take_fd(_f: Option<std::fs::File>) -> Option<i32> {
    None
}

#[napi]
impl Job {
    /// The root's process id (0 when the run could not start).
    #[napi(getter)]
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The report of a run that could not start (JSON), or null.
    #[napi(getter)]
    pub fn failure(&self) -> Option<String> {
        self.failure.clone()
    }

    /// Whether the report is in.
    #[napi(getter)]
    pub fn done(&self) -> bool {
        self.shared.is_done()
    }

    /// Cancels the run (idempotent): the tree is terminated with `signal`
    /// first (a name or number; absent: the run's own first signal), then
    /// SIGKILL after the grace.
    #[napi]
    pub fn cancel(&self, signal: Option<String>) -> Result<()> {
        match signal {
            Some(s) => self.shared.cancel.cancel_with(parse_signal(&s)?),
            None => self.shared.cancel.cancel(),
        }
        Ok(())
    }

    /// Cancels the run with SIGKILL at once (no grace: for an exiting
    /// process).
    #[napi]
    pub fn kill_now(&self) {
        self.shared.cancel.cancel_with(Signal::KILL);
    }

    /// Waits (blocking the calling thread) until the run's cleanup is done,
    /// at most `timeoutMs`; true if it is. For an exiting process only.
    #[napi]
    pub fn wait_done(&self, timeout_ms: f64) -> bool {
        let d = Duration::try_from_secs_f64(timeout_ms / 1000.0).unwrap_or_default();
        self.shared.wait_until(Instant::now() + d)
    }

    /// The write end of the child's stdin pipe (a descriptor the caller now
    /// owns), once.
    #[napi]
    pub fn take_stdin(&self) -> Option<i32> {
        take_fd(lock(&self.pipes).stdin.take())
    }

    /// The read end of the relayed stdout pipe, once.
    #[napi]
    pub fn take_stdout(&self) -> Option<i32> {
        take_fd(lock(&self.pipes).stdout.take())
    }

    /// The read end of the relayed stderr pipe, once.
    #[napi]
    pub fn take_stderr(&self) -> Option<i32> {
        take_fd(lock(&self.pipes).stderr.take())
    }
}

/// Starts a run. `onDone(reportJson, stdout, stderr)` is called once, when
/// the run has ended (not when it could not start: see [`Job::failure`]).
#[napi]
pub fn start(
    argv: Vec<String>,
    options: StartOptions,
    on_done: Function<'_, FnArgs<(String, Buffer, Buffer)>, ()>,
    on_stdout: Option<Function<'_, Buffer, ()>>,
    on_stderr: Option<Function<'_, Buffer, ()>>,
) -> Result<Job> {
    let t0 = Instant::now();
    let (mut cmd, pipes) = command(&argv, &options, on_stdout, on_stderr)?;
    let cancel = CancelToken::new();
    cmd.cancel_token(&cancel);
    if let Some(limit) = options.cancel_after_bytes {
        let sig = options
            .kill_signal
            .as_deref()
            .map(parse_signal)
            .transpose()?;
        cancel_after(&mut cmd, cancel.clone(), bytes(limit) as u64, sig);
    }
    let on_done: DoneFn = on_done
        .build_threadsafe_function::<Done>()
        .callee_handled::<false>()
        .build_callback(|ctx| {
            let Done {
                json,
                stdout,
                stderr,
            } = ctx.value;
            Ok(FnArgs::from((
                json,
                Buffer::from(stdout),
                Buffer::from(stderr),
            )))
        })?;
    let shared = Arc::new(Shared {
        done: Mutex::new(false),
        finished: Condvar::new(),
        cancel,
    });
    let program = OsString::from(&argv[0]);
    let started = if options.deferred == Some(true) {
        driver::start_later(cmd, shared.clone(), on_done, &program)
    } else {
        driver::start(&mut cmd, shared.clone(), on_done, &program)
    };
    match started {
        Ok(pid) => Ok(Job {
            shared,
            pid,
            failure: None,
            pipes: Mutex::new(pipes),
        }),
        Err(e) => {
            *lock(&shared.done) = true;
            Ok(Job {
                shared,
                pid: 0,
                failure: Some(failed_start(&e, t0.elapsed())),
                pipes: Mutex::new(Pipes::default()),
            })
        }
    }
}

/// Makes this process a child subreaper (Linux), so that `containment:
/// "auto"` can fall back to the subreaper tier when no cgroup can be had.
/// Process-wide and permanent.
#[napi]
pub fn enable_subreaper() -> Result<()> {
    #[cfg(target_os = "linux")]
    {
        corral::process_wide::enable_subreaper().map_err(|e| JsError::from_reason(e.to_string()))
    }
    #[cfg(not(target_os = "linux"))]
    {
        Err(JsError::from_reason(
            "the subreaper tier exists only on Linux",
        ))
    }
}

/// Raises this process's soft limit on open descriptors to its hard limit;
/// returns the new soft limit (null: unlimited).
#[napi]
pub fn raise_nofile_limit() -> Result<Option<f64>> {
    #[cfg(unix)]
    {
        corral::process_wide::raise_nofile_limit()
            .map(|v| v.map(|n| n as f64))
            .map_err(|e| JsError::from_reason(e.to_string()))
    }
    #[cfg(not(unix))]
    {
        Ok(None)
    }
}
