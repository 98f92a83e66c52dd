//! The sandbox's escape suite (issue 33): one test per escape route, real
//! processes, the victims outside the tree checked from the host side
//! afterwards. Every test runs as root and as an unprivileged user (CI's
//! `corral-ci` step).

#![cfg(target_os = "linux")]

mod sandbox_common;

use corral::{Network, Sandbox};
use sandbox_common::*;
use std::os::unix::process::CommandExt;

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
        r#"/usr/bin/python3 -c 'import os,sys; os.setxattr(sys.argv[1], "user.x", b"1")' "$F""#,
    );
}

#[test]
fn write_outside_fails_unshare_inside() {
    // A new user and mount namespace inside (without id maps: /proc is
    // not writable in the sandbox, so `unshare -r` cannot map itself).
    write_outside_fails(
        r#"unshare -Um --propagation unchanged sh -c 'mount -o remount,rw / ; echo x > "$OUT/new"; chmod 777 "$F"; echo x >> "$F"'"#,
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
        "/usr/bin/python3 -c 'import socket,sys\ntry:\n socket.create_connection((\"127.0.0.1\",{port}),timeout=3)\n print(\"connected\")\nexcept OSError as e:\n print(\"refused\",e)'"
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

/// Runs a Python program in the sandbox (arguments after it).
fn py(s: &corral_testkit::Scratch, program: &str, policy: Sandbox) -> corral::Report {
    let mut c = command(s, "exec /usr/bin/python3 -c \"$PROG\"", policy);
    c.env("PROG", program);
    c.run().expect("the sandboxed run starts")
}

#[test]
fn deny_read_refuses_reading_listing_and_executing() {
    let mut v = Victims::new();
    let f = v.file("secret", "s3cret");
    let exe = v.dir().join("tool");
    corral_testkit::write_executable(&exe, "#!/bin/sh\necho ran\n");
    let s = corral_testkit::Scratch::new();
    let script = format!(
        "cat '{f}'; echo rc=$?; ls '{d}'; echo rc=$?; '{exe}'; echo rc=$?; cat /etc/hostname >/dev/null; echo other=$?",
        f = f.display(),
        d = v.dir().display(),
        exe = exe.display()
    );
    let r = run(&s, &script, Sandbox::new().deny_read(v.dir()));
    let out = text(&r.stdout);
    assert!(
        !out.contains("s3cret") && !out.contains("ran") && !out.contains("tool"),
        "{out}"
    );
    assert_eq!(out.matches("rc=0").count(), 0, "{out}");
    assert!(out.contains("other=0"), "the rest stays readable: {out}");
    let sb = r.sandbox.unwrap();
    assert!(
        sb.deny_read.contains(&v.dir().display().to_string()),
        "{sb:?}"
    );
}

#[test]
fn deny_read_holds_through_a_symlink_in_the_working_directory() {
    let mut v = Victims::new();
    v.file("secret", "s3cret");
    let s = corral_testkit::Scratch::new();
    std::os::unix::fs::symlink(v.dir(), s.path("link")).unwrap();
    let r = run(
        &s,
        "cat link/secret; ls link",
        Sandbox::new().deny_read(v.dir()),
    );
    assert!(!text(&r.stdout).contains("s3cret"), "{r:?}");
    assert!(!text(&r.stdout).contains("secret"), "{r:?}");
}

#[test]
fn host_tmp_is_invisible_and_the_private_tmp_is_gone_after_the_run() {
    let host = corral_testkit::Scratch::new();
    std::fs::write(host.path("host-file"), "h").unwrap();
    let s = corral_testkit::Scratch::new();
    let name = format!("corral-private-{}", std::process::id());
    let script = format!(
        "cat '{h}' 2>/dev/null && echo SEEN; echo p > /tmp/{name} && cat /tmp/{name}; echo q > /dev/shm/{name} && cat /dev/shm/{name}; ls /tmp | wc -l",
        h = host.path("host-file").display()
    );
    let r = run(&s, &script, Sandbox::new());
    let out = text(&r.stdout);
    assert!(!out.contains("SEEN"), "{out}");
    assert!(out.starts_with("p\nq\n"), "{out}");
    assert!(!std::path::Path::new(&format!("/tmp/{name}")).exists());
    assert!(!std::path::Path::new(&format!("/dev/shm/{name}")).exists());
    // A second run does not see the first one's /tmp either.
    let r = run(
        &s,
        &format!("cat /tmp/{name} 2>/dev/null && echo SEEN; exit 0"),
        Sandbox::new(),
    );
    assert!(!text(&r.stdout).contains("SEEN"), "{r:?}");
}

#[test]
fn network_none_refuses_udp_to_the_host() {
    let u = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = u.local_addr().unwrap().port();
    let s = corral_testkit::Scratch::new();
    let r = py(
        &s,
        &format!(
            "import socket\ntry:\n s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.sendto(b'x',('127.0.0.1',{port})); print('sent')\nexcept OSError as e: print('refused')"
        ),
        Sandbox::new(),
    );
    assert_eq!(text(&r.stdout), "refused\n", "{r:?}");
    u.set_nonblocking(true).unwrap();
    assert!(
        u.recv(&mut [0u8; 8]).is_err(),
        "a datagram reached the host"
    );
}

#[test]
fn network_none_name_lookups_fail_at_once() {
    let s = corral_testkit::Scratch::new();
    let t = std::time::Instant::now();
    let r = py(
        &s,
        "import socket\ntry:\n socket.getaddrinfo('example.com', 80); print('resolved')\nexcept OSError: print('failed')",
        Sandbox::new(),
    );
    assert_eq!(text(&r.stdout), "failed\n", "{r:?}");
    assert!(
        t.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        t.elapsed()
    );
}

#[test]
fn network_none_refuses_a_host_abstract_socket() {
    use std::os::linux::net::SocketAddrExt;
    let name = format!("corral-test-abstract-{}", std::process::id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let l = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
    let s = corral_testkit::Scratch::new();
    for net in [Network::None, Network::Loopback] {
        let r = py(
            &s,
            &format!(
                "import socket\ntry:\n s=socket.socket(socket.AF_UNIX); s.connect('\\0{name}'); print('connected')\nexcept OSError: print('refused')"
            ),
            Sandbox::new().network(net),
        );
        assert_eq!(text(&r.stdout), "refused\n", "{net}: {r:?}");
    }
    l.set_nonblocking(true).unwrap();
    assert!(l.accept().is_err(), "a connection reached the host");
}

#[test]
fn network_none_refuses_a_host_pathname_socket() {
    // A listener outside the writable paths (think docker.sock), readable.
    let v = Victims::new();
    let path = v.dir().join("host.sock");
    let l = std::os::unix::net::UnixListener::bind(&path).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let s = corral_testkit::Scratch::new();
    for net in [Network::None, Network::Loopback] {
        let r = py(
            &s,
            &format!(
                "import socket\ntry:\n s=socket.socket(socket.AF_UNIX); s.connect('{}'); print('connected')\nexcept OSError: print('refused')",
                path.display()
            ),
            Sandbox::new().network(net),
        );
        assert_eq!(text(&r.stdout), "refused\n", "{net}: {r:?}");
    }
    l.set_nonblocking(true).unwrap();
    assert!(l.accept().is_err(), "a connection reached the host");
}

#[test]
fn network_loopback_reaches_its_own_server_but_not_the_hosts() {
    let host = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = host.local_addr().unwrap().port();
    let s = corral_testkit::Scratch::new();
    let r = py(
        &s,
        &format!(
            "import socket,threading
srv=socket.socket(); srv.bind(('127.0.0.1',0)); srv.listen()
def serve():
    c,_=srv.accept(); c.sendall(b'hello'); c.close()
threading.Thread(target=serve).start()
c=socket.create_connection(('127.0.0.1',srv.getsockname()[1]),timeout=5); print(c.recv(5).decode())
try:
    socket.create_connection(('127.0.0.1',{port}),timeout=3); print('host reached')
except OSError: print('host refused')"
        ),
        Sandbox::new().network(Network::Loopback),
    );
    assert_eq!(text(&r.stdout), "hello\nhost refused\n", "{r:?}");
    host.set_nonblocking(true).unwrap();
    assert!(host.accept().is_err(), "a connection reached the host");
}

#[test]
fn ptrace_of_a_host_process_fails() {
    let mut victim = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let pid = victim.id();
    let s = corral_testkit::Scratch::new();
    let r = py(
        &s,
        &format!(
            "import ctypes
libc=ctypes.CDLL(None,use_errno=True)
print(libc.ptrace(16,{pid},0,0))
try:
    open('/proc/{pid}/mem','rb').read(1); print('mem read')
except OSError: print('mem refused')"
        ),
        Sandbox::new(),
    );
    let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let alive = victim.try_wait().unwrap().is_none();
    let _ = victim.kill();
    let _ = victim.wait();
    assert_eq!(text(&r.stdout), "-1\nmem refused\n", "{r:?}");
    assert!(alive);
    assert!(
        !state.contains(") t ") && !state.contains(") T "),
        "stopped: {state}"
    );
}

#[corral_testkit::needs(root)]
#[test]
fn a_set_uid_binary_gives_nothing() {
    // A set-uid copy of id(1) owned by nobody: outside it runs as nobody
    // (the control), inside as the caller.
    let v = Victims::new();
    let exe = v.dir().join("suid-id");
    // Written by install(1), never held open for writing here (a thread
    // forking meanwhile would pass the descriptor on: ETXTBSY at exec).
    let st = std::process::Command::new("install")
        .args(["-m", "4755", "-o", "65534", "-g", "65534", "/usr/bin/id"])
        .arg(&exe)
        .status()
        .unwrap();
    assert!(st.success());
    let host = std::process::Command::new(&exe).arg("-u").output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&host.stdout),
        "65534\n",
        "the control"
    );
    let s = corral_testkit::Scratch::new();
    let r = run(&s, &format!("'{}' -u", exe.display()), Sandbox::new());
    assert_eq!(text(&r.stdout), "0\n", "{r:?}");
}

#[test]
fn kill_of_a_host_process_group_fails() {
    let mut victim = std::process::Command::new("sleep")
        .arg("30")
        .process_group(0)
        .spawn()
        .unwrap();
    let pid = victim.id();
    let s = corral_testkit::Scratch::new();
    let r = run(
        &s,
        &format!("kill -9 -- -{pid}; kill -STOP {pid}; echo done"),
        Sandbox::new(),
    );
    let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let alive = victim.try_wait().unwrap().is_none();
    let _ = victim.kill();
    let _ = victim.wait();
    assert!(alive, "{r:?}");
    assert!(!state.contains(") T "), "stopped: {state}");
}

#[test]
fn a_bad_policy_runs_nothing() {
    let s = corral_testkit::Scratch::new();
    let mut c = command(
        &s,
        "echo ran > ran",
        Sandbox::new().allow_write("/nonexistent/corral"),
    );
    match c.run() {
        Err(corral::Error::InvalidInput(m)) => assert!(m.contains("allow_write"), "{m}"),
        other => panic!("{other:?}"),
    }
    let mut c = command(&s, "echo ran > ran", Sandbox::new().allow_write("relative"));
    assert!(matches!(c.run(), Err(corral::Error::InvalidInput(_))));
    assert!(!s.path("ran").exists());
}

#[test]
fn building_the_sandbox_counts_against_the_deadline() {
    // A deadline already past: the setup is given up, nothing runs.
    let s = corral_testkit::Scratch::new();
    let mut c = command(&s, "echo ran > ran", Sandbox::new());
    c.deadline(std::time::Instant::now());
    match c.run() {
        Err(corral::Error::Sandbox { reason, .. }) => {
            assert!(reason.contains("deadline"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    assert!(!s.path("ran").exists());
}

#[test]
fn block_devices_and_kernel_memory_are_not_readable() {
    // A raw disk reads around every rule (deny_read, the private /tmp).
    use std::os::unix::fs::FileTypeExt;
    let block: Vec<std::path::PathBuf> = std::fs::read_dir("/dev")
        .unwrap()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_block_device()))
        .map(|e| e.path())
        .collect();
    let s = corral_testkit::Scratch::new();
    let mut script = String::from("for f in /dev/mem /dev/kmem /dev/port");
    for b in &block {
        script.push_str(&format!(" '{}'", b.display()));
    }
    script.push_str("; do [ -e \"$f\" ] && head -c 1 \"$f\" >/dev/null 2>&1 && echo \"read $f\"; done; mknod ./blk b 1 1 2>/dev/null && echo mknod; exit 0");
    let r = run(&s, &script, Sandbox::new());
    assert_eq!(r.exit_code(), Some(0), "{r:?}");
    assert_eq!(text(&r.stdout), "", "{r:?}");
}

#[test]
fn terminal_input_cannot_be_injected() {
    // TIOCSTI on a terminal shared with a shell would run commands
    // outside the sandbox; the run's own pty still works.
    let s = corral_testkit::Scratch::new();
    let mut c = s.sh(
        "/usr/bin/python3 -c 'import fcntl,termios,os\nprint(os.isatty(0))\ntry:\n fcntl.ioctl(0, termios.TIOCSTI, b\"x\"); print(\"injected\")\nexcept OSError as e: print(\"refused\", e.errno)'",
    );
    c.current_dir(s.dir())
        .pty(corral::PtySize::default())
        .timeout(std::time::Duration::from_secs(30))
        .sandbox(Sandbox::new());
    let r = c.run().expect("the sandboxed run starts");
    let out = text(&r.stdout).replace('\r', "");
    assert!(out.contains("True\nrefused 1"), "{out:?} {r:?}");
}

/// `deny_read` paths inside a writable one (`base`: the working directory
/// or an `allow_write` path) are masked by mounts in the mount namespace: a
/// file and a directory cannot be read, listed or executed, directly or
/// through a symlink in the working directory; the tree cannot unmount the
/// masks (the calls fail and the paths stay unreadable); the command ran
/// (its own exit code) and the host's files are intact.
fn deny_read_inside_a_writable_path(in_cwd: bool) {
    let s = corral_testkit::Scratch::new();
    let other = corral_testkit::Scratch::new();
    let base = if in_cwd { s.dir() } else { other.dir() };
    let secret = base.join("secret");
    std::fs::write(&secret, "s3cret").unwrap();
    let tool = base.join("tool");
    corral_testkit::write_executable(&tool, "#!/bin/sh\necho ran-tool\n");
    let dir = base.join("dir");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("inner"), "inner-s3cret").unwrap();
    corral_testkit::write_executable(&dir.join("tool2"), "#!/bin/sh\necho ran-tool2\n");
    std::os::unix::fs::symlink(&dir, s.path("link")).unwrap();
    std::os::unix::fs::symlink(&secret, s.path("link2")).unwrap();
    let mut policy = Sandbox::new()
        .deny_read(&secret)
        .deny_read(&tool)
        .deny_read(&dir);
    if !in_cwd {
        policy = policy.allow_write(other.dir());
    }
    let script = r#"
        cat "$B/secret"; echo rc=$?
        "$B/tool"; echo rc=$?
        ls "$B/dir"; echo rc=$?
        cat "$B/dir/inner"; echo rc=$?
        "$B/dir/tool2"; echo rc=$?
        cat link/inner; echo rc=$?
        ls link; echo rc=$?
        cat link2; echo rc=$?
        /usr/bin/python3 -c '
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
for p in sys.argv[1:]:
    for flags in (0, 2):
        print("umount", libc.umount2(p.encode(), flags))
' "$B/secret" "$B/tool" "$B/dir"
        umount "$B/dir" 2>/dev/null; echo umount-cmd=$?
        cat "$B/secret"; echo rc=$?
        ls "$B/dir"; echo rc=$?
        echo done
        exit 3
    "#;
    let mut c = command(&s, script, policy);
    c.env("B", base);
    let r = c.run().expect("the sandboxed run starts");
    let out = text(&r.stdout);
    assert_eq!(r.exit_code(), Some(3), "the command ran: {r:?}");
    assert!(out.contains("done"), "{out}");
    for leaked in ["s3cret", "ran-tool", "inner", "tool2"] {
        assert!(!out.contains(leaked), "{leaked} leaked: {out}");
    }
    assert_eq!(out.matches("rc=").count(), 10, "{out}");
    assert_eq!(out.matches("rc=0").count(), 0, "{out}");
    assert_eq!(out.matches("umount -1").count(), 6, "{out}");
    assert!(!out.contains("umount-cmd=0"), "{out}");
    // The host's files are intact.
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "s3cret");
    assert_eq!(
        std::fs::read_to_string(dir.join("inner")).unwrap(),
        "inner-s3cret"
    );
    assert!(std::fs::read_to_string(&tool).unwrap().contains("ran-tool"));
    let sb = r.sandbox.unwrap();
    assert!(sb.namespaces, "{sb:?}");
    assert!(sb.deny_read.contains(&dir.display().to_string()), "{sb:?}");
}

#[test]
fn deny_read_inside_the_working_directory_is_masked() {
    deny_read_inside_a_writable_path(true);
}

#[test]
fn deny_read_inside_an_allow_write_path_is_masked() {
    deny_read_inside_a_writable_path(false);
}

/// The private /dev (mount namespace): only the usual devices are there,
/// the host's raw devices, kernel log and terminals are not reachable;
/// /dev/null and /dev/zero work; nothing in /dev can be created, removed,
/// re-moded or unmounted, and the host's /dev/null is unchanged after.
#[test]
fn the_private_dev_holds_only_the_usual_devices() {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let mut probe: Vec<String> = [
        "/dev/kmsg",
        "/dev/mem",
        "/dev/kmem",
        "/dev/port",
        "/dev/console",
        "/dev/ptmx",
        "/dev/tty0",
        "/dev/ttyS0",
        "/dev/fuse",
        "/dev/net/tun",
        "/dev/cpu/0/msr",
        "/dev/loop0",
        "/dev/sda",
        "/dev/vda",
    ]
    .map(String::from)
    .to_vec();
    for dir in ["/dev", "/dev/pts"] {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let block = e.file_type().is_ok_and(|t| t.is_block_device());
            if block || dir == "/dev/pts" {
                probe.push(e.path().display().to_string());
            }
        }
    }
    let s = corral_testkit::Scratch::new();
    let script = format!(
        r#"
        echo "ls: $(ls -A /dev | tr '\n' ' ')"
        for f in {}; do
            [ -e "$f" ] && echo "present $f"
            head -c 1 "$f" >/dev/null 2>&1 && echo "read $f"
        done
        echo x > /dev/null && echo null-ok
        [ "$(head -c 4 /dev/zero | wc -c)" -eq 4 ] && echo zero-ok
        ( : > /dev/new ) 2>/dev/null && echo created
        ( mkdir /dev/newdir ) 2>/dev/null && echo mkdir
        ( ln -s /etc /dev/link ) 2>/dev/null && echo symlink
        ( chmod 600 /dev/null ) 2>/dev/null && echo chmod
        ( rm -f /dev/null /dev/fd ) 2>/dev/null
        [ -c /dev/null ] && [ -L /dev/fd ] || echo removed
        ( umount /dev/null; umount -l /dev ) 2>/dev/null
        echo "after: $(ls -A /dev | tr '\n' ' ')"
        exit 0
        "#,
        probe.join(" ")
    );
    let r = run(&s, &script, Sandbox::new());
    assert_eq!(r.exit_code(), Some(0), "{r:?}");
    assert!(r.sandbox.as_ref().is_some_and(|sb| sb.namespaces), "{r:?}");
    let out = text(&r.stdout);
    let usual = [
        "fd", "full", "null", "random", "shm", "stderr", "stdin", "stdout", "tty", "urandom",
        "zero",
    ];
    let listed = out
        .lines()
        .find_map(|l| l.strip_prefix("ls: "))
        .unwrap_or_else(|| panic!("{out}"));
    let names: Vec<&str> = listed.split_whitespace().collect();
    assert!(names.contains(&"null") && names.contains(&"zero"), "{out}");
    assert!(names.iter().all(|n| usual.contains(n)), "{out}");
    assert!(out.contains(&format!("after: {listed}")), "{out}");
    assert!(out.contains("null-ok") && out.contains("zero-ok"), "{out}");
    for bad in [
        "present", "read ", "created", "mkdir", "symlink", "chmod", "removed",
    ] {
        assert!(!out.contains(bad), "{bad}: {out}");
    }
    let null = std::fs::metadata("/dev/null").unwrap();
    assert!(null.file_type().is_char_device());
    assert_eq!(null.permissions().mode() & 0o7777, 0o666);
}

/// Under `Command::pty` the run's own terminal is in the private /dev
/// (`tty` names it, it opens by that name), and it is the only one there.
#[test]
fn the_pty_is_bound_into_the_private_dev() {
    let s = corral_testkit::Scratch::new();
    let mut c = s.sh(
        r#"t=$(tty); echo "tty=$t"; echo hello > "$t" && echo wrote; echo "pts: $(ls /dev/pts | tr '\n' ' ')"; ( chmod 600 "$t" ) 2>/dev/null && echo chmod; exit 0"#,
    );
    c.current_dir(s.dir())
        .pty(corral::PtySize::default())
        .timeout(std::time::Duration::from_secs(30))
        .sandbox(Sandbox::new());
    let r = c.run().expect("the sandboxed run starts");
    let out = text(&r.stdout).replace('\r', "");
    assert_eq!(r.exit_code(), Some(0), "{out:?} {r:?}");
    let n = out
        .lines()
        .find_map(|l| l.strip_prefix("tty=/dev/pts/"))
        .unwrap_or_else(|| panic!("{out:?}"));
    assert!(out.contains("hello\nwrote\n"), "{out:?}");
    assert!(out.contains(&format!("pts: {n} \n")), "{out:?}");
    assert!(!out.contains("chmod"), "{out:?}");
}

/// A `deny_read` path in /dev keeps the host's /dev (a rule per device):
/// the denied device is not readable, /dev/null still writable, and the
/// raw devices and the kernel log stay unreadable there too.
#[test]
fn a_denied_device_is_not_readable() {
    use std::os::unix::fs::FileTypeExt;
    let mut probe = String::from("/dev/mem /dev/kmem /dev/port /dev/kmsg");
    for e in std::fs::read_dir("/dev").unwrap().flatten() {
        if e.file_type().is_ok_and(|t| t.is_block_device()) {
            probe.push_str(&format!(" '{}'", e.path().display()));
        }
    }
    let s = corral_testkit::Scratch::new();
    let r = run(
        &s,
        &format!(
            r#"head -c 1 /dev/zero >/dev/null 2>&1 && echo read-zero
            head -c 1 /dev/urandom | wc -c
            echo x > /dev/null && echo null-ok
            for f in {probe}; do [ -e "$f" ] && head -c 1 "$f" >/dev/null 2>&1 && echo "read $f"; done
            exit 0"#
        ),
        Sandbox::new().deny_read("/dev/zero"),
    );
    let out = text(&r.stdout);
    assert_eq!(r.exit_code(), Some(0), "{r:?}");
    assert!(!out.contains("read"), "{out}");
    assert!(out.contains("1\n") && out.contains("null-ok"), "{out}");
}
