//! The sandbox where namespaces are refused (issue 33's ladder) and on
//! std's spawn path: a test child (this binary re-run on one ignored test)
//! first installs a seccomp filter that denies `unshare`, `clone3` and
//! `clone(CLONE_NEWUSER)` (as Docker's default profile does), or turns the
//! clone3 path off, and then calls corral. Never by luck: the filter is
//! what takes the namespaces away.

#![cfg(target_os = "linux")]

mod sandbox_common;

use std::collections::BTreeMap;

use corral::{Network, Sandbox};
use corral_testkit::run_ignored_test_in_child;
use sandbox_common::*;
use seccompiler::{
    SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
};

const HELPER_ENV: &str = "CORRAL_TEST_SANDBOX_LADDER";

/// Denies this thread (and what it forks) every way to a new user
/// namespace: unshare (EPERM), clone3 (ENOSYS: callers fall back to
/// clone), clone with CLONE_NEWUSER (EPERM).
fn deny_namespaces() {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    rules.insert(libc::SYS_unshare, vec![]);
    rules.insert(
        libc::SYS_clone,
        vec![SeccompRule::new(vec![SeccompCondition::new(
            0,
            SeccompCmpArgLen::Qword,
            SeccompCmpOp::MaskedEq(libc::CLONE_NEWUSER as u64),
            libc::CLONE_NEWUSER as u64,
        )
        .unwrap()])
        .unwrap()],
    );
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        std::env::consts::ARCH.try_into().unwrap(),
    )
    .unwrap();
    let prog: seccompiler::BpfProgram = filter.try_into().unwrap();
    seccompiler::apply_filter(&prog).unwrap();
    let mut clone3: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    clone3.insert(libc::SYS_clone3, vec![]);
    let filter = SeccompFilter::new(
        clone3,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        std::env::consts::ARCH.try_into().unwrap(),
    )
    .unwrap();
    let prog: seccompiler::BpfProgram = filter.try_into().unwrap();
    seccompiler::apply_filter(&prog).unwrap();
    // The filter works: no user namespace for this thread.
    // SAFETY: unshare takes no pointer.
    assert_eq!(unsafe { libc::unshare(libc::CLONE_NEWUSER) }, -1);
}

#[test]
fn without_namespaces_the_ladder_keeps_the_policy_or_denies_instead() {
    let out = run_ignored_test_in_child(
        "ladder_helper",
        &[(HELPER_ENV.into(), "deny-namespaces".into())],
    );
    assert!(out.contains("ladder ok"), "{out}");
}

#[test]
fn on_std_spawn_path_the_sandbox_holds() {
    let out = run_ignored_test_in_child(
        "ladder_helper",
        &[
            (HELPER_ENV.into(), "std-path".into()),
            ("CORRAL_CLONE3".into(), "off".into()),
        ],
    );
    assert!(out.contains("std path ok"), "{out}");
}

/// The child's side of both tests.
#[test]
#[ignore = "run by the tests above in a child process"]
fn ladder_helper() {
    let mode = std::env::var(HELPER_ENV).expect("run by the tests above");
    let namespaces = mode != "deny-namespaces";
    if !namespaces {
        deny_namespaces();
    }
    // Host /tmp: a file the sandbox must not see.
    let host_tmp = corral_testkit::Scratch::new();
    std::fs::write(host_tmp.path("secret"), "s").unwrap();
    let mut v = Victims::new();
    let f = v.file("f", "keep");
    let s = corral_testkit::Scratch::new();
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    // The working directory: not under /tmp (without namespaces the
    // host's /tmp is denied).
    let cwd = Victims::new();
    let script = format!(
        r#"
        ( echo x >> "$F" ) 2>/dev/null; ( chmod 600 "$F" ) 2>/dev/null; ( touch -d 2001-01-01 "$F" ) 2>/dev/null
        ( echo x > "$OUT/new" ) 2>/dev/null
        echo in > ./inside || exit 11
        cat '{secret}' 2>/dev/null && exit 12
        [ "$LADDER" = 1 ] && [ "$(id -u)" = 0 ] && ! grep -q '^CapBnd:[[:space:]]*0000000000000000$' /proc/self/status && exit 13
        ( echo t > /tmp/t ) 2>/dev/null; cat /tmp/t 2>/dev/null; echo
        /usr/bin/python3 -c 'import socket
try:
    socket.create_connection(("127.0.0.1",{port}),timeout=3); print("connected")
except OSError: print("refused")'
        "#,
        secret = host_tmp.path("secret").display()
    );
    let mut c = command(&s, &script, Sandbox::new());
    c.current_dir(cwd.dir()).env("F", &f).env("OUT", v.dir());
    let r = c.run().expect("the sandboxed run starts");
    assert_eq!(r.exit_code(), Some(0), "{r:?}");
    let sb = r.sandbox.as_ref().unwrap();
    assert_eq!(sb.namespaces, namespaces, "{sb:?}");
    assert_eq!(sb.private_tmp, namespaces, "{sb:?}");
    let stdout = text(&r.stdout);
    assert!(stdout.ends_with("refused\n"), "{stdout}");
    // The refused connection is evidence in the report, on this path too,
    // counted exactly. (Only the TCP entry is asserted: a host's name
    // service, e.g. nscd or systemd's userdb, may try unix sockets of its
    // own from the same programs, and those are refused and listed too.)
    let tcp: Vec<_> = sb
        .denials
        .iter()
        .filter(|d| d.target.starts_with("AF_INET "))
        .map(|d| (d.operation.as_str(), d.target.as_str(), d.count))
        .collect();
    assert_eq!(
        tcp,
        vec![("socket", "AF_INET SOCK_STREAM protocol 6", 1)],
        "{sb:?}"
    );
    assert!(sb.denials.iter().all(|d| d.kind == "network"), "{sb:?}");
    if namespaces {
        // The private /tmp works, and is gone after the run.
        assert!(stdout.starts_with("t\n"), "{stdout}");
        assert!(!std::path::Path::new("/tmp/t").exists());
    } else {
        // Denied instead: /tmp is neither writable nor readable.
        assert!(stdout.starts_with("\n"), "{stdout}");
        let tmp = sb
            .rules
            .iter()
            .find(|r| r.rule.starts_with("private /tmp"))
            .unwrap();
        assert_eq!(tmp.status, "denied_instead", "{sb:?}");
        // A private loopback needs a network namespace: refused, nothing runs.
        let mut c = command(
            &s,
            "echo ran > ./ran",
            Sandbox::new().network(Network::Loopback),
        );
        c.current_dir(cwd.dir());
        match c.run() {
            Err(corral::Error::Sandbox { reason, .. }) => {
                assert!(reason.contains("network namespace"), "{reason}")
            }
            other => panic!("not refused: {other:?}"),
        }
        assert!(!cwd.dir().join("ran").exists());
    }
    assert_eq!(
        std::fs::read_to_string(cwd.dir().join("inside")).unwrap(),
        "in\n"
    );
    l.set_nonblocking(true).unwrap();
    assert!(l.accept().is_err());
    v.assert_untouched();
    println!(
        "{}",
        if namespaces {
            "std path ok"
        } else {
            "ladder ok"
        }
    );
}

#[test]
fn a_filter_installed_later_in_the_same_process_is_seen_at_the_next_spawn() {
    // On a thread of its own: the filter stays with that thread.
    std::thread::spawn(|| {
        let cwd = Victims::new();
        let s = corral_testkit::Scratch::new();
        let run_once = || {
            let mut c = command(&s, "echo in > ./inside", Sandbox::new());
            c.current_dir(cwd.dir());
            c.run().expect("the sandboxed run starts")
        };
        let before = run_once();
        assert_eq!(before.exit_code(), Some(0), "{before:?}");
        assert!(before.sandbox.unwrap().namespaces);
        deny_namespaces();
        let after = run_once();
        assert_eq!(after.exit_code(), Some(0), "{after:?}");
        assert!(
            !after.sandbox.unwrap().namespaces,
            "the ladder, not a stale answer"
        );
    })
    .join()
    .unwrap();
}
