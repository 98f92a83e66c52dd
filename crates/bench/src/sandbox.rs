//! Figure 9: the sandbox (issue #33). `corral run --sandbox -- true`
//! against `corral run -- true` and against the equivalent `bwrap` command
//! line (read-only root, the working directory writable, a private /tmp and
//! /dev/shm, a private /dev of the usual devices (`--dev`), new user and
//! network namespaces) and the same with the host's devices
//! (`--dev-bind /dev /dev`, the line of the first figures), all four
//! interleaved in one run; then 1 GiB (full mode) relayed by the CLI
//! and captured by the library inside a sandbox against the same outside
//! it, paired round by round.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use corral::{ContainmentChoice, Mechanism, Output, Sandbox};

use crate::output::{paired_ratio, pipeline, spread};
use crate::report::{dur_ratio, fmt_dur, fmt_rate, Samples, Table};
use crate::Config;

/// One timed invocation in `dir`; an unexpected exit status is an error.
fn invoke(argv: &[String], dir: &Path) -> Result<Duration, String> {
    crate::cli::invoke_in(argv, Some(dir), Stdio::null())
}

fn bwrap_path() -> Option<PathBuf> {
    ["/usr/bin/bwrap", "/bin/bwrap"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
}

/// bubblewrap's command line for corral's default policy: the root
/// read-only, the working directory writable, private /tmp and /dev/shm,
/// a private /dev of the usual devices (`host_dev`: the host's devices
/// instead), no network (new user and network namespaces).
fn bwrap_argv(bwrap: &Path, dir: &Path, host_dev: bool) -> Vec<String> {
    let d = dir.display().to_string();
    let mut v = vec![bwrap.display().to_string()];
    let dev: &[&str] = if host_dev {
        &["--dev-bind", "/dev", "/dev"]
    } else {
        &["--dev", "/dev"]
    };
    for a in ["--ro-bind", "/", "/"].iter().chain(dev).chain(&[
        // The private /tmp first: the working directory may be under it.
        "--tmpfs",
        "/tmp",
        "--tmpfs",
        "/dev/shm",
        "--bind",
        &d,
        &d,
        "--unshare-user",
        "--unshare-net",
        "--die-with-parent",
        "--chdir",
        &d,
        "--",
        "true",
    ]) {
        v.push((*a).to_owned());
    }
    v
}

pub fn run(cfg: &Config, t: &mut Table) -> Result<(), String> {
    let Some(bin) = crate::output::corral_cli(cfg, t) else {
        return Ok(());
    };
    let dir = cfg.tmp.join("sandbox-cwd");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let corral = |extra: &[&str]| {
        let mut v = vec![bin.display().to_string(), "run".to_owned()];
        v.extend(extra.iter().map(|s| (*s).to_owned()));
        v.extend(["--".to_owned(), "true".to_owned()]);
        v
    };
    let mut variants: Vec<(&str, Vec<String>, Samples)> = vec![
        ("plain", corral(&[]), Samples::default()),
        ("sandbox", corral(&["--sandbox"]), Samples::default()),
    ];
    if let Err(e) = invoke(&variants[1].1, &dir) {
        t.note(format!(
            "figure 9 skipped: `corral run --sandbox -- true` fails here: {e}"
        ));
        return Ok(());
    }
    match bwrap_path() {
        Some(b) => {
            for (name, host_dev) in [("bwrap --dev", false), ("bwrap --dev-bind", true)] {
                let argv = bwrap_argv(&b, &dir, host_dev);
                match invoke(&argv, &dir) {
                    Ok(_) => variants.push((name, argv, Samples::default())),
                    Err(e) => t.note(format!("figure 9: {name} skipped: {e}")),
                }
            }
        }
        None => t.note("figure 9: no bwrap here (apt install bubblewrap)"),
    }
    for (_, argv, _) in &variants {
        invoke(argv, &dir)?;
    }
    let n = variants.len();
    for i in 0..cfg.cli_iters {
        for k in 0..n {
            let v = &mut variants[(i + k) % n];
            v.2.push(invoke(&v.1, &dir)?);
        }
    }
    let plain = variants[0].2.median();
    let sb = &variants[1].2;
    let what = format!(
        "CLI `corral run --sandbox -- true`, median of {} (p99 {})",
        sb.len(),
        fmt_dur(sb.p99())
    );
    t.row(
        "9",
        what.clone(),
        fmt_dur(sb.median()),
        "`corral run -- true` (same run)",
        fmt_dur(plain),
        dur_ratio(sb.median(), plain),
        "≤ 1.5",
    );
    for (_, argv, b) in variants.iter().skip(2) {
        t.row(
            "9",
            what.clone(),
            fmt_dur(sb.median()),
            format!("`bwrap {}` (same run)", argv[1..].join(" ")),
            fmt_dur(b.median()),
            dur_ratio(sb.median(), b.median()),
            "≤ 1.0",
        );
    }
    relay_row(cfg, t, &bin)?;
    capture_row(cfg, t, &dir)
}

fn human(bytes: u64) -> String {
    if bytes >= 1 << 30 {
        format!("{} GiB", bytes >> 30)
    } else {
        format!("{} MiB", bytes >> 20)
    }
}

/// `corral run [--sandbox] -- head -c SIZE /dev/zero | cat`, paired by
/// round.
fn relay_row(cfg: &Config, t: &mut Table, bin: &Path) -> Result<(), String> {
    let size = cfg.output_bytes.to_string();
    let b = bin.display().to_string();
    // Both run in this process's working directory (nothing is written).
    let plain: Vec<&str> = vec![&b, "run", "--", "head", "-c", &size, "/dev/zero"];
    let boxed: Vec<&str> = vec![
        &b,
        "run",
        "--sandbox",
        "--",
        "head",
        "-c",
        &size,
        "/dev/zero",
    ];
    let reps = if cfg.quick { 3 } else { 7 };
    let (mut a, mut p) = (Vec::new(), Vec::new());
    for round in 0..reps {
        if round % 2 == 0 {
            a.push(pipeline(&boxed)?.0);
            p.push(pipeline(&plain)?.0);
        } else {
            p.push(pipeline(&plain)?.0);
            a.push(pipeline(&boxed)?.0);
        }
    }
    let med = |v: &[Duration]| {
        let mut v = v.to_vec();
        v.sort();
        v[v.len() / 2]
    };
    let h = human(cfg.output_bytes);
    t.row(
        "9",
        format!(
            "CLI: `corral run --sandbox -- head -c {h} /dev/zero | cat`, throughput (↑; ratio: median of paired rounds, {})",
            spread(&a, &p)
        ),
        fmt_rate(cfg.output_bytes, med(&a)),
        "the same without --sandbox (same rounds)",
        fmt_rate(cfg.output_bytes, med(&p)),
        paired_ratio(&a, &p),
        "≈ 1.0",
    );
    Ok(())
}

/// The library's capture of `head -c SIZE /dev/zero` (1 MiB kept, every
/// byte counted) with and without `Sandbox::new()`, paired by round.
fn capture_row(cfg: &Config, t: &mut Table, dir: &Path) -> Result<(), String> {
    let size = cfg.output_bytes.to_string();
    let once = |sandboxed: bool| -> Result<Duration, String> {
        let mut c = corral::Command::new("head");
        c.args(["-c", &size, "/dev/zero"])
            .current_dir(dir)
            .containment(ContainmentChoice::Only(Mechanism::ProcessGroup))
            .capture_limit(1 << 20)
            .stderr(Output::null());
        if sandboxed {
            c.sandbox(Sandbox::new());
        }
        let t0 = Instant::now();
        let r = c.run().map_err(|e| e.full_message())?;
        let d = t0.elapsed();
        if !r.success() || r.stdout.total_bytes() != cfg.output_bytes {
            return Err(format!(
                "capture (sandbox {sandboxed}): {} with {} bytes",
                r.outcome_name(),
                r.stdout.total_bytes()
            ));
        }
        Ok(d)
    };
    let reps = if cfg.quick { 3 } else { 7 };
    let (mut a, mut p) = (Vec::new(), Vec::new());
    for round in 0..reps {
        if round % 2 == 0 {
            a.push(once(true)?);
            p.push(once(false)?);
        } else {
            p.push(once(false)?);
            a.push(once(true)?);
        }
    }
    let med = |v: &[Duration]| {
        let mut v = v.to_vec();
        v.sort();
        v[v.len() / 2]
    };
    let h = human(cfg.output_bytes);
    t.row(
        "9",
        format!(
            "library: capture of {h} (`head -c`) in `Sandbox::new()`, throughput (↑; ratio: median of paired rounds, {})",
            spread(&a, &p)
        ),
        fmt_rate(cfg.output_bytes, med(&a)),
        "the same capture without a sandbox (same rounds)",
        fmt_rate(cfg.output_bytes, med(&p)),
        paired_ratio(&a, &p),
        "≈ 1.0",
    );
    Ok(())
}
