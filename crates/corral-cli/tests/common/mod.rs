//! Harness for running the `corral` binary in tests: spawn it with a
//! scratch environment, read its stdout/stderr on threads (so EOF time is
//! measured independently of its exit), and wait for it with a bound.

#![allow(dead_code)]

use std::ffi::OsStr;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use corral::Mechanism;
use corral_testkit::scenario::{Count, Fate};
use corral_testkit::{Scratch, Watch};
use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_corral");

/// How long a helper may take to show up, or to die once it should.
pub const FATE: Duration = Duration::from_secs(3);

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Bytes of each stream kept in memory (the total is always counted).
const KEEP: usize = 8 << 20;

/// Writes the root shell's own pid as helper `root`, so the Watch pins it.
pub const ROOT: &str = r#"echo $$ > "$CORRAL_TEST_DIR/root.tmp" && mv "$CORRAL_TEST_DIR/root.tmp" "$CORRAL_TEST_DIR/root.pid"; "#;

/// Shell text that waits until helper `name` has written its pid file and
/// become `sleep` (its `mv` is gone), and the test's Watch has pinned it,
/// so the tree is exactly as intended, and watched, before the root moves
/// on (as `corral_testkit::ready`).
pub fn wait_for(name: &str) -> String {
    format!(
        r#"until [ "$(cat /proc/$(cat "$CORRAL_TEST_DIR/{name}.pid" 2>/dev/null)/comm 2>/dev/null)" = sleep ] && [ -e "$CORRAL_TEST_DIR/{name}.pinned" -o ! -e "$CORRAL_TEST_DIR/.watched" ]; do sleep 0.01; done; "#
    )
}

/// A backgrounded helper `ign` that ignores TERM, INT and HUP (ignored
/// before the helper starts, so it can never be caught unprotected).
pub const IGN: &str = r#"(trap '' TERM INT HUP; exec "$H" ign) & "#;

/// `corral ARGS...` with the scratch environment, run in the scratch dir
/// (core dumps land there), stdin from /dev/null.
pub fn corral<I, S>(s: &Scratch, args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut c = Command::new(BIN);
    c.args(args)
        .envs(s.env())
        .current_dir(s.dir())
        .stdin(Stdio::null());
    c
}

/// The report path of a scratch, as a string argument.
pub fn report_path(s: &Scratch) -> String {
    s.path("report.json").to_str().unwrap().to_owned()
}

/// Where one of corral's output streams goes.
pub enum Sink {
    /// A pipe read to EOF on a thread.
    Pipe,
    /// A pipe the test handles itself (`Run::child.stdout/stderr`).
    RawPipe,
    /// A regular file.
    File(PathBuf),
    /// /dev/null.
    Null,
}

impl Sink {
    fn stdio(&self) -> Stdio {
        match self {
            Sink::Pipe | Sink::RawPipe => Stdio::piped(),
            Sink::File(p) => Stdio::from(std::fs::File::create(p).unwrap()),
            Sink::Null => Stdio::null(),
        }
    }
}

/// What a reader thread saw on one stream.
pub struct Stream {
    /// The first bytes (up to 8 MiB).
    pub bytes: Vec<u8>,
    /// Every byte read.
    pub total: u64,
    /// When EOF was read.
    pub eof_at: Instant,
}

impl Stream {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }
}

fn reader(mut r: impl Read + Send + 'static) -> mpsc::Receiver<Stream> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut buf = vec![0u8; 256 * 1024];
        let mut bytes = Vec::new();
        let mut total = 0u64;
        loop {
            match r.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    total += n as u64;
                    if bytes.len() < KEEP {
                        let k = n.min(KEEP - bytes.len());
                        bytes.extend_from_slice(&buf[..k]);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        let _ = tx.send(Stream {
            bytes,
            total,
            eof_at: Instant::now(),
        });
    });
    rx
}

/// A running corral.
pub struct Run {
    pub child: Child,
    pub started: Instant,
    out: Option<mpsc::Receiver<Stream>>,
    err: Option<mpsc::Receiver<Stream>>,
}

/// A finished corral.
pub struct Done {
    pub status: ExitStatus,
    pub started: Instant,
    pub exited_at: Instant,
    pub stdout: Option<Stream>,
    pub stderr: Option<Stream>,
}

pub fn start(mut c: Command, out: Sink, err: Sink) -> Run {
    c.stdout(out.stdio()).stderr(err.stdio());
    let started = Instant::now();
    let mut child = c.spawn().expect("spawn corral");
    let out = match out {
        Sink::Pipe => Some(reader(child.stdout.take().unwrap())),
        _ => None,
    };
    let err = match err {
        Sink::Pipe => Some(reader(child.stderr.take().unwrap())),
        _ => None,
    };
    Run {
        child,
        started,
        out,
        err,
    }
}

/// Runs corral with stdout and stderr as pipes; it must exit, and both
/// pipes must reach EOF, within `bound`.
pub fn run(c: Command, bound: Duration) -> Done {
    start(c, Sink::Pipe, Sink::Pipe).finish(bound)
}

impl Run {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for corral to exit within `bound` of its start (else kills
    /// it, by its own pid, and fails), then for EOF on the read pipes.
    pub fn finish(mut self, bound: Duration) -> Done {
        let deadline = self.started + bound;
        let status = loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                break st;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("corral did not exit within {bound:?}");
            }
            thread::sleep(ms(2));
        };
        let exited_at = Instant::now();
        // EOF is due when corral exits (a relay holds the only write end);
        // allow a little time for the reader thread to run.
        let eof_by = deadline.max(exited_at) + ms(500);
        let get = |rx: Option<mpsc::Receiver<Stream>>, name: &str| {
            rx.map(|rx| {
                let left = eof_by.saturating_duration_since(Instant::now());
                rx.recv_timeout(left).unwrap_or_else(|_| {
                    panic!("no EOF on corral's {name} within {bound:?} (+500ms)")
                })
            })
        };
        let stdout = get(self.out.take(), "stdout");
        let stderr = get(self.err.take(), "stderr");
        Done {
            status,
            started: self.started,
            exited_at,
            stdout,
            stderr,
        }
    }
}

impl Done {
    /// Corral's exit code (fails if corral itself died by a signal).
    #[track_caller]
    pub fn code(&self) -> i32 {
        use std::os::unix::process::ExitStatusExt;
        match self.status.code() {
            Some(c) => c,
            None => panic!(
                "corral was killed by signal {:?}; stderr: {}",
                self.status.signal(),
                self.err()
            ),
        }
    }

    pub fn elapsed(&self) -> Duration {
        self.exited_at - self.started
    }

    pub fn out(&self) -> String {
        self.stdout.as_ref().map(Stream::text).unwrap_or_default()
    }

    pub fn err(&self) -> String {
        self.stderr.as_ref().map(Stream::text).unwrap_or_default()
    }

    /// Asserts the exit code, showing stderr on failure.
    #[track_caller]
    pub fn assert_code(&self, want: i32) {
        assert_eq!(self.code(), want, "corral stderr: {}", self.err());
    }
}

pub const OUTCOMES: &[&str] = &[
    "exited",
    "signaled",
    "timed_out",
    "cancelled",
    "output_limit",
    "output_held",
    "spawn_failed",
    "containment_failed",
    "sandbox_failed",
    "cleanup_failed",
];

/// Reads and checks the report file.
#[track_caller]
pub fn read_report(path: &Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("no report at {}: {e}", path.display()));
    assert_eq!(
        text.trim_end().lines().count(),
        1,
        "report is one line: {text}"
    );
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("bad JSON {text}: {e}"));
    check_report(&v);
    v
}

/// The documented schema of a run report (docs/report-schema.json),
/// compiled once.
pub fn report_schema() -> &'static jsonschema::Validator {
    static SCHEMA: std::sync::OnceLock<jsonschema::Validator> = std::sync::OnceLock::new();
    SCHEMA.get_or_init(|| {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/report-schema.json");
        let text = std::fs::read_to_string(path).expect("docs/report-schema.json");
        let schema: Value = serde_json::from_str(&text).expect("the schema is JSON");
        jsonschema::draft202012::new(&schema).expect("the schema is a valid draft 2020-12 schema")
    })
}

/// The run report's fields of `v` (a batch run embeds them among its own).
pub fn report_fields(v: &Value) -> Value {
    let schema: &Value = {
        static RAW: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
        RAW.get_or_init(|| {
            let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/report-schema.json");
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
        })
    };
    let mut out = serde_json::Map::new();
    for k in schema["properties"].as_object().unwrap().keys() {
        if let Some(field) = v.get(k) {
            out.insert(k.clone(), field.clone());
        }
    }
    Value::Object(out)
}

/// Fails with every violation when `v` does not follow the documented
/// report schema.
#[track_caller]
pub fn assert_schema(v: &Value) {
    let errors: Vec<String> = report_schema()
        .iter_errors(v)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "report does not follow docs/report-schema.json: {errors:#?}\n{v}"
    );
}

/// Checks that every required field is present with the right type, and
/// that the fields agree with the outcome (and that the report follows the
/// documented schema).
#[track_caller]
pub fn check_report(v: &Value) {
    if v.get("task").is_some() {
        // A batch run: its report fields follow the schema, next to the
        // batch's own.
        assert_schema(&report_fields(v));
    } else {
        assert_schema(v);
    }
    let o = v
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"));
    for k in [
        "outcome",
        "exit_code",
        "signal",
        "containment",
        "killed",
        "kept",
        "duration_ms",
        "stdout_bytes",
        "stderr_bytes",
        "error",
    ] {
        assert!(o.contains_key(k), "field {k} missing in {v}");
    }
    let outcome = v["outcome"].as_str().expect("outcome is a string");
    assert!(OUTCOMES.contains(&outcome), "unknown outcome in {v}");
    let int_or_null = |k: &str| {
        assert!(
            v[k].is_null() || v[k].is_i64(),
            "{k} is neither null nor an integer in {v}"
        )
    };
    int_or_null("exit_code");
    int_or_null("signal");
    for k in ["killed", "kept"] {
        assert!(v[k].is_u64(), "{k} is not a count in {v}");
    }
    // Null when the stream was passed through (not seen by corral).
    for k in ["stdout_bytes", "stderr_bytes"] {
        assert!(
            v[k].is_u64() || v[k].is_null(),
            "{k} is not a count or null in {v}"
        );
    }
    let d = v["duration_ms"].as_f64().expect("duration_ms is a number");
    assert!(d >= 0.0 && d.is_finite(), "duration_ms {d} in {v}");
    assert!(
        v["error"].is_null() || v["error"].is_string(),
        "error is neither null nor a string in {v}"
    );
    // Only process groups exist today; `auto` may pick a stronger mechanism
    // once one is added, so any known mechanism name is accepted here (the
    // explicit `--containment process-group` test pins "process_group").
    let known = [
        "process_group",
        "cgroup",
        "subreaper",
        "job_object",
        "pid_namespace",
    ];
    let mech_ok = v["containment"]
        .as_str()
        .is_some_and(|m| known.contains(&m));
    if outcome == "spawn_failed" || outcome == "sandbox_failed" {
        assert!(mech_ok || v["containment"].is_null(), "containment in {v}");
    } else {
        assert!(mech_ok, "containment in {v}");
    }
    match outcome {
        "exited" => {
            assert!(v["exit_code"].is_i64(), "exited without exit_code: {v}");
            assert!(v["signal"].is_null(), "exited with a signal: {v}");
            assert!(v["error"].is_null(), "clean exit with an error: {v}");
        }
        "signaled" => {
            assert!(v["signal"].is_i64(), "signaled without signal: {v}");
            assert!(v["exit_code"].is_null(), "signaled with exit_code: {v}");
        }
        "spawn_failed" | "containment_failed" | "sandbox_failed" | "cleanup_failed"
        | "timed_out" | "output_held" | "output_limit" => {
            assert!(v["error"].is_string(), "{outcome} without error: {v}");
        }
        _ => {}
    }
    // Every failed cleanup step is listed, and only a cleanup_failed run has any.
    let failed_steps = v["cleanup_errors"].as_array().map_or(0, Vec::len);
    assert_eq!(
        failed_steps > 0,
        outcome == "cleanup_failed",
        "cleanup_errors disagree with the outcome: {v}"
    );
    // Which timeout fired: only on a timed_out run, and then always (also
    // on a run that timed out and then failed its cleanup).
    if v.get("timeout_kind").is_some() {
        let kind = &v["timeout_kind"];
        if outcome == "timed_out" {
            assert!(
                kind == "deadline" || kind == "idle",
                "timed_out without timeout_kind: {v}"
            );
        } else if outcome == "cleanup_failed" {
            assert!(
                kind.is_null() || kind == "deadline" || kind == "idle",
                "{v}"
            );
        } else {
            assert!(kind.is_null(), "timeout_kind on {outcome}: {v}");
        }
    }
}

/// `v[k]` as a u64, failing readably.
#[track_caller]
pub fn count(v: &Value, k: &str) -> u64 {
    v[k].as_u64()
        .unwrap_or_else(|| panic!("{k} not a count in {v}"))
}

/// `signals_sent` as numbers.
#[track_caller]
pub fn signals_sent(v: &Value) -> Vec<i64> {
    v["signals_sent"]
        .as_array()
        .unwrap_or_else(|| panic!("signals_sent missing in {v}"))
        .iter()
        .map(|x| x.as_i64().unwrap())
        .collect()
}

/// Each named helper was seen, and is (or soon is) dead.
#[track_caller]
pub fn assert_dead(w: &Watch, names: &[&str]) {
    for n in names {
        assert!(w.pid(n, FATE).is_some(), "helper {n} never started");
        assert!(w.wait_dead(n, FATE), "helper {n} still alive");
    }
}

/// Each named helper was seen and is alive (the Watch kills it later).
#[track_caller]
pub fn assert_alive(w: &Watch, names: &[&str]) {
    for n in names {
        assert!(w.pid(n, FATE).is_some(), "helper {n} never started");
        assert!(w.is_alive(n), "helper {n} is dead, expected alive");
    }
}

/// Every helper the Watch saw is among `expected` (no surprise processes).
#[track_caller]
pub fn assert_only(w: &Watch, expected: &[&str]) {
    for n in w.names() {
        assert!(expected.contains(&n.as_str()), "unexpected helper {n}");
    }
}

/// One `corral run` scenario as a table row: the options, the tree (an
/// `sh -c` script of `$H` helpers), and what must come out: corral's exit
/// code, the bound on its run time, report fields, signals, leftover
/// counts, and the fate of every helper. Fields left empty are not
/// asserted; `code` and `fates` must be given (`fates` may be empty only
/// for a tree without helpers).
#[derive(Default)]
pub struct Row {
    /// Options before `--report FILE -- sh -c TREE`.
    pub opts: Vec<String>,
    /// The `sh -c` script.
    pub tree: String,
    /// The command instead of `sh -c TREE`, when not empty.
    pub argv: Vec<String>,
    /// corral's exit code.
    pub code: Option<i32>,
    /// How long corral may run before the test kills it and fails (a hang
    /// guard, not the promise); 5 s when not given.
    pub hang: Option<Duration>,
    /// Bounds on corral's run time (the promise).
    pub bound: Option<(Duration, Duration)>,
    /// Report fields that must have exactly these values.
    pub fields: Vec<(&'static str, Value)>,
    /// `signals_sent`, as numbers.
    pub signals: Option<&'static [i64]>,
    /// `killed`.
    pub killed: Option<Count>,
    /// `kept`.
    pub kept: Option<u64>,
    /// Every helper, and its fate (by the tier the report names).
    pub fates: &'static [(&'static str, Fate)],
    /// No helper other than those in `fates` ever ran.
    pub only: bool,
    /// How long a helper that must die may take to be seen dead (`FATE`
    /// when not given).
    pub dead_within: Option<Duration>,
    /// More environment for corral, made from the scratch.
    pub env: Option<EnvFrom>,
}

/// Environment made from a scratch (`Scratch::fake_readonly_cgroup_env`).
pub type EnvFrom = fn(&Scratch) -> Vec<(std::ffi::OsString, std::ffi::OsString)>;

/// A row's options (for struct literals).
pub fn opts(o: &[&str]) -> Vec<String> {
    o.iter().map(|s| s.to_string()).collect()
}

/// The outcome of a row: corral's run, its report, and the helpers' watch
/// and scratch (the watch kills any helper still alive when dropped).
pub struct Ran {
    pub d: Done,
    pub v: Value,
    pub w: Watch,
    pub s: Scratch,
}

/// Runs `row` with stdout and stderr as pipes, and asserts it.
#[track_caller]
pub fn run_row(row: &Row) -> Ran {
    run_row_to(row, |_| (Sink::Pipe, Sink::Pipe))
}

/// Runs `row` with the streams `sinks` makes (given the scratch), and
/// asserts it. The scratch and its watch are made before corral starts.
#[track_caller]
pub fn run_row_to(row: &Row, sinks: impl FnOnce(&Scratch) -> (Sink, Sink)) -> Ran {
    run_row_with(row, sinks, |_, _, _| {})
}

/// Runs `row` with the streams `sinks` makes, runs `during` (given the
/// scratch, the watch and the running corral) before waiting for corral,
/// and asserts the row.
#[track_caller]
pub fn run_row_with(
    row: &Row,
    sinks: impl FnOnce(&Scratch) -> (Sink, Sink),
    during: impl FnOnce(&Scratch, &Watch, &Run),
) -> Ran {
    let s = Scratch::new();
    if row.opts.iter().any(|o| o == "pid-namespace") {
        s.namespaced();
    }
    let w = Watch::new(&s);
    let rp = report_path(&s);
    let mut args: Vec<&str> = vec!["run"];
    args.extend(row.opts.iter().map(String::as_str));
    args.extend(["--report", &rp, "--"]);
    if row.argv.is_empty() {
        args.extend(["sh", "-c", &row.tree]);
    } else {
        args.extend(row.argv.iter().map(String::as_str));
    }
    let (out, err) = sinks(&s);
    let mut c = corral(&s, args);
    if let Some(env) = row.env {
        c.envs(env(&s));
    }
    let r = start(c, out, err);
    during(&s, &w, &r);
    let d = r.finish(row.hang.unwrap_or(Duration::from_secs(5)));
    d.assert_code(row.code.expect("a row states corral's exit code"));
    if let Some((min, max)) = row.bound {
        corral_testkit::assert_between(d.elapsed(), min, max);
    }
    let v = read_report(&s.path("report.json"));
    for (k, want) in &row.fields {
        assert_eq!(&v[*k], want, "{k}: {v}");
    }
    if let Some(sig) = row.signals {
        assert_eq!(signals_sent(&v), sig, "{v}");
    }
    match row.killed {
        Some(Count::Exactly(n)) => assert_eq!(count(&v, "killed"), n as u64, "{v}"),
        Some(Count::AtLeast(n)) => assert!(count(&v, "killed") >= n as u64, "{v}"),
        None => {}
    }
    if let Some(k) = row.kept {
        assert_eq!(count(&v, "kept"), k, "{v}");
    }
    // The tier a fate depends on (a run that spawned nothing names none).
    let tier = || -> Mechanism {
        v["containment"]
            .as_str()
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| panic!("no containment in {v}"))
    };
    for (n, f) in row.fates {
        if f.alive_in(tier()) {
            assert_alive(&w, &[n]);
        } else {
            assert!(w.pid(n, FATE).is_some(), "helper {n} never started");
            let within = row.dead_within.unwrap_or(FATE);
            assert!(w.wait_dead(n, within), "helper {n} still alive");
        }
    }
    if row.only {
        let names: Vec<&str> = row.fates.iter().map(|(n, _)| *n).collect();
        assert_only(&w, &names);
    }
    Ran { d, v, w, s }
}
