//! The watch (Linux): pins each helper by a pidfd as soon as its pid file
//! appears, after checking in `/proc` that the process carries the
//! scratch's marker, and SIGKILLs the survivors on drop.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::process::{pidfd_open, pidfd_send_signal, Pid, PidfdFlags, Signal};

use crate::Scratch;

struct Pinned {
    pid: u32,
    /// `None`: the helper was already gone (reaped) when its pid file was
    /// found — possible in a PID namespace, whose init reaps at once.
    fd: Option<OwnedFd>,
}

/// Watches a scratch directory for helper pid files, pins each helper, and
/// kills survivors on drop.
pub struct Watch {
    pinned: Arc<Mutex<HashMap<String, Pinned>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Watch {
    /// Starts watching. Call before running the code under test.
    pub fn new(scratch: &Scratch) -> Watch {
        let pinned: Arc<Mutex<HashMap<String, Pinned>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let dir = scratch.dir().to_path_buf();
        let mark = format!("CORRAL_TEST_MARK={}", scratch.mark());
        // Tells `ready` scripts to wait for the pin too (`NAME.pinned`).
        std::fs::write(dir.join(".watched"), b"").expect("cannot write to the scratch directory");
        let (p, s) = (pinned.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut missing = HashMap::new();
            while !s.load(Ordering::SeqCst) {
                scan(&dir, &mark, &p, &mut missing);
                std::thread::sleep(Duration::from_millis(1));
            }
            scan(&dir, &mark, &p, &mut missing);
        });
        Watch {
            pinned,
            stop,
            thread: Some(thread),
        }
    }

    /// The pid of helper `name`, waiting up to `timeout` for it to appear.
    pub fn pid(&self, name: &str, timeout: Duration) -> Option<u32> {
        let end = Instant::now() + timeout;
        loop {
            if let Some(p) = self.pinned.lock().unwrap().get(name) {
                return Some(p.pid);
            }
            if Instant::now() >= end {
                return None;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Whether helper `name` was seen and is still alive.
    pub fn is_alive(&self, name: &str) -> bool {
        let g = self.pinned.lock().unwrap();
        g.get(name)
            .is_some_and(|p| p.fd.as_ref().is_some_and(|fd| !exited(fd, Duration::ZERO)))
    }

    /// Waits up to `timeout` for helper `name` to be gone; true if it is.
    /// A helper never seen counts as gone.
    pub fn wait_dead(&self, name: &str, timeout: Duration) -> bool {
        let g = self.pinned.lock().unwrap();
        match g.get(name) {
            Some(p) => p.fd.as_ref().is_none_or(|fd| exited(fd, timeout)),
            None => true,
        }
    }

    /// Names of every helper seen so far.
    pub fn names(&self) -> Vec<String> {
        self.pinned.lock().unwrap().keys().cloned().collect()
    }

    /// Sends `sig` to helper `name` through its pidfd.
    pub fn signal(&self, name: &str, sig: Signal) {
        if let Some(p) = self.pinned.lock().unwrap().get(name) {
            if let Some(fd) = &p.fd {
                let _ = pidfd_send_signal(fd, sig);
            }
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let g = self.pinned.lock().unwrap_or_else(|e| e.into_inner());
        for p in g.values() {
            if let Some(fd) = &p.fd {
                let _ = pidfd_send_signal(fd, Signal::KILL);
            }
        }
        for p in g.values() {
            if let Some(fd) = &p.fd {
                exited(fd, Duration::from_secs(2));
            }
        }
    }
}

/// How long a namespaced helper must stay unfindable before it is taken
/// for reaped (a live one can be missed by one scan while it execs).
const GONE_AFTER: Duration = Duration::from_millis(100);

fn scan(
    dir: &Path,
    mark: &str,
    pinned: &Mutex<HashMap<String, Pinned>>,
    missing: &mut HashMap<String, Instant>,
) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(stem) = name.strip_suffix(".pid") else {
            continue;
        };
        if pinned.lock().unwrap().contains_key(stem) {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(e.path()) else {
            continue;
        };
        let Ok(pid) = text.trim().parse::<u32>() else {
            continue;
        };
        let Some(raw) = Pid::from_raw(pid as i32) else {
            continue;
        };
        // The helper's PID namespace (`pid:[INODE]`), when it wrote one.
        // Pids inside namespaces repeat: pid 4 of one run's namespace and
        // pid 4 of another's (or of a parent host's run and of its fork's,
        // both marked) are told apart by it, never by the pid alone.
        let ns = std::fs::read_to_string(dir.join(format!("{stem}.ns")))
            .ok()
            .map(|t| t.trim().to_owned())
            .filter(|t| t.starts_with("pid:["));
        let inner = ns.as_deref().is_some_and(|ns| !same_ns("self", ns));
        let direct = if inner {
            // A pid inside another namespace: the host pid of that number
            // is some other process.
            Err(rustix::io::Errno::SRCH)
        } else {
            pidfd_open(raw, PidfdFlags::empty())
        };
        let Ok(fd) = direct else {
            // Already gone before we could pin it: record it as dead by
            // pinning nothing; `wait_dead` treats unknown names as gone.
            // (Or a pid from inside a PID namespace: looked up below.)
            if let Some(p) = pin_namespaced(pid, mark, ns.as_deref()) {
                pinned.lock().unwrap().insert(stem.to_owned(), p);
                mark_pinned(dir, stem);
            } else if namespaced_scratch(dir) && gone_for(missing, stem) {
                // Gone already: its namespace's init reaped it.
                pinned
                    .lock()
                    .unwrap()
                    .insert(stem.to_owned(), Pinned { pid, fd: None });
                mark_pinned(dir, stem);
            }
            continue;
        };
        // The pidfd pins *some* process; make sure it is our helper (and not
        // a reused pid) by its marker.
        if carries_mark(pid, mark) || exited(&fd, Duration::ZERO) {
            pinned
                .lock()
                .unwrap()
                .insert(stem.to_owned(), Pinned { pid, fd: Some(fd) });
            mark_pinned(dir, stem);
        } else if let Some(p) = pin_namespaced(pid, mark, ns.as_deref()) {
            pinned.lock().unwrap().insert(stem.to_owned(), p);
            mark_pinned(dir, stem);
        } else if namespaced_scratch(dir) && gone_for(missing, stem) {
            pinned
                .lock()
                .unwrap()
                .insert(stem.to_owned(), Pinned { pid, fd: None });
            mark_pinned(dir, stem);
        }
    }
}

/// Whether process `pid` carries `mark` in its environment. A process whose
/// leader thread exited (see [`crate::zombie_leader`]) shows an empty
/// `/proc/PID/environ`; its live threads still show the environment.
fn carries_mark(pid: u32, mark: &str) -> bool {
    let has = |path: PathBuf| {
        std::fs::read(path)
            .unwrap_or_default()
            .split(|&b| b == 0)
            .any(|kv| kv == mark.as_bytes())
    };
    if has(PathBuf::from(format!("/proc/{pid}/environ"))) {
        return true;
    }
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|rd| rd.flatten().any(|t| has(t.path().join("environ"))))
        .unwrap_or(false)
}

/// Whether any thread of process `pid` is alive (its leader may show `Z`).
pub fn thread_group_alive(pid: u32) -> bool {
    let Some(raw) = Pid::from_raw(pid as i32) else {
        return false;
    };
    match pidfd_open(raw, PidfdFlags::empty()) {
        Ok(fd) => !exited(&fd, Duration::ZERO),
        Err(_) => false,
    }
}

/// Whether this scratch's helpers run in a PID namespace (a `NS` file the
/// test creates with [`Scratch::namespaced`]): only then may a pid file
/// whose process cannot be found be taken for a helper already reaped.
fn namespaced_scratch(dir: &Path) -> bool {
    dir.join("NS").exists()
}

/// Whether helper `stem` has been unfindable for [`GONE_AFTER`].
fn gone_for(missing: &mut HashMap<String, Instant>, stem: &str) -> bool {
    let since = *missing.entry(stem.to_owned()).or_insert_with(Instant::now);
    since.elapsed() >= GONE_AFTER
}

/// Tells a script that helper `stem` is pinned (`NAME.pinned` appears), so
/// a tree can wait for the watch before it moves on.
fn mark_pinned(dir: &Path, stem: &str) {
    let _ = std::fs::write(dir.join(format!("{stem}.pinned")), b"");
}

/// Whether process `pid` (or `self`) is in PID namespace `ns` (as
/// `/proc/PID/ns/pid` reads: `pid:[INODE]`).
fn same_ns(pid: &str, ns: &str) -> bool {
    std::fs::read_link(format!("/proc/{pid}/ns/pid")).is_ok_and(|l| l.as_os_str() == ns)
}

/// A helper that runs in a PID namespace writes its pid *inside* the
/// namespace. Finds the host process that carries the marker, whose
/// innermost pid (the last `NSpid` field) is `inner` and, when the helper
/// named it, whose PID namespace is `ns`, and pins it (the marker and the
/// namespace are checked again after the pidfd is open). Without `ns` a
/// marked process of another namespace with the same inner pid could be
/// taken for the helper: a parent host's `ready` loop's short-lived `cat`,
/// pid 4 in its namespace, could be pinned as its fork's helper, pid 4
/// in another (`adversarial_crash::a_fork_survives_its_parents_death_pid_namespace`).
fn pin_namespaced(inner: u32, mark: &str, ns: Option<&str>) -> Option<Pinned> {
    let is_it =
        |pid: u32| carries_mark(pid, mark) && ns.is_none_or(|ns| same_ns(&pid.to_string(), ns));
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let Some(nspid) = status.lines().find_map(|l| l.strip_prefix("NSpid:")) else {
            continue;
        };
        let fields: Vec<&str> = nspid.split_whitespace().collect();
        if fields.len() < 2 || fields.last() != Some(&inner.to_string().as_str()) {
            continue;
        }
        if !is_it(pid) {
            continue;
        }
        let fd = pidfd_open(Pid::from_raw(pid as i32)?, PidfdFlags::empty()).ok()?;
        if is_it(pid) {
            return Some(Pinned { pid, fd: Some(fd) });
        }
    }
    None
}

/// Whether the pinned process has exited, waiting up to `timeout`.
fn exited(fd: &OwnedFd, timeout: Duration) -> bool {
    let end = Instant::now() + timeout;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        let ts = Timespec {
            tv_sec: left.as_secs() as _,
            tv_nsec: left.subsec_nanos() as _,
        };
        let mut fds = [PollFd::new(fd, PollFlags::IN)];
        match poll(&mut fds, Some(&ts)) {
            Ok(n) if n > 0 => return true,
            Ok(_) => return false,
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return true,
        }
    }
}
