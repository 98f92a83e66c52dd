//! Containment: the mechanisms that hold a process tree together and the
//! one small interface the lifecycle uses to signal, count and release it.
//!
//! Each mechanism is a typestate of two steps: a [`Containment`] places the
//! spawn and, once the root exists, [`attach`](Containment::attach) turns
//! it into an [`Attached`] tree, which holds the tree's *identity* (a
//! process group pinned by its unreaped leader, a cgroup directory, a job
//! handle) until [`Attached::release`], which consumes it. Every signal
//! goes through that identity, and only an attached tree has one, so no
//! signal can be sent before attach or after release. Platform code lives
//! only below this module and in `sys`.

use std::io;
use std::sync::Arc;

use crate::sys::Root;
use crate::Signal;

#[cfg(target_os = "linux")]
pub(crate) mod cgroup;
#[cfg(windows)]
pub(crate) mod job_object;
#[cfg(target_os = "linux")]
pub(crate) mod orphans;
#[cfg(linux_raw)]
pub(crate) mod pid_namespace;
#[cfg(unix)]
pub(crate) mod process_group;
#[cfg(target_os = "linux")]
pub(crate) mod subreaper;

/// Removes the empty cgroups this process keeps for reuse, and returns how
/// many it removed.
///
/// The cgroup tier (Linux) keeps up to 16 empty cgroups of finished runs
/// (each proven empty, made by this process and locked by it) so that a
/// later run need not create and remove a directory. They hold three
/// descriptors each and are removed when this process dies (by the
/// crash-safety keeper, or by the next corral's cleanup of abandoned
/// cgroups). Call this to remove them now, for example before a long idle
/// period. Runs that follow simply create new ones. Elsewhere: returns 0.
pub fn release_cgroup_pool() -> usize {
    #[cfg(target_os = "linux")]
    {
        cgroup::drain_pool()
    }
    #[cfg(not(target_os = "linux"))]
    {
        0
    }
}

/// Set by [`one_shot_process`].
static ONE_SHOT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Declares that this process runs one command and exits soon after it
/// (`corral run` does), so that it pays only for what one run needs. What a
/// run promises does not change; what changes is what the process sets up
/// for runs that will not come:
///
/// * the cgroup tier keeps no pool: a run's cgroup is removed when the run
///   ends (`rmdir`, tens of microseconds) instead of being kept for a next
///   run, so no inotify watch is set on it. Closing an inotify instance that
///   ever held a watch waits for an SRCU grace period in the kernel (7-19 ms
///   measured here), and that close happened in every process's exit;
/// * no orphan-reaping thread is started (see `reap_all_orphans`): the host
///   calls `reap_orphans_now` (Linux) when SIGCHLD comes from a child that
///   is not the run's root, as `corral run` does; the run's own last pass
///   at its end is left out too (its `/proc` reads make the process's exit
///   cost its parent more than the pass saves; zombies left go to init when
///   the process exits);
/// * a keeper started after this call ([`start_keeper`]) is not woken by
///   each registration: it reads its queue every 50 ms and when the host
///   dies, before it acts, so a short run wakes it not at all (each wake-up
///   could take the CPU from the run on a loaded machine). Crash safety is
///   the same: registrations wait in its socket, and the host's death
///   still wakes it at once;
/// * the process's id is asked of the kernel when needed, not cached in a
///   page kept for that (see `per_process::pid`).
///
/// Call it once, early, before the first run; calling it in a process that
/// then runs many commands only makes those runs slower (no pooling).
/// [`one_shot`] says whether it was called. A one-shot process that will
/// use the cgroup, subreaper or process-group tier also calls
/// [`start_keeper`] first thing.
pub fn one_shot_process() {
    ONE_SHOT.store(true, std::sync::atomic::Ordering::SeqCst);
    #[cfg(target_os = "linux")]
    crate::sys::per_process::ask_every_time();
    #[cfg(linux_raw)]
    crate::sys::linux_spawn::keeper::set_lazy();
}

/// Whether [`one_shot_process`] was called in this process.
pub fn one_shot() -> bool {
    ONE_SHOT.load(std::sync::atomic::Ordering::SeqCst)
}

/// Starts this process's crash-safety keeper now, in the background (Linux
/// x86_64/aarch64; elsewhere it does nothing), so that the first run of the
/// cgroup, subreaper or process-group tier does not wait for it: the clone
/// is made now, while the process is small, and the keeper's first message
/// is read only when the first run registers, by which time it has usually
/// come. Crash safety is the same either way: every run is registered with
/// the keeper before (cgroup) or right after (process group, subreaper) its
/// spawn, and a keeper that failed to start is started again then, or the
/// run says it is not crash-safe. The PID-namespace tier needs no keeper.
pub fn start_keeper() {
    #[cfg(linux_raw)]
    crate::sys::linux_spawn::keeper::start_in_background();
}

/// Tree-wide limits asked for (cgroup containment only).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Limits {
    pub(crate) memory_max: Option<u64>,
    pub(crate) pids_max: Option<u64>,
}

impl Limits {
    pub(crate) fn any(&self) -> bool {
        self.memory_max.is_some() || self.pids_max.is_some()
    }
}

/// The mechanisms are named in reports; the type lives with the report.
pub(crate) use crate::report::Mechanism;

/// Which containment to use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ContainmentChoice {
    /// The strongest mechanism this platform and this process can have; the
    /// report says which one was used and why a stronger one was not.
    #[default]
    Auto,
    /// Exactly this mechanism, or an [`Error::Containment`](crate::Error).
    Only(Mechanism),
}

/// One operation on the OS that concerns the tree's identity, as recorded by
/// a [`Command::trace_ops`](crate::Command::trace_ops) hook. Tests use the
/// record to prove ordering invariants without relying on PID reuse luck.
// Some variants are recorded by the Linux tiers only; without the feature
// `test-util` the type is not exported, so elsewhere they are never built.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum OsOp {
    /// The root was spawned with this pid.
    Spawned {
        /// The root's pid.
        pid: u32,
    },
    /// A signal was sent to the whole tree.
    SignalTree {
        /// Which mechanism carried it.
        via: Mechanism,
        /// The identity used (pgid, cgroup inode, job handle value).
        target: u64,
        /// The signal.
        signal: Signal,
    },
    /// The root's exit was observed (it was not reaped).
    RootExited {
        /// The root's pid.
        pid: u32,
    },
    /// The root was reaped: its pid (and group id) may now be reused.
    Reaped {
        /// The root's pid.
        pid: u32,
    },
    /// The containment identity was released (exactly once per run).
    Released {
        /// Which mechanism.
        via: Mechanism,
    },
    /// A signal was sent to one member of the tree through a pidfd, after
    /// the process that pidfd holds was checked to be that member (its
    /// cgroup, or the start time remembered for it).
    SignalMember {
        /// Which mechanism carried it.
        via: Mechanism,
        /// The member's pid.
        pid: u32,
        /// The signal.
        signal: Signal,
    },
    /// A leftover of a clean exit that the policy keeps was stopped: it was
    /// sent SIGKILL through a pidfd, after the process that pidfd holds was
    /// checked to be the one seen stopped (its start time) (the keep rule:
    /// [`LeftoverPolicy`](crate::LeftoverPolicy)). No tree signal precedes
    /// it.
    KillStopped {
        /// Which mechanism the tree was held by.
        via: Mechanism,
        /// The leftover's pid.
        pid: u32,
    },
    /// Every process on the machine was looked at to find the tree's
    /// members (the process-group tier's scan of /proc, linear in the
    /// machine's processes; the cheaper checks of pinned members are not
    /// recorded).
    MembersScanned {
        /// Which mechanism scanned.
        via: Mechanism,
    },
    /// SIGKILL was sent again through the tree's identity, after the tree's
    /// SIGKILL, to reach what joined it since (a process that keeps
    /// forking).
    KillAgain {
        /// Which mechanism carried it.
        via: Mechanism,
        /// The identity used (as in [`OsOp::SignalTree`]).
        target: u64,
    },
    /// The run's cgroup went back to the pool (empty, never killed), to be
    /// borrowed by a later run of this process.
    CgroupPooled {
        /// The directory's inode.
        inode: u64,
    },
    /// The run's cgroup directory was removed.
    CgroupRemoved {
        /// The directory's inode.
        inode: u64,
    },
    /// The whole tree was stopped (SIGSTOP through its identity) to be
    /// counted right before its SIGKILL (the process-group tier): the scan
    /// that follows finds every member the kill will end, alive and
    /// unreaped. Not one of the report's `signals_sent`.
    TreeStopped {
        /// Which mechanism carried it.
        via: Mechanism,
        /// The identity used (as in [`OsOp::SignalTree`]).
        target: u64,
    },
    /// SIGCONT was sent through the tree's identity right before a graceful
    /// tree signal (process group, subreaper, cgroup tiers), so that a
    /// stopped member is running when that signal arrives. It comes first:
    /// a root that dies of the signal before a SIGCONT sent after it would
    /// orphan its process group while a member is still stopped, and the
    /// kernel would send that member SIGHUP (issue 37). Not one of the
    /// report's `signals_sent`.
    TreeContinued {
        /// Which mechanism carried it.
        via: Mechanism,
        /// The identity used (as in [`OsOp::SignalTree`]).
        target: u64,
    },
    /// The crash-safety keeper holds the tree by its cookie (Linux): if
    /// this process dies from here on, the keeper kills every process that
    /// carries it. Recorded before the spawn in the process-group and
    /// subreaper tiers, so that no moment of the root's life is uncovered.
    KeeperHolds {
        /// Which mechanism's tree.
        via: Mechanism,
    },
}

#[cfg(unix)]
pub(crate) use crate::sys::WakeOn;

/// The crash-safety keeper's hold on a tree by its cookie (the process-group
/// and subreaper tiers, Linux): taken before the spawn, let go at release.
#[cfg(target_os = "linux")]
pub(crate) mod cookie_hold {
    use super::{Mechanism, OsOp, Tracer};

    #[cfg(linux_raw)]
    type Reg = crate::sys::linux_spawn::keeper::Registration;
    #[cfg(not(linux_raw))]
    type Reg = ();

    /// The hold, or why there is none.
    pub(crate) struct CookieHold(Result<Reg, String>);

    impl CookieHold {
        /// Hands `cookie` to this process's keeper (before the spawn).
        pub(crate) fn take(
            cookie: &str,
            via: Mechanism,
            tracer: &Tracer,
            farewell: crate::spec::Farewell,
        ) -> CookieHold {
            #[cfg(linux_raw)]
            let got =
                crate::sys::linux_spawn::keeper::register_cookie(cookie, farewell).map_err(|e| {
                    format!("the crash-safety keeper could not take the tree's cookie: {e}")
                });
            #[cfg(not(linux_raw))]
            let got: Result<Reg, String> = {
                let _ = (cookie, farewell);
                Err("no crash-safety keeper on this platform".to_string())
            };
            if got.is_ok() {
                tracer.record(OsOp::KeeperHolds { via });
            }
            CookieHold(got)
        }

        /// The run's termination started: SIGKILL at once if this process
        /// dies (see [`Attached::terminating`](super::Attached::terminating)).
        pub(crate) fn terminating(&mut self) {
            #[cfg(linux_raw)]
            if let Ok(r) = &mut self.0 {
                r.set_farewell(crate::spec::Farewell::KILL);
            }
        }

        /// Why the tree is not held by its cookie (the hold was never
        /// taken, or the keeper that took it is gone).
        pub(crate) fn lost(&self) -> Option<String> {
            match &self.0 {
                #[cfg(linux_raw)]
                Ok(r) if !r.is_live() => Some(
                    "the crash-safety keeper that held the tree's cookie died during the run; \
                     escapers would outlive corral's own death"
                        .into(),
                ),
                Ok(_) => None,
                Err(why) => Some(why.clone()),
            }
        }
    }
}

/// The trace hook type.
pub(crate) type TraceFn = Arc<dyn Fn(&OsOp) + Send + Sync>;

/// Records operations when a hook is installed; free otherwise.
#[derive(Clone, Default)]
pub(crate) struct Tracer(pub(crate) Option<TraceFn>);

impl Tracer {
    pub(crate) fn record(&self, op: OsOp) {
        if let Some(f) = &self.0 {
            f(&op);
        }
    }

    /// Whether a hook is installed (to skip work done only for a record).
    #[cfg(target_os = "linux")]
    pub(crate) fn enabled(&self) -> bool {
        self.0.is_some()
    }
}

/// A mechanism before the root exists: it places the spawn and then takes
/// hold of the tree. The lifecycle calls, in order: `spawn_root` or
/// `placement` → (spawn) → [`attach`](Containment::attach), which consumes
/// it. Nothing here can signal or count: there is no tree to reach yet, so
/// "no signal before attach" holds by the types. A mechanism dropped
/// before `attach` (the spawn failed) cleans up what it made on its own.
pub(crate) trait Containment: Send {
    /// The mechanism, for reports.
    fn mechanism(&self) -> Mechanism;
    /// Where the child must be born so that it starts inside the
    /// container (plain values for `sys::spawn`; on Windows, the job).
    fn placement(&mut self) -> io::Result<crate::sys::Placement<'_>>;
    /// Starts the root itself instead of `sys::spawn` (the PID-namespace
    /// tier, whose root is the namespace's init). `None`: use the normal
    /// spawn.
    #[cfg(target_os = "linux")]
    fn spawn_root(
        &mut self,
        _spec: &crate::sys::SpawnSpec<'_>,
    ) -> Option<Result<Root, crate::sys::SpawnError>> {
        None
    }
    /// Takes hold of the tree once the root exists (unreaped), consuming
    /// the mechanism: the [`Attached`] it returns is the only thing that
    /// can signal, count or release the tree. On failure the identity is
    /// returned inside [`AttachFailed`], which can only be released.
    fn attach(self: Box<Self>, root: &Root) -> Result<Box<dyn Attached>, AttachFailed>;
}

/// A tree held by its identity, from [`Containment::attach`] until
/// [`release`](Attached::release): any number of `signal`/`members`, then
/// `release`, which consumes it. "Release exactly once" and "no signal
/// after release" hold by the types (nothing is left to call), not by a
/// flag in each mechanism; the root stays unreaped until the release, so
/// every signal before it reaches the tree it was meant for. What the
/// release left behind is counted, if the policy kept it, through the
/// [`Released`] it returns, which cannot signal.
pub(crate) trait Attached: Send {
    /// The mechanism, for reports.
    fn mechanism(&self) -> Mechanism;
    /// Sends `sig` to every member of the tree (SIGCONT first for a graceful
    /// one, so that stopped members can act on it: [`OsOp::TreeContinued`]).
    fn signal(&mut self, sig: Signal) -> io::Result<()>;
    /// Live members of the tree, the root included while it is alive
    /// (zombies are not members).
    fn members(&mut self) -> io::Result<Vec<u32>>;

    /// The live members a clean exit leaves, for the keep rule (after the
    /// root's exit, when the policy keeps them): [`Attached::members`]
    /// unless the tier has a cheaper answer that does not reach further
    /// than what it counts as kept at release.
    fn leftovers(&mut self) -> io::Result<Vec<u32>> {
        self.members()
    }

    /// The run's termination starts (its first signal follows): if this
    /// process dies from now on, the tree is SIGKILLed at once (the
    /// crash-safety keeper's registrations, a PID namespace's init), not
    /// given its farewell (the first signal again, the grace). Best effort.
    fn terminating(&mut self) {}

    /// The process the root stands for when it is not the root itself
    /// (the PID-namespace tier: the root is the namespace's init, the
    /// command its child), while that process lives. `members` lists it;
    /// the lifecycle counts it as the root, never as a member, and lists it
    /// as a survivor once the root's own exit was seen with it still alive
    /// (the init killed, the command frozen).
    fn stand_in(&self) -> Option<u32> {
        None
    }

    /// Whether the synchronous driver should wake shortly before a timer
    /// that may end the run (its deadline) to call
    /// [`warm_up`](Self::warm_up). By default not.
    fn warms_up(&self) -> bool {
        false
    }
    /// Touches what the look right before a termination's first signal
    /// reads (nothing is signalled, listed for the count or changed), so
    /// that look is not the first in a long while: a SIGKILL at the
    /// deadline then lands sooner. By default nothing.
    fn warm_up(&mut self) {}

    /// Whether the tree is stopped ([`stop_to_count`](Self::stop_to_count))
    /// and its members listed right before every SIGKILL, instead of
    /// listed before a termination that starts with SIGKILL (the
    /// process-group tier: see there).
    fn stops_to_count(&self) -> bool {
        false
    }
    /// Stops every member (SIGSTOP through the tree's identity) so that
    /// the next [`members`](Self::members) finds every member the SIGKILL
    /// that follows will end, each still alive and unreaped. Only where
    /// [`stops_to_count`](Self::stops_to_count) says so.
    fn stop_to_count(&mut self) -> io::Result<()> {
        Ok(())
    }
    /// Every live member, listed (and held) right before
    /// [`stop_to_count`](Self::stop_to_count), asked when the root's exit
    /// was not seen: the root may finish an exit it began before the stop,
    /// and a group it leaves orphaned while stopped gets SIGHUP from the
    /// kernel, which can end members before the look after the stop. The
    /// caller watches these before it stops the tree.
    fn look_before_stop(&mut self) -> Vec<u32> {
        Vec::new()
    }
    /// The async driver, about to decide on a tree whose root has exited:
    /// whether to wait before deciding, for a look at the tree that this
    /// tier shares with the other runs that look at the same moment (the
    /// process-group tier's pass of /proc). `true`: it is under way and
    /// `wake` is woken when it is over; the next
    /// [`members`](Self::members) takes it. By default never.
    fn look_ahead(&mut self, wake: &Arc<dyn crate::cancel::Wake>) -> bool {
        let _ = wake;
        false
    }
    /// A look asked for by [`look_ahead`](Self::look_ahead) that the
    /// decision did not take is dropped (never used later, stale).
    fn forget_look(&mut self) {}
    /// A descriptor that becomes ready (POLLPRI) when the tree's population
    /// changes, to wake the lifecycle early while it waits for the tree to
    /// empty.
    #[cfg(unix)]
    fn wake_fd(&self) -> Option<(std::os::fd::BorrowedFd<'_>, WakeOn)> {
        None
    }
    /// Whether the tree is killed if this process dies. By default what
    /// the root says (the keeper holds the root of a process-group or
    /// subreaper run).
    fn crash_safety(&self, root: &Root) -> crate::report::CrashSafety {
        root.crash_safety()
    }
    /// Tree-wide usage and limits hit, read before release.
    fn usage(&self) -> Option<(crate::report::Usage, Vec<crate::report::LimitHit>)> {
        None
    }
    /// Reaps the root (after the last signal) and lets go of the identity,
    /// consuming the tree. Survivors, if any, are left where they are; the
    /// [`Released`] counts them when asked.
    fn release(self: Box<Self>, root: &mut Root) -> Released;
}

/// An attach that failed: why, and the identity as far as the mechanism
/// took hold of it. It cannot signal or count; all it can do is
/// [`release`](AttachFailed::release), once (it is consumed), which kills
/// the root first.
#[must_use]
pub(crate) struct AttachFailed {
    error: io::Error,
    held: Holding,
}

/// What a failed attach still holds.
enum Holding {
    /// The identity, to be released like that of any run.
    Tree(Box<dyn Attached>),
    /// Nothing (the mechanism never had the tree): only the root is reaped.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    Nothing { via: Mechanism, tracer: Tracer },
}

impl AttachFailed {
    /// `error`, with `tree`, the identity the mechanism holds: it is
    /// released, never signalled.
    #[cfg_attr(not(any(linux_raw, windows)), allow(dead_code))]
    pub(crate) fn new(error: io::Error, tree: Box<dyn Attached>) -> AttachFailed {
        AttachFailed {
            error,
            held: Holding::Tree(tree),
        }
    }

    /// `error`, when the mechanism holds nothing of the tree.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) fn holding_nothing(error: io::Error, via: Mechanism, tracer: Tracer) -> Self {
        AttachFailed {
            error,
            held: Holding::Nothing { via, tracer },
        }
    }

    /// Kills the root (through its own handle: it is unreaped, so its pid
    /// is still its own), then reaps it and releases the identity, exactly
    /// once. Returns the attach's error and the release.
    pub(crate) fn release(self, root: &mut Root) -> (io::Error, Released) {
        root.kill();
        let released = match self.held {
            Holding::Tree(tree) => tree.release(root),
            Holding::Nothing { via, tracer } => {
                let pid = root.id();
                let res = root.reap();
                tracer.record(OsOp::Reaped { pid });
                tracer.record(OsOp::Released { via });
                Released::counted(res, Ok(0))
            }
        };
        (self.error, released)
    }
}

/// What a release returns: its own failure, if any, and what counts the
/// live members other than the root that it left in place (asked only when
/// the policy kept them). It holds no way to signal.
#[must_use]
pub(crate) struct Released {
    /// The reap's or the release's failure.
    result: io::Result<()>,
    kept: Kept,
}

/// How a release's leftovers are counted.
enum Kept {
    /// The release looked anyway (before letting go), and counted them.
    Counted(io::Result<usize>),
    /// Counted on demand, after the release (without the identity: only
    /// pids are counted, nothing is signalled).
    Later(Box<dyn FnOnce() -> io::Result<usize>>),
}

impl Released {
    /// A release that counted its leftovers on its way.
    pub(crate) fn counted(result: io::Result<()>, kept: io::Result<usize>) -> Released {
        Released {
            result,
            kept: Kept::Counted(kept),
        }
    }

    /// A release whose leftovers are counted by `count`, when asked.
    #[cfg_attr(not(unix), allow(dead_code))]
    pub(crate) fn count_later(
        result: io::Result<()>,
        count: impl FnOnce() -> io::Result<usize> + 'static,
    ) -> Released {
        Released {
            result,
            kept: Kept::Later(Box::new(count)),
        }
    }

    /// The release's own result and, when `count` (the policy kept the
    /// leftovers), how many live members other than the root it left in
    /// place.
    pub(crate) fn outcome(self, count: bool) -> (io::Result<()>, Option<io::Result<usize>>) {
        let kept = count.then(|| match self.kept {
            Kept::Counted(n) => n,
            Kept::Later(count) => count(),
        });
        (self.result, kept)
    }
}

/// The containment picked for one command, and why a stronger one was not
/// used (when `auto` fell back).
/// How to give corral a cgroup as an unprivileged user, named wherever a
/// fallback is reported.
#[cfg(target_os = "linux")]
const DELEGATE_HINT: &str = "for a cgroup, run corral in a delegated subtree: \
     systemd-run --user --scope -p Delegate=yes corral ...";

pub(crate) struct Selected {
    pub(crate) tree: Box<dyn Containment>,
    pub(crate) note: Option<String>,
}

/// Picks and builds the containment for one command; `farewell` is what
/// the crash-safety keeper does to its tree if this process dies.
pub(crate) fn select(
    choice: ContainmentChoice,
    limits: Limits,
    tracer: Tracer,
    farewell: crate::spec::Farewell,
) -> Result<Selected, crate::Error> {
    let fail = |mechanism: Mechanism, reason: String| crate::Error::containment(mechanism, reason);
    #[cfg(not(unix))]
    let _ = farewell;
    #[cfg(target_os = "linux")]
    {
        let want_cgroup = matches!(
            choice,
            ContainmentChoice::Auto | ContainmentChoice::Only(Mechanism::Cgroup)
        );
        if want_cgroup {
            let made = cgroup::detect()
                .and_then(|h| cgroup::Cgroup::create(&h, limits, tracer.clone(), farewell));
            match made {
                Ok(cg) => {
                    return Ok(Selected {
                        tree: Box::new(cg),
                        note: None,
                    })
                }
                Err(why) if choice == ContainmentChoice::Auto && !limits.any() => {
                    let why = crate::error::chain_text(&why);
                    if subreaper::enabled() {
                        return Ok(Selected {
                            tree: Box::new(subreaper::Subreaper::new(tracer, farewell)),
                            note: Some(format!("cgroup unavailable: {why}; using the subreaper tier ({DELEGATE_HINT})")),
                        });
                    }
                    return Ok(Selected {
                        tree: Box::new(process_group::ProcessGroup::new(tracer, farewell)),
                        note: Some(format!(
                            "cgroup unavailable: {why}; subreaper not enabled in this process: using a process group ({DELEGATE_HINT})"
                        )),
                    });
                }
                Err(why) => return Err(why.into()),
            }
        }
    }
    if limits.any() {
        return Err(fail(
            Mechanism::Cgroup,
            "tree-wide limits need cgroup containment".into(),
        ));
    }
    match choice {
        #[cfg(unix)]
        ContainmentChoice::Auto | ContainmentChoice::Only(Mechanism::ProcessGroup) => {
            Ok(Selected {
                tree: Box::new(process_group::ProcessGroup::new(tracer, farewell)),
                note: None,
            })
        }
        #[cfg(target_os = "linux")]
        ContainmentChoice::Only(Mechanism::Subreaper) => {
            if subreaper::enabled() {
                Ok(Selected {
                    tree: Box::new(subreaper::Subreaper::new(tracer, farewell)),
                    note: None,
                })
            } else {
                Err(fail(
                    Mechanism::Subreaper,
                    "this process is not a child subreaper (call corral::process_wide::enable_subreaper first)"
                        .into(),
                ))
            }
        }
        #[cfg(linux_raw)]
        ContainmentChoice::Only(Mechanism::PidNamespace) => Ok(Selected {
            tree: Box::new(pid_namespace::PidNamespace::new(tracer)),
            note: None,
        }),
        #[cfg(windows)]
        ContainmentChoice::Auto | ContainmentChoice::Only(Mechanism::JobObject) => {
            job_object::select(tracer)
        }
        ContainmentChoice::Only(mechanism) => Err(fail(
            mechanism,
            format!("{mechanism} is not supported on this platform"),
        )),
        #[allow(unreachable_patterns)]
        ContainmentChoice::Auto => Err(fail(
            Mechanism::ProcessGroup,
            "no containment mechanism on this platform".into(),
        )),
    }
}

/// A mechanism that touches no OS object, for the lifecycle's tests: it
/// records what its attached tree is asked, and its release waits for the
/// root's exit (so a root left alive shows as `Release(None)`) and reaps it.
#[cfg(all(test, unix))]
pub(crate) mod fake {
    use std::io;
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use super::{AttachFailed, Attached, Containment, Mechanism, Released};
    use crate::report::CrashSafety;
    use crate::sys::{Placement, Root};
    use crate::{RootStatus, Signal};

    /// What the attached tree was asked, in order.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub(crate) enum Call {
        Signal(Signal),
        Members,
        /// The release, with the root's exit as it saw it.
        Release(Option<RootStatus>),
    }

    pub(crate) type Log = Arc<Mutex<Vec<Call>>>;

    /// The fake before its attach.
    pub(crate) struct Fake {
        pub(crate) log: Log,
        /// The attach fails (handing back the tree, to be released).
        pub(crate) attach_fails: bool,
        /// What the attached tree answers.
        pub(crate) crash_safety: CrashSafety,
    }

    struct Tree {
        log: Log,
        crash_safety: CrashSafety,
    }

    impl Containment for Fake {
        fn mechanism(&self) -> Mechanism {
            Mechanism::ProcessGroup
        }

        fn placement(&mut self) -> io::Result<Placement<'_>> {
            Ok(Placement::default())
        }

        fn attach(self: Box<Self>, _root: &Root) -> Result<Box<dyn Attached>, AttachFailed> {
            let tree = Box::new(Tree {
                log: self.log,
                crash_safety: self.crash_safety,
            });
            if self.attach_fails {
                return Err(AttachFailed::new(io::Error::other("no hold"), tree));
            }
            Ok(tree)
        }
    }

    impl Tree {
        fn note(&self, call: Call) {
            self.log.lock().unwrap().push(call);
        }
    }

    /// The root's exit, waited for up to 10 s (never reaped here).
    pub(crate) fn exit_of(root: &mut Root) -> Option<RootStatus> {
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until {
            root.look_for_exit();
            if let Ok(Some(st)) = root.peek_exit() {
                return Some(st);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        None
    }

    impl Attached for Tree {
        fn mechanism(&self) -> Mechanism {
            Mechanism::ProcessGroup
        }

        fn signal(&mut self, sig: Signal) -> io::Result<()> {
            self.note(Call::Signal(sig));
            Ok(())
        }

        fn members(&mut self) -> io::Result<Vec<u32>> {
            self.note(Call::Members);
            Ok(Vec::new())
        }

        fn crash_safety(&self, _root: &Root) -> CrashSafety {
            self.crash_safety.clone()
        }

        fn release(self: Box<Self>, root: &mut Root) -> Released {
            let exit = exit_of(root);
            self.note(Call::Release(exit));
            Released::counted(root.reap(), Ok(0))
        }
    }

    /// A live root (`sleep 30`), unreaped.
    pub(crate) fn root() -> Root {
        let child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep");
        Root::new(child, crate::spec::Farewell::KILL)
    }
}

#[cfg(test)]
mod tests {
    use super::Released;
    use std::cell::Cell;
    use std::io;
    use std::rc::Rc;

    /// What a release left is counted only when the policy kept it, and a
    /// release's own failure is returned either way.
    #[test]
    fn leftovers_are_counted_only_when_asked() {
        let asked = Rc::new(Cell::new(0));
        let later = |res: io::Result<()>| {
            let asked = asked.clone();
            Released::count_later(res, move || {
                asked.set(asked.get() + 1);
                Ok(2)
            })
        };
        let (res, kept) = later(Ok(())).outcome(false);
        assert!(res.is_ok() && kept.is_none());
        assert_eq!(asked.get(), 0, "not asked: not counted");
        let (res, kept) = later(Err(io::Error::other("reap"))).outcome(true);
        assert!(res.is_err());
        assert_eq!(kept.unwrap().unwrap(), 2);
        assert_eq!(asked.get(), 1);

        let counted = |kept| Released::counted(Ok(()), kept);
        assert!(counted(Ok(3)).outcome(false).1.is_none());
        assert_eq!(counted(Ok(3)).outcome(true).1.unwrap().unwrap(), 3);
        let failed = counted(Err(io::Error::other("procs"))).outcome(true);
        assert!(failed.0.is_ok() && failed.1.unwrap().is_err());
    }

    /// A failed attach hands back a tree that can only be released: the
    /// root is killed first (the release finds it dead of SIGKILL, still
    /// unreaped), the tree is released once and never signalled or asked
    /// for its members, and the attach's error comes back.
    #[cfg(unix)]
    #[test]
    fn a_failed_attach_kills_the_root_then_releases_once() {
        use super::fake::{root, Call, Fake};
        use super::Containment;
        let log = super::fake::Log::default();
        let tree: Box<dyn Containment> = Box::new(Fake {
            log: log.clone(),
            attach_fails: true,
            crash_safety: Default::default(),
        });
        let mut root = root();
        let Err(failed) = tree.attach(&root) else {
            panic!("the fake's attach fails");
        };
        let (e, released) = failed.release(&mut root);
        assert_eq!(e.to_string(), "no hold");
        let (res, kept) = released.outcome(true);
        assert!(res.is_ok());
        assert_eq!(kept.unwrap().unwrap(), 0);
        assert_eq!(
            *log.lock().unwrap(),
            [Call::Release(Some(crate::RootStatus::Signaled(
                crate::Signal::KILL
            )))]
        );
    }

    /// An attach that held nothing of the tree still kills the root and
    /// reaps it, and records the reap and the release, once each, in that
    /// order.
    #[cfg(target_os = "linux")]
    #[test]
    fn an_attach_that_held_nothing_reaps_the_root_and_is_released_once() {
        use super::{AttachFailed, Mechanism, OsOp, Tracer};
        use std::sync::{Arc, Mutex};
        let ops = Arc::new(Mutex::new(Vec::new()));
        let seen = ops.clone();
        let tracer = Tracer(Some(Arc::new(move |op: &OsOp| {
            seen.lock().unwrap().push(op.clone())
        })));
        let mut root = super::fake::root();
        let pid = root.id();
        // Pinned, to see it die whether or not it is reaped meanwhile.
        let pidfd = rustix::process::pidfd_open(
            rustix::process::Pid::from_raw(pid as i32).unwrap(),
            rustix::process::PidfdFlags::empty(),
        )
        .expect("pidfd");
        let failed = AttachFailed::holding_nothing(
            io::Error::other("nothing"),
            Mechanism::PidNamespace,
            tracer,
        );
        let (e, released) = failed.release(&mut root);
        assert_eq!(e.to_string(), "nothing");
        assert!(released.outcome(false).0.is_ok());
        assert_eq!(
            *ops.lock().unwrap(),
            [
                OsOp::Reaped { pid },
                OsOp::Released {
                    via: Mechanism::PidNamespace
                }
            ]
        );
        // Killed (`sleep 30` does not end by itself in 10 s).
        let mut pfd = [rustix::event::PollFd::new(
            &pidfd,
            rustix::event::PollFlags::IN,
        )];
        let ten = rustix::event::Timespec {
            tv_sec: 10,
            tv_nsec: 0,
        };
        assert_eq!(rustix::event::poll(&mut pfd, Some(&ten)).unwrap(), 1);
    }
}
