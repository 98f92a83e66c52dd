//! What the builder hands the lifecycle for one spawn: plain values (the
//! program, arguments and environment borrowed, the knobs copied) and the
//! three streams, which the spawn takes (files, relays) only once it goes
//! ahead. `Command::spawn` builds it; the lifecycle never reads the
//! builder.

use std::ffi::{OsStr, OsString};
use std::path::Path;

use crate::cancel::CancelToken;
use crate::contain::{ContainmentChoice, Limits, Tracer};
use crate::spec::{Input, Output, PtySize, Settings, SharedLineCallback};

/// One spawn, planned.
pub(crate) struct Plan<'a> {
    pub(crate) program: &'a OsStr,
    pub(crate) args: &'a [OsString],
    pub(crate) env: &'a [(OsString, Option<OsString>)],
    pub(crate) env_clear: bool,
    pub(crate) cwd: Option<&'a Path>,
    pub(crate) stdin: &'a mut Input,
    pub(crate) stdout: &'a mut Output,
    pub(crate) stderr: &'a mut Output,
    /// Run on a new pseudo-terminal of this size.
    pub(crate) pty: Option<PtySize>,
    pub(crate) settings: Settings,
    pub(crate) containment: ContainmentChoice,
    pub(crate) limits: Limits,
    pub(crate) cancel: CancelToken,
    pub(crate) on_line: Option<SharedLineCallback>,
    pub(crate) tracer: Tracer,
    pub(crate) setup: &'a crate::spec::ChildSetup,
}
