//! `corral run` under the subreaper tier: the CLI is always the child
//! subreaper on Linux, so `--containment subreaper` (and `auto` where no
//! cgroup can be had) catches escapers that left the process group.

#![cfg(target_os = "linux")]

mod common;

use std::time::Duration;

use corral_testkit::{assert_between, Scratch, Watch};

use common::*;

const SEC: Duration = Duration::from_secs(1);

#[test]
fn setsid_pipe_holder_is_killed_and_the_report_names_the_tier() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let rp = report_path(&s);
    let script = format!(r#"setsid "$H" esc & {} exit 0"#, wait_for("esc"));
    let d = run(
        corral(
            &s,
            [
                "run",
                "--containment",
                "subreaper",
                "--wait-delay",
                "300ms",
                "--report",
                &rp,
                "--",
                "sh",
                "-c",
                &script,
            ],
        ),
        5 * SEC,
    );
    d.assert_code(123);
    assert_between(d.elapsed(), ms(300), 4 * SEC);
    let v = read_report(&s.path("report.json"));
    assert_eq!(v["containment"], "subreaper", "{v}");
    assert_eq!(v["outcome"], "output_held", "{v}");
    assert_eq!(count(&v, "killed"), 1, "{v}");
    assert_dead(&w, &["esc"]);
}

#[test]
fn double_forked_daemon_is_killed_on_timeout() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let rp = report_path(&s);
    let script = format!(
        r#"( setsid sh -c '"$H" daemon >/dev/null 2>&1 &' & ) ; {} sleep 30"#,
        wait_for("daemon")
    );
    let d = run(
        corral(
            &s,
            [
                "run",
                "--containment",
                "subreaper",
                "--timeout",
                "500ms",
                "--report",
                &rp,
                "--",
                "sh",
                "-c",
                &script,
            ],
        ),
        5 * SEC,
    );
    d.assert_code(124);
    let v = read_report(&s.path("report.json"));
    assert_eq!(v["containment"], "subreaper", "{v}");
    assert_eq!(v["outcome"], "timed_out", "{v}");
    assert_dead(&w, &["daemon"]);
}

#[test]
fn auto_falls_back_to_the_subreaper_without_a_writable_cgroup() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let rp = report_path(&s);
    // Detection pointed at a read-only fake hierarchy.
    let script = format!(
        r#"setsid "$H" late >/dev/null 2>&1 & {} exit 3"#,
        wait_for("late")
    );
    let mut c = corral(&s, ["run", "--report", &rp, "--", "sh", "-c", &script]);
    c.envs(s.fake_readonly_cgroup_env());
    let d = run(c, 5 * SEC);
    d.assert_code(3);
    let v = read_report(&s.path("report.json"));
    assert_eq!(v["containment"], "subreaper", "{v}");
    let note = v["containment_note"].as_str().unwrap_or_default();
    assert!(note.contains("cgroup unavailable"), "{v}");
    // The note names the fix.
    assert!(
        note.contains("systemd-run --user --scope -p Delegate=yes"),
        "{v}"
    );
    assert_eq!(count(&v, "killed"), 1, "{v}");
    assert_dead(&w, &["late"]);
}
