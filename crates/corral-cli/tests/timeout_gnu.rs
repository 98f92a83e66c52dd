//! GNU coreutils' `tests/timeout/*` and uutils' `tests/by-util/test_timeout.rs`,
//! re-implemented case by case. Each case runs against the `timeout`
//! personality with upstream's own command line (the corral binary linked
//! as `timeout`, found through PATH, so argv[0] is `timeout`), and against
//! `corral run` with the options mapped (`DURATION` -> `-t DURATION --`,
//! `-s TERM` when no `-s` is given, since `corral run -t` alone sends
//! SIGKILL). Where `corral run` differs by design (the table in docs/differences.md),
//! the case says so. Then the eight places where `corral run` must behave as
//! GNU's `timeout` does (`causeN_*`), one or more tests each.

#![cfg(target_os = "linux")]

mod common;

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::BIN;
use corral_testkit::Scratch;

const LDBL_MAX: &str = "1.18973149535723176502e+4932";

/// A scratch with `timeout` (a symlink to corral) first in PATH.
struct Env {
    s: Scratch,
    bin: PathBuf,
}

impl Env {
    fn new() -> Env {
        let s = Scratch::new();
        let bin = s.path("bin");
        std::fs::create_dir(&bin).unwrap();
        std::os::unix::fs::symlink(BIN, bin.join("timeout")).unwrap();
        Env { s, bin }
    }

    fn path_var(&self) -> String {
        format!(
            "{}:{}",
            self.bin.display(),
            std::env::var("PATH").unwrap_or_default()
        )
    }

    fn command(&self, program: &str, args: &[String]) -> Command {
        let mut c = Command::new(program);
        c.args(args)
            .envs(self.s.env())
            .env("PATH", self.path_var())
            .env("CORRAL", BIN)
            .current_dir(self.s.dir())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }
}

struct Done {
    code: Option<i32>,
    signal: Option<i32>,
    out: String,
    err: String,
    took: Duration,
}

/// Runs `c` to its end (at most 30 s: then it is killed through its own
/// handle and the test fails).
fn finish(mut c: Command) -> Done {
    let start = Instant::now();
    let mut child = c.spawn().unwrap();
    let mut so = child.stdout.take().unwrap();
    let mut se = child.stderr.take().unwrap();
    let t1 = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = so.read_to_end(&mut v);
        v
    });
    let t2 = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = se.read_to_end(&mut v);
        v
    });
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if start.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("did not return within 30 s");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let took = start.elapsed();
    use std::os::unix::process::ExitStatusExt;
    Done {
        code: status.code(),
        signal: status.signal(),
        out: String::from_utf8_lossy(&t1.join().unwrap()).into_owned(),
        err: String::from_utf8_lossy(&t2.join().unwrap()).into_owned(),
        took,
    }
}

/// What the shell would see as `$?`.
fn shell_status(d: &Done) -> i32 {
    d.code.unwrap_or_else(|| 128 + d.signal.unwrap())
}

#[derive(Clone, Copy, Debug)]
enum Code {
    Is(i32),
    Not(i32),
    Fails,
}

impl Code {
    fn check(self, got: i32, what: &str) {
        match self {
            Code::Is(c) => assert_eq!(got, c, "{what}"),
            Code::Not(c) => assert_ne!(got, c, "{what}"),
            Code::Fails => assert_ne!(got, 0, "{what}"),
        }
    }
}

/// One upstream case.
struct Case {
    args: Vec<String>,
    code: Code,
    /// `corral run`'s code where it differs by design.
    run_code: Option<Code>,
    stdout: Option<String>,
    stdout_has: Vec<String>,
    stderr: Option<String>,
    stderr_has: Vec<String>,
    within: Duration,
}

fn case(args: &[&str]) -> Case {
    Case {
        args: args.iter().map(|s| s.to_string()).collect(),
        code: Code::Is(0),
        run_code: None,
        stdout: None,
        stdout_has: Vec::new(),
        stderr: None,
        stderr_has: Vec::new(),
        within: Duration::from_secs(8),
    }
}

impl Case {
    fn code(mut self, c: i32) -> Case {
        self.code = Code::Is(c);
        self
    }
    fn not(mut self, c: i32) -> Case {
        self.code = Code::Not(c);
        self
    }
    fn fails(mut self) -> Case {
        self.code = Code::Fails;
        self
    }
    /// `corral run` differs by design (the table in docs/differences.md).
    fn run_code(mut self, c: i32) -> Case {
        self.run_code = Some(Code::Is(c));
        self
    }
    fn stdout(mut self, s: &str) -> Case {
        self.stdout = Some(s.into());
        self
    }
    fn stdout_has(mut self, s: &str) -> Case {
        self.stdout_has.push(s.into());
        self
    }
    /// GNU's usage error: the message, then the "Try" line.
    fn usage_error(mut self, msg: &str) -> Case {
        self.stderr = Some(format!(
            "timeout: {msg}\nTry 'timeout --help' for more information.\n"
        ));
        self.code = Code::Is(125);
        self
    }
    fn stderr(mut self, s: &str) -> Case {
        self.stderr = Some(s.into());
        self
    }
    fn stderr_has(mut self, s: &str) -> Case {
        self.stderr_has.push(s.into());
        self
    }
    fn no_output(self) -> Case {
        self.stdout("").stderr("")
    }

    /// Runs the case as `timeout ARGS` (the link), as `corral timeout ARGS`
    /// and as `corral run` with the options mapped.
    fn check(self) {
        let e = Env::new();
        for (label, program, args) in [
            ("timeout", "timeout".to_string(), self.args.clone()),
            (
                "corral timeout",
                BIN.to_string(),
                std::iter::once("timeout".to_string())
                    .chain(self.args.iter().cloned())
                    .collect(),
            ),
        ] {
            let d = finish(e.command(&program, &args));
            let what = format!(
                "{label} {:?}: code {:?} signal {:?}\nstdout: {}\nstderr: {}",
                self.args, d.code, d.signal, d.out, d.err
            );
            self.code.check(shell_status(&d), &what);
            if let Some(o) = &self.stdout {
                assert_eq!(&d.out, o, "{what}");
            }
            for o in &self.stdout_has {
                assert!(d.out.contains(o.as_str()), "{what}");
            }
            if let Some(o) = &self.stderr {
                assert_eq!(&d.err, o, "{what}");
            }
            for o in &self.stderr_has {
                assert!(d.err.contains(o.as_str()), "{what}");
            }
            assert!(d.took < self.within, "{what}: took {:?}", d.took);
        }
        if let Some(run_args) = map_to_run(&self.args) {
            let d = finish(e.command(BIN, &run_args));
            let what = format!(
                "corral {run_args:?}: code {:?}\nstdout: {}\nstderr: {}",
                d.code, d.out, d.err
            );
            self.run_code
                .unwrap_or(self.code)
                .check(shell_status(&d), &what);
            if let Some(o) = &self.stdout {
                assert_eq!(&d.out, o, "{what}");
            }
            for o in &self.stdout_has {
                assert!(d.out.contains(o.as_str()), "{what}");
            }
            assert!(d.took < self.within, "{what}: took {:?}", d.took);
        }
        e.s.assert_none_left();
    }
}

/// GNU's command line as `corral run`'s: options mapped one to one,
/// `-s TERM` added when none is given, DURATION as `-t DURATION --`.
/// `None` for a line with no operands (a usage error either way).
fn map_to_run(args: &[String]) -> Option<Vec<String>> {
    let mut out = vec!["run".to_string()];
    let mut i = 0;
    let mut signal = false;
    while i < args.len() {
        let a = args[i].as_str();
        match a {
            "--" => {
                i += 1;
                break;
            }
            "-f" | "--foreground" | "-p" | "--preserve-status" | "-v" | "--verbose" => {
                out.push(a.into())
            }
            "-s" | "--signal" | "-k" | "--kill-after" => {
                signal |= a.contains('s');
                out.push(a.into());
                i += 1;
                out.push(args.get(i)?.clone());
            }
            _ if a.starts_with("--signal=") || a.starts_with("--kill-after=") => {
                signal |= a.starts_with("--signal");
                out.push(a.into());
            }
            _ if a.starts_with("-s") || a.starts_with("-k") => {
                signal |= a.starts_with("-s");
                out.push(a[..2].into());
                out.push(a[2..].into());
            }
            _ if a.starts_with('-')
                && a.len() > 1
                && !a[1..].starts_with(|c: char| c.is_ascii_digit() || c == '.') =>
            {
                out.push(a.into())
            }
            _ => break,
        }
        i += 1;
    }
    let rest = &args[i.min(args.len())..];
    if rest.len() < 2 {
        return None;
    }
    if !signal {
        out.extend(["-s".into(), "TERM".into()]);
    }
    out.extend(["-t".into(), rest[0].clone(), "--".into()]);
    out.extend(rest[1..].iter().cloned());
    Some(out)
}

// ---------------------------------------------------------------------
// GNU tests/timeout/timeout.sh

#[test]
fn gnu_no_timeout() {
    case(&["10", "true"]).check();
}

#[test]
fn gnu_no_timeout_suffix() {
    case(&["1d", "true"]).check();
}

#[test]
fn gnu_disabled_timeout() {
    case(&["0", "true"]).check();
}

#[test]
fn gnu_exit_status_propagation() {
    case(&["10", "sh", "-c", "exit 2"]).code(2).check();
}

#[test]
fn gnu_timeout() {
    case(&[".1", "sleep", "10"]).code(124).check();
}

#[test]
fn gnu_preserve_status_on_timeout() {
    case(&["--preserve-status", ".1", "sleep", "10"])
        .not(124)
        .code(143)
        .check();
}

#[test]
fn gnu_kill_delay_exits_137() {
    // corral run: 124 means timed out, whichever signal ended it (table).
    case(&["-s0", "-k1", ".1", "sleep", "10"])
        .not(124)
        .code(137)
        .run_code(124)
        .check();
}

#[test]
fn gnu_kill_delay_foreground_exits_137() {
    case(&["--foreground", "-s0", "-k1", ".1", "sleep", "10"])
        .code(137)
        .run_code(124)
        .check();
}

#[test]
fn gnu_immune_to_parents_ignored_sigchld() {
    for t in ["timeout 10 true", r#""$CORRAL" run -s TERM -t 10 -- true"#] {
        case(&["0", "sh", "-c", &format!("trap '' CHLD; exec {t}")]).check();
    }
}

#[test]
fn gnu_not_confused_by_a_child_it_did_not_start() {
    for t in ["timeout .5", r#""$CORRAL" run -s TERM -t .5 --"#] {
        let script = format!("setsid sleep .1 & exec {t} sh -c 'sleep 2; echo foo'");
        let e = Env::new();
        let d = finish(e.command("sh", &["-c".into(), script]));
        assert_eq!(d.out, "", "{t}: {}", d.err);
        assert_eq!(shell_status(&d), 124, "{t}: {}", d.err);
    }
}

#[test]
fn gnu_verbose_lines() {
    for opt in ["-v", "--verbose"] {
        case(&[opt, "-s0", "-k", ".1", ".1", "sleep", "10"])
            .code(137)
            .run_code(124)
            .stderr(
                "timeout: sending signal 0 to command 'sleep'\n\
                 timeout: sending signal KILL to command 'sleep'\n",
            )
            .check();
    }
}

#[test]
fn gnu_survives_a_broken_stderr_and_exits_124() {
    for t in [
        "timeout -v .1 sleep 10",
        r#""$CORRAL" run -v -s TERM -t .1 -- sleep 10"#,
    ] {
        let e = Env::new();
        let script = format!("{{ {t} 2>&1; echo $? > status; }} | :");
        let d = finish(e.command("sh", &["-c".into(), script]));
        assert_eq!(d.code, Some(0), "{t}: {}", d.err);
        let st = std::fs::read_to_string(e.s.path("status")).unwrap();
        assert_eq!(st.trim(), "124", "{t}");
        e.s.assert_none_left();
    }
}

#[test]
fn gnu_ignored_sigpipe_is_not_caught_nor_reset() {
    for t in ["timeout 10", r#""$CORRAL" run -s TERM -t 10 --"#] {
        let e = Env::new();
        let script = format!("(trap '' PIPE && {t} yes | :) 2>&1 | grep 'Broken pipe'");
        let d = finish(e.command("sh", &["-c".into(), script]));
        assert_eq!(d.code, Some(0), "{t}: {} {}", d.out, d.err);
        assert!(d.took < Duration::from_secs(8), "{t}: {:?}", d.took);
        e.s.assert_none_left();
    }
}

// ---------------------------------------------------------------------
// GNU tests/timeout/timeout-parameters.sh

#[test]
fn gnu_invalid_timeouts() {
    for bad in ["invalid", " -0.1", " -1e-10000", "42D"] {
        case(&[bad, "sleep", "0"])
            .usage_error(&format!("invalid time interval '{bad}'"))
            .check();
    }
}

#[test]
fn gnu_invalid_kill_delay() {
    case(&["--kill-after=invalid", "1", "sleep", "0"])
        .usage_error("invalid time interval 'invalid'")
        .check();
}

#[test]
fn gnu_floating_point_and_nanoseconds() {
    case(&["10.34", "sleep", "0"]).check();
    case(&["9.999999999", "sleep", "0"]).check();
}

#[test]
fn gnu_underflow_rounds_up_to_a_nanosecond() {
    case(&["1e-10000", "sleep", "10"]).code(124).check();
}

#[test]
fn gnu_invalid_signal() {
    case(&["--signal=invalid", "1", "sleep", "0"])
        .usage_error("'invalid': invalid signal")
        .check();
}

#[test]
fn gnu_command_not_executable_126() {
    case(&["10", "."])
        .code(126)
        .stderr("timeout: failed to run command '.': Permission denied\n")
        .check();
}

#[test]
fn gnu_no_such_command_127() {
    case(&["10", "no_such"])
        .code(127)
        .stderr("timeout: failed to run command 'no_such': No such file or directory\n")
        .check();
}

// ---------------------------------------------------------------------
// GNU tests/timeout/timeout-large-parameters.sh

#[test]
fn gnu_time_t_overflow_does_not_fire_at_once() {
    case(&["9223372036854775808", "sleep", "3"])
        .not(124)
        .code(0)
        .check();
}

#[test]
fn gnu_large_values_are_clamped() {
    case(&["4294967296", "sleep", "0"]).check();
    case(&["9223372036854775808d", "sleep", "0"]).check();
    case(&["2.34e+5d", "sleep", "0"]).check();
    case(&[LDBL_MAX, "sleep", "0"]).check();
    let neg = format!("-{LDBL_MAX}");
    case(&["--", &neg, "sleep", "0"])
        .usage_error(&format!("invalid time interval '{neg}'"))
        .check();
}

// ---------------------------------------------------------------------
// GNU tests/timeout/timeout-blocked.pl: SIGALRM blocked by the parent.

#[test]
fn gnu_sigalrm_blocked_by_the_parent() {
    let e = Env::new();
    for args in [
        vec![
            "timeout".to_string(),
            ".1".into(),
            "sleep".into(),
            "10".into(),
        ],
        vec![
            BIN.into(),
            "run".into(),
            "-s".into(),
            "TERM".into(),
            "-t".into(),
            ".1".into(),
            "--".into(),
            "sleep".into(),
            "10".into(),
        ],
    ] {
        let mut c = e.command(&args[0], &args[1..]);
        // SAFETY: only sigprocmask (async-signal-safe) in the child.
        unsafe {
            c.pre_exec(|| {
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::sigaddset(&mut set, libc::SIGALRM);
                libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
                Ok(())
            });
        }
        let d = finish(c);
        assert_eq!(shell_status(&d), 124, "{args:?}: {}", d.err);
    }
    e.s.assert_none_left();
}

// ---------------------------------------------------------------------
// GNU tests/timeout/timeout-group.sh

const TIMEOUT_CMD: &str = r#"#!/bin/sh
trap 'touch sig.received; exit' USR1
touch timeout.running
count=$1
until test -e sig.received || test $count = 0; do
  sleep 1
  count=$(expr $count - 1)
done
"#;

fn wait_for(e: &Env, name: &str, secs: u64) -> bool {
    e.s.wait_file(name, Duration::from_secs(secs))
}

#[test]
fn gnu_group_signal_reaches_a_foreground_command() {
    for t in [
        "timeout -v --foreground 25",
        r#""$CORRAL" run -v -f -s TERM -t 25 --"#,
    ] {
        let e = Env::new();
        corral_testkit::write_executable(&e.s.path("timeout.cmd"), TIMEOUT_CMD);
        let group =
            format!("trap '' USR1\nenv --default-signal=USR1 {t} ./timeout.cmd 20 &\nwait\n");
        let mut c = e.command("setsid", &["sh".into(), "-c".into(), group]);
        c.stdout(Stdio::null()).stderr(Stdio::null());
        let mut child = c.spawn().unwrap();
        assert!(wait_for(&e, "timeout.running", 6), "{t}: never started");
        // The group of setsid's session leader: every process but the tree
        // corral contains in its own group.
        let pgid = child.id() as i32;
        // SAFETY: kill(2) on the process group the test created.
        unsafe { libc::kill(-pgid, libc::SIGUSR1) };
        let start = Instant::now();
        while child.try_wait().unwrap().is_none() {
            assert!(start.elapsed() < Duration::from_secs(10), "{t}: no return");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(
            e.s.path("sig.received").exists(),
            "{t}: the command got no USR1"
        );
        e.s.assert_none_left();
    }
}

#[test]
fn gnu_command_dies_when_timeout_is_sigkilled() {
    // GNU 9.9 (timeout-group.sh): the command gets the -s signal when
    // timeout itself is SIGKILLed. corral's keeper sends it the run's first
    // signal (USR1: it traps it, leaves its mark and exits), then SIGKILLs
    // whatever is left after the grace (`-s` alone: 10 s): nothing is left.
    for t in ["timeout -sUSR1 25", r#""$CORRAL" run -s USR1 -t 25 --"#] {
        let e = Env::new();
        corral_testkit::write_executable(&e.s.path("timeout.cmd"), TIMEOUT_CMD);
        let script = format!("echo $$ > cmdparent; exec {t} ./timeout.cmd 20");
        let mut c = e.command("sh", &["-c".into(), script]);
        c.stdout(Stdio::null()).stderr(Stdio::null());
        let mut child = c.spawn().unwrap();
        assert!(wait_for(&e, "timeout.running", 6), "{t}: never started");
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            wait_for(&e, "sig.received", 5),
            "{t}: the command got no USR1 when timeout was killed"
        );
        // Every process of the tree carries the scratch's marker.
        e.s.assert_none_left();
    }
}

#[test]
fn gnu_cascaded_timeouts_time_out_on_an_alarm() {
    for t in [
        "timeout -sALRM 30 timeout -sUSR1 25",
        r#""$CORRAL" run -s ALRM -t 30 -- "$CORRAL" run -s USR1 -t 25 --"#,
    ] {
        let e = Env::new();
        corral_testkit::write_executable(&e.s.path("timeout.cmd"), TIMEOUT_CMD);
        let script = format!("exec {t} ./timeout.cmd 20");
        let mut c = e.command("sh", &["-c".into(), script]);
        c.stdout(Stdio::null()).stderr(Stdio::null());
        let start = Instant::now();
        let mut child = c.spawn().unwrap();
        assert!(wait_for(&e, "timeout.running", 6), "{t}: never started");
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGALRM) };
        let st = child.wait().unwrap();
        assert_eq!(st.code(), Some(124), "{t}");
        // GNU signals its child's process group, so only the inner timeout
        // gets the ALRM and the command gets USR1. corral signals every
        // process of its tree (the table): the command gets the ALRM too
        // and dies of it, without its USR1 trap; nothing is left.
        assert!(start.elapsed() < Duration::from_secs(15), "{t}");
        e.s.assert_none_left();
    }
}

// ---------------------------------------------------------------------
// GNU tests/timeout/init-parent.sh: timeout as the child of a pid 1.

#[corral_testkit::needs(unshare, userns)]
#[test]
fn gnu_child_of_init_still_times_out() {
    for t in [
        "timeout .1 sleep 10",
        r#""$CORRAL" run -s TERM -t .1 -- sleep 10"#,
    ] {
        let e = Env::new();
        let script = format!("unshare --pid --fork --map-root-user sh -c '{t}'; echo $?");
        let d = finish(e.command("sh", &["-c".into(), script.replace("\"$CORRAL\"", BIN)]));
        assert_eq!(d.out.trim(), "124", "{t}: {}", d.err);
    }
}

// ---------------------------------------------------------------------
// uutils tests/by-util/test_timeout.rs

#[test]
fn uu_invalid_arg() {
    case(&["--definitely-invalid"])
        .usage_error("unrecognized option '--definitely-invalid'")
        .check();
}

#[test]
fn uu_subcommand_return_code() {
    case(&["1", "true"]).check();
    case(&["1", "false"]).code(1).check();
}

#[test]
fn uu_invalid_time_interval() {
    case(&["xyz", "sleep", "0"])
        .usage_error("invalid time interval 'xyz'")
        .check();
    case(&["'1", "sleep", "0"])
        .usage_error("invalid time interval \"'1\"")
        .check();
}

#[test]
fn uu_invalid_kill_after() {
    case(&["-k", "xyz", "1", "sleep", "0"])
        .usage_error("invalid time interval 'xyz'")
        .check();
}

#[test]
fn uu_command_with_args() {
    case(&["1700", "echo", "-n", "abcd"])
        .stdout("abcd")
        .stderr("")
        .check();
}

#[test]
fn uu_verbose() {
    for flag in ["-v", "--verbose"] {
        case(&[flag, ".1", "sleep", "1"])
            .fails()
            .stdout("")
            .stderr_has("timeout: sending signal TERM to command")
            .check();
        case(&[flag, "-s0", "-k.1", ".1", "sleep", "1"])
            .fails()
            .stdout("")
            .stderr_has("timeout: sending signal 0 to command")
            .stderr_has("timeout: sending signal KILL to command")
            .check();
    }
}

#[test]
fn uu_zero_timeout() {
    case(&["-v", "0", "sleep", ".1"]).no_output().check();
    // GNU's grammar (the reference): options stop at the first operand, so
    // `-s0` is the command here (uutils takes it as an option).
    case(&["-v", "0", "-s0", "-k0", "sleep", ".1"])
        .code(127)
        .stderr("timeout: failed to run command '-s0': No such file or directory\n")
        .check();
    case(&["-v", "-s0", "-k0", "0", "sleep", ".1"])
        .no_output()
        .check();
}

#[test]
fn uu_command_empty_args() {
    case(&["", ""])
        .fails()
        .stderr_has("timeout: invalid time interval ''")
        .check();
}

#[test]
fn uu_foreground() {
    for arg in ["-f", "--foreground"] {
        case(&[arg, ".1", "sleep", "10"])
            .code(124)
            .no_output()
            .check();
    }
}

#[test]
fn uu_preserve_status() {
    for arg in ["-p", "--preserve-status"] {
        case(&[arg, ".1", "sleep", "10"])
            .code(143)
            .no_output()
            .check();
    }
}

#[test]
fn uu_kill_after_keeps_124_without_preserve_status() {
    case(&["-k", "1", "1", "sleep", "10"])
        .code(124)
        .no_output()
        .check();
}

#[test]
fn uu_preserve_status_even_when_send_signal() {
    for cont in ["CONT", "cOnT", "SIGcont"] {
        case(&["-s", cont, "--preserve-status", ".1", "sleep", "1"])
            .no_output()
            .check();
    }
}

#[test]
fn uu_dont_overflow() {
    case(&["9223372036854775808d", "sleep", "0"])
        .no_output()
        .check();
    case(&["-k", "9223372036854775808d", "10", "sleep", "0"])
        .no_output()
        .check();
}

#[test]
fn uu_dont_underflow() {
    for d in [".0000000001", "1e-100", "1e-18172487393827593258"] {
        case(&[d, "sleep", "1"]).code(124).no_output().check();
    }
}

#[test]
fn uu_negative_interval() {
    case(&["--", "-1", "sleep", "0"])
        .usage_error("invalid time interval '-1'")
        .check();
}

#[test]
fn uu_invalid_signal() {
    case(&["-s", "invalid", "1", "sleep", "0"])
        .usage_error("'invalid': invalid signal")
        .check();
}

#[test]
fn uu_invalid_multi_byte_characters() {
    case(&["10€", "sleep", "0"])
        .usage_error("invalid time interval '10€'")
        .check();
}

#[test]
fn uu_kill_after_long() {
    case(&["--kill-after=1", "1", "sleep", "0"])
        .no_output()
        .check();
}

#[test]
fn uu_kill_subprocess() {
    case(&["1", "sh", "-c", "trap 'echo inside_trap' TERM; sleep 5"])
        .code(124)
        .stdout_has("inside_trap")
        .check();
}

#[test]
fn uu_hex_timeout_ending_with_d() {
    let mut c = case(&["0x0.1d", "sleep", "10"]).code(124).no_output();
    c.within = Duration::from_secs(1);
    c.check();
}

/// Starts `args` (through the shell, so `$CORRAL` expands), waits until
/// the command's shell has set its trap (it touches `trapped`), sends `sig`
/// to corral, and returns what happened.
fn signal_midway(t: &str, script: &str, sig: i32) -> Done {
    let e = Env::new();
    let full = format!("exec {t} sh -c \"{script}\"");
    let mut c = e.command("sh", &["-c".into(), full]);
    let start = Instant::now();
    let mut child = c.spawn().unwrap();
    assert!(wait_for(&e, "trapped", 6), "{t}: never started");
    // And its `sleep` runs (a signal sent before its fork would miss it).
    let sleeping = || {
        e.s.marked_processes().iter().any(|p| {
            std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "sleep")
        })
    };
    while !sleeping() {
        assert!(start.elapsed() < Duration::from_secs(6), "{t}: no sleep");
        std::thread::sleep(Duration::from_millis(5));
    }
    // SAFETY: kill(2) on our own child (corral, which exec'd the shell).
    unsafe { libc::kill(child.id() as i32, sig) };
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let st = child.wait().unwrap();
    e.s.assert_none_left();
    use std::os::unix::process::ExitStatusExt;
    Done {
        code: st.code(),
        signal: st.signal(),
        out,
        err: String::new(),
        took: start.elapsed(),
    }
}

#[test]
fn uu_terminate_child_on_receiving_terminate() {
    for t in ["timeout 10", r#""$CORRAL" run -s TERM -t 10 --"#] {
        let d = signal_midway(
            t,
            "trap 'echo child received TERM' TERM; touch trapped; sleep 5",
            libc::SIGTERM,
        );
        assert_eq!(shell_status(&d), 143, "{t}");
        assert!(d.out.contains("child received TERM"), "{t}: {}", d.out);
        assert!(d.took < Duration::from_secs(4), "{t}: {:?}", d.took);
    }
}

#[test]
fn uu_forward_sigint_to_child() {
    for t in ["timeout 10", r#""$CORRAL" run -s TERM -t 10 --"#] {
        let d = signal_midway(
            t,
            "trap 'echo got_int; exit 42' INT; touch trapped; sleep 5",
            libc::SIGINT,
        );
        assert!(d.out.contains("got_int"), "{t}: {}", d.out);
        // GNU: the command's status (42); corral run: 128+INT (table).
        let want = if t.starts_with("timeout") { 42 } else { 130 };
        assert_eq!(shell_status(&d), want, "{t}");
    }
}

#[test]
fn uu_command_not_found() {
    case(&["1", "/this/command/definitely/does/not/exist"])
        .code(127)
        .check();
}

#[test]
fn uu_command_cannot_invoke() {
    case(&["1", "/"]).code(126).check();
}

#[test]
fn uu_sigchld_ignored_by_parent() {
    case(&["10", "sh", "-c", "trap '' CHLD; exec timeout 1 true"]).check();
}

#[test]
fn uu_with_background_child() {
    case(&[".5", "sh", "-c", "sleep .1 & sleep 2"])
        .code(124)
        .stdout("")
        .check();
}

#[test]
fn uu_foreground_signal0_kill_after() {
    case(&["--foreground", "-s0", "-k.1", ".1", "sleep", "10"])
        .code(137)
        .run_code(124)
        .check();
}

#[test]
fn uu_realtime_signal_names() {
    case(&["-v", "-s", "RTMAX", ".1", "sleep", "1"])
        .fails()
        .stderr_has("sending signal RTMAX to command")
        .check();
    case(&["-v", "-s", "RTMIN", ".1", "sleep", "1"])
        .fails()
        .stderr_has("sending signal RTMIN to command")
        .check();
    case(&["-v", "-s", "SIGRTMAX", ".1", "sleep", "1"])
        .fails()
        .stderr_has("sending signal RTMAX to command")
        .check();
}

// ---------------------------------------------------------------------
// The eight places where `corral run` must behave as GNU's `timeout`
// does (rounding, inherited dispositions, signal 0, durations, options,
// diagnostics, grammar), each through `corral run` itself.

fn corral_run(e: &Env, args: &[&str]) -> Done {
    let v: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    finish(e.command(BIN, &v))
}

#[test]
fn cause1_an_infinitesimal_timeout_still_times_out() {
    let e = Env::new();
    let d = corral_run(&e, &["run", "-t", ".0000000001", "--", "sleep", "5"]);
    assert_eq!(d.code, Some(124), "{}", d.err);
    assert!(d.took < Duration::from_secs(3), "{:?}", d.took);
    e.s.assert_none_left();
}

/// The SigIgn mask of a `cat /proc/self/status` run by corral with `ign`
/// ignored when corral starts.
fn sigign_of_the_command(ign: &'static [i32], extra: &[&str]) -> u64 {
    let e = Env::new();
    let mut args: Vec<String> = vec!["run".into()];
    args.extend(extra.iter().map(|s| s.to_string()));
    args.extend(["--".into(), "cat".into(), "/proc/self/status".into()]);
    let mut c = e.command(BIN, &args);
    // SAFETY: only signal(2) (async-signal-safe) in the child.
    unsafe {
        c.pre_exec(move || {
            for &s in ign {
                libc::signal(s, libc::SIG_IGN);
            }
            Ok(())
        });
    }
    let d = finish(c);
    assert_eq!(d.code, Some(0), "{}", d.err);
    let line = d.out.lines().find(|l| l.starts_with("SigIgn:")).unwrap();
    u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap()
}

fn bit(sig: i32) -> u64 {
    1 << (sig - 1)
}

#[test]
fn cause2_signals_ignored_at_start_stay_ignored_in_the_command() {
    let ign: &'static [i32] = &[libc::SIGPIPE, libc::SIGHUP, libc::SIGINT, libc::SIGUSR1];
    for extra in [
        &["-t", "10"][..],
        &["--containment", "process-group"],
        &["--containment", "subreaper"],
    ] {
        let mask = sigign_of_the_command(ign, extra);
        for &s in ign {
            assert_ne!(
                mask & bit(s),
                0,
                "{extra:?}: signal {s} not ignored: {mask:x}"
            );
        }
        // Not ignored at start: the default action (Rust's own ignored
        // SIGPIPE is not passed on).
        let mask = sigign_of_the_command(&[], extra);
        for &s in ign {
            assert_eq!(mask & bit(s), 0, "{extra:?}: signal {s} ignored: {mask:x}");
        }
    }
}

#[corral_testkit::needs(pidns)]
#[test]
fn cause2_signals_ignored_at_start_stay_ignored_in_the_pid_namespace_tier() {
    let ign: &'static [i32] = &[libc::SIGPIPE, libc::SIGHUP];
    let mask = sigign_of_the_command(ign, &["--containment", "pid-namespace"]);
    assert_ne!(mask & bit(libc::SIGPIPE), 0, "{mask:x}");
    assert_ne!(mask & bit(libc::SIGHUP), 0, "{mask:x}");
    let mask = sigign_of_the_command(&[], &["--containment", "pid-namespace"]);
    assert_eq!(mask & bit(libc::SIGPIPE), 0, "{mask:x}");
}

#[test]
fn cause2_nohup_corral_run_survives_a_hangup() {
    for t in [&["run", "-t", "10", "--"][..], &["timeout", "10"]] {
        let e = Env::new();
        let mut args: Vec<String> = t.iter().map(|s| s.to_string()).collect();
        args.extend([
            "sh".into(),
            "-c".into(),
            "touch started; sleep 1; echo survived".into(),
        ]);
        let mut c = e.command(BIN, &args);
        // SAFETY: only signal(2) in the child: nohup's ignored SIGHUP.
        unsafe {
            c.pre_exec(|| {
                libc::signal(libc::SIGHUP, libc::SIG_IGN);
                Ok(())
            });
        }
        let mut child = c.spawn().unwrap();
        assert!(e.s.wait_file("started", Duration::from_secs(6)));
        // SAFETY: kill(2) on our own child: the hangup.
        unsafe { libc::kill(child.id() as i32, libc::SIGHUP) };
        let mut out = String::new();
        child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        let st = child.wait().unwrap();
        assert_eq!(st.code(), Some(0), "{t:?}");
        assert_eq!(out, "survived\n", "{t:?}");
        e.s.assert_none_left();
    }
}

#[test]
fn cause3_signal_zero_sends_nothing_then_kill_after() {
    let e = Env::new();
    let rp = e.s.path("r.json");
    let rp = rp.to_str().unwrap();
    let d = corral_run(
        &e,
        &[
            "run", "-s", "0", "-k", ".3", "-t", ".2", "--report", rp, "--", "sleep", "10",
        ],
    );
    assert_eq!(d.code, Some(124), "{}", d.err);
    assert!(d.took >= Duration::from_millis(450), "{:?}", d.took);
    assert!(d.took < Duration::from_secs(5), "{:?}", d.took);
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(rp).unwrap()).unwrap();
    assert_eq!(v["signals_sent"], serde_json::json!([9]), "{v}");
    // The command outlives the silent deadline and exits by itself: the
    // run still timed out (GNU: 124; with -p the command's own status).
    let d = corral_run(
        &e,
        &[
            "run",
            "-s",
            "0",
            "-k",
            "5",
            "-t",
            ".2",
            "--",
            "sh",
            "-c",
            "sleep .6; exit 3",
        ],
    );
    assert_eq!(d.code, Some(124), "{}", d.err);
    let d = corral_run(
        &e,
        &[
            "run",
            "-p",
            "-s",
            "0",
            "-k",
            "5",
            "-t",
            ".2",
            "--",
            "sh",
            "-c",
            "sleep .6; exit 3",
        ],
    );
    assert_eq!(d.code, Some(3), "{}", d.err);
    e.s.assert_none_left();
}

#[test]
fn cause4_gnu_duration_grammar_and_corrals_own_forms() {
    let e = Env::new();
    for t in ["1e-3", "0x0.1d", ".1s", "100ms", "0.0001m"] {
        let d = corral_run(&e, &["run", "-t", t, "--", "sleep", "10"]);
        assert_eq!(d.code, Some(124), "{t}: {}", d.err);
        assert!(d.took < Duration::from_secs(3), "{t}: {:?}", d.took);
    }
    for t in [
        "9223372036854775808d",
        LDBL_MAX,
        "2.34e+5d",
        "1m30s",
        "inf",
        "0",
    ] {
        let d = corral_run(&e, &["run", "-t", t, "--", "true"]);
        assert_eq!(d.code, Some(0), "{t}: {}", d.err);
    }
    for t in ["-1", "42D", "xyz", "nan"] {
        let d = corral_run(&e, &["run", &format!("--timeout={t}"), "--", "true"]);
        assert_eq!(d.code, Some(125), "{t}: {}", d.err);
        assert!(d.err.contains("invalid duration"), "{t}: {}", d.err);
    }
    e.s.assert_none_left();
}

#[test]
fn cause5_foreground_is_accepted_and_the_tree_is_still_contained() {
    let e = Env::new();
    for f in ["-f", "--foreground"] {
        let script = "\"$H\" kid & wait";
        let d = corral_run(&e, &["run", f, "-t", ".3", "--", "sh", "-c", script]);
        assert_eq!(d.code, Some(124), "{f}: {}", d.err);
    }
    e.s.assert_none_left();
}

#[test]
fn cause6_short_preserve_status() {
    let e = Env::new();
    let d = corral_run(
        &e,
        &["run", "-p", "-s", "TERM", "-t", ".1", "--", "sleep", "10"],
    );
    assert_eq!(d.code, Some(143), "{}", d.err);
    e.s.assert_none_left();
}

#[test]
fn cause7_gnu_diagnostics_help_and_version() {
    let e = Env::new();
    let d = finish(e.command("timeout", &["--help".into()]));
    assert_eq!(d.code, Some(0));
    assert!(
        d.out
            .starts_with("Usage: timeout [OPTION] DURATION COMMAND [ARG]..."),
        "{}",
        d.out
    );
    let d = finish(e.command("timeout", &["--version".into()]));
    assert_eq!(d.code, Some(0));
    assert!(d.out.starts_with("timeout (corral) "), "{}", d.out);
    for (args, msg) in [
        (&["-x", "1", "true"][..], "timeout: invalid option -- 'x'\n"),
        (&["1"], ""),
        (
            &["--signal"],
            "timeout: option '--signal' requires an argument\n",
        ),
        (
            &["--v", "1", "true"],
            "timeout: option '--v' is ambiguous; possibilities: '--verbose' '--version'\n",
        ),
    ] {
        let v: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let d = finish(e.command("timeout", &v));
        assert_eq!(d.code, Some(125), "{args:?}");
        assert_eq!(
            d.err,
            format!("{msg}Try 'timeout --help' for more information.\n"),
            "{args:?}"
        );
    }
    // argv[0] as given names the program, as GNU's messages do.
    let link = e.bin.join("timeout");
    let d = finish(e.command(link.to_str().unwrap(), &["xyz".into(), "true".into()]));
    assert_eq!(
        d.err,
        format!(
            "{0}: invalid time interval 'xyz'\nTry '{0} --help' for more information.\n",
            link.display()
        )
    );
}

#[test]
fn cause7_verbose_names_every_signal_sent() {
    // CONT is a chosen first signal like any other: GNU names it.
    case(&["-v", "-s", "CONT", "-p", ".1", "sleep", ".5"])
        .stderr("timeout: sending signal CONT to command 'sleep'\n")
        .check();
    // TERM ignored by the whole tree, then -k's KILL: one line each, 137.
    case(&["-v", "-k", ".2", ".1", "sh", "-c", "trap '' TERM; sleep 3"])
        .code(137)
        .run_code(124)
        .stderr(
            "timeout: sending signal TERM to command 'sh'\n\
             timeout: sending signal KILL to command 'sh'\n",
        )
        .check();
}

#[test]
fn cause8_positional_grammar_and_install_timeout() {
    let e = Env::new();
    // `corral run 1 sleep 2` says what was meant.
    let d = corral_run(&e, &["run", "1", "sleep", "2"]);
    assert_eq!(d.code, Some(127));
    assert!(d.err.contains("corral run -t 1 -- sleep 2"), "{}", d.err);
    assert!(d.err.contains("corral timeout 1 sleep 2"), "{}", d.err);
    // clap's tip would run a program named `--timout`; corral's does not.
    let d = corral_run(&e, &["run", "--timout", "1", "sleep", "1"]);
    assert_eq!(d.code, Some(125));
    assert!(!d.err.contains("-- --timout"), "{}", d.err);
    assert!(d.err.contains("'--timeout'"), "{}", d.err);
    // The positional grammar.
    let d = corral_run(&e, &["timeout", ".1", "sleep", "10"]);
    assert_eq!(d.code, Some(124), "{}", d.err);
    // install-timeout: a link that works, and nothing replaced or followed.
    let dir = e.s.path("inst");
    std::fs::create_dir(&dir).unwrap();
    let d = corral_run(&e, &["install-timeout", dir.to_str().unwrap()]);
    assert_eq!(d.code, Some(0), "{}", d.err);
    let link = dir.join("timeout");
    assert_eq!(std::fs::read_link(&link).unwrap(), PathBuf::from(BIN));
    let d = finish(e.command(
        link.to_str().unwrap(),
        &["10".into(), "sh".into(), "-c".into(), "exit 7".into()],
    ));
    assert_eq!(d.code, Some(7), "{}", d.err);
    let d = corral_run(&e, &["install-timeout", dir.to_str().unwrap()]);
    assert_eq!(d.code, Some(125));
    assert!(d.err.contains("already exists"), "{}", d.err);
    // A planted (dangling) symlink is not followed: its target is not
    // created.
    let dir2 = e.s.path("inst2");
    std::fs::create_dir(&dir2).unwrap();
    let target = e.s.path("planted-target");
    std::os::unix::fs::symlink(&target, dir2.join("timeout")).unwrap();
    let d = corral_run(&e, &["install-timeout", dir2.to_str().unwrap()]);
    assert_eq!(d.code, Some(125));
    assert!(d.err.contains("already exists (a symlink to"), "{}", d.err);
    assert!(!target.exists());
    let d = corral_run(&e, &["install-timeout", e.s.path("nope").to_str().unwrap()]);
    assert_eq!(d.code, Some(125));
}
