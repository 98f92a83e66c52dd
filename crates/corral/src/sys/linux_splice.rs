//! Zero-copy relay of one output stream (Linux): a thread moves bytes from
//! the child's pipe to corral's own stdout/stderr (a pipe or a socket) with
//! `splice(2)`, so the bytes never enter user space and the supervising
//! loop is not woken per chunk.
//!
//! The thread ends at end of file (every holder closed the pipe), when the
//! destination breaks (its reader went away: the thread closes the child's
//! pipe so the child sees EPIPE/SIGPIPE, as in a plain pipeline), or when the
//! lifecycle asks it to stop. It reports end of file and the byte count
//! through shared atomics and wakes the lifecycle.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::pipe::{splice, SpliceFlags};

use super::PipeEnd;
use crate::cancel::Wake;

const CHUNK: usize = 1 << 20;
/// Moves smaller than this wait `BATCH_WAIT` before the next one.
const BATCH: usize = 64 * 1024;
const BATCH_WAIT: Duration = Duration::from_micros(100);

#[derive(Default)]
struct Shared {
    open: AtomicBool,
    broken: AtomicBool,
    bytes: AtomicU64,
}

/// A running splice relay.
pub(crate) struct SpliceRelay {
    shared: Arc<Shared>,
    /// The child's pipe, owned by the thread (which closes it when it ends:
    /// the child then sees EPIPE if its destination broke); looked at
    /// without keeping it open.
    src: Weak<PipeEnd>,
    stop_tx: OwnedFd,
    /// The stop pipe's read end, held here too: the thread may have ended
    /// (and dropped its copy) when [`SpliceRelay::finish`] writes the stop
    /// byte, and a write to a pipe without readers would raise SIGPIPE in
    /// the host.
    _stop_rx: Arc<OwnedFd>,
    thread: Option<JoinHandle<()>>,
}

impl SpliceRelay {
    /// Starts relaying `src` (the non-blocking read end of the child's pipe)
    /// into `dest`. The thread first calls `thread_setup` (the caller blocks
    /// SIGPIPE there: a `splice` into a pipe without readers raises it on
    /// the calling thread, which must not end the host).
    pub(crate) fn start(
        src: PipeEnd,
        dest: File,
        waker: Arc<dyn Wake>,
        thread_setup: fn(),
    ) -> io::Result<SpliceRelay> {
        // A bigger pipe means fewer, larger moves; failure is harmless.
        let _ = rustix::pipe::fcntl_setpipe_size(&src.0, CHUNK);
        // Same for the destination when it is a pipe (EBADF/EINVAL otherwise).
        let _ = rustix::pipe::fcntl_setpipe_size(&dest, CHUNK);
        let (stop_rx, stop_tx) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        let stop_rx = Arc::new(stop_rx);
        let kept_rx = stop_rx.clone();
        let src = Arc::new(src);
        let weak = Arc::downgrade(&src);
        let shared = Arc::new(Shared {
            open: AtomicBool::new(true),
            ..Shared::default()
        });
        let sh = shared.clone();
        let thread = std::thread::Builder::new()
            .name("corral-splice".into())
            .spawn(move || {
                thread_setup();
                let broken = run(&src, &dest, &stop_rx, &sh.bytes);
                if broken {
                    sh.broken.store(true, Ordering::SeqCst);
                }
                // Dropping `src` here closes corral's read end.
                drop(src);
                sh.open.store(false, Ordering::SeqCst);
                waker.wake();
            })?;
        Ok(SpliceRelay {
            shared,
            src: weak,
            stop_tx,
            _stop_rx: kept_rx,
            thread: Some(thread),
        })
    }

    /// Whether the child's pipe is still open (no end of file yet).
    pub(crate) fn is_open(&self) -> bool {
        self.shared.open.load(Ordering::SeqCst)
    }

    /// Whether every writer of the child's pipe is gone (or the relay ended):
    /// nothing more can arrive, though the thread may still be moving what
    /// is in the pipe.
    pub(crate) fn writers_gone(&self) -> bool {
        match self.src.upgrade() {
            Some(src) => !self.is_open() || src.writers_gone(),
            None => true,
        }
    }

    /// The inode of the child's pipe while the relay has it.
    pub(crate) fn inode(&self) -> Option<u64> {
        self.src.upgrade()?.inode()
    }

    /// Bytes relayed so far.
    pub(crate) fn bytes(&self) -> u64 {
        self.shared.bytes.load(Ordering::SeqCst)
    }

    /// Lets the relay drain what is already in the pipe (up to `drain`),
    /// then stops it and waits for the thread until `until`. Returns the
    /// bytes relayed.
    pub(crate) fn finish(mut self, drain: Duration, until: Instant) -> u64 {
        let end = (Instant::now() + drain).min(until);
        while self.is_open() && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(1));
        }
        let _ = rustix::io::write(&self.stop_tx, &[1]);
        while self.is_open() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
        if !self.is_open() {
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
        // Otherwise the thread is blocked on a destination nobody reads; it
        // is left to end on its own.
        self.bytes()
    }
}

fn readable(
    fd: &impl AsFd,
    stop: &OwnedFd,
    events: PollFlags,
    timeout: Option<&Timespec>,
) -> (bool, bool) {
    let mut fds = [PollFd::new(fd, events), PollFd::new(stop, PollFlags::IN)];
    match poll(&mut fds, timeout) {
        Ok(_) => (!fds[0].revents().is_empty(), !fds[1].revents().is_empty()),
        Err(_) => (false, false),
    }
}

/// The relay loop. Returns whether the destination broke.
fn run(src: &PipeEnd, dest: &File, stop: &OwnedFd, bytes: &AtomicU64) -> bool {
    let zero = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    loop {
        match splice(
            &src.0,
            None,
            dest,
            None,
            CHUNK,
            SpliceFlags::MOVE | SpliceFlags::NONBLOCK,
        ) {
            Ok(0) => return false, // end of file
            Ok(n) => {
                bytes.fetch_add(n as u64, Ordering::Relaxed);
                if n < BATCH {
                    // A writer producing small chunks as fast as we move
                    // them would make us wake per chunk; give it a moment to
                    // fill the pipe so each move carries more.
                    std::thread::sleep(BATCH_WAIT);
                }
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(rustix::io::Errno::AGAIN) => {
                // Which side is not ready? If the source has data, the
                // destination is full.
                let (src_ready, stopped) = readable(&src.0, stop, PollFlags::IN, Some(&zero));
                if stopped {
                    return false;
                }
                let (_, stopped) = if src_ready {
                    readable(dest, stop, PollFlags::OUT, None)
                } else {
                    readable(&src.0, stop, PollFlags::IN, None)
                };
                if stopped {
                    return false;
                }
            }
            Err(rustix::io::Errno::PIPE) => return true,
            Err(rustix::io::Errno::INVAL) => return copy(src, dest, stop, bytes),
            Err(_) => return true,
        }
    }
}

/// Fallback when the destination cannot be spliced to: read and write.
fn copy(src: &PipeEnd, mut dest: &File, stop: &OwnedFd, bytes: &AtomicU64) -> bool {
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        match rustix::io::read(&src.0, &mut buf[..]) {
            Ok(0) => return false,
            Ok(n) => {
                if dest.write_all(&buf[..n]).is_err() {
                    return true;
                }
                bytes.fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(rustix::io::Errno::AGAIN) => {
                let (_, stopped) = readable(&src.0, stop, PollFlags::IN, None);
                if stopped {
                    return false;
                }
            }
            Err(_) => return false,
        }
    }
}
