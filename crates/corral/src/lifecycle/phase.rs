//! The phases of a run and the decision that moves between them.
//!
//! ```text
//! Supervising ──deadline, cancel, output held, leftovers to kill──┐
//!     │                                              first signal │
//!     │ clean exit                         ┌─── with a grace ◄────┤
//!     ▼                                    ▼                      │ SIGKILL first
//!   Over ◄── tree empty ── Grace ──kill_at: SIGKILL──► Confirming ◄┘
//!     ▲                                                   │ ▲ deaths still
//!     │                                                   └─┘ happening
//!     └──── tree empty, or window over with no progress: survivors
//! ```
//!
//! A clean exit whose leftovers are kept goes through [`keep_rule`]: with a
//! leftover stopped (it is sent SIGKILL) or dying, the run waits before
//! the kept ones are counted:
//!
//! ```text
//! Supervising ──clean exit, kept, one stopped or dying──► Settling
//!                                                           │ none stopped or dying,
//!                                                           ▼ or the window over
//!                                                         Over (kept counted)
//! ```
//!
//! ("deadline" includes the idle timeout, and the output limit is one more
//! reason to terminate: see [`Reason`].)
//!
//! [`decide`] is pure: from the phase, what was observed, the clock and
//! the run's [`Policy`] it computes the next phase and the [`Action`]s to
//! take. It sends nothing itself. What is expensive or has to be asked of
//! the containment (the members, who holds the output) it asks through
//! [`Probe`], only when the decision needs the answer, in the order the
//! effects must happen (a membership check comes before the signal it
//! decides). The lifecycle ([`super::Life`]) gathers the observations,
//! answers the probe with the real tree and carries the actions out; the
//! unit tests below answer it with fakes and drive the clock by hand.

use std::time::{Duration, Instant};

use crate::report::RootStatus;
use crate::spec::{LeftoverPolicy, MaybeSpan, Span};
use crate::Signal;

/// First and longest interval between membership checks while terminating.
pub(super) const CHECK_FIRST: Duration = Duration::from_micros(500);
pub(super) const CHECK_MAX: Duration = Duration::from_millis(10);
/// After the wait delay, output still has a writer, no process of the tree
/// holds it, but a fork of the host does (another thread's spawn between
/// `fork` and `exec` holds a copy of every descriptor for a moment): it is
/// given this long to let go before the output counts as held. (Where the
/// holders cannot be seen, not on Linux, any holder outside the tree is.)
pub(super) const FOREIGN_HOLD: Duration = Duration::from_millis(200);
/// After the wait delay, with every writer of the output gone (nothing
/// holds it: what is left is output already written, still being read or
/// relayed), how long corral keeps draining before it ends the run anyway
/// (a relay consumer that does not read must not hold the return).
pub(super) const DRAIN_LIMIT: Duration = Duration::from_secs(1);

/// The confirm window stretches, while the tree is still dying, to at most
/// this many times its length (from the SIGKILL).
pub(super) const CONFIRM_STRETCH: u32 = 10;
/// ... and to at least this (a short window must not turn a tree that dies
/// slowly on a loaded machine into survivors).
pub(super) const CONFIRM_LIMIT_MIN: Duration = Duration::from_secs(5);
/// A tree whose every member is dying and that still loses members is
/// waited for past the limit: the limit then counts from the last death
/// seen, up to this many times its length from the SIGKILL (hundreds of
/// processes sent SIGKILL on two busy cores, or a host that was not
/// scheduled for seconds, die over more than one limit).
pub(super) const CONFIRM_CAP: u32 = 6;
/// A look at a dying tree this much later than it was due (the host was
/// not scheduled: a stalled VM, an overloaded machine) says nothing about
/// whether the tree is stuck, since it did not run either: the look after
/// it decides.
pub(super) const OVERSLEPT: Duration = Duration::from_millis(250);

/// Why the tree is being terminated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reason {
    /// The deadline passed.
    TimedOut,
    /// No output on a seen stream for the idle timeout.
    Idle,
    /// The output passed its limit.
    OutputLimit,
    Cancelled,
    OutputHeld,
    /// The root exited cleanly; the policy says its leftovers die.
    Leftovers,
}

/// When the tree is looked at next while terminating.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Check {
    pub(super) next: Instant,
    pub(super) interval: Duration,
}

impl Check {
    fn first(now: Instant) -> Check {
        Check {
            next: now + CHECK_FIRST,
            interval: CHECK_FIRST,
        }
    }

    /// The next check after one at `now`: the interval doubles up to
    /// `CHECK_MAX`.
    fn after(self, now: Instant) -> Check {
        Check {
            next: now + self.interval,
            interval: (self.interval * 2).min(CHECK_MAX),
        }
    }
}

/// A count of members in 4 bytes whose `Option` is 4 bytes too (kept as
/// one more than the count, never zero): with the phase's `Reason` it
/// fills what was padding, and `Phase` is 88 bytes, not 96 (figure 5).
/// Saturates at `u32::MAX - 1` members, which no tree reaches (Linux's
/// `pid_max` is at most 4 million).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Count(std::num::NonZeroU32);

impl Count {
    pub(super) fn new(n: usize) -> Count {
        Count(std::num::NonZeroU32::MIN.saturating_add(u32::try_from(n).unwrap_or(u32::MAX)))
    }

    pub(super) fn get(self) -> usize {
        (self.0.get() - 1) as usize
    }
}

/// Where a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// No termination decided: reading output, waiting for the root, the
    /// deadline, a cancellation or the end of the wait delay.
    Supervising {
        /// The wait delay ended with output open but no writer left:
        /// draining since then (bounded by `DRAIN_LIMIT`).
        draining_since: Option<Instant>,
        /// The wait delay ended with output held by a fork of the host, not
        /// by the tree: it counts as held from this time on.
        foreign_hold_until: Option<Instant>,
    },
    /// The first signal was sent; SIGKILL is due at `kill_at` unless the
    /// tree is empty first.
    Grace {
        reason: Reason,
        kill_at: Instant,
        check: Check,
    },
    /// SIGKILL was sent; the tree must be empty by `until`, else the
    /// survivors are reported. While deaths are still happening the window
    /// stretches (see [`confirm`]), never past `limit`.
    Confirming {
        reason: Reason,
        until: Instant,
        /// The end of the window for a tree that is dying but no longer
        /// shrinking: the SIGKILL plus [`Policy::confirm_limit`] at first,
        /// then the last death seen plus that, never past `cap`.
        limit: Instant,
        /// The hard end: the SIGKILL plus `CONFIRM_CAP` limits.
        cap: Instant,
        /// How many members the last look found (`None` before the first).
        left: Option<Count>,
        check: Check,
    },
    /// A clean exit whose leftovers are kept, some of which the keep rule
    /// ([`keep_rule`]) does not keep as they are: the stopped ones were sent
    /// SIGKILL, and what is dying (those, or members the kernel hung up
    /// when the root's exit orphaned their group) is let die before the
    /// kept ones are counted, until `until` at the latest.
    Settling { until: Instant, check: Check },
    /// Nothing more to decide: release and report. `reason` is `None` for
    /// a clean exit whose leftovers (if any) were kept.
    Over { reason: Option<Reason> },
}

impl Phase {
    pub(super) const START: Phase = Phase::Supervising {
        draining_since: None,
        foreign_hold_until: None,
    };

    pub(super) fn is_over(&self) -> bool {
        matches!(self, Phase::Over { .. })
    }

    /// Windows has no tree descriptor to watch while terminating.
    #[cfg_attr(windows, allow(dead_code))]
    pub(super) fn is_terminating(&self) -> bool {
        matches!(self, Phase::Grace { .. } | Phase::Confirming { .. })
    }

    /// Why the tree was (or is being) terminated, if it was.
    pub(super) fn reason(&self) -> Option<Reason> {
        match *self {
            Phase::Supervising { .. } | Phase::Settling { .. } => None,
            Phase::Grace { reason, .. } | Phase::Confirming { reason, .. } => Some(reason),
            Phase::Over { reason } => reason,
        }
    }

    /// Something happened to the tree (its descriptor fired, the root
    /// exited): a termination looks at it at once.
    /// Whether [`decide`] will now list the tree's members, for a root
    /// that has exited: a clean exit (every captured stream at its end),
    /// or a termination whose check is due. (A hint for sharing the look:
    /// `decide` asks what it needs anyway, and a look it did not take is
    /// dropped.)
    pub(super) fn looks_at_tree(&self, seen: &Observed, now: Instant) -> bool {
        if seen.root.is_none() {
            return false;
        }
        match self {
            Phase::Supervising { .. } => seen.open == 0 && !seen.over_limit,
            Phase::Grace { check, .. }
            | Phase::Confirming { check, .. }
            | Phase::Settling { check, .. } => now >= check.next,
            Phase::Over { .. } => false,
        }
    }

    pub(super) fn check_now(&mut self, now: Instant) {
        if let Phase::Grace { check, .. }
        | Phase::Confirming { check, .. }
        | Phase::Settling { check, .. } = self
        {
            check.next = now;
        }
    }

    /// When the decision may change with no event: the next timer.
    pub(super) fn next_timer(
        &self,
        root_exit_at: Option<Instant>,
        last_output: Option<Instant>,
        policy: &Policy,
    ) -> Option<Instant> {
        match *self {
            Phase::Grace { check, .. }
            | Phase::Confirming { check, .. }
            | Phase::Settling { check, .. } => Some(check.next),
            Phase::Over { .. } => None,
            Phase::Supervising {
                draining_since,
                foreign_hold_until,
            } => {
                let wait = match (draining_since, foreign_hold_until) {
                    (Some(d), _) => Some(later(d, DRAIN_LIMIT)),
                    (None, Some(f)) => Some(f),
                    (None, None) => root_exit_at.map(|e| later(e, policy.wait_delay.get())),
                };
                [policy.deadline, policy.idle_at(last_output), wait]
                    .into_iter()
                    .flatten()
                    .min()
            }
        }
    }
}

/// The settings the decision depends on, fixed for the run.
#[derive(Debug, Clone, Copy)]
pub(super) struct Policy {
    pub(super) deadline: Option<Instant>,
    pub(super) wait_delay: Span,
    pub(super) grace: Span,
    pub(super) signal: Signal,
    /// Nothing is sent when a timer fires (the deadline, the idle timeout,
    /// an expiry): the grace runs from then, SIGKILL at its end; every
    /// other termination without a signal of its own is SIGKILL at once.
    pub(super) silent: bool,
    pub(super) confirm_window: Span,
    /// The most the confirm window may stretch to, from the SIGKILL, while
    /// the tree is still visibly dying (at least `confirm_window`).
    pub(super) confirm_limit: Span,
    pub(super) leftovers: LeftoverPolicy,
    /// The containment stops the tree and looks at it right before every
    /// SIGKILL ([`Action::StopAndCount`]): stopped, the tree can neither
    /// grow nor lose a member to the kill, so that look watches every
    /// member the kill will end before anyone can reap it (the killed
    /// count is exact). A termination without grace then looks at nothing
    /// before it (a look at the live tree would be wasted).
    pub(super) stop_to_count: bool,
    /// No output seen for this long terminates the run.
    pub(super) idle_timeout: MaybeSpan,
    /// The spawn (or `Running::start_now`): the idle timer's start, and
    /// the run's clock, from which the report's timings count.
    pub(super) started: Instant,
}

impl Policy {
    /// When the idle timeout fires, with output last seen at `last_output`
    /// (`None`: none since the spawn).
    pub(super) fn idle_at(&self, last_output: Option<Instant>) -> Option<Instant> {
        let idle = self.idle_timeout.get()?;
        let from = last_output.map_or(self.started, |t| t.max(self.started));
        Some(later(from, idle))
    }
}

/// What the lifecycle saw this step (cheap to gather).
#[derive(Debug, Clone, Copy)]
pub(super) struct Observed {
    /// How the root ended, once it did.
    pub(super) root: Option<RootStatus>,
    /// When its exit was seen.
    pub(super) root_exit_at: Option<Instant>,
    /// Captured streams still open on corral's side.
    pub(super) open: usize,
    /// `Some(first signal)` once the run was cancelled.
    pub(super) cancel: Option<Option<Signal>>,
    /// That cancellation is the deadline come early (an expiry).
    pub(super) expired: bool,
    /// When output was last seen on a seen stream (`None`: none yet).
    pub(super) last_output: Option<Instant>,
    /// A byte past the output limit was seen.
    pub(super) over_limit: bool,
}

/// The questions the decision may ask about the tree and the output;
/// asked only when the answer matters.
pub(super) trait Probe {
    /// The live members, the root included while it has not exited (a
    /// membership check: it may signal what appeared since a termination
    /// started, as the containment does).
    fn members(&mut self) -> Vec<u32>;
    /// Whether some captured stream still has a writer.
    fn output_held(&mut self) -> bool;
    /// Whether a live member of the tree has such a stream open.
    fn tree_holds_output(&mut self) -> bool;
    /// Whether a fork of the host that has not exec'd yet holds it.
    fn host_fork_holds_output(&mut self) -> bool;
    /// Whether every one of these members is certain to be dying: SIGKILL
    /// pending, already exiting, or a zombie awaiting its reaper (asked
    /// only once the confirm window is over, so that a tree that dies
    /// late under load is not reported as survivors).
    fn all_dying(&mut self, members: &[u32]) -> bool;
    /// The live members other than the root, each as [`keep_rule`] sees
    /// it (asked only when the policy keeps the leftovers of a clean exit).
    fn leftovers(&mut self) -> Vec<Leftover>;
}

/// What [`keep_rule`] sees of one leftover.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Seen {
    /// Running or sleeping (anything but the two below).
    Running,
    /// Stopped by a signal (`T`): no one continues it once corral is gone.
    Stopped,
    /// Certain to die: exiting, SIGKILL pending, or a signal pending that
    /// ends it as soon as it runs (the kernel's SIGHUP to an orphaned group
    /// with a stopped member, which a continued member has not taken yet).
    /// (Only Linux reads it; elsewhere every leftover is `Running`.)
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    Dying,
}

/// One live member other than the root, when its run's leftovers are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Leftover {
    pub(super) pid: u32,
    pub(super) seen: Seen,
}

/// What the keep rule does with a clean exit's leftovers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Keeping {
    /// Stopped leftovers: sent SIGKILL and counted as killed, never kept.
    pub(super) kill: Vec<u32>,
    /// Some leftover is stopped or dying: the kept ones are counted only
    /// once those are gone.
    pub(super) settle: bool,
}

/// Which leftovers "keep" keeps: every one that runs. A stopped one is
/// killed: nothing continues it once corral is gone, and when corral's
/// exit orphans its process group (corral, a child subreaper, is the
/// parent of every orphan of the tree; a PID namespace's init is corral's
/// child) the kernel sends SIGHUP then SIGCONT to the whole group because
/// it has a stopped member (POSIX's orphaned-group rule), which ends the
/// members that do not handle SIGHUP, the running ones too. With no
/// stopped member left, the rule cannot fire on corral's exit. One that is
/// dying is neither kept nor killed (by corral): the kept ones are counted
/// once it is gone.
pub(super) fn keep_rule(leftovers: &[Leftover]) -> Keeping {
    let kill: Vec<u32> = leftovers
        .iter()
        .filter(|l| l.seen == Seen::Stopped)
        .map(|l| l.pid)
        .collect();
    let settle = leftovers.iter().any(|l| l.seen != Seen::Running);
    Keeping { kill, settle }
}

/// An effect the decision asks for, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Action {
    /// Send this signal to the whole tree.
    Signal(Signal),
    /// The root exited cleanly and its leftovers are kept: count them.
    CountKept,
    /// Stop the whole tree and look at its members, right before the
    /// SIGKILL that follows (`Policy::stop_to_count`): each is watched for
    /// the killed count before the kill can end it.
    StopAndCount,
    /// The keep rule's stopped leftovers: SIGKILL to each (through a pidfd,
    /// once it is checked to be the process seen stopped); they count as
    /// killed once dead.
    KillStopped(Vec<u32>),
    /// The confirm window is over with these processes alive (sorted).
    Survivors(Vec<u32>),
}

/// One step of the state machine: the next phase and what to do.
pub(super) fn decide(
    phase: Phase,
    seen: &Observed,
    probe: &mut dyn Probe,
    now: Instant,
    policy: &Policy,
) -> (Phase, Vec<Action>) {
    match phase {
        Phase::Supervising {
            draining_since,
            foreign_hold_until,
        } => supervise(draining_since, foreign_hold_until, seen, probe, now, policy),
        Phase::Grace { check, .. }
        | Phase::Confirming { check, .. }
        | Phase::Settling { check, .. }
            if now < check.next =>
        {
            (phase, Vec::new())
        }
        Phase::Settling { until, check } => settle(until, check, probe, now),
        Phase::Grace {
            reason,
            kill_at,
            check,
        } => {
            if tree_gone(seen, probe) {
                return over(reason);
            }
            if now < kill_at {
                let check = check.after(now);
                return (
                    Phase::Grace {
                        reason,
                        kill_at,
                        check,
                    },
                    Vec::new(),
                );
            }
            // Escalation is decided by the whole tree, not the root.
            let check = Check {
                next: now,
                interval: CHECK_FIRST,
            }
            .after(now);
            (confirming(reason, now, check, policy), kill(policy))
        }
        Phase::Confirming {
            reason,
            until,
            limit,
            cap,
            left,
            check,
        } => confirm(
            Confirm {
                reason,
                until,
                limit,
                cap,
                left,
                check,
            },
            seen,
            probe,
            now,
            policy,
        ),
        Phase::Over { .. } => (phase, Vec::new()),
    }
}

/// The driver's owner went away (a dropped future), or a panic unwinds
/// through the driver: SIGKILL to the whole tree now (a termination in its
/// grace is escalated; one past SIGKILL stays as it is). Both then confirm
/// through [`decide`], by the same rule as every termination.
pub(super) fn kill_now(
    phase: Phase,
    probe: &mut dyn Probe,
    now: Instant,
    policy: &Policy,
) -> (Phase, Vec<Action>) {
    match phase {
        // A clean exit whose leftovers were being sorted: what is left of
        // the tree is killed like any other.
        Phase::Supervising { .. } | Phase::Settling { .. } => {
            start(Reason::Cancelled, Some(Signal::KILL), probe, now, policy)
        }
        Phase::Grace { reason, .. } => (
            confirming(
                reason,
                now,
                Check {
                    next: now,
                    interval: CHECK_FIRST,
                },
                policy,
            ),
            kill(policy),
        ),
        Phase::Confirming { .. } | Phase::Over { .. } => (phase, Vec::new()),
    }
}

/// Waiting failed (the driver cannot sleep on the tree): terminate as a
/// cancellation, unless a termination is under way or the run is over.
pub(super) fn wait_failed(
    phase: Phase,
    probe: &mut dyn Probe,
    now: Instant,
    policy: &Policy,
) -> (Phase, Vec<Action>) {
    match phase {
        Phase::Supervising { .. } => start(Reason::Cancelled, None, probe, now, policy),
        _ => (phase, Vec::new()),
    }
}

/// The phase right after a SIGKILL sent at `now`.
fn confirming(reason: Reason, now: Instant, check: Check, policy: &Policy) -> Phase {
    let limit = policy.confirm_window.get().max(policy.confirm_limit.get());
    Phase::Confirming {
        reason,
        until: later(now, policy.confirm_window.get()),
        limit: later(now, limit),
        cap: later(now, limit.saturating_mul(CONFIRM_CAP)),
        left: None,
        check,
    }
}

/// The fields of [`Phase::Confirming`].
struct Confirm {
    reason: Reason,
    until: Instant,
    limit: Instant,
    cap: Instant,
    left: Option<Count>,
    check: Check,
}

/// One look at a tree sent SIGKILL. Over once it is empty (and the root
/// was seen to exit). Survivors are reported only when the window is over
/// and no progress is being made; progress is
///
/// * a member fewer than at the last look: the window starts again from
///   now (a tree of hundreds dies over seconds on a loaded machine), and so
///   does the limit, up to `cap`;
/// * past the window, every member left visibly dying (SIGKILL pending,
///   exiting, a zombie): the next look decides again, until the limit;
/// * a look that came `OVERSLEPT` late at a tree that is all dying (the
///   host did not run, so neither did the tree): the next look decides.
///
/// Either way never past `cap` (a process stuck in uninterruptible sleep
/// with SIGKILL pending is reported at the limit, a tree that keeps dying
/// at the cap), so the return stays bounded.
fn confirm(
    c: Confirm,
    seen: &Observed,
    probe: &mut dyn Probe,
    now: Instant,
    policy: &Policy,
) -> (Phase, Vec<Action>) {
    let mut members = probe.members();
    if members.is_empty() && seen.root.is_some() {
        return over(c.reason);
    }
    let (mut until, mut limit) = (c.until, c.limit);
    if c.left.is_some_and(|n| members.len() < n.get()) {
        let length = policy.confirm_window.get().max(policy.confirm_limit.get());
        limit = limit.max(later(now, length).min(c.cap));
        until = until.max(later(now, policy.confirm_window.get()).min(limit));
    }
    let overslept = now.saturating_duration_since(c.check.next) >= OVERSLEPT;
    let stay =
        now < until || ((now < limit || (overslept && now < c.cap)) && probe.all_dying(&members));
    if !stay {
        members.sort_unstable();
        return (
            Phase::Over {
                reason: Some(c.reason),
            },
            vec![Action::Survivors(members)],
        );
    }
    (
        Phase::Confirming {
            reason: c.reason,
            until,
            limit,
            cap: c.cap,
            left: Some(Count::new(members.len())),
            check: c.check.after(now),
        },
        Vec::new(),
    )
}

/// The tree is empty and the root has exited: the termination is over.
/// (A root that exited while members run, a zombie leader's group, is not
/// the end.)
fn tree_gone(seen: &Observed, probe: &mut dyn Probe) -> bool {
    probe.members().is_empty() && seen.root.is_some()
}

fn over(reason: Reason) -> (Phase, Vec<Action>) {
    (
        Phase::Over {
            reason: Some(reason),
        },
        Vec::new(),
    )
}

/// Decides whether the run must now be terminated: the first of clean exit
/// (root exited, every captured stream at end of file), cancellation,
/// deadline, wait delay over with output held.
fn supervise(
    draining_since: Option<Instant>,
    foreign_hold_until: Option<Instant>,
    seen: &Observed,
    probe: &mut dyn Probe,
    now: Instant,
    policy: &Policy,
) -> (Phase, Vec<Action>) {
    // Output that nothing holds but that could not be drained in time (a
    // relay consumer that does not read) ends like end of file.
    let drained_out = draining_since.is_some_and(|d| now >= later(d, DRAIN_LIMIT));
    let open = if drained_out { 0 } else { seen.open };
    // The limit was passed: whatever else happened, the output was cut.
    if seen.over_limit {
        return start(Reason::OutputLimit, None, probe, now, policy);
    }
    if let (Some(status), 0) = (seen.root, open) {
        return clean_exit(status, probe, now, policy);
    }
    if let Some(sig) = seen.cancel {
        let reason = match seen.expired {
            true => Reason::TimedOut,
            false => Reason::Cancelled,
        };
        return start(reason, sig, probe, now, policy);
    }
    let fired = timer_fired(seen.last_output, now, policy);
    let wait_end = seen
        .root_exit_at
        .filter(|_| draining_since.is_none())
        .map(|e| later(e, policy.wait_delay.get()));
    if let Some((at, reason)) = fired {
        // ... unless the wait delay ended before it: that decides first.
        if wait_end.is_none_or(|w| at <= w || now < w) {
            return start(reason, None, probe, now, policy);
        }
    }
    // The wait delay ended first but decided nothing: the timer that
    // fired after it does.
    let fired = fired.map(|(_, reason)| reason);
    if wait_end.is_some_and(|w| now >= w) {
        return wait_delay_over(fired, foreign_hold_until, probe, now, policy);
    }
    fired_or_stay(
        fired,
        draining_since,
        foreign_hold_until,
        probe,
        now,
        policy,
    )
}

/// The root exited and every captured stream is at end of file: the
/// leftovers policy decides whether what is left of the tree dies.
fn clean_exit(
    status: RootStatus,
    probe: &mut dyn Probe,
    now: Instant,
    policy: &Policy,
) -> (Phase, Vec<Action>) {
    let kill = match policy.leftovers {
        LeftoverPolicy::Kill => true,
        LeftoverPolicy::Keep => false,
        LeftoverPolicy::KeepOnSuccess => status != RootStatus::Exited(0),
    };
    if !kill {
        let keeping = keep_rule(&probe.leftovers());
        if !keeping.settle {
            return (Phase::Over { reason: None }, vec![Action::CountKept]);
        }
        let settling = Phase::Settling {
            until: later(now, policy.confirm_window.get()),
            check: Check::first(now),
        };
        return (settling, kill_stopped(keeping.kill));
    }
    if probe.members().is_empty() {
        return (Phase::Over { reason: None }, Vec::new());
    }
    start(Reason::Leftovers, None, probe, now, policy)
}

/// One look at the leftovers of a clean exit being settled: the stopped
/// ones that appeared since are killed too; over once none is stopped or
/// dying (then the kept ones are counted), or at `until`, with what is
/// still stopped or dying reported as survivors.
fn settle(
    until: Instant,
    check: Check,
    probe: &mut dyn Probe,
    now: Instant,
) -> (Phase, Vec<Action>) {
    let leftovers = probe.leftovers();
    let keeping = keep_rule(&leftovers);
    if !keeping.settle {
        return (Phase::Over { reason: None }, vec![Action::CountKept]);
    }
    if now >= until {
        let mut left: Vec<u32> = leftovers
            .iter()
            .filter(|l| l.seen != Seen::Running)
            .map(|l| l.pid)
            .collect();
        left.sort_unstable();
        return (
            Phase::Over { reason: None },
            vec![Action::CountKept, Action::Survivors(left)],
        );
    }
    let next = Phase::Settling {
        until,
        check: check.after(now),
    };
    (next, kill_stopped(keeping.kill))
}

/// `KillStopped` for these pids, if there are any.
fn kill_stopped(pids: Vec<u32>) -> Vec<Action> {
    if pids.is_empty() {
        Vec::new()
    } else {
        vec![Action::KillStopped(pids)]
    }
}

/// The first timer that fired by `now`: the deadline or the idle timeout
/// (the deadline when both fell on the same instant).
fn timer_fired(
    last_output: Option<Instant>,
    now: Instant,
    policy: &Policy,
) -> Option<(Instant, Reason)> {
    [
        policy.deadline.map(|d| (d, Reason::TimedOut)),
        policy.idle_at(last_output).map(|d| (d, Reason::Idle)),
    ]
    .into_iter()
    .flatten()
    .filter(|&(at, _)| now >= at)
    .min_by_key(|&(at, _)| at)
}

/// The wait delay is over with output still open. It is the grace for
/// holders, not a deadline for reading: output is held only while a
/// descendant still has it open. With every writer gone, what is left is
/// already written; it is drained (the pipes or the relay wake the loop),
/// and the run ends cleanly at end of file.
fn wait_delay_over(
    fired: Option<Reason>,
    foreign_hold_until: Option<Instant>,
    probe: &mut dyn Probe,
    now: Instant,
    policy: &Policy,
) -> (Phase, Vec<Action>) {
    if !probe.output_held() {
        return fired_or_stay(fired, Some(now), foreign_hold_until, probe, now, policy);
    }
    // Held by the tree, or by a process the tier cannot see (a setsid
    // escaper of a process group): at once. Held only by a fork of the
    // host that has not exec'd yet: once it had `FOREIGN_HOLD` to let go.
    let foreign_hold_until = if probe.tree_holds_output() {
        foreign_hold_until
    } else {
        let until = foreign_hold_until.unwrap_or_else(|| later(now, FOREIGN_HOLD));
        if now < until && probe.host_fork_holds_output() {
            return fired_or_stay(fired, None, Some(until), probe, now, policy);
        }
        Some(until)
    };
    if !probe.output_held() {
        // Let go in the meantime.
        return fired_or_stay(fired, Some(now), foreign_hold_until, probe, now, policy);
    }
    start(Reason::OutputHeld, None, probe, now, policy)
}

/// A timer that fired terminates the run; else it stays supervised with
/// these drain and foreign-hold times.
fn fired_or_stay(
    fired: Option<Reason>,
    draining_since: Option<Instant>,
    foreign_hold_until: Option<Instant>,
    probe: &mut dyn Probe,
    now: Instant,
    policy: &Policy,
) -> (Phase, Vec<Action>) {
    match fired {
        Some(reason) => start(reason, None, probe, now, policy),
        None => (
            Phase::Supervising {
                draining_since,
                foreign_hold_until,
            },
            Vec::new(),
        ),
    }
}

/// Starts a termination: SIGKILL at once, or the first signal and a grace.
/// The members are looked at first (the killed count remembers them); where
/// the containment stops the tree to count it before the SIGKILL, that look
/// is the one before an immediate SIGKILL.
fn start(
    reason: Reason,
    sig: Option<Signal>,
    probe: &mut dyn Probe,
    now: Instant,
    policy: &Policy,
) -> (Phase, Vec<Action>) {
    // No first signal: nothing at a timer (the grace runs silently),
    // SIGKILL at once for anything else.
    let silent = policy.silent && sig.is_none();
    let timer = matches!(reason, Reason::TimedOut | Reason::Idle);
    let first = match sig {
        Some(s) => s,
        None if silent && !timer => Signal::KILL,
        None => policy.signal,
    };
    let graceful = !policy.grace.get().is_zero() && first != Signal::KILL;
    if graceful || !policy.stop_to_count {
        let _ = probe.members();
    }
    let check = Check::first(now);
    if graceful {
        (
            Phase::Grace {
                reason,
                kill_at: later(now, policy.grace.get()),
                check,
            },
            match silent {
                true => Vec::new(),
                false => vec![Action::Signal(first)],
            },
        )
    } else {
        (confirming(reason, now, check, policy), kill(policy))
    }
}

/// The SIGKILL to the tree, after the stop and the look that watch every
/// member it will end where the containment needs them
/// (`Policy::stop_to_count`).
fn kill(policy: &Policy) -> Vec<Action> {
    if policy.stop_to_count {
        vec![Action::StopAndCount, Action::Signal(Signal::KILL)]
    } else {
        vec![Action::Signal(Signal::KILL)]
    }
}

/// `t + d`, where a duration too large for the clock (`Duration::MAX` for
/// "forever") means a time so far away that it never comes.
pub(super) fn later(t: Instant, d: Duration) -> Instant {
    const FAR: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
    t.checked_add(d.min(FAR))
        .or_else(|| t.checked_add(FAR))
        .unwrap_or(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Answers the decision's questions from a script and records which
    /// were asked, in order.
    #[derive(Default)]
    struct Fake {
        members: Vec<u32>,
        held: bool,
        tree_holds: bool,
        fork_holds: bool,
        /// The answer to `all_dying`.
        dying: bool,
        /// The answer to `leftovers`.
        leftovers: Vec<Leftover>,
        asked: Vec<&'static str>,
    }

    impl Probe for Fake {
        fn members(&mut self) -> Vec<u32> {
            self.asked.push("members");
            self.members.clone()
        }
        fn output_held(&mut self) -> bool {
            self.asked.push("held");
            self.held
        }
        fn tree_holds_output(&mut self) -> bool {
            self.asked.push("tree_holds");
            self.tree_holds
        }
        fn host_fork_holds_output(&mut self) -> bool {
            self.asked.push("fork_holds");
            self.fork_holds
        }
        fn all_dying(&mut self, _: &[u32]) -> bool {
            self.asked.push("dying");
            self.dying
        }
        fn leftovers(&mut self) -> Vec<Leftover> {
            self.asked.push("leftovers");
            self.leftovers.clone()
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A fake clock: every time is `t0 + offset`, chosen by the test.
    struct Clock(Instant);

    impl Clock {
        fn at(&self, d: Duration) -> Instant {
            self.0 + d
        }
    }

    fn policy(
        c: &Clock,
        timeout: Option<Duration>,
        grace: Duration,
        wait_delay: Duration,
    ) -> Policy {
        Policy {
            deadline: timeout.map(|t| c.at(t)),
            wait_delay: wait_delay.into(),
            grace: grace.into(),
            signal: Signal::TERM,
            silent: false,
            confirm_window: ms(1000).into(),
            confirm_limit: ms(10_000).into(),
            leftovers: LeftoverPolicy::KeepOnSuccess,
            stop_to_count: false,
            idle_timeout: MaybeSpan::NONE,
            started: c.at(ms(0)),
        }
    }

    fn running(open: usize) -> Observed {
        Observed {
            root: None,
            root_exit_at: None,
            open,
            cancel: None,
            expired: false,
            last_output: None,
            over_limit: false,
        }
    }

    fn exited(c: &Clock, code: i32, at: Duration, open: usize) -> Observed {
        Observed {
            root: Some(RootStatus::Exited(code)),
            root_exit_at: Some(c.at(at)),
            open,
            cancel: None,
            expired: false,
            last_output: None,
            over_limit: false,
        }
    }

    fn confirming(reason: Reason, until: Instant, next: Instant) -> Phase {
        Phase::Confirming {
            reason,
            until,
            limit: until - ms(1000) + ms(10_000),
            cap: until - ms(1000) + ms(60_000),
            left: None,
            check: Check {
                next,
                interval: CHECK_FIRST,
            },
        }
    }

    /// A probe with these members alive, and the output held (at all, by
    /// the tree, by a fork of the host) or not.
    fn fake(members: &[u32], held: bool, tree_holds: bool, fork_holds: bool) -> Fake {
        Fake {
            members: members.to_vec(),
            held,
            tree_holds,
            fork_holds,
            dying: false,
            leftovers: Vec::new(),
            asked: Vec::new(),
        }
    }

    /// The questions that find the output held by the tree, then look at
    /// its members.
    const HELD_BY_TREE: &[&str] = &["held", "tree_holds", "held", "members"];

    /// What a case expects: the reason the run ends for, the actions and
    /// the questions asked.
    type Expect = (Option<Reason>, Vec<Action>, Vec<&'static str>);

    /// Nothing to do yet, after asking `asked`.
    fn wait(asked: &[&'static str]) -> Expect {
        (None, vec![], asked.to_vec())
    }

    /// The termination for `reason` starts with `signal`, after asking
    /// `asked`.
    fn terminate(reason: Reason, signal: Signal, asked: &[&'static str]) -> Expect {
        (Some(reason), vec![Action::Signal(signal)], asked.to_vec())
    }

    /// The first decision of a run in each starting situation.
    #[test]
    fn supervising_table() {
        let c = Clock(Instant::now());
        let now = c.at(ms(5000));
        struct Case {
            name: &'static str,
            policy: Policy,
            seen: Observed,
            fake: Fake,
            /// Where the run starts.
            phase: Phase,
            reason: Option<Reason>,
            actions: Vec<Action>,
            asked: Vec<&'static str>,
        }
        let mut cases = Vec::new();
        let mut case = |name, policy, seen, fake, phase, (reason, actions, asked)| {
            cases.push(Case {
                name,
                policy,
                seen,
                fake,
                phase,
                reason,
                actions,
                asked,
            })
        };
        case(
            "nothing due",
            policy(&c, Some(ms(6000)), ms(0), ms(100)),
            running(2),
            fake(&[], false, false, false),
            Phase::START,
            wait(&[]),
        );
        case(
            "timeout without grace: SIGKILL at once",
            policy(&c, Some(ms(5000)), ms(0), ms(100)),
            running(2),
            fake(&[], false, false, false),
            Phase::START,
            terminate(Reason::TimedOut, Signal::KILL, &["members"]),
        );
        case(
            "timeout with grace: the first signal",
            policy(&c, Some(ms(4000)), ms(300), ms(100)),
            running(2),
            fake(&[], false, false, false),
            Phase::START,
            terminate(Reason::TimedOut, Signal::TERM, &["members"]),
        );
        case(
            "output held at the wait delay by the tree",
            policy(&c, None, ms(300), ms(100)),
            exited(&c, 0, ms(4900), 1),
            fake(&[7], true, true, false),
            Phase::START,
            terminate(Reason::OutputHeld, Signal::TERM, HELD_BY_TREE),
        );
        case(
            "output open before the wait delay is over",
            policy(&c, None, ms(300), ms(100)),
            exited(&c, 0, ms(4950), 1),
            fake(&[], true, false, false),
            Phase::START,
            wait(&[]),
        );
        case(
            "wait delay 0 with a writer: held at once",
            policy(&c, None, ms(0), ms(0)),
            exited(&c, 0, ms(5000), 1),
            fake(&[], true, true, false),
            Phase::START,
            terminate(Reason::OutputHeld, Signal::KILL, HELD_BY_TREE),
        );
        case(
            "wait delay 0 without a writer: drain",
            policy(&c, None, ms(0), ms(0)),
            exited(&c, 0, ms(5000), 1),
            fake(&[], false, false, false),
            Phase::START,
            wait(&["held"]),
        );
        case(
            "held by a fork of the host only: wait for it",
            policy(&c, None, ms(0), ms(0)),
            exited(&c, 0, ms(5000), 1),
            fake(&[], true, false, true),
            Phase::START,
            wait(&["held", "tree_holds", "fork_holds"]),
        );
        case(
            "cancel racing a clean exit: the exit wins, leftovers kept",
            policy(&c, None, ms(0), ms(100)),
            Observed {
                cancel: Some(None),
                last_output: None,
                over_limit: false,
                ..exited(&c, 0, ms(4999), 0)
            },
            fake(&[9], false, false, false),
            Phase::START,
            (None, vec![Action::CountKept], vec!["leftovers"]),
        );
        case(
            "cancel racing an exit with output open: cancelled",
            policy(&c, None, ms(300), ms(100)),
            Observed {
                cancel: Some(None),
                last_output: None,
                over_limit: false,
                ..exited(&c, 0, ms(4999), 1)
            },
            fake(&[], false, false, false),
            Phase::START,
            terminate(Reason::Cancelled, Signal::TERM, &["members"]),
        );
        case(
            "cancel with SIGKILL skips the grace",
            policy(&c, None, ms(300), ms(100)),
            Observed {
                cancel: Some(Some(Signal::KILL)),
                last_output: None,
                over_limit: false,
                ..running(2)
            },
            fake(&[], false, false, false),
            Phase::START,
            terminate(Reason::Cancelled, Signal::KILL, &["members"]),
        );
        let silent = |p: Policy| Policy { silent: true, ..p };
        let expired = |o: Observed| Observed {
            cancel: Some(None),
            expired: true,
            ..o
        };
        case(
            "silent deadline with a grace: nothing sent, the grace runs",
            silent(policy(&c, Some(ms(4000)), ms(300), ms(100))),
            running(2),
            fake(&[], false, false, false),
            Phase::START,
            (Some(Reason::TimedOut), vec![], vec!["members"]),
        );
        case(
            "silent deadline without a grace: SIGKILL at once",
            silent(policy(&c, Some(ms(5000)), ms(0), ms(100))),
            running(2),
            fake(&[], false, false, false),
            Phase::START,
            terminate(Reason::TimedOut, Signal::KILL, &["members"]),
        );
        case(
            "silent idle timeout: nothing sent either",
            Policy {
                idle_timeout: Some(ms(1000)).into(),
                ..silent(policy(&c, None, ms(300), ms(100)))
            },
            running(2),
            fake(&[], false, false, false),
            Phase::START,
            (Some(Reason::Idle), vec![], vec!["members"]),
        );
        case(
            "silent: held output has no first signal to send, SIGKILL",
            silent(policy(&c, None, ms(300), ms(100))),
            exited(&c, 0, ms(4900), 1),
            fake(&[7], true, true, false),
            Phase::START,
            terminate(Reason::OutputHeld, Signal::KILL, HELD_BY_TREE),
        );
        case(
            "silent: a cancel without a signal is SIGKILL at once",
            silent(policy(&c, None, ms(300), ms(100))),
            Observed {
                cancel: Some(None),
                ..running(2)
            },
            fake(&[], false, false, false),
            Phase::START,
            terminate(Reason::Cancelled, Signal::KILL, &["members"]),
        );
        case(
            "silent: a cancel's own signal is sent, then the grace",
            silent(policy(&c, None, ms(300), ms(100))),
            Observed {
                cancel: Some(Some(Signal::INT)),
                ..running(2)
            },
            fake(&[], false, false, false),
            Phase::START,
            terminate(Reason::Cancelled, Signal::INT, &["members"]),
        );
        case(
            "an expiry is the deadline come early: timed out, first signal",
            policy(&c, Some(ms(9000)), ms(300), ms(100)),
            expired(running(2)),
            fake(&[], false, false, false),
            Phase::START,
            terminate(Reason::TimedOut, Signal::TERM, &["members"]),
        );
        case(
            "an expiry under a silent deadline: timed out, nothing sent",
            silent(policy(&c, None, ms(300), ms(100))),
            expired(running(2)),
            fake(&[], false, false, false),
            Phase::START,
            (Some(Reason::TimedOut), vec![], vec!["members"]),
        );
        case(
            "an expiry racing a clean exit: the exit wins",
            policy(&c, None, ms(300), ms(100)),
            expired(exited(&c, 0, ms(4999), 0)),
            fake(&[], false, false, false),
            Phase::START,
            (None, vec![Action::CountKept], vec!["leftovers"]),
        );
        case(
            "nonzero exit with a zombie leader's members alive: kill them",
            policy(&c, None, ms(0), ms(100)),
            exited(&c, 3, ms(4999), 0),
            fake(&[11, 12], false, false, false),
            Phase::START,
            terminate(Reason::Leftovers, Signal::KILL, &["members", "members"]),
        );
        case(
            "nonzero exit, nothing left: over",
            policy(&c, None, ms(0), ms(100)),
            exited(&c, 3, ms(4999), 0),
            fake(&[], false, false, false),
            Phase::START,
            wait(&["members"]),
        );
        case(
            "a drain past its limit ends like end of file",
            policy(&c, None, ms(0), ms(0)),
            exited(&c, 0, ms(3000), 1),
            fake(&[], false, false, false),
            Phase::Supervising {
                draining_since: Some(now - DRAIN_LIMIT),
                foreign_hold_until: None,
            },
            (None, vec![Action::CountKept], vec!["leftovers"]),
        );
        for mut case in cases {
            let (next, actions) = decide(case.phase, &case.seen, &mut case.fake, now, &case.policy);
            assert_eq!(next.reason(), case.reason, "{}: reason", case.name);
            assert_eq!(actions, case.actions, "{}: actions", case.name);
            assert_eq!(case.fake.asked, case.asked, "{}: questions", case.name);
            match case.actions.first() {
                Some(Action::Signal(Signal::KILL)) => assert!(
                    matches!(next, Phase::Confirming { until, .. } if until == now + ms(1000)),
                    "{}: {next:?}",
                    case.name
                ),
                Some(Action::Signal(_)) => assert!(
                    matches!(next, Phase::Grace { kill_at, .. } if kill_at == now + ms(300)),
                    "{}: {next:?}",
                    case.name
                ),
                // A silent termination: the grace runs with nothing sent.
                None if case.reason.is_some() => assert!(
                    matches!(next, Phase::Grace { kill_at, .. } if kill_at == now + ms(300)),
                    "{}: {next:?}",
                    case.name
                ),
                _ => {}
            }
        }
    }

    fn left(pid: u32, seen: Seen) -> Leftover {
        Leftover { pid, seen }
    }

    /// The keep rule: every running leftover is kept; a stopped one is
    /// killed; a stopped or dying one holds the count until it is gone.
    #[test]
    fn keep_rule_table() {
        use Seen::{Dying, Running, Stopped};
        let cases: &[(&str, &[Leftover], &[u32], bool)] = &[
            ("no leftover", &[], &[], false),
            (
                "running ones are kept as they are",
                &[left(5, Running), left(6, Running)],
                &[],
                false,
            ),
            (
                "a stopped one alone is killed",
                &[left(5, Stopped)],
                &[5],
                true,
            ),
            (
                "the issue's shape: two running, one stopped",
                &[left(5, Running), left(6, Running), left(7, Stopped)],
                &[7],
                true,
            ),
            (
                "every stopped one is killed, in the order seen",
                &[left(9, Stopped), left(5, Running), left(7, Stopped)],
                &[9, 7],
                true,
            ),
            (
                "one the kernel hung up is let die, not killed",
                &[left(5, Running), left(6, Dying)],
                &[],
                true,
            ),
            (
                "a stopped one already sent SIGKILL is dying",
                &[left(7, Dying)],
                &[],
                true,
            ),
        ];
        for (name, leftovers, kill, settle) in cases {
            let k = keep_rule(leftovers);
            assert_eq!(k.kill, *kill, "{name}: kill");
            assert_eq!(k.settle, *settle, "{name}: settle");
        }
    }

    /// A clean exit whose leftovers are kept: straight to the count when all
    /// run; else the stopped are killed and the count waits (settling) until
    /// none is stopped or dying, or the confirm window ends (survivors).
    #[test]
    fn settling_table() {
        use Seen::{Dying, Running, Stopped};
        let c = Clock(Instant::now());
        let now = c.at(ms(5000));
        let settling = |until: Duration, next: Instant| Phase::Settling {
            until: c.at(until),
            check: Check {
                next,
                interval: CHECK_FIRST,
            },
        };
        let first = Check::first(now);
        struct Case {
            name: &'static str,
            code: i32,
            leftovers: LeftoverPolicy,
            phase: Phase,
            seen: Vec<Leftover>,
            next: Phase,
            actions: Vec<Action>,
            asked: Vec<&'static str>,
        }
        let over = Phase::Over { reason: None };
        let cases = vec![
            Case {
                name: "exit 0, all running: kept at once",
                code: 0,
                leftovers: LeftoverPolicy::KeepOnSuccess,
                phase: Phase::START,
                seen: vec![left(5, Running)],
                next: over,
                actions: vec![Action::CountKept],
                asked: vec!["leftovers"],
            },
            Case {
                name: "exit 0, a stopped one: killed, then settling",
                code: 0,
                leftovers: LeftoverPolicy::KeepOnSuccess,
                phase: Phase::START,
                seen: vec![left(5, Running), left(6, Running), left(7, Stopped)],
                next: Phase::Settling {
                    until: now + ms(1000),
                    check: first,
                },
                actions: vec![Action::KillStopped(vec![7])],
                asked: vec!["leftovers"],
            },
            Case {
                name: "exit 3 under keep: the same rule",
                code: 3,
                leftovers: LeftoverPolicy::Keep,
                phase: Phase::START,
                seen: vec![left(7, Stopped)],
                next: Phase::Settling {
                    until: now + ms(1000),
                    check: first,
                },
                actions: vec![Action::KillStopped(vec![7])],
                asked: vec!["leftovers"],
            },
            Case {
                name: "exit 0, one dying (hung up by the kernel): settling, nothing killed",
                code: 0,
                leftovers: LeftoverPolicy::KeepOnSuccess,
                phase: Phase::START,
                seen: vec![left(5, Running), left(6, Dying)],
                next: Phase::Settling {
                    until: now + ms(1000),
                    check: first,
                },
                actions: vec![],
                asked: vec!["leftovers"],
            },
            Case {
                name: "exit 3 under keep-on-success: the tree is killed, no keep rule",
                code: 3,
                leftovers: LeftoverPolicy::KeepOnSuccess,
                phase: Phase::START,
                seen: vec![left(7, Stopped)],
                next: Phase::Confirming {
                    reason: Reason::Leftovers,
                    until: now + ms(1000),
                    limit: now + ms(10_000),
                    cap: now + ms(60_000),
                    left: None,
                    check: first,
                },
                actions: vec![Action::Signal(Signal::KILL)],
                asked: vec!["members", "members"],
            },
            Case {
                name: "settling, not due: nothing asked",
                code: 0,
                leftovers: LeftoverPolicy::KeepOnSuccess,
                phase: settling(ms(6000), now + ms(1)),
                seen: vec![left(7, Dying)],
                next: settling(ms(6000), now + ms(1)),
                actions: vec![],
                asked: vec![],
            },
            Case {
                name: "settling, the killed one still dying: look again",
                code: 0,
                leftovers: LeftoverPolicy::KeepOnSuccess,
                phase: settling(ms(6000), now),
                seen: vec![left(5, Running), left(7, Dying)],
                next: Phase::Settling {
                    until: c.at(ms(6000)),
                    check: Check {
                        next: now,
                        interval: CHECK_FIRST,
                    }
                    .after(now),
                },
                actions: vec![],
                asked: vec!["leftovers"],
            },
            Case {
                name: "settling, one stopped since: killed too",
                code: 0,
                leftovers: LeftoverPolicy::KeepOnSuccess,
                phase: settling(ms(6000), now),
                seen: vec![left(7, Dying), left(8, Stopped)],
                next: Phase::Settling {
                    until: c.at(ms(6000)),
                    check: Check {
                        next: now,
                        interval: CHECK_FIRST,
                    }
                    .after(now),
                },
                actions: vec![Action::KillStopped(vec![8])],
                asked: vec!["leftovers"],
            },
            Case {
                name: "settling, the stopped ones gone: count the kept",
                code: 0,
                leftovers: LeftoverPolicy::KeepOnSuccess,
                phase: settling(ms(6000), now),
                seen: vec![left(5, Running), left(6, Running)],
                next: over,
                actions: vec![Action::CountKept],
                asked: vec!["leftovers"],
            },
            Case {
                name: "settling past the window: survivors, the rest counted",
                code: 0,
                leftovers: LeftoverPolicy::KeepOnSuccess,
                phase: settling(ms(5000), now),
                seen: vec![left(5, Running), left(9, Stopped), left(7, Dying)],
                next: over,
                actions: vec![Action::CountKept, Action::Survivors(vec![7, 9])],
                asked: vec!["leftovers"],
            },
        ];
        for case in cases {
            let mut p = policy(&c, None, ms(0), ms(100));
            p.leftovers = case.leftovers;
            let mut fake = Fake {
                members: case.seen.iter().map(|l| l.pid).collect(),
                leftovers: case.seen.clone(),
                ..Fake::default()
            };
            let seen = exited(&c, case.code, ms(4999), 0);
            let (next, actions) = decide(case.phase, &seen, &mut fake, now, &p);
            assert_eq!(next, case.next, "{}: phase", case.name);
            assert_eq!(actions, case.actions, "{}: actions", case.name);
            assert_eq!(fake.asked, case.asked, "{}: questions", case.name);
        }
        // A settling run's next wake is its check; a dropped future kills
        // what is left of the tree, as in any phase before the end.
        let s = settling(ms(6000), now + ms(3));
        assert_eq!(
            s.next_timer(None, None, &policy(&c, None, ms(0), ms(0))),
            Some(now + ms(3))
        );
        let mut fake = Fake::default();
        let (next, actions) = kill_now(s, &mut fake, now, &policy(&c, None, ms(0), ms(0)));
        assert_eq!(next.reason(), Some(Reason::Cancelled));
        assert_eq!(actions, vec![Action::Signal(Signal::KILL)]);
    }

    /// A silent deadline: the run is timed out from the deadline on; the
    /// root ending by itself during the grace ends it (no signal ever
    /// sent), and a tree still there at the end of the grace gets SIGKILL.
    #[test]
    fn a_silent_deadline_is_a_timeout_whatever_follows() {
        let c = Clock(Instant::now());
        let p = Policy {
            silent: true,
            ..policy(&c, Some(ms(300)), ms(1000), ms(100))
        };
        let mut tree = fake(&[5], false, false, false);
        let (grace, actions) = decide(Phase::START, &running(1), &mut tree, c.at(ms(300)), &p);
        assert_eq!(actions, vec![]);
        assert!(
            matches!(grace, Phase::Grace { reason: Reason::TimedOut, kill_at, .. } if kill_at == c.at(ms(1300)))
        );
        // The root exits 0 by itself at 600 ms, its output closed.
        let mut gone = fake(&[], false, false, false);
        let (next, actions) = decide(
            grace,
            &exited(&c, 0, ms(600), 0),
            &mut gone,
            c.at(ms(600)),
            &p,
        );
        assert_eq!(
            next,
            Phase::Over {
                reason: Some(Reason::TimedOut)
            }
        );
        assert_eq!(actions, vec![]);
        // A tree still there at the end of the grace: SIGKILL.
        let (next, actions) = decide(grace, &running(1), &mut tree, c.at(ms(1300)), &p);
        assert_eq!(next.reason(), Some(Reason::TimedOut));
        assert_eq!(actions, vec![Action::Signal(Signal::KILL)]);
    }

    /// The expected phases for the cases that stay or end.
    #[test]
    fn supervising_next_phases() {
        let c = Clock(Instant::now());
        let now = c.at(ms(5000));
        let p = policy(&c, None, ms(0), ms(0));
        let mut fake = Fake::default();
        let (next, _) = decide(
            Phase::START,
            &exited(&c, 0, ms(5000), 1),
            &mut fake,
            now,
            &p,
        );
        assert_eq!(
            next,
            Phase::Supervising {
                draining_since: Some(now),
                foreign_hold_until: None
            }
        );
        // Draining: the next wake is the drain limit, and no question is
        // asked again before it.
        assert_eq!(
            next.next_timer(Some(now), None, &p),
            Some(now + DRAIN_LIMIT)
        );
        let mut fake = Fake::default();
        let (again, actions) = decide(
            next,
            &exited(&c, 0, ms(5000), 1),
            &mut fake,
            now + ms(10),
            &p,
        );
        assert_eq!((again, actions), (next, vec![]));
        assert!(fake.asked.is_empty());
        // End of file while draining: a clean exit.
        let (end, actions) = decide(
            next,
            &exited(&c, 0, ms(5000), 0),
            &mut fake,
            now + ms(10),
            &p,
        );
        assert_eq!(end, Phase::Over { reason: None });
        assert_eq!(actions, vec![Action::CountKept]);
    }

    /// A fork of the host gets `FOREIGN_HOLD` once, then the output counts
    /// as held.
    #[test]
    fn host_fork_hold_expires() {
        let c = Clock(Instant::now());
        let now = c.at(ms(5000));
        let p = policy(&c, None, ms(0), ms(0));
        let seen = exited(&c, 0, ms(5000), 1);
        let mut fake = Fake {
            held: true,
            fork_holds: true,
            ..Fake::default()
        };
        let (waiting, _) = decide(Phase::START, &seen, &mut fake, now, &p);
        assert_eq!(
            waiting.next_timer(seen.root_exit_at, None, &p),
            Some(now + FOREIGN_HOLD)
        );
        let (still, _) = decide(waiting, &seen, &mut fake, now + ms(100), &p);
        assert_eq!(still, waiting);
        fake.asked.clear();
        let (held, actions) = decide(still, &seen, &mut fake, now + FOREIGN_HOLD, &p);
        assert_eq!(held.reason(), Some(Reason::OutputHeld));
        assert_eq!(actions, vec![Action::Signal(Signal::KILL)]);
        // Past the hold the fork is not asked about again.
        assert_eq!(fake.asked, HELD_BY_TREE);
    }

    /// Where the containment stops the tree to count it (the process-group
    /// tier), every SIGKILL comes right after a stop and a look at the
    /// members, and nothing is looked at before: not when a termination
    /// starts with SIGKILL (issue 37: the SIGKILL went first and the look
    /// after it, so a member reaped meanwhile, by its dying parent or by
    /// the orphan reaper, was never watched and not counted), not at the
    /// end of a grace, not for a dropped run. Elsewhere the members are
    /// looked at before the first signal, as with a grace.
    #[test]
    fn the_tree_is_stopped_and_counted_right_before_every_sigkill() {
        let c = Clock(Instant::now());
        let t0 = c.at(ms(1000));
        let plain = policy(&c, Some(ms(1000)), ms(0), ms(100));
        let stop = Policy {
            stop_to_count: true,
            ..plain
        };
        let mut fake = Fake {
            members: vec![4, 5],
            ..Fake::default()
        };
        let stop_kill = vec![Action::StopAndCount, Action::Signal(Signal::KILL)];
        let (phase, actions) = decide(Phase::START, &running(2), &mut fake, t0, &stop);
        assert_eq!(phase.reason(), Some(Reason::TimedOut));
        assert_eq!(actions, stop_kill);
        assert!(fake.asked.is_empty(), "{:?}", fake.asked);
        let (_, actions) = kill_now(Phase::START, &mut fake, t0, &stop);
        assert_eq!(actions, stop_kill);
        assert!(fake.asked.is_empty(), "{:?}", fake.asked);
        let (_, actions) = decide(Phase::START, &running(2), &mut fake, t0, &plain);
        assert_eq!(actions, vec![Action::Signal(Signal::KILL)]);
        assert_eq!(fake.asked, vec!["members"]);
        fake.asked.clear();
        let graceful = Policy {
            grace: ms(300).into(),
            ..stop
        };
        let (grace, actions) = decide(Phase::START, &running(2), &mut fake, t0, &graceful);
        assert_eq!(actions, vec![Action::Signal(Signal::TERM)]);
        assert_eq!(fake.asked, vec!["members"]);
        // The grace is over with members left: stop, count, kill.
        let end = t0 + ms(300);
        let (_, actions) = decide(grace, &running(2), &mut fake, end, &graceful);
        assert_eq!(actions, stop_kill);
        let (_, actions) = kill_now(grace, &mut fake, t0, &graceful);
        assert_eq!(actions, stop_kill);
    }

    /// SIGKILL at the end of the grace is decided by the whole tree: a
    /// root that exited does not end the termination while members live.
    #[test]
    fn escalation_is_decided_by_the_tree() {
        let c = Clock(Instant::now());
        let t0 = c.at(ms(1000));
        let p = policy(&c, Some(ms(1000)), ms(300), ms(100));
        let mut fake = Fake {
            members: vec![4, 5],
            ..Fake::default()
        };
        let (grace, actions) = decide(Phase::START, &running(2), &mut fake, t0, &p);
        assert_eq!(actions, vec![Action::Signal(Signal::TERM)]);
        // Not due: nothing asked, nothing changes.
        fake.asked.clear();
        let (same, actions) = decide(grace, &running(2), &mut fake, t0, &p);
        assert_eq!((same, actions), (grace, vec![]));
        assert!(fake.asked.is_empty());
        // The root exited in the grace; its group still runs.
        let gone_root = exited(&c, 143, ms(1100), 0);
        let (mid, actions) = decide(grace, &gone_root, &mut fake, t0 + ms(100), &p);
        assert!(matches!(mid, Phase::Grace { .. }), "{mid:?}");
        assert!(actions.is_empty());
        let (kill, actions) = decide(mid, &gone_root, &mut fake, t0 + ms(300), &p);
        assert_eq!(actions, vec![Action::Signal(Signal::KILL)]);
        assert_eq!(
            kill,
            Phase::Confirming {
                reason: Reason::TimedOut,
                until: t0 + ms(1300),
                limit: t0 + ms(10_300),
                cap: t0 + ms(60_300),
                left: None,
                check: Check {
                    next: t0 + ms(300) + CHECK_FIRST,
                    interval: CHECK_FIRST * 2
                },
            }
        );
        // The tree emptied in the grace: over without SIGKILL.
        fake.members.clear();
        let (end, actions) = decide(mid, &gone_root, &mut fake, t0 + ms(200), &p);
        assert_eq!(
            end,
            Phase::Over {
                reason: Some(Reason::TimedOut)
            }
        );
        assert!(actions.is_empty());
        // ... but not while the root itself has not been seen to exit.
        let (wait, _) = decide(mid, &running(0), &mut fake, t0 + ms(200), &p);
        assert!(matches!(wait, Phase::Grace { .. }), "{wait:?}");
    }

    /// The confirm window ends with the survivors reported, sorted; the
    /// check interval backs off up to `CHECK_MAX` until then.
    #[test]
    fn confirm_window_expiry_reports_survivors() {
        let c = Clock(Instant::now());
        let t0 = c.at(ms(0));
        let p = policy(&c, None, ms(0), ms(100));
        let until = t0 + ms(1000);
        let zombie_leader = exited(&c, 0, ms(0), 0);
        let mut fake = Fake {
            members: vec![30, 10, 20],
            ..Fake::default()
        };
        let mut phase = confirming(Reason::Cancelled, until, t0);
        let mut now = t0;
        let mut last_interval = Duration::ZERO;
        while now < until {
            let (next, actions) = decide(phase, &zombie_leader, &mut fake, now, &p);
            assert!(actions.is_empty());
            let Phase::Confirming { check, .. } = next else {
                panic!("ended early: {next:?}")
            };
            assert!(check.interval >= last_interval && check.interval <= CHECK_MAX);
            last_interval = check.interval;
            now = check.next;
            phase = next;
        }
        assert_eq!(last_interval, CHECK_MAX);
        let (end, actions) = decide(phase, &zombie_leader, &mut fake, now, &p);
        assert_eq!(
            end,
            Phase::Over {
                reason: Some(Reason::Cancelled)
            }
        );
        assert_eq!(actions, vec![Action::Survivors(vec![10, 20, 30])]);
    }

    /// A dropped run: SIGKILL now, whatever the phase; once only.
    #[test]
    fn kill_now_escalates_once() {
        let c = Clock(Instant::now());
        let now = c.at(ms(50));
        let p = policy(&c, None, ms(300), ms(100));
        let mut fake = Fake::default();
        let (k, actions) = kill_now(Phase::START, &mut fake, now, &p);
        assert_eq!(actions, vec![Action::Signal(Signal::KILL)]);
        assert_eq!(k.reason(), Some(Reason::Cancelled));
        let grace = Phase::Grace {
            reason: Reason::TimedOut,
            kill_at: now + ms(250),
            check: Check::first(now),
        };
        let (k, actions) = kill_now(grace, &mut fake, now, &p);
        assert_eq!(actions, vec![Action::Signal(Signal::KILL)]);
        assert_eq!(k, confirming(Reason::TimedOut, now + ms(1000), now));
        let (same, actions) = kill_now(k, &mut fake, now, &p);
        assert_eq!((same, actions), (k, vec![]));
        let over = Phase::Over { reason: None };
        assert_eq!(kill_now(over, &mut fake, now, &p), (over, vec![]));
        // A failed wait terminates a supervised run only.
        let (w, actions) = wait_failed(Phase::START, &mut fake, now, &p);
        assert_eq!(w.reason(), Some(Reason::Cancelled));
        assert_eq!(actions, vec![Action::Signal(Signal::TERM)]);
        assert_eq!(wait_failed(k, &mut fake, now, &p), (k, vec![]));
    }

    /// The next timer of each phase, and "forever" that never comes.
    #[test]
    fn next_timers() {
        let c = Clock(Instant::now());
        let t0 = c.at(ms(0));
        let p = policy(&c, Some(ms(800)), ms(0), ms(100));
        assert_eq!(Phase::START.next_timer(None, None, &p), Some(t0 + ms(800)));
        assert_eq!(
            Phase::START.next_timer(Some(t0 + ms(10)), None, &p),
            Some(t0 + ms(110))
        );
        assert_eq!(
            Phase::START.next_timer(Some(t0 + ms(750)), None, &p),
            Some(t0 + ms(800))
        );
        let mut phase = confirming(Reason::TimedOut, t0 + ms(1000), t0 + ms(5));
        assert_eq!(phase.next_timer(None, None, &p), Some(t0 + ms(5)));
        phase.check_now(t0 + ms(1));
        assert_eq!(phase.next_timer(None, None, &p), Some(t0 + ms(1)));
        assert_eq!(
            Phase::Over { reason: None }.next_timer(None, None, &p),
            None
        );
        let forever = Policy {
            deadline: None,
            wait_delay: Duration::MAX.into(),
            ..p
        };
        let far = Phase::START.next_timer(Some(t0), None, &forever).unwrap();
        assert!(far > t0 + Duration::from_secs(3600 * 24 * 365));
    }

    // ---- The confirm window under load (kept apart for merging). ----

    /// Drives a confirmation from `t0` (the SIGKILL) looking at the tree
    /// at every check, `members_at(offset)` giving the members and
    /// `dying` the probe's answer; returns when it ended and how.
    fn drive_confirm(
        p: &Policy,
        t0: Instant,
        dying: bool,
        members_at: impl Fn(Duration) -> Vec<u32>,
    ) -> (Duration, Vec<Action>, Vec<&'static str>) {
        let seen = Observed {
            root: Some(RootStatus::Signaled(Signal::KILL)),
            root_exit_at: Some(t0),
            open: 0,
            cancel: None,
            expired: false,
            last_output: None,
            over_limit: false,
        };
        let mut phase = confirming(Reason::TimedOut, later(t0, p.confirm_window.get()), t0);
        if let Phase::Confirming { limit, cap, .. } = &mut phase {
            let length = p.confirm_limit.get().max(p.confirm_window.get());
            *limit = later(t0, length);
            *cap = later(t0, length * CONFIRM_CAP);
        }
        let mut fake = Fake {
            dying,
            ..Fake::default()
        };
        let mut now = t0;
        loop {
            fake.members = members_at(now - t0);
            let (next, actions) = decide(phase, &seen, &mut fake, now, p);
            if next.is_over() {
                return (now - t0, actions, fake.asked);
            }
            assert!(actions.is_empty());
            let Phase::Confirming { check, .. } = next else {
                panic!("{next:?}")
            };
            now = check.next;
            phase = next;
        }
    }

    /// A tree that keeps dying past the window (one member every 300 ms,
    /// slower than the window's end) is waited for: no survivors.
    #[test]
    fn stretch_while_members_keep_dying() {
        let c = Clock(Instant::now());
        let p = policy(&c, None, ms(0), ms(0));
        let left = |t: Duration| (0..8u32.saturating_sub(t.as_millis() as u32 / 300)).collect();
        let (took, actions, _) = drive_confirm(&p, c.at(ms(0)), false, left);
        assert_eq!(actions, vec![]);
        assert!(took >= ms(2400) && took < ms(2420), "{took:?}");
    }

    /// Once the deaths stop, the survivors are reported a whole window
    /// after the last one, not at the limit.
    #[test]
    fn survivors_a_window_after_the_last_death() {
        let c = Clock(Instant::now());
        let p = policy(&c, None, ms(0), ms(0));
        let left = |t: Duration| {
            if t < ms(800) {
                vec![5, 6, 7]
            } else {
                vec![7]
            }
        };
        let (took, actions, asked) = drive_confirm(&p, c.at(ms(0)), false, left);
        assert_eq!(actions, vec![Action::Survivors(vec![7])]);
        assert!(took >= ms(1800) && took < ms(1820), "{took:?}");
        // Asked whether the rest is dying only once, at the end.
        assert_eq!(asked.iter().filter(|&&q| q == "dying").count(), 1);
    }

    /// Members that are all dying (SIGKILL pending, exiting, zombies) hold
    /// the run past the window, but never past the limit.
    #[test]
    fn dying_members_hold_until_the_limit() {
        let c = Clock(Instant::now());
        let p = policy(&c, None, ms(0), ms(0));
        let (took, actions, asked) = drive_confirm(&p, c.at(ms(0)), true, |_| vec![3, 1]);
        assert_eq!(actions, vec![Action::Survivors(vec![1, 3])]);
        assert!(took >= ms(10_000) && took < ms(10_011), "{took:?}");
        assert!(asked.contains(&"dying"));
        // ... and end as soon as the tree is empty.
        let gone = |t: Duration| if t < ms(1700) { vec![3, 1] } else { vec![] };
        let (took, actions, _) = drive_confirm(&p, c.at(ms(0)), true, gone);
        assert_eq!(actions, vec![]);
        assert!(took >= ms(1700) && took < ms(1720), "{took:?}");
    }

    /// A dying tree that keeps shrinking past the limit (one death every
    /// 2 s, 25 members: 48 s) is waited for to the end: the limit counts
    /// from the last death seen. One that keeps shrinking past the cap
    /// (six limits) is reported there.
    #[test]
    fn a_tree_that_keeps_dying_is_waited_for_up_to_the_cap() {
        let c = Clock(Instant::now());
        let p = policy(&c, None, ms(0), ms(0));
        let slow = |t: Duration| (0..25u32.saturating_sub(t.as_millis() as u32 / 2000)).collect();
        let (took, actions, _) = drive_confirm(&p, c.at(ms(0)), true, slow);
        assert_eq!(actions, vec![]);
        assert!(took >= ms(50_000) && took < ms(50_020), "{took:?}");
        let slower =
            |t: Duration| (0..100u32.saturating_sub(t.as_millis() as u32 / 2000)).collect();
        let (took, actions, _) = drive_confirm(&p, c.at(ms(0)), true, slower);
        assert!(
            matches!(&actions[..], [Action::Survivors(v)] if v.len() == 70),
            "{actions:?}"
        );
        assert!(took >= ms(60_000) && took < ms(60_011), "{took:?}");
        // Not dying: the window decides (no death within it), as before.
        let (took, actions, _) = drive_confirm(&p, c.at(ms(0)), false, slower);
        assert!(
            matches!(&actions[..], [Action::Survivors(_)]),
            "{actions:?}"
        );
        assert!(took >= ms(1000) && took < ms(1020), "{took:?}");
    }

    /// A look far later than it was due (the host stalled past the limit)
    /// at a tree that is all dying does not decide: the next look, on
    /// time, does. A tree not dying is reported at once.
    #[test]
    fn a_late_look_at_a_dying_tree_looks_again() {
        let c = Clock(Instant::now());
        let p = policy(&c, None, ms(0), ms(0));
        let seen = Observed {
            root: Some(RootStatus::Signaled(Signal::KILL)),
            root_exit_at: Some(c.at(ms(0))),
            open: 0,
            cancel: None,
            expired: false,
            last_output: None,
            over_limit: false,
        };
        let mut phase = confirming(Reason::TimedOut, c.at(ms(1000)), c.at(ms(100)));
        if let Phase::Confirming { left, .. } = &mut phase {
            *left = Some(Count::new(2));
        }
        let mut fake = Fake {
            members: vec![2, 1],
            dying: true,
            ..Fake::default()
        };
        // Due at 100 ms, looked at 12 s: past the limit (10 s), overslept.
        let (next, actions) = decide(phase, &seen, &mut fake, c.at(ms(12_000)), &p);
        assert!(actions.is_empty(), "{actions:?}");
        let Phase::Confirming { check, .. } = next else {
            panic!("{next:?}")
        };
        // On time, nothing died: survivors.
        let (end, actions) = decide(next, &seen, &mut fake, check.next, &p);
        assert!(end.is_over());
        assert_eq!(actions, vec![Action::Survivors(vec![1, 2])]);
        // Overslept, but nothing says the tree is dying: survivors at once.
        fake.dying = false;
        let (end, actions) = decide(phase, &seen, &mut fake, c.at(ms(12_000)), &p);
        assert!(end.is_over());
        assert_eq!(actions, vec![Action::Survivors(vec![1, 2])]);
        // Overslept past the cap: survivors at once.
        fake.dying = true;
        let (end, actions) = decide(phase, &seen, &mut fake, c.at(ms(61_000)), &p);
        assert!(end.is_over());
        assert_eq!(actions, vec![Action::Survivors(vec![1, 2])]);
    }

    /// The live members past the window, nothing dying, nothing shrinking:
    /// survivors at the window's end, as before; a zero window does not
    /// stretch at all; the limit is the window times `CONFIRM_STRETCH`.
    #[test]
    fn no_progress_means_survivors_at_the_window() {
        let c = Clock(Instant::now());
        let p = policy(&c, None, ms(0), ms(0));
        let (took, actions, _) = drive_confirm(&p, c.at(ms(0)), false, |_| vec![4]);
        assert_eq!(actions, vec![Action::Survivors(vec![4])]);
        assert!(took >= ms(1000) && took < ms(1020), "{took:?}");
        let zero = Policy {
            confirm_window: Duration::ZERO.into(),
            confirm_limit: Duration::ZERO.into(),
            ..p
        };
        let shrinking = |t: Duration| (0..(50u32.saturating_sub(t.as_micros() as u32))).collect();
        let (took, actions, _) = drive_confirm(&zero, c.at(ms(0)), true, shrinking);
        assert_eq!(took, Duration::ZERO);
        assert!(matches!(&actions[..], [Action::Survivors(_)]));
        // The phase entered on SIGKILL carries the limit.
        let (next, _) = decide(
            Phase::START,
            &Observed {
                cancel: Some(Some(Signal::KILL)),
                last_output: None,
                over_limit: false,
                ..running(0)
            },
            &mut Fake::default(),
            c.at(ms(0)),
            &p,
        );
        assert!(
            matches!(next, Phase::Confirming { until, limit, left: None, .. }
                if until == c.at(ms(1000)) && limit == c.at(ms(10_000))),
            "{next:?}"
        );
    }

    // ---- The idle timeout and the output limit (kept apart for merging). ----

    /// The idle timeout and the output limit, row by row with a fake clock:
    /// (case, idle timeout, deadline, wait delay, root exit, output last
    /// seen, open streams, held by the tree, over the limit, now) -> the
    /// reason the run ends for (`None`: it goes on).
    #[test]
    fn idle_timeout_and_output_limit_rows() {
        let c = Clock(Instant::now());
        type Row = (
            &'static str,
            Option<u64>,
            Option<u64>,
            u64,
            Option<u64>,
            Option<u64>,
            usize,
            bool,
            bool,
            u64,
        );
        let rows: &[(Row, Option<Reason>)] = &[
            // Silent from the spawn: fires at the idle timeout, not before.
            (
                (
                    "silent, early",
                    Some(500),
                    None,
                    2000,
                    None,
                    None,
                    1,
                    false,
                    false,
                    499,
                ),
                None,
            ),
            (
                (
                    "silent, due",
                    Some(500),
                    None,
                    2000,
                    None,
                    None,
                    1,
                    false,
                    false,
                    500,
                ),
                Some(Reason::Idle),
            ),
            // Output restarts it.
            (
                (
                    "chatty",
                    Some(500),
                    None,
                    2000,
                    None,
                    Some(400),
                    1,
                    false,
                    false,
                    800,
                ),
                None,
            ),
            (
                (
                    "chatty, then silent",
                    Some(500),
                    None,
                    2000,
                    None,
                    Some(400),
                    1,
                    false,
                    false,
                    900,
                ),
                Some(Reason::Idle),
            ),
            // No idle timeout: silence is never a reason.
            (
                (
                    "no idle limit",
                    None,
                    None,
                    2000,
                    None,
                    None,
                    1,
                    false,
                    false,
                    100_000,
                ),
                None,
            ),
            // Both limits: the first that fired wins, the deadline on a tie.
            (
                (
                    "deadline first",
                    Some(500),
                    Some(300),
                    2000,
                    None,
                    None,
                    1,
                    false,
                    false,
                    600,
                ),
                Some(Reason::TimedOut),
            ),
            (
                (
                    "idle first",
                    Some(500),
                    Some(900),
                    2000,
                    None,
                    None,
                    1,
                    false,
                    false,
                    950,
                ),
                Some(Reason::Idle),
            ),
            (
                (
                    "tie",
                    Some(500),
                    Some(500),
                    2000,
                    None,
                    None,
                    1,
                    false,
                    false,
                    500,
                ),
                Some(Reason::TimedOut),
            ),
            // During the wait delay: a silent holder is ended by the idle
            // timeout when it comes first ...
            (
                (
                    "idle in the wait delay",
                    Some(500),
                    None,
                    2000,
                    Some(100),
                    None,
                    1,
                    true,
                    false,
                    500,
                ),
                Some(Reason::Idle),
            ),
            // ... and by the wait delay when that ends first.
            (
                (
                    "wait delay first",
                    Some(1000),
                    None,
                    300,
                    Some(100),
                    None,
                    1,
                    true,
                    false,
                    1100,
                ),
                Some(Reason::OutputHeld),
            ),
            // Wait delay over with nothing held (draining), idle came after: idle.
            (
                (
                    "wait delay, not held",
                    Some(1000),
                    None,
                    300,
                    Some(100),
                    None,
                    1,
                    false,
                    false,
                    1100,
                ),
                Some(Reason::Idle),
            ),
            // A clean exit ends the run before the idle timeout matters.
            (
                (
                    "clean exit",
                    Some(500),
                    None,
                    2000,
                    Some(100),
                    None,
                    0,
                    false,
                    false,
                    5000,
                ),
                None,
            ),
            // Over the limit: at once, whatever else holds.
            (
                (
                    "over the limit",
                    Some(500),
                    Some(300),
                    2000,
                    None,
                    None,
                    1,
                    false,
                    true,
                    10,
                ),
                Some(Reason::OutputLimit),
            ),
            (
                (
                    "over, then exited",
                    None,
                    None,
                    2000,
                    Some(5),
                    None,
                    0,
                    false,
                    true,
                    10,
                ),
                Some(Reason::OutputLimit),
            ),
            (
                (
                    "over, past the deadline",
                    None,
                    Some(5),
                    2000,
                    None,
                    None,
                    1,
                    false,
                    true,
                    10,
                ),
                Some(Reason::OutputLimit),
            ),
        ];
        for &((case, idle, deadline, wait_delay, exit, last, open, held, over, now), want) in rows {
            let p = Policy {
                idle_timeout: idle.map(ms).into(),
                ..policy(&c, deadline.map(ms), ms(0), ms(wait_delay))
            };
            let seen = Observed {
                root: exit.map(|_| RootStatus::Exited(0)),
                root_exit_at: exit.map(|e| c.at(ms(e))),
                open,
                cancel: None,
                expired: false,
                last_output: last.map(|l| c.at(ms(l))),
                over_limit: over,
            };
            let mut probe = fake(&[7], held, held, false);
            let (next, actions) = decide(Phase::START, &seen, &mut probe, c.at(ms(now)), &p);
            let got = next.reason();
            assert_eq!(got, want, "{case}");
            if want.is_some() {
                assert_eq!(actions, vec![Action::Signal(Signal::KILL)], "{case}");
            }
        }
    }

    /// The next timer while supervising includes the idle timeout, counted
    /// from the last output (or the spawn).
    #[test]
    fn idle_timer_is_a_wake() {
        let c = Clock(Instant::now());
        let p = Policy {
            idle_timeout: Some(ms(500)).into(),
            ..policy(&c, Some(ms(800)), ms(0), ms(100))
        };
        assert_eq!(Phase::START.next_timer(None, None, &p), Some(c.at(ms(500))));
        assert_eq!(
            Phase::START.next_timer(None, Some(c.at(ms(200))), &p),
            Some(c.at(ms(700)))
        );
        assert_eq!(
            Phase::START.next_timer(None, Some(c.at(ms(400))), &p),
            Some(c.at(ms(800)))
        );
        // The end of the wait delay when it comes first.
        assert_eq!(
            Phase::START.next_timer(Some(c.at(ms(50))), Some(c.at(ms(400))), &p),
            Some(c.at(ms(150)))
        );
        // With a grace: the idle timeout's termination starts with the
        // first signal, as the deadline's.
        let graceful = Policy {
            grace: ms(300).into(),
            ..p
        };
        let (next, actions) = decide(
            Phase::START,
            &running(1),
            &mut fake(&[7], false, false, false),
            c.at(ms(500)),
            &graceful,
        );
        assert!(
            matches!(
                next,
                Phase::Grace {
                    reason: Reason::Idle,
                    ..
                }
            ),
            "{next:?}"
        );
        assert_eq!(actions, vec![Action::Signal(Signal::TERM)]);
    }

    /// The async driver waits for a shared look at the tree only when the
    /// decision then looks (`Phase::looks_at_tree`): each case where the
    /// hint says so, `decide` lists the members (or the leftovers), and
    /// where it says not, `decide` asks nothing of the tree.
    #[test]
    fn a_shared_look_is_asked_for_only_when_the_decision_looks() {
        let c = Clock(Instant::now());
        let now = c.at(ms(50));
        for leftovers in [LeftoverPolicy::Kill, LeftoverPolicy::KeepOnSuccess] {
            let p = Policy {
                leftovers,
                ..policy(&c, Some(ms(10_000)), ms(0), ms(0))
            };
            let over_limit = Observed {
                over_limit: true,
                ..exited(&c, 0, ms(5), 0)
            };
            let cases = [
                ("clean exit", Phase::START, exited(&c, 1, ms(5), 0), true),
                (
                    "exited, output open",
                    Phase::START,
                    exited(&c, 0, ms(5), 1),
                    false,
                ),
                ("running", Phase::START, running(0), false),
                ("output limit", Phase::START, over_limit, false),
                (
                    "confirming, check due",
                    confirming(Reason::TimedOut, c.at(ms(5000)), c.at(ms(40))),
                    exited(&c, 0, ms(5), 0),
                    true,
                ),
                (
                    "confirming, check not due",
                    confirming(Reason::TimedOut, c.at(ms(5000)), c.at(ms(60))),
                    exited(&c, 0, ms(5), 0),
                    false,
                ),
                (
                    "settling, check due",
                    Phase::Settling {
                        until: c.at(ms(5000)),
                        check: Check {
                            next: c.at(ms(40)),
                            interval: CHECK_FIRST,
                        },
                    },
                    exited(&c, 0, ms(5), 0),
                    true,
                ),
                (
                    "over",
                    Phase::Over { reason: None },
                    exited(&c, 0, ms(5), 0),
                    false,
                ),
            ];
            for (what, phase, seen, looks) in cases {
                assert_eq!(phase.looks_at_tree(&seen, now), looks, "{what}");
                let mut f = fake(&[], false, false, false);
                let _ = decide(phase, &seen, &mut f, now, &p);
                let looked = f.asked.iter().any(|a| *a == "members" || *a == "leftovers");
                if looks {
                    assert!(looked, "{what}, {leftovers:?}: asked {:?}", f.asked);
                } else if what != "output limit" {
                    assert!(!looked, "{what}, {leftovers:?}: asked {:?}", f.asked);
                }
            }
        }
    }
}
