//! The library's module graph has no cycles and data flows down: every
//! top-level module of `crates/corral/src` sits in a layer, and a module may
//! name (`crate::...`) only modules of lower layers. Scans the source text,
//! so a new upward `use crate::` edge, or a new module left out of the
//! table, fails here. docs/DESIGN.md (its module table) explains the table.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, lowest first. A module may use modules of earlier rows only.
const LAYERS: &[&[&str]] = &[
    // Plain values with no behaviour: signals, captured bytes.
    &["signal", "capture"],
    // What a run is asked to do, what it reports, how it is cancelled.
    &["spec", "report", "cancel"],
    // The public error (names a report's Mechanism).
    &["error"],
    // The platform: spawn, poll, pipes, /proc.
    &["sys"],
    // Containment mechanisms behind two traits (before and after attach).
    &["contain"],
    // The lifecycle state machine.
    &["lifecycle"],
    // The builder.
    &["command"],
    // The async driver (Command::spawn_async).
    &["asynchronous"],
    // The process-wide switches (contain's and error's, grouped).
    &["process_wide"],
];

/// Inside a folder: the layers of its files (by module name; the folder's
/// `mod.rs` is their parent and may use them all). A file may use, by
/// `super::x` or `crate::folder::x`, only siblings of earlier rows.
const INNER: &[(&str, &[&[&str]])] = &[
    (
        "contain",
        &[
            // Reaping during the run, the subreaper switch, tree cookies.
            &["orphans"],
            // One file per mechanism: none uses another.
            &[
                "cgroup",
                "job_object",
                "pid_namespace",
                "process_group",
                "subreaper",
            ],
        ],
    ),
    (
        "contain/cgroup",
        &[
            // The interface files.
            &["files"],
            // The controllers of a delegated subtree.
            &["delegated"],
            &["error"],
            &["hierarchy"],
            &["pool"],
            // Ownership and removal, limits, the members.
            &["owner", "limits", "members"],
        ],
    ),
    (
        "lifecycle",
        &[
            &["phase", "plan", "relay", "deaths"],
            &["stopped"],
            &["stdio"],
        ],
    ),
    (
        "sys",
        &[
            &["linux_proc", "linux_splice", "per_process", "pty"],
            &["linux_spawn"],
            &["unix", "windows", "unsupported"],
        ],
    ),
    (
        "sys/linux_spawn",
        &[
            &["arch"],
            &["raw", "stack"],
            &["child"],
            &["parent", "keeper"],
            &["pidns"],
        ],
    ),
    (
        // The keeper: its messages, the keeper process, the host's side.
        "sys/linux_spawn/keeper",
        &[&["protocol"], &["process"], &["client"]],
    ),
];

/// The module a file defines (`#[path]` aliases included).
fn module_of_file(stem: &str) -> &str {
    match stem {
        "arch_x86_64" | "arch_aarch64" => "arch",
        s => s,
    }
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("read src dir") {
        let p = e.expect("dir entry").path();
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Code without comments (doc links such as `(crate::Outcome::X)` are not
/// dependencies). Line comments only: the crate uses no block comments.
fn strip_comments(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            // `"//"` inside a string literal: keep the line whole.
            Some(i) if l[..i].matches('"').count() % 2 == 0 => &l[..i],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The first path segment of every `crate::` path in `code`, groups
/// (`crate::{a::B, C}`) included.
fn crate_paths(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        let before = rest[..i].chars().next_back();
        rest = &rest[i + "crate::".len()..];
        // `$crate::` in macros and `foo_crate::` are not this crate's paths.
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        let rest_trim = rest.trim_start();
        if let Some(group) = rest_trim.strip_prefix('{') {
            let mut depth = 0usize;
            let mut start = 0usize;
            let mut items = Vec::new();
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        items.push(&group[start..j]);
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        items.push(&group[start..j]);
                        start = j + 1;
                    }
                    _ => {}
                }
            }
            for it in items {
                let id = ident_at(it.trim_start());
                if !id.is_empty() && id != "self" {
                    out.push(id.to_owned());
                }
            }
        } else {
            let id = ident_at(rest_trim);
            if !id.is_empty() {
                out.push(id.to_owned());
            }
        }
    }
    out
}

/// The top-level modules declared in lib.rs and, for every name lib.rs
/// re-exports (`pub use report::{Outcome, ..}`), the module it comes from.
fn crate_root(lib: &str) -> (BTreeSet<String>, BTreeMap<String, String>) {
    let code = strip_comments(lib);
    let mut modules = BTreeSet::new();
    let mut names = BTreeMap::new();
    for stmt in code.split(';') {
        let s = stmt.split_whitespace().collect::<Vec<_>>().join(" ");
        // Attributes (`#[cfg(..)]`) come before the statement on its line.
        let s = match s.rfind(']') {
            Some(i) => s[i + 1..].trim(),
            None => s.trim(),
        };
        if let Some(m) = s.strip_prefix("mod ") {
            modules.insert(m.trim().to_owned());
        } else if let Some(u) = s
            .strip_prefix("pub use ")
            .or_else(|| s.strip_prefix("pub(crate) use "))
        {
            let module = ident_at(u).to_owned();
            let tail = &u[module.len()..];
            let leaves: Vec<&str> = match (tail.find('{'), tail.rfind('}')) {
                (Some(a), Some(b)) => tail[a + 1..b].split(',').collect(),
                _ => vec![tail.rsplit("::").next().unwrap_or("")],
            };
            for leaf in leaves {
                let leaf = leaf.trim();
                let name = leaf.rsplit(" as ").next().unwrap_or(leaf).trim();
                let name = name.rsplit("::").next().unwrap_or(name);
                if !name.is_empty() {
                    names.insert(name.to_owned(), module.clone());
                }
            }
        }
    }
    (modules, names)
}

/// Every `from → to` edge between distinct top-level modules, with a file
/// where it occurs. Unknown `crate::` names are errors.
fn edges(
    src: &Path,
    modules: &BTreeSet<String>,
    names: &BTreeMap<String, String>,
) -> (BTreeMap<(String, String), String>, Vec<String>) {
    let mut files = Vec::new();
    rs_files(src, &mut files);
    let mut edges = BTreeMap::new();
    let mut unknown = Vec::new();
    for f in files {
        let rel = f.strip_prefix(src).expect("under src");
        let first = rel.components().next().expect("component");
        let from = Path::new(first.as_os_str())
            .file_stem()
            .expect("stem")
            .to_string_lossy()
            .into_owned();
        if from == "lib" {
            continue;
        }
        let code = strip_comments(&std::fs::read_to_string(&f).expect("read source"));
        for id in crate_paths(&code) {
            let to = if modules.contains(&id) {
                id.clone()
            } else if let Some(m) = names.get(&id) {
                m.clone()
            } else {
                unknown.push(format!("{}: crate::{id}", rel.display()));
                continue;
            };
            if to != from {
                edges
                    .entry((from.clone(), to))
                    .or_insert_with(|| rel.display().to_string());
            }
        }
    }
    (edges, unknown)
}

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|row| row.contains(&module))
}

#[test]
fn module_graph_follows_the_layer_table() {
    let src = src_dir();
    let lib = std::fs::read_to_string(src.join("lib.rs")).expect("read lib.rs");
    let (modules, names) = crate_root(&lib);
    assert!(
        modules.len() >= 8 && modules.contains("lifecycle") && names.contains_key("Outcome"),
        "lib.rs not understood: modules {modules:?}, names {names:?}"
    );
    let mut problems = Vec::new();
    for m in &modules {
        if layer_of(m).is_none() {
            problems.push(format!(
                "module `{m}` is not in the LAYERS table of tests/layers.rs (and the module table of docs/DESIGN.md)"
            ));
        }
    }
    let (edges, unknown) = edges(&src, &modules, &names);
    for u in unknown {
        problems.push(format!("{u}: not a module nor a name lib.rs re-exports"));
    }
    for ((from, to), file) in &edges {
        if let (Some(a), Some(b)) = (layer_of(from), layer_of(to)) {
            if b >= a {
                problems.push(format!(
                    "{file}: `{from}` (layer {a}) uses `{to}` (layer {b}): only lower layers may be used"
                ));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "module layering broken:\n  {}",
        problems.join("\n  ")
    );
}

/// The first segment of every path in `code` that starts with `prefix`
/// (`super::` or `crate::sys::`), groups included.
fn paths_after(code: &str, prefix: &str) -> Vec<String> {
    // Reuse the `crate::` scanner on a copy where `prefix` reads `crate::`.
    let marked = code
        .replace(prefix, "\u{2}")
        .replace("crate::", "\u{1}")
        .replace('\u{2}', " crate::");
    crate_paths(&marked)
}

#[test]
fn files_inside_folders_follow_their_layer_tables() {
    let src = src_dir();
    let mut problems = Vec::new();
    for (folder, layers) in INNER {
        let dir = src.join(folder);
        let layer = |m: &str| layers.iter().position(|row| row.contains(&m));
        let mut files = Vec::new();
        rs_files(&dir, &mut files);
        let mut seen = BTreeSet::new();
        for f in files {
            let rel = f.strip_prefix(&dir).expect("under the folder");
            let mut comps = rel.components();
            let first = comps
                .next()
                .expect("component")
                .as_os_str()
                .to_string_lossy();
            let direct = comps.next().is_none();
            let stem = first.trim_end_matches(".rs");
            if stem == "mod" {
                continue;
            }
            let from = module_of_file(stem);
            seen.insert(from.to_owned());
            let Some(a) = layer(from) else {
                problems.push(format!(
                    "{folder}/{first}: not in the INNER table of tests/layers.rs"
                ));
                continue;
            };
            let code = strip_comments(&std::fs::read_to_string(&f).expect("read source"));
            let mut used = paths_after(&code, &format!("crate::{}::", folder.replace('/', "::")));
            if direct {
                used.extend(paths_after(&code, "super::"));
            }
            for to in used {
                if let Some(b) = layer(&to) {
                    if to != from && b >= a {
                        problems.push(format!(
                            "{folder}/{}: `{from}` uses its sibling `{to}` of the same or a higher layer",
                            rel.display()
                        ));
                    }
                }
            }
        }
        assert!(seen.len() >= 3, "{folder}: files not found ({seen:?})");
    }
    assert!(
        problems.is_empty(),
        "layering inside folders broken:\n  {}",
        problems.join("\n  ")
    );
}

/// The scanner itself finds what it must (so the test above can fail).
#[test]
fn scanner_sees_grouped_inline_and_reexported_paths() {
    let lib = "mod a;\n#[cfg(unix)]\nmod b;\npub use a::{X, Y as Z};\npub use b::inner::W;\n";
    let (modules, names) = crate_root(lib);
    assert_eq!(modules, ["a", "b"].iter().map(|s| s.to_string()).collect());
    assert_eq!(names.get("X").map(String::as_str), Some("a"));
    assert_eq!(names.get("Z").map(String::as_str), Some("a"));
    assert_eq!(names.get("W").map(String::as_str), Some("b"));
    let code = strip_comments(
        "use crate::{a::{self, Q}, X};\nlet v = crate::b::f(); // crate::c\n/// [x](crate::d)\n$crate::e\n",
    );
    assert_eq!(crate_paths(&code), ["a", "X", "b"]);
    let inner =
        "use super::{raw::f, stack::Stack};\nuse crate::sys::linux_proc;\nuse crate::report::X;\n";
    assert_eq!(paths_after(inner, "super::"), ["raw", "stack"]);
    assert_eq!(paths_after(inner, "crate::sys::"), ["linux_proc"]);
}

/// The current graph, for docs/DESIGN.md: a tool, not a check
/// (`cargo test --test layers -- --ignored --nocapture`).
#[test]
#[ignore = "prints the module graph; run with --ignored --nocapture"]
fn print_module_graph() {
    let src = src_dir();
    let lib = std::fs::read_to_string(src.join("lib.rs")).expect("read lib.rs");
    let (modules, names) = crate_root(&lib);
    let (edges, _) = edges(&src, &modules, &names);
    let mut by_from: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (from, to) in edges.keys() {
        by_from.entry(from).or_default().push(to);
    }
    for (from, tos) in by_from {
        println!("{from} -> {}", tos.join(", "));
    }
}
