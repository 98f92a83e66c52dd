//! The builder: feels like `std::process::Command`, plus the deadline, the
//! grace, the wait delay, the leftovers policy and bounded capture.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cancel::CancelToken;
use crate::contain::{ContainmentChoice, Limits, Tracer};
use crate::lifecycle::{self, Plan, Running};
use crate::spec::{
    ChildSetup, Input, LeftoverPolicy, MaybeSpan, Output, PtySize, Sandbox, Settings,
    SharedLineCallback, Span, Stream,
};
use crate::{Error, Report, Signal};

/// A command to run under a deadline with its whole tree contained.
///
/// ```no_run
/// use std::time::Duration;
/// let report = corral::Command::new("make")
///     .arg("test")
///     .timeout(Duration::from_secs(60))
///     .run()?;
/// match report.exit_code() {
///     Some(code) => println!("exited with {code}"),
///     None => println!("did not merely exit: {}", report.outcome_name()),
/// }
/// # Ok::<(), corral::Error>(())
/// ```
pub struct Command {
    pub(crate) program: OsString,
    pub(crate) args: Vec<OsString>,
    pub(crate) env: Vec<(OsString, Option<OsString>)>,
    pub(crate) env_clear: bool,
    pub(crate) cwd: Option<PathBuf>,
    pub(crate) stdin: Input,
    pub(crate) stdout: Output,
    pub(crate) stderr: Output,
    pub(crate) pty: Option<PtySize>,
    pub(crate) settings: Settings,
    pub(crate) containment: ContainmentChoice,
    pub(crate) limits: Limits,
    pub(crate) cancel: Option<CancelToken>,
    pub(crate) on_line: Option<SharedLineCallback>,
    pub(crate) tracer: Tracer,
    /// What the child does before it execs, made on the first setter that
    /// needs it: most commands set none, and a command held across an
    /// `.await` is that much smaller (figure 5).
    pub(crate) setup: Option<Box<ChildSetup>>,
    pub(crate) sandbox: Option<Box<Sandbox>>,
}

/// The setup of a command that set none.
static NO_SETUP: ChildSetup = ChildSetup {
    arg0: None,
    uid: None,
    gid: None,
    groups: None,
    umask: None,
    new_session: false,
    keep_fds: None,
    restore_signals: false,
    controlling_tty: false,
    #[cfg(linux_raw)]
    sandbox: None,
};

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Command")
            .field("program", &self.program)
            .field("args", &self.args)
            .field("settings", &self.settings)
            .field("containment", &self.containment)
            .finish_non_exhaustive()
    }
}

impl Command {
    /// A command running `program` (looked up in `PATH` unless it contains a
    /// path separator), with no arguments, stdin from the null device, stdout
    /// and stderr captured, no deadline, a 2 s wait delay, no grace and the
    /// [`LeftoverPolicy::KeepOnSuccess`] policy.
    pub fn new(program: impl AsRef<OsStr>) -> Command {
        Command {
            program: program.as_ref().to_owned(),
            args: Vec::new(),
            env: Vec::new(),
            env_clear: false,
            cwd: None,
            stdin: Input::default(),
            stdout: Output::default(),
            stderr: Output::default(),
            pty: None,
            settings: Settings::default(),
            containment: ContainmentChoice::Auto,
            limits: Limits::default(),
            cancel: None,
            on_line: None,
            tracer: Tracer::default(),
            setup: None,
            sandbox: None,
        }
    }

    /// Adds an argument (any bytes on Unix: invalid UTF-8 is passed through).
    pub fn arg(&mut self, a: impl AsRef<OsStr>) -> &mut Command {
        // One argument (`sleep 30`) takes room for one, not the four a
        // first push makes room for; more grow as usual.
        if self.args.capacity() == 0 {
            self.args.reserve_exact(1);
        }
        self.args.push(a.as_ref().to_owned());
        self
    }

    /// Adds arguments.
    pub fn args<I, S>(&mut self, args: I) -> &mut Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// Sets an environment variable.
    pub fn env(&mut self, k: impl AsRef<OsStr>, v: impl AsRef<OsStr>) -> &mut Command {
        self.env
            .push((k.as_ref().to_owned(), Some(v.as_ref().to_owned())));
        self
    }

    /// Sets environment variables.
    pub fn envs<I, K, V>(&mut self, vars: I) -> &mut Command
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        for (k, v) in vars {
            self.env(k, v);
        }
        self
    }

    /// Removes an environment variable.
    pub fn env_remove(&mut self, k: impl AsRef<OsStr>) -> &mut Command {
        self.env.push((k.as_ref().to_owned(), None));
        self
    }

    /// Starts from an empty environment.
    pub fn env_clear(&mut self) -> &mut Command {
        self.env.clear();
        self.env_clear = true;
        self
    }

    /// Sets the working directory.
    pub fn current_dir(&mut self, dir: impl AsRef<Path>) -> &mut Command {
        self.cwd = Some(dir.as_ref().to_owned());
        self
    }

    /// Sets standard input (default: the null device).
    /// Anything convertible works: `cmd.stdin(file)`, `cmd.stdin("text")`.
    pub fn stdin(&mut self, i: impl Into<Input>) -> &mut Command {
        self.stdin = i.into();
        self
    }

    /// Sets standard output (default: captured).
    /// A file or descriptor converts into [`Output::file`].
    pub fn stdout(&mut self, o: impl Into<Output>) -> &mut Command {
        self.stdout = o.into();
        self
    }

    /// Sets standard error (default: captured).
    pub fn stderr(&mut self, o: impl Into<Output>) -> &mut Command {
        self.stderr = o.into();
        self
    }

    /// The time allowed from spawn to the end of the run. When it passes the
    /// tree is terminated (see [`grace`](Self::grace)).
    pub fn timeout(&mut self, d: Duration) -> &mut Command {
        self.settings.timeout = MaybeSpan::new(Some(d));
        self
    }

    /// The longest the program may stay silent: when no output arrived on
    /// any stream corral sees (captured or relayed stdout and stderr) for
    /// `d`, the tree is terminated like at the deadline (first signal,
    /// [`grace`](Self::grace), SIGKILL) and the outcome is
    /// [`Outcome::TimedOut`](crate::Outcome::TimedOut) with
    /// [`Report::timeout_kind`](crate::Report::timeout_kind)
    /// [`Idle`](crate::TimeoutKind::Idle). The timer starts at the spawn,
    /// every byte seen restarts it, and it runs until the run ends, the
    /// wait delay included; the first of the deadline, the idle timeout
    /// and the end of the wait delay decides. Output corral does not see
    /// (inherited, a file, null) cannot restart it: spawning with an idle
    /// timeout and neither stream captured nor relayed is an
    /// [`Error::InvalidInput`](crate::Error::InvalidInput).
    pub fn idle_timeout(&mut self, d: Duration) -> &mut Command {
        self.settings.idle_timeout = MaybeSpan::new(Some(d));
        self
    }

    /// The most bytes the program may write to its captured or relayed
    /// stdout and stderr together: `bytes` are allowed, byte `bytes + 1`
    /// ends the run. No more than `bytes` are captured or relayed (the
    /// rest is dropped), the tree is terminated like at the deadline and
    /// the outcome is [`Outcome::OutputLimit`](crate::Outcome::OutputLimit).
    /// The report's byte counts ([`Captured::total_bytes`](crate::Captured::total_bytes))
    /// then say how many bytes corral read from each stream before the end
    /// of the run, the dropped ones included (at least `bytes + 1` in all).
    /// Streams corral does not see are not counted.
    pub fn output_limit(&mut self, bytes: u64) -> &mut Command {
        self.settings.output_limit = Some(bytes);
        self
    }

    /// An absolute deadline (the earlier of this and the timeout wins).
    pub fn deadline(&mut self, at: Instant) -> &mut Command {
        self.settings.deadline = Some(at);
        self
    }

    /// After the root exits, how long descendants may keep the captured
    /// output open before they are killed and the run is reported as
    /// [`Outcome::OutputHeld`](crate::Outcome::OutputHeld). Default 2 s.
    pub fn wait_delay(&mut self, d: Duration) -> &mut Command {
        self.settings.wait_delay = Span::new(d);
        self
    }

    /// Time between the first signal and SIGKILL when the tree is
    /// terminated. Default 0: SIGKILL at once.
    pub fn grace(&mut self, d: Duration) -> &mut Command {
        self.settings.grace = Span::new(d);
        self
    }

    /// The first signal when there is a grace (default SIGTERM).
    pub fn signal(&mut self, s: Signal) -> &mut Command {
        self.settings.signal = s;
        self
    }

    /// Whether nothing is sent when the deadline passes (GNU `timeout -s
    /// 0`; default `false`). With it, the deadline (or the idle timeout,
    /// or a [`CancelToken::expire`]) sends no signal: the tree is left to
    /// finish, SIGKILL follows after the [`grace`](Self::grace) (at once
    /// without one) if anything is left, and the run is
    /// [`Outcome::TimedOut`](crate::Outcome::TimedOut) from the deadline
    /// on, whatever the root does after it. Every other termination
    /// (cancellation without a signal, held output, the output limit, the
    /// leftovers) has no first signal to send either: SIGKILL at once.
    /// A signal given to [`CancelToken::cancel_with`] is still sent.
    pub fn silent_deadline(&mut self, yes: bool) -> &mut Command {
        self.settings.silent_deadline = yes;
        self
    }

    /// Whether the program starts with SIGPIPE ignored (Unix; default
    /// `false`).
    ///
    /// By default the program gets SIGPIPE's default action (it dies when
    /// it writes to a pipe nobody reads any more), as with std's
    /// `Command`: the Rust runtime ignores SIGPIPE in its own process, and
    /// that setting is not passed on. Every other disposition is inherited
    /// as `exec` passes it on: a signal ignored in this process stays
    /// ignored in the program (`nohup`'s ignored SIGHUP, a shell's
    /// ignored SIGINT for a background job); a caught one starts with its
    /// default action.
    ///
    /// Set `true` to start the program with SIGPIPE ignored, as a shell's
    /// `trap '' PIPE` does (its writes to a closed pipe then fail with
    /// EPIPE): for example when SIGPIPE was ignored in the process that
    /// started yours, which `corral run` passes on this way. No effect on
    /// Windows.
    pub fn sigpipe_ignored(&mut self, yes: bool) -> &mut Command {
        self.settings.sigpipe_ignored = yes;
        self
    }

    /// What happens to descendants still running after the root exited.
    pub fn leftovers(&mut self, p: LeftoverPolicy) -> &mut Command {
        self.settings.leftovers = p;
        self
    }

    /// Bytes kept per captured stream (half head, half tail). Default 16 MiB.
    pub fn capture_limit(&mut self, bytes: usize) -> &mut Command {
        self.settings.capture_limit = bytes;
        self
    }

    /// How long to wait for the tree to be confirmed empty after the final
    /// SIGKILL before giving up and reporting survivors. Default 1 s.
    ///
    /// A tree still dying when the window ends is waited for: each member
    /// fewer than at the last look starts the window again, and while every
    /// member left is visibly dying (on Linux: SIGKILL pending, exiting, or
    /// a zombie awaiting its reaper) the survivors are not reported until
    /// the limit: 10 times the window, and at least 5 s, from the SIGKILL,
    /// or from the last death seen while the tree keeps dying. Never longer
    /// than 6 limits from the SIGKILL, so
    /// [`Running::wait`](crate::Running::wait) stays bounded.
    pub fn confirm_window(&mut self, d: Duration) -> &mut Command {
        self.settings.confirm_window = Span::new(d);
        self
    }

    /// Whether a run that would not be crash-safe fails instead (default
    /// false: it runs, and [`Report::crash_safety`](crate::Report::crash_safety)
    /// says so). Crash safety is what kills the tree if corral itself dies
    /// (see [`CrashSafety`](crate::CrashSafety)); when it cannot be had
    /// (the keeper cannot be started, a platform without one), `spawn`
    /// returns [`Error::Containment`](crate::Error::Containment) before the
    /// command starts (or, should only the registration of the started root
    /// fail, right after the spawn, with the tree killed and released).
    pub fn require_crash_safety(&mut self, yes: bool) -> &mut Command {
        self.settings.require_crash_safety = yes;
        self
    }

    /// Which containment to use (default [`ContainmentChoice::Auto`]).
    pub fn containment(&mut self, c: ContainmentChoice) -> &mut Command {
        self.containment = c;
        self
    }

    /// Caps the whole tree's memory (bytes). Needs cgroup containment (Linux,
    /// with the memory controller in cgroup v2 or in a v1 hierarchy); the
    /// spawn fails with [`Error::Containment`] when it cannot be had. When the
    /// tree hits it, the kernel's OOM killer ends a process and the report
    /// lists [`LimitHit::Memory`](crate::LimitHit::Memory).
    pub fn memory_max(&mut self, bytes: u64) -> &mut Command {
        self.limits.memory_max = Some(bytes);
        self
    }

    /// Caps the number of processes alive at once in the tree (a fork bomb
    /// stops at it). Same requirements as [`memory_max`](Self::memory_max);
    /// a hit is reported as [`LimitHit::Pids`](crate::LimitHit::Pids).
    pub fn pids_max(&mut self, n: u64) -> &mut Command {
        self.limits.pids_max = Some(n);
        self
    }

    /// Cancels this run when `token` is cancelled. [`Running::cancel_token`]
    /// gives one for a run that has none.
    pub fn cancel_token(&mut self, token: &CancelToken) -> &mut Command {
        self.cancel = Some(token.clone());
        self
    }

    /// Calls `f` for every line of captured output (lines longer than 4 MiB
    /// are delivered in pieces). Lines are delivered as they arrive, on the
    /// thread that waits.
    pub fn on_line(&mut self, f: impl FnMut(Stream, &[u8]) + Send + 'static) -> &mut Command {
        self.on_line = Some(Arc::new(std::sync::Mutex::new(Box::new(f))));
        self
    }

    /// Records every identity-related OS operation (spawn, tree signal,
    /// root exit seen, reap, release) through `f`, in order. A test seam for
    /// the ordering invariants; costs nothing when unset. Feature
    /// `test-util`.
    #[cfg(feature = "test-util")]
    pub fn trace_ops(&mut self, f: impl Fn(&crate::OsOp) + Send + Sync + 'static) -> &mut Command {
        self.tracer = Tracer(Some(Arc::new(f)));
        self
    }

    /// The `argv[0]` the program sees, instead of the program as given (which
    /// is still what runs): `subprocess`'s `executable=`.
    pub fn arg0(&mut self, arg0: impl AsRef<OsStr>) -> &mut Command {
        self.setup_mut().arg0 = Some(arg0.as_ref().to_owned());
        self
    }

    /// Runs the command as this user id (`setreuid(uid, uid)` in the child,
    /// after the groups and the group id). Unix only: elsewhere the spawn
    /// fails ([`Error::Spawn`], an `Unsupported` I/O error).
    pub fn uid(&mut self, uid: u32) -> &mut Command {
        self.setup_mut().uid = Some(uid);
        self
    }

    /// Runs the command with this group id (`setregid(gid, gid)`, before the
    /// user id). Unix only.
    pub fn gid(&mut self, gid: u32) -> &mut Command {
        self.setup_mut().gid = Some(gid);
        self
    }

    /// Sets the supplementary groups of the command (`setgroups`, first of
    /// the three; an empty list drops them all). Linux only: elsewhere the
    /// spawn fails ([`Error::Spawn`], an `Unsupported` I/O error).
    pub fn groups(&mut self, groups: &[u32]) -> &mut Command {
        self.setup_mut().groups = Some(groups.to_vec());
        self
    }

    /// Sets the command's file mode creation mask (`umask`). Unix only.
    pub fn umask(&mut self, mask: u32) -> &mut Command {
        self.setup_mut().umask = Some(mask);
        self
    }

    /// Runs the command on a new pseudo-terminal of `size` (Unix): its
    /// stdin, stdout and stderr are the terminal's slave side, which is the
    /// controlling terminal of the command's new session (`isatty` is true,
    /// `tput cols` answers; the root still leads its process group, so
    /// every tier contains the tree as without it). Everything the tree
    /// writes to the terminal comes out of the master as stdout (with the
    /// terminal's line discipline: `\n` becomes `\r\n`, typed input is
    /// echoed): captured, relayed, counted, under the idle timeout and the
    /// output limit, as the stdout setting says ([`Output::capture`],
    /// [`Output::relay`], [`Output::relay_file`]; an inherited, file or
    /// null stdout is relayed to that file, null discarded); stderr's
    /// setting is not used and `stderr_bytes` is 0. The wait delay applies
    /// to the terminal: a descendant still holding it past the wait delay
    /// after the root exited is killed (`OutputHeld`). The stdin setting is
    /// what is typed: its bytes, file or corral's own stdin are written to
    /// the terminal, then the terminal's end-of-file character (`^D`) once
    /// (at once for the null device): as one Ctrl-D typed, it ends a last
    /// line that has no newline rather than the input, and a program in raw
    /// mode reads it as a byte. The window size can be changed while
    /// it runs through [`Running::pty_window`](crate::Running::pty_window).
    /// Windows has no pseudo-terminal here: the spawn fails with
    /// [`Error::InvalidInput`].
    pub fn pty(&mut self, size: PtySize) -> &mut Command {
        self.pty = Some(size);
        self
    }

    /// Starts the command in a new session (`setsid`) instead of only a new
    /// process group: it loses its controlling terminal. The root still
    /// leads a process group of its own, so containment is unchanged.
    /// Unix only.
    pub fn new_session(&mut self, yes: bool) -> &mut Command {
        self.setup_mut().new_session = yes;
        self
    }

    /// Closes every descriptor above 2 at exec except `keep`, which the
    /// command inherits at the same numbers (`subprocess`'s `close_fds=True`
    /// with `pass_fds`). Without it only descriptors marked inheritable
    /// (not close-on-exec) are inherited besides the three streams; corral
    /// opens none. On Linux, `close_range(CLOSE_RANGE_CLOEXEC)` (or one
    /// `fcntl` per possible descriptor on older kernels). Linux only; the PID
    /// namespace tier refuses a non-empty `keep` (its init closes every
    /// descriptor before it starts the command).
    pub fn close_other_fds(&mut self, keep: impl IntoIterator<Item = i32>) -> &mut Command {
        self.setup_mut().keep_fds = Some(keep.into_iter().collect());
        self
    }

    /// Sets SIGXFSZ back to the default disposition in the command, besides
    /// SIGPIPE (always reset): a host that ignores them (CPython does) does
    /// not hand that on (`subprocess`'s `restore_signals=True`). Unix only.
    pub fn restore_signals(&mut self, yes: bool) -> &mut Command {
        self.setup_mut().restore_signals = yes;
        self
    }

    /// Confines the tree to `policy` (see [`Sandbox`]). Where the policy
    /// cannot be enforced here, [`spawn`](Self::spawn) fails with
    /// [`Error::Sandbox`] and nothing runs.
    pub fn sandbox(&mut self, policy: Sandbox) -> &mut Command {
        self.sandbox = Some(Box::new(policy));
        self
    }

    /// The child's setup (the defaults when no setter was called).
    #[cfg(all(test, feature = "serde"))]
    pub(crate) fn setup(&self) -> &ChildSetup {
        self.setup.as_deref().unwrap_or(&NO_SETUP)
    }

    fn setup_mut(&mut self) -> &mut ChildSetup {
        self.setup.get_or_insert_with(Box::default)
    }

    /// Starts the command. Its deadline counts from now; the tree is
    /// supervised while [`Running::wait`] runs (and terminated if the handle
    /// is dropped). Like std's `Stdio`, inputs and outputs given as files or
    /// relays are moved into this spawn (a later spawn of the same command
    /// uses the defaults for them); every other setting, stdin bytes and the
    /// line callback included, is kept.
    pub fn spawn(&mut self) -> Result<Running, Error> {
        // On a terminal: a new session whose controlling terminal it is.
        let pty_setup;
        let mut setup = match self.pty {
            Some(_) => {
                pty_setup = ChildSetup {
                    new_session: true,
                    controlling_tty: true,
                    ..self.setup.as_deref().unwrap_or(&NO_SETUP).clone()
                };
                &pty_setup
            }
            None => self.setup.as_deref().unwrap_or(&NO_SETUP),
        };
        let sandboxed;
        let mut settings = self.settings.clone();
        if let Some(policy) = &self.sandbox {
            // Building the sandbox counts against the run's deadline: the
            // timeout becomes a deadline from now, and the preparation
            // (which opens every path of the policy) gets only until then.
            let now = std::time::Instant::now();
            let bound = match (settings.deadline, settings.timeout.get().map(|t| now + t)) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            settings.deadline = bound;
            sandboxed = crate::sandbox::prepare(policy, self.cwd.as_deref(), setup, bound)?;
            setup = &sandboxed;
        }
        let r = lifecycle::spawn(Plan {
            program: &self.program,
            args: &self.args,
            env: &self.env,
            env_clear: self.env_clear,
            cwd: self.cwd.as_deref(),
            stdin: &mut self.stdin,
            stdout: &mut self.stdout,
            stderr: &mut self.stderr,
            pty: self.pty,
            settings,
            containment: self.containment,
            limits: self.limits,
            cancel: self.cancel.clone().unwrap_or_default(),
            on_line: self.on_line.clone(),
            tracer: self.tracer.clone(),
            setup,
        });
        if self.sandbox.is_some() {
            return crate::sandbox::spawned(r, setup);
        }
        r
    }

    /// Spawns and waits.
    pub fn run(&mut self) -> Result<Report, Error> {
        Ok(self.spawn()?.wait())
    }
}

/// A command held across an `.await` is part of its task (figure 5: 10,000
/// tasks at once): what only some commands set (the child setup, the
/// sandbox policy) is boxed when set.
#[cfg(all(test, target_os = "linux", target_pointer_width = "64"))]
mod size {
    #[test]
    fn a_command_stays_small() {
        let command = std::mem::size_of::<super::Command>();
        // Measured: 392 (was 552).
        assert!(command <= 448, "Command is {command} bytes");
    }
}

/// A `Command` held across an `.await` is part of its task (figure 5):
/// a bound, as for the run's state (`lifecycle::sizes`).
#[cfg(all(test, target_os = "linux", target_pointer_width = "64"))]
mod sizes {
    #[test]
    fn a_command_stays_within_its_measured_size() {
        let n = std::mem::size_of::<super::Command>();
        assert!(n <= 376, "{n}");
    }
}
