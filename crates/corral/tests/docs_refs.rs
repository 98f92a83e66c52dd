//! The docs name only what exists.
//!
//! docs/INVARIANTS.md names, for each invariant, the tests that prove it:
//! every test (and helper) it names must exist in the workspace's sources,
//! so that renaming or deleting a test fails here instead of leaving the
//! table pointing at nothing. The README and the pages under docs/ name
//! source files (`sys/linux_spawn/raw.rs`, `contain/cgroup/`, and
//! `child.rs::apply_setup` with an item): each must exist (see
//! [`every_source_path_the_docs_name_exists`]); every relative link of the
//! README and of docs/ leads somewhere
//! ([`every_relative_link_of_the_docs_exists`]).
//!
//! What the "proven by" column may name, and where it is looked for:
//! * `FILE::NAME` (also `FILE::MODULE::NAME`): a test binary
//!   `crates/*/tests/FILE.rs`; NAME in it or in the shared modules of its
//!   crate's `tests/` folders (the scenario and invariant matrices);
//! * `a::b::tests::NAME`: a unit test, in the source file whose path ends
//!   with `a/b.rs` (or `a/b/mod.rs`) under some `crates/*/src`, or with
//!   `a.rs` when `b` is a module inline in it; a path that
//!   starts with a crate name (`corral_testkit::...`) is taken from that
//!   crate's `src`;
//! * `FILE.py::NAME` and `::NAME` (the file of the previous name): a Python
//!   test; a `*.test.js` file: a Node test file;
//! * a bare `snake_case_name` of three words or more: a test, a rule or a
//!   helper named in some Rust source;
//! * `{a,b}` stands for each of its words, `*` for every test of its place
//!   (which must exist); names abbreviated with `...` are not checked.

use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn files_under(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let skipped = path.ends_with("node_modules") || path.ends_with("target");
        if path.is_dir() && !skipped {
            files_under(&path, ext, out);
        } else if path.extension().is_some_and(|e| e == ext) {
            out.push(path);
        }
    }
}

/// The crates of the workspace (folders of `crates/`).
fn crates() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = fs::read_dir(root().join("crates"))
        .expect("crates/")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("Cargo.toml").is_file())
        .collect();
    out.sort();
    out
}

/// The backquoted spans of the last column of every table row.
fn proven_by(doc: &str) -> Vec<String> {
    let mut spans = Vec::new();
    for line in doc.lines().filter(|l| l.starts_with('|')) {
        if line.starts_with("|---") || line.starts_with("| invariant") {
            continue;
        }
        let cells: Vec<&str> = line.trim_end().trim_end_matches('|').split('|').collect();
        let last = cells.last().copied().unwrap_or("");
        spans.extend(last.split('`').skip(1).step_by(2).map(str::to_owned));
    }
    spans
}

/// `a_{b,c}_d::{e, f}` → `a_b_d::e`, `a_b_d::f`, `a_c_d::e`, `a_c_d::f`.
fn expand(span: &str) -> Vec<String> {
    let Some(open) = span.find('{') else {
        return vec![span.to_owned()];
    };
    let close = open + span[open..].find('}').expect("unbalanced {");
    let (head, tail) = (&span[..open], &span[close + 1..]);
    span[open + 1..close]
        .split(',')
        .flat_map(|alt| expand(&format!("{head}{}{tail}", alt.trim())))
        .collect()
}

fn is_ident(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && !s.starts_with(|c: char| c.is_ascii_digit())
}

fn has_word(text: &str, word: &str) -> bool {
    text.match_indices(word).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        let part = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        !part(before) && !part(after)
    })
}

fn read_all(files: &[PathBuf]) -> String {
    files
        .iter()
        .map(|f| fs::read_to_string(f).unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The files where a Rust path's last segment is looked for (empty: its
/// place does not exist).
fn scope_of(segments: &[&str]) -> Vec<PathBuf> {
    let first = segments[0];
    let mut scope = Vec::new();
    for krate in crates() {
        let file = krate.join("tests").join(format!("{first}.rs"));
        let folder = krate.join("tests").join(first).join("mod.rs");
        for binary in [file, folder].into_iter().filter(|f| f.is_file()) {
            scope.push(binary);
            // The shared modules of the crate's test binaries.
            if let Ok(entries) = fs::read_dir(krate.join("tests")) {
                for dir in entries.flatten().map(|e| e.path()).filter(|p| p.is_dir()) {
                    files_under(&dir, "rs", &mut scope);
                }
            }
        }
    }
    if !scope.is_empty() {
        return scope;
    }
    // A module path: up to `tests` (or the item's own name).
    let end = segments
        .iter()
        .position(|s| *s == "tests")
        .unwrap_or(segments.len() - 1);
    let mut module = &segments[..end];
    let mut src_roots: Vec<PathBuf> = crates().iter().map(|c| c.join("src")).collect();
    if let Some(krate) = crates().into_iter().find(|c| {
        let name = fs::read_to_string(c.join("Cargo.toml")).unwrap_or_default();
        name.contains(&format!("name = \"{}\"", first.replace('_', "-")))
    }) {
        src_roots = vec![krate.join("src")];
        module = &module[1..];
    }
    let mut files = Vec::new();
    for src in &src_roots {
        files_under(src, "rs", &mut files);
    }
    if module.is_empty() {
        return src_roots.iter().map(|s| s.join("lib.rs")).collect();
    }
    // The longest prefix of the module path that is a file; the rest are
    // modules inline in it (`process_group::pins::tests`).
    for len in (1..=module.len()).rev() {
        let as_file = format!("/{}.rs", module[..len].join("/"));
        let as_mod = format!("/{}/mod.rs", module[..len].join("/"));
        let found: Vec<PathBuf> = files
            .iter()
            .filter(|f| {
                let f = f.to_string_lossy().replace('\\', "/");
                f.ends_with(&as_file) || f.ends_with(&as_mod)
            })
            .filter(|f| {
                let text = fs::read_to_string(f).unwrap_or_default();
                module[len..]
                    .iter()
                    .all(|inner| has_word(&text, &format!("mod {inner}")))
            })
            .cloned()
            .collect();
        if !found.is_empty() {
            return found;
        }
    }
    Vec::new()
}

/// What is wrong with one name of the table, if anything.
fn check_rust_path(path: &str) -> Option<String> {
    let segments: Vec<&str> = path.split("::").collect();
    let scope = scope_of(&segments);
    if scope.is_empty() {
        return Some(format!(
            "`{path}`: no test binary or module `{}`",
            segments[0]
        ));
    }
    let text = read_all(&scope);
    let name = *segments.last().expect("a path has segments");
    if segments.contains(&"tests") && !text.contains("mod tests") {
        return Some(format!(
            "`{path}`: {} has no `mod tests`",
            scope[0].display()
        ));
    }
    if name != "*" && !has_word(&text, name) {
        return Some(format!("`{path}`: no `{name}` in {scope:?}"));
    }
    None
}

fn check_python(file: &str, name: &str) -> Option<String> {
    let base = file.rsplit('/').next().unwrap_or(file);
    let path = root().join("crates/corral-py/tests").join(base);
    let text = fs::read_to_string(&path).unwrap_or_default();
    if text.is_empty() {
        return Some(format!("`{file}`: no {}", path.display()));
    }
    if !text.contains(&format!("def {name}(")) {
        return Some(format!(
            "`{file}::{name}`: no `def {name}` in {}",
            path.display()
        ));
    }
    None
}

#[test]
fn every_test_named_in_invariants_md_exists() {
    let doc = fs::read_to_string(root().join("docs/INVARIANTS.md")).expect("docs/INVARIANTS.md");
    let mut rust_words = String::new();
    for krate in crates() {
        let mut files = Vec::new();
        files_under(&krate, "rs", &mut files);
        rust_words.push_str(&read_all(&files));
    }
    let mut checked = 0;
    let mut wrong = Vec::new();
    let mut python_file = None::<String>;
    for span in proven_by(&doc) {
        if span.contains("...") {
            continue;
        }
        for name in expand(&span) {
            let problem = if let Some((file, test)) = name.split_once(".py::") {
                python_file = Some(format!("{file}.py"));
                check_python(&format!("{file}.py"), test)
            } else if let Some(test) = name.strip_prefix("::") {
                let file = python_file.clone().expect("`::NAME` after a Python test");
                check_python(&file, test)
            } else if name.ends_with(".test.js") {
                let base = name.rsplit('/').next().unwrap_or(&name);
                let path = root().join("crates/corral-node/test").join(base);
                (!path.is_file()).then(|| format!("`{name}`: no {}", path.display()))
            } else if name.contains("::") && name.split("::").all(|s| s == "*" || is_ident(s)) {
                check_rust_path(&name)
            } else if is_ident(&name) && name.matches('_').count() >= 2 {
                (!has_word(&rust_words, &name)).then(|| format!("`{name}`: in no Rust source"))
            } else {
                continue;
            };
            checked += 1;
            wrong.extend(problem);
        }
    }
    assert!(
        checked > 200,
        "only {checked} names checked: is the table still there?"
    );
    assert!(
        wrong.is_empty(),
        "docs/INVARIANTS.md names what does not exist:\n{}",
        wrong.join("\n")
    );
}

/// The checker itself: a name that exists passes, one that does not fails.
#[test]
fn the_check_tells_a_missing_test_from_a_present_one() {
    assert!(check_rust_path("layers::the_checker_is_not_this_name").is_some());
    assert_eq!(
        check_rust_path("docs_refs::every_test_named_in_invariants_md_exists"),
        None
    );
    assert_eq!(check_rust_path("lifecycle::phase::tests::*"), None);
    assert!(check_rust_path("lifecycle::no_such_module::tests::x").is_some());
    assert!(check_rust_path("no_such_binary::x").is_some());
    assert_eq!(
        check_rust_path("contain::process_group::pins::tests::*"),
        None
    );
    assert!(check_rust_path("process_group::no_such_inline::tests::*").is_some());
    assert_eq!(
        expand("a_{b,c}::{d, e}"),
        ["a_b::d", "a_b::e", "a_c::d", "a_c::e"]
    );
    assert!(check_python("test_run.py", "no_such_test").is_some());
}

/// Every file of the repository (`node_modules` and `target` left out).
fn repo_files() -> Vec<String> {
    let mut out = Vec::new();
    for top in ["crates", ".ci", "docs", "scripts", "fuzz"] {
        let mut files = Vec::new();
        for ext in ["rs", "sh", "py", "js", "md", "toml", "json"] {
            files_under(&root().join(top), ext, &mut files);
        }
        out.extend(files.iter().map(|f| {
            let rel = f.strip_prefix(root()).unwrap_or(f);
            format!("/{}", rel.to_string_lossy().replace('\\', "/"))
        }));
    }
    out
}

/// What is wrong with a source path named in the docs (`a/b.rs`, `a/`,
/// `a/b.rs::item`), if anything: no file ends with it, or (with an item)
/// none of those files names the item.
fn check_source_path(files: &[String], span: &str) -> Option<String> {
    let (path, item) = match span.split_once("::") {
        Some((p, i)) => (p, Some(i)),
        None => (span, None),
    };
    let matches: Vec<&String> = if let Some(dir) = path.strip_suffix('/') {
        let inside = format!("/{dir}/");
        files.iter().filter(|f| f.contains(&inside)).collect()
    } else {
        let tail = format!("/{path}");
        files.iter().filter(|f| f.ends_with(&tail)).collect()
    };
    if matches.is_empty() {
        return Some(format!("`{span}`: no such file or folder"));
    }
    let item = item?;
    let named = matches.iter().any(|f| {
        let text = fs::read_to_string(root().join(&f[1..])).unwrap_or_default();
        has_word(&text, item)
    });
    (!named).then(|| format!("`{span}`: no `{item}` in {matches:?}"))
}

/// The pages whose backquoted source paths are checked: the README and
/// every page under docs/.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![root().join("README.md")];
    files_under(&root().join("docs"), "md", &mut pages);
    pages.sort();
    pages
}

/// The relative link targets of a Markdown text (`[text](target)`), the
/// anchor cut off; web addresses and anchors within the page left out.
fn relative_links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fence = false;
    for line in text.lines() {
        if line.starts_with("```") {
            fence = !fence;
        }
        if fence {
            continue;
        }
        for (at, _) in line.match_indices("](") {
            let rest = &line[at + 2..];
            let Some(end) = rest.find(')') else { continue };
            let target = rest[..end].split('#').next().unwrap_or("");
            if !target.is_empty() && !target.contains("://") && !target.starts_with("mailto:") {
                out.push(target.to_owned());
            }
        }
    }
    out
}

/// Every relative link of the README and of the pages under docs/ leads to
/// a file or folder of the repository (a page moved or renamed fails here).
#[test]
fn every_relative_link_of_the_docs_exists() {
    let mut checked = 0;
    let mut wrong = Vec::new();
    for page in &pages() {
        let text = fs::read_to_string(page).expect("a page");
        let dir = page.parent().expect("a folder");
        for target in relative_links(&text) {
            checked += 1;
            if !dir.join(&target).exists() {
                wrong.push(format!("{}: ({target})", page.display()));
            }
        }
    }
    assert!(checked > 30, "only {checked} links checked");
    assert!(wrong.is_empty(), "links to nothing:\n{}", wrong.join("\n"));
}

#[test]
fn the_link_check_reads_links_and_skips_code_and_addresses() {
    let text = "see [a](docs/a.md#x), [b](https://x.org) and [c](#here)\n```\n[d](no.md)\n```\n[e](../e.rs)";
    assert_eq!(relative_links(text), ["docs/a.md", "../e.rs"]);
}

#[test]
fn every_source_path_the_docs_name_exists() {
    let files = repo_files();
    let mut checked = 0;
    let mut wrong = Vec::new();
    for page in pages() {
        let doc = page
            .strip_prefix(root())
            .unwrap_or(&page)
            .display()
            .to_string();
        let text = fs::read_to_string(&page).expect("a page");
        for span in text.split('`').skip(1).step_by(2) {
            let (path, item) = span.split_once("::").unwrap_or((span, ""));
            let pathlike = path
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_-./".contains(c));
            let source = [".rs", ".sh", ".py", ".js"]
                .iter()
                .any(|e| path.ends_with(e))
                || (path.ends_with('/') && path.len() > 1);
            if !pathlike || !source || path.contains("..") || !(item.is_empty() || is_ident(item)) {
                continue;
            }
            checked += 1;
            wrong.extend(check_source_path(&files, span).map(|w| format!("{doc}: {w}")));
        }
    }
    assert!(checked > 50, "only {checked} paths checked");
    assert!(
        wrong.is_empty(),
        "the docs name what does not exist:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_path_check_tells_a_missing_file_from_a_present_one() {
    let files = repo_files();
    assert_eq!(check_source_path(&files, "sys/linux_spawn/raw.rs"), None);
    assert_eq!(check_source_path(&files, "contain/cgroup/"), None);
    assert_eq!(check_source_path(&files, "child.rs::apply_setup"), None);
    assert!(check_source_path(&files, "sys/no_such_file.rs").is_some());
    assert!(check_source_path(&files, "no_such_folder/").is_some());
    assert!(check_source_path(&files, "child.rs::no_such_item").is_some());
}
