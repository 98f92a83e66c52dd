//! Limits: v2 files or per-command v1 groups.

use std::fs::{self, OpenOptions};

use super::error::CgroupError;
use super::files::write_file;
use super::hierarchy::Hierarchy;
use super::{Cgroup, V1Group};

impl Cgroup {
    pub(super) fn v2_has(&self, ctrl: &str) -> bool {
        fs::read_to_string(self.dir.join("cgroup.controllers"))
            .is_ok_and(|s| s.split_whitespace().any(|c| c == ctrl))
    }

    pub(super) fn apply_limits(&mut self, h: &Hierarchy, name: &str) -> Result<(), CgroupError> {
        if !self.limits.any() {
            return Ok(());
        }
        let want = [
            (
                "pids",
                self.limits.pids_max,
                "pids.max",
                h.own_v1_pids.as_ref(),
                "pids.max",
            ),
            (
                "memory",
                self.limits.memory_max,
                "memory.max",
                h.own_v1_memory.as_ref(),
                "memory.limit_in_bytes",
            ),
        ];
        for (ctrl, value, v2_file, v1_own, v1_file) in want {
            // Accounting (peak, events) is wanted even without a limit; a
            // limit must be had or the run fails.
            if self.v2_has(ctrl) {
                if let Some(v) = value {
                    write_file(&self.dir.join(v2_file), &v.to_string()).map_err(|source| {
                        CgroupError::SetLimit {
                            file: v2_file,
                            source,
                        }
                    })?;
                }
                continue;
            }
            let Some(own) = v1_own else {
                if value.is_some() {
                    return Err(CgroupError::NoController { controller: ctrl });
                }
                continue;
            };
            if value.is_none() {
                continue;
            }
            let dir = own.join(name);
            fs::create_dir(&dir).map_err(|source| CgroupError::CreateV1 {
                dir: dir.clone(),
                source,
            })?;
            let procs = OpenOptions::new()
                .write(true)
                .open(dir.join("cgroup.procs"));
            let procs = match procs {
                Ok(p) => p,
                Err(source) => {
                    let _ = fs::remove_dir(&dir);
                    return Err(CgroupError::Open {
                        path: dir.join("cgroup.procs"),
                        source,
                    });
                }
            };
            self.v1.push(V1Group {
                dir: dir.clone(),
                procs,
            });
            if ctrl == "memory" {
                self.v1_memory = Some(dir.clone());
            } else {
                self.v1_pids = Some(dir.clone());
            }
            if let Some(v) = value {
                write_file(&dir.join(v1_file), &v.to_string()).map_err(|source| {
                    CgroupError::SetLimit {
                        file: v1_file,
                        source,
                    }
                })?;
            }
        }
        Ok(())
    }
}
