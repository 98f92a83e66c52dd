//! Zero-copy relay of one output stream (Linux): a thread moves bytes from
//! the child's pipe to corral's own stdout/stderr (a pipe or a socket) with
//! `splice(2)`, so the bytes never enter user space and the supervising
//! loop is not woken per chunk.
//!
//! Pacing: napping briefly after a small move makes the next one carry
//! more (fewer wake-ups), but caps the relay at one pipe per nap; moving on
//! every write has no cap but costs a wake-up per write. Which is faster
//! depends on the machine and on the pipe size, so [`Pacer`] measures both
//! and keeps the faster.
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
use crate::capture::OutputMeter;

const CHUNK: usize = 1 << 20;
/// While batching, moves smaller than this wait `BATCH_WAIT` before the
/// next one.
const BATCH: usize = 64 * 1024;
const BATCH_WAIT: Duration = Duration::from_micros(100);
/// How long (busy time) the pacer tries a mode before it compares.
const PROBE: Duration = Duration::from_millis(20);
/// How long (busy time) it keeps the chosen mode before trying the other
/// again.
const SETTLE: Duration = Duration::from_millis(500);
/// A wait for the writer longer than this is idle time, not counted
/// against the mode.
const IDLE: Duration = Duration::from_millis(2);
/// Following must move this much more per second than batching to be
/// chosen (it costs the relay a wake-up per write).
const FOLLOW_MARGIN: f64 = 1.15;

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
        meter: Option<Arc<OutputMeter>>,
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
                let limit = Limit {
                    meter: meter.as_deref(),
                    waker: &*waker,
                };
                let broken = run(&src, &dest, &stop_rx, &sh.bytes, &limit);
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

    /// Bytes read from the child's pipe so far (relayed, and past an output
    /// limit dropped).
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

/// How the relay paces its moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Nap after a small move so that the next one carries more: cheap in
    /// wake-ups for a writer of small chunks. Its ceiling is one pipe per
    /// nap (a nap of 100 µs asked is about 250 µs on a VM): about 4 GiB/s
    /// with 1 MiB pipes, and 30-40 MiB/s when the pipes could not be
    /// enlarged (a user past `fs.pipe-user-pages-soft` gets 8 KiB pipes).
    Batching,
    /// Move as soon as the pipe is readable, like a plain reader: a
    /// wake-up per write, no ceiling but the CPUs.
    Following,
}

impl Mode {
    fn other(self) -> Mode {
        match self {
            Mode::Batching => Mode::Following,
            Mode::Following => Mode::Batching,
        }
    }
}

/// Where the pacer is in its measuring cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// Trying each mode once, batching first.
    Probing,
    /// Keeping the faster mode (for `SETTLE`).
    Settled,
    /// Trying the other mode again (for `PROBE`).
    Rechecking,
}

/// Picks the pacing that moves more bytes per second here, for this
/// writer and reader: which one wins depends on the machine (the cost of
/// a wake-up against the length of a nap) and on the pipe size, so it is
/// measured, not assumed. Each mode runs for a window of busy time (time
/// spent waiting for an idle writer does not count), the faster one is
/// kept, and the other is tried again now and then. Pure: the caller
/// passes the time.
#[derive(Debug)]
struct Pacer {
    mode: Mode,
    stage: Stage,
    /// Start of the current window, its bytes, and idle time inside it.
    since: Instant,
    moved: u64,
    idle: Duration,
    /// Latest bytes per second of each mode (`[Batching, Following]`).
    rate: [Option<f64>; 2],
}

impl Pacer {
    fn new(now: Instant) -> Pacer {
        Pacer {
            mode: Mode::Batching,
            stage: Stage::Probing,
            since: now,
            moved: 0,
            idle: Duration::ZERO,
            rate: [None, None],
        }
    }

    fn index(mode: Mode) -> usize {
        match mode {
            Mode::Batching => 0,
            Mode::Following => 1,
        }
    }

    /// The faster mode by the latest rates (batching unless following
    /// clearly wins).
    fn best(&self) -> Mode {
        match self.rate {
            [Some(b), Some(f)] if f > b * FOLLOW_MARGIN => Mode::Following,
            [None, Some(_)] => Mode::Following,
            _ => Mode::Batching,
        }
    }

    /// The relay waited `waited` for the writer (an empty pipe).
    fn waited_for_writer(&mut self, waited: Duration) {
        if waited > IDLE {
            self.idle += waited;
        }
    }

    /// A move of `n` bytes at `now`. Returns whether to nap before the
    /// next one.
    fn moved(&mut self, n: usize, now: Instant) -> bool {
        self.moved += n as u64;
        let busy = now
            .saturating_duration_since(self.since)
            .saturating_sub(self.idle);
        let window = match self.stage {
            Stage::Settled => SETTLE,
            Stage::Probing | Stage::Rechecking => PROBE,
        };
        if busy >= window {
            self.rate[Pacer::index(self.mode)] = Some(self.moved as f64 / busy.as_secs_f64());
            let (mode, stage) = match self.stage {
                Stage::Probing if self.rate.iter().any(Option::is_none) => {
                    (self.mode.other(), Stage::Probing)
                }
                Stage::Probing | Stage::Rechecking => (self.best(), Stage::Settled),
                Stage::Settled => (self.mode.other(), Stage::Rechecking),
            };
            self.mode = mode;
            self.stage = stage;
            self.since = now;
            self.moved = 0;
            self.idle = Duration::ZERO;
        }
        self.mode == Mode::Batching && n < BATCH
    }
}

/// The run's output limit and idle timer, as the relay sees them.
struct Limit<'a> {
    meter: Option<&'a OutputMeter>,
    waker: &'a dyn Wake,
}

/// What the next move may do under the run's output limit.
#[derive(Debug, PartialEq, Eq)]
enum Grant {
    /// Move up to this many bytes (reserved: give back what was not moved
    /// with [`Limit::moved`]).
    Move(usize),
    /// The pipe is empty: wait for the writer, reserving nothing (a
    /// reservation held while waiting would take room the other stream's
    /// bytes are entitled to, and fire the limit at exactly `limit` bytes).
    Empty,
    /// The limit is reached.
    Over,
}

impl Limit<'_> {
    /// How many bytes the next move may carry: `CHUNK`, or with a limit
    /// exactly what is in the pipe within what is left, reserved.
    fn grant(&self, src: &PipeEnd) -> Grant {
        match self.meter {
            Some(m) if m.is_limited() => {
                let ready = rustix::io::ioctl_fionread(&src.0).unwrap_or(CHUNK as u64);
                if ready == 0 {
                    return Grant::Empty;
                }
                match m.reserve(ready.min(CHUNK as u64)) {
                    0 => Grant::Over,
                    n => Grant::Move(n as usize),
                }
            }
            _ => Grant::Move(CHUNK),
        }
    }

    /// A move of `moved` bytes of the `granted` ones was made.
    fn moved(&self, granted: usize, moved: usize) {
        if let Some(m) = self.meter {
            if m.is_limited() {
                m.unreserve((granted - moved) as u64);
            }
            if moved > 0 {
                m.saw_output();
            }
        }
    }

    /// Past the limit: `n` bytes read and dropped (the lifecycle is woken
    /// to end the run).
    fn dropped(&self, n: usize) {
        if let Some(m) = self.meter {
            m.admit(n);
            self.waker.wake();
        }
    }
}

/// The pipe was empty under a limit: waits until it is readable or the
/// stop. Returns whether the relay is over: stopped, or readable with
/// nothing in it (every writer is gone: end of file).
fn await_writer(src: &PipeEnd, stop: &OwnedFd) -> bool {
    let (ready, stopped) = readable(&src.0, stop, PollFlags::IN, None);
    stopped || (ready && rustix::io::ioctl_fionread(&src.0).unwrap_or(1) == 0)
}

/// Past the output limit: reads and drops what arrives (counted) until end
/// of file or the stop. Returns false (the destination did not break).
fn discard(src: &PipeEnd, stop: &OwnedFd, bytes: &AtomicU64, limit: &Limit<'_>) -> bool {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match rustix::io::read(&src.0, &mut buf[..]) {
            Ok(0) => return false,
            Ok(n) => {
                bytes.fetch_add(n as u64, Ordering::Relaxed);
                limit.dropped(n);
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

/// The relay loop. Returns whether the destination broke.
fn run(src: &PipeEnd, dest: &File, stop: &OwnedFd, bytes: &AtomicU64, limit: &Limit<'_>) -> bool {
    let zero = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    let mut pacer = Pacer::new(Instant::now());
    loop {
        let len = match limit.grant(src) {
            Grant::Move(len) => len,
            Grant::Over => return discard(src, stop, bytes, limit),
            Grant::Empty => {
                let start = Instant::now();
                let over = await_writer(src, stop);
                pacer.waited_for_writer(start.elapsed());
                if over {
                    return false;
                }
                continue;
            }
        };
        let res = splice(
            &src.0,
            None,
            dest,
            None,
            len,
            SpliceFlags::MOVE | SpliceFlags::NONBLOCK,
        );
        limit.moved(len, *res.as_ref().unwrap_or(&0));
        match res {
            Ok(0) => return false, // end of file
            Ok(n) => {
                bytes.fetch_add(n as u64, Ordering::Relaxed);
                if pacer.moved(n, Instant::now()) {
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
                    let start = Instant::now();
                    let r = readable(&src.0, stop, PollFlags::IN, None);
                    pacer.waited_for_writer(start.elapsed());
                    r
                };
                if stopped {
                    return false;
                }
            }
            Err(rustix::io::Errno::PIPE) => return true,
            Err(rustix::io::Errno::INVAL) => return copy(src, dest, stop, bytes, limit),
            Err(_) => return true,
        }
    }
}

/// Fallback when the destination cannot be spliced to: read and write.
fn copy(
    src: &PipeEnd,
    mut dest: &File,
    stop: &OwnedFd,
    bytes: &AtomicU64,
    limit: &Limit<'_>,
) -> bool {
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let len = match limit.grant(src) {
            Grant::Move(len) => len,
            Grant::Over => return discard(src, stop, bytes, limit),
            Grant::Empty if await_writer(src, stop) => return false,
            Grant::Empty => continue,
        };
        let res = rustix::io::read(&src.0, &mut buf[..len.min(256 * 1024)]);
        limit.moved(len, *res.as_ref().unwrap_or(&0));
        match res {
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

#[cfg(test)]
mod tests {
    use super::*;

    struct NoWake;
    impl Wake for NoWake {
        fn wake(&self) {}
    }

    /// An empty pipe reserves nothing: with the other stream holding
    /// exactly the bytes left, all of them may move and the limit is not
    /// passed.
    #[test]
    fn an_empty_pipe_takes_no_room_from_the_other_stream() {
        let meter = OutputMeter::new(Some(10), false, Instant::now());
        let limit = Limit {
            meter: Some(&meter),
            waker: &NoWake,
        };
        let (quiet, _quiet_w) = super::super::pipe(true).unwrap();
        let (busy, mut busy_w) = super::super::pipe(true).unwrap();
        busy_w.write_all(&[b'x'; 10]).unwrap();
        assert_eq!(limit.grant(&quiet), Grant::Empty);
        assert_eq!(limit.grant(&busy), Grant::Move(10));
        limit.moved(10, 10);
        assert!(!meter.is_over());
        // One byte more is over the limit.
        busy_w.write_all(b"y").unwrap();
        assert_eq!(limit.grant(&busy), Grant::Over);
    }

    /// Waiting on an empty pipe ends at its end of file and at the stop,
    /// and not before data.
    #[test]
    fn await_writer_ends_at_end_of_file_or_stop() {
        let (stop_r, stop_w) = rustix::pipe::pipe().unwrap();
        let (src, w) = super::super::pipe(true).unwrap();
        drop(w);
        assert!(await_writer(&src, &stop_r));
        let (src, mut w) = super::super::pipe(true).unwrap();
        w.write_all(b"z").unwrap();
        assert!(!await_writer(&src, &stop_r));
        let (src, _w) = super::super::pipe(true).unwrap();
        rustix::io::write(&stop_w, b"s").unwrap();
        assert!(await_writer(&src, &stop_r));
    }

    /// Feeds the pacer moves of `n` bytes every `step`, the moves of each
    /// mode as given, until `until` after `t0`; returns the time reached.
    fn feed(
        p: &mut Pacer,
        mut t: Instant,
        until: Instant,
        per_mode: impl Fn(Mode) -> (usize, Duration),
    ) -> Instant {
        while t < until {
            let (n, step) = per_mode(p.mode);
            t += step;
            p.moved(n, t);
        }
        t
    }

    /// 1 MiB per ms batching (1 GiB/s), 8 KiB per 4 µs following (2 GiB/s).
    fn following_faster(m: Mode) -> (usize, Duration) {
        match m {
            Mode::Batching => (1 << 20, Duration::from_millis(1)),
            Mode::Following => (8 << 10, Duration::from_micros(4)),
        }
    }

    fn batching_faster(m: Mode) -> (usize, Duration) {
        match m {
            Mode::Batching => (1 << 20, Duration::from_micros(250)),
            Mode::Following => (8 << 10, Duration::from_micros(4)),
        }
    }

    #[test]
    fn starts_batching_and_naps_after_small_moves_only() {
        let t = Instant::now();
        let mut p = Pacer::new(t);
        assert_eq!(p.mode, Mode::Batching);
        assert!(p.moved(4096, t));
        assert!(!p.moved(BATCH, t));
    }

    #[test]
    fn settles_on_following_when_it_moves_clearly_more() {
        let t0 = Instant::now();
        let mut p = Pacer::new(t0);
        let t = feed(
            &mut p,
            t0,
            t0 + PROBE * 2 + Duration::from_millis(2),
            following_faster,
        );
        assert_eq!((p.mode, p.stage), (Mode::Following, Stage::Settled));
        // Following never naps, whatever the move.
        assert!(!p.moved(1, t));
    }

    #[test]
    fn stays_batching_when_following_is_not_clearly_faster() {
        let t0 = Instant::now();
        let mut p = Pacer::new(t0);
        feed(
            &mut p,
            t0,
            t0 + PROBE * 2 + Duration::from_millis(2),
            batching_faster,
        );
        assert_eq!((p.mode, p.stage), (Mode::Batching, Stage::Settled));
        // Equal rates: batching (fewer wake-ups) is kept.
        let mut q = Pacer::new(t0);
        feed(
            &mut q,
            t0,
            t0 + PROBE * 2 + Duration::from_millis(2),
            |m| match m {
                Mode::Batching => (1 << 20, Duration::from_millis(1)),
                Mode::Following => (1 << 20, Duration::from_millis(1)),
            },
        );
        assert_eq!(q.mode, Mode::Batching);
    }

    #[test]
    fn rechecks_the_other_mode_and_follows_a_change() {
        let t0 = Instant::now();
        let mut p = Pacer::new(t0);
        let t = feed(
            &mut p,
            t0,
            t0 + PROBE * 2 + Duration::from_millis(2),
            following_faster,
        );
        assert_eq!(p.mode, Mode::Following);
        // The machine changes: batching is now the faster one. After the
        // settle period the pacer tries batching again and keeps it.
        let t = feed(
            &mut p,
            t,
            t + SETTLE + PROBE + Duration::from_millis(4),
            batching_faster,
        );
        assert_eq!(p.mode, Mode::Batching);
        assert_eq!(p.stage, Stage::Settled);
        // And it does not flap back while batching stays faster.
        feed(&mut p, t, t + (SETTLE + PROBE) * 3, batching_faster);
        assert!(matches!(
            (p.mode, p.stage),
            (Mode::Batching, _) | (Mode::Following, Stage::Rechecking)
        ));
    }

    #[test]
    fn time_waiting_for_an_idle_writer_does_not_count() {
        let t0 = Instant::now();
        let mut p = Pacer::new(t0);
        // Batching moves 1 MiB per ms, then the writer pauses for 1 s: the
        // window is still open (busy time 1 ms) and the rate is not diluted.
        p.moved(1 << 20, t0 + Duration::from_millis(1));
        p.waited_for_writer(Duration::from_secs(1));
        p.moved(1 << 20, t0 + Duration::from_millis(1002));
        assert_eq!(p.rate, [None, None]);
        // Short waits (a writer between two writes) are busy time.
        p.waited_for_writer(Duration::from_micros(500));
        assert_eq!(p.idle, Duration::from_secs(1));
    }
}
