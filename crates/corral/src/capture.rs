//! Output capture that is bounded in memory and says what it left out.
//!
//! A [`Captured`] stream keeps the first half of its cap (the head) and the
//! last half (the tail) and counts every byte in between as omitted, so a
//! runaway writer costs at most the cap, and a reader still sees how the
//! output began and how it ended.

use std::collections::VecDeque;

/// One captured output stream: head and tail kept, the middle counted.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Captured {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    head_cap: usize,
    tail_cap: usize,
    total: u64,
}

impl std::fmt::Debug for Captured {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Captured")
            .field("total", &self.total)
            .field("omitted", &self.omitted())
            .field("text", &String::from_utf8_lossy(&self.bytes()))
            .finish()
    }
}

impl Captured {
    /// An empty capture that keeps at most `cap` bytes.
    pub(crate) fn with_cap(cap: usize) -> Captured {
        let head_cap = cap - cap / 2;
        Captured {
            head: Vec::new(),
            tail: VecDeque::new(),
            head_cap,
            tail_cap: cap / 2,
            total: 0,
        }
    }

    /// Appends bytes the child wrote.
    pub(crate) fn push(&mut self, mut data: &[u8]) {
        self.total += data.len() as u64;
        if self.head.len() < self.head_cap {
            let n = data.len().min(self.head_cap - self.head.len());
            self.head.extend_from_slice(&data[..n]);
            data = &data[n..];
        }
        if data.is_empty() || self.tail_cap == 0 {
            return;
        }
        if data.len() >= self.tail_cap {
            self.tail.clear();
            self.tail.extend(&data[data.len() - self.tail_cap..]);
            return;
        }
        let overflow = (self.tail.len() + data.len()).saturating_sub(self.tail_cap);
        self.tail.drain(..overflow);
        self.tail.extend(data);
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
        self.total - self.head.len() as u64 - self.tail.len() as u64
    }

    /// Whether anything was left out.
    pub fn is_truncated(&self) -> bool {
        self.omitted() > 0
    }

    /// The kept head: the first bytes written.
    pub fn head(&self) -> &[u8] {
        &self.head
    }

    /// The kept tail: the last bytes written (empty unless the head is full).
    pub fn tail(&self) -> Vec<u8> {
        self.tail.iter().copied().collect()
    }

    /// Head and tail joined. Use [`Captured::omitted`] to learn whether bytes
    /// were left out between them.
    pub fn bytes(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.head.len() + self.tail.len());
        v.extend_from_slice(&self.head);
        v.extend(self.tail.iter());
        v
    }

    /// Head and tail as text, with a marker naming the omitted byte count
    /// between them when something was left out.
    pub fn text_lossy(&self) -> String {
        let mut s = String::from_utf8_lossy(&self.head).into_owned();
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
