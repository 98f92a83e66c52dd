//! Figure 5: many concurrent commands (`sleep`), each supervised to its end:
//! wall time, peak threads, peak descriptors and peak RSS of the
//! supervising process (a fresh process per measurement). corral uses its
//! async API on the same multi-thread tokio runtime as the tokio peer.
//!
//! Two parts. The sizes of `Config::scale_sizes` capture stdout and stderr
//! (corral in the process-group tier against tokio's `output()`). The big
//! row (`Config::scale_big`, 10,000 commands in full mode) sends both to
//! /dev/null, as a `sleep` needs no pipe, and runs corral in the
//! process-group tier and in its default tier (`auto`: a cgroup here)
//! against tokio's `status()`. Each variant of the big row is first probed
//! with 100 commands to learn the descriptors one command holds; a variant
//! that would not fit under this process's `RLIMIT_NOFILE` runs with the
//! largest count that fits, and a note says which limit stopped it.

use crate::output::{child, ChildResult};
use crate::report::{dur_ratio, fmt_dur, fmt_kib, ratio, Table};
use crate::Config;

/// From this many commands on, the thread-per-command peer is not run (it
/// would need this many threads of 8 MiB stacks).
const STD_MAX: usize = 2000;

/// Descriptors kept free besides the measured ones (the sampler's reads of
/// /proc, the runtime's, a keeper's socket, a transient open).
const SPARE_FDS: u64 = 32;

pub fn run(cfg: &Config, t: &mut Table) -> Result<(), String> {
    let (soft, hard) = crate::sys::nofile_limits();
    t.note(format!(
        "figure 5: RLIMIT_NOFILE of every runner: soft {soft}, hard {hard} (the bench raises the soft limit to the hard one with corral::process_wide::raise_nofile_limit; it tried a hard limit of {} first, which needs CAP_SYS_RESOURCE{}); /proc/sys/fs/nr_open {}",
        crate::sys::NOFILE_WANT,
        if hard >= crate::sys::NOFILE_WANT { ": granted" } else { ": refused here" },
        std::fs::read_to_string("/proc/sys/fs/nr_open").map_or("?".into(), |s| s.trim().to_string()),
    ));
    for &(n, secs) in &cfg.scale_sizes {
        captured(n, secs, t)?;
    }
    if let Some((asked, secs)) = cfg.scale_big {
        big(asked, secs, soft, t)?;
    }
    Ok(())
}

/// Descriptors per command while all were alive (the peak when that was
/// never sampled).
fn per_command(r: &ChildResult, n: usize) -> f64 {
    let at = if r.fds_all > 0 { r.fds_all } else { r.fds };
    at.saturating_sub(r.fds0) as f64 / n as f64
}

/// N commands with stdout and stderr captured.
fn captured(n: usize, secs: &str, t: &mut Table) -> Result<(), String> {
    let ns = n.to_string();
    let c = child(&["scale-corral", &ns, secs])?;
    let k = child(&["scale-tokio", &ns, secs])?;
    let what = |m: &str| format!("{n} × `sleep {secs}` concurrently, output captured: {m}");
    t.row(
        "5",
        what("wall time (↓)"),
        fmt_dur(c.wall),
        "tokio (multi-thread runtime), `output()` + `kill_on_drop`",
        fmt_dur(k.wall),
        dur_ratio(c.wall, k.wall),
        if n >= 1000 { "completes" } else { "" },
    );
    if n < STD_MAX {
        let s = child(&["scale-std", &ns, secs])?;
        t.row(
            "5",
            what("wall time (↓)"),
            fmt_dur(c.wall),
            "std thread per command, `output()` + `process_group(0)`",
            fmt_dur(s.wall),
            dur_ratio(c.wall, s.wall),
            "",
        );
    }
    common_rows(&what, &c, &k, t);
    Ok(())
}

fn common_rows(what: &dyn Fn(&str) -> String, c: &ChildResult, k: &ChildResult, t: &mut Table) {
    t.row(
        "5",
        what("peak threads (↓)"),
        format!("{} (async API)", c.threads),
        "tokio",
        k.threads.to_string(),
        ratio(c.threads as f64, k.threads as f64),
        "",
    );
    t.row(
        "5",
        what("peak descriptors per live command (↓)"),
        format!("{:.2} ({} peak, {} live)", per_live(c), c.fds, c.kids),
        "tokio",
        format!("{:.2} ({} peak, {} live)", per_live(k), k.fds, k.kids),
        ratio(per_live(c), per_live(k)),
        "",
    );
    t.row(
        "5",
        what("peak RSS of the supervisor (↓)"),
        fmt_kib(c.hwm),
        "tokio",
        fmt_kib(k.hwm),
        ratio(c.hwm as f64, k.hwm as f64),
        "",
    );
}

/// Descriptors over the starting ones, per live command at the peak.
fn per_live(r: &ChildResult) -> f64 {
    r.fds.saturating_sub(r.fds0) as f64 / r.kids.max(1) as f64
}

/// The big row: `asked` commands, stdout and stderr to /dev/null, or as
/// many as fit under the soft descriptor limit.
fn big(asked: usize, secs: &str, soft: u64, t: &mut Table) -> Result<(), String> {
    let variants: [(&str, &str, &str); 3] = [
        (
            "scale-corral",
            "process_group",
            "corral, process-group tier",
        ),
        ("scale-corral", "auto", "corral, default tier (auto)"),
        ("scale-tokio", "-", "tokio `status()`"),
    ];
    let mut results = Vec::new();
    for (mode, tier, name) in variants {
        let pn = asked.min(100);
        let probe = child(&[mode, &pn.to_string(), "1", tier, "null"])?;
        let per = per_command(&probe, pn).max(0.01);
        let room = soft.saturating_sub(probe.fds0 + SPARE_FDS);
        let fit = (room as f64 / per) as usize;
        let n = asked.min(fit).max(1);
        if n < asked {
            t.note(format!(
                "figure 5: {name}: {asked} commands hold {:.0} descriptors ({per:.2} per command, measured with {pn}) on top of the {} a runner starts with, more than RLIMIT_NOFILE {soft} (the hard limit; raising it needs CAP_SYS_RESOURCE): run with {n}, the most that fit with {SPARE_FDS} to spare",
                per * asked as f64,
                probe.fds0
            ));
        }
        let ns = n.to_string();
        let r = child(&[mode, &ns, secs, tier, "null"])?;
        if r.kids < n as u64 {
            t.note(format!(
                "figure 5: {name}: at most {} of the {n} commands were alive at once (the last ones started after the first had ended: spawning took longer than `sleep {secs}`)",
                r.kids
            ));
        }
        results.push((name, n, per, r));
    }
    let tokio = &results[2];
    for (name, n, per, r) in &results[..2] {
        let what = |m: &str| {
            format!(
                "{n} × `sleep {secs}`, output to /dev/null, {name} (tokio: {} commands): {m}",
                tokio.1
            )
        };
        t.row(
            "5",
            what("wall time (↓)"),
            fmt_dur(r.wall),
            "tokio (multi-thread runtime), `status()` + `kill_on_drop`",
            fmt_dur(tokio.3.wall),
            dur_ratio(r.wall, tokio.3.wall),
            if *n == asked { "completes" } else { "" },
        );
        t.row(
            "5",
            what("descriptors per command, all alive (↓)"),
            format!("{per:.2}"),
            "tokio",
            format!("{:.2}", tokio.2),
            ratio(*per, tokio.2),
            "",
        );
        common_rows(&what, r, &tokio.3, t);
    }
    Ok(())
}
