//! PID-namespace containment (Linux, as root or unprivileged through a user
//! namespace): the root is a small init that is pid 1 of a new PID
//! namespace; the command is its child. Nothing in the namespace can leave
//! it (setsid, double fork, reparenting, cgroup moves change nothing), and
//! the init's end is the kernel's proof that the tree is gone: when pid 1
//! exits, the kernel SIGKILLs every other process of the namespace.
//!
//! Identity: the init, unreaped, pinned by its pidfd. SIGKILL goes to the
//! init through that pidfd (the kernel kills the namespace with it); any
//! other signal is written to the init's control pipe and the init sends it
//! to every process of the namespace (SIGCONT, then `kill(-1, sig)`).
//! Members are the processes whose PID namespace is the init's, found in
//! /proc; once the init has exited there are none.
//!
//! Crash safety: the init watches a pidfd of the host process and exits
//! when the host dies, taking the namespace with it (see
//! `sys::linux_spawn::pidns`).

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::linux::fs::MetadataExt;
use std::sync::Arc;

use rustix::process::{Pid, WaitId, WaitIdOptions};

use super::{AttachFailed, Attached, Containment, Mechanism, OsOp, Tracer, WakeOn};
use crate::sys::linux_spawn::pidns::{self, NsError, CTL_DETACH};
use crate::sys::{Root, SpawnError, SpawnSpec};
use crate::Signal;

/// A PID namespace to be: `spawn_root` starts its init, the run's root.
pub(crate) struct PidNamespace {
    tracer: Tracer,
    /// The init (host pid), its pidfd, the control pipe and the namespace's
    /// inode, from the spawn on.
    init: Option<Init>,
}

/// The attached namespace, held by its init.
struct Namespace {
    tracer: Tracer,
    init: Init,
}

struct Init {
    pid: Pid,
    /// The init's pidfd, one descriptor shared with the run's `Root` (it
    /// stays open, naming the same init, until both let go).
    pidfd: Arc<OwnedFd>,
    ctl: Option<OwnedFd>,
    ns: u64,
    /// The command (host pid and pidfd): it is the run's root, so it is not
    /// a member while it lives (the lifecycle counts the root itself).
    command: Option<(u32, OwnedFd)>,
    /// The init runs on these stacks in our memory: unmapped only once it
    /// has exited.
    stacks: Option<pidns::NsStacks>,
}

impl Init {
    /// Lets go of the init's stacks: at once if it has exited, else on a
    /// small thread that waits for its exit (a detached init may outlive
    /// the run by far).
    fn release_stacks(&mut self) {
        let Some(stacks) = self.stacks.take() else {
            return;
        };
        let exited = |fd: &OwnedFd, wait: bool| {
            let mut fds = [rustix::event::PollFd::new(fd, rustix::event::PollFlags::IN)];
            let zero = rustix::event::Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            loop {
                match rustix::event::poll(&mut fds, (!wait).then_some(&zero)) {
                    Ok(n) => return n > 0,
                    Err(rustix::io::Errno::INTR) => continue,
                    Err(_) => return false,
                }
            }
        };
        if exited(&self.pidfd, false) {
            drop(stacks);
            return;
        }
        let fd = self.pidfd.clone();
        // Shared with the thread, so that a thread that cannot be started
        // does not drop (unmap) them on its way out.
        let shared = std::sync::Arc::new(std::sync::Mutex::new(Some(stacks)));
        let theirs = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("corral-ns-stack".into())
            .spawn(move || {
                let stacks = theirs.lock().unwrap_or_else(|e| e.into_inner()).take();
                if exited(&fd, true) {
                    drop(stacks);
                } else {
                    std::mem::forget(stacks);
                }
            });
        if spawned.is_err() {
            let stacks = shared.lock().unwrap_or_else(|e| e.into_inner()).take();
            std::mem::forget(stacks);
        }
    }
}

impl Drop for Init {
    fn drop(&mut self) {
        self.release_stacks();
    }
}

/// The line `key` of `/proc/<pid>/status`, split in fields.
fn status_field(pid: u32, key: &str) -> Option<Vec<u32>> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix(key))?;
    Some(
        line.split_whitespace()
            .filter_map(|f| f.parse().ok())
            .collect(),
    )
}

/// Finds and pins the command: the init's child whose pid inside the
/// namespace is `inner` (a child that has already exited is still listed
/// as a zombie until the init reaps it; if it was reaped, nothing is
/// pinned and the command is simply not excluded).
fn pin_command(init: u32, inner: u32) -> Option<(u32, OwnedFd)> {
    let kids = std::fs::read_to_string(format!("/proc/{init}/task/{init}/children")).ok()?;
    for c in kids
        .split_whitespace()
        .filter_map(|c| c.parse::<u32>().ok())
    {
        let is_it = |c: u32| {
            status_field(c, "NSpid:").is_some_and(|f| f.last() == Some(&inner))
                && status_field(c, "PPid:").is_some_and(|f| f.first() == Some(&init))
        };
        if !is_it(c) {
            continue;
        }
        let fd = rustix::process::pidfd_open(
            Pid::from_raw(c as i32)?,
            rustix::process::PidfdFlags::empty(),
        )
        .ok()?;
        // Checked again now that the pidfd pins a process.
        return is_it(c).then_some((c, fd));
    }
    None
}

/// The live descendants of the namespace's init `me`.
fn descendants(me: u32) -> Vec<u32> {
    // Every process of the namespace descends from its init (orphans
    // re-parent to it; nothing inside can join from outside), so the
    // init's descendants are the members: a walk as large as the tree,
    // not the system. Pids are only counted here, never signalled, so a
    // pid reused during the walk cannot misdirect anything. The command
    // is listed too while it lives (see `stand_in`: the lifecycle counts
    // it as the root, not as a member).
    walk(me, children_of, |c| {
        crate::sys::linux_proc::stat_of(c).is_some_and(|st| !st.is_dead())
    })
}

/// The children of every thread of `p` (none once it is gone).
fn children_of(p: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else {
        return out;
    };
    let mut buf = String::new();
    for t in tasks.flatten() {
        buf.clear();
        let path = t.path().join("children");
        if let Ok(mut f) = std::fs::File::open(path) {
            use std::io::Read;
            let _ = f.read_to_string(&mut buf);
        }
        out.extend(buf.split_whitespace().filter_map(|c| c.parse::<u32>().ok()));
    }
    out
}

/// The walk down from the init `me` (`children` lists a process's
/// children, `alive` tells a live one from a zombie), then the init's
/// children read again, and what is new walked, until a read adds nothing.
/// Each list is read once, at its own moment: a process re-parented to the
/// init while the walk runs (its parent died after the init's list was
/// read, before its own list was) is in neither list the walk read. It is
/// in the init's list read after (every orphan of the namespace goes to
/// the init), so the walk ends only on a read of the init's list that
/// finds nothing it has not walked: a member missed, the tree was taken
/// for empty (no SIGKILL after the grace; a return before the tree was
/// gone) and its death never counted (the soak, #37).
fn walk(
    me: u32,
    mut children: impl FnMut(u32) -> Vec<u32>,
    alive: impl Fn(u32) -> bool,
) -> Vec<u32> {
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut stack = vec![me];
    loop {
        while let Some(p) = stack.pop() {
            if seen.len() > 1 << 20 {
                return out;
            }
            for c in children(p) {
                if c != me && seen.insert(c) {
                    stack.push(c);
                    if alive(c) {
                        out.push(c);
                    }
                }
            }
        }
        let late: Vec<u32> = children(me)
            .into_iter()
            .filter(|&c| c != me && !seen.contains(&c))
            .collect();
        if late.is_empty() || seen.len() > 1 << 20 {
            return out;
        }
        for c in late {
            seen.insert(c);
            stack.push(c);
            if alive(c) {
                out.push(c);
            }
        }
    }
}

impl PidNamespace {
    pub(crate) fn new(tracer: Tracer) -> PidNamespace {
        PidNamespace { tracer, init: None }
    }
}

impl Namespace {
    fn init_exited(&self) -> bool {
        matches!(
            rustix::process::waitid(
                WaitId::Pid(self.init.pid),
                WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT,
            ),
            Ok(Some(_)) | Err(_)
        )
    }
}

/// The kernel refused a new PID namespace: the step, the OS error (kept as
/// the source) and what to change.
#[derive(Debug, thiserror::Error)]
#[error("the kernel refused a new PID namespace ({step}: {source}); {hint}")]
struct Refused {
    step: &'static str,
    hint: &'static str,
    #[source]
    source: io::Error,
}

/// Why the kernel refused, and what to change, as an error of the same
/// kind whose source is the OS error.
fn refused(e: io::Error, step: &'static str) -> io::Error {
    let hint = match e.raw_os_error() {
        Some(libc_enospc) if libc_enospc == linux_raw_sys::errno::ENOSPC as i32 => {
            "the user or PID namespace limit is reached or set to 0: raise the sysctl \
             user.max_user_namespaces (or user.max_pid_namespaces)"
        }
        Some(x)
            if x == linux_raw_sys::errno::EPERM as i32
                || x == linux_raw_sys::errno::EACCES as i32 =>
        {
            "unprivileged user namespaces are denied here: check the sysctl \
             kernel.unprivileged_userns_clone (Debian), an LSM policy such as \
             AppArmor's kernel.apparmor_restrict_unprivileged_userns (Ubuntu 23.10+), \
             or a container's seccomp profile; or run as root"
        }
        Some(x)
            if x == linux_raw_sys::errno::ENOSYS as i32
                || x == linux_raw_sys::errno::EINVAL as i32 =>
        {
            "this kernel lacks clone3 with namespaces (Linux 5.5 or later is needed)"
        }
        _ => "use --containment cgroup or subreaper instead",
    };
    io::Error::new(
        e.kind(),
        Refused {
            step,
            hint,
            source: e,
        },
    )
}

impl Containment for PidNamespace {
    fn mechanism(&self) -> Mechanism {
        Mechanism::PidNamespace
    }

    fn placement(&mut self) -> io::Result<crate::sys::Placement<'_>> {
        // `spawn_root` always answers; `sys::spawn` is never used.
        Err(io::Error::other(
            "the PID namespace tier spawns its own root",
        ))
    }

    fn spawn_root(&mut self, spec: &SpawnSpec<'_>) -> Option<Result<Root, SpawnError>> {
        Some(match pidns::spawn(spec) {
            Ok(child) => {
                let ns = std::fs::metadata(format!("/proc/{}/ns/pid", child.pid.as_raw_nonzero()))
                    .map(|m| m.st_ino())
                    .unwrap_or(0);
                let init_pid = child.pid.as_raw_nonzero().get() as u32;
                let command = pin_command(init_pid, child.inner);
                // One descriptor for the init, shared (it was duplicated:
                // one more per command).
                let pidfd = Arc::new(child.pidfd);
                self.init = Some(Init {
                    pid: child.pid,
                    pidfd: pidfd.clone(),
                    ctl: Some(child.ctl),
                    ns,
                    command,
                    stacks: child.stacks,
                });
                Ok(Root::from_ns_init(child.pid, pidfd, child.status))
            }
            Err(NsError::Refused(e, step)) => Err(SpawnError::Contain(refused(e, step))),
            Err(NsError::Setup(e) | NsError::Exec(e)) => Err(SpawnError::Spawn(e)),
        })
    }

    /// Fails if the namespace of the init could not be read (the identity,
    /// the init, is then released, never signalled).
    fn attach(self: Box<Self>, _root: &Root) -> Result<Box<dyn Attached>, AttachFailed> {
        let PidNamespace { tracer, init } = *self;
        let Some(init) = init else {
            // `placement` refuses: every root of this tier comes from
            // `spawn_root`, which keeps its init.
            return Err(AttachFailed::holding_nothing(
                io::Error::other("the root is not the init of a PID namespace"),
                Mechanism::PidNamespace,
                tracer,
            ));
        };
        let unread = init.ns == 0;
        let held = Box::new(Namespace { tracer, init });
        if unread {
            return Err(AttachFailed::new(
                io::Error::other("could not read the namespace of the init"),
                held,
            ));
        }
        Ok(held)
    }
}

impl Attached for Namespace {
    fn mechanism(&self) -> Mechanism {
        Mechanism::PidNamespace
    }

    /// The init exits at once (the kernel kills the namespace) if this
    /// process dies from now on.
    fn terminating(&mut self) {
        if let Some(ctl) = self.init.ctl.as_ref() {
            let _ = pidns::send_ctl(ctl, pidns::CTL_TERMINATING);
        }
    }

    fn signal(&mut self, sig: Signal) -> io::Result<()> {
        let init = &self.init;
        self.tracer.record(OsOp::SignalTree {
            via: Mechanism::PidNamespace,
            target: init.pid.as_raw_nonzero().get() as u64,
            signal: sig,
        });
        if sig == Signal::KILL {
            // The init dies and the kernel kills the whole namespace.
            return match rustix::process::pidfd_send_signal(
                &init.pidfd,
                rustix::process::Signal::KILL,
            ) {
                Ok(()) | Err(rustix::io::Errno::SRCH) => Ok(()),
                Err(e) => Err(e.into()),
            };
        }
        let Some(ctl) = init.ctl.as_ref() else {
            return Ok(());
        };
        // A gone init took the namespace with it.
        pidns::send_ctl(ctl, sig.as_raw() as u8).map(|_| ())
    }

    fn members(&mut self) -> io::Result<Vec<u32>> {
        if self.init_exited() {
            return Ok(Vec::new());
        }
        Ok(descendants(self.init.pid.as_raw_nonzero().get() as u32))
    }

    /// The command: the root (the init) stands for it while the init runs;
    /// once the init is gone (killed) and the command still lives (a
    /// process that cannot be killed: frozen by a cgroup v1 freezer, in
    /// uninterruptible sleep), it is a survivor like any other. Once its
    /// pidfd reports its exit, its pid may belong to someone else: `None`.
    fn stand_in(&self) -> Option<u32> {
        let (pid, fd) = self.init.command.as_ref()?;
        let mut fds = [rustix::event::PollFd::new(fd, rustix::event::PollFlags::IN)];
        let zero = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        let exited = rustix::event::poll(&mut fds, Some(&zero)).map_or(true, |n| n > 0);
        (!exited).then_some(*pid)
    }

    fn wake_fd(&self) -> Option<(BorrowedFd<'_>, WakeOn)> {
        Some((self.init.pidfd.as_fd(), WakeOn::Readable))
    }

    /// The init kills the namespace when this process dies.
    fn crash_safety(&self, _root: &Root) -> crate::report::CrashSafety {
        crate::report::CrashSafety::Held
    }

    /// The leftovers are counted when asked, through the init's pidfd:
    /// a detached init lives on while its namespace holds processes (and
    /// its pid is not reused while it lives); once it exited, the
    /// namespace is empty.
    fn release(mut self: Box<Self>, root: &mut Root) -> super::Released {
        // Survivors (kept leftovers) are left where they are: the init
        // stops watching corral and waits for the namespace to empty.
        if let Some(ctl) = self.init.ctl.take() {
            let _ = pidns::send_ctl(&ctl, CTL_DETACH);
        }
        let pid = root.id();
        let res = root.reap();
        self.tracer.record(OsOp::Reaped { pid });
        self.tracer.record(OsOp::Released {
            via: Mechanism::PidNamespace,
        });
        let (me, pidfd) = (
            self.init.pid.as_raw_nonzero().get() as u32,
            self.init.pidfd.clone(),
        );
        super::Released::count_later(res, move || {
            let mut fds = [rustix::event::PollFd::new(
                &*pidfd,
                rustix::event::PollFlags::IN,
            )];
            let zero = rustix::event::Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            let exited = rustix::event::poll(&mut fds, Some(&zero)).map_or(true, |n| n > 0);
            Ok(if exited {
                0
            } else {
                descendants(me)
                    .into_iter()
                    .filter(|&p| p != pid && !crate::sys::linux_proc::doomed(p))
                    .count()
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::walk;
    use std::collections::HashMap;

    /// Lists read in turn: each call for a pid returns its next list (the
    /// last one again once they run out).
    fn scripted(lists: &[(u32, &[&[u32]])]) -> impl FnMut(u32) -> Vec<u32> {
        let mut left: HashMap<u32, Vec<Vec<u32>>> = lists
            .iter()
            .map(|(p, ls)| (*p, ls.iter().rev().map(|l| l.to_vec()).collect()))
            .collect();
        move |p| match left.get_mut(&p) {
            Some(ls) if ls.len() > 1 => ls.pop().unwrap_or_default(),
            Some(ls) => ls.last().cloned().unwrap_or_default(),
            None => Vec::new(),
        }
    }

    #[test]
    fn a_member_re_parented_to_the_init_during_the_walk_is_found() {
        // init 1, the command 2 with children 3 and 4. The init's list is
        // read ([2]); then 2 dies and 3 and 4 go to the init, before 2's
        // list is read (empty): only the init's list read again has them.
        let children = scripted(&[(1, &[&[2], &[3, 4]]), (2, &[&[]]), (3, &[&[5]])]);
        let mut got = walk(1, children, |p| p != 2);
        got.sort_unstable();
        assert_eq!(got, vec![3, 4, 5]);
    }

    #[test]
    fn a_steady_tree_is_walked_once_and_the_init_read_twice() {
        let mut reads: Vec<u32> = Vec::new();
        let tree: HashMap<u32, Vec<u32>> = [(1, vec![2]), (2, vec![3, 4]), (4, vec![5])]
            .into_iter()
            .collect();
        let mut got = walk(
            1,
            |p| {
                reads.push(p);
                tree.get(&p).cloned().unwrap_or_default()
            },
            |_| true,
        );
        got.sort_unstable();
        assert_eq!(got, vec![2, 3, 4, 5]);
        assert_eq!(reads.iter().filter(|&&p| p == 1).count(), 2, "{reads:?}");
        assert_eq!(reads.len(), 6, "{reads:?}");
    }
}
