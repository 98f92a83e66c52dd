//! Signals ignored when corral starts stay ignored: corral does not catch
//! them (so it does not pass them on) and the command inherits them
//! ignored, as with GNU `timeout` (`nohup corral run ...` survives a
//! hangup; `(trap '' PIPE; corral run -- yes | :)` ends `yes` with EPIPE).
//!
//! SIGPIPE needs care: the Rust runtime sets it to "ignore" before `main`,
//! so its disposition at start is recorded earlier, by a function the
//! loader runs before `main` (an ELF `.init_array` entry).

#[cfg(unix)]
use std::sync::atomic::{AtomicU8, Ordering};

/// SIGPIPE at start: 0 not recorded, 1 ignored, 2 not ignored.
#[cfg(unix)]
static SIGPIPE_AT_START: AtomicU8 = AtomicU8::new(0);

/// Whether `sig` is ignored in this process now (a query: nothing changes).
#[cfg(unix)]
pub fn ignored_now(sig: i32) -> bool {
    // SAFETY: a zeroed sigaction is valid plain data; sigaction with a null
    // new action only reads the current one into `old`.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(sig, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_IGN
    }
}

/// Records SIGPIPE's disposition before the Rust runtime changes it.
/// Runs before `main`: only an async-signal-safe query and an atomic store.
#[cfg(unix)]
#[allow(dead_code)] // referenced only where the loader hook exists
extern "C" fn record_sigpipe_at_start() {
    let ignored = ignored_now(libc::SIGPIPE);
    SIGPIPE_AT_START.store(if ignored { 1 } else { 2 }, Ordering::SeqCst);
}

// The loader calls every function of `.init_array` before `main` (glibc,
// musl and FreeBSD's rtld alike); `#[used]` keeps the entry in the binary.
#[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
#[used]
#[link_section = ".init_array"]
static RECORD_SIGPIPE: extern "C" fn() = record_sigpipe_at_start;

#[cfg(any(target_os = "macos", target_os = "ios"))]
#[used]
#[link_section = "__DATA,__mod_init_func"]
static RECORD_SIGPIPE: extern "C" fn() = record_sigpipe_at_start;

/// Whether SIGPIPE was ignored when corral started (false when that could
/// not be recorded on this platform).
#[cfg(unix)]
pub fn sigpipe_ignored_at_start() -> bool {
    SIGPIPE_AT_START.load(Ordering::SeqCst) == 1
}

#[cfg(not(unix))]
pub fn sigpipe_ignored_at_start() -> bool {
    false
}
