//! Keeping a terminal a terminal: when corral runs in the foreground of a
//! terminal (stdin is that terminal and corral's group owns it), the
//! command's process group becomes the terminal's foreground group while it
//! runs, so an interactive program can read the terminal (instead of being
//! stopped by SIGTTIN) and Ctrl-C reaches the tree directly. The terminal is
//! given back when the run ends.
//!
//! Job control: when the tree is stopped from the terminal (Ctrl-Z: SIGTSTP;
//! or SIGTTIN/SIGTTOU), corral takes the terminal back and stops its own
//! process group with SIGTSTP, so the shell sees its job stopped and gets the
//! terminal. When corral is continued (`fg`: SIGCONT), it gives the
//! foreground back to the tree (only if the shell gave it to corral; after
//! `bg` the tree runs in the background) and continues the tree.
//!
//! The only signal corral sends here is SIGCONT to the tree's group, and only
//! while the run is being waited for, after checking through the root's pidfd
//! that the root (the group's leader, which pins the group id) has not
//! exited; after the wait [`JobControl::end`] stops all of it.

use std::sync::{Arc, Mutex};

/// Restores the terminal's foreground group on drop.
pub struct Foreground {
    #[cfg(unix)]
    ours: rustix::process::Pid,
}

/// Shared by the run's set-up (the hand-over) and the handling of the
/// signals corral receives (on the waiting thread).
#[derive(Clone, Default)]
pub struct JobControl(Arc<Mutex<Option<Tree>>>);

#[allow(dead_code)]
struct Tree {
    #[cfg(unix)]
    pgid: rustix::process::Pid,
    #[cfg(unix)]
    ours: rustix::process::Pid,
    #[cfg(target_os = "linux")]
    pidfd: Option<std::os::fd::OwnedFd>,
}

impl JobControl {
    pub fn new() -> Self {
        Self::default()
    }

    /// The run is over: no job-control action from now on.
    pub fn end(&self) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

#[cfg(unix)]
impl JobControl {
    fn start(&self, pgid: rustix::process::Pid, ours: rustix::process::Pid) {
        #[cfg(target_os = "linux")]
        let pidfd = rustix::process::pidfd_open(pgid, rustix::process::PidfdFlags::empty()).ok();
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(Tree {
            pgid,
            ours,
            #[cfg(target_os = "linux")]
            pidfd,
        });
    }

    /// SIGCHLD: if the root was stopped from the terminal, take the terminal
    /// back and stop corral's own group (the shell's job).
    pub fn on_child_changed(&self) {
        use rustix::process::{waitid, WaitId, WaitIdOptions};
        let guard = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let Some(tree) = guard.as_ref() else {
            return;
        };
        #[cfg(target_os = "linux")]
        let id = match &tree.pidfd {
            Some(fd) => WaitId::PidFd(std::os::fd::AsFd::as_fd(fd)),
            None => WaitId::Pid(tree.pgid),
        };
        #[cfg(not(target_os = "linux"))]
        let id = WaitId::Pid(tree.pgid);
        // WSTOPPED alone never reports (or reaps) an exit.
        let Ok(Some(st)) = waitid(id, WaitIdOptions::STOPPED | WaitIdOptions::NOHANG) else {
            return;
        };
        let stop = st.stopping_signal();
        let from_terminal = [libc::SIGTSTP, libc::SIGTTIN, libc::SIGTTOU];
        if !stop.is_some_and(|s| from_terminal.contains(&s)) {
            return;
        }
        let stdin = std::io::stdin();
        if rustix::termios::tcgetpgrp(&stdin).ok() != Some(tree.pgid) {
            return; // the tree does not have the terminal: not ours to follow
        }
        let _ = with_sigttou_blocked(|| rustix::termios::tcsetpgrp(&stdin, tree.ours));
        // Stops corral (SIGTSTP is not handled here) and the rest of its job.
        let _ = rustix::process::kill_process_group(tree.ours, rustix::process::Signal::TSTP);
    }

    /// SIGCONT: corral was continued. Give the foreground back to the tree
    /// when the shell gave it to corral, and continue the tree.
    pub fn on_continued(&self) {
        let guard = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let Some(tree) = guard.as_ref() else {
            return;
        };
        if !self.root_alive(tree) {
            return;
        }
        let stdin = std::io::stdin();
        if rustix::termios::tcgetpgrp(&stdin).ok() == Some(tree.ours) {
            let _ = with_sigttou_blocked(|| rustix::termios::tcsetpgrp(&stdin, tree.pgid));
        }
        let _ = rustix::process::kill_process_group(tree.pgid, rustix::process::Signal::CONT);
    }

    /// Whether the root has not exited (so its group id is still its own).
    fn root_alive(&self, tree: &Tree) -> bool {
        #[cfg(target_os = "linux")]
        if let Some(fd) = &tree.pidfd {
            use rustix::process::{waitid, WaitId, WaitIdOptions};
            return matches!(
                waitid(
                    WaitId::PidFd(std::os::fd::AsFd::as_fd(fd)),
                    WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT,
                ),
                Ok(None)
            );
        }
        let _ = tree;
        false
    }
}

#[cfg(not(unix))]
impl JobControl {
    #[allow(dead_code)]
    pub fn on_child_changed(&self) {}
    #[allow(dead_code)]
    pub fn on_continued(&self) {}
}

/// corral's own process group; `None` when its leader lives outside corral's
/// PID namespace (`getpgrp` then gives 0, which rustix's `getpgrp` cannot
/// represent: it asserts in debug builds and makes an invalid `Pid` in
/// release). Such a group cannot own the terminal as corral sees it.
#[cfg(unix)]
pub fn own_group() -> Option<rustix::process::Pid> {
    // SAFETY: getpgrp takes no arguments, touches no memory and cannot fail.
    rustix::process::Pid::from_raw(unsafe { libc::getpgrp() })
}

/// Hands the terminal on stdin to process group `pgid` if corral owns it.
#[cfg(unix)]
pub fn hand_over(pgid: u32, jobs: &JobControl) -> Option<Foreground> {
    use rustix::termios::{isatty, tcgetpgrp, tcsetpgrp};
    let stdin = std::io::stdin();
    if !isatty(&stdin) {
        return None;
    }
    let ours = own_group()?;
    if tcgetpgrp(&stdin).ok()? != ours {
        return None; // corral itself is in the background
    }
    let theirs = rustix::process::Pid::from_raw(pgid as i32)?;
    with_sigttou_blocked(|| tcsetpgrp(&stdin, theirs)).ok()?;
    jobs.start(theirs, ours);
    // If the child already read the terminal and was stopped by SIGTTIN
    // before the hand-over, let it go on. The group is still pinned: its
    // leader has not been reaped (corral has not started waiting).
    let _ = rustix::process::kill_process_group(theirs, rustix::process::Signal::CONT);
    Some(Foreground { ours })
}

#[cfg(not(unix))]
pub fn hand_over(_pgid: u32, _jobs: &JobControl) -> Option<Foreground> {
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

/// Closes the window between the spawn and [`hand_over`]: until then the
/// tree runs in a group of its own while corral's group still has the
/// terminal, so a Ctrl-Z typed in that instant would stop corral alone
/// (the tree running on, unseen). From before the spawn until the
/// hand-over is done, SIGTSTP only raises a flag (a handler of our own, not
/// a blocked mask: a mask would be inherited by the command through
/// `posix_spawn`, a caught signal is reset to its default by `execve`);
/// then the default action is back, and a Ctrl-Z that came in the meantime
/// is passed to the tree, which has the terminal now, so it stops like
/// after any Ctrl-Z (and corral follows it, see
/// [`JobControl::on_child_changed`]). Without a hand-over (no terminal,
/// corral in the background) it is raised again on corral itself, as it
/// would have acted before.
#[cfg(unix)]
pub struct TstpHold {
    old: libc::sigaction,
    installed: bool,
}

#[cfg(unix)]
static TSTP_SEEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

#[cfg(unix)]
extern "C" fn note_tstp(_: libc::c_int) {
    // Async-signal-safe: one atomic store.
    TSTP_SEEN.store(true, std::sync::atomic::Ordering::SeqCst);
}

#[cfg(unix)]
impl TstpHold {
    pub fn new() -> TstpHold {
        TSTP_SEEN.store(false, std::sync::atomic::Ordering::SeqCst);
        // SAFETY: sigaction structs are plain data, zeroed then filled; the
        // handler only stores to an atomic (async-signal-safe); the old
        // action is saved to be restored by `release` or on drop.
        unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            let mut old: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = note_tstp as extern "C" fn(libc::c_int) as libc::sighandler_t;
            act.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut act.sa_mask);
            let installed = libc::sigaction(libc::SIGTSTP, &act, &mut old) == 0
                // Ignored (a non-interactive parent's choice): leave it so.
                && old.sa_sigaction != libc::SIG_IGN;
            if !installed {
                libc::sigaction(libc::SIGTSTP, &old, std::ptr::null_mut());
            }
            TstpHold { old, installed }
        }
    }

    /// The hand-over is done (`tree`: the group that has the terminal now,
    /// if corral gave it one): SIGTSTP acts as before again, and one that
    /// came in the meantime goes to the tree (or, without a hand-over, to
    /// corral itself).
    pub fn release(mut self, tree: Option<u32>) {
        if !self.restore() || !TSTP_SEEN.swap(false, std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        match tree.and_then(|p| rustix::process::Pid::from_raw(p as i32)) {
            // The group is pinned: its leader is not reaped before the wait
            // that follows.
            Some(pgid) => {
                let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::TSTP);
            }
            None => {
                let _ = rustix::process::kill_process(
                    rustix::process::getpid(),
                    rustix::process::Signal::TSTP,
                );
            }
        }
    }

    /// Puts the old action back; whether ours was installed.
    fn restore(&mut self) -> bool {
        if !std::mem::take(&mut self.installed) {
            return false;
        }
        // SAFETY: restores the action saved by `new`.
        unsafe {
            libc::sigaction(libc::SIGTSTP, &self.old, std::ptr::null_mut());
        }
        true
    }
}

#[cfg(unix)]
impl Drop for TstpHold {
    fn drop(&mut self) {
        if self.restore() && TSTP_SEEN.swap(false, std::sync::atomic::Ordering::SeqCst) {
            // No tree (the spawn failed): the Ctrl-Z was for corral.
            let _ = rustix::process::kill_process(
                rustix::process::getpid(),
                rustix::process::Signal::TSTP,
            );
        }
    }
}
