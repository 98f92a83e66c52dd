//! Figure 6: the command line, as shell users, CI scripts and agents that
//! shell out call it: one `corral run --timeout 10s --containment TIER --
//! true` per invocation against coreutils `timeout 10 true`, interleaved
//! (round robin with a rotating start) in one run, for every tier that works
//! here; then `corral batch` of N `true` tasks against the same N `corral
//! run true` invocations one after another.
//!
//! Every process is started from this one with stdout and stderr on
//! /dev/null, as `hyperfine` does, and waited for; what is timed is the
//! whole invocation, exec to reaped.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::report::{dur_ratio, fmt_dur, Samples, Table};
use crate::Config;

/// One timed invocation; an unexpected exit status is an error.
pub fn invoke(argv: &[String]) -> Result<Duration, String> {
    invoke_in(argv, None, Stdio::null())
}

/// One timed invocation in `dir` (or here) with `stdin`, output to
/// /dev/null; an unexpected exit status is an error.
pub fn invoke_in(argv: &[String], dir: Option<&Path>, stdin: Stdio) -> Result<Duration, String> {
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .stdin(stdin)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if let Some(dir) = dir {
        cmd.current_dir(dir);
    }
    let t0 = Instant::now();
    let st = cmd.status().map_err(|e| format!("{}: {e}", argv[0]))?;
    let d = t0.elapsed();
    if st.success() {
        Ok(d)
    } else {
        Err(format!("{argv:?} exited {st}"))
    }
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

fn run_argv(bin: &Path, tier: &str) -> Vec<String> {
    let mut v = vec![bin.display().to_string()];
    v.extend(strings(&[
        "run",
        "--timeout",
        "10s",
        "--containment",
        tier,
        "--",
        "true",
    ]));
    v
}

fn timeout_path() -> Option<PathBuf> {
    ["/usr/bin/timeout", "/bin/timeout"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
}

pub fn run(cfg: &Config, t: &mut Table) -> Result<(), String> {
    let Some(bin) = crate::output::corral_cli(cfg, t) else {
        return Ok(());
    };
    let Some(timeout) = timeout_path() else {
        t.note("figure 6 skipped: no coreutils `timeout` here");
        return Ok(());
    };
    let mut variants: Vec<(String, Vec<String>, Samples)> = vec![(
        "timeout".into(),
        vec![timeout.display().to_string(), "10".into(), "true".into()],
        Samples::default(),
    )];
    for tier in ["cgroup", "subreaper", "process-group", "pid-namespace"] {
        let argv = run_argv(&bin, tier);
        match invoke(&argv) {
            Ok(_) => variants.push((tier.into(), argv, Samples::default())),
            Err(e) => t.note(format!("figure 6: corral[{tier}] skipped: {e}")),
        }
    }
    // The static executable (scripts/dist.sh's musl build), in the tier
    // whose start costs least, so that what the loader costs shows most.
    if let Some(st) = &cfg.static_bin {
        let argv = run_argv(st, "process-group");
        match invoke(&argv) {
            Ok(_) => variants.push(("static".into(), argv, Samples::default())),
            Err(e) => t.note(format!("figure 6: the static corral skipped: {e}")),
        }
    }
    // Warm-up: page cache, the first corral's stale-cgroup pass.
    for (_, argv, _) in &variants {
        invoke(argv)?;
    }
    let n = variants.len();
    for i in 0..cfg.cli_iters {
        for k in 0..n {
            let v = &mut variants[(i + k) % n];
            let d = invoke(&v.1)?;
            v.2.push(d);
        }
    }
    let base = variants[0].2.median();
    let pg = variants
        .iter()
        .find(|v| v.0 == "process-group")
        .map(|v| v.2.median());
    for (tier, _, s) in variants[1..].iter().filter(|v| v.0 != "static") {
        let target = match tier.as_str() {
            "pid-namespace" => "≤ 1.6",
            "process-group" => "≤ 1.3 (stretch ≤ 1.1)",
            _ => "≤ 1.3",
        };
        t.row(
            "6",
            format!(
                "CLI `corral run --timeout 10s --containment {tier} -- true`, median of {} (p99 {})",
                s.len(),
                fmt_dur(s.p99())
            ),
            fmt_dur(s.median()),
            "coreutils `timeout 10 true`",
            fmt_dur(base),
            dur_ratio(s.median(), base),
            target,
        );
    }
    if let (Some(pg), Some(cg)) = (pg, variants.iter().find(|v| v.0 == "cgroup")) {
        t.row(
            "6",
            "CLI: the cgroup tier against the process-group tier (same run)",
            fmt_dur(cg.2.median()),
            "`corral run --containment process-group -- true`",
            fmt_dur(pg),
            dur_ratio(cg.2.median(), pg),
            "≤ 1.1",
        );
    }
    if let (Some(pg), Some(st)) = (pg, variants.iter().find(|v| v.0 == "static")) {
        t.row(
            "6",
            format!(
                "CLI: the static musl `corral` (scripts/dist.sh), `--containment process-group -- true`, median of {} (p99 {})",
                st.2.len(),
                fmt_dur(st.2.p99())
            ),
            fmt_dur(st.2.median()),
            "the dynamic `corral` (same run, same tier)",
            fmt_dur(pg),
            dur_ratio(st.2.median(), pg),
            "—",
        );
    }
    batch_row(cfg, t, &bin)
}

/// `corral batch` of `cfg.batch_tasks` tasks running `true` (default
/// `--jobs`, the number of CPUs) against as many `corral run -- true`
/// invocations one after another, both in the default (`auto`) tier.
fn batch_row(cfg: &Config, t: &mut Table, bin: &Path) -> Result<(), String> {
    let n = cfg.batch_tasks;
    let manifest = cfg.tmp.join("cli-batch.toml");
    let mut text = String::new();
    for i in 0..n {
        text.push_str(&format!("[[task]]\nname = \"t{i}\"\nrun = [\"true\"]\n"));
    }
    std::fs::write(&manifest, text).map_err(|e| format!("{}: {e}", manifest.display()))?;
    let batch = vec![
        bin.display().to_string(),
        "batch".into(),
        "--progress".into(),
        "none".into(),
        manifest.display().to_string(),
    ];
    let one = vec![
        bin.display().to_string(),
        "run".into(),
        "--".into(),
        "true".into(),
    ];
    invoke(&batch)?;
    // Interleaved: batch, then the N invocations; twice in quick mode,
    // three times in full mode; the medians are compared.
    let reps = if cfg.quick { 2 } else { 3 };
    let (mut b, mut r) = (Samples::default(), Samples::default());
    for _ in 0..reps {
        b.push(invoke(&batch)?);
        let t0 = Instant::now();
        for _ in 0..n {
            invoke(&one)?;
        }
        r.push(t0.elapsed());
    }
    t.row(
        "6",
        format!("`corral batch` of {n} `true` tasks (default --jobs), median of {reps}"),
        fmt_dur(b.median()),
        format!("{n} `corral run -- true` one after another"),
        fmt_dur(r.median()),
        dur_ratio(b.median(), r.median()),
        "—",
    );
    Ok(())
}
