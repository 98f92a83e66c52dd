//! The pseudo-terminal (`pty_matrix`) in the process-group, cgroup and
//! PID-namespace tiers, one test per scenario and tier.

#![cfg(target_os = "linux")]

mod pty_matrix;

pty_matrix::tiers! {
    process_group => ProcessGroup ();
    cgroup => Cgroup (cgroup);
    pid_namespace => PidNamespace (pidns);
}

/// Windows and a stdout that cannot be merged aside, bad input is an error.
#[test]
fn stderr_merged_is_not_an_error_and_stdout_merge_is() {
    let r = corral::Command::new("true")
        .pty(corral::PtySize::default())
        .stderr(corral::Output::merge_with_stdout())
        .run()
        .unwrap();
    assert_eq!(r.outcome, corral::Outcome::Exited(0));
    let e = corral::Command::new("true")
        .pty(corral::PtySize::default())
        .stdout(corral::Output::merge_with_stdout())
        .run()
        .unwrap_err();
    assert!(matches!(e, corral::Error::InvalidInput(_)), "{e:?}");
}

/// `COLSxROWS` parses; anything else is a clear error.
#[test]
fn pty_size_parses_cols_x_rows() {
    use corral::PtySize;
    assert_eq!("120x40".parse::<PtySize>(), Ok(PtySize::new(120, 40)));
    assert_eq!(PtySize::default(), PtySize::new(80, 24));
    assert_eq!(PtySize::new(80, 24).to_string(), "80x24");
    for bad in [
        "", "80", "0x24", "80x0", "x24", "80x", "-1x2", "+80x24", "70000x24", "80 x24",
    ] {
        let e = bad.parse::<PtySize>().unwrap_err();
        assert!(e.contains("COLSxROWS"), "{bad}: {e}");
    }
}

/// The async driver reads the terminal too (its master registered with the
/// runtime): typed input, then end of file; and a holder of the terminal is
/// killed after the wait delay.
#[cfg(feature = "tokio")]
#[test]
fn the_async_driver_runs_on_a_terminal() {
    use corral::{Mechanism, Outcome, PtySize};
    use corral_testkit::scenario::{ms, Tier};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let t = Tier::new(Mechanism::ProcessGroup);
    let r = rt.block_on(async {
        t.sh("[ -t 1 ] && cat; echo cat-done-$?")
            .pty(PtySize::default())
            .stdin(corral::Input::bytes("async typed\n"))
            .timeout(std::time::Duration::from_secs(20))
            .spawn_async()
            .unwrap()
            .await
    });
    assert_eq!(r.outcome, Outcome::Exited(0), "{r:?}");
    let out = r.stdout.text_lossy();
    assert_eq!(out.matches("async typed").count(), 2, "{out:?}");
    assert!(out.contains("cat-done-0"), "{out:?}");
    let started = std::time::Instant::now();
    let r = rt.block_on(async {
        t.sh(&format!(
            r#""$H" holder sh -c "trap '' HUP; exec sleep 30" & {}exit 0"#,
            corral_testkit::ready("holder")
        ))
        .pty(PtySize::default())
        .wait_delay(ms(300))
        .timeout(std::time::Duration::from_secs(20))
        .spawn_async()
        .unwrap()
        .await
    });
    assert_eq!(r.outcome, Outcome::OutputHeld, "{r:?}");
    corral_testkit::assert_between(
        started.elapsed(),
        ms(300),
        std::time::Duration::from_secs(8),
    );
    t.assert_dead(&["holder"]);
    t.scratch.assert_none_left();
}
