//! The async API (feature `tokio`): the same lifecycle, awaited. Real trees,
//! the same assertions as the sync scenarios (testkit `Row`s: bound,
//! outcome, signals, output, every descendant's fate), in the
//! process-group, cgroup and PID-namespace tiers: one test per scenario and
//! tier, named `<tier>::<scenario>`.
#![cfg(tokio_linux)]

use std::time::{Duration, Instant};

use corral::{Command, Input, Mechanism, Outcome, Report, Signal};
use corral_testkit::scenario::{ms, tree, Fate::Dead, Row, Tier, SLACK};

const SEC: Duration = Duration::from_secs(1);

/// One `#[test]` per scenario for each tier given as
/// `module => Mechanism (needs)`.
macro_rules! tiers {
    ($($module:ident => $mech:ident $needs:tt;)*) => {
        $(
            mod $module {
                tiers!(@tests $mech $needs
                    exit_code_and_output_are_reported
                    stdin_bytes_and_lines_flow_through
                    held_output_is_bounded_and_the_holder_dies
                    timeout_kills_the_tree
                    cancel_token_cancels
                    dropping_the_future_kills_and_reaps_the_tree
                    dropped_outside_any_runtime_still_cleans_up
                );
            }
        )*
    };
    (@tests $mech:ident () $($name:ident)*) => {
        $(
            #[test]
            fn $name() {
                super::$name(corral::Mechanism::$mech)
            }
        )*
    };
    (@tests $mech:ident $needs:tt $($name:ident)*) => {
        $(
            #[corral_testkit::needs $needs]
            #[test]
            fn $name() {
                super::$name(corral::Mechanism::$mech)
            }
        )*
    };
}

tiers! {
    process_group => ProcessGroup ();
    cgroup => Cgroup (cgroup);
    pid_namespace => PidNamespace (pidns);
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Runs `row` in tier `m` with `run_async` (extra settings by
/// `configure`), pinning its helpers between the spawn and the first poll
/// of the run, and asserts all the row states.
fn run_async(m: Mechanism, row: &Row, configure: impl FnOnce(&mut Command)) -> Report {
    let t = Tier::new(m);
    let mut cmd = t.command_for(row);
    configure(&mut cmd);
    let names: Vec<&str> = row.fates.iter().map(|(n, _)| *n).collect();
    let start = Instant::now();
    let r = rt().block_on(async {
        let running = cmd.spawn_async().expect("spawn");
        t.pin(&names);
        running.await
    });
    t.check(row, &r, start.elapsed());
    r
}

fn exit_code_and_output_are_reported(m: Mechanism) {
    run_async(
        m,
        &Row {
            // A helper that ends by itself before the output is written.
            tree: tree(r#""$H" c sleep 0.2; echo out; echo err >&2; exit 3"#),
            bound: Some((Duration::ZERO, SLACK)),
            outcome: Some(Outcome::Exited(3)),
            signals: Some([].as_slice().into()),
            stdout: Some(b"out\n"),
            stderr: Some(b"err\n"),
            fates: &[("c", Dead)],
            ..Row::default()
        },
        |_| {},
    );
}

fn stdin_bytes_and_lines_flow_through(m: Mechanism) {
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let l2 = lines.clone();
    let data: Vec<u8> = (0..200_000)
        .flat_map(|i: u32| format!("{i}\n").into_bytes())
        .collect();
    let r = run_async(
        m,
        &Row {
            tree: tree(r#""$H" c sleep 0.2; cat"#),
            bound: Some((Duration::ZERO, 10 * SEC)),
            outcome: Some(Outcome::Exited(0)),
            fates: &[("c", Dead)],
            ..Row::default()
        },
        |c| {
            c.stdin(Input::bytes(data.clone()))
                .on_line(move |_, l| l2.lock().unwrap().push(l.len()));
        },
    );
    assert_eq!(r.stdout.total_bytes(), data.len() as u64);
    assert_eq!(lines.lock().unwrap().len(), 200_000);
}

fn held_output_is_bounded_and_the_holder_dies(m: Mechanism) {
    run_async(
        m,
        &Row {
            tree: tree(r#""$H" gc & echo hi; exit 0"#),
            wait_delay: Some(ms(300)),
            bound: Some((ms(300), ms(300) + SLACK)),
            outcome: Some(Outcome::OutputHeld),
            stdout: Some(b"hi\n"),
            fates: &[("gc", Dead)],
            ..Row::default()
        },
        |_| {},
    );
}

fn timeout_kills_the_tree(m: Mechanism) {
    run_async(
        m,
        &Row {
            tree: tree(r#""$H" a & "$H" b sh -c 'trap "" TERM; exec sleep 30' & wait"#),
            timeout: Some(ms(400)),
            grace: Some(ms(200)),
            bound: Some((ms(600), ms(600) + SLACK)),
            outcome: Some(Outcome::TimedOut),
            signals: Some([Signal::TERM, Signal::KILL].as_slice().into()),
            fates: &[("a", Dead), ("b", Dead)],
            ..Row::default()
        },
        |_| {},
    );
}

fn cancel_token_cancels(m: Mechanism) {
    let t = Tier::new(m);
    let r = rt().block_on(async {
        let running = t.sh(r#""$H" a & wait"#).spawn_async().unwrap();
        let token = running.cancel_token();
        tokio::spawn(async move {
            tokio::time::sleep(ms(200)).await;
            token.cancel();
        });
        running.await
    });
    assert_eq!(r.outcome, Outcome::Cancelled);
    t.assert_dead(&["a"]);
}

fn dropping_the_future_kills_and_reaps_the_tree(m: Mechanism) {
    let t = Tier::new(m);
    let runtime = rt();
    runtime.block_on(async {
        let running = t.sh(r#""$H" a & "$H" b & wait"#).spawn_async().unwrap();
        // Poll it for a while, then drop it (as a select! that lost would).
        let _ = tokio::time::timeout(ms(300), running).await;
        // Give the background cleanup task time to run on this runtime.
        tokio::time::sleep(ms(300)).await;
    });
    for n in ["a", "b"] {
        assert!(t.watch.pid(n, SEC).is_some(), "{n} never started");
        assert!(
            t.watch.wait_dead(n, 2 * SEC),
            "{n} survived the dropped future"
        );
    }
}

fn dropped_outside_any_runtime_still_cleans_up(m: Mechanism) {
    let t = Tier::new(m);
    let running = {
        let runtime = rt();
        let _g = runtime.enter();
        t.sh(r#""$H" a & wait"#).spawn_async().unwrap()
    };
    assert!(t.watch.pid("a", 2 * SEC).is_some());
    drop(running); // no runtime here: a thread finishes the cleanup
    assert!(t.watch.wait_dead("a", 3 * SEC));
}
