//! The process-wide switches: functions that change how corral behaves for
//! the whole host process, not for one [`Command`](crate::Command).
//!
//! A library host needs none of them: without any call, every run is
//! contained, bounded and reported as documented. Each one is for a host
//! that knows something about its own process corral cannot guess, so it
//! belongs in the program's `main`, never in a library. The switches proper
//! ([`enable_subreaper`], [`reap_all_orphans`], [`one_shot_process`],
//! [`start_keeper`], [`raise_nofile_limit`]) are called once, early, before
//! the first run; [`reap_orphans_now`] and [`release_cgroup_pool`] when
//! their moment comes; [`one_shot`] is a question.
//!
//! | Switch | What it changes for the whole process | When a host calls it |
//! |---|---|---|
//! | [`enable_subreaper`] (Linux) | the process becomes a child subreaper: every orphaned descendant re-parents to it instead of init, and `auto` containment can pick the subreaper tier where no writable cgroup exists | a host that cannot have a writable cgroup and wants `setsid`/double-fork escapers contained (`corral run` and `corral mcp` always; `corral batch` when a run asks for the subreaper tier) |
//! | [`reap_all_orphans`] (Linux) | every zombie child that is not a run's root is reaped by corral, not only those it can attribute to a run | a host that starts no children other than through corral (the CLI, batch and MCP server do); never one that `wait`s for children of its own |
//! | [`reap_orphans_now`] (Linux) | reaps the zombie orphans the reaping thread would reap, now | a one-shot process (no reaping thread) on each SIGCHLD not from its run's root |
//! | [`one_shot_process`] | no cgroup pool, no orphan-reaping thread, a keeper that polls instead of being woken per run | a process that runs one command and exits soon after (`corral run`) |
//! | [`one_shot`] | nothing: says whether [`one_shot_process`] was called | code that adapts to it |
//! | [`start_keeper`] | the crash-safety keeper is cloned now, in the background, rather than at the first run that needs it | early in `main` of a host whose first run should not wait for the keeper's start |
//! | [`release_cgroup_pool`] | removes the empty cgroups kept for reuse (at most 16, three descriptors each) | before a long idle period, or to count what was pooled |
//! | [`raise_nofile_limit`] (Unix) | the soft `RLIMIT_NOFILE` goes up to the hard limit, for the process and every program it starts | a host that runs many commands at once (what a run holds: see the function) |
//!
//! ```no_run
//! // A host that runs many commands, starts no children of its own and
//! // wants escapers contained without a cgroup (Linux).
//! # #[cfg(target_os = "linux")]
//! # fn main() -> std::io::Result<()> {
//! use corral::process_wide;
//!
//! process_wide::start_keeper();
//! process_wide::enable_subreaper()?;
//! process_wide::reap_all_orphans();
//! process_wide::raise_nofile_limit()?;
//! # Ok(())
//! # }
//! # #[cfg(not(target_os = "linux"))]
//! # fn main() {}
//! ```

#[cfg(target_os = "linux")]
pub use crate::contain::orphans::reap_orphans_now;
#[cfg(target_os = "linux")]
pub use crate::contain::subreaper::{enable_subreaper, reap_all_orphans};
pub use crate::contain::{one_shot, one_shot_process, release_cgroup_pool, start_keeper};
#[cfg(unix)]
pub use crate::error::raise_nofile_limit;
