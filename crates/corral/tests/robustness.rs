//! Regressions from review: the promises hold when the caller does
//! something unusual (drops a runtime mid-run, panics in a callback, passes
//! `Duration::MAX`, hands over a writer that blocks in `flush`, spawns a
//! missing program with a relay) or the command makes cgroups of its own.
#![cfg(target_os = "linux")]

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use corral::{ContainmentChoice, Mechanism, Outcome, Output};
use corral_testkit::{Scratch, Watch};

const SEC: Duration = Duration::from_secs(1);

fn pg(c: &mut corral::Command) -> &mut corral::Command {
    c.containment(ContainmentChoice::Only(Mechanism::ProcessGroup))
}

#[test]
fn duration_max_means_forever_not_a_panic() {
    let s = Scratch::new();
    let r = pg(&mut s.sh("echo ok"))
        .timeout(Duration::MAX)
        .wait_delay(Duration::MAX)
        .grace(Duration::MAX)
        .confirm_window(Duration::MAX)
        .run()
        .unwrap();
    assert_eq!(r.exit_code(), Some(0));
    assert_eq!(r.stdout.bytes(), b"ok\n");
}

#[test]
fn a_panicking_line_callback_still_leaves_nothing_behind() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let mut cmd = s.sh(
        r#""$H" gc & until [ -e "$CORRAL_TEST_DIR/gc.pid" ] && [ "$(cat /proc/$(cat "$CORRAL_TEST_DIR/gc.pid")/comm 2>/dev/null)" != H ] && [ -e "$CORRAL_TEST_DIR/gc.pinned" -o ! -e "$CORRAL_TEST_DIR/.watched" ]; do sleep 0.01; done; echo boom; wait"#,
    );
    pg(&mut cmd).on_line(|_, l| {
        if l == b"boom" {
            panic!("callback bug");
        }
    });
    let t = Instant::now();
    let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cmd.run()));
    assert!(res.is_err(), "the panic propagates to the caller");
    // The tree dies at once: the drop confirms it and returns (it once
    // waited for the hard limit, 10 s, because it never saw the root exit).
    assert!(t.elapsed() < 3 * SEC, "took {:?}", t.elapsed());
    assert!(w.pid("gc", SEC).is_some());
    assert!(
        w.wait_dead("gc", Duration::ZERO),
        "the tree outlived the panic"
    );
}

/// The callback panics on the last line, which has no newline: it is
/// delivered by the final flush, after the termination is over and before
/// the release. The drop still releases: the root is reaped (before, the
/// drop saw the run as finished and left the root a zombie child of this
/// process). The helper left behind was killed by the leftovers policy.
#[test]
fn a_panic_in_the_last_line_flush_still_releases_the_root() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let mut cmd = s.sh(&format!(
        r#""$H" left </dev/null >/dev/null 2>&1 & {} printf boom"#,
        corral_testkit::ready("left")
    ));
    pg(&mut cmd)
        .leftovers(corral::LeftoverPolicy::Kill)
        .on_line(|_, l| {
            if l == b"boom" {
                std::panic::resume_unwind(Box::new("callback bug in the last flush"));
            }
        });
    let running = cmd.spawn().unwrap();
    let root = running.id();
    let t = Instant::now();
    let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| running.wait()));
    assert!(res.is_err(), "the panic propagates to the caller");
    assert!(t.elapsed() < 5 * SEC, "took {:?}", t.elapsed());
    let stat = std::fs::read_to_string(format!("/proc/{root}/stat")).unwrap_or_default();
    let zombie_of_ours = stat.rsplit_once(')').is_some_and(|(_, r)| {
        let mut f = r.split_whitespace();
        f.next() == Some("Z")
            && f.next().and_then(|p| p.parse::<u32>().ok()) == Some(std::process::id())
    });
    assert!(!zombie_of_ours, "the root {root} was never reaped: {stat}");
    assert!(w.pid("left", SEC).is_some());
    assert!(!w.is_alive("left"), "the leftover survived");
}

/// A writer whose flush blocks far longer than the run may take.
struct SlowFlush;
impl Write for SlowFlush {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        std::thread::sleep(Duration::from_secs(20));
        Ok(())
    }
}

#[test]
fn a_relay_writer_stuck_in_flush_cannot_hold_the_return() {
    let s = Scratch::new();
    let t = Instant::now();
    let r = pg(&mut s.sh("echo hi"))
        .stdout(Output::relay(SlowFlush))
        .wait_delay(Duration::from_millis(300))
        .run()
        .unwrap();
    assert_eq!(r.exit_code(), Some(0));
    assert!(t.elapsed() < 3 * SEC, "took {:?}", t.elapsed());
}

/// Counts writers dropped.
struct Counted(Arc<AtomicUsize>);
impl Write for Counted {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn a_failed_spawn_releases_its_relay_writer() {
    let dropped = Arc::new(AtomicUsize::new(0));
    for _ in 0..20 {
        let err = corral::Command::new("/nonexistent/corral-no-such-program")
            .stdout(Output::relay(Counted(dropped.clone())))
            .run();
        assert!(err.is_err());
    }
    let end = Instant::now() + 2 * SEC;
    while dropped.load(Ordering::SeqCst) < 20 && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(
        dropped.load(Ordering::SeqCst),
        20,
        "relay threads kept their writers"
    );
}

#[cfg(feature = "tokio")]
#[test]
fn dropping_the_runtime_mid_run_neither_aborts_nor_leaks() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let mut cmd = s.sh(r#""$H" a & wait"#);
    pg(&mut cmd);
    rt.spawn(async move {
        let _ = cmd.run_async().await;
    });
    assert!(w.pid("a", 2 * SEC).is_some());
    drop(rt); // the task is dropped with the runtime
    assert!(w.wait_dead("a", 3 * SEC), "the tree outlived its runtime");
}

#[corral_testkit::needs(cgroup)]
#[test]
fn a_cgroup_made_by_the_command_is_removed_with_its_own() {
    let own = corral_testkit::writable_cgroup_v2().expect("checked by #[needs(cgroup)]");
    // The v2 mount point, for the script to find its own cgroup directory.
    let mi = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mount = mi
        .lines()
        .find_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            post.starts_with("cgroup2 ")
                .then(|| pre.split(' ').nth(4).unwrap().to_owned())
        })
        .unwrap();
    let r = corral::Command::new("/bin/sh")
        .args([
            "-c",
            r#"cg=$(sed -n 's/^0:://p' /proc/self/cgroup); mkdir "$1$cg/nested" && echo made"#,
            "sh",
            &mount,
        ])
        .containment(ContainmentChoice::Only(Mechanism::Cgroup))
        .run()
        .unwrap();
    assert_eq!(r.stdout.bytes(), b"made\n");
    assert_eq!(r.outcome, Outcome::Exited(0));
    assert!(r.cleanup_errors.is_empty(), "{:?}", r.cleanup_errors);
    // Other tests of this binary may hold a cgroup of their own for a moment:
    // only a directory that stays is left behind.
    let prefix = format!("corral-{}-", std::process::id());
    let end = Instant::now() + 2 * SEC;
    loop {
        let left: Vec<_> = std::fs::read_dir(&own)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(&prefix))
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < end, "left behind: {left:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
