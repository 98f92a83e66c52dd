//! Process-group containment (every Unix).
//!
//! The root is spawned as the leader of a new process group (std keeps its
//! posix_spawn/vfork path for this). The group id is the root's pid, and the
//! root is never reaped before [`release`](Containment::release): an
//! unreaped zombie leader keeps its pid, so no new process (and no new group)
//! can take that number while corral still signals it. No anchor process is
//! needed.
//!
//! Membership is found by scanning /proc (Linux; `ps` elsewhere). On Linux
//! every member found is pinned with a pidfd, so later checks ("is the tree
//! empty yet?") look only at the pinned processes, one `poll`, and a full
//! scan runs again only when all of them are gone, to confirm.
//!
//! What it cannot hold: a descendant that calls `setsid()` or `setpgid()`
//! leaves the group (cgroup containment closes that hole on Linux).

use std::io;

use super::{Containment, Mechanism, OsOp, Tracer};
use crate::sys::{self, Root};
use crate::Signal;

pub(crate) struct ProcessGroup {
    pgid: Option<u32>,
    released: bool,
    tracer: Tracer,
    #[cfg(target_os = "linux")]
    pins: pins::Pins,
    /// Prompt reaping of the group's orphans (subreaper processes only).
    #[cfg(target_os = "linux")]
    orphans: Option<super::orphans::Registration>,
}

impl ProcessGroup {
    pub(crate) fn new(tracer: Tracer) -> Self {
        ProcessGroup {
            pgid: None,
            released: false,
            tracer,
            #[cfg(target_os = "linux")]
            pins: pins::Pins::default(),
            #[cfg(target_os = "linux")]
            orphans: None,
        }
    }

    fn pgid(&self) -> io::Result<u32> {
        if self.released {
            return Err(io::Error::other(
                "process group already released; refusing to signal",
            ));
        }
        self.pgid
            .ok_or_else(|| io::Error::other("process group not attached"))
    }

    #[cfg(target_os = "linux")]
    fn live_members(&mut self, pgid: u32) -> io::Result<Vec<u32>> {
        let alive = self.pins.still_members(pgid);
        if !alive.is_empty() {
            return Ok(alive);
        }
        // Every pinned process is gone: confirm with a full scan (catches
        // members forked after the last scan) and pin what it finds.
        let found = sys::group_members(pgid)?;
        self.pins.pin(&found);
        Ok(found)
    }

    #[cfg(not(target_os = "linux"))]
    fn live_members(&mut self, pgid: u32) -> io::Result<Vec<u32>> {
        sys::group_members(pgid)
    }
}

impl Containment for ProcessGroup {
    fn mechanism(&self) -> Mechanism {
        Mechanism::ProcessGroup
    }

    fn placement(&mut self) -> io::Result<sys::Placement<'_>> {
        Ok(sys::Placement {
            new_group: true,
            ..sys::Placement::default()
        })
    }

    fn attach(&mut self, root: &Root) -> io::Result<()> {
        self.pgid = Some(root.id());
        #[cfg(target_os = "linux")]
        {
            self.orphans = super::orphans::register(root.id(), super::orphans::Claim::Group);
        }
        Ok(())
    }

    fn signal(&mut self, sig: Signal) -> io::Result<()> {
        let pgid = self.pgid()?;
        self.tracer.record(OsOp::SignalTree {
            via: Mechanism::ProcessGroup,
            target: pgid as u64,
            signal: sig,
        });
        sys::signal_group(pgid, sig)?;
        if sig != Signal::KILL && sig != sys::SIGCONT {
            // A stopped member cannot act on SIGTERM until it is continued.
            sys::signal_group(pgid, sys::SIGCONT)?;
        }
        Ok(())
    }

    fn members(&mut self) -> io::Result<Vec<u32>> {
        let pgid = self.pgid()?;
        self.live_members(pgid)
    }

    fn count_kept(&mut self, root: &mut Root) -> io::Result<usize> {
        // Nothing will be signalled any more: release now, then ask the
        // kernel whether the group still exists. With the leader reaped, the
        // group exists only while a member lives (and then its id cannot be
        // reused), so "no such process" means nothing was left, without a
        // scan of /proc.
        let pgid = self.pgid()?;
        let res = self.release(root);
        if sys::group_exists(pgid) {
            let pid = root.id();
            let n = self
                .live_members(pgid)?
                .into_iter()
                .filter(|&p| p != pid)
                .count();
            res.map(|()| n)
        } else {
            res.map(|()| 0)
        }
    }

    /// Readable when a pinned member exits (an epoll set of their pidfds),
    /// so a termination is checked when something happens, not only on the
    /// timer.
    #[cfg(target_os = "linux")]
    fn wake_fd(&self) -> Option<(std::os::fd::BorrowedFd<'_>, super::WakeOn)> {
        self.pins.epoll_fd().map(|fd| (fd, super::WakeOn::Readable))
    }

    fn release(&mut self, root: &mut Root) -> io::Result<()> {
        if self.released {
            return Ok(());
        }
        // From here on no signal may be sent: the reap below frees the id.
        self.released = true;
        #[cfg(target_os = "linux")]
        if let Some(o) = self.orphans.take() {
            o.finish();
        }
        let pid = root.id();
        let res = root.reap();
        self.tracer.record(OsOp::Reaped { pid });
        self.tracer.record(OsOp::Released {
            via: Mechanism::ProcessGroup,
        });
        #[cfg(target_os = "linux")]
        self.pins.clear();
        res
    }
}

#[cfg(target_os = "linux")]
mod pins {
    use std::os::fd::OwnedFd;

    use rustix::event::{epoll, poll, PollFd, PollFlags, Timespec};
    use rustix::process::{pidfd_open, Pid, PidfdFlags};

    use crate::sys::linux_proc;

    /// Members pinned by pidfd: a pinned pid cannot be reused while we hold
    /// its descriptor, so "alive" and "member" are answered for the same
    /// process that was found.
    #[derive(Default)]
    pub(super) struct Pins {
        fds: Vec<(u32, OwnedFd)>,
        /// Every pinned pidfd, level-triggered: readable while a pinned
        /// process has exited and was not yet dropped.
        epoll: Option<OwnedFd>,
        /// When the group membership of the live pinned processes was last
        /// read from /proc (a scan counts).
        verified: Option<std::time::Instant>,
    }

    impl Pins {
        pub(super) fn epoll_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
            use std::os::fd::AsFd;
            self.epoll.as_ref().map(|e| e.as_fd())
        }

        fn watch(&mut self, fd: &OwnedFd) {
            if self.epoll.is_none() {
                self.epoll = epoll::create(epoll::CreateFlags::CLOEXEC).ok();
            }
            if let Some(ep) = &self.epoll {
                let _ = epoll::add(ep, fd, epoll::EventData::new_u64(0), epoll::EventFlags::IN);
            }
        }

        pub(super) fn pin(&mut self, pids: &[u32]) {
            self.verified = Some(std::time::Instant::now());
            for &pid in pids {
                if self.fds.iter().any(|(p, _)| *p == pid) {
                    continue;
                }
                let Some(p) = Pid::from_raw(pid as i32) else {
                    continue;
                };
                let Ok(fd) = pidfd_open(p, PidfdFlags::empty()) else {
                    continue; // already gone
                };
                // The scan saw `pid` in the group microseconds ago. Pinned
                // processes are only ever *counted* (signals go to the
                // group), and `still_members` re-checks the group of every
                // live pinned process, so a pid reused in between would be
                // dropped there, not kept.
                self.watch(&fd);
                self.fds.push((pid, fd));
            }
        }

        /// Pinned processes that are alive and still in the group. Exited
        /// ones are dropped.
        pub(super) fn still_members(&mut self, pgid: u32) -> Vec<u32> {
            if self.fds.is_empty() {
                return Vec::new();
            }
            let exited: Vec<bool> = {
                let mut pfds: Vec<PollFd<'_>> = self
                    .fds
                    .iter()
                    .map(|(_, fd)| PollFd::new(fd, PollFlags::IN))
                    .collect();
                let zero = Timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                };
                if poll(&mut pfds, Some(&zero)).is_err() {
                    return Vec::new();
                }
                pfds.iter().map(|p| !p.revents().is_empty()).collect()
            };
            let mut i = 0;
            self.fds.retain(|_| {
                let keep = !exited[i];
                i += 1;
                keep
            });
            // A live pinned process may have left the group (setpgid). Reading
            // every live member's stat on every check would make a dying
            // tree cost O(n²) reads; membership changes are rare, so it is
            // re-read at most every few milliseconds.
            let stale = self
                .verified
                .is_none_or(|t| t.elapsed() >= std::time::Duration::from_millis(4));
            if stale {
                self.verified = Some(std::time::Instant::now());
                self.fds
                    .retain(|(pid, _)| linux_proc::stat_of(*pid).is_some_and(|s| s.pgrp == pgid));
            }
            self.fds.iter().map(|(p, _)| *p).collect()
        }

        pub(super) fn clear(&mut self) {
            self.fds.clear();
            self.epoll = None;
        }
    }
}
