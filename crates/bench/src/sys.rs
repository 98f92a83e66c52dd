//! The few OS helpers the benchmark needs and the library does not expose:
//! /proc reading, group signals, a readiness FIFO, wait4 for a child's peak
//! RSS, and the leak sweep that makes sure no benchmark tree outlives a run.

use std::ffi::CString;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// `state` and `pgrp` of a `/proc/<pid>/stat` line, and the command name.
fn parse_stat(buf: &[u8]) -> Option<(u8, u32, &[u8])> {
    let open = buf.iter().position(|&b| b == b'(')?;
    let close = buf.iter().rposition(|&b| b == b')')?;
    let comm = buf.get(open + 1..close)?;
    let rest = std::str::from_utf8(&buf[close + 1..]).ok()?;
    let mut fields = rest.split_ascii_whitespace();
    let state = *fields.next()?.as_bytes().first()?;
    let _ppid = fields.next()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, pgrp, comm))
}

fn read_stat(pid: u32, buf: &mut Vec<u8>) -> bool {
    buf.clear();
    match File::open(format!("/proc/{pid}/stat")) {
        Ok(mut f) => f.read_to_end(buf).is_ok(),
        Err(_) => false,
    }
}

/// Calls `f(pid, state, pgrp, comm)` for every process in /proc.
fn for_each_process(mut f: impl FnMut(u32, u8, u32, &[u8])) {
    let mut buf = Vec::with_capacity(512);
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if !read_stat(pid, &mut buf) {
            continue;
        }
        if let Some((state, pgrp, comm)) = parse_stat(&buf) {
            f(pid, state, pgrp, comm);
        }
    }
}

/// Every live (not zombie) process in group `pgid`, with its command name.
pub fn group_members_live(pgid: u32) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    for_each_process(|pid, state, pgrp, comm| {
        if pgrp == pgid && state != b'Z' && state != b'X' {
            out.push((pid, String::from_utf8_lossy(comm).into_owned()));
        }
    });
    out
}

/// Number of entries (processes) in /proc right now.
pub fn process_count() -> usize {
    std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    e.file_name()
                        .to_str()
                        .is_some_and(|s| s.parse::<u32>().is_ok())
                })
                .count()
        })
        .unwrap_or(0)
}

/// Whether `pid` is dead: gone, or a zombie waiting for its reaper.
pub fn is_dead(pid: u32, buf: &mut Vec<u8>) -> bool {
    if !read_stat(pid, buf) {
        return true;
    }
    match parse_stat(buf) {
        Some((state, _, _)) => state == b'Z' || state == b'X',
        None => true,
    }
}

/// A field of /proc/self/status in its own unit (kB for Vm*, a count for
/// Threads).
pub fn self_status(key: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/status").ok()?;
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(key)?.strip_prefix(':')?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// SIGKILL to a process group; "no such process" is fine.
pub fn killpg_kill(pgid: u32) {
    // SAFETY: plain syscall wrapper, no memory is passed.
    unsafe {
        libc::killpg(pgid as libc::pid_t, libc::SIGKILL);
    }
}

/// Raises the open-files limit: a hard limit of [`NOFILE_WANT`] if this
/// process may (CAP_SYS_RESOURCE), then the soft limit to the hard one
/// (`corral::process_wide::raise_nofile_limit`).
pub fn raise_nofile() {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `r` is a valid rlimit the kernel fills in / reads.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 {
            let want = NOFILE_WANT as libc::rlim_t;
            if r.rlim_max < want {
                let up = libc::rlimit {
                    rlim_cur: want,
                    rlim_max: want,
                };
                libc::setrlimit(libc::RLIMIT_NOFILE, &up);
            }
        }
    }
    let _ = corral::process_wide::raise_nofile_limit();
}

/// The descriptor limit the bench asks for.
pub const NOFILE_WANT: u64 = 1 << 18;

/// This process's (soft, hard) descriptor limits.
#[allow(clippy::unnecessary_cast)] // rlim_t is not u64 everywhere
pub fn nofile_limits() -> (u64, u64) {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `r` is a valid rlimit the kernel fills in.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } == 0 {
        (r.rlim_cur as u64, r.rlim_max as u64)
    } else {
        (0, 0)
    }
}

/// A named pipe that every process of a benchmark tree writes one byte to
/// when it has started. A spare write end held here keeps the read end from
/// ever seeing end-of-file or POLLHUP between trees.
pub struct Fifo {
    pub path: PathBuf,
    rx: OwnedFd,
    _keep: File,
}

impl Fifo {
    pub fn create(dir: &Path) -> io::Result<Fifo> {
        let path = dir.join("ready.fifo");
        let c = CString::new(path.as_os_str().as_bytes()).map_err(io::Error::other)?;
        // SAFETY: `c` is a valid NUL-terminated path.
        if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: valid path; the returned fd is owned below.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDONLY | libc::O_NONBLOCK | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just opened and is owned by nobody else.
        let rx = unsafe { OwnedFd::from_raw_fd(fd) };
        // std opens with O_CLOEXEC: children never inherit this spare writer.
        let keep = std::fs::OpenOptions::new().write(true).open(&path)?;
        Ok(Fifo {
            path,
            rx,
            _keep: keep,
        })
    }

    /// Discards bytes left by an earlier tree.
    pub fn drain(&self) {
        let mut b = [0u8; 4096];
        // SAFETY: valid buffer; non-blocking fd.
        while unsafe { libc::read(self.rx.as_raw_fd(), b.as_mut_ptr().cast(), b.len()) } > 0 {}
    }

    /// Waits until `n` bytes arrived or `until` passed; true when all did.
    pub fn wait_bytes(&self, n: usize, until: Instant) -> bool {
        let mut got = 0;
        let mut b = [0u8; 4096];
        while got < n {
            let now = Instant::now();
            if now >= until {
                return false;
            }
            let ms = (until - now).as_millis().clamp(1, 10_000) as i32;
            let mut pfd = libc::pollfd {
                fd: self.rx.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            unsafe { libc::poll(&mut pfd, 1, ms) };
            let want = (n - got).min(b.len());
            // SAFETY: valid buffer of at least `want` bytes.
            let r = unsafe { libc::read(self.rx.as_raw_fd(), b.as_mut_ptr().cast(), want) };
            if r > 0 {
                got += r as usize;
            }
        }
        true
    }
}

impl Drop for Fifo {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Group ids of every tree the benchmark started that could outlive a bug.
static TREES: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// Remembers a tree's group id for the final leak sweep.
pub fn track(pgid: u32) {
    TREES.lock().unwrap_or_else(|e| e.into_inner()).push(pgid);
}

/// Finds every live process of every tracked tree; kills them (by pid, and
/// only if they are the benchmark's own `sh`/`sleep`) and returns them.
pub fn sweep_leaks() -> Vec<(u32, String)> {
    let trees: Vec<u32> = std::mem::take(&mut *TREES.lock().unwrap_or_else(|e| e.into_inner()));
    if trees.is_empty() {
        return Vec::new();
    }
    let set: std::collections::HashSet<u32> = trees.into_iter().collect();
    let mut leaked = Vec::new();
    for_each_process(|pid, state, pgrp, comm| {
        if set.contains(&pgrp) && state != b'Z' && (comm == b"sleep" || comm == b"sh") {
            // SAFETY: plain syscall.
            unsafe {
                libc::kill(pid as libc::pid_t, libc::SIGKILL);
            }
            leaked.push((pid, String::from_utf8_lossy(comm).into_owned()));
        }
    });
    leaked
}

/// Sleeps until `at` (no-op if it passed).
pub fn sleep_until(at: Instant) {
    let now = Instant::now();
    if at > now {
        std::thread::sleep(at - now);
    }
}

/// Polls `pids` until every one is dead; returns when that was seen.
pub fn wait_all_dead(pids: &[u32], give_up: Duration) -> Option<Instant> {
    let mut buf = Vec::with_capacity(512);
    let end = Instant::now() + give_up;
    let mut i = 0;
    loop {
        while i < pids.len() && is_dead(pids[i], &mut buf) {
            i += 1;
        }
        let now = Instant::now();
        if i == pids.len() {
            return Some(now);
        }
        if now >= end {
            return None;
        }
        std::thread::sleep(Duration::from_micros(50));
    }
}
