//! Many concurrent commands on the async API cost a constant number of
//! threads. Its own test binary, so the thread count means something.
#![cfg(all(feature = "tokio", target_os = "linux"))]

use std::time::{Duration, Instant};

fn threads() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Raises the soft open-file limit to the hard one, and returns it.
fn raise_nofile() -> usize {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut lim = getrlimit(Resource::Nofile);
    if let Some(hard) = lim.maximum {
        lim.current = Some(hard);
        let _ = setrlimit(Resource::Nofile, lim);
    }
    getrlimit(Resource::Nofile)
        .current
        .map_or(usize::MAX, |c| c as usize)
}

/// As many concurrent commands as the open-file limit allows, up to 500:
/// at the usual limit of 1024 (soft and hard, as `ulimit -n 1024` sets),
/// 500 commands need more descriptors than a process may have, so the test
/// measures what one command holds and runs as many as fit (never fewer
/// than 64).
fn how_many(rt: &tokio::runtime::Runtime) -> usize {
    let limit = raise_nofile();
    let per_command = rt.block_on(async {
        let before = open_fds();
        let mut c = corral::Command::new("/bin/sleep");
        c.arg("0.2").containment(corral::ContainmentChoice::Only(
            corral::Mechanism::ProcessGroup,
        ));
        // Polled by the runtime (its descriptors registered) while counted.
        let task = tokio::spawn(c.spawn_async().unwrap());
        tokio::time::sleep(Duration::from_millis(50)).await;
        let during = open_fds();
        assert_eq!(task.await.unwrap().exit_code(), Some(0));
        during.saturating_sub(before).max(1)
    });
    let room = limit.saturating_sub(open_fds() + 64) / per_command;
    let n = room.min(500);
    eprintln!("open-file limit {limit}, {per_command} descriptors per command: {n} commands");
    assert!(
        n >= 64,
        "only {n} commands fit under the open-file limit {limit}"
    );
    n
}

#[test]
fn hundreds_of_concurrent_commands_use_no_thread_each() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let n = how_many(&rt);
    let before = threads();
    let t = Instant::now();
    let (peak, reports) = rt.block_on(async {
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..n {
            let mut c = corral::Command::new("/bin/sleep");
            c.arg("0.5")
                .containment(corral::ContainmentChoice::Only(
                    corral::Mechanism::ProcessGroup,
                ))
                .timeout(Duration::from_secs(20));
            let running = c.spawn_async().unwrap();
            set.spawn(running);
        }
        let mut peak = threads();
        let mut reports = Vec::new();
        while let Some(r) = set.join_next().await {
            peak = peak.max(threads());
            reports.push(r.unwrap());
        }
        (peak, reports)
    });
    assert_eq!(reports.len(), n);
    for r in &reports {
        assert_eq!(r.exit_code(), Some(0), "{r:?}");
    }
    // The test harness and the runtime; nothing per command.
    assert!(peak <= before + 4, "threads went from {before} to {peak}");
    assert!(
        t.elapsed() < Duration::from_secs(30),
        "took {:?}",
        t.elapsed()
    );
}
