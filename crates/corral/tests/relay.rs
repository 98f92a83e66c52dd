//! `Output::relay_file`: bytes moved in order to a pipe (zero-copy on
//! Linux), counted, bounded by the wait delay when a holder keeps the
//! child's pipe open, and a broken destination reaches the child as EPIPE.
#![cfg(target_os = "linux")]

use std::io::Read;
use std::time::{Duration, Instant};

use corral::{ContainmentChoice, Mechanism, Outcome, Output, Signal};
use corral_testkit::{assert_between, Scratch, Watch};

fn pipe_pair() -> (std::io::PipeReader, std::fs::File) {
    let (r, w) = std::io::pipe().unwrap();
    let w: std::os::fd::OwnedFd = w.into();
    (r, std::fs::File::from(w))
}

/// Reads `r` to EOF on a thread; returns the bytes and when EOF came.
fn drain(mut r: std::io::PipeReader) -> std::thread::JoinHandle<(Vec<u8>, Instant)> {
    std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = r.read_to_end(&mut v);
        (v, Instant::now())
    })
}

#[test]
fn relays_every_byte_in_order_and_counts_them() {
    let s = Scratch::new();
    let (r, w) = pipe_pair();
    let reader = drain(r);
    let report = s
        .sh("i=0; while [ $i -lt 20000 ]; do echo line$i; i=$((i+1)); done")
        .stdout(Output::relay_file(w))
        .run()
        .unwrap();
    let (bytes, _) = reader.join().unwrap();
    let text = String::from_utf8(bytes).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 20000);
    for (i, l) in lines.iter().enumerate() {
        assert_eq!(*l, format!("line{i}"));
    }
    assert_eq!(report.exit_code(), Some(0));
    assert_eq!(report.stdout.total_bytes(), text.len() as u64);
    assert!(
        report.stdout.bytes().is_empty(),
        "relay_file does not capture"
    );
}

#[test]
fn a_holder_of_the_relayed_pipe_is_bounded_by_the_wait_delay() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let (r, wf) = pipe_pair();
    let reader = drain(r);
    let t = Instant::now();
    let report = s
        .sh(r#""$H" gc & echo started; exit 0"#)
        .containment(ContainmentChoice::Only(Mechanism::ProcessGroup))
        .stdout(Output::relay_file(wf))
        .wait_delay(Duration::from_millis(300))
        .run()
        .unwrap();
    let (bytes, eof_at) = reader.join().unwrap();
    assert_eq!(report.outcome, Outcome::OutputHeld);
    assert_between(
        t.elapsed(),
        Duration::from_millis(300),
        Duration::from_secs(2),
    );
    // The relay's destination was dropped with the run: EOF for its reader.
    assert!(eof_at.duration_since(t) < Duration::from_secs(2));
    assert_eq!(bytes, b"started\n");
    assert!(w.pid("gc", Duration::from_secs(1)).is_some());
    assert!(w.wait_dead("gc", Duration::from_secs(2)));
}

#[test]
fn a_broken_destination_gives_the_child_sigpipe() {
    let s = Scratch::new();
    let (r, wf) = pipe_pair();
    drop(r); // nobody reads
    let t = Instant::now();
    let report = s
        .sh("exec yes")
        .containment(ContainmentChoice::Only(Mechanism::ProcessGroup))
        .stdout(Output::relay_file(wf))
        .timeout(Duration::from_secs(10))
        .run()
        .unwrap();
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "took {:?}",
        t.elapsed()
    );
    assert_eq!(
        report.outcome,
        Outcome::Signaled(Signal::from_raw(13).unwrap())
    );
}
