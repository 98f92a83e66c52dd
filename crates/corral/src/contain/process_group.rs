//! Process-group containment (every Unix).
//!
//! The root is spawned as the leader of a new process group (std keeps its
//! posix_spawn/vfork path for this). The group id is the root's pid, and the
//! root is never reaped before [`release`](Containment::release): an
//! unreaped zombie leader keeps its pid, so no new process (and no new group)
//! can take that number while corral still signals it. No anchor process is
//! needed.
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
}

impl ProcessGroup {
    pub(crate) fn new(tracer: Tracer) -> Self {
        ProcessGroup {
            pgid: None,
            released: false,
            tracer,
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
}

impl Containment for ProcessGroup {
    fn mechanism(&self) -> Mechanism {
        Mechanism::ProcessGroup
    }

    fn prepare(&mut self, cmd: &mut std::process::Command) -> io::Result<()> {
        sys::new_process_group(cmd);
        Ok(())
    }

    fn attach(&mut self, root: &Root) -> io::Result<()> {
        self.pgid = Some(root.id());
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
        sys::group_members(pgid)
    }

    fn release(&mut self, root: &mut Root) -> io::Result<()> {
        if self.released {
            return Ok(());
        }
        // From here on no signal may be sent: the reap below frees the id.
        self.released = true;
        let pid = root.id();
        let res = root.reap();
        self.tracer.record(OsOp::Reaped { pid });
        self.tracer.record(OsOp::Released {
            via: Mechanism::ProcessGroup,
        });
        res
    }
}
