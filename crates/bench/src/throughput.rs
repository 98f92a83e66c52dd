//! Figure 7: batch throughput (issue #35). `corral batch` of N `true` runs
//! at `--jobs CPUs` in the default tier against the process-group tier and
//! against `xargs -P CPUs timeout 10 true`, interleaved (round robin with a
//! rotating start) in one run; then the run-level latency of `sleep 0.05`
//! runs at `--jobs 1`, `--jobs CPUs` and `--jobs 4×CPUs` in the default
//! tier, read from the batch's own report (the median of the runs'
//! `wall_ms`): a global lock taken per run would show as a latency that
//! grows with the jobs.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use crate::report::{dur_ratio, fmt_dur, Samples, Table};
use crate::Config;

/// One timed invocation with stdin from `input` (or /dev/null); exit codes
/// other than `ok` are errors.
fn invoke(argv: &[String], input: Option<&Path>) -> Result<Duration, String> {
    let stdin = match input {
        Some(p) => {
            Stdio::from(std::fs::File::open(p).map_err(|e| format!("{}: {e}", p.display()))?)
        }
        None => Stdio::null(),
    };
    crate::cli::invoke_in(argv, None, stdin)
}

fn manifest(cfg: &Config, name: &str, run: &str, n: usize) -> Result<String, String> {
    let path = cfg.tmp.join(name);
    let text = format!("[[task]]\nname = \"t\"\nrun = [{run}]\nrepeat = {n}\ntimeout = \"10s\"\n");
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path.display().to_string())
}

fn batch_argv(bin: &Path, manifest: &str, jobs: usize, tier: &str) -> Vec<String> {
    [
        bin.display().to_string(),
        "batch".into(),
        "--progress".into(),
        "none".into(),
        "--jobs".into(),
        jobs.to_string(),
        "--containment".into(),
        tier.into(),
        manifest.into(),
    ]
    .to_vec()
}

/// The median of the runs' `wall_ms` in a batch report (its one task's:
/// the first `"median"` after `"tasks"`).
fn median_wall(report: &Path) -> Result<Duration, String> {
    let text = std::fs::read_to_string(report).map_err(|e| format!("{}: {e}", report.display()))?;
    let bad = |what: &str| format!("{}: {what}", report.display());
    let tasks = text.find("\"tasks\"").ok_or_else(|| bad("no tasks"))?;
    let rest = &text[tasks..];
    let m = rest.find("\"median\"").ok_or_else(|| bad("no median"))?;
    let num: String = rest[m + 8..]
        .trim_start_matches([':', ' ', '\n', '\t'])
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let ms: f64 = num
        .parse()
        .map_err(|e| bad(&format!("median {num:?}: {e}")))?;
    Ok(Duration::from_secs_f64(ms / 1000.0))
}

pub fn run(cfg: &Config, t: &mut Table) -> Result<(), String> {
    let Some(bin) = crate::output::corral_cli(cfg, t) else {
        return Ok(());
    };
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let n = cfg.throughput_tasks;
    let reps = if cfg.quick { 3 } else { 7 };
    let trues = manifest(cfg, "throughput-true.toml", "\"true\"", n)?;
    let lines = cfg.tmp.join("throughput-lines");
    std::fs::write(&lines, (0..n).map(|i| format!("{i}\n")).collect::<String>())
        .map_err(|e| format!("{}: {e}", lines.display()))?;
    let timeout = ["/usr/bin/timeout", "/bin/timeout"]
        .into_iter()
        .find(|p| Path::new(p).is_file());
    let mut variants: Vec<(&str, Vec<String>, Option<&Path>, Samples)> = vec![
        (
            "cgroup",
            batch_argv(&bin, &trues, cpus, "auto"),
            None,
            Samples::default(),
        ),
        (
            "process-group",
            batch_argv(&bin, &trues, cpus, "process-group"),
            None,
            Samples::default(),
        ),
    ];
    if let Some(timeout) = timeout {
        // `-n 1`: one `timeout 10 true N` per line, N runs at most CPUs at once.
        let argv = [
            "xargs",
            "-P",
            &cpus.to_string(),
            "-n",
            "1",
            timeout,
            "10",
            "true",
        ]
        .map(String::from)
        .to_vec();
        variants.push(("xargs", argv, Some(&lines), Samples::default()));
    }
    for v in &variants {
        invoke(&v.1, v.2)?; // warm-up
    }
    let k = variants.len();
    for i in 0..reps {
        for j in 0..k {
            let v = &mut variants[(i + j) % k];
            let d = invoke(&v.1, v.2)?;
            v.3.push(d);
        }
    }
    let med = |name: &str| variants.iter().find(|v| v.0 == name).map(|v| v.3.median());
    let (cg, pg) = (
        med("cgroup").unwrap_or_default(),
        med("process-group").unwrap_or_default(),
    );
    t.row(
        "7",
        format!("batch throughput: `corral batch` of {n} `true`, --jobs {cpus}, default tier (wall, median of {reps})"),
        fmt_dur(cg),
        "the same batch, `--containment process-group`",
        fmt_dur(pg),
        dur_ratio(cg, pg),
        "≤ 1.3",
    );
    if let Some(x) = med("xargs") {
        t.row(
            "7",
            format!("batch throughput: {n} `true`, --jobs {cpus}, default tier"),
            fmt_dur(cg),
            format!("`xargs -P {cpus} timeout 10 true` ({n} lines)"),
            fmt_dur(x),
            dur_ratio(cg, x),
            "≤ 1.0",
        );
        t.row(
            "7",
            format!("batch throughput: {n} `true`, --jobs {cpus}, process-group tier"),
            fmt_dur(pg),
            format!("`xargs -P {cpus} timeout 10 true` ({n} lines)"),
            fmt_dur(x),
            dur_ratio(pg, x),
            "—",
        );
    }
    // Per-run cost, the batch's wall divided by the runs and multiplied by
    // the jobs: what one run holds a slot for.
    t.note(format!(
        "figure 7: per run at --jobs {cpus}: default tier {} of a slot, process-group {}",
        fmt_dur(cg * cpus as u32 / n as u32),
        fmt_dur(pg * cpus as u32 / n as u32)
    ));

    // Run-level latency: `sleep 0.05`, 8 runs per job slot (at least 16).
    let mut alone = None;
    for jobs in [1, cpus, 4 * cpus] {
        let runs = (8 * jobs).max(16);
        let m = manifest(
            cfg,
            &format!("throughput-sleep-{jobs}.toml"),
            "\"sleep\", \"0.05\"",
            runs,
        )?;
        let report = cfg.tmp.join(format!("throughput-sleep-{jobs}.json"));
        let mut argv = batch_argv(&bin, &m, jobs, "auto");
        argv.extend(["--report".into(), report.display().to_string()]);
        let mut s = Samples::default();
        for _ in 0..reps.min(5) {
            invoke(&argv, None)?;
            s.push(median_wall(&report)?);
        }
        let lat = s.median();
        let base = *alone.get_or_insert(lat);
        t.row(
            "7",
            format!("run latency: {runs} `sleep 0.05` at --jobs {jobs}, default tier (median run wall_ms, median of {})", s.len()),
            fmt_dur(lat),
            "the same at --jobs 1",
            fmt_dur(base),
            dur_ratio(lat, base),
            if jobs == 1 { "—" } else { "≤ 2" },
        );
    }
    Ok(())
}
