//! The async API at scale against cancellation racing exit: hundreds of
//! concurrent commands, each ended at a random moment near its own exit by
//! one of three means (the run's `cancel`, a `CancelToken` from another
//! task, dropping the future). No descriptor may leak (the count of
//! `/proc/self/fd` comes back), no process may be left, and every report
//! must be truthful (an exit is reported only with all its output, a
//! cancellation only for a run that was cancelled).
#![cfg(tokio_linux)]

use std::time::{Duration, Instant};

use corral::{ContainmentChoice, Mechanism, Outcome};
use corral_testkit::Scratch;

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

use corral_testkit::keeper::live_children;

struct Rng(u64);

impl Rng {
    fn next(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// How many runs fit under the open-file limit (each holds a few
/// descriptors: pidfd, two pipes, the cgroup's directory), at most 300.
fn how_many() -> usize {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .map_or(4096, |c| c as usize);
    (limit.saturating_sub(open_fds() + 100) / 6).clamp(32, 300)
}

fn storm(mech: Mechanism) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // Warm up: the keeper, the pool's watch, the runtime's own descriptors.
    rt.block_on(async {
        let mut c = corral::Command::new("/bin/true");
        c.containment(ContainmentChoice::Only(mech));
        c.run_async().await.unwrap();
    });
    let s = Scratch::new();
    let n = how_many();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    eprintln!("{n} runs, seed {seed}");
    let before = open_fds();
    let t = Instant::now();
    let results = rt.block_on(async {
        let mut rng = Rng(seed);
        let mut set = tokio::task::JoinSet::new();
        for i in 0..n {
            let life = rng.next(40); // ms the command sleeps
            let cut = rng.next(60); // ms until it is ended
            let how = rng.next(3);
            let mut c = s.sh(&format!(
                "echo start; sleep 0.0{life:02}; sleep 30 >/dev/null 2>&1 & echo end; exit 3"
            ));
            c.containment(ContainmentChoice::Only(mech))
                .leftovers(corral::LeftoverPolicy::Kill)
                .timeout(Duration::from_secs(30));
            let running = c.spawn_async().unwrap();
            set.spawn(async move {
                let cut = Duration::from_millis(cut);
                let r = match how {
                    0 => {
                        let token = running.cancel_token();
                        tokio::spawn(async move {
                            tokio::time::sleep(cut).await;
                            token.cancel();
                        });
                        Some(running.await)
                    }
                    1 => {
                        let mut running = running;
                        tokio::select! {
                            r = &mut running => Some(r),
                            _ = tokio::time::sleep(cut) => {
                                running.cancel();
                                Some(running.await)
                            }
                        }
                    }
                    _ => tokio::time::timeout(cut, running).await.ok(),
                };
                (i, how, r)
            });
        }
        let mut out = Vec::new();
        while let Some(r) = set.join_next().await {
            out.push(r.unwrap());
        }
        out
    });
    assert!(t.elapsed() < Duration::from_secs(60), "{:?}", t.elapsed());
    assert_eq!(results.len(), n);
    let (mut exited, mut cancelled, mut dropped) = (0, 0, 0);
    for (i, how, r) in &results {
        let Some(r) = r else {
            dropped += 1;
            continue;
        };
        let out = r.stdout.text_lossy();
        match r.outcome {
            // An exit is the command's own: all its output, its status, and
            // its leftover (`sleep 30`) killed by the policy.
            Outcome::Exited(3) => {
                exited += 1;
                assert_eq!(out, "start\nend\n", "run {i} ({how}): {r:?}");
                assert!(r.cleanup_errors.is_empty(), "run {i}: {r:?}");
            }
            Outcome::Cancelled => {
                cancelled += 1;
                assert!(out.starts_with("start\n") || out.is_empty(), "{r:?}");
                assert!(r.cleanup_errors.is_empty(), "run {i}: {r:?}");
            }
            _ => panic!("run {i} ({how}): untruthful outcome {r:?}"),
        }
    }
    eprintln!("{exited} exited, {cancelled} cancelled, {dropped} dropped");
    // Dropped runs are confirmed in the background: give them a moment.
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let (fds, kids) = (open_fds(), live_children());
        if fds <= before && kids.is_empty() {
            break;
        }
        assert!(
            Instant::now() < end,
            "leaked: {fds} descriptors (before {before}), live children {kids:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(rt);
    s.assert_none_left();
    corral::process_wide::release_cgroup_pool();
}

#[test]
fn cancellation_racing_exit_at_scale_process_group() {
    storm(Mechanism::ProcessGroup);
}

#[corral_testkit::needs(cgroup)]
#[test]
fn cancellation_racing_exit_at_scale_cgroup() {
    storm(Mechanism::Cgroup);
}
