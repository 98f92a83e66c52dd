//! Spawn into a cgroup at birth, at vfork speed (Linux, x86_64 and aarch64).
//!
//! `clone3(CLONE_INTO_CGROUP | CLONE_VFORK | CLONE_VM | CLONE_PIDFD)`: the
//! child shares the parent's memory (no page tables are copied, so the cost
//! does not grow with the parent's size), is created inside the command's
//! cgroup v2 directory (it never runs a single instruction outside it), and
//! the calling thread sleeps until the child has exec'd or exited.
//!
//! Because the child shares memory with every thread of the parent, it must
//! not allocate, take a lock, touch thread-locals (errno included: it shares
//! the calling thread's TLS pointer), unwind or panic. So everything it needs
//! is built before the clone ([`parent::Prepared`], [`child::ChildArgs`]) and the child only
//! reads it and issues raw syscalls through inline assembly. Signals: no
//! handler of the parent may ever run in the child (it would run parent code
//! on the child's stack, in shared memory). Two guards: every signal is
//! blocked in the calling thread around the clone (the child inherits that
//! mask), and `CLONE_CLEAR_SIGHAND` gives the child a table in which every
//! caught signal is back to the default (Linux 5.5; CLONE_INTO_CGROUP needs
//! 5.7 anyway). The child resets SIGPIPE to the default as std does, and
//! empties its mask just before exec.
//!
//! `sys::spawn` uses this when the containment's placement names a cgroup
//! directory ([`Placement::cgroup_dir`](crate::sys::Placement)), and, without
//! `CLONE_INTO_CGROUP`, when it only asks for a new process group (the
//! process-group and subreaper tiers): std's `posix_spawn` would reset every
//! caught signal in the child one `rt_sigaction` at a time (two calls per
//! signal for a process such as the CLI, which catches about 50), where
//! `CLONE_CLEAR_SIGHAND` does it in the clone. When the kernel or a seccomp
//! filter refuses clone3 (ENOSYS, EPERM, EINVAL, E2BIG) it records that once
//! per process and falls back to std's path (with a pre-exec write to
//! `cgroup.procs` for a cgroup).
//!
//! Differences from std's `Command::spawn` that a caller can see: a script
//! without a `#!` line is not retried through `/bin/sh` (as with
//! `posix_spawnp`); the child's signal mask is empty (std, since Rust 1.66,
//! passes the calling thread's mask on, and so does the fallback).
//!
//! Layout: `parent.rs` builds the description and issues the clone3;
//! `child.rs` is all the clone3 child runs (no allocation), and the one
//! exec step (`exec_with`) it shares with the PID-namespace init's
//! command; `raw.rs` is the typed raw-syscall layer (one wrapper per
//! system call) shared with the two other children that run without exec,
//! the PID-namespace init (`pidns.rs`) and the crash-safety keeper
//! (`keeper/`: `protocol.rs`, `client.rs`, `process.rs`); `arch_x86_64.rs`
//! and `arch_aarch64.rs` hold the only assembly; `stack.rs` maps the
//! children's stacks.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

#[cfg(target_arch = "aarch64")]
#[path = "arch_aarch64.rs"]
mod arch;
#[cfg(target_arch = "x86_64")]
#[path = "arch_x86_64.rs"]
mod arch;
mod child;
pub(crate) use child::{apply_setup, RawSetup};
/// Crash safety for the cgroup tier (a keeper forked without exec).
pub(crate) mod keeper;
mod parent;
/// The PID-namespace spawn (an init forked without exec, raw syscalls).
pub(crate) mod pidns;
mod raw;
/// The sandbox: prepared in the parent, entered by the child.
pub(crate) mod sandbox;
/// The sandbox's seccomp program (one filter, a binary search over the
/// call numbers).
mod seccomp;
mod stack;
/// Denials as evidence: the sandbox's refused `socket(2)` calls, notified
/// to a thread of corral and listed in the report.
pub(crate) mod supervisor;

pub(crate) use parent::spawn;
pub(crate) use raw::{getpgid, statmount};

/// Blocks SIGPIPE in the calling thread (see [`raw::block_sigpipe`]).
pub(crate) fn block_sigpipe_in_this_thread() {
    raw::block_sigpipe();
}

/// Master switch. With `false`, every cgroup spawn takes std's fork +
/// pre-exec path.
const CLONE3_ENABLED: bool = true;

/// Usable bytes of the child's stack. The child runs one small function
/// (a few hundred bytes of frame, also unoptimized); a guard page below it
/// turns an overflow into a fault of the child instead of a write into the
/// parent's memory.
const CHILD_STACK: usize = 64 * 1024;

/// The default search path when the child's environment has no `PATH`
/// (glibc's `execvp`, which std's fork path uses).
const DEFAULT_PATH: &str = "/bin:/usr/bin";

/// How the clone3 path is chosen. Hidden hook for tests and benchmarks, read
/// once per process from `CORRAL_CLONE3`: `off` always uses the fallback,
/// `require` makes an unsupported clone3 an error instead of a fallback.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Auto,
    Off,
    Require,
}

fn mode() -> Mode {
    static MODE: OnceLock<Mode> = OnceLock::new();
    *MODE.get_or_init(|| match std::env::var_os("CORRAL_CLONE3") {
        Some(v) if v == "off" || v == "0" => Mode::Off,
        Some(v) if v == "require" => Mode::Require,
        _ => Mode::Auto,
    })
}

/// Set once clone3 was refused in a way that means "not available here".
static UNSUPPORTED: AtomicBool = AtomicBool::new(false);

/// Whether `sys::spawn` should try [`spawn`] first.
pub(crate) fn usable() -> bool {
    CLONE3_ENABLED && mode() != Mode::Off && !UNSUPPORTED.load(Ordering::Relaxed)
}

/// Why [`spawn`] did not start the program.
#[derive(Debug)]
pub(crate) enum Clone3Error {
    /// clone3 with these flags is not available in this process (old kernel,
    /// seccomp). Recorded: [`usable`] is false from now on. Nothing was
    /// started and the caller's descriptors are untouched: fall back.
    Unsupported,
    /// The description could not be built, or a resource for the spawn
    /// could not be had (NUL byte in an argument, no descriptors left, ...).
    Setup(io::Error),
    /// clone3 itself failed: the cgroup refused the child, or the process
    /// or memory limits were hit.
    Clone(io::Error),
    /// The child was created but could not run the program; this is the
    /// errno of the step that failed (setpgid, chdir, dup, execve). The
    /// child has been reaped.
    Exec(io::Error),
}
