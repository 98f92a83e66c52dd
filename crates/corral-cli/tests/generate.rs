//! `corral completions SHELL` and `corral man`, generated from the clap
//! definition.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_corral");

fn output(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).output().expect("corral runs");
    assert!(out.status.success(), "corral {args:?}: {out:?}");
    assert!(
        out.stderr.is_empty(),
        "corral {args:?} wrote to stderr: {out:?}"
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

#[test]
fn bash_completions_know_the_options_and_subcommands() {
    let text = output(&["completions", "bash"]);
    assert!(text.contains("complete -F"), "not a bash completion script");
    assert!(text.contains("--timeout"), "no --timeout");
    assert!(text.contains("--wait-delay"), "no --wait-delay");
    for sub in ["run", "batch", "merge", "mcp"] {
        assert!(
            text.contains(&format!("corral__subcmd__{sub}")),
            "no subcommand {sub}"
        );
    }
}

#[test]
fn every_shell_gets_a_script() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let text = output(&["completions", shell]);
        assert!(text.contains("timeout"), "{shell}: no --timeout");
        assert!(text.contains("corral"), "{shell}: no corral");
    }
    let bad = Command::new(BIN)
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(
        bad.status.code(),
        Some(125),
        "unknown shell is a usage error"
    );
}

#[test]
fn man_page_is_roff_with_every_subcommand() {
    let text = output(&["man"]);
    assert!(
        text.starts_with(".TH corral 1"),
        "does not start with .TH: {}",
        &text[..80.min(text.len())]
    );
    for section in [
        ".SH NAME",
        ".SH SYNOPSIS",
        ".SH OPTIONS",
        ".SH \"CORRAL RUN\"",
        ".SH \"CORRAL BATCH\"",
        ".SH \"CORRAL MERGE\"",
        ".SH \"CORRAL MCP\"",
    ] {
        assert!(text.contains(section), "no {section}");
    }
    assert!(
        text.contains("\\-\\-timeout"),
        "no --timeout in the run options"
    );
    // Every line is a roff request/comment or text, never an unescaped
    // leading quote or period from a help text.
    for line in text.lines() {
        if let Some(req) = line.strip_prefix('.') {
            let name: String = req
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric())
                .collect();
            assert!(
                !name.is_empty() || req.starts_with('\\'),
                "bad request line {line:?}"
            );
        }
    }
    // Hidden from the main help, as generators for packagers.
    assert!(!output(&["--help"]).contains("completions"));
}

/// A man page line as text: roff escapes undone, requests dropped.
fn man_text(page: &str) -> Vec<String> {
    page.lines()
        .filter(|l| !l.starts_with('.') || l.starts_with("\\&"))
        .map(|l| {
            l.trim_start_matches("\\&")
                .replace("\\-", "-")
                .replace("\\e", "\\")
                .trim()
                .to_owned()
        })
        .collect()
}

/// The page is the whole reference: every line of each subcommand's long
/// help (exit status, signals, output, terminal, report, manifest keys,
/// environment) is on it, from the same text, and it names no manual page
/// that does not exist (clap's `corral-run(1)` and the like).
#[test]
fn man_page_carries_every_line_of_the_long_help() {
    let page = output(&["man"]);
    let text = man_text(&page);
    for (sub, first, sections) in [
        (
            "run",
            "Exit status:",
            &[
                "EXIT STATUS",
                "SIGNALS",
                "OUTPUT",
                "TERMINAL",
                "REPORT (\\-\\-REPORT)",
            ][..],
        ),
        (
            "batch",
            "Manifest (TOML):",
            &["MANIFEST (TOML)", "TASK KEYS", "ENVIRONMENT", "EXIT STATUS"][..],
        ),
    ] {
        for s in sections {
            assert!(page.contains(&format!(".SS \"{s}\"")), "no section {s}");
        }
        let help = output(&[sub, "--help"]);
        let long = &help[help.find(first).expect("long help")..];
        for line in long.lines().map(str::trim).filter(|l| !l.is_empty()) {
            // A heading's text is on the page under its heading, with a
            // capital letter.
            let line = match line.split_once(": ") {
                Some((title, rest)) if page.contains(&heading(title)) => capital(rest),
                _ => match line.strip_suffix(':') {
                    Some(title) if page.contains(&heading(title)) => continue,
                    _ => line.to_owned(),
                },
            };
            assert!(
                text.contains(&line),
                "corral {sub} --help line not in the man page: {line:?}"
            );
        }
    }
    for var in [
        "CORRAL_TASK",
        "CORRAL_RUN",
        "CORRAL_ATTEMPT",
        "CORRAL_WARMUP",
    ] {
        assert!(page.contains(var), "no {var}");
        assert!(
            output(&["batch", "--help"]).contains(var),
            "batch --help: no {var}"
        );
    }
    for line in page.lines() {
        assert!(
            !line.contains("corral\\-"),
            "names a page that does not exist: {line:?}"
        );
    }
}

fn heading(title: &str) -> String {
    format!(".SS \"{}\"", title.to_uppercase().replace('-', "\\-"))
}

fn capital(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_ascii_uppercase())
        .into_iter()
        .chain(c)
        .collect()
}
