//! One soak run: spawn the tree through the library, set it up (every node
//! pinned by the pidfd it sent, floods written, transients gone, stopped
//! nodes stopped), trigger its end, then check the report and the fate of
//! every node against what the tier's contract predicts.

use std::collections::{BTreeMap, BTreeSet};
use std::io::IoSliceMut;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use corral::{Command, ContainmentChoice, LeftoverPolicy, Mechanism, Outcome, Report, RootStatus};
use corral::{Signal, TimeoutKind};
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::net::{
    bind, recvmsg, socket_with, AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage,
    RecvFlags, SocketAddrUnix, SocketFlags, SocketType,
};
use rustix::process::{pidfd_send_signal, Signal as RSignal};

use crate::tree::{escaped_from_group, Case, Policy, Tier, Trigger};

/// Slack on every return bound: a loaded 2-core machine, the confirm
/// window after a SIGKILL included.
pub const SLACK: Duration = Duration::from_secs(4);

/// How long kept (or escaped) nodes are watched after the return: each
/// must still be alive at its end.
const KEPT_WATCH: Duration = Duration::from_millis(300);

/// The longest the set-up may take before the run is called unsettled.
const SETUP_LIMIT: Duration = Duration::from_secs(15);

/// A run's verdict.
#[derive(Debug)]
pub enum Verdict {
    Pass,
    /// The deadline or idle timeout fired before the tree was set up:
    /// only what holds for any tree is checked (bounded return, outcome,
    /// no survivor); counts are not.
    Unsettled,
    /// Every check passed but the return bound, and the harness itself was
    /// stalled within the run for long enough to explain the overrun (see
    /// `stall`).
    Stalled {
        stall_ms: u64,
        detail: String,
    },
    /// A failure of this kind, with what was seen.
    Fail(&'static str, String),
}

/// What the run measured, for the summary.
pub struct Measured {
    pub verdict: Verdict,
    /// Time from spawn to the return, past the nominal end (trigger + wait
    /// delay + grace), in ms.
    pub overrun_ms: u64,
}

static SOCK_N: AtomicU64 = AtomicU64::new(0);

struct Pinned {
    fd: OwnedFd,
    pid: i32,
}

/// The tier as the library names it.
pub fn mechanism(t: Tier) -> Mechanism {
    match t {
        Tier::ProcessGroup => Mechanism::ProcessGroup,
        Tier::Subreaper => Mechanism::Subreaper,
        Tier::Cgroup => Mechanism::Cgroup,
        Tier::PidNamespace => Mechanism::PidNamespace,
    }
}

/// `host_subreaper`: this process is a child subreaper (orphans of the
/// tree come to it, in another group of the same session).
pub fn run(case: &Case, tier: Tier, exe: &std::path::Path, host_subreaper: bool) -> Measured {
    let n = case.nodes.len();
    let name = format!(
        "corral-soak-{}-{}-{:x}",
        std::process::id(),
        SOCK_N.fetch_add(1, Ordering::Relaxed),
        case.seed
    );
    let sock = match socket_with(
        AddressFamily::UNIX,
        SocketType::DGRAM,
        SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
        None,
    )
    .and_then(|s| {
        bind(&s, &SocketAddrUnix::new_abstract_name(name.as_bytes())?)?;
        Ok(s)
    }) {
        Ok(s) => s,
        Err(e) => return fail("harness", format!("socket: {e}")),
    };

    let mut cmd = Command::new(exe);
    cmd.args(["node", &name, &case.encode(), &case.root_action(), "0"])
        .containment(ContainmentChoice::Only(mechanism(tier)))
        .leftovers(match case.policy {
            Policy::KeepOnSuccess => LeftoverPolicy::KeepOnSuccess,
            Policy::Kill => LeftoverPolicy::Kill,
            Policy::Keep => LeftoverPolicy::Keep,
        })
        .grace(Duration::from_millis(case.grace_ms))
        .wait_delay(Duration::from_millis(case.wait_delay_ms))
        .capture_limit(64 << 10)
        // A safety net: no run is meant to reach it.
        .timeout(Duration::from_secs(25));
    match case.trigger {
        Trigger::Timeout(ms) => {
            cmd.timeout(Duration::from_millis(ms));
        }
        Trigger::Idle(ms) => {
            cmd.idle_timeout(Duration::from_millis(ms));
        }
        Trigger::OutputLimit(b) => {
            cmd.output_limit(b);
        }
        _ => {}
    }
    let t0 = Instant::now();
    let running = match cmd.spawn() {
        Ok(r) => r,
        Err(e) => return fail("spawn", format!("{e}")),
    };
    let token = running.cancel_token();
    let done = Arc::new(AtomicBool::new(false));
    let waiter = {
        let done = done.clone();
        std::thread::spawn(move || {
            let r = running.wait();
            let at = Instant::now();
            done.store(true, Ordering::SeqCst);
            (r, at)
        })
    };

    // Set-up.
    let mut pinned: BTreeMap<usize, Pinned> = BTreeMap::new();
    let mut ready = BTreeSet::new();
    let mut flooded = BTreeSet::new();
    let mut caught = BTreeSet::new();
    let setup_end = t0 + SETUP_LIMIT;
    let mut setup_err: Option<String> = None;
    let settled_at = (|| {
        // Every node registered and set up.
        while pinned.len() < n || ready.len() < n {
            if done.load(Ordering::SeqCst) || Instant::now() > setup_end {
                return None;
            }
            wait_msg(&sock, 5);
            drain(&sock, &mut pinned, &mut ready, &mut flooded, &mut caught);
        }
        // Floods written.
        let floods: Vec<usize> = (0..n)
            .filter(|&i| case.nodes[i].flood > 0 && !case.nodes[i].endless)
            .collect();
        for &i in &floods {
            go(&pinned, i);
        }
        while floods.iter().any(|i| !flooded.contains(i)) {
            if done.load(Ordering::SeqCst) || Instant::now() > setup_end {
                return None;
            }
            wait_msg(&sock, 5);
            drain(&sock, &mut pinned, &mut ready, &mut flooded, &mut caught);
        }
        // Transients gone (a flooder among them went after its flood).
        for i in (0..n).filter(|&i| case.nodes[i].transient) {
            if case.nodes[i].flood == 0 {
                go(&pinned, i);
            }
            if !wait_exit(
                &pinned[&i].fd,
                setup_end.saturating_duration_since(Instant::now()),
            ) {
                return None;
            }
        }
        // Stopped nodes stopped.
        for i in (0..n).filter(|&i| case.nodes[i].stopped) {
            let p = &pinned[&i];
            let _ = pidfd_send_signal(&p.fd, RSignal::STOP);
            loop {
                if done.load(Ordering::SeqCst) || Instant::now() > setup_end {
                    return None;
                }
                match state_of(p.pid) {
                    Some(b'T') | Some(b't') => break,
                    Some(_) => {}
                    None => {
                        setup_err = Some(format!("node {i} ({}) gone while being stopped", p.pid));
                        return None;
                    }
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        Some(Instant::now())
    })();

    // The trigger.
    let mut nominal_end = None;
    if let Some(ready) = settled_at {
        match case.trigger {
            Trigger::Exit(_) | Trigger::SelfSignal(_) => {
                go(&pinned, 0);
                nominal_end = Some(Instant::now() + Duration::from_millis(case.wait_delay_ms));
            }
            Trigger::Cancel(ms) => {
                std::thread::sleep(Duration::from_millis(ms));
                token.cancel();
                nominal_end = Some(Instant::now());
            }
            Trigger::Race(_, off) => {
                if off < 0 {
                    token.cancel();
                    spin(Duration::from_micros(off.unsigned_abs()));
                    go(&pinned, 0);
                } else {
                    go(&pinned, 0);
                    spin(Duration::from_micros(off as u64));
                    token.cancel();
                }
                nominal_end = Some(Instant::now() + Duration::from_millis(case.wait_delay_ms));
            }
            Trigger::OutputLimit(_) => {
                let f = (0..n).find(|&i| case.nodes[i].endless).unwrap_or(0);
                go(&pinned, f);
                nominal_end = Some(Instant::now());
            }
            Trigger::Timeout(ms) => {
                nominal_end = Some(t0 + Duration::from_millis(ms));
            }
            Trigger::Idle(ms) => {
                nominal_end = Some(ready + Duration::from_millis(ms));
            }
        }
    }
    let unsettled = match (settled_at, case.trigger) {
        (None, _) => true,
        // Set up too close to the deadline to say what it found.
        (Some(at), Trigger::Timeout(ms) | Trigger::Idle(ms)) => {
            at + Duration::from_millis(30) > t0 + Duration::from_millis(ms)
        }
        _ => false,
    };
    let nominal_end = nominal_end.unwrap_or_else(|| {
        t0 + match case.trigger {
            Trigger::Timeout(ms) | Trigger::Idle(ms) => Duration::from_millis(ms),
            _ => SETUP_LIMIT + Duration::from_secs(25),
        }
    }) + Duration::from_millis(case.grace_ms);

    // The return, bounded: a run that does not come back is a failure (its
    // thread is left behind).
    let hard = nominal_end + SLACK + Duration::from_secs(30);
    while !done.load(Ordering::SeqCst) {
        if Instant::now() > hard {
            token.cancel();
            return fail(
                "unbounded",
                format!("wait did not return within {:?}", hard - t0),
            );
        }
        wait_msg(&sock, 5);
        drain(&sock, &mut pinned, &mut ready, &mut flooded, &mut caught);
    }
    let (result, returned_at) = waiter.join().expect("waiter thread");
    // Late messages (a catcher's "caught TERM") were sent before it exited.
    drain(&sock, &mut pinned, &mut ready, &mut flooded, &mut caught);
    let overrun = returned_at.saturating_duration_since(nominal_end);
    let overrun_ms = overrun.as_millis() as u64;
    let stalled = crate::stall::within(t0, returned_at);
    let report = result;

    // Fates at the return.
    let alive_now: BTreeSet<usize> = pinned
        .iter()
        .filter(|(_, p)| !exited(&p.fd, 0))
        .map(|(&i, _)| i)
        .collect();
    let verdict = judge(
        case,
        tier,
        host_subreaper,
        &report,
        &pinned,
        &alive_now,
        &caught,
        unsettled,
        overrun,
        stalled,
        setup_err,
    );
    let verdict = stalled_or(verdict, overrun, stalled);
    cleanup(&pinned);
    Measured {
        verdict,
        overrun_ms,
    }
}

fn fail(kind: &'static str, detail: String) -> Measured {
    Measured {
        verdict: Verdict::Fail(kind, detail),
        overrun_ms: 0,
    }
}

/// One legal ending.
#[derive(Debug, Clone)]
struct Expect {
    outcome: Outcome,
    timeout_kind: Option<TimeoutKind>,
    /// `killed` in this range.
    killed: (usize, usize),
    kept: usize,
    /// Nodes that must be alive after the run (kept, or out of the tier's
    /// reach); every other pinned node must be dead.
    alive: BTreeSet<usize>,
    /// The counts are the truth of the fates rather than a fixed figure:
    /// `kept` = the members alive after the run, `killed` = the others
    /// (the orphaned-group rule with a stopped member: part 5 of #37 lets
    /// the fix decide).
    truthful: bool,
}

/// Past the bound, but not by more than the harness's own stalls in the
/// run (`judge` failed it otherwise): the machine's, every other check
/// passed.
fn stalled_or(verdict: Verdict, overrun: Duration, stalled: Duration) -> Verdict {
    match verdict {
        Verdict::Pass | Verdict::Unsettled if overrun > SLACK => Verdict::Stalled {
            stall_ms: stalled.as_millis() as u64,
            detail: format!(
                "returned {overrun:?} past its nominal end; the harness was stalled {stalled:?} within the run"
            ),
        },
        v => v,
    }
}

#[allow(clippy::too_many_arguments)]
fn judge(
    case: &Case,
    tier: Tier,
    host_subreaper: bool,
    r: &Report,
    pinned: &BTreeMap<usize, Pinned>,
    alive_now: &BTreeSet<usize>,
    caught: &BTreeSet<usize>,
    unsettled: bool,
    overrun: Duration,
    stalled: Duration,
    setup_err: Option<String>,
) -> Verdict {
    let show = |what: &str| -> String {
        format!(
            "{what}; outcome={:?} root={:?} killed={} kept={} signals={:?} cleanup_errors={:?} alive_at_return={:?} caught_term={:?} pids={:?}",
            r.outcome,
            r.root,
            r.leftovers.killed,
            r.leftovers.kept,
            r.signals_sent,
            r.cleanup_errors,
            alive_now,
            caught,
            pinned.iter().map(|(i, p)| (*i, p.pid)).collect::<Vec<_>>()
        )
    };
    if let Some(e) = setup_err {
        return Verdict::Fail("harness", show(&e));
    }
    if overrun.saturating_sub(stalled) > SLACK {
        return Verdict::Fail(
            "slow-return",
            show(&format!("returned {overrun:?} past its nominal end")),
        );
    }
    if !r.cleanup_errors.is_empty() {
        return Verdict::Fail("cleanup-error", show("cleanup errors"));
    }
    if r.containment != mechanism(tier) {
        return Verdict::Fail(
            "wrong-tier",
            show(&format!("containment {:?}", r.containment)),
        );
    }
    if !r.crash_safety.is_held() {
        return Verdict::Fail("crash-safety-lost", show(&format!("{:?}", r.crash_safety)));
    }

    let n = case.nodes.len();
    if r.stderr.total_bytes() > 0 {
        return Verdict::Fail(
            "stderr",
            show(&format!("stderr: {:?}", r.stderr.text_lossy())),
        );
    }
    if !unsettled {
        let sent = r.stdout.total_bytes();
        let ok = match case.trigger {
            Trigger::OutputLimit(limit) => sent > limit,
            _ => sent == case.nodes.iter().map(|x| x.flood).sum::<u64>(),
        };
        if !ok {
            return Verdict::Fail("output-count", show(&format!("{sent} bytes of stdout")));
        }
    }
    let escaped = |i: usize| tier == Tier::ProcessGroup && escaped_from_group(&case.nodes, i);
    let members: BTreeSet<usize> = (1..n)
        .filter(|&i| !case.nodes[i].transient && !escaped(i))
        .collect();
    let outside: BTreeSet<usize> = (1..n)
        .filter(|&i| !case.nodes[i].transient && escaped(i))
        .collect();
    // A catcher that caught SIGTERM but had not exited when the grace
    // ended (a loaded machine) died of corral's SIGKILL: killed, not
    // exited by itself (its fate, read from the harness's own pidfd).
    let caught: &BTreeSet<usize> = &caught
        .iter()
        .copied()
        .filter(|i| {
            pinned
                .get(i)
                .is_none_or(|p| death_signal(&p.fd) != Some(libc::SIGKILL))
        })
        .collect();
    // Members that died of something other than corral's signals: a caught
    // SIGTERM (exit 0).
    let self_exited = members.iter().filter(|i| caught.contains(i)).count();
    let all_killed = members.len() - self_exited;
    // The orphaned-process-group rule: when the root exits while a member
    // of its group is stopped, the kernel sends the group SIGHUP and
    // SIGCONT (not in the subreaper tier, where orphans go to corral, in
    // another group of the same session). Members of the group may then
    // die of SIGHUP before corral's kill: not counted. (Nor when the host
    // is a subreaper in any tier.)
    let in_root_group = |i: usize| !escaped_from_group(&case.nodes, i);
    let hup = !host_subreaper
        && members
            .iter()
            .any(|&i| case.nodes[i].stopped && in_root_group(i));
    let hup_exposed = members
        .iter()
        .filter(|&&i| in_root_group(i) && !caught.contains(&i))
        .count();

    // Exposed: the root exits by itself, or is ended by the first signal
    // of a grace (SIGTERM and SIGCONT go out one after the other: a member
    // still stopped when the root dies gets the kernel's SIGHUP). Without
    // a grace, SIGKILL reaches every member before the root is gone.
    let killed_all = |root_exit: bool| {
        if hup && (root_exit || case.grace_ms > 0) {
            (all_killed - hup_exposed, all_killed)
        } else {
            (all_killed, all_killed)
        }
    };
    let terminated = |outcome, kind, root_exit| Expect {
        outcome,
        timeout_kind: kind,
        killed: killed_all(root_exit),
        kept: 0,
        alive: outside.clone(),
        truthful: false,
    };
    let exit_expect = |status: RootStatus| -> Vec<Expect> {
        let holders: Vec<usize> = members
            .iter()
            .copied()
            .filter(|&i| case.nodes[i].hold)
            .collect();
        let mut v = Vec::new();
        if !holders.is_empty() {
            v.push(terminated(Outcome::OutputHeld, None, true));
            // Holders that the orphaned-group rule's SIGHUP may end before
            // the wait delay does: then no output is held.
            if !(hup && holders.iter().all(|&i| in_root_group(i))) {
                return v;
            }
        }
        let outcome = match status {
            RootStatus::Exited(c) => Outcome::Exited(c),
            RootStatus::Signaled(s) => Outcome::Signaled(s),
            _ => unreachable!(),
        };
        let kill = match case.policy {
            Policy::Kill => true,
            Policy::Keep => false,
            Policy::KeepOnSuccess => status != RootStatus::Exited(0),
        };
        if kill || members.is_empty() {
            v.push(terminated(outcome, None, true));
            return v;
        }
        // The keep rule: a stopped leftover is killed by corral (counted in
        // `killed`), never kept; the running ones are kept. Where the root's
        // exit orphaned a group with a stopped member (`hup`), the kernel's
        // SIGHUP may end stopped and running members first: not counted, and
        // `kept` must be exactly the members still alive.
        let stopped = members.iter().filter(|&&i| case.nodes[i].stopped).count();
        let mut alive = outside.clone();
        // (With `hup`, the kernel's SIGCONT may leave a stopped member
        // running and kept: any member may be alive.)
        alive.extend(
            members
                .iter()
                .copied()
                .filter(|&i| hup || !case.nodes[i].stopped),
        );
        v.push(Expect {
            outcome,
            timeout_kind: None,
            killed: if hup {
                (0, stopped)
            } else {
                (stopped, stopped)
            },
            kept: members.len() - stopped,
            alive,
            truthful: hup,
        });
        v
    };
    let legal: Vec<Expect> = match case.trigger {
        Trigger::Exit(c) => exit_expect(RootStatus::Exited(c)),
        Trigger::SelfSignal(s) => exit_expect(RootStatus::Signaled(
            Signal::from_raw(s).expect("a valid signal"),
        )),
        Trigger::Timeout(_) => vec![terminated(
            Outcome::TimedOut,
            Some(TimeoutKind::Deadline),
            false,
        )],
        Trigger::Idle(_) => vec![terminated(
            Outcome::TimedOut,
            Some(TimeoutKind::Idle),
            false,
        )],
        Trigger::Cancel(_) => vec![terminated(Outcome::Cancelled, None, false)],
        Trigger::OutputLimit(_) => vec![terminated(Outcome::OutputLimit, None, false)],
        Trigger::Race(c, _) => {
            let mut v = exit_expect(RootStatus::Exited(c));
            // Cancelled before the exit was seen, or after it (the root
            // gone, its group orphaned).
            v.push(terminated(Outcome::Cancelled, None, true));
            v
        }
    };

    if unsettled {
        // Only what holds whatever was set up: the outcome, nothing of the
        // tree alive but what is out of reach.
        // A trigger other than a timer is never pulled when the set-up
        // did not finish: the harness's backstop deadline ends the run.
        let timer = matches!(case.trigger, Trigger::Timeout(_) | Trigger::Idle(_));
        let backstop = !timer
            && r.outcome == Outcome::TimedOut
            && r.timeout_kind == Some(TimeoutKind::Deadline);
        let ok_outcome = backstop || legal.iter().any(|e| e.outcome == r.outcome);
        if !ok_outcome {
            return Verdict::Fail("outcome", show(&format!("unsettled run; legal {legal:?}")));
        }
        // Out of reach: every escaper, a transient one that was never
        // told to exit included.
        let out_of_reach: BTreeSet<usize> = (1..n).filter(|&i| escaped(i)).collect();
        let stray: Vec<usize> = alive_now.difference(&out_of_reach).copied().collect();
        if !stray.is_empty() && r.leftovers.kept == 0 {
            return Verdict::Fail("survivor", show(&format!("unsettled run; alive {stray:?}")));
        }
        return Verdict::Unsettled;
    }

    // The first legal ending the report matches; else the failure against
    // the closest (same outcome) one.
    let mut first_fail: Option<Verdict> = None;
    for e in &legal {
        match check(e, r, pinned, alive_now, &members, &show) {
            None => return Verdict::Pass,
            Some(v) => {
                if first_fail.is_none() || e.outcome == r.outcome {
                    let closer = e.outcome == r.outcome;
                    if first_fail.is_none() || closer {
                        first_fail = Some(v);
                    }
                }
            }
        }
    }
    first_fail.unwrap_or(Verdict::Pass)
}

fn check(
    e: &Expect,
    r: &Report,
    pinned: &BTreeMap<usize, Pinned>,
    alive_now: &BTreeSet<usize>,
    members: &BTreeSet<usize>,
    show: &dyn Fn(&str) -> String,
) -> Option<Verdict> {
    if r.outcome != e.outcome {
        return Some(Verdict::Fail(
            "outcome",
            show(&format!("expected outcome {:?}", e.outcome)),
        ));
    }
    if e.timeout_kind.is_some() && r.timeout_kind != e.timeout_kind {
        return Some(Verdict::Fail(
            "outcome",
            show(&format!("expected {:?}", e.timeout_kind)),
        ));
    }
    // Every node that must be dead is dead at the return.
    let must_die: Vec<usize> = pinned
        .keys()
        .copied()
        .filter(|i| *i != 0 && !e.alive.contains(i))
        .collect();
    let survivors: Vec<usize> = must_die
        .iter()
        .copied()
        .filter(|i| alive_now.contains(i))
        .collect();
    if !survivors.is_empty() {
        let late = survivors
            .iter()
            .all(|i| wait_exit(&pinned[i].fd, Duration::from_secs(2)));
        return Some(Verdict::Fail(
            if late { "late-death" } else { "survivor" },
            show(&format!("nodes {survivors:?} alive at the return")),
        ));
    }
    // The kept and the escaped live on.
    let mut died = Vec::new();
    let watch_until = Instant::now() + KEPT_WATCH;
    for &i in &e.alive {
        if let Some(p) = pinned.get(&i) {
            let left = watch_until.saturating_duration_since(Instant::now());
            if wait_exit(&p.fd, left) {
                died.push(i);
            }
        }
    }
    if e.truthful {
        let kept_alive = e.alive.iter().filter(|i| members.contains(i)).count()
            - died.iter().filter(|i| members.contains(i)).count();
        let (kept, killed) = (r.leftovers.kept, r.leftovers.killed);
        if kept > kept_alive {
            return Some(Verdict::Fail(
                "kept-died",
                show(&format!(
                    "kept with a stopped member: only {kept_alive} of the kept alive {KEPT_WATCH:?} after the return (died: {died:?})"
                )),
            ));
        }
        if kept < kept_alive || kept + killed > members.len() || killed > e.killed.1 {
            return Some(Verdict::Fail(
                "kept-lost",
                show(&format!(
                    "kept with a stopped member: {kept_alive} alive {KEPT_WATCH:?} after the return (died: {died:?}), {} members",
                    members.len()
                )),
            ));
        }
        return None;
    }
    if !died.is_empty() {
        let kind = if died.iter().all(|i| members.contains(i)) {
            "kept-died"
        } else {
            "escaper-died"
        };
        return Some(Verdict::Fail(
            kind,
            show(&format!(
                "nodes {died:?} died within {KEPT_WATCH:?} of the return"
            )),
        ));
    }
    let (lo, hi) = e.killed;
    if r.leftovers.killed < lo || r.leftovers.killed > hi {
        let kind = if r.leftovers.killed < lo {
            "killed-under"
        } else {
            "killed-over"
        };
        return Some(Verdict::Fail(
            kind,
            show(&format!("expected killed in {lo}..={hi}")),
        ));
    }
    if r.leftovers.kept != e.kept {
        return Some(Verdict::Fail(
            "kept-count",
            show(&format!("expected kept {}", e.kept)),
        ));
    }
    None
}

/// What the harness holds: SIGKILL every node still alive, wait for each.
fn cleanup(pinned: &BTreeMap<usize, Pinned>) {
    for p in pinned.values() {
        let _ = pidfd_send_signal(&p.fd, RSignal::KILL);
    }
    for p in pinned.values() {
        wait_exit(&p.fd, Duration::from_secs(5));
    }
}

fn go(pinned: &BTreeMap<usize, Pinned>, i: usize) {
    if let Some(p) = pinned.get(&i) {
        let _ = pidfd_send_signal(&p.fd, RSignal::USR1);
    }
}

/// Whether the process behind `fd` exited within `ms`.
/// The signal a node died of (0: it exited), as the kernel keeps it for
/// the node's pidfd once the node is reaped (`PIDFD_GET_INFO` with
/// `PIDFD_INFO_EXIT`, Linux 6.15); `None` if not known within 200 ms.
fn death_signal(fd: &OwnedFd) -> Option<i32> {
    use std::os::fd::AsRawFd;
    /// `struct pidfd_info` up to `exit_code` (64 bytes, its first version).
    #[repr(C)]
    #[derive(Default)]
    struct Info {
        mask: u64,
        cgroupid: u64,
        ids: [u32; 11],
        exit_code: i32,
    }
    const PIDFD_INFO_EXIT: u64 = 1 << 3;
    // _IOWR(0xFF, 11, struct pidfd_info): read-write, size 64.
    const PIDFD_GET_INFO: u64 = (3 << 30) | (64 << 16) | (0xFF << 8) | 11;
    let end = Instant::now() + Duration::from_millis(200);
    loop {
        let mut info = Info {
            mask: PIDFD_INFO_EXIT,
            ..Info::default()
        };
        // SAFETY: `info` is repr(C), 64 bytes as the opcode says, and lives
        // across the call; the descriptor is a pidfd.
        let rc = unsafe { libc::ioctl(fd.as_raw_fd(), PIDFD_GET_INFO as _, &mut info) };
        if rc == 0 && info.mask & PIDFD_INFO_EXIT != 0 {
            return Some(info.exit_code & 0x7f);
        }
        if Instant::now() >= end {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn exited(fd: &OwnedFd, ms: u64) -> bool {
    wait_exit(fd, Duration::from_millis(ms))
}

fn wait_exit(fd: &OwnedFd, d: Duration) -> bool {
    let end = Instant::now() + d;
    loop {
        let mut fds = [PollFd::new(fd, PollFlags::IN)];
        let left = end.saturating_duration_since(Instant::now());
        let ts = Timespec {
            tv_sec: left.as_secs() as _,
            tv_nsec: left.subsec_nanos() as _,
        };
        match poll(&mut fds, Some(&ts)) {
            Ok(n) if n > 0 => return true,
            Ok(_) => return false,
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return false,
        }
    }
}

fn wait_msg(sock: &OwnedFd, ms: u64) {
    let mut fds = [PollFd::new(sock, PollFlags::IN)];
    let ts = Timespec {
        tv_sec: 0,
        tv_nsec: (ms * 1_000_000) as _,
    };
    let _ = poll(&mut fds, Some(&ts));
}

/// Reads every queued message: `rN` + a pidfd (node N registered), `sN`
/// (node N started its children and let go of the output if it does), `fN`
/// (node N wrote its flood), `tN` (node N caught SIGTERM and exits).
fn drain(
    sock: &OwnedFd,
    pinned: &mut BTreeMap<usize, Pinned>,
    ready: &mut BTreeSet<usize>,
    flooded: &mut BTreeSet<usize>,
    caught: &mut BTreeSet<usize>,
) {
    loop {
        let mut buf = [0u8; 64];
        let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let got = recvmsg(
            sock.as_fd(),
            &mut [IoSliceMut::new(&mut buf)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC | RecvFlags::DONTWAIT,
        );
        let Ok(m) = got else { return };
        let mut fd = None;
        for msg in control.drain() {
            if let RecvAncillaryMessage::ScmRights(fds) = msg {
                for f in fds {
                    fd.get_or_insert(f);
                }
            }
        }
        let text = &buf[..m.bytes.min(buf.len())];
        let Some((&kind, rest)) = text.split_first() else {
            continue;
        };
        let Some(id) = std::str::from_utf8(rest)
            .ok()
            .and_then(|s| s.parse::<usize>().ok())
        else {
            continue;
        };
        match (kind, fd) {
            (b'r', Some(fd)) => {
                let pid = fdinfo_pid(&fd).unwrap_or(-1);
                pinned.insert(id, Pinned { fd, pid });
            }
            (b's', _) => {
                ready.insert(id);
            }
            (b'f', _) => {
                flooded.insert(id);
            }
            (b't', _) => {
                caught.insert(id);
            }
            _ => {}
        }
    }
}

/// The pid (in this process's PID namespace) of the process a pidfd holds.
fn fdinfo_pid(fd: &OwnedFd) -> Option<i32> {
    use std::os::fd::AsRawFd;
    let text = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd())).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("Pid:"))
        .and_then(|v| v.trim().parse().ok())
}

/// The state letter of `/proc/PID/stat`.
fn state_of(pid: i32) -> Option<u8> {
    let s = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    let close = s.iter().rposition(|&b| b == b')')?;
    s.get(close + 2).copied()
}

fn spin(d: Duration) {
    if d >= Duration::from_millis(1) {
        std::thread::sleep(d);
    } else {
        let end = Instant::now() + d;
        while Instant::now() < end {
            std::hint::spin_loop();
        }
    }
}
