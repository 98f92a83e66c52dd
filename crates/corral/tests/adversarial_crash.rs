//! Adversarial crash safety of a library host: a host that forks (without
//! exec) while its other threads run commands, and the fork runs commands
//! too. The keeper is per process, so this binary is its own process.
#![cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use corral::{Command, ContainmentChoice, Mechanism, Outcome, Output};

fn cmd(m: Mechanism, program: &str) -> Command {
    let mut c = Command::new(program);
    c.containment(ContainmentChoice::Only(m))
        .timeout(Duration::from_secs(10))
        // No pipe a fork could inherit and hold.
        .stdout(Output::null())
        .stderr(Output::null());
    c
}

/// A host forks while other threads of it register runs with its keeper
/// (the keeper's lock held for a moment at every spawn and every end). The
/// fork inherits the lock as it was: held by a thread that does not exist
/// in the fork. The fork's own runs must not wait for that lock (they have
/// a keeper of their own): every fork runs a command and exits within a
/// bound.
fn fork_while_other_threads_run(m: Mechanism) {
    let stop = Arc::new(AtomicBool::new(false));
    let busy: Vec<_> = (0..2)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let r = cmd(m, "true").run().unwrap();
                    assert!(matches!(r.outcome, Outcome::Exited(0)), "{r:?}");
                }
            })
        })
        .collect();
    // The busy threads run (and so started this process's keeper).
    std::thread::sleep(Duration::from_millis(100));
    let mut hung = 0;
    for _ in 0..150 {
        // SAFETY: the child only runs corral (allocation is fork-safe in
        // glibc) and leaves with _exit; the parent waits for it below.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let ok = std::panic::catch_unwind(|| {
                let r = cmd(m, "true").run().unwrap();
                matches!(r.outcome, Outcome::Exited(0)) && r.crash_safety.is_held()
            })
            .unwrap_or(false);
            // SAFETY: ends the fork without the parent's exit handlers.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut status = 0;
        loop {
            // SAFETY: waits for the child forked above, with a valid
            // status pointer.
            let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if r == pid {
                assert!(
                    libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
                    "the fork's run failed: {status:#x}"
                );
                break;
            }
            if Instant::now() > deadline {
                hung += 1;
                if std::env::var_os("ADV_GDB").is_some() {
                    let o = std::process::Command::new("gdb")
                        .args(["-p", &pid.to_string(), "-batch", "-ex", "bt"])
                        .output()
                        .unwrap();
                    eprintln!("{}", String::from_utf8_lossy(&o.stdout));
                }
                // SAFETY: `pid` is our unreaped child: no other process.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                    libc::waitpid(pid, &mut status, 0);
                }
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        if hung > 0 {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for t in busy {
        t.join().unwrap();
    }
    assert_eq!(hung, 0, "a fork hung in corral (an inherited lock)");
}

#[test]
fn a_fork_taken_while_other_threads_run_commands_can_run_its_own_process_group() {
    fork_while_other_threads_run(Mechanism::ProcessGroup);
}

#[corral_testkit::needs(cgroup)]
#[test]
fn a_fork_taken_while_other_threads_run_commands_can_run_its_own_cgroup() {
    fork_while_other_threads_run(Mechanism::Cgroup);
}

#[corral_testkit::needs(pidns)]
#[test]
fn a_fork_taken_while_other_threads_run_commands_can_run_its_own_pid_namespace() {
    fork_while_other_threads_run(Mechanism::PidNamespace);
}
