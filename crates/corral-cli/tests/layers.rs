//! The CLI's module graph has no cycles and data flows down, as the
//! library's (`crates/corral/tests/layers.rs`, whose scanner it shares):
//! every module `main.rs` declares sits in a layer of `LAYERS`, and a module
//! may name (`crate::...`) only modules of lower layers; inside `batch/` and
//! `mcp/`, a file may name (`super::x`, `crate::batch::x`) only siblings of
//! lower rows of its folder's `INNER` table. Every `mod x;` must be placed.
//! Scans the source text, so a new upward edge, a cycle (an edge within a
//! row or upward) or a module left out of the tables fails here.
//! docs/DESIGN.md (the CLI's file table) explains the table.

// The scanner is corral_testkit's (Unix only); the source is the same everywhere.
#![cfg(unix)]

use corral_testkit::layers::{
    crate_paths, declared_modules, ident_at, paths_after, rs_files, strip_comments,
};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, lowest first. A module may use modules of earlier rows only.
const LAYERS: &[&[&str]] = &[
    // Leaves: words for people (GNU's quoting, why a run did not start),
    // GNU's grammar (durations, signals, the personality's `Style`), the
    // terminal, signal forwarding, dispositions, output files, the
    // reference pages.
    &[
        "text",
        "gnu",
        "tty",
        "signals",
        "dispositions",
        "outfile",
        "reference",
    ],
    // Durations and sizes as typed; exit codes; the pty's wiring; the
    // sandbox's flags (`corral run`, `corral mcp`).
    &["duration", "exit", "pty", "sandbox_flags"],
    // The `--report` document; the MCP server (its options are a clap
    // struct `args` names).
    &["json", "mcp"],
    // The command line.
    &["args"],
    // `corral run`; the generated pages and completions.
    &["run", "generate"],
    // The `timeout` personality (runs through `run`); `corral batch` and
    // `corral merge`.
    &["timeout", "batch"],
    // Tests of the surfaces' agreement (test-only); the C entry point
    // (calls main.rs's `corral_main`, the one use of the root).
    &["surfaces", "start"],
];

/// The modules that may name an item of main.rs itself (the root): the
/// entry point, which calls `corral_main`.
const ROOT_USERS: &[&str] = &["start"];

/// Inside a folder: the layers of its files (by module name; the folder's
/// `mod.rs` is their parent and may use them all). A file may use, by
/// `super::x` or `crate::folder::x`, only siblings of earlier rows.
const INNER: &[(&str, &[&[&str]])] = &[
    (
        "batch",
        &[
            // The manifest; the per-task numbers.
            &["manifest", "summary"],
            // Verdicts; the errors (of the manifest, of a merge).
            &["classify", "error"],
            // The report document (`BatchDoc`, each run a `BatchRun`).
            &["report"],
            // A finished run's record; JUnit from the report.
            &["record", "junit"],
            // The event stream.
            &["events"],
            // The executor.
            &["exec"],
            // The reporters (events, report, JUnit files, the table).
            &["reporter"],
            // The live display; `corral merge`.
            &["progress", "merge"],
        ],
    ),
    (
        "mcp",
        &[
            // The limits on requests; the table of runs.
            &["limits", "runs"],
            // The tools.
            &["tools"],
            // The session tools (the run tools' result fields).
            &["sessions"],
            // The JSON-RPC loop.
            &["server"],
        ],
    ),
];

/// The module a file defines (`#[path]` aliases included).
fn module_of_file(stem: &str) -> &str {
    stem
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The table that must place the modules a file declares (`rel`: its path
/// under `src`, with `/`): `LAYERS` for main.rs, else the `INNER` table of
/// the folder the modules live in (`a/mod.rs` and `a.rs` declare those of
/// `a/`).
fn table_for(rel: &str) -> Option<(String, Vec<&'static str>)> {
    if rel == "main.rs" {
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
                "{rel}: module `{m}` is in no row of {table} (tests/layers.rs; and docs/DESIGN.md's CLI file table)"
            )
        })
        .collect()
}

/// The top-level modules declared in main.rs and, for every name main.rs
/// re-exports (`pub use x::{A, ..}`), the module it comes from; the
/// functions main.rs defines itself (`corral_main`) come from `main`.
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
    for (i, _) in code.match_indices("fn ") {
        let before = code[..i].chars().next_back();
        if before.is_none_or(|c| c.is_whitespace()) {
            let name = ident_at(&code[i + "fn ".len()..]);
            if !name.is_empty() {
                names
                    .entry(name.to_owned())
                    .or_insert_with(|| ROOT.to_owned());
            }
        }
    }
    (modules, names)
}

/// The pseudo-module of main.rs's own items.
const ROOT: &str = "main";

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
        if from == "main" {
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
    let main = std::fs::read_to_string(src.join("main.rs")).expect("read main.rs");
    let (modules, names) = crate_root(&main);
    assert!(
        modules.len() >= 8
            && modules.contains("batch")
            && names.get("corral_main").map(String::as_str) == Some(ROOT),
        "main.rs not understood: modules {modules:?}, names {names:?}"
    );
    let mut problems = Vec::new();
    for m in &modules {
        if layer_of(m).is_none() {
            problems.push(format!(
                "module `{m}` is not in the LAYERS table of tests/layers.rs (and the CLI file table of docs/DESIGN.md)"
            ));
        }
    }
    let (edges, unknown) = edges(&src, &modules, &names);
    for u in unknown {
        problems.push(format!("{u}: not a module nor a name main.rs defines"));
    }
    for ((from, to), file) in &edges {
        if to == ROOT && !ROOT_USERS.contains(&from.as_str()) {
            problems.push(format!(
                "{file}: `{from}` uses main.rs's own items: only {ROOT_USERS:?} may"
            ));
        }
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
            .is_some_and(|d| d.contains("batch") && d.contains("timeout")),
        "main.rs's declarations not found: {declared_in:?}"
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
        let main = format!("mod text;\n{decl}\nmod exit;\n");
        let problems = placement_problems("main.rs", &main);
        assert_eq!(problems.len(), 1, "{decl:?}: {problems:?}");
        assert!(problems[0].contains("`nowhere`"), "{problems:?}");
        let inner = format!("mod exec;\n{decl}\n");
        assert_eq!(
            placement_problems("batch/mod.rs", &inner).len(),
            1,
            "{decl:?}"
        );
    }
    assert!(placement_problems("main.rs", "pub mod batch;\nmod args;\n").is_empty());
    // A folder without a table of its own.
    assert_eq!(placement_problems("run/mod.rs", "mod parts;").len(), 1);
    // Inline modules, `mod` in names and comments are not declarations.
    let not_declarations =
        "#[cfg(test)]\nmod tests {\n    use super::*;\n}\nlet model = modes;\n// mod old;\n";
    assert!(declared_modules(not_declarations).is_empty());
}

/// The scanner itself finds what it must (so the test above can fail).
#[test]
fn scanner_sees_grouped_inline_and_reexported_paths() {
    let lib = "mod a;\n#[cfg(unix)]\nmod b;\npub mod c;\npub(crate) mod d;\npub use a::{X, Y as Z};\npub use b::inner::W;\nfn corral_main() {}\n";
    let (modules, names) = crate_root(lib);
    let want = ["a", "b", "c", "d"];
    assert_eq!(modules, want.iter().map(|s| s.to_string()).collect());
    assert_eq!(names.get("X").map(String::as_str), Some("a"));
    assert_eq!(names.get("Z").map(String::as_str), Some("a"));
    assert_eq!(names.get("W").map(String::as_str), Some("b"));
    assert_eq!(names.get("corral_main").map(String::as_str), Some(ROOT));
    let code = strip_comments(
        "use crate::{a::{self, Q}, X};\nlet v = crate::b::f(); // crate::c\n/// [x](crate::d)\n$crate::e\n",
    );
    assert_eq!(crate_paths(&code), ["a", "X", "b"]);
    let inner =
        "use super::{record::R, report::D};\nuse crate::batch::manifest;\nuse crate::exit::X;\n";
    assert_eq!(paths_after(inner, "super::"), ["record", "report"]);
    assert_eq!(paths_after(inner, "crate::batch::"), ["manifest"]);
}

/// The current graph, for docs/DESIGN.md: a tool, not a check
/// (`cargo test --test layers -- --ignored --nocapture`).
#[test]
#[ignore = "prints the module graph; run with --ignored --nocapture"]
fn print_module_graph() {
    let src = src_dir();
    let main = std::fs::read_to_string(src.join("main.rs")).expect("read main.rs");
    let (modules, names) = crate_root(&main);
    let (edges, _) = edges(&src, &modules, &names);
    let mut by_from: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (from, to) in edges.keys() {
        by_from.entry(from).or_default().push(to);
    }
    for (from, tos) in by_from {
        println!("{from} -> {}", tos.join(", "));
    }
}
