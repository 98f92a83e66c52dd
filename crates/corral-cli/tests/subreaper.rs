//! `corral run` under the subreaper tier: the CLI is always the child
//! subreaper on Linux, so `--containment subreaper` (and `auto` where no
//! cgroup can be had) catches escapers that left the process group.

#![cfg(target_os = "linux")]

mod common;

use std::time::Duration;

use corral_testkit::Scratch;

use common::*;
use corral_testkit::scenario::{Count::Exactly, Fate::Dead};

const SEC: Duration = Duration::from_secs(1);

#[test]
fn setsid_pipe_holder_is_killed_and_the_report_names_the_tier() {
    run_row(&Row {
        opts: opts(&["--containment", "subreaper", "--wait-delay", "300ms"]),
        tree: format!(r#"setsid "$H" esc & {} exit 0"#, wait_for("esc")),
        code: Some(123),
        bound: Some((ms(300), 4 * SEC)),
        fields: vec![
            ("containment", "subreaper".into()),
            ("outcome", "output_held".into()),
        ],
        killed: Some(Exactly(1)),
        fates: &[("esc", Dead)],
        ..Row::default()
    });
}

#[test]
fn double_forked_daemon_is_killed_on_timeout() {
    run_row(&Row {
        opts: opts(&["--containment", "subreaper", "--timeout", "500ms"]),
        tree: format!(
            r#"( setsid sh -c '"$H" daemon >/dev/null 2>&1 &' & ) ; {} sleep 30"#,
            wait_for("daemon")
        ),
        code: Some(124),
        fields: vec![
            ("containment", "subreaper".into()),
            ("outcome", "timed_out".into()),
        ],
        fates: &[("daemon", Dead)],
        ..Row::default()
    });
}

#[test]
fn auto_falls_back_to_the_subreaper_without_a_writable_cgroup() {
    // Detection pointed at a read-only fake hierarchy.
    let ran = run_row(&Row {
        tree: format!(
            r#"setsid "$H" late >/dev/null 2>&1 & {} exit 3"#,
            wait_for("late")
        ),
        env: Some(Scratch::fake_readonly_cgroup_env),
        code: Some(3),
        fields: vec![("containment", "subreaper".into())],
        killed: Some(Exactly(1)),
        fates: &[("late", Dead)],
        ..Row::default()
    });
    let v = &ran.v;
    let note = v["containment_note"].as_str().unwrap_or_default();
    assert!(note.contains("cgroup unavailable"), "{v}");
    // The note names the fix.
    assert!(
        note.contains("systemd-run --user --scope -p Delegate=yes"),
        "{v}"
    );
}
