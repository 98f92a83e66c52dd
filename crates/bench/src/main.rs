//! `corral-bench`: measures corral and its peers (`std::process`, tokio,
//! process-wrap, coreutils `timeout`) on the same work in the same run, and
//! prints one markdown table of medians and ratios (corral / peer).
//!
//! ```text
//! cargo run --release -p corral-bench            # full run (a few minutes)
//! cargo run --release -p corral-bench -- --quick # small sizes, a few seconds (CI)
//! ```
//!
//! Options: `--quick`, `--only 1,2,...` (figures to run), `--corral-bin
//! PATH` (the `corral` CLI for figures 4, 6, 7 and 9; by default the one beside
//! this binary, built first when run through cargo), `--static-corral-bin PATH`
//! (figure 6: a second `corral`, the static musl executable of
//! scripts/dist.sh, timed beside the first). It asserts nothing about
//! speed; it exits non-zero only when a measurement could not be made
//! correctly or a benchmark tree outlived its run.
//!
//! On Linux it measures in a child process and reaps the orphans the trees
//! leave, as init does on most machines (`reap_for`);
//! `CORRAL_BENCH_REAPED=0` measures in this process instead, with the
//! orphans left to the machine's init.

// Off Unix only the stub `main` is built.
#![cfg_attr(not(unix), allow(dead_code))]

#[cfg(unix)]
mod child;
#[cfg(unix)]
mod cli;
#[cfg(unix)]
mod deadline;
#[cfg(unix)]
mod held;
#[cfg(unix)]
mod output;
mod report;
#[cfg(target_os = "linux")]
mod sandbox;
#[cfg(unix)]
mod scale;
#[cfg(unix)]
mod session;
#[cfg(unix)]
mod spawn;
#[cfg(unix)]
mod sys;
#[cfg(unix)]
mod throughput;

fn main() {
    #[cfg(unix)]
    std::process::exit(unix_main());
    #[cfg(not(unix))]
    {
        eprintln!("corral-bench measures Unix process trees; it runs on Linux only");
        std::process::exit(2);
    }
}

/// What to run and how big.
#[cfg(unix)]
pub struct Config {
    pub quick: bool,
    pub only: Option<Vec<u8>>,
    pub corral_bin: Option<std::path::PathBuf>,
    /// Figure 6: a second `corral` executable (the static musl build of
    /// scripts/dist.sh) timed beside `corral_bin`, process-group tier.
    pub static_bin: Option<std::path::PathBuf>,
    pub tmp: std::path::PathBuf,
    /// Figure 1: timed runs per variant, and the big parent's size.
    pub spawn_iters: usize,
    pub parent_bytes: usize,
    /// Figure 2: tree sizes and timed runs per size.
    pub tree_sizes: Vec<(usize, usize)>,
    /// Figure 3: timed runs, the wait delay, and how long the peers'
    /// holder lives.
    pub held_iters: usize,
    pub held_delay: std::time::Duration,
    pub holder_secs: &'static str,
    /// Figure 4: bytes through each pipe, and repetitions.
    pub output_bytes: u64,
    pub output_reps: usize,
    /// Figure 5: concurrent command counts, each with how long its
    /// commands sleep (long enough for all to be started at once).
    pub scale_sizes: Vec<(usize, &'static str)>,
    /// Figure 5's big row (output to /dev/null, three variants): how many
    /// commands and how long they sleep (longer than it takes to start
    /// them all, so that all are alive at once).
    pub scale_big: Option<(usize, &'static str)>,
    /// Figure 6: timed CLI invocations per variant, and the batch's size.
    pub cli_iters: usize,
    pub batch_tasks: usize,
    /// Figure 7: `true` runs per batch.
    pub throughput_tasks: usize,
}

#[cfg(unix)]
impl Config {
    fn new(quick: bool) -> Config {
        use std::time::Duration;
        let tmp = std::env::temp_dir().join(format!("corral-bench-{}", std::process::id()));
        if quick {
            Config {
                quick,
                only: None,
                corral_bin: None,
                static_bin: None,
                tmp,
                spawn_iters: 25,
                parent_bytes: 128 << 20,
                tree_sizes: vec![(1, 5), (10, 5), (100, 3)],
                held_iters: 3,
                held_delay: Duration::from_millis(100),
                holder_secs: "0.3",
                output_bytes: 64 << 20,
                output_reps: 1,
                scale_sizes: vec![(1, "0.2"), (20, "0.2")],
                scale_big: Some((50, "0.5")),
                cli_iters: 15,
                batch_tasks: 50,
                throughput_tasks: 100,
            }
        } else {
            Config {
                quick,
                only: None,
                corral_bin: None,
                static_bin: None,
                tmp,
                spawn_iters: 400,
                parent_bytes: 1 << 30,
                tree_sizes: vec![(1, 150), (10, 150), (100, 100)],
                held_iters: 40,
                held_delay: Duration::from_millis(100),
                holder_secs: "1",
                output_bytes: 1 << 30,
                output_reps: 5,
                scale_sizes: vec![(1, "1"), (100, "1"), (1000, "1")],
                // 60 s: on a loaded 2-core machine starting 10,000 takes
                // longer than 30 s, and the first would end before the last
                // started (the peaks would not be of 10,000 live commands).
                scale_big: Some((10_000, "60")),
                cli_iters: 200,
                batch_tasks: 1000,
                throughput_tasks: 1000,
            }
        }
    }

    pub fn runs(&self, fig: u8) -> bool {
        self.only.as_ref().is_none_or(|o| o.contains(&fig))
    }
}

/// One figure: measures and adds its rows to the table.
#[cfg(unix)]
type Figure = fn(&Config, &mut report::Table) -> Result<(), String>;

#[cfg(unix)]
fn usage() -> ! {
    eprintln!("usage: corral-bench [--quick] [--only 1,2,3,4,5,6,7,8,9] [--corral-bin PATH] [--static-corral-bin PATH]");
    std::process::exit(2);
}

#[cfg(unix)]
fn unix_main() -> i32 {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--child") {
        return child::main(&args[1..]);
    }
    #[cfg(target_os = "linux")]
    if std::env::var_os(REAPED).is_none() {
        return reap_for(&args);
    }
    let mut quick = false;
    let mut only = None;
    let mut corral_bin = None;
    let mut static_bin = None;
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--quick" => quick = true,
            "--only" => {
                let v = it.next().unwrap_or_else(|| usage());
                let figs: Result<Vec<u8>, _> = v.split(',').map(|s| s.trim().parse()).collect();
                only = Some(figs.unwrap_or_else(|_| usage()));
            }
            "--corral-bin" => corral_bin = Some(it.next().unwrap_or_else(|| usage()).into()),
            "--static-corral-bin" => static_bin = Some(it.next().unwrap_or_else(|| usage()).into()),
            "-h" | "--help" => usage(),
            _ => usage(),
        }
    }
    let mut cfg = Config::new(quick);
    cfg.only = only;
    cfg.corral_bin = corral_bin;
    cfg.static_bin = static_bin;
    if let Err(e) = std::fs::create_dir_all(&cfg.tmp) {
        eprintln!("corral-bench: cannot create {}: {e}", cfg.tmp.display());
        return 1;
    }
    sys::raise_nofile();

    let started = std::time::Instant::now();
    let mut t = report::Table::default();
    let mut failed = false;
    let figs: &[(u8, Figure)] = &[
        (1, spawn::run),
        (2, deadline::run),
        (3, held::run),
        (4, output::run),
        (5, scale::run),
        (6, cli::run),
        (7, throughput::run),
        (8, session::run),
        #[cfg(target_os = "linux")]
        (9, sandbox::run),
    ];
    for &(n, f) in figs {
        if !cfg.runs(n) {
            continue;
        }
        let t0 = std::time::Instant::now();
        eprintln!("figure {n}...");
        if let Err(e) = f(&cfg, &mut t) {
            t.note(format!("figure {n} failed: {e}"));
            failed = true;
        }
        eprintln!("figure {n} took {:.1} s", t0.elapsed().as_secs_f64());
    }
    let leaks = sys::sweep_leaks();
    if !leaks.is_empty() {
        t.note(format!(
            "LEAK: {} benchmark process(es) outlived their run and were killed now: {leaks:?}",
            leaks.len()
        ));
        failed = true;
    }
    let _ = std::fs::remove_dir_all(&cfg.tmp);

    println!("{}", machine_line(quick));
    println!();
    print!("{}", t.render());
    eprintln!("total {:.1} s", started.elapsed().as_secs_f64());
    i32::from(failed)
}

/// Set in the measuring process started by [`reap_for`].
#[cfg(target_os = "linux")]
const REAPED: &str = "CORRAL_BENCH_REAPED";

/// Runs the benchmark in a child of this process and reaps, as a child
/// subreaper, every orphan it leaves, until that child exits; returns its
/// exit code. The trees measured leave orphans (the members whose root was
/// killed), and init is expected to reap them at once. Some container
/// inits do not (this project's CI sandbox: 1,800 zombies after one run of
/// figure 2), and every process on the machine makes each scan of /proc
/// slower (the process-group tier's, `ps`'s): the machine would drift from
/// one measurement to the next. Here, as on a machine with a reaping init,
/// the orphans go at once. Neither corral's runs nor the peers' are
/// touched: their roots are the measuring process's children, not ours.
#[cfg(target_os = "linux")]
fn reap_for(args: &[String]) -> i32 {
    // SAFETY: prctl(PR_SET_CHILD_SUBREAPER, 1) takes integer arguments only
    // and changes an attribute of this process alone.
    let sub = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    let exe = std::env::current_exe();
    let child = exe.and_then(|exe| {
        std::process::Command::new(exe)
            .args(args)
            .env(REAPED, if sub == 0 { "1" } else { "0" })
            .spawn()
    });
    let child = match child {
        Ok(c) => c,
        Err(e) => {
            eprintln!("corral-bench: cannot start the measuring process: {e}");
            return 1;
        }
    };
    let want = child.id() as libc::pid_t;
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes only to `status`, a live local.
        let pid = unsafe { libc::waitpid(-1, &mut status, 0) };
        if pid == want {
            return if libc::WIFEXITED(status) {
                libc::WEXITSTATUS(status)
            } else {
                128 + libc::WTERMSIG(status)
            };
        }
        if pid < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return 1;
        }
    }
}

/// nproc, memory, kernel and CPU model, for the table's header.
#[cfg(unix)]
fn machine_line(quick: bool) -> String {
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        })
        .map_or("?".into(), |kib| {
            format!("{:.1} GiB", kib as f64 / (1u64 << 20) as f64)
        });
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map_or("?".into(), |s| s.trim().to_string());
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|v| v.trim_start_matches([' ', '\t', ':']).trim().to_string())
        })
        .unwrap_or_else(|| "?".into());
    let load = std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into());
    format!(
        "corral-bench ({} mode): {nproc} CPUs ({cpu}), {mem} RAM, Linux {kernel}; at the end: {} processes on the machine, load average {load}",
        if quick { "quick" } else { "full" },
        sys::process_count()
    )
}
