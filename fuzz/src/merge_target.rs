//! `corral merge`'s target: shard reports read as `corral merge` reads
//! them (JSON values, checked field by field, then typed).
//!
//! The first byte chooses:
//! - even: the rest is raw shard reports, separated by NUL bytes: each
//!   merges or fails with an error, never a panic; a merge that succeeds
//!   holds exactly the runs the reports hold, each in its shard.
//! - odd: the rest describes a whole batch (its plan, each run's verdict,
//!   its shard count, the order the shards are given in); the whole report
//!   is split into shard reports by the partition rule, and their merge
//!   equals the whole; a split with a run dropped or given twice does not
//!   merge.

use serde_json::{json, Value};

use crate::batch::exec::shard_of;
use crate::batch::merge::{merge, MergeError};
use crate::batch::report;

/// One run of `corral batch --report`, as written (the run's report of
/// `true`).
const RUN: &str = include_str!("run.json");

pub fn run(data: &[u8]) {
    match data.split_first() {
        Some((b, rest)) if b % 2 == 0 => raw(rest),
        Some((_, rest)) => split(rest),
        None => {}
    }
}

fn raw(data: &[u8]) {
    let mut docs = Vec::new();
    for (i, part) in data.split(|&b| b == 0).enumerate() {
        let Ok(v) = serde_json::from_slice::<Value>(part) else {
            return;
        };
        docs.push((format!("shard{i}.json"), v));
    }
    match merge(&docs) {
        Err(e) => {
            assert!(!e.to_string().is_empty());
        }
        Ok(doc) => {
            let given: usize = docs
                .iter()
                .map(|(_, d)| d["runs"].as_array().map_or(0, Vec::len))
                .sum();
            let not_run: usize = docs
                .iter()
                .map(|(_, d)| d["not_run"].as_array().map_or(0, Vec::len))
                .sum();
            assert_eq!(doc.runs.len(), given);
            assert_eq!(doc.not_run.len(), not_run);
            let planned: u64 = doc.plan.iter().map(|p| u64::from(p.runs)).sum();
            assert_eq!((given + not_run) as u64, planned);
            assert!(doc.partition.is_none());
            assert_eq!(doc.merged_from.as_ref().map(Vec::len), Some(docs.len()));
            // What the writers derive from it does not panic, and the
            // merged report reads back as a report.
            let summary = report::summarize(&report::planned(&doc.plan), &doc.runs);
            let _ = report::totals(&summary);
            let _ = report::markdown(&summary);
            let text = serde_json::to_string(&doc).unwrap();
            let back: report::BatchDoc = serde_json::from_str(&text).unwrap();
            assert_eq!(serde_json::to_string(&back).unwrap(), text);
        }
    }
}

/// Bytes, one at a time (zeros past the end).
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn next(&mut self) -> u8 {
        let Some((&b, rest)) = self.0.split_first() else {
            return 0;
        };
        self.0 = rest;
        b
    }
}

fn split(data: &[u8]) {
    let mut b = Bytes(data);
    let count = u32::from(b.next() % 5) + 1;
    let tasks = usize::from(b.next() % 4) + 1;
    let template: Value = serde_json::from_str(RUN).unwrap();
    let mut plan = Vec::new();
    for t in 0..tasks {
        let (runs, warmup) = (u32::from(b.next() % 6), u32::from(b.next() % 2));
        plan.push(json!({"task": format!("t{t}"), "runs": runs, "warmup": warmup}));
    }
    // Every planned run: ran (with a verdict and a time) or not run.
    let (mut runs, mut not_run, mut warmups) = (Vec::new(), Vec::new(), Vec::new());
    let mut ordinal = 0usize;
    for p in &plan {
        let task = p["task"].as_str().unwrap();
        let first_shard = shard_of(ordinal, count);
        for w in 0..p["warmup"].as_u64().unwrap() {
            if p["runs"] != 0 {
                warmups.push(one(&template, task, w, first_shard, true, b.next()));
            }
        }
        for run in 0..p["runs"].as_u64().unwrap() {
            let shard = shard_of(ordinal, count);
            ordinal += 1;
            let v = b.next();
            if v % 7 == 6 {
                not_run.push(json!({"task": task, "run": run, "shard": shard}));
            } else {
                runs.push(one(&template, task, run, shard, false, v));
            }
        }
    }
    let whole = json!({
        "format_version": report::FORMAT_VERSION,
        "manifest": "m.toml",
        "manifest_fingerprint": "0123456789abcdef",
        "partition": null,
        "task_filters": [],
        "plan": plan,
        "exit_code": 0,
        "stopped": null,
        "received_signal": null,
        "duration_ms": 10.0,
        "totals": {"runs": 0, "passed": 0, "failed": 0, "errors": 0, "not_run": 0, "flaky": 0},
        "tasks": [],
        "runs": runs,
        "not_run": not_run,
        "warmup_runs": warmups,
    });
    // The whole report (the runs' shards are those of `count` shards, as
    // in a merged report) alone merges into itself when it is one shard.
    if count == 1 {
        let alone = merge(&[("whole.json".into(), whole.clone())]).unwrap();
        same(&alone, &whole);
    }
    // Its shards, given in an order from the bytes.
    let mut shards: Vec<(String, Value)> = (1..=count)
        .map(|k| {
            let mine = |key: &str| -> Vec<Value> {
                whole[key]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|r| r["shard"] == k)
                    .cloned()
                    .collect()
            };
            let mut d = whole.clone();
            d["partition"] = json!({"index": k, "count": count});
            d["runs"] = mine("runs").into();
            d["not_run"] = mine("not_run").into();
            d["warmup_runs"] = mine("warmup_runs").into();
            d["duration_ms"] = json!(f64::from(k));
            (format!("shard{k}.json"), d)
        })
        .collect();
    for i in (1..shards.len()).rev() {
        let j = usize::from(b.next()) % (i + 1);
        shards.swap(i, j);
    }
    let merged = merge(&shards).unwrap_or_else(|e| panic!("{e}"));
    same(&merged, &whole);
    assert_eq!(merged.duration_ms, f64::from(count));
    let from = merged.merged_from.as_ref().unwrap();
    let order: Vec<u32> = from.iter().map(|f| f.partition.unwrap().index).collect();
    assert_eq!(order, (1..=count).collect::<Vec<_>>());

    // A shard with a run or a not-run entry dropped: the run is missing.
    let k = usize::from(b.next()) % shards.len();
    for key in ["runs", "not_run"] {
        let mut broken = shards.clone();
        if let Some(list) = broken[k].1[key].as_array_mut().filter(|l| !l.is_empty()) {
            list.remove(usize::from(b.next()) % list.len());
            let e = merge(&broken).unwrap_err();
            assert!(matches!(e, MergeError::RunMissing { .. }), "{e}");
        }
    }
    // A run given twice, in its shard or in another: refused.
    let total = whole["runs"].as_array().unwrap().len();
    if total > 0 {
        let r = whole["runs"][usize::from(b.next()) % total].clone();
        let mut broken = shards.clone();
        broken[k].1["runs"].as_array_mut().unwrap().push(r);
        assert!(merge(&broken).is_err());
    }
    // A shard missing: refused.
    if shards.len() > 1 {
        let mut broken = shards.clone();
        broken.remove(k);
        assert!(matches!(
            merge(&broken),
            Err(MergeError::ShardMissing { .. })
        ));
    }
}

/// A run of `task` from the template, its verdict and times from `v`.
fn one(template: &Value, task: &str, run: u64, shard: u32, warmup: bool, v: u8) -> Value {
    let mut r = template.clone();
    r["task"] = task.into();
    r["run"] = run.into();
    r["shard"] = shard.into();
    r["warmup"] = warmup.into();
    let (status, reason) = match v % 3 {
        0 => ("passed", Value::Null),
        1 => ("failed", "exit code 1".into()),
        _ => ("error", "timed out".into()),
    };
    r["status"] = status.into();
    r["reason"] = reason;
    r["wall_ms"] = json!(f64::from(v) * 1.5);
    r["started_ms"] = json!(f64::from(v >> 2));
    r
}

/// The merged report holds the whole report's plan and runs, in order.
fn same(merged: &report::BatchDoc, whole: &Value) {
    let m = serde_json::to_value(merged).unwrap();
    for key in [
        "plan",
        "runs",
        "not_run",
        "manifest",
        "manifest_fingerprint",
        "task_filters",
    ] {
        assert_eq!(m[key], whole[key], "{key}");
    }
    // Warmups: the same runs (the order is the shards').
    let key = |v: &Value| (v["task"].to_string(), v["run"].as_u64());
    let mut a: Vec<_> = m["warmup_runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(key)
        .collect();
    let mut b: Vec<_> = whole["warmup_runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(key)
        .collect();
    a.sort();
    b.sort();
    assert_eq!(a, b);
    assert_eq!(
        merged.exit_code,
        report::exit_code(&merged.runs, merged.not_run.len(), false)
    );
}
