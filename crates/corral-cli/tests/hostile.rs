//! Hostile files and documents: symlinks planted by another
//! user where corral writes, `--output-dir` names that sanitize alike,
//! shard reports with impossible times, counts and partitions, task names
//! that break Markdown, and manifest entries no program can be given.
//! Every case: a clear error (125) or the right file, never a panic,
//! nothing of anyone else's overwritten.

// Linux only: the harness (tests/common) pins helpers by pidfd and reads /proc.
#![cfg(target_os = "linux")]

mod common;

use std::collections::HashSet;
use std::io::Write as _;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use corral_testkit::Scratch;
use serde_json::Value;

use common::*;

const SEC: Duration = Duration::from_secs(1);
const PRECIOUS: &str = "precious: not corral's to write\n";

fn write_manifest(s: &Scratch, text: &str) -> String {
    let p = s.path("batch.toml");
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_owned()
}

fn p(s: &Scratch, name: &str) -> String {
    s.path(name).to_str().unwrap().to_owned()
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("bad JSON in {path:?}: {e}"))
}

/// Runs `script` with `sh -c` as user nobody (65534), no groups.
fn as_nobody(dir: &Path, script: &str) {
    let st = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "sh",
            "-c",
            script,
        ])
        .current_dir(dir)
        .status()
        .expect("setpriv");
    assert!(st.success(), "as nobody: {script}");
}

/// corral ARGS started stopped at a `read` (so its pid, which names the
/// temporaries a writer would make, is known before it writes anything);
/// `go` lets it run and waits (bounded).
struct Held {
    child: std::process::Child,
}

impl Held {
    fn start(s: &Scratch, umask: &str, args: &[&str]) -> Held {
        let child = Command::new("sh")
            .arg("-c")
            .arg(format!("umask {umask}; read go; exec \"$0\" \"$@\""))
            .arg(BIN)
            .args(args)
            .envs(s.env())
            .current_dir(s.dir())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        Held { child }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn go(mut self) -> (i32, String) {
        let mut stdin = self.child.stdin.take().unwrap();
        stdin.write_all(b"go\n").unwrap();
        drop(stdin);
        let t0 = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                let out = self.child.wait_with_output().unwrap();
                let err = String::from_utf8_lossy(&out.stderr).into_owned();
                let code = st
                    .code()
                    .unwrap_or_else(|| panic!("corral died by a signal: {st:?}: {err}"));
                return (code, err);
            }
            if t0.elapsed() > 20 * SEC {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("corral did not exit within 20 s");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// A scratch with a victim file only root can write, and a non-sticky
/// directory `pub` that user nobody can write (so `fs.protected_symlinks`
/// does not stop a root process following nobody's links there).
fn hostile_scratch() -> (Scratch, String) {
    let s = Scratch::new();
    std::fs::set_permissions(s.dir(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(s.path("victim"), PRECIOUS).unwrap();
    std::fs::set_permissions(s.path("victim"), std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::create_dir(s.path("pub")).unwrap();
    std::fs::set_permissions(s.path("pub"), std::fs::Permissions::from_mode(0o777)).unwrap();
    let victim = p(&s, "victim");
    (s, victim)
}

fn assert_victim_intact(s: &Scratch, what: &str) {
    let m = std::fs::symlink_metadata(s.path("victim")).unwrap();
    assert!(m.is_file(), "{what}: the victim is no longer a file");
    assert_eq!(
        std::fs::read_to_string(s.path("victim")).unwrap(),
        PRECIOUS,
        "{what}: corral wrote through a link planted by another user"
    );
    assert_eq!(m.uid(), 0, "{what}");
}

const ONE_TASK: &str = "[[task]]\nname = \"t\"\nshell = 'echo hello; echo oops >&2'\n";

/// Item 1: the report, JUnit and Markdown writers used `<path>.tmp<pid>`
/// through symlinks, and `--output-dir` created its files through them.
#[corral_testkit::needs(root)]
#[test]
fn root_batch_never_writes_through_links_another_user_planted() {
    let (s, victim) = hostile_scratch();
    let m = write_manifest(&s, ONE_TASK);
    let h = Held::start(
        &s,
        "027",
        &[
            "batch",
            &m,
            "--report",
            "pub/r.json",
            "--junit",
            "pub/j.xml",
            "--export-markdown",
            "pub/t.md",
            "--output-dir",
            "pub/out",
        ],
    );
    let pid = h.pid();
    as_nobody(
        s.dir(),
        &format!(
            "for f in r.json j.xml t.md; do ln -s {victim} pub/$f.tmp{pid}; done; \
             mkdir -m 777 pub/out; ln -s {victim} 'pub/out/t#0.stdout'; \
             ln -s {victim} 'pub/out/t#0.stderr'"
        ),
    );
    let (code, err) = h.go();
    assert_victim_intact(&s, "batch reports and --output-dir");
    assert_eq!(code, 0, "{err}");
    let r = read_json(&s.path("pub/r.json"));
    assert_eq!(r["runs"][0]["status"], "passed", "{r}");
    for (f, has) in [
        ("pub/j.xml", "<testsuites"),
        ("pub/t.md", "| `t` |"),
        ("pub/out/t#0.stdout", "hello"),
        ("pub/out/t#0.stderr", "oops"),
    ] {
        let m = std::fs::symlink_metadata(s.path(f)).unwrap();
        assert!(m.is_file(), "{f} is not a regular file");
        assert_eq!(m.uid(), 0, "{f}");
        assert!(
            std::fs::read_to_string(s.path(f)).unwrap().contains(has),
            "{f}"
        );
    }
    // New files: 0666 minus the umask (027), like a shell's `>`.
    for f in ["pub/r.json", "pub/j.xml", "pub/t.md", "pub/out/t#0.stdout"] {
        let mode = std::fs::metadata(s.path(f)).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o640, "{f}: {mode:o}");
    }
}

/// Item 1, the files written in place before: `--events` and
/// `corral run --report` opened the user's name through nobody's link.
#[corral_testkit::needs(root)]
#[test]
fn root_events_and_run_report_refuse_another_users_link() {
    let (s, victim) = hostile_scratch();
    as_nobody(
        s.dir(),
        &format!("ln -s {victim} pub/ev.jsonl; ln -s {victim} pub/run.json"),
    );
    let m = write_manifest(
        &s,
        "[[task]]\nname = \"t\"\nshell = 'touch \"$CORRAL_TEST_DIR/ran\"'\n",
    );
    let (code, err) = Held::start(&s, "022", &["batch", &m, "--events", "pub/ev.jsonl"]).go();
    assert_victim_intact(&s, "--events");
    assert_eq!(code, 125, "{err}");
    assert!(err.contains("symbolic link owned by another user"), "{err}");
    assert!(!s.path("ran").exists(), "the batch ran despite the refusal");

    let (code, err) = Held::start(
        &s,
        "022",
        &["run", "--report", "pub/run.json", "--", "true"],
    )
    .go();
    assert_victim_intact(&s, "corral run --report");
    assert_eq!(code, 125, "{err}");
    assert!(err.contains("symbolic link owned by another user"), "{err}");
}

/// Item 1, what a user's own names still do: a link of one's own is
/// followed (the link stays), a device is written in place (never
/// replaced), a replaced file of one's own keeps its mode, and no
/// temporary is left behind.
#[test]
fn report_files_follow_own_links_keep_devices_and_modes() {
    let s = Scratch::new();
    let m = write_manifest(&s, ONE_TASK);
    std::fs::write(s.path("private.json"), "old").unwrap();
    std::fs::set_permissions(
        s.path("private.json"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    std::fs::write(s.path("real.xml"), "old").unwrap();
    std::os::unix::fs::symlink("real.xml", s.path("link.xml")).unwrap();
    // The device through a link of the scratch's own: a writer that
    // renamed over its target would replace the link, not the machine's
    // /dev/null.
    std::os::unix::fs::symlink("/dev/null", s.path("null")).unwrap();
    let d = run(
        corral(
            &s,
            [
                "batch",
                &m,
                "--report",
                &p(&s, "private.json"),
                "--junit",
                &p(&s, "link.xml"),
                "--export-markdown",
                &p(&s, "null"),
                "--events",
                &p(&s, "null"),
            ],
        ),
        10 * SEC,
    );
    d.assert_code(0);
    let r = read_json(&s.path("private.json"));
    assert_eq!(r["runs"][0]["status"], "passed");
    let mode = std::fs::metadata(s.path("private.json")).unwrap().mode() & 0o777;
    assert_eq!(mode, 0o600, "a private report stays private: {mode:o}");
    assert!(std::fs::symlink_metadata(s.path("link.xml"))
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(std::fs::read_to_string(s.path("real.xml"))
        .unwrap()
        .contains("<testsuites"));
    assert!(std::fs::metadata(s.path("null"))
        .unwrap()
        .file_type()
        .is_char_device());
    assert!(std::fs::symlink_metadata(s.path("null"))
        .unwrap()
        .file_type()
        .is_symlink());
    let left: Vec<String> = std::fs::read_dir(s.dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("tmp"))
        .collect();
    assert!(left.is_empty(), "temporaries left: {left:?}");
    // `corral run --report` through one's own link, too.
    std::os::unix::fs::symlink("run-real.json", s.path("run.json")).unwrap();
    run(
        corral(&s, ["run", "--report", &p(&s, "run.json"), "--", "true"]),
        10 * SEC,
    )
    .assert_code(0);
    assert_eq!(read_json(&s.path("run-real.json"))["outcome"], "exited");
}

/// Item 2: stems unique by construction, inside the directory.
#[test]
fn output_dir_names_never_collide() {
    let s = Scratch::new();
    let mut names: Vec<String> = [
        "a/b", "a_b", "a_b-2", "a_b-1", "a%2Fb", "a%b", ".hidden", "..", ".", "a b", "a?b", "é",
        "%C3%A9", "x#0", "x", "-", "a_b-0", "a_b-3",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    // Many names that sanitize alike under any lossy scheme.
    for c in "!\"$&'()*+,:;<=>@[\\]^{|}~ /".chars() {
        names.push(format!("c{c}d"));
    }
    names.push("y".repeat(300));
    names.push(format!("{}z", "y".repeat(299)));
    names.push("é".repeat(120));
    let mut m = String::new();
    for n in &names {
        m.push_str(&format!(
            "[[task]]\nname = {}\nrepeat = 2\nshell = 'printf %s \"$CORRAL_TASK#$CORRAL_RUN\"; printf e%s \"$CORRAL_TASK\" >&2'\n",
            serde_json::to_string(n).unwrap()
        ));
    }
    let m = write_manifest(&s, &m);
    let od = p(&s, "out");
    let rp = p(&s, "r.json");
    let d = run(
        corral(
            &s,
            ["batch", &m, "--output-dir", &od, "--report", &rp, "-j", "4"],
        ),
        60 * SEC,
    );
    d.assert_code(0);
    let v = read_json(Path::new(&rp));
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), names.len() * 2);
    let mut files = HashSet::new();
    for r in runs {
        let want = format!("{}#{}", r["task"].as_str().unwrap(), r["run"]);
        for (k, content) in [
            ("stdout_file", want.clone()),
            ("stderr_file", format!("e{}", r["task"].as_str().unwrap())),
        ] {
            let f = r[k].as_str().unwrap();
            assert!(files.insert(f.to_owned()), "{f} written by two runs");
            let path = Path::new(f);
            assert_eq!(path.parent().unwrap(), Path::new(&od), "{f} not in the dir");
            let base = path.file_name().unwrap().to_str().unwrap();
            assert!(!base.starts_with('.') && base.len() <= 255, "{base}");
            assert_eq!(std::fs::read_to_string(path).unwrap(), content, "{f}");
        }
    }
    let on_disk = std::fs::read_dir(&od).unwrap().count();
    assert_eq!(on_disk, names.len() * 4, "one file per run and stream");
}

/// Two real shard reports of a small manifest (and the scratch).
fn shards() -> (Scratch, Value, Value) {
    let s = Scratch::new();
    let m = write_manifest(
        &s,
        "[[task]]\nname = \"a\"\nrun = [\"true\"]\nrepeat = 3\n\
         [[task]]\nname = \"b\"\nshell = 'exit 1'\nrepeat = 2\n",
    );
    for k in [1, 2] {
        let rp = p(&s, &format!("s{k}.json"));
        let d = run(
            corral(
                &s,
                [
                    "batch",
                    &m,
                    "--partition",
                    &format!("{k}/2"),
                    "--report",
                    &rp,
                ],
            ),
            10 * SEC,
        );
        assert!([0, 1].contains(&d.code()), "{}", d.err());
    }
    let a = read_json(&s.path("s1.json"));
    let b = read_json(&s.path("s2.json"));
    (s, a, b)
}

fn merge(s: &Scratch, a: &Value, b: &Value) -> Done {
    std::fs::write(s.path("x1.json"), a.to_string()).unwrap();
    std::fs::write(s.path("x2.json"), b.to_string()).unwrap();
    let _ = std::fs::remove_file(s.path("m.json"));
    run(
        corral(
            s,
            [
                "merge",
                &p(s, "x1.json"),
                &p(s, "x2.json"),
                "--report",
                &p(s, "m.json"),
                "--junit",
                &p(s, "m.xml"),
                "--export-markdown",
                &p(s, "m.md"),
            ],
        ),
        10 * SEC,
    )
}

/// Items 3, 4 and 5: each damaged report is refused (125) before anything
/// is built, the message names the shard and the field, nothing is
/// written, in bounded time.
#[test]
fn merge_refuses_impossible_shard_reports_naming_shard_and_field() {
    let (s, a, b) = shards();
    merge(&s, &a, &b).assert_code(1);
    type Edit = fn(&mut Value, &mut Value);
    let cases: Vec<(&str, Edit, &str)> = vec![
        (
            "huge wall",
            |a, _| a["runs"][0]["wall_ms"] = 1e300.into(),
            "runs[0].wall_ms",
        ),
        (
            "negative wall",
            |_, b| b["runs"][0]["wall_ms"] = (-1e300).into(),
            "runs[0].wall_ms",
        ),
        (
            "huge duration",
            |a, _| a["duration_ms"] = 1e300.into(),
            "duration_ms",
        ),
        (
            "negative duration",
            |a, _| a["duration_ms"] = (-1.0).into(),
            "duration_ms",
        ),
        (
            "huge cpu",
            |a, _| {
                a["runs"][0]["usage"] =
                    serde_json::json!({"cpu_user_ms": 1e308, "cpu_system_ms": 1e308});
            },
            "runs[0].usage.cpu_user_ms",
        ),
        (
            "string wall",
            |a, _| a["runs"][1]["wall_ms"] = "5".into(),
            "runs[1].wall_ms",
        ),
        (
            "attempt wall",
            |a, _| {
                a["runs"][0]["attempts"] = serde_json::json!([{"task": "a", "run": 0, "status": "failed", "wall_ms": 1e300}])
            },
            "runs[0].attempts[0].wall_ms",
        ),
        (
            "huge plan",
            |a, b| {
                a["plan"][0]["runs"] = 1_000_000_000_000u64.into();
                b["plan"][0]["runs"] = 1_000_000_000_000u64.into();
            },
            "plan",
        ),
        (
            "truncated count",
            |a, _| a["partition"]["count"] = 4_294_967_298u64.into(),
            "partition",
        ),
        (
            "negative index",
            |_, b| b["partition"]["index"] = (-1).into(),
            "partition",
        ),
        (
            "string index",
            |_, b| b["partition"]["index"] = "x".into(),
            "partition",
        ),
        (
            "index zero",
            |a, _| a["partition"]["index"] = 0.into(),
            "partition",
        ),
        (
            "no index",
            |a, _| a["partition"] = serde_json::json!({"count": 2}),
            "partition",
        ),
        (
            "fingerprint",
            |a, _| a["manifest_fingerprint"] = 7.into(),
            "manifest_fingerprint",
        ),
        (
            "status",
            |a, _| a["runs"][0]["status"] = "won".into(),
            "runs[0].status",
        ),
        (
            "run index",
            |a, _| a["runs"][0]["run"] = (-3).into(),
            "runs[0].run",
        ),
        (
            "not_run",
            |a, _| a["not_run"] = serde_json::json!([{"task": 3}]),
            "not_run[0].task",
        ),
        (
            "runs type",
            |a, _| a["runs"] = serde_json::json!({"x": 1}),
            "runs",
        ),
        (
            "signal",
            |a, _| a["received_signal"] = 1e10.into(),
            "received_signal",
        ),
        ("exit code", |a, _| a["exit_code"] = "1".into(), "exit_code"),
        // Read whole as the typed document: a misspelt key, an unknown
        // one, a nested one, another format are refused, never defaulted.
        (
            "misspelt run key",
            |a, _| {
                let o = a["runs"][1].as_object_mut().unwrap();
                let v = o.remove("crash_safe").unwrap();
                o.insert("crash_safes".into(), v);
            },
            "crash_safes",
        ),
        (
            "unknown key",
            |_, b| b["surprise"] = true.into(),
            "surprise",
        ),
        (
            "misspelt timing",
            |a, _| {
                let t = a["runs"][0]["timings_ms"].as_object_mut().unwrap();
                let v = t.remove("spawn").unwrap();
                t.insert("spwan".into(), v);
            },
            "spwan",
        ),
        (
            "missing report key",
            |a, _| {
                a["runs"][0].as_object_mut().unwrap().remove("killed");
            },
            "killed",
        ),
        (
            "missing cleanup_errors (a version-1 run)",
            |a, _| {
                a["runs"][0]
                    .as_object_mut()
                    .unwrap()
                    .remove("cleanup_errors");
            },
            "cleanup_errors",
        ),
        (
            "format version",
            |a, _| a["format_version"] = 1.into(),
            "format_version",
        ),
    ];
    for (what, edit, field) in cases {
        let (mut x, mut y) = (a.clone(), b.clone());
        edit(&mut x, &mut y);
        let d = merge(&s, &x, &y);
        assert_eq!(d.code(), 125, "{what}: {}", d.err());
        let err = d.err();
        assert!(
            err.contains(&format!("`{field}`")),
            "{what}: field {field} not named: {err}"
        );
        assert!(
            err.contains("x1.json") || err.contains("x2.json"),
            "{what}: no shard named: {err}"
        );
        assert!(d.elapsed() < 5 * SEC, "{what}: {:?}", d.elapsed());
        assert!(!s.path("m.json").exists(), "{what}: a report was written");
    }
    // A count that fits but claims shards that were not given, and a plan
    // that fits but claims runs the reports do not hold: refused in
    // bounded time, naming what is missing.
    let (mut x, mut y) = (a.clone(), b.clone());
    x["partition"]["count"] = u32::MAX.into();
    y["partition"]["count"] = u32::MAX.into();
    let d = merge(&s, &x, &y);
    d.assert_code(125);
    assert!(
        d.err().contains("shard 3/4294967295 is missing"),
        "{}",
        d.err()
    );
    let (mut x, mut y) = (a.clone(), b.clone());
    x["plan"][1]["runs"] = u32::MAX.into();
    y["plan"][1]["runs"] = u32::MAX.into();
    let d = merge(&s, &x, &y);
    d.assert_code(125);
    assert!(d.err().contains("run b#2 (shard"), "{}", d.err());
    assert!(
        d.err().contains("4294967293 runs missing in all"),
        "{}",
        d.err()
    );
    assert!(d.elapsed() < 5 * SEC, "{:?}", d.elapsed());
    // The largest time a report may hold merges, and every writer copes.
    let (mut x, y) = (a.clone(), b.clone());
    x["runs"][0]["wall_ms"] = 1e13.into();
    x["duration_ms"] = 1e13.into();
    let d = merge(&s, &x, &y);
    d.assert_code(1);
    assert!(std::fs::read_to_string(s.path("m.xml"))
        .unwrap()
        .contains("<testsuites"));
    assert!(std::fs::read_to_string(s.path("m.md"))
        .unwrap()
        .contains("| `a` |"));
}

/// Cells of a Markdown table row: split on `|` not escaped by `\`.
fn cells(row: &str) -> usize {
    let mut n = 0;
    let mut prev = ' ';
    for c in row.chars() {
        if c == '|' && prev != '\\' {
            n += 1;
        }
        prev = c;
    }
    n
}

/// Item 6: names with backticks, pipes and (from a shard report, which
/// a manifest refuses) newlines keep the Markdown table whole.
#[test]
fn markdown_table_survives_hostile_task_names() {
    let (s, mut a, mut b) = shards();
    let evil = "new\nline `tick` ``x|y";
    for d in [&mut a, &mut b] {
        d["plan"][0]["task"] = evil.into();
        for k in ["runs", "not_run"] {
            for r in d[k].as_array_mut().unwrap() {
                if r["task"] == "a" {
                    r["task"] = evil.into();
                }
            }
        }
    }
    merge(&s, &a, &b).assert_code(1);
    let md = std::fs::read_to_string(s.path("m.md")).unwrap();
    let rows: Vec<&str> = md.lines().collect();
    assert_eq!(rows.len(), 4, "{md}");
    for r in &rows {
        assert!(r.starts_with('|') && r.ends_with('|'), "{r}");
        assert_eq!(cells(r), 14, "{r}");
    }
    assert!(
        rows[2].contains("```new\\nline `tick` ``x\\|y```"),
        "{}",
        rows[2]
    );
    // The JUnit XML of the same report is well-formed enough to name it.
    let xml = std::fs::read_to_string(s.path("m.xml")).unwrap();
    assert!(xml.contains("new\nline `tick` ``x|y"), "{xml}");

    // From a manifest: backticks and pipes.
    let s = Scratch::new();
    let m = write_manifest(
        &s,
        "[[task]]\nname = \"`lead\"\nrun = [\"true\"]\n[[task]]\nname = \"p|q\"\nrun = [\"true\"]\n",
    );
    let md = p(&s, "t.md");
    run(
        corral(&s, ["batch", &m, "--export-markdown", &md]),
        10 * SEC,
    )
    .assert_code(0);
    let text = std::fs::read_to_string(&md).unwrap();
    let rows: Vec<&str> = text.lines().collect();
    assert_eq!(rows.len(), 4, "{text}");
    assert!(rows[2].starts_with("| `` `lead `` |"), "{}", rows[2]);
    assert!(rows[3].starts_with("| `p\\|q` |"), "{}", rows[3]);
    for r in &rows {
        assert_eq!(cells(r), 14, "{r}");
    }
}

/// Item 6: what no program can be given is refused before anything runs,
/// naming the key; `timeout = 0` is no limit, as `corral run -t 0`.
#[test]
fn manifest_refuses_control_characters_and_bad_environment() {
    let s = Scratch::new();
    let touch = "shell = 'touch \"$CORRAL_TEST_DIR/ran\"'";
    let cases = [
        (
            format!("[[task]]\nname = \"a\\u0000b\"\n{touch}"),
            "task[0].name",
            "U+0000",
        ),
        (
            format!("[[task]]\nname = \"a\\nb\"\n{touch}"),
            "task[0].name",
            "U+000A",
        ),
        (
            format!("[[task]]\nname = \"a\\u001bb\"\n{touch}"),
            "task[0].name",
            "U+001B",
        ),
        (
            format!("[[task]]\nname = \"a\"\n{touch}\nenv = {{\"A=B\" = \"x\"}}"),
            "task[0].env",
            "`=`",
        ),
        (
            format!("[[task]]\nname = \"a\"\n{touch}\nenv = {{\"\" = \"x\"}}"),
            "task[0].env",
            "empty",
        ),
        (
            format!("[[task]]\nname = \"a\"\n{touch}\nenv = {{A = \"x\\u0000\"}}"),
            "task[0].env",
            "NUL",
        ),
        (
            format!("[defaults]\nenv = {{\"B=\" = \"1\"}}\n[[task]]\nname = \"a\"\n{touch}"),
            "defaults.env",
            "`=`",
        ),
        (
            "[[task]]\nname = \"a\"\nrun = [\"touch\", \"x\\u0000y\"]".into(),
            "task[0].run[1]",
            "NUL",
        ),
        (
            "[[task]]\nname = \"a\"\nshell = \"touch ran\\u0000\"".into(),
            "task[0].shell",
            "NUL",
        ),
        (
            format!("[[task]]\nname = \"a\"\n{touch}\ncwd = \"x\\u0000\""),
            "task[0].cwd",
            "NUL",
        ),
    ];
    for (text, key, why) in cases {
        let m = write_manifest(&s, &text);
        let d = run(corral(&s, ["batch", &m]), 10 * SEC);
        d.assert_code(125);
        let err = d.err();
        assert!(
            err.contains(key) && err.contains(why),
            "{key} {why}: {err}\n{text}"
        );
        assert!(!err.contains("panicked"), "{err}");
        assert!(!s.path("ran").exists(), "ran despite: {text}");
    }
    // `timeout = 0`, in a task or as the default: no limit.
    let m = write_manifest(
        &s,
        "[defaults]\ntimeout = 0\n[[task]]\nname = \"d\"\nshell = 'sleep 0.3'\n\
         [[task]]\nname = \"t\"\ntimeout = 0\nshell = 'sleep 0.3'\n\
         [[task]]\nname = \"s\"\ntimeout = \"0s\"\nshell = 'sleep 0.3'\n",
    );
    let rp = p(&s, "r.json");
    run(corral(&s, ["batch", &m, "--report", &rp]), 10 * SEC).assert_code(0);
    let v = read_json(Path::new(&rp));
    for r in v["runs"].as_array().unwrap() {
        assert_eq!(r["status"], "passed", "{r}");
        assert_eq!(r["outcome"], "exited", "{r}");
    }
}
