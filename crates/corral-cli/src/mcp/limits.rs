//! A request's arguments, checked against the server's limits: what runs,
//! where, for how long. Pure: no process is started here.

use std::path::{Path, PathBuf};
use std::time::Duration;

use corral::document::{RunSpec, SandboxSpec};
use corral::LeftoverPolicy;
use serde_json::{Map, Value};

use super::McpOpts;

/// The limits given on the command line, the root resolved once.
#[derive(Debug)]
pub struct Limits {
    pub max_runs: usize,
    pub kept: usize,
    pub default_timeout: Duration,
    pub max_timeout: Duration,
    /// Canonical: symlinks resolved.
    pub root: PathBuf,
    pub require_crash_safety: bool,
    /// The server's sandbox, imposed on every run.
    pub sandbox: Option<SandboxSpec>,
}

impl Limits {
    pub fn new(opts: &McpOpts) -> Result<Limits, String> {
        let root = match &opts.root {
            Some(r) => r.clone(),
            None => std::env::current_dir()
                .map_err(|e| format!("cannot read the current directory: {e}"))?,
        };
        let root = root
            .canonicalize()
            .map_err(|e| format!("--root {}: {e}", root.display()))?;
        if !root.is_dir() {
            return Err(format!("--root {}: not a directory", root.display()));
        }
        if opts.max_timeout.is_zero() {
            return Err("--max-timeout must be more than 0".into());
        }
        let default_timeout = opts
            .default_timeout
            .unwrap_or(Duration::from_secs(600).min(opts.max_timeout));
        if default_timeout.is_zero() || default_timeout > opts.max_timeout {
            return Err(format!(
                "--default-timeout {default_timeout:?} must be more than 0 and at most \
                 --max-timeout {:?}",
                opts.max_timeout
            ));
        }
        Ok(Limits {
            max_runs: opts.max_runs as usize,
            kept: opts.max_output_kept,
            default_timeout,
            max_timeout: opts.max_timeout,
            root,
            require_crash_safety: opts.require_crash_safety,
            sandbox: opts.sandbox.policy(),
        })
    }

    /// The run a request asks for, or why it may not run: the spec's
    /// program, environment, directory and timeouts checked against the
    /// server's limits, and the server's own settings imposed (a run's
    /// leftovers die with it, the fixed grace, the kept output, crash
    /// safety when the server requires it).
    pub fn check(&self, a: RunArgs) -> Result<Checked, String> {
        let mut spec = a.spec;
        if spec.command.as_ref().is_some_and(|c| c.trim().is_empty()) {
            return Err("command is empty".into());
        }
        let argv = spec.program_and_args().map_err(|e| e.to_string())?;
        if argv[0].is_empty() {
            return Err("argv must start with a program".into());
        }
        let argv: Vec<String> = argv
            .iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect();
        if argv.iter().any(|s| s.contains('\0')) {
            return Err("argv and command may not contain NUL".into());
        }
        for (k, v) in spec.env.iter().flatten() {
            let (k, v) = (k.to_string_lossy(), v.to_string_lossy());
            if k.is_empty() || k.contains('=') || k.contains('\0') {
                return Err(format!("env: invalid variable name {k:?}"));
            }
            if v.contains('\0') {
                return Err(format!("env: the value of {k} contains NUL"));
            }
        }
        spec.cwd = Some(self.cwd(spec.cwd.as_deref())?);
        let timeout = match spec.timeout_ms {
            None => self.default_timeout,
            Some(d) if d.is_zero() => return Err("timeout_ms must be more than 0".into()),
            Some(d) if d > self.max_timeout => {
                return Err(format!(
                    "timeout_ms {} is more than the server's --max-timeout ({} ms)",
                    d.as_millis(),
                    self.max_timeout.as_millis()
                ))
            }
            Some(d) => d,
        };
        spec.timeout_ms = Some(timeout);
        if spec.idle_timeout_ms.is_some_and(|d| d.is_zero()) {
            return Err("idle_timeout_ms must be more than 0".into());
        }
        // Nothing outlives its run: the server could not name a kept
        // process later, so it could not kill it when it exits.
        spec.leftovers = Some(LeftoverPolicy::Kill);
        spec.grace_ms = Some(KILL_AFTER);
        spec.require_crash_safety |= self.require_crash_safety;
        // The server's sandbox, whatever the request (it cannot give one).
        spec.sandbox = self.sandbox.clone();
        spec.capture_limit = Some(self.kept.saturating_mul(2) as u64);
        Ok(Checked {
            spec,
            argv,
            input: a.input,
        })
    }

    /// `cwd` resolved (symlinks followed) and inside the root; the root
    /// itself when none is given.
    pub fn cwd(&self, cwd: Option<&Path>) -> Result<PathBuf, String> {
        let Some(c) = cwd else {
            return Ok(self.root.clone());
        };
        if c.as_os_str().as_encoded_bytes().contains(&0) {
            return Err("cwd contains NUL".into());
        }
        let joined = self.root.join(c);
        let real = joined
            .canonicalize()
            .map_err(|e| format!("cwd {c:?}: {e}"))?;
        if !real.starts_with(&self.root) {
            return Err(format!(
                "cwd {c:?} resolves to {}, outside the server's root {}",
                real.display(),
                self.root.display()
            ));
        }
        if !real.is_dir() {
            return Err(format!("cwd {c:?}: not a directory"));
        }
        Ok(real)
    }
}

/// The grace between the first signal (a timeout's, or `kill`'s) and SIGKILL.
pub const KILL_AFTER: Duration = Duration::from_secs(2);

/// The fields of a [`RunSpec`] a request may give, in the order the tools
/// declare them.
pub const OFFERED: &[&str] = &[
    "argv",
    "command",
    "cwd",
    "env",
    "env_clear",
    "timeout_ms",
    "idle_timeout_ms",
    "max_output",
    "signal",
    "wait_delay_ms",
    "memory_max",
    "pids_max",
    "containment",
    "require_crash_safety",
];

/// The fields of a [`RunSpec`] a request may not give, and why.
pub const NOT_OFFERED: &[(&str, &str)] = &[
    ("grace_ms", "the server's fixed 2 s grace bounds how long a timeout or kill takes to answer"),
    ("silent_deadline", "GNU timeout's -s 0, a command-line compatibility; a timeout here always signals the tree"),
    ("confirm_window_ms", "the library's window keeps the server's answers bounded"),
    ("capture_limit", "set by the server from --max-output-kept"),
    ("leftovers", "always kill: the server could not name a kept process later, so it could not kill it when it exits"),
    ("pty", "the output comes back as text; a terminal's echo and line discipline would garble it"),
    ("executable", "process set-up for programs embedding corral (subprocess's keywords); a request does not change how the server starts programs"),
    ("new_session", "process set-up for programs embedding corral"),
    ("close_other_fds", "process set-up for programs embedding corral"),
    ("restore_signals", "process set-up for programs embedding corral"),
    ("sigpipe_ignored", "process set-up for programs embedding corral"),
    ("uid", "a request does not change whom the server runs programs as"),
    ("gid", "a request does not change whom the server runs programs as"),
    ("groups", "a request does not change whom the server runs programs as"),
    ("umask", "process set-up for programs embedding corral"),
    ("sandbox", "the server's own --sandbox (and its --allow-write, --deny-read, --network) applies to every run it starts: a request can neither loosen nor change it, and an agent is not asked to confine itself"),
];

/// The arguments of `run` and `start`: the offered fields of a spec, and
/// the data for stdin.
#[derive(Debug)]
pub struct RunArgs {
    pub spec: RunSpec,
    pub input: Option<String>,
}

impl RunArgs {
    /// The arguments, read strictly: an unknown key, or a spec field the
    /// server does not offer, is an error naming it.
    pub fn parse(args: Map<String, Value>) -> Result<RunArgs, String> {
        let mut args = args;
        let input = match args.remove("input") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s),
            Some(other) => return Err(format!("input must be a string, not {other}")),
        };
        for k in args.keys() {
            if OFFERED.contains(&k.as_str()) {
                continue;
            }
            return Err(match NOT_OFFERED.iter().find(|(f, _)| f == k) {
                Some((_, why)) => format!("`{k}` is not offered by this server: {why}"),
                None => format!(
                    "unknown field `{k}`, expected one of {}, input",
                    OFFERED.join(", ")
                ),
            });
        }
        let spec: RunSpec =
            serde_json::from_value(Value::Object(args)).map_err(|e| e.to_string())?;
        Ok(RunArgs { spec, input })
    }
}

/// A checked run: its spec, ready for [`corral::Command::from_spec`].
#[derive(Debug)]
pub struct Checked {
    pub spec: RunSpec,
    /// The program and its arguments, as `list` shows them.
    pub argv: Vec<String>,
    pub input: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(root: &Path) -> Limits {
        Limits {
            max_runs: 2,
            kept: 1024,
            default_timeout: Duration::from_secs(5),
            max_timeout: Duration::from_secs(60),
            root: root.canonicalize().unwrap(),
            require_crash_safety: false,
            sandbox: None,
        }
    }

    fn args(v: serde_json::Value) -> Result<Checked, String> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::os::unix::fs::symlink("/", dir.path().join("out")).unwrap();
        let Value::Object(m) = v else {
            return Err("not an object".into());
        };
        limits(dir.path()).check(RunArgs::parse(m)?)
    }

    #[test]
    fn argv_or_command() {
        use serde_json::json;
        assert_eq!(args(json!({"argv": ["true"]})).unwrap().argv, ["true"]);
        assert_eq!(
            args(json!({"command": "echo hi"})).unwrap().argv,
            ["/bin/sh", "-c", "echo hi"]
        );
        assert!(args(json!({})).is_err());
        assert!(args(json!({"argv": []})).is_err());
        assert!(args(json!({"argv": ["a"], "command": "b"})).is_err());
        assert!(args(json!({"argv": "true"})).is_err());
        assert!(args(json!({"argv": ["true"], "bogus": 1})).is_err());
        assert!(args(json!({"argv": ["a\0b"]})).is_err());
        assert!(args(json!({"argv": ["true"], "env": {"A=B": "x"}})).is_err());
        // A spec field the server does not offer is named, with why.
        let e = args(json!({"argv": ["true"], "uid": 0})).unwrap_err();
        assert!(e.contains("`uid` is not offered"), "{e}");
        let e = args(json!({"argv": ["true"], "bogus": 1})).unwrap_err();
        assert!(e.contains("unknown field `bogus`"), "{e}");
    }

    /// The server's own settings are imposed whatever the request says.
    #[test]
    fn the_servers_settings_are_imposed() {
        use serde_json::json;
        let s = args(json!({"argv": ["true"], "signal": "INT"})).unwrap();
        assert_eq!(s.spec.leftovers, Some(LeftoverPolicy::Kill));
        assert_eq!(s.spec.grace_ms, Some(KILL_AFTER));
        assert_eq!(s.spec.capture_limit, Some(2048));
        assert_eq!(s.spec.signal, Some(corral::Signal::INT));
    }

    /// The server's sandbox is every run's; a request cannot give one
    /// (nor turn it off).
    #[test]
    fn the_servers_sandbox_is_every_runs() {
        use serde_json::json;
        let dir = tempfile::tempdir().unwrap();
        let mut l = limits(dir.path());
        let policy = SandboxSpec {
            allow_write: vec!["/tmp".into()],
            network: corral::Network::Loopback,
            ..SandboxSpec::default()
        };
        l.sandbox = Some(policy.clone());
        let parse = |v: Value| RunArgs::parse(v.as_object().unwrap().clone());
        let s = l.check(parse(json!({"argv": ["true"]})).unwrap()).unwrap();
        assert_eq!(s.spec.sandbox.as_ref(), Some(&policy));
        for off in [json!(false), json!(null), json!({"network": "host"})] {
            let e = parse(json!({"argv": ["true"], "sandbox": off})).unwrap_err();
            assert!(e.contains("`sandbox` is not offered"), "{e}");
        }
        l.sandbox = None;
        let s = l.check(parse(json!({"argv": ["true"]})).unwrap()).unwrap();
        assert_eq!(s.spec.sandbox, None);
    }

    /// Every field of the spec is offered or not, never both.
    #[test]
    fn every_spec_field_is_offered_or_says_why_not() {
        let schema = corral::document::run_spec_schema();
        let props = schema["properties"].as_object().unwrap();
        for k in props.keys() {
            let offered = OFFERED.contains(&k.as_str());
            let not = NOT_OFFERED.iter().any(|(f, _)| f == k);
            assert!(offered != not, "{k}: offered {offered}, not offered {not}");
        }
        assert_eq!(OFFERED.len() + NOT_OFFERED.len(), props.len());
    }

    #[test]
    fn timeouts() {
        use serde_json::json;
        let s = args(json!({"argv": ["true"]})).unwrap();
        assert_eq!(s.spec.timeout_ms, Some(Duration::from_secs(5)));
        let s = args(json!({"argv": ["true"], "timeout_ms": 60000})).unwrap();
        assert_eq!(s.spec.timeout_ms, Some(Duration::from_secs(60)));
        assert!(args(json!({"argv": ["true"], "timeout_ms": 60001})).is_err());
        assert!(args(json!({"argv": ["true"], "timeout_ms": 0})).is_err());
        assert!(args(json!({"argv": ["true"], "timeout_ms": -1})).is_err());
        assert!(args(json!({"argv": ["true"], "idle_timeout_ms": 0})).is_err());
    }

    #[test]
    fn cwd_stays_inside_the_root() {
        use serde_json::json;
        let s = args(json!({"argv": ["true"], "cwd": "sub"})).unwrap();
        assert!(s.spec.cwd.unwrap().ends_with("sub"));
        assert!(args(json!({"argv": ["true"], "cwd": "out"})).is_err());
        assert!(args(json!({"argv": ["true"], "cwd": ".."})).is_err());
        assert!(args(json!({"argv": ["true"], "cwd": "/"})).is_err());
        assert!(args(json!({"argv": ["true"], "cwd": "missing"})).is_err());
    }
}
