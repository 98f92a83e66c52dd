//! The sandbox's escape suite (issue 33): one test per escape route, real
//! processes, the victims outside the tree checked from the host side
//! afterwards. Every test runs as root and as an unprivileged user (CI's
//! `corral-ci` step).

#![cfg(target_os = "linux")]

mod sandbox_common;

use corral::{Network, Sandbox};
use sandbox_common::*;

/// Runs `op` in a sandbox with `$OUT` (a victim directory outside), `$F`
/// (a file in it), `$D` (a directory in it), `$HOSTPID` (a host process
/// whose working directory is `$OUT` and which holds `$F` open for writing
/// as `$HOSTFD`); the victims are checked from the host afterwards.
fn write_outside_fails(op: &str) {
    let mut v = Victims::new();
    let f = v.file("f", "keep");
    let d = v.subdir("d");
    let host = HostHolder::new(v.dir(), &f);
    let s = corral_testkit::Scratch::new();
    let mut c = command(&s, &format!("( {op} ) ; exit 0"), Sandbox::new());
    c.env("OUT", v.dir())
        .env("F", &f)
        .env("D", &d)
        .env("HOSTPID", host.pid().to_string())
        .env("HOSTFD", "3");
    let r = c.run().expect("the sandboxed run starts");
    assert_eq!(r.exit_code(), Some(0), "{r:?}");
    drop(host);
    v.assert_untouched();
}

#[test]
fn write_outside_fails_create() {
    write_outside_fails(r#"echo x > "$OUT/new""#);
}

#[test]
fn write_outside_fails_truncate() {
    write_outside_fails(r#": > "$F""#);
}

#[test]
fn write_outside_fails_truncate_call() {
    write_outside_fails(r#"truncate -s 0 "$F""#);
}

#[test]
fn write_outside_fails_append() {
    write_outside_fails(r#"echo x >> "$F""#);
}

#[test]
fn write_outside_fails_unlink() {
    write_outside_fails(r#"rm -f "$F""#);
}

#[test]
fn write_outside_fails_rename_out() {
    write_outside_fails(r#"mv "$F" ./moved"#);
}

#[test]
fn write_outside_fails_rename_in() {
    write_outside_fails(r#"touch ./in && mv ./in "$OUT/in""#);
}

#[test]
fn write_outside_fails_mkdir() {
    write_outside_fails(r#"mkdir "$OUT/m""#);
}

#[test]
fn write_outside_fails_rmdir() {
    write_outside_fails(r#"rmdir "$D""#);
}

#[test]
fn write_outside_fails_chmod() {
    write_outside_fails(r#"chmod 777 "$F""#);
}

#[test]
fn write_outside_fails_chown() {
    write_outside_fails(r#"chown $(id -u):$(id -g) "$F""#);
}

#[test]
fn write_outside_fails_utimes() {
    write_outside_fails(r#"touch -d 2001-01-01 "$F""#);
}

#[test]
fn write_outside_fails_hard_link_out() {
    write_outside_fails(r#"ln "$F" ./hard"#);
}

#[test]
fn write_outside_fails_hard_link_in() {
    write_outside_fails(r#"touch ./x && ln ./x "$OUT/x""#);
}

#[test]
fn write_outside_fails_symlink() {
    write_outside_fails(r#"ln -s x "$OUT/sym""#);
}

#[test]
fn write_outside_fails_mknod() {
    write_outside_fails(r#"mkfifo "$OUT/fifo""#);
}

#[test]
fn write_outside_fails_via_planted_symlink() {
    write_outside_fails(
        r#"ln -s "$OUT" ./planted && echo x > ./planted/new && echo x >> ./planted/f"#,
    );
}

#[test]
fn write_outside_fails_via_proc_self_root() {
    write_outside_fails(r#"echo x > "/proc/self/root$F""#);
}

#[test]
fn write_outside_fails_via_host_process_cwd() {
    write_outside_fails(r#"echo x > "/proc/$HOSTPID/cwd/new""#);
}

#[test]
fn write_outside_fails_via_host_process_fd() {
    write_outside_fails(r#"echo x >> "/proc/$HOSTPID/fd/$HOSTFD""#);
}

#[test]
fn write_outside_fails_xattr() {
    write_outside_fails(
        r#"python3 -c 'import os,sys; os.setxattr(sys.argv[1], "user.x", b"1")' "$F""#,
    );
}

#[test]
fn write_outside_fails_unshare_inside() {
    write_outside_fails(
        r#"unshare -Urm sh -c 'echo x > "$OUT/new"; chmod 777 "$F"; mount -o remount,rw / ; echo x >> "$F"'"#,
    );
}

#[test]
fn writes_inside_the_working_directory_succeed() {
    let s = corral_testkit::Scratch::new();
    let r = run(
        &s,
        "echo hi > a && mkdir d && mv a d/b && ln d/b c && chmod 600 c && rm c && cat d/b",
        Sandbox::new(),
    );
    assert_eq!(r.exit_code(), Some(0), "{}", text(&r.stderr));
    assert_eq!(text(&r.stdout), "hi\n");
    assert_eq!(std::fs::read_to_string(s.path("d/b")).unwrap(), "hi\n");
}

#[test]
fn network_none_refuses_tcp_to_the_host() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let s = corral_testkit::Scratch::new();
    let script = format!(
        "python3 -c 'import socket,sys\ntry:\n socket.create_connection((\"127.0.0.1\",{port}),timeout=3)\n print(\"connected\")\nexcept OSError as e:\n print(\"refused\",e)'"
    );
    let r = run(&s, &script, Sandbox::new());
    assert!(text(&r.stdout).starts_with("refused"), "{r:?}");
    l.set_nonblocking(true).unwrap();
    assert!(l.accept().is_err(), "a connection reached the host");
}

#[test]
fn kill_of_a_host_process_fails() {
    let mut victim = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let pid = victim.id();
    let s = corral_testkit::Scratch::new();
    let r = run(&s, &format!("kill -9 {pid}; echo $?"), Sandbox::new());
    let alive = victim.try_wait().unwrap().is_none();
    let _ = victim.kill();
    let _ = victim.wait();
    assert!(alive, "the host process died: {r:?}");
    assert_ne!(text(&r.stdout).trim(), "0", "{r:?}");
}

#[test]
fn the_report_says_what_is_enforced() {
    let s = corral_testkit::Scratch::new();
    let r = run(&s, "true", Sandbox::new().network(Network::None));
    let sb = r.sandbox.as_ref().expect("a sandbox report");
    assert_eq!(sb.network, "none");
    assert!(sb.landlock_abi >= 6, "{sb:?}");
    assert!(!sb.rules.is_empty());
    assert!(sb
        .rules
        .iter()
        .all(|r| !r.by.is_empty() || r.status == "not_confined"));
    let plain = corral::Command::new("true").run().unwrap();
    assert!(plain.sandbox.is_none());
}
