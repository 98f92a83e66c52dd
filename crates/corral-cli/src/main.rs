//! `corral`: run a command with a deadline and contain its whole process
//! tree. A thin shell over the `corral` library: argument parsing, output
//! wiring, report printing and exit codes.

// Linux with glibc: `main` is the C entry point in `start.rs`, which does
// what std's start does that corral needs, less the main thread's stack
// guard.
#![cfg_attr(all(target_os = "linux", target_env = "gnu", not(test)), no_main)]

mod args;
mod batch;
mod dispositions;
mod duration;
mod exit;
mod generate;
mod gnu;
mod json;
mod mcp;
mod outfile;
mod pty;
mod reference;
mod run;
mod sandbox_flags;
#[cfg(unix)]
mod signals;
#[cfg(all(target_os = "linux", target_env = "gnu", not(test)))]
mod start;
#[cfg(all(test, unix))]
mod surfaces;
mod text;
mod timeout;
mod tty;

/// The only function of glibc's `libm` the executable calls: `pow`, from
/// indicatif's rate estimate, which only `corral batch` draws. Defined here
/// (Rust's port of musl's `pow`), the link leaves `libm.so.6` out, and no
/// start of `corral` maps, relocates and resolves a 900 KiB library for it
/// (issue #20, docs/BENCHMARKS.md). Nothing else in the process calls `pow`
/// through the dynamic linker: the executable's symbols are not exported.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[no_mangle]
pub extern "C" fn pow(x: f64, y: f64) -> f64 {
    libm::pow(x, y)
}

/// The entry point everywhere but Linux with glibc (there: `start::main`),
/// and of the unit tests' build.
#[cfg(any(not(all(target_os = "linux", target_env = "gnu")), test))]
fn main() {
    corral_main()
}

/// corral, from its arguments to its exit: never returns.
fn corral_main() -> ! {
    // Invoked as `timeout` (a link to corral): GNU timeout's grammar.
    // `corral timeout ARGS...` too, before clap (which would take a `--`
    // that GNU's grammar must see).
    let mut argv = std::env::args_os();
    let argv0 = argv.next().unwrap_or_default();
    let mut rest = argv.peekable();
    if runs_one_command_with_keeper(&argv0, std::env::args_os().skip(1)) {
        // One command, then exit (see `run::run`, which says so again):
        // the crash-safety keeper is cloned first thing, while this process
        // is smallest, so the clone copies the fewest page-table entries
        // and the host's writes after it meet the fewest copy-on-write
        // faults.
        corral::process_wide::one_shot_process();
        corral::process_wide::start_keeper();
    }
    if timeout::invoked_as_timeout(&argv0) {
        let code = timeout::main(argv0.to_string_lossy().into_owned(), rest.collect());
        std::process::exit(code);
    }
    if rest.peek().is_some_and(|a| a == "timeout") {
        rest.next();
        std::process::exit(timeout::main("timeout".into(), rest.collect()));
    }
    let cli = match args::Cli::parse_args() {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version go to stdout with 0; usage errors are corral's
            // own failure: 125, like coreutils `timeout`.
            let code = if e.use_stderr() {
                exit::CORRAL_FAILED
            } else {
                0
            };
            if e.kind() == clap::error::ErrorKind::UnknownArgument {
                args::print_unknown_argument(&e);
            } else {
                let _ = e.print();
            }
            std::process::exit(code);
        }
    };
    let code = match cli.command {
        args::Cmd::Run(opts) => run::run(opts),
        args::Cmd::Timeout { args } => timeout::main("timeout".into(), args),
        args::Cmd::InstallTimeout { dir } => timeout::install(&dir),
        args::Cmd::Batch(opts) => batch::main(opts),
        args::Cmd::Merge(opts) => batch::merge::main(opts),
        args::Cmd::Mcp(opts) => mcp::main(opts),
        args::Cmd::Completions { shell } => generate::completions(shell),
        args::Cmd::Man => generate::man(),
    };
    std::process::exit(code);
}

/// Whether this invocation will run one command in a tier that has a
/// crash-safety keeper (cgroup, subreaper, process group: anything but
/// `--containment pid-namespace`), decided from the raw arguments before
/// clap: the `timeout` personality (always `auto`), or `corral run` /
/// `corral timeout`. Only a guess made early: a wrong one costs a keeper
/// that is not used, or a keeper started later by `run::run`, never crash
/// safety.
fn runs_one_command_with_keeper(
    argv0: &std::ffi::OsStr,
    mut args: impl Iterator<Item = std::ffi::OsString>,
) -> bool {
    if timeout::invoked_as_timeout(argv0) {
        return true;
    }
    match args.next() {
        Some(a) if a == "timeout" => return true,
        Some(a) if a == "run" => {}
        _ => return false,
    }
    let mut containment_next = false;
    for a in args {
        if a == "--" {
            break;
        }
        if containment_next {
            return a != "pid-namespace";
        }
        if a == "--containment" {
            containment_next = true;
        } else if let Some(v) = a.to_str().and_then(|a| a.strip_prefix("--containment=")) {
            return v != "pid-namespace";
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::runs_one_command_with_keeper as keeper;
    use std::ffi::{OsStr, OsString};

    fn args(s: &str) -> impl Iterator<Item = OsString> + '_ {
        s.split_whitespace().map(OsString::from)
    }

    #[test]
    fn the_keeper_is_started_early_only_for_a_run_in_a_tier_that_has_one() {
        let corral = OsStr::new("/usr/bin/corral");
        assert!(keeper(corral, args("run -t 1s -- true")));
        assert!(keeper(corral, args("run --containment cgroup -- true")));
        assert!(keeper(corral, args("run --containment=subreaper -- x")));
        assert!(keeper(corral, args("timeout 1 true")));
        assert!(keeper(OsStr::new("/bin/timeout"), args("1 true")));
        // The PID-namespace tier has no keeper; a pid-namespace among the
        // command's own arguments is not corral's.
        assert!(!keeper(
            corral,
            args("run --containment pid-namespace -- x")
        ));
        assert!(!keeper(
            corral,
            args("run --containment=pid-namespace -- x")
        ));
        assert!(keeper(corral, args("run -- x --containment pid-namespace")));
        // Not one command: batch, mcp, help, version.
        assert!(!keeper(corral, args("batch m.toml")));
        assert!(!keeper(corral, args("mcp")));
        assert!(!keeper(corral, args("--version")));
        assert!(!keeper(corral, args("")));
    }
}
