//! `corral run ... | consumer` against adversarial consumers: a pipe in
//! non-blocking mode (as node.js leaves it), stdout and stderr into the same
//! pipe (`2>&1 |`), a consumer that reads slowly, and one that exits early.
//! The child must see what it would see in a plain pipeline, the byte counts
//! of the report must be exact, and the outcome truthful.
#![cfg(target_os = "linux")]

mod common;

use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use corral_testkit::Scratch;

fn set_nonblocking(fd: impl AsFd) {
    let flags = rustix::fs::fcntl_getfl(&fd).unwrap();
    rustix::fs::fcntl_setfl(&fd, flags | rustix::fs::OFlags::NONBLOCK).unwrap();
}

/// corral with stdout and stderr both the write end of one pipe (`2>&1 |`),
/// non-blocking when asked; returns the child and the read end.
fn spawn_into_one_pipe(
    s: &Scratch,
    args: &[&str],
    nonblocking: bool,
) -> (std::process::Child, std::io::PipeReader) {
    let (r, w) = std::io::pipe().unwrap();
    if nonblocking {
        set_nonblocking(&w);
    }
    let w2 = w.try_clone().unwrap();
    let mut c = corral(s, args);
    c.stdout(Stdio::from(OwnedFd::from(w)))
        .stderr(Stdio::from(OwnedFd::from(w2)));
    let child = c.spawn().unwrap();
    (child, r)
}

fn wait_bounded(child: &mut std::process::Child, bound: Duration) -> std::process::ExitStatus {
    let end = Instant::now() + bound;
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        if Instant::now() >= end {
            let _ = child.kill();
            let _ = child.wait();
            panic!("corral did not return within {bound:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Two writers, one on stdout and one on stderr, write 100-byte lines, each
/// line one `write(2)`; both streams go to one non-blocking pipe read slowly.
/// In a plain pipeline every line arrives whole (a write of at most
/// PIPE_BUF bytes to a pipe is atomic); through corral too. The report's
/// byte counts are exact.
#[test]
fn stdout_and_stderr_into_one_non_blocking_slow_pipe_keep_lines_whole() {
    for nonblocking in [true, false] {
        let s = Scratch::new();
        let rp = report_path(&s);
        let n = 20_000;
        let o = "o".repeat(99);
        let e = "e".repeat(99);
        let script = format!(
            "i=0; while [ $i -lt {n} ]; do echo {o}; i=$((i+1)); done & \
             i=0; while [ $i -lt {n} ]; do echo {e} >&2; i=$((i+1)); done; wait"
        );
        let (mut child, mut r) = spawn_into_one_pipe(
            &s,
            &[
                "run", "-t", "60s", "--report", &rp, "--", "sh", "-c", &script,
            ],
            nonblocking,
        );
        let mut got = Vec::new();
        let mut buf = [0u8; 8192];
        loop {
            match r.read(&mut buf).unwrap() {
                0 => break,
                k => got.extend_from_slice(&buf[..k]),
            }
            if got.len() % (256 * 1024) < 8192 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        let st = wait_bounded(&mut child, Duration::from_secs(60));
        assert_eq!(st.code(), Some(0), "nonblocking {nonblocking}");
        let text = String::from_utf8(got).unwrap();
        let (mut no, mut ne) = (0, 0);
        for line in text.lines() {
            if line == o {
                no += 1;
            } else if line == e {
                ne += 1;
            } else {
                panic!(
                    "a line was torn (nonblocking {nonblocking}): {:?}",
                    &line[..line.len().min(200)]
                );
            }
        }
        assert_eq!((no, ne), (n, n), "nonblocking {nonblocking}");
        let v = read_report(&s.path("report.json"));
        assert_eq!(v["stdout_bytes"], 100 * n as u64, "{v}");
        assert_eq!(v["stderr_bytes"], 100 * n as u64, "{v}");
    }
}

/// The consumer of a non-blocking pipe reads a little and exits while
/// `yes` still writes: `yes` dies of SIGPIPE (exit 141, as without corral),
/// corral returns at once, the report says so.
#[test]
fn an_early_exit_of_a_non_blocking_consumer_gives_the_child_sigpipe() {
    let s = Scratch::new();
    let rp = report_path(&s);
    let (mut child, mut r) = spawn_into_one_pipe(
        &s,
        &["run", "-t", "20s", "--report", &rp, "--", "yes"],
        true,
    );
    let mut buf = [0u8; 4096];
    r.read_exact(&mut buf).unwrap();
    let closed = Instant::now();
    drop(r);
    let st = wait_bounded(&mut child, Duration::from_secs(25));
    assert!(
        closed.elapsed() < Duration::from_secs(5),
        "{:?}",
        closed.elapsed()
    );
    assert_eq!(st.code(), Some(128 + 13));
    let v = read_report(&s.path("report.json"));
    assert_eq!(v["outcome"], "signaled", "{v}");
    assert_eq!(v["signal"], 13, "{v}");
    assert!(v["stdout_bytes"].as_u64().unwrap() >= 4096, "{v}");
}
