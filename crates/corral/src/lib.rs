//! corral runs a command with a deadline and keeps four promises:
//!
//! 1. **Bounded return.** [`Running::wait`] comes back in bounded time, even
//!    when a grandchild keeps the captured output open after the root exits,
//!    ignores SIGTERM, or is stopped.
//! 2. **Nothing left behind.** The whole tree is contained (a process group
//!    on Unix; cgroups and job objects where available) and killed on
//!    timeout, cancellation, output held past the wait delay and nonzero
//!    exit. After a clean exit 0, descendants that closed their output may
//!    keep running ([`LeftoverPolicy`]).
//! 3. **Never the wrong process.** The identity used to signal (an unreaped
//!    group leader, a cgroup directory, a job handle) is held until the last
//!    signal and released exactly once.
//! 4. **The truth about what happened.** [`Report::exit_code`] returns a code
//!    only when every lifecycle step was clean; timeouts, cancellation, held
//!    output, signals, spawn, containment and cleanup failures are all
//!    distinct.
//!
//! ```no_run
//! use std::time::Duration;
//! use corral::{Command, Outcome};
//!
//! let report = Command::new("sh")
//!     .args(["-c", "echo hello; sleep 100 & exit 0"])
//!     .timeout(Duration::from_secs(10))
//!     .wait_delay(Duration::from_millis(500))
//!     .run()?;
//! // The backgrounded sleep held stdout: it was killed after 500 ms.
//! assert_eq!(report.outcome, Outcome::OutputHeld);
//! assert_eq!(report.stdout.bytes(), b"hello\n");
//! # Ok::<(), corral::Error>(())
//! ```
//!
//! [`Report::check`] turns a run into a `Result` for `?` (`Ok` only for a
//! clean exit 0); [`Running::signal`] signals the whole tree while the run
//! is held. The few switches that change the whole host process (a child
//! subreaper, orphan reaping, a one-shot process, the keeper's start, the
//! descriptor limit) are grouped in [`process_wide`].
//!
//! Features: `tokio` (Unix) adds `Command::spawn_async`; `serde` adds the
//! typed report document (`document`: `RunReport`) and the
//! request's (`document::RunSpec`, every option of a run as plain values,
//! and `Command::from_spec`), makes
//! [`Report`] serialise to the documented JSON report (docs/report-schema.json
//! in the repository) and the small types (`Outcome`, `Signal`, `Mechanism`,
//! ...) serialise and deserialise; `schema` derives their JSON Schema
//! (`document::run_report_schema`, `document::run_spec_schema`).
//!
//! The crate is organised as the lifecycle (`lifecycle`, one state machine
//! for all platforms), the containment mechanisms behind one internal trait
//! (`contain`), and a thin platform layer (`sys`).

#![warn(missing_docs)]
// Examples (here and in the README) compile without a warning.
#![doc(test(attr(deny(warnings))))]
#![cfg_attr(docsrs, feature(doc_cfg))]
// Where no process can be started (`sys::unsupported`: neither Unix nor
// Windows), every run fails at the spawn, so the lifecycle past it is
// compiled but unreachable.
#![cfg_attr(not(any(unix, windows)), allow(dead_code, unused_variables))]

#[cfg(tokio_unix)]
mod asynchronous;
mod cancel;
mod capture;
mod command;
mod contain;
#[cfg(feature = "serde")]
pub mod document;
mod error;
mod lifecycle;
pub mod process_wide;
mod report;
mod sandbox;
#[cfg(unix)]
pub mod session;
mod signal;
mod spec;
mod sys;

/// The keeper's codec, for the fuzz target `keeper_codec` (`fuzz/`; cargo
/// fuzz builds with `--cfg fuzzing`). Not part of the API.
#[cfg(all(fuzzing, linux_raw))]
#[doc(hidden)]
pub use sys::linux_spawn::keeper::fuzzing as fuzz_keeper_protocol;

#[cfg(tokio_unix)]
pub use asynchronous::AsyncRunning;
pub use cancel::CancelToken;
pub use capture::Captured;
pub use command::Command;
/// How many members of a process group the tier pins at once (tests
/// reason about its scans with it). Not part of the API.
#[cfg(all(feature = "test-util", unix))]
#[doc(hidden)]
pub use contain::process_group::PINS_MAX as PROCESS_GROUP_PINS_MAX;
pub use contain::ContainmentChoice;
#[cfg(feature = "test-util")]
pub use contain::OsOp;
pub use error::{Error, SpawnErrorKind};
pub use lifecycle::{PtyWindow, Running};
pub use report::{
    CleanupError, CleanupStep, CrashSafety, Leftovers, LimitHit, Mechanism, Outcome, Report,
    RootStatus, RunError, SandboxDenial, SandboxObservation, SandboxReport, SandboxRule,
    TimeoutKind, Timings, UnknownMechanism, Usage,
};
#[cfg(unix)]
pub use session::{Job, RunOptions, Session, SessionEnd, SessionOptions, SessionReport};
pub use signal::{Signal, UnknownSignal};
pub use spec::{Input, LeftoverPolicy, LineCallback, Network, Output, PtySize, Sandbox, Stream};

/// The README's Rust examples, compiled with the doctests (and denied
/// warnings) so that they cannot drift from the library.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeExamples;

/// The Rust examples of docs/library.md, compiled with the doctests as the
/// README's are.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/library.md")]
pub struct LibraryDocExamples;
