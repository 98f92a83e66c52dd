//! The process's entry point on Linux with glibc: what std's start does
//! that corral needs, without the part that costs the most at every start
//! of a one-shot command (issue #20, docs/BENCHMARKS.md).
//!
//! std's start (`lang_start`) places the main thread's stack guard: glibc's
//! `pthread_getattr_np` reads `/proc/self/maps` to find the main stack, and
//! std installs SIGSEGV and SIGBUS handlers and an alternate signal stack,
//! so that a stack overflow prints "has overflowed its stack" before the
//! abort. Here a stack overflow is a plain SIGSEGV instead: corral dies
//! either way, and the keeper (or the PID namespace) still takes the tree
//! with it.
//!
//! Kept from std's start: descriptors 0, 1 and 2 are open before anything
//! else runs (on /dev/null if they were closed: nothing corral opens can
//! take their numbers, and a write to a closed stdout is no error); SIGPIPE
//! is ignored (a write to a closed pipe fails with EPIPE; its disposition
//! at start is recorded before, see `dispositions`); a panic ends corral
//! with std's code, 101, after the panic hook printed it. The arguments
//! come from glibc, which hands them to std before `main`.

use std::ffi::{c_char, c_int};

/// The C entry point: glibc's `__libc_start_main` calls it.
#[no_mangle]
extern "C" fn main(_argc: c_int, _argv: *const *const c_char) -> c_int {
    open_standard_descriptors();
    // SAFETY: setting a signal's disposition to SIG_IGN installs no code
    // and touches no memory of ours.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    // `corral_main` never returns: it exits with corral's code.
    let _ = std::panic::catch_unwind(crate::corral_main);
    std::process::exit(101)
}

/// Opens /dev/null on whichever of descriptors 0, 1 and 2 is closed (the
/// lowest free number is the one `open` takes), as std's start does; if
/// that fails, corral cannot run safely and aborts, as std's start does.
fn open_standard_descriptors() {
    let mut fds = [0, 1, 2].map(|fd| libc::pollfd {
        fd,
        events: 0,
        revents: 0,
    });
    // POLLNVAL marks a descriptor that is not open.
    let polled = loop {
        // SAFETY: `fds` is a valid array of three pollfds; a zero timeout
        // returns at once.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), 3, 0) };
        if r != -1 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            break r != -1;
        }
    };
    for pfd in fds {
        let closed = if polled {
            pfd.revents & libc::POLLNVAL != 0
        } else {
            // SAFETY: F_GETFD on any number only reads its flags.
            unsafe { libc::fcntl(pfd.fd, libc::F_GETFD) == -1 }
        };
        // SAFETY: a NUL-terminated path; `open` allocates a new descriptor.
        if closed && unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) } == -1 {
            std::process::abort();
        }
    }
}
