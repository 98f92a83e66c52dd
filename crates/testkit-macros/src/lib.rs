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
//! Several requirements are separated by commas: `#[needs(unshare, userns)]`.
//! The kinds:
//!
//! - `cgroup`: a cgroup v2 directory this process may create children in
//!   (root, or a delegated subtree).
//! - `limits`: `cgroup`, and the pids and memory limits can be set on a
//!   group made there (the controller enabled for the children of this
//!   process's v2 group, or a writable v1 hierarchy of that controller).
//! - `pidns`: corral's `pid-namespace` tier can work here: a new PID (and
//!   mount) namespace can be made, directly as root, through a new user
//!   namespace otherwise (probed with `unshare(2)` in a child process).
//! - `userns`: a new user namespace can be made (`unshare -U` works).
//! - `unshare`: util-linux `unshare` is installed.
//! - `script`: util-linux `script` is installed.
//! - `root`: the effective user is root.
//! - `v2limits` / `v2hugetlb`: root, and a cgroup made in this process's v2
//!   cgroup can have the memory and pids (hugetlb) controllers: they are
//!   enabled for its children, or it is the hierarchy's root and offers them.
//! - `v1limits`: root, and the v1 `pids` and `memory` hierarchies are
//!   mounted (a hybrid system).
//!
//! `CORRAL_TEST_ASSUME_UNPRIVILEGED=1` at build time treats `cgroup`,
//! `limits` and `root` as unavailable and probes `pidns` through a user
//! namespace as a non-root caller would: CI uses it to build the binaries
//! it runs as an unprivileged user.

use proc_macro::{Delimiter, Group, Ident, Literal, Punct, Spacing, Span, TokenStream, TokenTree};

#[proc_macro_attribute]
pub fn needs(attr: TokenStream, item: TokenStream) -> TokenStream {
    let attr = attr.to_string();
    let kinds: Vec<&str> = attr
        .split(',')
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .collect();
    if kinds.is_empty() {
        return compile_error("#[needs(...)] names at least one requirement");
    }
    let mut item = item;
    for what in kinds.iter().rev() {
        let missing = match *what {
            "cgroup" => (!cgroup_available()).then_some(
                "needs a writable cgroup v2 (root, or a delegated subtree): not here when built",
            ),
            "limits" => (!limits_available()).then_some(
                "needs cgroup pids and memory limits (a writable cgroup with both \
                 controllers): not here when built",
            ),
            "pidns" => (!pidns_available()).then_some(
                "needs a PID namespace (root, or unprivileged user namespaces): \
                 the kernel refused one when built",
            ),
            "userns" => (!userns_available())
                .then_some("needs a new user namespace: the kernel refused one when built"),
            "unshare" => (!installed("unshare"))
                .then_some("needs util-linux `unshare`: not installed when built"),
            "script" => (!installed("script"))
                .then_some("needs util-linux `script`: not installed when built"),
            "root" => (!root()).then_some("needs root: built as another user"),
            "freezer_v1" => (!freezer_v1()).then_some(
                "needs the cgroup v1 freezer at /sys/fs/cgroup/freezer (hybrid machines): \
                 not here when built",
            ),
            "v2limits" => (!v2_gives(&["memory", "pids"])).then_some(
                "needs the memory and pids controllers in cgroup v2 for a child of this \
                 process's cgroup (bound to v1 hierarchies here, when built)",
            ),
            "v2hugetlb" => (!v2_gives(&["hugetlb"])).then_some(
                "needs the hugetlb controller in cgroup v2 for a child of this process's \
                 cgroup (not offered here, when built)",
            ),
            "v1limits" => (!v1_limits()).then_some(
                "needs v1 pids and memory hierarchies beside cgroup v2 (a hybrid system), \
                 as root: not here when built",
            ),
            other => {
                return compile_error(&format!(
                    "unknown requirement `{other}` (use cgroup, limits, pidns, userns, \
                     unshare, script, root, freezer_v1, v2limits, v2hugetlb or v1limits)"
                ))
            }
        };
        // The first missing requirement (in the order written) names the
        // reason; otherwise every requirement is checked again at run time.
        item = match missing {
            Some(reason) => {
                let mut out: TokenStream = format!("#[ignore = {reason:?}]").parse().unwrap();
                out.extend(strip_ignore(item));
                out
            }
            None => with_runtime_check(item, what),
        };
    }
    item
}

/// `item` without the `#[ignore]` / `#[ignore = ...]` attributes among its
/// outer attributes (wherever they stand: beside `#[test]`, a doc comment,
/// or put there by an inner requirement): the missing requirement gives
/// the one reason, and a second `#[ignore]` would be an unused attribute.
fn strip_ignore(item: TokenStream) -> TokenStream {
    let tokens: Vec<TokenTree> = item.into_iter().collect();
    let mut out: Vec<TokenTree> = Vec::with_capacity(tokens.len());
    let mut i = 0;
    while i + 1 < tokens.len() {
        let (TokenTree::Punct(p), TokenTree::Group(g)) = (&tokens[i], &tokens[i + 1]) else {
            break;
        };
        if p.as_char() != '#' || g.delimiter() != Delimiter::Bracket {
            break;
        }
        let is_ignore = matches!(
            g.stream().into_iter().next(),
            Some(TokenTree::Ident(id)) if id.to_string() == "ignore"
        );
        if !is_ignore {
            out.push(tokens[i].clone());
            out.push(tokens[i + 1].clone());
        }
        i += 2;
    }
    out.extend(tokens.into_iter().skip(i));
    out.into_iter().collect()
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

/// The cgroup v1 freezer hierarchy is mounted (hybrid machines).
fn freezer_v1() -> bool {
    std::path::Path::new("/sys/fs/cgroup/freezer/freezer.state").exists()
        || std::path::Path::new("/sys/fs/cgroup/freezer/cgroup.procs").exists()
}

fn compile_error(msg: &str) -> TokenStream {
    format!("compile_error!({msg:?});").parse().unwrap()
}

fn cgroup_available() -> bool {
    if assume_unprivileged() {
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

/// Root, and a child of this process's v2 cgroup can have every one of
/// `ctrls` (see the kinds `v2limits`, `v2hugetlb`).
fn v2_gives(ctrls: &[&str]) -> bool {
    if !root() {
        return false;
    }
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
    let has = |file: std::path::PathBuf| {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        ctrls
            .iter()
            .all(|c| text.split_whitespace().any(|w| w == *c))
    };
    let dir = point.join(own.trim_start_matches('/'));
    has(dir.join("cgroup.subtree_control")) || (own == "/" && has(dir.join("cgroup.controllers")))
}

/// Root, and v1 `pids` and `memory` hierarchies are mounted.
fn v1_limits() -> bool {
    let Ok(mi) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let v1 = |c: &str| {
        mi.lines().any(|l| {
            l.split_once(" - ").is_some_and(|(_, post)| {
                let p: Vec<&str> = post.split(' ').collect();
                p.first() == Some(&"cgroup")
                    && p.get(2).is_some_and(|o| o.split(',').any(|o| o == c))
            })
        })
    };
    root() && v1("pids") && v1("memory")
}

fn installed(program: &str) -> bool {
    std::process::Command::new(program)
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok()
}

fn assume_unprivileged() -> bool {
    std::env::var_os("CORRAL_TEST_ASSUME_UNPRIVILEGED").is_some_and(|v| v == "1")
}

/// Whether the effective uid is 0 (from `/proc/self/status`).
fn euid_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().nth(1).map(|e| e == "0"))
            .unwrap_or(false)
    })
}

fn root() -> bool {
    !assume_unprivileged() && euid_is_root()
}

/// Both limits corral sets: the controller is enabled for the children of
/// this process's v2 group (as corral reads it), or this process's group in
/// the controller's v1 hierarchy accepts a child directory.
fn limits_available() -> bool {
    if !cgroup_available() {
        return false;
    }
    let Ok(mi) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let Ok(cg) = std::fs::read_to_string("/proc/self/cgroup") else {
        return false;
    };
    let v2_dir = mi.lines().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        let point = post
            .starts_with("cgroup2 ")
            .then(|| pre.split(' ').nth(4))??;
        let own = cg.lines().find_map(|l| l.strip_prefix("0::"))?;
        Some(std::path::Path::new(point).join(own.trim_start_matches('/')))
    });
    let subtree = v2_dir
        .and_then(|d| std::fs::read_to_string(d.join("cgroup.subtree_control")).ok())
        .unwrap_or_default();
    ["pids", "memory"]
        .iter()
        .all(|ctrl| subtree.split_whitespace().any(|c| c == *ctrl) || v1_writable(&mi, &cg, ctrl))
}

/// This process's group in the v1 hierarchy of `ctrl` accepts a child.
fn v1_writable(mountinfo: &str, proc_cgroup: &str, ctrl: &str) -> bool {
    let has = |opts: &str| opts.split(',').any(|o| o == ctrl);
    let Some(point) = mountinfo.lines().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        let mut f = post.split(' ');
        (f.next()? == "cgroup" && has(f.nth(1)?)).then(|| pre.split(' ').nth(4))?
    }) else {
        return false;
    };
    let Some(own) = proc_cgroup.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, ctrls, path) = (f.next()?, f.next()?, f.next()?);
        has(ctrls).then_some(path)
    }) else {
        return false;
    };
    let probe = std::path::Path::new(point)
        .join(own.trim_start_matches('/'))
        .join(format!("corral-probe-{}", std::process::id()));
    std::fs::create_dir(&probe).is_ok() && std::fs::remove_dir(&probe).is_ok()
}

#[cfg(target_os = "linux")]
mod ns {
    use std::os::unix::process::CommandExt;

    pub const CLONE_NEWNS: i32 = 0x0002_0000;
    pub const CLONE_NEWUSER: i32 = 0x1000_0000;
    pub const CLONE_NEWPID: i32 = 0x2000_0000;
    const EPERM: i32 = 1;

    extern "C" {
        fn unshare(flags: i32) -> i32;
    }

    /// `unshare(flags)` in a child process (single-threaded after the fork,
    /// as a new user namespace requires): `Err(errno)` if refused.
    pub fn probe(flags: i32) -> Result<(), i32> {
        let mut cmd = std::process::Command::new("true");
        cmd.stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        // SAFETY: the closure runs in the forked child before exec and only
        // makes one raw system call and reads errno (async-signal-safe).
        unsafe {
            cmd.pre_exec(move || {
                // SAFETY: unshare(2) takes no pointers; it changes only this
                // (child) process's namespaces.
                if unshare(flags) == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
        match cmd.status() {
            Ok(s) if s.success() => Ok(()),
            Ok(_) => Err(0),
            Err(e) => Err(e.raw_os_error().unwrap_or(0)),
        }
    }

    pub fn is_eperm(e: i32) -> bool {
        e == EPERM
    }
}

/// What corral's `pid-namespace` tier does: a new PID and mount namespace,
/// directly as root (again with a user namespace if that is refused with
/// EPERM, as in a container), and with a user namespace otherwise.
#[cfg(target_os = "linux")]
fn pidns_available() -> bool {
    let flags = ns::CLONE_NEWPID | ns::CLONE_NEWNS;
    if root() {
        match ns::probe(flags) {
            Ok(()) => return true,
            Err(e) if !ns::is_eperm(e) => return false,
            Err(_) => {}
        }
    }
    ns::probe(flags | ns::CLONE_NEWUSER).is_ok()
}

#[cfg(target_os = "linux")]
fn userns_available() -> bool {
    ns::probe(ns::CLONE_NEWUSER).is_ok()
}

#[cfg(not(target_os = "linux"))]
fn pidns_available() -> bool {
    false
}

#[cfg(not(target_os = "linux"))]
fn userns_available() -> bool {
    false
}
