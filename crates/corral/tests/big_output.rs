//! Bounded capture under a runaway writer. Its own test binary, so that the
//! process's peak resident set (VmHWM) measures this run alone.

#![cfg(target_os = "linux")]

use std::time::{Duration, Instant};

use corral::{Command, ContainmentChoice, Mechanism, Outcome, RootStatus};
use corral_testkit::{assert_between, Scratch, Watch};

/// `sh -c SCRIPT` with the scratch's environment, contained by a process
/// group (the mechanism these tests are about).
fn sh(s: &Scratch, script: &str) -> Command {
    let mut c = s.sh(script);
    c.containment(ContainmentChoice::Only(Mechanism::ProcessGroup));
    c
}

/// Peak resident set size of this process, in bytes.
fn vm_hwm() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .expect("VmHWM in /proc/self/status");
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("VmHWM value");
    kb * 1024
}

#[test]
fn three_hundred_megabytes_are_counted_exactly_and_kept_bounded() {
    const TOTAL: u64 = 300_000_000;
    const LIMIT: usize = 1 << 20;
    let s = Scratch::new();
    let w = Watch::new(&s);
    let before = vm_hwm();

    // START + zeros + END, exactly TOTAL bytes, from a helper's child.
    let zeros = TOTAL - 5 - 3;
    let script = format!(
        r#"exec "$H" root sh -c '{{ printf START; head -c {zeros} /dev/zero; printf END; }}; echo err-end >&2'"#
    );
    let t = Instant::now();
    let running = sh(&s, &script)
        .capture_limit(LIMIT)
        .timeout(Duration::from_secs(60))
        .spawn()
        .unwrap();
    w.pid("root", Duration::from_secs(5)).expect("root helper");
    let r = running.wait();
    let el = t.elapsed();
    let after = vm_hwm();
    eprintln!(
        "300 MB run took {el:?}; VmHWM {} KiB -> {} KiB",
        before / 1024,
        after / 1024
    );

    assert_between(el, Duration::ZERO, Duration::from_secs(30));
    assert_eq!(r.outcome, Outcome::Exited(0), "{r:?}");
    assert_eq!(r.containment, Mechanism::ProcessGroup);
    assert_eq!(r.root, Some(RootStatus::Exited(0)));
    assert_eq!(r.exit_code(), Some(0));
    assert!(r.signals_sent.is_empty());

    let out = &r.stdout;
    assert_eq!(out.total_bytes(), TOTAL);
    assert_eq!(out.omitted(), TOTAL - LIMIT as u64);
    assert!(out.is_truncated());
    let head = out.head();
    let tail = out.tail();
    assert_eq!(head.len(), LIMIT / 2);
    assert_eq!(tail.len(), LIMIT / 2);
    assert_eq!(&head[..5], b"START");
    assert!(head[5..].iter().all(|&b| b == 0), "head has junk");
    assert_eq!(&tail[tail.len() - 3..], b"END");
    assert!(
        tail[..tail.len() - 3].iter().all(|&b| b == 0),
        "tail has junk"
    );
    assert_eq!(out.bytes().len(), LIMIT);
    assert!(out
        .text_lossy()
        .contains(&format!("{} bytes omitted", TOTAL - LIMIT as u64)));

    // The small stream is untouched.
    assert_eq!(r.stderr.bytes(), b"err-end\n");
    assert_eq!(r.stderr.omitted(), 0);

    let growth = after.saturating_sub(before);
    assert!(
        growth < 32 << 20,
        "peak RSS grew by {} KiB while capturing with a 1 MiB limit",
        growth / 1024
    );
    assert!(w.wait_dead("root", Duration::from_secs(2)));
}
