//! Figure 2: from the deadline to the runner returning with every process of
//! the tree dead, for trees of 1, 10 and 100 processes. corral (grace 0:
//! SIGKILL at once) against std with a watchdog thread that `killpg`s the
//! group at the deadline.
//!
//! Readiness: every process of the tree writes one byte to a FIFO once it
//! has started; a sample counts only if all N bytes arrived before the
//! deadline (otherwise it is discarded and the next deadline is later).

use std::process::Stdio;
use std::time::{Duration, Instant};

use corral::{ContainmentChoice, Mechanism, Outcome, Output};

use crate::report::{dur_ratio, fmt_dur, Samples, Table};
use crate::sys::{self, Fifo};
use crate::Config;

/// `$1` = FIFO, `$2` = N. The root and N-1 background sleeps each write a
/// byte once started; the root then becomes a sleep itself, so the tree is
/// exactly N processes in one group.
const TREE: &str = r#"exec 3>"$1"; i=1
while [ "$i" -lt "$2" ]; do (printf x >&3; exec sleep 100 3>&-) & i=$((i+1)); done
printf x >&3; exec sleep 100 3>&-"#;

struct Outcome2 {
    /// Deadline to the runner's return.
    ret: Duration,
    /// Deadline to every process dead (the peer only; corral returns after
    /// it confirmed that).
    dead: Option<Duration>,
    /// Spawn to all started.
    ready: Duration,
}

fn tree_args(fifo: &Fifo, n: usize) -> Vec<String> {
    vec![
        "-c".into(),
        TREE.into(),
        "sh".into(),
        fifo.path.display().to_string(),
        n.to_string(),
    ]
}

fn corral_once(
    fifo: &Fifo,
    n: usize,
    offset: Duration,
    mech: Mechanism,
) -> Result<Option<Outcome2>, String> {
    fifo.drain();
    let start = Instant::now();
    let deadline = start + offset;
    let running = corral::Command::new("sh")
        .args(tree_args(fifo, n))
        .deadline(deadline)
        .grace(Duration::ZERO)
        .containment(ContainmentChoice::Only(mech))
        .stdout(Output::null())
        .stderr(Output::null())
        .spawn()
        .map_err(|e| e.full_message())?;
    let pgid = running.id();
    sys::track(pgid);
    let ready = fifo.wait_bytes(n, deadline);
    let ready_at = Instant::now();
    let report = running.wait();
    let back = Instant::now();
    if report.outcome != Outcome::TimedOut || !report.cleanup_errors.is_empty() {
        return Err(format!(
            "corral[{mech}] N={n}: expected a clean timeout, got {} ({:?})",
            report.outcome_name(),
            report.cleanup_errors
        ));
    }
    if mech == Mechanism::ProcessGroup {
        let live = sys::group_members_live(pgid);
        if !live.is_empty() {
            return Err(format!(
                "corral[{mech}] N={n} returned with live members {live:?}"
            ));
        }
    }
    if !ready || ready_at > deadline {
        return Ok(None);
    }
    Ok(Some(Outcome2 {
        ret: back - deadline,
        dead: None,
        ready: ready_at - start,
    }))
}

fn std_once(fifo: &Fifo, n: usize, offset: Duration) -> Result<Option<Outcome2>, String> {
    use std::os::unix::process::CommandExt;
    fifo.drain();
    let start = Instant::now();
    let deadline = start + offset;
    let mut child = std::process::Command::new("sh")
        .args(tree_args(fifo, n))
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    let pgid = child.id();
    sys::track(pgid);
    // The usual watchdog: a thread that kills the group at the deadline.
    let watchdog = std::thread::spawn(move || {
        sys::sleep_until(deadline);
        sys::killpg_kill(pgid);
    });
    let ready = fifo.wait_bytes(n, deadline);
    let ready_at = Instant::now();
    // Untimed bookkeeping (before the deadline): the tree's pids, so that
    // "every process dead" can be observed for the peer too.
    let members: Vec<u32> = sys::group_members_live(pgid)
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    let scanned = Instant::now();
    let status = child.wait().map_err(|e| e.to_string())?;
    let back = Instant::now();
    let dead_at = sys::wait_all_dead(&members, Duration::from_secs(5));
    let _ = watchdog.join();
    if status.code().is_some() {
        return Err(format!("std N={n}: tree root exited by itself: {status}"));
    }
    let Some(dead_at) = dead_at else {
        return Err(format!("std N={n}: tree not dead 5 s after killpg"));
    };
    if !ready || scanned > deadline || members.len() < n {
        return Ok(None);
    }
    Ok(Some(Outcome2 {
        ret: back - deadline,
        dead: Some(dead_at.max(back) - deadline),
        ready: ready_at - start,
    }))
}

#[derive(Default)]
struct Series {
    ret: Samples,
    dead: Samples,
    discarded: usize,
}

fn pair(s: &Samples) -> String {
    format!("{} / {}", fmt_dur(s.median()), fmt_dur(s.p99()))
}

pub fn run(cfg: &Config, t: &mut Table) -> Result<(), String> {
    let mechs = crate::spawn::mechanisms(&mut Table::default());
    let fifo = Fifo::create(&cfg.tmp).map_err(|e| format!("fifo: {e}"))?;
    for &(n, iters) in &cfg.tree_sizes {
        // Deadline offset per runner: a margin over its slowest recent
        // start-up (the cgroup tier starts slower than the others).
        let mut est = vec![Duration::from_millis(5 + n as u64 / 2); mechs.len() + 1];
        let mut corral: Vec<Series> = mechs.iter().map(|_| Series::default()).collect();
        let mut std = Series::default();
        let mut attempts = 0;
        let done = |c: &[Series], s: &Series| {
            c.iter().all(|x| x.ret.len() >= iters) && s.ret.len() >= iters
        };
        while !done(&corral, &std) {
            attempts += 1;
            if attempts > iters * 3 + 10 {
                return Err(format!("N={n}: too many runs not ready by the deadline"));
            }
            let offset = |e: Duration| e * 3 / 2 + Duration::from_millis(3);
            let si = mechs.len();
            // Alternate which runner goes first.
            let std_first = attempts % 2 == 0;
            let run_std = |est: &mut Vec<Duration>, std: &mut Series| -> Result<(), String> {
                match std_once(&fifo, n, offset(est[si]))? {
                    Some(o) => {
                        std.ret.push(o.ret);
                        std.dead.push(o.dead.unwrap_or(o.ret));
                        est[si] = (est[si] * 7 / 8).max(o.ready);
                    }
                    None => {
                        std.discarded += 1;
                        est[si] *= 2;
                    }
                }
                Ok(())
            };
            if std_first {
                run_std(&mut est, &mut std)?;
            }
            for (i, &m) in mechs.iter().enumerate() {
                match corral_once(&fifo, n, offset(est[i]), m)? {
                    Some(o) => {
                        corral[i].ret.push(o.ret);
                        est[i] = (est[i] * 7 / 8).max(o.ready);
                    }
                    None => {
                        corral[i].discarded += 1;
                        est[i] *= 2;
                    }
                }
            }
            if !std_first {
                run_std(&mut est, &mut std)?;
            }
        }
        for (i, &m) in mechs.iter().enumerate() {
            let c = &corral[i];
            t.row(
                "2",
                format!("deadline → return, all {n} dead: p50 / p99 (↓)"),
                format!("{} ({m})", pair(&c.ret)),
                "std + watchdog `killpg(SIGKILL)`, until all dead",
                pair(&std.dead),
                format!(
                    "{} / {}",
                    dur_ratio(c.ret.median(), std.dead.median()),
                    dur_ratio(c.ret.p99(), std.dead.p99())
                ),
                if n >= 100 { "< 10 ms" } else { "" },
            );
            if c.discarded > 0 {
                t.note(format!(
                    "figure 2 N={n}: {} corral[{m}] run(s) discarded (tree not started by the deadline)",
                    c.discarded
                ));
            }
        }
        t.row(
            "2",
            format!("(reference) std + watchdog: `wait()` on the root returns, N={n}: p50 / p99"),
            "—",
            "std + watchdog; the rest of the tree may still be dying",
            pair(&std.ret),
            "—",
            "",
        );
        if std.discarded > 0 {
            t.note(format!(
                "figure 2 N={n}: {} std run(s) discarded (tree not started by the deadline)",
                std.discarded
            ));
        }
    }
    Ok(())
}
