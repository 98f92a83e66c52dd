//! The shapes of the package's public API — options, the result, the report
//! — declared once, here, so that `napi build` generates their TypeScript
//! declarations (native.d.ts) from the Rust side; index.d.ts re-exports them
//! and declares the functions that take and return them. index.js checks
//! user input against the same names (an unknown option is a TypeError).
//!
//! These structs only describe values JavaScript builds and reads; nothing
//! in Rust converts them (the native entry point takes [`StartOptions`],
//! already checked, and returns the report as the library's JSON).
//!
//! [`StartOptions`]: crate::StartOptions

#![allow(dead_code)]

use napi_derive::napi;

/// Options of `run()` (and, where they apply, of `spawn()`, `execFile()` and
/// `exec()`).
#[napi(object)]
pub struct RunOptions {
    /// Milliseconds; 0 or absent: no deadline. At the deadline the whole
    /// tree is terminated (outcome `timed_out`).
    pub timeout: Option<f64>,
    /// The first signal sent to the tree (a name such as "SIGTERM", or a
    /// number). Default: SIGKILL at once (`run`, `spawn`); "SIGTERM"
    /// (`execFile`, `exec`).
    #[napi(ts_type = "NodeJS.Signals | number")]
    pub kill_signal: Option<String>,
    /// Milliseconds of grace between `killSignal` and SIGKILL. Default with
    /// a `killSignal`: 10 000 (`run`, `spawn`), 2 000 (`execFile`, `exec`).
    pub kill_after: Option<f64>,
    /// Milliseconds without output on stdout or stderr after which the tree
    /// is terminated like at the deadline (outcome `timed_out`,
    /// `timeoutKind` "idle"). The timer starts at the spawn and runs until
    /// the run ends, the wait delay included; any output corral reads
    /// restarts it (output inherited or ignored cannot: with both streams
    /// so, the run fails to start). 0 or absent: none.
    pub idle_timeout: Option<f64>,
    /// Bytes stdout and stderr may carry together: byte `maxOutput + 1`
    /// terminates the tree (outcome `output_limit`); no more than
    /// `maxOutput` bytes are kept or passed on, and the report's byte
    /// counts say how many the program wrote. Absent: no cap.
    pub max_output: Option<f64>,
    /// Milliseconds descendants may hold stdout/stderr open after the root
    /// exited before they are killed (outcome `output_held`). Default 2 000.
    pub wait_delay: Option<f64>,
    /// Standard input: these bytes, then end of file (absent: /dev/null).
    #[napi(ts_type = "string | Buffer | Uint8Array")]
    pub input: Option<String>,
    /// Working directory.
    #[napi(ts_type = "string | URL")]
    pub cwd: Option<String>,
    /// The environment (replaces the parent's, as in child_process).
    #[napi(ts_type = "NodeJS.ProcessEnv")]
    pub env: Option<String>,
    /// "utf8" (default) or any Buffer encoding: strings; "buffer" or null:
    /// Buffers.
    #[napi(ts_type = "BufferEncoding | 'buffer' | null")]
    pub encoding: Option<String>,
    /// Bytes kept per captured stream (`run`: head and tail kept, the middle
    /// counted; `execFile`/`exec`: exceeding it kills the tree with
    /// ERR_CHILD_PROCESS_STDIO_MAXBUFFER). Default 1 MiB.
    pub max_buffer: Option<f64>,
    /// Aborting it cancels the run: the tree is killed (`run`: outcome
    /// `cancelled`; `execFile`: an AbortError).
    #[napi(ts_type = "AbortSignal")]
    pub signal: Option<String>,
    /// How the tree is contained. Default "auto": what the library picks.
    #[napi(
        ts_type = "'auto' | 'cgroup' | 'pid-namespace' | 'subreaper' | 'process-group' | 'job-object'"
    )]
    pub containment: Option<String>,
    /// What happens to processes still running after the root exited and
    /// its output was drained. Default "keep-on-success".
    #[napi(ts_type = "'keep-on-success' | 'kill' | 'keep'")]
    pub leftovers: Option<String>,
    /// Refuse to run (outcome `containment_failed`) unless the tree would be
    /// killed even if Node died during the run.
    pub require_crash_safety: Option<bool>,
    /// cgroup tier: the tree's memory limit in bytes.
    pub memory_max: Option<f64>,
    /// cgroup tier: the tree's process count limit.
    pub pids_max: Option<f64>,
    /// Confine the tree: `true` for the default policy (everything
    /// readable; writes only in `cwd`, a private /tmp and the usual
    /// devices; no network), or a policy. Where it cannot be enforced,
    /// nothing runs: outcome `sandbox_failed` (`execFile`/`exec`: an error
    /// with code `ERR_CORRAL_SANDBOX`).
    #[napi(ts_type = "boolean | SandboxOptions")]
    pub sandbox: Option<String>,
    /// Called with each chunk of stdout as it arrives (Buffers, in order;
    /// together exactly the stream). `run` only.
    #[napi(ts_type = "(chunk: Buffer) => void")]
    pub on_stdout: Option<String>,
    /// Called with each chunk of stderr as it arrives. `run` only.
    #[napi(ts_type = "(chunk: Buffer) => void")]
    pub on_stderr: Option<String>,
}

/// A sandbox policy (`sandbox` option).
#[napi(object)]
pub struct SandboxOptions {
    /// Paths (they must exist) the tree may also write under, beside its
    /// working directory, a private /tmp and the usual devices. Relative
    /// ones are taken from `process.cwd()`.
    pub allow_write: Option<Vec<String>>,
    /// Paths (they must exist) the tree may not read, list or execute,
    /// nor anything under them.
    pub deny_read: Option<Vec<String>>,
    /// "none" (default: no TCP, UDP or host unix socket), "loopback" (a
    /// private loopback, nothing of the host's) or "host" (not confined).
    #[napi(ts_type = "'none' | 'loopback' | 'host'")]
    pub network: Option<String>,
}

/// Options of `spawn()`: those of `run()` (but `input`, `onStdout`,
/// `onStderr`), plus how each stream is connected.
#[napi(object)]
pub struct SpawnStdio {
    /// "pipe" (default: `p.stdin` is a Writable), "ignore" (/dev/null) or
    /// "inherit".
    #[napi(ts_type = "'pipe' | 'ignore' | 'inherit'")]
    pub stdin: Option<String>,
    /// "pipe" (default: `p.stdout` is a Readable), "ignore" or "inherit".
    #[napi(ts_type = "'pipe' | 'ignore' | 'inherit'")]
    pub stdout: Option<String>,
    /// "pipe" (default: `p.stderr` is a Readable), "ignore" or "inherit".
    #[napi(ts_type = "'pipe' | 'ignore' | 'inherit'")]
    pub stderr: Option<String>,
}

/// Options `execFile()`/`exec()` take beyond those of `run()`.
#[napi(object)]
pub struct ExecExtra {
    /// Run through a shell: true is "/bin/sh", a string names the shell
    /// (`exec` always uses one).
    #[napi(ts_type = "boolean | string")]
    pub shell: Option<String>,
    /// Accepted for child_process compatibility; no effect.
    pub windows_hide: Option<bool>,
    /// Accepted for child_process compatibility; no effect.
    pub windows_verbatim_arguments: Option<bool>,
}

/// What happened to one run: convenience fields, each derived from
/// `report`, the library's own report.
#[napi(object)]
pub struct RunResult {
    /// The outcome, the library's name for it.
    #[napi(
        ts_type = "'exited' | 'signaled' | 'timed_out' | 'cancelled' | 'output_held' | 'output_limit' | 'spawn_failed' | 'containment_failed' | 'sandbox_failed' | 'cleanup_failed'"
    )]
    pub outcome: String,
    /// Which limit ended a `timed_out` run: "deadline" (`timeout`) or
    /// "idle" (`idleTimeout`); null on any other outcome (`output_limit`
    /// included).
    #[napi(ts_type = "'deadline' | 'idle' | null")]
    pub timeout_kind: String,
    /// The root's exit code, or null (as `report.exit_code`: also after a
    /// timeout or with held output).
    #[napi(ts_type = "number | null")]
    pub exit_code: i32,
    /// The name of the signal the root died of ("SIGKILL"), or null.
    #[napi(ts_type = "string | null")]
    pub signal: String,
    /// Captured standard output (string, or Buffer with encoding "buffer").
    #[napi(ts_type = "string | Buffer")]
    pub stdout: String,
    /// Captured standard error.
    #[napi(ts_type = "string | Buffer")]
    pub stderr: String,
    /// Processes other than the root killed by corral.
    pub killed: u32,
    /// Processes other than the root left running by the leftovers policy.
    pub kept: u32,
    /// From spawn to the end of cleanup.
    pub duration_ms: f64,
    /// The containment used (the report's names), or null.
    #[napi(
        ts_type = "'process_group' | 'cgroup' | 'subreaper' | 'pid_namespace' | 'job_object' | null"
    )]
    pub containment: String,
    /// Whether the tree would have been killed had Node died during the run
    /// (null when it did not start).
    #[napi(ts_type = "boolean | null")]
    pub crash_safe: bool,
    /// The root's pid (null when it did not start).
    #[napi(ts_type = "number | null")]
    pub pid: u32,
    /// What kept the run from being an ordinary exit, or null.
    #[napi(ts_type = "string | null")]
    pub error: String,
    /// Every cleanup step that failed, in order, each once (as
    /// `report.cleanup_errors`); empty unless the outcome is
    /// `cleanup_failed`.
    #[napi(
        ts_type = "Array<{ step: 'confirm_death' | 'signal' | 'members' | 'wait' | 'release' | 'crash_safety'; error: string; os_error: number | null }>"
    )]
    pub cleanup_errors: Vec<String>,
    /// The full report.
    pub report: Report,
}

/// The library's report (its `serde` serialisation; docs/report-schema.json
/// without `output`, `received_signal`, `corral_exit`).
#[napi(object)]
pub struct Report {
    #[napi(
        js_name = "outcome",
        ts_type = "'exited' | 'signaled' | 'timed_out' | 'cancelled' | 'output_held' | 'output_limit' | 'spawn_failed' | 'containment_failed' | 'sandbox_failed' | 'cleanup_failed'"
    )]
    pub outcome: String,
    #[napi(js_name = "timeout_kind", ts_type = "'deadline' | 'idle' | null")]
    pub timeout_kind: String,
    #[napi(js_name = "exit_code", ts_type = "number | null")]
    pub exit_code: i32,
    #[napi(js_name = "signal", ts_type = "number | null")]
    pub signal: i32,
    #[napi(js_name = "signal_name", ts_type = "string | null")]
    pub signal_name: String,
    #[napi(
        js_name = "containment",
        ts_type = "'process_group' | 'cgroup' | 'subreaper' | 'pid_namespace' | 'job_object' | null"
    )]
    pub containment: String,
    #[napi(js_name = "containment_note", ts_type = "string | null")]
    pub containment_note: String,
    #[napi(js_name = "crash_safe", ts_type = "boolean | null")]
    pub crash_safe: bool,
    #[napi(js_name = "crash_safety_note", ts_type = "string | null")]
    pub crash_safety_note: String,
    #[napi(js_name = "killed")]
    pub killed: u32,
    #[napi(js_name = "kept")]
    pub kept: u32,
    #[napi(js_name = "duration_ms")]
    pub duration_ms: f64,
    #[napi(js_name = "stdout_bytes", ts_type = "number | null")]
    pub stdout_bytes: f64,
    #[napi(js_name = "stderr_bytes", ts_type = "number | null")]
    pub stderr_bytes: f64,
    #[napi(js_name = "error", ts_type = "string | null")]
    pub error: String,
    #[napi(js_name = "pid", ts_type = "number | null")]
    pub pid: u32,
    #[napi(js_name = "signals_sent")]
    pub signals_sent: Vec<i32>,
    #[napi(
        js_name = "cleanup_errors",
        ts_type = "Array<{ step: 'confirm_death' | 'signal' | 'members' | 'wait' | 'release' | 'crash_safety'; error: string; os_error: number | null }>"
    )]
    pub cleanup_errors: Vec<String>,
    #[napi(js_name = "survivors")]
    pub survivors: Vec<u32>,
    #[napi(
        js_name = "timings_ms",
        ts_type = "{ spawn: number; root_exit: number | null; output_closed: number | null; cleanup_done: number } | null"
    )]
    pub timings_ms: String,
    #[napi(
        js_name = "usage",
        ts_type = "{ cpu_user_ms: number | null; cpu_system_ms: number | null; memory_peak: number | null; pids_peak: number | null } | null"
    )]
    pub usage: String,
    #[napi(js_name = "limits_hit", ts_type = "Array<'memory' | 'pids'>")]
    pub limits_hit: Vec<String>,
}
