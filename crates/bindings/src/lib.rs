//! What corral's Python and Node bindings share: how a run is driven once
//! its `Command` is built, and the few helpers around it. Each binding
//! keeps its own option parsing and its own conversion of the report.
//!
//! * On Unix every run is driven by the library's async driver on one
//!   shared current-thread tokio runtime (one thread named
//!   `corral-runtime` for the whole process, whatever the number of runs;
//!   made again in a forked child, which does not inherit threads). The
//!   task always runs the lifecycle to its end (cancellation goes through
//!   the run's `CancelToken`), so the report always arrives.
//! * Elsewhere (Windows: no async driver in the library) each run is waited
//!   on by a thread of its own (`corral-wait`).

use std::ffi::OsStr;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;
#[cfg(unix)]
use std::time::Instant;

use corral::{Command, Error, Report, Signal, SpawnErrorKind};

/// Locks `m`, whether or not a thread panicked while holding it.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// ENFILE and EMFILE: the same numbers on every Unix that matters (Linux,
/// macOS, the BSDs), and what the runtimes report on Windows.
pub const ENFILE: i32 = 23;
/// See [`ENFILE`].
pub const EMFILE: i32 = 24;

/// The OS error number behind `e`: its own, or that of the first error in
/// its source chain that has one.
pub fn os_errno(e: &(dyn std::error::Error + 'static)) -> Option<i32> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(x) = cur {
        if let Some(n) = x
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::raw_os_error)
        {
            return Some(n);
        }
        cur = x.source();
    }
    None
}

/// A failure of the binding's own machinery before the command could start
/// (the runtime thread, a waiting thread), as a spawn error of `program`:
/// out of descriptors, the spawn's EMFILE, as the library's own steps.
pub fn runtime_error(program: &OsStr, source: std::io::Error) -> Error {
    let kind = match os_errno(&source) {
        Some(EMFILE | ENFILE) if cfg!(unix) => SpawnErrorKind::TooManyOpenFiles,
        _ => SpawnErrorKind::Other,
    };
    Error::Spawn {
        kind,
        program: program.to_owned(),
        source,
    }
}

/// Sends a signal to a run's whole tree while the run holds its identity
/// (a request after the end is dropped).
pub type Signaller = Box<dyn Fn(Signal) + Send>;

#[cfg(unix)]
static RT: Mutex<Option<(u32, tokio::runtime::Handle)>> = Mutex::new(None);

/// The shared runtime, started on first use (and again in a forked child).
#[cfg(unix)]
fn handle() -> std::io::Result<tokio::runtime::Handle> {
    let mut g = lock(&RT);
    let pid = std::process::id();
    if let Some((p, h)) = g.as_ref() {
        if *p == pid {
            return Ok(h.clone());
        }
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()?;
    let h = rt.handle().clone();
    std::thread::Builder::new()
        .name("corral-runtime".into())
        .spawn(move || rt.block_on(std::future::pending::<()>()))?;
    *g = Some((pid, h.clone()));
    Ok(h)
}

/// Spawns `cmd` and drives the run to its end, off the calling thread:
/// `finish` gets the report. The root's pid. On Unix, `signaller` is given
/// the run's [`Signaller`] before the run can end (elsewhere it is not
/// called: the driver cannot signal a running tree). The errors are the
/// spawn's, or [`runtime_error`]s of `program`.
pub fn start(
    cmd: &mut Command,
    program: &OsStr,
    signaller: impl FnOnce(Signaller),
    finish: impl FnOnce(Report) + Send + 'static,
) -> Result<u32, Error> {
    imp::start(cmd, program, signaller, finish)
}

/// As [`start`], but the spawn too happens on the runtime thread, so the
/// caller (an event loop) never waits for it: returns 0 at once, and
/// `finish` gets the report, or the error that kept the run from starting
/// with the time the attempt took. Where there is no runtime thread, the
/// same as [`start`] (the root's pid).
pub fn start_later(
    cmd: Command,
    program: &OsStr,
    finish: impl FnOnce(Result<Report, (Error, Duration)>) + Send + 'static,
) -> Result<u32, Error> {
    imp::start_later(cmd, program, finish)
}

#[cfg(unix)]
mod imp {
    use super::*;
    use std::future::Future;

    pub(super) fn start(
        cmd: &mut Command,
        program: &OsStr,
        signaller: impl FnOnce(Signaller),
        finish: impl FnOnce(Report) + Send + 'static,
    ) -> Result<u32, Error> {
        // The runtime needs descriptors of its own (epoll, a waker).
        let h = handle().map_err(|e| runtime_error(program, e))?;
        let _enter = h.enter();
        let mut running = cmd.spawn_async()?;
        let pid = running.id();
        // Signal requests reach the task through a channel; the task hands
        // them to the run, which sends them while it holds the identity.
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Signal>();
        signaller(Box::new(move |s| {
            let _ = tx.send(s);
        }));
        h.spawn(async move {
            let report = std::future::poll_fn(|cx| {
                while let std::task::Poll::Ready(Some(sig)) = rx.poll_recv(cx) {
                    running.signal(sig);
                }
                std::pin::Pin::new(&mut running).poll(cx)
            })
            .await;
            finish(report);
        });
        Ok(pid)
    }

    pub(super) fn start_later(
        mut cmd: Command,
        program: &OsStr,
        finish: impl FnOnce(Result<Report, (Error, Duration)>) + Send + 'static,
    ) -> Result<u32, Error> {
        let h = handle().map_err(|e| runtime_error(program, e))?;
        let t0 = Instant::now();
        h.spawn(async move {
            match cmd.spawn_async() {
                Ok(running) => finish(Ok(running.await)),
                Err(e) => finish(Err((e, t0.elapsed()))),
            }
        });
        Ok(0)
    }
}

#[cfg(not(unix))]
mod imp {
    use super::*;

    pub(super) fn start(
        cmd: &mut Command,
        program: &OsStr,
        _signaller: impl FnOnce(Signaller),
        finish: impl FnOnce(Report) + Send + 'static,
    ) -> Result<u32, Error> {
        let running = cmd.spawn()?;
        let pid = running.id();
        // On failure the closure (and the Running inside) was dropped: the
        // run was cancelled and cleaned up by the Running's drop.
        std::thread::Builder::new()
            .name("corral-wait".into())
            .spawn(move || finish(running.wait()))
            .map_err(|e| runtime_error(program, e))?;
        Ok(pid)
    }

    pub(super) fn start_later(
        mut cmd: Command,
        program: &OsStr,
        finish: impl FnOnce(Result<Report, (Error, Duration)>) + Send + 'static,
    ) -> Result<u32, Error> {
        start(&mut cmd, program, |_| {}, move |report| finish(Ok(report)))
    }
}
