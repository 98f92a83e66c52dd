//! `Running::wait_watching`: a descriptor of the caller's watched by the
//! run's own wait, its closure called on the waiting thread (the CLI's
//! signal pipe, without a thread of its own). Real trees: the closure's
//! cancellation ends the run in bound with every descendant dead; bytes
//! written before the wait are seen; a hang-up is not a busy loop; the
//! run's own timers go on while a descriptor is watched.

#![cfg(target_os = "linux")]

use std::io::{PipeReader, Read, Write};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use corral::{CancelToken, Command, ContainmentChoice, Mechanism, Outcome, Signal};
use corral_testkit::{assert_between, ready, Scratch, Watch};

const SEC: Duration = Duration::from_secs(1);

/// A pipe whose read end does not block (the closure drains it).
fn pipe() -> (PipeReader, std::io::PipeWriter) {
    let (r, w) = std::io::pipe().unwrap();
    rustix::fs::fcntl_setfl(&r, rustix::fs::OFlags::NONBLOCK).unwrap();
    (r, w)
}

/// Reads what is there; the number of bytes.
fn drain(mut r: &PipeReader) -> usize {
    let mut buf = [0u8; 64];
    let mut n = 0;
    while let Ok(k @ 1..) = r.read(&mut buf) {
        n += k;
    }
    n
}

/// A root that traps TERM and runs on, and two helpers below it (one in a
/// subshell that ignores TERM): only the grace's SIGKILL ends them all.
fn stubborn_tree(s: &Scratch, tier: Mechanism) -> Command {
    let script = format!(
        r#"trap '' TERM; "$H" a & (trap '' TERM; exec "$H" b) & {}{}touch "$CORRAL_TEST_DIR/up"; while :; do sleep 0.05; done"#,
        ready("a"),
        ready("b")
    );
    let mut cmd = s.sh(&script);
    cmd.containment(ContainmentChoice::Only(tier))
        .timeout(30 * SEC)
        .grace(Duration::from_millis(300));
    cmd
}

fn the_closures_cancel_ends_the_run(tier: Mechanism) {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let (reader, mut writer) = pipe();
    let token = CancelToken::new();
    let mut cmd = stubborn_tree(&s, tier);
    cmd.cancel_token(&token);
    let running = cmd.spawn().unwrap();
    // Another thread writes once the tree is up; the waiting thread must be
    // the one that sees it.
    let up = s.path("up");
    let poke = std::thread::spawn(move || {
        let end = Instant::now() + 10 * SEC;
        while !up.exists() && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(5));
        }
        let at = Instant::now();
        writer.write_all(&[15]).unwrap();
        (at, writer)
    });
    let waiter = std::thread::current().id();
    let mut calls = Vec::new();
    let report = running.wait_watching(reader.as_fd(), || {
        calls.push((std::thread::current().id(), drain(&reader), Instant::now()));
        token.cancel_with(Signal::TERM);
    });
    let ended = Instant::now();
    let (poked, _writer) = poke.join().unwrap();
    assert!(s.path("up").exists(), "the tree never came up");
    assert_eq!(report.outcome, Outcome::Cancelled, "{report:?}");
    assert_eq!(
        report.signals_sent.first(),
        Some(&Signal::TERM),
        "{report:?}"
    );
    assert!(report.signals_sent.contains(&Signal::KILL), "{report:?}");
    assert!(!calls.is_empty(), "the closure never ran");
    for (thread, _, _) in &calls {
        assert_eq!(*thread, waiter, "the closure ran on another thread");
    }
    assert_eq!(calls.iter().map(|c| c.1).sum::<usize>(), 1, "{calls:?}");
    // Seen at once, and the run over within the grace and the confirm.
    assert_between(calls[0].2 - poked, Duration::ZERO, SEC);
    assert_between(ended - poked, Duration::from_millis(250), 5 * SEC);
    for name in ["a", "b"] {
        assert!(w.pid(name, SEC).is_some(), "{name} never started");
        assert!(w.wait_dead(name, 2 * SEC), "{name} survived");
    }
    s.assert_none_left();
}

#[test]
fn a_cancel_from_the_closure_ends_the_run_process_group() {
    the_closures_cancel_ends_the_run(Mechanism::ProcessGroup);
}

#[test]
fn a_cancel_from_the_closure_ends_the_run_subreaper() {
    corral::process_wide::enable_subreaper().unwrap();
    the_closures_cancel_ends_the_run(Mechanism::Subreaper);
}

/// Bytes written before the spawn are seen by the first step, once: the
/// closure drains them and is not called again for nothing.
#[test]
fn bytes_written_before_the_wait_are_seen_once() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let (reader, mut writer) = pipe();
    writer.write_all(b"abc").unwrap();
    let mut cmd = s.sh(&format!(
        r#""$H" a & {}sleep 0.3; kill $(cat "$CORRAL_TEST_DIR/a.pid")"#,
        ready("a")
    ));
    cmd.containment(ContainmentChoice::Only(Mechanism::ProcessGroup))
        .timeout(30 * SEC);
    let started = Instant::now();
    let mut seen = Vec::new();
    let report = cmd
        .spawn()
        .unwrap()
        .wait_watching(reader.as_fd(), || seen.push(drain(&reader)));
    assert_eq!(report.outcome, Outcome::Exited(0), "{report:?}");
    assert_eq!(seen, vec![3], "one call, all three bytes");
    assert_between(started.elapsed(), Duration::from_millis(300), 10 * SEC);
    assert!(w.wait_dead("a", 2 * SEC));
    s.assert_none_left();
}

/// The writers go away during the run: one more call, then the descriptor
/// is no longer watched (no busy loop), and the run goes on to its own
/// deadline, which kills the whole tree.
#[test]
fn a_hang_up_is_seen_once_and_the_deadline_still_fires() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let (reader, writer) = pipe();
    let mut cmd = s.sh(&format!(
        r#""$H" a & {}while :; do sleep 0.05; done"#,
        ready("a")
    ));
    cmd.containment(ContainmentChoice::Only(Mechanism::ProcessGroup))
        .timeout(Duration::from_millis(800));
    let running = cmd.spawn().unwrap();
    let closer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        drop(writer);
    });
    let started = Instant::now();
    let mut calls = 0;
    let report = running.wait_watching(reader.as_fd(), || {
        calls += 1;
        drain(&reader);
    });
    closer.join().unwrap();
    assert_eq!(report.outcome, Outcome::TimedOut, "{report:?}");
    assert_eq!(calls, 1, "the hang-up: one call");
    assert_between(started.elapsed(), Duration::from_millis(500), 10 * SEC);
    assert!(w.pid("a", SEC).is_some());
    assert!(w.wait_dead("a", 2 * SEC));
    s.assert_none_left();
}
