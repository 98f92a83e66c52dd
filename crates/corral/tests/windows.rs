//! The scenario suite on Windows with Job Object containment (run under
//! Wine 8 in CI: `.ci/windows.sh`).
//!
//! The process trees come from the `win_helper` example (built by `cargo
//! test`). Every lingering helper writes a pid file and exits by itself
//! within 30 s; the test opens a process handle as soon as the pid file
//! appears (the handle pins the pid) and terminates it on drop, whatever
//! corral did.

#![cfg(windows)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use corral::{CancelToken, Command, Error, LeftoverPolicy, Mechanism, Outcome, RootStatus, Signal};
use windows_sys::Win32::Foundation::{CloseHandle, HANDLE, WAIT_OBJECT_0};
use windows_sys::Win32::System::Threading::{
    OpenProcess, TerminateProcess, WaitForSingleObject, PROCESS_QUERY_INFORMATION,
    PROCESS_SYNCHRONIZE, PROCESS_TERMINATE,
};

const SLACK: Duration = Duration::from_millis(3000);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn helper() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap();
    let h = dir.join("examples").join("win_helper.exe");
    assert!(h.is_file(), "helper not built: {}", h.display());
    h
}

/// Whether we run under Wine (ntdll exports `wine_get_version`).
fn under_wine() -> bool {
    use windows_sys::Win32::System::LibraryLoader::{GetModuleHandleA, GetProcAddress};
    // SAFETY: NUL-terminated names; ntdll is always loaded.
    unsafe {
        let ntdll = GetModuleHandleA(c"ntdll.dll".as_ptr().cast());
        !ntdll.is_null() && GetProcAddress(ntdll, c"wine_get_version".as_ptr().cast()).is_some()
    }
}

/// A private scratch directory, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("corral-win-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }
    fn path(&self, f: &str) -> String {
        self.0.join(f).to_string_lossy().into_owned()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A helper process pinned by an open handle; terminated on drop.
struct Pinned {
    pid: u32,
    h: HANDLE,
}

impl Pinned {
    /// Waits for the pid file and opens the process at once.
    fn wait(pidfile: &str, within: Duration) -> Pinned {
        let end = Instant::now() + within;
        loop {
            if let Ok(s) = std::fs::read_to_string(pidfile) {
                let pid: u32 = s.trim().parse().unwrap();
                // SAFETY: no pointers; the result is checked.
                let h = unsafe {
                    OpenProcess(
                        PROCESS_TERMINATE | PROCESS_SYNCHRONIZE | PROCESS_QUERY_INFORMATION,
                        0,
                        pid,
                    )
                };
                assert!(!h.is_null(), "could not open helper {pid}");
                return Pinned { pid, h };
            }
            assert!(Instant::now() < end, "helper never wrote {pidfile}");
            std::thread::sleep(ms(5));
        }
    }

    /// Whether the process has exited within `within`.
    fn dead_within(&self, within: Duration) -> bool {
        // SAFETY: `h` is our open process handle.
        unsafe { WaitForSingleObject(self.h, within.as_millis() as u32) == WAIT_OBJECT_0 }
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        // SAFETY: `h` is our open handle; the pid cannot have been reused.
        unsafe {
            TerminateProcess(self.h, 1);
            CloseHandle(self.h);
        }
    }
}

fn cmd(args: &[&str]) -> Command {
    let mut c = Command::new(helper());
    c.args(args).timeout(Duration::from_secs(20));
    c
}

#[test]
fn exit_zero_is_clean_and_reports_job_object() {
    let r = cmd(&["exit", "0", "hello"]).run().unwrap();
    assert_eq!(r.outcome, Outcome::Exited(0), "{r:?}");
    assert_eq!(r.root, Some(RootStatus::Exited(0)));
    assert_eq!(r.containment, Mechanism::JobObject);
    assert!(r.success(), "{r:?}");
    assert_eq!(String::from_utf8_lossy(&r.stdout.bytes()).trim(), "hello");
    assert!(r.signals_sent.is_empty());
}

#[test]
fn nonzero_exit_code_is_reported() {
    let r = cmd(&["exit", "3"]).run().unwrap();
    assert_eq!(r.exit_code(), Some(3), "{r:?}");
}

#[test]
fn missing_program_is_a_spawn_error() {
    let e = Command::new("corral-no-such-program-xyz")
        .run()
        .unwrap_err();
    assert!(matches!(e, Error::Spawn { .. }), "{e:?}");
}

#[test]
fn arguments_round_trip_through_the_command_line() {
    // `exit 0 TEXT` prints TEXT back: quotes, spaces and backslashes survive.
    let text = r#"a "b" c\ d\\"#;
    let r = cmd(&["exit", "0", text]).run().unwrap();
    assert_eq!(String::from_utf8_lossy(&r.stdout.bytes()).trim_end(), text);
}

#[test]
fn grandchild_holding_output_is_killed() {
    let s = Scratch::new("held");
    let gc = s.path("gc.pid");
    let t = Instant::now();
    let mut c = cmd(&["spawn", "held", &gc, "0"]);
    c.wait_delay(ms(300));
    let running = c.spawn().unwrap();
    let g = Pinned::wait(&gc, Duration::from_secs(10));
    let r = running.wait();
    assert!(t.elapsed() < Duration::from_secs(10) + SLACK);
    assert_eq!(r.outcome, Outcome::OutputHeld, "{r:?}");
    assert_eq!(r.root, Some(RootStatus::Exited(0)));
    assert!(
        g.dead_within(Duration::from_secs(2)),
        "grandchild {} alive",
        g.pid
    );
    assert_eq!(r.signals_sent, vec![Signal::KILL]);
    assert!(r.cleanup_errors.is_empty(), "{r:?}");
}

#[test]
fn detached_child_is_kept_after_exit_zero() {
    let s = Scratch::new("keep");
    let gc = s.path("gc.pid");
    let running = cmd(&["spawn", "detached", &gc, "0"]).spawn().unwrap();
    let g = Pinned::wait(&gc, Duration::from_secs(10));
    let r = running.wait();
    // Only the three standard handles are inherited, so the detached
    // grandchild holds no pipe of ours: no false "output held".
    assert_eq!(r.outcome, Outcome::Exited(0), "{r:?}");
    assert!(r.success(), "{r:?}");
    assert_eq!(r.leftovers.kept, 1, "{r:?}");
    // Kept: alive after the job handle was closed (KILL_ON_JOB_CLOSE lifted).
    assert!(!g.dead_within(ms(500)), "kept grandchild {} died", g.pid);
}

#[test]
fn detached_child_is_killed_under_kill_policy() {
    let s = Scratch::new("kill");
    let gc = s.path("gc.pid");
    let mut c = cmd(&["spawn", "detached", &gc, "0"]);
    c.leftovers(LeftoverPolicy::Kill);
    let running = c.spawn().unwrap();
    let g = Pinned::wait(&gc, Duration::from_secs(10));
    let r = running.wait();
    assert_eq!(r.outcome, Outcome::Exited(0), "{r:?}");
    assert_eq!(r.leftovers.killed, 1, "{r:?}");
    assert!(g.dead_within(Duration::from_secs(2)));
}

#[test]
fn nonzero_exit_kills_survivor() {
    let s = Scratch::new("nonzero");
    let gc = s.path("gc.pid");
    let running = cmd(&["spawn", "detached", &gc, "3"]).spawn().unwrap();
    let g = Pinned::wait(&gc, Duration::from_secs(10));
    let r = running.wait();
    assert_eq!(r.outcome, Outcome::Exited(3), "{r:?}");
    assert_eq!(r.leftovers.killed, 1, "{r:?}");
    assert!(g.dead_within(Duration::from_secs(2)));
}

#[test]
fn timeout_kills_the_tree_and_never_reports_the_kill_code_as_exit() {
    let s = Scratch::new("timeout");
    let p = s.path("root.pid");
    let t = Instant::now();
    let mut c = cmd(&["sleep", &p]);
    c.timeout(ms(1500));
    let running = c.spawn().unwrap();
    let root = Pinned::wait(&p, Duration::from_secs(10));
    let r = running.wait();
    assert!(t.elapsed() >= ms(1500));
    assert!(t.elapsed() < ms(1500) + SLACK, "{:?}", t.elapsed());
    assert_eq!(r.outcome, Outcome::TimedOut, "{r:?}");
    assert_eq!(r.root, Some(RootStatus::Signaled(Signal::KILL)), "{r:?}");
    assert_eq!(r.exit_code(), None);
    assert!(root.dead_within(ms(500)));
}

#[test]
fn grace_without_ctrl_break_escalates_to_terminate_job() {
    let s = Scratch::new("grace");
    let p = s.path("root.pid");
    let mut c = cmd(&["sleep", &p]);
    c.timeout(ms(800)).grace(ms(400));
    let running = c.spawn().unwrap();
    let root = Pinned::wait(&p, Duration::from_secs(10));
    let r = running.wait();
    assert_eq!(r.outcome, Outcome::TimedOut, "{r:?}");
    if under_wine() || r.root == Some(RootStatus::Signaled(Signal::KILL)) {
        // The helper sleeps through CTRL_BREAK or never gets it: the grace
        // ends in TerminateJobObject, which is not a cleanup failure.
        assert_eq!(r.signals_sent, vec![Signal::TERM, Signal::KILL], "{r:?}");
    }
    assert!(r.cleanup_errors.is_empty(), "{r:?}");
    assert!(root.dead_within(ms(500)));
}

#[test]
fn ctrl_break_stops_a_console_program_gracefully() {
    if under_wine() {
        eprintln!("SKIPPED: Wine 8 does not implement GenerateConsoleCtrlEvent(CTRL_BREAK_EVENT) (docs/wine-probe.md)");
        return;
    }
    let r = Command::new("cmd")
        .args(["/c", "ping -n 30 127.0.0.1 >NUL"])
        .timeout(ms(500))
        .grace(Duration::from_secs(5))
        .run()
        .unwrap();
    if r.containment_note.is_some() {
        eprintln!("SKIPPED: no console, CTRL_BREAK cannot be generated");
        return;
    }
    assert_eq!(r.outcome, Outcome::TimedOut, "{r:?}");
    assert_eq!(r.signals_sent, vec![Signal::TERM], "{r:?}");
}

#[test]
fn cancel_kills_the_tree() {
    let s = Scratch::new("cancel");
    let p = s.path("root.pid");
    let token = CancelToken::default();
    let mut c = cmd(&["sleep", &p]);
    c.cancel_token(&token);
    let running = c.spawn().unwrap();
    let root = Pinned::wait(&p, Duration::from_secs(10));
    let t = Instant::now();
    let tk = token.clone();
    std::thread::spawn(move || {
        std::thread::sleep(ms(200));
        tk.cancel();
    });
    let r = running.wait();
    assert!(t.elapsed() < ms(200) + SLACK);
    assert_eq!(r.outcome, Outcome::Cancelled, "{r:?}");
    assert!(root.dead_within(ms(500)));
}

#[test]
fn assignment_failure_is_a_containment_error_and_nothing_ran() {
    let s = Scratch::new("assign");
    let marker = s.path("ran.txt");
    let token = format!("assign-fail-{}", std::process::id());
    // The seam fails the assignment only for a command line containing the
    // token, so parallel tests are unaffected.
    std::env::set_var("CORRAL_TEST_FAIL_JOB_ASSIGN", &token);
    let e = cmd(&["touch", &marker, &token]).run().unwrap_err();
    match e {
        Error::Containment {
            mechanism, source, ..
        } => {
            assert_eq!(mechanism, Mechanism::JobObject);
            // The OS error stays under the step, not flattened into text.
            let os = source
                .as_ref()
                .and_then(std::error::Error::source)
                .and_then(|e| e.downcast_ref::<std::io::Error>());
            assert!(os.is_some_and(|e| e.raw_os_error().is_some()), "{source:?}");
        }
        e => panic!("expected a containment error, got {e:?}"),
    }
    std::thread::sleep(ms(300));
    assert!(
        !std::path::Path::new(&marker).exists(),
        "the child ran although assignment failed"
    );
}

#[test]
fn corral_dying_kills_the_tree() {
    let s = Scratch::new("crash");
    let p = s.path("root.pid");
    let mut host = std::process::Command::new(helper())
        .args(["host", &p])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let root = Pinned::wait(&p, Duration::from_secs(10));
    host.kill().unwrap(); // TerminateProcess: corral gets no chance to clean up
    host.wait().unwrap();
    assert!(
        root.dead_within(Duration::from_secs(3)),
        "KILL_ON_JOB_CLOSE did not kill {} when corral died",
        root.pid
    );
}

#[test]
fn kept_survivor_outlives_corral_process() {
    let s = Scratch::new("keepexit");
    let p = s.path("gc.pid");
    let out = std::process::Command::new(helper())
        .args(["host-keep", &p])
        .output()
        .unwrap();
    let g = Pinned::wait(&p, Duration::from_secs(10));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Exited(0) kept=1"), "{text}");
    // corral's process is gone and its job handle with it; the kept
    // grandchild lives on because KILL_ON_JOB_CLOSE was lifted.
    assert!(!g.dead_within(ms(700)), "kept grandchild died with corral");
}

#[test]
fn bare_program_name_is_found_on_path() {
    let r = Command::new("cmd").args(["/c", "exit 7"]).run().unwrap();
    assert_eq!(r.exit_code(), Some(7), "{r:?}");
}

/// No sandbox mechanism on Windows yet (issue 33): a sandboxed command is
/// refused with `Error::Sandbox` and nothing runs.
#[test]
fn a_sandbox_is_refused_and_nothing_runs() {
    let marker =
        std::env::temp_dir().join(format!("corral-sandbox-refused-{}", std::process::id()));
    let _ = std::fs::remove_file(&marker);
    let mut c = Command::new("cmd");
    c.args(["/C", "echo ran >"]).arg(&marker);
    c.sandbox(corral::Sandbox::new());
    match c.run() {
        Err(Error::Sandbox { reason, .. }) => assert!(reason.contains("platform"), "{reason}"),
        other => panic!("not refused: {other:?}"),
    }
    assert!(!marker.exists());
}
