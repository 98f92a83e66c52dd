//! Figure 3: a grandchild keeps the captured stdout open after the root
//! exits. corral returns at root exit + wait delay (plus its overshoot,
//! measured here); the peers read to end-of-file, so they return only when
//! the holder exits (measured with a holder that lives a short, known time;
//! a daemon would hold them forever).

use std::process::Stdio;
use std::time::{Duration, Instant};

use corral::{ContainmentChoice, Mechanism, Outcome};

use crate::report::{fmt_dur, Samples, Table};
use crate::sys;
use crate::Config;

pub fn run(cfg: &Config, t: &mut Table) -> Result<(), String> {
    let delay = cfg.held_delay;
    let mut over = Samples::default();
    for _ in 0..cfg.held_iters {
        over.push(held_once(delay)?);
    }
    t.row(
        "3",
        format!(
            "held output: return − (root exit + wait_delay {}), p50 / p99 (↓)",
            fmt_dur(delay)
        ),
        format!("{} / {}", fmt_dur(over.median()), fmt_dur(over.p99())),
        "—",
        "—",
        "—",
        "≤ 10 ms",
    );
    peers(cfg, t, delay, over.median())
}

/// One corral run whose output a grandchild holds past the root's exit:
/// how much later than root exit + `delay` it returned (the holder killed).
fn held_once(delay: Duration) -> Result<Duration, String> {
    let t0 = Instant::now();
    let report = corral::Command::new("sh")
        .args(["-c", "sleep 100 & echo started; exit 0"])
        .containment(ContainmentChoice::Only(Mechanism::ProcessGroup))
        .wait_delay(delay)
        .run()
        .map_err(|e| e.full_message())?;
    let back = t0.elapsed();
    sys::track(report.pid);
    if report.outcome != Outcome::OutputHeld || !report.cleanup_errors.is_empty() {
        return Err(format!(
            "expected output_held, got {} ({:?})",
            report.outcome_name(),
            report.cleanup_errors
        ));
    }
    let live = sys::group_members_live(report.pid);
    if !live.is_empty() {
        return Err(format!("held output: holder survived: {live:?}"));
    }
    let root_exit = report
        .timings
        .root_exit
        .ok_or("no root exit time in the report")?;
    Ok(back.saturating_sub(root_exit + delay))
}

/// The peers, once each, with a holder of known lifetime: each reads to
/// end of file, so returns only when the holder exits (`corral_over`:
/// corral's median overshoot, for the comparison column).
fn peers(
    cfg: &Config,
    t: &mut Table,
    delay: Duration,
    corral_over: Duration,
) -> Result<(), String> {
    let holder = format!("sleep {} & echo started; exit 0", cfg.holder_secs);
    let life = Duration::from_secs_f64(cfg.holder_secs.parse::<f64>().unwrap_or(1.0));
    let mut peer = |name: &str, f: &mut dyn FnMut() -> std::io::Result<()>| {
        let t0 = Instant::now();
        let r = f();
        let d = t0.elapsed();
        let v = match r {
            Ok(()) => format!(
                "returns after {} = when the holder exits ({} here; never for a daemon)",
                fmt_dur(d),
                fmt_dur(life)
            ),
            Err(e) => format!("failed: {e}"),
        };
        t.row(
            "3",
            "held output: time to return (no wait_delay exists)",
            format!("root exit + {} + {}", fmt_dur(delay), fmt_dur(corral_over)),
            name,
            v,
            "— (peer unbounded)",
            "",
        );
    };
    peer("std `Command::output()`", &mut || {
        std::process::Command::new("sh")
            .args(["-c", &holder])
            .stdin(Stdio::null())
            .output()
            .map(|_| ())
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    peer("tokio `output()` + `kill_on_drop`", &mut || {
        rt.block_on(async {
            tokio::process::Command::new("sh")
                .args(["-c", &holder])
                .stdin(Stdio::null())
                .kill_on_drop(true)
                .output()
                .await
                .map(|_| ())
        })
    });
    peer("process-wrap `wait_with_output()`", &mut || {
        use process_wrap::std::{CommandWrap, ProcessGroup};
        let mut c = CommandWrap::with_new("sh", |c| {
            c.args(["-c", &holder])
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
        });
        c.wrap(ProcessGroup::leader());
        c.spawn()?.wait_with_output().map(|_| ())
    });
    Ok(())
}
