//! `corral run --idle-timeout` and `--max-output`, with real trees: the outcome, corral's exit code, the report's
//! `timeout_kind` and byte counts, what reached corral's stdout, the bound
//! and every helper's fate.

// Linux only: the harness (tests/common) pins helpers by pidfd and reads /proc.
#![cfg(target_os = "linux")]

mod common;

use std::time::Duration;

use corral_testkit::scenario::Fate::Dead;
use serde_json::Value;

use common::*;

const SEC: Duration = Duration::from_secs(1);

#[test]
fn a_silent_tree_is_killed_by_the_idle_timeout() {
    run_row(&Row {
        opts: opts(&["--idle-timeout", "400ms", "-t", "20"]),
        tree: r#""$H" kid & exec "$H" root"#.into(),
        code: Some(124),
        bound: Some((ms(400), 5 * SEC)),
        fields: vec![
            ("outcome", "timed_out".into()),
            ("timeout_kind", "idle".into()),
        ],
        fates: &[("root", Dead), ("kid", Dead)],
        ..Row::default()
    });
}

#[test]
fn a_chatty_program_outlives_the_idle_timeout() {
    let ran = run_row(&Row {
        opts: opts(&["--idle-timeout", "500ms"]),
        tree: "i=0; while [ $i -lt 15 ]; do echo tick; sleep 0.1; i=$((i+1)); done".into(),
        code: Some(0),
        hang: Some(20 * SEC),
        bound: Some((ms(1500), 15 * SEC)),
        fields: vec![("outcome", "exited".into()), ("timeout_kind", Value::Null)],
        ..Row::default()
    });
    assert_eq!(ran.d.out().lines().count(), 15);
    // A deadline before the idle timeout says so.
    run_row(&Row {
        opts: opts(&["--idle-timeout", "5s", "-t", "300ms"]),
        tree: r#"exec "$H" root"#.into(),
        code: Some(124),
        fields: vec![("timeout_kind", "deadline".into())],
        fates: &[("root", Dead)],
        ..Row::default()
    });
}

/// The root exits at once; a silent holder keeps its output. The idle
/// timeout comes first (the wait delay is 10 s) and kills the holder.
#[test]
fn the_idle_timeout_fires_during_the_wait_delay() {
    run_row(&Row {
        opts: opts(&["--idle-timeout", "500ms", "--wait-delay", "10s"]),
        tree: r#""$H" holder & echo started; exit 0"#.into(),
        code: Some(124),
        bound: Some((ms(500), 5 * SEC)),
        fields: vec![
            ("outcome", "timed_out".into()),
            ("timeout_kind", "idle".into()),
            ("exit_code", 0.into()),
        ],
        fates: &[("holder", Dead)],
        ..Row::default()
    });
}

/// `yes` is cut at the limit: exactly that many bytes reach corral's
/// stdout, the report counts more, exit 122.
#[test]
fn a_flood_is_killed_at_the_limit() {
    let ran = run_row(&Row {
        opts: opts(&["--max-output", "100000", "-t", "20"]),
        tree: format!(r#""$H" kid & {}exec yes"#, wait_for("kid")),
        code: Some(122),
        fields: vec![
            ("outcome", "output_limit".into()),
            ("timeout_kind", Value::Null),
        ],
        fates: &[("kid", Dead)],
        ..Row::default()
    });
    let out = ran.d.stdout.as_ref().unwrap();
    assert_eq!(out.total, 100_000);
    assert!(out.bytes.chunks(2).all(|c| c == b"y\n"));
    assert!(count(&ran.v, "stdout_bytes") > 100_000);
}

/// 3000 bytes on stdout, then 3000 on stderr, limit 4000 for both: stdout
/// whole, stderr's first 1000 bytes relayed; the counts say what the
/// program wrote.
#[test]
fn byte_counts_are_exact_and_the_limit_is_for_both_streams() {
    let ran = run_row(&Row {
        opts: opts(&["--max-output", "4000"]),
        tree: format!(
            r#"{ROOT}"$H" kid & {}head -c 3000 /dev/zero; head -c 3000 /dev/zero >&2; exec sleep 30"#,
            wait_for("kid")
        ),
        code: Some(122),
        fields: vec![
            ("outcome", "output_limit".into()),
            ("stdout_bytes", 3000.into()),
            ("stderr_bytes", 3000.into()),
        ],
        fates: &[("root", Dead), ("kid", Dead)],
        ..Row::default()
    });
    assert_eq!(ran.d.stdout.as_ref().unwrap().total, 3000);
    assert_eq!(ran.d.stderr.as_ref().unwrap().total, 1000);
    // Exactly the limit passes.
    run_row(&Row {
        opts: opts(&["--max-output", "4000"]),
        tree: "head -c 4000 /dev/zero".into(),
        code: Some(0),
        fields: vec![("stdout_bytes", 4000.into())],
        ..Row::default()
    });
}

/// `--preserve-status` replaces 122 with the program's own status (killed
/// by SIGKILL: 137).
#[test]
fn preserve_status_replaces_122() {
    run_row(&Row {
        opts: opts(&["--max-output", "10", "-p"]),
        argv: opts(&["yes"]),
        code: Some(137),
        fields: vec![("outcome", "output_limit".into())],
        ..Row::default()
    });
}

/// corral's stdout a regular file: with --max-output it is relayed (and
/// counted), so the file gets exactly the limit.
#[test]
fn a_file_gets_exactly_the_limit() {
    let ran = run_row_to(
        &Row {
            opts: opts(&["--max-output", "1M", "-t", "20"]),
            argv: opts(&["yes"]),
            code: Some(122),
            fields: vec![("outcome", "output_limit".into())],
            ..Row::default()
        },
        |s| (Sink::File(s.path("out.txt")), Sink::Pipe),
    );
    let len = std::fs::metadata(ran.s.path("out.txt")).unwrap().len();
    assert_eq!(len, 1 << 20);
}

/// Both streams relayed (to files: the zero-copy relay), the program
/// writing them in turns, exactly the limit in all: never killed, every
/// byte reaches its file. Repeated, since the two relays race for the
/// room left.
#[test]
fn exactly_the_limit_across_both_relayed_streams_passes() {
    for _ in 0..20 {
        let ran = run_row_to(
            &Row {
                opts: opts(&["--max-output", "1000", "-t", "20"]),
                tree: "i=0; while [ $i -lt 500 ]; do printf x; printf y >&2; i=$((i+1)); done"
                    .into(),
                code: Some(0),
                fields: vec![("stdout_bytes", 500.into()), ("stderr_bytes", 500.into())],
                ..Row::default()
            },
            |s| (Sink::File(s.path("out.txt")), Sink::File(s.path("err.txt"))),
        );
        for f in ["out.txt", "err.txt"] {
            assert_eq!(std::fs::metadata(ran.s.path(f)).unwrap().len(), 500, "{f}");
        }
    }
}

#[test]
fn bad_values_are_usage_errors() {
    for o in [
        ["--idle-timeout", "abc"],
        ["--idle-timeout", "-1"],
        ["--max-output", "lots"],
    ] {
        let s = corral_testkit::Scratch::new();
        let mut args = vec!["run"];
        args.extend(o);
        args.extend(["--", "true"]);
        let d = run(corral(&s, args), 5 * SEC);
        d.assert_code(125);
    }
}

/// The batch keys `idle_timeout` and `max_output`: a silent task times out
/// (kind idle), a chatty one passes, a flood ends at the limit; each is
/// classified, and reported with its byte counts.
#[test]
fn batch_keys_idle_timeout_and_max_output() {
    let s = corral_testkit::Scratch::new();
    let w = corral_testkit::Watch::new(&s);
    let manifest = r#"
[defaults]
timeout = "20s"
idle_timeout = "400ms"
[[task]]
name = "silent"
shell = '"$H" silent'
[[task]]
name = "chatty"
shell = 'i=0; while [ $i -lt 10 ]; do echo tick; sleep 0.1; i=$((i+1)); done'
[[task]]
name = "flood"
run = ["yes"]
max_output = "64K"
"#;
    let m = s.path("batch.toml");
    std::fs::write(&m, manifest).unwrap();
    let rp = s.path("report.json");
    let d = run(
        corral(
            &s,
            [
                "batch".as_ref(),
                m.as_os_str(),
                "--report".as_ref(),
                rp.as_os_str(),
            ],
        ),
        15 * SEC,
    );
    d.assert_code(2);
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&rp).unwrap()).unwrap();
    let runs = v["runs"].as_array().unwrap();
    let by = |task: &str| {
        let r = runs.iter().find(|r| r["task"] == task).unwrap();
        check_report(r);
        r.clone()
    };
    let silent = by("silent");
    assert_eq!(silent["status"], "error");
    assert_eq!(silent["outcome"], "timed_out");
    assert_eq!(silent["timeout_kind"], "idle");
    assert!(w.wait_dead("silent", 2 * SEC));
    let chatty = by("chatty");
    assert_eq!(chatty["status"], "passed", "{chatty}");
    assert_eq!(chatty["timeout_kind"], Value::Null);
    let flood = by("flood");
    assert_eq!(flood["status"], "error");
    assert_eq!(flood["outcome"], "output_limit");
    assert!(count(&flood, "stdout_bytes") > 64 * 1024);
}

/// stdout and stderr both a terminal: corral sees no output, so nothing
/// could restart the idle timer: `--idle-timeout` is refused (125), the
/// program never runs, and the message says why.
#[test]
fn idle_timeout_is_refused_when_no_stream_is_seen() {
    use std::os::fd::FromRawFd;
    // SAFETY: plain libc calls on a descriptor we own; ptsname's static
    // buffer is copied at once (this test opens one terminal).
    let (master, slave_path) = unsafe {
        let m = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        assert!(m >= 0, "posix_openpt");
        assert_eq!(libc::grantpt(m), 0);
        assert_eq!(libc::unlockpt(m), 0);
        let name = std::ffi::CStr::from_ptr(libc::ptsname(m))
            .to_string_lossy()
            .into_owned();
        (std::fs::File::from_raw_fd(m), name)
    };
    let slave = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&slave_path)
        .unwrap();
    let s = corral_testkit::Scratch::new();
    let marker = s.path("ran");
    let script = format!("touch {}", marker.display());
    let mut c = corral(
        &s,
        ["run", "--idle-timeout", "1s", "--", "sh", "-c", &script],
    );
    c.stdout(slave.try_clone().unwrap()).stderr(slave);
    let mut reader = master;
    let seen = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        let mut text = String::new();
        while let Ok(n) = std::io::Read::read(&mut reader, &mut buf) {
            if n == 0 {
                break;
            }
            text.push_str(&String::from_utf8_lossy(&buf[..n]));
            if text.contains("idle") {
                break;
            }
        }
        text
    });
    let status = c.status().unwrap();
    assert_eq!(status.code(), Some(125));
    assert!(!marker.exists(), "the program ran");
    // The last slave copies go with the command: the reader then ends.
    drop(c);
    let text = seen.join().unwrap();
    assert!(
        text.contains("--idle-timeout needs output corral sees"),
        "{text}"
    );
}
