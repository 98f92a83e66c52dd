//! `wait_delay(0)` means "no grace for holders", not "end of file must
//! already have been read when the root's exit is seen".
//!
//! A root that writes and exits, with nothing else holding its output, is a
//! clean exit at any wait delay, on every output path (capture, relay to a
//! writer, `relay_file` through the splice thread). A descendant that
//! really holds the pipe is still `OutputHeld` at a zero wait delay, and
//! dies. Loops of 20 runs hunt the race between the root's exit and the
//! last bytes / end of file.
#![cfg(target_os = "linux")]

use std::io::Read;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use corral::{Command, ContainmentChoice, Mechanism, Outcome, Output, Report, RootStatus};
use corral_testkit::{assert_between, Scratch, Watch};

const SEC: Duration = Duration::from_secs(1);
const REPS: usize = 20;

fn pg(c: &mut Command) -> &mut Command {
    c.containment(ContainmentChoice::Only(Mechanism::ProcessGroup))
        .wait_delay(Duration::ZERO)
}

/// A pipe whose read end is drained on a thread: (write end for corral,
/// the thread giving back every byte read to EOF).
fn pipe_to_reader() -> (std::fs::File, std::thread::JoinHandle<Vec<u8>>) {
    let (mut r, w) = std::io::pipe().unwrap();
    let t = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = r.read_to_end(&mut v);
        v
    });
    (std::fs::File::from(std::os::fd::OwnedFd::from(w)), t)
}

#[track_caller]
fn assert_clean_exit(r: &Report, i: usize) {
    assert_eq!(r.outcome, Outcome::Exited(0), "run {i}: {r:?}");
    assert_eq!(r.exit_code(), Some(0), "run {i}: {r:?}");
    assert!(r.signals_sent.is_empty(), "run {i}: {r:?}");
    assert_eq!(r.leftovers.killed, 0, "run {i}");
}

#[test]
fn capture_echo_is_a_clean_exit_every_time() {
    for i in 0..REPS {
        let t = Instant::now();
        let r = pg(Command::new("echo").arg("hi")).run().unwrap();
        assert_clean_exit(&r, i);
        assert_eq!(r.stdout.bytes(), b"hi\n", "run {i}");
        assert!(t.elapsed() < 3 * SEC);
    }
}

#[test]
fn capture_of_a_full_pipe_and_both_streams_is_a_clean_exit() {
    // More than a pipe holds, on both streams, from a root that forks
    // short-lived children (they are gone before the root exits).
    let s = Scratch::new();
    for i in 0..REPS {
        let r = pg(&mut s
            .sh("head -c 300000 /dev/zero; (echo err >&2); head -c 70000 /dev/zero >&2; echo end"))
        .run()
        .unwrap();
        assert_clean_exit(&r, i);
        assert_eq!(r.stdout.total_bytes(), 300_004, "run {i}");
        assert_eq!(r.stderr.total_bytes(), 70_004, "run {i}");
    }
}

#[test]
fn relay_to_a_writer_is_a_clean_exit_every_time() {
    for i in 0..REPS {
        let got: Arc<Mutex<Vec<u8>>> = Arc::default();
        struct Sink(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Sink {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let r = pg(Command::new("echo").arg("hi"))
            .stdout(Output::relay(Sink(got.clone())))
            .run()
            .unwrap();
        assert_clean_exit(&r, i);
        assert_eq!(*got.lock().unwrap(), b"hi\n", "run {i}");
    }
}

#[test]
fn relay_file_to_a_pipe_is_a_clean_exit_every_time() {
    // What the CLI does when its stdout is a pipe: the splice thread, not
    // the lifecycle, sees end of file, a moment after the root's exit.
    for i in 0..REPS {
        let (w, reader) = pipe_to_reader();
        let t = Instant::now();
        let r = pg(Command::new("echo").arg("hi"))
            .stdout(Output::relay_file(w))
            .run()
            .unwrap();
        assert_clean_exit(&r, i);
        assert!(t.elapsed() < 3 * SEC);
        assert_eq!(reader.join().unwrap(), b"hi\n", "run {i}");
    }
}

#[test]
fn relay_file_of_megabytes_loses_nothing() {
    // 8 MiB through the relay: the root has written it all when it exits,
    // and up to a pipe's worth (1 MiB) is still on its way then.
    let s = Scratch::new();
    for i in 0..5 {
        let (w, reader) = pipe_to_reader();
        let r = pg(&mut s.sh("head -c 8388608 /dev/zero"))
            .stdout(Output::relay_file(w))
            .run()
            .unwrap();
        assert_clean_exit(&r, i);
        assert_eq!(reader.join().unwrap().len(), 8 << 20, "run {i}");
        assert_eq!(r.stdout.total_bytes(), 8 << 20, "run {i}");
    }
}

/// A script that starts helper `name` with `launch` (`"$H"`, `setsid
/// "$H"`), holding the root's output, waits until it sleeps and the watch
/// (if any) pinned it, prints `started` and exits 0.
fn holder_then_exit(launch: &str, name: &str) -> String {
    format!(
        r#"{launch} {name} & until [ "$(cat /proc/$(cat "$CORRAL_TEST_DIR/{name}.pid" 2>/dev/null)/comm 2>/dev/null)" = sleep ] && [ -e "$CORRAL_TEST_DIR/{name}.pinned" -o ! -e "$CORRAL_TEST_DIR/.watched" ]; do sleep 0.01; done; echo started; exit 0"#
    )
}

/// A grandchild that really holds the pipe: `OutputHeld` at once, and the
/// holder dies.
fn real_holder(relay_file: bool) {
    for i in 0..5 {
        let s = Scratch::new();
        let w = Watch::new(&s);
        let mut cmd = s.sh(&holder_then_exit(r#""$H""#, "gc"));
        pg(&mut cmd);
        let reader = relay_file.then(|| {
            let (f, reader) = pipe_to_reader();
            cmd.stdout(Output::relay_file(f));
            reader
        });
        let t = Instant::now();
        let r = cmd.run().unwrap();
        assert_eq!(r.outcome, Outcome::OutputHeld, "run {i}: {r:?}");
        assert_eq!(r.root, Some(RootStatus::Exited(0)));
        assert_eq!(r.exit_code(), None);
        assert!(r.leftovers.killed >= 1, "run {i}: {r:?}");
        assert!(r.cleanup_errors.is_empty(), "{:?}", r.cleanup_errors);
        assert_between(t.elapsed(), Duration::ZERO, 5 * SEC);
        assert!(w.pid("gc", SEC).is_some());
        assert!(w.wait_dead("gc", 2 * SEC), "run {i}: the holder survived");
        match reader {
            Some(rd) => assert_eq!(rd.join().unwrap(), b"started\n"),
            None => assert_eq!(r.stdout.bytes(), b"started\n"),
        }
    }
}

#[test]
fn capture_held_by_a_grandchild_is_output_held_at_zero_wait_delay() {
    real_holder(false);
}

#[test]
fn relay_file_held_by_a_grandchild_is_output_held_at_zero_wait_delay() {
    real_holder(true);
}

#[test]
fn a_holder_that_left_the_process_group_still_holds_the_output() {
    // A setsid escaper is invisible to the process-group tier, but it is
    // no fork of the host: the output is held, at once, not after the
    // allowance for the host's own forks.
    for i in 0..5 {
        let s = Scratch::new();
        let w = Watch::new(&s);
        let mut cmd = s.sh(&holder_then_exit(r#"setsid "$H""#, "esc"));
        pg(&mut cmd);
        let running = cmd.spawn().unwrap();
        assert!(w.pid("esc", 5 * SEC).is_some());
        let t = Instant::now();
        let r = running.wait();
        assert_eq!(r.outcome, Outcome::OutputHeld, "run {i}: {r:?}");
        assert_eq!(r.root, Some(RootStatus::Exited(0)));
        assert_eq!(r.stdout.bytes(), b"started\n");
        assert!(t.elapsed() < 3 * SEC);
        // The escaper is beyond this tier (DESIGN: containment table); the
        // Watch ends it.
    }
}
