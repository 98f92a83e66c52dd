//! The keep rule's effects ([`phase::keep_rule`](super::phase::keep_rule)
//! decides): what each leftover of a clean exit is (running, stopped or
//! dying, read from `/proc` on Linux), and SIGKILL to the stopped ones
//! through a pidfd, once the process the pidfd holds is checked to be the
//! one seen stopped (the same start time, still stopped). Elsewhere no
//! state is read: every leftover counts as running and none is killed.

use std::io;

use super::phase::{Leftover, Seen};
use crate::contain::Tracer;
use crate::report::Mechanism;

/// The stopped leftovers of one run: seen, and killed.
#[derive(Default)]
pub(super) struct Stopped {
    /// The start time of each leftover last seen stopped, by pid.
    #[cfg(target_os = "linux")]
    seen: std::collections::HashMap<u32, u64>,
    /// The pidfds of the leftovers sent SIGKILL, with their pids.
    #[cfg(target_os = "linux")]
    killed: Vec<(u32, std::os::fd::OwnedFd)>,
}

impl Stopped {
    /// What the keep rule sees of each of `members` (live members other
    /// than the root); one gone since its listing is left out.
    pub(super) fn look(&mut self, members: &[u32]) -> Vec<Leftover> {
        #[cfg(target_os = "linux")]
        {
            use crate::sys::linux_proc::{fatal_pending, is_dying, stat_of};
            members
                .iter()
                .filter_map(|&pid| {
                    let stat = stat_of(pid).filter(|s| !s.is_dead())?;
                    let seen = if is_dying(pid) {
                        Seen::Dying
                    } else if stat.state == b'T' {
                        self.seen.insert(pid, stat.start);
                        Seen::Stopped
                    } else if fatal_pending(pid) {
                        Seen::Dying
                    } else {
                        Seen::Running
                    };
                    Some(Leftover { pid, seen })
                })
                .collect()
        }
        #[cfg(not(target_os = "linux"))]
        {
            members
                .iter()
                .map(|&pid| Leftover {
                    pid,
                    seen: Seen::Running,
                })
                .collect()
        }
    }

    /// SIGKILL to each of `pids` (seen stopped by [`Stopped::look`])
    /// through a pidfd, when the process it holds still has the start time
    /// seen and is still stopped; one that is gone, or continued, is left
    /// alone. Each is sent SIGKILL once. The first failure other than "no
    /// such process" is returned, after the others were tried.
    pub(super) fn kill(&mut self, pids: &[u32], tracer: &Tracer, via: Mechanism) -> io::Result<()> {
        #[cfg(target_os = "linux")]
        {
            use rustix::process::{pidfd_open, pidfd_send_signal, Pid, PidfdFlags};
            let mut first = Ok(());
            for &pid in pids {
                if self.killed.iter().any(|(p, _)| *p == pid) {
                    continue;
                }
                let (Some(&start), Some(p)) = (self.seen.get(&pid), Pid::from_raw(pid as i32))
                else {
                    continue;
                };
                let fd = match pidfd_open(p, PidfdFlags::empty()) {
                    Ok(fd) => fd,
                    Err(rustix::io::Errno::SRCH) => continue,
                    Err(e) => {
                        first = first.and(Err(e.into()));
                        continue;
                    }
                };
                // The pidfd holds one process: the one seen, if it started
                // at the same time (a reused pid starts later).
                let same = crate::sys::linux_proc::stat_of(pid)
                    .is_some_and(|s| s.start == start && s.state == b'T');
                if !same {
                    continue;
                }
                match pidfd_send_signal(&fd, rustix::process::Signal::KILL) {
                    Ok(()) => {
                        tracer.record(crate::contain::OsOp::KillStopped { via, pid });
                        self.killed.push((pid, fd));
                    }
                    Err(rustix::io::Errno::SRCH) => {}
                    Err(e) => first = first.and(Err(e.into())),
                }
            }
            first
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (pids, tracer, via);
            Ok(())
        }
    }

    /// How many of the leftovers sent SIGKILL have exited (their pidfd is
    /// readable): a stopped process can only die of it.
    pub(super) fn dead(&self) -> usize {
        #[cfg(target_os = "linux")]
        {
            use rustix::event::{poll, PollFd, PollFlags, Timespec};
            let zero = Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            self.killed
                .iter()
                .filter(|(_, fd)| {
                    let mut fds = [PollFd::new(fd, PollFlags::IN)];
                    poll(&mut fds, Some(&zero)).is_ok_and(|n| n > 0)
                })
                .count()
        }
        #[cfg(not(target_os = "linux"))]
        {
            0
        }
    }
}
