//! Persistent shell sessions (Unix): the shell's *state* persists, not its
//! process.
//!
//! Each [`Session::run`] is a fresh shell (bash where present, else sh) in
//! its own contained tree, run through [`Command`]'s normal lifecycle: its
//! deadline, idle timeout, output cap and wait delay are its own, and when
//! one fires only its tree is killed. The state of the previous command
//! (working directory, variables exported or not, functions, aliases, `set
//! -o` and `shopt` options, umask, traps) is sourced from a file in a
//! directory of the session's own (mode 0700) before the command line is
//! evaluated, and the state after it is written there again: a channel
//! corral owns, never stdout or stderr, so output that looks like a marker
//! or a prompt is only output. A command that ends the shell (`exit 3`,
//! `exec true`, `kill -9 $$`, a failure under `set -e`) writes no state:
//! it ends the session (see `wrapper.bash`).
//!
//! The next command's shell (bash) is started ahead, once the state of the
//! last one is in place, on a thread of its own: contained like any
//! command, it sources the state and waits on a FIFO of the session's
//! directory for its command line (`Warm`). The command's limits start
//! when the line is sent (`Running::start_now`); a command that must start
//! cold (a grace) drops it, so a warm shell is never one of a stale state.
//!
//! Background jobs: every process a command starts carries the session's
//! cookie (an element of `CORRAL_TREE`), which the crash-safety keeper
//! holds for the session's life: if the owner dies, the keeper kills every
//! process that carries it (kept jobs included). Commands run under
//! [`LeftoverPolicy::Keep`]: a job that closed its output outlives the
//! command that started it; one that holds the output is handled by the
//! wait delay, as in a run. [`Session::jobs`] lists the live ones (Linux:
//! a scan of `/proc` for the cookie) and [`Session::kill_job`] kills one;
//! closing or dropping the session kills them all.
//!
//! The session's directory (`$TMPDIR/corral-session-PID.sN`) is removed
//! when the session closes. An owner killed outright cannot remove it:
//! the directory is `flock`ed for the session's life, and the next
//! session started in the same temporary folder removes every one of this
//! user's session directories whose lock nobody holds.

use std::ffi::{OsStr, OsString};
use std::io;
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

#[cfg(target_os = "linux")]
use crate::contain::cookie_hold::CookieHold;
use crate::{
    CancelToken, Command, ContainmentChoice, Error, LeftoverPolicy, Outcome, Report, Sandbox,
};

const BASH_WRAPPER: &str = include_str!("wrapper.bash");
const SH_WRAPPER: &str = include_str!("wrapper.sh");
/// The last line of a complete state file.
const COMPLETE: &[u8] = b"# corral: complete\n";
/// Longest command line passed as an argument (longer ones go through a
/// file of the session's directory).
const ARG_MAX_COMMAND: usize = 64 * 1024;

/// How a session is started: its shell, working directory, environment and
/// the options that hold for every command in it.
#[derive(Debug, Clone, Default)]
pub struct SessionOptions {
    shell: Option<PathBuf>,
    cwd: Option<PathBuf>,
    env: Vec<(OsString, Option<OsString>)>,
    env_clear: bool,
    containment: ContainmentChoice,
    require_crash_safety: bool,
    sandbox: Option<Sandbox>,
}

impl SessionOptions {
    /// The defaults: bash (else sh) found on `PATH`, this process's working
    /// directory and environment.
    pub fn new() -> SessionOptions {
        SessionOptions::default()
    }
    /// The shell to run (a bash, or any POSIX sh: named `bash` or not,
    /// what it can carry over differs, see the module's documentation).
    pub fn shell(&mut self, path: impl AsRef<Path>) -> &mut SessionOptions {
        self.shell = Some(path.as_ref().to_path_buf());
        self
    }
    /// The session's first working directory.
    pub fn current_dir(&mut self, dir: impl AsRef<Path>) -> &mut SessionOptions {
        self.cwd = Some(dir.as_ref().to_path_buf());
        self
    }
    /// Sets a variable of the session's first environment (exported).
    pub fn env(&mut self, k: impl AsRef<OsStr>, v: impl AsRef<OsStr>) -> &mut SessionOptions {
        self.env
            .push((k.as_ref().to_owned(), Some(v.as_ref().to_owned())));
        self
    }
    /// Removes a variable from the session's first environment.
    pub fn env_remove(&mut self, k: impl AsRef<OsStr>) -> &mut SessionOptions {
        self.env.push((k.as_ref().to_owned(), None));
        self
    }
    /// Starts from an empty environment instead of this process's (the
    /// non-interactive defaults and [`env`](Self::env) still apply).
    pub fn env_clear(&mut self) -> &mut SessionOptions {
        self.env_clear = true;
        self.env.clear();
        self
    }
    /// The containment of every command (as [`Command::containment`]).
    pub fn containment(&mut self, c: ContainmentChoice) -> &mut SessionOptions {
        self.containment = c;
        self
    }
    /// Refuse to start a command that would not be crash-safe (as
    /// [`Command::require_crash_safety`]); the session itself refuses to
    /// start when the keeper cannot hold its cookie.
    pub fn require_crash_safety(&mut self, yes: bool) -> &mut SessionOptions {
        self.require_crash_safety = yes;
        self
    }
    /// The sandbox policy of every command (as [`Command::sandbox`]).
    pub fn sandbox(&mut self, policy: Sandbox) -> &mut SessionOptions {
        self.sandbox = Some(policy);
        self
    }
}

/// The limits of one command of a session (each is that command's alone).
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    timeout: Option<Duration>,
    idle_timeout: Option<Duration>,
    output_limit: Option<u64>,
    capture_limit: Option<usize>,
    wait_delay: Option<Duration>,
    grace: Option<Duration>,
    cancel: Option<CancelToken>,
}

impl RunOptions {
    /// No limit but [`Command`]'s defaults.
    pub fn new() -> RunOptions {
        RunOptions::default()
    }
    /// As [`Command::timeout`].
    pub fn timeout(&mut self, d: Duration) -> &mut RunOptions {
        self.timeout = Some(d);
        self
    }
    /// As [`Command::idle_timeout`].
    pub fn idle_timeout(&mut self, d: Duration) -> &mut RunOptions {
        self.idle_timeout = Some(d);
        self
    }
    /// As [`Command::output_limit`].
    pub fn output_limit(&mut self, bytes: u64) -> &mut RunOptions {
        self.output_limit = Some(bytes);
        self
    }
    /// As [`Command::capture_limit`].
    pub fn capture_limit(&mut self, bytes: usize) -> &mut RunOptions {
        self.capture_limit = Some(bytes);
        self
    }
    /// As [`Command::wait_delay`].
    pub fn wait_delay(&mut self, d: Duration) -> &mut RunOptions {
        self.wait_delay = Some(d);
        self
    }
    /// As [`Command::grace`].
    pub fn grace(&mut self, d: Duration) -> &mut RunOptions {
        self.grace = Some(d);
        self
    }
    /// As [`Command::cancel_token`].
    pub fn cancel_token(&mut self, token: &CancelToken) -> &mut RunOptions {
        self.cancel = Some(token.clone());
        self
    }
}

/// A background job of a session: a process a command left running whose
/// parent is not one of the session's processes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// Its process id.
    pub pid: u32,
    /// Its command line (arguments joined by spaces).
    pub command: String,
    /// Its start time (clock ticks after boot): with the pid, its identity.
    start: u64,
}

/// How a session ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SessionEnd {
    /// A command ended the shell (`exit N`, `exec`, a failure under `set
    /// -e`) with this status.
    Exited(i32),
    /// The shell was killed by this signal (`kill -9 $$`).
    Signaled(crate::Signal),
    /// [`Session::close`] (or the drop).
    Closed,
}

impl std::fmt::Display for SessionEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SessionEnd::Exited(c) => write!(f, "the shell exited with status {c}"),
            SessionEnd::Signaled(s) => write!(f, "the shell was killed by {s}"),
            SessionEnd::Closed => f.write_str("the session was closed"),
        }
    }
}

/// The report of one command of a session: the command's [`Report`] (the
/// fields are reachable through `Deref`), the session's id, the jobs it
/// left running, and whether it ended the session.
#[derive(Debug)]
pub struct SessionReport {
    /// The command's report, as [`Command::run`] gives it.
    pub report: Report,
    /// The id of the session.
    pub session_id: String,
    /// Background jobs this command started that are still running.
    pub jobs: Vec<Job>,
    /// Set when this command ended the session (later runs fail with
    /// [`Error::SessionClosed`]).
    pub ended: Option<SessionEnd>,
}

#[cfg(feature = "serde")]
impl SessionReport {
    /// The report document of this command: the run's, with `session_id`.
    pub fn document(&self) -> crate::document::RunReport {
        let mut d = crate::document::RunReport::from(&self.report);
        d.session_id = Some(self.session_id.clone());
        d
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for SessionReport {
    /// As [`SessionReport::document`].
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.document().serialize(s)
    }
}

impl Deref for SessionReport {
    type Target = Report;
    fn deref(&self) -> &Report {
        &self.report
    }
}

/// A persistent shell session: see the module documentation. Runs are one
/// at a time (a concurrent [`run`](Session::run) waits for the one before);
/// sessions are independent. Dropping it closes it.
#[derive(Debug)]
pub struct Session {
    id: String,
    dir: PathBuf,
    shell: PathBuf,
    bash: bool,
    start_dir: PathBuf,
    options: SessionOptions,
    state: Mutex<State>,
    /// The session's directory, open and `flock`ed for the session's
    /// life: the lock is the kernel's own proof that the owner is alive,
    /// released when it dies however it dies (see [`sweep_stale`]).
    _lock: std::os::fd::OwnedFd,
}

#[derive(Debug)]
struct State {
    ended: Option<SessionEnd>,
    jobs: Vec<Job>,
    hold: Option<Hold>,
    /// The next command's shell, started ahead (bash only): it has sourced
    /// the current state and waits on the FIFO for its command line.
    warm: Option<WarmSlot>,
    /// A warm shell failed to take its command (it could not open the
    /// FIFO, it died): no more are started.
    no_warm: bool,
}

/// A shell started ahead of its command, and corral's end of the FIFO it
/// reads the command line from (held open for reading and writing, so
/// that neither side's open blocks and what is written stays until read).
struct Warm {
    running: crate::Running,
    fifo: std::fs::File,
}

impl std::fmt::Debug for Warm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Warm")
            .field("pid", &self.running.id())
            .finish()
    }
}

/// A warm shell, ready or being started on a thread of its own (so that
/// its spawn overlaps the caller's work too).
enum WarmSlot {
    Ready(Warm),
    Starting(std::thread::JoinHandle<Option<Warm>>),
}

impl WarmSlot {
    /// The shell, once started (`None`: it could not be).
    fn take(self) -> Option<Warm> {
        match self {
            WarmSlot::Ready(w) => Some(w),
            WarmSlot::Starting(h) => h.join().ok().flatten(),
        }
    }
}

impl std::fmt::Debug for WarmSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WarmSlot::Ready(w) => w.fmt(f),
            WarmSlot::Starting(_) => f.write_str("Starting"),
        }
    }
}

/// The FIFO a warm shell reads its command line from.
const FIFO: &str = "go";
/// The longest command line sent through the FIFO (atomically, under
/// `PIPE_BUF`); longer ones go through a file.
const FIFO_COMMAND_MAX: usize = 2048;

/// The keeper's hold on the session's cookie (Linux).
struct Hold(
    #[cfg(target_os = "linux")]
    #[allow(dead_code)]
    CookieHold,
);

impl std::fmt::Debug for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hold")
    }
}

static SEQ: AtomicU64 = AtomicU64::new(1);

/// The prefix of every session directory's name in the temporary folder.
const DIR_PREFIX: &str = "corral-session-";

/// Makes the session's directory (mode 0700, a name of its own: this
/// process's pid and a sequence number) and takes its lock. A sweep by
/// another process can remove the directory between its creation and the
/// lock; then the lock is on a removed directory and a new name is tried.
fn make_locked_dir(tmp: &Path) -> io::Result<(String, PathBuf, std::os::fd::OwnedFd)> {
    use rustix::fs::{flock, FlockOperation};
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let mut last = None;
    for _ in 0..8 {
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let id = format!("{}.s{seq}", std::process::id());
        let dir = tmp.join(format!("{DIR_PREFIX}{id}"));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {}
            // A name left by a dead process whose pid this one now has,
            // still locked by nobody but not swept yet: another name.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                last = Some(e);
                continue;
            }
            Err(e) => return Err(e),
        }
        let fd = open_dir(&dir)?;
        // Held already: a sweep took it between the creation and now, and
        // removes the directory: another name.
        if let Err(e) = flock(&fd, FlockOperation::NonBlockingLockExclusive) {
            if e != rustix::io::Errno::WOULDBLOCK {
                return Err(e.into());
            }
            last = Some(io::Error::other("swept by another process as it was made"));
            continue;
        }
        let held = rustix::fs::fstat(&fd)?;
        match std::fs::symlink_metadata(&dir) {
            Ok(m) if m.ino() == held.st_ino as u64 && m.dev() == held.st_dev as u64 => {
                return Ok((id, dir, fd));
            }
            Ok(_) | Err(_) => {
                last = Some(io::Error::other("swept by another process as it was made"))
            }
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no free name")))
}

/// Whether `name` is one this module gives a session's directory
/// (`corral-session-PID.sN`), and nothing else that merely starts like it
/// (a test's `mkdtemp("corral-session-XXXXXX")` is not a session's).
fn is_session_dir_name(name: &[u8]) -> bool {
    let Some(rest) = name.strip_prefix(DIR_PREFIX.as_bytes()) else {
        return false;
    };
    let digits = |s: &[u8]| !s.is_empty() && s.iter().all(u8::is_ascii_digit);
    let mut parts = rest.splitn(2, |&b| b == b'.');
    match (parts.next(), parts.next()) {
        (Some(pid), Some(seq)) => digits(pid) && seq.first() == Some(&b's') && digits(&seq[1..]),
        _ => false,
    }
}

/// Opens a directory without following a symlink, close-on-exec.
fn open_dir(dir: &Path) -> io::Result<std::os::fd::OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    Ok(rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// Removes the directories of sessions whose owner died without closing
/// them (SIGKILL, a crash): this user's `corral-session-*` folders whose
/// lock nobody holds. A live session's lock is held by its owner for the
/// session's life, and the kernel releases it when the owner dies, so a
/// folder is never taken from a live session, whatever became of its pid.
pub(crate) fn sweep_stale(tmp: &Path) {
    use rustix::fs::{flock, FlockOperation};
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    let me = rustix::process::geteuid().as_raw();
    for e in entries.flatten() {
        if !is_session_dir_name(e.file_name().as_encoded_bytes()) {
            continue;
        }
        let path = e.path();
        let Ok(fd) = open_dir(&path) else { continue };
        let Ok(st) = rustix::fs::fstat(&fd) else {
            continue;
        };
        if st.st_uid != me {
            continue;
        }
        if flock(&fd, FlockOperation::NonBlockingLockExclusive).is_ok() {
            // Unlocked: its owner is gone (or it is a maker's folder
            // between creation and lock, which then tries another name).
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}

impl Session {
    /// Starts a session: writes its first state (working directory,
    /// environment with `PAGER=cat`, `GIT_PAGER=cat`, `GIT_EDITOR=true`,
    /// `TERM=dumb` unless given, aliases expanded) and has the keeper hold
    /// its cookie. No process runs until the first [`run`](Session::run).
    pub fn start(options: &SessionOptions) -> Result<Session, Error> {
        let shell = match &options.shell {
            Some(s) => s.clone(),
            None => find_shell().ok_or_else(|| Error::Spawn {
                kind: crate::SpawnErrorKind::NotFound,
                program: "bash".into(),
                source: io::Error::new(io::ErrorKind::NotFound, "neither bash nor sh on PATH"),
            })?,
        };
        let bash = shell
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("bash"));
        let start_dir = match &options.cwd {
            Some(d) => d.clone(),
            None => std::env::current_dir()
                .map_err(|e| Error::InvalidInput(format!("no working directory: {e}")))?,
        };
        if !start_dir.is_dir() {
            return Err(Error::InvalidInput(format!(
                "the session's directory {} is not a directory",
                start_dir.display()
            )));
        }
        let io_err = |what: &str, e: io::Error| {
            Error::InvalidInput(format!(
                "cannot set up the session's directory ({what}): {e}"
            ))
        };
        let tmp = std::env::temp_dir();
        sweep_stale(&tmp);
        let (id, dir, lock) = make_locked_dir(&tmp).map_err(|e| io_err("create", e))?;
        let first = first_state(options, &start_dir);
        let written = std::fs::write(dir.join("vars"), first).and_then(|()| {
            std::fs::write(
                dir.join("opts"),
                if bash {
                    "shopt -s expand_aliases\n"
                } else {
                    ""
                },
            )
        });
        let written = written.and_then(|()| {
            if bash {
                make_fifo(&dir.join(FIFO))
            } else {
                Ok(())
            }
        });
        if let Err(e) = written {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(io_err("write", e));
        }
        #[cfg(target_os = "linux")]
        let hold = Hold(CookieHold::take(
            &id,
            crate::Mechanism::ProcessGroup,
            &crate::contain::Tracer::default(),
            crate::spec::Farewell::KILL,
        ));
        #[cfg(target_os = "linux")]
        let lost = hold.0.lost();
        #[cfg(not(target_os = "linux"))]
        let (hold, lost) = (
            Hold(),
            Some("no crash-safety keeper on this platform".to_owned()),
        );
        if let Some(why) = lost {
            if options.require_crash_safety {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(Error::InvalidInput(format!(
                    "the session would not be crash-safe: {why}"
                )));
            }
        }
        Ok(Session {
            id,
            dir,
            shell,
            bash,
            start_dir,
            options: options.clone(),
            _lock: lock,
            state: Mutex::new(State {
                ended: None,
                jobs: Vec::new(),
                hold: Some(hold),
                warm: None,
                no_warm: !bash,
            }),
        })
    }

    /// The session's id (also its cookie in `CORRAL_TREE`).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// How the session ended, if it did.
    pub fn ended(&self) -> Option<SessionEnd> {
        self.lock().ended.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs one command line in the session (stdin is the null device:
    /// a read gets end of file at once; no controlling terminal). Fails
    /// with [`Error::SessionClosed`] once the session has ended.
    pub fn run(&self, command_line: &str, options: &RunOptions) -> Result<SessionReport, Error> {
        let mut state = self.lock();
        if state.ended.is_some() {
            return Err(Error::SessionClosed);
        }
        let o = options;
        // A warm shell takes every limit from now but the grace, which the
        // crash-safety keeper was given at its spawn (none): a command with
        // one starts cold. One that cannot run at all (a NUL in it) too, to
        // fail as it always did.
        let warm_fits = o.grace.is_none_or(|g| g.is_zero()) && !command_line.contains('\0');
        let warm = match state.warm.take().and_then(WarmSlot::take) {
            Some(w) if warm_fits => Some(w),
            other => {
                // Started for the state as it is; a cold command changes it.
                drop(other);
                None
            }
        };
        let mut started = boot_ticks();
        let mut ran = None;
        if let Some(w) = warm {
            if o.cancel.as_ref().is_some_and(CancelToken::is_cancelled) {
                // Nothing ran: the state is as it was, the shell still fits.
                state.warm = Some(WarmSlot::Ready(w));
                return Err(Error::CancelledBeforeSpawn);
            }
            match self.run_warm(w, command_line, o) {
                Some(r) => ran = Some(r),
                // It did not take the command: run it cold (nothing ran).
                None => {
                    state.no_warm = true;
                    started = boot_ticks();
                }
            }
        }
        let result = match ran {
            Some(r) => r,
            None => self.cold(command_line, o)?.run(),
        };
        let complete = self.take_new_state();
        let report = result?;
        if !matches!(report.outcome, Outcome::Exited(_) | Outcome::Signaled(_)) {
            // corral ended the command: what it started and left (escapers
            // a process group cannot hold) dies with it, as in a run. The
            // jobs of earlier commands and their descendants are not its.
            kill_new(&self.id, &state.jobs, started);
        }
        let ended = if complete {
            None
        } else {
            match report.outcome {
                Outcome::Exited(c) => Some(SessionEnd::Exited(c)),
                Outcome::Signaled(s) => Some(SessionEnd::Signaled(s)),
                // corral ended it (deadline, idle, cancel, held output,
                // output limit): the session goes on in its last state.
                _ => None,
            }
        };
        let before: Vec<(u32, u64)> = state.jobs.iter().map(|j| (j.pid, j.start)).collect();
        if report.leftovers.kept > 0 || !state.jobs.is_empty() || ended.is_some() {
            state.jobs = scan_jobs(&self.id);
        }
        let jobs: Vec<Job> = state
            .jobs
            .iter()
            .filter(|j| !before.contains(&(j.pid, j.start)))
            .cloned()
            .collect();
        if let Some(e) = &ended {
            state.ended = Some(e.clone());
            self.finish(&mut state);
        } else if !state.no_warm {
            // The next command's shell, started now that this one's state
            // is in place: its start overlaps the caller's work between
            // two commands. A shell that cannot start is no error: the
            // next command starts cold.
            state.warm = self.spawn_warm();
        }
        Ok(SessionReport {
            report,
            session_id: self.id.clone(),
            jobs,
            ended,
        })
    }

    /// The shell of a command started cold, with its limits.
    fn cold(&self, command_line: &str, o: &RunOptions) -> Result<Command, Error> {
        let mut cmd = self.shell_command();
        if self.bash {
            if command_line.len() <= ARG_MAX_COMMAND {
                cmd.arg(format!("c{command_line}"));
            } else {
                self.write_command(command_line)?;
                cmd.arg("f");
            }
        } else if command_line.len() <= ARG_MAX_COMMAND {
            cmd.arg(command_line);
        } else {
            self.write_command(command_line)?;
        }
        if let Some(d) = o.timeout {
            cmd.timeout(d);
        }
        if let Some(d) = o.idle_timeout {
            cmd.idle_timeout(d);
        }
        if let Some(n) = o.output_limit {
            cmd.output_limit(n);
        }
        if let Some(n) = o.capture_limit {
            cmd.capture_limit(n);
        }
        if let Some(d) = o.wait_delay {
            cmd.wait_delay(d);
        }
        if let Some(d) = o.grace {
            cmd.grace(d);
        }
        if let Some(t) = &o.cancel {
            cmd.cancel_token(t);
        }
        Ok(cmd)
    }

    /// The session's shell with the wrapper, its directory and cookie, as
    /// every command runs it (the command line's argument comes next).
    fn shell_command(&self) -> Command {
        let mut cmd = Command::new(&self.shell);
        if self.bash {
            cmd.args(["--noprofile", "--norc", "-c", BASH_WRAPPER, "bash"]);
        } else {
            cmd.args(["-c", SH_WRAPPER, "sh"]);
        }
        cmd.arg(&self.dir).arg(&self.id);
        cmd.env_clear()
            .current_dir(&self.start_dir)
            .new_session(true)
            .leftovers(LeftoverPolicy::Keep)
            .containment(self.options.containment)
            .require_crash_safety(self.options.require_crash_safety);
        if let Some(s) = &self.options.sandbox {
            cmd.sandbox(s.clone());
        }
        cmd
    }

    fn write_command(&self, command_line: &str) -> Result<(), Error> {
        std::fs::write(self.dir.join("cmd"), command_line).map_err(|e| {
            Error::InvalidInput(format!("cannot hand the command to the session: {e}"))
        })
    }

    /// Starts the next command's shell ahead (bash): contained as every
    /// command, with no limit yet (they are set when its command is sent),
    /// it sources the current state and waits on the FIFO.
    fn spawn_warm(&self) -> Option<WarmSlot> {
        use std::os::unix::fs::OpenOptionsExt;
        // Read and write: the shell's open for reading does not wait for a
        // writer, and a message written before it opens stays in the FIFO.
        let fifo = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(self.dir.join(FIFO))
            .ok()?;
        let mut cmd = self.shell_command();
        cmd.arg("w");
        let spawn = move || {
            let running = cmd.spawn().ok()?;
            Some(Warm { running, fifo })
        };
        match std::thread::Builder::new()
            .name("corral-session-warm".into())
            .spawn(spawn)
        {
            Ok(h) => Some(WarmSlot::Starting(h)),
            Err(_) => None,
        }
    }

    /// Runs `command_line` in the warm shell: its limits start now, the
    /// line is sent. `None` when the shell did not take it (it died or
    /// could not read the FIFO before): nothing of the command ran.
    fn run_warm(
        &self,
        w: Warm,
        command_line: &str,
        o: &RunOptions,
    ) -> Option<Result<Report, Error>> {
        use std::io::{Read, Write};
        let Warm {
            mut running,
            mut fifo,
        } = w;
        let mut message = Vec::with_capacity(command_line.len() + 2);
        if command_line.len() <= FIFO_COMMAND_MAX {
            message.push(b'c');
            message.extend_from_slice(command_line.as_bytes());
        } else {
            if let Err(e) = self.write_command(command_line) {
                return Some(Err(e));
            }
            message.push(b'f');
        }
        message.push(0);
        running.start_now(&crate::lifecycle::Arm {
            timeout: o.timeout,
            idle_timeout: o.idle_timeout,
            output_limit: o.output_limit,
            capture_limit: o.capture_limit,
            wait_delay: o.wait_delay,
            cancel: o.cancel.clone(),
        });
        // At most PIPE_BUF bytes into an empty FIFO: written whole, at once.
        if fifo.write_all(&message).is_err() {
            running.cancel();
            let _ = running.wait();
            return None;
        }
        let report = running.wait();
        // Bytes still in the FIFO: the shell never read its command.
        let mut left = [0u8; 1];
        let untaken = matches!(fifo.read(&mut left), Ok(n) if n > 0);
        if untaken && matches!(report.outcome, Outcome::Exited(_) | Outcome::Signaled(_)) {
            return None;
        }
        Some(Ok(report))
    }

    /// Moves a complete new state into place; drops an incomplete one.
    fn take_new_state(&self) -> bool {
        let vars = self.dir.join("vars.new");
        let opts = self.dir.join("opts.new");
        let new = std::fs::read(&vars).ok().filter(|b| b.ends_with(COMPLETE));
        let complete = new.is_some();
        if let Some(new) = new {
            // The old files are removed before the new ones take their
            // names: a rename over a file or a truncation makes ext4 (its
            // `auto_da_alloc`) write the new data out first, hundreds of
            // microseconds each; a removal and a rename to a free name
            // cost nothing of the kind.
            let (old_vars, old_opts) = (self.dir.join("vars"), self.dir.join("opts"));
            let _ = std::fs::remove_file(&old_vars);
            let filtered = self.bash.then(|| filter_variables(&new)).flatten();
            let written = filtered.is_some_and(|f| {
                std::fs::write(&old_vars, f).is_ok() && std::fs::remove_file(&vars).is_ok()
            });
            if !written {
                // Whole (bash's own variables fail or do no harm sourced back).
                let _ = std::fs::rename(&vars, &old_vars);
            }
            let _ = std::fs::remove_file(&old_opts);
            let _ = std::fs::rename(&opts, &old_opts);
        } else {
            let _ = std::fs::remove_file(&vars);
            let _ = std::fs::remove_file(&opts);
        }
        let _ = std::fs::remove_file(self.dir.join("cmd"));
        complete
    }

    /// The session's live background jobs.
    pub fn jobs(&self) -> Vec<Job> {
        let mut state = self.lock();
        if state.ended.is_some() {
            return Vec::new();
        }
        state.jobs = scan_jobs(&self.id);
        state.jobs.clone()
    }

    /// Kills a job (SIGKILL, and every session process below it): `true`
    /// if it was still running. The job is named by its identity (pid and
    /// start time), never a process that took its pid later.
    pub fn kill_job(&self, job: &Job) -> bool {
        let mut state = self.lock();
        let found = scan_all(&self.id)
            .iter()
            .any(|p| p.pid == job.pid && p.start == job.start);
        // Its descendants, whether they show the cookie or not (one in
        // `execve` shows no environment for a moment).
        if found {
            // Stopped from the top down, so that none of them forks a
            // process this misses, then killed.
            let mut targets = vec![(job.pid, job.start)];
            signal_checked(job.pid, job.start, Some(&self.id), Sig::Stop);
            for _ in 0..50 {
                // Listed after the stops: a fork the stop interrupted
                // is not there, one it let finish is.
                let all = scan(None);
                let before = targets.len();
                for p in &all {
                    if targets.iter().any(|t| t.0 == p.ppid)
                        && !targets.iter().any(|t| t.0 == p.pid)
                    {
                        signal_checked(p.pid, p.start, None, Sig::Stop);
                        targets.push((p.pid, p.start));
                    }
                }
                if targets.len() == before {
                    break;
                }
            }
            for &(pid, start) in &targets {
                signal_checked(pid, start, None, Sig::Kill);
            }
            // Gone (or a zombie) before this returns, within a bound.
            let until = std::time::Instant::now() + Duration::from_secs(2);
            while targets
                .iter()
                .any(|&(p, st)| stat(p).is_some_and(|s| s.1 == st))
                && std::time::Instant::now() < until
            {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        state.jobs.retain(|j| j != job);
        found
    }

    /// Closes the session: kills every process it started that is still
    /// running (its jobs) and removes its directory. Later runs fail with
    /// [`Error::SessionClosed`].
    pub fn close(&self) {
        let mut state = self.lock();
        if state.ended.is_none() {
            state.ended = Some(SessionEnd::Closed);
        }
        self.finish(&mut state);
    }

    /// Kills what is left, lets go of the cookie, removes the directory.
    fn finish(&self, state: &mut State) {
        if state.hold.is_none() {
            return;
        }
        // The warm shell first (its drop kills its tree and reaps it).
        drop(state.warm.take().and_then(WarmSlot::take));
        kill_all(&self.id);
        state.jobs.clear();
        state.hold = None;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The asynchronous run (feature `tokio`).
#[cfg(feature = "tokio")]
impl Session {
    /// [`run`](Self::run), awaited: the command runs on tokio's blocking
    /// pool (a session's command is a blocking run of its own, one at a
    /// time), so the runtime's threads are never held. Dropping the future
    /// before it resolves cancels the command at once, without waiting for
    /// it: its tree is killed as by [`RunOptions::cancel_token`] (the
    /// token given there, or one made for the call, is the one cancelled),
    /// and the session lives on for the next command.
    ///
    /// Needs a tokio runtime. The session is shared by `Arc` because the
    /// blocking run may outlive a dropped future by the kill's bound.
    pub async fn run_async(
        self: std::sync::Arc<Self>,
        command_line: &str,
        options: &RunOptions,
    ) -> Result<SessionReport, Error> {
        /// Cancels the command when the future is dropped unresolved.
        struct OnDrop(Option<CancelToken>);
        impl Drop for OnDrop {
            fn drop(&mut self) {
                if let Some(t) = self.0.take() {
                    t.cancel();
                }
            }
        }
        let mut o = options.clone();
        let token = o.cancel.get_or_insert_with(CancelToken::new).clone();
        let mut guard = OnDrop(Some(token));
        let line = command_line.to_owned();
        let run = tokio::task::spawn_blocking(move || self.run(&line, &o));
        let result = run.await;
        guard.0 = None;
        match result {
            Ok(r) => r,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            // A blocking task is cancelled only before it starts (the
            // runtime shutting down): the command never ran.
            Err(_) => Err(Error::CancelledBeforeSpawn),
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.close();
    }
}

/// bash on `PATH` (or the usual places), else sh.
fn find_shell() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    for name in ["bash", "sh"] {
        for d in std::env::split_paths(&path).chain([PathBuf::from("/bin")]) {
            let p = d.join(name);
            if is_executable(&p) {
                return Some(p);
            }
        }
    }
    None
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The line that ends the variables of a bash state (`declare -p`).
const VARIABLES_END: &[u8] = b"# corral: variables end\n";

/// bash's own variables and the wrapper's, which are not carried over
/// (read-only, or bash's view of the running shell: its pid, clock,
/// line, call stack; the working directory is carried by `cd`).
fn carried(name: &[u8]) -> bool {
    const OWN: &[&[u8]] = &[
        b"BASH",
        b"BASHOPTS",
        b"BASHPID",
        b"SHELLOPTS",
        b"EUID",
        b"UID",
        b"PPID",
        b"RANDOM",
        b"SRANDOM",
        b"SECONDS",
        b"LINENO",
        b"FUNCNAME",
        b"GROUPS",
        b"HISTCMD",
        b"EPOCHREALTIME",
        b"EPOCHSECONDS",
        b"PIPESTATUS",
        b"DIRSTACK",
        b"PWD",
        b"OLDPWD",
        b"CORRAL_TREE",
        b"_",
    ];
    !(OWN.contains(&name)
        || name.starts_with(b"BASH_")
        || name.starts_with(b"COMP_")
        || name.starts_with(b"__corral_"))
}

/// A bash state with the variables bash prints for itself taken out of its
/// `declare -p` part (every declaration up to [`VARIABLES_END`]). `None`
/// when that part is not what this parser knows (the state is then kept
/// whole: sourcing bash's own variables back fails or does no harm).
fn filter_variables(state: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(state.len());
    let mut i = 0;
    while !state[i..].starts_with(VARIABLES_END) {
        // `declare -FLAGS NAME`, then `=VALUE` or the end of the line.
        let rest = state[i..].strip_prefix(b"declare -")?;
        let flags = rest.iter().position(|&b| b == b' ')?;
        let name_at = i + b"declare -".len() + flags + 1;
        let name_len = state[name_at..]
            .iter()
            .position(|&b| b == b'=' || b == b'\n')?;
        let end = line_end(state, name_at + name_len)?;
        if carried(&state[name_at..name_at + name_len]) {
            out.extend_from_slice(&state[i..end]);
        }
        i = end;
    }
    out.extend_from_slice(&state[i..]);
    Some(out)
}

/// Where the shell word (or array) starting at `i` ends: past the first
/// newline outside quotes and parentheses. Knows what `declare -p` prints:
/// `"..."` and `$'...'` with backslash escapes, `'...'`, `\x`, `(...)`.
fn line_end(s: &[u8], mut i: usize) -> Option<usize> {
    let mut depth = 0usize;
    // Past the closing `quote`, backslash escapes honoured if `escapes`.
    let close = |mut k: usize, quote: u8, escapes: bool| -> Option<usize> {
        loop {
            match *s.get(k)? {
                b'\\' if escapes => k += 2,
                b if b == quote => return Some(k + 1),
                _ => k += 1,
            }
        }
    };
    loop {
        match *s.get(i)? {
            b'\\' => i += 2,
            b'"' => i = close(i + 1, b'"', true)?,
            b'\'' => i = close(i + 1, b'\'', false)?,
            b'$' if s.get(i + 1) == Some(&b'\'') => i = close(i + 2, b'\'', true)?,
            b'(' => {
                depth += 1;
                i += 1;
            }
            b')' => {
                depth = depth.checked_sub(1)?;
                i += 1;
            }
            b'\n' if depth == 0 => return Some(i + 1),
            _ => i += 1,
        }
    }
}

/// Makes the FIFO a warm shell reads its command line from (mode 0600).
fn make_fifo(path: &Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL in the path"))?;
    // SAFETY: `c` is a valid NUL-terminated path that outlives the call;
    // mkfifo reads it and keeps nothing.
    if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `'...'` quoting for any shell (bytes as they are; no NUL in env).
fn quote(s: &[u8]) -> Vec<u8> {
    let mut out = vec![b'\''];
    for &b in s {
        if b == b'\'' {
            out.extend_from_slice(b"'\\''");
        } else {
            out.push(b);
        }
    }
    out.push(b'\'');
    out
}

fn is_name(k: &[u8]) -> bool {
    !k.is_empty()
        && !k[0].is_ascii_digit()
        && k.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_')
}

/// The first state: the environment (exported), the working directory,
/// aliases expanded as in an interactive shell.
fn first_state(options: &SessionOptions, dir: &Path) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    let mut env: Vec<(OsString, OsString)> = if options.env_clear {
        Vec::new()
    } else {
        std::env::vars_os().collect()
    };
    for (k, v) in [
        ("PAGER", "cat"),
        ("GIT_PAGER", "cat"),
        ("GIT_EDITOR", "true"),
        ("TERM", "dumb"),
    ] {
        env.retain(|(x, _)| x != k);
        env.push((k.into(), v.into()));
    }
    for (k, v) in &options.env {
        env.retain(|(x, _)| x != k);
        if let Some(v) = v {
            env.push((k.clone(), v.clone()));
        }
    }
    let mut out = Vec::new();
    for (k, v) in env {
        let k = k.as_bytes();
        if !is_name(k) || k == b"CORRAL_TREE" {
            continue;
        }
        out.extend_from_slice(k);
        out.push(b'=');
        out.extend_from_slice(&quote(v.as_bytes()));
        out.extend_from_slice(b"\nexport ");
        out.extend_from_slice(k);
        out.push(b'\n');
    }
    out.extend_from_slice(b"cd -- ");
    out.extend_from_slice(&quote(dir.as_os_str().as_bytes()));
    out.push(b'\n');
    out
}

/// A process of the session, seen in `/proc`.
#[derive(Debug)]
struct Member {
    pid: u32,
    ppid: u32,
    start: u64,
}

/// Every live process whose environment carries the session's cookie.
fn scan_all(cookie: &str) -> Vec<Member> {
    scan(Some(cookie))
}

/// Every live process that carries `cookie` (all of them: `None`).
#[cfg(target_os = "linux")]
fn scan(cookie: Option<&str>) -> Vec<Member> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let me = std::process::id();
    let mut out = Vec::new();
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me || cookie.is_some_and(|c| !carries(pid, c)) {
            continue;
        }
        if let Some((ppid, start)) = stat(pid) {
            out.push(Member { pid, ppid, start });
        }
    }
    out
}

#[cfg(not(target_os = "linux"))]
fn scan(_cookie: Option<&str>) -> Vec<Member> {
    Vec::new()
}

/// Whether `pid`'s environment has `cookie` as an element of `CORRAL_TREE`.
/// An empty environment is read again a few times: a process in `execve`
/// shows none for a moment (kernel threads and zombies have none).
#[cfg(target_os = "linux")]
fn carries(pid: u32, cookie: &str) -> bool {
    let path = format!("/proc/{pid}/environ");
    let mut env = Vec::new();
    for i in 0..5 {
        match std::fs::read(&path) {
            Ok(e) if !e.is_empty() => {
                env = e;
                break;
            }
            Ok(_) if i < 4 && stat(pid).is_some_and(|(ppid, _)| ppid != 2 && pid != 2) => {
                std::thread::sleep(Duration::from_micros(200));
            }
            _ => return false,
        }
    }
    env.split(|&b| b == 0)
        .filter_map(|kv| kv.strip_prefix(b"CORRAL_TREE="))
        .any(|v| v.split(|&b| b == b',').any(|c| c == cookie.as_bytes()))
}

/// `pid`'s parent and start time (`/proc/PID/stat`), if it is alive (not a
/// zombie).
fn stat(pid: u32) -> Option<(u32, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    if f.first() == Some(&"Z") || f.first() == Some(&"X") {
        return None;
    }
    Some((f.get(1)?.parse().ok()?, f.get(19)?.parse().ok()?))
}

/// The session's jobs: its processes whose parent is not one of them.
fn scan_jobs(cookie: &str) -> Vec<Job> {
    let all = scan_all(cookie);
    let mut jobs: Vec<Job> = all
        .iter()
        .filter(|m| !all.iter().any(|p| p.pid == m.ppid))
        .map(|m| Job {
            pid: m.pid,
            command: command_line(m.pid),
            start: m.start,
        })
        // No command line: it is exiting (its memory is gone).
        .filter(|j| !j.command.is_empty())
        .collect();
    jobs.sort_by_key(|j| j.pid);
    jobs
}

fn command_line(pid: u32) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let parts: Vec<String> = raw
        .split(|&b| b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect();
    parts.join(" ")
}

#[derive(Clone, Copy)]
enum Sig {
    Stop,
    Kill,
}

/// SIGSTOP or SIGKILL to `pid` through a pidfd, only if it is still the
/// process that started at `start` (and carries `cookie`, if given: a
/// descendant of a stopped job needs no cookie to be known as its own).
#[cfg(target_os = "linux")]
fn signal_checked(pid: u32, start: u64, cookie: Option<&str>, sig: Sig) {
    use rustix::process::{pidfd_open, pidfd_send_signal, Pid, PidfdFlags, Signal};
    let Some(p) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
        return;
    };
    let Ok(fd) = pidfd_open(p, PidfdFlags::empty()) else {
        return;
    };
    // The pidfd names one process from here on: check it is the one meant.
    if stat(pid).map(|s| s.1) == Some(start) && cookie.is_none_or(|c| carries(pid, c)) {
        let sig = match sig {
            Sig::Stop => Signal::STOP,
            Sig::Kill => Signal::KILL,
        };
        let _ = pidfd_send_signal(&fd, sig);
    }
}

#[cfg(not(target_os = "linux"))]
fn signal_checked(_pid: u32, _start: u64, _cookie: Option<&str>, _sig: Sig) {}

/// Now, in clock ticks since boot (the unit of a process's start time in
/// `/proc/PID/stat`), rounded down.
fn boot_ticks() -> u64 {
    let up = std::fs::read_to_string("/proc/uptime").unwrap_or_default();
    let secs: f64 = up
        .split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    #[cfg(target_os = "linux")]
    let hz = rustix::param::clock_ticks_per_second();
    #[cfg(not(target_os = "linux"))]
    let hz = 100;
    (secs * hz as f64) as u64
}

/// Kills the session's processes that started at `since` or later and do
/// not descend from one of `jobs` (stopped first, then killed).
fn kill_new(cookie: &str, jobs: &[Job], since: u64) {
    let all = scan_all(cookie);
    let of_jobs = |m: &Member| {
        let mut cur = Some(m);
        for _ in 0..64 {
            let Some(p) = cur else { return false };
            if jobs.iter().any(|j| j.pid == p.pid && j.start == p.start) {
                return true;
            }
            cur = all.iter().find(|q| q.pid == p.ppid);
        }
        false
    };
    let new: Vec<&Member> = all
        .iter()
        .filter(|m| m.start >= since.saturating_sub(1) && !of_jobs(m))
        .collect();
    for m in &new {
        signal_checked(m.pid, m.start, Some(cookie), Sig::Stop);
    }
    for m in &new {
        signal_checked(m.pid, m.start, Some(cookie), Sig::Kill);
    }
}

/// Kills every process that carries the cookie (stopped first, then
/// killed), again until two scans in a row find none (at most about 2 s:
/// what forks while it is killed is found next time).
fn kill_all(cookie: &str) {
    let until = std::time::Instant::now() + Duration::from_secs(2);
    let mut empty = 0;
    while empty < 2 && std::time::Instant::now() < until {
        let all = scan_all(cookie);
        if all.is_empty() {
            empty += 1;
        } else {
            empty = 0;
            for m in &all {
                signal_checked(m.pid, m.start, Some(cookie), Sig::Stop);
            }
            for m in &all {
                signal_checked(m.pid, m.start, Some(cookie), Sig::Kill);
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[cfg(test)]
mod tests {
    /// Only the names sessions are given are swept: never a folder that
    /// merely starts like one.
    #[test]
    fn only_session_names_are_swept() {
        for (name, ok) in [
            ("corral-session-123.s1", true),
            ("corral-session-9.s42", true),
            ("corral-session-lxKJHM", false),
            ("corral-session-123", false),
            ("corral-session-123.s", false),
            ("corral-session-123.x1", false),
            ("corral-session-.s1", false),
            ("corral-session-12a.s1", false),
            ("corral-session-123.s1.bak", false),
            ("other-123.s1", false),
        ] {
            assert_eq!(super::is_session_dir_name(name.as_bytes()), ok, "{name}");
        }
    }
    use super::*;

    #[test]
    fn bashs_own_variables_are_filtered_out_of_the_state() {
        let state = b"declare -- A=\"x\ndeclare -- BASHPID=1\n(\"\ndeclare -r BASHOPTS=\"a:b\"\n\
declare -a ARR=([0]=\")\" [1]=$'q\\'\\n')\ndeclare -- Z\ndeclare -i RANDOM\n\
declare -x P='it'\\''s'\ndeclare -- __corral_s=\"0\"\n# corral: variables end\ncd /\n# corral: complete\n";
        let got = filter_variables(state).unwrap();
        assert_eq!(
            String::from_utf8(got).unwrap(),
            "declare -- A=\"x\ndeclare -- BASHPID=1\n(\"\ndeclare -a ARR=([0]=\")\" [1]=$'q\\'\\n')\n\
declare -- Z\ndeclare -x P='it'\\''s'\n# corral: variables end\ncd /\n# corral: complete\n"
        );
        // Not what `declare -p` prints: kept whole.
        assert_eq!(
            filter_variables(b"declare -- A=\"x\n# corral: complete\n"),
            None
        );
        assert_eq!(filter_variables(b"A=1\n# corral: variables end\n"), None);
    }
}
