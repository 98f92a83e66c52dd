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

#[test]
fn five_hundred_concurrent_commands_use_no_thread_each() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let before = threads();
    let t = Instant::now();
    let (peak, reports) = rt.block_on(async {
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..500 {
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
    assert_eq!(reports.len(), 500);
    assert!(reports.iter().all(|r| r.exit_code() == Some(0)));
    // The test harness and the runtime; nothing per command.
    assert!(peak <= before + 4, "threads went from {before} to {peak}");
    assert!(
        t.elapsed() < Duration::from_secs(30),
        "took {:?}",
        t.elapsed()
    );
}
