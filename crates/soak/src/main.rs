//! `corral-soak`: random process trees through the library, in one tier,
//! many at once, each run checked; not part of the test suite (see
//! `scripts/soak.sh` and docs/BENCHMARKS.md, "Soak").
//!
//! ```text
//! corral-soak --tier T [--runs N] [--seed S] [--jobs J] [--epoch E] [--run-seed X] [--show K]
//!             [--host-subreaper] [--describe]
//! ```
//!
//! Each run draws a tree from its own seed (`tree.rs`): up to 9 processes
//! (this binary, `corral-soak node ...`) up to 3 levels below the root,
//! with `setsid`/double-fork escapers, SIGTERM ignorers and catchers,
//! stopped processes, holders of the output, floods, processes that exit
//! during the set-up, idle sleepers; ended by the root's exit (0 or not),
//! its death by a signal, a deadline, an idle timeout, a cancellation, a
//! cancellation racing the root's exit, or an output limit; under a random
//! leftovers policy, grace and wait delay. Every node sends the harness a
//! pidfd of itself as its first act, so its fate is known from outside.
//! `run.rs` predicts the legal endings from the tier's contract and checks
//! the report and every node's fate. Between epochs (every E runs, none in
//! flight) the harness checks its own descriptors, its cgroups and its
//! RSS.

#[cfg(target_os = "linux")]
mod node;
#[cfg(target_os = "linux")]
mod run;
#[cfg(target_os = "linux")]
mod stall;
#[cfg(target_os = "linux")]
mod tree;

#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!("corral-soak runs on Linux only");
    std::process::exit(2);
}

#[cfg(target_os = "linux")]
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("node") {
        std::process::exit(node::main(&args[1..]));
    }
    std::process::exit(soak::main(&args));
}

#[cfg(target_os = "linux")]
mod soak {
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Mutex;
    use std::time::Instant;

    use crate::run::{self, Verdict};
    use crate::tree::{run_seed, Case, Tier};

    struct Opts {
        tier: Tier,
        runs: u64,
        seed: u64,
        jobs: u64,
        epoch: u64,
        run_seed: Option<u64>,
        show: u64,
        /// The host is a child subreaper that reaps every orphan, as the
        /// CLI is, whatever the tier.
        host_subreaper: bool,
        /// Print the tree of `--run-seed` and exit.
        describe: bool,
    }

    const USAGE: &str = "usage: corral-soak --tier process-group|subreaper|cgroup|pid-namespace [--runs N] [--seed S] [--jobs J] [--epoch E] [--run-seed X] [--show K] [--host-subreaper] [--describe]";

    fn parse_u64(s: &str) -> Option<u64> {
        match s.strip_prefix("0x") {
            Some(h) => u64::from_str_radix(h, 16).ok(),
            None => s.parse().ok(),
        }
    }

    fn opts(args: &[String]) -> Result<Opts, String> {
        let mut o = Opts {
            tier: Tier::ProcessGroup,
            runs: 1000,
            seed: 0,
            jobs: 8,
            epoch: 0,
            run_seed: None,
            show: 20,
            host_subreaper: false,
            describe: false,
        };
        let mut tier = None;
        let mut seed = None;
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let mut val = || it.next().ok_or_else(|| format!("{a} needs a value"));
            match a.as_str() {
                "--tier" => {
                    let v = val()?;
                    tier = Some(Tier::parse(v).ok_or_else(|| format!("unknown tier {v}"))?);
                }
                "--runs" => o.runs = parse_u64(val()?).ok_or("bad --runs")?,
                "--seed" => seed = Some(parse_u64(val()?).ok_or("bad --seed")?),
                "--jobs" => o.jobs = parse_u64(val()?).ok_or("bad --jobs")?.max(1),
                "--epoch" => o.epoch = parse_u64(val()?).ok_or("bad --epoch")?,
                "--run-seed" => o.run_seed = Some(parse_u64(val()?).ok_or("bad --run-seed")?),
                "--show" => o.show = parse_u64(val()?).ok_or("bad --show")?,
                "--host-subreaper" => o.host_subreaper = true,
                "--describe" => o.describe = true,
                "-h" | "--help" => return Err(USAGE.into()),
                _ => return Err(format!("unknown argument {a}\n{USAGE}")),
            }
        }
        o.tier = tier.ok_or_else(|| format!("--tier is required\n{USAGE}"))?;
        o.seed = seed.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        });
        if o.epoch == 0 {
            o.epoch = (o.jobs * 10).max(20);
        }
        Ok(o)
    }

    #[derive(Default)]
    struct Tally {
        pass: u64,
        unsettled: u64,
        stalled: u64,
        /// The longest stall of the harness within a stalled run, in ms.
        stall_max_ms: u64,
        failures: BTreeMap<&'static str, u64>,
        shown: u64,
        overruns: Vec<u64>,
    }

    pub fn main(args: &[String]) -> i32 {
        let o = match opts(args) {
            Ok(o) => o,
            Err(e) => {
                eprintln!("{e}");
                return 2;
            }
        };
        crate::stall::start();
        if o.describe {
            let Some(seed) = o.run_seed else {
                eprintln!("--describe needs --run-seed");
                return 2;
            };
            println!("{}", Case::generate(seed, o.tier).describe());
            return 0;
        }
        let exe = match std::env::current_exe() {
            Ok(e) => e,
            Err(e) => {
                eprintln!("corral-soak: cannot find its own executable: {e}");
                return 2;
            }
        };
        let _ = corral::process_wide::raise_nofile_limit();
        if o.tier == Tier::Subreaper || o.host_subreaper {
            if let Err(e) = corral::process_wide::enable_subreaper() {
                eprintln!("corral-soak: cannot become a subreaper: {e}");
                return 2;
            }
            // This process starts children only through corral.
            corral::process_wide::reap_all_orphans();
        }
        let user = rustix::process::getuid().as_raw();
        let host = if o.tier == Tier::Subreaper || o.host_subreaper {
            "subreaper"
        } else {
            "plain"
        };
        println!(
            "corral-soak: tier {} as uid {user}, host {host}, {} runs, seed {:#x}, {} jobs, checks every {} runs",
            o.tier.name(),
            o.runs,
            o.seed,
            o.jobs,
            o.epoch
        );

        let tally = Mutex::new(Tally::default());
        let next = AtomicU64::new(0);
        let start = Instant::now();
        let mut rss: Vec<u64> = Vec::new();
        let mut fds: Vec<usize> = Vec::new();
        let mut base_fds = None;
        let mut leaks: BTreeMap<&'static str, u64> = BTreeMap::new();
        let mut done = 0;
        while done < o.runs {
            let end = (done + o.epoch).min(o.runs);
            next.store(done, Ordering::SeqCst);
            std::thread::scope(|s| {
                for _ in 0..o.jobs.min(end - done) {
                    s.spawn(|| loop {
                        let i = next.fetch_add(1, Ordering::SeqCst);
                        if i >= end {
                            return;
                        }
                        let seed = o.run_seed.unwrap_or_else(|| run_seed(o.seed, i));
                        let case = Case::generate(seed, o.tier);
                        let m = run::run(&case, o.tier, &exe, host == "subreaper");
                        let mut t = tally.lock().unwrap();
                        t.overruns.push(m.overrun_ms);
                        match m.verdict {
                            Verdict::Pass => t.pass += 1,
                            Verdict::Unsettled => t.unsettled += 1,
                            Verdict::Stalled { stall_ms, detail } => {
                                t.stalled += 1;
                                t.stall_max_ms = t.stall_max_ms.max(stall_ms);
                                if t.shown < o.show {
                                    t.shown += 1;
                                    println!(
                                        "STALLED run {i} (replay: corral-soak --tier {} --run-seed {seed:#x}): {detail}",
                                        o.tier.name()
                                    );
                                }
                            }
                            Verdict::Fail(kind, detail) => {
                                *t.failures.entry(kind).or_default() += 1;
                                if t.shown < o.show {
                                    t.shown += 1;
                                    println!(
                                        "FAIL {kind} run {i} (replay: corral-soak --tier {} --run-seed {seed:#x})\n  shape: {}\n  seen: {detail}",
                                        o.tier.name(),
                                        case.describe()
                                    );
                                }
                            }
                        }
                    });
                }
            });
            done = end;
            // Nothing in flight: the harness's own state. Descriptors the
            // library still holds for a moment after a run returned (the
            // subreaper tier's keeper thread holds a kept leftover's pidfd
            // until it has reaped it) get 3 s to be closed.
            let base_now = base_fds;
            let settle = Instant::now() + std::time::Duration::from_secs(3);
            let (mut other, mut pool) = descriptors();
            while base_now.is_some_and(|b| other > b) && Instant::now() < settle {
                std::thread::sleep(std::time::Duration::from_millis(20));
                (other, pool) = descriptors();
            }
            rss.push(rss_kib());
            fds.push(other);
            // The baseline is the fewest seen (the first epoch's count may
            // hold one the library closes later).
            let base = *base_fds.insert(base_fds.map_or(other, |b: usize| b.min(other)));
            if other > base {
                *leaks.entry("fd").or_default() += 1;
                println!(
                    "LEAK descriptors after run {done}: {other} (baseline {base}): {}",
                    fd_list()
                );
            }
            let cg = my_cgroups();
            if pool > 48 || cg > 16 {
                *leaks.entry("cgroup").or_default() += 1;
                println!("LEAK cgroups after run {done}: {cg} directories, {pool} descriptors");
            }
            let t = tally.lock().unwrap();
            eprintln!(
                "  {done}/{} runs, {} failures, {} unsettled, rss {} KiB, fds {other}, {:.0} s",
                o.runs,
                t.failures.values().sum::<u64>(),
                t.unsettled,
                rss.last().unwrap(),
                start.elapsed().as_secs_f64()
            );
        }
        // The pool let go: no cgroup of this process may be left.
        corral::process_wide::release_cgroup_pool();
        let cg_left = my_cgroups();
        if cg_left > 0 {
            *leaks.entry("cgroup").or_default() += 1;
            println!(
                "LEAK {cg_left} cgroup directories of this process after the pool was released"
            );
        }
        let (fds_end, pool_end) = descriptors();
        if pool_end > 0 {
            *leaks.entry("fd").or_default() += 1;
            println!("LEAK {pool_end} cgroup descriptors after the pool was released");
        }

        let wall = start.elapsed();
        let mut t = tally.into_inner().unwrap();
        t.overruns.sort_unstable();
        let pct = |p: f64| -> u64 {
            if t.overruns.is_empty() {
                0
            } else {
                t.overruns[((t.overruns.len() - 1) as f64 * p) as usize]
            }
        };
        let failed: u64 = t.failures.values().sum();
        let kinds: Vec<String> = t
            .failures
            .iter()
            .chain(leaks.iter())
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let rss_max = rss.iter().copied().max().unwrap_or(0);
        println!(
            "SOAK tier={} uid={user} host={host} runs={} pass={} unsettled={} stalled={} (longest stall {} ms) failures={} [{}] rss_kib first/last/max={}/{}/{} fds base/end/max={}/{}/{} cgroups_left={} return_past_nominal_ms p50/p99/max={}/{}/{} wall={:.0}s seed={} jobs={}",
            o.tier.name(),
            o.runs,
            t.pass,
            t.unsettled,
            t.stalled,
            t.stall_max_ms,
            failed,
            kinds.join(" "),
            rss.first().copied().unwrap_or(0),
            rss.last().copied().unwrap_or(0),
            rss_max,
            base_fds.unwrap_or(0),
            fds_end,
            fds.iter().copied().max().unwrap_or(0),
            cg_left,
            pct(0.5),
            pct(0.99),
            t.overruns.last().copied().unwrap_or(0),
            wall.as_secs_f64(),
            o.run_seed
                .map_or(format!("{:#x}", o.seed), |r| format!("{r:#x} (one tree)")),
            o.jobs,
        );
        if failed > 0 || !leaks.is_empty() {
            1
        } else {
            0
        }
    }

    fn rss_kib() -> u64 {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("VmRSS:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            })
            .unwrap_or(0)
    }

    /// This process's open descriptors: (every one but the cgroup pool's,
    /// the pool's: those naming a `corral-*` cgroup directory or file).
    fn descriptors() -> (usize, usize) {
        let (mut other, mut pool) = (0, 0);
        if let Ok(rd) = std::fs::read_dir("/proc/self/fd") {
            for e in rd.flatten() {
                match std::fs::read_link(e.path()) {
                    Ok(t) if t.to_string_lossy().contains("/corral-") => pool += 1,
                    _ => other += 1,
                }
            }
        }
        (other, pool)
    }

    fn fd_list() -> String {
        let mut v = Vec::new();
        if let Ok(rd) = std::fs::read_dir("/proc/self/fd") {
            for e in rd.flatten() {
                let t = std::fs::read_link(e.path())
                    .map(|t| t.to_string_lossy().into_owned())
                    .unwrap_or_default();
                v.push(format!("{}->{t}", e.file_name().to_string_lossy()));
            }
        }
        v.join(" ")
    }

    /// The `corral-<my pid>-*` directories beside and below this process's
    /// cgroup (v2).
    fn my_cgroups() -> usize {
        let Some(mine) = my_cgroup_dir() else {
            return 0;
        };
        let prefix = format!("corral-{}-", std::process::id());
        let mut n = 0;
        for dir in [
            mine.clone(),
            mine.parent().map(|p| p.to_path_buf()).unwrap_or(mine),
        ] {
            if let Ok(rd) = std::fs::read_dir(&dir) {
                n += rd
                    .flatten()
                    .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                    .count();
            }
        }
        n
    }

    fn my_cgroup_dir() -> Option<std::path::PathBuf> {
        let rel = std::fs::read_to_string("/proc/self/cgroup")
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix("0::").map(str::to_owned))?;
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        let point = mounts.lines().find_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            if !post.starts_with("cgroup2 ") {
                return None;
            }
            pre.split(' ').nth(4).map(str::to_owned)
        })?;
        Some(std::path::Path::new(&point).join(rel.trim().trim_start_matches('/')))
    }
}
