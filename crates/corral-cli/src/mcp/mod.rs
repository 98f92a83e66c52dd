//! `corral mcp`: a Model Context Protocol server over stdio.
//!
//! One concern per file: `server` speaks the protocol (through the official
//! SDK, `rmcp`), `tools` declares and carries out the tools (`sessions` the session
//! ones), `runs` keeps
//! every run the server started (and kills them all when it ends), `limits`
//! checks a request against the limits given on the command line.
//!
//! Unix only: the runs are awaited through the library's async API on one
//! tokio reactor thread, as `corral batch` does.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

#[cfg(unix)]
pub(crate) mod limits;
#[cfg(unix)]
mod runs;
#[cfg(unix)]
mod server;
#[cfg(unix)]
mod sessions;
#[cfg(unix)]
pub(crate) mod tools;

/// `corral mcp`'s options: the limits every request is held to.
#[derive(Args, Debug, Clone)]
#[command(after_long_help = MCP_AFTER_HELP)]
pub struct McpOpts {
    /// Most runs at once (`run` and `start` together); a request past it is
    /// refused with a tool error.
    #[arg(long, value_name = "N", default_value_t = 16,
          value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub max_runs: u32,

    /// Output kept per stream of each run: the tail of a `run`'s stdout and
    /// stderr, and the unread output of a `start`ed run (older unread bytes
    /// are dropped and counted).
    #[arg(long, value_name = "BYTES", default_value = "1M", value_parser = parse_kept)]
    pub max_output_kept: usize,

    /// The deadline of a run whose request gives no `timeout_ms` [default:
    /// 10m, or --max-timeout when that is shorter].
    #[arg(long, value_name = "DURATION", value_parser = crate::duration::parse_duration)]
    pub default_timeout: Option<Duration>,

    /// The longest `timeout_ms` a request may ask for (longer is refused).
    #[arg(long, value_name = "DURATION", default_value = "24h",
          value_parser = crate::duration::parse_duration)]
    pub max_timeout: Duration,

    /// Working directories must resolve (symlinks followed) inside DIR;
    /// a relative `cwd` is taken from DIR. Default: the directory corral
    /// mcp was started in.
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,

    /// Refuse to run a command whose tree would outlive the server's own
    /// death (the crash-safety keeper could not be started). Without it such
    /// a run goes ahead and its result says crash_safe false.
    #[arg(long)]
    pub require_crash_safety: bool,

    /// Confine every run the server starts (`corral run --sandbox`): the
    /// policy of --sandbox, --allow-write, --deny-read and --network
    /// applies to every `run` and `start`; a request cannot loosen or
    /// change it. A run whose sandbox cannot be enforced here does not
    /// start (a tool error naming what is missing).
    #[command(flatten)]
    pub sandbox: crate::sandbox_flags::SandboxOpts,
}

const MCP_AFTER_HELP: &str = "\
Tools (arguments; every run is contained and killed as `corral run` does):
  run    argv (array) or command (a /bin/sh -c string), cwd, env (object of
         additions), env_clear, timeout_ms, idle_timeout_ms, max_output,
         signal, wait_delay_ms, memory_max, pids_max, containment,
         require_crash_safety (the fields of docs/run-spec-schema.json a
         request may give), input; returns
         outcome, exit_code, signal, stdout, stderr (tails), stdout_bytes,
         stderr_bytes, killed, kept, duration_ms
  start  the same arguments; a background run: returns id
  read   id [, wait_ms]: output since the last read, running, and the outcome
         fields once it ended
  write  id, data [, eof]: to the run's stdin (eof closes it)
  kill   id [, signal]: the signal (TERM) to the whole tree, SIGKILL 2 s later
  list   every run: id, command, pid, running, outcome
  session_start  cwd, env: a persistent shell session; returns session_id
  session_run    session_id, command, timeout_ms, idle_timeout_ms, max_output:
         one command line in the session's shell state (cwd, variables,
         functions, options carried over), contained and bounded on its own;
         the fields of run plus session_id, jobs, session_ended
  session_close  session_id: kills the session's background jobs

Protocol errors (unknown tool, malformed request) are JSON-RPC errors; a tool
that fails (bad arguments, unknown id, a program that cannot start) returns a
result with isError. When stdin closes (or on SIGTERM, SIGINT, SIGHUP) the
server kills every process it started and exits; if it is killed outright,
the crash-safety keeper kills every tree still running. A run never keeps
leftovers: a detached descendant is killed when its run ends (kept is 0);
a session's background jobs live until session_close or the server's end.

Sandbox (--sandbox): every run may write only under its working directory
(inside --root), a private /tmp and --allow-write paths; reads everything
but --deny-read paths; has the --network given (none by default).

Register with an agent (mcpServers JSON):
  {\"mcpServers\": {\"corral\": {\"command\": \"corral\",
                             \"args\": [\"mcp\", \"--root\", \"/path/to/project\",
                                      \"--sandbox\"]}}}";

fn parse_kept(s: &str) -> Result<usize, String> {
    let n = crate::duration::parse_bytes(s)?;
    if n == 0 {
        return Err("must be at least 1 byte".into());
    }
    // At most 1 GiB per stream: a run keeps two, twice (head and tail of
    // the capture, and the tail returned).
    usize::try_from(n)
        .ok()
        .filter(|&n| n <= 1 << 30)
        .ok_or_else(|| format!("{s:?} is more than 1G"))
}

/// Serves until stdin closes; returns the exit code (0, or 125 when the
/// server could not start).
#[cfg(unix)]
pub fn main(opts: McpOpts) -> i32 {
    server::serve(opts)
}

/// Not available: the runs are awaited through the async API (Unix).
#[cfg(not(unix))]
pub fn main(_opts: McpOpts) -> i32 {
    eprintln!("corral: mcp is not available on this platform");
    crate::exit::CORRAL_FAILED
}

/// The spec a `run`/`start` request's arguments give, before the server's
/// checks (the test of every spec field's reach, `crate::surfaces`).
#[cfg(all(test, unix))]
pub(crate) fn request_spec(
    args: serde_json::Map<String, serde_json::Value>,
) -> Result<corral::document::RunSpec, String> {
    limits::RunArgs::parse(args).map(|a| a.spec)
}

/// The spec fields a request may not give, and why.
#[cfg(all(test, unix))]
pub(crate) const NOT_OFFERED: &[(&str, &str)] = limits::NOT_OFFERED;
