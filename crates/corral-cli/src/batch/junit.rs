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

use quick_junit::Property;

use std::collections::HashMap;
use std::time::Duration;

use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestRerun, TestSuite};
use serde_json::Value;

use super::report::run_key;

/// Bytes of each stream kept in `<system-out>` / `<system-err>`.
pub const KEEP: usize = 16 << 10;

fn dur(ms: &Value) -> Duration {
    super::report::duration_of_ms(ms.as_f64().unwrap_or(0.0))
}

fn text<'a>(r: &'a Value, k: &str) -> &'a str {
    r[k].as_str().unwrap_or("")
}

pub fn render(doc: &Value, title: &str) -> Result<String, quick_junit::SerializeError> {
    let mut report = Report::new(format!("corral batch {title}"));
    report.set_time(dur(&doc["duration_ms"]));
    let plan = doc["plan"].as_array().cloned().unwrap_or_default();
    let mut suites: Vec<TestSuite> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for p in &plan {
        let name = p["task"].as_str().unwrap_or("?").to_owned();
        index.insert(name.clone(), suites.len());
        suites.push(TestSuite::new(xml_safe(&name)));
    }
    let mut cases: Vec<Vec<(u64, TestCase)>> = vec![Vec::new(); suites.len()];
    let mut walls = vec![Duration::ZERO; suites.len()];
    let empty = Vec::new();
    for r in doc["runs"].as_array().unwrap_or(&empty) {
        let task = text(r, "task");
        let Some(&i) = index.get(task) else { continue };
        let mut case = case_for(r);
        case.set_classname(xml_safe(task));
        walls[i] = walls[i].saturating_add(dur(&r["wall_ms"]));
        cases[i].push((r["run"].as_u64().unwrap_or(0), case));
    }
    let stop = doc["stopped"].as_str();
    for n in doc["not_run"].as_array().unwrap_or(&empty) {
        let task = text(n, "task");
        let Some(&i) = index.get(task) else { continue };
        let mut st = TestCaseStatus::skipped();
        st.set_message(match stop {
            Some(s) => format!("not run: {s}"),
            None => "not run".into(),
        });
        let mut case = TestCase::new(xml_safe(&run_key(n)), st);
        case.set_classname(xml_safe(task));
        cases[i].push((n["run"].as_u64().unwrap_or(0), case));
    }
    for ((suite, mut cs), wall) in suites.iter_mut().zip(cases).zip(walls) {
        cs.sort_by_key(|(run, _)| *run);
        suite.add_test_cases(cs.into_iter().map(|(_, c)| c));
        suite.set_time(wall);
    }
    report.add_test_suites(suites);
    report.to_string()
}

fn kind(r: &Value) -> NonSuccessKind {
    if r["status"] == "failed" {
        NonSuccessKind::Failure
    } else {
        NonSuccessKind::Error
    }
}

fn ty(r: &Value) -> String {
    if r["status"] == "failed" {
        "failed".into()
    } else {
        text(r, "outcome").to_owned()
    }
}

fn rerun(a: &Value) -> TestRerun {
    let mut t = TestRerun::new(kind(a));
    t.set_message(text(a, "reason").to_owned())
        .set_type(ty(a))
        .set_time(dur(&a["wall_ms"]));
    if !text(a, "stdout_tail").is_empty() {
        t.set_system_out(tail(text(a, "stdout_tail")));
    }
    if !text(a, "stderr_tail").is_empty() {
        t.set_system_err(tail(text(a, "stderr_tail")));
    }
    t
}

fn case_for(r: &Value) -> TestCase {
    let mut status = match r["status"].as_str() {
        Some("passed") => TestCaseStatus::success(),
        _ => {
            let mut st = TestCaseStatus::non_success(kind(r));
            st.set_message(text(r, "reason").to_owned());
            st.set_type(ty(r));
            st
        }
    };
    // Earlier attempts: flaky runs on a success, reruns on a non-success.
    if let Some(attempts) = r["attempts"].as_array() {
        status.add_reruns(attempts.iter().map(rerun));
    }
    let mut case = TestCase::new(xml_safe(&run_key(r)), status);
    case.set_time(dur(&r["wall_ms"]));
    case.add_properties(properties(r));
    if !text(r, "stdout_tail").is_empty() {
        case.set_system_out(tail(text(r, "stdout_tail")));
    }
    if !text(r, "stderr_tail").is_empty() {
        case.set_system_err(tail(text(r, "stderr_tail")));
    }
    case
}

/// What a run's report says about its containment, as testcase properties.
fn properties(r: &Value) -> Vec<Property> {
    let mut p = Vec::new();
    if let Some(c) = r["containment"].as_str() {
        p.push(Property::new("containment", c));
    }
    if let Some(safe) = r["crash_safe"].as_bool() {
        p.push(Property::new("crash_safe", safe.to_string()));
    }
    if let Some(note) = r["crash_safety_note"].as_str() {
        p.push(Property::new("crash_safety_note", note));
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
