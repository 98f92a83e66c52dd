//! The cgroup's members: listing, signalling, killing, moving out.

use std::fs;
use std::io;
use std::path::Path;
use std::time::{Duration, Instant};

use super::files::{CgroupFile, Events};
use super::Cgroup;
use crate::contain::{Mechanism, OsOp};
use crate::sys;
use crate::Signal;

/// Members still listed this long after `cgroup.kill` get a SIGKILL of
/// their own (a dying tree is normally gone by then; what is left is what
/// `cgroup.kill` skipped, or a process slow to die that a second SIGKILL
/// does not hurt).
pub(super) const STRAGGLERS_AFTER: Duration = Duration::from_millis(5);

/// The straggler rule: which of the members `listed` now get a SIGKILL of
/// their own. None before the tree was sent SIGKILL, nor until
/// [`STRAGGLERS_AFTER`] has passed since (`since_kill`); then each one not
/// yet `sent` one, once.
pub(super) fn stragglers(since_kill: Option<Duration>, listed: &[u32], sent: &[u32]) -> Vec<u32> {
    if since_kill.is_none_or(|d| d < STRAGGLERS_AFTER) {
        return Vec::new();
    }
    listed
        .iter()
        .copied()
        .filter(|p| !sent.contains(p))
        .collect()
}

/// The pids in a `cgroup.procs` text. A `0` is left out: the kernel lists
/// a process as 0 when its pid no longer means it in the reader's
/// namespace (a member being released by its reaper is still on the
/// cgroup's list for a moment). Taken for a member, that 0 was watched
/// as one more member that could not be opened, and counted killed (the
/// soak's one `killed-over` in 10,000 cgroup runs), or counted kept.
fn procs_in(text: &str) -> impl Iterator<Item = u32> + '_ {
    text.lines()
        .filter_map(|l| l.trim().parse::<u32>().ok())
        .filter(|&p| p != 0)
}

/// The live members of process group `pgid` on the machine, as
/// `sys::group_members` finds them, with one `getpgid` per process as the
/// filter: only a process of the group has its `stat` read (the liveness
/// of a zombie leader's threads, and the group once more). A run of the
/// cgroup tier makes this scan once, when its cgroup is empty
/// (`Cgroup::migrated`); reading every process's `stat` instead made it
/// four system calls and a `stat` formatted by the kernel per process on
/// the machine, per run: the cgroup tier's largest per-run cost in a batch
/// (docs/BENCHMARKS.md, "Batch throughput").
#[cfg(linux_raw)]
fn group_candidates(pgid: u32) -> io::Result<Vec<u32>> {
    use rustix::fs::{Mode, OFlags, RawDir};
    let dir = rustix::fs::open(
        "/proc",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let mut buf = Vec::with_capacity(16 * 1024);
    let mut iter = RawDir::new(&dir, buf.spare_capacity_mut());
    let mut out = Vec::new();
    while let Some(entry) = iter.next() {
        let entry = entry.map_err(io::Error::from)?;
        let Some(pid) = std::str::from_utf8(entry.file_name().to_bytes())
            .ok()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if sys::linux_spawn::getpgid(pid) == Ok(pgid) {
            out.push(pid);
        }
    }
    Ok(out)
}

/// Whether `pid` is a live member of group `pgid` now: its group (a
/// reused pid is in another group: the unreaped root pins this one), and
/// its `stat` (a zombie counts only while a thread of it still runs).
#[cfg(linux_raw)]
fn live_in_group(pid: u32, pgid: u32) -> bool {
    if sys::linux_spawn::getpgid(pid) != Ok(pgid) {
        return false;
    }
    sys::linux_proc::stat_of(pid).is_some_and(|st| {
        st.pgrp == pgid && (!st.is_dead() || sys::linux_proc::thread_group_alive(pid))
    })
}

/// The live members of process group `pgid` on the machine, as
/// `sys::group_members` finds them, with one `getpgid` per process as the
/// filter: only a process of the group has its `stat` read (the liveness
/// of a zombie leader's threads, and the group once more). A run of the
/// cgroup tier makes this scan once, when its cgroup is empty
/// (`Cgroup::migrated`), or right after its SIGKILL
/// (`Cgroup::migrant_candidates`); reading every process's `stat` instead
/// made it four system calls and a `stat` formatted by the kernel per
/// process on the machine, per run: the cgroup tier's largest per-run cost
/// in a batch (docs/BENCHMARKS.md, "Batch throughput").
#[cfg(linux_raw)]
fn migrated_scan(pgid: u32) -> io::Result<Vec<u32>> {
    Ok(group_candidates(pgid)?
        .into_iter()
        .filter(|&p| live_in_group(p, pgid))
        .collect())
}

impl Cgroup {
    /// Whether any process is left in the cgroup (re-arms the POLLPRI
    /// notification when a termination waits on the kept descriptor; else
    /// the file is opened for the read and closed: a descriptor opened on
    /// the runtime's thread at any moment and kept is one a host that
    /// closes its own descriptors twice (CPython's tests do) can close
    /// under corral, which would then close the host's next one).
    pub(super) fn populated(&self) -> io::Result<bool> {
        match &self.slot {
            Some(s) => s.read_events().map(|e| e.populated),
            // Back in the pool: it was proven empty then.
            None => Ok(false),
        }
    }

    pub(super) fn procs_of(dir: &Path, out: &mut Vec<u32>) {
        if let Ok(s) = CgroupFile::Procs.read(dir) {
            out.extend(procs_in(&s));
        }
        // Nested cgroups made by the command itself are part of the tree.
        if let Ok(rd) = fs::read_dir(dir) {
            for e in rd.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    Self::procs_of(&e.path(), out);
                }
            }
        }
    }

    pub(super) fn all_procs(&self) -> Vec<u32> {
        let mut v = Vec::new();
        Self::procs_of(&self.dir, &mut v);
        v
    }

    /// Live members of the root's process group (pinned by the unreaped
    /// root, so every one descends from the tree) outside the cgroup: a
    /// process with write access to an ancestor's `cgroup.procs` (root, or
    /// the owner of a delegated subtree) can move itself out, and no cgroup
    /// mechanism can stop it. Those that also left the group are not found
    /// (the PID-namespace tier holds them). `pgid`: the root's group.
    pub(super) fn migrated(pgid: u32) -> Vec<u32> {
        #[cfg(linux_raw)]
        return migrated_scan(pgid).unwrap_or_default();
        #[cfg(not(linux_raw))]
        return sys::group_members(pgid).unwrap_or_default();
    }

    /// The processes of group `pgid` on the machine now, live or not (one
    /// pass of /proc, a `getpgid` each): taken right after the tree's
    /// SIGKILL, they are every migrant the run can have
    /// ([`Cgroup::migrated_of`] looks at them again once the cgroup is
    /// empty).
    pub(super) fn migrant_candidates(pgid: u32) -> Vec<u32> {
        #[cfg(linux_raw)]
        return group_candidates(pgid).unwrap_or_default();
        #[cfg(not(linux_raw))]
        return sys::group_members(pgid).unwrap_or_default();
    }

    /// Those of `candidates` that are live members of group `pgid` now:
    /// [`Cgroup::migrated`] without the pass of /proc.
    pub(super) fn migrated_of(pgid: u32, candidates: &[u32]) -> Vec<u32> {
        #[cfg(linux_raw)]
        return candidates
            .iter()
            .copied()
            .filter(|&p| live_in_group(p, pgid))
            .collect();
        #[cfg(not(linux_raw))]
        return sys::group_members(pgid)
            .unwrap_or_default()
            .into_iter()
            .filter(|p| candidates.contains(p))
            .collect();
    }

    /// Signals each member through a pidfd, after checking that the pinned
    /// process is still in this cgroup (so a reused pid is never hit).
    /// Members already reached through the process group (`skip_pgid`) are
    /// skipped, so each process gets the signal once.
    pub(super) fn signal_members(&self, sig: Signal, skip_pgid: Option<u32>) -> io::Result<()> {
        self.signal_pids(&self.all_procs(), sig, skip_pgid)
    }

    /// Signals each of `pids` that is still in this cgroup, through a pidfd
    /// opened before the membership check (so a reused pid is never hit).
    pub(super) fn signal_pids(
        &self,
        pids: &[u32],
        sig: Signal,
        skip_pgid: Option<u32>,
    ) -> io::Result<()> {
        let rsig = sys::to_rustix(sig)?;
        let rel = self.dir.strip_prefix(self.parent()).unwrap_or(&self.dir);
        let marker = format!("/{}", rel.display());
        for &pid in pids {
            let Some(p) = rustix::process::Pid::from_raw(pid as i32) else {
                continue;
            };
            let Ok(fd) = rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty())
            else {
                continue;
            };
            let cg = fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
            let inside = cg
                .lines()
                .find_map(|l| l.strip_prefix("0::"))
                .is_some_and(|p| p.ends_with(&marker) || p.contains(&format!("{marker}/")));
            let in_group = skip_pgid
                .is_some_and(|pgid| sys::linux_proc::stat_of(pid).is_some_and(|s| s.pgrp == pgid));
            if inside && !in_group {
                self.tracer.record(OsOp::SignalMember {
                    via: Mechanism::Cgroup,
                    pid,
                    signal: sig,
                });
                let _ = rustix::process::pidfd_send_signal(&fd, rsig);
            }
        }
        Ok(())
    }

    /// After SIGKILL: members that are still listed a little later get a
    /// SIGKILL of their own, once each. `cgroup.kill` passes over a process
    /// whose leader thread already exited while other threads run; one
    /// signal to the process (what `kill(2)` does) ends it.
    pub(super) fn kill_stragglers(&mut self, listed: &[u32]) {
        let Some(killed) = self.killed.as_mut() else {
            return;
        };
        let new = stragglers(Some(killed.at.elapsed()), listed, &killed.stragglers);
        if new.is_empty() {
            return;
        }
        killed.stragglers.extend(new.iter().copied());
        let _ = self.signal_pids(&new, Signal::KILL, None);
    }

    /// Notes the tree's SIGKILL (the first one: its time is kept).
    pub(super) fn killed_now(&mut self) {
        self.killed.get_or_insert_with(|| {
            Box::new(super::Killed {
                at: Instant::now(),
                stragglers: Vec::new(),
                migrants: None,
            })
        });
    }

    pub(super) fn kill_all(&mut self) -> io::Result<()> {
        self.killed_now();
        match CgroupFile::Kill.write(&self.dir, "1") {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                // Before Linux 5.14: freeze (no fork, no exit can race us),
                // kill every member, thaw.
                CgroupFile::Freeze.write(&self.dir, "1")?;
                let end = Instant::now() + Duration::from_millis(200);
                let mut frozen = false;
                while Instant::now() < end {
                    let ev = CgroupFile::Events.read(&self.dir).unwrap_or_default();
                    if Events::parse(&ev).frozen {
                        frozen = true;
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                if frozen {
                    // Frozen members neither exit nor fork: their pids are
                    // theirs until the SIGKILL below lands.
                    for pid in self.all_procs() {
                        if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
                            self.tracer.record(OsOp::SignalMember {
                                via: Mechanism::Cgroup,
                                pid,
                                signal: Signal::KILL,
                            });
                            let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
                        }
                    }
                } else {
                    // Not confirmed frozen: through pidfds checked for
                    // membership, so a reused pid is never hit.
                    let _ = self.signal_members(Signal::KILL, None);
                }
                CgroupFile::Freeze.write(&self.dir, "0")
            }
            Err(e) => Err(e),
        }
    }

    pub(super) fn move_out(&self) {
        if !self.populated().unwrap_or(true) {
            return; // nothing left in the cgroup
        }
        // corral's own cgroup (the leaf, if it moved itself aside).
        let home = super::delegated::home(self.parent());
        for _ in 0..20 {
            let pids = self.all_procs();
            if pids.is_empty() {
                break;
            }
            for pid in pids {
                let _ = CgroupFile::Procs.write(&home, &pid.to_string());
                for g in self.v1() {
                    if let Some(parent) = g.dir.parent() {
                        let _ = CgroupFile::Procs.write(parent, &pid.to_string());
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_released_member_listed_as_0_is_no_member() {
        let listed: Vec<u32> = procs_in("412\n0\n 413 \n\ngarbage\n").collect();
        assert_eq!(listed, [412, 413]);
    }

    #[test]
    fn straggler_rule_table() {
        let ms = Duration::from_millis;
        let sent: Vec<u32> = vec![7];
        let none = Vec::new();
        /// (name, time since the tree's SIGKILL, listed, sent before, to kill)
        type Case<'a> = (
            &'a str,
            Option<Duration>,
            &'a [u32],
            &'a Vec<u32>,
            &'a [u32],
        );
        let cases: &[Case] = &[
            ("no SIGKILL yet", None, &[5, 6], &none, &[]),
            (
                "just killed: the tree is still dying",
                Some(ms(0)),
                &[5, 6],
                &none,
                &[],
            ),
            (
                "one instant short",
                Some(STRAGGLERS_AFTER - Duration::from_nanos(1)),
                &[5],
                &none,
                &[],
            ),
            (
                "at the delay",
                Some(STRAGGLERS_AFTER),
                &[5, 6],
                &none,
                &[5, 6],
            ),
            ("long after", Some(ms(900)), &[5, 6], &none, &[5, 6]),
            ("each once", Some(ms(50)), &[5, 7], &sent, &[5]),
            ("all already sent", Some(ms(50)), &[7], &sent, &[]),
            ("nothing listed", Some(ms(50)), &[], &none, &[]),
        ];
        for (name, since, listed, sent, want) in cases {
            assert_eq!(stragglers(*since, listed, sent), *want, "{name}");
        }
    }
}
