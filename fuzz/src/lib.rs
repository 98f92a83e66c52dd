//! corral's fuzz targets (docs/FUZZING.md). Each `fuzz_targets/NAME.rs`
//! calls the function of the same name here, which asserts what holds of
//! every input (round trips, parse ∘ display = id), not only "no panic".
//!
//! The CLI (`crates/corral-cli`) is a binary-only crate: this crate
//! compiles its modules itself (the list below mirrors `main.rs`, less the
//! C entry point `start.rs`), so the targets reach its parsers with no
//! library target added to the CLI, and `crate::` paths in those modules
//! resolve here as they do there. A module added to `main.rs` is added
//! here too (`.ci/run`'s fuzz smoke run builds this crate).
//! The keeper's codec lives in the library, behind `#[cfg(fuzzing)]`
//! (cargo fuzz builds every crate with `--cfg fuzzing`).

#![allow(dead_code, unused_imports, clippy::all)]

#[path = "../../crates/corral-cli/src/args.rs"]
mod args;
#[path = "../../crates/corral-cli/src/batch/mod.rs"]
mod batch;
#[path = "../../crates/corral-cli/src/dispositions.rs"]
mod dispositions;
#[path = "../../crates/corral-cli/src/duration.rs"]
mod duration;
#[path = "../../crates/corral-cli/src/exit.rs"]
mod exit;
#[path = "../../crates/corral-cli/src/generate.rs"]
mod generate;
#[path = "../../crates/corral-cli/src/gnu.rs"]
mod gnu;
#[path = "../../crates/corral-cli/src/json.rs"]
mod json;
#[path = "../../crates/corral-cli/src/mcp/mod.rs"]
mod mcp;
#[path = "../../crates/corral-cli/src/outfile.rs"]
mod outfile;
#[path = "../../crates/corral-cli/src/pty.rs"]
mod pty;
#[path = "../../crates/corral-cli/src/reference.rs"]
mod reference;
#[path = "../../crates/corral-cli/src/run.rs"]
mod run;
#[path = "../../crates/corral-cli/src/sandbox_flags.rs"]
mod sandbox_flags;
#[path = "../../crates/corral-cli/src/signals.rs"]
mod signals;
#[path = "../../crates/corral-cli/src/text.rs"]
mod text;
#[path = "../../crates/corral-cli/src/timeout.rs"]
mod timeout;
#[path = "../../crates/corral-cli/src/tty.rs"]
mod tty;

mod merge_target;
mod targets;
pub use targets::*;
