//! The failures of `corral batch` and `corral merge`: typed, each
//! `Display` saying what failed without repeating its source (the source
//! is printed after it by [`render`], once, at the edge: nextest's rule).

use std::error::Error as _;
use std::io;
use std::path::PathBuf;

use super::manifest::ManifestError;
use super::merge::MergeError;

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
