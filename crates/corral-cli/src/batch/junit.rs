//! JUnit XML: a testsuite per task, a testcase per run (`name#N`); a failed
//! run is a `<failure>`, an errored one an `<error>` (type = the outcome),
//! a run that never started (fail-fast, interrupt) is `<skipped>`. Output
//! is cut to the last [`KEEP`] bytes per stream.

use std::time::Duration;

use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};

use super::classify::Status;
use super::exec::{Batch, RunRecord};

/// Bytes of each stream kept in `<system-out>` / `<system-err>`.
pub const KEEP: usize = 16 << 10;

pub fn render(
    batch: &Batch,
    records: &[RunRecord],
    manifest: &str,
    wall: Duration,
) -> Result<String, quick_junit::SerializeError> {
    let mut report = Report::new(format!("corral batch {manifest}"));
    report.set_time(wall);
    let mut suites: Vec<TestSuite> = batch
        .tasks
        .iter()
        .map(|t| TestSuite::new(t.name.clone()))
        .collect();
    let mut by_job: Vec<Option<&RunRecord>> = vec![None; batch.plan.len()];
    for r in records {
        by_job[r.job] = Some(r);
    }
    let stop = batch.stop_reason();
    for (job, j) in batch.plan.iter().enumerate() {
        let name = batch.run_name(job);
        let case = match by_job[job] {
            Some(r) => case_for(&name, r),
            None => {
                let mut st = TestCaseStatus::skipped();
                st.set_message(match &stop {
                    Some(s) => format!("not run: {s}"),
                    None => "not run".into(),
                });
                TestCase::new(name, st)
            }
        };
        let mut case = case;
        case.set_classname(batch.tasks[j.task].name.clone());
        suites[j.task].add_test_case(case);
    }
    for (i, suite) in suites.iter_mut().enumerate() {
        let wall: Duration = records.iter().filter(|r| r.task == i).map(|r| r.wall).sum();
        suite.set_time(wall);
    }
    report.add_test_suites(suites);
    report.to_string()
}

fn case_for(name: &str, r: &RunRecord) -> TestCase {
    let status = match r.status {
        Status::Passed => TestCaseStatus::success(),
        Status::Failed | Status::Error => {
            let kind = if r.status == Status::Failed {
                NonSuccessKind::Failure
            } else {
                NonSuccessKind::Error
            };
            let mut st = TestCaseStatus::non_success(kind);
            st.set_message(r.reason.clone().unwrap_or_default());
            st.set_type(if r.status == Status::Failed {
                "failed"
            } else {
                r.report.outcome
            });
            st
        }
    };
    let mut case = TestCase::new(name.to_owned(), status);
    case.set_time(r.wall);
    if !r.stdout.is_empty() {
        case.set_system_out(tail(&r.stdout));
    }
    if !r.stderr.is_empty() {
        case.set_system_err(tail(&r.stderr));
    }
    case
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
    out.extend(s[start..].chars().map(|c| match c {
        '\t' | '\n' | '\r' => c,
        c if (c as u32) < 0x20 || c == '\u{fffe}' || c == '\u{ffff}' => '\u{fffd}',
        c => c,
    }));
    out
}
