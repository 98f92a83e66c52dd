//! Figure 4: output. The library's bounded capture of a large stream
//! against std's unbounded `output()` (and a plain read loop, the ceiling),
//! each in a fresh process so that its peak RSS is its own; then the CLI's
//! relay `corral run -- head -c SIZE /dev/zero | cat` against a plain pipe
//! and coreutils `timeout 60`. The capture and the relay also run with the
//! output cap and the idle timer set far beyond the run (active, never
//! firing), paired round by round with the same run without them: what the
//! metering costs.

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

/// Runs the child measurements interleaved, round by round (the order
/// rotates per round); `runs[i].1` is how many rounds measurement `i` takes
/// part in (the first ones). The median run (by wall time) of each, and
/// every run of each, in round order, for paired ratios.
fn median_children(
    runs: &[(&[&str], usize)],
) -> Result<(Vec<ChildResult>, Vec<Vec<ChildResult>>), String> {
    let n = runs.len();
    let rounds = runs.iter().map(|r| r.1).max().unwrap_or(0);
    let mut all: Vec<Vec<ChildResult>> = vec![Vec::new(); n];
    for round in 0..rounds {
        for k in 0..n {
            let i = (round + k) % n;
            if round < runs[i].1 {
                all[i].push(child(runs[i].0)?);
            }
        }
    }
    let medians = all
        .iter()
        .map(|v| {
            let mut v = v.clone();
            v.sort_by_key(|r| r.wall);
            v[v.len() / 2]
        })
        .collect();
    Ok((medians, all))
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
pub(crate) fn pipeline(producer: &[&str]) -> Result<(Duration, u64), String> {
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

/// The wall time of every run of each variant, in round order.
type Walls = Vec<Vec<Duration>>;

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

/// Throughput of `a` over that of `b` (the same bytes), per round (the
/// two ran in the same round, back to back), then the median: on a shared
/// machine the load changes from second to second, and a ratio of two
/// medians taken over different moments can be far from either pairing.
pub(crate) fn paired(a: &[Duration], b: &[Duration]) -> Option<(f64, f64, f64)> {
    let mut r: Vec<f64> = a
        .iter()
        .zip(b)
        .filter(|(x, _)| !x.is_zero())
        .map(|(x, y)| y.as_secs_f64() / x.as_secs_f64())
        .collect();
    if r.is_empty() {
        return None;
    }
    r.sort_by(f64::total_cmp);
    Some((r[r.len() / 2], r[0], r[r.len() - 1]))
}

pub(crate) fn paired_ratio(a: &[Duration], b: &[Duration]) -> String {
    match paired(a, b) {
        Some((m, _, _)) => format!("{m:.2}"),
        None => "—".into(),
    }
}

/// The spread of the per-round ratios, for the label of a row that
/// claims "no measurable cost".
pub(crate) fn spread(a: &[Duration], b: &[Duration]) -> String {
    match paired(a, b) {
        Some((_, lo, hi)) => format!("{} pairs, {lo:.2}-{hi:.2}", a.len().min(b.len())),
        None => "no pairs".into(),
    }
}

fn walls(v: &[(Duration, u64)]) -> Vec<Duration> {
    v.iter().map(|r| r.0).collect()
}

fn child_walls(v: &[ChildResult]) -> Vec<Duration> {
    v.iter().map(|r| r.wall).collect()
}

pub fn run(cfg: &Config, t: &mut Table) -> Result<(), String> {
    let size = cfg.output_bytes.to_string();
    let human = format!("{} MiB", cfg.output_bytes >> 20);
    let reps = cfg.output_reps;
    // Paired rounds: a ratio is the median of per-round ratios, which needs
    // more rounds than a median of one variant. The capture with the cap
    // and the idle timer set (both active, never firing) is paired with the
    // plain capture in every round; the peers run in the first `reps`.
    let rounds = reps.max(3) * 2 + 1;
    let (v, all) = measure_capture(cfg, &size, reps, rounds)?;
    capture_rows(t, &human, &v, &all);
    let Some(cli) = corral_cli(cfg, t) else {
        return Ok(());
    };
    let (v, all) = measure_relay(&cli.display().to_string(), &size, rounds)?;
    relay_rows(t, &human, cfg.output_bytes, rounds, &v, &all);
    Ok(())
}

/// The library's capture of `size` bytes, plain and with the cap and the
/// idle timer set, paired over `rounds`; std's `output()` and a read loop
/// over `reps`; and the plain capture again as the control. The median run
/// of each and every run; an error when a run got fewer bytes.
fn measure_capture(
    cfg: &Config,
    size: &str,
    reps: usize,
    rounds: usize,
) -> Result<(Vec<ChildResult>, Vec<Vec<ChildResult>>), String> {
    let (v, all) = median_children(&[
        (&["capture-corral", size], rounds),
        (&["capture-corral-limits", size], rounds),
        (&["capture-std", size], reps),
        (&["capture-sink", size], reps),
        // The control: the plain capture again, paired with itself (the
        // spread of its per-round ratios is the noise of this machine).
        (&["capture-corral", size], rounds),
    ])?;
    if let Some(r) = all.iter().flatten().find(|r| r.bytes != cfg.output_bytes) {
        return Err(format!(
            "capture got {} of {} bytes",
            r.bytes, cfg.output_bytes
        ));
    }
    Ok((v, all))
}

/// The capture's rows: throughput and peak RSS against std, and the cost
/// of the cap and the idle timer.
fn capture_rows(t: &mut Table, human: &str, v: &[ChildResult], all: &[Vec<ChildResult>]) {
    let (c, cl, s, k) = (v[0], v[1], v[2], v[3]);
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
    let (cw, clw, cw2) = (
        child_walls(&all[0]),
        child_walls(&all[1]),
        child_walls(&all[4]),
    );
    t.row(
        "4",
        format!(
            "capture {human} with `output_limit(1 TiB)` + `idle_timeout(1 h)` (active, never firing), throughput (↑; ratio: median of paired rounds, {}; control, the plain capture against itself: {} ({}))",
            spread(&clw, &cw),
            paired_ratio(&cw2, &cw),
            spread(&cw2, &cw)
        ),
        fmt_rate(cl.bytes, cl.wall),
        "the same capture without either (same rounds)",
        fmt_rate(c.bytes, c.wall),
        paired_ratio(&clw, &cw),
        "≈ 1.00 (no measurable cost)",
    );
}

/// The CLI's relay `corral run -- head -c SIZE /dev/zero | cat` against a
/// plain pipe and coreutils `timeout`, plain and with the cap and the idle
/// timer, and the plain relay again as the control, paired over `rounds`:
/// the median run of each, and the wall times of every run.
fn measure_relay(
    cli: &str,
    size: &str,
    rounds: usize,
) -> Result<(Vec<(Duration, u64)>, Walls), String> {
    let (v, all) = median_pipelines(
        rounds,
        &[
            &["head", "-c", size, "/dev/zero"],
            &[cli, "run", "--", "head", "-c", size, "/dev/zero"],
            &["timeout", "60", "head", "-c", size, "/dev/zero"],
            &[
                cli,
                "run",
                "--max-output",
                "1T",
                "--idle-timeout",
                "1h",
                "--",
                "head",
                "-c",
                size,
                "/dev/zero",
            ],
            // The control: the plain relay again, paired with itself.
            &[cli, "run", "--", "head", "-c", size, "/dev/zero"],
        ],
    )?;
    Ok((v, all.iter().map(|r| walls(r)).collect()))
}

/// The relay's rows: throughput against a plain pipe and `timeout`, peak
/// RSS, and the cost of the cap and the idle timer.
fn relay_rows(
    t: &mut Table,
    human: &str,
    b: u64,
    rounds: usize,
    v: &[(Duration, u64)],
    all: &[Vec<Duration>],
) {
    let (plain, relay, tout, limited) = (v[0], v[1], v[2], v[3]);
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
    t.row(
        "4",
        format!(
            "CLI: `corral run --max-output 1T --idle-timeout 1h -- head -c {human} /dev/zero | cat` (active, never firing), throughput (↑; ratio: median of paired rounds, {}; control, the plain relay against itself: {} ({}))",
            spread(&all[3], &all[1]),
            paired_ratio(&all[4], &all[1]),
            spread(&all[4], &all[1])
        ),
        fmt_rate(b, limited.0),
        "the plain relay `corral run -- head | cat` (same rounds)",
        fmt_rate(b, relay.0),
        paired_ratio(&all[3], &all[1]),
        "≈ 1.00 (no measurable cost)",
    );
    t.row(
        "4",
        format!("CLI relay {human} with --max-output + --idle-timeout, throughput (↑)"),
        fmt_rate(b, limited.0),
        "plain pipe `head | cat`",
        fmt_rate(b, plain.0),
        paired_ratio(&all[3], &all[0]),
        "",
    );
}
