//! The platform layer: one module per OS family with the same small set of
//! items (`Root`, `PipeEnd`, `Poller`, `pipe`, `spawn`, ...), chosen at
//! compile time.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::path::Path;

#[cfg(target_os = "linux")]
pub(crate) mod linux_proc;
#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
pub(crate) mod linux_spawn;
#[cfg(target_os = "linux")]
pub(crate) mod linux_splice;
#[cfg(unix)]
mod unix;
#[cfg(unix)]
pub(crate) use unix::*;
#[cfg(windows)]
mod windows;
#[cfg(windows)]
pub(crate) use windows::*;

/// One of the child's standard streams.
pub(crate) enum ChildIo {
    /// The null device.
    Null,
    /// The caller's own stream.
    Inherit,
    /// This handle (a pipe end or a file), moved into the child.
    File(File),
}

/// Everything needed to start the root process.
pub(crate) struct SpawnSpec<'a> {
    pub(crate) program: &'a OsStr,
    pub(crate) args: &'a [OsString],
    pub(crate) env: &'a [(OsString, Option<OsString>)],
    pub(crate) env_clear: bool,
    pub(crate) cwd: Option<&'a Path>,
    pub(crate) stdin: ChildIo,
    pub(crate) stdout: ChildIo,
    pub(crate) stderr: ChildIo,
}

/// Why a spawn failed: the containment could not be set up, or the
/// program could not be started.
pub(crate) enum SpawnError {
    Contain(io::Error),
    Spawn(io::Error),
}
