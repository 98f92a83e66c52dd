//! Process-group containment (every Unix).
//!
//! The root is spawned as the leader of a new process group (Linux: the
//! clone3 child of `sys::linux_spawn`; elsewhere std's posix_spawn/vfork). The group id is the root's pid, and the
//! root is never reaped before [`release`](Attached::release): an
//! unreaped zombie leader keeps its pid, so no new process (and no new group)
//! can take that number while corral still signals it. No anchor process is
//! needed.
//!
//! Membership is found by scanning /proc (Linux; `ps` elsewhere). On Linux
//! the scan lists /proc and asks the kernel for each pid's group with
//! `getpgid(2)`, one system call that, unlike reading `/proc/PID/stat`,
//! never waits on a dying process's memory map; each match is then opened
//! as a pidfd, its group read again, and its pidfd polled, so a member is
//! counted only if the process the pidfd holds was alive after its group
//! was read (no pid reuse can slip in). Every member found stays pinned, so
//! later checks ("is the tree empty yet?") look only at the pinned
//! processes, one `poll`, and a full scan runs again only when all of them
//! are gone, to confirm.
//!
//! Every SIGKILL is preceded by a stop and a count
//! ([`Attached::stop_to_count`]): SIGSTOP to the group, a whole scan
//! that pins every member, then `killpg(SIGKILL)`. The killed count
//! watches each member from when it is first listed, and a member can be
//! watched only while it is unreaped: with the SIGKILL first and the scan
//! after it (as this tier once did, to save a scan of the live tree), a
//! member that died of the kill and was reaped before the scan reached it,
//! by its dying parent (a parent woken in `wait` by its child's death
//! reaps it before it dies itself) or by this process's orphan reaper
//! (the CLI is a subreaper), was never listed and not counted (issue 37:
//! `killed 3` of 4). Stopped, the group can neither grow (a stop signal
//! reaches the child of a racing fork too, or the fork restarts) nor lose
//! a member to corral's kill, so that scan finds every member the SIGKILL
//! will end, each alive; and a zombie that some other SIGKILL ended before
//! is found dead, not counted. After the SIGKILL the pinned pidfds tell
//! when the members are gone, and one whole scan that started after the
//! SIGKILL confirms the group empty (see `live_members`). (Unless a scan
//! found a live member it could not pin, out of descriptors: then it
//! counts that member as alive and the next check scans again.)
//!
//! Runs that need a whole scan at the same moment share one pass of /proc
//! (the async driver's [`Attached::look_ahead`], module `shared`): /proc is
//! listed once and each pid's group read once for all of them, and each
//! run then pins and checks the pids found in its own group as above. A
//! pass serves only requests made before it started.
//!
//! What it cannot hold: a descendant that calls `setsid()` or `setpgid()`
//! leaves the group (cgroup containment closes that hole on Linux).

use std::io;

use super::{AttachFailed, Attached, Containment, Mechanism, OsOp, Tracer};
use crate::sys::{self, Root};
use crate::Signal;

/// A process group to be: the root will be spawned as the leader of a new
/// group.
pub(crate) struct ProcessGroup {
    tracer: Tracer,
    /// The tree's cookie (`CORRAL_TREE`, `<pid>.g<n>`) and the keeper's
    /// hold on it, taken before the spawn (by `placement`): the root is
    /// covered from its first instruction, not only once its own
    /// registration (after the spawn returned) reached the keeper.
    #[cfg(target_os = "linux")]
    cookie: String,
    #[cfg(target_os = "linux")]
    keeper: Option<super::cookie_hold::CookieHold>,
    /// What the keeper does to the tree if this process dies.
    #[cfg(target_os = "linux")]
    farewell: crate::spec::Farewell,
}

/// The attached group: its id is the root's pid, pinned by the unreaped
/// root until `release`.
struct Group {
    pgid: u32,
    tracer: Tracer,
    #[cfg(target_os = "linux")]
    pins: pins::Pins,
    /// The group was stopped to be counted: the next check scans the
    /// whole of /proc, whatever is pinned (members forked since the last
    /// scan are not).
    #[cfg(target_os = "linux")]
    stopped: bool,
    /// SIGKILL went to the group.
    #[cfg(target_os = "linux")]
    kill_sent: bool,
    /// A whole scan of /proc started after the SIGKILL: it found every
    /// member there will ever be (see `live_members`).
    #[cfg(target_os = "linux")]
    scanned_after_kill: bool,
    /// The run's share of a pass of /proc made for every run that asked at
    /// about the same time ([`Attached::look_ahead`]): the next scan takes
    /// its result instead of a pass of its own. Dropped by any signal or
    /// stop to the group: a look asked for before a signal never answers
    /// a look after it.
    #[cfg(target_os = "linux")]
    look: Option<std::sync::Arc<shared::Ticket>>,
    /// Prompt reaping of the group's orphans (subreaper processes only).
    #[cfg(target_os = "linux")]
    orphans: Option<super::orphans::Registration>,
    /// The keeper's hold on the tree's cookie (none if it was never
    /// taken), let go of first at release.
    #[cfg(target_os = "linux")]
    keeper: Option<super::cookie_hold::CookieHold>,
}

impl ProcessGroup {
    pub(crate) fn new(tracer: Tracer, farewell: crate::spec::Farewell) -> Self {
        #[cfg(not(target_os = "linux"))]
        let _ = farewell;
        ProcessGroup {
            tracer,
            #[cfg(target_os = "linux")]
            farewell,
            // `g`: never taken for a subreaper tree's number.
            #[cfg(target_os = "linux")]
            cookie: format!("{}.g{}", std::process::id(), super::orphans::fresh_seq()),
            #[cfg(target_os = "linux")]
            keeper: None,
        }
    }
}

impl Group {
    #[cfg(target_os = "linux")]
    fn live_members(&mut self) -> io::Result<Vec<u32>> {
        let pgid = self.pgid;
        let alive = self.pins.still_members(pgid);
        if std::mem::take(&mut self.stopped) {
            return self.scan(pgid);
        }
        if !alive.is_empty() {
            return Ok(alive);
        }
        // After the SIGKILL the group cannot grow: a member with SIGKILL
        // pending cannot fork, and a fork racing the group signal either
        // fails or gives a child that has the signal too (`copy_process`
        // restarts a fork that a group signal interrupted). So one whole
        // scan started after the SIGKILL found every member there will
        // be, and once all it pinned are gone the group is empty: no scan
        // of the machine's processes again to confirm. (A process outside
        // the tree that joins the group with `setpgid` is outside what the
        // process-group tier holds, as a member that leaves it is.)
        if self.scanned_after_kill {
            return Ok(alive);
        }
        // Every pinned process is gone: confirm with a full scan (catches
        // members forked after the last scan, and those the last scan
        // could not pin); it pins what it finds.
        self.scan(pgid)
    }

    /// A whole scan of /proc for the group's members, pinning them.
    #[cfg(target_os = "linux")]
    fn scan(&mut self, pgid: u32) -> io::Result<Vec<u32>> {
        self.tracer.record(OsOp::MembersScanned {
            via: Mechanism::ProcessGroup,
        });
        // A shared pass that started after this run asked for it, and
        // after every signal to the group (a signal drops the ticket): it
        // read the same /proc this run's own pass would have, and the
        // candidates it found are pinned and checked here as its own scan
        // does. A failed pass (out of descriptors) is no answer: scan.
        let shared = self.look.take().and_then(|t| t.take());
        let found = match shared {
            Some(candidates) => Ok(self.pins.pin_all(pgid, candidates)),
            None => self.pins.scan(pgid),
        };
        self.scanned_after_kill = self.kill_sent && found.is_ok() && !self.pins.incomplete;
        found
    }

    #[cfg(not(target_os = "linux"))]
    fn live_members(&mut self) -> io::Result<Vec<u32>> {
        sys::group_members(self.pgid)
    }
}

impl Containment for ProcessGroup {
    fn mechanism(&self) -> Mechanism {
        Mechanism::ProcessGroup
    }

    fn placement(&mut self) -> io::Result<sys::Placement<'_>> {
        #[cfg(target_os = "linux")]
        {
            if self.keeper.is_none() {
                self.keeper = Some(super::cookie_hold::CookieHold::take(
                    &self.cookie,
                    Mechanism::ProcessGroup,
                    &self.tracer,
                    self.farewell,
                ));
            }
            Ok(sys::Placement {
                new_group: true,
                env: vec![(
                    super::orphans::COOKIE_VAR.into(),
                    super::orphans::cookie_value(&self.cookie),
                )],
                ..sys::Placement::default()
            })
        }
        #[cfg(not(target_os = "linux"))]
        Ok(sys::Placement {
            new_group: true,
            ..sys::Placement::default()
        })
    }

    /// The group is the root's: it cannot fail.
    fn attach(self: Box<Self>, root: &Root) -> Result<Box<dyn Attached>, AttachFailed> {
        Ok(Box::new(Group {
            pgid: root.id(),
            tracer: self.tracer,
            #[cfg(target_os = "linux")]
            pins: pins::Pins::default(),
            #[cfg(target_os = "linux")]
            stopped: false,
            #[cfg(target_os = "linux")]
            kill_sent: false,
            #[cfg(target_os = "linux")]
            scanned_after_kill: false,
            #[cfg(target_os = "linux")]
            look: None,
            #[cfg(target_os = "linux")]
            orphans: super::orphans::register(root.id(), super::orphans::Claim::Group),
            #[cfg(target_os = "linux")]
            keeper: self.keeper,
        }))
    }
}

impl Attached for Group {
    fn mechanism(&self) -> Mechanism {
        Mechanism::ProcessGroup
    }

    #[cfg(target_os = "linux")]
    fn terminating(&mut self) {
        if let Some(k) = self.keeper.as_mut() {
            k.terminating();
        }
    }

    /// The root's registration (its group; Linux: and the tree's cookie,
    /// which covered the root before that registration).
    fn crash_safety(&self, root: &Root) -> crate::report::CrashSafety {
        let by_root = root.crash_safety();
        #[cfg(target_os = "linux")]
        if let Some(why) = self.keeper.as_ref().and_then(|k| k.lost()) {
            if by_root.is_held() {
                return crate::report::CrashSafety::Lost(why);
            }
        }
        by_root
    }

    fn signal(&mut self, sig: Signal) -> io::Result<()> {
        let pgid = self.pgid;
        // A look asked for before this signal is no look after it.
        #[cfg(target_os = "linux")]
        {
            self.look = None;
        }
        if sig != Signal::KILL && sig != sys::SIGCONT {
            // A stopped member cannot act on SIGTERM until it is continued.
            // SIGCONT first: a root that died of the signal before a SIGCONT
            // sent after it would orphan the group (no subreaper host) with
            // a member still stopped, which the kernel then sends SIGHUP.
            self.tracer.record(OsOp::TreeContinued {
                via: Mechanism::ProcessGroup,
                target: pgid as u64,
            });
            sys::signal_group(pgid, sys::SIGCONT)?;
        }
        self.tracer.record(OsOp::SignalTree {
            via: Mechanism::ProcessGroup,
            target: pgid as u64,
            signal: sig,
        });
        sys::signal_group(pgid, sig)?;
        #[cfg(target_os = "linux")]
        if sig == Signal::KILL {
            self.kill_sent = true;
        }
        Ok(())
    }

    /// Stop, count, then kill (Linux, where the killed count watches each
    /// member by pidfd: module docs).
    fn stops_to_count(&self) -> bool {
        cfg!(target_os = "linux")
    }

    #[cfg(target_os = "linux")]
    fn stop_to_count(&mut self) -> io::Result<()> {
        let pgid = self.pgid;
        self.look = None;
        self.tracer.record(OsOp::TreeStopped {
            via: Mechanism::ProcessGroup,
            target: pgid as u64,
        });
        self.stopped = true;
        sys::signal_group(pgid, Signal::STOP)
    }

    /// The root may finish its exit while the group is stopped: the group
    /// is then orphaned with stopped members (no subreaper host) and the
    /// kernel SIGHUPs them, possibly before the look after the stop lists
    /// them. Listed (and pinned) now, each is watched before that.
    #[cfg(target_os = "linux")]
    ///
    /// Short of descriptors (a member it could not pin), it lets go of the
    /// pins it made and lists nothing: the look after the stop needs them
    /// more (its scan of /proc must open the directory).
    fn look_before_stop(&mut self) -> Vec<u32> {
        let pgid = self.pgid;
        // Its own pass, now: what lives right before the stop.
        self.look = None;
        let held = self.pins.len();
        match self.scan(pgid) {
            Ok(found) if !self.pins.incomplete => found,
            _ => {
                self.pins.truncate(held);
                Vec::new()
            }
        }
    }

    fn members(&mut self) -> io::Result<Vec<u32>> {
        self.live_members()
    }

    /// The next look needs a whole scan of /proc (every pinned member is
    /// gone and no scan after the SIGKILL has settled it): ask for a share
    /// of the next shared pass, and say to wait for it while it runs (the
    /// pass wakes `wake`). Ten thousand runs that end together then make a
    /// few passes of the machine's processes, not one each.
    #[cfg(target_os = "linux")]
    fn look_ahead(&mut self, wake: &std::sync::Arc<dyn crate::cancel::Wake>) -> bool {
        if let Some(t) = &self.look {
            return !t.done();
        }
        let pgid = self.pgid;
        if self.stopped || self.scanned_after_kill || !self.pins.still_members(pgid).is_empty() {
            return false;
        }
        let ticket = shared::request(pgid, wake.clone());
        let pending = !ticket.done();
        self.look = Some(ticket);
        pending
    }

    #[cfg(target_os = "linux")]
    fn forget_look(&mut self) {
        self.look = None;
    }

    /// Readable when a pinned member exits (an epoll set of their pidfds),
    /// so a termination is checked when something happens, not only on the
    /// timer.
    #[cfg(target_os = "linux")]
    fn wake_fd(&self) -> Option<(std::os::fd::BorrowedFd<'_>, super::WakeOn)> {
        self.pins.epoll_fd().map(|fd| (fd, super::WakeOn::Readable))
    }

    /// The leftovers are counted after the reap: with its leader reaped,
    /// the group exists only while a member lives (and then its id cannot
    /// be reused), so "no such process" means nothing was left, without a
    /// scan of /proc.
    fn release(self: Box<Self>, root: &mut Root) -> super::Released {
        let Group {
            pgid,
            tracer,
            #[cfg(target_os = "linux")]
            mut pins,
            #[cfg(target_os = "linux")]
            orphans,
            #[cfg(target_os = "linux")]
            keeper,
            ..
        } = *self;
        // The keeper lets go of the tree first: what the policy keeps is
        // never killed by it.
        #[cfg(target_os = "linux")]
        drop(keeper);
        #[cfg(target_os = "linux")]
        if let Some(o) = orphans {
            o.finish();
        }
        let pid = root.id();
        let res = root.reap();
        tracer.record(OsOp::Reaped { pid });
        tracer.record(OsOp::Released {
            via: Mechanism::ProcessGroup,
        });
        #[cfg(target_os = "linux")]
        pins.clear();
        super::Released::count_later(res, move || {
            if !sys::group_exists(pgid) {
                return Ok(0);
            }
            Ok(left_in(pgid, &tracer)?
                .into_iter()
                .filter(|&p| p != pid && !doomed(p))
                .count())
        })
    }
}

/// Whether a leftover is certain not to live on (Linux reads it; elsewhere
/// every listed leftover counts).
#[cfg(target_os = "linux")]
fn doomed(pid: u32) -> bool {
    sys::linux_proc::doomed(pid)
}
#[cfg(not(target_os = "linux"))]
fn doomed(_pid: u32) -> bool {
    false
}

/// The live members of a released group (counted, never signalled).
#[cfg(target_os = "linux")]
fn left_in(pgid: u32, tracer: &Tracer) -> io::Result<Vec<u32>> {
    tracer.record(OsOp::MembersScanned {
        via: Mechanism::ProcessGroup,
    });
    pins::Pins::default().scan(pgid)
}

/// The live members of a released group (counted, never signalled).
#[cfg(not(target_os = "linux"))]
fn left_in(pgid: u32, _tracer: &Tracer) -> io::Result<Vec<u32>> {
    sys::group_members(pgid)
}

/// The most members of a process group pinned at once (the descriptors a
/// run may hold for them; the killed count's watches are as many again at
/// most). A group with more live members than this is scanned again once
/// pins are freed: one scan after the SIGKILL no longer finds them all.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub const PINS_MAX: usize = 256;

#[cfg(target_os = "linux")]
mod pins {
    use std::os::fd::OwnedFd;

    use rustix::event::{epoll, poll, PollFd, PollFlags, Timespec};
    use rustix::process::{pidfd_open, Pid, PidfdFlags};

    /// Members pinned by pidfd: a pinned pid cannot be reused while we hold
    /// its descriptor, so "alive" and "member" are answered for the same
    /// process that was found.
    use super::PINS_MAX;

    /// The pinned pidfds, by pid: boxed when the first is pinned (a live
    /// run pins none until its end: 8 bytes in the run, not a `Vec`'s 24;
    /// figure 5). The same operations as the `Vec` it holds.
    #[derive(Default)]
    #[allow(clippy::box_collection)] // 8 bytes, not a `Vec`'s 24
    struct PinList(Option<Box<Vec<(u32, OwnedFd)>>>);

    impl PinList {
        fn as_slice(&self) -> &[(u32, OwnedFd)] {
            self.0.as_deref().map_or(&[], Vec::as_slice)
        }

        fn len(&self) -> usize {
            self.as_slice().len()
        }

        fn is_empty(&self) -> bool {
            self.as_slice().is_empty()
        }

        fn iter(&self) -> std::slice::Iter<'_, (u32, OwnedFd)> {
            self.as_slice().iter()
        }

        fn push(&mut self, pin: (u32, OwnedFd)) {
            self.0.get_or_insert_with(Default::default).push(pin);
        }

        fn truncate(&mut self, n: usize) {
            if let Some(v) = self.0.as_mut() {
                v.truncate(n);
            }
        }

        fn retain(&mut self, f: impl FnMut(&(u32, OwnedFd)) -> bool) {
            if let Some(v) = self.0.as_mut() {
                v.retain(f);
            }
        }

        fn clear(&mut self) {
            self.0 = None;
        }
    }

    #[derive(Default)]
    pub(super) struct Pins {
        fds: PinList,
        /// Every pinned pidfd, level-triggered: readable while a pinned
        /// process has exited and was not yet dropped.
        epoll: Option<OwnedFd>,
        /// When the group membership of the live pinned processes was last
        /// read from /proc (a scan counts).
        verified: Option<std::time::Instant>,
        /// The last scan found a live member it could not pin (no
        /// descriptor left): it must not be the last one.
        pub(super) incomplete: bool,
    }

    impl Pins {
        pub(super) fn len(&self) -> usize {
            self.fds.len()
        }

        /// Lets go of the pins past the first `n` (closing a pidfd takes
        /// it out of the epoll set).
        pub(super) fn truncate(&mut self, n: usize) {
            self.fds.truncate(n);
        }

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

        /// Every live member of `pgid` on the machine, pinned (those
        /// already pinned included). See the module docs for the order of
        /// operations that keeps a reused pid out.
        pub(super) fn scan(&mut self, pgid: u32) -> std::io::Result<Vec<u32>> {
            let want = Some(pgid);
            let mut out = Vec::new();
            self.incomplete = false;
            each_pid(|raw| {
                // The filter: one system call per process on the machine.
                if pgid_of(raw) == want {
                    self.pin(pgid, raw, &mut out);
                }
            })?;
            self.verified = Some(std::time::Instant::now());
            Ok(out)
        }

        /// The live members among `candidates` (pids a shared pass of
        /// /proc found in `pgid`, in /proc's order), pinned and checked one
        /// by one as [`scan`](Self::scan) does with what it finds.
        pub(super) fn pin_all(&mut self, pgid: u32, candidates: Vec<u32>) -> Vec<u32> {
            let mut out = Vec::new();
            self.incomplete = false;
            for raw in candidates {
                // The filter again, now: what the pass read a moment ago
                // is read at the moment of pinning, as in a scan.
                if pgid_of(raw) != Some(pgid) {
                    continue;
                }
                self.pin(pgid, raw, &mut out);
            }
            self.verified = Some(std::time::Instant::now());
            out
        }

        /// One process listed in `pgid`: pinned, its group read again and
        /// its pidfd polled; pushed to `out` if it is a live member.
        fn pin(&mut self, pgid: u32, raw: u32, out: &mut Vec<u32>) {
            let want = Some(pgid);
            let Some(pid) = Pid::from_raw(raw as i32) else {
                return;
            };
            if self.fds.iter().any(|(p, _)| *p == raw) {
                out.push(raw);
                return;
            }

            // Pin, re-read the group, then poll: if the pinned process
            // had not exited after the second read, that read was its.
            // Past `PINS_MAX` pins a member is left unpinned, as one
            // that finds no descriptor: a stopped group of a thousand
            // (the look before its SIGKILL) would otherwise take every
            // descriptor and fail the next look's open of /proc.
            let opened = if self.fds.len() < PINS_MAX {
                pidfd_open(pid, PidfdFlags::empty())
            } else {
                Err(rustix::io::Errno::MFILE)
            };
            let fd = match opened {
                Ok(fd) => fd,
                Err(rustix::io::Errno::SRCH) => return, // gone
                Err(_) => {
                    // Not pinned, yet not gone: out of descriptors
                    // (EMFILE, ENFILE) or memory. Skipping it took a
                    // live member for gone, and after a SIGKILL no
                    // scan came again: the run returned while members
                    // were still dying (adversarial_scan::
                    // members_that_cannot_be_pinned_are_not_taken_for_gone).
                    // Count it as a live member, and have the next
                    // check scan again (once pins are freed). Not the
                    // leader: the root stays an unreaped zombie until
                    // the release (its exit is watched through its own
                    // handle), and taken for alive it would keep the
                    // group from ever looking empty while descriptors
                    // stay short.
                    if raw != pgid {
                        self.incomplete = true;
                        out.push(raw);
                    }
                    return;
                }
            };
            if pgid_of(raw) != want {
                return; // reused
            }
            if exited(&fd) {
                return; // a zombie is no member
            }
            self.watch(&fd);
            self.fds.push((raw, fd));
            out.push(raw);
        }

        /// Pinned processes that are alive and still in the group. Exited
        /// ones are dropped.
        pub(super) fn still_members(&mut self, pgid: u32) -> Vec<u32> {
            if self.fds.is_empty() {
                return Vec::new();
            }
            let gone: Vec<bool> = {
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
                let keep = !gone[i];
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
                // `getpgid` reads the group without waiting on a dying
                // process; a pid reused after a pinned exit was dropped
                // above, or is caught by the next check's poll.
                self.verified = Some(std::time::Instant::now());
                self.fds
                    .retain(|(pid, fd)| pgid_of(*pid) == Some(pgid) && !exited(fd));
            }
            self.fds.iter().map(|(p, _)| *p).collect()
        }

        pub(super) fn clear(&mut self) {
            self.fds.clear();
            self.epoll = None;
        }
    }

    /// Calls `f` with every pid listed in /proc, in /proc's order (a
    /// read error ends the listing, as the end of the directory would).
    pub(super) fn each_pid(mut f: impl FnMut(u32)) -> std::io::Result<()> {
        let dir = rustix::fs::open(
            "/proc",
            rustix::fs::OFlags::RDONLY
                | rustix::fs::OFlags::DIRECTORY
                | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )?;
        let mut buf = Vec::with_capacity(16 * 1024);
        let mut iter = rustix::fs::RawDir::new(&dir, buf.spare_capacity_mut());
        while let Some(entry) = iter.next() {
            let Ok(entry) = entry else { break };
            if let Some(raw) = std::str::from_utf8(entry.file_name().to_bytes())
                .ok()
                .and_then(|s| s.parse::<u32>().ok())
            {
                f(raw);
            }
        }
        Ok(())
    }

    /// Whether the process a pidfd holds has exited (its whole thread
    /// group: a zombie leader with live threads is alive).
    fn exited(fd: &OwnedFd) -> bool {
        let mut pfds = [PollFd::new(fd, PollFlags::IN)];
        let zero = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        matches!(poll(&mut pfds, Some(&zero)), Ok(n) if n > 0)
    }

    /// The process group of `pid`, from `getpgid(2)`: one system call that,
    /// unlike reading `/proc/PID/stat`, never waits on the memory map of a
    /// process that is exiting. `Some(0)` for a kernel thread; `None` when no
    /// such process exists. (rustix's `getpgid` cannot return a group of 0.)
    #[cfg(linux_raw)]
    pub(super) fn pgid_of(pid: u32) -> Option<u32> {
        crate::sys::linux_spawn::getpgid(pid).ok()
    }

    /// The process group of `pid` (other architectures: from its stat).
    #[cfg(not(linux_raw))]
    pub(super) fn pgid_of(pid: u32) -> Option<u32> {
        crate::sys::linux_proc::stat_of(pid).map(|s| s.pgrp)
    }

    #[cfg(test)]
    mod tests {
        use super::pgid_of;

        #[test]
        fn pgid_of_matches_the_kernel() {
            let me = std::process::id();
            // (libc's: rustix's cannot return the group 0 this process is in
            // when the group's leader is outside this PID namespace.)
            // SAFETY: getpgrp takes no arguments and cannot fail.
            let pg = unsafe { libc::getpgrp() } as u32;
            assert_eq!(pgid_of(me), Some(pg));
            // No process has pid 2^22 + 1 (beyond the largest pid_max).
            assert_eq!(pgid_of((1 << 22) + 1), None);
            // kthreadd (pid 2 on the host) is in group 0: no panic, no
            // invalid value.
            if std::fs::read_to_string("/proc/2/comm").is_ok_and(|c| c.trim() == "kthreadd") {
                assert_eq!(pgid_of(2), Some(0));
            }
        }
    }
}

/// One pass of /proc shared by every run that asks for a look at about
/// the same moment ([`Attached::look_ahead`]): /proc is listed once and
/// each process's group read once, and each run gets the pids found in its
/// own group, which it then pins and checks itself (`Pins::pin_all`).
/// Without it, N runs that end together make N passes over a machine of N
/// processes (quadratic: 10,000 runs, 10^8 `getpgid`s).
///
/// A request waits for a pass that starts after it: one that arrives while
/// a pass runs joins the next one, so no run gets a listing older than its
/// request. The first requester while no pass runs makes the pass on its
/// own thread (a run alone pays nothing more than its own scan); what was
/// asked for meanwhile is passed on to a thread of its own, which makes
/// passes until nobody waits and then ends.
#[cfg(target_os = "linux")]
mod shared {
    use std::sync::{Arc, Mutex, MutexGuard};

    use crate::cancel::Wake;

    use super::pins::{each_pid, pgid_of};

    /// One run's request: its group, and what the pass found in it.
    pub(super) struct Ticket {
        pgid: u32,
        /// `None` until the pass is over; then `Some(None)` if it failed
        /// (the run scans on its own), else the pids found in the group.
        found: Mutex<Option<Option<Vec<u32>>>>,
        wake: Arc<dyn Wake>,
        /// Which pass served it (tests: runs that asked together share one).
        #[cfg(test)]
        served_by: std::sync::atomic::AtomicUsize,
    }

    impl Ticket {
        fn lock(&self) -> MutexGuard<'_, Option<Option<Vec<u32>>>> {
            self.found.lock().unwrap_or_else(|e| e.into_inner())
        }

        /// Whether the pass this ticket waits for is over.
        pub(super) fn done(&self) -> bool {
            self.lock().is_some()
        }

        /// The pids the pass found in the group (`None`: not over yet, or
        /// failed).
        pub(super) fn take(&self) -> Option<Vec<u32>> {
            self.lock().take().flatten()
        }
    }

    struct Queue {
        /// A pass is being made (or a thread makes them).
        running: bool,
        /// Tickets for the next pass.
        waiting: Vec<Arc<Ticket>>,
    }

    /// Per process (`sys::per_process`): a fork taken while a pass ran
    /// (its lock held, or `running` set by a thread the fork does not
    /// have) starts with an empty queue of its own, so its first request
    /// leads a pass instead of waiting for one that never comes.
    static QUEUE: crate::sys::per_process::PerProcess<Queue> =
        crate::sys::per_process::PerProcess::new(|| Queue {
            running: false,
            waiting: Vec::new(),
        });

    fn queue() -> MutexGuard<'static, Queue> {
        QUEUE.lock()
    }

    /// Asks for a look at `pgid`'s members in the next pass; `wake` is
    /// woken when it is over. The ticket may be over on return (this
    /// thread made the pass).
    pub(super) fn request(pgid: u32, wake: Arc<dyn Wake>) -> Arc<Ticket> {
        let ticket = Arc::new(Ticket {
            pgid,
            found: Mutex::new(None),
            wake,
            #[cfg(test)]
            served_by: std::sync::atomic::AtomicUsize::new(0),
        });
        let lead = {
            let mut q = queue();
            q.waiting.push(ticket.clone());
            !std::mem::replace(&mut q.running, true)
        };
        if lead {
            make_passes(true);
        }
        ticket
    }

    /// Makes passes while tickets wait. `inline`: on a requester's
    /// thread, which makes one pass and hands the rest to a thread (or,
    /// if no thread can be had, goes on itself).
    fn make_passes(inline: bool) {
        loop {
            let batch = {
                let mut q = queue();
                if q.waiting.is_empty() {
                    q.running = false;
                    return;
                }
                std::mem::take(&mut q.waiting)
            };
            pass(batch);
            if inline {
                {
                    let mut q = queue();
                    if q.waiting.is_empty() {
                        q.running = false;
                        return;
                    }
                }
                let handed = std::thread::Builder::new()
                    .name("corral-scan".into())
                    .spawn(|| make_passes(false))
                    .is_ok();
                if handed {
                    return;
                }
            }
        }
    }

    /// One pass for `batch`: every pid in /proc, its group read once, kept
    /// if some ticket asks for that group; then each ticket gets its
    /// group's pids (in /proc's order) and is woken.
    fn pass(batch: Vec<Arc<Ticket>>) {
        #[cfg(test)]
        let seq = {
            static PASSES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            PASSES.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1
        };
        let mut want: Vec<u32> = batch.iter().map(|t| t.pgid).collect();
        want.sort_unstable();
        want.dedup();
        let mut found: Vec<(u32, u32)> = Vec::new();
        let listed = each_pid(|pid| {
            if let Some(g) = pgid_of(pid) {
                if want.binary_search(&g).is_ok() {
                    found.push((g, pid));
                }
            }
        });
        // By group, /proc's order kept within each.
        found.sort_by_key(|&(g, _)| g);
        for t in batch {
            let mine = listed.is_ok().then(|| {
                let from = found.partition_point(|&(g, _)| g < t.pgid);
                found[from..]
                    .iter()
                    .take_while(|&&(g, _)| g == t.pgid)
                    .map(|&(_, p)| p)
                    .collect()
            });
            #[cfg(test)]
            t.served_by.store(seq, std::sync::atomic::Ordering::SeqCst);
            *t.lock() = Some(mine);
            t.wake.wake();
        }
    }

    #[cfg(test)]
    mod tests {
        use std::os::unix::process::CommandExt;
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;

        use super::*;

        #[derive(Default)]
        struct Count(AtomicUsize);
        impl Wake for Count {
            fn wake(&self) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }

        /// Killed and reaped on drop, whatever the test did.
        struct Kids(Vec<std::process::Child>);
        impl Drop for Kids {
            fn drop(&mut self) {
                for c in &mut self.0 {
                    let _ = c.kill();
                    let _ = c.wait();
                }
            }
        }

        fn sleeper(group: i32) -> std::process::Child {
            std::process::Command::new("sleep")
                .arg("20")
                .process_group(group)
                .spawn()
                .expect("spawn sleep")
        }

        /// Requests that arrive while a pass is under way wait for the
        /// next one, and that one serves them all: each gets exactly the
        /// live processes of its own group, each is woken once.
        #[test]
        fn runs_that_ask_together_share_one_pass_each_given_its_own_group() {
            let mut kids = Kids(Vec::new());
            let mut groups: Vec<(u32, Vec<u32>)> = Vec::new();
            for _ in 0..6 {
                let leader = sleeper(0);
                let pgid = leader.id();
                let other = sleeper(pgid as i32);
                groups.push((pgid, vec![pgid, other.id()]));
                kids.0.push(leader);
                kids.0.push(other);
            }
            // A pass under way (as another thread's would be): the
            // requests queue for the next one and return before it.
            let was_running = std::mem::replace(&mut queue().running, true);
            if was_running {
                // Another test's pass: wait for it to end, then hold.
                loop {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                    let mut q = queue();
                    if !q.running {
                        q.running = true;
                        break;
                    }
                }
            }
            let waker = Arc::new(Count::default());
            let tickets: Vec<Arc<Ticket>> = groups
                .iter()
                .map(|(pgid, _)| request(*pgid, waker.clone()))
                .collect();
            assert!(tickets.iter().all(|t| !t.done()), "served before a pass");
            assert_eq!(waker.0.load(Ordering::SeqCst), 0);
            make_passes(false);
            assert!(!queue().running, "the passes ended");
            let first = tickets[0].served_by.load(Ordering::SeqCst);
            for (t, (pgid, want)) in tickets.iter().zip(&groups) {
                assert_eq!(
                    t.served_by.load(Ordering::SeqCst),
                    first,
                    "one pass for all"
                );
                let mut got = t.take().expect("the pass listed /proc");
                got.sort_unstable();
                let mut want = want.clone();
                want.sort_unstable();
                assert_eq!(got, want, "group {pgid}");
            }
            assert_eq!(waker.0.load(Ordering::SeqCst), groups.len());
            // A request alone is served at once, on its own thread.
            let (pgid, want) = &groups[0];
            let t = request(*pgid, waker.clone());
            assert!(t.done());
            let mut got = t.take().expect("the pass listed /proc");
            got.sort_unstable();
            assert_eq!(&got, want);
        }
    }
}
