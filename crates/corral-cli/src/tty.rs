//! Keeping a terminal a terminal: when corral runs in the foreground of a
//! terminal (stdin is that terminal and corral's group owns it), the
//! command's process group becomes the terminal's foreground group while it
//! runs, so an interactive program can read the terminal (instead of being
//! stopped by SIGTTIN) and Ctrl-C reaches the tree directly. The terminal is
//! given back when the run ends.

/// Restores the terminal's foreground group on drop.
pub struct Foreground {
    #[cfg(unix)]
    ours: rustix::process::Pid,
}

/// Hands the terminal on stdin to process group `pgid` if corral owns it.
#[cfg(unix)]
pub fn hand_over(pgid: u32) -> Option<Foreground> {
    use rustix::termios::{isatty, tcgetpgrp, tcsetpgrp};
    let stdin = std::io::stdin();
    if !isatty(&stdin) {
        return None;
    }
    let ours = rustix::process::getpgrp();
    if tcgetpgrp(&stdin).ok()? != ours {
        return None; // corral itself is in the background
    }
    let theirs = rustix::process::Pid::from_raw(pgid as i32)?;
    with_sigttou_blocked(|| tcsetpgrp(&stdin, theirs)).ok()?;
    // If the child already read the terminal and was stopped by SIGTTIN
    // before the hand-over, let it go on. The group is still pinned: its
    // leader has not been reaped (corral has not started waiting).
    let _ = rustix::process::kill_process_group(theirs, rustix::process::Signal::CONT);
    Some(Foreground { ours })
}

#[cfg(not(unix))]
pub fn hand_over(_pgid: u32) -> Option<Foreground> {
    None
}

#[cfg(unix)]
impl Drop for Foreground {
    fn drop(&mut self) {
        let stdin = std::io::stdin();
        let _ = with_sigttou_blocked(|| rustix::termios::tcsetpgrp(&stdin, self.ours));
    }
}

/// Runs `f` with SIGTTOU blocked in this thread: a process in a background
/// group that changes the terminal's foreground group would otherwise be
/// stopped by SIGTTOU.
#[cfg(unix)]
fn with_sigttou_blocked<T>(f: impl FnOnce() -> T) -> T {
    // SAFETY: sigset_t is plain data, initialised by sigemptyset before use;
    // pthread_sigmask only changes this thread's mask and is restored below.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTTOU);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
        let r = f();
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        r
    }
}
