//! `corral run`: wire corral's own streams to the child, pass signals on,
//! print the report, pick the exit code.

use std::io::Write;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::time::Instant;

use corral::{CancelToken, Command, ContainmentChoice, Input, Mechanism, Output};

use crate::args::{ContainmentArg, RunOpts};
use crate::exit;
use crate::json::JsonReport;

pub fn run(opts: RunOpts) -> i32 {
    let started = Instant::now();
    // corral is the only program in this process: it may always be the
    // subreaper (auto uses it where no cgroup can be had).
    #[cfg(target_os = "linux")]
    let _ = corral::enable_subreaper();
    let (program, args) = opts.command.split_first().expect("clap requires PROGRAM");
    let mut cmd = Command::new(program);
    cmd.args(args)
        .wait_delay(opts.wait_delay)
        .grace(opts.grace)
        .signal(opts.signal)
        .leftovers(opts.leftovers.into())
        .confirm_window(opts.confirm_window)
        .containment(match opts.containment {
            ContainmentArg::Auto => ContainmentChoice::Auto,
            ContainmentArg::Cgroup => ContainmentChoice::Only(Mechanism::Cgroup),
            ContainmentArg::ProcessGroup => ContainmentChoice::Only(Mechanism::ProcessGroup),
            ContainmentArg::Subreaper => ContainmentChoice::Only(Mechanism::Subreaper),
            ContainmentArg::PidNamespace => ContainmentChoice::Only(Mechanism::PidNamespace),
        })
        .stdin(Input::inherit())
        // Relayed output is written as it comes; only counts matter here.
        .capture_limit(0);
    if let Some(t) = opts.timeout {
        cmd.timeout(t);
    }
    if let Some(m) = opts.memory_max {
        cmd.memory_max(m);
    }
    if let Some(n) = opts.pids_max {
        cmd.pids_max(n);
    }
    let relayed = [wire(&mut cmd, 1), wire(&mut cmd, 2)];

    let token = CancelToken::new();
    cmd.cancel_token(&token);
    let received = Arc::new(AtomicI32::new(0));
    let _signals = pass_signals_on(&token, &received);

    let result = cmd.spawn().map(|running| {
        // A terminal stays a terminal: the tree gets the foreground while it
        // runs (only when corral itself has it), and gives it back after.
        let _terminal = crate::tty::hand_over(running.id());
        running.wait()
    });
    let recv = match received.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    };
    let (code, json) = match &result {
        Ok(report) => {
            let code = exit::for_report(report, recv);
            (code, JsonReport::from_report(report, recv, code, relayed))
        }
        Err(e) => {
            let code = exit::for_error(e, recv);
            eprintln!("corral: {e}");
            (
                code,
                JsonReport::from_error(e, recv, code, started.elapsed()),
            )
        }
    };
    if let Ok(report) = &result {
        if let Some(e) = &report.cleanup_error {
            eprintln!("corral: {e}");
        }
    }
    if let Some(path) = &opts.report {
        if let Err(e) = write_report(path, &json) {
            eprintln!("corral: cannot write report to {}: {e}", path.display());
            return exit::CORRAL_FAILED;
        }
    }
    code
}

fn write_report(path: &std::path::Path, json: &JsonReport) -> std::io::Result<()> {
    let mut text = serde_json::to_string(json).map_err(std::io::Error::other)?;
    text.push('\n');
    if path.as_os_str() == "-" {
        std::io::stderr().write_all(text.as_bytes())
    } else {
        std::fs::write(path, text)
    }
}

/// Hands corral's own stream `fd` to the child when it is a terminal or a
/// file (a terminal stays a terminal), and relays through corral when it is
/// a pipe or socket (so corral's caller sees EOF in bounded time, whatever
/// the tree does with its copy). Returns whether it relays.
#[cfg(unix)]
fn wire(cmd: &mut Command, fd: i32) -> bool {
    use std::os::fd::{AsFd, BorrowedFd};
    // SAFETY: fds 1 and 2 are open for the life of the process (a closed one
    // makes fstat fail, which is handled); the borrow does not outlive this
    // function except through an owned duplicate.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    let relay = match rustix::fs::fstat(borrowed) {
        Ok(st) => {
            let ft = rustix::fs::FileType::from_raw_mode(st.st_mode);
            matches!(
                ft,
                rustix::fs::FileType::Fifo | rustix::fs::FileType::Socket
            )
        }
        Err(_) => false,
    };
    let output = if relay {
        match borrowed.as_fd().try_clone_to_owned() {
            Ok(owned) => Output::relay_file(std::fs::File::from(owned)),
            Err(_) => Output::inherit(),
        }
    } else {
        Output::inherit()
    };
    if fd == 1 {
        cmd.stdout(output);
    } else {
        cmd.stderr(output);
    }
    relay
}

#[cfg(not(unix))]
fn wire(cmd: &mut Command, fd: i32) -> bool {
    if fd == 1 {
        cmd.stdout(Output::inherit());
    } else {
        cmd.stderr(Output::inherit());
    }
    false
}

/// SIGINT, SIGTERM and SIGHUP sent to corral are passed on to the tree
/// (then the grace rule applies), and corral exits 128+N.
#[cfg(unix)]
fn pass_signals_on(
    token: &CancelToken,
    received: &Arc<AtomicI32>,
) -> Option<std::thread::JoinHandle<()>> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]).ok()?;
    let token = token.clone();
    let received = received.clone();
    std::thread::Builder::new()
        .name("corral-signals".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                let _ = received.compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst);
                match corral::Signal::from_raw(sig) {
                    Some(s) => token.cancel_with(s),
                    None => token.cancel(),
                }
            }
        })
        .ok()
}

#[cfg(not(unix))]
fn pass_signals_on(
    _token: &CancelToken,
    _received: &Arc<AtomicI32>,
) -> Option<std::thread::JoinHandle<()>> {
    None
}
