//! The cgroup interface files corral reads and writes, named in one place
//! ([`CgroupFile`]), the parsers of their contents, and the removal of
//! cgroup directories.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// An interface file of a cgroup (v2 unless named `V1...`). Every path
/// corral makes to one goes through [`CgroupFile::path`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CgroupFile {
    /// The member processes, one pid a line; written to move one in.
    Procs,
    /// The member threads (only ever seen in a watch event).
    Threads,
    /// Written `1`: SIGKILL to every member (Linux 5.14+).
    Kill,
    /// `1` freezes the cgroup, `0` thaws it.
    Freeze,
    /// `populated` and `frozen`; pollable (POLLPRI).
    Events,
    /// `nr_descendants` and other counts.
    Stat,
    /// The controllers available in this cgroup.
    Controllers,
    /// The controllers enabled for the children.
    SubtreeControl,
    /// Present in every cgroup but the root.
    Type,
    /// `user_usec`, `system_usec`.
    CpuStat,
    MemoryMax,
    MemoryPeak,
    /// `oom_kill` and other counts.
    MemoryEvents,
    PidsMax,
    /// The highest number of members (also in v1's `pids`).
    PidsPeak,
    /// `max`: forks refused at the limit (also in v1's `pids`).
    PidsEvents,
    V1MemoryLimit,
    V1MemoryMaxUsage,
    /// `oom_kill` (v1).
    V1MemoryOomControl,
}

impl CgroupFile {
    /// The file's name in a cgroup directory.
    pub(crate) const fn name(self) -> &'static str {
        match self {
            CgroupFile::Procs => "cgroup.procs",
            CgroupFile::Threads => "cgroup.threads",
            CgroupFile::Kill => "cgroup.kill",
            CgroupFile::Freeze => "cgroup.freeze",
            CgroupFile::Events => "cgroup.events",
            CgroupFile::Stat => "cgroup.stat",
            CgroupFile::Controllers => "cgroup.controllers",
            CgroupFile::SubtreeControl => "cgroup.subtree_control",
            CgroupFile::Type => "cgroup.type",
            CgroupFile::CpuStat => "cpu.stat",
            CgroupFile::MemoryMax => "memory.max",
            CgroupFile::MemoryPeak => "memory.peak",
            CgroupFile::MemoryEvents => "memory.events",
            CgroupFile::PidsMax => "pids.max",
            CgroupFile::PidsPeak => "pids.peak",
            CgroupFile::PidsEvents => "pids.events",
            CgroupFile::V1MemoryLimit => "memory.limit_in_bytes",
            CgroupFile::V1MemoryMaxUsage => "memory.max_usage_in_bytes",
            CgroupFile::V1MemoryOomControl => "memory.oom_control",
        }
    }

    /// The file in the cgroup directory `dir`.
    pub(crate) fn path(self, dir: &Path) -> PathBuf {
        dir.join(self.name())
    }

    /// The whole file, read now.
    pub(crate) fn read(self, dir: &Path) -> io::Result<String> {
        fs::read_to_string(self.path(dir))
    }

    /// Writes `data` in one write (an interface file takes one value a
    /// write).
    pub(crate) fn write(self, dir: &Path, data: &str) -> io::Result<()> {
        let mut f = OpenOptions::new().write(true).open(self.path(dir))?;
        f.write_all(data.as_bytes())
    }

    /// The file's single number (`memory.peak`, ...).
    pub(crate) fn read_u64(self, dir: &Path) -> Option<u64> {
        self.read(dir).ok()?.trim().parse().ok()
    }

    /// The value of `key` in a flat-keyed file (`pids.events`, ...).
    pub(crate) fn read_kv(self, dir: &Path, key: &str) -> Option<u64> {
        kv(&self.read(dir).ok()?, key)
    }

    /// The words of a space-separated list (`cgroup.controllers`, ...),
    /// none if it cannot be read.
    pub(crate) fn read_words(self, dir: &Path) -> Vec<String> {
        self.read(dir)
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    }
}

/// A controller a limit needs, and its files in each hierarchy (v2, or
/// the v1 hierarchy of the same name on a hybrid system).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Controller {
    Pids,
    Memory,
}

impl Controller {
    /// The controller's name (in `cgroup.controllers`, a v1 mount's
    /// options, /proc/self/cgroup).
    pub(crate) const fn name(self) -> &'static str {
        match self {
            Controller::Pids => "pids",
            Controller::Memory => "memory",
        }
    }

    /// The file that sets the limit.
    pub(crate) const fn limit(self, v1: bool) -> CgroupFile {
        match (self, v1) {
            (Controller::Pids, _) => CgroupFile::PidsMax,
            (Controller::Memory, false) => CgroupFile::MemoryMax,
            (Controller::Memory, true) => CgroupFile::V1MemoryLimit,
        }
    }

    /// The file with the highest use since the cgroup was made.
    pub(crate) const fn peak(self, v1: bool) -> CgroupFile {
        match (self, v1) {
            (Controller::Pids, _) => CgroupFile::PidsPeak,
            (Controller::Memory, false) => CgroupFile::MemoryPeak,
            (Controller::Memory, true) => CgroupFile::V1MemoryMaxUsage,
        }
    }

    /// The flat-keyed file and key that count the times the limit was hit.
    pub(crate) const fn hits(self, v1: bool) -> (CgroupFile, &'static str) {
        match (self, v1) {
            (Controller::Pids, _) => (CgroupFile::PidsEvents, "max"),
            (Controller::Memory, false) => (CgroupFile::MemoryEvents, "oom_kill"),
            (Controller::Memory, true) => (CgroupFile::V1MemoryOomControl, "oom_kill"),
        }
    }
}

/// The limit controllers enabled for the runs' cgroups (in the parent's
/// `cgroup.subtree_control`): their accounting files (peaks, events) exist
/// in every run's cgroup.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Enabled {
    pub(crate) memory: bool,
    pub(crate) pids: bool,
}

impl Enabled {
    /// From the words of `cgroup.subtree_control`.
    pub(crate) fn from_words(words: &[String]) -> Enabled {
        let on = |c: Controller| words.iter().any(|w| w == c.name());
        Enabled {
            memory: on(Controller::Memory),
            pids: on(Controller::Pids),
        }
    }

    pub(crate) fn has(self, ctrl: Controller) -> bool {
        match ctrl {
            Controller::Pids => self.pids,
            Controller::Memory => self.memory,
        }
    }

    /// Some peak is accounted (a run's cgroup is then never pooled).
    pub(crate) fn any(self) -> bool {
        self.memory || self.pids
    }
}

/// The value of `key` in the text of a flat-keyed file (`key value` lines).
pub(super) fn kv(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// What `cgroup.events` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct Events {
    /// A process is left in the cgroup or below it.
    pub(super) populated: bool,
    /// The cgroup is frozen (every member stopped).
    pub(super) frozen: bool,
}

impl Events {
    /// Reads the text of `cgroup.events` (absent keys: false).
    pub(super) fn parse(text: &str) -> Events {
        let on = |key: &str| text.lines().any(|l| l.trim() == key);
        Events {
            populated: on("populated 1"),
            frozen: on("frozen 1"),
        }
    }
}

/// A file corral keeps beyond the call that opened it: never 0, 1 or 2
/// (see `sys::above_std`).
pub(crate) fn kept(f: std::fs::File) -> io::Result<std::fs::File> {
    Ok(crate::sys::above_std(f.into())?.into())
}

/// Removes a cgroup directory and the cgroups below it, leaves first.
///
/// A run's cgroup is most often a leaf (its command made no cgroup of its
/// own): one `rmdir`, and the directory is listed (an `open`, two
/// `getdents64` of some 30 interface files, a `close`) only when that
/// fails (cgroups below it: `EBUSY`; or still populated).
pub(super) fn remove_tree(dir: &Path) -> io::Result<()> {
    match fs::remove_dir(dir) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(e),
        Err(_) => {}
    }
    if let Ok(rd) = fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                let _ = remove_tree(&e.path());
            }
        }
    }
    fs::remove_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_read_from_their_lines() {
        let cases: &[(&str, Events)] = &[
            ("populated 0\nfrozen 0\n", Events::default()),
            (
                "populated 1\nfrozen 0\n",
                Events {
                    populated: true,
                    frozen: false,
                },
            ),
            (
                "populated 0\nfrozen 1\n",
                Events {
                    populated: false,
                    frozen: true,
                },
            ),
            // Before Linux 5.2 there is no `frozen` line.
            (
                "populated 1\n",
                Events {
                    populated: true,
                    frozen: false,
                },
            ),
            ("", Events::default()),
            // Another value is not "1".
            ("populated 10\n", Events::default()),
        ];
        for (text, want) in cases {
            assert_eq!(Events::parse(text), *want, "{text:?}");
        }
    }

    #[test]
    fn enabled_controllers_from_subtree_control() {
        let words = |s: &str| s.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
        let cases = [
            ("", Enabled::default()),
            ("cpu io", Enabled::default()),
            (
                "memory",
                Enabled {
                    memory: true,
                    pids: false,
                },
            ),
            (
                "cpu pids",
                Enabled {
                    memory: false,
                    pids: true,
                },
            ),
            (
                "memory pids",
                Enabled {
                    memory: true,
                    pids: true,
                },
            ),
            // A word that only contains the name is another controller.
            ("pids_x memoryy", Enabled::default()),
        ];
        for (text, want) in cases {
            let got = Enabled::from_words(&words(text));
            assert_eq!(got, want, "{text:?}");
            assert_eq!(got.any(), want.memory || want.pids);
            assert_eq!(got.has(Controller::Memory), want.memory);
            assert_eq!(got.has(Controller::Pids), want.pids);
        }
    }

    #[test]
    fn flat_keyed_values() {
        let text = "oom 0\noom_kill 3\nmax 7\n";
        let cases: &[(&str, Option<u64>)] = &[
            ("oom_kill", Some(3)),
            ("oom", Some(0)),
            ("max", Some(7)),
            ("missing", None),
        ];
        for (key, want) in cases {
            assert_eq!(kv(text, key), *want, "{key}");
        }
        assert_eq!(kv("max x\n", "max"), None);
    }

    #[test]
    fn every_file_has_its_kernel_name() {
        assert_eq!(CgroupFile::Kill.name(), "cgroup.kill");
        assert_eq!(CgroupFile::SubtreeControl.name(), "cgroup.subtree_control");
        assert_eq!(CgroupFile::V1MemoryLimit.name(), "memory.limit_in_bytes");
        let memory = Controller::Memory;
        assert_eq!(memory.limit(false).name(), "memory.max");
        assert_eq!(memory.limit(true).name(), "memory.limit_in_bytes");
        assert_eq!(memory.peak(true).name(), "memory.max_usage_in_bytes");
        assert_eq!(Controller::Pids.limit(true).name(), "pids.max");
        assert_eq!(
            Controller::Pids.hits(false),
            (CgroupFile::PidsEvents, "max")
        );
        assert_eq!(
            CgroupFile::Procs.path(Path::new("/sys/fs/cgroup/x")),
            Path::new("/sys/fs/cgroup/x/cgroup.procs")
        );
    }
}
