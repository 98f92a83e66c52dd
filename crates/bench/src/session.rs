//! Figure 8: persistent shell sessions. A trivial command (`true`) in a warm
//! `corral::Session` (each command a fresh bash in its own contained tree,
//! the shell's state carried over through files), against a fresh `corral
//! run -- true` (the command line, per invocation) and against a
//! marker-based bash session driven from Python (one long-lived `bash`,
//! the command written to its stdin followed by `echo MARKER $?`, stdout
//! read until the marker line: how pexpect-style agent shells work, here
//! with plain subprocess pipes), interleaved in one run. The session's
//! commands are timed after a pause each (the caller's turn, during which
//! the next command's shell starts ahead) and back to back.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::report::{dur_ratio, fmt_dur, Samples, Table};
use crate::Config;

/// The caller's turn between two session commands in the main row.
const PAUSE: Duration = Duration::from_millis(20);

/// The marker-based driver: N commands, one time per line (seconds).
const MARKER_DRIVER: &str = r#"
import subprocess, sys, time
n = int(sys.argv[1])
p = subprocess.Popen(["bash", "--noprofile", "--norc"], stdin=subprocess.PIPE,
                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, bufsize=0)
marker = b"__CORRAL_BENCH_DONE__"
def run(cmd):
    p.stdin.write(cmd + b"\necho " + marker + b" $?\n")
    buf = b""
    while True:
        chunk = p.stdout.read1(65536) if hasattr(p.stdout, "read1") else p.stdout.read(1)
        if not chunk:
            raise SystemExit("bash ended")
        buf += chunk
        i = buf.find(marker)
        if i >= 0 and buf.endswith(b"\n"):
            return buf[:i]
for _ in range(3):
    run(b"true")
for _ in range(n):
    t = time.perf_counter()
    run(b"true")
    print(time.perf_counter() - t)
p.stdin.close()
p.wait()
"#;

fn python() -> Option<&'static str> {
    ["python3", "python"].into_iter().find(|p| {
        Command::new(p)
            .arg("-c")
            .arg("pass")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

fn marker_session(py: &str, n: usize) -> Result<Samples, String> {
    let out = Command::new(py)
        .arg("-c")
        .arg(MARKER_DRIVER)
        .arg(n.to_string())
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{py}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "the marker-based driver failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let mut s = Samples::default();
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        let secs: f64 = l.trim().parse().map_err(|e| format!("{l:?}: {e}"))?;
        s.push(Duration::from_secs_f64(secs));
    }
    Ok(s)
}

pub fn run(cfg: &Config, t: &mut Table) -> Result<(), String> {
    let n = cfg.cli_iters;
    let session = corral::Session::start(&corral::SessionOptions::new())
        .map_err(|e| format!("session: {e}"))?;
    let mut opts = corral::RunOptions::new();
    opts.timeout(Duration::from_secs(10));
    let one = |s: &corral::Session| -> Result<Duration, String> {
        let t0 = Instant::now();
        let r = s.run("true", &opts).map_err(|e| e.to_string())?;
        let d = t0.elapsed();
        if r.outcome != corral::Outcome::Exited(0) {
            return Err(format!("session run: {:?}", r.report));
        }
        Ok(d)
    };
    for _ in 0..3 {
        one(&session)?;
    }
    let bin = crate::output::corral_cli(cfg, t);
    let fresh_argv: Option<Vec<String>> = bin.map(|b| {
        ["run", "--timeout", "10s", "--", "true"].iter().fold(
            vec![b.display().to_string()],
            |mut v, a| {
                v.push((*a).to_owned());
                v
            },
        )
    });
    let (mut warm, mut fresh) = (Samples::default(), Samples::default());
    let mut back_to_back = Samples::default();
    // Interleaved: a batch of session runs after a pause each (the caller's
    // turn between two commands, not timed: an agent reads the reply and
    // decides, milliseconds to seconds), a batch back to back, then as many
    // fresh runs.
    let rounds = 5;
    for _ in 0..rounds {
        for _ in 0..n / rounds {
            std::thread::sleep(PAUSE);
            warm.push(one(&session)?);
        }
        for _ in 0..n / rounds {
            back_to_back.push(one(&session)?);
        }
        if let Some(argv) = &fresh_argv {
            for _ in 0..n / rounds {
                fresh.push(crate::cli::invoke(argv)?);
            }
        }
    }
    let marker = match python() {
        Some(py) => Some(marker_session(py, n)?),
        None => {
            t.note("figure 8: no python3 here, the marker-based session is not measured");
            None
        }
    };
    let what = format!(
        "`true` in a warm `corral::Session`, {} ms between commands, median of {} (p99 {})",
        PAUSE.as_millis(),
        warm.len(),
        fmt_dur(warm.p99())
    );
    if !fresh.is_empty() {
        t.row(
            "8",
            what.clone(),
            fmt_dur(warm.median()),
            "a fresh `corral run --timeout 10s -- true` (CLI, per invocation)",
            fmt_dur(fresh.median()),
            dur_ratio(warm.median(), fresh.median()),
            "≤ 2 ms and < 1",
        );
    }
    if !fresh.is_empty() {
        t.row(
            "8",
            format!(
                "the same, back to back (no pause: the next shell's start is not hidden), median of {} (p99 {})",
                back_to_back.len(),
                fmt_dur(back_to_back.p99())
            ),
            fmt_dur(back_to_back.median()),
            "a fresh `corral run --timeout 10s -- true` (same run)",
            fmt_dur(fresh.median()),
            dur_ratio(back_to_back.median(), fresh.median()),
            "— (a caller has a turn between commands)",
        );
    }
    if let Some(m) = marker {
        t.row(
            "8",
            what,
            fmt_dur(warm.median()),
            format!(
                "marker-based bash session driven from Python (pexpect-style, pipes), median of {}",
                m.len()
            ),
            fmt_dur(m.median()),
            dur_ratio(warm.median(), m.median()),
            "— (no containment, no per-command limits)",
        );
    }
    session.close();
    Ok(())
}
