//! The reference text that `--help` and `corral man` share.
//!
//! The long help of each subcommand (its `after_long_help`: exit status,
//! signals, output, terminal, report, manifest keys, environment) is
//! written once, as plain text in the clap definition. `--help` prints it
//! as it is; [`help_to_roff`] turns the same text into sections of the
//! manual page, so the two cannot drift. The top-level page's own sections
//! ([`MAIN_AFTER_HELP`]) live here.

/// `corral --help`'s closing text, and the main page's closing sections.
pub const MAIN_AFTER_HELP: &str = "\
Reference: run (one command under a deadline), batch (the tasks of a
manifest, many at once), merge (the reports of a batch's shards) each have
their own --help; `corral man` prints all of it as one manual page.

Durations: 500ms, 10s, 1m30s, 2h; a bare number means seconds.

Exit status: see each command (run: the program's own status, 123 output
held, 124 timed out, 125 corral failed, 126/127 not executable/not found,
128+N signal N; batch and merge: 0 passed, 1 failed, 2 errored, 125 bad
manifest, usage or reports).

See also: timeout(1), the README and docs/ of corral's source repository.
";

/// A heading: a line that starts a block with `Title:` (a capital letter,
/// then words, digits, spaces, parentheses, dashes or slashes, and a colon
/// ending the title), with or without text after it on the same line.
fn heading(line: &str) -> Option<(&str, &str)> {
    let (title, rest) = line.split_once(':')?;
    let ok = title.chars().next().is_some_and(|c| c.is_ascii_uppercase())
        && title.len() <= 40
        && title
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || " ()-/".contains(c));
    (ok && (rest.is_empty() || rest.starts_with(' '))).then(|| (title, rest.trim_start()))
}

/// One line of text for roff: backslashes escaped, a leading `.` or `'`
/// kept literal, dashes as minus signs (so options are copied right).
fn roff_line(line: &str) -> String {
    let mut out = String::with_capacity(line.len() + 8);
    if line.starts_with('.') || line.starts_with('\'') {
        out.push_str("\\&");
    }
    for c in line.chars() {
        match c {
            '\\' => out.push_str("\\e"),
            '-' => out.push_str("\\-"),
            c => out.push(c),
        }
    }
    out
}

/// The long help text as manual sections: each block (lines up to a blank
/// line) that starts with `Title:` opens a section (`level`: `.SH` on the
/// main page, `.SS` inside a subcommand's section) named TITLE; every
/// line is kept as it is laid out in `--help` (no filling: the tables and
/// indented lists stay aligned).
pub fn help_to_roff(text: &str, level: &str) -> String {
    let mut out = String::new();
    let mut start_of_block = true;
    let mut open = false;
    for line in text.lines() {
        if line.trim().is_empty() {
            start_of_block = true;
            if open {
                out.push_str(".sp\n");
            }
            continue;
        }
        if start_of_block {
            if let Some((title, rest)) = heading(line) {
                if open {
                    out.push_str(".fi\n");
                }
                out.push_str(&format!(
                    "{level} \"{}\"\n.nf\n",
                    roff_line(&title.to_uppercase())
                ));
                open = true;
                start_of_block = false;
                if !rest.is_empty() {
                    // "Output: when ..." reads "When ..." under its heading.
                    let mut chars = rest.chars();
                    let first = chars.next().map(|c| c.to_ascii_uppercase());
                    let rest: String = first.into_iter().chain(chars).collect();
                    out.push_str(&roff_line(&rest));
                    out.push('\n');
                }
                continue;
            }
        }
        start_of_block = false;
        if !open {
            out.push_str(".nf\n");
            open = true;
        }
        out.push_str(&roff_line(line));
        out.push('\n');
    }
    if open {
        out.push_str(".fi\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_with_a_title_become_subsections_and_keep_their_layout() {
        let text = "Exit status:\n  0    ok\n  125  corral failed\n\nSignals: the -t option.\nmore\n\n.dot \\ line\n";
        let roff = help_to_roff(text, ".SS");
        assert_eq!(
            roff,
            ".SS \"EXIT STATUS\"\n.nf\n  0    ok\n  125  corral failed\n.sp\n.fi\n.SS \"SIGNALS\"\n.nf\nThe \\-t option.\nmore\n.sp\n\\&.dot \\e line\n.fi\n"
        );
        assert_eq!(
            heading("Report (--report): one"),
            Some(("Report (--report)", "one"))
        );
        assert_eq!(heading("  name   required"), None);
        assert_eq!(heading("a: lower case"), None);
    }
}
