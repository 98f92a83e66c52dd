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
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

use super::error::BatchError;
pub use super::error::MergeError;
use super::events::RunEnd;
use super::report::{self, BatchDoc, BatchRun, MergedFrom, NotRun, Part, PlanEntry};
use super::reporter::{end_run, ReportFile, Reporter, Table};
use super::Ended;
use crate::args::MergeOpts;

/// A run: task name and run index.
type RunKey = (String, u64);

pub fn main(opts: MergeOpts) -> i32 {
    super::exit_code(run(&opts))
}

fn run(opts: &MergeOpts) -> Result<Ended, BatchError> {
    for (what, p) in [
        ("--report", &opts.report),
        ("--junit", &opts.junit),
        ("--export-markdown", &opts.export_markdown),
    ] {
        if let Some(p) = p {
            super::check_writable(p).map_err(|source| BatchError::Unwritable {
                what,
                path: p.clone(),
                source,
            })?;
        }
    }
    let docs = read_all(&opts.reports)?;
    let mut doc = merge(&docs)?;
    let summary = report::summarize(&report::planned(&doc.plan), &doc.runs);
    doc.totals = report::totals(&summary);
    doc.tasks = summary;
    let code = doc.exit_code;
    let notes = format!(
        "merged {} shard report(s) of manifest {}\n",
        docs.len(),
        doc.manifest_fingerprint
    );
    let mut reporters: Vec<Box<dyn Reporter>> = vec![Box::new(Table {
        to_stderr: opts.report.as_deref() == Some(Path::new("-")),
    })];
    for f in ReportFile::all(
        opts.report.as_deref(),
        opts.junit.as_deref(),
        opts.export_markdown.as_deref(),
    ) {
        reporters.push(Box::new(f));
    }
    let end = RunEnd {
        wall: report::duration_of_ms(doc.duration_ms),
        title: doc.manifest.clone(),
        doc,
        notes,
    };
    let errors = end_run(&mut reporters, end);
    Ok(Ended { code, errors })
}

fn read_all(paths: &[PathBuf]) -> Result<Vec<(String, Value)>, BatchError> {
    let mut out = Vec::new();
    for p in paths {
        let file = p.display().to_string();
        let text = match std::fs::read_to_string(p) {
            Ok(t) => t,
            Err(source) => return Err(BatchError::MergeRead { file, source }),
        };
        let v: Value = match serde_json::from_str(&text) {
            Ok(v) => v,
            Err(source) => return Err(BatchError::MergeJson { file, source }),
        };
        for k in ["manifest_fingerprint", "plan", "runs", "not_run"] {
            if v.get(k).is_none() {
                return Err(BatchError::NotAReport(format!(
                    "{file}: not a `corral batch --report` report (no `{k}`)"
                )));
            }
        }
        out.push((file, v));
    }
    Ok(out)
}

/// The largest time a report may hold, in milliseconds (about 317 years):
/// beyond it a number is no measurement, and converting it would overflow.
pub const MAX_MS: f64 = 1e13;

/// A shard report: checked field by field, then read whole as a
/// [`BatchDoc`].
struct Shard {
    name: String,
    doc: BatchDoc,
}

/// Reads field `key` of `v` as a `T`; the error names the field (`path`)
/// and says what it should be.
fn field<T: DeserializeOwned>(v: &Value, key: &str, path: &str, what: &str) -> Result<T, String> {
    let x = v.get(key).unwrap_or(&Value::Null);
    T::deserialize(x).map_err(|_| format!("field `{path}` is {}, not {what}", shown(x)))
}

/// A value as an error message shows it (cut when long).
fn shown(v: &Value) -> String {
    if v.is_null() {
        return "missing or null".into();
    }
    let s = v.to_string();
    if s.chars().count() > 60 {
        format!("{}...", s.chars().take(60).collect::<String>())
    } else {
        s
    }
}

/// A time in milliseconds: a finite number from 0 to [`MAX_MS`].
fn ms_field(v: &Value, key: &str, path: &str, required: bool) -> Result<Option<f64>, String> {
    let x = v.get(key).unwrap_or(&Value::Null);
    if x.is_null() && !required {
        return Ok(None);
    }
    match x.as_f64() {
        Some(f) if f.is_finite() && (0.0..=MAX_MS).contains(&f) => Ok(Some(f)),
        _ => Err(format!(
            "field `{path}` is {}, not a time (a number of milliseconds from 0 to {MAX_MS:e})",
            shown(x)
        )),
    }
}

const STATUS: &str = "\"passed\", \"failed\" or \"error\"";

/// Checks the fields of a run object that the merge, the table, the
/// statistics and the JUnit and Markdown writers read.
fn check_run(r: &Value, path: &str, depth: u32) -> Result<(String, u32), String> {
    if !r.is_object() {
        return Err(format!("`{path}` is {}, not a run object", shown(r)));
    }
    let p = |k: &str| format!("{path}.{k}");
    let task: String = field(r, "task", &p("task"), "a task name (a string)")?;
    let run: u32 = field(r, "run", &p("run"), "a run index (an integer from 0)")?;
    let status: String = field(r, "status", &p("status"), STATUS)?;
    if !["passed", "failed", "error"].contains(&status.as_str()) {
        return Err(format!(
            "field `{}` is {status:?}, not {STATUS}",
            p("status")
        ));
    }
    ms_field(r, "wall_ms", &p("wall_ms"), true)?;
    ms_field(r, "started_ms", &p("started_ms"), false)?;
    for k in ["flaky", "cancelled_by_stop", "warmup"] {
        field::<Option<bool>>(r, k, &p(k), "true or false")?;
    }
    for k in [
        "reason",
        "outcome",
        "stdout_tail",
        "stderr_tail",
        "containment",
    ] {
        field::<Option<String>>(r, k, &p(k), "a string")?;
    }
    if let Some(u) = r.get("usage").filter(|u| !u.is_null()) {
        let up = p("usage");
        if !u.is_object() {
            return Err(format!("field `{up}` is {}, not an object", shown(u)));
        }
        for k in ["cpu_user_ms", "cpu_system_ms"] {
            ms_field(u, k, &format!("{up}.{k}"), false)?;
        }
        field::<Option<u64>>(
            u,
            "memory_peak",
            &format!("{up}.memory_peak"),
            "a byte count",
        )?;
    }
    let attempts: Option<Vec<Value>> = field(r, "attempts", &p("attempts"), "a list of runs")?;
    if let Some(a) = attempts {
        if depth > 0 && !a.is_empty() {
            return Err(format!(
                "field `{}`: an attempt has attempts of its own",
                p("attempts")
            ));
        }
        for (i, x) in a.iter().enumerate() {
            check_run(x, &format!("{path}.attempts[{i}]"), depth + 1)?;
        }
    }
    Ok((task, run))
}

/// A shard report, checked field by field (types, ranges, the
/// fingerprint's form: each error names the field) and then read whole as
/// the typed document (an unknown or missing key is an error naming where).
fn shard(name: &str, d: &Value) -> Result<Shard, String> {
    let at = |e: String| format!("{name}: {e}");
    let version: u32 = field(
        d,
        "format_version",
        "format_version",
        "a report format version (a report of an older corral: merge it with that corral)",
    )
    .map_err(at)?;
    if version != report::FORMAT_VERSION {
        return Err(at(format!(
            "field `format_version` is {version}: this corral reads report format {}",
            report::FORMAT_VERSION
        )));
    }
    let fingerprint: String = field(
        d,
        "manifest_fingerprint",
        "manifest_fingerprint",
        "a fingerprint",
    )
    .map_err(at)?;
    if fingerprint.len() != 16 || !fingerprint.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(at(format!(
            "field `manifest_fingerprint` is {fingerprint:?}, not a manifest fingerprint (16 hex digits)"
        )));
    }
    let partition: Option<Part> = field(
        d,
        "partition",
        "partition",
        "null or {\"index\": K, \"count\": N} (integers, 1 <= K <= N <= 4294967295)",
    )
    .map_err(at)?;
    if let Some(p) = partition {
        if p.count == 0 || p.index == 0 || p.index > p.count {
            return Err(at(format!(
                "field `partition` is shard {}/{}, not K/N with 1 <= K <= N",
                p.index, p.count
            )));
        }
    }
    for k in ["runs", "warmup_runs"] {
        let runs: Vec<Value> = field(d, k, k, "a list of runs").map_err(at)?;
        for (i, r) in runs.iter().enumerate() {
            check_run(r, &format!("{k}[{i}]"), 0).map_err(at)?;
        }
    }
    let not_run: Vec<Value> = field(d, "not_run", "not_run", "a list of runs").map_err(at)?;
    for (i, r) in not_run.iter().enumerate() {
        let p = format!("not_run[{i}]");
        field::<String>(r, "task", &format!("{p}.task"), "a task name").map_err(at)?;
        field::<u32>(
            r,
            "run",
            &format!("{p}.run"),
            "a run index (an integer from 0)",
        )
        .map_err(at)?;
    }
    let signal: Option<i32> = field(
        d,
        "received_signal",
        "received_signal",
        "null or a signal number",
    )
    .map_err(at)?;
    if signal.is_some_and(|s| !(1..=128).contains(&s)) {
        return Err(at(format!(
            "field `received_signal` is {}, not a signal number",
            signal.unwrap_or(0)
        )));
    }
    field::<String>(d, "manifest", "manifest", "the manifest's path").map_err(at)?;
    field::<Vec<String>>(d, "task_filters", "task_filters", "a list of strings").map_err(at)?;
    field::<Vec<PlanEntry>>(
        d,
        "plan",
        "plan",
        "a list of {\"task\", \"runs\", \"warmup\"} (runs and warmup integers from 0 to 4294967295)",
    )
    .map_err(at)?;
    field::<i32>(d, "exit_code", "exit_code", "an exit code (an integer)").map_err(at)?;
    field::<Option<String>>(d, "stopped", "stopped", "null or a string").map_err(at)?;
    ms_field(d, "duration_ms", "duration_ms", true).map_err(at)?;
    let doc = typed(d).map_err(at)?;
    Ok(Shard {
        name: name.to_owned(),
        doc,
    })
}

/// The whole document, typed; on an error, the first list item that does
/// not read is named (`runs[3]: unknown field ...`).
fn typed(d: &Value) -> Result<BatchDoc, String> {
    BatchDoc::deserialize(d).map_err(|e| {
        for k in ["runs", "warmup_runs", "not_run"] {
            let items = d
                .get(k)
                .and_then(Value::as_array)
                .map_or(&[][..], Vec::as_slice);
            for (i, r) in items.iter().enumerate() {
                let err = if k == "not_run" {
                    NotRun::deserialize(r).err()
                } else {
                    BatchRun::deserialize(r).err()
                };
                if let Some(e) = err {
                    return format!("`{k}[{i}]`: {e}");
                }
            }
        }
        format!("not a `corral batch --report` report: {e}")
    })
}

fn describe(p: Option<Part>) -> String {
    match p {
        Some(p) => format!("shard {}/{}", p.index, p.count),
        None => "not a shard (no --partition)".into(),
    }
}

/// The merged document (`tasks` and `totals` are filled by the caller).
/// Every report is checked whole before anything is built, and the work
/// is bounded by what the reports hold (never by a count they claim).
pub fn merge(docs: &[(String, Value)]) -> Result<BatchDoc, MergeError> {
    let shards: Vec<Shard> = docs
        .iter()
        .map(|(name, d)| shard(name, d).map_err(MergeError::Invalid))
        .collect::<Result<_, _>>()?;
    let Some(first) = shards.first() else {
        return Err(MergeError::NoReport);
    };
    check_alike(&shards)?;
    let count = shard_count(&shards)?;
    let by_shard = each_shard_once(&shards, count)?;
    let plan = PlanIndex::new(first)?;
    let placed = place_runs(&shards, &plan, count)?;
    let seen = placed.seen.len() as u64;
    if seen < plan.total {
        return Err(first_missing(
            first,
            &placed,
            &by_shard,
            count,
            plan.total - seen,
        ));
    }
    Ok(assemble(&shards, count, placed))
}

/// The index of a report's shard: K of `K/N`, 1 for a report that is not
/// a shard.
fn index(d: &Shard) -> u32 {
    d.doc.partition.map_or(1, |p| p.index)
}

/// Same manifest, filters, plan and shard count everywhere.
fn check_alike(shards: &[Shard]) -> Result<(), MergeError> {
    let first_name = &shards[0].name;
    for d in &shards[1..] {
        let (file, first) = (d.name.clone(), first_name.clone());
        if d.doc.manifest_fingerprint != shards[0].doc.manifest_fingerprint {
            return Err(MergeError::OtherManifest {
                file,
                first,
                fingerprint: d.doc.manifest_fingerprint.clone(),
                first_fingerprint: shards[0].doc.manifest_fingerprint.clone(),
            });
        }
        if d.doc.task_filters != shards[0].doc.task_filters {
            return Err(MergeError::OtherFilters {
                file,
                first,
                filters: d.doc.task_filters.clone(),
                first_filters: shards[0].doc.task_filters.clone(),
            });
        }
        if d.doc.plan != shards[0].doc.plan {
            return Err(MergeError::OtherPlan { file, first });
        }
        if d.doc.partition.map(|p| p.count) != shards[0].doc.partition.map(|p| p.count) {
            return Err(MergeError::OtherCount {
                file,
                shard: describe(d.doc.partition),
                first,
                first_shard: describe(shards[0].doc.partition),
            });
        }
    }
    Ok(())
}

/// The shard count N: a report without a partition is the whole batch,
/// alone.
fn shard_count(shards: &[Shard]) -> Result<u32, MergeError> {
    let first = &shards[0];
    match first.doc.partition {
        Some(p) => Ok(p.count),
        None if shards.len() == 1 => Ok(1),
        None => Err(MergeError::NotAShard {
            file: first.name.clone(),
            given: shards.len(),
        }),
    }
}

/// Each shard exactly once: the report of each shard index.
fn each_shard_once(shards: &[Shard], count: u32) -> Result<HashMap<u32, &str>, MergeError> {
    let mut by_shard: HashMap<u32, &str> = HashMap::new();
    for d in shards {
        let index = index(d);
        if let Some(other) = by_shard.insert(index, &d.name) {
            return Err(MergeError::ShardTwice {
                index,
                count,
                first: other.to_owned(),
                second: d.name.clone(),
            });
        }
    }
    // At most as many steps as reports were given (each shard is there
    // once, so the first one missing is among the first len+1).
    if let Some(index) = (1..=count).find(|k| !by_shard.contains_key(k)) {
        return Err(MergeError::ShardMissing { index, count });
    }
    Ok(by_shard)
}

/// The plan: each task once, with its place, its planned runs and the
/// ordinal of its first run.
struct PlanIndex<'a> {
    tasks: HashMap<&'a str, (usize, u32, u64)>,
    total: u64,
}

impl<'a> PlanIndex<'a> {
    fn new(first: &'a Shard) -> Result<PlanIndex<'a>, MergeError> {
        let mut tasks = HashMap::new();
        let mut total: u64 = 0;
        for (ti, p) in first.doc.plan.iter().enumerate() {
            if tasks.insert(p.task.as_str(), (ti, p.runs, total)).is_some() {
                return Err(MergeError::PlannedTwice {
                    file: first.name.clone(),
                    index: ti,
                    task: p.task.clone(),
                });
            }
            total += u64::from(p.runs);
        }
        Ok(PlanIndex { tasks, total })
    }
}

/// The shard (1-based) of the run with this ordinal in the plan.
fn shard_of_ordinal(ordinal: u64, count: u32) -> u32 {
    (ordinal % u64::from(count)) as u32 + 1
}

/// The runs of every shard, each checked to be in the plan, in its shard
/// and there once; with their place in the plan (task, run) for sorting.
struct Placed<'a> {
    seen: HashMap<RunKey, &'a str>,
    runs: Vec<(usize, u32, BatchRun)>,
    not_run: Vec<(usize, u32, NotRun)>,
    warmups: Vec<BatchRun>,
}

/// Every present run in the plan, in the shard the rule gives it, once.
fn place_runs<'a>(
    shards: &'a [Shard],
    plan: &PlanIndex<'_>,
    count: u32,
) -> Result<Placed<'a>, MergeError> {
    let mut placed = Placed {
        seen: HashMap::new(),
        runs: Vec::new(),
        not_run: Vec::new(),
        warmups: Vec::new(),
    };
    for d in shards {
        let (name, k) = (&d.name, index(d));
        let items = d
            .doc
            .runs
            .iter()
            .map(|r| (Some(r), r.task.as_str(), r.run))
            .chain(d.doc.not_run.iter().map(|n| (None, n.task.as_str(), n.run)));
        for (ran, task, run) in items {
            let label = format!("{task}#{run}");
            let Some(&(ti, _, first_ordinal)) = plan
                .tasks
                .get(task)
                .filter(|(_, planned, _)| run < *planned)
            else {
                return Err(MergeError::NotPlanned {
                    file: name.clone(),
                    run: label,
                });
            };
            let shard = shard_of_ordinal(first_ordinal + u64::from(run), count);
            if shard != k {
                return Err(MergeError::WrongShard {
                    file: name.clone(),
                    index: k,
                    count,
                    run: label,
                    belongs: shard,
                });
            }
            if let Some(other) = placed.seen.insert((task.to_owned(), u64::from(run)), name) {
                return Err(MergeError::RunTwice {
                    run: label,
                    first: other.to_owned(),
                    second: name.clone(),
                });
            }
            match ran {
                Some(r) => placed.runs.push((ti, run, r.clone())),
                None => placed.not_run.push((
                    ti,
                    run,
                    NotRun {
                        task: task.to_owned(),
                        run,
                        shard,
                    },
                )),
            }
        }
        placed.warmups.extend(d.doc.warmup_runs.iter().cloned());
    }
    Ok(placed)
}

/// The error for `missing` planned runs no report has: names the first
/// (found within seen + 1 steps) and the shard report it should be in.
fn first_missing(
    first: &Shard,
    placed: &Placed<'_>,
    by_shard: &HashMap<u32, &str>,
    count: u32,
    missing: u64,
) -> MergeError {
    let found = first
        .doc
        .plan
        .iter()
        .flat_map(|p| (0..p.runs).map(move |r| (p.task.as_str(), r)))
        .enumerate()
        .find(|(_, (t, r))| !placed.seen.contains_key(&((*t).to_owned(), u64::from(*r))));
    // Some planned run is not seen (every seen run is a planned one).
    let (ordinal, (task, run)) = found.unwrap_or((0, ("", 0)));
    let shard = shard_of_ordinal(ordinal as u64, count);
    MergeError::RunMissing {
        run: format!("{task}#{run}"),
        shard,
        count,
        file: by_shard
            .get(&shard)
            .map_or_else(String::new, |f| (*f).to_owned()),
        missing,
    }
}

/// The merged document from checked shards and their placed runs.
fn assemble(shards: &[Shard], count: u32, placed: Placed<'_>) -> BatchDoc {
    let first = &shards[0];
    let Placed {
        mut runs,
        mut not_run,
        warmups,
        ..
    } = placed;
    runs.sort_by_key(|(ti, run, _)| (*ti, *run));
    not_run.sort_by_key(|(ti, run, _)| (*ti, *run));
    let runs: Vec<BatchRun> = runs.into_iter().map(|(_, _, r)| r).collect();
    let not_run: Vec<NotRun> = not_run.into_iter().map(|(_, _, r)| r).collect();
    let received = shards.iter().find_map(|d| d.doc.received_signal);
    let code = report::exit_code(&runs, not_run.len(), received.is_some());
    let stopped: Vec<String> = shards
        .iter()
        .filter_map(|d| {
            d.doc
                .stopped
                .as_ref()
                .map(|s| format!("shard {}/{count}: {s}", index(d)))
        })
        .collect();
    let duration = shards.iter().map(|d| d.doc.duration_ms).fold(0.0, f64::max);
    let mut from: Vec<(u32, MergedFrom)> = shards
        .iter()
        .map(|d| {
            (
                index(d),
                MergedFrom {
                    file: d.name.clone(),
                    partition: d.doc.partition,
                    exit_code: d.doc.exit_code,
                    duration_ms: d.doc.duration_ms,
                },
            )
        })
        .collect();
    from.sort_by_key(|(k, _)| *k);
    BatchDoc {
        format_version: report::FORMAT_VERSION,
        manifest: first.doc.manifest.clone(),
        manifest_fingerprint: first.doc.manifest_fingerprint.clone(),
        partition: None,
        merged_from: Some(from.into_iter().map(|(_, f)| f).collect()),
        task_filters: first.doc.task_filters.clone(),
        plan: first.doc.plan.clone(),
        exit_code: code,
        stopped: (!stopped.is_empty()).then(|| stopped.join("; ")),
        received_signal: received,
        duration_ms: duration,
        totals: report::Totals::default(),
        tasks: Vec::new(),
        runs,
        not_run,
        warmup_runs: warmups,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// merge places runs by the rule `corral batch --partition` shards by.
    #[test]
    fn the_shard_of_an_ordinal_is_the_batch_rule() {
        for count in [1, 2, 3, 7] {
            for ordinal in 0..50u64 {
                assert_eq!(
                    shard_of_ordinal(ordinal, count),
                    super::super::exec::shard_of(ordinal as usize, count),
                    "{ordinal} of {count}"
                );
            }
        }
        assert_eq!(shard_of_ordinal(u64::MAX, u32::MAX), 1);
    }
}
