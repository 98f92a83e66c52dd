//! Figure 5: many concurrent commands (`sleep`), each supervised to its end
//! with output captured: wall time, peak threads and peak RSS of the
//! supervising process (a fresh process per measurement). corral uses its
//! async API on the same multi-thread tokio runtime as the tokio peer.

use crate::output::child;
use crate::report::{dur_ratio, fmt_dur, fmt_kib, ratio, Table};
use crate::Config;

pub fn run(cfg: &Config, t: &mut Table) -> Result<(), String> {
    let secs = cfg.scale_sleep;
    for &n in &cfg.scale_sizes {
        let ns = n.to_string();
        let c = child(&["scale-corral", &ns, secs])?;
        let k = child(&["scale-tokio", &ns, secs])?;
        let s = child(&["scale-std", &ns, secs])?;
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
        t.row(
            "5",
            what("wall time (↓)"),
            fmt_dur(c.wall),
            "std thread per command, `output()` + `process_group(0)`",
            fmt_dur(s.wall),
            dur_ratio(c.wall, s.wall),
            "",
        );
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
