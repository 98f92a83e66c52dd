//! The batch manifest: TOML read with serde (`deny_unknown_fields`), then
//! checked, all before anything runs. Every error names the file, the line
//! and column, and the key (`task[2].timeout`).
//!
//! ```toml
//! [defaults]              # optional; every task key but name/run/shell
//! timeout = "30s"
//!
//! [[task]]
//! name = "unit"
//! run = ["cargo", "test"] # or: shell = "cargo test | tee log"
//! repeat = 3
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::path::Path;
use std::time::Duration;

use corral::document::{Containment, RunSpec, SandboxSpec};
use corral::{LeftoverPolicy, Signal};
use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use toml::Spanned;

use crate::duration::{parse_bytes, parse_duration};

/// The shell used for `shell = "..."` tasks: the library's, as for a
/// spec's `command`.
pub use corral::document::SHELL;

/// How a run's result is read from its stdout.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventRule {
    /// The event's `type` (default `run_end`).
    #[serde(rename = "type", default = "default_event_type")]
    pub ty: String,
    /// The top-level field holding the result code (default `exitCode`).
    #[serde(default = "default_event_field")]
    pub field: String,
}

fn default_event_type() -> String {
    "run_end".into()
}
fn default_event_field() -> String {
    "exitCode".into()
}

/// One task, with the defaults applied: the run it asks for (`spec`: the
/// program, and every option of the run, batch's defaults included) and
/// how batch schedules and judges it.
#[derive(Debug, Clone)]
pub struct Task {
    pub name: String,
    /// The run: `argv` (`sh -c SCRIPT` for `shell`), `cwd` resolved against
    /// the manifest's directory, `env`, the deadlines, limits and policies
    /// (set by the one conversion from the manifest's keys, [`task`]).
    pub spec: RunSpec,
    pub repeat: u32,
    /// The process exit code that counts as a pass.
    pub expect_exit: i32,
    /// When set, the result is the last matching stdout event.
    pub result_event: Option<EventRule>,
    /// Extra attempts for a run that fails or errors (see `exec`).
    pub retries: u32,
    /// Runs before the measured ones, not counted.
    pub warmup: u32,
    /// Its runs never overlap any other run.
    pub serial: bool,
    /// `cwd` as written (the fingerprint must not depend on where the
    /// manifest sits on a machine).
    pub cwd_raw: Option<String>,
    /// The sandbox policy as written (paths unresolved), for the
    /// fingerprint.
    pub sandbox_raw: Option<String>,
}

/// A task's `containment` key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ContainmentKey {
    Auto,
    Cgroup,
    Subreaper,
    ProcessGroup,
    PidNamespace,
}

impl Task {
    /// A canonical text of everything that decides what the task runs and
    /// how it is judged (the resolved cwd is left out, its written form is
    /// in).
    fn canonical(&self) -> String {
        let s = &self.spec;
        // Keys added later are written only when set, so the fingerprint
        // of a manifest that does not use them stays what it was.
        let mut later = if s.require_crash_safety {
            " require_crash_safety=true".to_owned()
        } else {
            String::new()
        };
        if let Some(d) = s.idle_timeout_ms {
            later.push_str(&format!(" idle_timeout={}", d.as_nanos()));
        }
        if let Some(n) = s.max_output {
            later.push_str(&format!(" max_output={n}"));
        }
        if let Some(p) = &self.sandbox_raw {
            later.push_str(&format!(" sandbox={p}"));
        }
        let text = |o: &std::ffi::OsString| o.to_string_lossy().into_owned();
        let argv: Vec<String> = s
            .program_and_args()
            .unwrap_or_default()
            .iter()
            .map(text)
            .collect();
        let env: Vec<(String, String)> = s
            .env
            .iter()
            .flatten()
            .map(|(k, v)| (text(k), text(v)))
            .collect();
        let nanos = |d: Option<Duration>| d.unwrap_or_default().as_nanos();
        format!(
            "name={:?} argv={:?} cwd={:?} env={:?} timeout={:?} wait_delay={:?} grace={:?} signal={} leftovers={:?} repeat={} expect_exit={} result_event={:?} retries={} warmup={} serial={} memory_max={:?} pids_max={:?} containment={:?}{later}\n",
            self.name,
            argv,
            self.cwd_raw,
            env,
            s.timeout_ms.map(|d| d.as_nanos()),
            nanos(s.wait_delay_ms),
            nanos(s.grace_ms),
            s.signal.unwrap_or(Signal::TERM).as_raw(),
            s.leftovers.unwrap_or(LeftoverPolicy::Kill),
            self.repeat,
            self.expect_exit,
            self.result_event.as_ref().map(|r| (&r.ty, &r.field)),
            self.retries,
            self.warmup,
            self.serial,
            s.memory_max,
            s.pids_max,
            s.containment,
        )
    }
}

/// The manifest's fingerprint: 64-bit FNV-1a of the normalized tasks, in
/// hex. Two manifests that differ only in comments, layout, key order or
/// where defaults are written have the same one; any change to what runs
/// changes it. Stable across corral builds (no std hasher).
pub fn fingerprint(tasks: &[Task]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for t in tasks {
        for b in t.canonical().bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("{h:016x}")
}

/// A checked manifest.
#[derive(Debug, Clone)]
pub struct Manifest {
    pub tasks: Vec<Task>,
}

/// A manifest error: `FILE:LINE:COL: key `K`: message`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestError {
    pub file: String,
    pub line: usize,
    pub col: usize,
    pub key: Option<String>,
    pub message: String,
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line > 0 {
            write!(f, "{}:{}:{}: ", self.file, self.line, self.col)?;
        } else {
            write!(f, "{}: ", self.file)?;
        }
        if let Some(k) = &self.key {
            write!(f, "key `{k}`: ")?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for ManifestError {}

/// A duration as `parse_duration` reads it, from a string (`"1m30s"`) or a
/// bare number of seconds (`90`, `0.5`).
#[derive(Debug, Clone, Copy)]
struct Dur(Duration);

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Dur, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Dur;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration (\"500ms\", \"1m30s\", or a number of seconds)")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Dur, E> {
                parse_duration(s).map(Dur).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<Dur, E> {
                u64::try_from(n)
                    .map(|n| Dur(Duration::from_secs(n)))
                    .map_err(|_| E::custom(format!("invalid duration {n}: negative")))
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Dur, E> {
                Ok(Dur(Duration::from_secs(n)))
            }
            fn visit_f64<E: de::Error>(self, x: f64) -> Result<Dur, E> {
                Duration::try_from_secs_f64(x)
                    .map(Dur)
                    .map_err(|e| E::custom(format!("invalid duration {x}: {e}")))
            }
        }
        d.deserialize_any(V)
    }
}

/// A signal by name or number.
#[derive(Debug, Clone, Copy)]
struct Sig(Signal);

impl<'de> Deserialize<'de> for Sig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Sig, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Sig;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a signal name (\"TERM\", \"INT\") or number")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Sig, E> {
                s.parse::<Signal>().map(Sig).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<Sig, E> {
                self.visit_str(&n.to_string())
            }
        }
        d.deserialize_any(V)
    }
}

/// A sandbox's network by name.
#[derive(Debug, Clone, Copy)]
struct Net(corral::Network);

impl<'de> Deserialize<'de> for Net {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Net, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Net;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a network policy: \"none\", \"loopback\" or \"host\"")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Net, E> {
                s.parse().map(Net).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// A size: a number of bytes, or a string with a suffix (`"64M"`).
#[derive(Debug, Clone, Copy)]
struct Bytes(u64);

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Bytes, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Bytes;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a size (a number of bytes, or \"512K\", \"64M\", \"2G\")")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Bytes, E> {
                parse_bytes(s).map(Bytes).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<Bytes, E> {
                u64::try_from(n)
                    .map(Bytes)
                    .map_err(|_| E::custom(format!("invalid size {n}: negative")))
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Bytes, E> {
                Ok(Bytes(n))
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawManifest {
    #[serde(default)]
    defaults: Option<RawDefaults>,
    #[serde(default)]
    task: Vec<Spanned<RawTask>>,
}

/// The `[defaults]` table: every task key but `name`, `run` and `shell`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawDefaults {
    cwd: Option<String>,
    env: Option<BTreeMap<String, String>>,
    timeout: Option<Dur>,
    idle_timeout: Option<Dur>,
    max_output: Option<Bytes>,
    wait_delay: Option<Dur>,
    grace: Option<Dur>,
    signal: Option<Sig>,
    leftovers: Option<LeftoverPolicy>,
    repeat: Option<Spanned<u32>>,
    expect_exit: Option<i32>,
    result_event: Option<EventRule>,
    retries: Option<u32>,
    warmup: Option<u32>,
    serial: Option<bool>,
    memory_max: Option<Bytes>,
    pids_max: Option<Spanned<u64>>,
    containment: Option<ContainmentKey>,
    require_crash_safety: Option<bool>,
    sandbox: Option<Spanned<bool>>,
    allow_write: Option<Spanned<Vec<String>>>,
    deny_read: Option<Spanned<Vec<String>>>,
    network: Option<Spanned<Net>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTask {
    name: Option<Spanned<String>>,
    run: Option<Spanned<Vec<String>>>,
    shell: Option<Spanned<String>>,
    cwd: Option<String>,
    env: Option<BTreeMap<String, String>>,
    timeout: Option<Dur>,
    idle_timeout: Option<Dur>,
    max_output: Option<Bytes>,
    wait_delay: Option<Dur>,
    grace: Option<Dur>,
    signal: Option<Sig>,
    leftovers: Option<LeftoverPolicy>,
    repeat: Option<Spanned<u32>>,
    expect_exit: Option<i32>,
    result_event: Option<EventRule>,
    retries: Option<u32>,
    warmup: Option<u32>,
    serial: Option<bool>,
    memory_max: Option<Bytes>,
    pids_max: Option<Spanned<u64>>,
    containment: Option<ContainmentKey>,
    require_crash_safety: Option<bool>,
    sandbox: Option<Spanned<bool>>,
    allow_write: Option<Spanned<Vec<String>>>,
    deny_read: Option<Spanned<Vec<String>>>,
    network: Option<Spanned<Net>>,
}

/// Makes the errors that point into the manifest's text.
struct At<'a> {
    file: &'a str,
    text: &'a str,
}

impl At<'_> {
    fn err(
        &self,
        span: Option<Range<usize>>,
        key: Option<String>,
        message: String,
    ) -> ManifestError {
        let (line, col) = span.map_or((0, 0), |s| line_col(self.text, s.start));
        ManifestError {
            file: self.file.to_owned(),
            line,
            col,
            key,
            message,
        }
    }
}

/// Parses and checks manifest text. `file` names it in errors; relative
/// `cwd`s are resolved against `base`.
pub fn parse(file: &str, text: &str, base: &Path) -> Result<Vec<Task>, ManifestError> {
    let at = At { file, text };
    // Syntax first: a document that is not TOML has no keys to name.
    let doc = toml::de::DeTable::parse(text)
        .map_err(|e| at.err(e.span(), None, first_line(e.message())))?;
    let raw: RawManifest = toml::from_str(text).map_err(|e| {
        let key = e.span().and_then(|s| key_at(doc.get_ref(), s.start, text));
        at.err(e.span(), key, first_line(e.message()))
    })?;

    let defaults = raw.defaults.unwrap_or_default();
    if raw.task.is_empty() {
        return Err(at.err(
            None,
            None,
            "no tasks: add at least one [[task]] table with a name and `run` or `shell`".into(),
        ));
    }
    if let Some(r) = &defaults.repeat {
        if *r.get_ref() == 0 {
            return Err(at.err(
                Some(r.span()),
                Some("defaults.repeat".into()),
                "must be at least 1".into(),
            ));
        }
    }
    let mut tasks = Vec::with_capacity(raw.task.len());
    let mut names: BTreeMap<String, usize> = BTreeMap::new();
    for (i, spanned) in raw.task.into_iter().enumerate() {
        let span = spanned.span();
        let t = spanned.into_inner();
        let named = task_name(&at, i, &t, span.clone(), &mut names)?;
        // Where a task-wide error points: its name, else the task.
        let whole = named.1.clone().or(Some(span));
        tasks.push(task(&at, i, t, named, whole, &defaults, base)?);
    }
    unused_sandbox_defaults(&at, &defaults, &tasks)?;
    Ok(tasks)
}

/// One checked task, `[defaults]` applied (`named`: its checked name and
/// where the name is).
fn task(
    at: &At<'_>,
    i: usize,
    t: RawTask,
    (name, name_span): (String, Option<Range<usize>>),
    whole: Option<Range<usize>>,
    defaults: &RawDefaults,
    base: &Path,
) -> Result<Task, ManifestError> {
    let here = |k: &str| format!("task[{i}].{k}");
    let argv = task_argv(at, i, &t, &name, name_span, whole.clone())?;
    let (sandbox, sandbox_raw) = task_sandbox(at, i, &t, defaults, base)?;
    let repeat = match &t.repeat {
        Some(r) if *r.get_ref() == 0 => {
            return Err(at.err(
                Some(r.span()),
                Some(here("repeat")),
                "must be at least 1".into(),
            ))
        }
        Some(r) => *r.get_ref(),
        None => defaults.repeat.as_ref().map_or(1, |r| *r.get_ref()),
    };
    let env = task_env(at, i, t.env.unwrap_or_default(), defaults, whole.clone())?;
    let cwd_key = if t.cwd.is_some() {
        here("cwd")
    } else {
        "defaults.cwd".into()
    };
    let cwd_raw = t.cwd.or_else(|| defaults.cwd.clone());
    if cwd_raw.as_ref().is_some_and(|c| c.contains('\0')) {
        return Err(at.err(
            whole,
            Some(cwd_key),
            "holds a NUL byte, which no path can hold".into(),
        ));
    }
    let cwd = cwd_raw.as_ref().map(|c| base.join(c));
    let pids_max = t.pids_max.as_ref().or(defaults.pids_max.as_ref());
    if let Some(p) = pids_max.filter(|p| *p.get_ref() == 0) {
        let key = if t.pids_max.is_some() {
            here("pids_max")
        } else {
            "defaults.pids_max".into()
        };
        return Err(at.err(Some(p.span()), Some(key), "must be at least 1".into()));
    }
    let pids_max = pids_max.map(|p| *p.get_ref());
    // A task that says how to read its result replaces the default's
    // way entirely (`expect_exit` alone drops a default result_event).
    let (expect_exit, result_event) = if t.expect_exit.is_some() || t.result_event.is_some() {
        (t.expect_exit.unwrap_or(0), t.result_event)
    } else {
        (
            defaults.expect_exit.unwrap_or(0),
            defaults.result_event.clone(),
        )
    };
    // The one conversion from the manifest's keys to the run's spec.
    // `shell` is the spec's command (`/bin/sh -c SCRIPT`).
    let (argv, command) = match &t.shell {
        Some(sh) => (None, Some(sh.get_ref().clone())),
        None => (Some(argv.into_iter().map(Into::into).collect()), None),
    };
    let spec = RunSpec {
        argv,
        command,
        cwd,
        env: Some(env.into_iter().map(|(k, v)| (k.into(), v.into())).collect()),
        // 0 is no limit, as `corral run -t 0` (and coreutils `timeout 0`).
        timeout_ms: t
            .timeout
            .or(defaults.timeout)
            .map(|d| d.0)
            .filter(|d| !d.is_zero()),
        idle_timeout_ms: t.idle_timeout.or(defaults.idle_timeout).map(|d| d.0),
        max_output: t.max_output.or(defaults.max_output).map(|b| b.0),
        wait_delay_ms: Some(
            t.wait_delay
                .or(defaults.wait_delay)
                .map_or(Duration::from_secs(2), |d| d.0),
        ),
        grace_ms: Some(t.grace.or(defaults.grace).map_or(Duration::ZERO, |d| d.0)),
        signal: Some(t.signal.or(defaults.signal).map_or(Signal::TERM, |s| s.0)),
        leftovers: Some(
            t.leftovers
                .or(defaults.leftovers)
                .unwrap_or(LeftoverPolicy::Kill),
        ),
        memory_max: t.memory_max.or(defaults.memory_max).map(|b| b.0),
        pids_max,
        containment: t.containment.or(defaults.containment).map(Into::into),
        require_crash_safety: t
            .require_crash_safety
            .or(defaults.require_crash_safety)
            .unwrap_or(false),
        sandbox,
        ..RunSpec::default()
    };
    Ok(Task {
        name,
        spec,
        repeat,
        expect_exit,
        result_event,
        retries: t.retries.or(defaults.retries).unwrap_or(0),
        warmup: t.warmup.or(defaults.warmup).unwrap_or(0),
        serial: t.serial.or(defaults.serial).unwrap_or(false),
        cwd_raw,
        sandbox_raw,
    })
}

/// A task's sandbox (`sandbox = true`, its own or `[defaults]`'), with its
/// policy keys (each the task's own, else `[defaults]`'); paths resolved
/// against the manifest's directory and checked to exist. A policy key in
/// a task that is not sandboxed is an error (it would be silently
/// ignored); and the policy as written, for the fingerprint.
fn task_sandbox(
    at: &At<'_>,
    i: usize,
    t: &RawTask,
    defaults: &RawDefaults,
    base: &Path,
) -> Result<(Option<SandboxSpec>, Option<String>), ManifestError> {
    let here = |k: &str| format!("task[{i}].{k}");
    let on = t
        .sandbox
        .as_ref()
        .or(defaults.sandbox.as_ref())
        .is_some_and(|b| *b.get_ref());
    if !on {
        let own = [
            ("allow_write", t.allow_write.as_ref().map(Spanned::span)),
            ("deny_read", t.deny_read.as_ref().map(Spanned::span)),
            ("network", t.network.as_ref().map(Spanned::span)),
        ];
        if let Some((k, span)) = own.into_iter().find(|(_, s)| s.is_some()) {
            return Err(at.err(
                span,
                Some(here(k)),
                format!(
                    "`{k}` is a sandbox policy key, but the task is not sandboxed: add                      `sandbox = true` (to the task or to [defaults])"
                ),
            ));
        }
        return Ok((None, None));
    }
    let mut written = Vec::new();
    let mut lists: [Vec<std::path::PathBuf>; 2] = Default::default();
    for (n, (k, own, dflt)) in [
        ("allow_write", &t.allow_write, &defaults.allow_write),
        ("deny_read", &t.deny_read, &defaults.deny_read),
    ]
    .into_iter()
    .enumerate()
    {
        let (key, list) = match (own, dflt) {
            (Some(l), _) => (here(k), l),
            (None, Some(l)) => (format!("defaults.{k}"), l),
            (None, None) => continue,
        };
        for (j, raw) in list.get_ref().iter().enumerate() {
            let problem = if raw.is_empty() {
                Some("is empty: name a path".to_owned())
            } else if raw.contains('\0') {
                Some("holds a NUL byte, which no path can hold".to_owned())
            } else {
                let p = base.join(raw);
                // A dangling symlink does not exist either.
                (!p.exists()).then(|| {
                    format!(
                        "{} does not exist (a sandbox policy names existing paths; relative                          ones are taken from the manifest's directory)",
                        p.display()
                    )
                })
            };
            if let Some(why) = problem {
                return Err(at.err(Some(list.span()), Some(format!("{key}[{j}]")), why));
            }
            // Absolute: the library takes no relative policy path (the
            // manifest's directory may be given relative).
            let p = base.join(raw);
            lists[n].push(std::path::absolute(&p).unwrap_or(p));
        }
        written.push(format!("{k}={:?}", list.get_ref()));
    }
    let network = t
        .network
        .as_ref()
        .or(defaults.network.as_ref())
        .map_or(corral::Network::None, |n| n.get_ref().0);
    written.push(format!("network={network}"));
    let [allow_write, deny_read] = lists;
    Ok((
        Some(SandboxSpec {
            allow_write,
            deny_read,
            network,
        }),
        Some(written.join(",")),
    ))
}

/// A `[defaults]` sandbox policy key that applies to no task (none is
/// sandboxed) is an error: it would be silently ignored.
fn unused_sandbox_defaults(
    at: &At<'_>,
    defaults: &RawDefaults,
    tasks: &[Task],
) -> Result<(), ManifestError> {
    if tasks.iter().any(|t| t.spec.sandbox.is_some()) {
        return Ok(());
    }
    let keys = [
        (
            "allow_write",
            defaults.allow_write.as_ref().map(Spanned::span),
        ),
        ("deny_read", defaults.deny_read.as_ref().map(Spanned::span)),
        ("network", defaults.network.as_ref().map(Spanned::span)),
    ];
    match keys.into_iter().find(|(_, s)| s.is_some()) {
        Some((k, span)) => Err(at.err(
            span,
            Some(format!("defaults.{k}")),
            format!(
                "`{k}` is a sandbox policy key, but no task is sandboxed: add `sandbox = true`                  (to [defaults] or to the tasks)"
            ),
        )),
        None => Ok(()),
    }
}

impl From<ContainmentKey> for Containment {
    fn from(k: ContainmentKey) -> Containment {
        match k {
            ContainmentKey::Auto => Containment::Auto,
            ContainmentKey::Cgroup => Containment::Cgroup,
            ContainmentKey::Subreaper => Containment::Subreaper,
            ContainmentKey::ProcessGroup => Containment::ProcessGroup,
            ContainmentKey::PidNamespace => Containment::PidNamespace,
        }
    }
}

/// A task's name: present, not blank, printable, and not another task's
/// (`names`: the names so far, with their task's place); and where it is.
fn task_name(
    at: &At<'_>,
    i: usize,
    t: &RawTask,
    span: Range<usize>,
    names: &mut BTreeMap<String, usize>,
) -> Result<(String, Option<Range<usize>>), ManifestError> {
    let key = || Some(format!("task[{i}].name"));
    let name = match &t.name {
        Some(n) if !n.get_ref().trim().is_empty() => n.get_ref().clone(),
        Some(n) => return Err(at.err(Some(n.span()), key(), "must not be empty".into())),
        None => return Err(at.err(Some(span), key(), "missing: every task needs a name".into())),
    };
    let name_span = t.name.as_ref().map(Spanned::span);
    if let Some((byte, c)) = name.char_indices().find(|(_, c)| c.is_control()) {
        return Err(at.err(
            name_span,
            key(),
            format!(
                "task name {name:?} holds the control character U+{:04X} (at byte {byte}); \
                 names are shown in tables, reports and file names: use printable characters",
                c as u32
            ),
        ));
    }
    if let Some(first) = names.insert(name.clone(), i) {
        return Err(at.err(
            name_span,
            key(),
            format!("duplicate task name {name:?} (also task[{first}])"),
        ));
    }
    Ok((name, name_span))
}

/// A task's argv: its `run` list, or `sh -c` and its `shell` string;
/// exactly one of them, naming a program, without a NUL byte.
fn task_argv(
    at: &At<'_>,
    i: usize,
    t: &RawTask,
    name: &str,
    name_span: Option<Range<usize>>,
    whole: Option<Range<usize>>,
) -> Result<Vec<String>, ManifestError> {
    let here = |k: &str| Some(format!("task[{i}].{k}"));
    let argv = match (&t.run, &t.shell) {
        (Some(_), Some(sh)) => {
            return Err(at.err(
                Some(sh.span()),
                here("shell"),
                format!("task {name:?} has both `run` and `shell`; give exactly one"),
            ))
        }
        (None, None) => {
            return Err(at.err(
                name_span.or(whole),
                here("run"),
                format!(
                "task {name:?} has neither `run` (an argv list) nor `shell` (a string for sh -c)"
            ),
            ))
        }
        (Some(run), None) => {
            if run.get_ref().is_empty() || run.get_ref()[0].is_empty() {
                return Err(at.err(
                    Some(run.span()),
                    here("run"),
                    "must name a program: a non-empty list like [\"make\", \"test\"]".into(),
                ));
            }
            run.get_ref().clone()
        }
        (None, Some(sh)) => vec![SHELL.into(), "-c".into(), sh.get_ref().clone()],
    };
    if let Some(k) = argv.iter().position(|a| a.contains('\0')) {
        let key = if t.run.is_some() {
            format!("run[{k}]")
        } else {
            "shell".into()
        };
        let span = t.run.as_ref().map(Spanned::span);
        let span = span.or(t.shell.as_ref().map(Spanned::span));
        return Err(at.err(
            span,
            here(&key),
            "holds a NUL byte, which no program argument can hold".into(),
        ));
    }
    Ok(argv)
}

/// A task's environment: `[defaults]`' then its own, each entry one a
/// program can be given.
fn task_env(
    at: &At<'_>,
    i: usize,
    own_env: BTreeMap<String, String>,
    defaults: &RawDefaults,
    whole: Option<Range<usize>>,
) -> Result<Vec<(String, String)>, ManifestError> {
    for (table, vars) in [
        ("defaults.env".to_owned(), defaults.env.as_ref()),
        (format!("task[{i}].env"), Some(&own_env)),
    ] {
        for (k, v) in vars.into_iter().flatten() {
            if let Some(why) = bad_env(k, v) {
                return Err(at.err(whole, Some(format!("{table}.{k:?}")), why));
            }
        }
    }
    let mut env = defaults.env.clone().unwrap_or_default();
    env.extend(own_env);
    Ok(env.into_iter().collect())
}

/// Why an `env` entry cannot be passed to a program: a name that is empty
/// or holds `=` (the environment is `NAME=VALUE` strings: `A=B` = `x` would
/// silently set `A` to `B=x`), or a NUL byte in the name or the value.
fn bad_env(k: &str, v: &str) -> Option<String> {
    if k.is_empty() {
        Some("an environment variable's name must not be empty".into())
    } else if k.contains('=') {
        Some(format!(
            "the environment variable name {k:?} holds `=`, which ends a name (it would set {:?} instead)",
            k.split('=').next().unwrap_or("")
        ))
    } else if k.contains('\0') || v.contains('\0') {
        Some(format!(
            "the environment variable {k:?} holds a NUL byte, which the environment cannot hold"
        ))
    } else {
        None
    }
}

fn first_line(msg: &str) -> String {
    msg.trim().lines().collect::<Vec<_>>().join("; ")
}

/// 1-based line and column (in characters) of byte offset `at`.
pub fn line_col(text: &str, at: usize) -> (usize, usize) {
    let at = at.min(text.len());
    let before = &text.as_bytes()[..at];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let start = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |p| p + 1);
    let col = String::from_utf8_lossy(&before[start..]).chars().count() + 1;
    (line, col)
}

/// The dotted key path (`task[1].env.FOO`) of the innermost key or value
/// that contains byte offset `at`.
fn key_at(table: &toml::de::DeTable<'_>, at: usize, text: &str) -> Option<String> {
    let mut path = String::new();
    if walk_table(table, at, &mut path) {
        return Some(path);
    }
    // An error at a table header (`[[task]]` whose body lacks a key) or in
    // a place the walk cannot see: name the header's table, if any.
    let line_start = text[..at.min(text.len())].rfind('\n').map_or(0, |p| p + 1);
    let line = text[line_start..].lines().next().unwrap_or("").trim();
    line.strip_prefix('[')
        .map(|h| h.trim_matches(|c| c == '[' || c == ']').trim().to_owned())
}

fn contains(span: &Range<usize>, at: usize) -> bool {
    span.start <= at && at < span.end.max(span.start + 1)
}

fn walk_table(table: &toml::de::DeTable<'_>, at: usize, path: &mut String) -> bool {
    for (k, v) in table.iter() {
        let in_key = contains(&k.span(), at);
        let in_value = contains(&v.span(), at);
        let before = path.len();
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(k.get_ref());
        if in_key {
            return true;
        }
        if walk_value(v.get_ref(), at, path) {
            return true;
        }
        if in_value {
            return true;
        }
        path.truncate(before);
    }
    false
}

fn walk_value(v: &toml::de::DeValue<'_>, at: usize, path: &mut String) -> bool {
    match v {
        toml::de::DeValue::Table(t) => walk_table(t, at, path),
        toml::de::DeValue::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let before = path.len();
                path.push_str(&format!("[{i}]"));
                if walk_value(item.get_ref(), at, path) || contains(&item.span(), at) {
                    return true;
                }
                path.truncate(before);
            }
            false
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> Result<Vec<Task>, ManifestError> {
        parse("m.toml", text, Path::new("/base"))
    }

    #[test]
    fn defaults_apply_and_tasks_override() {
        let t = p(r#"
[defaults]
timeout = "1m30s"
grace = 2
env = { A = "1", B = "2" }
repeat = 3
result_event = { type = "run_end", field = "exitCode" }

[[task]]
name = "a"
run = ["echo", "hi"]

[[task]]
name = "b"
shell = "exit 3"
timeout = 0.5
env = { B = "x" }
expect_exit = 3
cwd = "sub"
"#)
        .unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].spec.timeout_ms, Some(Duration::from_secs(90)));
        assert_eq!(t[0].spec.grace_ms, Some(Duration::from_secs(2)));
        assert_eq!(t[0].repeat, 3);
        assert_eq!(t[0].spec.argv, Some(vec!["echo".into(), "hi".into()]));
        assert!(t[0].result_event.is_some());
        assert_eq!(t[0].spec.leftovers, Some(LeftoverPolicy::Kill));
        assert_eq!(t[1].spec.argv, None);
        assert_eq!(t[1].spec.command.as_deref(), Some("exit 3"));
        assert_eq!(
            t[1].spec.program_and_args().unwrap(),
            [SHELL, "-c", "exit 3"]
        );
        assert_eq!(t[1].spec.timeout_ms, Some(Duration::from_millis(500)));
        assert_eq!(
            t[1].spec.env,
            Some(
                [("A".into(), "1".into()), ("B".into(), "x".into())]
                    .into_iter()
                    .collect()
            )
        );
        assert_eq!(t[1].expect_exit, 3);
        assert_eq!(t[1].result_event, None, "expect_exit replaces the default");
        assert_eq!(t[1].spec.cwd.as_deref(), Some(Path::new("/base/sub")));
    }

    #[track_caller]
    fn bad(text: &str, line: usize, key: &str, msg: &str) {
        let e = p(text).unwrap_err();
        assert_eq!(e.line, line, "{e}");
        assert_eq!(e.key.as_deref(), Some(key), "{e}");
        assert!(e.message.contains(msg), "{e}");
        assert!(e.to_string().starts_with(&format!("m.toml:{line}:")), "{e}");
    }

    #[test]
    fn errors_name_line_and_key() {
        bad(
            "[[task]]\nname = \"a\"\nrun = [\"x\"]\ntimout = \"1s\"\n",
            4,
            "task[0].timout",
            "unknown field",
        );
        bad(
            "[[task]]\nname = \"a\"\nrun = [\"x\"]\n\n[[task]]\nname = \"b\"\nrun = [\"y\"]\ntimeout = \"abc\"\n",
            8,
            "task[1].timeout",
            "invalid duration",
        );
        bad(
            "[defaults]\nwait_delay = \"-3s\"\n[[task]]\nname = \"a\"\nrun = [\"x\"]\n",
            2,
            "defaults.wait_delay",
            "invalid duration",
        );
        bad("[[task]]\nname = \"a\"\n", 2, "task[0].run", "neither");
        bad(
            "[[task]]\nname = \"a\"\nrun = [\"x\"]\nshell = \"y\"\n",
            4,
            "task[0].shell",
            "both",
        );
        bad(
            "[[task]]\nname = \"a\"\nrun = []\n",
            3,
            "task[0].run",
            "program",
        );
        bad(
            "[[task]]\nname = \"a\"\nrun = [\"x\"]\nrepeat = 0\n",
            4,
            "task[0].repeat",
            "at least 1",
        );
        bad(
            "[[task]]\nname = \"a\"\nrun = [\"x\"]\nenv = { A = 1 }\n",
            4,
            "task[0].env.A",
            "invalid type",
        );
        bad(
            "[[task]]\nname = \"a\"\nrun = [\"x\"]\n[[task]]\nname = \"a\"\nrun = [\"x\"]\n",
            5,
            "task[1].name",
            "duplicate",
        );
        bad(
            "[[task]]\nname = \"a\"\nrun = [\"x\"]\nresult_event = { type = \"run_end\", feild = \"x\" }\n",
            4,
            "task[0].result_event.feild",
            "unknown field",
        );
        bad(
            "jobs = 3\n[[task]]\nname = \"a\"\nrun = [\"x\"]\n",
            1,
            "jobs",
            "unknown field",
        );
        bad(
            "[[task]]\nname = \"a\"\nrun = [\"x\"]\nleftovers = \"never\"\n",
            4,
            "task[0].leftovers",
            "unknown variant",
        );
    }

    #[test]
    fn the_fingerprint_ignores_layout_and_sees_what_runs() {
        let a = p("# a comment\n[defaults]\ntimeout = \"1m\"\n[[task]]\nname = \"a\"\nrun = [\"x\", \"y\"]\nrepeat = 2\n")
            .unwrap();
        let b =
            p("[[task]]\nrepeat = 2\nrun = [ \"x\",\"y\" ]\nname = \"a\"\ntimeout = 60\n").unwrap();
        assert_eq!(fingerprint(&a), fingerprint(&b));
        assert_eq!(fingerprint(&a).len(), 16);
        for other in [
            "[[task]]\nname = \"a\"\nrun = [\"x\", \"z\"]\nrepeat = 2\ntimeout = 60\n",
            "[[task]]\nname = \"a\"\nrun = [\"x\", \"y\"]\nrepeat = 3\ntimeout = 60\n",
            "[[task]]\nname = \"a\"\nrun = [\"x\", \"y\"]\nrepeat = 2\ntimeout = 61\n",
            "[[task]]\nname = \"b\"\nrun = [\"x\", \"y\"]\nrepeat = 2\ntimeout = 60\n",
            "[[task]]\nname = \"a\"\nrun = [\"x\", \"y\"]\nrepeat = 2\ntimeout = 60\nenv = { A = \"1\" }\n",
        ] {
            assert_ne!(fingerprint(&a), fingerprint(&p(other).unwrap()), "{other}");
        }
        // Where the manifest sits does not matter; `cwd` as written does.
        let here = parse(
            "m.toml",
            "[[task]]\nname = \"a\"\nrun = [\"x\"]\ncwd = \"sub\"\n",
            Path::new("/one"),
        )
        .unwrap();
        let there = parse(
            "m.toml",
            "[[task]]\nname = \"a\"\nrun = [\"x\"]\ncwd = \"sub\"\n",
            Path::new("/two"),
        )
        .unwrap();
        assert_eq!(fingerprint(&here), fingerprint(&there));
    }

    #[test]
    fn new_keys_and_their_defaults() {
        let t = p("[defaults]\nretries = 2\nwarmup = 1\nserial = true\nmemory_max = \"64M\"\npids_max = 10\ncontainment = \"process-group\"\n[[task]]\nname = \"a\"\nrun = [\"x\"]\n[[task]]\nname = \"b\"\nrun = [\"x\"]\nretries = 0\nserial = false\nmemory_max = 4096\n").unwrap();
        assert_eq!((t[0].retries, t[0].warmup, t[0].serial), (2, 1, true));
        assert_eq!(
            (t[0].spec.memory_max, t[0].spec.pids_max),
            (Some(64 << 20), Some(10))
        );
        assert_eq!(t[0].spec.containment, Some(Containment::ProcessGroup));
        assert_eq!(
            (t[1].retries, t[1].serial, t[1].spec.memory_max),
            (0, false, Some(4096))
        );
        bad(
            "[[task]]\nname = \"a\"\nrun = [\"x\"]\npids_max = 0\n",
            4,
            "task[0].pids_max",
            "at least 1",
        );
        bad(
            "[[task]]\nname = \"a\"\nrun = [\"x\"]\nmemory_max = \"lots\"\n",
            4,
            "task[0].memory_max",
            "invalid size",
        );
        bad(
            "[[task]]\nname = \"a\"\nrun = [\"x\"]\ncontainment = \"jail\"\n",
            4,
            "task[0].containment",
            "unknown variant",
        );
        bad(
            "[[task]]\nname = \"a\"\nrun = [\"x\"]\nretries = -1\n",
            4,
            "task[0].retries",
            "invalid value",
        );
    }

    #[test]
    fn require_crash_safety_defaults_overrides_and_fingerprint() {
        let t = p("[defaults]\nrequire_crash_safety = true\n[[task]]\nname = \"a\"\nrun = [\"x\"]\n[[task]]\nname = \"b\"\nrun = [\"x\"]\nrequire_crash_safety = false\ncontainment = \"pid-namespace\"\n[[task]]\nname = \"c\"\nrun = [\"x\"]\n").unwrap();
        assert!(
            t[0].spec.require_crash_safety
                && !t[1].spec.require_crash_safety
                && t[2].spec.require_crash_safety
        );
        assert_eq!(t[1].spec.containment, Some(Containment::PidNamespace));
        assert!(
            !p("[[task]]\nname = \"a\"\nrun = [\"x\"]\n").unwrap()[0]
                .spec
                .require_crash_safety
        );
        // Requiring it changes what runs; leaving it out (or false) keeps
        // the fingerprint a manifest had before the key existed.
        let plain = "[[task]]\nname = \"a\"\nrun = [\"x\"]\n";
        let off = "[[task]]\nname = \"a\"\nrun = [\"x\"]\nrequire_crash_safety = false\n";
        let on = "[[task]]\nname = \"a\"\nrun = [\"x\"]\nrequire_crash_safety = true\n";
        let f = |t: &str| fingerprint(&p(t).unwrap());
        assert_eq!(f(plain), f(off));
        // FNV-1a of the canonical text as written before the key existed.
        assert_eq!(f(plain), "adcdc0a49635abce");
        assert_ne!(f(plain), f(on));
        bad(
            "[[task]]\nname = \"a\"\nrun = [\"x\"]\nrequire_crash_safety = \"yes\"\n",
            4,
            "task[0].require_crash_safety",
            "invalid type",
        );
    }

    /// `sandbox = true` (task or defaults) with its policy keys, the task's
    /// own winning; relative paths from the manifest's directory; a policy
    /// key without a sandbox, a missing path or a bad network is an error
    /// naming the key. Unix paths (the sandbox is Linux's; Windows spells
    /// `/tmp` as `Z:\\tmp` under Wine).
    #[cfg(unix)]
    #[test]
    fn sandbox_keys() {
        let q = |text: &str| parse("m.toml", text, Path::new("/"));
        let t = q(r#"
[defaults]
sandbox = true
allow_write = ["tmp"]
network = "loopback"
[[task]]
name = "a"
run = ["x"]
[[task]]
name = "b"
run = ["x"]
deny_read = ["/proc", "etc"]
network = "host"
[[task]]
name = "c"
run = ["x"]
sandbox = false
"#)
        .unwrap();
        let a = t[0].spec.sandbox.as_ref().unwrap();
        assert_eq!(a.allow_write, [Path::new("/tmp")]);
        assert_eq!(a.network, corral::Network::Loopback);
        let b = t[1].spec.sandbox.as_ref().unwrap();
        assert_eq!(b.allow_write, [Path::new("/tmp")]);
        assert_eq!(b.deny_read, [Path::new("/proc"), Path::new("/etc")]);
        assert_eq!(b.network, corral::Network::Host);
        assert_eq!(t[2].spec.sandbox, None);
        // The default policy; the fingerprint changes with the sandbox.
        let plain = "[[task]]\nname = \"a\"\nrun = [\"x\"]\n";
        let on = format!("{plain}sandbox = true\n");
        let t = q(&on).unwrap();
        assert_eq!(t[0].spec.sandbox, Some(SandboxSpec::default()));
        let f = |t: &str| fingerprint(&q(t).unwrap());
        assert_eq!(f(plain), "adcdc0a49635abce");
        assert_ne!(f(plain), f(&on));
        assert_ne!(f(&on), f(&format!("{on}network = \"host\"\n")));
        let bad = |text: &str, key: &str, msg: &str| {
            let e = q(text).unwrap_err();
            assert_eq!(e.key.as_deref(), Some(key), "{e}");
            assert!(e.message.contains(msg), "{e}");
        };
        bad(
            &format!("{plain}allow_write = [\"/tmp\"]\n"),
            "task[0].allow_write",
            "not sandboxed",
        );
        bad(
            &format!("{plain}network = \"none\"\n"),
            "task[0].network",
            "sandbox = true",
        );
        bad(
            &format!("[defaults]\ndeny_read = [\"/tmp\"]\n{plain}"),
            "defaults.deny_read",
            "no task is sandboxed",
        );
        bad(
            &format!("{on}network = \"bogus\"\n"),
            "task[0].network",
            "expected none, loopback",
        );
        bad(
            &format!("{on}network = 1\n"),
            "task[0].network",
            "a network policy",
        );
        bad(
            &format!("{plain}sandbox = \"yes\"\n"),
            "task[0].sandbox",
            "invalid type",
        );
        bad(
            &format!("{on}allow_write = \"/tmp\"\n"),
            "task[0].allow_write",
            "invalid type",
        );
        bad(
            &format!("{on}allow_write = [\"/tmp\", \"nonexistent-corral\"]\n"),
            "task[0].allow_write[1]",
            "/nonexistent-corral does not exist",
        );
        bad(
            &format!("{on}deny_read = [\"\"]\n"),
            "task[0].deny_read[0]",
            "empty",
        );
        bad(
            &format!("{on}deny_read = [\"a\\u0000b\"]\n"),
            "task[0].deny_read[0]",
            "NUL",
        );
    }

    #[test]
    fn syntax_errors_and_empty_manifests() {
        let e = p("[[task]]\nname = \"a\nrun = [\"x\"]\n").unwrap_err();
        assert_eq!(e.line, 2, "{e}");
        let e = p("# nothing\n").unwrap_err();
        assert!(e.message.contains("no tasks"), "{e}");
    }
}
