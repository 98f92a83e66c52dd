//! A terminal stays a terminal: under a pseudo-terminal (util-linux
//! `script`), an interactive command run by corral can read the terminal
//! and sees its stdout as a terminal, and corral exits with its code.
#![cfg(target_os = "linux")]

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn under_pty(cmdline: &str, input: &[u8]) -> Option<(i32, String, Duration)> {
    let t = Instant::now();
    let mut child = Command::new("script")
        .args(["-qec", cmdline, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Give the program time to reach its read before typing.
    std::thread::sleep(Duration::from_millis(300));
    child.stdin.take().unwrap().write_all(input).unwrap();
    let out = child.wait_with_output().unwrap();
    Some((
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        t.elapsed(),
    ))
}

#[corral_testkit::needs(script)]
#[test]
fn an_interactive_program_reads_the_terminal() {
    let corral = env!("CARGO_BIN_EXE_corral");
    let Some((code, out, took)) = under_pty(
        &format!("{corral} run -t 10 -- sh -c 'read x; echo got:$x; exit 3'"),
        b"hello\n",
    ) else {
        return;
    };
    assert!(out.contains("got:hello"), "{out:?}");
    assert_eq!(code, 3, "{out:?}");
    assert!(
        took < Duration::from_secs(8),
        "took {took:?}: the program was stopped"
    );
}

#[corral_testkit::needs(script)]
#[test]
fn stdout_stays_a_terminal() {
    let corral = env!("CARGO_BIN_EXE_corral");
    let Some((code, out, _)) = under_pty(
        &format!("{corral} run -- sh -c 'test -t 0 && test -t 1 && echo both-tty'"),
        b"",
    ) else {
        return;
    };
    assert_eq!(code, 0, "{out:?}");
    assert!(out.contains("both-tty"), "{out:?}");
}

// ------------------------------------------------------------ job control

/// An interactive `bash -i` on a pseudo-terminal of our own: we type into
/// the master and read everything the terminal shows.
struct Shell {
    master: std::fs::File,
    seen: std::sync::Arc<std::sync::Mutex<String>>,
    bash: std::process::Child,
}

impl Shell {
    fn start() -> Shell {
        use std::os::fd::FromRawFd;
        use std::os::unix::process::CommandExt;
        // SAFETY: plain libc calls on a descriptor we own; ptsname's static
        // buffer is copied at once, and only this thread uses it here (the
        // test opens one terminal).
        let (master, slave_path) = unsafe {
            let m = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
            assert!(m >= 0, "posix_openpt");
            assert_eq!(libc::grantpt(m), 0);
            assert_eq!(libc::unlockpt(m), 0);
            let name = std::ffi::CStr::from_ptr(libc::ptsname(m))
                .to_string_lossy()
                .into_owned();
            (std::fs::File::from_raw_fd(m), name)
        };
        let slave = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&slave_path)
            .unwrap();
        // Ctrl-C and Ctrl-\ must reach the commands bash starts, which
        // inherit bash's ignored signals (a test run in the background).
        corral_testkit::default_launch_signals();
        let mut cmd = Command::new("bash");
        cmd.args(["--norc", "--noprofile", "-i"])
            .env("PS1", "$ ")
            .env("TERM", "dumb")
            .env("INPUTRC", "/dev/null")
            .stdin(slave.try_clone().unwrap())
            .stdout(slave.try_clone().unwrap())
            .stderr(slave);
        // SAFETY: setsid and ioctl are async-signal-safe; the child makes the
        // terminal on its stdin its controlling terminal.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY as _, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let bash = cmd.spawn().unwrap();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let mut reader = master.try_clone().unwrap();
        let sink = seen.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = std::io::Read::read(&mut reader, &mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Shell { master, seen, bash }
    }

    fn type_(&mut self, s: &str) {
        self.master.write_all(s.as_bytes()).unwrap();
    }

    /// Waits until the terminal has shown `text` (typed commands compute
    /// their marker, so the echo of the typed line never matches).
    fn expect(&self, text: &str) {
        let until = Instant::now() + Duration::from_secs(10);
        while !self.seen.lock().unwrap().contains(text) {
            assert!(
                Instant::now() < until,
                "terminal never showed {text:?}; it shows:\n{}",
                self.seen.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Shell {
    fn drop(&mut self) {
        let _ = self.bash.kill();
        let _ = self.bash.wait();
    }
}

/// (ppid, state, comm) of a process, from /proc/<pid>/stat.
fn stat(pid: u32) -> Option<(u32, char, String)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (l, r) = (s.find('(')?, s.rfind(')')?);
    let comm = s[l + 1..r].to_owned();
    let mut f = s[r + 2..].split(' ');
    let state = f.next()?.chars().next()?;
    let ppid = f.next()?.parse().ok()?;
    Some((ppid, state, comm))
}

/// Whether `pid`'s process group is the foreground group of its terminal
/// (`pgrp` and `tpgid` of /proc/<pid>/stat).
fn in_foreground(pid: u32) -> bool {
    let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let Some(r) = s.rfind(')') else {
        return false;
    };
    // After the comm: state ppid pgrp session tty_nr tpgid ...
    let f: Vec<&str> = s[r + 2..].split(' ').collect();
    f.len() > 5 && f[2] == f[5]
}

fn child_named(parent: u32, comm: &str) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let (ppid, _, c) = stat(pid)?;
        (ppid == parent && c == comm).then_some(pid)
    })
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < until, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn state(pid: u32) -> char {
    stat(pid).map_or('?', |s| s.1)
}

/// Kills the helper `sleep` by pid (checked to be that process) on drop, so
/// a regression can neither hang the suite nor leave it running.
struct KillOnDrop(u32, u32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if stat(self.0).is_some_and(|s| s.0 == self.1 && s.2 == "sleep") {
            // SAFETY: plain kill(2) of a pid just checked to be our sleep.
            unsafe {
                libc::kill(self.0 as i32, libc::SIGKILL);
            }
        }
    }
}

/// Types `line` (corral running `sleep 30`) into the shell once it is
/// ready; returns corral's pid, sleep's pid and a guard that kills the
/// sleep.
fn corral_running_sleep(sh: &mut Shell, line: &str) -> (u32, u32, KillOnDrop) {
    let bash = sh.bash.id();
    sh.type_("echo ready-$((20+1))\n");
    sh.expect("ready-21");
    sh.type_(line);
    let mut c = None;
    wait_until("corral runs", || {
        c = child_named(bash, "corral");
        c.is_some()
    });
    let c = c.unwrap();
    let mut sl = None;
    wait_until("sleep runs", || {
        sl = child_named(c, "sleep");
        sl.is_some()
    });
    let sl = sl.unwrap();
    (c, sl, KillOnDrop(sl, c))
}

/// Ctrl-Z: the tree (`sl`) and corral (`c`) stop, the shell is back; fg:
/// both continue and the tree has the terminal again; Ctrl-C: the tree
/// ends and corral exits 130.
fn stop_continue_and_interrupt(sh: &mut Shell, c: u32, sl: u32) {
    sh.type_("\x1a");
    wait_until("sleep is stopped", || state(sl) == 'T');
    wait_until("corral is stopped", || state(c) == 'T');
    sh.expect("Stopped");
    sh.type_("echo back-$((40+2))\n");
    sh.expect("back-42");

    sh.type_("fg\n");
    wait_until("sleep continues", || state(sl) == 'S');
    wait_until("corral continues", || state(c) == 'S');
    wait_until("the tree has the terminal again", || in_foreground(sl));
    // Ctrl-C reaches the tree (corral gave it the foreground before it
    // sent SIGCONT, so the tree is foreground once sleep runs again);
    // corral exits 130.
    sh.type_("\x03");
    wait_until("corral exits after Ctrl-C", || {
        stat(c).is_none_or(|s| s.1 == 'Z')
    });
    wait_until("sleep is gone", || stat(sl).is_none_or(|s| s.0 != c));
    sh.type_("echo rc-$((0))-$?\n");
    sh.expect("rc-0-130");
}

#[corral_testkit::needs(script)]
#[test]
fn ctrl_z_stops_corral_too_and_fg_continues_the_tree() {
    let corral = env!("CARGO_BIN_EXE_corral");
    let mut sh = Shell::start();
    let (c, sl, _guard) = corral_running_sleep(&mut sh, &format!("{corral} run -- sleep 30\n"));
    // Ready only once corral has handed the terminal to the tree: a
    // Ctrl-Z before that reaches corral's own group, not the tree.
    wait_until("sleep sleeps in the foreground", || {
        state(sl) == 'S' && in_foreground(sl)
    });
    stop_continue_and_interrupt(&mut sh, c, sl);
}

/// A Ctrl-Z typed after the spawn but before corral handed the terminal to
/// the tree (a window widened here to 1.5 s by a test seam) stops the tree
/// and corral together, like any Ctrl-Z: never corral alone while the
/// tree runs on.
#[corral_testkit::needs(script)]
#[test]
fn ctrl_z_before_the_hand_over_stops_the_tree_too() {
    let corral = env!("CARGO_BIN_EXE_corral");
    let mut sh = Shell::start();
    let (c, sl, _guard) = corral_running_sleep(
        &mut sh,
        &format!("CORRAL_TEST_HANDOVER_DELAY_MS=1500 {corral} run -- sleep 30\n"),
    );
    // In the window: the tree runs, corral's group still has the terminal.
    wait_until("sleep sleeps", || state(sl) == 'S');
    assert!(!in_foreground(sl), "the terminal was handed over already");
    assert!(in_foreground(c));
    stop_continue_and_interrupt(&mut sh, c, sl);
}
