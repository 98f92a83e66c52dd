//! Fast reads of /proc for process-group membership (Linux).
//!
//! One scan opens `/proc` once and reads each `/proc/<pid>/stat` with three
//! system calls (openat relative to the /proc descriptor, one read into a
//! stack buffer, close): about half of what `std::fs::read` costs.

use std::io;
use std::os::fd::OwnedFd;

use rustix::fs::{openat, Mode, OFlags};

/// One line of `/proc/<pid>/stat`, the fields corral uses. The one parser
/// of that file in the library: the scans, the subreaper, the orphan
/// watch and the keeper (which must not allocate) all read it through
/// [`parse_stat`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stat {
    pub(crate) pid: u32,
    /// Field 3: `R`, `S`, `D`, `Z`, `T`, ...
    pub(crate) state: u8,
    /// Field 4.
    pub(crate) ppid: u32,
    /// Field 5: the process group.
    pub(crate) pgrp: u32,
    /// Field 6: the session.
    pub(crate) session: u32,
    /// Field 9: the kernel's `PF_*` flags of the leader thread.
    pub(crate) flags: u32,
    /// Field 20: the threads counted in the process (a zombie leader whose
    /// other threads still run counts them).
    pub(crate) threads: u32,
    /// Field 22: start time after boot, in clock ticks. With the pid, it
    /// names one process for good (a reused pid starts later).
    pub(crate) start: u64,
    /// Field 52: the exit status as `waitpid` reports it, once the process
    /// exited (0 while it runs; absent before Linux 3.5).
    pub(crate) exit_code: Option<u32>,
}

impl Stat {
    /// Zombie or dead: not a live member of anything.
    pub(crate) fn is_dead(&self) -> bool {
        self.state == b'Z' || self.state == b'X'
    }
}

/// Parses a stat line. The command name may contain spaces and
/// parentheses, so fields are counted from the last `)`. Allocates nothing
/// and cannot panic: the keeper calls it between raw system calls.
pub(crate) fn parse_stat(pid: u32, buf: &[u8]) -> Option<Stat> {
    let mut close = None;
    for (i, &b) in buf.iter().enumerate() {
        if b == b')' {
            close = Some(i);
        }
    }
    let rest = buf.get(close? + 1..)?;
    // Field number of each space-separated word after the `)`: 3, 4, ...
    let mut fields = rest
        .split(|&b| b == b' ' || b == b'\n')
        .filter(|w| !w.is_empty());
    let state = *fields.next()?.first()?;
    let ppid = number(fields.next()?)?;
    let pgrp = number(fields.next()?)?;
    let session = number(fields.next()?)?;
    // Fields 7 and 8 are not used.
    let flags = number(fields.nth(2)?)?;
    // Fields 10 to 19 are not used.
    let threads = number(fields.nth(10)?)?;
    // Field 21 is not used.
    let start = number(fields.nth(1)?)?;
    // Fields 23 to 51 are not used.
    let exit_code = fields
        .nth(29)
        .and_then(number)
        .and_then(|c| u32::try_from(c).ok());
    Some(Stat {
        pid,
        state,
        ppid: u32::try_from(ppid).ok()?,
        pgrp: u32::try_from(pgrp).ok()?,
        session: u32::try_from(session).ok()?,
        flags: u32::try_from(flags).ok()?,
        threads: u32::try_from(threads).ok()?,
        start,
        exit_code,
    })
}

/// A decimal number made of ASCII digits only.
fn number(word: &[u8]) -> Option<u64> {
    if word.is_empty() {
        return None;
    }
    word.iter().try_fold(0u64, |n, &c| {
        if c.is_ascii_digit() {
            n.checked_mul(10)?.checked_add(u64::from(c - b'0'))
        } else {
            None
        }
    })
}

fn open_proc() -> io::Result<OwnedFd> {
    Ok(rustix::fs::open(
        "/proc",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// Reads one process's stat through the /proc descriptor.
fn read_stat(proc_fd: &OwnedFd, pid: u32, path: &mut String) -> Option<Stat> {
    use std::fmt::Write;
    path.clear();
    let _ = write!(path, "{pid}/stat");
    let fd = openat(
        proc_fd,
        path.as_str(),
        OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let mut buf = [0u8; 1024];
    let n = rustix::io::read(&fd, &mut buf).ok()?;
    parse_stat(pid, &buf[..n])
}

/// Calls `f` for every process on the system.
pub(crate) fn for_each_process(mut f: impl FnMut(Stat)) -> io::Result<()> {
    let proc_fd = open_proc()?;
    let mut path = String::with_capacity(32);
    for entry in std::fs::read_dir("/proc")? {
        let Ok(entry) = entry else { continue };
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if let Some(st) = read_stat(&proc_fd, pid, &mut path) {
            f(st);
        }
    }
    Ok(())
}

/// Live members of process group `pgid`. A process whose stat says zombie
/// is a member while any of its threads runs (see [`thread_group_alive`]).
pub(crate) fn group_members(pgid: u32) -> io::Result<Vec<u32>> {
    let mut out = Vec::new();
    for_each_process(|st| {
        if st.pgrp == pgid && (!st.is_dead() || thread_group_alive(st.pid)) {
            out.push(st.pid);
        }
    })?;
    Ok(out)
}

/// Whether any thread of process `pid` is still running.
///
/// `/proc/PID/stat` describes the thread-group leader only: a leader that
/// called `pthread_exit` (or the raw `exit` system call) while other
/// threads run shows `Z`, yet the process is alive, keeps its descriptors
/// and dies only of a signal to the process. The answer comes from a pidfd,
/// which becomes readable only once the whole thread group has exited (or,
/// before Linux 5.3, from the state of every thread in `/proc/PID/task`).
pub(crate) fn thread_group_alive(pid: u32) -> bool {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    use rustix::process::{pidfd_open, Pid, PidfdFlags};
    let Some(p) = Pid::from_raw(pid as i32) else {
        return false;
    };
    match pidfd_open(p, PidfdFlags::empty()) {
        Ok(fd) => {
            let mut fds = [PollFd::new(&fd, PollFlags::IN)];
            let zero = Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // Not readable: some thread of the group has not exited.
            matches!(poll(&mut fds, Some(&zero)), Ok(0))
        }
        Err(rustix::io::Errno::NOSYS) => any_thread_alive(pid),
        // Gone (ESRCH) or not a process any more.
        Err(_) => false,
    }
}

/// Whether process `pid` has one of the pipes `inodes` open. Answers yes
/// when the descriptors of a live process cannot be read (another user's
/// process): better a holder too many than a held pipe called free; a
/// zombie holds none. The
/// descriptors of a process whose leader thread exited are listed only
/// under its live threads (`/proc/PID/task/TID/fd`).
pub(crate) fn holds_pipe(pid: u32, inodes: &[u64]) -> bool {
    // (holds one, descriptors seen), or None when unreadable.
    let in_dir = |dir: std::path::PathBuf| -> Option<(bool, usize)> {
        let mut seen = 0;
        for e in std::fs::read_dir(dir).ok()?.flatten() {
            seen += 1;
            let holds = std::fs::read_link(e.path()).is_ok_and(|l| {
                l.to_str()
                    .and_then(|l| l.strip_prefix("pipe:[")?.strip_suffix(']')?.parse().ok())
                    .is_some_and(|ino: u64| inodes.contains(&ino))
            });
            if holds {
                return Some((true, seen));
            }
        }
        Some((false, seen))
    };
    match in_dir(format!("/proc/{pid}/fd").into()) {
        Some((holds, seen)) if holds || seen > 0 => holds,
        // No descriptor at all: a leader that exited; its threads hold them.
        Some(_) => std::fs::read_dir(format!("/proc/{pid}/task"))
            .map(|rd| {
                rd.flatten()
                    .any(|t| in_dir(t.path().join("fd")).is_some_and(|(h, _)| h))
            })
            .unwrap_or(false),
        // Unreadable. A zombie holds no descriptor (its directory is
        // unreadable to an unprivileged reader, even its parent's: it has
        // no memory left to check access against); only its live threads
        // might (a leader that exited before them).
        None => match stat_of(pid) {
            Some(st) if st.is_dead() => std::fs::read_dir(format!("/proc/{pid}/task"))
                .map(|rd| {
                    let leader = pid.to_string();
                    rd.flatten()
                        .filter(|t| t.file_name().to_str() != Some(leader.as_str()))
                        .any(|t| in_dir(t.path().join("fd")).is_none_or(|(h, _)| h))
                })
                .unwrap_or(false),
            Some(_) => true,
            None => std::path::Path::new(&format!("/proc/{pid}")).exists(),
        },
    }
}

/// Whether a child of this process has one of the pipes `inodes` open: a
/// fork of the host (another thread's spawn, between `fork` and `exec`)
/// holds a copy of every descriptor, close-on-exec ones included, for a
/// moment. The threads' `children` lists are read first; they are not
/// reliable while children come and go (proc(5)), so when they name no
/// holder every process is looked at for a child of this one that holds a
/// pipe (a rare path: output held past the wait delay by no member of the
/// tree).
pub(crate) fn child_holds_pipe(inodes: &[u64]) -> bool {
    listed_child_holds_pipe(inodes) || any_child_holds_pipe(inodes)
}

/// [`child_holds_pipe`] through the threads' `children` lists.
fn listed_child_holds_pipe(inodes: &[u64]) -> bool {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return false;
    };
    tasks.flatten().any(|t| {
        std::fs::read_to_string(t.path().join("children"))
            .unwrap_or_default()
            .split_ascii_whitespace()
            .filter_map(|p| p.parse::<u32>().ok())
            .any(|pid| holds_pipe(pid, inodes))
    })
}

/// [`child_holds_pipe`] through every process in `/proc`: those whose
/// parent is this process.
fn any_child_holds_pipe(inodes: &[u64]) -> bool {
    let me = std::process::id();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return false;
    };
    procs
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
        .any(|pid| stat_of(pid).is_some_and(|s| s.ppid == me) && holds_pipe(pid, inodes))
}

/// The `/proc/PID/task` walk behind [`thread_group_alive`] on kernels
/// without pidfds.
fn any_thread_alive(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().any(|t| {
        std::fs::read(t.path().join("stat"))
            .ok()
            .and_then(|b| parse_stat(pid, &b))
            .is_some_and(|s| !s.is_dead())
    })
}

/// `PF_EXITING`: the thread is in `do_exit` (it dequeued its fatal signal
/// and is tearing down; freeing a large address space takes a while).
const PF_EXITING: u32 = 0x4;

/// Whether process `pid` is certain to be dying: gone, a zombie (awaiting
/// its reaper), exiting, or with SIGKILL pending (it dies as soon as it is
/// scheduled, or, in uninterruptible sleep, as soon as that ends). Read
/// from `/proc/PID/stat` (state, flags), then `/proc/PID/status`
/// (`SigPnd`, `ShdPnd`), then the stat once more: a thread that dequeues
/// its SIGKILL (the pending bit goes) sets `PF_EXITING` a few instructions
/// later, so a read between the two sees neither; the second stat does.
pub(crate) fn is_dying(pid: u32) -> bool {
    let dying_stat = || stat_of(pid).is_none_or(|s| s.is_dead() || s.flags & PF_EXITING != 0);
    if dying_stat() {
        return true;
    }
    let pending = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map(|s| kill_pending(&s))
        .unwrap_or(false);
    pending || dying_stat()
}

/// Whether a `/proc/PID/status` text shows SIGKILL pending, for the thread
/// (`SigPnd`) or the whole process (`ShdPnd`). The masks are hexadecimal,
/// bit `n - 1` for signal `n`.
fn kill_pending(status: &str) -> bool {
    const KILL: u64 = 1 << (9 - 1);
    status.lines().any(|l| {
        let mask = l
            .strip_prefix("SigPnd:")
            .or_else(|| l.strip_prefix("ShdPnd:"));
        mask.and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
            .is_some_and(|m| m & KILL != 0)
    })
}

/// Whether process `pid` has a signal pending that will end it as soon as
/// it runs: pending (for a thread or the process), not blocked, and neither
/// ignored nor caught, with a default action that terminates. A stopped
/// process that the kernel sent SIGHUP then SIGCONT (its group orphaned)
/// is such a process until it has run: a stopped process does not take a
/// signal, so the SIGHUP waits in its queue, not as a pending SIGKILL.
pub(crate) fn fatal_pending(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| fatal_in(&s))
}

/// Whether a leftover about to be counted as kept is certain not to live
/// on: dying ([`is_dying`]) or with a fatal signal waiting
/// ([`fatal_pending`]: the orphaned-group SIGHUP, queued while it was
/// stopped). A kept count counts the processes that live on, not every
/// pid still listed (a member in its exit stays in its cgroup and group
/// until then).
pub(crate) fn doomed(pid: u32) -> bool {
    is_dying(pid) || fatal_pending(pid)
}

/// [`fatal_pending`] on a `/proc/PID/status` text.
fn fatal_in(status: &str) -> bool {
    let mask = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
    };
    let bit = |n: u32| 1u64 << (n - 1);
    // Default action "ignore" (CHLD, CONT, URG, WINCH) or "stop" (STOP,
    // TSTP, TTIN, TTOU): Linux numbers.
    let harmless = [17, 18, 23, 28, 19, 20, 21, 22]
        .iter()
        .fold(0, |m, &n| m | bit(n));
    let (Some(pending), Some(shared)) = (mask("SigPnd:"), mask("ShdPnd:")) else {
        return false;
    };
    let handled = ["SigBlk:", "SigIgn:", "SigCgt:"]
        .iter()
        .map(|k| mask(k).unwrap_or(u64::MAX))
        .fold(harmless, |m, x| m | x);
    (pending | shared) & !handled != 0
}

/// The stat of one process, if it exists.
pub(crate) fn stat_of(pid: u32) -> Option<Stat> {
    let fd = rustix::fs::open(
        format!("/proc/{pid}/stat").as_str(),
        OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let mut buf = [0u8; 1024];
    let n = rustix::io::read(&fd, &mut buf).ok()?;
    parse_stat(pid, &buf[..n])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_odd_names() {
        let line = b"1234 (a) b (c)) S 1 777 778 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 98765 0 0\n";
        assert_eq!(
            parse_stat(1234, line),
            Some(Stat {
                pid: 1234,
                state: b'S',
                ppid: 1,
                pgrp: 777,
                session: 778,
                flags: 4194560,
                threads: 1,
                start: 98765,
                exit_code: None,
            })
        );
        // A zombie's line, to field 52 (its exit code: 9, SIGKILL).
        let mut zombie = b"77 (a) b (c)) Z 1 4242 4242 0 -1 4194564".to_vec();
        for f in 10..=51 {
            zombie.extend_from_slice(match f {
                20 => b" 3",
                22 => b" 555",
                _ => b" 0",
            });
        }
        zombie.extend_from_slice(b" 9\n");
        let z = parse_stat(77, &zombie).expect("parsed");
        assert_eq!(
            (z.state, z.pgrp, z.threads, z.start, z.exit_code),
            (b'Z', 4242, 3, 555, Some(9))
        );
        assert_eq!(parse_stat(1, b"garbage"), None);
        // Cut before the start time, or a field that is not a number.
        assert_eq!(parse_stat(1, b"1 (x) S 1 2 3 0 -1"), None);
        assert_eq!(
            parse_stat(1, b"1 (x) S 1 -2 3 0 -1 4 1 2 3 4 5 6 7 8 20 0 1 0 5"),
            None
        );
    }

    #[test]
    fn kill_pending_reads_both_masks() {
        let status = |sig, shd| {
            format!("Name:\tx\nState:\tR (running)\nSigPnd:\t{sig}\nShdPnd:\t{shd}\nSigBlk:\t0000000000000100\n")
        };
        assert!(!kill_pending(&status(
            "0000000000000000",
            "0000000000000000"
        )));
        assert!(kill_pending(&status(
            "0000000000000100",
            "0000000000000000"
        )));
        assert!(kill_pending(&status(
            "0000000000000000",
            "0000000000004100"
        )));
        // SIGTERM (bit 14) and a blocked SIGKILL bit are not a pending kill.
        assert!(!kill_pending(&status(
            "0000000000004000",
            "0000000000004000"
        )));
        assert!(!kill_pending("garbage"));
    }

    #[test]
    fn fatal_pending_is_a_default_action_that_terminates() {
        let status = |pnd: &str, shd: &str, blk: &str, ign: &str, cgt: &str| {
            format!(
                "Name:\tx\nState:\tR (running)\nSigPnd:\t{pnd}\nShdPnd:\t{shd}\nSigBlk:\t{blk}\nSigIgn:\t{ign}\nSigCgt:\t{cgt}\n"
            )
        };
        let z = "0000000000000000";
        // (name, pending, shared, blocked, ignored, caught, fatal)
        let cases = [
            ("nothing pending", z, z, z, z, z, false),
            (
                "SIGHUP queued for the process (orphaned group)",
                z,
                "0000000000000001",
                z,
                z,
                z,
                true,
            ),
            (
                "SIGTERM for the thread",
                "0000000000004000",
                z,
                z,
                z,
                z,
                true,
            ),
            (
                "SIGHUP blocked",
                z,
                "0000000000000001",
                "0000000000000001",
                z,
                z,
                false,
            ),
            (
                "SIGHUP ignored (nohup)",
                z,
                "0000000000000001",
                z,
                "0000000000000001",
                z,
                false,
            ),
            (
                "SIGHUP caught",
                z,
                "0000000000000001",
                z,
                z,
                "0000000000000001",
                false,
            ),
            (
                "SIGCONT and SIGCHLD: ignored by default",
                z,
                "0000000000030000",
                z,
                z,
                z,
                false,
            ),
            (
                "SIGTSTP: stops by default",
                z,
                "0000000000080000",
                z,
                z,
                z,
                false,
            ),
            (
                "a real-time signal: terminates by default",
                z,
                "0000000100000000",
                z,
                z,
                z,
                true,
            ),
        ];
        for (name, pnd, shd, blk, ign, cgt, fatal) in cases {
            assert_eq!(fatal_in(&status(pnd, shd, blk, ign, cgt)), fatal, "{name}");
        }
        assert!(!fatal_in("garbage"));
    }

    /// Tests of this module that spawn: a fork holds copies of every
    /// descriptor of the test process until it execs, which
    /// `a_fork_of_this_process_holds_its_pipes_until_exec` would see.
    static SPAWNS: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn dying_processes_are_told_from_live_ones() {
        let _one = SPAWNS.lock().unwrap_or_else(|e| e.into_inner());
        assert!(!is_dying(std::process::id()));
        let mut child = std::process::Command::new("/bin/sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        assert!(!is_dying(pid));
        child.kill().unwrap();
        // Dying or a zombie from the kill on, until reaped.
        assert!(is_dying(pid));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while stat_of(pid).is_some_and(|s| !s.is_dead()) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(is_dying(pid), "an unreaped zombie is dying");
        child.wait().unwrap();
    }

    /// A kept leftover that the orphaned-group rule has doomed (SIGHUP
    /// queued while it is stopped) or that is dying is not counted as one
    /// that lives on; a stopped one with nothing queued, or a running one,
    /// is.
    #[test]
    fn a_doomed_leftover_is_told_from_one_that_lives_on() {
        let _one = SPAWNS.lock().unwrap_or_else(|e| e.into_inner());
        let mut child = std::process::Command::new("/bin/sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        assert!(!doomed(pid), "running");
        let p = rustix::process::Pid::from_child(&child);
        rustix::process::kill_process(p, rustix::process::Signal::STOP).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while stat_of(pid).is_some_and(|s| s.state != b'T') {
            assert!(std::time::Instant::now() < deadline, "never stopped");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(!doomed(pid), "stopped, nothing queued");
        // What the kernel sends an orphaned group with a stopped member
        // (SIGHUP first): queued, not taken while stopped.
        rustix::process::kill_process(p, rustix::process::Signal::HUP).unwrap();
        assert!(doomed(pid), "stopped with SIGHUP queued");
        child.kill().unwrap();
        assert!(doomed(pid), "killed");
        child.wait().unwrap();
    }

    #[test]
    fn own_stat_is_readable() {
        let s = stat_of(std::process::id()).unwrap();
        assert!(!s.is_dead());
        assert!(s.start > 0);
        // (libc's, not rustix's: the group is 0 when its leader is outside
        // this PID namespace, as in some CI containers.)
        // SAFETY: getpgrp takes no arguments and cannot fail.
        assert_eq!(s.pgrp, unsafe { libc::getpgrp() } as u32);
    }

    /// A new pipe and its inode (what `holds_pipe` looks for).
    fn pipe_and_inode() -> (std::io::PipeReader, std::io::PipeWriter, u64) {
        let (r, w) = std::io::pipe().unwrap();
        #[allow(clippy::unnecessary_cast)]
        let ino = rustix::fs::fstat(&r).unwrap().st_ino as u64;
        (r, w, ino)
    }

    /// An unreaped zombie that held the pipe while it lived holds nothing
    /// (unprivileged, its `/proc/PID/fd` is unreadable even to its parent:
    /// it must not count as a holder then, as corral keeps the root a
    /// zombie until its last signal).
    #[test]
    fn a_zombie_holds_no_pipe() {
        let _one = SPAWNS.lock().unwrap_or_else(|e| e.into_inner());
        let (r, w, ino) = pipe_and_inode();
        let mut child = std::process::Command::new("/bin/sh")
            .args(["-c", "read x"])
            .stdin(std::process::Stdio::piped())
            .stdout(w)
            .spawn()
            .unwrap();
        let pid = child.id();
        assert!(holds_pipe(pid, &[ino]), "the live child holds its stdout");
        drop(child.stdin.take());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !stat_of(pid).is_some_and(|s| s.is_dead()) {
            assert!(
                std::time::Instant::now() < deadline,
                "the child did not exit"
            );
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        assert!(!holds_pipe(pid, &[ino]), "a zombie holds nothing");
        child.wait().unwrap();
        drop(r);
    }

    /// Whether no child of this process holds `ino` within 5 s: tests in
    /// other modules fork too (the library's spawns, a keeper), and each
    /// such fork holds a copy of every descriptor until it execs or closes
    /// them, which a check at one instant could see.
    fn soon_no_child_holds(ino: u64) -> bool {
        let end = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while child_holds_pipe(&[ino]) {
            if std::time::Instant::now() > end {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        true
    }

    #[test]
    fn a_fork_of_this_process_holds_its_pipes_until_exec() {
        use std::os::unix::process::CommandExt;
        let _one = SPAWNS.lock().unwrap_or_else(|e| e.into_inner());
        let (r, w, ino) = pipe_and_inode();
        assert!(holds_pipe(std::process::id(), &[ino]));
        assert!(soon_no_child_holds(ino));
        let mut cmd = std::process::Command::new("/bin/sleep");
        cmd.arg("1");
        // SAFETY: the closure runs in the forked child before exec and
        // only sleeps (nanosleep, async-signal-safe); it allocates nothing.
        unsafe {
            cmd.pre_exec(|| {
                std::thread::sleep(std::time::Duration::from_millis(300));
                Ok(())
            });
        }
        let mut child = cmd.spawn().unwrap();
        // `spawn` returns after exec; the pipes (close-on-exec) are gone.
        assert!(!holds_pipe(child.id(), &[ino]));
        assert!(soon_no_child_holds(ino));
        let _ = child.kill();
        let _ = child.wait();
        // A fork that does not exec keeps them: seen while it sleeps.
        let t = std::thread::spawn(move || {
            let mut cmd = std::process::Command::new("/nonexistent/corral-test");
            // SAFETY: as above.
            unsafe {
                cmd.pre_exec(|| {
                    std::thread::sleep(std::time::Duration::from_millis(500));
                    Ok(())
                });
            }
            let _ = cmd.spawn();
        });
        let end = std::time::Instant::now() + std::time::Duration::from_millis(400);
        let mut seen = false;
        while !seen && std::time::Instant::now() < end {
            seen = child_holds_pipe(&[ino]);
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        t.join().unwrap();
        assert!(seen, "the fork's copy of the pipe was not found");
        assert!(soon_no_child_holds(ino));
        drop((r, w));
    }

    #[test]
    fn finds_this_process_group() {
        let me = std::process::id();
        let st = stat_of(me).unwrap();
        assert!(group_members(st.pgrp).unwrap().contains(&me));
    }
}
