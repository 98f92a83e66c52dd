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

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

#[cfg(target_os = "linux")]
mod watch;
#[cfg(target_os = "linux")]
pub use watch::{thread_group_alive, Watch};

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
#[cfg(target_os = "linux")]
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
#[cfg(target_os = "linux")]
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

/// Puts SIGHUP, SIGINT and SIGQUIT back to their default action in this
/// process if they are ignored (once a process). A test binary started
/// under `nohup` (SIGHUP) or as a background job of a non-interactive shell
/// (SIGINT, SIGQUIT) inherits them ignored, and so would every command a
/// test starts: a command would not die of SIGINT, and corral, which
/// leaves a signal ignored at start ignored, would not pass it on. The
/// tests assume what an interactive shell gives; a test about an ignored
/// signal ignores it itself. [`Scratch::new`] calls this.
pub fn default_launch_signals() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        for sig in [libc::SIGHUP, libc::SIGINT, libc::SIGQUIT] {
            // SAFETY: sigaction with a null new action only reads the
            // current one into `old`, a zeroed, valid `sigaction`.
            let ignored = unsafe {
                let mut old: libc::sigaction = std::mem::zeroed();
                libc::sigaction(sig, std::ptr::null(), &mut old) == 0
                    && old.sa_sigaction == libc::SIG_IGN
            };
            if ignored {
                // SAFETY: SIG_DFL is a valid disposition for these
                // catchable signals; no handler is installed, so nothing
                // runs in signal context.
                unsafe { libc::signal(sig, libc::SIG_DFL) };
            }
        }
    });
}

impl Scratch {
    /// A fresh directory under the system temp dir (and
    /// [`default_launch_signals`], so that the commands the test starts
    /// get the signals they would from an interactive shell).
    pub fn new() -> Scratch {
        default_launch_signals();
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
    pub fn fifo(&self, name: &str) -> PathBuf {
        let path = self.path(name);
        let status = std::process::Command::new("mkfifo")
            .args(["-m", "600"])
            .arg(&path)
            .status()
            .expect("run mkfifo(1)");
        assert!(status.success(), "mkfifo(1) failed for {}", path.display());
        path
    }

    /// The environment a script needs: `H` (the helper), `ZL` (the
    /// `zombie_leader` helper program, Linux only), `CORRAL_TEST_DIR` and
    /// the marker.
    pub fn env(&self) -> Vec<(OsString, OsString)> {
        #[cfg_attr(not(target_os = "linux"), allow(unused_mut))]
        let mut env: Vec<(OsString, OsString)> = vec![
            ("H".into(), self.dir.join("H").into()),
            ("CORRAL_TEST_DIR".into(), self.dir.clone().into()),
            ("CORRAL_TEST_MARK".into(), self.mark.clone().into()),
        ];
        #[cfg(target_os = "linux")]
        env.push(("ZL".into(), zombie_leader().into()));
        env
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

#[cfg(target_os = "linux")]
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

/// The `corral-zombie-leader` helper program (built from
/// `helpers/zombie_leader.rs` by this crate's build script): run as
/// `"$H" NAME "$ZL" NAME [hold]`, it ignores SIGTERM/SIGINT/SIGHUP, its
/// main thread exits while a second thread keeps the process alive
/// (`/proc/PID/stat` shows `Z`), and it writes `NAME.zombie` in the
/// scratch directory once the leader is a zombie. Without `hold` its
/// standard streams point to /dev/null. It ends itself within 30 s.
#[cfg(target_os = "linux")]
pub fn zombie_leader() -> PathBuf {
    PathBuf::from(env!("CORRAL_ZOMBIE_LEADER"))
}

/// The `corral-blank-environ` helper program (built from
/// `helpers/blank_environ.rs`): run as `"$H" NAME "$BE" NAME`, once pinned
/// it makes its `/proc/PID/environ` read empty (as a process's does for a
/// moment while it is in `execve`; needs root) and writes `NAME.blank`
/// (`NAME.failed` if it could not); once re-parented it waits 300 ms,
/// restores it (`NAME.restored`) and exits 1 s later.
#[cfg(target_os = "linux")]
pub fn blank_environ() -> PathBuf {
    PathBuf::from(env!("CORRAL_BLANK_ENVIRON"))
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

#[cfg(target_os = "linux")]
pub mod freezer;
pub mod invariants;
#[cfg(target_os = "linux")]
pub mod keeper;
pub mod layers;
#[cfg(target_os = "linux")]
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
