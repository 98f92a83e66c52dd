//! `corral run --pty [--pty-size COLSxROWS]` with real
//! trees: the program sees a terminal (its controlling one) of the given
//! size; everything comes out on corral's stdout, counted (stderr_bytes
//! 0); a descendant holding the terminal past the wait delay is killed
//! (123, output_held) in every tier; corral's stdin is typed, then end of
//! file; --idle-timeout and --max-output apply to the terminal's output;
//! bad sizes are refused.

#![cfg(target_os = "linux")]

mod common;

use std::process::Stdio;
use std::time::Duration;

use corral_testkit::scenario::Fate::Dead;
use corral_testkit::Scratch;
use serde_json::Value;

use common::*;

const SEC: Duration = Duration::from_secs(1);

#[test]
fn the_program_sees_a_terminal_of_the_given_size() {
    let ran = run_row(&Row {
        opts: opts(&["--pty", "--pty-size", "91x29", "-t", "20"]),
        tree: "[ -t 0 ] && [ -t 1 ] && [ -t 2 ] && echo isatty-ok; \
               : </dev/tty && echo ctty-ok; echo size=$(stty size); echo to-stderr >&2"
            .into(),
        code: Some(0),
        hang: Some(20 * SEC),
        fields: vec![
            ("outcome", "exited".into()),
            ("stderr_bytes", 0.into()),
            ("timeout_kind", Value::Null),
        ],
        ..Row::default()
    });
    let out = ran.d.out();
    for want in [
        "isatty-ok\r\n",
        "ctty-ok\r\n",
        "size=29 91\r\n",
        "to-stderr\r\n",
    ] {
        assert!(out.contains(want), "{want:?} missing in {out:?}");
    }
    assert!(ran.d.err().is_empty(), "{:?}", ran.d.err());
    assert_eq!(count(&ran.v, "stdout_bytes"), out.len() as u64);
}

#[test]
fn the_default_size_is_80x24() {
    let ran = run_row(&Row {
        opts: opts(&["--pty"]),
        tree: "stty size".into(),
        code: Some(0),
        ..Row::default()
    });
    assert_eq!(ran.d.out(), "24 80\r\n");
}

/// The root exits at once; a descendant that ignores the SIGHUP of the
/// session leader's exit keeps the terminal: killed after the wait delay.
fn holder_row(tier: &str) {
    run_row(&Row {
        opts: opts(&[
            "--pty",
            "--containment",
            tier,
            "--wait-delay",
            "300ms",
            "-t",
            "30",
        ]),
        tree: format!(
            r#""$H" holder sh -c "trap '' HUP; exec sleep 30" & {}echo root-done; exit 0"#,
            wait_for("holder")
        ),
        code: Some(123),
        hang: Some(20 * SEC),
        bound: Some((ms(300), 10 * SEC)),
        fields: vec![
            ("outcome", "output_held".into()),
            ("exit_code", 0.into()),
            ("stderr_bytes", 0.into()),
        ],
        fates: &[("holder", Dead)],
        only: true,
        ..Row::default()
    });
}

#[test]
fn a_terminal_holder_is_killed_after_the_wait_delay_process_group() {
    holder_row("process-group");
}

#[test]
fn a_terminal_holder_is_killed_after_the_wait_delay_subreaper() {
    holder_row("subreaper");
}

#[corral_testkit::needs(cgroup)]
#[test]
fn a_terminal_holder_is_killed_after_the_wait_delay_cgroup() {
    holder_row("cgroup");
}

#[corral_testkit::needs(pidns)]
#[test]
fn a_terminal_holder_is_killed_after_the_wait_delay_pid_namespace() {
    holder_row("pid-namespace");
}

/// corral's stdin (a file here) is typed on the terminal, echoed, read by
/// the program, then the end-of-file character ends `cat`.
#[test]
fn stdin_is_typed_then_end_of_file() {
    let s = Scratch::new();
    let input = s.path("input.txt");
    std::fs::write(&input, "typed line\n").unwrap();
    let rp = report_path(&s);
    let mut c = corral(
        &s,
        [
            "run",
            "--pty",
            "-t",
            "20",
            "--report",
            &rp,
            "--",
            "sh",
            "-c",
            "cat; echo cat-done-$?",
        ],
    );
    c.stdin(Stdio::from(std::fs::File::open(&input).unwrap()));
    let d = start(c, Sink::Pipe, Sink::Pipe).finish(20 * SEC);
    d.assert_code(0);
    let out = d.out();
    assert_eq!(out.matches("typed line").count(), 2, "{out:?}");
    assert!(out.contains("cat-done-0"), "{out:?}");
    assert!(d.elapsed() < 10 * SEC);
    // stdin at its end from the start (/dev/null): cat ends at once.
    let d = run(
        corral(&s, ["run", "--pty", "-t", "20", "--", "cat"]),
        20 * SEC,
    );
    d.assert_code(0);
    assert!(d.elapsed() < 10 * SEC);
    s.assert_none_left();
}

#[test]
fn a_silent_program_is_killed_by_the_idle_timeout() {
    run_row(&Row {
        opts: opts(&["--pty", "--idle-timeout", "400ms", "-t", "20"]),
        tree: format!(r#""$H" kid & {}exec "$H" root"#, wait_for("kid")),
        code: Some(124),
        hang: Some(20 * SEC),
        bound: Some((ms(400), 8 * SEC)),
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
        opts: opts(&["--pty", "--idle-timeout", "600ms"]),
        tree: "i=0; while [ $i -lt 12 ]; do echo tick; sleep 0.1; i=$((i+1)); done".into(),
        code: Some(0),
        hang: Some(20 * SEC),
        bound: Some((ms(1200), 15 * SEC)),
        fields: vec![("outcome", "exited".into()), ("timeout_kind", Value::Null)],
        ..Row::default()
    });
    assert_eq!(ran.d.out().matches("tick\r\n").count(), 12);
}

#[test]
fn a_flood_is_cut_at_the_output_limit() {
    let ran = run_row(&Row {
        opts: opts(&["--pty", "--max-output", "5000", "-t", "20"]),
        tree: r#"exec "$H" flood yes"#.into(),
        code: Some(122),
        hang: Some(20 * SEC),
        bound: Some((ms(0), 8 * SEC)),
        fields: vec![
            ("outcome", "output_limit".into()),
            ("timeout_kind", Value::Null),
            ("stderr_bytes", 0.into()),
        ],
        fates: &[("flood", Dead)],
        ..Row::default()
    });
    assert_eq!(ran.d.out().len(), 5000);
    assert!(count(&ran.v, "stdout_bytes") >= 5000, "{}", ran.v);
}

#[test]
fn bad_sizes_and_a_size_without_pty_are_refused() {
    let s = Scratch::new();
    for args in [
        &["run", "--pty", "--pty-size", "0x24", "--", "true"][..],
        &["run", "--pty", "--pty-size", "80", "--", "true"],
        &["run", "--pty", "--pty-size", "80x24x1", "--", "true"],
        &["run", "--pty-size", "80x24", "--", "true"],
    ] {
        let d = run(corral(&s, args), 10 * SEC);
        d.assert_code(125);
        assert!(!d.err().is_empty());
    }
}

/// corral's stdout is a terminal (one this test owns): the program's
/// terminal starts at its size, and a SIGWINCH to corral passes a resize
/// on (the program's WINCH trap reads the new size).
#[test]
fn the_size_follows_corrals_terminal_and_its_resizes() {
    use rustix::pty::OpenptFlags;
    use rustix::termios::{tcsetwinsize, Winsize};
    let size = |cols, rows| Winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    let s = Scratch::new();
    let flags = OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC;
    let master = rustix::pty::openpt(flags).unwrap();
    rustix::pty::grantpt(&master).unwrap();
    rustix::pty::unlockpt(&master).unwrap();
    let slave = rustix::pty::ioctl_tiocgptpeer(&master, flags).unwrap();
    tcsetwinsize(&master, size(70, 20)).unwrap();
    let mut c = corral(
        &s,
        [
            "run",
            "--pty",
            "-t",
            "20",
            "--",
            "sh",
            "-c",
            r#"trap 'echo winch=$(stty size); exit 0' WINCH; echo start=$(stty size); touch "$CORRAL_TEST_DIR/armed"; i=0; while [ $i -lt 300 ]; do sleep 0.05; i=$((i+1)); done"#,
        ],
    );
    c.stdout(Stdio::from(slave)).stderr(Stdio::null());
    let mut child = c.spawn().unwrap();
    drop(c); // the test's copy of the slave: end of file once corral exits
    let master = std::sync::Arc::new(master);
    let reader = {
        let master = master.clone();
        std::thread::spawn(move || {
            let mut out = Vec::new();
            let mut buf = [0u8; 4096];
            while let Ok(n) = rustix::io::read(&*master, &mut buf) {
                if n == 0 {
                    break;
                }
                out.extend_from_slice(&buf[..n]);
            }
            String::from_utf8_lossy(&out).into_owned()
        })
    };
    assert!(s.wait_file("armed", 10 * SEC), "the program never started");
    tcsetwinsize(&*master, size(50, 15)).unwrap();
    // corral's SIGWINCH watch starts just after the spawn: signal until the
    // program has seen the resize and ended.
    let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    let end = std::time::Instant::now() + 10 * SEC;
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(std::time::Instant::now() < end, "corral did not end");
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::WINCH);
        std::thread::sleep(ms(100));
    };
    assert_eq!(status.code(), Some(0));
    let out = reader.join().unwrap();
    assert!(out.contains("start=20 70"), "{out:?}");
    assert!(out.contains("winch=15 50"), "{out:?}");
    s.assert_none_left();
}
