//! Figure 1: spawn + wait of `true`, per containment mechanism, against std
//! (plain and with a process group), tokio and process-wrap, from a small
//! parent and from a parent with a large resident set (fork copies page
//! tables; posix_spawn/vfork does not).

use std::io;
use std::process::Stdio;
use std::time::{Duration, Instant};

use corral::{ContainmentChoice, Mechanism, Output};

use crate::report::{dur_ratio, fmt_dur, Samples, Table};
use crate::Config;

type Run<'a> = Box<dyn FnMut() -> Result<(), String> + 'a>;

struct Variant<'a> {
    name: String,
    run: Run<'a>,
    samples: Samples,
    failed: Option<String>,
}

/// Runs every variant `iters` times, interleaved (round robin with a
/// rotating start) so that noise from the shared machine hits all alike. A
/// variant that has used up `budget` (a slow one, such as a fork from a big
/// parent) stops early once it has 20 samples.
fn measure(vs: &mut [Variant<'_>], iters: usize, warmup: usize, budget: Duration) {
    let n = vs.len();
    for _ in 0..warmup {
        for v in vs.iter_mut() {
            if v.failed.is_none() {
                if let Err(e) = (v.run)() {
                    v.failed = Some(e);
                }
            }
        }
    }
    for i in 0..iters {
        for k in 0..n {
            let v = &mut vs[(i + k) % n];
            if v.failed.is_some()
                || (v.samples.len() >= 20 && v.samples.0.iter().sum::<Duration>() > budget)
            {
                continue;
            }
            let t0 = Instant::now();
            let r = (v.run)();
            let d = t0.elapsed();
            match r {
                Ok(()) => v.samples.push(d),
                Err(e) => v.failed = Some(e),
            }
        }
    }
}

fn corral_true(mech: Mechanism, capture: bool) -> Result<(), String> {
    let mut c = corral::Command::new("true");
    c.containment(ContainmentChoice::Only(mech));
    if !capture {
        c.stdout(Output::null()).stderr(Output::null());
    }
    let r = c.run().map_err(|e| e.full_message())?;
    match r.exit_code() {
        Some(0) => Ok(()),
        _ => Err(format!("corral[{mech}] true: {} {:?}", r.outcome_name(), r)),
    }
}

fn std_cmd(group: bool) -> std::process::Command {
    use std::os::unix::process::CommandExt;
    let mut c = std::process::Command::new("true");
    c.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if group {
        c.process_group(0);
    }
    c
}

fn check(st: io::Result<std::process::ExitStatus>) -> Result<(), String> {
    match st {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(format!("true exited {s}")),
        Err(e) => Err(e.to_string()),
    }
}

/// Which corral mechanisms work here; the others are noted and skipped.
pub fn mechanisms(t: &mut Table) -> Vec<Mechanism> {
    let mut out = Vec::new();
    // `CORRAL_BENCH_TIERS=process_group,cgroup` measures some tiers only.
    let only = std::env::var("CORRAL_BENCH_TIERS").ok();
    for m in [
        Mechanism::ProcessGroup,
        Mechanism::Cgroup,
        Mechanism::PidNamespace,
    ] {
        if only
            .as_deref()
            .is_some_and(|o| !o.split(',').any(|n| n.trim() == m.name()))
        {
            t.note(format!("corral[{m}] skipped: not in CORRAL_BENCH_TIERS"));
            continue;
        }
        let probe = corral::Command::new("true")
            .containment(ContainmentChoice::Only(m))
            .stdout(Output::null())
            .stderr(Output::null())
            .run();
        match probe {
            Ok(r) if r.success() => out.push(m),
            Ok(r) => t.note(format!(
                "corral[{m}] skipped: probe run of `true` was {}",
                r.outcome_name()
            )),
            Err(corral::Error::Containment { reason, .. }) => {
                t.note(format!("corral[{m}] skipped: Error::Containment: {reason}"))
            }
            Err(e) => t.note(format!("corral[{m}] skipped: {}", e.full_message())),
        }
    }
    out
}

struct Result1 {
    by_name: Vec<(String, Samples, Option<String>)>,
}

impl Result1 {
    fn get(&self, name: &str) -> Option<&Samples> {
        self.by_name
            .iter()
            .find(|(n, s, f)| n == name && f.is_none() && !s.is_empty())
            .map(|(_, s, _)| s)
    }
}

fn one_parent(cfg: &Config, mechs: &[Mechanism]) -> Result1 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let mut vs: Vec<Variant<'_>> = Vec::new();
    let mut add = |name: &str, run: Run<'static>| {
        vs.push(Variant {
            name: name.into(),
            run,
            samples: Samples::default(),
            failed: None,
        })
    };
    for &m in mechs {
        add(
            &format!("corral[{m}]"),
            Box::new(move || corral_true(m, false)),
        );
    }
    add(
        "corral[process_group] capture",
        Box::new(|| corral_true(Mechanism::ProcessGroup, true)),
    );
    add("std", Box::new(|| check(std_cmd(false).status())));
    add("std pg", Box::new(|| check(std_cmd(true).status())));
    add(
        "std output()",
        Box::new(|| {
            let mut c = std::process::Command::new("true");
            c.stdin(Stdio::null());
            check(c.output().map(|o| o.status))
        }),
    );
    let mut vs = vs;
    vs.push(Variant {
        name: "tokio".into(),
        run: Box::new(|| {
            check(rt.block_on(async {
                tokio::process::Command::new("true")
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .kill_on_drop(true)
                    .status()
                    .await
            }))
        }),
        samples: Samples::default(),
        failed: None,
    });
    vs.push(Variant {
        name: "process-wrap".into(),
        run: Box::new(|| {
            use process_wrap::std::{CommandWrap, ProcessGroup};
            let mut c = CommandWrap::with_new("true", |c| {
                c.stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null());
            });
            c.wrap(ProcessGroup::leader());
            let r = c.spawn().and_then(|mut ch| ch.wait());
            check(r)
        }),
        samples: Samples::default(),
        failed: None,
    });
    let warmup = (cfg.spawn_iters / 20).max(2);
    let budget = if cfg.quick {
        Duration::from_millis(300)
    } else {
        Duration::from_secs(4)
    };
    measure(&mut vs, cfg.spawn_iters, warmup, budget);
    Result1 {
        by_name: vs
            .into_iter()
            .map(|v| (v.name, v.samples, v.failed))
            .collect(),
    }
}

fn rows(t: &mut Table, parent: &str, r: &Result1, mechs: &[Mechanism]) {
    for (name, _, failed) in &r.by_name {
        if let Some(e) = failed {
            t.note(format!("figure 1 ({parent}): {name} failed: {e}"));
        }
    }
    let peers: [(&str, &str); 4] = [
        ("std", "std `Command::status()`"),
        ("std pg", "std + `process_group(0)`"),
        ("tokio", "tokio::process + `kill_on_drop`"),
        ("process-wrap", "process-wrap std + `ProcessGroup`"),
    ];
    for &m in mechs {
        let cname = format!("corral[{m}]");
        let Some(c) = r.get(&cname) else { continue };
        for (pname, plabel) in peers {
            let Some(p) = r.get(pname) else { continue };
            t.row(
                "1",
                format!("spawn+wait `true`, {parent}, stdio null (↓)"),
                format!("{} ({m})", fmt_dur(c.median())),
                plabel,
                fmt_dur(p.median()),
                dur_ratio(c.median(), p.median()),
                match (pname, m) {
                    ("std pg", Mechanism::ProcessGroup) => "≤ 1.10",
                    ("std pg", _) => "≤ 1.25",
                    _ => "",
                },
            );
        }
    }
    if let (Some(c), Some(p)) = (
        r.get("corral[process_group] capture"),
        r.get("std output()"),
    ) {
        t.row(
            "1",
            format!("spawn+wait `true`, {parent}, stdout+stderr captured (↓)"),
            format!("{} (process_group)", fmt_dur(c.median())),
            "std `Command::output()`",
            fmt_dur(p.median()),
            dur_ratio(c.median(), p.median()),
            "",
        );
    }
}

/// What one /proc scan costs: the process-group tier's membership check
/// reads `/proc/<pid>/stat` of every process on the machine.
fn scan_cost(t: &mut Table, iters: usize) {
    let mut s = Samples::default();
    for _ in 0..iters {
        let t0 = Instant::now();
        std::hint::black_box(crate::sys::group_members_live(std::process::id()));
        s.push(t0.elapsed());
    }
    t.row(
        "1",
        format!(
            "(diagnostic) one /proc scan as the process-group tier's membership check does, {} processes on the machine",
            crate::sys::process_count()
        ),
        fmt_dur(s.median()),
        "—",
        "—",
        "—",
        "",
    );
}

pub fn run(cfg: &Config, t: &mut Table) -> Result<(), String> {
    scan_cost(t, (cfg.spawn_iters / 4).max(5));
    let mechs = mechanisms(t);
    if mechs.is_empty() {
        return Err("no corral containment mechanism works here".into());
    }
    let small = one_parent(cfg, &mechs);
    let small_rss = crate::sys::self_status("VmRSS").unwrap_or(0);
    rows(
        t,
        &format!("parent RSS {}", crate::report::fmt_kib(small_rss)),
        &small,
        &mechs,
    );

    // A big resident parent: allocate and touch every page.
    let mut big = vec![0u8; cfg.parent_bytes];
    for i in (0..big.len()).step_by(4096) {
        big[i] = 1;
    }
    std::hint::black_box(&mut big);
    let big_rss = crate::sys::self_status("VmRSS").unwrap_or(0);
    let large = one_parent(cfg, &mechs);
    drop(std::hint::black_box(big));
    let label = format!("parent RSS {}", crate::report::fmt_kib(big_rss));
    rows(t, &label, &large, &mechs);
    for &m in &mechs {
        let name = format!("corral[{m}]");
        if let (Some(b), Some(s)) = (large.get(&name), small.get(&name)) {
            t.row(
                "1",
                format!("spawn+wait `true`: {label} vs small parent (↓)"),
                format!("{} ({m})", fmt_dur(b.median())),
                format!("corral[{m}], small parent"),
                fmt_dur(s.median()),
                dur_ratio(b.median(), s.median()),
                "flat (≈ 1.0)",
            );
        }
    }
    Ok(())
}
