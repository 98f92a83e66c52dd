//! The cgroup tier's clone3 spawn (`sys/linux_spawn/`): the child is born
//! in its cgroup and behaves like a child started by std.
//!
//! Every test here runs with `CORRAL_CLONE3=require` (set by `setup`), so a
//! clone3 that is not available fails the test instead of silently taking
//! the fallback; `fallback_path_runs_the_same_checks` re-runs some tests in a
//! child process with `CORRAL_CLONE3=off`. Runs as root (CI); compiled as
//! ignored (`#[needs(cgroup)]`) where no cgroup v2 hierarchy is writable.
#![cfg(linux_raw)]

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use corral::SpawnErrorKind;
use corral::{Command, ContainmentChoice, Error, Input, Mechanism, Output, RootStatus, Signal};
use corral_testkit::Scratch;

/// corral's own cgroup v2 directory, if it can create children there.
fn writable_cgroup() -> Option<PathBuf> {
    corral_testkit::writable_cgroup_v2()
}

/// Serializes the tests of this file (the descriptor count of the process
/// must not move under the leak test) and asks for the clone3 path.
fn setup() -> Option<MutexGuard<'static, ()>> {
    static SERIAL: Mutex<()> = Mutex::new(());
    let guard = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if std::env::var_os("CORRAL_CLONE3").is_none() {
        // Every test sets the same value before its first spawn; corral
        // reads it once.
        std::env::set_var("CORRAL_CLONE3", "require");
    }
    // `#[needs(cgroup)]` has already checked: a test here without it must
    // not pass silently.
    assert!(
        writable_cgroup().is_some(),
        "no writable cgroup v2 hierarchy here: mark the test #[needs(cgroup)]"
    );
    Some(guard)
}

macro_rules! setup {
    () => {
        match setup() {
            Some(g) => g,
            None => return,
        }
    };
}

fn cg(program: &str) -> Command {
    let mut c = Command::new(program);
    c.containment(ContainmentChoice::Only(Mechanism::Cgroup))
        .timeout(Duration::from_secs(20));
    c
}

fn sh(script: &str) -> Command {
    let mut c = cg("/bin/sh");
    c.arg("-c").arg(script);
    c
}

fn stdout_of(c: &mut Command) -> String {
    let r = c.stdout(Output::capture()).run().unwrap();
    assert_eq!(r.containment, Mechanism::Cgroup);
    assert_eq!(r.exit_code(), Some(0), "{r:?}");
    r.stdout.text_lossy()
}

#[corral_testkit::needs(cgroup)]
#[test]
fn child_is_born_in_its_own_cgroup() {
    let _g = setup!();
    let out = stdout_of(&mut sh("cat /proc/self/cgroup"));
    let v2 = out
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .unwrap_or_else(|| panic!("no v2 line in {out}"));
    let name = v2.rsplit('/').next().unwrap();
    let prefix = format!("corral-{}-", std::process::id());
    assert!(name.starts_with(&prefix), "child cgroup {v2}");
    // Its parent is this process's own cgroup.
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let own = own.lines().find_map(|l| l.strip_prefix("0::")).unwrap();
    let own = own.trim_end_matches('/');
    assert_eq!(v2, format!("{own}/{name}"));
}

#[corral_testkit::needs(cgroup)]
#[test]
fn exit_codes_and_group_leadership() {
    let _g = setup!();
    assert_eq!(cg("/bin/true").run().unwrap().exit_code(), Some(0));
    assert_eq!(sh("exit 7").run().unwrap().exit_code(), Some(7));
    assert_eq!(cg("false").run().unwrap().exit_code(), Some(1));
    // Leader of its own process group: pgid (field 5 of stat) = pid.
    let out = stdout_of(&mut sh("echo $$; cut -d' ' -f5 /proc/$$/stat"));
    let mut l = out.split_whitespace();
    let pid = l.next().unwrap();
    let pgid = l.next().unwrap();
    assert_eq!(pid, pgid, "{out}");
}

#[corral_testkit::needs(cgroup)]
#[test]
fn missing_program_is_not_found() {
    let _g = setup!();
    for p in ["/nonexistent/corral-x", "corral-no-such-program-x", ""] {
        match cg(p).run() {
            Err(Error::Spawn { kind, .. }) => assert_eq!(kind, SpawnErrorKind::NotFound, "{p:?}"),
            other => panic!("{p:?}: expected NotFound, got {other:?}"),
        }
    }
}

#[corral_testkit::needs(cgroup)]
#[test]
fn non_executable_file_is_permission_denied() {
    let _g = setup!();
    let s = Scratch::new();
    let f = s.path("not-exec");
    std::fs::write(&f, "#!/bin/sh\necho no\n").unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
    match cg(f.to_str().unwrap()).run() {
        Err(Error::Spawn { kind, .. }) => assert_eq!(kind, SpawnErrorKind::PermissionDenied),
        other => panic!("expected PermissionDenied, got {other:?}"),
    }
    // Through PATH: a non-executable match is remembered, an executable one
    // later in PATH wins, none at all is EACCES.
    let bin2 = s.path("bin2");
    std::fs::create_dir(&bin2).unwrap();
    let path = format!("{}:{}", s.dir().display(), bin2.display());
    match cg("not-exec").env("PATH", &path).run() {
        Err(Error::Spawn { kind, .. }) => assert_eq!(kind, SpawnErrorKind::PermissionDenied),
        other => panic!("expected PermissionDenied, got {other:?}"),
    }
    let good = bin2.join("not-exec");
    corral_testkit::write_executable(&good, "#!/bin/sh\necho second\n");
    let out = stdout_of(cg("not-exec").env("PATH", &path));
    assert_eq!(out, "second\n");
}

#[corral_testkit::needs(cgroup)]
#[test]
fn working_directory() {
    let _g = setup!();
    let s = Scratch::new();
    let out = stdout_of(cg("pwd").current_dir(s.dir()));
    assert_eq!(out.trim_end(), s.dir().to_str().unwrap());
    match cg("pwd").current_dir("/nonexistent/corral-dir").run() {
        Err(Error::Spawn { .. }) => {}
        other => panic!("expected a spawn error, got {other:?}"),
    }
    // A directory that exists for the check but cannot be entered: a file.
    let f = s.path("file");
    std::fs::write(&f, "").unwrap();
    match cg("pwd").current_dir(&f).run() {
        Err(Error::Spawn { .. }) => {}
        other => panic!("expected a spawn error, got {other:?}"),
    }
}

#[corral_testkit::needs(cgroup)]
#[test]
fn stdio_is_wired() {
    let _g = setup!();
    let r = cg("cat")
        .stdin(Input::bytes(&b"from stdin\n"[..]))
        .stdout(Output::capture())
        .run()
        .unwrap();
    assert_eq!(r.stdout.bytes(), b"from stdin\n");
    let r = sh("echo out; echo err >&2")
        .stdout(Output::capture())
        .stderr(Output::capture())
        .run()
        .unwrap();
    assert_eq!(r.stdout.text_lossy(), "out\n");
    assert_eq!(r.stderr.text_lossy(), "err\n");
    let r = sh("echo out; echo err >&2")
        .stdout(Output::capture())
        .stderr(Output::merge_with_stdout())
        .run()
        .unwrap();
    assert_eq!(r.stdout.text_lossy(), "out\nerr\n");
    // Null stdin: reads end of file at once.
    let r = cg("cat")
        .stdin(Input::null())
        .stdout(Output::capture())
        .run()
        .unwrap();
    assert_eq!(r.exit_code(), Some(0));
    assert!(r.stdout.bytes().is_empty());
    // The child has 0, 1, 2, what this process has open without
    // close-on-exec (inherited from whoever started the tests; std would
    // pass them on too), and the directory `ls` opens itself: nothing that
    // corral opened leaks.
    let inheritable = inheritable_fds();
    let out = stdout_of(cg("ls").arg("/proc/self/fd"));
    let extra: Vec<u32> = out
        .split_whitespace()
        .filter_map(|f| f.parse().ok())
        .filter(|f| *f > 2 && !inheritable.contains(f))
        .collect();
    assert!(
        extra.len() <= 1,
        "unexpected descriptors in the child: {extra:?}"
    );
}

/// Descriptors of this process that an exec would keep.
fn inheritable_fds() -> Vec<u32> {
    std::fs::read_dir("/proc/self/fdinfo")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let fd: u32 = e.file_name().to_str()?.parse().ok()?;
            let info = std::fs::read_to_string(e.path()).ok()?;
            let flags = info.lines().find_map(|l| l.strip_prefix("flags:"))?;
            let flags = u32::from_str_radix(flags.trim(), 8).ok()?;
            (flags & libc::O_CLOEXEC as u32 == 0).then_some(fd)
        })
        .collect()
}

#[corral_testkit::needs(cgroup)]
#[test]
fn environment() {
    let _g = setup!();
    let out = stdout_of(cg("/usr/bin/env").env_clear().env("A", "1").env("B", "two"));
    assert_eq!(out, "A=1\nB=two\n");
    // No PATH after env_clear: the default search path finds `sh`.
    let out = stdout_of(cg("sh").env_clear().arg("-c").arg("echo ok"));
    assert_eq!(out, "ok\n");
    // Inherited, changed, removed.
    std::env::set_var("CORRAL_CLONE3_TEST_INHERITED", "yes");
    let out = stdout_of(
        sh("echo $CORRAL_CLONE3_TEST_INHERITED/${HOME-unset}/$X")
            .env_remove("HOME")
            .env("X", "x"),
    );
    assert_eq!(out, "yes/unset/x\n");
}

#[corral_testkit::needs(cgroup)]
#[test]
fn invalid_utf8_arguments_pass_byte_exact() {
    let _g = setup!();
    let arg = OsString::from_vec(vec![b'a', 0xff, 0xfe, b'z']);
    let r = cg("printf")
        .arg("%s")
        .arg(&arg)
        .stdout(Output::capture())
        .run()
        .unwrap();
    assert_eq!(r.stdout.bytes(), arg.as_bytes());
    match cg("printf").arg("a\0b").run() {
        Err(Error::Spawn { .. }) | Err(Error::InvalidInput(_)) => {}
        other => panic!("a NUL byte must be refused, got {other:?}"),
    }
}

static MAIN_PID: AtomicI32 = AtomicI32::new(0);
static HANDLER_RAN_ELSEWHERE: AtomicBool = AtomicBool::new(false);

extern "C" fn on_usr1(_: libc::c_int) {
    // SAFETY: getpid is async-signal-safe.
    if unsafe { libc::getpid() } != MAIN_PID.load(Ordering::SeqCst) {
        HANDLER_RAN_ELSEWHERE.store(true, Ordering::SeqCst);
    }
}

fn install_usr1_handler() {
    MAIN_PID.store(std::process::id() as i32, Ordering::SeqCst);
    // SAFETY: a zeroed sigaction with a handler that only does
    // async-signal-safe work; SA_RESTART keeps other tests' syscalls going.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_usr1 as *const () as usize;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        assert_eq!(libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut()), 0);
    }
}

#[corral_testkit::needs(cgroup)]
#[test]
fn parent_signal_handlers_are_not_inherited() {
    let _g = setup!();
    install_usr1_handler();
    let r = sh("kill -USR1 $$; echo survived")
        .stdout(Output::capture())
        .run()
        .unwrap();
    assert_eq!(
        r.root,
        Some(RootStatus::Signaled(
            Signal::from_raw(libc::SIGUSR1).unwrap()
        )),
        "{r:?}"
    );
    assert_eq!(r.stdout.text_lossy(), "");
    // SIGPIPE is ignored in Rust programs; the child gets the default.
    let out = stdout_of(cg("grep").args(["SigIgn", "/proc/self/status"]));
    let hex = out.split_whitespace().nth(1).unwrap();
    let ign = u64::from_str_radix(hex, 16).unwrap();
    assert_eq!(ign & (1 << (libc::SIGPIPE - 1)), 0, "SigIgn {hex}");
    assert!(!HANDLER_RAN_ELSEWHERE.load(Ordering::SeqCst));
}

#[corral_testkit::needs(cgroup)]
#[test]
fn child_signal_mask_is_empty_even_when_the_parent_blocks_signals() {
    let _g = setup!();
    if std::env::var_os("CORRAL_CLONE3").is_some_and(|v| v == "off") {
        // std (since Rust 1.66) passes the calling thread's mask on, and so
        // does the fallback: the promise is the clone3 path's. Only a run of
        // the whole binary with CORRAL_CLONE3=off by hand gets here (the
        // suite's own fallback run, `fallback_path_runs_the_same_checks`,
        // leaves this test out); libtest cannot ignore a test at run time,
        // so it says so and passes vacuously in that configuration.
        eprintln!("SKIP: the fallback path keeps std's behaviour (mask inherited)");
        return;
    }
    // SAFETY: a sigset_t is plain data; all zeroes is a valid (empty) set.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: blocks two signals in this test's thread only, restored below.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGUSR2);
        assert_eq!(libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old), 0);
    }
    let out = stdout_of(cg("grep").args(["SigBlk", "/proc/self/status"]));
    // SAFETY: restores the mask saved above.
    unsafe {
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
    }
    assert_eq!(
        out.split_whitespace().nth(1),
        Some("0000000000000000"),
        "{out}"
    );
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

#[corral_testkit::needs(cgroup)]
#[test]
fn concurrent_spawns_leak_no_descriptors() {
    let _g = setup!();
    // Warm up lazily opened descriptors (none expected, but be fair).
    cg("/bin/true").run().unwrap();
    // The cgroup pool holds descriptors by design (bounded): empty it on
    // both sides of the count.
    corral::process_wide::release_cgroup_pool();
    let before = open_fds();
    let threads: Vec<_> = (0..8)
        .map(|t| {
            std::thread::spawn(move || {
                for i in 0..25 {
                    let r = sh(&format!("exit {}", (t * 25 + i) % 100))
                        .stdout(Output::capture())
                        .stderr(Output::capture())
                        .run()
                        .unwrap();
                    assert_eq!(r.exit_code(), Some((t * 25 + i) % 100));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    corral::process_wide::release_cgroup_pool();
    let after = open_fds();
    assert_eq!(before, after, "descriptors before/after 200 spawns");
}

/// Signals sent to the child before it has set up must never run a handler
/// of the parent in the child (which shares the parent's memory until exec).
/// Run in its own process group so the storm stays inside it.
#[corral_testkit::needs(cgroup)]
#[test]
fn signal_storm_never_runs_a_parent_handler_in_the_child() {
    let _g = setup!();
    use std::os::unix::process::CommandExt;
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "signal_storm_child", "--nocapture", "--ignored"])
        .process_group(0)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("STORM-OK"), "{text}");
    for l in text.lines().filter(|l| l.starts_with("STORM-OK")) {
        println!("{l}");
    }
}

#[corral_testkit::needs(cgroup)]
#[test]
#[ignore = "helper of signal_storm_never_runs_a_parent_handler_in_the_child"]
fn signal_storm_child() {
    let _g = setup!();
    // The storm goes to this process group: refuse to run unless it is ours
    // alone (started by the test above), or it would hit cargo and the shell.
    // SAFETY: getpgrp and getpid cannot fail.
    if unsafe { libc::getpgrp() != libc::getpid() } {
        panic!("run only through signal_storm_never_runs_a_parent_handler_in_the_child");
    }
    install_usr1_handler();
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let storm = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::SeqCst) {
                // SAFETY: kill(0, ..) signals this process group only (the
                // test runs as its own group leader).
                unsafe { libc::kill(0, libc::SIGUSR1) };
                n += 1;
                std::thread::sleep(Duration::from_micros(20));
            }
            n
        })
    };
    let mut killed = 0;
    for _ in 0..200 {
        let r = cg("/bin/true").run().unwrap();
        match r.root {
            Some(RootStatus::Exited(0)) => {}
            Some(RootStatus::Signaled(s)) if s.as_raw() == libc::SIGUSR1 => killed += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    stop.store(true, Ordering::SeqCst);
    let sent = storm.join().unwrap();
    assert!(!HANDLER_RAN_ELSEWHERE.load(Ordering::SeqCst));
    println!(
        "STORM-OK: {sent} signals sent, {killed} of 200 children ended by SIGUSR1 before exec"
    );
}

/// The same checks through std's fork + pre-exec path.
#[corral_testkit::needs(cgroup)]
#[test]
fn fallback_path_runs_the_same_checks() {
    let _g = setup!();
    if std::env::var_os("CORRAL_CLONE3").is_some_and(|v| v == "off") {
        return;
    }
    for t in [
        "child_is_born_in_its_own_cgroup",
        "exit_codes_and_group_leadership",
        "missing_program_is_not_found",
        "stdio_is_wired",
        "environment",
        "parent_signal_handlers_are_not_inherited",
        // Not `child_signal_mask_is_empty...`: std (since Rust 1.66) passes
        // the calling thread's signal mask on to the child, and so does the
        // fallback; only the clone3 path empties it.
    ] {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", t, "--nocapture"])
            .env("CORRAL_CLONE3", "off")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("1 passed"),
            "{t} with CORRAL_CLONE3=off:\n{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Prints spawn durations; asserts nothing about speed (corral-bench
/// measures that).
#[corral_testkit::needs(cgroup)]
#[test]
fn spawn_timing_is_printed() {
    let _g = setup!();
    for mode in ["require", "off"] {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "spawn_timing_child", "--nocapture", "--ignored"])
            .env("CORRAL_CLONE3", mode)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{text}");
        for l in text.lines().filter(|l| l.starts_with("TIMING")) {
            println!("{l}");
        }
    }
}

#[corral_testkit::needs(cgroup)]
#[test]
#[ignore = "helper of spawn_timing_is_printed"]
fn spawn_timing_child() {
    let _g = setup!();
    let mode = std::env::var("CORRAL_CLONE3").unwrap_or_default();
    let report = |label: &str| {
        let mut d: Vec<Duration> = (0..30)
            .map(|_| {
                let t = Instant::now();
                let running = cg("/bin/true").spawn().unwrap();
                let e = t.elapsed();
                running.wait();
                e
            })
            .collect();
        d.sort();
        println!(
            "TIMING CORRAL_CLONE3={mode} {label}: spawn min {:?} median {:?} max {:?}",
            d[0],
            d[d.len() / 2],
            d[d.len() - 1]
        );
    };
    report("small parent");
    let big: Vec<u8> = vec![1; 256 << 20];
    // Touch every page so it is resident.
    let sum: u64 = big.iter().step_by(4096).map(|&b| b as u64).sum();
    assert!(sum > 0);
    report("parent + 256 MiB resident");
    drop(big);
}

#[corral_testkit::needs(cgroup)]
#[test]
fn a_foreign_fork_holding_the_error_pipe_does_not_hold_the_spawn() {
    let _g = setup!();
    // Another thread forks children that neither exec nor exit for 1 s: each
    // inherits every descriptor open at that moment, the spawn's error pipe
    // included.
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let forker = std::thread::spawn(move || {
        let mut kids = Vec::new();
        while !st.load(Ordering::SeqCst) {
            // SAFETY: the child only calls async-signal-safe functions
            // (nanosleep, _exit) before it exits.
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                let ts = libc::timespec {
                    tv_sec: 1,
                    tv_nsec: 0,
                };
                // SAFETY: as above.
                unsafe {
                    libc::nanosleep(&ts, std::ptr::null_mut());
                    libc::_exit(0);
                }
            }
            if pid > 0 {
                kids.push(pid);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        for pid in kids {
            // SAFETY: plain syscalls on our own children's pids, which stay
            // ours until reaped right here.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
        }
    });
    let mut worst = Duration::ZERO;
    for _ in 0..30 {
        let t = Instant::now();
        // Output to the null device: a forked copy of a *captured* pipe would
        // hold the output (any runner's pipes have that problem with a host
        // that forks without exec); this is about the spawn alone.
        let r = cg("/bin/true")
            .stdout(Output::null())
            .stderr(Output::null())
            .run()
            .unwrap();
        worst = worst.max(t.elapsed());
        assert_eq!(r.exit_code(), Some(0));
    }
    stop.store(true, Ordering::SeqCst);
    forker.join().unwrap();
    assert!(worst < Duration::from_millis(500), "a spawn took {worst:?}");
}

#[corral_testkit::needs(cgroup)]
#[test]
fn path_errors_other_than_missing_are_met_as_execvp_meets_them() {
    let _g = setup!();
    let s = Scratch::new();
    let dir = s.path("bin");
    std::fs::create_dir(&dir).unwrap();
    // A symlink loop first on PATH: execvp stops there with ELOOP.
    std::os::unix::fs::symlink(dir.join("true"), dir.join("true")).unwrap();
    let path = format!("{}:/usr/bin:/bin", dir.display());
    let ours = cg("true").env("PATH", &path).run();
    let std_err = std::process::Command::new("true")
        .env("PATH", &path)
        .status();
    match (ours, std_err) {
        (Err(Error::Spawn { source, .. }), Err(e)) => {
            assert_eq!(source.raw_os_error(), e.raw_os_error(), "{source} vs {e}")
        }
        (ours, theirs) => panic!("corral {ours:?}, std {theirs:?}"),
    }
}
