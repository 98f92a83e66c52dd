//! A terminal stays a terminal: under a pseudo-terminal (util-linux
//! `script`), an interactive command run by corral can read the terminal
//! and sees its stdout as a terminal, and corral exits with its code.
#![cfg(target_os = "linux")]

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn under_pty(cmdline: &str, input: &[u8]) -> Option<(i32, String, Duration)> {
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("SKIP: util-linux `script` is not installed");
        return None;
    }
    let t = Instant::now();
    let mut child = Command::new("script")
        .args(["-qec", cmdline, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Give the program time to reach its read before typing.
    std::thread::sleep(Duration::from_millis(300));
    child.stdin.take().unwrap().write_all(input).unwrap();
    let out = child.wait_with_output().unwrap();
    Some((
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        t.elapsed(),
    ))
}

#[test]
fn an_interactive_program_reads_the_terminal() {
    let corral = env!("CARGO_BIN_EXE_corral");
    let Some((code, out, took)) = under_pty(
        &format!("{corral} run -t 10 -- sh -c 'read x; echo got:$x; exit 3'"),
        b"hello\n",
    ) else {
        return;
    };
    assert!(out.contains("got:hello"), "{out:?}");
    assert_eq!(code, 3, "{out:?}");
    assert!(
        took < Duration::from_secs(8),
        "took {took:?}: the program was stopped"
    );
}

#[test]
fn stdout_stays_a_terminal() {
    let corral = env!("CARGO_BIN_EXE_corral");
    let Some((code, out, _)) = under_pty(
        &format!("{corral} run -- sh -c 'test -t 0 && test -t 1 && echo both-tty'"),
        b"",
    ) else {
        return;
    };
    assert_eq!(code, 0, "{out:?}");
    assert!(out.contains("both-tty"), "{out:?}");
}
