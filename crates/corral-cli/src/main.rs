//! `corral`: run a command with a deadline and contain its whole process
//! tree. A thin shell over the `corral` library: argument parsing, output
//! wiring, report printing and exit codes.

mod args;
mod batch;
mod exit;
mod generate;
mod json;
mod reference;
mod run;
mod tty;

use clap::Parser;

fn main() {
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
            let _ = e.print();
            std::process::exit(code);
        }
    };
    let code = match cli.command {
        args::Cmd::Run(opts) => run::run(opts),
        args::Cmd::Batch(opts) => batch::main(opts),
        args::Cmd::Merge(opts) => batch::merge::main(opts),
        args::Cmd::Completions { shell } => generate::completions(shell),
        args::Cmd::Man => generate::man(),
    };
    std::process::exit(code);
}
