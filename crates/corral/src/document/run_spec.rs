//! The request as a document: every option of a run a front end can set,
//! as plain values ([`RunSpec`]), and the one mapping from it onto a
//! [`Command`] ([`Command::from_spec`], [`Command::apply`]). The command
//! line's `run` options, a batch task, the MCP `run`/`start` arguments and
//! the Python and Node keywords are each turned into a `RunSpec` in one
//! place; docs/run-spec-schema.json is generated from it (feature
//! `schema`: [`run_spec_schema`]).
//!
//! Not in it: where the streams go and what stdin holds (files, pipes,
//! callbacks and bytes are each surface's own), the cancel token, the
//! line callback, an absolute deadline.
//!
//! Units are in the names: durations are milliseconds (`*_ms`, a number,
//! fractions allowed), sizes are bytes (an integer).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::{
    Command, ContainmentChoice, LeftoverPolicy, Mechanism, Network, PtySize, Sandbox, Signal,
};

/// The shell a [`RunSpec::command`] runs under: `/bin/sh -c COMMAND` (`sh`
/// from `PATH` where there is no `/bin`).
#[cfg(unix)]
pub const SHELL: &str = "/bin/sh";
/// The shell a [`RunSpec::command`] runs under.
#[cfg(not(unix))]
pub const SHELL: &str = "sh";

/// Every option of a run a front end can set. Absent (`None`, `false`)
/// means the library's default ([`Command::new`]); each front end fills in
/// its own defaults before the mapping.
///
/// ```
/// # #[cfg(feature = "serde")] {
/// let spec: corral::document::RunSpec = serde_json::from_str(
///     r#"{"argv": ["make", "test"], "timeout_ms": 60000, "memory_max": 1073741824}"#,
/// ).unwrap();
/// let cmd = corral::Command::from_spec(&spec).unwrap();
/// # let _ = cmd; }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RunSpec {
    /// The program and its arguments (no shell; looked up in `PATH` unless
    /// it holds a path separator). Exactly one of `argv` and `command`.
    /// Rust callers may give any bytes on Unix; JSON holds strings.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "os_list")]
    #[cfg_attr(
        feature = "schema",
        schemars(with = "Option<Vec<String>>", length(min = 1))
    )]
    pub argv: Option<Vec<OsString>>,
    /// A shell command line, run as `/bin/sh -c COMMAND`. Exactly one of
    /// `argv` and `command`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// The program that runs instead of `argv[0]`, which it still sees as
    /// its `argv[0]` (`subprocess`'s `executable=`).
    #[serde(default, skip_serializing_if = "Option::is_none", with = "os_one")]
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
    pub executable: Option<OsString>,
    /// The working directory (default: the caller's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
    /// Environment variables set for the program (added to the inherited
    /// environment, or to an empty one with `env_clear`).
    #[serde(default, skip_serializing_if = "Option::is_none", with = "os_map")]
    #[cfg_attr(
        feature = "schema",
        schemars(with = "Option<BTreeMap<String, String>>")
    )]
    pub env: Option<BTreeMap<OsString, OsString>>,
    /// Start from an empty environment instead of the caller's.
    #[serde(default, skip_serializing_if = "is_false")]
    pub env_clear: bool,
    /// The time allowed from the spawn, in milliseconds; then the tree is
    /// terminated (`signal`, `grace_ms`, SIGKILL) and the run is
    /// `timed_out`. 0 is a deadline at the spawn itself (front ends that
    /// read 0 as "no limit" leave it out). Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "millis")]
    #[cfg_attr(feature = "schema", schemars(with = "Option<f64>", range(min = 0)))]
    pub timeout_ms: Option<Duration>,
    /// No output on a stream corral sees for this many milliseconds ends
    /// the run like the deadline (`timed_out`, `timeout_kind` idle).
    /// Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "millis")]
    #[cfg_attr(feature = "schema", schemars(with = "Option<f64>", range(min = 0)))]
    pub idle_timeout_ms: Option<Duration>,
    /// Milliseconds between the first signal and SIGKILL. Default 0:
    /// SIGKILL at once.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "millis")]
    #[cfg_attr(feature = "schema", schemars(with = "Option<f64>", range(min = 0)))]
    pub grace_ms: Option<Duration>,
    /// The first signal of a termination when there is a grace: a name
    /// (`"TERM"`, `"SIGINT"`, `"RTMIN+3"`) or a number. Default TERM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(with = "Option<SignalName>"))]
    pub signal: Option<Signal>,
    /// Send nothing when the deadline (or the idle timeout) fires: the run
    /// is `timed_out` from then on, and SIGKILL follows after `grace_ms`
    /// if anything is left (GNU `timeout -s 0`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub silent_deadline: bool,
    /// After the root exits, how many milliseconds descendants may hold
    /// the captured output before they are killed (`output_held`).
    /// Default 2000.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "millis")]
    #[cfg_attr(feature = "schema", schemars(with = "Option<f64>", range(min = 0)))]
    pub wait_delay_ms: Option<Duration>,
    /// After the final SIGKILL, how many milliseconds to wait for the tree
    /// to be confirmed gone before reporting survivors. Default 1000.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "millis")]
    #[cfg_attr(feature = "schema", schemars(with = "Option<f64>", range(min = 0)))]
    pub confirm_window_ms: Option<Duration>,
    /// The most bytes stdout and stderr may carry together; one more ends
    /// the run (`output_limit`). Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output: Option<u64>,
    /// Bytes kept per captured stream (half head, half tail). Default 16
    /// MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capture_limit: Option<u64>,
    /// What happens to descendants still running after the root exited:
    /// `keep-on-success` (the default), `kill` or `keep`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(with = "Option<LeftoversName>"))]
    pub leftovers: Option<LeftoverPolicy>,
    /// The containment tier: `auto` (the default) or exactly one of
    /// `cgroup`, `pid-namespace`, `subreaper`, `process-group`,
    /// `job-object` (`_` for `-` too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub containment: Option<Containment>,
    /// Fail rather than run without crash safety (the tree killed even if
    /// corral itself dies).
    #[serde(default, skip_serializing_if = "is_false")]
    pub require_crash_safety: bool,
    /// Cap the whole tree's memory, in bytes (needs a cgroup).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_max: Option<u64>,
    /// Cap the processes alive at once in the tree (needs a cgroup).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(range(min = 1)))]
    pub pids_max: Option<u64>,
    /// Run on a new pseudo-terminal of this size (Unix).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pty: Option<PtySpec>,
    /// Start the program in a new session (`setsid`; Unix).
    #[serde(default, skip_serializing_if = "is_false")]
    pub new_session: bool,
    /// Close every descriptor above 2 at exec but these (Linux).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub close_other_fds: Option<Vec<i32>>,
    /// Reset SIGXFSZ to its default action in the program (Unix).
    #[serde(default, skip_serializing_if = "is_false")]
    pub restore_signals: bool,
    /// Start the program with SIGPIPE ignored (Unix).
    #[serde(default, skip_serializing_if = "is_false")]
    pub sigpipe_ignored: bool,
    /// Run as this user id (Unix).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    /// Run with this group id (Unix).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gid: Option<u32>,
    /// Set these supplementary groups (Linux).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub groups: Option<Vec<u32>>,
    /// The program's file mode creation mask (Unix).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub umask: Option<u32>,
    /// Confine the tree (the library's `Sandbox`): `true` for the default policy
    /// (everything readable; writes only in the working directory, a
    /// private /tmp and the usual devices; no network), an object for
    /// another one; `false`, null or absent: no sandbox. Where the policy
    /// cannot be enforced the run does not start (`sandbox_failed`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "sandbox_field"
    )]
    #[cfg_attr(feature = "schema", schemars(with = "Option<SandboxField>"))]
    pub sandbox: Option<SandboxSpec>,
}

/// A sandbox policy as a document: [`Sandbox`]'s fields.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SandboxSpec {
    /// Paths (each must exist) the tree may also write under, beside its
    /// working directory, its private /tmp and the usual devices.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_write: Vec<PathBuf>,
    /// Paths (each must exist) the tree may not read, list or execute,
    /// nor anything under them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny_read: Vec<PathBuf>,
    /// `none` (the default: no network), `loopback` (a private loopback,
    /// nothing of the host's) or `host` (not confined).
    #[serde(default)]
    #[cfg_attr(feature = "schema", schemars(with = "NetworkName"))]
    pub network: Network,
}

impl SandboxSpec {
    /// The policy's paths that do not exist (a policy naming one is a
    /// usage error: nothing runs), as `allow_write`/`deny_read` and the
    /// path.
    pub fn missing_paths(&self) -> Vec<(&'static str, &std::path::Path)> {
        let allow = self.allow_write.iter().map(|p| ("allow_write", p));
        let deny = self.deny_read.iter().map(|p| ("deny_read", p));
        allow
            .chain(deny)
            .filter(|(_, p)| std::fs::symlink_metadata(p).is_err())
            .map(|(k, p)| (k, p.as_path()))
            .collect()
    }

    /// The library's policy.
    pub fn policy(&self) -> Sandbox {
        let mut s = Sandbox::new().network(self.network);
        for p in &self.allow_write {
            s = s.allow_write(p);
        }
        for p in &self.deny_read {
            s = s.deny_read(p);
        }
        s
    }
}

impl From<&Sandbox> for SandboxSpec {
    fn from(s: &Sandbox) -> SandboxSpec {
        SandboxSpec {
            allow_write: s.allowed_writes().to_vec(),
            deny_read: s.denied_reads().to_vec(),
            network: s.network_policy(),
        }
    }
}

/// The schema of the `sandbox` field: `true`/`false`, or a policy.
#[cfg(feature = "schema")]
#[derive(schemars::JsonSchema)]
#[serde(untagged)]
#[allow(dead_code)]
enum SandboxField {
    /// `true`: the default policy; `false`: no sandbox.
    Default(bool),
    /// A policy.
    Policy(SandboxSpec),
}

/// The schema of a network policy.
#[cfg(feature = "schema")]
#[derive(schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
#[allow(dead_code)]
enum NetworkName {
    /// No network: no TCP or UDP to any address, no host unix socket.
    None,
    /// A private loopback inside the sandbox, nothing of the host's.
    Loopback,
    /// Not confined.
    Host,
}

/// A pseudo-terminal's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PtySpec {
    /// Columns.
    #[cfg_attr(feature = "schema", schemars(range(min = 1)))]
    pub cols: u16,
    /// Rows.
    #[cfg_attr(feature = "schema", schemars(range(min = 1)))]
    pub rows: u16,
}

/// The containment tier a spec asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum Containment {
    /// The strongest this platform and process can have.
    Auto,
    /// A cgroup v2 (Linux).
    Cgroup,
    /// A PID namespace (Linux).
    #[serde(alias = "pid_namespace")]
    PidNamespace,
    /// A process group with corral as child subreaper (Linux).
    Subreaper,
    /// A process group.
    #[serde(alias = "process_group")]
    ProcessGroup,
    /// A Job Object (Windows).
    #[serde(alias = "job_object")]
    JobObject,
}

impl From<Containment> for ContainmentChoice {
    fn from(c: Containment) -> ContainmentChoice {
        match c {
            Containment::Auto => ContainmentChoice::Auto,
            Containment::Cgroup => ContainmentChoice::Only(Mechanism::Cgroup),
            Containment::PidNamespace => ContainmentChoice::Only(Mechanism::PidNamespace),
            Containment::Subreaper => ContainmentChoice::Only(Mechanism::Subreaper),
            Containment::ProcessGroup => ContainmentChoice::Only(Mechanism::ProcessGroup),
            Containment::JobObject => ContainmentChoice::Only(Mechanism::JobObject),
        }
    }
}

impl From<ContainmentChoice> for Containment {
    fn from(c: ContainmentChoice) -> Containment {
        match c {
            ContainmentChoice::Auto => Containment::Auto,
            ContainmentChoice::Only(Mechanism::Cgroup) => Containment::Cgroup,
            ContainmentChoice::Only(Mechanism::PidNamespace) => Containment::PidNamespace,
            ContainmentChoice::Only(Mechanism::Subreaper) => Containment::Subreaper,
            ContainmentChoice::Only(Mechanism::ProcessGroup) => Containment::ProcessGroup,
            ContainmentChoice::Only(Mechanism::JobObject) => Containment::JobObject,
        }
    }
}

/// The schema of a signal: a name or a number.
#[cfg(feature = "schema")]
#[derive(schemars::JsonSchema)]
#[serde(untagged)]
#[allow(dead_code)]
enum SignalName {
    /// `TERM`, `SIGTERM`, `RTMIN+3`.
    Name(String),
    /// The signal's number.
    Number(u16),
}

/// The schema of a leftovers policy.
#[cfg(feature = "schema")]
#[derive(schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
#[allow(dead_code)]
enum LeftoversName {
    /// Keep them after a clean exit 0; kill them otherwise.
    KeepOnSuccess,
    /// Always kill them.
    Kill,
    /// Keep them after any clean root exit.
    Keep,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// Why a spec cannot be run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SpecError(pub String);

impl RunSpec {
    /// A spec running `argv`.
    pub fn argv<I, S>(argv: I) -> RunSpec
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        RunSpec {
            argv: Some(argv.into_iter().map(Into::into).collect()),
            ..RunSpec::default()
        }
    }

    /// The program and its arguments the spec runs: `argv`, or the shell
    /// with `command` (any text, a blank one too: the shell then does
    /// nothing); an error when neither or both are given, or argv is empty.
    pub fn program_and_args(&self) -> Result<Vec<OsString>, SpecError> {
        match (&self.argv, &self.command) {
            (Some(_), Some(_)) => Err(SpecError("give either argv or command, not both".into())),
            (None, None) => Err(SpecError(
                "give argv (the program and its arguments) or command (a shell command line)"
                    .into(),
            )),
            // An empty program name is the spawn's to refuse (not found),
            // as with `Command::new("")`.
            (Some(argv), None) if argv.is_empty() => {
                Err(SpecError("argv must start with a program".into()))
            }
            (Some(argv), None) => Ok(argv.clone()),
            (None, Some(c)) => Ok(vec![SHELL.into(), "-c".into(), c.into()]),
        }
    }
}

impl Command {
    /// The command a spec describes: [`RunSpec::program_and_args`], then
    /// [`apply`](Self::apply).
    pub fn from_spec(spec: &RunSpec) -> Result<Command, SpecError> {
        let argv = spec.program_and_args()?;
        let Some((arg0, args)) = argv.split_first() else {
            return Err(SpecError("argv must start with a program".into()));
        };
        let mut cmd = match &spec.executable {
            Some(program) => {
                let mut c = Command::new(program);
                c.arg0(arg0);
                c
            }
            None => Command::new(arg0),
        };
        cmd.args(args);
        if let Some(sandbox) = &spec.sandbox {
            if let Some((key, path)) = sandbox.missing_paths().first() {
                return Err(SpecError(format!(
                    "sandbox: {key} path {} does not exist (a policy names existing paths)",
                    path.display()
                )));
            }
        }
        cmd.apply(spec);
        Ok(cmd)
    }

    /// Sets every option the spec gives (all but the program and its
    /// arguments); what it leaves out stays as it is.
    pub fn apply(&mut self, spec: &RunSpec) -> &mut Command {
        if let Some(d) = &spec.cwd {
            self.current_dir(d);
        }
        if spec.env_clear {
            self.env_clear();
        }
        if let Some(vars) = &spec.env {
            self.envs(vars);
        }
        if let Some(t) = spec.timeout_ms {
            self.timeout(t);
        }
        if let Some(t) = spec.idle_timeout_ms {
            self.idle_timeout(t);
        }
        if let Some(t) = spec.grace_ms {
            self.grace(t);
        }
        if let Some(s) = spec.signal {
            self.signal(s);
        }
        if spec.silent_deadline {
            self.silent_deadline(true);
        }
        if let Some(t) = spec.wait_delay_ms {
            self.wait_delay(t);
        }
        if let Some(t) = spec.confirm_window_ms {
            self.confirm_window(t);
        }
        if let Some(n) = spec.max_output {
            self.output_limit(n);
        }
        if let Some(n) = spec.capture_limit {
            self.capture_limit(usize::try_from(n).unwrap_or(usize::MAX));
        }
        if let Some(p) = spec.leftovers {
            self.leftovers(p);
        }
        if let Some(c) = spec.containment {
            self.containment(c.into());
        }
        if spec.require_crash_safety {
            self.require_crash_safety(true);
        }
        if let Some(n) = spec.memory_max {
            self.memory_max(n);
        }
        if let Some(n) = spec.pids_max {
            self.pids_max(n);
        }
        if let Some(p) = spec.pty {
            self.pty(PtySize::new(p.cols, p.rows));
        }
        if spec.new_session {
            self.new_session(true);
        }
        if let Some(fds) = &spec.close_other_fds {
            self.close_other_fds(fds.iter().copied());
        }
        if spec.restore_signals {
            self.restore_signals(true);
        }
        if spec.sigpipe_ignored {
            self.sigpipe_ignored(true);
        }
        if let Some(u) = spec.uid {
            self.uid(u);
        }
        if let Some(g) = spec.gid {
            self.gid(g);
        }
        if let Some(g) = &spec.groups {
            self.groups(g);
        }
        if let Some(m) = spec.umask {
            self.umask(m);
        }
        if let Some(s) = &spec.sandbox {
            self.sandbox(s.policy());
        }
        self
    }
}

/// The `sandbox` field: `true` (the default policy), `false` or null (none),
/// or a policy object; written as the object.
mod sandbox_field {
    use super::SandboxSpec;
    use serde::de::{self, MapAccess, Visitor};
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<SandboxSpec>, s: S) -> Result<S::Ok, S::Error> {
        v.serialize(s)
    }

    struct Field;

    impl<'de> Visitor<'de> for Field {
        type Value = Option<SandboxSpec>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("true, false, null or a sandbox policy (allow_write, deny_read, network)")
        }

        fn visit_bool<E: de::Error>(self, b: bool) -> Result<Self::Value, E> {
            Ok(b.then(SandboxSpec::default))
        }

        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(Field)
        }

        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
            SandboxSpec::deserialize(de::value::MapAccessDeserializer::new(map)).map(Some)
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SandboxSpec>, D::Error> {
        d.deserialize_any(Field)
    }
}

/// Durations as milliseconds (a number; fractions down to the nanosecond).
mod millis {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            // Whole milliseconds as integers, the rest as fractions.
            Some(d) if d.subsec_nanos() % 1_000_000 == 0 => {
                s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            }
            Some(d) => s.serialize_f64(d.as_secs_f64() * 1e3),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let Some(ms) = Option::<f64>::deserialize(d)? else {
            return Ok(None);
        };
        if ms.is_nan() || ms < 0.0 {
            return Err(serde::de::Error::custom(format!(
                "invalid duration {ms}: a number of milliseconds, 0 or more"
            )));
        }
        // Past the clock's range is forever (as a huge `corral run -t`).
        Ok(Some(
            Duration::try_from_secs_f64(ms / 1e3).unwrap_or(Duration::MAX),
        ))
    }
}

/// One `OsString` as a string (lossily when it is not Unicode).
mod os_one {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::ffi::OsString;

    pub fn serialize<S: Serializer>(v: &Option<OsString>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(v) => s.serialize_str(&v.to_string_lossy()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<OsString>, D::Error> {
        Ok(Option::<String>::deserialize(d)?.map(OsString::from))
    }
}

/// A list of `OsString`s as strings.
mod os_list {
    use serde::ser::SerializeSeq;
    use serde::{Deserialize, Deserializer, Serializer};
    use std::ffi::OsString;

    pub fn serialize<S: Serializer>(v: &Option<Vec<OsString>>, s: S) -> Result<S::Ok, S::Error> {
        let Some(v) = v else {
            return s.serialize_none();
        };
        let mut seq = s.serialize_seq(Some(v.len()))?;
        for a in v {
            seq.serialize_element(&a.to_string_lossy())?;
        }
        seq.end()
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<OsString>>, D::Error> {
        Ok(Option::<Vec<String>>::deserialize(d)?
            .map(|v| v.into_iter().map(OsString::from).collect()))
    }
}

/// A map of `OsString`s as an object of strings.
mod os_map {
    use serde::ser::SerializeMap;
    use serde::{Deserialize, Deserializer, Serializer};
    use std::collections::BTreeMap;
    use std::ffi::OsString;

    pub fn serialize<S: Serializer>(
        v: &Option<BTreeMap<OsString, OsString>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        let Some(v) = v else {
            return s.serialize_none();
        };
        let mut map = s.serialize_map(Some(v.len()))?;
        for (k, v) in v {
            map.serialize_entry(&k.to_string_lossy(), &v.to_string_lossy())?;
        }
        map.end()
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<BTreeMap<OsString, OsString>>, D::Error> {
        Ok(
            Option::<BTreeMap<String, String>>::deserialize(d)?.map(|m| {
                m.into_iter()
                    .map(|(k, v)| (OsString::from(k), OsString::from(v)))
                    .collect()
            }),
        )
    }
}

/// The JSON Schema of [`RunSpec`] (draft 2020-12), as
/// docs/run-spec-schema.json holds it.
#[cfg(feature = "schema")]
pub fn run_spec_schema() -> serde_json::Value {
    use serde_json::Value;
    let settings = schemars::generate::SchemaSettings::draft2020_12().for_deserialize();
    let schema = settings.into_generator().into_root_schema_for::<RunSpec>();
    let mut v = schema.to_value();
    if let Some(o) = v.as_object_mut() {
        let mut out = serde_json::Map::new();
        out.insert("$schema".into(), o.remove("$schema").unwrap_or(Value::Null));
        out.insert(
            "$id".into(),
            "https://github.com/corral-rs/corral/blob/main/docs/run-spec-schema.json".into(),
        );
        out.insert(
            "$comment".into(),
            "Generated from corral::document::RunSpec: do not edit; regenerate with \
             `CORRAL_BLESS=1 cargo test -p corral-process --all-features --lib document`."
                .into(),
        );
        out.insert("title".into(), "corral run spec".into());
        out.insert(
            "description".into(),
            "Every option of a run a front end can set (the command line's `run` options, a \
             batch task, the MCP `run`/`start` arguments, the Python and Node keywords each map \
             onto it). Durations are milliseconds (`*_ms`, fractions allowed), sizes bytes; an \
             absent field is the library's default. Exactly one of `argv` and `command`."
                .into(),
        );
        o.remove("title");
        o.remove("description");
        out.append(o);
        v = Value::Object(out);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A spec with every field set to something other than its default.
    pub(crate) fn full() -> RunSpec {
        RunSpec {
            argv: Some(vec!["prog".into(), "a b".into()]),
            command: None,
            executable: Some("/bin/true".into()),
            cwd: Some("/tmp".into()),
            env: Some([("K".into(), "V".into())].into_iter().collect()),
            env_clear: true,
            timeout_ms: Some(Duration::from_millis(1500)),
            idle_timeout_ms: Some(Duration::from_micros(2500)),
            grace_ms: Some(Duration::from_secs(2)),
            signal: Some(Signal::INT),
            silent_deadline: true,
            wait_delay_ms: Some(Duration::from_millis(100)),
            confirm_window_ms: Some(Duration::from_millis(300)),
            max_output: Some(1 << 20),
            capture_limit: Some(4096),
            leftovers: Some(LeftoverPolicy::Kill),
            containment: Some(Containment::PidNamespace),
            require_crash_safety: true,
            memory_max: Some(64 << 20),
            pids_max: Some(10),
            pty: Some(PtySpec {
                cols: 100,
                rows: 30,
            }),
            new_session: true,
            close_other_fds: Some(vec![3]),
            restore_signals: true,
            sigpipe_ignored: true,
            uid: Some(1000),
            gid: Some(1000),
            groups: Some(vec![]),
            umask: Some(0o22),
            sandbox: Some(SandboxSpec {
                allow_write: vec!["/tmp".into()],
                deny_read: vec!["/".into()],
                network: Network::Loopback,
            }),
        }
    }

    #[test]
    fn a_spec_round_trips_through_json() {
        let spec = full();
        let v = serde_json::to_value(&spec).unwrap();
        assert_eq!(v["timeout_ms"], 1500);
        assert_eq!(v["idle_timeout_ms"], 2.5);
        assert_eq!(v["signal"], "SIGINT");
        assert_eq!(v["leftovers"], "kill");
        assert_eq!(v["containment"], "pid-namespace");
        let back: RunSpec = serde_json::from_value(v).unwrap();
        assert_eq!(back, spec);
        // The default writes nothing.
        assert_eq!(serde_json::to_string(&RunSpec::default()).unwrap(), "{}");
    }

    #[test]
    fn a_spec_is_read_strictly_with_clear_errors() {
        let err = |j: &str| serde_json::from_str::<RunSpec>(j).unwrap_err().to_string();
        assert!(err(r#"{"argv": ["x"], "timeout": 5}"#).contains("unknown field `timeout`"));
        assert!(err(r#"{"timeout_ms": -1}"#).contains("0 or more"));
        assert!(err(r#"{"timeout_ms": "5s"}"#).contains("f64"));
        assert!(err(r#"{"signal": "SIGNOPE"}"#).contains("NOPE"));
        assert!(err(r#"{"containment": "jail"}"#).contains("unknown variant"));
        assert!(err(r#"{"leftovers": "sometimes"}"#).contains("unknown variant"));
        let s: RunSpec =
            serde_json::from_str(r#"{"containment": "process_group", "signal": 2}"#).unwrap();
        assert_eq!(s.containment, Some(Containment::ProcessGroup));
        assert_eq!(s.signal, Some(Signal::INT));
        // A huge timeout is forever, not an error.
        let s: RunSpec = serde_json::from_str(r#"{"timeout_ms": 1e300}"#).unwrap();
        assert_eq!(s.timeout_ms, Some(Duration::MAX));
    }

    /// `sandbox`: `true` is the default policy, `false` and null none, an
    /// object a policy read strictly; a policy naming a path that does not
    /// exist is refused before anything runs.
    #[test]
    fn a_sandbox_is_true_or_a_policy() {
        let read = |j: &str| serde_json::from_str::<RunSpec>(j).map(|s| s.sandbox);
        assert_eq!(
            read(r#"{"sandbox": true}"#).unwrap(),
            Some(SandboxSpec::default())
        );
        assert_eq!(read(r#"{"sandbox": false}"#).unwrap(), None);
        assert_eq!(read(r#"{"sandbox": null}"#).unwrap(), None);
        assert_eq!(
            read(r#"{"sandbox": {}}"#).unwrap(),
            Some(SandboxSpec::default())
        );
        let p = read(r#"{"sandbox": {"allow_write": ["/a"], "network": "host"}}"#).unwrap();
        assert_eq!(
            p,
            Some(SandboxSpec {
                allow_write: vec!["/a".into()],
                deny_read: vec![],
                network: Network::Host,
            })
        );
        let err = |j: &str| read(j).unwrap_err().to_string();
        assert!(err(r#"{"sandbox": {"network": "bogus"}}"#).contains("unknown variant `bogus`"));
        assert!(err(r#"{"sandbox": {"allow_writes": []}}"#).contains("unknown field"));
        assert!(err(r#"{"sandbox": {"allow_write": "/a"}}"#).contains("a sequence"));
        assert!(err(r#"{"sandbox": "yes"}"#).contains("a sandbox policy"));
        assert!(err(r#"{"sandbox": 1}"#).contains("a sandbox policy"));
        // The default policy is written as an empty object but network.
        let v = serde_json::to_value(RunSpec {
            sandbox: Some(SandboxSpec::default()),
            ..RunSpec::default()
        })
        .unwrap();
        assert_eq!(v["sandbox"], serde_json::json!({"network": "none"}));
        // A path that does not exist: no command.
        let mut spec = RunSpec::argv(["true"]);
        spec.sandbox = Some(SandboxSpec {
            deny_read: vec!["/nonexistent/corral-test".into()],
            ..SandboxSpec::default()
        });
        let e = Command::from_spec(&spec).unwrap_err().0;
        assert!(
            e.contains("deny_read") && e.contains("/nonexistent/corral-test"),
            "{e}"
        );
        // From the library's policy and back.
        let policy = Sandbox::new().allow_write("/x").network(Network::None);
        assert_eq!(SandboxSpec::from(&policy).policy(), policy);
    }

    #[test]
    fn containment_names_both_ways() {
        for c in [
            Containment::Auto,
            Containment::Cgroup,
            Containment::PidNamespace,
            Containment::Subreaper,
            Containment::ProcessGroup,
            Containment::JobObject,
        ] {
            assert_eq!(Containment::from(ContainmentChoice::from(c)), c);
        }
    }

    #[test]
    fn argv_or_command() {
        let mut s = RunSpec::default();
        assert!(s.program_and_args().is_err());
        s.command = Some("echo hi".into());
        assert_eq!(
            s.program_and_args().unwrap(),
            [OsString::from(SHELL), "-c".into(), "echo hi".into()]
        );
        s.argv = Some(vec!["x".into()]);
        assert!(s.program_and_args().unwrap_err().0.contains("not both"));
        s.command = None;
        assert_eq!(s.program_and_args().unwrap(), [OsString::from("x")]);
        s.argv = Some(vec![]);
        assert!(Command::from_spec(&s).is_err());
        s.command = Some("".into());
        s.argv = None;
        assert_eq!(s.program_and_args().unwrap().len(), 3);
    }

    /// `from_spec` sets every field: the command it builds differs from
    /// the plain one in each setting the spec gives.
    #[test]
    fn from_spec_sets_every_field() {
        let spec = full();
        let cmd = Command::from_spec(&spec).unwrap();
        assert_eq!(cmd.program, OsString::from("/bin/true"));
        assert_eq!(cmd.setup().arg0, Some("prog".into()));
        assert_eq!(cmd.args, [OsString::from("a b")]);
        assert_eq!(cmd.cwd, Some(PathBuf::from("/tmp")));
        assert!(cmd.env_clear);
        assert_eq!(cmd.env, [("K".into(), Some("V".into()))]);
        let s = &cmd.settings;
        assert_eq!(s.timeout.get(), spec.timeout_ms);
        assert_eq!(s.idle_timeout.get(), spec.idle_timeout_ms);
        assert_eq!(Some(s.grace.get()), spec.grace_ms);
        assert_eq!(s.signal, Signal::INT);
        assert!(s.silent_deadline);
        assert_eq!(Some(s.wait_delay.get()), spec.wait_delay_ms);
        assert_eq!(Some(s.confirm_window.get()), spec.confirm_window_ms);
        assert_eq!(s.output_limit, Some(1 << 20));
        assert_eq!(s.capture_limit, 4096);
        assert_eq!(s.leftovers, LeftoverPolicy::Kill);
        assert_eq!(
            cmd.containment,
            ContainmentChoice::Only(Mechanism::PidNamespace)
        );
        assert!(s.require_crash_safety);
        assert!(s.sigpipe_ignored);
        assert_eq!(cmd.limits.memory_max, Some(64 << 20));
        assert_eq!(cmd.limits.pids_max, Some(10));
        assert_eq!(cmd.pty, Some(PtySize::new(100, 30)));
        let setup = cmd.setup();
        assert!(setup.new_session && setup.restore_signals);
        assert_eq!(setup.keep_fds, Some(vec![3]));
        assert_eq!(
            (setup.uid, setup.gid, setup.groups.clone(), setup.umask),
            (Some(1000), Some(1000), Some(vec![]), Some(0o22))
        );
        assert_eq!(
            cmd.sandbox.as_deref().cloned(),
            Some(
                Sandbox::new()
                    .allow_write("/tmp")
                    .deny_read("/")
                    .network(Network::Loopback)
            )
        );
        // The plain spec leaves the library's defaults.
        let plain = Command::from_spec(&RunSpec::argv(["prog"])).unwrap();
        let d = Command::new("prog");
        assert_eq!(format!("{:?}", plain.settings), format!("{:?}", d.settings));
        assert_eq!(plain.setup(), d.setup());
        assert_eq!(plain.containment, d.containment);
        // Every field of the spec is one this test sets (a new field must
        // be added to `full` and checked above).
        let v = serde_json::to_value(&spec).unwrap();
        let set = v.as_object().unwrap().len();
        // `command` is the one field `full` leaves out (it excludes argv).
        assert_eq!(set + 1, field_names().len(), "{v}");
    }

    /// The spec's fields, as serde names them.
    fn field_names() -> Vec<String> {
        let mut all = RunSpec {
            command: Some("x".into()),
            ..full()
        };
        all.argv = Some(vec!["x".into()]);
        serde_json::to_value(&all)
            .unwrap()
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect()
    }

    /// docs/run-spec-schema.json is the schema generated from
    /// [`RunSpec`]; `CORRAL_BLESS=1` rewrites it.
    #[cfg(feature = "schema")]
    #[test]
    fn the_schema_file_is_the_generated_schema() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docs/run-spec-schema.json"
        );
        let schema = run_spec_schema();
        // Every field is in the schema.
        let props = schema["properties"].as_object().unwrap();
        let mut names: Vec<&String> = props.keys().collect();
        names.sort();
        let mut want = field_names();
        want.sort();
        assert_eq!(names, want.iter().collect::<Vec<_>>());
        let mut text = serde_json::to_string_pretty(&schema).unwrap();
        text.push('\n');
        if std::env::var_os("CORRAL_BLESS").is_some() {
            std::fs::write(path, &text).unwrap();
            return;
        }
        let have = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            have == text,
            "docs/run-spec-schema.json is not the schema generated from RunSpec; regenerate it \
             with: CORRAL_BLESS=1 cargo test -p corral-process --all-features --lib document"
        );
    }
}
