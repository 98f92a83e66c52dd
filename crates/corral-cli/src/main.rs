//! `corral`: run a command with a deadline and contain its whole process
//! tree. A thin shell over the `corral` library: argument parsing, output
//! wiring, report printing and exit codes.

mod args;
mod batch;
mod dispositions;
mod exit;
mod generate;
mod gnu;
mod json;
mod mcp;
mod outfile;
mod pty;
mod reference;
mod run;
#[cfg(unix)]
mod signals;
mod timeout;
mod tty;

use clap::Parser;

fn main() {
    // Invoked as `timeout` (a link to corral): GNU timeout's grammar.
    // `corral timeout ARGS...` too, before clap (which would take a `--`
    // that GNU's grammar must see).
    let mut argv = std::env::args_os();
    let argv0 = argv.next().unwrap_or_default();
    let mut rest = argv.peekable();
    if timeout::invoked_as_timeout(&argv0) {
        let code = timeout::main(argv0.to_string_lossy().into_owned(), rest.collect());
        std::process::exit(code);
    }
    if rest.peek().is_some_and(|a| a == "timeout") {
        rest.next();
        std::process::exit(timeout::main("timeout".into(), rest.collect()));
    }
    let cli = match args::Cli::try_parse() {
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
