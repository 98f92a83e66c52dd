//! `corral merge REPORT.json...`: the shards of one batch back into one
//! report of the same schema, as if the whole manifest had run at once.
//!
//! Checked before anything is written, each error naming the file and the
//! run: every report is a batch report; all come from the same manifest
//! (`manifest_fingerprint`), task filters (`task_filters`) and plan, and
//! the same shard count; each shard `K/N` is there exactly once; every run
//! of the plan is in exactly one report (in `runs` or `not_run`), in the
//! shard the partition rule gives it. The per-task table, the totals and
//! the exit code are recomputed from the runs.

use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::exec::shard_of;
use super::report::{self, run_key};
use crate::args::MergeOpts;
use crate::exit::CORRAL_FAILED;

/// A run: task name and run index.
type RunKey = (String, u64);

pub fn main(opts: MergeOpts) -> i32 {
    for (what, p) in [
        ("--report", &opts.report),
        ("--junit", &opts.junit),
        ("--export-markdown", &opts.export_markdown),
    ] {
        if let Some(p) = p {
            if let Err(e) = super::check_writable(p) {
                say!("corral: {what} {}: {e}", p.display());
                return CORRAL_FAILED;
            }
        }
    }
    let docs = match read_all(&opts.reports) {
        Ok(d) => d,
        Err(e) => {
            say!("corral: merge: {e}");
            return CORRAL_FAILED;
        }
    };
    let merged = match merge(&docs) {
        Ok(m) => m,
        Err(e) => {
            say!("corral: merge: {e}");
            return CORRAL_FAILED;
        }
    };
    let summary = report::summarize(
        &report::planned(&merged["plan"]),
        merged["runs"].as_array().map_or(&[], Vec::as_slice),
    );
    let mut doc = merged;
    doc["tasks"] = serde_json::to_value(&summary).unwrap_or(Value::Null);
    doc["totals"] = report::totals(&summary);
    let code = doc["exit_code"].as_i64().unwrap_or(2) as i32;
    let wall = std::time::Duration::from_secs_f64(
        doc["duration_ms"].as_f64().unwrap_or(0.0).max(0.0) / 1e3,
    );
    let mut text = report::table(&summary, wall);
    text.push_str(&format!(
        "merged {} shard report(s) of manifest {}\n",
        docs.len(),
        doc["manifest_fingerprint"].as_str().unwrap_or("")
    ));
    if opts.report.as_deref() == Some(Path::new("-")) {
        let _ = std::io::stderr().write_all(text.as_bytes());
    } else {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
    }
    let title = doc["manifest"].as_str().unwrap_or("").to_owned();
    if !super::write_outputs(
        &doc,
        &summary,
        &title,
        opts.report.as_deref(),
        opts.junit.as_deref(),
        opts.export_markdown.as_deref(),
    ) {
        return CORRAL_FAILED;
    }
    code
}

fn read_all(paths: &[PathBuf]) -> Result<Vec<(String, Value)>, String> {
    let mut out = Vec::new();
    for p in paths {
        let name = p.display().to_string();
        let text = std::fs::read_to_string(p).map_err(|e| format!("{name}: cannot read: {e}"))?;
        let v: Value =
            serde_json::from_str(&text).map_err(|e| format!("{name}: not a JSON report: {e}"))?;
        for k in ["manifest_fingerprint", "plan", "runs", "not_run"] {
            if v.get(k).is_none() {
                return Err(format!(
                    "{name}: not a `corral batch --report` report (no `{k}`)"
                ));
            }
        }
        out.push((name, v));
    }
    Ok(out)
}

/// The merged document (`tasks` and `totals` are filled by the caller).
pub fn merge(docs: &[(String, Value)]) -> Result<Value, String> {
    let (first_name, first) = &docs[0];
    let count = first["partition"]["count"].as_u64();
    // Same manifest, filters, plan and shard count everywhere.
    for (name, d) in &docs[1..] {
        if d["manifest_fingerprint"] != first["manifest_fingerprint"] {
            return Err(format!(
                "{name} comes from a different manifest than {first_name} (fingerprint {} vs {})",
                d["manifest_fingerprint"], first["manifest_fingerprint"]
            ));
        }
        if d["task_filters"] != first["task_filters"] {
            return Err(format!(
                "{name} ran with --task filters {} but {first_name} with {}",
                d["task_filters"], first["task_filters"]
            ));
        }
        if d["plan"] != first["plan"] {
            return Err(format!(
                "{name} has a different plan (tasks, repeats, warmups) than {first_name}"
            ));
        }
        if d["partition"]["count"].as_u64() != count {
            return Err(format!(
                "{name} is {} but {first_name} is {}",
                describe(&d["partition"]),
                describe(&first["partition"])
            ));
        }
    }
    let count = match count {
        Some(c) if c >= 1 => c as u32,
        _ if docs.len() == 1 => 1,
        _ => {
            return Err(format!(
            "{first_name} is not a shard (it ran without --partition), and {} reports were given",
            docs.len()
        ))
        }
    };
    // Each shard exactly once.
    let mut by_shard: HashMap<u32, &str> = HashMap::new();
    for (name, d) in docs {
        let k = d["partition"]["index"].as_u64().unwrap_or(1) as u32;
        if k == 0 || k > count {
            return Err(format!("{name}: shard {k}/{count} is out of range"));
        }
        if let Some(other) = by_shard.insert(k, name) {
            return Err(format!(
                "shard {k}/{count} is given twice: {other} and {name}"
            ));
        }
    }
    if let Some(k) = (1..=count).find(|k| !by_shard.contains_key(k)) {
        return Err(format!(
            "shard {k}/{count} is missing (its report was not given)"
        ));
    }
    // Every planned run exactly once, in the shard the rule gives it.
    let plan = first["plan"].as_array().cloned().unwrap_or_default();
    let mut expect: HashMap<RunKey, (usize, u32)> = HashMap::new();
    let mut ordinal = 0usize;
    for (ti, p) in plan.iter().enumerate() {
        let task = p["task"].as_str().unwrap_or("?").to_owned();
        for run in 0..p["runs"].as_u64().unwrap_or(0) {
            expect.insert((task.clone(), run), (ti, shard_of(ordinal, count)));
            ordinal += 1;
        }
    }
    let mut seen: HashMap<RunKey, &str> = HashMap::new();
    let mut runs: Vec<(usize, u64, Value)> = Vec::new();
    let mut not_run: Vec<(usize, u64, Value)> = Vec::new();
    let mut warmups: Vec<Value> = Vec::new();
    for (name, d) in docs {
        let k = d["partition"]["index"].as_u64().unwrap_or(1) as u32;
        let empty = Vec::new();
        let items = d["runs"]
            .as_array()
            .unwrap_or(&empty)
            .iter()
            .map(|r| (true, r))
            .chain(
                d["not_run"]
                    .as_array()
                    .unwrap_or(&empty)
                    .iter()
                    .map(|r| (false, r)),
            );
        for (ran, r) in items {
            let key = (
                r["task"].as_str().unwrap_or("?").to_owned(),
                r["run"].as_u64().unwrap_or(u64::MAX),
            );
            let Some(&(ti, shard)) = expect.get(&key) else {
                return Err(format!(
                    "{name}: run {} is not in the manifest's plan",
                    run_key(r)
                ));
            };
            if shard != k {
                return Err(format!(
                    "{name} (shard {k}/{count}) has run {}, which belongs to shard {shard}/{count}",
                    run_key(r)
                ));
            }
            if let Some(other) = seen.insert(key.clone(), name) {
                return Err(format!(
                    "run {} appears twice: in {other} and in {name}",
                    run_key(r)
                ));
            }
            if ran {
                runs.push((ti, key.1, r.clone()));
            } else {
                not_run.push((ti, key.1, r.clone()));
            }
        }
        warmups.extend(d["warmup_runs"].as_array().cloned().unwrap_or_default());
    }
    let mut missing: Vec<(&RunKey, &(usize, u32))> = expect
        .iter()
        .filter(|(k, _)| !seen.contains_key(*k))
        .collect();
    missing.sort_by_key(|(k, v)| (v.0, k.1));
    if let Some(((task, run), (_, shard))) = missing.first() {
        return Err(format!(
            "run {task}#{run} (shard {shard}/{count}) is missing from {}{}",
            by_shard[shard],
            if missing.len() > 1 {
                format!(" ({} runs missing in all)", missing.len())
            } else {
                String::new()
            }
        ));
    }
    runs.sort_by_key(|(ti, run, _)| (*ti, *run));
    not_run.sort_by_key(|(ti, run, _)| (*ti, *run));
    let runs: Vec<Value> = runs.into_iter().map(|(_, _, r)| r).collect();
    let not_run: Vec<Value> = not_run.into_iter().map(|(_, _, r)| r).collect();
    let received = docs.iter().find_map(|(_, d)| d["received_signal"].as_i64());
    let code = report::exit_code(&runs, not_run.len(), received.is_some());
    let stopped: Vec<String> = docs
        .iter()
        .filter_map(|(_, d)| {
            d["stopped"].as_str().map(|s| {
                format!(
                    "shard {}/{count}: {s}",
                    d["partition"]["index"].as_u64().unwrap_or(1)
                )
            })
        })
        .collect();
    let duration = docs
        .iter()
        .filter_map(|(_, d)| d["duration_ms"].as_f64())
        .fold(0.0, f64::max);
    let mut from: Vec<Value> = docs
        .iter()
        .map(|(name, d)| {
            json!({
                "file": name,
                "partition": d["partition"],
                "exit_code": d["exit_code"],
                "duration_ms": d["duration_ms"],
            })
        })
        .collect();
    from.sort_by_key(|f| f["partition"]["index"].as_u64());
    Ok(json!({
        "manifest": first["manifest"],
        "manifest_fingerprint": first["manifest_fingerprint"],
        "partition": null,
        "merged_from": from,
        "task_filters": first["task_filters"],
        "plan": first["plan"],
        "exit_code": code,
        "stopped": if stopped.is_empty() { Value::Null } else { Value::from(stopped.join("; ")) },
        "received_signal": received,
        "duration_ms": duration,
        "totals": {},
        "tasks": [],
        "runs": runs,
        "not_run": not_run,
        "warmup_runs": warmups,
    }))
}

fn describe(p: &Value) -> String {
    match (p["index"].as_u64(), p["count"].as_u64()) {
        (Some(k), Some(n)) => format!("shard {k}/{n}"),
        _ => "not a shard (no --partition)".into(),
    }
}
