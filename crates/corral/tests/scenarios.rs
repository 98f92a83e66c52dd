//! End-to-end scenarios for corral's four promises on Linux with
//! process-group containment: bounded return, nothing left behind, never
//! the wrong process, and a truthful report.
//!
//! Every test builds a real process tree from testkit helpers (`"$H" NAME
//! [CMD...]`), starts a `Watch` before the code under test runs, pins every
//! helper between `spawn` and `wait` (supervision, and so every kill, only
//! happens inside `wait`), and then checks the return bound, the report and
//! the fate of every helper.

#![cfg(target_os = "linux")]

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use corral::{
    CancelToken, Command, ContainmentChoice, Error, Input, LeftoverPolicy, Mechanism, OsOp,
    Outcome, Output, Report, RootStatus, Running, Signal, SpawnErrorKind, Stream,
};
use corral_testkit::{assert_between, Scratch, Watch};

/// Slack on every upper time bound (a loaded 2-core CI box).
const SLACK: Duration = Duration::from_millis(1500);

/// `sh -c SCRIPT` with the scratch's environment, contained by a process
/// group (the mechanism these tests are about).
fn sh(s: &Scratch, script: &str) -> Command {
    let mut c = s.sh(script);
    c.containment(ContainmentChoice::Only(Mechanism::ProcessGroup));
    c
}

/// A command contained by a process group.
fn pg_command(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new(program);
    c.containment(ContainmentChoice::Only(Mechanism::ProcessGroup));
    c
}

type Lines = Arc<Mutex<Vec<(Stream, Vec<u8>)>>>;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The `state` field of `/proc/<pid>/stat` (None once the pid is gone).
fn proc_state(pid: u32) -> Option<u8> {
    let stat = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    let close = stat.iter().rposition(|&b| b == b')')?;
    stat.get(close + 2).copied()
}

/// Waits for every named helper to appear and to have exec'd its command
/// (so the helper's own `mv` is gone and tree membership is stable).
/// Returns their pids in order.
fn pin(w: &Watch, names: &[&str]) -> Vec<u32> {
    names
        .iter()
        .map(|n| {
            let pid = w
                .pid(n, Duration::from_secs(5))
                .unwrap_or_else(|| panic!("helper {n} never started"));
            let end = Instant::now() + Duration::from_secs(5);
            loop {
                let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
                if comm.trim() != "H" || Instant::now() >= end {
                    break;
                }
                std::thread::sleep(ms(2));
            }
            pid
        })
        .collect()
}

/// Asserts that every named helper is (or becomes, within 2 s) dead.
#[track_caller]
fn assert_all_dead(w: &Watch, names: &[&str]) {
    for n in names {
        assert!(
            w.wait_dead(n, Duration::from_secs(2)),
            "helper {n} is still alive"
        );
    }
}

/// Spawns, pins the helpers, waits. Returns the report and the time from
/// just before the spawn to the end of `wait`.
fn spawn_pin_wait(cmd: &mut Command, w: &Watch, names: &[&str]) -> (Report, Duration) {
    let t = Instant::now();
    let running = cmd.spawn().expect("spawn");
    pin(w, names);
    let r = running.wait();
    let el = t.elapsed();
    assert_eq!(r.containment, Mechanism::ProcessGroup);
    (r, el)
}

fn traced(cmd: &mut Command) -> Arc<Mutex<Vec<OsOp>>> {
    let ops: Arc<Mutex<Vec<OsOp>>> = Arc::default();
    let o = ops.clone();
    cmd.trace_ops(move |op: &OsOp| o.lock().unwrap().push(op.clone()));
    ops
}

// ---------------------------------------------------------------------------
// Clean exits
// ---------------------------------------------------------------------------

#[test]
fn root_exits_0_without_children() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let (r, el) = spawn_pin_wait(
        sh(&s, r#"exec "$H" root sh -c 'echo hi; exit 0'"#).wait_delay(Duration::from_secs(5)),
        &w,
        &["root"],
    );
    assert_between(el, Duration::ZERO, SLACK);
    assert_eq!(r.outcome, Outcome::Exited(0));
    assert_eq!(r.root, Some(RootStatus::Exited(0)));
    assert_eq!(r.exit_code(), Some(0));
    assert!(r.success());
    assert!(r.signals_sent.is_empty(), "{:?}", r.signals_sent);
    assert_eq!(r.leftovers.killed, 0);
    assert_eq!(r.leftovers.kept, 0);
    assert!(r.cleanup_error.is_none());
    assert_eq!(r.stdout.bytes(), b"hi\n");
    assert!(r.stderr.bytes().is_empty());
    assert_all_dead(&w, &["root"]);
}

#[test]
fn exit_0_detached_child_kept_under_keep_on_success() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let (r, el) = spawn_pin_wait(
        sh(&s, r#""$H" c >/dev/null 2>&1 & exit 0"#).wait_delay(Duration::from_secs(5)),
        &w,
        &["c"],
    );
    // Well below the 5 s wait delay: nothing holds the output.
    assert_between(el, Duration::ZERO, SLACK);
    assert_eq!(r.outcome, Outcome::Exited(0));
    assert_eq!(r.exit_code(), Some(0));
    assert!(r.signals_sent.is_empty(), "{:?}", r.signals_sent);
    assert_eq!(r.leftovers.kept, 1);
    assert_eq!(r.leftovers.killed, 0);
    std::thread::sleep(ms(100));
    assert!(w.is_alive("c"), "kept child must keep running");
}

#[test]
fn exit_0_detached_child_killed_under_kill_policy() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let (r, el) = spawn_pin_wait(
        sh(&s, r#""$H" c >/dev/null 2>&1 & exit 0"#)
            .wait_delay(Duration::from_secs(5))
            .leftovers(LeftoverPolicy::Kill),
        &w,
        &["c"],
    );
    assert_between(el, Duration::ZERO, SLACK);
    assert_eq!(r.outcome, Outcome::Exited(0));
    assert_eq!(r.exit_code(), Some(0));
    assert_eq!(r.signals_sent, vec![Signal::KILL]);
    assert_eq!(r.leftovers.killed, 1);
    assert_eq!(r.leftovers.kept, 0);
    assert_all_dead(&w, &["c"]);
}

#[test]
fn exit_3_detached_child_kept_under_keep_policy() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let (r, el) = spawn_pin_wait(
        sh(&s, r#""$H" c >/dev/null 2>&1 & exit 3"#)
            .wait_delay(Duration::from_secs(5))
            .leftovers(LeftoverPolicy::Keep),
        &w,
        &["c"],
    );
    assert_between(el, Duration::ZERO, SLACK);
    assert_eq!(r.outcome, Outcome::Exited(3));
    assert_eq!(r.exit_code(), Some(3));
    assert!(r.signals_sent.is_empty(), "{:?}", r.signals_sent);
    assert_eq!(r.leftovers.kept, 1);
    assert_eq!(r.leftovers.killed, 0);
    std::thread::sleep(ms(100));
    assert!(w.is_alive("c"), "Keep policy must keep the child");
}

#[test]
fn exit_7_detached_child_killed_and_exit_is_clean() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let (r, el) = spawn_pin_wait(
        sh(&s, r#""$H" c >/dev/null 2>&1 & exit 7"#).wait_delay(Duration::from_secs(5)),
        &w,
        &["c"],
    );
    assert_between(el, Duration::ZERO, SLACK);
    assert_eq!(r.outcome, Outcome::Exited(7));
    assert_eq!(r.root, Some(RootStatus::Exited(7)));
    assert_eq!(r.exit_code(), Some(7));
    assert!(!r.success());
    assert_eq!(r.signals_sent, vec![Signal::KILL]);
    assert_eq!(r.leftovers.killed, 1);
    assert_eq!(r.leftovers.kept, 0);
    assert_all_dead(&w, &["c"]);
}

#[test]
fn exit_7_survivor_ignoring_term_escalates_within_grace() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let (r, el) = spawn_pin_wait(
        // The root exits only once the helper's trap is installed.
        sh(
            &s,
            &format!(
                r#""$H" ign sh -c 'trap "" TERM; exec sleep 30' >/dev/null 2>&1 & {}exit 7"#,
                corral_testkit::ready("ign")
            ),
        )
        .grace(ms(300)),
        &w,
        &["ign"],
    );
    assert_between(el, ms(300), ms(300) + SLACK);
    assert_eq!(r.outcome, Outcome::Exited(7));
    assert_eq!(r.exit_code(), Some(7));
    assert_eq!(r.signals_sent, vec![Signal::TERM, Signal::KILL]);
    assert_eq!(r.leftovers.killed, 1);
    assert_all_dead(&w, &["ign"]);
}

// ---------------------------------------------------------------------------
// Output held past the wait delay
// ---------------------------------------------------------------------------

fn held_output(script: &str, code: i32) {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let wd = ms(300);
    let (r, el) = spawn_pin_wait(sh(&s, script).wait_delay(wd), &w, &["gc"]);
    assert_between(el, wd, wd + SLACK);
    assert_eq!(r.outcome, Outcome::OutputHeld);
    assert_eq!(r.root, Some(RootStatus::Exited(code)));
    assert_eq!(r.exit_code(), None);
    assert!(!r.is_clean());
    assert_eq!(r.signals_sent, vec![Signal::KILL]);
    assert!(r.leftovers.killed >= 1, "{:?}", r.leftovers);
    // About wait_delay after the root's exit was seen.
    let exit_at = r.timings.root_exit.expect("root exit observed");
    assert_between(r.timings.cleanup_done - exit_at, wd, wd + SLACK);
    assert!(r.stdout.bytes().starts_with(b"started\n"), "{:?}", r.stdout);
    assert_all_dead(&w, &["gc"]);
}

#[test]
fn exit_0_grandchild_holding_stdout_is_output_held() {
    held_output(r#""$H" gc 2>/dev/null & echo started; exit 0"#, 0);
}

#[test]
fn exit_0_grandchild_holding_only_stderr_is_output_held() {
    held_output(r#""$H" gc >/dev/null & echo started; exit 0"#, 0);
}

#[test]
fn exit_7_grandchild_holding_stdout_is_output_held_with_root_status() {
    held_output(r#""$H" gc 2>/dev/null & echo started; exit 7"#, 7);
}

#[test]
fn deeper_holder_behind_an_exited_intermediate_is_killed() {
    // root -> mid (exits at once) -> deep (holds stdout): the deep one is
    // reparented away from the tree's root but stays in its group.
    let s = Scratch::new();
    let w = Watch::new(&s);
    let wd = ms(300);
    let (r, el) = spawn_pin_wait(
        sh(&s, r#"sh -c '"$H" deep & exit 0'; exit 0"#).wait_delay(wd),
        &w,
        &["deep"],
    );
    assert_between(el, wd, wd + SLACK);
    assert_eq!(r.outcome, Outcome::OutputHeld);
    assert_eq!(r.leftovers.killed, 1);
    assert_all_dead(&w, &["deep"]);
}

// ---------------------------------------------------------------------------
// Timeouts, grace, escalation, stopped members
// ---------------------------------------------------------------------------

#[test]
fn timeout_kills_a_busy_tree() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let names = ["b1", "b2", "s1", "s2", "s3"];
    let timeout = ms(400);
    let (r, el) = spawn_pin_wait(
        sh(
            &s,
            concat!(
                r#""$H" b1 sh -c 'while :; do :; done' & "#,
                r#""$H" b2 sh -c 'while :; do :; done' & "#,
                r#""$H" s1 & "#,
                r#""$H" s2 sh -c '"$H" s3 & exec sleep 30' & "#,
                "wait"
            ),
        )
        .timeout(timeout),
        &w,
        &names,
    );
    assert_between(el, timeout, timeout + SLACK);
    assert_eq!(r.outcome, Outcome::TimedOut);
    assert_eq!(r.root, Some(RootStatus::Signaled(Signal::KILL)));
    assert_eq!(r.exit_code(), None);
    assert_eq!(r.signals_sent, vec![Signal::KILL]);
    assert_eq!(r.leftovers.killed, names.len());
    assert!(r.cleanup_error.is_none(), "{:?}", r.cleanup_error);
    assert_all_dead(&w, &names);
}

#[test]
fn absolute_deadline_earlier_than_timeout_wins() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let t = Instant::now();
    let running = sh(&s, r#"exec "$H" root"#)
        .timeout(Duration::from_secs(20))
        .deadline(Instant::now() + ms(300))
        .spawn()
        .unwrap();
    pin(&w, &["root"]);
    let r = running.wait();
    assert_between(t.elapsed(), ms(300), ms(300) + SLACK);
    assert_eq!(r.outcome, Outcome::TimedOut);
    assert_all_dead(&w, &["root"]);
}

#[test]
fn term_ignoring_tree_gets_term_then_kill_after_grace() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let names = ["ign", "r2"];
    let (timeout, grace) = (ms(300), ms(500));
    let (r, el) = spawn_pin_wait(
        sh(
            &s,
            concat!(
                r#"trap "" TERM; "#,
                r#""$H" ign sh -c 'trap "" TERM; exec sleep 30' & "#,
                r#""$H" r2 & "#,
                "wait"
            ),
        )
        .timeout(timeout)
        .grace(grace),
        &w,
        &names,
    );
    assert_between(el, timeout + grace, timeout + grace + SLACK);
    assert_eq!(r.outcome, Outcome::TimedOut);
    assert_eq!(r.signals_sent, vec![Signal::TERM, Signal::KILL]);
    assert_eq!(r.root, Some(RootStatus::Signaled(Signal::KILL)));
    assert_all_dead(&w, &names);
}

#[test]
fn tree_dying_on_term_returns_before_grace_ends_without_kill() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let names = ["a", "b", "c"];
    let (timeout, grace) = (ms(300), Duration::from_secs(4));
    let (r, el) = spawn_pin_wait(
        sh(&s, r#""$H" a & "$H" b sh -c '"$H" c & wait' & wait"#)
            .timeout(timeout)
            .grace(grace),
        &w,
        &names,
    );
    // Well before the 4 s grace would end.
    assert_between(el, timeout, timeout + SLACK);
    assert_eq!(r.outcome, Outcome::TimedOut);
    assert_eq!(r.signals_sent, vec![Signal::TERM]);
    assert_eq!(r.root, Some(RootStatus::Signaled(Signal::TERM)));
    assert!(r.cleanup_error.is_none(), "{:?}", r.cleanup_error);
    assert_all_dead(&w, &names);
}

#[test]
fn escalation_is_decided_by_the_group_not_the_root() {
    // The root dies on SIGTERM; a grandchild that ignores it (and closed its
    // output, so nothing else keeps the run alive) must still get SIGKILL.
    let s = Scratch::new();
    let w = Watch::new(&s);
    let names = ["ign", "root"];
    let (timeout, grace) = (ms(300), ms(500));
    let (r, el) = spawn_pin_wait(
        sh(
            &s,
            r#""$H" ign sh -c 'trap "" TERM; exec sleep 30' >/dev/null 2>&1 & exec "$H" root"#,
        )
        .timeout(timeout)
        .grace(grace),
        &w,
        &names,
    );
    assert_between(el, timeout + grace, timeout + grace + SLACK);
    assert_eq!(r.outcome, Outcome::TimedOut);
    assert_eq!(r.root, Some(RootStatus::Signaled(Signal::TERM)));
    assert_eq!(r.signals_sent, vec![Signal::TERM, Signal::KILL]);
    assert_all_dead(&w, &names);
}

fn wait_stopped(pid: u32) {
    let end = Instant::now() + Duration::from_secs(5);
    while proc_state(pid) != Some(b'T') {
        assert!(Instant::now() < end, "helper {pid} never stopped");
        std::thread::sleep(ms(2));
    }
}

fn stopped_member(grace: Duration, ignore_term: bool) {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let names = ["st", "other"];
    // HUP too: when the root dies first, the kernel sends SIGHUP+SIGCONT to
    // the newly orphaned group because it has a stopped member.
    let trap = if ignore_term {
        r#"trap "" TERM HUP; "#
    } else {
        ""
    };
    let script =
        format!(r#""$H" st sh -c '{trap}kill -STOP $$; exec sleep 30' & "$H" other & wait"#);
    let timeout = ms(300);
    let t = Instant::now();
    let running = sh(&s, &script)
        .timeout(timeout)
        .grace(grace)
        .spawn()
        .unwrap();
    let pids = pin(&w, &names);
    wait_stopped(pids[0]);
    let r = running.wait();
    let el = t.elapsed();
    assert_between(el, timeout, timeout + grace + SLACK);
    assert_eq!(r.outcome, Outcome::TimedOut);
    if grace.is_zero() {
        assert_eq!(r.signals_sent, vec![Signal::KILL]);
    } else if ignore_term {
        assert_eq!(
            r.signals_sent,
            vec![Signal::TERM, Signal::KILL],
            "took {el:?}, st alive: {}, other alive: {}, {r:?}",
            w.is_alive("st"),
            w.is_alive("other")
        );
        assert!(el >= timeout + grace, "took {el:?}");
    } else {
        // SIGCONT after SIGTERM lets the stopped member act on it.
        assert_eq!(r.signals_sent, vec![Signal::TERM]);
    }
    assert_all_dead(&w, &names);
}

#[test]
fn stopped_member_killed_on_timeout_without_grace() {
    stopped_member(Duration::ZERO, false);
}

#[test]
fn stopped_member_killed_on_timeout_with_grace() {
    stopped_member(ms(2000), false);
}

#[test]
fn stopped_term_ignoring_member_killed_at_end_of_grace() {
    stopped_member(ms(400), true);
}

#[test]
fn stopped_root_is_killed_on_timeout() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let timeout = ms(300);
    let t = Instant::now();
    let running = sh(
        &s,
        r#""$H" c & exec "$H" root sh -c 'kill -STOP $$; exec sleep 30'"#,
    )
    .timeout(timeout)
    .spawn()
    .unwrap();
    let pids = pin(&w, &["c", "root"]);
    wait_stopped(pids[1]);
    let r = running.wait();
    assert_between(t.elapsed(), timeout, timeout + SLACK);
    assert_eq!(r.outcome, Outcome::TimedOut);
    assert_eq!(r.root, Some(RootStatus::Signaled(Signal::KILL)));
    assert_all_dead(&w, &["c", "root"]);
}

// ---------------------------------------------------------------------------
// Cancellation
// ---------------------------------------------------------------------------

#[test]
fn cancel_from_another_thread_via_running_token() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let names = ["a", "b"];
    let t = Instant::now();
    let running = sh(&s, r#""$H" a & "$H" b sh -c 'while :; do :; done' & wait"#)
        .timeout(Duration::from_secs(20))
        .spawn()
        .unwrap();
    let token = running.cancel_token();
    pin(&w, &names);
    let canceller = std::thread::spawn(move || {
        std::thread::sleep(ms(200));
        token.cancel();
        token.cancel(); // idempotent
    });
    let r = running.wait();
    canceller.join().unwrap();
    assert_between(t.elapsed(), ms(200), ms(200) + SLACK);
    assert_eq!(r.outcome, Outcome::Cancelled);
    assert_eq!(r.exit_code(), None);
    assert_eq!(r.signals_sent, vec![Signal::KILL]);
    assert_eq!(r.leftovers.killed, 2);
    assert_all_dead(&w, &names);
}

#[test]
fn cancel_with_command_token_and_grace() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let names = ["a", "ign"];
    let token = CancelToken::new();
    let t = Instant::now();
    let running = sh(
        &s,
        r#""$H" a & "$H" ign sh -c 'trap "" TERM; exec sleep 30' & wait"#,
    )
    .cancel_token(&token)
    .grace(ms(300))
    .spawn()
    .unwrap();
    pin(&w, &names);
    let tk = token.clone();
    let canceller = std::thread::spawn(move || {
        std::thread::sleep(ms(200));
        tk.cancel();
    });
    let r = running.wait();
    canceller.join().unwrap();
    assert_between(t.elapsed(), ms(500), ms(500) + SLACK);
    assert_eq!(r.outcome, Outcome::Cancelled);
    assert_eq!(r.signals_sent, vec![Signal::TERM, Signal::KILL]);
    assert!(token.is_cancelled());
    assert_all_dead(&w, &names);
}

#[test]
fn cancel_racing_a_clean_exit_is_reported_consistently() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let (mut exited, mut cancelled) = (0, 0);
    for i in 0..50u64 {
        let name = format!("r{i}");
        let t = Instant::now();
        let running = sh(&s, &format!(r#"exec "$H" {name} true"#))
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
        assert!(t.elapsed() < SLACK, "iteration {i} took {:?}", t.elapsed());
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
        assert!(w.wait_dead(&name, Duration::from_secs(2)));
    }
    eprintln!("cancel race: {exited} exited, {cancelled} cancelled");
}

#[test]
fn cancel_before_spawn_spawns_nothing() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let token = CancelToken::new();
    token.cancel();
    let err = sh(&s, r#"echo $$ > "$CORRAL_TEST_DIR/root.pid"; exec "$H" c"#)
        .cancel_token(&token)
        .spawn()
        .unwrap_err();
    assert!(matches!(err, Error::CancelledBeforeSpawn), "{err:?}");
    assert_eq!(err.outcome_name(), "cancelled");
    std::thread::sleep(ms(200));
    assert!(!s.path("root.pid").exists(), "the root ran");
    assert!(w.names().is_empty(), "helpers ran: {:?}", w.names());
}

#[test]
fn thirty_two_concurrent_cancels_send_one_kill() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let names = ["a", "b", "c"];
    let token = CancelToken::new();
    let mut cmd = sh(
        &s,
        r#""$H" a & "$H" b & "$H" c sh -c 'while :; do :; done' & wait"#,
    );
    cmd.cancel_token(&token).timeout(Duration::from_secs(20));
    let ops = traced(&mut cmd);
    let t = Instant::now();
    let running = cmd.spawn().unwrap();
    pin(&w, &names);
    let barrier = Arc::new(Barrier::new(33));
    let threads: Vec<_> = (0..32)
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
    let r = running.wait();
    for th in threads {
        th.join().unwrap();
    }
    assert_between(t.elapsed(), Duration::ZERO, SLACK + SLACK);
    assert_eq!(r.outcome, Outcome::Cancelled);
    assert_eq!(r.signals_sent, vec![Signal::KILL]);
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
    assert_all_dead(&w, &names);
}

#[test]
fn dropping_running_without_wait_kills_the_tree() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let names = ["a", "b"];
    let mut cmd = sh(&s, r#""$H" a & "$H" b & wait"#);
    let ops = traced(&mut cmd);
    let running: Running = cmd.spawn().unwrap();
    pin(&w, &names);
    let t = Instant::now();
    drop(running);
    assert_between(t.elapsed(), Duration::ZERO, SLACK);
    assert_all_dead(&w, &names);
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
    (kind, err.to_string())
}

#[test]
fn missing_program_is_not_found() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let (k, _) = spawn_kind(&mut pg_command("corral-no-such-program-4f1c9e"));
    assert_eq!(k, SpawnErrorKind::NotFound);
    let (k, _) = spawn_kind(&mut pg_command(s.path("missing")));
    assert_eq!(k, SpawnErrorKind::NotFound);
    assert!(w.names().is_empty());
}

#[test]
fn non_executable_file_is_permission_denied() {
    use std::os::unix::fs::PermissionsExt;
    let s = Scratch::new();
    let w = Watch::new(&s);
    let p = s.path("noexec.sh");
    std::fs::write(&p, "#!/bin/sh\n\"$H\" ran\n").unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (k, msg) = spawn_kind(pg_command(&p).envs(s.env()));
    assert_eq!(k, SpawnErrorKind::PermissionDenied, "{msg}");
    std::thread::sleep(ms(50));
    assert!(w.names().is_empty());
}

#[test]
fn directory_as_program_is_permission_denied() {
    let s = Scratch::new();
    let _w = Watch::new(&s);
    let (k, msg) = spawn_kind(&mut pg_command(s.dir()));
    assert_eq!(k, SpawnErrorKind::PermissionDenied, "{msg}");
}

#[test]
fn bad_current_dir_is_an_error_not_a_hang() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let (_k, msg) = spawn_kind(sh(&s, r#"exec "$H" ran"#).current_dir(s.path("no-such-dir")));
    assert!(!msg.is_empty());
    std::thread::sleep(ms(50));
    assert!(w.names().is_empty());
}

#[test]
fn bad_current_dir_is_kind_other_as_documented() {
    let s = Scratch::new();
    let _w = Watch::new(&s);
    let (k, msg) = spawn_kind(sh(&s, "exit 0").current_dir(s.path("no-such-dir")));
    assert_eq!(k, SpawnErrorKind::Other, "{msg}");
    eprintln!("bad cwd: {msg}");
}

#[test]
fn empty_path_with_absolute_program_works() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let (r, _) = spawn_pin_wait(
        sh(
            &s,
            r#"printf '[%s]\n' "$PATH"; PATH=/usr/bin:/bin "$H" c >/dev/null 2>&1 & exit 0"#,
        )
        .env("PATH", "")
        .leftovers(LeftoverPolicy::Kill),
        &w,
        &["c"],
    );
    assert_eq!(r.outcome, Outcome::Exited(0));
    assert_eq!(r.stdout.bytes(), b"[]\n");
    assert_eq!(r.leftovers.killed, 1);
    assert_all_dead(&w, &["c"]);

    // A cleared environment, again with an absolute program.
    let r = pg_command("/bin/sh")
        .args(["-c", "printf '[%s]' \"$HOME\"; exit 4"])
        .env_clear()
        .run()
        .unwrap();
    assert_eq!(r.exit_code(), Some(4));
    assert_eq!(r.stdout.bytes(), b"[]");
}

#[test]
fn invalid_utf8_argument_is_passed_byte_exact() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let arg = OsStr::from_bytes(b"\xff\xfe a\x80");
    let mut cmd = sh(&s, r#""$H" c >/dev/null 2>&1 & printf %s "$1""#);
    cmd.arg("sh").arg(arg).leftovers(LeftoverPolicy::Kill);
    let (r, _) = spawn_pin_wait(&mut cmd, &w, &["c"]);
    assert_eq!(r.exit_code(), Some(0));
    assert_eq!(r.leftovers.killed, 1);
    assert_eq!(r.stdout.bytes(), b"\xff\xfe a\x80");
    assert_all_dead(&w, &["c"]);
}

// ---------------------------------------------------------------------------
// Standard input
// ---------------------------------------------------------------------------

#[test]
fn stdin_bytes_are_delivered() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    // Bigger than a pipe buffer both ways, with every byte value.
    let data: Vec<u8> = (0..600_000u32).map(|i| (i % 251) as u8).collect();
    let mut cmd = sh(&s, r#""$H" c >/dev/null 2>&1 & exec cat"#);
    cmd.stdin(Input::bytes(data.clone()))
        .leftovers(LeftoverPolicy::Kill)
        .timeout(Duration::from_secs(10));
    let (r, el) = spawn_pin_wait(&mut cmd, &w, &["c"]);
    assert_between(el, Duration::ZERO, SLACK);
    assert_eq!(r.exit_code(), Some(0));
    assert_eq!(r.leftovers.killed, 1);
    assert_eq!(r.stdout.total_bytes(), data.len() as u64);
    assert!(r.stdout.bytes() == data, "stdin was not echoed byte-exact");
    assert_all_dead(&w, &["c"]);
}

#[test]
fn unread_large_stdin_does_not_stall_the_deadline() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let timeout = ms(300);
    let mut cmd = sh(&s, r#"exec "$H" root"#);
    cmd.stdin(Input::bytes(vec![b'x'; 8 << 20]))
        .timeout(timeout);
    let (r, el) = spawn_pin_wait(&mut cmd, &w, &["root"]);
    assert_between(el, timeout, timeout + SLACK);
    assert_eq!(r.outcome, Outcome::TimedOut);
    assert_all_dead(&w, &["root"]);
}

#[test]
fn unread_large_stdin_and_prompt_exit_returns_at_once() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let mut cmd = sh(&s, r#""$H" c >/dev/null 2>&1 & exit 5"#);
    cmd.stdin(Input::bytes(vec![b'x'; 8 << 20]))
        .wait_delay(Duration::from_secs(5));
    let (r, el) = spawn_pin_wait(&mut cmd, &w, &["c"]);
    assert_between(el, Duration::ZERO, SLACK);
    assert_eq!(r.outcome, Outcome::Exited(5));
    assert_eq!(r.exit_code(), Some(5));
    assert_eq!(r.leftovers.killed, 1);
    assert_all_dead(&w, &["c"]);
}

// ---------------------------------------------------------------------------
// Output: line callback, output before a kill, merged streams
// ---------------------------------------------------------------------------

#[test]
fn on_line_receives_lines_in_order_from_both_streams() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let lines: Lines = Arc::default();
    let l = lines.clone();
    let mut cmd = sh(
        &s,
        concat!(
            r#""$H" c >/dev/null 2>&1 & "#,
            "echo o1; sleep 0.05; echo e1 >&2; sleep 0.05; ",
            "echo o2; echo o3; sleep 0.05; echo e2 >&2; sleep 0.05; ",
            "printf 'o4-no-newline'"
        ),
    );
    cmd.leftovers(LeftoverPolicy::Kill)
        .on_line(move |st, line| l.lock().unwrap().push((st, line.to_vec())));
    let (r, _) = spawn_pin_wait(&mut cmd, &w, &["c"]);
    assert_eq!(r.exit_code(), Some(0));
    assert_eq!(r.leftovers.killed, 1);
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
    assert_eq!(r.stdout.bytes(), b"o1\no2\no3\no4-no-newline");
    assert_eq!(r.stderr.bytes(), b"e1\ne2\n");
    assert_all_dead(&w, &["c"]);
}

#[test]
fn output_written_before_a_kill_is_kept() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let lines: Lines = Arc::default();
    let l = lines.clone();
    let timeout = ms(300);
    let mut cmd = sh(
        &s,
        r#"echo before; echo err-before >&2; printf partial; exec "$H" root"#,
    );
    cmd.timeout(timeout)
        .on_line(move |st, line| l.lock().unwrap().push((st, line.to_vec())));
    let (r, el) = spawn_pin_wait(&mut cmd, &w, &["root"]);
    assert_between(el, timeout, timeout + SLACK);
    assert_eq!(r.outcome, Outcome::TimedOut);
    assert_eq!(r.stdout.bytes(), b"before\npartial");
    assert_eq!(r.stderr.bytes(), b"err-before\n");
    let got = lines.lock().unwrap().clone();
    assert!(
        got.contains(&(Stream::Stdout, b"before".to_vec())),
        "{got:?}"
    );
    assert!(
        got.contains(&(Stream::Stdout, b"partial".to_vec())),
        "{got:?}"
    );
    assert!(
        got.contains(&(Stream::Stderr, b"err-before".to_vec())),
        "{got:?}"
    );
    assert_all_dead(&w, &["root"]);
}

#[test]
fn stderr_merged_with_stdout_keeps_order() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let mut cmd = sh(
        &s,
        concat!(
            r#""$H" c >/dev/null 2>&1 & "#,
            "for i in 1 2 3 4 5 6 7 8; do echo out$i; echo err$i >&2; done"
        ),
    );
    cmd.stderr(Output::merge_with_stdout())
        .leftovers(LeftoverPolicy::Kill);
    let (r, _) = spawn_pin_wait(&mut cmd, &w, &["c"]);
    assert_eq!(r.exit_code(), Some(0));
    assert_eq!(r.leftovers.killed, 1);
    let want: String = (1..=8).map(|i| format!("out{i}\nerr{i}\n")).collect();
    assert_eq!(String::from_utf8_lossy(&r.stdout.bytes()), want);
    assert!(r.stderr.bytes().is_empty());
    assert_all_dead(&w, &["c"]);
}

#[test]
fn merged_stderr_held_by_grandchild_is_output_held() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let wd = ms(300);
    let mut cmd = sh(&s, r#""$H" gc >/dev/null & echo done >&2; exit 0"#);
    cmd.stderr(Output::merge_with_stdout()).wait_delay(wd);
    let (r, el) = spawn_pin_wait(&mut cmd, &w, &["gc"]);
    assert_between(el, wd, wd + SLACK);
    assert_eq!(r.outcome, Outcome::OutputHeld);
    assert_eq!(r.stdout.bytes(), b"done\n");
    assert_all_dead(&w, &["gc"]);
}

#[test]
fn uncaptured_output_does_not_wait_for_holders() {
    // With stdout/stderr to the null device the wait delay does not apply:
    // the background child is a plain leftover.
    let s = Scratch::new();
    let w = Watch::new(&s);
    let mut cmd = sh(&s, r#""$H" c & exit 0"#);
    cmd.stdout(Output::null())
        .stderr(Output::null())
        .wait_delay(Duration::from_secs(5));
    let (r, el) = spawn_pin_wait(&mut cmd, &w, &["c"]);
    assert_between(el, Duration::ZERO, SLACK);
    assert_eq!(r.outcome, Outcome::Exited(0));
    assert_eq!(r.leftovers.kept, 1);
    assert!(w.is_alive("c"));
}

#[test]
fn holder_that_closes_output_within_wait_delay_is_a_clean_exit() {
    // The grandchild holds stdout for 200 ms, then lets go and keeps
    // running: the run ends cleanly then, not at the end of the wait delay.
    let s = Scratch::new();
    let w = Watch::new(&s);
    let (r, el) = spawn_pin_wait(
        sh(
            &s,
            r#""$H" gc sh -c 'sleep 0.2; exec sleep 30 >/dev/null 2>&1' & echo hi; exit 0"#,
        )
        .wait_delay(Duration::from_secs(3)),
        &w,
        &["gc"],
    );
    assert_between(el, ms(200), ms(200) + SLACK);
    assert_eq!(r.outcome, Outcome::Exited(0));
    assert_eq!(r.exit_code(), Some(0));
    assert!(r.signals_sent.is_empty(), "{:?}", r.signals_sent);
    assert_eq!(r.leftovers.kept, 1);
    assert_eq!(r.stdout.bytes(), b"hi\n");
    std::thread::sleep(ms(50));
    assert!(w.is_alive("gc"));
}

#[test]
fn holder_that_left_the_group_cannot_stall_the_return() {
    // `setsid` takes the holder out of the process group (the documented
    // limit of this mechanism): it cannot be killed, but it must not keep
    // `wait` from returning after the wait delay.
    let s = Scratch::new();
    let w = Watch::new(&s);
    let wd = ms(300);
    let (r, el) = spawn_pin_wait(
        sh(&s, r#""$H" esc setsid sleep 30 & echo hi; exit 0"#).wait_delay(wd),
        &w,
        &["esc"],
    );
    assert_between(el, wd, wd + SLACK);
    assert_eq!(r.outcome, Outcome::OutputHeld);
    assert_eq!(r.root, Some(RootStatus::Exited(0)));
    assert_eq!(r.exit_code(), None);
    assert_eq!(r.stdout.bytes(), b"hi\n");
    // Out of the group, so out of reach (the Watch kills it on drop).
    assert!(w.is_alive("esc"));
}

#[test]
fn root_killed_by_a_foreign_signal_is_signaled() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let (r, el) = spawn_pin_wait(
        &mut sh(&s, r#""$H" c >/dev/null 2>&1 & kill -USR1 $$; sleep 5"#),
        &w,
        &["c"],
    );
    assert_between(el, Duration::ZERO, SLACK);
    let usr1: Signal = "USR1".parse().unwrap();
    assert_eq!(r.outcome, Outcome::Signaled(usr1));
    assert_eq!(r.root, Some(RootStatus::Signaled(usr1)));
    assert_eq!(r.exit_code(), None);
    // Not a clean exit 0: the leftover is killed under KeepOnSuccess.
    assert_eq!(r.signals_sent, vec![Signal::KILL]);
    assert_eq!(r.leftovers.killed, 1);
    assert_all_dead(&w, &["c"]);
}

#[test]

fn reused_command_keeps_stdin_bytes_and_line_callback() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let lines: Lines = Arc::default();
    let l = lines.clone();
    let mut cmd = sh(&s, r#""$H" c >/dev/null 2>&1 & exec cat"#);
    cmd.stdin(Input::bytes(b"hello\n".to_vec()))
        .leftovers(LeftoverPolicy::Kill)
        .on_line(move |st, line| l.lock().unwrap().push((st, line.to_vec())));
    let (r1, _) = spawn_pin_wait(&mut cmd, &w, &["c"]);
    assert_eq!(r1.stdout.bytes(), b"hello\n");
    assert_all_dead(&w, &["c"]);
    std::fs::remove_file(s.path("c.pid")).unwrap();
    let r2 = cmd.run().unwrap();
    assert_eq!(r2.exit_code(), Some(0));
    assert_eq!(r2.stdout.bytes(), b"hello\n", "second run got no stdin");
    assert_eq!(lines.lock().unwrap().len(), 2, "second run got no callback");
}

#[test]
fn invalid_merge_configuration_spawns_nothing() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let err = sh(&s, r#"exec "$H" ran"#)
        .stdout(Output::merge_with_stdout())
        .spawn()
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput(_)), "{err:?}");
    let err = sh(&s, r#"exec "$H" ran"#)
        .stdout(Output::null())
        .stderr(Output::merge_with_stdout())
        .spawn()
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput(_)), "{err:?}");
    std::thread::sleep(ms(100));
    assert!(w.names().is_empty(), "{:?}", w.names());
}
