//! The source scanner behind the layers tests (`crates/corral/tests/layers.rs`
//! for the library, `crates/corral-cli/tests/layers.rs` for the CLI): the
//! `.rs` files of a folder, code without comments, the `crate::` paths a
//! file names, the modules it declares. Each test keeps its own tables.

use std::path::{Path, PathBuf};

pub fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
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
pub fn strip_comments(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            // `"//"` inside a string literal: keep the line whole.
            Some(i) if l[..i].matches('"').count() % 2 == 0 => &l[..i],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

pub fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The first path segment of every `crate::` path in `code`, groups
/// (`crate::{a::B, C}`) included.
pub fn crate_paths(code: &str) -> Vec<String> {
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

/// The modules a file declares as files of their own: every `mod NAME;`,
/// whatever its visibility (`pub`, `pub(crate)`, `pub(in ..)`) and
/// attributes (`#[cfg(..)]`, `#[path = ..]`). An inline `mod x { .. }` is
/// part of its file and is not listed.
pub fn declared_modules(code: &str) -> Vec<String> {
    let code = strip_comments(code);
    let mut out = Vec::new();
    for (i, _) in code.match_indices("mod") {
        let before = code[..i].chars().next_back();
        // `mod` as a word: after a space, a line start, an attribute's `]`,
        // a visibility's `)` or another item.
        if before.is_some_and(|c| !(c.is_whitespace() || "]);{}".contains(c))) {
            continue;
        }
        let rest = &code[i + "mod".len()..];
        if !rest.starts_with(char::is_whitespace) {
            continue;
        }
        let rest = rest.trim_start();
        let name = ident_at(rest);
        if !name.is_empty() && rest[name.len()..].trim_start().starts_with(';') {
            out.push(name.to_owned());
        }
    }
    out
}

/// The first segment of every path in `code` that starts with `prefix`
/// (`super::` or `crate::sys::`), groups included.
pub fn paths_after(code: &str, prefix: &str) -> Vec<String> {
    // Reuse the `crate::` scanner on a copy where `prefix` reads `crate::`.
    let marked = code
        .replace(prefix, "\u{2}")
        .replace("crate::", "\u{1}")
        .replace('\u{2}', " crate::");
    crate_paths(&marked)
}
