//! The checker of promise 3 ("never the wrong process") over one run's
//! recorded OS operations (`Command::trace_ops`), for every containment
//! tier. Each rule has a name, printed in brackets at the start of its
//! message; the unit tests below show that a trace breaking each rule is
//! rejected.
//!
//! The tree's *identity* is what its signals go through: the process group
//! whose id is the root's pid (process group, subreaper), the namespace's
//! init, which is the root (PID namespace), or the cgroup directory's inode
//! (cgroup). The rules:
//!
//! * `keeper-holds-first`: `KeeperHolds` (the crash-safety keeper holds the
//!   tree by its cookie), if recorded, comes first, before `Spawned`, once,
//!   by the tier, and only in the process-group and subreaper tiers.
//! * `spawned-first`: `Spawned` comes first (after `KeeperHolds`), once,
//!   with the report's pid.
//! * `reaped-once`: exactly one `Reaped`, of that pid. Until then the root
//!   (group leader, init) is an unreaped zombie at worst: its pid, and the
//!   group id, cannot be reused.
//! * `released-once`: exactly one `Released`, by the tier, and it is the last
//!   operation.
//! * `signal-while-held`: every signal (`SignalTree`, `SignalMember`,
//!   `KillAgain`, `KillStopped`) comes after `Spawned` and before `Reaped`,
//!   by the tier.
//! * `identity`: every `SignalTree` and `KillAgain` goes through the tree's
//!   identity (cgroup: one inode for the whole run, the one removed or
//!   pooled at release).
//! * `one-kill`: at most one `SignalTree` SIGKILL, and no `SignalTree` after
//!   it.
//! * `member-follows-tree`: a `SignalMember` carries the latest tree signal
//!   (or the SIGCONT that precedes a graceful one); after the tree's SIGKILL,
//!   SIGKILL only, at most once per member.
//! * `kill-again-after-kill`: `KillAgain` only after the tree's SIGKILL.
//! * `continue-first`: in the process-group, subreaper and cgroup tiers,
//!   every graceful tree signal (not SIGKILL, not SIGCONT) comes right
//!   after `TreeContinued` (SIGCONT through the tree's identity), with only
//!   the SIGCONT to members outside the identity between; `TreeContinued`
//!   only so. The SIGCONT comes first: a root that died of the signal
//!   before a SIGCONT sent after it would orphan its process group (no
//!   subreaper host) while a member is still stopped, and the kernel sends
//!   such a member SIGHUP before it can act on the signal (issue 37).
//! * `stop-count-kill`: in the process-group tier (Linux) the tree's
//!   SIGKILL comes right after `TreeStopped` and a scan of its members
//!   (`MembersScanned`), with no tree signal between: every member the
//!   kill ends was found, stopped, and watched for the killed count before
//!   it (issue 37). `TreeStopped` only so, once, by that tier, through the
//!   tree's identity.
//! * `stopped-kill`: `KillStopped` (the keep rule: a stopped leftover of a
//!   clean exit) only while no tree signal was sent (one may follow: the
//!   run dropped meanwhile is killed); at most once per leftover.
//! * `root-exit`: `RootExited` at most once, of the root, before `Reaped`.
//! * `report`: the tree signals recorded are the report's `signals_sent`.
//! * `cgroup-release`: in the cgroup tier the directory is released exactly
//!   once, by removal or by return to the pool, between `Reaped` and
//!   `Released` (so after the last signal); a cgroup that was ever sent
//!   SIGKILL is never pooled (a later run would be born into a cgroup that
//!   was killed). No other tier records a cgroup release.

use corral::{Mechanism, OsOp, Signal};

/// Checks one run's record `ops` for a run in `tier` whose root had pid
/// `pid`. `signals` is the report's `signals_sent` (`None` when there is no
/// report, e.g. a `Running` dropped without `wait`). Returns the first rule
/// broken, with the record.
pub fn check(
    tier: Mechanism,
    ops: &[OsOp],
    pid: u32,
    signals: Option<&[Signal]>,
) -> Result<(), String> {
    stop_count_kill(tier, ops).map_err(|e| format!("{e}\ntier: {tier:?}\nops: {ops:?}"))?;
    // Scans of the machine's processes touch no identity (a scan after the
    // release, counting kept leftovers, is allowed): the other rules
    // ignore them.
    let identity: Vec<OsOp> = ops
        .iter()
        .filter(|o| !matches!(o, OsOp::MembersScanned { .. }))
        .cloned()
        .collect();
    rules(tier, &identity, pid, signals).map_err(|e| format!("{e}\ntier: {tier:?}\nops: {ops:?}"))
}

/// How many scans of the machine's processes (`OsOp::MembersScanned`)
/// came before and after the tree's first SIGKILL; `None` without one.
pub fn scans_around_the_kill(ops: &[OsOp]) -> Option<(usize, usize)> {
    let kill = ops.iter().position(|op| {
        matches!(
            op,
            OsOp::SignalTree {
                signal: Signal::KILL,
                ..
            }
        )
    })?;
    let scans = |ops: &[OsOp]| {
        ops.iter()
            .filter(|op| matches!(op, OsOp::MembersScanned { .. }))
            .count()
    };
    Some((scans(&ops[..kill]), scans(&ops[kill..])))
}

/// The process-group tier's rule after a SIGKILL: exactly one scan of the
/// machine's processes (the group cannot grow after it), or at least one
/// when a tree of up to `members` processes may not all get a pidfd: more
/// than the tier pins at once (`PROCESS_GROUP_PINS_MAX`), or more than
/// this process's `RLIMIT_NOFILE` allows (the members the scan could not
/// pin make the next check scan again). When `killed_first` (no grace), the
/// scans before it are the one of the stopped tree and, when the root's exit
/// was not seen before the stop, one of the live tree right before the stop.
#[cfg(unix)]
#[track_caller]
pub fn assert_one_scan_after_the_kill(ops: &[OsOp], members: usize, killed_first: bool) {
    let Some((before, after)) = scans_around_the_kill(ops) else {
        panic!("no SIGKILL to the tree: {ops:?}");
    };
    if let Err(e) = stop_count_kill(Mechanism::ProcessGroup, ops) {
        panic!("{e}\nops: {ops:?}");
    }
    let nofile = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(u64::MAX);
    if members < corral::PROCESS_GROUP_PINS_MAX && (members as u64).saturating_add(128) < nofile {
        assert_eq!(after, 1, "scans after the kill: {ops:?}");
    } else {
        assert!(after >= 1, "scans after the kill: {ops:?}");
    }
    if killed_first {
        // The stopped tree's scan, and, when the root's exit was not seen
        // before the stop, one of the live tree right before the stop (a
        // root finishing its exit while the group is stopped orphans it,
        // and the kernel's SIGHUP can end members before the second scan).
        let stop = ops
            .iter()
            .position(|o| matches!(o, OsOp::TreeStopped { .. }))
            .unwrap_or(ops.len());
        let root_seen_exited = ops[..stop]
            .iter()
            .any(|o| matches!(o, OsOp::RootExited { .. }));
        let want = if root_seen_exited { 1 } else { 2 };
        assert_eq!(before, want, "scans before the kill: {ops:?}");
        if want == 2 {
            assert!(
                matches!(
                    ops.get(stop.wrapping_sub(1)),
                    Some(OsOp::MembersScanned { .. })
                ),
                "the live tree's scan comes right before the stop: {ops:?}"
            );
        }
    }
}

/// stop-count-kill (see the module docs).
fn stop_count_kill(tier: Mechanism, ops: &[OsOp]) -> Result<(), String> {
    let stops = positions(ops, |o| matches!(o, OsOp::TreeStopped { .. }));
    let kill = ops.iter().position(|o| {
        matches!(
            o,
            OsOp::SignalTree {
                signal: Signal::KILL,
                ..
            }
        )
    });
    let pg = tier == Mechanism::ProcessGroup;
    match (&stops[..], kill) {
        ([], Some(k)) if pg && cfg!(target_os = "linux") => fail(
            "stop-count-kill",
            format!("SIGKILL at {k} without the stop and the scan right before it"),
        ),
        ([], _) => Ok(()),
        (&[s], Some(k)) if pg && s < k => {
            let between = &ops[s + 1..k];
            let scanned = between
                .iter()
                .any(|o| matches!(o, OsOp::MembersScanned { .. }));
            let signalled = between.iter().any(|o| {
                matches!(
                    o,
                    OsOp::SignalTree { .. }
                        | OsOp::TreeContinued { .. }
                        | OsOp::SignalMember { .. }
                        | OsOp::KillAgain { .. }
                )
            });
            if !scanned || signalled {
                return fail(
                    "stop-count-kill",
                    format!(
                        "between the stop at {s} and the SIGKILL at {k}: \
                         scanned {scanned}, a signal {signalled}"
                    ),
                );
            }
            Ok(())
        }
        _ => fail(
            "stop-count-kill",
            format!("stops at {stops:?}, SIGKILL at {kill:?}: one stop, right before the SIGKILL, by the process-group tier"),
        ),
    }
}

/// [`check`], as an assertion.
#[track_caller]
pub fn assert_ok(tier: Mechanism, ops: &[OsOp], pid: u32, signals: Option<&[Signal]>) {
    if let Err(e) = check(tier, ops, pid, signals) {
        panic!("{e}");
    }
}

/// Every rule of the order, in turn; the first broken one is named.
fn rules(
    tier: Mechanism,
    ops: &[OsOp],
    pid: u32,
    signals: Option<&[Signal]>,
) -> Result<(), String> {
    let ops = keeper_holds_first(tier, ops)?;
    let reaped = spawned_reaped_released(tier, ops, pid)?;
    let identity = cgroup_release(tier, ops, reaped, pid)?;
    let tree_signals = signals_while_held(tier, ops, pid, reaped, identity)?;
    if let Some(sent) = signals {
        if tree_signals != sent {
            return fail(
                "report",
                format!("recorded tree signals {tree_signals:?}, report {sent:?}"),
            );
        }
    }
    Ok(())
}

/// A broken rule, named.
fn fail<T>(rule: &str, what: String) -> Result<T, String> {
    Err(format!("[{rule}] {what}"))
}

fn count(ops: &[OsOp], f: impl Fn(&OsOp) -> bool) -> usize {
    ops.iter().filter(|o| f(o)).count()
}

/// keeper-holds-first: the keeper's hold (process-group and subreaper
/// tiers only) comes before everything else, once. Returns the rest.
fn keeper_holds_first(tier: Mechanism, ops: &[OsOp]) -> Result<&[OsOp], String> {
    let holds = positions(ops, |o| matches!(o, OsOp::KeeperHolds { .. }));
    for &i in &holds {
        let by_tier = matches!(ops[i], OsOp::KeeperHolds { via } if via == tier);
        let cookie_tier = matches!(tier, Mechanism::ProcessGroup | Mechanism::Subreaper);
        if i != 0 || !by_tier || !cookie_tier {
            return fail(
                "keeper-holds-first",
                format!(
                    "{:?} at {i}: only first, once, by a process-group or subreaper tier",
                    ops[i]
                ),
            );
        }
    }
    Ok(&ops[holds.len()..])
}

/// spawned-first, reaped-once, released-once. Returns where the root was
/// reaped.
fn spawned_reaped_released(tier: Mechanism, ops: &[OsOp], pid: u32) -> Result<usize, String> {
    if !matches!(ops.first(), Some(OsOp::Spawned { pid: p }) if *p == pid) {
        return fail(
            "spawned-first",
            format!("Spawned {{ pid: {pid} }} must come first"),
        );
    }
    if count(ops, |o| matches!(o, OsOp::Spawned { .. })) != 1 {
        return fail("spawned-first", "Spawned more than once".into());
    }
    let reaped: Vec<usize> = positions(ops, |o| matches!(o, OsOp::Reaped { .. }));
    let [reaped] = reaped[..] else {
        return fail("reaped-once", format!("{} Reaped, not one", reaped.len()));
    };
    if ops[reaped] != (OsOp::Reaped { pid }) {
        return fail("reaped-once", format!("Reaped is not of the root {pid}"));
    }
    if count(ops, |o| matches!(o, OsOp::Released { .. })) != 1 {
        return fail("released-once", "Released not exactly once".into());
    }
    if ops.last() != Some(&OsOp::Released { via: tier }) {
        return fail(
            "released-once",
            format!("Released {{ via: {tier:?} }} must come last"),
        );
    }
    Ok(reaped)
}

/// cgroup-release: a cgroup run's cgroup is pooled or removed once, after
/// the reap and just before the release, and never pooled after a SIGKILL;
/// no other tier releases a cgroup. Returns the identity signals must name
/// (the cgroup's inode, or the root's pid).
fn cgroup_release(tier: Mechanism, ops: &[OsOp], reaped: usize, pid: u32) -> Result<u64, String> {
    let gone: Vec<usize> = positions(ops, |o| {
        matches!(o, OsOp::CgroupPooled { .. } | OsOp::CgroupRemoved { .. })
    });
    if tier != Mechanism::Cgroup {
        if !gone.is_empty() {
            return fail(
                "cgroup-release",
                format!("a cgroup release in the {tier:?} tier"),
            );
        }
        return Ok(pid as u64);
    }
    let [g] = gone[..] else {
        return fail(
            "cgroup-release",
            format!(
                "{} cgroup releases (pooled or removed), not one",
                gone.len()
            ),
        );
    };
    if !(reaped < g && g == ops.len() - 2) {
        return fail(
            "cgroup-release",
            "the cgroup must be pooled or removed after Reaped, just before Released".into(),
        );
    }
    let killed = ops.iter().any(|o| {
        matches!(
            o,
            OsOp::SignalTree {
                signal: Signal::KILL,
                ..
            } | OsOp::SignalMember {
                signal: Signal::KILL,
                ..
            } | OsOp::KillAgain { .. }
        )
    });
    match ops[g] {
        OsOp::CgroupPooled { .. } if killed => fail(
            "cgroup-release",
            "a cgroup sent SIGKILL went back to the pool".into(),
        ),
        OsOp::CgroupPooled { inode } | OsOp::CgroupRemoved { inode } => Ok(inode),
        _ => unreachable!(),
    }
}

/// signal-while-held, identity, one-kill, member-follows-tree,
/// kill-again-after-kill, root-exit. Returns the tree signals in order.
fn signals_while_held(
    tier: Mechanism,
    ops: &[OsOp],
    pid: u32,
    reaped: usize,
    identity: u64,
) -> Result<Vec<Signal>, String> {
    let mut order = SignalOrder::default();
    for (i, op) in ops.iter().enumerate() {
        let (what, via, target): (Option<&str>, _, _) = match *op {
            OsOp::SignalTree { via, target, .. } => (Some("tree signal"), via, Some(target)),
            OsOp::SignalMember { via, .. } => (Some("member signal"), via, None),
            OsOp::KillStopped { via, .. } => (Some("stopped leftover's kill"), via, None),
            OsOp::KillAgain { via, target } => (Some("kill again"), via, Some(target)),
            OsOp::TreeStopped { via, target } => (Some("tree stop"), via, Some(target)),
            OsOp::TreeContinued { via, target } => (Some("tree SIGCONT"), via, Some(target)),
            _ => (None, tier, None),
        };
        let held = 0 < i && i < reaped && via == tier;
        if let Some(what) = what.filter(|_| !held) {
            return fail(
                "signal-while-held",
                format!("{what} at {i} by {via:?} outside (Spawned, Reaped) or not by the tier"),
            );
        }
        if let Some(target) = target.filter(|t| *t != identity) {
            let what = what.unwrap_or_default();
            return fail(
                "identity",
                format!("{what} at {i} to {target}, not to the tree's {identity}"),
            );
        }
        order.step(tier, i, op, pid, reaped)?;
    }
    if order.continued {
        return fail(
            "continue-first",
            "a tree SIGCONT not followed by a graceful tree signal".into(),
        );
    }
    Ok(order.tree_signals)
}

/// What the signal rules remember while walking the operations.
#[derive(Default)]
struct SignalOrder {
    tree_signals: Vec<Signal>,
    last_tree: Option<Signal>,
    member_kills: std::collections::HashSet<u32>,
    stopped_kills: std::collections::HashSet<u32>,
    exits: usize,
    /// A `TreeContinued` waits for its graceful tree signal.
    continued: bool,
}

/// The tiers whose graceful tree signals follow a `TreeContinued`.
fn continues_first(tier: Mechanism) -> bool {
    matches!(
        tier,
        Mechanism::ProcessGroup | Mechanism::Subreaper | Mechanism::Cgroup
    )
}

impl SignalOrder {
    fn step(
        &mut self,
        tier: Mechanism,
        i: usize,
        op: &OsOp,
        pid: u32,
        reaped: usize,
    ) -> Result<(), String> {
        // continue-first: between a tree SIGCONT and its graceful signal,
        // only the SIGCONT to members outside the identity.
        let member_cont = matches!(
            *op,
            OsOp::SignalMember {
                signal: Signal::CONT,
                ..
            }
        );
        match *op {
            OsOp::TreeContinued { .. } if !continues_first(tier) || self.continued => {
                return fail("continue-first", format!("tree SIGCONT at {i}"));
            }
            OsOp::TreeContinued { .. } => {
                if self.last_tree == Some(Signal::KILL) {
                    return fail("one-kill", format!("tree SIGCONT at {i} after SIGKILL"));
                }
                self.continued = true;
                return Ok(());
            }
            OsOp::SignalTree { signal, .. }
                if continues_first(tier)
                    && self.last_tree != Some(Signal::KILL)
                    && signal != Signal::KILL
                    && signal != Signal::CONT
                    && !self.continued =>
            {
                return fail(
                    "continue-first",
                    format!(
                        "tree signal {signal:?} at {i} without the tree's SIGCONT right before"
                    ),
                );
            }
            OsOp::SignalTree { signal, .. }
                if self.continued && (signal == Signal::KILL || signal == Signal::CONT) =>
            {
                return fail(
                    "continue-first",
                    format!("tree SIGCONT followed by {signal:?} at {i}"),
                );
            }
            OsOp::SignalMember { .. } if self.continued && member_cont => return Ok(()),
            _ if self.continued && !matches!(*op, OsOp::SignalTree { .. }) => {
                return fail(
                    "continue-first",
                    format!("{op:?} at {i} between a tree SIGCONT and its signal"),
                );
            }
            _ => {}
        }
        if matches!(*op, OsOp::SignalTree { .. }) {
            self.continued = false;
        }
        match *op {
            OsOp::KillStopped { pid: m, .. } => {
                if let Some(t) = self.last_tree {
                    return fail(
                        "stopped-kill",
                        format!("stopped leftover {m} killed at {i} after tree signal {t:?}"),
                    );
                }
                if !self.stopped_kills.insert(m) {
                    return fail("stopped-kill", format!("stopped leftover {m} killed twice"));
                }
            }
            OsOp::SignalTree { signal, .. } => {
                if self.last_tree == Some(Signal::KILL) {
                    return fail(
                        "one-kill",
                        format!("tree signal {signal:?} at {i} after SIGKILL"),
                    );
                }
                self.last_tree = Some(signal);
                self.tree_signals.push(signal);
            }
            OsOp::SignalMember { pid: m, signal, .. } => {
                let fits = match self.last_tree {
                    None => false,
                    Some(Signal::KILL) => signal == Signal::KILL,
                    Some(t) => signal == t || signal == Signal::CONT,
                };
                if !fits {
                    let last = self.last_tree;
                    return fail(
                        "member-follows-tree",
                        format!("member {m} sent {signal:?} at {i} after tree signal {last:?}"),
                    );
                }
                if signal == Signal::KILL && !self.member_kills.insert(m) {
                    return fail(
                        "member-follows-tree",
                        format!("member {m} sent SIGKILL twice"),
                    );
                }
            }
            OsOp::KillAgain { .. } if self.last_tree != Some(Signal::KILL) => {
                return fail(
                    "kill-again-after-kill",
                    format!("kill again at {i} before the tree's SIGKILL"),
                );
            }
            OsOp::RootExited { pid: p } => {
                self.exits += 1;
                if p != pid || i > reaped || self.exits > 1 {
                    return fail("root-exit", format!("RootExited {{ pid: {p} }} at {i}"));
                }
            }
            _ => {}
        }
        Ok(())
    }
}

fn positions(ops: &[OsOp], f: impl Fn(&OsOp) -> bool) -> Vec<usize> {
    ops.iter()
        .enumerate()
        .filter(|(_, o)| f(o))
        .map(|(i, _)| i)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use OsOp::*;

    const PID: u32 = 4242;
    const INODE: u64 = 777;
    const PG: Mechanism = Mechanism::ProcessGroup;
    const CG: Mechanism = Mechanism::Cgroup;
    const SR: Mechanism = Mechanism::Subreaper;
    const NS: Mechanism = Mechanism::PidNamespace;
    const ALL: [Mechanism; 4] = [PG, CG, SR, NS];
    const SENT: &[Signal] = &[Signal::TERM, Signal::KILL];

    fn tree(via: Mechanism, signal: Signal) -> OsOp {
        let target = if via == CG { INODE } else { PID as u64 };
        SignalTree {
            via,
            target,
            signal,
        }
    }

    fn cont(via: Mechanism) -> OsOp {
        let target = if via == CG { INODE } else { PID as u64 };
        TreeContinued { via, target }
    }

    fn member(via: Mechanism, pid: u32, signal: Signal) -> OsOp {
        SignalMember { via, pid, signal }
    }

    fn again(via: Mechanism) -> OsOp {
        KillAgain {
            via,
            target: PID as u64,
        }
    }

    /// A tier other than `via`.
    fn other(via: Mechanism) -> Mechanism {
        if via == PG {
            CG
        } else {
            PG
        }
    }

    /// A well-formed timed-out run with a grace in `via`: CONT (to the tree
    /// and a member) then TERM, then KILL, members and a kill again where the tier has
    /// them, the root's exit, the reap, the release.
    fn good(via: Mechanism) -> Vec<OsOp> {
        let mut ops = vec![Spawned { pid: PID }];
        if via != NS {
            ops.push(cont(via));
        }
        if via == SR || via == CG {
            ops.push(member(via, 10, Signal::CONT));
        }
        ops.push(tree(via, Signal::TERM));
        if via == SR || via == CG {
            ops.push(member(via, 10, Signal::TERM));
        }
        if via == PG {
            ops.push(TreeStopped {
                via,
                target: PID as u64,
            });
            ops.push(MembersScanned { via });
        }
        ops.push(tree(via, Signal::KILL));
        if via == SR || via == CG {
            ops.push(member(via, 11, Signal::KILL));
        }
        if via == SR {
            ops.push(again(via));
        }
        ops.push(RootExited { pid: PID });
        ops.push(Reaped { pid: PID });
        if via == CG {
            ops.push(CgroupRemoved { inode: INODE });
        }
        ops.push(Released { via });
        ops
    }

    #[track_caller]
    fn rejected(via: Mechanism, ops: &[OsOp], sent: &[Signal], rule: &str) {
        match check(via, ops, PID, Some(sent)) {
            Ok(()) => panic!("accepted a trace breaking [{rule}]: {ops:?}"),
            Err(e) => assert!(
                e.starts_with(&format!("[{rule}]")),
                "wanted [{rule}], got {e}"
            ),
        }
    }

    /// Asserts that `good(via)` changed by `f` breaks `rule`.
    #[track_caller]
    fn rejects(via: Mechanism, rule: &str, f: impl FnOnce(&mut Vec<OsOp>)) {
        rejects_with(via, SENT, rule, f);
    }

    /// [`rejects`], for a report that sent `sent`.
    #[track_caller]
    fn rejects_with(via: Mechanism, sent: &[Signal], rule: &str, f: impl FnOnce(&mut Vec<OsOp>)) {
        let mut ops = good(via);
        f(&mut ops);
        rejected(via, &ops, sent, rule);
    }

    fn at(ops: &[OsOp], f: impl Fn(&OsOp) -> bool) -> usize {
        ops.iter().position(f).unwrap()
    }

    fn reaped_at(ops: &[OsOp]) -> usize {
        at(ops, |o| matches!(o, Reaped { .. }))
    }

    fn kill_at(ops: &[OsOp]) -> usize {
        at(ops, |o| {
            matches!(
                o,
                SignalTree {
                    signal: Signal::KILL,
                    ..
                }
            )
        })
    }

    /// Moves the first op that `f` matches to just after `Reaped`.
    fn move_after_reap(ops: &mut Vec<OsOp>, f: impl Fn(&OsOp) -> bool) {
        let x = ops.remove(at(ops, f));
        let r = reaped_at(ops);
        ops.insert(r + 1, x);
    }

    /// Replaces the cgroup's release (just before `Released`) by `op`.
    fn set_cgroup_release(ops: &mut [OsOp], op: OsOp) {
        let n = ops.len();
        ops[n - 2] = op;
    }

    #[test]
    fn well_formed_traces_pass_in_every_tier() {
        for via in ALL {
            check(via, &good(via), PID, Some(SENT)).unwrap();
        }
        // A clean run: no signal; a cgroup goes back to the pool.
        let clean = vec![
            Spawned { pid: PID },
            RootExited { pid: PID },
            Reaped { pid: PID },
            CgroupPooled { inode: INODE },
            Released { via: CG },
        ];
        check(CG, &clean, PID, Some(&[])).unwrap();
        // No report (dropped run).
        check(PG, &good(PG), PID, None).unwrap();
    }

    /// The keep rule's kill of a stopped leftover: after the root's exit,
    /// before the reap, with no tree signal before it.
    #[test]
    fn a_stopped_leftover_is_killed_only_on_a_clean_exit_while_held() {
        let kept = |via: Mechanism| {
            let mut ops = vec![
                Spawned { pid: PID },
                RootExited { pid: PID },
                KillStopped { via, pid: 12 },
                KillStopped { via, pid: 13 },
                Reaped { pid: PID },
            ];
            if via == CG {
                ops.push(CgroupRemoved { inode: INODE });
            }
            ops.push(Released { via });
            ops
        };
        let rejected = |via, rule: &str, f: &dyn Fn(&mut Vec<OsOp>)| {
            let mut ops = kept(via);
            f(&mut ops);
            let e = check(via, &ops, PID, None).expect_err("must be rejected");
            assert!(e.contains(&format!("[{rule}]")), "{rule}: {e}");
        };
        for via in ALL {
            check(via, &kept(via), PID, Some(&[])).unwrap();
            // After the reap, or by another tier.
            rejected(via, "signal-while-held", &|o| {
                let k = o.remove(2);
                let r = reaped_at(o);
                o.insert(r + 1, k);
            });
            rejected(via, "signal-while-held", &|o| {
                o[2] = KillStopped {
                    via: other(via),
                    pid: 12,
                }
            });
            // Twice the same leftover.
            rejected(via, "stopped-kill", &|o| {
                o[3] = KillStopped { via, pid: 12 }
            });
            // After a tree signal (the tree was being terminated).
            rejected(via, "stopped-kill", &|o| {
                o.insert(2, tree(via, Signal::TERM));
                if via != NS {
                    o.insert(2, cont(via));
                }
            });
        }
    }

    #[test]
    fn spawned_first() {
        for via in ALL {
            let s = at(&good(via), |o| matches!(o, Spawned { .. }));
            rejects(via, "spawned-first", |o| o.swap(s, s + 1));
            rejects(via, "spawned-first", |o| o[s] = Spawned { pid: PID + 1 });
            rejects(via, "spawned-first", |o| {
                o.insert(s + 1, Spawned { pid: PID })
            });
        }
    }

    #[test]
    fn keeper_holds_first() {
        for via in [PG, SR] {
            // First, before the spawn: well formed (and without it too:
            // no keeper here).
            let mut ops = good(via);
            ops.insert(0, KeeperHolds { via });
            check(via, &ops, PID, Some(SENT)).unwrap();
            // After the spawn: the root ran uncovered for a moment.
            rejects(via, "keeper-holds-first", |o| {
                o.insert(1, KeeperHolds { via })
            });
            // Twice, or by another tier.
            rejects(via, "keeper-holds-first", |o| {
                o.insert(0, KeeperHolds { via });
                o.insert(0, KeeperHolds { via });
            });
            rejects(via, "keeper-holds-first", |o| {
                o.insert(0, KeeperHolds { via: other(via) })
            });
        }
        // Tiers that hold the tree otherwise record none.
        for via in [CG, NS] {
            rejects(via, "keeper-holds-first", |o| {
                o.insert(0, KeeperHolds { via })
            });
        }
    }

    #[test]
    fn reaped_once() {
        for via in ALL {
            rejects(via, "reaped-once", |o| {
                o.remove(reaped_at(o));
            });
            rejects(via, "reaped-once", |o| {
                o.insert(reaped_at(o), Reaped { pid: PID })
            });
            rejects(via, "reaped-once", |o| {
                let r = reaped_at(o);
                o[r] = Reaped { pid: PID + 1 };
            });
        }
    }

    #[test]
    fn released_once_and_last() {
        for via in ALL {
            // A second release.
            rejects(via, "released-once", |o| o.push(Released { via }));
            // Never released.
            rejects(via, "released-once", |o| {
                o.pop();
            });
            // Released by another tier.
            rejects(via, "released-once", |o| {
                *o.last_mut().unwrap() = Released { via: other(via) }
            });
            // Released, then something else.
            rejects(via, "released-once", |o| o.push(RootExited { pid: PID }));
        }
    }

    #[test]
    fn no_signal_after_the_reap_or_release() {
        for via in ALL {
            // A tree signal after the reap (the pid may be reused by then).
            rejects(via, "signal-while-held", |o| {
                o.insert(reaped_at(o) + 1, tree(via, Signal::TERM))
            });
            // A member signal after the reap.
            rejects(via, "signal-while-held", |o| {
                o.insert(reaped_at(o) + 1, member(via, 12, Signal::KILL))
            });
            // A signal by another mechanism.
            rejects(via, "signal-while-held", |o| {
                let mut s = tree(via, Signal::TERM);
                if let SignalTree { via: v, .. } = &mut s {
                    *v = other(via);
                }
                o.insert(1, s)
            });
        }
        // Kill again after the reap.
        rejects(SR, "signal-while-held", |o| {
            move_after_reap(o, |x| matches!(x, KillAgain { .. }))
        });
    }

    #[test]
    fn signals_go_through_the_identity() {
        for via in ALL {
            rejects(via, "identity", |o| {
                let t = at(o, |x| matches!(x, SignalTree { .. }));
                if let SignalTree { target, .. } = &mut o[t] {
                    *target += 1;
                }
            });
            if via != NS {
                rejects(via, "identity", |o| {
                    if let TreeContinued { target, .. } = &mut o[1] {
                        *target += 1;
                    }
                });
            }
        }
        // cgroup: the inode signalled is the one released.
        rejects(CG, "identity", |o| {
            set_cgroup_release(o, CgroupRemoved { inode: INODE + 1 })
        });
        rejects(SR, "identity", |o| {
            let k = at(o, |x| matches!(x, KillAgain { .. }));
            o[k] = KillAgain { via: SR, target: 1 };
        });
    }

    /// The SIGCONT of a graceful tree signal comes right before it (issue
    /// 37: after it, a root that died of the signal in between orphaned
    /// a stopped member's group, and the kernel sent that member SIGHUP).
    #[test]
    fn a_graceful_tree_signal_follows_the_trees_sigcont() {
        let term = |o: &[OsOp]| {
            at(o, |x| {
                matches!(
                    x,
                    SignalTree {
                        signal: Signal::TERM,
                        ..
                    }
                )
            })
        };
        for via in [PG, SR, CG] {
            let no_cont = |o: &mut Vec<OsOp>| {
                o.retain(|x| {
                    !matches!(
                        x,
                        TreeContinued { .. }
                            | SignalMember {
                                signal: Signal::CONT,
                                ..
                            }
                    )
                })
            };
            // The graceful signal without its SIGCONT.
            rejects(via, "continue-first", no_cont);
            // The SIGCONT after the signal (the order before the fix).
            rejects(via, "continue-first", |o| {
                no_cont(o);
                let t = term(o);
                o.insert(t + 1, cont(via));
            });
            // A SIGCONT of its own, or before SIGKILL.
            rejects(via, "continue-first", |o| o.insert(1, cont(via)));
            if via != PG {
                // (In the process-group tier, stop-count-kill rejects it.)
                rejects(via, "continue-first", |o| o.insert(kill_at(o), cont(via)));
            }
            // Something else between the SIGCONT and its signal.
            rejects(via, "continue-first", |o| {
                o.insert(2, RootExited { pid: PID })
            });
            // After the tree's SIGKILL.
            rejects(via, "one-kill", |o| o.insert(kill_at(o) + 1, cont(via)));
        }
        // Not in the PID namespace tier (its init continues the namespace).
        rejects(NS, "continue-first", |o| o.insert(1, cont(NS)));
    }

    #[test]
    fn one_kill() {
        for via in ALL {
            for (sig, sent) in [
                // A second SIGKILL.
                (Signal::KILL, [Signal::TERM, Signal::KILL, Signal::KILL]),
                // A graceful signal after SIGKILL.
                (Signal::TERM, [Signal::TERM, Signal::KILL, Signal::TERM]),
            ] {
                rejects_with(via, &sent, "one-kill", |o| {
                    o.insert(kill_at(o) + 1, tree(via, sig))
                });
            }
        }
    }

    #[test]
    fn member_signals_follow_the_tree() {
        for via in [CG, SR] {
            // A member signalled before any tree signal.
            rejects(via, "member-follows-tree", |o| {
                o.insert(1, member(via, 9, Signal::TERM))
            });
            // A member sent another signal than the tree's.
            rejects(via, "member-follows-tree", |o| {
                let t = at(o, |x| matches!(x, SignalTree { .. }));
                o.insert(t + 1, member(via, 9, Signal::INT))
            });
            // A member sent a graceful signal after the tree's SIGKILL.
            rejects(via, "member-follows-tree", |o| {
                o.insert(kill_at(o) + 1, member(via, 9, Signal::CONT))
            });
            // A member killed twice.
            rejects(via, "member-follows-tree", |o| {
                let k = at(o, |x| {
                    matches!(
                        x,
                        SignalMember {
                            signal: Signal::KILL,
                            ..
                        }
                    )
                });
                o.insert(k + 1, member(via, 11, Signal::KILL));
            });
        }
    }

    #[test]
    fn kill_again_only_after_the_kill() {
        rejects(SR, "kill-again-after-kill", |o| o.insert(1, again(SR)));
    }

    #[test]
    fn root_exit() {
        let exit_at = |o: &[OsOp]| at(o, |x| matches!(x, RootExited { .. }));
        for via in ALL {
            rejects(via, "root-exit", |o| o.insert(1, RootExited { pid: PID }));
            rejects(via, "root-exit", |o| {
                let e = exit_at(o);
                o[e] = RootExited { pid: PID + 1 };
            });
            rejects(via, "root-exit", |o| {
                move_after_reap(o, |x| matches!(x, RootExited { .. }))
            });
        }
    }

    #[test]
    fn recorded_signals_are_the_reports() {
        for via in ALL {
            for sent in [
                &[Signal::KILL][..],
                &[],
                &[Signal::TERM, Signal::KILL, Signal::KILL],
            ] {
                rejected(via, &good(via), sent, "report");
            }
        }
    }

    #[test]
    fn cgroup_released_once_and_never_pooled_after_a_kill() {
        // Neither removed nor pooled.
        rejects(CG, "cgroup-release", |o| {
            o.remove(o.len() - 2);
        });
        // Removed and pooled.
        rejects(CG, "cgroup-release", |o| {
            o.insert(o.len() - 1, CgroupPooled { inode: INODE })
        });
        // Removed before the reap (the identity let go while it may still
        // be signalled).
        rejects(CG, "cgroup-release", |o| {
            let g = o.remove(o.len() - 2);
            o.insert(2, g);
        });
        // Pooled after a SIGKILL.
        rejects(CG, "cgroup-release", |o| {
            set_cgroup_release(o, CgroupPooled { inode: INODE })
        });
        // A cgroup release in another tier.
        for via in [PG, SR, NS] {
            rejects(via, "cgroup-release", |o| {
                o.insert(o.len() - 1, CgroupRemoved { inode: INODE })
            });
        }
    }

    fn stop_at(ops: &[OsOp]) -> usize {
        at(ops, |o| matches!(o, TreeStopped { .. }))
    }

    #[test]
    fn the_process_group_is_stopped_and_counted_right_before_the_kill() {
        // Issue 37's order: SIGKILL first, the scan after it (a member
        // reaped meanwhile was never watched).
        #[cfg(target_os = "linux")]
        rejects(PG, "stop-count-kill", |o| {
            o.remove(stop_at(o));
            let scan = o.remove(at(o, |x| matches!(x, MembersScanned { .. })));
            o.insert(kill_at(o) + 1, scan);
        });
        // Stopped, but not scanned before the kill.
        rejects(PG, "stop-count-kill", |o| {
            let scan = o.remove(at(o, |x| matches!(x, MembersScanned { .. })));
            o.insert(kill_at(o) + 1, scan);
        });
        // Scanned before the stop only.
        rejects(PG, "stop-count-kill", |o| {
            let stop = o.remove(stop_at(o));
            o.insert(kill_at(o), stop);
        });
        // Stopped twice; stopped after the kill.
        rejects(PG, "stop-count-kill", |o| {
            o.insert(
                1,
                TreeStopped {
                    via: PG,
                    target: PID as u64,
                },
            )
        });
        rejects(PG, "stop-count-kill", |o| {
            let stop = o.remove(stop_at(o));
            o.insert(kill_at(o) + 1, stop);
        });
        // Another tier never stops its tree to count it.
        for via in [CG, SR, NS] {
            rejects(via, "stop-count-kill", |o| {
                o.insert(
                    kill_at(o),
                    TreeStopped {
                        via,
                        target: PID as u64,
                    },
                )
            });
        }
        // The stop goes through the tree's identity.
        rejects(PG, "identity", |o| {
            let s = stop_at(o);
            o[s] = TreeStopped {
                via: PG,
                target: PID as u64 + 1,
            };
        });
    }
}
