//! The platform layer where corral cannot start processes (targets that are
//! neither Unix nor Windows, such as `wasm32-wasip1`): the same items as
//! `unix` and `windows`, with the same signatures, so the library builds
//! there and every run fails at the spawn with an `Unsupported` error.
//! Nothing here is ever constructed: a pipe or a root cannot exist, so their
//! types have no values and their methods cannot be called.

use std::fs::File;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use super::{Interest, Placement, Ready, SpawnError, SpawnSpec};
use crate::cancel::Wake;
use crate::report::CrashSafety;
use crate::report::RootStatus;

fn unsupported() -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        "corral cannot start processes on this platform",
    )
}

/// The root process: none can exist here.
pub(crate) enum Root {}

impl Root {
    pub(crate) fn id(&self) -> u32 {
        match *self {}
    }

    pub(crate) fn terminating(&mut self) {
        match *self {}
    }

    pub(crate) fn look_for_exit(&self) {
        match *self {}
    }

    pub(crate) fn peek_exit(&mut self) -> io::Result<Option<RootStatus>> {
        match *self {}
    }

    pub(crate) fn reap(&mut self) -> io::Result<()> {
        match *self {}
    }

    pub(crate) fn kill(&mut self) {
        match *self {}
    }

    pub(crate) fn exit_watch_error(&mut self) -> Option<io::Error> {
        match *self {}
    }

    pub(crate) fn crash_safety(&self) -> CrashSafety {
        match *self {}
    }
}

/// corral's end of a pipe: none can exist here.
pub(crate) enum PipeEnd {}

/// What one read of a [`PipeEnd`] gave.
#[allow(dead_code)]
pub(crate) enum ReadResult {
    Data(usize),
    Eof,
    WouldBlock,
}

impl PipeEnd {
    pub(crate) fn read(&self, _buf: &mut [u8]) -> io::Result<ReadResult> {
        match *self {}
    }

    pub(crate) fn writers_gone(&self) -> bool {
        match *self {}
    }

    pub(crate) fn write(&self, _buf: &[u8]) -> io::Result<usize> {
        match *self {}
    }
}

/// A pipe: refused.
pub(crate) fn pipe(_child_writes: bool) -> io::Result<(PipeEnd, File)> {
    Err(unsupported())
}

/// Starting the root: refused.
pub(crate) fn spawn(_spec: SpawnSpec<'_>, _placement: Placement<'_>) -> Result<Root, SpawnError> {
    Err(SpawnError::Spawn(unsupported()))
}

/// A waker with nothing to wake: no wait can start here.
struct NoWaker;

impl Wake for NoWaker {
    fn wake(&self) {}
}

/// The sleeping point of the lifecycle: never reached here (a wait needs a
/// root).
pub(crate) struct Poller;

impl Poller {
    pub(crate) fn new() -> io::Result<Poller> {
        Ok(Poller)
    }

    pub(crate) fn waker(&self) -> Arc<dyn Wake> {
        Arc::new(NoWaker)
    }

    pub(crate) fn root_exit_wakes(root: &Root) -> bool {
        match *root {}
    }

    pub(crate) fn wait(
        &mut self,
        root: &Root,
        _interest: Interest<'_>,
        _timeout: Option<Duration>,
    ) -> io::Result<Ready> {
        match *root {}
    }
}
