//! `corral-zombie-leader`: a process whose main thread (the thread-group
//! leader) has exited while another thread keeps running, so that
//! `/proc/PID/stat` shows `Z` for a process that is alive.
//!
//! Usage: `corral-zombie-leader NAME [hold]` (normally exec'd by the
//! testkit's `$H` script, which already wrote `NAME.pid`):
//!
//! * SIGTERM, SIGINT and SIGHUP are ignored (process-wide, before any thread
//!   starts), so only SIGKILL ends it.
//! * A second thread waits until the leader is a zombie, then writes
//!   `$CORRAL_TEST_DIR/NAME.zombie` (the helper is "ready"), and ends the
//!   whole process after 30 s at the latest.
//! * The main thread leaves with the raw `exit` system call (only the
//!   calling thread ends; no unwinding through Rust frames, unlike
//!   `pthread_exit`).
//! * Without `hold`, the standard streams are redirected to /dev/null first
//!   (the process holds no pipe of its parent's); with `hold` they are kept.
//!
//! Built by the testkit's build script with the host `rustc`; no
//! dependencies.

use std::time::{Duration, Instant};

extern "C" {
    fn signal(sig: i32, handler: usize) -> usize;
    fn syscall(num: i64, ...) -> i64;
    fn open(path: *const u8, flags: i32, ...) -> i32;
    fn dup2(old: i32, new: i32) -> i32;
}

const SIG_IGN: usize = 1;
const SIGHUP: i32 = 1;
const SIGINT: i32 = 2;
const SIGTERM: i32 = 15;
const O_RDWR: i32 = 2;

#[cfg(target_arch = "x86_64")]
const SYS_EXIT: i64 = 60;
#[cfg(target_arch = "aarch64")]
const SYS_EXIT: i64 = 93;
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("add the `exit` system call number for this architecture");

fn leader_state() -> Option<u8> {
    let stat = std::fs::read("/proc/self/stat").ok()?;
    let close = stat.iter().rposition(|&b| b == b')')?;
    stat.get(close + 2).copied()
}

fn main() {
    let mut args = std::env::args().skip(1);
    let name = args.next().unwrap_or_else(|| "zombie".into());
    let hold = args.next().as_deref() == Some("hold");
    // SAFETY: plain libc calls on this single-threaded process before any
    // other thread exists; the arguments are valid constants / a NUL
    // terminated string literal.
    unsafe {
        for s in [SIGHUP, SIGINT, SIGTERM] {
            signal(s, SIG_IGN);
        }
        if !hold {
            let fd = open(b"/dev/null\0".as_ptr(), O_RDWR);
            if fd >= 0 {
                for t in 0..3 {
                    dup2(fd, t);
                }
            }
        }
    }
    let dir = std::env::var_os("CORRAL_TEST_DIR").map(std::path::PathBuf::from);
    std::thread::spawn(move || {
        let start = Instant::now();
        // Ready once the leader is really gone.
        while leader_state() != Some(b'Z') && start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(1));
        }
        if let Some(dir) = dir {
            let tmp = dir.join(format!("{name}.zombie.tmp"));
            if std::fs::write(&tmp, b"z").is_ok() {
                let _ = std::fs::rename(&tmp, dir.join(format!("{name}.zombie")));
            }
        }
        while start.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(100));
        }
        std::process::exit(0);
    });
    // SAFETY: the raw `exit` system call ends only this thread; nothing of
    // this thread's stack is referenced by the other thread (it owns what
    // it uses), and no Rust frame is unwound.
    unsafe {
        syscall(SYS_EXIT, 0i64);
    }
    unreachable!("the exit system call returned");
}
