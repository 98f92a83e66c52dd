//! `corral completions SHELL` and `corral man`: generated from the clap
//! definition, so they never drift from the real options.

use std::io::Write;

use clap::CommandFactory;

use crate::args::Cli;
use crate::exit;
use crate::reference;

/// Writes to stdout; a reader that went away (EPIPE) is not a failure,
/// anything else is corral's own (125).
fn emit(bytes: &[u8]) -> i32 {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => 0,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => 0,
        Err(e) => {
            eprintln!("corral: cannot write to stdout: {e}");
            exit::CORRAL_FAILED
        }
    }
}

/// The completion script for `shell`.
pub fn completions(shell: clap_complete::Shell) -> i32 {
    let mut cmd = Cli::command();
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut cmd, "corral", &mut buf);
    emit(&buf)
}

/// clap_mangen's preamble (defines the `Aq` string for apostrophes).
fn is_preamble(line: &str) -> bool {
    line.starts_with(".ie \\n(.g .ds Aq") || line.starts_with(".el .ds Aq")
}

/// The manual page of `corral`, with each visible subcommand as a section
/// of the same page (`.SH "CORRAL RUN"`, its synopsis, description and
/// options as subsections). Starts with `.TH`.
pub fn man() -> i32 {
    match render_man() {
        Ok(page) => emit(page.as_bytes()),
        Err(e) => {
            eprintln!("corral: cannot render the manual page: {e}");
            exit::CORRAL_FAILED
        }
    }
}

fn render_man() -> std::io::Result<String> {
    let cmd = Cli::command();
    let mut main = Vec::new();
    clap_mangen::Man::new(cmd.clone()).render(&mut main)?;
    let main = String::from_utf8_lossy(&main).into_owned();
    // `.TH` first, the preamble's string definitions right after it.
    let (preamble, body): (Vec<&str>, Vec<&str>) = main.lines().partition(|l| is_preamble(l));
    let mut page = String::new();
    let mut rest = body.into_iter();
    for line in rest.by_ref() {
        page.push_str(line);
        page.push('\n');
        if line.starts_with(".TH ") {
            break;
        }
    }
    for line in preamble.iter().take(2) {
        page.push_str(line);
        page.push('\n');
    }
    // clap's list of subcommands names pages of their own (corral-run(1)),
    // which do not exist: the subcommands are sections of this page, and
    // the long help (rendered below, laid out as in --help) is not filled.
    let mut skipping = false;
    for line in rest {
        if let Some(heading) = line.strip_prefix(".SH ") {
            skipping = matches!(heading, "SUBCOMMANDS" | "EXTRA");
        }
        if !skipping {
            page.push_str(line);
            page.push('\n');
        }
    }
    if let Some(text) = cmd.get_after_long_help() {
        page.push_str(&reference::help_to_roff(&text.to_string(), ".SH"));
    }
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let title = format!("corral {}", sub.get_name());
        let man = clap_mangen::Man::new(sub.clone().bin_name(title.clone()));
        let mut section = Vec::new();
        man.render_synopsis_section(&mut section)?;
        man.render_description_section(&mut section)?;
        man.render_options_section(&mut section)?;
        page.push_str(&format!(".SH \"{}\"\n", title.to_uppercase()));
        for line in String::from_utf8_lossy(&section).lines() {
            if is_preamble(line) {
                continue;
            }
            match line.strip_prefix(".SH ") {
                Some(heading) => page.push_str(&format!(".SS {heading}\n")),
                None => {
                    page.push_str(line);
                    page.push('\n');
                }
            }
        }
        // Exit status, signals, output, terminal, report, manifest keys,
        // environment: the same text as `corral SUB --help` ends with.
        if let Some(text) = sub.get_after_long_help() {
            page.push_str(&reference::help_to_roff(&text.to_string(), ".SS"));
        }
    }
    Ok(page)
}
