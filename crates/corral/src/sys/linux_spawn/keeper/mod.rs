//! The keeper: crash safety for the cgroup, subreaper and process-group
//! tiers (Linux, x86_64 and aarch64). A child module of `linux_spawn`
//! (raw-syscall helpers).
//!
//! One small process per corral process, started on the first run that
//! needs it (or earlier, by `corral::start_keeper`), and never waited for:
//! what the host sends before the keeper runs is queued in the socket. A
//! fork (clone3 without `CLONE_VM`, on a stack of its own, all signals
//! blocked, every handler reset) that never execs and issues only raw
//! system calls (no allocation, lock or TLS: it is a fork of a possibly
//! multithreaded host). It starts its own session (a `kill` of corral's
//! process group does not take it along), closes every descriptor but two —
//! a `SOCK_SEQPACKET` socket to the host and a pidfd of the host — and holds,
//! for every live cgroup run, the cgroup's directory descriptor (and, once,
//! the directory it is in, and the host's owner record, whose `flock` it so
//! holds until it exits: see the cgroup tier's `owner`), and for every process-group or subreaper run
//! the tree's cookie (sent before the spawn, so the root is covered before
//! its own registration reaches the keeper) and the root's pidfd, received
//! with `SCM_RIGHTS`, and the pidfds of the subreaper tree's members that a
//! scan saw outside the root's group.
//!
//! When the host dies, by any cause (the pidfd becomes readable; the socket
//! reaching end of file is a second witness), the keeper gives each held
//! tree its run's farewell (see `farewell`): a tree without a grace is
//! killed at once — each held root's process group (see `kill_root`) and
//! each held member, `1` written to `cgroup.kill` of every cgroup it holds
//! (the kernel kills every process in it and below, and only those: a
//! directory descriptor names one cgroup, never a later one with the same
//! name), then every process whose environment carries a held cookie (see
//! `cookie_round`: `setsid` and double-fork escapers, and a root not
//! registered yet); a tree with a grace gets SIGCONT and its run's first
//! signal first (see `first_signals`), and the same SIGKILL once its own
//! grace (at most 10 s) has passed, unless it is gone before, while a second
//! keeper stands by in case this one dies. Then the keeper removes the
//! cgroups' directories (deepest first, retried for up to 2 s while the kill
//! completes), and exits. A run that ends normally unregisters (its
//! descriptors are closed) before the host moves kept leftovers out: a kept
//! process is never killed by the keeper.
//!
//! The table is an anonymous mapping the keeper makes at its start, one
//! 96-byte slot per descriptor it can hold (its soft descriptor limit raised
//! to the hard one, less a reserve; at most [`MAX_SLOTS`]) and as many
//! again for tree cookies (which hold no descriptor, so a cookie never takes
//! a run's place), reserved and not committed; it tells the host its
//! capacity in its first message. The host
//! picks the slot of each registration (a free list), so adding and removing
//! cost the keeper O(1); every run costs it one descriptor (a cgroup's
//! parent directory is sent once). A run past the capacity is not crash-safe
//! (the registration says so).
//!
//! Layout: `protocol.rs` is the message layout shared by both sides (pure,
//! encode and decode, versioned and validated); `client.rs` is the host's side (start, register,
//! unregister, ask whether it is alive); `process.rs` is the keeper process
//! itself (no allocation, raw system calls only).

mod client;
mod process;
mod protocol;

#[cfg(fuzzing)]
pub use protocol::fuzzing;

pub(crate) use client::{
    ensure, pid_of_own_keeper, register, register_cookie, register_member, register_root, set_lazy,
    start_in_background, Registration,
};

/// Most runs one keeper holds, whatever its descriptor limit (the table is
/// reserved, not committed, at this size: 96 bytes a slot).
const MAX_SLOTS: usize = 1 << 20;
/// Descriptors the keeper keeps free for its own work after the host died
/// (`cgroup.kill`, `/proc/<pid>/stat`, the removal walk: at most 11 at
/// once), beyond the socket and the host's pidfd.
const RESERVE_FDS: u64 = 16;
