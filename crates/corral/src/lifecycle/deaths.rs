//! The killed count: which members of the tree died of a signal corral
//! sent, and nothing else.
//!
//! A member that was signalled and survived (it ignores the signal, or
//! finishes before the next one), or that died of something else (SIGPIPE
//! after its reader was killed, its own `exit`), is not killed. Only the
//! member's exit status says which, and the member is usually not corral's
//! child: its parent in the tree reaps it. So each member seen during the
//! run is *watched*, the moment it is first listed:
//!
//! * Linux: a pidfd is opened for it. Once the member is reaped (by
//!   anyone), the kernel keeps its exit status with the pidfd
//!   (`PIDFD_GET_INFO` with `PIDFD_INFO_EXIT`, Linux 6.15); while it is a
//!   zombie the status is its `/proc/PID/stat` field 52 (the pidfd holds
//!   the pid, so the file is that member's). This serves every tier: the
//!   cgroup, PID-namespace, subreaper and process-group trees alike.
//! * Windows: a process handle is opened for it; its exit code tells
//!   corral's job kill (`JOB_KILL_EXIT_CODE`) and a console interrupt
//!   (`STATUS_CONTROL_C_EXIT`, how CTRL_BREAK ends a process) from an exit.
//! * Where no status can be read (another platform, a kernel before 6.15
//!   for a member already reaped, more members than [`MAX_WATCHED`], or no
//!   descriptor left), a member is counted killed when it is gone and
//!   corral sent SIGKILL, which nothing survives: an upper bound for a
//!   member that exited by itself just before.
//!
//! One death by SIGHUP is corral's too. Before its SIGKILL corral stops a
//! process-group tree (SIGSTOP to the group) and lists it. When the root,
//! already exiting, finishes its exit in between, its exit orphans the
//! group while corral's stop holds its members: the kernel then sends the
//! group SIGHUP and SIGCONT (POSIX's orphaned-process-group rule), and the
//! members die of that SIGHUP before the SIGKILL reaches them. So a member
//! listed at that look, with the root not yet seen exited, that died of
//! SIGHUP counts as killed ([`Deaths::stopped_look`]).

use std::collections::{HashMap, HashSet};

use crate::Signal;

/// Members watched with a descriptor per run: past this, the rest are
/// counted by the fallback rule (a run holds at most this many extra
/// descriptors, and only while it is supervised).
const MAX_WATCHED: usize = 256;

/// How one watched member ended. Elsewhere than Linux and Windows no
/// member is watched (the fallback rule counts), so only `Unknown` is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(any(target_os = "linux", windows)), allow(dead_code))]
pub(super) enum Fate {
    /// Still running (a survivor, or a leftover kept).
    Alive,
    /// Died of this signal.
    Signaled(i32),
    /// Exited by itself.
    Exited,
    /// Ended by a console interrupt (Windows: corral's graceful signals
    /// are all delivered as CTRL_BREAK).
    #[cfg_attr(not(windows), allow(dead_code))]
    Interrupted,
    /// Gone, and how is not known.
    Unknown,
}

/// One member's end: what it died of, read when the run is over.
pub(super) trait Watch: Send {
    fn fate(&self) -> Fate;
}

/// Every member seen during a run, by pid.
#[derive(Default)]
pub(super) struct Deaths {
    watched: HashMap<u32, Option<Box<dyn Watch>>>,
    /// The members listed while corral's stop held the tree and its root
    /// was not seen exited: a SIGHUP that ends one of them is the kernel's
    /// answer to that stop (module docs).
    stopped_look: HashSet<u32>,
}

impl Deaths {
    /// Starts watching the members not watched yet.
    pub(super) fn watch(&mut self, members: impl IntoIterator<Item = u32>) {
        // 0 is no process (a listing's placeholder for one whose pid is
        // gone): never a member to count.
        for pid in members.into_iter().filter(|&p| p != 0) {
            let n = self.watched.len();
            self.watched
                .entry(pid)
                .or_insert_with(|| if n < MAX_WATCHED { open(pid) } else { None });
        }
    }

    /// Starts watching those of `members` (listed in a live tree, before
    /// corral's stop). One that cannot be watched is left out, not taken
    /// for unreadable: it may have exited and been reaped since the
    /// listing, and if it lives, the look after the stop lists it. Past the
    /// first that cannot be watched for want of a descriptor, none is (and
    /// those this call opened are let go): the look after the stop needs
    /// descriptors more.
    pub(super) fn watch_live(&mut self, members: impl IntoIterator<Item = u32>) {
        let mut opened = Vec::new();
        for pid in members.into_iter().filter(|&p| p != 0) {
            if self.watched.contains_key(&pid) || self.watched.len() >= MAX_WATCHED {
                continue;
            }
            match open_live(pid) {
                Ok(w) => {
                    self.watched.insert(pid, Some(w));
                    opened.push(pid);
                }
                Err(Gone) => {}
                Err(NoRoom) => {
                    for p in opened {
                        self.watched.remove(&p);
                    }
                    return;
                }
            }
        }
    }

    /// Marks the watched ones of `members`, listed while corral's stop held
    /// the tree and its root was not seen exited (module docs: a SIGHUP
    /// then is corral's).
    pub(super) fn stopped_look(&mut self, members: &[u32]) {
        let watched = &self.watched;
        self.stopped_look
            .extend(members.iter().copied().filter(|p| watched.contains_key(p)));
    }

    /// How many watched members died of one of the signals `sent` (or of
    /// the SIGHUP corral's stop brought: module docs).
    pub(super) fn killed(&self, sent: &[Signal]) -> usize {
        count(
            self.watched.iter().map(|(pid, w)| {
                let fate = match w {
                    Some(w) => w.fate(),
                    None => Fate::Unknown,
                };
                (fate, self.stopped_look.contains(pid))
            }),
            sent,
        )
    }
}

/// The counting rule, apart from how fates are read: each member's fate,
/// and whether it was listed while corral's stop held it with the root
/// not seen exited.
pub(super) fn count(fates: impl Iterator<Item = (Fate, bool)>, sent: &[Signal]) -> usize {
    let kill_sent = sent.contains(&Signal::KILL);
    let graceful_sent = sent.iter().any(|s| *s != Signal::KILL);
    fates
        .filter(|&(f, held_by_stop)| match f {
            Fate::Signaled(sig) => {
                sent.iter().any(|s| s.as_raw() == sig)
                    || (held_by_stop && kill_sent && sig == Signal::HUP.as_raw())
            }
            Fate::Interrupted => graceful_sent,
            Fate::Unknown => kill_sent,
            Fate::Alive | Fate::Exited => false,
        })
        .count()
}

/// Why a live member's watch was not opened.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
enum NotOpened {
    /// It is gone (or was never there).
    Gone,
    /// No descriptor (or memory) for it.
    NoRoom,
}
use NotOpened::{Gone, NoRoom};

#[cfg(target_os = "linux")]
fn open_live(pid: u32) -> Result<Box<dyn Watch>, NotOpened> {
    match linux::PidfdWatch::try_open(pid) {
        Ok(w) => Ok(Box::new(w)),
        Err(rustix::io::Errno::SRCH) => Err(Gone),
        Err(_) => Err(NoRoom),
    }
}

#[cfg(not(target_os = "linux"))]
fn open_live(pid: u32) -> Result<Box<dyn Watch>, NotOpened> {
    open(pid).ok_or(Gone)
}

#[cfg(target_os = "linux")]
fn open(pid: u32) -> Option<Box<dyn Watch>> {
    linux::PidfdWatch::open(pid).map(|w| Box::new(w) as Box<dyn Watch>)
}

#[cfg(windows)]
fn open(pid: u32) -> Option<Box<dyn Watch>> {
    windows::HandleWatch::open(pid).map(|w| Box::new(w) as Box<dyn Watch>)
}

#[cfg(not(any(target_os = "linux", windows)))]
fn open(_pid: u32) -> Option<Box<dyn Watch>> {
    None
}

#[cfg(windows)]
mod windows {
    use windows_sys::Win32::Foundation::{
        CloseHandle, HANDLE, STATUS_CONTROL_C_EXIT, STILL_ACTIVE,
    };
    use windows_sys::Win32::System::Threading::{
        GetExitCodeProcess, OpenProcess, PROCESS_QUERY_LIMITED_INFORMATION,
    };

    use super::{Fate, Watch};
    use crate::sys::JOB_KILL_EXIT_CODE;

    /// A member held by a process handle opened while it was listed (the
    /// handle keeps its exit code readable after it ends).
    pub(super) struct HandleWatch(HANDLE);

    // SAFETY: a process handle may be used and closed from any thread.
    unsafe impl Send for HandleWatch {}

    impl HandleWatch {
        pub(super) fn open(pid: u32) -> Option<HandleWatch> {
            // SAFETY: plain call; a null result is checked.
            let h = unsafe { OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, 0, pid) };
            (!h.is_null()).then_some(HandleWatch(h))
        }
    }

    impl Watch for HandleWatch {
        fn fate(&self) -> Fate {
            let mut code = 0u32;
            // SAFETY: the handle is open (owned by self); `code` outlives the call.
            if unsafe { GetExitCodeProcess(self.0, &mut code) } == 0 {
                return Fate::Unknown;
            }
            match code {
                c if c == STILL_ACTIVE as u32 => Fate::Alive,
                JOB_KILL_EXIT_CODE => Fate::Signaled(crate::Signal::KILL.as_raw()),
                c if c == STATUS_CONTROL_C_EXIT as u32 => Fate::Interrupted,
                _ => Fate::Exited,
            }
        }
    }

    impl Drop for HandleWatch {
        fn drop(&mut self) {
            // SAFETY: the handle is owned by self and closed once.
            unsafe { CloseHandle(self.0) };
        }
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use std::os::fd::OwnedFd;

    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    use rustix::process::{pidfd_open, Pid, PidfdFlags};

    use super::{Fate, Watch};
    use crate::sys::linux_proc;

    /// `PIDFD_INFO_EXIT` (linux/pidfd.h): ask for the exit status.
    const PIDFD_INFO_EXIT: u64 = 1 << 3;
    /// `PIDFD_GET_INFO`: `_IOWR(0xFF, 11, struct pidfd_info)`.
    const PIDFD_GET_INFO: rustix::ioctl::Opcode =
        rustix::ioctl::opcode::read_write::<Info>(0xFF, 11);

    /// `struct pidfd_info` up to `exit_code` (`PIDFD_INFO_SIZE_VER0`, 64
    /// bytes): the kernel fills what it knows and the size in the request
    /// says how much there is room for.
    #[repr(C)]
    #[derive(Default)]
    struct Info {
        mask: u64,
        cgroupid: u64,
        ids: [u32; 11],
        exit_code: i32,
    }

    /// A member held by a pidfd opened while it was listed.
    pub(super) struct PidfdWatch {
        pid: u32,
        fd: OwnedFd,
    }

    impl PidfdWatch {
        pub(super) fn open(pid: u32) -> Option<PidfdWatch> {
            Self::try_open(pid).ok()
        }

        pub(super) fn try_open(pid: u32) -> rustix::io::Result<PidfdWatch> {
            let p = Pid::from_raw(pid as i32).ok_or(rustix::io::Errno::SRCH)?;
            let fd = pidfd_open(p, PidfdFlags::empty())?;
            Ok(PidfdWatch { pid, fd })
        }

        /// The exit status the kernel kept, once the member was reaped.
        fn reaped_status(&self) -> Option<i32> {
            let mut info = Info {
                mask: PIDFD_INFO_EXIT,
                ..Info::default()
            };
            // SAFETY: `Info` is `repr(C)` and laid out as the first 64 bytes
            // of the kernel's `struct pidfd_info`; the opcode carries that
            // size, so the kernel writes no further than `info`, which
            // lives across the call.
            let updater = unsafe { rustix::ioctl::Updater::<PIDFD_GET_INFO, Info>::new(&mut info) };
            // SAFETY: the opcode and the argument match (see above), and the
            // descriptor is a pidfd.
            unsafe { rustix::ioctl::ioctl(&self.fd, updater) }.ok()?;
            (info.mask & PIDFD_INFO_EXIT != 0).then_some(info.exit_code)
        }

        /// Whether every thread of the member has exited (it may still be
        /// an unreaped zombie).
        fn exited(&self) -> bool {
            let mut fds = [PollFd::new(&self.fd, PollFlags::IN)];
            let zero = Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            !matches!(poll(&mut fds, Some(&zero)), Ok(0))
        }
    }

    /// A wait status: the signal that ended it, or `None` for an exit.
    fn decode(status: i32) -> Fate {
        match status & 0x7f {
            0 => Fate::Exited,
            sig => Fate::Signaled(sig),
        }
    }

    impl Watch for PidfdWatch {
        fn fate(&self) -> Fate {
            if let Some(st) = self.reaped_status() {
                return decode(st);
            }
            if !self.exited() {
                return Fate::Alive;
            }
            // A zombie (the pidfd keeps its pid from being reused while it
            // is one): its stat has the status. Reaped in the meantime: the
            // kernel has it now.
            let zombie = linux_proc::stat_of(self.pid).filter(|s| s.is_dead());
            if let Some(st) = self.reaped_status() {
                return decode(st);
            }
            match zombie.and_then(|s| s.exit_code) {
                Some(code) => decode(code as i32),
                None => Fate::Unknown,
            }
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        /// A child killed by a signal, one that exits, one that lives: the
        /// pidfd tells each apart, as a zombie and once reaped.
        #[test]
        fn a_pidfd_tells_how_a_member_ended() {
            let spawn = |args: &[&str]| {
                std::process::Command::new(args[0])
                    .args(&args[1..])
                    .spawn()
                    .expect("spawn")
            };
            let mut killed = spawn(&["sleep", "30"]);
            let mut exited = spawn(&["sh", "-c", "exit 3"]);
            let mut alive = spawn(&["sleep", "30"]);
            let w = |c: &std::process::Child| PidfdWatch::open(c.id()).expect("pidfd");
            let (wk, we, wa) = (w(&killed), w(&exited), w(&alive));
            rustix::process::kill_process(
                Pid::from_raw(killed.id() as i32).expect("pid"),
                rustix::process::Signal::TERM,
            )
            .expect("kill");
            // Zombies first (nobody reaped them yet).
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while !(wk.exited() && we.exited()) {
                assert!(std::time::Instant::now() < deadline, "children did not end");
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            assert_eq!(wk.fate(), Fate::Signaled(15));
            assert_eq!(we.fate(), Fate::Exited);
            assert_eq!(wa.fate(), Fate::Alive);
            killed.wait().expect("reap");
            exited.wait().expect("reap");
            assert_eq!(wk.fate(), Fate::Signaled(15));
            assert_eq!(we.fate(), Fate::Exited);
            alive.kill().expect("kill");
            alive.wait().expect("reap");
            assert_eq!(wa.fate(), Fate::Signaled(9));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 0 in a listing (a process whose pid is gone) is no member: not
    /// watched, so never counted killed by the rule for members that
    /// cannot be opened.
    #[test]
    fn pid_0_is_never_a_member() {
        let mut d = Deaths::default();
        d.watch([0]);
        d.watch_live([0]);
        assert!(d.watched.is_empty());
        assert_eq!(d.killed(&[Signal::TERM, Signal::KILL]), 0);
    }

    #[test]
    fn only_deaths_by_a_signal_corral_sent_count() {
        use Fate::*;
        let fates = [
            Alive,
            Exited,
            Signaled(2),
            Signaled(9),
            Signaled(13),
            Unknown,
        ];
        let plain = || fates.into_iter().map(|f| (f, false));
        // INT only: the one that died of INT. SIGPIPE was not corral's,
        // and without SIGKILL a member gone unseen is not called killed.
        assert_eq!(count(plain(), &[Signal::INT]), 1);
        // INT then KILL: both deaths, and the unknown one (SIGKILL spares
        // nothing).
        assert_eq!(count(plain(), &[Signal::INT, Signal::KILL]), 3);
        assert_eq!(count(plain(), &[]), 0);
    }

    /// The orphaned-group SIGHUP: corral's when corral's stop held the
    /// member (the root's exit orphaned a group corral had stopped, right
    /// before its SIGKILL), not otherwise.
    #[test]
    fn a_sighup_counts_only_for_a_member_held_by_corrals_stop() {
        use Fate::*;
        let hup = Signaled(Signal::HUP.as_raw());
        let kill = [Signal::KILL];
        type Case<'a> = (&'a str, (Fate, bool), &'a [Signal], usize);
        let cases: &[Case<'_>] = &[
            ("held by the stop, then the kill", (hup, true), &kill, 1),
            ("not listed at the stop", (hup, false), &kill, 0),
            (
                "no kill followed (no stop either)",
                (hup, true),
                &[Signal::TERM],
                0,
            ),
            ("corral sent HUP itself", (hup, false), &[Signal::HUP], 1),
            ("another signal than HUP", (Signaled(10), true), &kill, 0),
            ("an exit is never a kill", (Exited, true), &kill, 0),
        ];
        for (name, fate, sent, want) in cases {
            assert_eq!(count([*fate].into_iter(), sent), *want, "{name}");
        }
    }
}
