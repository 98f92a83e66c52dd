//! A request's arguments, checked against the server's limits: what runs,
//! where, for how long. Pure: no process is started here.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

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
        })
    }

    /// The run a request asks for, or why it may not run.
    pub fn check(&self, a: RunArgs) -> Result<RunSpec, String> {
        let argv = match (a.argv, a.command) {
            (Some(_), Some(_)) => return Err("give either argv or command, not both".into()),
            (None, None) => return Err("give argv (an array) or command (a string)".into()),
            (Some(argv), None) => {
                if argv.is_empty() || argv[0].is_empty() {
                    return Err("argv must start with a program".into());
                }
                argv
            }
            (None, Some(c)) => {
                if c.trim().is_empty() {
                    return Err("command is empty".into());
                }
                vec!["/bin/sh".into(), "-c".into(), c]
            }
        };
        if argv.iter().any(|s| s.contains('\0')) {
            return Err("argv and command may not contain NUL".into());
        }
        let mut env = Vec::new();
        for (k, v) in a.env.unwrap_or_default() {
            if k.is_empty() || k.contains('=') || k.contains('\0') {
                return Err(format!("env: invalid variable name {k:?}"));
            }
            if v.contains('\0') {
                return Err(format!("env: the value of {k} contains NUL"));
            }
            env.push((k, v));
        }
        let cwd = self.cwd(a.cwd.as_deref())?;
        let timeout = match a.timeout_ms {
            None => self.default_timeout,
            Some(0) => return Err("timeout_ms must be at least 1".into()),
            Some(ms) => {
                let d = Duration::from_millis(ms);
                if d > self.max_timeout {
                    return Err(format!(
                        "timeout_ms {ms} is more than the server's --max-timeout ({} ms)",
                        self.max_timeout.as_millis()
                    ));
                }
                d
            }
        };
        let idle = match a.idle_timeout_ms {
            None => None,
            Some(0) => return Err("idle_timeout_ms must be at least 1".into()),
            Some(ms) => Some(Duration::from_millis(ms)),
        };
        Ok(RunSpec {
            argv,
            cwd,
            env,
            timeout,
            idle,
            max_output: a.max_output,
            input: a.input,
        })
    }

    /// `cwd` resolved (symlinks followed) and inside the root; the root
    /// itself when none is given.
    fn cwd(&self, cwd: Option<&str>) -> Result<PathBuf, String> {
        let Some(c) = cwd else {
            return Ok(self.root.clone());
        };
        if c.contains('\0') {
            return Err("cwd contains NUL".into());
        }
        let joined = self.root.join(Path::new(c));
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

/// The arguments of `run` and `start`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunArgs {
    argv: Option<Vec<String>>,
    command: Option<String>,
    cwd: Option<String>,
    env: Option<BTreeMap<String, String>>,
    timeout_ms: Option<u64>,
    idle_timeout_ms: Option<u64>,
    max_output: Option<u64>,
    input: Option<String>,
}

/// A checked run.
#[derive(Debug)]
pub struct RunSpec {
    pub argv: Vec<String>,
    pub cwd: PathBuf,
    pub env: Vec<(String, String)>,
    pub timeout: Duration,
    pub idle: Option<Duration>,
    pub max_output: Option<u64>,
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
        }
    }

    fn args(v: serde_json::Value) -> Result<RunSpec, String> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::os::unix::fs::symlink("/", dir.path().join("out")).unwrap();
        let a: RunArgs = serde_json::from_value(v).map_err(|e| e.to_string())?;
        limits(dir.path()).check(a)
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
    }

    #[test]
    fn timeouts() {
        use serde_json::json;
        let s = args(json!({"argv": ["true"]})).unwrap();
        assert_eq!(s.timeout, Duration::from_secs(5));
        let s = args(json!({"argv": ["true"], "timeout_ms": 60000})).unwrap();
        assert_eq!(s.timeout, Duration::from_secs(60));
        assert!(args(json!({"argv": ["true"], "timeout_ms": 60001})).is_err());
        assert!(args(json!({"argv": ["true"], "timeout_ms": 0})).is_err());
        assert!(args(json!({"argv": ["true"], "timeout_ms": -1})).is_err());
        assert!(args(json!({"argv": ["true"], "idle_timeout_ms": 0})).is_err());
    }

    #[test]
    fn cwd_stays_inside_the_root() {
        use serde_json::json;
        let s = args(json!({"argv": ["true"], "cwd": "sub"})).unwrap();
        assert!(s.cwd.ends_with("sub"));
        assert!(args(json!({"argv": ["true"], "cwd": "out"})).is_err());
        assert!(args(json!({"argv": ["true"], "cwd": ".."})).is_err());
        assert!(args(json!({"argv": ["true"], "cwd": "/"})).is_err());
        assert!(args(json!({"argv": ["true"], "cwd": "missing"})).is_err());
    }
}
