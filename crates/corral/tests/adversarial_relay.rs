//! Adversarial destinations for `Output::relay_file` (the zero-copy splice
//! relay): a host that did not ignore SIGPIPE, a non-blocking pipe (as
//! node.js sets its stdout), a socket, a regular file opened `O_APPEND`,
//! `/dev/null`, a slow consumer, a consumer that exits early, and a holder
//! that keeps the child's pipe open past the wait delay.
#![cfg(target_os = "linux")]

use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use corral::{ContainmentChoice, Mechanism, Outcome, Output, Signal};
use corral_testkit::{ready, Scratch, Watch};

fn pipe_pair() -> (std::io::PipeReader, std::fs::File) {
    let (r, w) = std::io::pipe().unwrap();
    (r, std::fs::File::from(OwnedFd::from(w)))
}

fn set_nonblocking(fd: impl AsFd) {
    let flags = rustix::fs::fcntl_getfl(&fd).unwrap();
    rustix::fs::fcntl_setfl(&fd, flags | rustix::fs::OFlags::NONBLOCK).unwrap();
}

fn pg() -> ContainmentChoice {
    ContainmentChoice::Only(Mechanism::ProcessGroup)
}

/// `seq 1 N` written as it is: the exact bytes.
fn seq_bytes(n: u32) -> Vec<u8> {
    (1..=n)
        .flat_map(|i| format!("{i}\n").into_bytes())
        .collect()
}

/// The host's side of [`a_host_that_keeps_sigpipe_default_survives_a_broken_destination`]:
/// SIGPIPE at its default action (as a C host or a Rust program that resets
/// it has), then a relay into a pipe nobody reads. Prints the outcome.
#[test]
#[ignore = "run by a_host_that_keeps_sigpipe_default_survives_a_broken_destination"]
fn sigpipe_default_host() {
    if std::env::var_os("ADV_SIGPIPE_HOST").is_none() {
        return;
    }
    // SAFETY: resetting a signal's disposition to its default; no handler.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let s = Scratch::new();
    // A plain run first: the relay ends at end of file, before the run.
    let (mut r, wf) = pipe_pair();
    let reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        r.read_to_end(&mut v).unwrap();
        v
    });
    let report = s
        .sh("echo hi")
        .containment(pg())
        .stdout(Output::relay_file(wf))
        .run()
        .unwrap();
    assert_eq!(reader.join().unwrap(), b"hi\n");
    println!("HOST-PLAIN {:?}", report.outcome);
    let (r, wf) = pipe_pair();
    drop(r);
    let report = s
        .sh("exec yes")
        .containment(pg())
        .stdout(Output::relay_file(wf))
        .timeout(Duration::from_secs(10))
        .run()
        .unwrap();
    println!("HOST-OUTCOME {:?}", report.outcome);
    // The same through `Output::relay` (a writer on corral's relay thread).
    let (r, wf) = pipe_pair();
    drop(r);
    let report = s
        .sh("exec yes")
        .containment(pg())
        .stdout(Output::relay(wf))
        .timeout(Duration::from_secs(10))
        .run()
        .unwrap();
    println!("HOST-RELAY {:?}", report.outcome);
}

/// The relay thread's `splice` into a pipe without readers raises SIGPIPE
/// on the host thread that makes it, and so did the stop byte written to a
/// relay thread that had already ended (every run whose output ended first). A host whose SIGPIPE is at its default
/// action must not die of its command's broken destination: the command
/// gets SIGPIPE (as in a plain pipeline), the host gets its report.
#[test]
fn a_host_that_keeps_sigpipe_default_survives_a_broken_destination() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "sigpipe_default_host",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("ADV_SIGPIPE_HOST", "1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the host died: {:?}\n{text}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("HOST-PLAIN Exited(0)"), "{text}");
    assert!(
        text.contains("HOST-OUTCOME Signaled(SIGPIPE)"),
        "the command did not get SIGPIPE: {text}"
    );
    assert!(
        text.contains("HOST-RELAY Signaled(SIGPIPE)"),
        "the command did not get SIGPIPE through a relay: {text}"
    );
}

/// A destination pipe in non-blocking mode (node.js sets its stdout so):
/// every byte arrives, in order, through a slow reader that leaves the pipe
/// full most of the time, and the count is exact.
#[test]
fn a_non_blocking_destination_with_a_slow_reader_gets_every_byte() {
    let s = Scratch::new();
    let (mut r, wf) = pipe_pair();
    set_nonblocking(&wf);
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match r.read(&mut buf) {
                Ok(0) => return got,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) => panic!("{e}"),
            }
            // Slow: the pipe stays full, the relay meets EAGAIN.
            if got.len() % (64 * 1024) < 4096 {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    });
    let n = 200_000;
    let report = s
        .sh(&format!("seq 1 {n}"))
        .containment(pg())
        .stdout(Output::relay_file(wf))
        .timeout(Duration::from_secs(20))
        .run()
        .unwrap();
    assert_eq!(report.outcome, Outcome::Exited(0), "{report:?}");
    let want = seq_bytes(n);
    assert_eq!(report.stdout.total_bytes(), want.len() as u64);
    let got = reader.join().unwrap();
    assert_eq!(got.len(), want.len());
    assert!(got == want, "bytes differ");
}

/// The consumer reads a little, then exits while the command still writes:
/// the command gets SIGPIPE (its write fails as in a plain pipeline), the
/// outcome says so, and the count is what went through (at least what the
/// consumer read).
#[test]
fn a_consumer_that_exits_early_gives_the_command_sigpipe() {
    let s = Scratch::new();
    let (mut r, wf) = pipe_pair();
    set_nonblocking(&wf);
    let reader = std::thread::spawn(move || {
        let mut buf = vec![0u8; 10_000];
        r.read_exact(&mut buf).unwrap();
        drop(r);
        buf.len()
    });
    let t = Instant::now();
    let report = s
        .sh("exec yes")
        .containment(pg())
        .stdout(Output::relay_file(wf))
        .timeout(Duration::from_secs(10))
        .run()
        .unwrap();
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    let read = reader.join().unwrap();
    assert_eq!(
        report.outcome,
        Outcome::Signaled(Signal::from_raw(13).unwrap()),
        "{report:?}"
    );
    assert!(report.stdout.total_bytes() >= read as u64, "{report:?}");
}

/// Into a connected stream socket, and into a non-blocking one: every byte.
#[test]
fn a_socket_destination_gets_every_byte() {
    for nonblocking in [false, true] {
        let s = Scratch::new();
        let (a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
        if nonblocking {
            a.set_nonblocking(true).unwrap();
        }
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            b.read_to_end(&mut got).unwrap();
            got
        });
        let n = 100_000;
        let report = s
            .sh(&format!("seq 1 {n}; seq 1 {n} >&2"))
            .containment(pg())
            .stdout(Output::relay_file(std::fs::File::from(OwnedFd::from(
                a.try_clone().unwrap(),
            ))))
            .stderr(Output::relay_file(std::fs::File::from(OwnedFd::from(a))))
            .timeout(Duration::from_secs(20))
            .run()
            .unwrap();
        assert_eq!(report.outcome, Outcome::Exited(0), "{report:?}");
        let want = seq_bytes(n);
        assert_eq!(report.stdout.total_bytes(), want.len() as u64);
        assert_eq!(report.stderr.total_bytes(), want.len() as u64);
        let got = reader.join().unwrap();
        assert_eq!(got.len(), 2 * want.len(), "nonblocking {nonblocking}");
    }
}

/// Into a regular file opened `O_APPEND` (splice refuses it: the copy
/// path), after what the file already held; into `/dev/null`.
#[test]
fn an_append_file_and_dev_null_get_exact_counts() {
    let s = Scratch::new();
    let path = s.path("out");
    std::fs::write(&path, b"before\n").unwrap();
    let f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    let n = 50_000;
    let report = s
        .sh(&format!("seq 1 {n}"))
        .containment(pg())
        .stdout(Output::relay_file(f))
        .stderr(Output::relay_file(
            std::fs::OpenOptions::new()
                .write(true)
                .open("/dev/null")
                .unwrap(),
        ))
        .timeout(Duration::from_secs(20))
        .run()
        .unwrap();
    assert_eq!(report.outcome, Outcome::Exited(0), "{report:?}");
    let mut want = b"before\n".to_vec();
    want.extend(seq_bytes(n));
    assert_eq!(report.stdout.total_bytes(), (want.len() - 7) as u64);
    assert!(
        std::fs::read(&path).unwrap() == want,
        "file content differs"
    );

    let report = s
        .sh(&format!("seq 1 {n}"))
        .containment(pg())
        .stdout(Output::relay_file(
            std::fs::OpenOptions::new()
                .write(true)
                .open("/dev/null")
                .unwrap(),
        ))
        .timeout(Duration::from_secs(20))
        .run()
        .unwrap();
    assert_eq!(report.outcome, Outcome::Exited(0), "{report:?}");
    assert_eq!(report.stdout.total_bytes(), seq_bytes(n).len() as u64);
}

/// A grandchild keeps the relayed pipe open past the wait delay: the run is
/// `OutputHeld`, bounded, the holder killed; what came before is counted.
#[test]
fn a_holder_past_the_wait_delay_is_bounded_and_killed() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let (r, wf) = pipe_pair();
    let reader = std::thread::spawn(move || {
        let mut r = r;
        let mut got = Vec::new();
        r.read_to_end(&mut got).unwrap();
        got
    });
    let t = Instant::now();
    let report = s
        .sh(&format!(
            "echo first; \"$H\" holder & {r} echo second",
            r = ready("holder")
        ))
        .containment(pg())
        .stdout(Output::relay_file(wf))
        .wait_delay(Duration::from_millis(200))
        .timeout(Duration::from_secs(20))
        .run()
        .unwrap();
    let el = t.elapsed();
    assert!(el < Duration::from_secs(3), "{el:?}");
    assert_eq!(report.outcome, Outcome::OutputHeld, "{report:?}");
    assert!(w.wait_dead("holder", Duration::from_secs(2)));
    assert_eq!(report.stdout.total_bytes(), 13, "{report:?}");
    assert_eq!(reader.join().unwrap(), b"first\nsecond\n");
    s.assert_none_left();
}

/// A consumer that never reads (but keeps its end open): the command fills
/// both pipes and blocks; the timeout still ends the run in bounded time,
/// the relay thread is stopped, and the count is what reached the
/// destination (no more than it can hold).
#[test]
fn a_consumer_that_never_reads_cannot_hold_the_return() {
    for nonblocking in [false, true] {
        let s = Scratch::new();
        let (r, wf) = pipe_pair();
        if nonblocking {
            set_nonblocking(&wf);
        }
        let t = Instant::now();
        let report = s
            .sh("exec yes")
            .containment(pg())
            .stdout(Output::relay_file(wf))
            .timeout(Duration::from_millis(300))
            .run()
            .unwrap();
        let el = t.elapsed();
        assert!(el < Duration::from_secs(3), "took {el:?}");
        assert_eq!(report.outcome, Outcome::TimedOut, "{report:?}");
        let n = report.stdout.total_bytes();
        // The relay enlarges the destination pipe (to 1 MiB where allowed).
        let cap = rustix::pipe::fcntl_getpipe_size(&r).unwrap();
        assert!(n > 0 && n <= cap as u64, "{n} bytes, pipe holds {cap}");
        // Exactly what the destination holds.
        set_nonblocking(&r);
        let mut r = r;
        let mut got = 0u64;
        let mut buf = vec![0u8; 1 << 16];
        while let Ok(k) = r.read(&mut buf) {
            if k == 0 {
                break;
            }
            got += k as u64;
        }
        assert_eq!(
            got, n,
            "the report counted {n}, the destination holds {got}"
        );
    }
}
