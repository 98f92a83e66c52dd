//! `corral run`: wire corral's own streams to the child, pass signals on,
//! follow the terminal's job control, print the report, pick the exit code.
//!
//! corral never panics on I/O to its own streams: every message goes through
//! [`say`], which ignores a closed or broken stderr, and the exit code is the
//! documented one whatever stdout/stderr are.

use std::io::Write;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use corral::{CancelToken, Command, Input, Outcome, Output, Report};

use crate::args::{ContainmentArg, RunOpts};
use crate::exit;
use crate::json::JsonReport;

/// Writes one line to stderr; a closed, full or broken stderr is ignored
/// (corral's exit code must not depend on it).
pub fn say(msg: std::fmt::Arguments<'_>) {
    let name = PROGRAM.get().map_or("corral", String::as_str);
    let mut err = std::io::stderr().lock();
    let _ = err.write_fmt(format_args!("{name}: {msg}\n"));
    let _ = err.flush();
}

/// The name in corral's messages: `corral`, or `argv[0]` of the `timeout`
/// personality.
static PROGRAM: OnceLock<String> = OnceLock::new();

pub fn run(opts: RunOpts) -> i32 {
    let started = Instant::now();
    if let Some(g) = &opts.gnu {
        let _ = PROGRAM.set(g.program.clone());
    }
    prepare_process(&opts);
    let (mut cmd, relayed) = match command(&opts) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let token = CancelToken::new();
    cmd.cancel_token(&token);
    let jobs = crate::tty::JobControl::new();
    // Until the terminal is handed over, a Ctrl-Z is held and then passed
    // to the tree: it must stop the tree too, not corral alone.
    #[cfg(unix)]
    let tstp = crate::tty::TstpHold::new();
    #[cfg(not(unix))]
    let tstp = ();
    let first = opts.signal.and_then(|s| s.0).map(corral::Signal::as_raw);
    let mut signals = Received::install(&token, first, &jobs);
    // A signal that came before the spawn cancels it.
    signals.drain();
    let result = cmd
        .spawn()
        .map(|running| supervise(running, &opts, &jobs, tstp, &mut signals));
    // One that came while the run was being flushed, or while the spawn
    // failed, still counts.
    signals.drain();
    let recv = signals.signal();
    // The library decides whether the run timed out: the deadline (also
    // the silent one of `-s 0`) or a SIGALRM corral received (GNU's timer,
    // the token's expiry).
    let timed_out = |r: &Report| matches!(r.outcome, Outcome::TimedOut);
    let (code, json, raise) = match &result {
        Ok(report) => exit_code(&opts, report, recv, timed_out(report), relayed),
        Err(e) => spawn_failed(&opts, e, recv, started),
    };
    if let Ok(report) = &result {
        tell(&opts, report, recv, timed_out(report));
    }
    if let Some(path) = &opts.report {
        if let Err(e) = write_report(path, &json) {
            say(format_args!(
                "cannot write report to {}: {e}",
                if path.as_os_str() == "-" {
                    "stdout".into()
                } else {
                    path.display().to_string()
                }
            ));
            return exit::CORRAL_FAILED;
        }
    }
    if let Some(sig) = raise {
        exit::raise(sig);
    }
    code
}

/// The process-wide set-up of a one-shot run, before anything else.
fn prepare_process(opts: &RunOpts) {
    // One command, then exit: no cgroup pool (and no inotify watch whose
    // teardown would slow the exit), and the crash-safety keeper cloned now,
    // while the process is small, its first message read when the run
    // registers (the PID-namespace tier needs none).
    corral::process_wide::one_shot_process();
    if !matches!(opts.containment, ContainmentArg::PidNamespace) {
        corral::process_wide::start_keeper();
    }
    // corral is the only program in this process: it may always be the
    // subreaper (auto uses it where no cgroup can be had), and it starts no
    // child of its own, so every zombie child that is no root is an orphan
    // it may reap.
    #[cfg(target_os = "linux")]
    {
        let _ = corral::process_wide::enable_subreaper();
        corral::process_wide::reap_all_orphans();
    }
}

/// The command to run, from the options' spec, and which of stdout and
/// stderr corral relays; `Err`: the exit code of options that cannot work.
fn command(opts: &RunOpts) -> Result<(Command, [bool; 2]), i32> {
    let mut spec = opts.spec();
    spec.sigpipe_ignored = crate::dispositions::sigpipe_ignored_at_start();
    if let Some(p) = &mut spec.pty {
        // The size follows corral's terminal when it has one.
        let size = crate::pty::initial_size(Some(corral::PtySize::new(p.cols, p.rows)));
        (p.cols, p.rows) = (size.cols, size.rows);
    }
    let mut cmd = match Command::from_spec(&spec) {
        Ok(cmd) => cmd,
        Err(e) => {
            say(format_args!("{e}"));
            return Err(exit::CORRAL_FAILED);
        }
    };
    cmd.stdin(Input::inherit());
    // A file is relayed too when corral must see the output (to count it
    // or to restart the idle timer); a terminal always stays a terminal.
    // On a pseudo-terminal everything comes out of it, relayed.
    let watch = spec.idle_timeout_ms.is_some() || spec.max_output.is_some();
    let relayed = match spec.pty {
        Some(_) => {
            cmd.stdout(relay_stdout());
            [true, true]
        }
        None => [wire(&mut cmd, 1, watch), wire(&mut cmd, 2, watch)],
    };
    if spec.idle_timeout_ms.is_some() && !relayed.iter().any(|&r| r) {
        say(format_args!(
            "--idle-timeout needs output corral sees: stdout and stderr are both terminals \
             passed through, whose output cannot restart the idle timer (redirect or pipe one \
             of them)"
        ));
        return Err(exit::CORRAL_FAILED);
    }
    Ok((cmd, relayed))
}

/// The hold on SIGTSTP until the hand-over (nothing where there is none).
#[cfg(unix)]
type TstpHold = crate::tty::TstpHold;
#[cfg(not(unix))]
type TstpHold = ();

/// From the spawn to the report: the terminal handed over, the run waited
/// for while the signals corral receives are handled on this thread, the
/// terminal given back.
fn supervise(
    running: corral::Running,
    opts: &RunOpts,
    jobs: &crate::tty::JobControl,
    tstp: TstpHold,
    signals: &mut Received,
) -> Report {
    // The run's root: its SIGCHLD needs no orphan pass, and its exit
    // is not passed on by the handler.
    #[cfg(unix)]
    crate::signals::set_root(running.id());
    // Test seam: widen the window between the spawn and the hand-over.
    if let Some(ms) = std::env::var("CORRAL_TEST_HANDOVER_DELAY_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        std::thread::sleep(Duration::from_millis(ms));
    }
    // A terminal stays a terminal: the tree gets the foreground while it
    // runs (only when corral itself has it), and gives it back after.
    // On a terminal of its own, corral's terminal follows it instead.
    let pty = opts.pty.then(|| crate::pty::Session::start(&running));
    let _terminal = match pty {
        Some(_) => None,
        None => crate::tty::hand_over(running.id(), jobs),
    };
    #[cfg(unix)]
    tstp.release(_terminal.as_ref().map(|_| running.id()));
    #[cfg(not(unix))]
    let () = tstp;
    let report = signals.wait(running);
    drop(pty);
    // No job-control action after this point (the root is reaped); the
    // terminal is given back when `_terminal` drops, just after.
    jobs.end();
    report
}

/// The exit code of a run that started, its JSON report, and the signal
/// to raise on corral itself (GNU's personality, killed by a signal).
fn exit_code(
    opts: &RunOpts,
    report: &Report,
    recv: Option<i32>,
    timed_out: bool,
    relayed: [bool; 2],
) -> (i32, JsonReport, Option<corral::Signal>) {
    let mut raise = None;
    let code = if opts.gnu.is_some() {
        match exit::for_gnu(report, timed_out, opts.preserve_status) {
            exit::Gnu::Code(c) => c,
            exit::Gnu::Raise(s) => {
                raise = Some(s);
                128 + s.as_raw()
            }
        }
    } else if timed_out && report.cleanup_errors.is_empty() {
        exit::for_timed_out(report, opts.preserve_status)
    } else {
        exit::for_run(report, recv, opts.preserve_status)
    };
    (
        code,
        JsonReport::from_run(report, recv, code, relayed),
        raise,
    )
}

/// The exit code of a run that could not start, its JSON report; the
/// error is said on stderr.
fn spawn_failed(
    opts: &RunOpts,
    e: &corral::Error,
    recv: Option<i32>,
    started: Instant,
) -> (i32, JsonReport, Option<corral::Signal>) {
    let code = exit::for_error(e, recv);
    match &opts.gnu {
        Some(g) => say(format_args!("{}", exit::gnu_error_message(e, &g.command))),
        None => {
            say(format_args!("{}", crate::text::error_message(e)));
            if let Some(hint) = duration_hint(e, &opts.command) {
                say(format_args!("{hint}"));
            }
        }
    }
    (
        code,
        JsonReport::from_error(e, recv, code, started.elapsed()),
        None,
    )
}

/// What corral says on stderr after a run: its cleanup error, and with
/// `-v` what it did.
fn tell(opts: &RunOpts, report: &Report, recv: Option<i32>, timed_out: bool) {
    for e in &report.cleanup_errors {
        say(format_args!("{e}"));
    }
    if !opts.verbose {
        return;
    }
    match &opts.gnu {
        Some(g) => {
            if timed_out || matches!(report.outcome, Outcome::Cancelled) {
                let zero = opts.silent_deadline() && timed_out;
                for line in gnu_verbose_lines(report, zero, &g.command) {
                    say(format_args!("{line}"));
                }
            }
        }
        None => {
            if let Some(line) =
                verbose_line(report, recv, opts.wait_delay, opts.effective_timeout())
            {
                say(format_args!("{line}"));
            }
        }
    }
}

/// `corral run 1 sleep 2`: the program was not found and its name reads as
/// a duration, so the user meant a time limit.
fn duration_hint(e: &corral::Error, command: &[std::ffi::OsString]) -> Option<String> {
    let corral::Error::Spawn {
        kind: corral::SpawnErrorKind::NotFound,
        ..
    } = e
    else {
        return None;
    };
    let first = command.first()?.to_str()?;
    crate::duration::parse_duration(first).ok()?;
    let rest: Vec<String> = command[1..]
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let rest = rest.join(" ");
    Some(format!(
        "hint: the time limit is an option: `corral run -t {first} -- {rest}` (or, with GNU \
         timeout's grammar, `corral timeout {first} {rest}`)"
    ))
}

/// `-v` in the `timeout` personality: GNU's line for each signal sent upon
/// the timeout or a signal received (`0` first for `-s 0`).
fn gnu_verbose_lines(r: &Report, zero: bool, command: &str) -> Vec<String> {
    let quoted = crate::text::quote(command);
    let mut sent: Vec<Option<corral::Signal>> = Vec::new();
    if zero {
        sent.push(None);
    }
    sent.extend(r.signals_sent.iter().map(|&s| Some(s)));
    sent.into_iter()
        .map(|s| {
            format!(
                "sending signal {} to command {quoted}",
                crate::gnu::signal_name(s)
            )
        })
        .collect()
}

/// `-v`: one line saying what corral did and why, when it signalled the tree
/// or the run did not end in a clean exit. A timeout names the deadline
/// (`timeout`), and the run's length after it.
fn verbose_line(
    r: &Report,
    received: Option<i32>,
    wait_delay: Duration,
    timeout: Option<Duration>,
) -> Option<String> {
    let clean_exit = matches!(r.outcome, Outcome::Exited(_)) && r.cleanup_errors.is_empty();
    if clean_exit && r.signals_sent.is_empty() {
        return None;
    }
    let took = fmt_ms(r.duration());
    let what = match r.outcome {
        Outcome::Exited(c) => format!("the program exited {c} after {took}"),
        Outcome::Signaled(s) => format!(
            "the program was killed by {s} (signal {}) after {took}, not sent by corral",
            s.as_raw()
        ),
        Outcome::TimedOut if r.timeout_kind == Some(corral::TimeoutKind::Idle) => {
            format!("timed out after {took}: no output for the idle timeout")
        }
        Outcome::TimedOut
            if received
                .and_then(corral::Signal::from_raw)
                .and_then(corral::Signal::name)
                == Some("ALRM") =>
        {
            format!("received SIGALRM after {took}: timed out (the deadline came early)")
        }
        Outcome::TimedOut => match timeout {
            Some(t) => format!("timed out after {} (the run took {took})", fmt_ms(t)),
            None => format!("timed out (the run took {took})"),
        },
        Outcome::OutputLimit => format!(
            "the program's output passed the limit after {took} ({} bytes)",
            r.stdout.total_bytes() + r.stderr.total_bytes()
        ),
        Outcome::OutputHeld => format!(
            "the program exited, but a descendant held its output past the {} wait delay ({took})",
            fmt_ms(wait_delay)
        ),
        Outcome::Cancelled => match received.and_then(corral::Signal::from_raw) {
            Some(s) => format!("received {s} after {took}, passed it on to the tree"),
            None => format!("cancelled after {took}"),
        },
        other => format!("{} after {took}", other.name()),
    };
    let mut line = what;
    if !r.signals_sent.is_empty() {
        let sent: Vec<String> = r.signals_sent.iter().map(|s| s.to_string()).collect();
        line.push_str(&format!("; sent {} to the tree", sent.join(" then ")));
    }
    line.push_str(&format!(
        "; {} killed, {} kept ({})",
        plural(r.leftovers.killed),
        r.leftovers.kept,
        r.containment.name()
    ));
    for e in &r.cleanup_errors {
        line.push_str(&format!("; {e}"));
    }
    Some(line)
}

fn plural(n: usize) -> String {
    if n == 1 {
        "1 descendant".into()
    } else {
        format!("{n} descendants")
    }
}

fn fmt_ms(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

/// `--report -` is stdout (the one rule for `run` and `batch`), written
/// after the program's own output. A reader that went away (EPIPE) loses the
/// report but does not change the exit code; any other failure is 125.
fn write_report(path: &std::path::Path, json: &JsonReport) -> std::io::Result<()> {
    let mut text = serde_json::to_string(json).map_err(std::io::Error::other)?;
    text.push('\n');
    if path.as_os_str() == "-" {
        let mut out = std::io::stdout().lock();
        match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
            r => r,
        }
    } else {
        crate::outfile::write_atomic(path, text.as_bytes())
    }
}

/// corral's stdout as the destination of a pseudo-terminal's output (a
/// closed stdout discards it).
fn relay_stdout() -> Output {
    #[cfg(unix)]
    {
        use std::os::fd::AsFd;
        match std::io::stdout().as_fd().try_clone_to_owned() {
            Ok(fd) => Output::relay_file(std::fs::File::from(fd)),
            Err(_) => Output::null(),
        }
    }
    #[cfg(not(unix))]
    Output::inherit()
}

/// Hands corral's own stream `fd` to the child when it is a terminal or a
/// file (a terminal stays a terminal), and relays through corral when it is
/// a pipe or socket (so corral's caller sees EOF in bounded time, whatever
/// the tree does with its copy). Returns whether it relays.
#[cfg(unix)]
fn wire(cmd: &mut Command, fd: i32, files_too: bool) -> bool {
    use std::os::fd::{AsFd, BorrowedFd};
    // SAFETY: fds 1 and 2 are open for the life of the process (std opens
    // /dev/null on a closed one at start-up; a failing fstat is handled); the
    // borrow does not outlive this function except through an owned
    // duplicate.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    let relay = match rustix::fs::fstat(borrowed) {
        Ok(st) => {
            let ft = rustix::fs::FileType::from_raw_mode(st.st_mode);
            matches!(
                ft,
                rustix::fs::FileType::Fifo | rustix::fs::FileType::Socket
            ) || (files_too && ft == rustix::fs::FileType::RegularFile)
        }
        Err(_) => false,
    };
    let output = if relay {
        match borrowed.as_fd().try_clone_to_owned() {
            Ok(owned) => Output::relay_file(std::fs::File::from(owned)),
            Err(_) => Output::inherit(),
        }
    } else {
        Output::inherit()
    };
    if fd == 1 {
        cmd.stdout(output);
    } else {
        cmd.stderr(output);
    }
    relay
}

#[cfg(not(unix))]
fn wire(cmd: &mut Command, fd: i32, _files_too: bool) -> bool {
    if fd == 1 {
        cmd.stdout(Output::inherit());
    } else {
        cmd.stderr(Output::inherit());
    }
    false
}

/// Every signal whose default action would end corral, and that can be
/// caught (not the synchronous faults SEGV, BUS, ILL, FPE, TRAP): it is
/// passed on to the tree as the first signal (then the grace rule applies),
/// the report is written, and corral exits 128+N. SIGPIPE stays ignored (as
/// Rust sets it): corral's own writes to a broken pipe fail with EPIPE and
/// are handled where they happen, and a SIGPIPE sent to corral cannot end it.
#[cfg(unix)]
fn terminating_signals() -> Vec<i32> {
    use libc::*;
    #[allow(unused_mut)] // extended on Linux and FreeBSD
    let mut v = vec![
        SIGHUP, SIGINT, SIGQUIT, SIGABRT, SIGUSR1, SIGUSR2, SIGALRM, SIGTERM, SIGXCPU, SIGXFSZ,
        SIGVTALRM, SIGPROF, SIGSYS,
    ];
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        v.extend([SIGSTKFLT, SIGIO, SIGPWR]);
        v.extend(SIGRTMIN()..=SIGRTMAX());
    }
    #[cfg(target_os = "freebsd")]
    v.extend(65..=126); // SIGRTMIN..=SIGRTMAX (not in libc for FreeBSD)
    v
}

/// The signals corral receives during a run and what it does with them,
/// on the thread that waits for the run (no thread of their own: one per
/// run cost about 0.45 ms, see docs/BENCHMARKS.md). The handlers of
/// `crate::signals` write one byte per signal to a pipe; the run's wait
/// watches it ([`corral::Running::wait_watching`]) and [`Received::drain`]
/// reads it, and before the spawn and after the wait it is read once more.
///
/// * A terminating signal is passed on to the tree as the first signal
///   (the run's token is cancelled with it; then the grace rule applies),
///   and the first one received picks the exit code. A SIGALRM is the
///   deadline coming early (GNU's timer): the tree is terminated as at the
///   deadline and the run timed out.
/// * SIGCHLD: job control (the tree stopped from the terminal), and, from
///   any child but the root (once spawned, `crate::signals::set_root`), a
///   pass that reaps the orphans that died: corral is a one-shot process,
///   which starts no reaping thread (see `corral::process_wide::one_shot_process`); the
///   root's exit is not passed on. Signals of one kind coalesce: an orphan
///   that died together with the root is reaped at the next SIGCHLD, or
///   goes to init when corral exits.
/// * SIGCONT: corral was continued (job control).
///
/// A signal that was ignored when corral started is not caught (it stays
/// ignored, in corral and in the tree), except SIGALRM and the `-s` signal,
/// as GNU `timeout` does.
#[cfg_attr(not(unix), allow(dead_code))]
struct Received {
    /// The handlers' pipe (`None`: no handler, elsewhere than Unix or when
    /// they could not be installed).
    #[cfg(unix)]
    reader: Option<std::io::PipeReader>,
    token: CancelToken,
    jobs: crate::tty::JobControl,
    /// The first terminating signal received, 0 before.
    first: i32,
}

impl Received {
    /// Installs the handlers (see [`terminating_signals`]; `first`: the
    /// `-s` signal, caught even if it was ignored).
    fn install(token: &CancelToken, first: Option<i32>, jobs: &crate::tty::JobControl) -> Self {
        #[cfg(unix)]
        let reader = {
            let mut wanted = terminating_signals();
            wanted.extend([libc::SIGCHLD, libc::SIGCONT]);
            crate::signals::install(&wanted, first)
                .map_err(|e| say(format_args!("cannot handle signals: {e}")))
                .ok()
        };
        #[cfg(not(unix))]
        let _ = first;
        Received {
            #[cfg(unix)]
            reader,
            token: token.clone(),
            jobs: jobs.clone(),
            first: 0,
        }
    }

    /// The first terminating signal received, if any.
    fn signal(&self) -> Option<i32> {
        (self.first != 0).then_some(self.first)
    }

    /// Handles every signal received so far (never blocks).
    fn drain(&mut self) {
        #[cfg(unix)]
        if let Some(reader) = self.reader.take() {
            crate::signals::drain(&reader, |byte| self.on_signal(byte));
            self.reader = Some(reader);
        }
    }

    /// Waits for the run, handling the signals as they come.
    fn wait(&mut self, running: corral::Running) -> Report {
        #[cfg(unix)]
        if let Some(reader) = self.reader.take() {
            use std::os::fd::AsFd;
            let report = running.wait_watching(reader.as_fd(), || {
                crate::signals::drain(&reader, |byte| self.on_signal(byte))
            });
            self.reader = Some(reader);
            return report;
        }
        running.wait()
    }

    /// One byte of the handlers' pipe.
    #[cfg(unix)]
    fn on_signal(&mut self, byte: u8) {
        use libc::{SIGALRM, SIGCHLD, SIGCONT};
        let (sig, _from_root) = crate::signals::decode(byte);
        match sig {
            SIGCHLD => {
                self.jobs.on_child_changed();
                // The root's own changes need no orphan pass.
                #[cfg(target_os = "linux")]
                if !_from_root {
                    corral::process_wide::reap_orphans_now();
                }
            }
            SIGCONT => self.jobs.on_continued(),
            // GNU's timer: the deadline come early, the library's to
            // decide (timed out, as at the deadline).
            SIGALRM if self.first == 0 => {
                self.first = SIGALRM;
                self.token.expire();
            }
            _ => {
                if self.first == 0 {
                    self.first = sig;
                }
                match corral::Signal::from_raw(sig) {
                    Some(s) => self.token.cancel_with(s),
                    None => self.token.cancel(),
                }
            }
        }
    }
}
