//! The failures of `corral batch` and `corral merge`: typed, each
//! `Display` saying what failed without repeating its source (the source
//! is printed after it by [`render`], once, at the edge: nextest's rule).

use std::error::Error as _;
use std::io;
use std::path::PathBuf;

use super::manifest::ManifestError;

/// What stops a batch or a merge, or makes it end in failure.
#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    #[error("--events - and --report - both want stdout; send one of them to a file")]
    BothStdout,
    /// `--partition`: `why` says what is wrong with `spec`.
    #[error("--partition {spec:?}: {why}")]
    Partition { spec: String, why: String },
    /// The manifest is not one corral can run (the error names the file,
    /// the line and the key).
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    #[error("{file}: cannot read the manifest")]
    ManifestRead {
        file: String,
        #[source]
        source: io::Error,
    },
    #[error("<stdin>: cannot read the manifest from standard input")]
    ManifestStdin(#[source] io::Error),
    #[error("--task {pattern:?} matches no task (tasks: {})", tasks.join(", "))]
    NoTask { pattern: String, tasks: Vec<String> },
    /// An output option names a file corral cannot write (`what`: the
    /// option, `--report`, `--events`, ...).
    #[error("{what} {}", path.display())]
    Unwritable {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("--output-dir {}: cannot create it", path.display())]
    OutputDir {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot start worker threads")]
    Workers(#[source] io::Error),
    #[error("cannot write the events to {name}")]
    Events {
        name: String,
        #[source]
        source: io::Error,
    },
    #[error("cannot write the report {}", path.display())]
    Report {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot write the JUnit report {}", path.display())]
    JUnit {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot write the Markdown table {}", path.display())]
    Markdown {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("merge: {file}: cannot read")]
    MergeRead {
        file: String,
        #[source]
        source: io::Error,
    },
    #[error("merge: {file}: not a JSON report")]
    MergeJson {
        file: String,
        #[source]
        source: serde_json::Error,
    },
    /// A shard report that is not one (`FILE: not a ... report`).
    #[error("merge: {0}")]
    NotAReport(String),
    /// The shard reports do not make one batch.
    #[error("merge")]
    Merge(#[from] MergeError),
}

/// An error and its sources, `: `-separated, as the CLI prints it.
pub fn render(e: &BatchError) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        s.push_str(": ");
        s.push_str(&cause.to_string());
        source = cause.source();
    }
    s
}

/// Why shard reports do not merge into one report (each names the files,
/// the shards or the run).
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error("no report given")]
    NoReport,
    /// A report that does not read as a shard report: `FILE: field ...`.
    #[error("{0}")]
    Invalid(String),
    #[error("{file} comes from a different manifest than {first} (fingerprint {fingerprint:?} vs {first_fingerprint:?})")]
    OtherManifest {
        file: String,
        first: String,
        fingerprint: String,
        first_fingerprint: String,
    },
    #[error("{file} ran with --task filters {filters:?} but {first} with {first_filters:?}")]
    OtherFilters {
        file: String,
        first: String,
        filters: Vec<String>,
        first_filters: Vec<String>,
    },
    #[error("{file} has a different plan (tasks, repeats, warmups) than {first}")]
    OtherPlan { file: String, first: String },
    /// `shard`: `shard K/N` or `not a shard (no --partition)`.
    #[error("{file} is {shard} but {first} is {first_shard}")]
    OtherCount {
        file: String,
        shard: String,
        first: String,
        first_shard: String,
    },
    #[error("{file} is not a shard (it ran without --partition), and {given} reports were given")]
    NotAShard { file: String, given: usize },
    #[error("shard {index}/{count} is given twice: {first} and {second}")]
    ShardTwice {
        index: u32,
        count: u32,
        first: String,
        second: String,
    },
    #[error("shard {index}/{count} is missing (its report was not given)")]
    ShardMissing { index: u32, count: u32 },
    #[error("{file}: field `plan[{index}].task`: task {task:?} is planned twice")]
    PlannedTwice {
        file: String,
        index: usize,
        task: String,
    },
    #[error("{file}: run {run} is not in the manifest's plan")]
    NotPlanned { file: String, run: String },
    #[error(
        "{file} (shard {index}/{count}) has run {run}, which belongs to shard {belongs}/{count}"
    )]
    WrongShard {
        file: String,
        index: u32,
        count: u32,
        run: String,
        belongs: u32,
    },
    #[error("run {run} appears twice: in {first} and in {second}")]
    RunTwice {
        run: String,
        first: String,
        second: String,
    },
    #[error("run {run} (shard {shard}/{count}) is missing from {file}{}", in_all(*.missing))]
    RunMissing {
        run: String,
        shard: u32,
        count: u32,
        file: String,
        missing: u64,
    },
}

/// ` (N runs missing in all)` when more than one is.
fn in_all(missing: u64) -> String {
    if missing > 1 {
        format!(" ({missing} runs missing in all)")
    } else {
        String::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each error once: the source follows the message, never inside it.
    #[test]
    fn the_source_is_printed_once() {
        let gone = || io::Error::new(io::ErrorKind::NotFound, "gone");
        let cases: Vec<(BatchError, &str)> = vec![
            (
                BatchError::Unwritable {
                    what: "--junit",
                    path: "d/j.xml".into(),
                    source: gone(),
                },
                "--junit d/j.xml: gone",
            ),
            (
                BatchError::OutputDir {
                    path: "out".into(),
                    source: gone(),
                },
                "--output-dir out: cannot create it: gone",
            ),
            (
                BatchError::ManifestRead {
                    file: "m.toml".into(),
                    source: gone(),
                },
                "m.toml: cannot read the manifest: gone",
            ),
            (
                BatchError::ManifestStdin(gone()),
                "<stdin>: cannot read the manifest from standard input: gone",
            ),
            (
                BatchError::Workers(gone()),
                "cannot start worker threads: gone",
            ),
            (
                BatchError::Events {
                    name: "-".into(),
                    source: gone(),
                },
                "cannot write the events to -: gone",
            ),
            (
                BatchError::Report {
                    path: "r.json".into(),
                    source: gone(),
                },
                "cannot write the report r.json: gone",
            ),
            (
                BatchError::MergeRead {
                    file: "a.json".into(),
                    source: gone(),
                },
                "merge: a.json: cannot read: gone",
            ),
            (
                BatchError::NoTask {
                    pattern: "x*".into(),
                    tasks: vec!["a".into(), "b".into()],
                },
                "--task \"x*\" matches no task (tasks: a, b)",
            ),
            (
                BatchError::Partition {
                    spec: "0/3".into(),
                    why: "the shard must be from 1 to 3".into(),
                },
                "--partition \"0/3\": the shard must be from 1 to 3",
            ),
        ];
        for (e, want) in cases {
            assert!(!e.to_string().contains("gone"), "{e}");
            assert_eq!(render(&e), want);
            assert!(render(&e).matches("gone").count() <= 1, "{want}");
        }
    }

    /// A merge error is said once, after `merge`.
    #[test]
    fn merge_errors_follow_merge() {
        let cases = [
            (
                MergeError::ShardMissing { index: 3, count: 3 },
                "merge: shard 3/3 is missing (its report was not given)",
            ),
            (
                MergeError::RunMissing {
                    run: "a#1".into(),
                    shard: 2,
                    count: 3,
                    file: "p2.json".into(),
                    missing: 1,
                },
                "merge: run a#1 (shard 2/3) is missing from p2.json",
            ),
            (
                MergeError::RunMissing {
                    run: "a#1".into(),
                    shard: 2,
                    count: 3,
                    file: "p2.json".into(),
                    missing: 4,
                },
                "merge: run a#1 (shard 2/3) is missing from p2.json (4 runs missing in all)",
            ),
        ];
        for (e, want) in cases {
            let e = BatchError::from(e);
            assert_eq!(e.to_string(), "merge");
            assert_eq!(render(&e), want);
        }
    }
}
