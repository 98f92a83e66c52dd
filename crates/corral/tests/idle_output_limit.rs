//! The idle timeout (`Command::idle_timeout`) and the output limit
//! (`Command::output_limit`) with real trees: a silent program is killed by
//! the idle timeout while a chatty one is not, a silent holder is killed by
//! it during the wait delay, a flood is cut at the limit to the byte (in the
//! capture and in the zero-copy relay) and killed, and the async driver
//! honours both.
#![cfg(target_os = "linux")]

use std::io::Read;
use std::time::{Duration, Instant};

use corral::{Error, Outcome, Output, TimeoutKind};
use corral_testkit::{assert_between, Scratch, Watch};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A silent tree (root and a child, neither writes) is terminated by the
/// idle timeout: outcome timed_out, kind idle, every member dead.
#[test]
fn a_silent_tree_is_killed_by_the_idle_timeout() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let t = Instant::now();
    let report = s
        .sh(r#""$H" kid & exec "$H" root"#)
        .idle_timeout(ms(400))
        .timeout(Duration::from_secs(20))
        .run()
        .unwrap();
    assert_eq!(report.outcome, Outcome::TimedOut);
    assert_eq!(report.timeout_kind, Some(TimeoutKind::Idle));
    assert_between(t.elapsed(), ms(400), Duration::from_secs(5));
    assert!(w.wait_dead("root", Duration::from_secs(2)));
    assert!(w.wait_dead("kid", Duration::from_secs(2)));
    s.assert_none_left();
}

/// A program that prints every 100 ms for 1.5 s (well past the 500 ms idle
/// timeout) runs to its end; the deadline still says `deadline`.
#[test]
fn a_chatty_program_outlives_the_idle_timeout() {
    let s = Scratch::new();
    let t = Instant::now();
    let report = s
        .sh("i=0; while [ $i -lt 15 ]; do echo tick $i; sleep 0.1; i=$((i+1)); done")
        .idle_timeout(ms(500))
        .run()
        .unwrap();
    assert_eq!(report.outcome, Outcome::Exited(0), "{report:?}");
    assert_eq!(report.timeout_kind, None);
    assert!(t.elapsed() >= ms(1500));
    assert_eq!(report.stdout.text_lossy().lines().count(), 15);
    // Output on stderr alone restarts it too; the deadline fires first here.
    let report = s
        .sh("while :; do echo tick >&2; sleep 0.1; done")
        .idle_timeout(ms(500))
        .timeout(ms(1200))
        .run()
        .unwrap();
    assert_eq!(report.outcome, Outcome::TimedOut);
    assert_eq!(report.timeout_kind, Some(TimeoutKind::Deadline));
    s.assert_none_left();
}

/// The root exits at once; a silent descendant holds the output. The idle
/// timeout (500 ms) comes before the end of the wait delay (10 s): it
/// decides, and the holder is killed.
#[test]
fn the_idle_timeout_fires_during_the_wait_delay() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let t = Instant::now();
    let report = s
        .sh(r#""$H" holder & echo started; exit 0"#)
        .idle_timeout(ms(500))
        .wait_delay(Duration::from_secs(10))
        .run()
        .unwrap();
    assert_eq!(report.outcome, Outcome::TimedOut, "{report:?}");
    assert_eq!(report.timeout_kind, Some(TimeoutKind::Idle));
    assert_between(t.elapsed(), ms(500), Duration::from_secs(5));
    assert!(w.pid("holder", Duration::from_secs(1)).is_some());
    assert!(w.wait_dead("holder", Duration::from_secs(2)));
    s.assert_none_left();
}

/// A flood (`yes`) is cut at the limit: exactly `limit` bytes captured,
/// more counted, outcome output_limit, the tree dead.
#[test]
fn a_flood_is_killed_at_the_limit() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let limit = 100_000;
    let t = Instant::now();
    let report = s
        .sh(r#""$H" kid & exec yes"#)
        .output_limit(limit)
        .timeout(Duration::from_secs(20))
        .run()
        .unwrap();
    assert_eq!(report.outcome, Outcome::OutputLimit, "{report:?}");
    assert_eq!(report.timeout_kind, None);
    assert!(t.elapsed() < Duration::from_secs(5));
    let kept = report.stdout.bytes();
    assert_eq!(kept.len() as u64, limit);
    assert!(kept.chunks(2).all(|c| c == b"y\n"));
    assert!(report.stdout.total_bytes() > limit);
    assert!(w.wait_dead("kid", Duration::from_secs(2)));
    s.assert_none_left();
}

/// Byte counts are what the program wrote: 3000 bytes on stdout then 3000
/// on stderr (each one write into the pipe) with a limit of 4000: stdout
/// is kept whole, stderr's first 1000 bytes, and both counts are exact.
/// The limit is the streams' sum; `limit` bytes pass, byte `limit + 1`
/// fires it.
#[test]
fn byte_counts_are_exact_and_the_limit_is_for_both_streams() {
    let s = Scratch::new();
    let report = s
        .sh("head -c 3000 /dev/zero; head -c 3000 /dev/zero >&2; exec sleep 30")
        .output_limit(4000)
        .run()
        .unwrap();
    assert_eq!(report.outcome, Outcome::OutputLimit, "{report:?}");
    assert_eq!(report.stdout.total_bytes(), 3000);
    assert_eq!(report.stderr.total_bytes(), 3000);
    assert_eq!(report.stdout.bytes().len(), 3000);
    assert_eq!(report.stderr.bytes().len(), 1000);
    // Exactly the limit is allowed.
    let report = s
        .sh("head -c 4000 /dev/zero; exit 0")
        .output_limit(4000)
        .run()
        .unwrap();
    assert_eq!(report.outcome, Outcome::Exited(0));
    assert_eq!(report.stdout.total_bytes(), 4000);
    // One more byte fires it, even after a clean exit.
    let report = s
        .sh("head -c 4001 /dev/zero; exit 0")
        .output_limit(4000)
        .run()
        .unwrap();
    assert_eq!(report.outcome, Outcome::OutputLimit);
    assert_eq!(report.stdout.total_bytes(), 4001);
    assert_eq!(report.stdout.bytes().len(), 4000);
    s.assert_none_left();
}

/// The zero-copy relay is cut to the byte too: a flood relayed to a pipe
/// delivers exactly `limit` bytes.
#[test]
fn the_relay_delivers_exactly_the_limit() {
    let s = Scratch::new();
    let (mut r, wr) = std::io::pipe().unwrap();
    let dest = std::fs::File::from(std::os::fd::OwnedFd::from(wr));
    let reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = r.read_to_end(&mut v);
        v
    });
    let limit = 3_000_001;
    let report = s
        .sh("exec yes")
        .stdout(Output::relay_file(dest))
        .output_limit(limit)
        .timeout(Duration::from_secs(20))
        .run()
        .unwrap();
    let got = reader.join().unwrap();
    assert_eq!(report.outcome, Outcome::OutputLimit, "{report:?}");
    assert_eq!(got.len() as u64, limit);
    assert!(report.stdout.total_bytes() > limit);
    s.assert_none_left();
}

/// An idle timeout needs a stream corral sees: refused when neither output
/// is captured or relayed.
#[test]
fn an_idle_timeout_without_a_seen_stream_is_refused() {
    let s = Scratch::new();
    let err = s
        .sh("exit 0")
        .stdout(Output::null())
        .stderr(Output::null())
        .idle_timeout(ms(100))
        .run()
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput(_)), "{err:?}");
    assert!(err.to_string().contains("idle timeout"), "{err}");
}

/// The async driver honours both limits.
#[cfg(feature = "tokio")]
#[test]
fn the_async_driver_honours_both() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let s = Scratch::new();
    rt.block_on(async {
        let t = Instant::now();
        let report = s
            .sh(r#""$H" kid & exec "$H" root"#)
            .idle_timeout(ms(300))
            .timeout(Duration::from_secs(20))
            .run_async()
            .await
            .unwrap();
        assert_eq!(report.outcome, Outcome::TimedOut);
        assert_eq!(report.timeout_kind, Some(TimeoutKind::Idle));
        assert_between(t.elapsed(), ms(300), Duration::from_secs(5));
        let report = s
            .sh("exec yes")
            .output_limit(50_000)
            .timeout(Duration::from_secs(20))
            .run_async()
            .await
            .unwrap();
        assert_eq!(report.outcome, Outcome::OutputLimit);
        assert_eq!(report.stdout.bytes().len(), 50_000);
    });
    s.assert_none_left();
}
