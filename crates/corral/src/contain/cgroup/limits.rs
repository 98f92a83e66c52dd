//! Limits (v2 files, or per-command groups in the v1 hierarchies) and the
//! usage and limit hits read back from them.

use std::fs::{self, OpenOptions};
use std::time::Duration;

use super::error::CgroupError;
use super::files::{kv, CgroupFile, Controller};
use super::hierarchy::Hierarchy;
use super::{Cgroup, V1Group};
use crate::report::{LimitHit, Usage};

impl Cgroup {
    pub(super) fn v2_has(&self, ctrl: Controller) -> bool {
        CgroupFile::Controllers
            .read_words(&self.dir)
            .iter()
            .any(|c| c == ctrl.name())
    }

    /// The limit asked for `ctrl`.
    fn wanted(&self, ctrl: Controller) -> Option<u64> {
        match ctrl {
            Controller::Pids => self.limits().pids_max,
            Controller::Memory => self.limits().memory_max,
        }
    }

    /// Whether the v2 `ctrl` is enabled for our cgroups (its accounting
    /// files exist then).
    fn v2_accounts(&self, ctrl: Controller) -> bool {
        self.v2.has(ctrl)
    }

    /// This run's v1 group of `ctrl`, if it has one.
    fn v1_dir(&self, ctrl: Controller) -> Option<&std::path::Path> {
        self.v1()
            .iter()
            .find(|g| g.controller == ctrl)
            .map(|g| g.dir.as_path())
    }

    pub(super) fn apply_limits(&mut self, h: &Hierarchy, name: &str) -> Result<(), CgroupError> {
        if !self.limits().any() {
            return Ok(());
        }
        for ctrl in [Controller::Pids, Controller::Memory] {
            let value = self.wanted(ctrl);
            // Accounting (peak, events) is wanted even without a limit; a
            // limit must be had or the run fails.
            if self.v2_has(ctrl) {
                if let Some(v) = value {
                    let file = ctrl.limit(false);
                    file.write(&self.dir, &v.to_string()).map_err(|source| {
                        CgroupError::SetLimit {
                            file: file.name(),
                            source,
                        }
                    })?;
                }
                continue;
            }
            let Some(own) = h.own_v1(ctrl) else {
                if value.is_some() {
                    return Err(CgroupError::NoController {
                        controller: ctrl.name(),
                    });
                }
                continue;
            };
            let Some(v) = value else { continue };
            let dir = own.join(name);
            fs::create_dir(&dir).map_err(|source| CgroupError::CreateV1 {
                dir: dir.clone(),
                source,
            })?;
            let procs = OpenOptions::new()
                .write(true)
                .open(CgroupFile::Procs.path(&dir));
            let procs = match procs {
                Ok(p) => p,
                Err(source) => {
                    let _ = fs::remove_dir(&dir);
                    return Err(CgroupError::Open {
                        path: CgroupFile::Procs.path(&dir),
                        source,
                    });
                }
            };
            self.limited
                .get_or_insert_with(Box::default)
                .v1
                .push(V1Group {
                    controller: ctrl,
                    dir: dir.clone(),
                    procs: Some(procs),
                });
            let file = ctrl.limit(true);
            file.write(&dir, &v.to_string())
                .map_err(|source| CgroupError::SetLimit {
                    file: file.name(),
                    source,
                })?;
        }
        Ok(())
    }

    /// What the run used and which limits it hit: CPU time from `cpu.stat`
    /// (as a difference from the borrow), the peaks and hit counts of each
    /// controller, v2 first, then the run's v1 groups.
    pub(super) fn usage_now(&self) -> (Usage, Vec<LimitHit>) {
        let cpu = match &self.slot {
            Some(slot) => slot.cpu_stat(),
            None => CgroupFile::CpuStat.read(&self.dir).unwrap_or_default(),
        };
        // This run's share: a pooled cgroup's counters include earlier runs.
        let cpu_field = |key: &str, base: u64| {
            kv(&cpu, key).map(|v| Duration::from_micros(v.saturating_sub(base)))
        };
        let mut usage = Usage {
            cpu_user: cpu_field("user_usec", self.cpu_base.0),
            cpu_system: cpu_field("system_usec", self.cpu_base.1),
            memory_peak: None,
            pids_peak: None,
        };
        let mut hits = Vec::new();
        for v1 in [false, true] {
            for ctrl in [Controller::Memory, Controller::Pids] {
                // The memory and pids files exist only where those
                // controllers are enabled for our cgroups; do not probe for
                // them otherwise.
                let dir = if v1 {
                    self.v1_dir(ctrl)
                } else {
                    self.v2_accounts(ctrl).then_some(&*self.dir)
                };
                let Some(dir) = dir else { continue };
                let (peak, hit) = match ctrl {
                    Controller::Memory => (&mut usage.memory_peak, LimitHit::Memory),
                    Controller::Pids => (&mut usage.pids_peak, LimitHit::Pids),
                };
                *peak = peak.or(ctrl.peak(v1).read_u64(dir));
                let (file, key) = ctrl.hits(v1);
                if file.read_kv(dir, key).unwrap_or(0) > 0 && !hits.contains(&hit) {
                    hits.push(hit);
                }
            }
        }
        (usage, hits)
    }
}
