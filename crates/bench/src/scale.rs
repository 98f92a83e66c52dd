//! Figure 5: many concurrent commands (`sleep`), each supervised to its end
//! with output captured: wall time, peak threads and peak RSS of the
//! supervising process (a fresh process per measurement). corral uses its
//! async API on the same multi-thread tokio runtime as the tokio peer.

use crate::output::child;
use crate::report::{dur_ratio, fmt_dur, fmt_kib, ratio, Table};
use crate::Config;

/// From this many commands on, the thread-per-command peer is not run (it
/// would need this many threads of 8 MiB stacks).
const STD_MAX: usize = 2000;

pub fn run(cfg: &Config, t: &mut Table) -> Result<(), String> {
    t.note(format!(
        "figure 5: RLIMIT_NOFILE (soft) of every runner: {}",
        crate::sys::nofile()
    ));
    let nofile = crate::sys::nofile();
    // Descriptors per command, learned from the rows before (corral holds
    // more than tokio: its pidfd, a wake pipe, and the duplicates it
    // registers with the reactor).
    let mut per_cmd: Option<f64> = None;
    for &(asked, secs) in &cfg.scale_sizes {
        let mut n = asked;
        if let Some(p) = per_cmd {
            let fit = ((nofile as f64 * 0.9) / p) as usize;
            if fit < n {
                n = fit.max(1);
                t.note(format!(
                    "figure 5: {asked} commands need about {:.0} descriptors ({p:.1} per command in corral), more than RLIMIT_NOFILE {nofile} (the hard limit here; raising it needs CAP_SYS_RESOURCE): run with {n}",
                    p * asked as f64
                ));
            }
        }
        let ns = n.to_string();
        let c = child(&["scale-corral", &ns, secs])?;
        let k = child(&["scale-tokio", &ns, secs])?;
        if n >= 100 {
            per_cmd = Some(c.fds as f64 / n as f64);
        }
        let what = |m: &str| format!("{n} × `sleep {secs}` concurrently: {m}");
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
        } else {
            t.note(format!(
                "figure 5 N={n}: the std thread-per-command peer is not run from {STD_MAX} commands on"
            ));
        }
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
            what("peak open descriptors (↓)"),
            c.fds.to_string(),
            "tokio",
            k.fds.to_string(),
            ratio(c.fds as f64, k.fds as f64),
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
    Ok(())
}
