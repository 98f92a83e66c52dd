//! Adversarial writers against the bounded capture that reads straight into
//! its head and tail: odd chunk sizes (1 byte, primes, just over a pipe's
//! size, bigger than the whole cap), binary data without newlines, caps of
//! 0, 1, 2 and 3 bytes, output exactly at, just under and just over the
//! cap, a relay of every byte beside a tiny capture, and a line callback
//! given a line longer than the cap.
#![cfg(unix)]

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use corral::{ContainmentChoice, Mechanism, Outcome, Output, Stream};
use corral_testkit::Scratch;

/// Deterministic bytes of every value, newlines included but rare.
fn data(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).max(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 8) as u8
        })
        .collect()
}

/// What a capture of `cap` bytes must keep of `d`: (head, tail, omitted).
fn expected(d: &[u8], cap: usize) -> (&[u8], &[u8], u64) {
    let head = &d[..(cap - cap / 2).min(d.len())];
    let tail_len = (cap / 2).min(d.len() - head.len());
    let tail = &d[d.len() - tail_len..];
    (head, tail, (d.len() - head.len() - tail_len) as u64)
}

fn check(c: &corral::Captured, d: &[u8], cap: usize, what: &str) {
    let (head, tail, omitted) = expected(d, cap);
    assert_eq!(c.total_bytes(), d.len() as u64, "{what}: total");
    assert_eq!(c.omitted(), omitted, "{what}: omitted");
    assert!(c.head() == head, "{what}: head differs");
    assert!(c.tail() == tail, "{what}: tail differs");
}

fn pg() -> ContainmentChoice {
    ContainmentChoice::Only(Mechanism::ProcessGroup)
}

/// `dd` writes the file in chunks of exactly `bs` bytes (the last shorter),
/// to stdout and, with another chunk size, to stderr at the same time.
#[test]
fn odd_chunks_and_tiny_caps_keep_exact_heads_tails_and_counts() {
    let s = Scratch::new();
    let len = 300_001;
    let d1 = data(len, 1);
    let d2 = data(len, 2);
    std::fs::write(s.path("d1"), &d1).unwrap();
    std::fs::write(s.path("d2"), &d2).unwrap();
    let caps = [0usize, 1, 2, 3, 8191, len - 1, len, len + 1, 1 << 20];
    let chunks = [(7usize, 65537usize), (4093, 1), (1 << 20, 3)];
    for (i, &cap) in caps.iter().enumerate() {
        let (bs1, bs2) = chunks[i % chunks.len()];
        let r = s
            .sh(&format!(
                "dd if=\"$CORRAL_TEST_DIR/d1\" bs={bs1} status=none & \
                 dd if=\"$CORRAL_TEST_DIR/d2\" bs={bs2} status=none >&2; wait"
            ))
            .containment(pg())
            .capture_limit(cap)
            .timeout(Duration::from_secs(60))
            .run()
            .unwrap();
        assert_eq!(r.outcome, Outcome::Exited(0), "cap {cap}: {r:?}");
        check(&r.stdout, &d1, cap, &format!("stdout cap {cap} bs {bs1}"));
        check(&r.stderr, &d2, cap, &format!("stderr cap {cap} bs {bs2}"));
    }
}

#[derive(Clone, Default)]
struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A relay beside a capture of 1 and of 3 bytes: the writer gets every
/// byte in order, the capture keeps exactly its head and tail.
#[test]
fn a_relay_beside_a_tiny_capture_gets_every_byte() {
    let s = Scratch::new();
    let len = 2_000_003;
    let d = data(len, 3);
    std::fs::write(s.path("d"), &d).unwrap();
    for (cap, bs) in [(1usize, 13usize), (3, 70_001), (0, 1 << 20)] {
        let sink = Sink::default();
        let r = s
            .sh(&format!("dd if=\"$CORRAL_TEST_DIR/d\" bs={bs} status=none"))
            .containment(pg())
            .capture_limit(cap)
            .stdout(Output::relay(sink.clone()))
            .timeout(Duration::from_secs(60))
            .run()
            .unwrap();
        assert_eq!(r.outcome, Outcome::Exited(0), "{r:?}");
        check(&r.stdout, &d, cap, &format!("relay cap {cap} bs {bs}"));
        let got = sink.0.lock().unwrap();
        assert_eq!(got.len(), d.len(), "relay cap {cap}");
        assert!(*got == d, "relay cap {cap}: bytes differ");
    }
}

/// A line callback with a capture far smaller than the line: the callback
/// gets the whole line (lines are bounded at 4 MiB, not by the capture),
/// then the next lines; the capture keeps its head and tail.
#[test]
fn a_line_longer_than_the_cap_reaches_the_callback_whole() {
    let s = Scratch::new();
    let long: Vec<u8> = data(500_000, 4)
        .into_iter()
        .map(|b| if b == b'\n' { b'.' } else { b })
        .collect();
    let mut all = long.clone();
    all.extend_from_slice(b"\nshort\n\nlast-without-newline");
    std::fs::write(s.path("d"), &all).unwrap();
    type Lines = Arc<Mutex<Vec<(Stream, Vec<u8>)>>>;
    let lines: Lines = Arc::default();
    let l2 = lines.clone();
    let r = s
        .sh("dd if=\"$CORRAL_TEST_DIR/d\" bs=999 status=none")
        .containment(pg())
        .capture_limit(10)
        .on_line(move |st, l| l2.lock().unwrap().push((st, l.to_vec())))
        .timeout(Duration::from_secs(60))
        .run()
        .unwrap();
    assert_eq!(r.outcome, Outcome::Exited(0), "{r:?}");
    check(&r.stdout, &all, 10, "lines");
    let lines = lines.lock().unwrap();
    let got: Vec<&[u8]> = lines.iter().map(|(_, l)| l.as_slice()).collect();
    assert_eq!(
        got.len(),
        4,
        "lines: {:?}",
        got.iter().map(|l| l.len()).collect::<Vec<_>>()
    );
    assert!(got[0] == long.as_slice(), "the long line differs");
    assert_eq!(got[1], b"short");
    assert_eq!(got[2], b"");
    assert_eq!(got[3], b"last-without-newline");
    assert!(lines.iter().all(|(st, _)| *st == Stream::Stdout));
}

/// Output killed mid-stream (timeout): what was read before the kill is
/// kept exactly, counted exactly (the total equals what the writer's pipe
/// delivered: head + omitted + tail), never more than the cap in memory.
#[test]
fn output_of_a_killed_writer_is_counted_consistently() {
    let s = Scratch::new();
    for cap in [0usize, 1, 5, 4096] {
        let r = s
            .sh("exec yes abcdefghijklmnopqrstuvwxyz")
            .containment(pg())
            .capture_limit(cap)
            .timeout(Duration::from_millis(300))
            .run()
            .unwrap();
        assert_eq!(r.outcome, Outcome::TimedOut, "{r:?}");
        let c = &r.stdout;
        let line = b"abcdefghijklmnopqrstuvwxyz\n";
        let total = c.total_bytes() as usize;
        assert!(total > 0);
        // Byte i of the stream is line[i % 27]: head and tail follow from
        // the count alone.
        let at = |i: usize| line[i % line.len()];
        let head_len = (cap - cap / 2).min(total);
        let tail_len = (cap / 2).min(total - head_len);
        let head: Vec<u8> = (0..head_len).map(at).collect();
        let tail: Vec<u8> = (total - tail_len..total).map(at).collect();
        assert!(c.head() == head.as_slice(), "killed cap {cap}: head");
        assert!(c.tail() == tail, "killed cap {cap}: tail");
        assert_eq!(c.omitted(), (total - head_len - tail_len) as u64);
    }
}

/// stderr merged into stdout: one pipe, one capture; the total is both
/// streams' bytes, stderr's capture is empty, and the tail is the end of
/// whichever stream wrote last.
#[test]
fn merged_streams_count_every_byte_once() {
    let s = Scratch::new();
    let d1 = data(100_003, 5);
    let d2 = data(70_001, 6);
    std::fs::write(s.path("d1"), &d1).unwrap();
    std::fs::write(s.path("d2"), &d2).unwrap();
    for cap in [0usize, 1, 7, 1 << 20] {
        let r = s
            .sh("dd if=\"$CORRAL_TEST_DIR/d1\" bs=4099 status=none; dd if=\"$CORRAL_TEST_DIR/d2\" bs=13 status=none >&2")
            .containment(pg())
            .capture_limit(cap)
            .stderr(Output::merge_with_stdout())
            .timeout(Duration::from_secs(60))
            .run()
            .unwrap();
        assert_eq!(r.outcome, Outcome::Exited(0), "{r:?}");
        let mut both = d1.clone();
        both.extend_from_slice(&d2);
        check(&r.stdout, &both, cap, &format!("merged cap {cap}"));
        assert_eq!(r.stderr.total_bytes(), 0);
    }
}
