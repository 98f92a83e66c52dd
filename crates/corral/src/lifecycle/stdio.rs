//! The standard streams of a run: wiring them before the spawn (what the
//! child gets, what corral keeps), reading the captured ones without
//! blocking, feeding stdin.

use std::io::{self, Write};
use std::sync::Arc;
use std::time::Instant;

use super::relay::Relay;
use crate::cancel::Wake;
use crate::capture::{Captured, LineSplitter, OutputMeter};
use crate::spec::{InputKind, OutputKind, PtySize, SharedLineCallback, Stream};
use crate::sys::{self, ChildIo, PipeEnd, ReadResult};
use crate::Error;

const READ_CHUNK: usize = 128 * 1024;
/// Batching of busy captured streams (see `StreamIo::pump`).
#[cfg(target_os = "linux")]
const BATCH_AFTER: usize = 1 << 20;
#[cfg(target_os = "linux")]
const BATCH_SMALL: usize = 64 * 1024;
#[cfg(target_os = "linux")]
const BATCH_PIPE: usize = 1 << 20;
#[cfg(target_os = "linux")]
const BATCH_WAIT: std::time::Duration = std::time::Duration::from_micros(100);

/// One captured or relayed output stream: corral's end of the pipe and
/// what is done with what comes out of it.
pub(super) struct StreamIo {
    which: Stream,
    pub(super) pipe: Option<PipeEnd>,
    pub(super) capture: Captured,
    lines: Option<LineSplitter>,
    relay: Option<Relay>,
    /// The run's output limit and idle timer, shared by its streams.
    meter: Option<Arc<OutputMeter>>,
    /// A busy stream in a large pipe is not waited on until then, so that
    /// a wake reads a batch instead of each small write (see `pump`).
    pub(super) rest_until: Option<Instant>,
    /// The pipe was enlarged for batching (Linux), or could not be.
    #[cfg(target_os = "linux")]
    enlarged: Option<bool>,
    /// A zero-copy relay thread owns the pipe instead (Linux).
    #[cfg(target_os = "linux")]
    splice: Option<sys::linux_splice::SpliceRelay>,
    /// The "pipe" is a pseudo-terminal's master: its holders are not found
    /// by a pipe inode.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    is_tty: bool,
}

impl StreamIo {
    /// A run started late ([`super::Running::start_now`]): the capture limit
    /// and the meter are these from now (what was captured before, if
    /// anything, is kept under the old limit).
    #[cfg(unix)]
    pub(super) fn rearm(&mut self, capture_limit: Option<usize>, meter: Option<Arc<OutputMeter>>) {
        if let Some(limit) = capture_limit.filter(|_| self.capture.total_bytes() == 0) {
            self.capture = Captured::with_cap(limit);
        }
        self.meter = meter;
    }

    /// A stream `which` read from `pipe` (none when a splice relay owns
    /// it), kept as `settings` say and copied to `relay`.
    fn new(
        which: Stream,
        pipe: Option<PipeEnd>,
        relay: Option<Box<dyn Write + Send>>,
        settings: &StreamSettings,
        waker: &Arc<dyn Wake>,
    ) -> StreamIo {
        StreamIo {
            which,
            pipe,
            capture: Captured::with_cap(settings.capture_limit),
            lines: settings
                .lines
                .then(|| LineSplitter::new(settings.line_limit)),
            relay: relay.map(|w| Relay::start(w, waker.clone())),
            meter: settings.meter.clone(),
            rest_until: None,
            #[cfg(target_os = "linux")]
            enlarged: None,
            #[cfg(target_os = "linux")]
            splice: None,
            is_tty: false,
        }
    }

    /// Whether the child's side may still write to this stream.
    pub(super) fn is_open(&self) -> bool {
        #[cfg(target_os = "linux")]
        if let Some(sp) = &self.splice {
            return sp.is_open();
        }
        self.pipe.is_some()
    }

    /// Whether nothing can be written to this stream any more (every write
    /// end of the child's pipe is closed), even if bytes are still in it.
    pub(super) fn writers_gone(&self) -> bool {
        #[cfg(target_os = "linux")]
        if let Some(sp) = &self.splice {
            return sp.writers_gone();
        }
        self.pipe.as_ref().is_none_or(PipeEnd::writers_gone)
    }

    /// The inode of the child's pipe (Linux), to find who holds it.
    #[cfg(target_os = "linux")]
    pub(super) fn inode(&self) -> Option<u64> {
        if let Some(sp) = &self.splice {
            return sp.inode();
        }
        if self.is_tty {
            // Its holders hold the slave, not this: any live member of the
            // tree may be one.
            return None;
        }
        self.pipe.as_ref().and_then(PipeEnd::inode)
    }

    /// Closes corral's end and hands the last partial line (if any) to the
    /// line callback.
    pub(super) fn close(&mut self, on_line: Option<&SharedLineCallback>) {
        self.pipe = None;
        if let (Some(lines), Some(cb)) = (self.lines.as_mut(), on_line) {
            let which = self.which;
            let mut cb = cb.lock().unwrap_or_else(|e| e.into_inner());
            lines.finish(&mut |l| cb(which, l));
        }
    }

    /// Lets the relay (or the zero-copy relay) write out what it has,
    /// until `until` at most.
    pub(super) fn finish_relay(&mut self, until: Instant) {
        if let Some(r) = self.relay.take() {
            r.finish(until);
        }
        #[cfg(target_os = "linux")]
        if let Some(sp) = self.splice.take() {
            // What the tree wrote before it ended is still relayed.
            let n = sp.finish(std::time::Duration::from_millis(100), until);
            self.capture.count_uncaptured(n);
        }
    }

    /// Reads what the pipe has now, without blocking: at most `max_reads`
    /// reads, fewer when the relay is full.
    pub(super) fn pump(&mut self, on_line: Option<&SharedLineCallback>, max_reads: usize) {
        let s = self;
        if s.relay.as_ref().is_some_and(Relay::is_broken) {
            // The relay's reader went away: close our end too, so the child
            // sees EPIPE/SIGPIPE exactly as it would in a plain pipeline
            // instead of being drained forever.
            s.pipe = None;
            return;
        }
        // One read buffer per thread, shared by every run it supervises: a
        // thousand runs awaited on one thread do not each hold 128 KiB.
        thread_local! {
            static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        let got = BUF.with_borrow_mut(|buf| {
            if buf.len() < READ_CHUNK {
                buf.resize(READ_CHUNK, 0);
            }
            s.read_into(on_line, buf, max_reads)
        });
        s.rest_until = None;
        // Batching for a busy stream (Linux): a writer of small chunks wakes
        // a reader per chunk, and each wake costs a poll and a read. Once a
        // stream has carried BATCH_AFTER bytes, its pipe is enlarged, and
        // after a wake that found little the pipe is left out of the wait
        // for BATCH_WAIT, so the next wake reads a batch. The root, the tree
        // and the timers are still waited on; only this pipe's data waits
        // (at most BATCH_WAIT), and the writer does not block meanwhile.
        #[cfg(target_os = "linux")]
        if s.pipe.is_some() && got < BATCH_SMALL && s.capture.total_bytes() >= BATCH_AFTER as u64 {
            let big = *s.enlarged.get_or_insert_with(|| {
                s.pipe
                    .as_ref()
                    .and_then(|p| p.enlarge(BATCH_PIPE).ok())
                    .is_some_and(|n| n >= BATCH_PIPE)
            });
            if big {
                s.rest_until = Some(super::phase::later(Instant::now(), BATCH_WAIT));
            }
        }
        #[cfg(not(target_os = "linux"))]
        let _ = got;
    }

    fn read_into(
        &mut self,
        on_line: Option<&SharedLineCallback>,
        buf: &mut [u8],
        max_reads: usize,
    ) -> usize {
        let s = self;
        let mut got = 0;
        for _ in 0..max_reads {
            let Some(pipe) = s.pipe.as_ref() else {
                return got;
            };
            if s.relay.as_ref().is_some_and(|r| r.is_full()) {
                return got;
            }
            // Straight into the capture's head or tail ring where it can
            // take the read; through the shared buffer otherwise.
            let (res, asked, direct) = match s.capture.spare(buf.len()) {
                Some(region) => (pipe.read(region), region.len(), true),
                None => (pipe.read(buf), buf.len(), false),
            };
            match res {
                Ok(ReadResult::Data(n)) => {
                    // Past the output limit, bytes are counted, not kept.
                    let keep = s.meter.as_ref().map_or(n, |m| m.admit(n));
                    if keep < n {
                        s.capture.count_uncaptured((n - keep) as u64);
                    }
                    let data = if direct {
                        s.capture.commit(keep)
                    } else {
                        s.capture.push(&buf[..keep]);
                        &buf[..keep]
                    };
                    if let Some(r) = s.relay.as_ref().filter(|_| !data.is_empty()) {
                        r.push(data);
                    }
                    if let (Some(lines), Some(cb)) = (s.lines.as_mut(), on_line) {
                        let which = s.which;
                        let mut cb = cb.lock().unwrap_or_else(|e| e.into_inner());
                        lines.feed(data, &mut |l| cb(which, l));
                    }
                    // A short read drained the pipe; a full one (of a region
                    // that may end before the buffer's size) may not have.
                    got += n;
                    if n < asked {
                        return got;
                    }
                }
                Ok(ReadResult::WouldBlock) => return got,
                Ok(ReadResult::Eof) | Err(_) => {
                    s.pipe = None;
                    return got;
                }
            }
        }
        got
    }
}

/// Bytes given as the child's stdin, written as the pipe takes them.
pub(super) struct StdinFeed {
    pub(super) pipe: PipeEnd,
    data: Arc<[u8]>,
    pos: usize,
}

impl StdinFeed {
    /// Writes what the pipe takes now. Returns true when done (everything
    /// written, or the child closed its stdin (EPIPE) or it broke): then
    /// drop the feed, which gives the child end of file.
    pub(super) fn feed(&mut self) -> bool {
        match self.pipe.write(&self.data[self.pos..]) {
            Ok(n) => {
                self.pos += n;
                self.pos >= self.data.len()
            }
            Err(_) => true,
        }
    }
}

/// A run's two captured streams (stdout, stderr), each boxed: a run whose
/// output goes elsewhere (`/dev/null`, a file, inherited) keeps two empty
/// slots of a pointer each, not two stream states (figure 5: 10,000
/// concurrent runs).
pub(super) type Streams = [Option<Box<StreamIo>>; 2];

/// What the captured streams keep.
#[derive(Debug, Clone)]
pub(super) struct StreamSettings {
    pub(super) capture_limit: usize,
    pub(super) line_limit: usize,
    /// A line callback is set: split the output into lines.
    pub(super) lines: bool,
    /// The output limit and idle timer (when either is set).
    pub(super) meter: Option<Arc<OutputMeter>>,
}

/// The streams of one run, wired: the child's ends (moved into the spawn)
/// and corral's.
pub(super) struct Wired {
    pub(super) stdin: ChildIo,
    pub(super) stdout: ChildIo,
    pub(super) stderr: ChildIo,
    pub(super) feed: Option<StdinFeed>,
    pub(super) streams: Streams,
    pub(super) pty: Option<PtyRun>,
}

/// A run's pseudo-terminal, as corral keeps it: the master (also read as
/// the stdout stream) and the input relay's thread, stopped on drop.
pub(super) struct PtyRun {
    #[cfg(unix)]
    master: sys::SharedFd,
    #[cfg(unix)]
    _input: sys::pty::InputRelay,
}

impl PtyRun {
    /// A handle on the terminal's window size.
    pub(super) fn window(&self) -> PtyWindow {
        PtyWindow {
            #[cfg(unix)]
            master: self.master.clone(),
        }
    }
}

/// The window size of a run's pseudo-terminal
/// ([`Command::pty`](crate::Command::pty)), from any thread, while it runs
/// (see [`Running::pty_window`](crate::Running::pty_window)): a caller
/// whose own terminal was resized (SIGWINCH) passes its new size on, and
/// the kernel sends SIGWINCH to the terminal's foreground group.
#[derive(Clone)]
pub struct PtyWindow {
    #[cfg(unix)]
    master: sys::SharedFd,
}

impl std::fmt::Debug for PtyWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PtyWindow").finish_non_exhaustive()
    }
}

impl PtyWindow {
    /// Sets the window size.
    pub fn resize(&self, size: PtySize) -> io::Result<()> {
        #[cfg(unix)]
        return sys::pty::resize(&*self.master, size.cols, size.rows);
        #[cfg(not(unix))]
        {
            let _ = size;
            Err(io::ErrorKind::Unsupported.into())
        }
    }

    /// The window size now.
    pub fn size(&self) -> io::Result<PtySize> {
        #[cfg(unix)]
        return sys::pty::size_of(&*self.master).map(|(cols, rows)| PtySize { cols, rows });
        #[cfg(not(unix))]
        Err(io::ErrorKind::Unsupported.into())
    }
}

/// Wires the three streams: a pipe corral reads (capture, relay) or
/// writes (bytes as stdin), or a handle given to the child as is.
pub(super) fn wire(
    stdin: InputKind,
    stdout: OutputKind,
    stderr: OutputKind,
    pty: Option<PtySize>,
    settings: StreamSettings,
    waker: &Arc<dyn Wake>,
    io_err: &dyn Fn(io::Error) -> Error,
) -> Result<Wired, Error> {
    if let Some(size) = pty {
        return wire_pty(stdin, stdout, size, settings, waker, io_err);
    }
    let (stdin_io, feed) = wire_stdin(stdin, io_err)?;
    let (stdout_io, out) = wire_output(Stream::Stdout, stdout, &settings, waker, io_err)?;
    let (stderr_io, err) = match stderr {
        OutputKind::MergeWithStdout => (merged_stderr(&stdout_io, out.is_some(), io_err)?, None),
        kind => wire_output(Stream::Stderr, kind, &settings, waker, io_err)?,
    };
    Ok(Wired {
        stdin: stdin_io,
        stdout: stdout_io,
        stderr: stderr_io,
        feed,
        streams: [out.map(Box::new), err.map(Box::new)],
        pty: None,
    })
}

/// Wires stdin: a handle given to the child as is, or a pipe corral feeds
/// the bytes into.
fn wire_stdin(
    stdin: InputKind,
    io_err: &dyn Fn(io::Error) -> Error,
) -> Result<(ChildIo, Option<StdinFeed>), Error> {
    Ok(match stdin {
        InputKind::Null => (ChildIo::Null, None),
        InputKind::Inherit => (ChildIo::Inherit, None),
        InputKind::File(f) => (ChildIo::File(f), None),
        InputKind::Bytes(data) => {
            let (ours, theirs) = sys::pipe(false).map_err(io_err)?;
            let feed = StdinFeed {
                pipe: ours,
                data,
                pos: 0,
            };
            (ChildIo::File(theirs), Some(feed))
        }
    })
}

/// Wires one output: a pipe corral reads (capture or relay) or a handle
/// given to the child as is.
fn wire_output(
    which: Stream,
    kind: OutputKind,
    settings: &StreamSettings,
    waker: &Arc<dyn Wake>,
    io_err: &dyn Fn(io::Error) -> Error,
) -> Result<(ChildIo, Option<StreamIo>), Error> {
    let new_stream = |pipe, relay| StreamIo::new(which, pipe, relay, settings, waker);
    Ok(match kind {
        OutputKind::Capture => {
            let (ours, theirs) = sys::pipe(true).map_err(io_err)?;
            (ChildIo::File(theirs), Some(new_stream(Some(ours), None)))
        }
        OutputKind::Relay(w) => {
            let (ours, theirs) = sys::pipe(true).map_err(io_err)?;
            (ChildIo::File(theirs), Some(new_stream(Some(ours), Some(w))))
        }
        #[cfg(target_os = "linux")]
        OutputKind::RelayFile(dest) => {
            let (ours, theirs) = sys::pipe(true).map_err(io_err)?;
            let relay = sys::linux_splice::SpliceRelay::start(
                ours,
                dest,
                waker.clone(),
                settings.meter.clone(),
                sys::block_sigpipe_in_this_thread,
            )
            .map_err(io_err)?;
            let mut s = new_stream(None, None);
            s.splice = Some(relay);
            (ChildIo::File(theirs), Some(s))
        }
        #[cfg(not(target_os = "linux"))]
        OutputKind::RelayFile(dest) => {
            let (ours, theirs) = sys::pipe(true).map_err(io_err)?;
            let w: Box<dyn Write + Send> = Box::new(dest);
            (ChildIo::File(theirs), Some(new_stream(Some(ours), Some(w))))
        }
        OutputKind::Inherit => (ChildIo::Inherit, None),
        OutputKind::Null => (ChildIo::Null, None),
        OutputKind::File(f) => (ChildIo::File(f), None),
        OutputKind::MergeWithStdout => {
            return Err(Error::InvalidInput(
                "only stderr can be merged with stdout".into(),
            ))
        }
    })
}

/// Stderr merged with stdout: the child's stdout pipe, shared; only a
/// captured stdout can be merged into.
fn merged_stderr(
    stdout_io: &ChildIo,
    stdout_read: bool,
    io_err: &dyn Fn(io::Error) -> Error,
) -> Result<ChildIo, Error> {
    match (stdout_io, stdout_read) {
        (ChildIo::File(f), true) => Ok(ChildIo::File(f.try_clone().map_err(io_err)?)),
        _ => Err(Error::InvalidInput(
            "stderr can be merged with stdout only when stdout is captured".into(),
        )),
    }
}

/// Wires a run on a new pseudo-terminal: the slave is the child's three
/// streams; the master is read as stdout (captured and relayed as `stdout`
/// says) and written by the input relay (what `stdin` gives, then the
/// terminal's end-of-file character once).
#[cfg(unix)]
fn wire_pty(
    stdin: InputKind,
    stdout: OutputKind,
    size: PtySize,
    settings: StreamSettings,
    waker: &Arc<dyn Wake>,
    io_err: &dyn Fn(io::Error) -> Error,
) -> Result<Wired, Error> {
    use std::os::fd::{AsFd, OwnedFd};
    // Where what comes out goes, besides the capture.
    let relay: Option<Box<dyn Write + Send>> = match stdout {
        OutputKind::Capture => None,
        OutputKind::Relay(w) => Some(w),
        OutputKind::RelayFile(f) | OutputKind::File(f) => Some(Box::new(f)),
        OutputKind::Inherit => Some(Box::new(std::fs::File::from(
            io::stdout().as_fd().try_clone_to_owned().map_err(io_err)?,
        ))),
        OutputKind::Null => Some(Box::new(io::sink())),
        OutputKind::MergeWithStdout => {
            return Err(Error::InvalidInput(
                "only stderr can be merged with stdout".into(),
            ))
        }
    };
    let source = match stdin {
        InputKind::Null => sys::pty::InputSource::Nothing,
        InputKind::Bytes(b) => sys::pty::InputSource::Bytes(b),
        InputKind::File(f) => sys::pty::InputSource::Fd(OwnedFd::from(f)),
        // A closed stdin types nothing.
        InputKind::Inherit => match io::stdin().as_fd().try_clone_to_owned() {
            Ok(fd) => sys::pty::InputSource::Fd(fd),
            Err(_) => sys::pty::InputSource::Nothing,
        },
    };
    let opened = sys::pty::open(size.cols, size.rows).map_err(io_err)?;
    let eof = opened.eof;
    let (master, shared) = sys::pty_master(opened.master).map_err(io_err)?;
    let slave = opened.slave;
    let (slave_in, slave_out) = (
        slave.try_clone().map_err(io_err)?,
        slave.try_clone().map_err(io_err)?,
    );
    let input = sys::pty::InputRelay::start(source, shared.clone(), eof).map_err(io_err)?;
    let mut stream = StreamIo::new(Stream::Stdout, Some(master), relay, &settings, waker);
    stream.is_tty = true;
    #[cfg(target_os = "linux")]
    {
        // A terminal is not a pipe: never enlarged for batching.
        stream.enlarged = Some(false);
    }
    Ok(Wired {
        stdin: ChildIo::File(slave_in),
        stdout: ChildIo::File(slave_out),
        stderr: ChildIo::File(slave),
        feed: None,
        streams: [Some(Box::new(stream)), None],
        pty: Some(PtyRun {
            master: shared,
            _input: input,
        }),
    })
}

#[cfg(not(unix))]
fn wire_pty(
    _stdin: InputKind,
    _stdout: OutputKind,
    _size: PtySize,
    _settings: StreamSettings,
    _waker: &Arc<dyn Wake>,
    _io_err: &dyn Fn(io::Error) -> Error,
) -> Result<Wired, Error> {
    Err(Error::InvalidInput(
        "a pseudo-terminal (Command::pty, --pty) is not available on Windows".into(),
    ))
}

/// The captured pipes worth waiting on (not those whose relay is full).
pub(super) fn watched_outputs(streams: &Streams) -> [Option<&PipeEnd>; 2] {
    let now = streams
        .iter()
        .flatten()
        .any(|s| s.rest_until.is_some())
        .then(Instant::now);
    [0, 1].map(|i| {
        streams[i]
            .as_ref()
            .filter(|s| s.relay.as_ref().is_none_or(|r| !r.is_full()))
            .filter(|s| match (s.rest_until, now) {
                (Some(r), Some(now)) => r <= now,
                _ => true,
            })
            .and_then(|s| s.pipe.as_ref())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    struct NoWake;

    impl Wake for NoWake {
        fn wake(&self) {}
    }

    fn wired(stdout: OutputKind, stderr: OutputKind) -> Result<Wired, Error> {
        let waker: Arc<dyn Wake> = Arc::new(NoWake);
        let settings = StreamSettings {
            capture_limit: 1024,
            line_limit: 1024,
            lines: false,
            meter: None,
        };
        let io_err = |e: io::Error| Error::spawn("x".into(), e);
        let stdin = InputKind::Bytes(Arc::from(&b"in"[..]));
        wire(stdin, stdout, stderr, None, settings, &waker, &io_err)
    }

    fn invalid(r: Result<Wired, Error>) -> String {
        match r {
            Err(Error::InvalidInput(m)) => m,
            Err(e) => panic!("not invalid input: {e}"),
            Ok(_) => panic!("wired"),
        }
    }

    #[test]
    fn each_stream_is_wired_as_asked() {
        let w = wired(OutputKind::Capture, OutputKind::Null).unwrap();
        assert!(matches!(w.stdin, ChildIo::File(_)));
        assert!(w.feed.as_ref().is_some_and(|f| &*f.data == b"in"));
        assert!(matches!(w.stdout, ChildIo::File(_)));
        assert!(matches!(w.stderr, ChildIo::Null));
        assert!(w.streams[0]
            .as_ref()
            .is_some_and(|s| s.which == Stream::Stdout));
        assert!(w.streams[1].is_none() && w.pty.is_none());

        let w = wired(OutputKind::Inherit, OutputKind::Capture).unwrap();
        assert!(matches!(w.stdout, ChildIo::Inherit));
        assert!(w.streams[0].is_none());
        assert!(w.streams[1]
            .as_ref()
            .is_some_and(|s| s.which == Stream::Stderr));
    }

    #[test]
    fn stderr_merges_only_into_a_captured_stdout() {
        let w = wired(OutputKind::Capture, OutputKind::MergeWithStdout).unwrap();
        assert!(matches!(w.stderr, ChildIo::File(_)));
        assert!(w.streams[0].is_some() && w.streams[1].is_none());
        assert_eq!(
            invalid(wired(OutputKind::Null, OutputKind::MergeWithStdout)),
            "stderr can be merged with stdout only when stdout is captured"
        );
        assert_eq!(
            invalid(wired(OutputKind::MergeWithStdout, OutputKind::Null)),
            "only stderr can be merged with stdout"
        );
    }
}
