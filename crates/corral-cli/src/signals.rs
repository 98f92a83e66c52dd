//! `corral run`'s signal set-up, paid once per invocation and so kept to
//! what one run needs (issue #20):
//!
//! * one `sigaction` per caught signal, which installs the handler and
//!   returns the disposition it replaces (a signal that was ignored is put
//!   back to ignored, under a blocked mask, so none is lost or wrongly
//!   caught in between): about 50 calls where a query, a second query and an
//!   install per signal took about 150;
//! * a handler that only decides (a pure rule, [`message`]) and writes one
//!   byte to a pipe, read by the thread that waits for the run, between two
//!   of its steps (`corral::Running::wait_watching`): no thread of its own,
//!   whose creation and stacks, and the TLB shoot-downs a second thread
//!   brings on every later copy-on-write fault, cost about 0.45 ms a run;
//! * the root's own exit (a SIGCHLD saying the root exited, was killed or
//!   dumped core) is not written at all: the wait would only have asked
//!   whether the root was stopped (it was not) and, the SIGCHLD coming from
//!   the root, reaped nothing. So the wait is not woken for nothing at the
//!   end of every run.

use std::io::Read;
use std::os::fd::{AsRawFd, IntoRawFd};
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};

/// The pipe's write end, for the handler (-1 before the set-up). Open for
/// the life of the process: a handler may run until corral exits.
static WRITE_FD: AtomicI32 = AtomicI32::new(-1);

/// The run's root once spawned (0 before).
static ROOT: AtomicU32 = AtomicU32::new(0);

/// Set in a byte whose SIGCHLD came from the root (a stop or continue: the
/// root's exit is not passed on).
const FROM_ROOT: u8 = 0x80;

/// Where a SIGCHLD came from: the child's pid and the `si_code`
/// (`CLD_EXITED`, `CLD_STOPPED`, ...).
#[derive(Clone, Copy, Debug)]
pub struct ChildChange {
    pub pid: u32,
    pub code: i32,
}

/// What the handler writes for signal `sig` (None: nothing). A SIGCHLD
/// from the root (`root`, 0 until spawned) that reports its end is dropped;
/// one reporting a stop or a continue is marked [`FROM_ROOT`]; every other
/// signal is passed on as its number. Pure and async-signal-safe.
pub fn message(sig: i32, change: Option<ChildChange>, root: u32) -> Option<u8> {
    let byte = u8::try_from(sig).ok().filter(|&b| b > 0 && b < FROM_ROOT)?;
    if sig != libc::SIGCHLD {
        return Some(byte);
    }
    match change {
        Some(c) if root != 0 && c.pid == root => {
            let ended = [libc::CLD_EXITED, libc::CLD_KILLED, libc::CLD_DUMPED];
            (!ended.contains(&c.code)).then_some(byte | FROM_ROOT)
        }
        _ => Some(byte),
    }
}

/// A byte read from the pipe: the signal, and whether it is a SIGCHLD from
/// the root.
pub fn decode(byte: u8) -> (i32, bool) {
    (i32::from(byte & !FROM_ROOT), byte & FROM_ROOT != 0)
}

/// Whether a signal found ignored at start stays ignored (not caught):
/// yes, except SIGALRM (GNU's timer), the `-s` signal (`first`), and
/// SIGCHLD and SIGCONT (job control and orphans: corral's own business).
pub fn stays_ignored(sig: i32, first: Option<i32>) -> bool {
    ![libc::SIGALRM, libc::SIGCHLD, libc::SIGCONT].contains(&sig) && Some(sig) != first
}

/// The run's root is `pid` from now on.
pub fn set_root(pid: u32) {
    ROOT.store(pid, Ordering::SeqCst);
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn errno_location() -> *mut libc::c_int {
    // SAFETY: returns this thread's errno slot; no precondition.
    unsafe { libc::__errno_location() }
}

#[cfg(any(
    target_os = "macos",
    target_os = "ios",
    target_os = "freebsd",
    target_os = "dragonfly"
))]
fn errno_location() -> *mut libc::c_int {
    // SAFETY: returns this thread's errno slot; no precondition.
    unsafe { libc::__error() }
}

#[cfg(not(any(
    target_os = "linux",
    target_os = "android",
    target_os = "macos",
    target_os = "ios",
    target_os = "freebsd",
    target_os = "dragonfly"
)))]
fn errno_location() -> *mut libc::c_int {
    std::ptr::null_mut()
}

/// The handler: atomics, the pure [`message`] and one `write(2)`, all
/// async-signal-safe; errno is kept for the code it interrupted.
extern "C" fn on_signal(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    let change = (sig == libc::SIGCHLD && !info.is_null()).then(|| {
        // SAFETY: with SA_SIGINFO the kernel passes a valid siginfo; for a
        // SIGCHLD it carries the child's pid and the kind of change.
        unsafe {
            ChildChange {
                pid: (*info).si_pid() as u32,
                code: (*info).si_code,
            }
        }
    });
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let change = {
        let _ = info;
        None
    };
    let Some(byte) = message(sig, change, ROOT.load(Ordering::SeqCst)) else {
        return;
    };
    let fd = WRITE_FD.load(Ordering::SeqCst);
    if fd < 0 {
        return;
    }
    let errno = errno_location();
    // SAFETY: `errno` is this thread's errno slot (or null, then unused);
    // `write` is async-signal-safe and reads one byte of a live local; the
    // descriptor stays open for the life of the process.
    unsafe {
        let saved = if errno.is_null() { 0 } else { *errno };
        libc::write(fd, (&byte as *const u8).cast(), 1);
        if !errno.is_null() {
            *errno = saved;
        }
    }
}

/// Installs the handler for `signals` (a signal found ignored stays so
/// unless [`stays_ignored`] says otherwise) and returns the pipe's read
/// end, which yields one byte per signal passed on (see [`decode`]). Meant
/// to be called once per process; a second call fails.
pub fn install(signals: &[i32], first: Option<i32>) -> std::io::Result<std::io::PipeReader> {
    let (reader, writer) = std::io::pipe()?;
    // A full pipe (some 64 Ki signals not yet read) drops the signal rather
    // than blocking the handler: signals of one kind coalesce anyway.
    rustix::fs::fcntl_setfl(&writer, rustix::fs::OFlags::NONBLOCK)?;
    // Read on the waiting thread between two steps of the run, which must
    // not block there.
    rustix::fs::fcntl_setfl(&reader, rustix::fs::OFlags::NONBLOCK)?;
    if WRITE_FD
        .compare_exchange(-1, writer.as_raw_fd(), Ordering::SeqCst, Ordering::SeqCst)
        .is_err()
    {
        return Err(std::io::Error::other("signal handlers already installed"));
    }
    let _ = writer.into_raw_fd(); // kept open: see WRITE_FD
    let mut failed = None;
    // SAFETY: sigset_t and sigaction are plain data, initialised by
    // sigemptyset / zeroed then filled; the handler is async-signal-safe
    // (see `on_signal`); the mask blocks the signals while their
    // disposition changes (none is lost: a blocked signal stays pending, and
    // one put back to SIG_IGN is discarded as it would have been) and is
    // restored on this thread right after.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        let mut old_mask: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for &s in signals {
            libc::sigaddset(&mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old_mask);
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = on_signal
            as extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void)
            as libc::sighandler_t;
        act.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        libc::sigemptyset(&mut act.sa_mask);
        for &s in signals {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(s, &act, &mut old) != 0 {
                failed.get_or_insert_with(std::io::Error::last_os_error);
                continue;
            }
            if old.sa_sigaction == libc::SIG_IGN && stays_ignored(s, first) {
                libc::sigaction(s, &old, std::ptr::null_mut());
            }
        }
        libc::pthread_sigmask(libc::SIG_SETMASK, &old_mask, std::ptr::null_mut());
    }
    match failed {
        Some(e) => Err(e),
        None => Ok(reader),
    }
}

/// Reads the bytes the handler wrote so far, in order, calling `each` for
/// every one; returns when the pipe is empty (it never blocks: the read end
/// is non-blocking) or fails.
pub fn drain(mut reader: &std::io::PipeReader, mut each: impl FnMut(u8)) {
    let mut buf = [0u8; 64];
    loop {
        match reader.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => buf[..n].iter().for_each(|&b| each(b)),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use libc::{
        CLD_CONTINUED, CLD_DUMPED, CLD_EXITED, CLD_KILLED, CLD_STOPPED, SIGALRM, SIGCHLD, SIGCONT,
        SIGHUP, SIGINT, SIGTERM, SIGUSR1,
    };

    /// signal, where a SIGCHLD came from, the root, what is written, why.
    type Case = (i32, Option<ChildChange>, u32, Option<u8>, &'static str);

    /// The highest signal number corral catches here.
    fn last_signal() -> i32 {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        return libc::SIGRTMAX();
        #[cfg(target_os = "freebsd")]
        return 126;
        #[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd")))]
        return libc::SIGUSR2;
    }

    fn chld(pid: u32, code: i32) -> Option<ChildChange> {
        Some(ChildChange { pid, code })
    }

    #[test]
    fn what_the_handler_passes_on() {
        let rt = last_signal();
        let cases: &[Case] = &[
            (
                SIGTERM,
                None,
                0,
                Some(SIGTERM as u8),
                "a terminating signal",
            ),
            (SIGINT, None, 42, Some(SIGINT as u8), "after the spawn too"),
            (rt, None, 42, Some(rt as u8), "the last real-time signal"),
            (SIGCONT, None, 42, Some(SIGCONT as u8), "corral continued"),
            (
                SIGCHLD,
                chld(7, CLD_EXITED),
                0,
                Some(SIGCHLD as u8),
                "before the spawn: reap",
            ),
            (
                SIGCHLD,
                chld(7, CLD_EXITED),
                42,
                Some(SIGCHLD as u8),
                "an orphan's end: reap",
            ),
            (
                SIGCHLD,
                chld(7, CLD_STOPPED),
                42,
                Some(SIGCHLD as u8),
                "an orphan stopped",
            ),
            (
                SIGCHLD,
                chld(42, CLD_EXITED),
                42,
                None,
                "the root exited: nothing to do",
            ),
            (SIGCHLD, chld(42, CLD_KILLED), 42, None, "the root killed"),
            (
                SIGCHLD,
                chld(42, CLD_DUMPED),
                42,
                None,
                "the root dumped core",
            ),
            (
                SIGCHLD,
                chld(42, CLD_STOPPED),
                42,
                Some(SIGCHLD as u8 | FROM_ROOT),
                "root stopped",
            ),
            (
                SIGCHLD,
                chld(42, CLD_CONTINUED),
                42,
                Some(SIGCHLD as u8 | FROM_ROOT),
                "root cont.",
            ),
            (
                SIGCHLD,
                None,
                42,
                Some(SIGCHLD as u8),
                "no siginfo: as from an orphan",
            ),
            (0, None, 0, None, "not a signal"),
            (200, None, 0, None, "out of a byte's range"),
        ];
        for &(sig, change, root, want, why) in cases {
            assert_eq!(message(sig, change, root), want, "{why}");
        }
    }

    #[test]
    fn a_byte_decodes_to_its_signal_and_origin() {
        assert_eq!(decode(SIGTERM as u8), (SIGTERM, false));
        assert_eq!(decode(SIGCHLD as u8 | FROM_ROOT), (SIGCHLD, true));
        let rt = last_signal();
        assert_eq!(decode(rt as u8), (rt, false));
    }

    #[test]
    fn which_ignored_signals_stay_ignored() {
        let cases: &[(i32, Option<i32>, bool)] = &[
            (SIGHUP, None, true),          // nohup corral run ...
            (SIGUSR1, None, true),         //
            (SIGHUP, Some(SIGHUP), false), // -s HUP: caught, as GNU timeout
            (SIGALRM, None, false),        // GNU's timer always
            (SIGCHLD, None, false),        // job control and orphans
            (SIGCONT, None, false),        //
        ];
        for &(sig, first, want) in cases {
            assert_eq!(
                stays_ignored(sig, first),
                want,
                "signal {sig}, -s {first:?}"
            );
        }
    }
}
