//! The scenario matrix: end-to-end scenarios for corral's four promises
//! (bounded return, nothing left behind, never the wrong process, a
//! truthful report), one table run in every Linux containment tier.
//!
//! Each scenario is a function of the tier. Most state a
//! [`Row`](corral_testkit::scenario::Row): a real process tree built from
//! testkit helpers (`"$H" NAME [CMD...]`), the settings, and what must
//! come out (return bound, outcome, root status, signals, leftovers,
//! output, and the fate of every helper). `Tier::run` starts a `Watch`
//! before the code under test runs, pins every helper between `spawn` and
//! `wait` (supervision, and so every kill, only happens inside `wait`),
//! then asserts the row. Where a tier differs the row says so (`Fate::
//! AliveIn`, `PerTier`).
//!
//! [`tiers!`] makes one `#[test]` per scenario and tier, in a module named
//! after the tier (`process_group::timeout_kills_a_busy_tree`), marked
//! `needs(cgroup)` / `needs(pidns)` where the tier needs it.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use corral::{
    CancelToken, Command, Error, Input, LeftoverPolicy, Mechanism, OsOp, Outcome, Output,
    RootStatus, Running, Signal, SpawnErrorKind, Stream,
};
use corral_testkit::assert_between;
use corral_testkit::scenario::{
    ms, traced, tree, Count::AtLeast, Count::Exactly, Fate::Alive, Fate::AliveIn, Fate::Dead,
    PerTier, Row, Tier, SLACK,
};

/// Generates one `#[test]` per scenario for each tier given as
/// `module => Mechanism (needs)`.
macro_rules! tiers {
    ($($module:ident => $mech:ident $needs:tt;)*) => {
        $(
            mod $module {
                $crate::scenario_matrix::tiers!(@tests $mech $needs
                    root_exits_0_without_children
                    exit_0_detached_child_kept_under_keep_on_success
                    exit_0_detached_child_killed_under_kill_policy
                    exit_3_detached_child_kept_under_keep_policy
                    exit_0_stopped_leftover_is_killed_and_the_running_ones_kept
                    exit_0_stopped_leftover_alone_is_killed
                    exit_3_stopped_leftover_is_killed_under_keep_policy
                    exit_7_detached_child_killed_and_exit_is_clean
                    exit_7_survivor_ignoring_term_escalates_within_grace
                    exit_0_grandchild_holding_stdout_is_output_held
                    exit_0_grandchild_holding_only_stderr_is_output_held
                    exit_7_grandchild_holding_stdout_is_output_held_with_root_status
                    held_output_reports_when_the_output_closed_every_time
                    deeper_holder_behind_an_exited_intermediate_is_killed
                    timeout_kills_a_busy_tree
                    absolute_deadline_earlier_than_timeout_wins
                    term_ignoring_tree_gets_term_then_kill_after_grace
                    signalled_member_that_survives_is_not_counted_killed
                    killed_counts_only_members_that_died_of_corrals_signals
                    tree_dying_on_term_returns_before_grace_ends_without_kill
                    escalation_is_decided_by_the_group_not_the_root
                    stopped_member_killed_on_timeout_without_grace
                    stopped_member_killed_on_timeout_with_grace
                    stopped_term_ignoring_member_killed_at_end_of_grace
                    stopped_root_is_killed_on_timeout
                    cancel_from_another_thread_via_running_token
                    cancel_with_command_token_and_grace
                    cancel_racing_a_clean_exit_is_reported_consistently
                    cancel_before_spawn_spawns_nothing
                    thirty_two_concurrent_cancels_send_one_kill
                    dropping_running_without_wait_kills_the_tree
                    missing_program_is_not_found
                    non_executable_file_is_permission_denied
                    directory_as_program_is_permission_denied
                    bad_current_dir_is_an_error_not_a_hang
                    bad_current_dir_is_kind_other_as_documented
                    empty_path_with_absolute_program_works
                    invalid_utf8_argument_is_passed_byte_exact
                    stdin_bytes_are_delivered
                    unread_large_stdin_does_not_stall_the_deadline
                    unread_large_stdin_and_prompt_exit_returns_at_once
                    on_line_receives_lines_in_order_from_both_streams
                    output_written_before_a_kill_is_kept
                    stderr_merged_with_stdout_keeps_order
                    merged_stderr_held_by_grandchild_is_output_held
                    uncaptured_output_does_not_wait_for_holders
                    holder_that_closes_output_within_wait_delay_is_a_clean_exit
                    holder_that_left_the_group_cannot_stall_the_return
                    root_killed_by_a_foreign_signal_is_signaled
                    reused_command_keeps_stdin_bytes_and_line_callback
                    invalid_merge_configuration_spawns_nothing
                );
            }
        )*
    };
    (@tests $mech:ident () $($name:ident)*) => {
        $(
            #[test]
            fn $name() {
                $crate::scenario_matrix::$name(corral::Mechanism::$mech)
            }
        )*
    };
    (@tests $mech:ident $needs:tt $($name:ident)*) => {
        $(
            #[corral_testkit::needs $needs]
            #[test]
            fn $name() {
                $crate::scenario_matrix::$name(corral::Mechanism::$mech)
            }
        )*
    };
}
pub(crate) use tiers;

type Lines = Arc<Mutex<Vec<(Stream, Vec<u8>)>>>;

const NONE: &[Signal] = &[];
const KILL: &[Signal] = &[Signal::KILL];
const TERM: &[Signal] = &[Signal::TERM];
const TERM_KILL: &[Signal] = &[Signal::TERM, Signal::KILL];
const ZERO: Duration = Duration::ZERO;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// The `state` field of `/proc/<pid>/stat` (None once the pid is gone).
fn proc_state(pid: u32) -> Option<u8> {
    let stat = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    let close = stat.iter().rposition(|&b| b == b')')?;
    stat.get(close + 2).copied()
}

fn wait_stopped(pid: u32) {
    let end = Instant::now() + Duration::from_secs(5);
    while proc_state(pid) != Some(b'T') {
        assert!(Instant::now() < end, "helper {pid} never stopped");
        std::thread::sleep(ms(2));
    }
}

fn on_line(cmd: &mut Command) -> Lines {
    let lines: Lines = Arc::default();
    let l = lines.clone();
    cmd.on_line(move |st, line| l.lock().unwrap().push((st, line.to_vec())));
    lines
}

// ---------------------------------------------------------------------------
// Clean exits
// ---------------------------------------------------------------------------

pub fn root_exits_0_without_children(m: Mechanism) {
    let r = Tier::new(m).run(&Row {
        tree: tree(r#"exec "$H" root sh -c 'echo hi; exit 0'"#),
        wait_delay: Some(secs(5)),
        bound: Some((ZERO, SLACK)),
        outcome: Some(Outcome::Exited(0)),
        root: Some(RootStatus::Exited(0)),
        signals: Some(NONE.into()),
        killed: Some(Exactly(0).into()),
        kept: Some(0),
        stdout: Some(b"hi\n"),
        stderr: Some(b""),
        fates: &[("root", Dead)],
        ..Row::default()
    });
    assert!(r.success());
}

/// `"$H" c` detached (output closed), then the root exits with `code` at
/// once: nothing holds the output, so the 5 s wait delay never applies.
/// Under `policy`, `c` is kept (no signal sent) or killed (one SIGKILL).
fn detached(code: i32, policy: Option<LeftoverPolicy>, kept: bool) -> Row {
    Row {
        tree: format!(r#""$H" c >/dev/null 2>&1 & exit {code}"#),
        wait_delay: Some(secs(5)),
        leftovers: policy,
        bound: Some((ZERO, SLACK)),
        outcome: Some(Outcome::Exited(code)),
        root: Some(RootStatus::Exited(code)),
        signals: Some(if kept { NONE } else { KILL }.into()),
        killed: Some(Exactly(usize::from(!kept)).into()),
        kept: Some(usize::from(kept)),
        fates: if kept {
            &[("c", Alive)]
        } else {
            &[("c", Dead)]
        },
        ..Row::default()
    }
}

pub fn exit_0_detached_child_kept_under_keep_on_success(m: Mechanism) {
    Tier::new(m).run(&detached(0, None, true));
}

pub fn exit_0_detached_child_killed_under_kill_policy(m: Mechanism) {
    Tier::new(m).run(&detached(0, Some(LeftoverPolicy::Kill), false));
}

pub fn exit_3_detached_child_kept_under_keep_policy(m: Mechanism) {
    Tier::new(m).run(&detached(3, Some(LeftoverPolicy::Keep), true));
}

/// Shell text that waits until helper `name` is stopped (and pinned).
fn stopped_ready(name: &str) -> String {
    format!(
        r#"until [ -e "$CORRAL_TEST_DIR/{name}.pinned" -o ! -e "$CORRAL_TEST_DIR/.watched" ] && grep -q '^State:[[:space:]]*T' /proc/$(cat "$CORRAL_TEST_DIR/{name}.pid" 2>/dev/null)/status 2>/dev/null; do sleep 0.01; done; "#
    )
}

/// A clean exit whose leftovers are kept, one of them stopped (`st`),
/// beside `running` running ones (they ignore SIGHUP; see below). The keep
/// rule kills the stopped one (counted in `killed`) and keeps the others,
/// which must still run a second after `wait` returned. Where the root's
/// orphans go to init (the process-group and cgroup tiers of a host that is
/// no subreaper), the root's exit itself orphans the group with a stopped
/// member, so the kernel sends it SIGHUP and SIGCONT there and then: `st`
/// dies of that, before corral decides (`killed` 0, and it is not kept
/// either); the running ones ignore SIGHUP so that the row does not depend
/// on whether this kernel hangs up the whole group or only its stopped
/// members. In the subreaper tier (corral is their parent) and the
/// PID-namespace tier (the init is) the group stays linked to corral's
/// session until corral lets go, and corral kills `st` itself. The CLI
/// tests (`corral-cli/tests/kept.rs`) run the same shape with plain
/// `sleep`s and check after corral's exit.
fn stopped_leftover(m: Mechanism, code: i32, policy: Option<LeftoverPolicy>, running: usize) {
    const ALL: &[(&str, corral_testkit::scenario::Fate)] =
        &[("a", Alive), ("b", Alive), ("st", Dead)];
    let helpers = &["a", "b"][2 - running..];
    let mut tree = String::new();
    for n in helpers {
        tree.push_str(&format!(
            r#""$H" {n} sh -c 'trap "" HUP; exec sleep 30' >/dev/null 2>&1 & "#
        ));
    }
    tree.push_str(r#""$H" st sh -c 'kill -STOP $$; exec sleep 30' >/dev/null 2>&1 & "#);
    for n in helpers {
        tree.push_str(&corral_testkit::ready(n));
    }
    tree.push_str(&stopped_ready("st"));
    tree.push_str(&format!("exit {code}"));
    let row = Row {
        tree,
        wait_delay: Some(secs(5)),
        leftovers: policy,
        // The tree starts up to three helpers and waits for them (a hang
        // guard here); the promise, after the root's exit, is below.
        bound: Some((ZERO, SLACK * 3)),
        outcome: Some(Outcome::Exited(code)),
        root: Some(RootStatus::Exited(code)),
        signals: Some(NONE.into()),
        killed: Some(PerTier::In(
            &[Mechanism::Subreaper, Mechanism::PidNamespace],
            Exactly(1),
            Exactly(0),
        )),
        kept: Some(running),
        fates: &ALL[2 - running..],
        ..Row::default()
    };
    let tier = Tier::new(m);
    let r = tier.run(&row);
    assert!(r.cleanup_errors.is_empty(), "{r:?}");
    // Bounded after the root's exit: the stopped leftover dies at once.
    let exit = r.timings.root_exit.expect("the root's exit was seen");
    assert_between(r.timings.cleanup_done - exit, ZERO, SLACK);
    // Still true a second later: what was kept runs, what was killed is gone.
    std::thread::sleep(secs(1));
    tier.assert_fates(row.fates);
}

pub fn exit_0_stopped_leftover_is_killed_and_the_running_ones_kept(m: Mechanism) {
    stopped_leftover(m, 0, None, 2);
}

pub fn exit_0_stopped_leftover_alone_is_killed(m: Mechanism) {
    stopped_leftover(m, 0, None, 0);
}

pub fn exit_3_stopped_leftover_is_killed_under_keep_policy(m: Mechanism) {
    stopped_leftover(m, 3, Some(LeftoverPolicy::Keep), 1);
}

pub fn exit_7_detached_child_killed_and_exit_is_clean(m: Mechanism) {
    let r = Tier::new(m).run(&detached(7, None, false));
    assert!(!r.success());
}

pub fn exit_7_survivor_ignoring_term_escalates_within_grace(m: Mechanism) {
    // The root exits only once the helper's trap is installed.
    Tier::new(m).run(&Row {
        tree: format!(
            r#""$H" ign sh -c 'trap "" TERM; exec sleep 30' >/dev/null 2>&1 & {}exit 7"#,
            corral_testkit::ready("ign")
        ),
        grace: Some(ms(300)),
        bound: Some((ms(300), ms(300) + SLACK)),
        outcome: Some(Outcome::Exited(7)),
        signals: Some(TERM_KILL.into()),
        killed: Some(Exactly(1).into()),
        fates: &[("ign", Dead)],
        ..Row::default()
    });
}

// ---------------------------------------------------------------------------
// Output held past the wait delay
// ---------------------------------------------------------------------------

fn held_output(m: Mechanism, script: &str, code: i32) {
    let wd = ms(300);
    let r = Tier::new(m).run(&Row {
        tree: tree(script),
        wait_delay: Some(wd),
        bound: Some((wd, wd + SLACK)),
        outcome: Some(Outcome::OutputHeld),
        root: Some(RootStatus::Exited(code)),
        signals: Some(KILL.into()),
        killed: Some(AtLeast(1).into()),
        fates: &[("gc", Dead)],
        ..Row::default()
    });
    assert!(!r.is_clean());
    // About wait_delay after the root's exit was seen.
    let exit_at = r.timings.root_exit.expect("root exit observed");
    assert_between(r.timings.cleanup_done - exit_at, wd, wd + SLACK);
    // The holder's death closed the output: always reported, after the
    // wait delay and before the cleanup was done.
    let closed = r.timings.output_closed.expect("output_closed reported");
    assert!(
        closed >= exit_at + wd && closed <= r.timings.cleanup_done,
        "{:?}",
        r.timings
    );
    assert!(r.stdout.bytes().starts_with(b"started\n"), "{:?}", r.stdout);
}

/// The same held output, run after run: `timings.output_closed` is set in
/// every run (it was missing when the termination was confirmed before a
/// step saw the end of file).
pub fn held_output_reports_when_the_output_closed_every_time(m: Mechanism) {
    for _ in 0..12 {
        held_output(m, r#""$H" gc 2>/dev/null & echo started; exit 0"#, 0);
    }
}

pub fn exit_0_grandchild_holding_stdout_is_output_held(m: Mechanism) {
    held_output(m, r#""$H" gc 2>/dev/null & echo started; exit 0"#, 0);
}

pub fn exit_0_grandchild_holding_only_stderr_is_output_held(m: Mechanism) {
    held_output(m, r#""$H" gc >/dev/null & echo started; exit 0"#, 0);
}

pub fn exit_7_grandchild_holding_stdout_is_output_held_with_root_status(m: Mechanism) {
    held_output(m, r#""$H" gc 2>/dev/null & echo started; exit 7"#, 7);
}

pub fn deeper_holder_behind_an_exited_intermediate_is_killed(m: Mechanism) {
    // root -> mid (exits at once) -> deep (holds stdout): the deep one is
    // reparented away from the tree's root but stays in its tree.
    let wd = ms(300);
    Tier::new(m).run(&Row {
        tree: tree(r#"sh -c '"$H" deep & exit 0'; exit 0"#),
        wait_delay: Some(wd),
        bound: Some((wd, wd + SLACK)),
        outcome: Some(Outcome::OutputHeld),
        killed: Some(Exactly(1).into()),
        fates: &[("deep", Dead)],
        ..Row::default()
    });
}

// ---------------------------------------------------------------------------
// Timeouts, grace, escalation, stopped members
// ---------------------------------------------------------------------------

pub fn timeout_kills_a_busy_tree(m: Mechanism) {
    let timeout = ms(400);
    Tier::new(m).run(&Row {
        tree: tree(concat!(
            r#""$H" b1 sh -c 'while :; do :; done' & "#,
            r#""$H" b2 sh -c 'while :; do :; done' & "#,
            r#""$H" s1 & "#,
            r#""$H" s2 sh -c '"$H" s3 & exec sleep 30' & "#,
            "wait"
        )),
        timeout: Some(timeout),
        bound: Some((timeout, timeout + SLACK)),
        outcome: Some(Outcome::TimedOut),
        root: Some(RootStatus::Signaled(Signal::KILL)),
        signals: Some(KILL.into()),
        killed: Some(Exactly(5).into()),
        fates: &[
            ("b1", Dead),
            ("b2", Dead),
            ("s1", Dead),
            ("s2", Dead),
            ("s3", Dead),
        ],
        ..Row::default()
    });
}

pub fn absolute_deadline_earlier_than_timeout_wins(m: Mechanism) {
    let row = Row {
        tree: tree(r#"exec "$H" root"#),
        timeout: Some(secs(20)),
        bound: Some((ms(300), ms(300) + SLACK)),
        outcome: Some(Outcome::TimedOut),
        fates: &[("root", Dead)],
        ..Row::default()
    };
    Tier::new(m).run_with(
        &row,
        |c| {
            c.deadline(Instant::now() + ms(300));
        },
        |_, _| {},
    );
}

pub fn term_ignoring_tree_gets_term_then_kill_after_grace(m: Mechanism) {
    let (timeout, grace) = (ms(300), ms(500));
    Tier::new(m).run(&Row {
        tree: tree(concat!(
            r#"trap "" TERM; "#,
            r#""$H" ign sh -c 'trap "" TERM; exec sleep 30' & "#,
            r#""$H" r2 & "#,
            "wait"
        )),
        timeout: Some(timeout),
        grace: Some(grace),
        bound: Some((timeout + grace, timeout + grace + SLACK)),
        outcome: Some(Outcome::TimedOut),
        signals: Some(TERM_KILL.into()),
        root: Some(RootStatus::Signaled(Signal::KILL)),
        // r2 died of SIGTERM, ign of SIGKILL (the root is not counted).
        killed: Some(Exactly(2).into()),
        fates: &[("ign", Dead), ("r2", Dead)],
        ..Row::default()
    });
}

/// A member signalled by corral that ignores the signal and then ends by
/// itself (SIGTERM is ignored from the root down, and the grace is longer
/// than the member's life) was not killed: the count is 0, although corral
/// signalled a tree that had a member.
pub fn signalled_member_that_survives_is_not_counted_killed(m: Mechanism) {
    let (timeout, grace, life) = (ms(300), secs(10), ms(1500));
    Tier::new(m).run(&Row {
        tree: tree(r#"trap "" TERM; "$H" ign sleep 1.5 & wait"#),
        timeout: Some(timeout),
        grace: Some(grace),
        bound: Some((life, life + SLACK)),
        outcome: Some(Outcome::TimedOut),
        signals: Some(TERM.into()),
        root: Some(RootStatus::Exited(0)),
        killed: Some(Exactly(0).into()),
        fates: &[("ign", Dead)],
        ..Row::default()
    });
}

/// Of two members signalled with SIGTERM, the one that dies of it is
/// killed; the one that ignores it and exits by itself before the grace
/// ends is not. No SIGKILL follows.
pub fn killed_counts_only_members_that_died_of_corrals_signals(m: Mechanism) {
    let (timeout, grace, life) = (ms(300), secs(10), ms(1500));
    Tier::new(m).run(&Row {
        tree: tree(r#""$H" dies & (trap "" TERM; exec "$H" lives sleep 1.5) & wait"#),
        timeout: Some(timeout),
        grace: Some(grace),
        bound: Some((life, life + SLACK)),
        outcome: Some(Outcome::TimedOut),
        signals: Some(TERM.into()),
        root: Some(RootStatus::Signaled(Signal::TERM)),
        killed: Some(Exactly(1).into()),
        fates: &[("dies", Dead), ("lives", Dead)],
        ..Row::default()
    });
}

pub fn tree_dying_on_term_returns_before_grace_ends_without_kill(m: Mechanism) {
    let (timeout, grace) = (ms(300), secs(4));
    // Well before the 4 s grace would end.
    Tier::new(m).run(&Row {
        tree: tree(r#""$H" a & "$H" b sh -c '"$H" c & wait' & wait"#),
        timeout: Some(timeout),
        grace: Some(grace),
        bound: Some((timeout, timeout + SLACK)),
        outcome: Some(Outcome::TimedOut),
        signals: Some(TERM.into()),
        root: Some(RootStatus::Signaled(Signal::TERM)),
        fates: &[("a", Dead), ("b", Dead), ("c", Dead)],
        ..Row::default()
    });
}

pub fn escalation_is_decided_by_the_group_not_the_root(m: Mechanism) {
    // The root dies on SIGTERM; a grandchild that ignores it (and closed its
    // output, so nothing else keeps the run alive) must still get SIGKILL.
    let (timeout, grace) = (ms(300), ms(500));
    Tier::new(m).run(&Row {
        tree: tree(
            r#""$H" ign sh -c 'trap "" TERM; exec sleep 30' >/dev/null 2>&1 & exec "$H" root"#,
        ),
        timeout: Some(timeout),
        grace: Some(grace),
        bound: Some((timeout + grace, timeout + grace + SLACK)),
        outcome: Some(Outcome::TimedOut),
        root: Some(RootStatus::Signaled(Signal::TERM)),
        signals: Some(TERM_KILL.into()),
        fates: &[("ign", Dead), ("root", Dead)],
        ..Row::default()
    });
}

fn stopped_member(m: Mechanism, grace: Duration, ignore_term: bool) {
    // HUP too: when the root dies first, the kernel sends SIGHUP+SIGCONT to
    // the newly orphaned group because it has a stopped member.
    let trap = if ignore_term {
        r#"trap "" TERM HUP; "#
    } else {
        ""
    };
    let timeout = ms(300);
    let (signals, min) = if grace.is_zero() {
        (KILL, timeout)
    } else if ignore_term {
        (TERM_KILL, timeout + grace)
    } else {
        // SIGCONT after SIGTERM lets the stopped member act on it.
        (TERM, timeout)
    };
    let row = Row {
        tree: format!(r#""$H" st sh -c '{trap}kill -STOP $$; exec sleep 30' & "$H" other & wait"#),
        timeout: Some(timeout),
        grace: Some(grace),
        bound: Some((min, timeout + grace + SLACK)),
        outcome: Some(Outcome::TimedOut),
        signals: Some(signals.into()),
        fates: &[("st", Dead), ("other", Dead)],
        ..Row::default()
    };
    Tier::new(m).run_with(&row, |_| {}, |_, pids| wait_stopped(pids[0]));
}

pub fn stopped_member_killed_on_timeout_without_grace(m: Mechanism) {
    stopped_member(m, ZERO, false);
}

pub fn stopped_member_killed_on_timeout_with_grace(m: Mechanism) {
    stopped_member(m, ms(2000), false);
}

pub fn stopped_term_ignoring_member_killed_at_end_of_grace(m: Mechanism) {
    stopped_member(m, ms(400), true);
}

pub fn stopped_root_is_killed_on_timeout(m: Mechanism) {
    let timeout = ms(300);
    let row = Row {
        tree: tree(r#""$H" c & exec "$H" root sh -c 'kill -STOP $$; exec sleep 30'"#),
        timeout: Some(timeout),
        bound: Some((timeout, timeout + SLACK)),
        outcome: Some(Outcome::TimedOut),
        root: Some(RootStatus::Signaled(Signal::KILL)),
        fates: &[("c", Dead), ("root", Dead)],
        ..Row::default()
    };
    Tier::new(m).run_with(&row, |_| {}, |_, pids| wait_stopped(pids[1]));
}

// ---------------------------------------------------------------------------
// Cancellation
// ---------------------------------------------------------------------------

/// Cancels through `token` from another thread `after` the helpers are
/// pinned; the thread is joined by the caller.
fn cancel_later(token: CancelToken, after: Duration) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        std::thread::sleep(after);
        token.cancel();
        token.cancel(); // idempotent
    })
}

pub fn cancel_from_another_thread_via_running_token(m: Mechanism) {
    let row = Row {
        tree: tree(r#""$H" a & "$H" b sh -c 'while :; do :; done' & wait"#),
        timeout: Some(secs(20)),
        bound: Some((ms(200), ms(200) + SLACK)),
        outcome: Some(Outcome::Cancelled),
        signals: Some(KILL.into()),
        killed: Some(Exactly(2).into()),
        fates: &[("a", Dead), ("b", Dead)],
        ..Row::default()
    };
    let mut canceller = None;
    Tier::new(m).run_with(
        &row,
        |_| {},
        |running, _| canceller = Some(cancel_later(running.cancel_token(), ms(200))),
    );
    canceller.unwrap().join().unwrap();
}

pub fn cancel_with_command_token_and_grace(m: Mechanism) {
    let token = CancelToken::new();
    let row = Row {
        tree: tree(r#""$H" a & "$H" ign sh -c 'trap "" TERM; exec sleep 30' & wait"#),
        grace: Some(ms(300)),
        bound: Some((ms(500), ms(500) + SLACK)),
        outcome: Some(Outcome::Cancelled),
        signals: Some(TERM_KILL.into()),
        fates: &[("a", Dead), ("ign", Dead)],
        ..Row::default()
    };
    let mut canceller = None;
    Tier::new(m).run_with(
        &row,
        |c| {
            c.cancel_token(&token);
        },
        |_, _| canceller = Some(cancel_later(token.clone(), ms(200))),
    );
    canceller.unwrap().join().unwrap();
    assert!(token.is_cancelled());
}

pub fn cancel_racing_a_clean_exit_is_reported_consistently(m: Mechanism) {
    let t = Tier::new(m);
    let (mut exited, mut cancelled) = (0, 0);
    for i in 0..50u64 {
        let name = format!("r{i}");
        let start = Instant::now();
        let running = t
            .sh(&format!(r#"exec "$H" {name} true"#))
            .timeout(Duration::from_secs(10))
            .spawn()
            .unwrap();
        let token = running.cancel_token();
        let delay = Duration::from_micros(i * 150);
        let c = std::thread::spawn(move || {
            std::thread::sleep(delay);
            token.cancel();
        });
        let r = running.wait();
        c.join().unwrap();
        assert!(
            start.elapsed() < SLACK,
            "iteration {i} took {:?}",
            start.elapsed()
        );
        assert_eq!(r.containment, m);
        match r.outcome {
            Outcome::Exited(0) => {
                exited += 1;
                assert!(r.signals_sent.is_empty(), "iteration {i}: {r:?}");
                assert_eq!(r.exit_code(), Some(0));
                assert_eq!(r.root, Some(RootStatus::Exited(0)));
            }
            Outcome::Cancelled => {
                cancelled += 1;
                assert_eq!(r.signals_sent, vec![Signal::KILL], "iteration {i}");
                assert_eq!(r.exit_code(), None);
                assert!(r.root.is_some(), "iteration {i}: root not reaped? {r:?}");
            }
            other => panic!("iteration {i}: unexpected outcome {other:?}: {r:?}"),
        }
        assert!(t.watch.wait_dead(&name, Duration::from_secs(2)));
    }
    eprintln!("cancel race: {exited} exited, {cancelled} cancelled");
}

pub fn cancel_before_spawn_spawns_nothing(m: Mechanism) {
    let t = Tier::new(m);
    let token = CancelToken::new();
    token.cancel();
    let err = t
        .sh(r#"echo $$ > "$CORRAL_TEST_DIR/root.pid"; exec "$H" c"#)
        .cancel_token(&token)
        .spawn()
        .unwrap_err();
    assert!(matches!(err, Error::CancelledBeforeSpawn), "{err:?}");
    assert_eq!(err.outcome_name(), "cancelled");
    std::thread::sleep(ms(200));
    assert!(!t.scratch.path("root.pid").exists(), "the root ran");
    assert!(
        t.watch.names().is_empty(),
        "helpers ran: {:?}",
        t.watch.names()
    );
}

pub fn thirty_two_concurrent_cancels_send_one_kill(m: Mechanism) {
    let token = CancelToken::new();
    let row = Row {
        tree: tree(r#""$H" a & "$H" b & "$H" c sh -c 'while :; do :; done' & wait"#),
        timeout: Some(secs(20)),
        bound: Some((ZERO, SLACK + SLACK)),
        outcome: Some(Outcome::Cancelled),
        signals: Some(KILL.into()),
        fates: &[("a", Dead), ("b", Dead), ("c", Dead)],
        ..Row::default()
    };
    let mut ops = None;
    let mut threads = Vec::new();
    Tier::new(m).run_with(
        &row,
        |c| {
            c.cancel_token(&token);
            ops = Some(traced(c));
        },
        |running, _| {
            let barrier = Arc::new(Barrier::new(33));
            threads = (0..32)
                .map(|i| {
                    let (b, tk) = (barrier.clone(), token.clone());
                    let own = (i % 2 == 0).then(|| running.cancel_token());
                    std::thread::spawn(move || {
                        b.wait();
                        match own {
                            Some(o) => o.cancel(),
                            None => tk.cancel(),
                        }
                    })
                })
                .collect();
            barrier.wait();
        },
    );
    for th in threads {
        th.join().unwrap();
    }
    let ops = ops.unwrap();
    let ops = ops.lock().unwrap();
    let signals: Vec<_> = ops
        .iter()
        .filter(|o| matches!(o, OsOp::SignalTree { .. }))
        .collect();
    assert_eq!(signals.len(), 1, "{ops:?}");
    assert!(matches!(
        signals[0],
        OsOp::SignalTree {
            signal: Signal::KILL,
            ..
        }
    ));
}

pub fn dropping_running_without_wait_kills_the_tree(m: Mechanism) {
    let t = Tier::new(m);
    let names = ["a", "b"];
    let mut cmd = t.sh(r#""$H" a & "$H" b & wait"#);
    let ops = traced(&mut cmd);
    let running: Running = cmd.spawn().unwrap();
    t.pin(&names);
    let start = Instant::now();
    drop(running);
    assert_between(start.elapsed(), Duration::ZERO, SLACK);
    t.assert_dead(&names);
    let ops = ops.lock().unwrap();
    assert!(matches!(ops.last(), Some(OsOp::Released { .. })), "{ops:?}");
}

// ---------------------------------------------------------------------------
// Spawn errors and arguments
// ---------------------------------------------------------------------------

fn spawn_kind(cmd: &mut Command) -> (SpawnErrorKind, String) {
    let t = Instant::now();
    let err = cmd.spawn().expect_err("spawn must fail");
    assert!(t.elapsed() < SLACK, "spawn failure took {:?}", t.elapsed());
    let kind = err
        .spawn_kind()
        .unwrap_or_else(|| panic!("not a spawn error: {err:?}"));
    assert_eq!(err.outcome_name(), "spawn_failed");
    (kind, err.full_message())
}

pub fn missing_program_is_not_found(m: Mechanism) {
    let t = Tier::new(m);
    let (k, _) = spawn_kind(&mut t.command("corral-no-such-program-4f1c9e"));
    assert_eq!(k, SpawnErrorKind::NotFound);
    let (k, _) = spawn_kind(&mut t.command(t.scratch.path("missing")));
    assert_eq!(k, SpawnErrorKind::NotFound);
    assert!(t.watch.names().is_empty());
}

pub fn non_executable_file_is_permission_denied(m: Mechanism) {
    use std::os::unix::fs::PermissionsExt;
    let t = Tier::new(m);
    let p = t.scratch.path("noexec.sh");
    std::fs::write(&p, "#!/bin/sh\n\"$H\" ran\n").unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (k, msg) = spawn_kind(t.command(&p).envs(t.scratch.env()));
    assert_eq!(k, SpawnErrorKind::PermissionDenied, "{msg}");
    std::thread::sleep(ms(50));
    assert!(t.watch.names().is_empty());
}

pub fn directory_as_program_is_permission_denied(m: Mechanism) {
    let t = Tier::new(m);
    let (k, msg) = spawn_kind(&mut t.command(t.scratch.dir()));
    assert_eq!(k, SpawnErrorKind::PermissionDenied, "{msg}");
}

pub fn bad_current_dir_is_an_error_not_a_hang(m: Mechanism) {
    let t = Tier::new(m);
    let (_k, msg) = spawn_kind(
        t.sh(r#"exec "$H" ran"#)
            .current_dir(t.scratch.path("no-such-dir")),
    );
    assert!(!msg.is_empty());
    std::thread::sleep(ms(50));
    assert!(t.watch.names().is_empty());
}

pub fn bad_current_dir_is_kind_other_as_documented(m: Mechanism) {
    let t = Tier::new(m);
    let (k, msg) = spawn_kind(t.sh("exit 0").current_dir(t.scratch.path("no-such-dir")));
    assert_eq!(k, SpawnErrorKind::Other, "{msg}");
    eprintln!("bad cwd: {msg}");
}

pub fn empty_path_with_absolute_program_works(m: Mechanism) {
    let t = Tier::new(m);
    let row = Row {
        tree: tree(
            r#"printf '[%s]\n' "$PATH"; PATH=/usr/bin:/bin "$H" c >/dev/null 2>&1 & exit 0"#,
        ),
        leftovers: Some(LeftoverPolicy::Kill),
        bound: Some((ZERO, SLACK)),
        outcome: Some(Outcome::Exited(0)),
        stdout: Some(b"[]\n"),
        killed: Some(Exactly(1).into()),
        fates: &[("c", Dead)],
        ..Row::default()
    };
    t.run_with(
        &row,
        |c| {
            c.env("PATH", "");
        },
        |_, _| {},
    );

    // A cleared environment, again with an absolute program.
    let r = t
        .command("/bin/sh")
        .args(["-c", "printf '[%s]' \"$HOME\"; exit 4"])
        .env_clear()
        .run()
        .unwrap();
    assert_eq!(r.exit_code(), Some(4));
    assert_eq!(r.stdout.bytes(), b"[]");
}

pub fn invalid_utf8_argument_is_passed_byte_exact(m: Mechanism) {
    let row = Row {
        tree: tree(r#""$H" c >/dev/null 2>&1 & printf %s "$1""#),
        leftovers: Some(LeftoverPolicy::Kill),
        bound: Some((ZERO, SLACK)),
        outcome: Some(Outcome::Exited(0)),
        killed: Some(Exactly(1).into()),
        stdout: Some(b"\xff\xfe a\x80"),
        fates: &[("c", Dead)],
        ..Row::default()
    };
    Tier::new(m).run_with(
        &row,
        |c| {
            c.arg("sh").arg(OsStr::from_bytes(b"\xff\xfe a\x80"));
        },
        |_, _| {},
    );
}

// ---------------------------------------------------------------------------
// Standard input
// ---------------------------------------------------------------------------

pub fn stdin_bytes_are_delivered(m: Mechanism) {
    // Bigger than a pipe buffer both ways, with every byte value.
    let data: Vec<u8> = (0..600_000u32).map(|i| (i % 251) as u8).collect();
    let row = Row {
        tree: tree(r#""$H" c >/dev/null 2>&1 & exec cat"#),
        leftovers: Some(LeftoverPolicy::Kill),
        timeout: Some(secs(10)),
        bound: Some((ZERO, SLACK)),
        outcome: Some(Outcome::Exited(0)),
        killed: Some(Exactly(1).into()),
        fates: &[("c", Dead)],
        ..Row::default()
    };
    let r = Tier::new(m).run_with(
        &row,
        |c| {
            c.stdin(Input::bytes(data.clone()));
        },
        |_, _| {},
    );
    assert_eq!(r.stdout.total_bytes(), data.len() as u64);
    assert!(r.stdout.bytes() == data, "stdin was not echoed byte-exact");
}

pub fn unread_large_stdin_does_not_stall_the_deadline(m: Mechanism) {
    let timeout = ms(300);
    let row = Row {
        tree: tree(r#"exec "$H" root"#),
        timeout: Some(timeout),
        bound: Some((timeout, timeout + SLACK)),
        outcome: Some(Outcome::TimedOut),
        fates: &[("root", Dead)],
        ..Row::default()
    };
    Tier::new(m).run_with(
        &row,
        |c| {
            c.stdin(Input::bytes(vec![b'x'; 8 << 20]));
        },
        |_, _| {},
    );
}

pub fn unread_large_stdin_and_prompt_exit_returns_at_once(m: Mechanism) {
    Tier::new(m).run_with(
        &detached(5, None, false),
        |c| {
            c.stdin(Input::bytes(vec![b'x'; 8 << 20]));
        },
        |_, _| {},
    );
}

// ---------------------------------------------------------------------------
// Output: line callback, output before a kill, merged streams
// ---------------------------------------------------------------------------

pub fn on_line_receives_lines_in_order_from_both_streams(m: Mechanism) {
    // Each line is written only once the callback has seen the one before
    // (it leaves a file `seen-LINE`), so the order across the two pipes is
    // the program's, not the scheduler's: no sleep to win under load.
    let row = Row {
        tree: tree(concat!(
            r#""$H" c >/dev/null 2>&1 & "#,
            r#"w() { i=0; until [ -e "$CORRAL_TEST_DIR/seen-$1" ] || [ $i -ge 2000 ]; do sleep 0.01; i=$((i+1)); done; }; "#,
            "echo o1; w o1; echo e1 >&2; w e1; ",
            "echo o2; echo o3; w o3; echo e2 >&2; w e2; ",
            "printf 'o4-no-newline'"
        )),
        leftovers: Some(LeftoverPolicy::Kill),
        bound: Some((ZERO, SLACK)),
        outcome: Some(Outcome::Exited(0)),
        killed: Some(Exactly(1).into()),
        stdout: Some(b"o1\no2\no3\no4-no-newline"),
        stderr: Some(b"e1\ne2\n"),
        fates: &[("c", Dead)],
        ..Row::default()
    };
    let tier = Tier::new(m);
    let lines: Lines = Arc::default();
    let (l, dir) = (lines.clone(), tier.scratch.dir().to_path_buf());
    tier.run_with(
        &row,
        |c| {
            c.on_line(move |st, line| {
                let name = format!("seen-{}", String::from_utf8_lossy(line));
                let _ = std::fs::write(dir.join(name), b"");
                l.lock().unwrap().push((st, line.to_vec()));
            });
        },
        |_, _| {},
    );
    let got = lines.lock().unwrap().clone();
    let want: Vec<(Stream, Vec<u8>)> = [
        (Stream::Stdout, "o1"),
        (Stream::Stderr, "e1"),
        (Stream::Stdout, "o2"),
        (Stream::Stdout, "o3"),
        (Stream::Stderr, "e2"),
        (Stream::Stdout, "o4-no-newline"),
    ]
    .into_iter()
    .map(|(s, l)| (s, l.as_bytes().to_vec()))
    .collect();
    assert_eq!(got, want);
}

pub fn output_written_before_a_kill_is_kept(m: Mechanism) {
    let timeout = ms(300);
    let row = Row {
        tree: tree(r#"echo before; echo err-before >&2; printf partial; exec "$H" root"#),
        timeout: Some(timeout),
        bound: Some((timeout, timeout + SLACK)),
        outcome: Some(Outcome::TimedOut),
        stdout: Some(b"before\npartial"),
        stderr: Some(b"err-before\n"),
        fates: &[("root", Dead)],
        ..Row::default()
    };
    let mut lines = None;
    Tier::new(m).run_with(&row, |c| lines = Some(on_line(c)), |_, _| {});
    let got = lines.unwrap().lock().unwrap().clone();
    for want in [
        (Stream::Stdout, &b"before"[..]),
        (Stream::Stdout, b"partial"),
        (Stream::Stderr, b"err-before"),
    ] {
        assert!(got.contains(&(want.0, want.1.to_vec())), "{got:?}");
    }
}

pub fn stderr_merged_with_stdout_keeps_order(m: Mechanism) {
    let row = Row {
        tree: tree(concat!(
            r#""$H" c >/dev/null 2>&1 & "#,
            "for i in 1 2 3 4 5 6 7 8; do echo out$i; echo err$i >&2; done"
        )),
        leftovers: Some(LeftoverPolicy::Kill),
        bound: Some((ZERO, SLACK)),
        outcome: Some(Outcome::Exited(0)),
        killed: Some(Exactly(1).into()),
        stderr: Some(b""),
        fates: &[("c", Dead)],
        ..Row::default()
    };
    let r = Tier::new(m).run_with(
        &row,
        |c| {
            c.stderr(Output::merge_with_stdout());
        },
        |_, _| {},
    );
    let want: String = (1..=8).map(|i| format!("out{i}\nerr{i}\n")).collect();
    assert_eq!(String::from_utf8_lossy(&r.stdout.bytes()), want);
}

pub fn merged_stderr_held_by_grandchild_is_output_held(m: Mechanism) {
    let wd = ms(300);
    let row = Row {
        tree: tree(r#""$H" gc >/dev/null & echo done >&2; exit 0"#),
        wait_delay: Some(wd),
        bound: Some((wd, wd + SLACK)),
        outcome: Some(Outcome::OutputHeld),
        stdout: Some(b"done\n"),
        fates: &[("gc", Dead)],
        ..Row::default()
    };
    Tier::new(m).run_with(
        &row,
        |c| {
            c.stderr(Output::merge_with_stdout());
        },
        |_, _| {},
    );
}

pub fn uncaptured_output_does_not_wait_for_holders(m: Mechanism) {
    // With stdout/stderr to the null device the wait delay does not apply:
    // the background child is a plain leftover.
    let row = Row {
        tree: tree(r#""$H" c & exit 0"#),
        wait_delay: Some(secs(5)),
        bound: Some((ZERO, SLACK)),
        outcome: Some(Outcome::Exited(0)),
        kept: Some(1),
        fates: &[("c", Alive)],
        ..Row::default()
    };
    Tier::new(m).run_with(
        &row,
        |c| {
            c.stdout(Output::null()).stderr(Output::null());
        },
        |_, _| {},
    );
}

pub fn holder_that_closes_output_within_wait_delay_is_a_clean_exit(m: Mechanism) {
    // The grandchild holds stdout for 200 ms, then lets go and keeps
    // running: the run ends cleanly then, not at the end of the wait delay.
    Tier::new(m).run(&Row {
        tree: tree(r#""$H" gc sh -c 'sleep 0.2; exec sleep 30 >/dev/null 2>&1' & echo hi; exit 0"#),
        wait_delay: Some(secs(3)),
        bound: Some((ms(200), ms(200) + SLACK)),
        outcome: Some(Outcome::Exited(0)),
        signals: Some(NONE.into()),
        kept: Some(1),
        stdout: Some(b"hi\n"),
        fates: &[("gc", Alive)],
        ..Row::default()
    });
}

pub fn holder_that_left_the_group_cannot_stall_the_return(m: Mechanism) {
    // `setsid` takes the holder out of the process group (the documented
    // limit of that mechanism): there it cannot be killed, but it must not
    // keep `wait` from returning after the wait delay. Every other tier
    // holds it, and kills it.
    let wd = ms(300);
    Tier::new(m).run(&Row {
        tree: tree(r#""$H" esc setsid sleep 30 & echo hi; exit 0"#),
        wait_delay: Some(wd),
        bound: Some((wd, wd + SLACK)),
        outcome: Some(Outcome::OutputHeld),
        root: Some(RootStatus::Exited(0)),
        stdout: Some(b"hi\n"),
        // Out of the group, so out of reach (the Watch kills it on drop).
        fates: &[("esc", AliveIn(&[Mechanism::ProcessGroup]))],
        ..Row::default()
    });
}

pub fn root_killed_by_a_foreign_signal_is_signaled(m: Mechanism) {
    let usr1: Signal = "USR1".parse().unwrap();
    // Not a clean exit 0: the leftover is killed under KeepOnSuccess.
    let r = Tier::new(m).run(&Row {
        tree: tree(r#""$H" c >/dev/null 2>&1 & kill -USR1 $$; sleep 5"#),
        bound: Some((ZERO, SLACK)),
        signals: Some(KILL.into()),
        killed: Some(Exactly(1).into()),
        fates: &[("c", Dead)],
        outcome: Some(Outcome::Signaled(usr1)),
        root: Some(RootStatus::Signaled(usr1)),
        ..Row::default()
    });
    assert_eq!(r.exit_code(), None);
}

pub fn reused_command_keeps_stdin_bytes_and_line_callback(m: Mechanism) {
    let t = Tier::new(m);
    let row = Row {
        tree: tree(r#""$H" c >/dev/null 2>&1 & exec cat"#),
        leftovers: Some(LeftoverPolicy::Kill),
        bound: Some((ZERO, SLACK)),
        outcome: Some(Outcome::Exited(0)),
        stdout: Some(b"hello\n"),
        fates: &[("c", Dead)],
        ..Row::default()
    };
    let mut cmd = t.sh(&row.tree);
    cmd.stdin(Input::bytes(b"hello\n".to_vec()))
        .leftovers(LeftoverPolicy::Kill);
    let lines = on_line(&mut cmd);
    let start = Instant::now();
    let running = cmd.spawn().unwrap();
    t.pin(&["c"]);
    let r1 = running.wait();
    t.check(&row, &r1, start.elapsed());
    std::fs::remove_file(t.scratch.path("c.pid")).unwrap();
    let r2 = cmd.run().unwrap();
    assert_eq!(r2.exit_code(), Some(0));
    assert_eq!(r2.stdout.bytes(), b"hello\n", "second run got no stdin");
    assert_eq!(lines.lock().unwrap().len(), 2, "second run got no callback");
}

pub fn invalid_merge_configuration_spawns_nothing(m: Mechanism) {
    let t = Tier::new(m);
    let err = t
        .sh(r#"exec "$H" ran"#)
        .stdout(Output::merge_with_stdout())
        .spawn()
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput(_)), "{err:?}");
    let err = t
        .sh(r#"exec "$H" ran"#)
        .stdout(Output::null())
        .stderr(Output::merge_with_stdout())
        .spawn()
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput(_)), "{err:?}");
    std::thread::sleep(ms(100));
    assert!(t.watch.names().is_empty(), "{:?}", t.watch.names());
}
