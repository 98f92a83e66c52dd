//! Figure 4: output. The library's bounded capture of a large stream
//! against std's unbounded `output()` (and a plain read loop, the ceiling),
//! each in a fresh process so that its peak RSS is its own; then the CLI's
//! relay `corral run -- head -c SIZE /dev/zero | cat` against a plain pipe
//! and coreutils `timeout 60`.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::report::{fmt_kib, fmt_rate, rate, ratio, Table};
use crate::Config;

/// What one child measurement printed.
#[derive(Debug, Default, Clone, Copy)]
pub struct ChildResult {
    pub wall: Duration,
    pub bytes: u64,
    pub threads: u64,
    /// Peak open descriptors (figure 5).
    pub fds: u64,
    /// Open descriptors before the commands started, and peak live
    /// children (figure 5).
    pub fds0: u64,
    pub kids: u64,
    /// Open descriptors while every command was alive (0: never seen).
    pub fds_all: u64,
    /// Peak RSS at the end, and before the work began (KiB).
    pub hwm: u64,
    pub base: u64,
}

/// Runs `corral-bench --child ARGS...` and parses its line.
pub fn child(args: &[&str]) -> Result<ChildResult, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = Command::new(exe)
        .arg("--child")
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("child {args:?} failed: {}", out.status));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut r = ChildResult::default();
    for kv in text.split_whitespace() {
        let Some((k, v)) = kv.split_once('=') else {
            continue;
        };
        let v: u64 = v
            .parse()
            .map_err(|_| format!("bad child output {text:?}"))?;
        match k {
            "ns" => r.wall = Duration::from_nanos(v),
            "bytes" => r.bytes = v,
            "threads" => r.threads = v,
            "fds" => r.fds = v,
            "fds0" => r.fds0 = v,
            "kids" => r.kids = v,
            "fds_all" => r.fds_all = v,
            "hwm" => r.hwm = v,
            "base" => r.base = v,
            _ => {}
        }
    }
    Ok(r)
}

/// Runs each child measurement `reps` times, interleaved, and keeps the
/// median run (by wall time) of each.
fn median_children(reps: usize, runs: &[&[&str]]) -> Result<Vec<ChildResult>, String> {
    let mut all: Vec<Vec<ChildResult>> = vec![Vec::new(); runs.len()];
    for _ in 0..reps {
        for (i, args) in runs.iter().enumerate() {
            all[i].push(child(args)?);
        }
    }
    Ok(all
        .into_iter()
        .map(|mut v| {
            v.sort_by_key(|r| r.wall);
            v[v.len() / 2]
        })
        .collect())
}

/// The `corral` CLI to measure: `--corral-bin`, else the one beside this
/// binary; when run through cargo, that one is (re)built first so that it
/// matches the library being measured.
pub(crate) fn corral_cli(cfg: &Config, t: &mut Table) -> Option<PathBuf> {
    if let Some(p) = &cfg.corral_bin {
        return Some(p.clone());
    }
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?.to_path_buf();
    let bin = dir.join("corral");
    if let Ok(cargo) = std::env::var("CARGO") {
        let mut c = Command::new(cargo);
        c.args(["build", "--quiet", "-p", "corral-cli"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stdin(Stdio::null());
        if dir.file_name().is_some_and(|n| n == "release") {
            c.arg("--release");
        }
        if let Some(target) = dir.parent() {
            c.env("CARGO_TARGET_DIR", target);
        }
        eprintln!("building the corral CLI for figures 4 and 6: {c:?}");
        match c.status() {
            Ok(s) if s.success() => {}
            other => t.note(format!("building the corral CLI failed: {other:?}")),
        }
    }
    if bin.is_file() {
        Some(bin)
    } else {
        t.note(format!(
            "figures 4 (relay rows) and 6 skipped: no corral CLI at {} (build it with `cargo build --release -p corral-cli` or pass --corral-bin)",
            bin.display()
        ));
        None
    }
}

/// `PRODUCER... | cat > /dev/null`; returns the time until cat is done and
/// the producer's peak RSS (KiB), sampled from its /proc status while it
/// runs (rusage's maxrss is useless here: after a vfork-style spawn it
/// includes the spawning parent's peak).
fn pipeline(producer: &[&str]) -> Result<(Duration, u64), String> {
    let mut cat = Command::new("cat")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    let cat_in = cat.stdin.take().ok_or("no stdin for cat")?;
    let t0 = Instant::now();
    let prod = Command::new(producer[0])
        .args(&producer[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::from(cat_in))
        .stderr(Stdio::null())
        .spawn();
    let mut prod = match prod {
        Ok(p) => p,
        Err(e) => {
            let _ = cat.kill();
            let _ = cat.wait();
            return Err(format!("{producer:?}: {e}"));
        }
    };
    let pid = prod.id();
    let sampler = std::thread::spawn(move || {
        let path = format!("/proc/{pid}/status");
        let mut peak = 0u64;
        // A zombie's status has no VmHWM line: the process is done.
        while let Some(kib) = std::fs::read_to_string(&path).ok().and_then(|t| {
            t.lines().find_map(|l| {
                l.strip_prefix("VmHWM:")
                    .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            })
        }) {
            peak = peak.max(kib);
            std::thread::sleep(Duration::from_millis(2));
        }
        peak
    });
    let status = prod.wait().map_err(|e| e.to_string())?;
    let cat_status = cat.wait().map_err(|e| e.to_string())?;
    let d = t0.elapsed();
    let maxrss = sampler.join().unwrap_or(0);
    if !status.success() || !cat_status.success() {
        return Err(format!("{producer:?} | cat: {status}, cat {cat_status}"));
    }
    Ok((d, maxrss))
}

/// Runs each pipeline `reps` times, interleaved (the order rotates per
/// round, so that no pipeline always runs right after the same one); the
/// median run of each, and every run (round by round) for paired ratios.
type Runs = Vec<Vec<(Duration, u64)>>;

fn median_pipelines(reps: usize, runs: &[&[&str]]) -> Result<(Vec<(Duration, u64)>, Runs), String> {
    let n = runs.len();
    let mut all: Runs = vec![Vec::new(); n];
    for round in 0..reps {
        for k in 0..n {
            let i = (round + k) % n;
            all[i].push(pipeline(runs[i])?);
        }
    }
    let medians = all
        .iter()
        .map(|v| {
            let mut v = v.clone();
            v.sort_by_key(|r| r.0);
            v[v.len() / 2]
        })
        .collect();
    Ok((medians, all))
}

/// Throughput of `a` over that of `b`, per round (the two ran in the same
/// round, back to back), then the median: on a shared machine the load
/// changes from second to second, and a ratio of two medians taken over
/// different moments can be far from either pairing.
fn paired_ratio(a: &[(Duration, u64)], b: &[(Duration, u64)]) -> String {
    let mut r: Vec<f64> = a
        .iter()
        .zip(b)
        .filter(|(x, _)| !x.0.is_zero())
        .map(|(x, y)| y.0.as_secs_f64() / x.0.as_secs_f64())
        .collect();
    if r.is_empty() {
        return "—".into();
    }
    r.sort_by(f64::total_cmp);
    format!("{:.2}", r[r.len() / 2])
}

pub fn run(cfg: &Config, t: &mut Table) -> Result<(), String> {
    let size = cfg.output_bytes.to_string();
    let human = format!("{} MiB", cfg.output_bytes >> 20);
    let reps = cfg.output_reps;
    let v = median_children(
        reps,
        &[
            &["capture-corral", &size],
            &["capture-std", &size],
            &["capture-sink", &size],
        ],
    )?;
    let (c, s, k) = (v[0], v[1], v[2]);
    for r in [&c, &s, &k] {
        if r.bytes != cfg.output_bytes {
            return Err(format!(
                "capture got {} of {} bytes",
                r.bytes, cfg.output_bytes
            ));
        }
    }
    t.row(
        "4",
        format!("capture {human} (`head -c`), throughput (↑)"),
        format!("{} (cap 1 MiB)", fmt_rate(c.bytes, c.wall)),
        "std `Command::output()` (unbounded)",
        fmt_rate(s.bytes, s.wall),
        ratio(rate(c.bytes, c.wall), rate(s.bytes, s.wall)),
        "",
    );
    t.row(
        "4",
        format!("capture {human}, throughput (↑)"),
        format!("{} (cap 1 MiB)", fmt_rate(c.bytes, c.wall)),
        "std read loop into a 128 KiB buffer (discards; ceiling)",
        fmt_rate(k.bytes, k.wall),
        ratio(rate(c.bytes, c.wall), rate(k.bytes, k.wall)),
        "",
    );
    t.row(
        "4",
        format!(
            "capture {human}, peak RSS of the capturing process (↓; fresh process baseline {})",
            fmt_kib(c.base)
        ),
        format!("{} (cap 1 MiB)", fmt_kib(c.hwm)),
        "std `Command::output()` (unbounded)",
        fmt_kib(s.hwm),
        ratio(c.hwm as f64, s.hwm as f64),
        "≤ cap + a few MiB",
    );

    let Some(cli) = corral_cli(cfg, t) else {
        return Ok(());
    };
    let cli = cli.display().to_string();
    // Paired rounds: the ratio is the median of per-round ratios, which
    // needs more rounds than a median of one variant.
    let rounds = reps.max(3) * 2 + 1;
    let (v, all) = median_pipelines(
        rounds,
        &[
            &["head", "-c", &size, "/dev/zero"],
            &[&cli, "run", "--", "head", "-c", &size, "/dev/zero"],
            &["timeout", "60", "head", "-c", &size, "/dev/zero"],
        ],
    )?;
    let (plain, relay, tout) = (v[0], v[1], v[2]);
    let b = cfg.output_bytes;
    t.row(
        "4",
        format!("CLI: `corral run -- head -c {human} /dev/zero | cat`, throughput (↑)"),
        fmt_rate(b, relay.0),
        format!("plain pipe `head | cat` (ratio: median of {rounds} paired rounds)"),
        fmt_rate(b, plain.0),
        paired_ratio(&all[1], &all[0]),
        "≥ 0.90",
    );
    t.row(
        "4",
        format!("CLI relay {human}, throughput (↑)"),
        fmt_rate(b, relay.0),
        "coreutils `timeout 60 head | cat` (no relay: child writes the pipe)",
        fmt_rate(b, tout.0),
        paired_ratio(&all[1], &all[2]),
        "",
    );
    t.row(
        "4",
        format!("CLI relay {human}, peak RSS of the runner (↓)"),
        fmt_kib(relay.1),
        "coreutils `timeout`",
        fmt_kib(tout.1),
        ratio(relay.1 as f64, tout.1 as f64),
        "≤ 1 MiB queue + a few MiB",
    );
    Ok(())
}
