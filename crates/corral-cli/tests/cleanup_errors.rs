//! Two cleanup steps fail for real in one `corral run`: it requires crash
//! safety and its keeper (corral's child `corral-keeper`) is killed, then the
//! command and its child are frozen (cgroup v1 freezer) so that they survive
//! the SIGKILL after the deadline. corral exits 125, says both on stderr, and
//! its JSON report lists both steps, in order.

#![cfg(target_os = "linux")]

mod common;

use std::time::Duration;

use corral_testkit::freezer::Frozen;
use corral_testkit::{keeper, Scratch, Watch};

use common::*;

const SEC: Duration = Duration::from_secs(1);

#[corral_testkit::needs(root, freezer_v1)]
#[test]
fn two_failed_cleanup_steps_are_both_reported_in_order() {
    let s = Scratch::new();
    let watch = Watch::new(&s);
    let frozen = Frozen::new("cli-two-steps");
    let report = report_path(&s);
    let c = corral(
        &s,
        [
            "run",
            "--containment",
            "process-group",
            "--require-crash-safety",
            "--timeout",
            "2s",
            "--report",
            &report,
            "--",
            "sh",
            "-c",
            &format!(r#"{ROOT}"$H" child & wait"#),
        ],
    );
    let run = start(c, Sink::Pipe, Sink::Pipe);
    // The root runs only once the run is registered with the keeper (its
    // cookie before the spawn): a keeper killed earlier would just be
    // replaced, and the run would be crash-safe after all.
    let root = watch.pid("root", 10 * SEC).expect("no root");
    // corral's keeper: its unreaped child while corral runs.
    let until = std::time::Instant::now() + 10 * SEC;
    let k = loop {
        if let Some(k) = keeper::keepers_of(run.pid()).into_iter().find(|k| !k.1) {
            break k.0;
        }
        assert!(
            std::time::Instant::now() < until,
            "corral started no keeper"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    keeper::kill_keeper(k);
    let child = watch.pid("child", 10 * SEC).expect("no child");
    frozen.take(root);
    frozen.take(child);
    frozen.freeze();
    let done = run.finish(60 * SEC);
    done.assert_code(125);
    let v = read_report(std::path::Path::new(&report));
    assert_eq!(v["timeout_kind"], "deadline", "{v}");
    assert_eq!(v["outcome"], "cleanup_failed", "{v}");
    assert_eq!(v["corral_exit"], 125, "{v}");
    let list = v["cleanup_errors"].as_array().expect("a list");
    let steps: Vec<&str> = list.iter().map(|e| e["step"].as_str().unwrap()).collect();
    assert_eq!(steps, ["confirm_death", "crash_safety"], "{v}");
    let mut survivors: Vec<u64> = v["survivors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_u64().unwrap())
        .collect();
    survivors.sort_unstable();
    let mut want = vec![u64::from(root), u64::from(child)];
    want.sort_unstable();
    assert_eq!(survivors, want, "{v}");
    // stderr says each failure, in order.
    let err = done.err();
    let first = list[0]["error"].as_str().unwrap();
    let second = list[1]["error"].as_str().unwrap();
    let (a, b) = (
        err.find(first)
            .unwrap_or_else(|| panic!("{first:?} not in {err}")),
        err.find(second)
            .unwrap_or_else(|| panic!("{second:?} not in {err}")),
    );
    assert!(a < b, "{err}");
    drop(frozen);
    s.assert_none_left();
}
