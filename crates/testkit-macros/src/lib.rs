//! `#[corral_testkit::needs(cgroup)]`: a test that cannot run here is
//! reported as **ignored** (with the reason) in libtest's counts, never as
//! passed.
//!
//! libtest cannot ignore a test at run time, so the requirement is checked
//! when the test is compiled (this macro runs on the machine, as the user,
//! that builds the tests). A test binary built where the requirement held
//! and run where it does not (built as root, run as another user) does not
//! pass either: the macro also puts a run-time check at the top of the test
//! (`corral_testkit::require`) that fails it with an explanation.
//!
//! Requirements: `cgroup` (a cgroup v2 directory this process may create
//! children in: root, or a delegated subtree), `script` (util-linux
//! `script`). `CORRAL_TEST_ASSUME_UNPRIVILEGED=1` at build time treats
//! `cgroup` as unavailable: CI uses it to build the binaries it runs as an
//! unprivileged user.

use proc_macro::{Delimiter, Group, Ident, Literal, Punct, Spacing, Span, TokenStream, TokenTree};

#[proc_macro_attribute]
pub fn needs(attr: TokenStream, item: TokenStream) -> TokenStream {
    let what = attr.to_string();
    let what = what.trim();
    let missing = match what {
        "cgroup" => (!cgroup_available()).then_some(
            "needs a writable cgroup v2 (root, or a delegated subtree): not here when built",
        ),
        "script" => {
            (!script_available()).then_some("needs util-linux `script`: not installed when built")
        }
        other => {
            return compile_error(&format!(
                "unknown requirement `{other}` (use cgroup or script)"
            ))
        }
    };
    match missing {
        Some(reason) => {
            let mut out: TokenStream = format!("#[ignore = {reason:?}]").parse().unwrap();
            out.extend(item);
            out
        }
        None => with_runtime_check(item, what),
    }
}

/// Puts `::corral_testkit::require("what");` first in the function body
/// (the last brace group of the item).
fn with_runtime_check(item: TokenStream, what: &str) -> TokenStream {
    let mut tokens: Vec<TokenTree> = item.into_iter().collect();
    let Some(pos) = tokens
        .iter()
        .rposition(|t| matches!(t, TokenTree::Group(g) if g.delimiter() == Delimiter::Brace))
    else {
        return compile_error("#[needs] goes on a test function");
    };
    let TokenTree::Group(body) = &tokens[pos] else {
        unreachable!()
    };
    let mut new: TokenStream = TokenStream::new();
    let call: Vec<TokenTree> = vec![
        Punct::new(':', Spacing::Joint).into(),
        Punct::new(':', Spacing::Alone).into(),
        Ident::new("corral_testkit", Span::call_site()).into(),
        Punct::new(':', Spacing::Joint).into(),
        Punct::new(':', Spacing::Alone).into(),
        Ident::new("require", Span::call_site()).into(),
        Group::new(
            Delimiter::Parenthesis,
            TokenTree::from(Literal::string(what)).into(),
        )
        .into(),
        Punct::new(';', Spacing::Alone).into(),
    ];
    new.extend(call);
    new.extend(body.stream());
    let mut g = Group::new(Delimiter::Brace, new);
    g.set_span(body.span());
    tokens[pos] = g.into();
    tokens.into_iter().collect()
}

fn compile_error(msg: &str) -> TokenStream {
    format!("compile_error!({msg:?});").parse().unwrap()
}

fn cgroup_available() -> bool {
    if std::env::var_os("CORRAL_TEST_ASSUME_UNPRIVILEGED").is_some_and(|v| v == "1") {
        return false;
    }
    writable_cgroup_v2()
}

/// The same probe as `corral_testkit::writable_cgroup_v2`: this process's
/// own cgroup v2 directory accepts a new child directory.
fn writable_cgroup_v2() -> bool {
    let Ok(mi) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let Some(point) = mi.lines().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        post.starts_with("cgroup2 ")
            .then(|| pre.split(' ').nth(4).map(std::path::PathBuf::from))?
    }) else {
        return false;
    };
    let Ok(cg) = std::fs::read_to_string("/proc/self/cgroup") else {
        return false;
    };
    let Some(own) = cg.lines().find_map(|l| l.strip_prefix("0::")) else {
        return false;
    };
    let probe = point
        .join(own.trim_start_matches('/'))
        .join(format!("corral-probe-{}", std::process::id()));
    std::fs::create_dir(&probe).is_ok() && std::fs::remove_dir(&probe).is_ok()
}

fn script_available() -> bool {
    std::process::Command::new("script")
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok()
}
