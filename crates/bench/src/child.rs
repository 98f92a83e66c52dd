//! Measurements that run in a fresh process of this binary (`corral-bench
//! --child ...`), so that peak RSS and thread counts belong to that one
//! measurement alone. Each prints one line of `key=value` pairs.

use std::io::Read;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use corral::{ContainmentChoice, Mechanism, Output};

use crate::sys;

/// Samples this process's thread count every millisecond; the peak is read
/// at the end (the sampler itself is not counted).
struct ThreadSampler {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
    /// Peak open descriptors (sampled every 10 ms).
    fds: Arc<AtomicU64>,
    /// Peak live children (sampled every 10 ms).
    kids: Arc<AtomicU64>,
    /// Open descriptors while at least `all` children were alive (the
    /// steady state of a scale run, before any command ended).
    fds_all: Arc<AtomicU64>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl ThreadSampler {
    fn start_for(all: u64) -> ThreadSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicU64::new(0));
        let fds = Arc::new(AtomicU64::new(0));
        let kids = Arc::new(AtomicU64::new(0));
        let fds_all = Arc::new(AtomicU64::new(0));
        let (s, p, f, k, fa) = (
            stop.clone(),
            peak.clone(),
            fds.clone(),
            kids.clone(),
            fds_all.clone(),
        );
        let handle = std::thread::spawn(move || {
            let mut i = 0u64;
            while !s.load(Ordering::Relaxed) {
                if let Some(n) = sys::self_status("Threads") {
                    p.fetch_max(n, Ordering::Relaxed);
                }
                if i.is_multiple_of(10) {
                    let now = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64);
                    f.fetch_max(now, Ordering::Relaxed);
                    let live = live_children();
                    k.fetch_max(live, Ordering::Relaxed);
                    if live >= all {
                        fa.fetch_max(now, Ordering::Relaxed);
                    }
                }
                i += 1;
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        ThreadSampler {
            stop,
            peak,
            fds,
            kids,
            fds_all,
            handle: Some(handle),
        }
    }

    /// (peak threads but the sampler, peak open descriptors, peak live
    /// children, descriptors while all were alive).
    fn finish(mut self) -> (u64, u64, u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        (
            self.peak.load(Ordering::Relaxed).saturating_sub(1),
            self.fds.load(Ordering::Relaxed),
            self.kids.load(Ordering::Relaxed),
            self.fds_all.load(Ordering::Relaxed),
        )
    }
}

/// Children of this process that have not exited (zombies not counted),
/// from `/proc/self/task/*/children`.
fn live_children() -> u64 {
    let mut n = 0;
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    for t in tasks.flatten() {
        if let Ok(s) = std::fs::read_to_string(t.path().join("children")) {
            n += s.split_whitespace().count() as u64;
        }
    }
    n
}

fn head_args(bytes: &str) -> [String; 3] {
    ["-c".into(), bytes.into(), "/dev/zero".into()]
}

pub fn main(args: &[String]) -> i32 {
    match run(args) {
        Ok(line) => {
            println!("{line}");
            0
        }
        Err(e) => {
            eprintln!("corral-bench --child {args:?}: {e}");
            1
        }
    }
}

fn run(args: &[String]) -> Result<String, String> {
    sys::raise_nofile();
    let base = sys::self_status("VmHWM").unwrap_or(0);
    let arg = |i: usize| args.get(i).cloned().ok_or("missing argument");
    let what = arg(0)?;
    let t0 = Instant::now();
    let (bytes, threads) = match what.as_str() {
        // `capture-corral-limits`: the same with the output cap (1 TiB, far
        // above the stream: the metered path, never firing; `u64::MAX`
        // would mean no cap) and an idle timeout of an hour.
        "capture-corral" | "capture-corral-limits" => {
            let limits = what == "capture-corral-limits";
            (capture_corral(&arg(1)?, limits)?, 0)
        }
        "capture-std" => (capture_std(&arg(1)?)?, 0),
        "capture-sink" => (capture_sink(&arg(1)?)?, 0),
        // `scale-{corral,tokio,std} N SECS [TIER] [null|capture]`: N
        // concurrent `sleep SECS`, stdout and stderr captured (default) or
        // sent to /dev/null; corral in TIER (`process_group` by default).
        "scale-corral" | "scale-std" | "scale-tokio" => {
            let n: usize = arg(1)?.parse().map_err(|_| "bad count")?;
            let secs = arg(2)?;
            let tier = args.get(3).map_or("process_group", String::as_str);
            let null = args.get(4).is_some_and(|s| s == "null");
            return scale(&what, n, &secs, tier, null, base);
        }
        // Profiling aids (not part of the table): `loop-corral N [cgroup]` and
        // `loop-std N` run `true` N times, for strace -c / callgrind;
        // `scan N` times N scans of /proc like a process-group membership
        // check does.
        "loop-corral" | "loop-std" => {
            let n: usize = arg(1)?.parse().map_err(|_| "bad count")?;
            let corral = (what == "loop-corral").then(|| match args.get(2).map(String::as_str) {
                Some("cgroup") => Mechanism::Cgroup,
                _ => Mechanism::ProcessGroup,
            });
            run_true(n, corral)?;
            (0, 0)
        }
        // `fd-census N TIER STDIO`: N async `sleep 2` in tier `auto`,
        // `cgroup`, `subreaper`, `process_group` (stdio `null` or
        // `capture`); prints the descriptors they hold, by kind.
        "fd-census" => {
            let n: usize = arg(1)?.parse().map_err(|_| "bad count")?;
            return fd_census(n, &arg(2)?, &arg(3)?);
        }
        "scan" => {
            let n: usize = arg(1)?.parse().map_err(|_| "bad count")?;
            let mut found = 0;
            for _ in 0..n {
                found += sys::group_members_live(std::process::id()).len();
            }
            (found as u64, sys::process_count() as u64)
        }
        other => return Err(format!("unknown child measurement {other}")),
    };
    let d = t0.elapsed();
    Ok(format!(
        "ns={} bytes={bytes} threads={threads} hwm={} base={base}",
        d.as_nanos(),
        sys::self_status("VmHWM").unwrap_or(0)
    ))
}

/// `head -c BYTES /dev/zero` captured by the library (cap 1 MiB), with the
/// output cap and the idle timer set far beyond the run when `limits`:
/// the bytes it saw.
fn capture_corral(bytes: &str, limits: bool) -> Result<u64, String> {
    let mut c = corral::Command::new("head");
    c.args(head_args(bytes))
        .containment(ContainmentChoice::Only(Mechanism::ProcessGroup))
        .capture_limit(1 << 20)
        .stderr(Output::null());
    if limits {
        c.output_limit(1 << 40)
            .idle_timeout(Duration::from_secs(3600));
    }
    let r = c.run().map_err(|e| e.full_message())?;
    if !r.success() {
        return Err(format!("head under corral: {}", r.outcome_name()));
    }
    Ok(r.stdout.total_bytes())
}

/// The same captured by std's `output()` (unbounded): the bytes it kept.
fn capture_std(bytes: &str) -> Result<u64, String> {
    let o = std::process::Command::new("head")
        .args(head_args(bytes))
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .map_err(|e| e.to_string())?;
    if !o.status.success() {
        return Err(format!("head: {}", o.status));
    }
    Ok(o.stdout.len() as u64)
}

/// The same read by a plain loop into a 128 KiB buffer that keeps nothing
/// (the ceiling): the bytes it read.
fn capture_sink(bytes: &str) -> Result<u64, String> {
    let mut c = std::process::Command::new("head")
        .args(head_args(bytes))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    let mut out = c.stdout.take().ok_or("no stdout")?;
    let mut buf = vec![0u8; 128 * 1024];
    let mut total = 0u64;
    loop {
        match out.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => total += n as u64,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    c.wait().map_err(|e| e.to_string())?;
    Ok(total)
}

/// `n` concurrent `sleep SECS` run by corral (`scale-corral`, in `tier`),
/// tokio or std threads: the line with the wall time and the peaks of
/// threads, descriptors and live children sampled meanwhile.
fn scale(
    what: &str,
    n: usize,
    secs: &str,
    tier: &str,
    null: bool,
    base: u64,
) -> Result<String, String> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let fds0 = open_fds();
    // `n` commands and, in the cgroup tier, corral's keeper.
    let sampler = ThreadSampler::start_for(n as u64);
    let t1 = Instant::now();
    let ok = match what {
        "scale-corral" => scale_corral(&rt, n, secs, tier_choice(tier)?, null),
        "scale-std" => scale_std(n, secs),
        _ => scale_tokio(&rt, n, secs, null),
    }?;
    let wall = t1.elapsed();
    let (threads, fds, kids, fds_all) = sampler.finish();
    if ok != n {
        return Err(format!("{} of {n} commands succeeded", ok));
    }
    drop(rt);
    Ok(format!(
        "ns={} threads={threads} fds={fds} fds0={fds0} kids={kids} fds_all={fds_all} hwm={} base={base}",
        wall.as_nanos(),
        sys::self_status("VmHWM").unwrap_or(0)
    ))
}

/// Runs `true` `n` times, one after the other: by corral in the tier
/// `corral` names, else by std in a process group of its own.
fn run_true(n: usize, corral: Option<Mechanism>) -> Result<(), String> {
    for _ in 0..n {
        if let Some(mech) = corral {
            let r = corral::Command::new("true")
                .containment(ContainmentChoice::Only(mech))
                .stdout(Output::null())
                .stderr(Output::null())
                .run()
                .map_err(|e| e.full_message())?;
            if !r.success() {
                return Err(r.outcome_name().into());
            }
        } else {
            use std::os::unix::process::CommandExt;
            std::process::Command::new("true")
                .process_group(0)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

fn open_fds() -> u64 {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64)
}

fn tier_choice(tier: &str) -> Result<ContainmentChoice, String> {
    Ok(match tier {
        "auto" => ContainmentChoice::Auto,
        "cgroup" => ContainmentChoice::Only(Mechanism::Cgroup),
        "process_group" => ContainmentChoice::Only(Mechanism::ProcessGroup),
        "pid_namespace" => ContainmentChoice::Only(Mechanism::PidNamespace),
        _ => return Err(format!("unknown tier {tier}")),
    })
}

/// corral's async API on the same multi-thread runtime as the tokio peer:
/// no thread per command.
fn scale_corral(
    rt: &tokio::runtime::Runtime,
    n: usize,
    secs: &str,
    tier: ContainmentChoice,
    null: bool,
) -> Result<usize, String> {
    rt.block_on(async {
        let tasks: Vec<_> = (0..n)
            .map(|_| {
                let secs = secs.to_string();
                tokio::spawn(async move {
                    let mut c = corral::Command::new("sleep");
                    c.arg(&secs).containment(tier);
                    if null {
                        c.stdout(Output::null()).stderr(Output::null());
                    }
                    c.run_async()
                        .await
                        .map_err(|e| e.full_message())
                        .and_then(|r| {
                            if r.success() {
                                Ok(())
                            } else {
                                Err(format!("{r:?}"))
                            }
                        })
                })
            })
            .collect();
        let mut ok = 0;
        let mut first_error = None;
        for t in tasks {
            match t.await {
                Ok(Ok(())) => ok += 1,
                Ok(Err(e)) => {
                    first_error.get_or_insert(e);
                }
                Err(e) => {
                    first_error.get_or_insert(e.to_string());
                }
            }
        }
        if let Some(e) = first_error {
            eprintln!(
                "corral-bench: scale-corral: {} failed; the first: {e}",
                n - ok
            );
        }
        Ok(ok)
    })
}

/// One thread per command with std (`output()`), the same threading model
/// as corral's sync API.
fn scale_std(n: usize, secs: &str) -> Result<usize, String> {
    let handles: Vec<_> = (0..n)
        .map(|_| {
            let secs = secs.to_string();
            std::thread::Builder::new()
                .spawn(move || {
                    use std::os::unix::process::CommandExt;
                    std::process::Command::new("sleep")
                        .arg(&secs)
                        .process_group(0)
                        .stdin(Stdio::null())
                        .output()
                        .map(|o| o.status.success())
                        .unwrap_or(false)
                })
                .map_err(|e| e.to_string())
        })
        .collect::<Result<_, _>>()?;
    Ok(handles
        .into_iter()
        .map(|h| h.join().unwrap_or(false))
        .filter(|&ok| ok)
        .count())
}

/// Tasks on tokio's multi-thread runtime (one worker per CPU):
/// `output()`, or `status()` with stdout and stderr to /dev/null.
fn scale_tokio(
    rt: &tokio::runtime::Runtime,
    n: usize,
    secs: &str,
    null: bool,
) -> Result<usize, String> {
    rt.block_on(async {
        let tasks: Vec<_> = (0..n)
            .map(|_| {
                let secs = secs.to_string();
                tokio::spawn(async move {
                    let mut c = tokio::process::Command::new("sleep");
                    c.arg(&secs).stdin(Stdio::null()).kill_on_drop(true);
                    if null {
                        c.stdout(Stdio::null())
                            .stderr(Stdio::null())
                            .status()
                            .await
                            .map(|s| s.success())
                            .unwrap_or(false)
                    } else {
                        c.output()
                            .await
                            .map(|o| o.status.success())
                            .unwrap_or(false)
                    }
                })
            })
            .collect();
        let mut ok = 0;
        for t in tasks {
            if t.await.unwrap_or(false) {
                ok += 1;
            }
        }
        Ok(ok)
    })
}

/// Descriptors of this process by kind (what `/proc/self/fd/N` links to).
fn fd_kinds() -> std::collections::BTreeMap<String, usize> {
    let mut m = std::collections::BTreeMap::new();
    if let Ok(d) = std::fs::read_dir("/proc/self/fd") {
        for e in d.flatten() {
            let t = std::fs::read_link(e.path())
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default();
            let kind = if let Some(r) = t.strip_prefix("anon_inode:") {
                r.to_string()
            } else if t.starts_with("pipe:") {
                "pipe".into()
            } else if t.starts_with("/sys/fs/cgroup") {
                let name = t.rsplit('/').next().unwrap_or("");
                if name.starts_with("corral-") {
                    "cgroup dir".into()
                } else {
                    format!("cgroup {name}")
                }
            } else {
                "other".into()
            };
            *m.entry(kind).or_insert(0) += 1;
        }
    }
    m
}

fn fd_census(n: usize, tier: &str, stdio: &str) -> Result<String, String> {
    let choice = tier_choice(tier)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        let before = fd_kinds();
        let mut tasks = Vec::new();
        for _ in 0..n {
            let mut c = if std::env::var_os("CENSUS_TREE").is_some() {
                let mut c = corral::Command::new("sh");
                c.args(["-c", "sleep 2 & wait"]);
                c
            } else {
                let mut c = corral::Command::new("sleep");
                c.arg("2");
                c
            };
            c.containment(choice);
            if stdio == "null" {
                c.stdout(Output::null()).stderr(Output::null());
            }
            let r = c.spawn_async().map_err(|e| e.full_message())?;
            tasks.push(tokio::spawn(r));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let during = fd_kinds();
        let mut line = String::new();
        let mut total = 0;
        for (k, v) in &during {
            let d = v.saturating_sub(before.get(k).copied().unwrap_or(0));
            if d > 0 {
                total += d;
                line.push_str(&format!(" {k}={:.2}", d as f64 / n as f64));
            }
        }
        for t in tasks {
            let r = t.await.map_err(|e| e.to_string())?;
            if !r.success() {
                return Err(format!("{r:?}"));
            }
        }
        Ok(format!(
            "tier={tier} stdio={stdio} per_command={:.2}{line}",
            total as f64 / n as f64
        ))
    })
}
