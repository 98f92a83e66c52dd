//! The shell examples of the README and of the reference pages under docs/
//! ([`PAGES`]), run as written, so that they cannot drift.
//!
//! Every ```` ```console ```` block is a session: each `$ ` line runs in one
//! bash (so `set -o pipefail` carries over to the next line), and the lines
//! after it are its output, compared line by line (a `  # comment` after
//! an expected line is the page's explanation, not output). Every
//! ```` ```sh ```` block runs whole in bash with `pipefail` and must exit 0,
//! except the few listed in [`NOT_RUN`] with the reason. `corral` is the
//! binary under test, first on `PATH`; `HOME` and `TMPDIR` are a scratch
//! directory (nothing is written to the checkout or the real home); the
//! working directory is the repository's root, as the pages assume. The
//! Rust examples are compiled as doctests of the library (`ReadmeExamples`,
//! `LibraryDocExamples`).
#![cfg(target_os = "linux")]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use corral_testkit::Scratch;

const BIN: &str = env!("CARGO_BIN_EXE_corral");

/// The pages whose examples are run: the README and the reference pages it
/// links to. A page under docs/ with a `console` or `sh` block is either here
/// or in [`PAGES_NOT_RUN`] (see [`every_page_with_examples_is_run_or_says_why`]).
const PAGES: &[&str] = &[
    "README.md",
    "docs/cli.md",
    "docs/batch.md",
    "docs/mcp.md",
    "docs/library.md",
    "docs/python.md",
    "docs/node.md",
    "docs/containment.md",
    "docs/differences.md",
];

/// Pages under docs/ with `sh` blocks that this test does not run, and why.
const PAGES_NOT_RUN: &[(&str, &str)] = &[
    (
        "docs/FUZZING.md",
        "fuzz runs of minutes on the nightly toolchain with cargo-fuzz; .ci/run's fuzz smoke step runs every target",
    ),
    (
        "docs/BENCHMARKS.md",
        "benchmark runs of minutes; CI runs the benchmark in quick mode",
    ),
    (
        "docs/wine-probe.md",
        "a probe of Wine itself, for .ci/windows.sh's maintainers",
    ),
];

/// `sh` blocks that this test does not run: a text the block contains, and
/// why.
const NOT_RUN: &[(&str, &str)] = &[
    (
        "scripts/demo.sh",
        "the set-up itself: CI runs the demo and the tests",
    ),
    (
        "--partition 2/3",
        "one shard per machine of your own suite (suite.toml is yours)",
    ),
    (
        "maturin",
        "the Python package: .ci/python.sh builds and tests it",
    ),
    (
        "npm ci",
        "the Node.js package: .ci/node.sh installs its tools, builds and tests it",
    ),
    (
        "pip install corral",
        "installs from the package registries: scripts/dist-test.sh installs each artifact offline",
    ),
    (
        "releases/download",
        "downloads a release: scripts/dist-test.sh unpacks and runs the archives scripts/dist.sh makes",
    ),
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Each page of [`PAGES`]: its path and text.
fn pages() -> Vec<(&'static str, String)> {
    PAGES
        .iter()
        .map(|p| {
            let text =
                std::fs::read_to_string(root().join(p)).unwrap_or_else(|e| panic!("{p}: {e}"));
            (*p, text)
        })
        .collect()
}

/// The fenced blocks of every page of [`PAGES`]: (page, language, first
/// line number, text).
fn page_blocks() -> Vec<(&'static str, String, usize, String)> {
    pages()
        .into_iter()
        .flat_map(|(page, text)| {
            blocks(&text)
                .into_iter()
                .map(move |(lang, line_no, block)| (page, lang, line_no, block))
        })
        .collect()
}

/// The fenced blocks of a page: (language, first line number, text).
fn blocks(readme: &str) -> Vec<(String, usize, String)> {
    let mut out = Vec::new();
    let mut open: Option<(String, usize, String)> = None;
    for (i, line) in readme.lines().enumerate() {
        match (&mut open, line.strip_prefix("```")) {
            (None, Some(lang)) => open = Some((lang.trim().to_owned(), i + 2, String::new())),
            (Some(_), Some(_)) => out.extend(open.take()),
            (Some((_, _, text)), None) => {
                text.push_str(line);
                text.push('\n');
            }
            (None, None) => {}
        }
    }
    out
}

/// Runs `script` in bash the way a reader would at the repository's root,
/// bounded.
fn bash(scratch: &Scratch, script: &str) -> (i32, String, String) {
    let bin_dir = Path::new(BIN).parent().expect("bin dir");
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut child = Command::new("bash")
        .args(["--noprofile", "--norc", "-c", script])
        .current_dir(root())
        .env("PATH", path)
        .env("HOME", scratch.dir())
        .env("TMPDIR", scratch.dir())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("bash");
    let end = Instant::now() + Duration::from_secs(120);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > end {
            let _ = child.kill();
            panic!("example did not finish in 120 s:\n{script}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("output");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// An expected output line without the page's `  # explanation`.
fn expected(line: &str) -> &str {
    line.find("  #").map_or(line, |i| &line[..i]).trim_end()
}

const END: &str = "@@corral-readme-end@@";

#[test]
fn console_sessions_print_what_the_readme_shows() {
    let mut sessions = 0;
    for (page, lang, line_no, text) in page_blocks() {
        if lang != "console" {
            continue;
        }
        sessions += 1;
        let scratch = Scratch::new();
        // Each command, then a marker that keeps `$?` for the next one.
        let mut script = String::new();
        let mut want: Vec<Vec<&str>> = Vec::new();
        for line in text.lines() {
            if let Some(cmd) = line.strip_prefix("$ ") {
                script.push_str(&format!("{cmd}\n__s=$?; echo {END}; (exit $__s)\n"));
                want.push(Vec::new());
            } else if let Some(w) = want.last_mut() {
                w.push(expected(line));
            }
        }
        let (_, stdout, stderr) = bash(&scratch, &script);
        let got: Vec<Vec<&str>> = stdout
            .split(&format!("{END}\n"))
            .map(|o| o.lines().map(str::trim_end).collect())
            .collect();
        for (i, w) in want.iter().enumerate() {
            assert_eq!(
                got.get(i),
                Some(w),
                "{page} line {line_no}: the console session's command {} printed something else\n{text}\nstdout:\n{stdout}\nstderr:\n{stderr}",
                i + 1
            );
        }
    }
    assert!(
        sessions >= 5,
        "only {sessions} console sessions found in the pages"
    );
}

#[test]
fn sh_examples_run_as_written() {
    let mut ran = 0;
    for (page, lang, line_no, text) in page_blocks() {
        if lang != "sh" || NOT_RUN.iter().any(|(mark, _)| text.contains(mark)) {
            continue;
        }
        ran += 1;
        let scratch = Scratch::new();
        let (code, stdout, stderr) = bash(&scratch, &format!("set -o pipefail\n{text}"));
        assert!(
            code == 0 && !stderr.contains("command not found") && !stderr.contains("No such file"),
            "{page} line {line_no}: the example failed ({code}):\n{text}\nstdout:\n{stdout}\nstderr:\n{stderr}"
        );
    }
    assert!(ran >= 4, "only {ran} sh examples ran");
    // Nothing was written into the checkout.
    for litter in ["report.json", "junit.xml", "corral.1"] {
        assert!(
            !root().join(litter).exists(),
            "{litter} left in the repository's root"
        );
    }
}

#[test]
fn the_blocks_not_run_are_still_in_the_pages() {
    // A reason for a block that is gone would hide a new one.
    let sh: Vec<String> = pages()
        .iter()
        .flat_map(|(_, text)| blocks(text))
        .filter(|(lang, _, _)| lang == "sh")
        .map(|(_, _, t)| t)
        .collect();
    for (mark, why) in NOT_RUN {
        assert!(
            sh.iter().any(|t| t.contains(mark)),
            "no sh block contains {mark:?} any more ({why}): drop it from NOT_RUN"
        );
    }
}

/// A new page under docs/ with examples cannot be left out of the test: it is
/// in [`PAGES`] or in [`PAGES_NOT_RUN`] with the reason.
#[test]
fn every_page_with_examples_is_run_or_says_why() {
    let mut unlisted = Vec::new();
    let mut listed_without_examples = Vec::new();
    let entries = std::fs::read_dir(root().join("docs")).expect("docs/");
    for path in entries.flatten().map(|e| e.path()) {
        if path.extension().is_none_or(|x| x != "md") {
            continue;
        }
        let name = format!(
            "docs/{}",
            path.file_name().unwrap_or_default().to_string_lossy()
        );
        let text = std::fs::read_to_string(&path).expect("a page");
        let has_examples = blocks(&text)
            .iter()
            .any(|(lang, _, _)| lang == "console" || lang == "sh");
        let run = PAGES.contains(&name.as_str());
        let not_run = PAGES_NOT_RUN.iter().any(|(p, _)| *p == name);
        if has_examples && !run && !not_run {
            unlisted.push(name);
        } else if not_run && !has_examples {
            listed_without_examples.push(name);
        }
    }
    assert!(
        unlisted.is_empty(),
        "pages with console/sh examples that the test neither runs nor excuses: {unlisted:?}"
    );
    assert!(
        listed_without_examples.is_empty(),
        "PAGES_NOT_RUN names pages without examples (drop them): {listed_without_examples:?}"
    );
    for page in PAGES {
        assert!(
            root().join(page).is_file(),
            "{page} is gone: drop it from PAGES"
        );
    }
}

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() && p.file_name().is_some_and(|n| n != "target") {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The README says an ignored test always says why: no bare `#[ignore]`
/// in the workspace's tests (`#[needs(...)]` gives its own reason).
#[test]
fn every_ignored_test_says_why() {
    let mut files = Vec::new();
    rust_files(&root().join("crates"), &mut files);
    assert!(files.len() > 20, "the sources were not found");
    let mut bare = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        for (i, line) in text.lines().enumerate() {
            if line.trim() == "#[ignore]" {
                bare.push(format!("{}:{}", f.display(), i + 1));
            }
        }
    }
    assert!(bare.is_empty(), "#[ignore] without a reason: {bare:?}");
}
