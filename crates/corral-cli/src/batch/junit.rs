//! JUnit XML from a batch report document (a shard's or a merged one): a
//! testsuite per task, a testcase per run (`name#N`); a failed run is a
//! `<failure>`, an errored one an `<error>` (type = the outcome), a run
//! that never started (fail-fast, interrupt) is `<skipped>`. Retries as
//! nextest writes them: a run that passed after failing attempts is a
//! success with a `<flakyFailure>`/`<flakyError>` per failed attempt; a
//! run that failed every attempt carries the earlier ones as
//! `<rerunFailure>`/`<rerunError>`. Warmup runs are not test cases. Output
//! is cut to the last [`KEEP`] bytes per stream. Each run's testcase has
//! `<properties>`: `containment`, `crash_safe` (`true`/`false`: whether its
//! tree would have been killed had corral died) and `crash_safety_note`
//! (why not), each when the run's report has it (a run that never started
//! has neither crash field).

use std::collections::HashMap;
use std::time::Duration;

use quick_junit::{
    NonSuccessKind, Property, Report, TestCase, TestCaseStatus, TestRerun, TestSuite,
};

use super::classify::Status;
use super::report::{duration_of_ms, BatchDoc, BatchRun};

/// Bytes of each stream kept in `<system-out>` / `<system-err>`.
pub const KEEP: usize = 16 << 10;

pub fn render(doc: &BatchDoc, title: &str) -> Result<String, quick_junit::SerializeError> {
    let mut report = Report::new(format!("corral batch {title}"));
    report.set_time(duration_of_ms(doc.duration_ms));
    let mut suites: Vec<TestSuite> = Vec::new();
    let mut index: HashMap<&str, usize> = HashMap::new();
    for p in &doc.plan {
        index.insert(&p.task, suites.len());
        suites.push(TestSuite::new(xml_safe(&p.task)));
    }
    let mut cases: Vec<Vec<(u32, TestCase)>> = vec![Vec::new(); suites.len()];
    let mut walls = vec![Duration::ZERO; suites.len()];
    for r in &doc.runs {
        let Some(&i) = index.get(r.task.as_str()) else {
            continue;
        };
        let mut case = case_for(r);
        case.set_classname(xml_safe(&r.task));
        walls[i] = walls[i].saturating_add(duration_of_ms(r.wall_ms));
        cases[i].push((r.run, case));
    }
    for n in &doc.not_run {
        let Some(&i) = index.get(n.task.as_str()) else {
            continue;
        };
        let mut st = TestCaseStatus::skipped();
        st.set_message(match &doc.stopped {
            Some(s) => format!("not run: {s}"),
            None => "not run".into(),
        });
        let mut case = TestCase::new(xml_safe(&n.key()), st);
        case.set_classname(xml_safe(&n.task));
        cases[i].push((n.run, case));
    }
    for ((suite, mut cs), wall) in suites.iter_mut().zip(cases).zip(walls) {
        cs.sort_by_key(|(run, _)| *run);
        suite.add_test_cases(cs.into_iter().map(|(_, c)| c));
        suite.set_time(wall);
    }
    report.add_test_suites(suites);
    report.to_string()
}

fn kind(r: &BatchRun) -> NonSuccessKind {
    if r.status == Status::Failed {
        NonSuccessKind::Failure
    } else {
        NonSuccessKind::Error
    }
}

fn ty(r: &BatchRun) -> String {
    if r.status == Status::Failed {
        "failed".into()
    } else {
        r.report.outcome.as_str().to_owned()
    }
}

fn rerun(a: &BatchRun) -> TestRerun {
    let mut t = TestRerun::new(kind(a));
    t.set_message(a.reason.clone().unwrap_or_default())
        .set_type(ty(a))
        .set_time(duration_of_ms(a.wall_ms));
    if !a.stdout_tail.is_empty() {
        t.set_system_out(tail(&a.stdout_tail));
    }
    if !a.stderr_tail.is_empty() {
        t.set_system_err(tail(&a.stderr_tail));
    }
    t
}

fn case_for(r: &BatchRun) -> TestCase {
    let mut status = match r.status {
        Status::Passed => TestCaseStatus::success(),
        _ => {
            let mut st = TestCaseStatus::non_success(kind(r));
            st.set_message(r.reason.clone().unwrap_or_default());
            st.set_type(ty(r));
            st
        }
    };
    // Earlier attempts: flaky runs on a success, reruns on a non-success.
    status.add_reruns(r.attempts.iter().map(rerun));
    let mut case = TestCase::new(xml_safe(&r.key()), status);
    case.set_time(duration_of_ms(r.wall_ms));
    case.add_properties(properties(r));
    if !r.stdout_tail.is_empty() {
        case.set_system_out(tail(&r.stdout_tail));
    }
    if !r.stderr_tail.is_empty() {
        case.set_system_err(tail(&r.stderr_tail));
    }
    case
}

/// What a run's report says about its containment, as testcase properties.
fn properties(r: &BatchRun) -> Vec<Property> {
    let mut p = Vec::new();
    if let Some(c) = r.report.containment {
        p.push(Property::new("containment", c.name()));
    }
    if let Some(safe) = r.report.crash_safe {
        p.push(Property::new("crash_safe", safe.to_string()));
    }
    if let Some(note) = &r.report.crash_safety_note {
        p.push(Property::new("crash_safety_note", note.as_str()));
    }
    p
}

/// The last `KEEP` bytes (on a char boundary), with a note when cut.
/// Control characters XML cannot hold are replaced.
fn tail(s: &str) -> String {
    let mut start = s.len().saturating_sub(KEEP);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    let mut out = String::new();
    if start > 0 {
        out.push_str(&format!("[... {start} bytes cut ...]\n"));
    }
    out.push_str(&xml_safe(&s[start..]));
    out
}

/// Text XML 1.0 can hold: control characters it cannot are U+FFFD (a
/// task name from a hostile shard report, a run's output).
fn xml_safe(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '\t' | '\n' | '\r' => c,
            c if (c as u32) < 0x20 || c == '\u{fffe}' || c == '\u{ffff}' => '\u{fffd}',
            c => c,
        })
        .collect()
}
