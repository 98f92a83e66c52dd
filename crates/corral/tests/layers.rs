//! The library's module graph has no cycles and data flows down: every
//! top-level module of `crates/corral/src` sits in a layer, and a module may
//! name (`crate::...`) only modules of lower layers. Scans the source text,
//! so a new upward `use crate::` edge, or a new module left out of the
//! table, fails here: every `mod x;` a file declares (`pub`, `pub(crate)`,
//! behind a `cfg` or not) must be placed, in `LAYERS` for lib.rs and in the
//! folder's `INNER` table for the others. docs/DESIGN.md (its module table)
//! explains the table.

// The scanner is corral_testkit's (Unix only); the source is the same everywhere.
#![cfg(unix)]

use corral_testkit::layers::{
    crate_paths, declared_modules, ident_at, paths_after, rs_files, strip_comments,
};
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
    // The sandbox's place in a spawn (prepared before, named after).
    &["sandbox"],
    // The builder.
    &["command"],
    // The async driver (Command::spawn_async); the documents (feature
    // `serde`): the report as `RunReport`, the request as
    // `RunSpec` and its one mapping onto `Command` (`Command::from_spec`),
    // their schemas. No module of the library uses `document`.
    &["asynchronous", "document"],
    // Persistent shell sessions: each command a `Command` of its own, the
    // shell's state carried over in a directory of the session's.
    &["session"],
    // The process-wide switches (contain's and error's, grouped).
    &["process_wide"],
];

/// Inside a folder: the layers of its files (by module name; the folder's
/// `mod.rs` is their parent and may use them all). A file may use, by
/// `super::x` or `crate::folder::x`, only siblings of earlier rows.
const INNER: &[(&str, &[&[&str]])] = &[
    // The request document (the report's is `document.rs` itself).
    ("document", &[&["run_spec"]]),
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
            &["raw", "stack", "seccomp"],
            &["supervisor"],
            &["sandbox"],
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

/// The table that must place the modules a file declares (`rel`: its path
/// under `src`, with `/`): `LAYERS` for lib.rs, else the `INNER` table of
/// the folder the modules live in (`a/mod.rs` and `a.rs` declare those of
/// `a/`).
fn table_for(rel: &str) -> Option<(String, Vec<&'static str>)> {
    if rel == "lib.rs" {
        let all = LAYERS.iter().flat_map(|r| r.iter().copied()).collect();
        return Some(("LAYERS".to_owned(), all));
    }
    let folder = rel
        .strip_suffix("/mod.rs")
        .or_else(|| rel.strip_suffix(".rs"))
        .unwrap_or(rel);
    INNER.iter().find(|(f, _)| *f == folder).map(|(f, rows)| {
        let all = rows.iter().flat_map(|r| r.iter().copied()).collect();
        (format!("INNER[{f}]"), all)
    })
}

/// What is wrong with the module declarations of a file (`rel`: its path
/// under `src`): a declared module its table does not place, or a file that
/// declares modules with no table for them.
fn placement_problems(rel: &str, code: &str) -> Vec<String> {
    let declared = declared_modules(code);
    if declared.is_empty() {
        return Vec::new();
    }
    let Some((table, placed)) = table_for(rel) else {
        return vec![format!(
            "{rel} declares {declared:?}, and INNER in tests/layers.rs has no table for them"
        )];
    };
    declared
        .into_iter()
        .filter(|m| !placed.contains(&m.as_str()))
        .map(|m| {
            format!(
                "{rel}: module `{m}` is in no row of {table} (tests/layers.rs; and docs/DESIGN.md's module table)"
            )
        })
        .collect()
}

/// The top-level modules declared in lib.rs and, for every name lib.rs
/// re-exports (`pub use report::{Outcome, ..}`), the module it comes from.
fn crate_root(lib: &str) -> (BTreeSet<String>, BTreeMap<String, String>) {
    let code = strip_comments(lib);
    let modules: BTreeSet<String> = declared_modules(&code).into_iter().collect();
    let mut names = BTreeMap::new();
    for stmt in code.split(';') {
        let s = stmt.split_whitespace().collect::<Vec<_>>().join(" ");
        // Attributes (`#[cfg(..)]`) come before the statement on its line.
        let s = match s.rfind(']') {
            Some(i) => s[i + 1..].trim(),
            None => s.trim(),
        };
        if let Some(u) = s
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
        let missing: Vec<&str> = layers
            .iter()
            .flat_map(|row| row.iter().copied())
            .filter(|m| !seen.contains(*m))
            .collect();
        assert!(
            missing.is_empty(),
            "{folder}: files not found ({missing:?})"
        );
    }
    assert!(
        problems.is_empty(),
        "layering inside folders broken:\n  {}",
        problems.join("\n  ")
    );
}

/// Every module any file declares is placed (so a module cannot escape the
/// checks above by being `pub`, `pub(crate)` or behind a `cfg`), and every
/// row names a module that exists.
#[test]
fn every_declared_module_is_placed_and_every_placed_one_declared() {
    let src = src_dir();
    let mut files = Vec::new();
    rs_files(&src, &mut files);
    let mut problems = Vec::new();
    let mut declared_in: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &files {
        let rel = f
            .strip_prefix(&src)
            .expect("under src")
            .to_string_lossy()
            .replace('\\', "/");
        let code = std::fs::read_to_string(f).expect("read source");
        problems.extend(placement_problems(&rel, &code));
        if let Some((table, _)) = table_for(&rel) {
            let declared = declared_in.entry(table).or_default();
            declared.extend(declared_modules(&code));
        }
    }
    let tables = std::iter::once(("LAYERS".to_owned(), LAYERS.to_vec())).chain(
        INNER
            .iter()
            .map(|(f, rows)| (format!("INNER[{f}]"), rows.to_vec())),
    );
    for (table, rows) in tables {
        let declared = declared_in.get(&table).cloned().unwrap_or_default();
        for m in rows.iter().flat_map(|r| r.iter()) {
            if !declared.contains(*m) {
                problems.push(format!("{table} places `{m}`, which no file declares"));
            }
        }
    }
    assert!(
        declared_in
            .get("LAYERS")
            .is_some_and(|d| d.contains("document") && d.contains("lifecycle")),
        "lib.rs's declarations not found: {declared_in:?}"
    );
    assert!(
        problems.is_empty(),
        "modules not placed:\n  {}",
        problems.join("\n  ")
    );
}

/// An unplaced module fails, however it is declared; a placed one does not.
#[test]
fn an_unplaced_module_fails_whatever_its_visibility() {
    for decl in [
        "pub mod nowhere;",
        "mod nowhere;",
        "pub(crate) mod nowhere;",
        "#[cfg(feature = \"serde\")]\npub mod nowhere;",
        "#[cfg(unix)] pub(in crate::sys) mod  nowhere ;",
    ] {
        let lib = format!("mod signal;\n{decl}\nmod spec;\n");
        let problems = placement_problems("lib.rs", &lib);
        assert_eq!(problems.len(), 1, "{decl:?}: {problems:?}");
        assert!(problems[0].contains("`nowhere`"), "{problems:?}");
        let inner = format!("mod phase;\n{decl}\n");
        assert_eq!(
            placement_problems("lifecycle/mod.rs", &inner).len(),
            1,
            "{decl:?}"
        );
    }
    assert!(placement_problems("lib.rs", "pub mod document;\nmod sys;\n").is_empty());
    // A folder without a table of its own.
    assert_eq!(placement_problems("spec/mod.rs", "mod parts;").len(), 1);
    // Inline modules, `mod` in names and comments are not declarations.
    let not_declarations =
        "#[cfg(test)]\nmod tests {\n    use super::*;\n}\nlet model = modes;\n// mod old;\n";
    assert!(declared_modules(not_declarations).is_empty());
}

/// The scanner itself finds what it must (so the test above can fail).
#[test]
fn scanner_sees_grouped_inline_and_reexported_paths() {
    let lib = "mod a;\n#[cfg(unix)]\nmod b;\npub mod c;\npub(crate) mod d;\npub use a::{X, Y as Z};\npub use b::inner::W;\n";
    let (modules, names) = crate_root(lib);
    let want = ["a", "b", "c", "d"];
    assert_eq!(modules, want.iter().map(|s| s.to_string()).collect());
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
