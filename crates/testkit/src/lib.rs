//! Test helpers for corral's process-tree tests.
//!
//! A test makes a [`Scratch`] directory, then a [`Watch`] on it **before**
//! the code under test runs. Scripts start helper processes with the `$H`
//! script (`"$H" NAME [COMMAND...]`, default `sleep 30`): each helper writes
//! its pid to `NAME.pid` (in a [`Scratch::namespaced`] one, its PID
//! namespace to `NAME.ns` first) and then runs COMMAND in place (same pid),
//! so every helper exits by itself within 30 s. The watch pins each helper as soon as
//! its pid file appears (a pidfd on Linux, after checking that the process
//! carries this scratch's unique marker in its environment), answers "is it
//! alive?" through that pinned identity, and on drop SIGKILLs every helper
//! still alive. Cleanup therefore never depends on the code under test, and
//! never kills by name.
//!
//! Scenario tests are tables: a [`scenario::Row`] states a tree and what
//! must come out of it (return bound, outcome, signals, leftovers, output,
//! the fate of every helper), and [`scenario::Tier`] runs it in one
//! containment tier and asserts all of it.

#![cfg(unix)]

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::process::{pidfd_open, pidfd_send_signal, Pid, PidfdFlags, Signal};

const HELPER: &str = r#"#!/bin/sh
# corral test helper: record my pid, then become COMMAND (default: sleep 30).
if [ "$1" = --probe ]; then exit 0; fi
name="$1"; shift
# In a PID-namespace test, my namespace first: pids inside namespaces repeat.
if [ -e "$CORRAL_TEST_DIR/NS" ]; then readlink /proc/self/ns/pid > "$CORRAL_TEST_DIR/$name.ns" 2>/dev/null; fi
echo $$ > "$CORRAL_TEST_DIR/$name.tmp" && mv "$CORRAL_TEST_DIR/$name.tmp" "$CORRAL_TEST_DIR/$name.pid"
if [ $# -eq 0 ]; then exec sleep 30; fi
exec "$@"
"#;

/// Shell text that waits until helper `name` is ready: it has written its
/// pid file **and** become `sleep` (so whatever its command did before
/// `exec sleep` — a `trap`, a `setsid` — is done) **and**, when the scratch
/// has a [`Watch`], the watch has pinned it (`NAME.pinned`). A root that
/// exits or is signalled right after starting a helper must wait for this
/// first: the pid file alone appears before the helper's own command runs,
/// and a helper killed before the watch pinned it cannot be told apart from
/// one that never started.
pub fn ready(name: &str) -> String {
    format!(
        r#"until [ "$(cat /proc/$(cat "$CORRAL_TEST_DIR/{name}.pid" 2>/dev/null)/comm 2>/dev/null)" = sleep ] && [ -e "$CORRAL_TEST_DIR/{name}.pinned" -o ! -e "$CORRAL_TEST_DIR/.watched" ]; do sleep 0.01; done; "#
    )
}

/// Shell text that waits until helper `name` has started its own command:
/// it has written its pid file **and** exec'd its command (it no longer
/// runs the `H` script, so the `mv` that wrote the pid file is gone, and
/// the tree is exactly as intended) **and**, when the scratch has a
/// [`Watch`], the watch has pinned it. For helpers whose command is not
/// `sleep` (otherwise use [`ready`], which also waits for a `trap` or
/// `setsid` before the `exec sleep` to be done).
pub fn started(name: &str) -> String {
    format!(
        r#"until [ -e "$CORRAL_TEST_DIR/{name}.pid" ] && [ "$(cat /proc/$(cat "$CORRAL_TEST_DIR/{name}.pid")/comm 2>/dev/null)" != H ] && [ -e "$CORRAL_TEST_DIR/{name}.pinned" -o ! -e "$CORRAL_TEST_DIR/.watched" ]; do sleep 0.01; done; "#
    )
}

/// A private directory for one test, with the helper script in it and a
/// unique marker that every helper carries in its environment.
pub struct Scratch {
    dir: PathBuf,
    mark: String,
}

impl Default for Scratch {
    fn default() -> Self {
        Self::new()
    }
}

/// Writes an executable file (mode 755) at `path` without ever holding it
/// open for writing in this process: a child process (`install(1)`) writes
/// it. A test thread that forks while this process holds a file open for
/// writing passes that descriptor on to its child until the child execs,
/// and an exec of the file in that window fails with ETXTBSY ("Text file
/// busy"). The content goes through a sibling file `<path>.src`, which is
/// never executed.
pub fn write_executable(path: &Path, content: &str) {
    let mut src = path.as_os_str().to_owned();
    src.push(".src");
    std::fs::write(&src, content).unwrap();
    let status = std::process::Command::new("install")
        .arg("-m")
        .arg("0755")
        .arg(&src)
        .arg(path)
        .status()
        .expect("run install(1) to write an executable");
    assert!(status.success(), "install(1) failed for {}", path.display());
}

impl Scratch {
    /// A fresh directory under the system temp dir.
    pub fn new() -> Scratch {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::SeqCst);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let mark = format!("corral-test-{}-{}-{}", std::process::id(), n, nanos);
        let dir = std::env::temp_dir().join(&mark);
        std::fs::create_dir_all(&dir).unwrap();
        write_executable(&dir.join("H"), HELPER);
        Scratch { dir, mark }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A path inside the directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Makes a FIFO named `name` in the scratch directory (mode 0600) and
    /// returns its path: helpers that `read x < "$CORRAL_TEST_DIR/NAME"`
    /// wait until a writer comes and goes.
    #[cfg(unix)]
    pub fn fifo(&self, name: &str) -> PathBuf {
        let path = self.path(name);
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &path,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .expect("mkfifo");
        path
    }

    /// The environment a script needs: `H` (the helper), `ZL` (the
    /// [`zombie_leader`] helper program), `CORRAL_TEST_DIR` and the marker.
    pub fn env(&self) -> Vec<(OsString, OsString)> {
        vec![
            ("H".into(), self.dir.join("H").into()),
            ("ZL".into(), zombie_leader().into()),
            ("CORRAL_TEST_DIR".into(), self.dir.clone().into()),
            ("CORRAL_TEST_MARK".into(), self.mark.clone().into()),
        ]
    }

    /// Waits up to `timeout` for file `name` to appear in the directory.
    pub fn wait_file(&self, name: &str, timeout: Duration) -> bool {
        let end = Instant::now() + timeout;
        loop {
            if self.dir.join(name).exists() {
                return true;
            }
            if Instant::now() >= end {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// `sh -c SCRIPT` as a corral command with this scratch's environment.
    pub fn sh(&self, script: &str) -> corral_command::Command {
        let mut c = corral_command::Command::new("/bin/sh");
        c.arg("-c").arg(script).envs(self.env());
        c
    }

    /// Declares that this scratch's helpers run in a PID namespace: a helper
    /// whose pid file names a process that can no longer be found was
    /// reaped by the namespace's init, and the watch records it as gone.
    pub fn namespaced(&self) -> &Scratch {
        let _ = std::fs::write(self.dir.join("NS"), b"");
        self
    }

    /// The marker helpers carry (`CORRAL_TEST_MARK=<mark>`).
    pub fn mark(&self) -> &str {
        &self.mark
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Scratch {
    /// Live processes carrying this scratch's marker in their environment:
    /// its helpers and whatever they started (zombies do not count).
    pub fn marked_processes(&self) -> Vec<u32> {
        let needle = format!("CORRAL_TEST_MARK={}", self.mark);
        let Ok(rd) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        rd.flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| {
                let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                let dead = stat.rsplit_once(')').is_some_and(|(_, r)| {
                    matches!(r.trim_start().as_bytes().first(), Some(b'Z' | b'X'))
                });
                !dead && env.split(|&b| b == 0).any(|kv| kv == needle.as_bytes())
            })
            .collect()
    }

    /// Asserts that no process with this scratch's marker is alive (waiting
    /// up to 2 s for the dying).
    #[track_caller]
    pub fn assert_none_left(&self) {
        let end = Instant::now() + Duration::from_secs(2);
        loop {
            let left = self.marked_processes();
            if left.is_empty() {
                return;
            }
            assert!(
                Instant::now() < end,
                "processes of the tree survived: {left:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Re-export so `Scratch::sh` can name corral's command without a cycle in
/// the docs.
pub mod corral_command {
    pub use corral::Command;
}

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
        let dir = scratch.dir.clone();
        let mark = format!("CORRAL_TEST_MARK={}", scratch.mark);
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
/// leader thread exited (see [`zombie_leader`]) shows an empty
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

/// The `corral-zombie-leader` helper program (built from
/// `helpers/zombie_leader.rs` by this crate's build script): run as
/// `"$H" NAME "$ZL" NAME [hold]`, it ignores SIGTERM/SIGINT/SIGHUP, its
/// main thread exits while a second thread keeps the process alive
/// (`/proc/PID/stat` shows `Z`), and it writes `NAME.zombie` in the
/// scratch directory once the leader is a zombie. Without `hold` its
/// standard streams point to /dev/null. It ends itself within 30 s.
pub fn zombie_leader() -> PathBuf {
    PathBuf::from(env!("CORRAL_ZOMBIE_LEADER"))
}

/// The `corral-blank-environ` helper program (built from
/// `helpers/blank_environ.rs`): run as `"$H" NAME "$BE" NAME`, once pinned
/// it makes its `/proc/PID/environ` read empty (as a process's does for a
/// moment while it is in `execve`; needs root) and writes `NAME.blank`
/// (`NAME.failed` if it could not); once re-parented it waits 300 ms,
/// restores it (`NAME.restored`) and exits 1 s later.
pub fn blank_environ() -> PathBuf {
    PathBuf::from(env!("CORRAL_BLANK_ENVIRON"))
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
/// pid 4 in its namespace, was pinned as its fork's helper, pid 4 in
/// another (1 run in 100 of `adversarial_crash::a_fork_survives_its_parents_death_pid_namespace`).
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

/// Asserts that `elapsed` is within `[min, max]`, with a readable message.
#[track_caller]
pub fn assert_between(elapsed: Duration, min: Duration, max: Duration) {
    assert!(
        elapsed >= min && elapsed <= max,
        "took {elapsed:?}, expected between {min:?} and {max:?}"
    );
}

pub use corral_testkit_macros::needs;

pub mod invariants;
#[cfg(target_os = "linux")]
pub mod keeper;
pub mod scenario;

/// The run-time half of [`needs`]: fails the test when a requirement that
/// held where the test was built does not hold here (the kinds are listed
/// in [`needs`]'s documentation).
#[track_caller]
pub fn require(what: &str) {
    assert!(
        holds(what),
        "this test needs {what}, which was available where the test binary was built \
         but is not here: rebuild the tests as this user (cargo test), or build them with \
         CORRAL_TEST_ASSUME_UNPRIVILEGED=1 to run them unprivileged"
    );
}

/// Whether requirement `what` of [`needs`] holds for this process now.
pub fn holds(what: &str) -> bool {
    match what {
        "cgroup" => writable_cgroup_v2().is_some(),
        "limits" => limits_hold(),
        "pidns" => pidns_holds(),
        "userns" => userns_holds(),
        "unshare" | "script" => std::process::Command::new(what)
            .arg("--version")
            .output()
            .is_ok(),
        #[cfg(unix)]
        "root" => rustix::process::geteuid().is_root(),
        "freezer_v1" => {
            std::path::Path::new("/sys/fs/cgroup/freezer/freezer.state").exists()
                || std::path::Path::new("/sys/fs/cgroup/freezer/cgroup.procs").exists()
        }
        #[cfg(target_os = "linux")]
        "v2limits" => v2_gives(&["memory", "pids"]),
        #[cfg(target_os = "linux")]
        "v2hugetlb" => v2_gives(&["hugetlb"]),
        #[cfg(target_os = "linux")]
        "v1limits" => {
            rustix::process::geteuid().is_root()
                && ["pids", "memory"].iter().all(|c| v1_hierarchy(c).is_some())
        }
        _ => false,
    }
}

/// Root, and a child of this process's v2 cgroup can have every one of
/// `ctrls`: they are enabled for its children, or it is the hierarchy's
/// root and offers them (the kinds `v2limits`, `v2hugetlb` of [`needs`]).
#[cfg(target_os = "linux")]
pub fn v2_gives(ctrls: &[&str]) -> bool {
    let Some(own) = own_cgroup_v2() else {
        return false;
    };
    let has = |file: PathBuf| {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        ctrls
            .iter()
            .all(|c| text.split_whitespace().any(|w| w == *c))
    };
    let at_root = !own.join("..").join("cgroup.procs").exists();
    rustix::process::geteuid().is_root()
        && (has(own.join("cgroup.subtree_control"))
            || (at_root && has(own.join("cgroup.controllers"))))
}

/// This process's own cgroup v2 directory.
#[cfg(target_os = "linux")]
pub fn own_cgroup_v2() -> Option<PathBuf> {
    let mi = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let point = mi.lines().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        post.starts_with("cgroup2 ")
            .then(|| pre.split(' ').nth(4).map(PathBuf::from))?
    })?;
    let cg = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let own = cg.lines().find_map(|l| l.strip_prefix("0::"))?;
    Some(point.join(own.trim_start_matches('/')))
}

/// This process's own group in the v1 hierarchy of `controller`, if one
/// is mounted.
#[cfg(target_os = "linux")]
pub fn v1_hierarchy(controller: &str) -> Option<PathBuf> {
    let mi = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let (root, point) = mi.lines().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        let p: Vec<&str> = post.split(' ').collect();
        let f: Vec<&str> = pre.split(' ').collect();
        (p.first() == Some(&"cgroup") && p.get(2)?.split(',').any(|o| o == controller))
            .then(|| Some((f.get(3)?.to_string(), PathBuf::from(f.get(4)?))))?
    })?;
    let cg = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = cg.lines().find_map(|l| {
        let mut it = l.splitn(3, ':');
        let _ = it.next()?;
        let ctrls = it.next()?;
        let p = it.next()?;
        ctrls.split(',').any(|c| c == controller).then_some(p)
    })?;
    let rel = path.strip_prefix(root.as_str()).unwrap_or(path);
    Some(point.join(rel.trim_start_matches('/')))
}

/// corral sets a pids and a memory limit on a cgroup here.
#[cfg(target_os = "linux")]
fn limits_hold() -> bool {
    writable_cgroup_v2().is_some()
        && corral::Command::new("true")
            .containment(corral::ContainmentChoice::Only(corral::Mechanism::Cgroup))
            .pids_max(1024)
            .memory_max(1 << 30)
            .run()
            .is_ok_and(|r| r.exit_code() == Some(0))
}

/// corral's `pid-namespace` tier works here.
#[cfg(target_os = "linux")]
fn pidns_holds() -> bool {
    corral::Command::new("true")
        .containment(corral::ContainmentChoice::Only(
            corral::Mechanism::PidNamespace,
        ))
        .run()
        .is_ok_and(|r| r.exit_code() == Some(0))
}

/// A child process can make a new user namespace.
#[cfg(target_os = "linux")]
fn userns_holds() -> bool {
    use std::os::unix::process::CommandExt;
    extern "C" {
        fn unshare(flags: std::ffi::c_int) -> std::ffi::c_int;
    }
    const CLONE_NEWUSER: std::ffi::c_int = 0x1000_0000;
    let mut cmd = std::process::Command::new("true");
    // SAFETY: the closure runs in the forked child before exec and makes
    // one system call without pointers, then reads errno: both
    // async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            if unshare(CLONE_NEWUSER) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    cmd.status().is_ok_and(|s| s.success())
}

#[cfg(not(target_os = "linux"))]
fn limits_hold() -> bool {
    false
}

#[cfg(not(target_os = "linux"))]
fn pidns_holds() -> bool {
    false
}

#[cfg(not(target_os = "linux"))]
fn userns_holds() -> bool {
    false
}

/// This process's own cgroup v2 directory, if it can create children there
/// (root, or a delegated subtree); `None` means cgroup tests must skip.
pub fn writable_cgroup_v2() -> Option<PathBuf> {
    let mi = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let point = mi.lines().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        post.starts_with("cgroup2 ")
            .then(|| pre.split(' ').nth(4).map(PathBuf::from))?
    })?;
    let cg = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let own = cg.lines().find_map(|l| l.strip_prefix("0::"))?;
    let dir = point.join(own.trim_start_matches('/'));
    // One name per call: tests of one process probe concurrently.
    static PROBES: AtomicUsize = AtomicUsize::new(0);
    let n = PROBES.fetch_add(1, Ordering::Relaxed);
    let probe = dir.join(format!("corral-probe-{}-{n}", std::process::id()));
    std::fs::create_dir(&probe).ok()?;
    std::fs::remove_dir(&probe).ok()?;
    Some(dir)
}

impl Scratch {
    /// Environment that points corral's cgroup detection at a fake,
    /// unusable cgroup v2 hierarchy (`CORRAL_MOUNTINFO`,
    /// `CORRAL_PROC_CGROUP`), so the fallback paths can be tested as root.
    pub fn fake_readonly_cgroup_env(&self) -> Vec<(OsString, OsString)> {
        let mountinfo = self.path("mountinfo");
        std::fs::write(
            &mountinfo,
            format!(
                "41 31 0:38 / {} ro,relatime - cgroup2 cgroup2 ro\n",
                self.path("nonexistent").display()
            ),
        )
        .unwrap();
        let proc_cgroup = self.path("cgroup");
        std::fs::write(&proc_cgroup, "0::/\n").unwrap();
        vec![
            ("CORRAL_MOUNTINFO".into(), mountinfo.into()),
            ("CORRAL_PROC_CGROUP".into(), proc_cgroup.into()),
        ]
    }
}

/// Runs the `#[ignore]`d test `name` of the current test binary in a child
/// process with `env` added (for tests whose setting is process-wide), and
/// returns its stdout after asserting that it passed.
#[track_caller]
pub fn run_ignored_test_in_child(name: &str, env: &[(OsString, OsString)]) -> String {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--ignored"])
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}
