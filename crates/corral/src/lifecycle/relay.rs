//! The relay of one output stream to a caller's writer, on a thread of its
//! own: a slow consumer slows the child (back-pressure through the pipe)
//! and never the lifecycle's timers. A writer that fails or panics stops
//! the relay, not the capture.

use std::collections::VecDeque;
use std::io::Write;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use crate::cancel::Wake;

/// Bytes queued for a relay writer before corral stops reading that stream.
const RELAY_QUEUE_LIMIT: usize = 1 << 20;

/// Copies one stream, in order, to a writer on its own thread, so that a
/// slow consumer slows the child (back-pressure) and never the timers.
pub(super) struct Relay {
    shared: Arc<RelayShared>,
    thread: Option<JoinHandle<()>>,
}

struct RelayShared {
    q: Mutex<RelayQueue>,
    cv: Condvar,
    waker: Arc<dyn Wake>,
}

#[derive(Default)]
struct RelayQueue {
    chunks: VecDeque<Vec<u8>>,
    bytes: usize,
    closed: bool,
    broken: bool,
    /// The writer thread flushed and is about to end.
    done: bool,
}

impl Relay {
    pub(super) fn start(mut w: Box<dyn Write + Send>, waker: Arc<dyn Wake>) -> Relay {
        let shared = Arc::new(RelayShared {
            q: Mutex::new(RelayQueue::default()),
            cv: Condvar::new(),
            waker,
        });
        let sh = shared.clone();
        let thread = std::thread::Builder::new()
            .name("corral-relay".into())
            .spawn(move || {
                // A write to a pipe whose reader went away fails with EPIPE
                // here (the relay is then broken and the child sees EPIPE in
                // turn); it must not raise SIGPIPE on a host that keeps it at
                // its default action.
                #[cfg(target_os = "linux")]
                crate::sys::block_sigpipe_in_this_thread();
                loop {
                    let chunk = {
                        let mut q = sh.q.lock().unwrap_or_else(|e| e.into_inner());
                        loop {
                            if let Some(c) = q.chunks.pop_front() {
                                break Some(c);
                            }
                            if q.closed {
                                break None;
                            }
                            q = sh.cv.wait(q).unwrap_or_else(|e| e.into_inner());
                        }
                    };
                    let Some(chunk) = chunk else { break };
                    // A writer that panics is a broken writer, not a dead
                    // relay that would stall the child forever.
                    let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        w.write_all(&chunk).is_ok()
                    }))
                    .unwrap_or(false);
                    let mut q = sh.q.lock().unwrap_or_else(|e| e.into_inner());
                    let was_full = q.bytes >= RELAY_QUEUE_LIMIT;
                    q.bytes -= chunk.len();
                    if !ok {
                        // The consumer went away: keep capturing, stop relaying.
                        q.broken = true;
                        q.bytes -= q.chunks.iter().map(Vec::len).sum::<usize>();
                        q.chunks.clear();
                    }
                    sh.cv.notify_all();
                    drop(q);
                    if was_full || !ok {
                        sh.waker.wake();
                    }
                }
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| w.flush()));
                let mut q = sh.q.lock().unwrap_or_else(|e| e.into_inner());
                q.done = true;
                sh.cv.notify_all();
            })
            .ok();
        Relay { shared, thread }
    }

    pub(super) fn is_broken(&self) -> bool {
        let q = self.shared.q.lock().unwrap_or_else(|e| e.into_inner());
        q.broken
    }

    pub(super) fn is_full(&self) -> bool {
        let q = self.shared.q.lock().unwrap_or_else(|e| e.into_inner());
        q.bytes >= RELAY_QUEUE_LIMIT
    }

    pub(super) fn push(&self, data: &[u8]) {
        let mut q = self.shared.q.lock().unwrap_or_else(|e| e.into_inner());
        if q.broken || self.thread.is_none() {
            return;
        }
        q.bytes += data.len();
        q.chunks.push_back(data.to_vec());
        self.shared.cv.notify_all();
    }

    /// Closes the queue and waits for the writer (its writes and its final
    /// flush) until `until` at most; a writer stuck past that is left to
    /// finish on its own thread.
    pub(super) fn finish(mut self, until: Instant) {
        let mut q = self.shared.q.lock().unwrap_or_else(|e| e.into_inner());
        q.closed = true;
        self.shared.cv.notify_all();
        while !q.done && self.thread.is_some() {
            let now = Instant::now();
            if now >= until {
                return; // the consumer is stuck; Drop detaches the thread
            }
            q = self
                .shared
                .cv
                .wait_timeout(q, until - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        drop(q);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Relay {
    /// A relay dropped without `finish` (a spawn that failed after the
    /// outputs were wired) still ends its thread and lets go of the writer.
    fn drop(&mut self) {
        let mut q = self.shared.q.lock().unwrap_or_else(|e| e.into_inner());
        q.closed = true;
        self.shared.cv.notify_all();
    }
}
