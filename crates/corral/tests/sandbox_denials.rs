//! Denials are evidence, not guesses (issue 33): the `socket(2)` calls a
//! sandbox's network policy refuses are notified to corral by the kernel
//! (seccomp user notification) and listed in the report with exact
//! counts; the command sees the same `EPERM` as under the plain filter;
//! what is not observed (files, processes) says so. Real processes, as
//! root and as an unprivileged user.

#![cfg(target_os = "linux")]

mod sandbox_common;

use std::time::{Duration, Instant};

use corral::{Network, Sandbox, SandboxDenial, SandboxReport};
use corral_testkit::run_ignored_test_in_child;
use sandbox_common::*;

/// The library's test hook: its supervisor leaves each notification
/// unanswered until the run's report is made.
const HOLD_ENV: &str = "CORRAL_TEST_SECCOMP_HOLD";
const HELPER_ENV: &str = "CORRAL_TEST_DENIALS_HELPER";

/// Runs a Python program in the sandbox.
fn py(s: &corral_testkit::Scratch, program: &str, policy: Sandbox) -> corral::Command {
    let mut c = command(s, "exec /usr/bin/python3 -c \"$PROG\"", policy);
    c.env("PROG", program);
    c
}

fn listed(sb: &SandboxReport) -> Vec<(String, String, String, u64)> {
    sb.denials
        .iter()
        .map(|d: &SandboxDenial| {
            (
                d.kind.clone(),
                d.operation.clone(),
                d.target.clone(),
                d.count,
            )
        })
        .collect()
}

fn net(target: &str, count: u64) -> (String, String, String, u64) {
    ("network".into(), "socket".into(), target.into(), count)
}

fn observed(sb: &SandboxReport, kind: &str) -> bool {
    sb.denials_observed
        .iter()
        .find(|o| o.kind == kind)
        .unwrap_or_else(|| panic!("no {kind} in {sb:?}"))
        .observed
}

/// Three TCP attempts to a host listener, two UDP datagrams to a host
/// socket and one connect to a host pathname socket, each refused: the
/// command sees EPERM each time, nothing reaches the host, and the report
/// lists exactly those attempts.
fn attempts_are_listed_with_exact_counts(containment: corral::ContainmentChoice) {
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let v = Victims::new();
    let path = v.dir().join("host.sock");
    let unix = std::os::unix::net::UnixListener::bind(&path).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let program = format!(
        r#"import socket
def attempt(kind, f):
    try:
        f(); print(kind, "ok")
    except OSError as e:
        print(kind, e.errno)
def tcp():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM); s.connect(("127.0.0.1", {tport}))
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b"x", ("127.0.0.1", {uport}))
def unix():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.connect("{path}")
for _ in range(3): attempt("tcp", tcp)
for _ in range(2): attempt("udp", udp)
attempt("unix", unix)
"#,
        tport = tcp.local_addr().unwrap().port(),
        uport = udp.local_addr().unwrap().port(),
        path = path.display()
    );
    let s = corral_testkit::Scratch::new();
    let mut c = py(&s, &program, Sandbox::new());
    c.containment(containment);
    let r = c.run().expect("the sandboxed run starts");
    assert_eq!(r.exit_code(), Some(0), "{r:?}");
    // The errno the plain filter gave: EPERM, every time.
    let eperm = libc::EPERM;
    assert_eq!(
        text(&r.stdout),
        format!("tcp {eperm}\ntcp {eperm}\ntcp {eperm}\nudp {eperm}\nudp {eperm}\nunix {eperm}\n"),
        "{r:?}"
    );
    let sb = r.sandbox.as_ref().unwrap();
    assert_eq!(
        listed(sb),
        vec![
            net("AF_INET SOCK_STREAM", 3),
            net("AF_INET SOCK_DGRAM", 2),
            net("AF_UNIX SOCK_STREAM", 1),
        ],
        "{sb:?}"
    );
    assert_eq!(sb.denials_unlisted, 0);
    assert!(observed(sb, "network"), "{sb:?}");
    // What is not observed says so, and why.
    for kind in ["files", "processes"] {
        let o = sb.denials_observed.iter().find(|o| o.kind == kind).unwrap();
        assert!(!o.observed && o.how.starts_with("not observed"), "{o:?}");
    }
    // Nothing reached the host.
    tcp.set_nonblocking(true).unwrap();
    assert!(tcp.accept().is_err(), "a connection reached the host");
    udp.set_nonblocking(true).unwrap();
    assert!(
        udp.recv(&mut [0u8; 8]).is_err(),
        "a datagram reached the host"
    );
    unix.set_nonblocking(true).unwrap();
    assert!(unix.accept().is_err(), "a connection reached the host");
}

#[test]
fn network_denials_are_listed_with_exact_counts() {
    attempts_are_listed_with_exact_counts(corral::ContainmentChoice::Auto);
}

#[corral_testkit::needs(pidns)]
#[test]
fn network_denials_are_listed_through_the_pid_namespace_init() {
    attempts_are_listed_with_exact_counts(corral::ContainmentChoice::Only(
        corral::Mechanism::PidNamespace,
    ));
}

/// Attempts by several processes of the tree (a forked child included)
/// add up in one count.
#[test]
fn attempts_across_the_tree_add_up() {
    let s = corral_testkit::Scratch::new();
    let r = py(
        &s,
        "import os, socket\n\
         def one():\n    try: socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)\n    except OSError: pass\n\
         pids = []\n\
         for _ in range(4):\n    p = os.fork()\n    if p == 0:\n        for _ in range(5): one()\n        os._exit(0)\n    pids.append(p)\n\
         for p in pids: os.waitpid(p, 0)\n\
         one()\n",
        Sandbox::new(),
    )
    .run()
    .unwrap();
    assert_eq!(r.exit_code(), Some(0), "{r:?}");
    let sb = r.sandbox.as_ref().unwrap();
    assert_eq!(listed(sb), vec![net("AF_INET6 SOCK_DGRAM", 21)], "{sb:?}");
}

#[test]
fn a_run_without_attempts_lists_none() {
    let s = corral_testkit::Scratch::new();
    let r = run(&s, "echo hi", Sandbox::new());
    assert_eq!(text(&r.stdout), "hi\n");
    let sb = r.sandbox.as_ref().unwrap();
    assert!(sb.denials.is_empty(), "{sb:?}");
    assert_eq!(sb.denials_unlisted, 0);
    assert!(observed(sb, "network"), "{sb:?}");
}

/// Under `loopback` the host's pathname sockets are refused (listed); TCP
/// reaches the sandbox's own loopback, where the host's port is absent
/// (ECONNREFUSED), not denied: not listed. Under `host` nothing is
/// refused and the report says network denials are not observed.
#[test]
fn loopback_lists_unix_sockets_and_host_lists_nothing() {
    let v = Victims::new();
    let path = v.dir().join("host.sock");
    let _unix = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let program = format!(
        "import socket\n\
         for f, a in [(socket.AF_UNIX, '{}'), (socket.AF_INET, ('127.0.0.1', {}))]:\n\
         \x20   try:\n        s = socket.socket(f, socket.SOCK_STREAM); s.connect(a); print('ok')\n\
         \x20   except OSError as e: print(e.errno)\n",
        path.display(),
        tcp.local_addr().unwrap().port()
    );
    let s = corral_testkit::Scratch::new();
    let r = py(&s, &program, Sandbox::new().network(Network::Loopback))
        .run()
        .unwrap();
    assert_eq!(
        text(&r.stdout),
        format!("{}\n{}\n", libc::EPERM, libc::ECONNREFUSED),
        "{r:?}"
    );
    let sb = r.sandbox.as_ref().unwrap();
    assert_eq!(listed(sb), vec![net("AF_UNIX SOCK_STREAM", 1)], "{sb:?}");
    assert!(observed(sb, "network"));

    let r = run(&s, "true", Sandbox::new().network(Network::Host));
    let sb = r.sandbox.as_ref().unwrap();
    assert!(sb.denials.is_empty(), "{sb:?}");
    assert!(!observed(sb, "network"), "{sb:?}");
}

/// The deadline still ends a run whose command is blocked in a notified
/// call (the supervisor holds it unanswered: `CORRAL_TEST_SECCOMP_HOLD`,
/// process-wide, so in a child process); the attempt is still counted.
#[test]
fn the_deadline_ends_a_call_held_in_notification() {
    let out = run_ignored_test_in_child("denials_helper", &[(HELPER_ENV.into(), "hold".into())]);
    assert!(out.contains("hold ok"), "{out}");
}

/// Where the kernel gives no listener (a filter around corral already has
/// one: EBUSY), the calls are refused with the same EPERM and the report
/// says network denials are not observed, listing none.
#[test]
fn without_a_listener_the_report_says_not_observed() {
    let out = run_ignored_test_in_child("denials_helper", &[(HELPER_ENV.into(), "busy".into())]);
    assert!(out.contains("busy ok"), "{out}");
}

/// Installs, on this thread, an allow-everything seccomp filter that holds
/// the process's one user-notification listener.
fn take_the_listener() {
    // SAFETY: PR_SET_NO_NEW_PRIVS takes no pointer.
    let nnp = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
    assert_eq!(nnp, 0);
    let allow = [libc::sock_filter {
        code: 0x06, // BPF_RET | BPF_K
        jt: 0,
        jf: 0,
        k: libc::SECCOMP_RET_ALLOW,
    }];
    let prog = libc::sock_fprog {
        len: 1,
        filter: allow.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: the kernel reads the one-instruction program.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
            &prog as *const libc::sock_fprog,
        )
    };
    assert!(fd >= 0, "{}", std::io::Error::last_os_error());
}

/// The child's side of the tests above.
#[test]
#[ignore = "run by the tests above in a child process"]
fn denials_helper() {
    let mode = std::env::var(HELPER_ENV).expect("run by the tests above");
    let s = corral_testkit::Scratch::new();
    match mode.as_str() {
        "hold" => {
            std::env::set_var(HOLD_ENV, "1");
            let mut c = py(
                &s,
                "import socket\nprint('trying', flush=True)\nsocket.socket()\nprint('answered')",
                Sandbox::new(),
            );
            c.timeout(Duration::from_secs(1));
            let t = Instant::now();
            let r = c.run().expect("the sandboxed run starts");
            let took = t.elapsed();
            assert_eq!(r.outcome, corral::Outcome::TimedOut, "{r:?}");
            assert!(took < Duration::from_secs(10), "{took:?}");
            assert_eq!(text(&r.stdout), "trying\n", "{r:?}");
            let sb = r.sandbox.as_ref().unwrap();
            assert_eq!(listed(sb), vec![net("AF_INET SOCK_STREAM", 1)], "{sb:?}");
            println!("hold ok");
        }
        "busy" => {
            // On this thread: corral spawns from it, so its child inherits
            // the filter and cannot have a listener of its own.
            take_the_listener();
            let r = py(
                &s,
                "import socket\ntry:\n socket.socket(); print('ok')\nexcept OSError as e: print(e.errno)",
                Sandbox::new(),
            )
            .run()
            .expect("the sandboxed run starts");
            assert_eq!(text(&r.stdout), format!("{}\n", libc::EPERM), "{r:?}");
            let sb = r.sandbox.as_ref().unwrap();
            assert!(sb.denials.is_empty(), "{sb:?}");
            let o = sb
                .denials_observed
                .iter()
                .find(|o| o.kind == "network")
                .unwrap();
            assert!(
                !o.observed && o.how.contains("no seccomp listener"),
                "{o:?}"
            );
            println!("busy ok");
        }
        other => panic!("unknown mode {other}"),
    }
}
