//! The pseudo-terminal (`Command::pty`) with real trees, one test per
//! scenario and tier (see [`tiers!`]): the program sees a terminal on its
//! three streams (its controlling terminal, of the given size); a
//! descendant still holding the terminal past the wait delay is killed
//! (`OutputHeld`); stdin is typed, then end of file; the idle timeout and
//! the output limit apply to what comes out; the window follows a resize.

#![allow(dead_code)]

use std::time::{Duration, Instant};

use corral::{Input, Mechanism, Outcome, PtySize, TimeoutKind};
use corral_testkit::scenario::{ms, Tier};
use corral_testkit::{assert_between, ready};

/// Generates one `#[test]` per scenario for each tier given as
/// `module => Mechanism (needs)`.
macro_rules! tiers {
    ($($module:ident => $mech:ident $needs:tt;)*) => {
        $(
            mod $module {
                $crate::pty_matrix::tiers!(@tests $mech $needs
                    the_program_sees_a_terminal_of_the_given_size
                    a_descendant_holding_the_terminal_is_killed_after_the_wait_delay
                    stdin_bytes_are_typed_then_end_of_file
                    null_stdin_is_end_of_file_at_once
                    a_silent_program_is_killed_by_the_idle_timeout
                    a_chatty_program_outlives_the_idle_timeout
                    a_flood_is_cut_at_the_output_limit
                    the_window_follows_a_resize
                );
            }
        )*
    };
    (@tests $mech:ident () $($name:ident)*) => {
        $(
            #[test]
            fn $name() {
                $crate::pty_matrix::$name(corral::Mechanism::$mech);
            }
        )*
    };
    (@tests $mech:ident $needs:tt $($name:ident)*) => {
        $(
            #[corral_testkit::needs $needs]
            #[test]
            fn $name() {
                $crate::pty_matrix::$name(corral::Mechanism::$mech);
            }
        )*
    };
}
pub(crate) use tiers;

fn text(r: &corral::Report) -> String {
    r.stdout.text_lossy()
}

/// `isatty` is true on 0, 1 and 2; `/dev/tty` opens (the terminal is the
/// session's controlling one); `stty size` and `tput cols` answer the size
/// given; stderr comes through the terminal (stderr_bytes 0); the counts
/// are exact.
pub fn the_program_sees_a_terminal_of_the_given_size(m: Mechanism) {
    let t = Tier::new(m);
    let started = Instant::now();
    let r = t
        .sh("[ -t 0 ] && [ -t 1 ] && [ -t 2 ] && echo isatty-ok; \
             : </dev/tty && echo ctty-ok; \
             echo size=$(stty size); \
             command -v tput >/dev/null && echo cols=$(TERM=xterm tput cols) || echo cols=103; \
             echo to-stderr >&2")
        .pty(PtySize::new(103, 37))
        .timeout(Duration::from_secs(20))
        .run()
        .unwrap();
    let out = text(&r);
    assert_eq!(r.outcome, Outcome::Exited(0), "{m:?}: {r:?} {out:?}");
    for want in [
        "isatty-ok",
        "ctty-ok",
        "size=37 103",
        "cols=103",
        "to-stderr",
    ] {
        assert!(out.contains(want), "{m:?}: {want} missing in {out:?}");
    }
    // The terminal's line discipline: \n comes out as \r\n.
    assert!(out.contains("isatty-ok\r\n"), "{m:?}: {out:?}");
    assert_eq!(r.stderr.total_bytes(), 0);
    assert_eq!(r.stdout.total_bytes(), out.len() as u64);
    assert_between(started.elapsed(), ms(0), Duration::from_secs(10));
    t.scratch.assert_none_left();
}

/// The root exits at once; a descendant (which ignores the SIGHUP the
/// session leader's exit sends) keeps the terminal open. After the wait
/// delay it is killed: `OutputHeld`, in bounded time, nothing left.
pub fn a_descendant_holding_the_terminal_is_killed_after_the_wait_delay(m: Mechanism) {
    let t = Tier::new(m);
    let started = Instant::now();
    let r = t
        .sh(&format!(
            r#""$H" holder sh -c "trap '' HUP; exec sleep 30" & {}echo root-done; exit 0"#,
            ready("holder")
        ))
        .pty(PtySize::default())
        .wait_delay(ms(300))
        .timeout(Duration::from_secs(25))
        .run()
        .unwrap();
    let el = started.elapsed();
    assert_eq!(r.outcome, Outcome::OutputHeld, "{m:?}: {r:?}");
    assert!(text(&r).contains("root-done"), "{m:?}: {r:?}");
    assert_eq!(r.root.and_then(|s| s.code()), Some(0), "{m:?}: {r:?}");
    assert_between(el, ms(300), Duration::from_secs(8));
    t.assert_dead(&["holder"]);
    t.scratch.assert_none_left();
}

/// The bytes given as stdin are typed on the terminal (and echoed), then
/// the end-of-file character: `cat` copies them and ends.
pub fn stdin_bytes_are_typed_then_end_of_file(m: Mechanism) {
    let t = Tier::new(m);
    let started = Instant::now();
    let r = t
        .sh("cat; echo cat-done-$?")
        .pty(PtySize::default())
        .stdin(Input::bytes("hello pty\n"))
        .timeout(Duration::from_secs(20))
        .run()
        .unwrap();
    let out = text(&r);
    assert_eq!(r.outcome, Outcome::Exited(0), "{m:?}: {r:?} {out:?}");
    // Once echoed by the terminal, once copied by cat.
    assert_eq!(out.matches("hello pty").count(), 2, "{m:?}: {out:?}");
    assert!(out.contains("cat-done-0"), "{m:?}: {out:?}");
    assert_between(started.elapsed(), ms(0), Duration::from_secs(10));
    // A file as stdin, read to its end, then end of file.
    let path = t.scratch.path("input.txt");
    std::fs::write(&path, "from a file\n").unwrap();
    let r = t
        .sh("cat; echo cat-done-$?")
        .pty(PtySize::default())
        .stdin(std::fs::File::open(&path).unwrap())
        .timeout(Duration::from_secs(20))
        .run()
        .unwrap();
    let out = text(&r);
    assert_eq!(r.outcome, Outcome::Exited(0), "{m:?}: {r:?} {out:?}");
    assert_eq!(out.matches("from a file").count(), 2, "{m:?}: {out:?}");
    assert!(out.contains("cat-done-0"), "{m:?}: {out:?}");
    t.scratch.assert_none_left();
}

/// Nothing to type: the end-of-file character comes at once, so a program
/// that reads its terminal does not wait for the deadline.
pub fn null_stdin_is_end_of_file_at_once(m: Mechanism) {
    let t = Tier::new(m);
    let started = Instant::now();
    let r = t
        .sh("cat; echo cat-done-$?")
        .pty(PtySize::default())
        .timeout(Duration::from_secs(20))
        .run()
        .unwrap();
    assert_eq!(r.outcome, Outcome::Exited(0), "{m:?}: {r:?}");
    assert!(text(&r).contains("cat-done-0"), "{m:?}: {r:?}");
    assert_between(started.elapsed(), ms(0), Duration::from_secs(10));
    t.scratch.assert_none_left();
}

/// A silent tree on a terminal is ended by the idle timeout.
pub fn a_silent_program_is_killed_by_the_idle_timeout(m: Mechanism) {
    let t = Tier::new(m);
    let started = Instant::now();
    let r = t
        .sh(&format!(r#""$H" kid & {}exec "$H" root"#, ready("kid")))
        .pty(PtySize::default())
        .idle_timeout(ms(500))
        .timeout(Duration::from_secs(25))
        .run()
        .unwrap();
    assert_eq!(r.outcome, Outcome::TimedOut, "{m:?}: {r:?}");
    assert_eq!(r.timeout_kind, Some(TimeoutKind::Idle));
    assert_between(started.elapsed(), ms(500), Duration::from_secs(8));
    t.assert_dead(&["kid", "root"]);
    t.scratch.assert_none_left();
}

/// Output on the terminal restarts the idle timer.
pub fn a_chatty_program_outlives_the_idle_timeout(m: Mechanism) {
    let t = Tier::new(m);
    let started = Instant::now();
    let r = t
        .sh("i=0; while [ $i -lt 12 ]; do echo tick $i; sleep 0.1; i=$((i+1)); done")
        .pty(PtySize::default())
        .idle_timeout(ms(600))
        .timeout(Duration::from_secs(25))
        .run()
        .unwrap();
    assert_eq!(r.outcome, Outcome::Exited(0), "{m:?}: {r:?}");
    assert_eq!(r.timeout_kind, None);
    assert!(started.elapsed() >= ms(1200));
    assert_eq!(text(&r).matches("tick").count(), 12);
    t.scratch.assert_none_left();
}

/// A flood on the terminal is cut at the limit to the byte and killed.
pub fn a_flood_is_cut_at_the_output_limit(m: Mechanism) {
    let t = Tier::new(m);
    let started = Instant::now();
    let r = t
        .sh(r#"exec "$H" flood yes"#)
        .pty(PtySize::default())
        .output_limit(10_000)
        .timeout(Duration::from_secs(25))
        .run()
        .unwrap();
    assert_eq!(r.outcome, Outcome::OutputLimit, "{m:?}: {r:?}");
    assert_eq!(r.timeout_kind, None);
    assert_eq!(r.stdout.bytes().len(), 10_000);
    assert!(r.stdout.total_bytes() > 10_000, "{m:?}: {r:?}");
    assert_eq!(r.stderr.total_bytes(), 0);
    assert_between(started.elapsed(), ms(0), Duration::from_secs(8));
    t.assert_dead(&["flood"]);
    t.scratch.assert_none_left();
}

/// A resize through `Running::pty_window` reaches the program (SIGWINCH)
/// and its terminal's size.
pub fn the_window_follows_a_resize(m: Mechanism) {
    let t = Tier::new(m);
    let mut cmd = t.sh(
        r#"trap 'echo winch=$(stty size); exit 0' WINCH; touch "$CORRAL_TEST_DIR/armed"; i=0; while [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done"#,
    );
    cmd.pty(PtySize::new(80, 24))
        .timeout(Duration::from_secs(25));
    let running = cmd.spawn().unwrap();
    let window = running.pty_window().expect("a pty run has a window");
    assert_eq!(window.size().unwrap(), PtySize::new(80, 24));
    assert!(t.scratch.wait_file("armed", Duration::from_secs(10)));
    window.resize(PtySize::new(51, 19)).unwrap();
    assert_eq!(window.size().unwrap(), PtySize::new(51, 19));
    let r = running.wait();
    assert_eq!(r.outcome, Outcome::Exited(0), "{m:?}: {r:?}");
    assert!(text(&r).contains("winch=19 51"), "{m:?}: {r:?}");
    t.scratch.assert_none_left();
}
