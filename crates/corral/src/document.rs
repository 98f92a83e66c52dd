//! The run report as a document (feature `serde`): the typed form of the
//! JSON object `corral run --report` writes, of each run of a `corral batch
//! --report`, and of [`Report`]'s own serialisation. Every producer builds
//! these types and every consumer (the command line, batch, merge, JUnit,
//! Markdown, Python, Node) reads them; the JSON Schema in
//! docs/report-schema.json is generated from [`RunReport`] (feature
//! `schema`: `run_report_schema`).
//!
//! The request has its document too: [`RunSpec`], every option of a run
//! a front end can set, mapped onto a [`Command`](crate::Command) by
//! [`Command::from_spec`](crate::Command::from_spec); docs/run-spec-schema.json
//! is generated from it.
//!
//! A document read back (`corral merge` reads shard reports) is checked
//! whole: an unknown or misspelt key is an error, never a silently
//! defaulted field.

use serde::{Deserialize, Serialize};

mod run_spec;
#[cfg(feature = "schema")]
pub use run_spec::run_spec_schema;
pub use run_spec::{Containment, PtySpec, RunSpec, SandboxSpec, SpecError, SHELL};

use crate::report::{
    CleanupError, CleanupStep, LimitHit, Mechanism, Report, RootStatus, TimeoutKind,
};

/// The version of the report format these types read and write: a change
/// that renames, removes or retypes a field raises it. A batch report
/// carries it as `format_version`; the schema's `$comment` names it.
pub const FORMAT_VERSION: u32 = 2;

/// Milliseconds with microsecond precision, as every time in a report.
pub fn ms(d: std::time::Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

/// What happened to a run, as a report names it: a [`Report`]'s
/// [`outcome_name`](Report::outcome_name), or why it did not start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum OutcomeName {
    /// The root exited by itself (an ordinary result only with a null `error`).
    Exited,
    /// The root was ended by a signal corral did not send.
    Signaled,
    /// The deadline or the idle timeout passed; the tree was terminated.
    TimedOut,
    /// The run was cancelled; the tree was terminated.
    Cancelled,
    /// A descendant held the output open past the wait delay; the holders were killed.
    OutputHeld,
    /// The output passed the limit; the tree was terminated.
    OutputLimit,
    /// The command could not be started.
    SpawnFailed,
    /// The containment asked for could not be set up.
    ContainmentFailed,
    /// The sandbox asked for cannot be enforced here; nothing ran.
    SandboxFailed,
    /// Cleanup failed after the command ran (`error` says how).
    CleanupFailed,
}

impl OutcomeName {
    /// The name as it appears in reports (`timed_out`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            OutcomeName::Exited => "exited",
            OutcomeName::Signaled => "signaled",
            OutcomeName::TimedOut => "timed_out",
            OutcomeName::Cancelled => "cancelled",
            OutcomeName::OutputHeld => "output_held",
            OutcomeName::OutputLimit => "output_limit",
            OutcomeName::SpawnFailed => "spawn_failed",
            OutcomeName::ContainmentFailed => "containment_failed",
            OutcomeName::SandboxFailed => "sandbox_failed",
            OutcomeName::CleanupFailed => "cleanup_failed",
        }
    }

    /// The outcome of a name (as [`as_str`](Self::as_str) gives it).
    pub fn from_name(name: &str) -> Option<OutcomeName> {
        ALL_OUTCOMES.into_iter().find(|o| o.as_str() == name)
    }
}

const ALL_OUTCOMES: [OutcomeName; 10] = [
    OutcomeName::Exited,
    OutcomeName::Signaled,
    OutcomeName::TimedOut,
    OutcomeName::Cancelled,
    OutcomeName::OutputHeld,
    OutcomeName::OutputLimit,
    OutcomeName::SpawnFailed,
    OutcomeName::ContainmentFailed,
    OutcomeName::SandboxFailed,
    OutcomeName::CleanupFailed,
];

impl std::fmt::Display for OutcomeName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How one of corral's streams reached the program.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum StreamPath {
    /// Through corral (a pipe or socket): counted, holders waited for at most the wait delay.
    Relayed,
    /// Directly (a terminal or file): not counted, not waited for.
    PassedThrough,
}

/// How each of corral's streams reached the program (`corral run`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct OutputPaths {
    /// corral's stdout.
    pub stdout: StreamPath,
    /// corral's stderr.
    pub stderr: StreamPath,
}

/// One cleanup step that failed, as a report names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CleanupFailure {
    /// The step: `confirm_death` (processes survived SIGKILL), `signal`,
    /// `members` (listing the tree), `wait`, `release` or `crash_safety`.
    pub step: CleanupStep,
    /// What failed, in words (with the OS error).
    pub error: String,
    /// The OS error number, when the failure has one.
    pub os_error: Option<i32>,
}

impl From<&CleanupError> for CleanupFailure {
    fn from(e: &CleanupError) -> CleanupFailure {
        CleanupFailure {
            step: e.step(),
            error: e.to_string(),
            os_error: e.io_error().and_then(std::io::Error::raw_os_error),
        }
    }
}

/// Milliseconds since just before the spawn.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TimingsMs {
    /// How long the spawn took.
    #[cfg_attr(feature = "schema", schemars(range(min = 0)))]
    pub spawn: f64,
    /// When the root's exit was observed, if it was.
    #[cfg_attr(feature = "schema", schemars(range(min = 0)))]
    pub root_exit: Option<f64>,
    /// When every captured stream reached end of file, if they did.
    #[cfg_attr(feature = "schema", schemars(range(min = 0)))]
    pub output_closed: Option<f64>,
    /// When cleanup (signals, death confirmed, identity released) was done.
    #[cfg_attr(feature = "schema", schemars(range(min = 0)))]
    pub cleanup_done: f64,
}

/// Tree-wide resource usage from the cgroup; each field null when the
/// kernel does not provide it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct UsageMs {
    /// CPU time in user mode, the whole tree, in milliseconds.
    #[cfg_attr(feature = "schema", schemars(range(min = 0)))]
    pub cpu_user_ms: Option<f64>,
    /// CPU time in kernel mode, the whole tree, in milliseconds.
    #[cfg_attr(feature = "schema", schemars(range(min = 0)))]
    pub cpu_system_ms: Option<f64>,
    /// Peak memory of the whole tree, in bytes.
    pub memory_peak: Option<u64>,
    /// Most processes alive at once in the tree.
    pub pids_peak: Option<u64>,
}

/// A field only the command line writes: absent (`None`) from a
/// [`Report`]'s own serialisation, else its value, null included.
mod present {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<T: Serialize, S: Serializer>(v: &Option<T>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(v) => v.serialize(s),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, T: Deserialize<'de>, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<T>, D::Error> {
        T::deserialize(d).map(Some)
    }
}

/// One run's report: the object `corral run --report` writes (every field
/// present; absent values are null), the fields of each run of a `corral
/// batch --report`, and (without `output`, `received_signal` and
/// `corral_exit`, which only the command line knows) a [`Report`]'s
/// serialisation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RunReport {
    /// What happened. Only `exited` with a null `error` is an ordinary result.
    pub outcome: OutcomeName,
    /// Which limit fired on a `timed_out` run: `deadline` (the timeout) or
    /// `idle` (no output on a stream corral sees for the idle timeout); null
    /// when no timeout fired (also on an `output_limit` run).
    pub timeout_kind: Option<TimeoutKind>,
    /// The root's own exit code, when it exited (also after a timeout or with held output).
    pub exit_code: Option<i32>,
    /// The raw number of the signal the root died of, named or not.
    #[cfg_attr(feature = "schema", schemars(range(min = 1)))]
    pub signal: Option<i32>,
    /// The signal's name (`SIGKILL`, `SIGRTMIN+3`, `signal 32` when it has none).
    pub signal_name: Option<String>,
    /// The containment mechanism used (null when none was set up).
    pub containment: Option<Mechanism>,
    /// Why a stronger mechanism was not used, and how to get it.
    pub containment_note: Option<String>,
    /// Whether the tree would have been killed had corral itself died (the
    /// crash-safety keeper, the namespace init, the job). false: the run was
    /// contained as usual, but corral's own death would have left it running
    /// (`crash_safety_note` says why); `--require-crash-safety` makes that a
    /// `containment_failed` instead. null when the run did not start.
    pub crash_safe: Option<bool>,
    /// Why the run was not crash-safe (null when it was, or did not start).
    pub crash_safety_note: Option<String>,
    /// Processes other than the root that died of a signal corral sent (one
    /// signalled that survived, or died of something else, is not counted).
    pub killed: u64,
    /// Processes other than the root left running by the leftovers policy.
    pub kept: u64,
    /// From spawn to the end of cleanup, in milliseconds.
    #[cfg_attr(feature = "schema", schemars(range(min = 0)))]
    pub duration_ms: f64,
    /// Bytes the program wrote to stdout (every byte corral read from it; on
    /// an `output_limit` run also those read past the limit, which were
    /// dropped: neither relayed nor captured); null for a stream passed
    /// through (a terminal or file) or a run that did not start.
    pub stdout_bytes: Option<u64>,
    /// As stdout_bytes, for stderr.
    pub stderr_bytes: Option<u64>,
    /// How each of corral's streams reached the program (`corral run` only;
    /// null in batch runs and for a run that did not start).
    #[serde(default, skip_serializing_if = "Option::is_none", with = "present")]
    #[cfg_attr(feature = "schema", schemars(with = "Option<OutputPaths>"))]
    pub output: Option<Option<OutputPaths>>,
    /// What kept the run from being an ordinary exit, in words (null for an
    /// exit or a signal the root died of by itself).
    pub error: Option<String>,
    /// The root's process id (null when nothing started).
    pub pid: Option<u32>,
    /// The signals corral sent to the tree, in order, as numbers.
    #[cfg_attr(feature = "schema", schemars(inner(range(min = 1))))]
    pub signals_sent: Vec<i32>,
    /// The signal corral itself received and passed on to the tree (`corral
    /// run`), as a number.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "present")]
    #[cfg_attr(feature = "schema", schemars(with = "Option<i32>", range(min = 1)))]
    pub received_signal: Option<Option<i32>>,
    /// Every cleanup step that failed, in order (each step once, with its
    /// first error); not empty exactly when the outcome is `cleanup_failed`.
    pub cleanup_errors: Vec<CleanupFailure>,
    /// Processes still alive after the confirm window (outcome `cleanup_failed`).
    pub survivors: Vec<u32>,
    /// Milliseconds since just before the spawn (null when nothing started).
    pub timings_ms: Option<TimingsMs>,
    /// Tree-wide resource usage from the cgroup (cgroup containment only;
    /// each field null when the kernel does not provide it).
    pub usage: Option<UsageMs>,
    /// Tree-wide limits the tree ran into.
    pub limits_hit: Vec<LimitHit>,
    /// What the sandbox enforced, rule by rule, and with which mechanisms
    /// (null: no sandbox).
    #[serde(default)]
    pub sandbox: Option<crate::SandboxReport>,
    /// corral's own exit status for this run.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "present")]
    #[cfg_attr(feature = "schema", schemars(with = "i32"))]
    pub corral_exit: Option<i32>,
    /// The persistent shell session the command ran in (`Session::run`);
    /// absent for a run of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

/// The fields the command line always writes, absent from a [`Report`]'s
/// own serialisation.
pub const COMMAND_LINE_FIELDS: [&str; 3] = ["output", "received_signal", "corral_exit"];

impl RunReport {
    /// The report of a run that did not start (or whose report is all the
    /// command line has): `outcome`, `containment` when one was chosen, the
    /// time spent, the error, and every other field empty. The command-line
    /// fields are absent until set.
    pub fn not_started(
        outcome: OutcomeName,
        containment: Option<Mechanism>,
        duration: std::time::Duration,
        error: String,
    ) -> RunReport {
        RunReport {
            outcome,
            timeout_kind: None,
            exit_code: None,
            signal: None,
            signal_name: None,
            containment,
            containment_note: None,
            crash_safe: None,
            crash_safety_note: None,
            killed: 0,
            kept: 0,
            duration_ms: ms(duration),
            stdout_bytes: None,
            stderr_bytes: None,
            output: None,
            error: Some(error),
            pid: None,
            signals_sent: Vec::new(),
            received_signal: None,
            cleanup_errors: Vec::new(),
            survivors: Vec::new(),
            timings_ms: None,
            usage: None,
            limits_hit: Vec::new(),
            sandbox: None,
            corral_exit: None,
            session_id: None,
        }
    }

    /// The same report with the command line's fields set (each present,
    /// null when `None`).
    pub fn with_command_line(
        mut self,
        output: Option<OutputPaths>,
        received_signal: Option<i32>,
        corral_exit: i32,
    ) -> RunReport {
        self.output = Some(output);
        self.received_signal = Some(received_signal);
        self.corral_exit = Some(corral_exit);
        self
    }
}

impl From<&Report> for RunReport {
    fn from(r: &Report) -> RunReport {
        let signal = r.root.and_then(RootStatus::signal);
        let t = &r.timings;
        RunReport {
            outcome: OutcomeName::from_name(r.outcome_name()).unwrap_or(OutcomeName::Exited),
            timeout_kind: r.timeout_kind,
            exit_code: r.root.and_then(RootStatus::code),
            signal: signal.map(|s| s.as_raw()),
            signal_name: signal.map(|s| s.to_string()),
            containment: Some(r.containment),
            containment_note: r.containment_note.clone(),
            crash_safe: Some(r.crash_safety.is_held()),
            crash_safety_note: r.crash_safety.note().map(str::to_owned),
            killed: r.leftovers.killed as u64,
            kept: r.leftovers.kept as u64,
            duration_ms: ms(r.duration()),
            stdout_bytes: Some(r.stdout.total_bytes()),
            stderr_bytes: Some(r.stderr.total_bytes()),
            output: None,
            error: r.error_message(),
            pid: Some(r.pid),
            signals_sent: r.signals_sent.iter().map(|s| s.as_raw()).collect(),
            received_signal: None,
            cleanup_errors: r.cleanup_errors.iter().map(CleanupFailure::from).collect(),
            survivors: r
                .cleanup_errors
                .iter()
                .flat_map(|e| e.survivors().iter().copied())
                .collect(),
            timings_ms: Some(TimingsMs {
                spawn: ms(t.spawn),
                root_exit: t.root_exit.map(ms),
                output_closed: t.output_closed.map(ms),
                cleanup_done: ms(t.cleanup_done),
            }),
            usage: r.usage.map(|u| UsageMs {
                cpu_user_ms: u.cpu_user.map(ms),
                cpu_system_ms: u.cpu_system.map(ms),
                memory_peak: u.memory_peak,
                pids_peak: u.pids_peak,
            }),
            limits_hit: r.limits_hit.clone(),
            sandbox: r.sandbox.clone(),
            corral_exit: None,
            session_id: None,
        }
    }
}

impl Serialize for Report {
    /// As the [`RunReport`] of this report (without the command line's fields).
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        RunReport::from(self).serialize(s)
    }
}

/// The JSON Schema of [`RunReport`] (draft 2020-12), as
/// docs/report-schema.json holds it.
#[cfg(feature = "schema")]
pub fn run_report_schema() -> serde_json::Value {
    use serde_json::Value;
    let settings = schemars::generate::SchemaSettings::draft2020_12().for_serialize();
    let schema = settings
        .into_generator()
        .into_root_schema_for::<RunReport>();
    let mut v = schema.to_value();
    if let Some(o) = v.as_object_mut() {
        let mut out = serde_json::Map::new();
        out.insert("$schema".into(), o.remove("$schema").unwrap_or(Value::Null));
        out.insert(
            "$id".into(),
            "https://github.com/corral-rs/corral/blob/main/docs/report-schema.json".into(),
        );
        out.insert(
            "$comment".into(),
            format!(
                "Report format version {FORMAT_VERSION}. Generated from corral::document::RunReport: \
                 do not edit; regenerate with `CORRAL_BLESS=1 cargo test -p corral-process \
                 --all-features --lib document`."
            )
            .into(),
        );
        out.insert("title".into(), "corral run report".into());
        out.insert(
            "description".into(),
            "The JSON object `corral run --report FILE` writes, one per run; each run of a \
             `corral batch --report` embeds the same fields. The library's `Report` (feature \
             `serde`) serialises to the same object without `output`, `received_signal` and \
             `corral_exit`. Every field is always present; absent values are null."
                .into(),
        );
        o.remove("title");
        o.remove("description");
        // The command line always writes its fields (null when empty).
        if let Some(Value::Array(req)) = o.get_mut("required") {
            for f in COMMAND_LINE_FIELDS {
                if !req.iter().any(|r| r == f) {
                    req.push(f.into());
                }
            }
            let order: Vec<String> = o
                .get("properties")
                .and_then(Value::as_object)
                .map(|p| p.keys().cloned().collect())
                .unwrap_or_default();
            if let Some(Value::Array(req)) = o.get_mut("required") {
                req.sort_by_key(|r| order.iter().position(|k| r == k));
            }
        }
        out.append(o);
        v = Value::Object(out);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Outcome, Signal};

    fn sample() -> Report {
        let mut r = Report::synthetic(Outcome::TimedOut, Mechanism::Cgroup);
        r.timeout_kind = Some(TimeoutKind::Idle);
        r.root = Some(RootStatus::Signaled(Signal::TERM));
        r.pid = 42;
        r.signals_sent = vec![Signal::TERM, Signal::KILL];
        r.limits_hit = vec![LimitHit::Memory];
        r.usage = Some(crate::report::Usage {
            cpu_user: Some(std::time::Duration::from_micros(1500)),
            ..Default::default()
        });
        r
    }

    #[test]
    fn a_report_round_trips() {
        let doc = RunReport::from(&sample());
        let text = serde_json::to_string(&doc).unwrap();
        let back: RunReport = serde_json::from_str(&text).unwrap();
        assert_eq!(back, doc);
        // The library's form: 23 fields, no command-line ones.
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v.as_object().unwrap().len(), 23, "{v}");
        assert_eq!(v["outcome"], "timed_out");
        assert_eq!(v["timeout_kind"], "idle");
        assert_eq!(v["signal_name"], "SIGTERM");
        assert_eq!(v["signals_sent"], serde_json::json!([15, 9]));
        assert_eq!(v["usage"]["cpu_user_ms"], 1.5);
        // The command line's form: 26, null ones included, and back.
        let cli = doc.with_command_line(None, None, 124);
        let text = serde_json::to_string(&cli).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v.as_object().unwrap().len(), 26, "{v}");
        assert!(v["output"].is_null() && v["received_signal"].is_null());
        let back: RunReport = serde_json::from_str(&text).unwrap();
        assert_eq!(back, cli);
    }

    #[test]
    fn every_cleanup_failure_is_in_the_document_in_order() {
        let mut r = sample();
        r.cleanup_errors = vec![
            CleanupError::signal(std::io::Error::from_raw_os_error(1)),
            CleanupError::Survivors { pids: vec![7, 8] },
            CleanupError::release(std::io::Error::from_raw_os_error(16)),
        ];
        let v = serde_json::to_value(RunReport::from(&r)).unwrap();
        assert_eq!(v["outcome"], "cleanup_failed");
        let list = v["cleanup_errors"].as_array().unwrap();
        let steps: Vec<&str> = list.iter().map(|e| e["step"].as_str().unwrap()).collect();
        assert_eq!(steps, ["signal", "confirm_death", "release"]);
        assert_eq!(list[0]["os_error"], 1);
        assert!(list[1]["os_error"].is_null());
        assert_eq!(list[2]["os_error"], 16);
        for (e, want) in list.iter().zip(&r.cleanup_errors) {
            assert_eq!(e["error"], want.to_string());
            assert_eq!(e["step"], want.step().name());
        }
        assert_eq!(v["survivors"], serde_json::json!([7, 8]));
        let error = v["error"].as_str().unwrap();
        assert!(
            error.contains("could not signal") && error.contains("could not release"),
            "{error}"
        );
        let back: RunReport = serde_json::from_value(v).unwrap();
        assert_eq!(back.cleanup_errors.len(), 3);
        // A clean run has an empty list.
        let v = serde_json::to_value(RunReport::from(&sample())).unwrap();
        assert_eq!(v["cleanup_errors"], serde_json::json!([]));
    }

    #[test]
    fn outcome_names_match_the_library() {
        for o in ALL_OUTCOMES {
            assert_eq!(OutcomeName::from_name(o.as_str()), Some(o));
            assert_eq!(serde_json::to_value(o).unwrap(), o.as_str());
        }
        for o in [
            Outcome::Exited(0),
            Outcome::Signaled(Signal::KILL),
            Outcome::TimedOut,
            Outcome::Cancelled,
            Outcome::OutputHeld,
            Outcome::OutputLimit,
        ] {
            assert!(OutcomeName::from_name(o.name()).is_some(), "{o:?}");
        }
    }

    /// docs/report-schema.json is the schema generated from [`RunReport`];
    /// `CORRAL_BLESS=1` rewrites it.
    #[cfg(feature = "schema")]
    #[test]
    fn the_schema_file_is_the_generated_schema() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/report-schema.json");
        let mut want = serde_json::to_string_pretty(&run_report_schema()).unwrap();
        want.push('\n');
        if std::env::var_os("CORRAL_BLESS").is_some() {
            std::fs::write(path, &want).unwrap();
            return;
        }
        let have = std::fs::read_to_string(path).unwrap_or_default();
        if have != want {
            let diff: Vec<String> = have
                .lines()
                .zip(want.lines())
                .enumerate()
                .filter(|(_, (a, b))| a != b)
                .take(10)
                .map(|(i, (a, b))| format!("line {}:\n  file:      {a}\n  generated: {b}", i + 1))
                .collect();
            panic!(
                "docs/report-schema.json is not the schema generated from RunReport \
                 ({} lines in the file, {} generated); first differences:\n{}\n\
                 Regenerate it with: CORRAL_BLESS=1 cargo test -p corral-process --all-features --lib document",
                have.lines().count(),
                want.lines().count(),
                diff.join("\n")
            );
        }
    }
}
