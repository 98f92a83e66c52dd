//! The platform layer: one module per OS family with the same small set of
//! items (`Root`, `PipeEnd`, `Poller`, `pipe`, `spawn`, ...), chosen at
//! compile time.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::path::Path;

#[cfg(target_os = "linux")]
pub(crate) mod linux_proc;
#[cfg(linux_raw)]
pub(crate) mod linux_spawn;
#[cfg(target_os = "linux")]
pub(crate) mod linux_splice;
#[cfg(target_os = "linux")]
pub(crate) mod per_process;
#[cfg(unix)]
pub(crate) mod pty;
#[cfg(unix)]
mod unix;
#[cfg(not(any(unix, windows)))]
mod unsupported;
#[cfg(windows)]
mod windows;

// The contract: what every platform module exports, under the same names.
#[cfg(unix)]
pub(crate) use unix::{pipe, spawn, PipeEnd, Poller, ReadResult, Root};
#[cfg(not(any(unix, windows)))]
pub(crate) use unsupported::{pipe, spawn, PipeEnd, Poller, ReadResult, Root};
#[cfg(windows)]
pub(crate) use windows::{pipe, spawn, PipeEnd, Poller, ReadResult, Root};
// Unix only: process groups, shared descriptors, a pseudo-terminal's
// master; for the async driver, its waker.
#[cfg(target_os = "linux")]
pub(crate) use unix::above_std;
#[cfg(unix)]
pub(crate) use unix::TightSlack;
#[cfg(tokio_unix)]
pub(crate) use unix::WakeCell;
#[cfg(unix)]
pub(crate) use unix::{group_exists, group_members, pty_master, signal_group, SharedFd, SIGCONT};
// Linux only: the root set, signal conversion, the namespace init's status.
#[cfg(target_os = "linux")]
pub(crate) use unix::{descriptors_exhausted, roots, to_rustix, NS_MSG_EXITED};
// Windows only: the exit code of a process the job killed.
#[cfg(windows)]
pub(crate) use windows::JOB_KILL_EXIT_CODE;

/// Blocks SIGPIPE in the calling thread, for corral's own relay threads:
/// their write into a destination whose reader went away must fail with
/// EPIPE, not end a host whose SIGPIPE is at its default action (a C host,
/// a Rust program that resets it). Where the raw layer is missing (other
/// architectures) it does nothing.
#[cfg(target_os = "linux")]
pub(crate) fn block_sigpipe_in_this_thread() {
    #[cfg(linux_raw)]
    linux_spawn::block_sigpipe_in_this_thread();
}

/// Whether a run of `mechanism` can be crash-safe here, asked before every
/// spawn (the keeper is started now if it was not: a root must never run
/// while its keeper is still starting). `Err` says why not.
pub(crate) fn crash_safety_ahead(mechanism: crate::report::Mechanism) -> Result<(), String> {
    use crate::report::Mechanism;
    match mechanism {
        // The namespace's init, the job: nothing to start.
        Mechanism::PidNamespace | Mechanism::JobObject => Ok(()),
        _ => {
            #[cfg(linux_raw)]
            {
                linux_spawn::keeper::ensure()
                    .map_err(|e| format!("the crash-safety keeper could not be started: {e}"))
            }
            #[cfg(not(linux_raw))]
            {
                Err("no crash-safety keeper on this platform".into())
            }
        }
    }
}

/// What one wait of the [`Poller`] sleeps on besides its waker and the
/// root's exit: the run's own pipe ends and, while a termination waits for
/// the tree to empty, the containment's descriptor. Plain values handed
/// down by the lifecycle; the platform layer never asks the containment.
pub(crate) struct Interest<'a> {
    /// The captured outputs worth reading now.
    pub(crate) outputs: [Option<&'a PipeEnd>; 2],
    /// The stdin pipe while bytes are left to write.
    pub(crate) stdin: Option<&'a PipeEnd>,
    /// A descriptor that fires when the tree's population changes.
    #[cfg(unix)]
    pub(crate) tree: Option<(std::os::fd::BorrowedFd<'a>, WakeOn)>,
    /// The caller's own descriptor, watched for readability
    /// (`Running::wait_watching`).
    #[cfg(unix)]
    pub(crate) watch: Option<std::os::fd::BorrowedFd<'a>>,
}

/// What one wait of the [`Poller`] reported (the same on every platform).
#[derive(Default)]
pub(crate) struct Ready {
    /// Which captured outputs have data or end of file (read by the async
    /// driver; the synchronous one reads every stream at each step).
    #[cfg_attr(not(tokio_unix), allow(dead_code))]
    pub(crate) readable: [bool; 2],
    /// The stdin pipe has room.
    pub(crate) stdin_writable: bool,
    /// The containment's own descriptor fired (population changed). Never
    /// set on Windows: membership is checked on the lifecycle's timer (a
    /// job's completion port cannot be waited on with other handles).
    pub(crate) tree_event: bool,
    /// The child's end of the stdin pipe is closed (POLLERR on our end).
    /// Never set on Windows: a closed stdin shows up as a write error.
    pub(crate) stdin_closed: bool,
    /// The caller's watched descriptor is readable. Never set outside Unix:
    /// no descriptor is watched there.
    pub(crate) watched: bool,
    /// The caller's watched descriptor is at its end or failed (hang-up,
    /// error, not open): watching it again would wake at once, forever.
    /// Never set outside Unix.
    pub(crate) watch_gone: bool,
    /// A waker fired (cancel, relay drained).
    #[allow(dead_code)]
    pub(crate) woken: bool,
}

/// How a containment's wake descriptor signals a change.
#[cfg(unix)]
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WakeOn {
    /// POLLPRI (cgroup.events).
    Priority,
    /// POLLIN (an epoll set of pidfds, a pidfd).
    Readable,
}

/// Where the root is born, computed by the containment before the spawn
/// and handed down as plain values: the platform layer never calls back
/// into the containment.
#[cfg(unix)]
#[derive(Default)]
pub(crate) struct Placement<'a> {
    /// Start the root as the leader of a new process group.
    pub(crate) new_group: bool,
    /// A cgroup v2 directory the root may be born in with
    /// `clone3(CLONE_INTO_CGROUP)`, as the leader of a new process group.
    #[cfg(target_os = "linux")]
    pub(crate) cgroup_dir: Option<std::os::fd::BorrowedFd<'a>>,
    /// `cgroup.procs` files the child writes itself into before exec when
    /// it is not born in `cgroup_dir` (the fallback path; v1 hierarchies).
    #[cfg(target_os = "linux")]
    pub(crate) cgroup_procs: Vec<std::os::fd::BorrowedFd<'a>>,
    /// The cgroup's path, for the error when the child cannot enter it.
    #[cfg(target_os = "linux")]
    pub(crate) cgroup_path: Option<&'a Path>,
    /// Variables added to the child's environment after the command's own
    /// (the subreaper tier's tree cookie).
    pub(crate) env: Vec<(OsString, OsString)>,
    /// Elsewhere nothing is borrowed from the containment.
    #[cfg(not(target_os = "linux"))]
    pub(crate) _borrows: std::marker::PhantomData<&'a ()>,
}

/// Where the root is born where no process can be (the `unsupported`
/// layer): nothing.
#[cfg(not(any(unix, windows)))]
#[derive(Default)]
pub(crate) struct Placement<'a> {
    pub(crate) _borrows: std::marker::PhantomData<&'a ()>,
}

/// Where the root is born (Windows): the job it is created in, borrowed
/// from the containment.
#[cfg(windows)]
pub(crate) struct Placement<'a> {
    pub(crate) job: std::os::windows::io::BorrowedHandle<'a>,
}

/// One of the child's standard streams.
pub(crate) enum ChildIo {
    /// The null device.
    Null,
    /// The caller's own stream.
    Inherit,
    /// This handle (a pipe end or a file), moved into the child.
    File(File),
}

/// Everything needed to start the root process.
pub(crate) struct SpawnSpec<'a> {
    pub(crate) program: &'a OsStr,
    pub(crate) args: &'a [OsString],
    pub(crate) env: &'a [(OsString, Option<OsString>)],
    pub(crate) env_clear: bool,
    pub(crate) cwd: Option<&'a Path>,
    pub(crate) stdin: ChildIo,
    pub(crate) stdout: ChildIo,
    pub(crate) stderr: ChildIo,
    /// Start the program with SIGPIPE ignored (else: its default action).
    /// Windows has no SIGPIPE: the field is not read there.
    #[cfg_attr(not(unix), allow(dead_code))]
    pub(crate) sigpipe_ignored: bool,
    pub(crate) setup: &'a crate::spec::ChildSetup,
    /// What is done to the tree if this process dies (the crash-safety
    /// keeper, a PID namespace's init).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) farewell: crate::spec::Farewell,
}

/// Why a spawn failed: the containment could not be set up, or the
/// program could not be started.
pub(crate) enum SpawnError {
    Contain(io::Error),
    Spawn(io::Error),
}
