//! Output capture that is bounded in memory and says what it left out.
//!
//! A [`Captured`] stream keeps the first half of its cap (the head) and the
//! last half (the tail) and counts every byte in between as omitted, so a
//! runaway writer costs at most the cap, and a reader still sees how the
//! output began and how it ended.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// What the output limit and the idle timer need from every stream of a
/// run, shared with the threads that read them (the zero-copy relay): the
/// bytes let through against the limit, whether one more was refused, and
/// when output was last seen. Made only for a run with an output limit or
/// an idle timeout; each read costs one atomic add (and, with an idle
/// timeout, a clock read).
#[derive(Debug)]
pub(crate) struct OutputMeter {
    /// Bytes the streams together may carry (`u64::MAX`: no limit).
    limit: u64,
    /// Bytes the streams carried (the refused included).
    seen: AtomicU64,
    /// A byte past the limit was seen.
    over: AtomicBool,
    /// The last output seen, in nanoseconds after `start` (with an idle
    /// timeout).
    idle: bool,
    start: Instant,
    last: AtomicU64,
}

impl OutputMeter {
    pub(crate) fn new(limit: Option<u64>, idle: bool, start: Instant) -> OutputMeter {
        OutputMeter {
            limit: limit.unwrap_or(u64::MAX),
            seen: AtomicU64::new(0),
            over: AtomicBool::new(false),
            idle,
            start,
            last: AtomicU64::new(0),
        }
    }

    /// `n` bytes arrived on some stream: returns how many of them are
    /// within the limit (to be captured or relayed; the rest is dropped,
    /// and the limit is then passed).
    pub(crate) fn admit(&self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        if self.idle {
            self.touch();
        }
        let before = self.seen.fetch_add(n as u64, Ordering::Relaxed);
        let room = self.limit.saturating_sub(before);
        if room < n as u64 {
            self.over.store(true, Ordering::SeqCst);
            room as usize
        } else {
            n
        }
    }

    /// Whether a limit is set.
    /// (Used by the zero-copy relay, Linux only.)
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) fn is_limited(&self) -> bool {
        self.limit != u64::MAX
    }

    /// Takes up to `want` bytes of what is left within the limit before
    /// moving them (the zero-copy relay, which cannot take back what it
    /// moved); what was not moved is given back with
    /// [`unreserve`](Self::unreserve). Returns what was granted (0: the
    /// limit is reached).
    /// (Used by the zero-copy relay, Linux only.)
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) fn reserve(&self, want: u64) -> u64 {
        let mut seen = self.seen.load(Ordering::Relaxed);
        loop {
            let grant = self.limit.saturating_sub(seen).min(want);
            if grant == 0 {
                return 0;
            }
            match self.seen.compare_exchange_weak(
                seen,
                seen + grant,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return grant,
                Err(now) => seen = now,
            }
        }
    }

    /// Gives back reserved bytes that were not moved.
    /// (Used by the zero-copy relay, Linux only.)
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) fn unreserve(&self, n: u64) {
        if n > 0 {
            self.seen.fetch_sub(n, Ordering::Relaxed);
        }
    }

    /// Output was seen now (for the idle timer, if there is one).
    /// (Used by the zero-copy relay, Linux only.)
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) fn saw_output(&self) {
        if self.idle {
            self.touch();
        }
    }

    /// Whether the output passed the limit.
    pub(crate) fn is_over(&self) -> bool {
        self.over.load(Ordering::SeqCst)
    }

    /// Output was seen now.
    fn touch(&self) {
        let at = u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.last.fetch_max(at, Ordering::Relaxed);
    }

    /// When output was last seen (the start when none was).
    pub(crate) fn last_output(&self) -> Instant {
        let at = Duration::from_nanos(self.last.load(Ordering::Relaxed));
        self.start.checked_add(at).unwrap_or(self.start)
    }
}

/// One captured output stream: head and tail kept, the middle counted.
///
/// The reader fills the capture's own storage (`spare` then
/// `commit`): the head until it is full, then the tail ring at
/// its write position, so a byte read is copied once (by the kernel) and no
/// read allocates. The head grows geometrically up to half the cap; the ring
/// is allocated once, at half the cap, when the head is full.
#[derive(Clone, Default)]
pub struct Captured {
    /// Initialized head storage; the kept head is `head[..head_len]`.
    head: Vec<u8>,
    head_len: usize,
    /// The tail ring: `tail_cap` bytes once allocated.
    tail: Vec<u8>,
    /// Bytes kept in the ring (at most `tail_cap`).
    tail_len: usize,
    /// Where the next byte goes; when the ring is full, also its oldest byte.
    tail_pos: usize,
    head_cap: usize,
    tail_cap: usize,
    total: u64,
}

impl PartialEq for Captured {
    fn eq(&self, other: &Captured) -> bool {
        self.total == other.total
            && self.head_cap == other.head_cap
            && self.tail_cap == other.tail_cap
            && self.head() == other.head()
            && self.tail() == other.tail()
    }
}

impl Eq for Captured {}

impl std::fmt::Debug for Captured {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Captured")
            .field("total", &self.total)
            .field("omitted", &self.omitted())
            .field("text", &String::from_utf8_lossy(&self.bytes()))
            .finish()
    }
}

/// The head's first allocation, before it doubles towards its cap.
const HEAD_START: usize = 4096;

impl Captured {
    /// An empty capture that keeps at most `cap` bytes.
    pub(crate) fn with_cap(cap: usize) -> Captured {
        let head_cap = cap - cap / 2;
        Captured {
            head_cap,
            tail_cap: cap / 2,
            ..Captured::default()
        }
    }

    /// Room to read up to `want` bytes straight into the kept storage, or
    /// `None` when a read should go through a scratch buffer and
    /// [`Captured::push`] instead (the head is full and the tail ring is
    /// smaller than `want`, so direct reads into it would be short).
    /// The region may be shorter than `want` (the end of the head, or the
    /// ring's end before it wraps). Call [`Captured::commit`] with the bytes
    /// written there.
    pub(crate) fn spare(&mut self, want: usize) -> Option<&mut [u8]> {
        self.room(want, false)
    }

    /// [`Captured::spare`]; `growing` (a push) may allocate the first head
    /// storage, sized for `want`.
    fn room(&mut self, want: usize, growing: bool) -> Option<&mut [u8]> {
        let growing_need = if growing { want } else { 0 };
        if self.head_len < self.head_cap {
            if self.head.is_empty() && !growing {
                // Nothing arrived yet: no memory until something does (a
                // thousand quiet commands hold no buffers).
                return None;
            }
            if self.head_len == self.head.len() {
                let grown = (self.head.len() * 2)
                    .max(HEAD_START.max(growing_need))
                    .min(self.head_cap);
                self.head.resize(grown, 0);
            }
            let end = self.head.len().min(self.head_len + want);
            return Some(&mut self.head[self.head_len..end]);
        }
        if self.tail_cap < want || want == 0 {
            return None;
        }
        if self.tail.is_empty() {
            // Zeroed pages from the allocator: memory is used as it is
            // written, not up front.
            self.tail = vec![0; self.tail_cap];
        }
        let end = self.tail_cap.min(self.tail_pos + want);
        Some(&mut self.tail[self.tail_pos..end])
    }

    /// Records that `n` bytes were written at the start of the region the
    /// last [`Captured::spare`] returned, and returns them.
    pub(crate) fn commit(&mut self, n: usize) -> &[u8] {
        self.total += n as u64;
        if self.head_len < self.head_cap {
            let at = self.head_len;
            self.head_len += n;
            debug_assert!(self.head_len <= self.head.len());
            return &self.head[at..self.head_len];
        }
        let at = self.tail_pos;
        debug_assert!(at + n <= self.tail_cap);
        self.tail_len = (self.tail_len + n).min(self.tail_cap);
        self.tail_pos = (at + n) % self.tail_cap.max(1);
        &self.tail[at..at + n]
    }

    /// Appends bytes the child wrote (read elsewhere).
    pub(crate) fn push(&mut self, mut data: &[u8]) {
        self.total += data.len() as u64;
        while !data.is_empty() && self.head_len < self.head_cap {
            let region = self
                .room(data.len(), true)
                .expect("the head has room while it is not full");
            let n = region.len().min(data.len());
            region[..n].copy_from_slice(&data[..n]);
            self.head_len += n;
            data = &data[n..];
        }
        if data.is_empty() || self.tail_cap == 0 {
            return;
        }
        if self.tail.is_empty() {
            self.tail = vec![0; self.tail_cap];
        }
        if data.len() >= self.tail_cap {
            let keep = &data[data.len() - self.tail_cap..];
            self.tail.copy_from_slice(keep);
            self.tail_pos = 0;
            self.tail_len = self.tail_cap;
            return;
        }
        let first = data.len().min(self.tail_cap - self.tail_pos);
        self.tail[self.tail_pos..self.tail_pos + first].copy_from_slice(&data[..first]);
        let rest = &data[first..];
        self.tail[..rest.len()].copy_from_slice(rest);
        self.tail_pos = (self.tail_pos + data.len()) % self.tail_cap;
        self.tail_len = (self.tail_len + data.len()).min(self.tail_cap);
    }

    /// The ring's bytes, oldest first, as at most two slices.
    fn tail_parts(&self) -> (&[u8], &[u8]) {
        if self.tail_len < self.tail_cap {
            // Never wrapped: the bytes start at 0.
            (&self.tail[..self.tail_len], &[])
        } else {
            let (a, b) = self.tail.split_at(self.tail_pos);
            (b, a)
        }
    }

    /// Counts bytes that went elsewhere (a zero-copy relay) as omitted.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) fn count_uncaptured(&mut self, n: u64) {
        self.total += n;
    }

    /// Every byte the child wrote to this stream, kept or not.
    pub fn total_bytes(&self) -> u64 {
        self.total
    }

    /// Bytes written but not kept (between head and tail).
    pub fn omitted(&self) -> u64 {
        self.total - self.head_len as u64 - self.tail_len as u64
    }

    /// Whether anything was left out.
    pub fn is_truncated(&self) -> bool {
        self.omitted() > 0
    }

    /// The kept head: the first bytes written.
    pub fn head(&self) -> &[u8] {
        &self.head[..self.head_len]
    }

    /// The kept tail: the last bytes written (empty unless the head is full).
    pub fn tail(&self) -> Vec<u8> {
        let (a, b) = self.tail_parts();
        [a, b].concat()
    }

    /// Head and tail joined. Use [`Captured::omitted`] to learn whether bytes
    /// were left out between them.
    pub fn bytes(&self) -> Vec<u8> {
        let (a, b) = self.tail_parts();
        [self.head(), a, b].concat()
    }

    /// Head and tail as text, with a marker naming the omitted byte count
    /// between them when something was left out.
    pub fn text_lossy(&self) -> String {
        let mut s = String::from_utf8_lossy(self.head()).into_owned();
        if self.is_truncated() {
            s.push_str(&format!("\n[... {} bytes omitted ...]\n", self.omitted()));
        }
        let tail = self.tail();
        s.push_str(&String::from_utf8_lossy(&tail));
        s
    }
}

/// Splits a byte stream into lines for a line callback. A line longer than
/// `max` is delivered in pieces of `max` bytes so memory stays bounded.
pub(crate) struct LineSplitter {
    partial: Vec<u8>,
    max: usize,
}

impl LineSplitter {
    pub(crate) fn new(max: usize) -> Self {
        LineSplitter {
            partial: Vec::new(),
            max: max.max(1),
        }
    }

    /// Feeds bytes; calls `emit` for each complete line (without `\n`).
    pub(crate) fn feed(&mut self, mut data: &[u8], emit: &mut dyn FnMut(&[u8])) {
        while let Some(i) = data.iter().position(|&b| b == b'\n') {
            if self.partial.is_empty() {
                emit(&data[..i]);
            } else {
                self.partial.extend_from_slice(&data[..i]);
                emit(&self.partial);
                self.partial.clear();
            }
            data = &data[i + 1..];
        }
        self.partial.extend_from_slice(data);
        while self.partial.len() >= self.max {
            let rest = self.partial.split_off(self.max);
            emit(&self.partial);
            self.partial = rest;
        }
    }

    /// Delivers an unterminated last line, if any.
    pub(crate) fn finish(&mut self, emit: &mut dyn FnMut(&[u8])) {
        if !self.partial.is_empty() {
            emit(&self.partial);
            self.partial.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_everything_under_the_cap() {
        let mut c = Captured::with_cap(10);
        c.push(b"hello");
        c.push(b"abc");
        assert_eq!(c.bytes(), b"helloabc");
        assert_eq!(c.omitted(), 0);
        assert_eq!(c.total_bytes(), 8);
    }

    #[test]
    fn keeps_head_and_tail_and_counts_the_middle() {
        let mut c = Captured::with_cap(6);
        for chunk in [&b"0123"[..], b"4567", b"89ab", b"cd"] {
            c.push(chunk);
        }
        assert_eq!(c.head(), b"012");
        assert_eq!(c.tail(), b"bcd");
        assert_eq!(c.total_bytes(), 14);
        assert_eq!(c.omitted(), 8);
        assert!(c.text_lossy().contains("8 bytes omitted"));
    }

    #[test]
    fn a_big_chunk_replaces_the_tail() {
        let mut c = Captured::with_cap(4);
        c.push(b"ab");
        c.push(b"cdefghij");
        assert_eq!(c.head(), b"ab");
        assert_eq!(c.tail(), b"ij");
        assert_eq!(c.omitted(), 6);
    }

    /// Reads straight into the storage (head, then the ring across its
    /// wrap) keep exactly what pushes of the same bytes keep.
    #[test]
    fn direct_reads_match_pushes() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
        for cap in [0usize, 1, 7, 64, 1000, 4096, 9999, 10_000, 20_000] {
            for chunk in [1usize, 3, 100, 512, 5000] {
                let mut direct = Captured::with_cap(cap);
                let mut pushed = Captured::with_cap(cap);
                let mut rest = &data[..];
                while !rest.is_empty() {
                    let want = chunk.min(rest.len());
                    match direct.spare(want) {
                        Some(region) => {
                            let n = region.len().min(want);
                            region[..n].copy_from_slice(&rest[..n]);
                            assert_eq!(direct.commit(n), &rest[..n]);
                            rest = &rest[n..];
                        }
                        None => {
                            direct.push(&rest[..want]);
                            rest = &rest[want..];
                        }
                    }
                }
                for c in data.chunks(chunk) {
                    pushed.push(c);
                }
                assert_eq!(direct, pushed, "cap {cap} chunk {chunk}");
                let keep_head = cap - cap / 2;
                assert_eq!(direct.head(), &data[..keep_head.min(data.len())]);
                let kept_tail = (cap / 2).min(data.len() - direct.head().len());
                assert_eq!(direct.tail(), &data[data.len() - kept_tail..]);
                assert_eq!(direct.total_bytes(), data.len() as u64);
                assert_eq!(
                    direct.omitted(),
                    (data.len() - direct.head().len() - kept_tail) as u64
                );
            }
        }
    }

    #[test]
    fn zero_cap_keeps_nothing_but_counts() {
        let mut c = Captured::with_cap(0);
        c.push(b"abc");
        assert!(c.bytes().is_empty());
        assert_eq!(c.omitted(), 3);
    }

    #[test]
    fn splits_lines_across_chunks_and_bounds_long_ones() {
        let mut lines = Vec::new();
        let mut s = LineSplitter::new(4);
        s.feed(b"ab\ncd", &mut |l| lines.push(l.to_vec()));
        s.feed(b"e\nfghijk", &mut |l| lines.push(l.to_vec()));
        s.finish(&mut |l| lines.push(l.to_vec()));
        assert_eq!(
            lines,
            vec![
                b"ab".to_vec(),
                b"cde".to_vec(),
                b"fghi".to_vec(),
                b"jk".to_vec()
            ]
        );
    }
}
