//! Every run the server started: the live ones (foreground `run`s and
//! background `start`s, counted against `--max-runs`, each cancellable) and
//! the background ones with their unread output and, once ended, their
//! report. `shutdown` kills them all.

use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use corral::{CancelToken, Report, Signal};
use tokio::sync::Notify;

/// Finished background runs kept for `read` and `list` (the oldest go).
const KEEP_FINISHED: usize = 64;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Default)]
struct Inner {
    next: u64,
    closed: bool,
    /// Live runs: their cancel tokens.
    live: BTreeMap<u64, CancelToken>,
    /// Background runs, live or finished.
    bg: BTreeMap<u64, Arc<Background>>,
}

/// The server's runs.
pub struct Registry {
    inner: Mutex<Inner>,
    max_runs: usize,
    /// Woken when a live run ends.
    ended: Notify,
}

/// A live run's place: counted until dropped.
pub struct Slot {
    reg: Arc<Registry>,
    pub id: u64,
    pub token: CancelToken,
}

impl Drop for Slot {
    fn drop(&mut self) {
        lock(&self.reg.inner).live.remove(&self.id);
        self.reg.ended.notify_waiters();
    }
}

impl Registry {
    pub fn new(max_runs: usize) -> Registry {
        Registry {
            inner: Mutex::new(Inner::default()),
            max_runs,
            ended: Notify::new(),
        }
    }

    /// A place for one more live run, or why there is none.
    pub fn slot(self: &Arc<Self>) -> Result<Slot, String> {
        let mut g = lock(&self.inner);
        if g.closed {
            return Err("the server is shutting down".into());
        }
        if g.live.len() >= self.max_runs {
            return Err(format!(
                "{} runs are going, the most the server allows (--max-runs); \
                 wait for one to end or kill one",
                g.live.len()
            ));
        }
        g.next += 1;
        let id = g.next;
        let token = CancelToken::new();
        g.live.insert(id, token.clone());
        Ok(Slot {
            reg: self.clone(),
            id,
            token,
        })
    }

    /// Records a background run (its id is its slot's).
    pub fn add_background(&self, run: Arc<Background>) {
        let mut g = lock(&self.inner);
        g.bg.insert(run.id, run);
        let finished: Vec<u64> =
            g.bg.iter()
                .filter(|(_, r)| r.report().is_some())
                .map(|(&id, _)| id)
                .collect();
        for id in finished
            .iter()
            .take(finished.len().saturating_sub(KEEP_FINISHED))
        {
            g.bg.remove(id);
        }
    }

    /// A background run by its id (`"7"`).
    pub fn get(&self, id: &str) -> Result<Arc<Background>, String> {
        let found = id
            .trim()
            .parse::<u64>()
            .ok()
            .and_then(|n| lock(&self.inner).bg.get(&n).cloned());
        found.ok_or_else(|| format!("no run with id {id:?} (see the list tool)"))
    }

    pub fn background(&self) -> Vec<Arc<Background>> {
        lock(&self.inner).bg.values().cloned().collect()
    }

    pub fn live_count(&self) -> usize {
        lock(&self.inner).live.len()
    }

    /// Refuses new runs, sends SIGKILL to every live tree, and waits (at
    /// most `bound`) until each run has ended: its death confirmed and its
    /// identity released by the library. Returns how many were still live
    /// at the bound.
    pub async fn shutdown(&self, bound: Duration) -> usize {
        let until = Instant::now() + bound;
        {
            let mut g = lock(&self.inner);
            g.closed = true;
            for t in g.live.values() {
                t.cancel_with(Signal::KILL);
            }
        }
        loop {
            let ended = self.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            let n = self.live_count();
            let left = until.saturating_duration_since(Instant::now());
            if n == 0 || left.is_zero() {
                return n;
            }
            let _ = tokio::time::timeout(left, ended).await;
        }
    }
}

/// Unread output of one stream: at most `cap` bytes, the oldest dropped.
#[derive(Debug, Default)]
pub struct Ring {
    buf: VecDeque<u8>,
    cap: usize,
    /// Bytes dropped unread since the last take.
    dropped: u64,
    /// Bytes written in all.
    pub total: u64,
}

impl Ring {
    fn push(&mut self, data: &[u8]) {
        self.total += data.len() as u64;
        let data = if data.len() > self.cap {
            self.dropped += (data.len() - self.cap) as u64;
            &data[data.len() - self.cap..]
        } else {
            data
        };
        let over = (self.buf.len() + data.len()).saturating_sub(self.cap);
        if over > 0 {
            self.buf.drain(..over);
            self.dropped += over as u64;
        }
        self.buf.extend(data);
    }

    /// The unread bytes and how many were dropped before them.
    fn take(&mut self) -> (Vec<u8>, u64) {
        let out = Vec::from(std::mem::take(&mut self.buf));
        (out, std::mem::take(&mut self.dropped))
    }
}

/// A run started by `start`.
pub struct Background {
    pub id: u64,
    pub argv: Vec<String>,
    pub pid: std::sync::atomic::AtomicU32,
    pub started: Instant,
    pub token: CancelToken,
    /// Its stdin, until closed by `write {eof}` or the run's end.
    pub stdin: Arc<tokio::sync::Mutex<Option<tokio::net::unix::pipe::Sender>>>,
    out: Mutex<[Ring; 2]>,
    report: Mutex<Option<Arc<Report>>>,
    /// Woken on output and at the end.
    pub changed: Notify,
}

impl Background {
    pub fn new(
        id: u64,
        argv: Vec<String>,
        token: CancelToken,
        stdin: Option<tokio::net::unix::pipe::Sender>,
        kept: usize,
    ) -> Background {
        let ring = || Ring {
            cap: kept,
            ..Ring::default()
        };
        Background {
            id,
            argv,
            pid: Default::default(),
            started: Instant::now(),
            token,
            stdin: Arc::new(tokio::sync::Mutex::new(stdin)),
            out: Mutex::new([ring(), ring()]),
            report: Mutex::new(None),
            changed: Notify::new(),
        }
    }

    pub fn report(&self) -> Option<Arc<Report>> {
        lock(&self.report).clone()
    }

    pub fn finish(&self, report: Report) {
        *lock(&self.report) = Some(Arc::new(report));
        self.changed.notify_waiters();
    }

    /// Output since the last take, per stream: bytes, dropped, total.
    pub fn take(&self) -> [(Vec<u8>, u64, u64); 2] {
        let mut g = lock(&self.out);
        let [o, e] = &mut *g;
        let (ob, od) = o.take();
        let (eb, ed) = e.take();
        [(ob, od, o.total), (eb, ed, e.total)]
    }

    pub fn has_unread(&self) -> bool {
        let g = lock(&self.out);
        g.iter().any(|r| !r.buf.is_empty())
    }

    pub fn totals(&self) -> [u64; 2] {
        let g = lock(&self.out);
        [g[0].total, g[1].total]
    }
}

/// The writer the library relays one stream of a background run into (on
/// its relay thread): never blocks, so the run never waits for a reader.
pub struct RingWriter {
    pub run: Arc<Background>,
    pub stream: usize,
}

impl io::Write for RingWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        lock(&self.run.out)[self.stream].push(buf);
        self.run.changed.notify_waiters();
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_keeps_the_newest_and_counts_the_rest() {
        let mut r = Ring {
            cap: 4,
            ..Ring::default()
        };
        r.push(b"ab");
        r.push(b"cdef");
        assert_eq!(r.take(), (b"cdef".to_vec(), 2));
        r.push(b"0123456789");
        assert_eq!(r.take(), (b"6789".to_vec(), 6));
        assert_eq!(r.take(), (Vec::new(), 0));
        assert_eq!(r.total, 16);
    }

    #[test]
    fn slots_are_bounded_and_freed() {
        let reg = Arc::new(Registry::new(1));
        let a = reg.slot().unwrap();
        assert!(reg.slot().is_err());
        drop(a);
        assert!(reg.slot().is_ok());
    }
}
