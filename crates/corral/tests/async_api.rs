//! The async API (feature `tokio`): the same lifecycle, awaited. Real trees,
//! the same assertions as the sync scenarios: bound, outcome, every
//! descendant's fate.
#![cfg(all(feature = "tokio", target_os = "linux"))]

use std::time::{Duration, Instant};

use corral::{ContainmentChoice, Input, Mechanism, Outcome};
use corral_testkit::{assert_between, Scratch, Watch};

const SEC: Duration = Duration::from_secs(1);

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn pg(c: &mut corral::Command) -> &mut corral::Command {
    c.containment(ContainmentChoice::Only(Mechanism::ProcessGroup))
}

#[test]
fn exit_code_and_output_are_reported() {
    let s = Scratch::new();
    let r = rt()
        .block_on(pg(&mut s.sh("echo out; echo err >&2; exit 3")).run_async())
        .unwrap();
    assert_eq!(r.exit_code(), Some(3));
    assert_eq!(r.stdout.bytes(), b"out\n");
    assert_eq!(r.stderr.bytes(), b"err\n");
}

#[test]
fn stdin_bytes_and_lines_flow_through() {
    let s = Scratch::new();
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let l2 = lines.clone();
    let data: Vec<u8> = (0..200_000)
        .flat_map(|i: u32| format!("{i}\n").into_bytes())
        .collect();
    let r = rt()
        .block_on(
            pg(&mut s.sh("cat"))
                .stdin(Input::bytes(data.clone()))
                .on_line(move |_, l| l2.lock().unwrap().push(l.len()))
                .run_async(),
        )
        .unwrap();
    assert_eq!(r.exit_code(), Some(0));
    assert_eq!(r.stdout.total_bytes(), data.len() as u64);
    assert_eq!(lines.lock().unwrap().len(), 200_000);
}

#[test]
fn held_output_is_bounded_and_the_holder_dies() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let t = Instant::now();
    let r = rt()
        .block_on(
            pg(&mut s.sh(r#""$H" gc & echo hi; exit 0"#))
                .wait_delay(Duration::from_millis(300))
                .run_async(),
        )
        .unwrap();
    assert_eq!(r.outcome, Outcome::OutputHeld);
    assert_between(t.elapsed(), Duration::from_millis(300), 2 * SEC);
    assert!(w.pid("gc", SEC).is_some());
    assert!(w.wait_dead("gc", 2 * SEC));
}

#[test]
fn timeout_kills_the_tree() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let t = Instant::now();
    let r = rt()
        .block_on(
            pg(&mut s.sh(r#""$H" a & "$H" b sh -c 'trap "" TERM; exec sleep 30' & wait"#))
                .timeout(Duration::from_millis(400))
                .grace(Duration::from_millis(200))
                .run_async(),
        )
        .unwrap();
    assert_eq!(r.outcome, Outcome::TimedOut);
    assert_between(t.elapsed(), Duration::from_millis(600), 3 * SEC);
    for n in ["a", "b"] {
        assert!(w.pid(n, SEC).is_some());
        assert!(w.wait_dead(n, 2 * SEC), "{n} survived");
    }
}

#[test]
fn cancel_token_cancels() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let r = rt().block_on(async {
        let running = pg(&mut s.sh(r#""$H" a & wait"#)).spawn_async().unwrap();
        let token = running.cancel_token();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            token.cancel();
        });
        running.await
    });
    assert_eq!(r.outcome, Outcome::Cancelled);
    assert!(w.wait_dead("a", 2 * SEC));
}

#[test]
fn dropping_the_future_kills_and_reaps_the_tree() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let runtime = rt();
    runtime.block_on(async {
        let running = pg(&mut s.sh(r#""$H" a & "$H" b & wait"#))
            .spawn_async()
            .unwrap();
        // Poll it for a while, then drop it (as a select! that lost would).
        let _ = tokio::time::timeout(Duration::from_millis(300), running).await;
        // Give the background cleanup task time to run on this runtime.
        tokio::time::sleep(Duration::from_millis(300)).await;
    });
    for n in ["a", "b"] {
        assert!(w.pid(n, SEC).is_some(), "{n} never started");
        assert!(w.wait_dead(n, 2 * SEC), "{n} survived the dropped future");
    }
}

#[test]
fn dropped_outside_any_runtime_still_cleans_up() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let running = {
        let runtime = rt();
        let _g = runtime.enter();
        pg(&mut s.sh(r#""$H" a & wait"#)).spawn_async().unwrap()
    };
    assert!(w.pid("a", 2 * SEC).is_some());
    drop(running); // no runtime here: a thread finishes the cleanup
    assert!(w.wait_dead("a", 3 * SEC));
}
