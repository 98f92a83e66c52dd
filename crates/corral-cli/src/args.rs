//! Command-line syntax.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use corral::document::{Containment, PtySpec, RunSpec};
use corral::{LeftoverPolicy, Signal};

pub use crate::duration::{parse_bytes, parse_duration};

/// Run commands with a deadline; contain and kill their whole process tree.
#[derive(Parser, Debug)]
#[command(name = "corral", version, about, long_about = None)]
#[command(after_long_help = crate::reference::MAIN_AFTER_HELP)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Cmd,
}

impl Cli {
    /// The command line, parsed. A `corral run` is parsed first by a
    /// definition that has `run` alone: clap builds every subcommand's
    /// arguments before it parses, and a one-shot `corral run` would pay
    /// for batch's, merge's and the MCP server's at every start (issue
    /// #20). Anything that definition does not accept (help, version, any
    /// usage error) is parsed again by the whole one, which says it as
    /// always.
    pub fn parse_args() -> Result<Cli, clap::Error> {
        let args: Vec<OsString> = std::env::args_os().collect();
        Self::run_alone(&args).map_or_else(|| Cli::try_parse_from(&args), Ok)
    }

    /// `args` parsed as `corral run ...` by a definition with that
    /// subcommand alone; `None` when it is no run or not accepted.
    fn run_alone(args: &[OsString]) -> Option<Cli> {
        if args.get(1)? != "run" {
            return None;
        }
        let run = RunOpts::augment_args(clap::Command::new("run"));
        let matches = clap::Command::new("corral")
            .subcommand(run)
            .try_get_matches_from(args)
            .ok()?;
        let (_, run) = matches.subcommand().filter(|(name, _)| *name == "run")?;
        let opts = <RunOpts as clap::FromArgMatches>::from_arg_matches(run).ok()?;
        Some(Cli {
            command: Cmd::Run(opts),
        })
    }
}

#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// Run one command under a deadline; contain and kill its whole tree (a
    /// drop-in for coreutils `timeout`: `corral run -t 10s -- make`).
    Run(RunOpts),
    /// GNU coreutils `timeout`'s exact command line, with corral's
    /// containment: `corral timeout 10s make`.
    ///
    /// `corral timeout [OPTION] DURATION COMMAND [ARG]...`, as GNU's
    /// (`corral timeout --help`): the same as the corral binary invoked as
    /// `timeout` (see install-timeout).
    #[command(disable_help_flag = true)]
    Timeout {
        /// GNU timeout's options, DURATION, COMMAND and its arguments.
        #[arg(
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "ARGS"
        )]
        args: Vec<OsString>,
    },
    /// Create DIR/timeout, a symlink to corral that takes GNU timeout's
    /// command line.
    ///
    /// Invoked under that name, corral takes GNU timeout's grammar (put DIR
    /// first in PATH to use it in place of coreutils' `timeout`). An
    /// existing DIR/timeout (file, directory or symlink) is left alone and
    /// is an error (exit 125); nothing is followed or replaced.
    InstallTimeout {
        /// The directory for the link, e.g. ~/.local/bin.
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
    /// Run the tasks of a TOML manifest, many at once, and classify each run
    /// as passed, failed or error.
    Batch(BatchOpts),
    /// Merge the JSON reports of the shards of one batch (`corral batch
    /// --partition K/N`) into one report of the same schema.
    ///
    /// Every shard must come from the same manifest (same fingerprint),
    /// task filters and shard count, each shard exactly once, and every run
    /// of the manifest exactly once. Exit status as for a batch over the
    /// whole manifest: 0, 1 or 2; 125 when the reports do not fit together
    /// or cannot be read or written.
    Merge(MergeOpts),
    /// Serve the Model Context Protocol over stdio: tools for an AI agent to
    /// run commands (run, start, read, write, kill, list), each contained
    /// and bounded as `corral run` does.
    Mcp(crate::mcp::McpOpts),
    /// Print a shell completion script for SHELL to stdout (for example
    /// `corral completions bash > /etc/bash_completion.d/corral`).
    #[command(hide = true)]
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff) to stdout: every command, option and
    /// reference section of `--help` on one page (`corral man | man -l -`).
    #[command(hide = true)]
    Man,
}

#[derive(Args, Debug)]
pub struct MergeOpts {
    /// The shards' JSON reports (`corral batch --report`).
    #[arg(value_name = "REPORT.json", required = true)]
    pub reports: Vec<PathBuf>,

    /// Write the merged JSON report to FILE (`-` for stdout; the summary
    /// then goes to stderr).
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,

    /// Write a JUnit XML report of the merged runs to FILE.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,

    /// Write the per-task table as Markdown to FILE.
    #[arg(long, value_name = "FILE")]
    pub export_markdown: Option<PathBuf>,
}

#[derive(Args, Debug)]
#[command(after_long_help = BATCH_AFTER_HELP)]
pub struct BatchOpts {
    /// The manifest (TOML): a `[defaults]` table and `[[task]]` tables
    /// (`-` reads it from standard input).
    #[arg(value_name = "FILE")]
    pub manifest: PathBuf,

    /// Run only the K-th of N shards (K from 1 to N; or `env:VAR`, a
    /// 0-based index read from VAR, as Kubernetes' JOB_COMPLETION_INDEX).
    /// Runs are dealt round-robin in manifest order.
    #[arg(long, value_name = "K/N")]
    pub partition: Option<String>,

    /// Run only the tasks whose name matches PATTERN (`*` any characters,
    /// `?` one); repeatable.
    #[arg(long = "task", value_name = "PATTERN")]
    pub tasks: Vec<String>,

    /// Print the runs that would run, with their shard, and exit.
    #[arg(long)]
    pub list: bool,

    /// Run a failed or errored run again, up to N more times (overrides
    /// every task's `retries`).
    #[arg(long, value_name = "N")]
    pub retries: Option<u32>,

    /// Write one JSON object per line as each run starts and finishes
    /// (`-` for stdout).
    #[arg(long, value_name = "FILE")]
    pub events: Option<PathBuf>,

    /// Write each run's full stdout and stderr to files in DIR.
    #[arg(long, value_name = "DIR")]
    pub output_dir: Option<PathBuf>,

    /// Write the per-task table as Markdown to FILE.
    #[arg(long, value_name = "FILE")]
    pub export_markdown: Option<PathBuf>,

    /// Runs at once [default: the number of CPUs].
    #[arg(short = 'j', long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub jobs: Option<u32>,

    /// After the first failed or errored run, start nothing more and cancel
    /// what runs.
    #[arg(long)]
    pub fail_fast: bool,

    /// Write a JSON report of every run to FILE (`-` for stdout, as in
    /// `corral run`; the summary table then goes to stderr).
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,

    /// Write a JUnit XML report to FILE (a testsuite per task, a testcase
    /// per run).
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,

    /// Bytes of each run's stdout and stderr kept for the reports (head and
    /// tail; the middle is counted, not kept).
    #[arg(long, value_parser = parse_bytes, default_value = "32K", value_name = "BYTES")]
    pub keep_output: u64,

    /// Progress display: auto (a live bar when stderr is a terminal, else a
    /// line per finished run), bar, lines, or none.
    #[arg(long, value_enum, default_value_t = ProgressArg::Auto)]
    pub progress: ProgressArg,

    /// Containment mechanism for every run (see `corral run --help`). The
    /// batch becomes a child subreaper only when a run asks for the
    /// subreaper tier (here, or a task's `containment`); `auto` then falls
    /// back to it too, and orphans of every tier are reaped.
    #[arg(long, value_enum, default_value_t = ContainmentArg::Auto)]
    pub containment: ContainmentArg,

    /// Require crash safety of every run, whatever the manifest says: a run
    /// whose tree would outlive corral's own death (the keeper could not be
    /// started) is an error (containment_failed, not retried) and does not
    /// run. Without it, such a run goes ahead and its report says
    /// crash_safe false.
    #[arg(long)]
    pub require_crash_safety: bool,
}

const BATCH_AFTER_HELP: &str = "\
Manifest (TOML): an optional [defaults] table (any task key but name, run
and shell), then one [[task]] table per task:

  [defaults]
  timeout = \"10m\"
  [[task]]
  name = \"unit\"                 # required, unique; runs are unit#0, unit#1, ...
  run = [\"cargo\", \"test\"]       # an argv list, or:
  # shell = \"make check | tee log\"  (a string for /bin/sh -c)

Task keys:
  name          required, unique
  run / shell   exactly one: an argv list, or a string for /bin/sh -c
  cwd           working directory, relative to the manifest's directory
  env           variables added to corral's environment (task wins)
  timeout       time per run (\"500ms\", \"1m30s\", or seconds) [none]
  idle_timeout  end a run that wrote nothing to stdout or stderr for this
                long (timed_out, timeout_kind idle) [none]
  max_output    end a run whose stdout and stderr together pass this many
                bytes (\"10M\"; outcome output_limit) [none]
  wait_delay    how long descendants may hold the output after the exit [2s]
  grace         time between the first signal and SIGKILL [0]
  signal        the first signal when there is a grace [TERM]
  leftovers     kill | keep-on-success | keep [kill]: kill kills every
                descendant still running when the program exits;
                keep-on-success keeps them after a clean exit 0 only; keep
                never kills them (nothing started by a batch outlives its
                run under the default)
  repeat        runs of the task [1]
  expect_exit   the exit code that passes [0]
  result_event  read the result from stdout, e.g.
                { type = \"run_end\", field = \"exitCode\" }: the last JSON
                line of that type; its field must be 0 (and the exit code
                expect_exit); read only after a clean lifecycle
  retries       attempts after a failed or errored run [0] (spawn,
                containment and cleanup failures are never retried)
  containment   auto | cgroup | subreaper | process-group | pid-namespace
                [--containment] (subreaper: the batch becomes a child
                subreaper, see --containment)
  memory_max, pids_max
                cap the tree's memory (\"64M\") or live processes; need a
                cgroup
  serial        true: its runs overlap no other run [false]
  warmup        runs before the measured ones, never counted [0]
  require_crash_safety
                true: a run that would outlive corral's own death (the
                keeper could not be started) is an error and does not run
                [false; --require-crash-safety sets it for every task]
  sandbox       true: confine the task's runs (see `corral run --sandbox`);
                a run whose sandbox cannot be enforced here is an error
                (sandbox_failed, not retried) and does not run [false]
  allow_write, deny_read
                lists of existing paths (relative to the manifest's
                directory) the sandbox also lets the runs write, or denies
                them reading; need sandbox = true
  network       none | loopback | host: the sandbox's network [none]

Environment: each run gets CORRAL_TASK (the task's name), CORRAL_RUN
(0, 1, 2, ...; warmups numbered apart, from 0), CORRAL_ATTEMPT (0, then 1,
2, ... for retries) and CORRAL_WARMUP (1 in a warmup run, else 0).

Results: each run ends as passed, failed (clean lifecycle, wrong exit code or a
nonzero result event) or error (timed out, cancelled, output held, killed by
a signal corral did not send, spawn/containment/cleanup failure, result
event missing or malformed). Each run's report says crash_safe: whether its
tree would have been killed had corral itself died (false, with
crash_safety_note, when the keeper could not be started).

Exit status: 0 every run passed; 1 a run failed and none errored; 2 a run
errored, or a signal stopped the batch; 125 bad manifest or usage, or a
report could not be written.
";

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProgressArg {
    Auto,
    Bar,
    Lines,
    None,
}

/// The grace `-s SIG` gets when `-k` is not given: SIG first, SIGKILL 10 s
/// later (as `docker stop`), so a chosen signal is always sent and the
/// return stays bounded.
pub const DEFAULT_SIGNAL_GRACE: Duration = Duration::from_secs(10);

#[derive(Args, Debug)]
#[command(after_long_help = RUN_AFTER_HELP)]
pub struct RunOpts {
    /// Time allowed: a number of seconds as GNU timeout takes it (10, 0.5,
    /// 1e-3, 0x1p3; with s, m, h or d; a positive value is rounded up to
    /// the nanosecond, a huge one clamped), or 500ms, 1m30s, 2h; 0 means
    /// no limit, as with `timeout 0`.
    #[arg(short = 't', long, value_parser = parse_duration, value_name = "DURATION")]
    pub timeout: Option<Duration>,

    /// Terminate the tree (like the timeout: exit 124, timeout_kind idle)
    /// when the program wrote nothing to its stdout or stderr for this
    /// long. The timer starts at the spawn and runs until the run ends,
    /// the wait delay included. Only output corral relays counts: a
    /// terminal passed through cannot restart it, so when neither stdout
    /// nor stderr is relayed (both are terminals) the option is refused
    /// (exit 125).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub idle_timeout: Option<Duration>,

    /// Terminate the tree when the program wrote more than BYTES to its
    /// stdout and stderr together (K, M, G suffixes): BYTES are relayed,
    /// byte BYTES+1 ends the run (outcome output_limit, exit 122; the
    /// report's byte counts say how many bytes corral read from each
    /// stream, the dropped ones included). Output passed through to a
    /// terminal is not counted.
    #[arg(long = "max-output", value_parser = parse_bytes, value_name = "BYTES")]
    pub max_output: Option<u64>,

    /// Run the program on a new pseudo-terminal: its stdin, stdout and
    /// stderr are the terminal, the controlling terminal of its session
    /// (isatty is true, `tput cols` answers). corral relays what comes out
    /// to its stdout (counted; stderr_bytes is 0; --idle-timeout and
    /// --max-output apply to it) and its own stdin to the terminal, then
    /// the terminal's end-of-file character (^D) once its stdin ends (as
    /// one Ctrl-D typed: after a last line without a newline it ends that
    /// line, not the input; a program in raw mode reads it as a byte). A
    /// descendant still holding the terminal past the wait delay after the
    /// program exits is killed (123). Not on Windows.
    #[arg(long)]
    pub pty: bool,

    /// The terminal's size with --pty when corral's stdout is not a
    /// terminal (when it is, the size follows it, resizes included)
    /// [default: 80x24].
    #[arg(long, value_parser = parse_pty_size, value_name = "COLSxROWS", requires = "pty")]
    pub pty_size: Option<corral::PtySize>,

    /// After the program exits, how long its descendants may hold its
    /// output open (when corral relays it: a pipe or socket) before they
    /// are killed.
    #[arg(long, value_parser = parse_duration, default_value = "2s", value_name = "DURATION")]
    pub wait_delay: Duration,

    /// Time between the first signal and SIGKILL. Without -k: SIGKILL at
    /// once, or 10s after the first signal when -s is given.
    #[arg(short = 'k', long = "kill-after", visible_alias = "grace", value_parser = parse_duration, value_name = "DURATION")]
    pub grace: Option<Duration>,

    /// First signal sent to the tree (name such as TERM, INT, USR1, SYS,
    /// RTMIN+3, or a number; 0 sends nothing at the deadline and lets -k
    /// kill). Given without -k, it gets a 10s grace before SIGKILL
    /// [default: TERM, used only with -k].
    #[arg(short = 's', long, value_parser = parse_signal, value_name = "SIGNAL")]
    pub signal: Option<FirstSignal>,

    /// Exit with the program's own status even when it timed out or its
    /// output was held (128+N when it was killed by signal N), as
    /// `timeout --preserve-status`. corral's own failures (125-127) stay.
    #[arg(short = 'p', long)]
    pub preserve_status: bool,

    /// Accepted for `timeout --foreground`: corral always lets the command
    /// read the terminal (the tree gets the terminal's foreground while it
    /// runs, when corral has it), and, unlike GNU's -f, still times out
    /// and contains the command's children.
    #[arg(short = 'f', long)]
    pub foreground: bool,

    /// Print one line on stderr when corral signals the tree or the run does
    /// not end in a clean exit: what happened, which signals, how many
    /// processes were killed or kept.
    #[arg(short = 'v', long)]
    pub verbose: bool,

    /// What happens to descendants still running when the program exits:
    /// keep-on-success keeps them after a clean exit 0 and kills them
    /// otherwise; kill always kills them; keep never does. A stopped one is
    /// never kept: it is killed (and counted in killed).
    #[arg(long, value_enum, default_value_t = Leftovers::KeepOnSuccess)]
    pub leftovers: Leftovers,

    /// Containment mechanism: auto uses a cgroup when one can be had (Linux),
    /// else the subreaper tier (Linux), else a process group; the report
    /// says which and why. pid-namespace (Linux, also unprivileged: the
    /// command runs as pid 2 under a small init) is only used when asked.
    #[arg(long, value_enum, default_value_t = ContainmentArg::Auto)]
    pub containment: ContainmentArg,

    /// Cap the whole tree's memory (bytes; K, M, G suffixes). Needs cgroups.
    #[arg(long, value_parser = parse_bytes, value_name = "BYTES")]
    pub memory_max: Option<u64>,

    /// Cap the number of processes alive at once in the tree. Needs cgroups.
    #[arg(long, value_name = "N")]
    pub pids_max: Option<u64>,

    /// After the final SIGKILL, how long to wait for the tree to be gone
    /// before reporting survivors. A tree still dying then (fewer members
    /// at each look, or every member left with SIGKILL pending or exiting)
    /// is waited for, up to 10 times this (at least 5 s) from the SIGKILL
    /// or, while it keeps dying, from its last death; never past 6 such
    /// limits.
    #[arg(long, value_parser = parse_duration, default_value = "1s", value_name = "DURATION")]
    pub confirm_window: Duration,

    /// Fail (exit 125, containment_failed) rather than run without crash
    /// safety: the tree must be killed even if corral itself is killed
    /// (the keeper process, the namespace init). Without this the run goes
    /// ahead and the report says crash_safe false.
    #[arg(long)]
    pub require_crash_safety: bool,

    /// Write a JSON report of the run to FILE (`-` for stdout, after the
    /// program's own output; as in `corral batch`).
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,

    #[command(flatten)]
    pub sandbox: crate::sandbox_flags::SandboxOpts,

    /// The program and its arguments (bytes are passed through unchanged).
    /// Options of corral come before it; everything from the first word
    /// that is not an option (or after `--`) is the program's.
    #[arg(required = true, trailing_var_arg = true, value_name = "PROGRAM")]
    pub command: Vec<OsString>,

    /// Set by the `timeout` personality: GNU's messages, `-v` lines and
    /// exit statuses.
    #[arg(skip)]
    pub gnu: Option<crate::gnu::Style>,
}

/// `-s`: the first signal, or signal 0 (nothing is sent at the deadline;
/// SIGKILL follows after the grace).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FirstSignal(pub Option<Signal>);

/// `--pty-size COLSxROWS`.
fn parse_pty_size(s: &str) -> Result<corral::PtySize, String> {
    s.parse()
}

impl RunOpts {
    /// The run these options ask for, as the library takes it (the one
    /// place the command line's options become a [`RunSpec`]). What only
    /// the run knows at its start (the pseudo-terminal's size when stdout
    /// is a terminal, SIGPIPE's disposition) is filled in by `run`.
    pub fn spec(&self) -> RunSpec {
        RunSpec {
            argv: Some(self.command.clone()),
            timeout_ms: self.effective_timeout(),
            idle_timeout_ms: self.idle_timeout,
            grace_ms: Some(self.effective_grace()),
            signal: Some(self.signal.and_then(|s| s.0).unwrap_or(Signal::TERM)),
            // `-s 0`: nothing is sent at the deadline, SIGKILL the grace
            // later; the library decides that the run timed out.
            silent_deadline: self.silent_deadline(),
            wait_delay_ms: Some(self.wait_delay),
            confirm_window_ms: Some(self.confirm_window),
            max_output: self.max_output,
            // Relayed output is written as it comes; only counts matter.
            capture_limit: Some(0),
            leftovers: Some(self.leftovers.into()),
            containment: Some(self.containment.into()),
            require_crash_safety: self.require_crash_safety,
            memory_max: self.memory_max,
            pids_max: self.pids_max,
            pty: self.pty.then(|| {
                let size = self.pty_size.unwrap_or_default();
                PtySpec {
                    cols: size.cols,
                    rows: size.rows,
                }
            }),
            sandbox: self.sandbox.policy(),
            ..RunSpec::default()
        }
    }

    /// `-s 0` with a time limit: nothing is sent at the deadline.
    pub fn silent_deadline(&self) -> bool {
        matches!(self.signal, Some(FirstSignal(None))) && self.effective_timeout().is_some()
    }

    /// The grace: `-k` as given; else 10 s when `-s` was given; else 0.
    pub fn effective_grace(&self) -> Duration {
        match (self.grace, self.signal) {
            (Some(g), _) => g,
            (None, Some(_)) => DEFAULT_SIGNAL_GRACE,
            (None, None) => Duration::ZERO,
        }
    }

    /// The time limit: `-t 0` (or none) means no limit.
    pub fn effective_timeout(&self) -> Option<Duration> {
        self.timeout.filter(|t| !t.is_zero())
    }
}

const RUN_AFTER_HELP: &str = "\
Exit status:
  N      the program exited with N, and every lifecycle step was clean
  122    the output passed --max-output (the tree was terminated)
  123    the program exited, but a descendant held its output past the wait
         delay (the holders were killed)
  124    timed out: the deadline, or --idle-timeout without output (the
         tree was terminated; the report's timeout_kind says which)
  125    corral failed: usage, containment (also --require-crash-safety when
         crash safety cannot be had), a --sandbox that cannot be enforced
         here (sandbox_failed: nothing ran), cleanup (survivors), report, out of
         file descriptors (EMFILE: the message gives the soft and hard
         open-file limits and the `ulimit -n` that raises the soft one)
  126    the program was found but could not be executed
  127    the program was not found
  128+N  the program was killed by signal N that corral did not send, or
         corral received signal N (INT, TERM, HUP, QUIT, USR1, USR2, ...),
         passed it on to the tree, and exited
  With --preserve-status: the program's own status (128+N if killed) for
  122, 123 and 124 too.

Signals: -t alone kills the tree with SIGKILL at the deadline. -k D sends
-s SIG (default TERM) first, then SIGKILL D later if anything is left. -s SIG
alone means -k 10s; -s 0 sends nothing at the deadline, only the SIGKILL. A
signal corral receives is passed on as the first signal (with the same grace
rule); a SIGALRM is the deadline come early (124). corral ignores SIGPIPE
(also one sent by another process): a write to a closed pipe fails with
EPIPE instead. A signal ignored when corral starts (nohup's HUP, SIGPIPE
under `trap '' PIPE`) is not caught and stays ignored in the tree.
Durations: as GNU timeout (10, 0.5, 1e-3, 0x1p3, with s, m, h or d; a
positive value is rounded up to the nanosecond, a huge one clamped) or
500ms, 1m30s. GNU timeout's own grammar: `corral timeout DURATION COMMAND`.

Output: when corral's stdout/stderr is a pipe or socket, corral relays the
program's output, counts it, and waits at most --wait-delay after the
program's exit for descendants holding it (then 123, holders killed). When
it is a terminal or a regular file, the program writes there directly
(bytes are not counted: null in the report) and corral does not wait for
it: after the program exits, a descendant that still writes there is
treated only by --leftovers (kept after a clean exit 0 under
keep-on-success; use --leftovers kill to leave nothing behind). With
--idle-timeout or --max-output a regular file is relayed too (counted and
capped); a terminal never is.

Terminal: in the foreground of a terminal, the tree gets the foreground
while it runs. Ctrl-Z stops the tree and corral (the shell gets the
terminal back); fg continues both. With --pty the program gets a terminal
of its own instead (see --pty): its output (\n as \r\n, typed input
echoed) comes to corral's stdout, whatever stdout is; when stdin is a
terminal corral puts it in raw mode while the run lasts, so keys (Ctrl-C
too) reach the program's terminal as typed.

Report (--report): one JSON object: outcome (exited, signaled, timed_out,
cancelled, output_held, output_limit, spawn_failed, containment_failed,
sandbox_failed, cleanup_failed), timeout_kind (deadline or idle on timed_out, else null),
exit_code, signal (the raw number), signal_name, containment, killed, kept,
duration_ms, stdout_bytes / stderr_bytes (null when passed through), output
(relayed or passed_through per stream), error, pid, signals_sent,
received_signal, survivors, timings_ms, containment_note, crash_safe
(false when the tree would outlive corral's own death: the keeper could not
be started) with crash_safety_note (why), usage, limits_hit, corral_exit.
";

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Leftovers {
    KeepOnSuccess,
    Kill,
    Keep,
}

impl From<Leftovers> for LeftoverPolicy {
    fn from(l: Leftovers) -> Self {
        match l {
            Leftovers::KeepOnSuccess => LeftoverPolicy::KeepOnSuccess,
            Leftovers::Kill => LeftoverPolicy::Kill,
            Leftovers::Keep => LeftoverPolicy::Keep,
        }
    }
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContainmentArg {
    Auto,
    Cgroup,
    ProcessGroup,
    Subreaper,
    PidNamespace,
}

impl From<ContainmentArg> for Containment {
    fn from(c: ContainmentArg) -> Containment {
        match c {
            ContainmentArg::Auto => Containment::Auto,
            ContainmentArg::Cgroup => Containment::Cgroup,
            ContainmentArg::ProcessGroup => Containment::ProcessGroup,
            ContainmentArg::Subreaper => Containment::Subreaper,
            ContainmentArg::PidNamespace => Containment::PidNamespace,
        }
    }
}

/// Prints clap's "unexpected argument" error without its tip to put
/// `--` before the word (which would run a program named `--timout`), and
/// with corral's own hint instead.
pub fn print_unknown_argument(e: &clap::Error) {
    use std::io::Write;
    let rendered = e.render().to_string();
    let mut lines: Vec<&str> = rendered
        .lines()
        .filter(|l| !l.trim_start().starts_with("tip: to pass"))
        .collect();
    let hint = if rendered.contains("corral run") {
        "  tip: corral run's options come before the program and are listed by 'corral run \
         --help'; for GNU timeout's grammar use 'corral timeout [OPTION] DURATION COMMAND \
         [ARG]...'"
    } else {
        "  tip: the options are listed by --help"
    };
    if let Some(usage) = lines.iter().position(|l| l.starts_with("Usage:")) {
        let mut last = usage;
        while last > 0 && lines[last - 1].trim().is_empty() {
            last -= 1;
        }
        if last > 0 && lines[last - 1].trim_start().starts_with("tip:") {
            lines.insert(last, hint);
        } else {
            lines.splice(last..usage, ["", hint, ""]);
        }
    }
    let mut out = lines.join("\n");
    out.push('\n');
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(out.as_bytes()).and_then(|()| err.flush());
}

pub(crate) fn parse_signal(s: &str) -> Result<FirstSignal, String> {
    if let Some(sig) = crate::gnu::signal(s) {
        return Ok(FirstSignal(sig));
    }
    s.parse::<Signal>()
        .map(|sig| FirstSignal(Some(sig)))
        .map_err(|e| format!("{e}; or 0 to send nothing at the deadline"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `run` alone parses every `corral run` it accepts as the whole
    /// definition does, and leaves to it everything else (help, version,
    /// usage errors, other subcommands), whose messages it alone gives.
    #[test]
    fn run_alone_agrees_with_the_whole_definition() {
        let lines = [
            "corral run true",
            "corral run -- true",
            "corral run --timeout 10s --containment cgroup -- true",
            "corral run -t 1 -s 0 -k 2 -v -p -f x --y",
            "corral run --containment=pid-namespace --report - -- sh -c exit",
            "corral run --leftovers kill --memory-max 64M --pids-max 3 -- a b",
            "corral run --pty --pty-size 80x24 -- top",
            "corral run --max-output 1K --wait-delay 0s -- cat",
            "corral run -t 5 -- corral run -t 1 -- x",
            "corral run x --containment pid-namespace",
            "corral run -- --help",
            "corral run -- -V",
            // Not accepted by `run` alone: the whole definition decides.
            "corral run",
            "corral run --help",
            "corral run -h",
            "corral run --version",
            "corral run -V",
            "corral run --bogus -- true",
            "corral run -t nonsense -- true",
            "corral run --pty-size 80x24 -- true",
            "corral run --containment nowhere -- true",
            // No run at all.
            "corral --version",
            "corral batch m.toml",
            "corral runs -- true",
            "corral",
        ];
        for line in lines {
            let args: Vec<OsString> = line.split(' ').map(OsString::from).collect();
            let alone = Cli::run_alone(&args).map(|c| format!("{c:?}"));
            let whole = Cli::try_parse_from(&args).map(|c| format!("{c:?}"));
            match (&alone, &whole) {
                (Some(a), Ok(w)) => assert_eq!(a, w, "{line}"),
                (None, Ok(w)) => assert!(!w.starts_with("Cli { command: Run"), "{line}: {w}"),
                (None, Err(_)) => {}
                (Some(a), Err(e)) => panic!("{line}: run alone took {a}, the whole says {e}"),
            }
        }
        // Every valid run above was taken by `run` alone.
        let taken = lines[..12]
            .iter()
            .filter(|l| {
                Cli::run_alone(&l.split(' ').map(OsString::from).collect::<Vec<_>>()).is_some()
            })
            .count();
        assert_eq!(taken, 12);
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("0.5").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("2h").unwrap(), Duration::from_secs(7200));
        assert!(parse_duration("").is_err());
        assert!(parse_duration("abc").is_err());
        assert!(parse_duration("-1").is_err());
        assert!(parse_duration("1.2.3").is_err());
        assert_eq!(parse_duration("1e-3").unwrap(), Duration::from_millis(1));
        assert_eq!(parse_duration("1.5m").unwrap(), Duration::from_secs(90));
        assert_eq!(
            parse_duration(".0000000001").unwrap(),
            Duration::from_nanos(1)
        );
        assert_eq!(
            parse_duration("9223372036854775808d").unwrap(),
            crate::gnu::MAX_DURATION
        );
        assert!(parse_duration("42D").is_err());
    }

    #[test]
    fn signal_zero_is_a_silent_deadline_for_the_library() {
        let spec = |line: &str| {
            let args = line.split(' ');
            let Cmd::Run(opts) = Cli::try_parse_from(args).unwrap().command else {
                panic!("not run")
            };
            opts.spec()
        };
        let s = spec("corral run -t 1 -s 0 -k 2 x");
        // The library gets the deadline itself, not the deadline plus the
        // grace: it decides that the run timed out.
        assert_eq!(s.timeout_ms, Some(Duration::from_secs(1)));
        assert_eq!(s.grace_ms, Some(Duration::from_secs(2)));
        assert!(s.silent_deadline);
        // Without -k, -s's 10 s; without a time limit nothing is silent.
        let s = spec("corral run -t 1 -s 0 x");
        assert_eq!(s.grace_ms, Some(DEFAULT_SIGNAL_GRACE));
        assert!(!spec("corral run -s 0 x").silent_deadline);
        assert!(!spec("corral run -t 1 -s TERM x").silent_deadline);
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_bytes("1024").unwrap(), 1024);
        assert_eq!(parse_bytes("64M").unwrap(), 64 << 20);
        assert_eq!(parse_bytes("2g").unwrap(), 2 << 30);
        assert!(parse_bytes("x").is_err());
        assert!(parse_bytes("12Q").is_err());
    }

    #[test]
    fn cli_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
