//! The child setup options (`Command::arg0`, `uid`, `gid`, `groups`,
//! `umask`, `new_session`, `close_other_fds`, `restore_signals`), through
//! each spawn path: std's (process group tier), clone3 into a cgroup, and the
//! PID namespace's command. A path this machine cannot take is skipped per
//! path; the process-group path always runs.
#![cfg(linux_raw)]

use std::os::fd::{AsFd, AsRawFd};

use corral::{Command, ContainmentChoice, Error, Mechanism, Output};

const PATHS: [Mechanism; 3] = [
    Mechanism::ProcessGroup,
    Mechanism::Cgroup,
    Mechanism::PidNamespace,
];

/// Runs `sh -c script` configured by `f` through every available path;
/// returns (path, stdout, exit code).
fn through_every_path(
    script: &str,
    f: impl Fn(&mut Command),
) -> Vec<(Mechanism, String, Option<i32>)> {
    let mut out = Vec::new();
    for m in PATHS {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", script])
            .containment(ContainmentChoice::Only(m))
            .stdout(Output::capture())
            .timeout(std::time::Duration::from_secs(60));
        f(&mut cmd);
        match cmd.run() {
            Ok(r) => out.push((m, r.stdout.text_lossy(), r.exit_code())),
            Err(Error::Containment { .. }) => assert_ne!(m, Mechanism::ProcessGroup),
            Err(e) => panic!("{m:?}: {e}"),
        }
    }
    assert!(!out.is_empty());
    out
}

#[test]
fn arg0_is_what_the_program_sees_while_the_program_runs() {
    for m in PATHS {
        let mut cmd = Command::new("/bin/sh");
        cmd.arg0("not-a-program")
            .args(["-c", "echo \"$0\""])
            .containment(ContainmentChoice::Only(m));
        match cmd.run() {
            Ok(r) => assert_eq!(r.stdout.text_lossy(), "not-a-program\n", "{m:?}"),
            Err(Error::Containment { .. }) => {}
            Err(e) => panic!("{m:?}: {e}"),
        }
    }
}

#[test]
fn umask_is_set() {
    for (m, out, code) in through_every_path("umask", |c| {
        c.umask(0o027);
    }) {
        assert_eq!((out.as_str(), code), ("0027\n", Some(0)), "{m:?}");
    }
}

#[test]
fn new_session_makes_the_root_lead_a_session_and_its_group() {
    // Fields 5 and 6 of /proc/PID/stat: process group and session.
    let script = r#"set -- $(cat /proc/$$/stat); echo "$$ $5 $6""#;
    for (m, out, _) in through_every_path(script, |c| {
        c.new_session(true);
    }) {
        let v: Vec<&str> = out.split_whitespace().collect();
        assert_eq!(v.len(), 3, "{m:?}: {out}");
        assert!(v[0] == v[1] && v[1] == v[2], "{m:?}: pid pgrp sid = {out}");
    }
    // Without it (the PID namespace's command is its init's child there, in
    // the init's group: not compared).
    for (m, out, _) in through_every_path(script, |_| {}) {
        if m == Mechanism::PidNamespace {
            continue;
        }
        let v: Vec<&str> = out.split_whitespace().collect();
        assert_eq!(v[0], v[1], "{m:?}: the root leads its group: {out}");
        // libc's getsid: the session is 0 when its leader is outside this
        // PID namespace (as in some CI containers), which rustix's panics on.
        // SAFETY: getsid(0) reads this process's session and touches no memory.
        let own_sid = unsafe { libc::getsid(0) };
        assert_eq!(
            v[2],
            own_sid.to_string(),
            "{m:?}: same session without new_session"
        );
    }
}

#[test]
fn close_other_fds_keeps_only_the_listed_descriptors() {
    let (r, w) = rustix::pipe::pipe().unwrap();
    // Inheritable, as a Python os.set_inheritable(fd, True).
    rustix::io::fcntl_setfd(w.as_fd(), rustix::io::FdFlags::empty()).unwrap();
    let n = w.as_raw_fd();
    let script = format!("[ -e /proc/self/fd/{n} ] && echo open || echo closed");
    // (The PID namespace's init closes every other descriptor anyway.)
    for (m, out, _) in through_every_path(&script, |_| {}) {
        if m != Mechanism::PidNamespace {
            assert_eq!(
                out, "open\n",
                "{m:?}: an inheritable descriptor is inherited by default"
            );
        }
    }
    for (m, out, _) in through_every_path(&script, |c| {
        c.close_other_fds([]);
    }) {
        assert_eq!(out, "closed\n", "{m:?}");
    }
    rustix::io::fcntl_setfd(w.as_fd(), rustix::io::FdFlags::CLOEXEC).unwrap();
    for m in PATHS {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", &script])
            .containment(ContainmentChoice::Only(m))
            .close_other_fds([n]);
        match cmd.run() {
            Ok(r) => assert_eq!(
                r.stdout.text_lossy(),
                "open\n",
                "{m:?}: a kept descriptor is inherited even if close-on-exec"
            ),
            Err(Error::Containment { .. }) => {}
            // The PID namespace's init cannot pass it on: a clear error.
            Err(e) if m == Mechanism::PidNamespace => {
                assert!(e.full_message().contains("PID namespace"), "{e}")
            }
            Err(e) => panic!("{m:?}: {e}"),
        }
    }
    drop((r, w));
}

#[test]
fn restore_signals_resets_an_ignored_sigxfsz() {
    // SAFETY: sets SIGXFSZ to ignored in this test process (as CPython does
    // at start); no handler is installed, nothing here writes past a file
    // size limit.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
    let script = "grep SigIgn /proc/self/status";
    let bit = 1u64 << (libc::SIGXFSZ - 1);
    let ignored = |out: &str| {
        let hex = out.split_whitespace().nth(1).unwrap();
        u64::from_str_radix(hex, 16).unwrap() & bit != 0
    };
    for (m, out, _) in through_every_path(script, |_| {}) {
        assert!(ignored(&out), "{m:?}: kept ignored by default: {out}");
    }
    for (m, out, _) in through_every_path(script, |c| {
        c.restore_signals(true);
    }) {
        assert!(!ignored(&out), "{m:?}: restored: {out}");
    }
}

#[corral_testkit::needs(root)]
#[test]
fn uid_gid_and_groups_are_set_in_order() {
    for (m, out, code) in through_every_path("id -u; id -g; id -G", |c| {
        c.uid(65534).gid(65533).groups(&[65532, 65531]);
    }) {
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(code, Some(0), "{m:?}: {out}");
        assert_eq!(&lines[..2], ["65534", "65533"], "{m:?}");
        let mut groups: Vec<&str> = lines[2].split_whitespace().collect();
        groups.sort();
        assert_eq!(groups, ["65531", "65532", "65533"], "{m:?}");
    }
}

#[test]
fn an_id_change_that_is_not_allowed_is_a_spawn_error() {
    if rustix::process::geteuid().is_root() {
        return; // everything is allowed to root: covered by the test above
    }
    let other = rustix::process::getuid().as_raw() + 1;
    let e = Command::new("true")
        .uid(other)
        .containment(ContainmentChoice::Only(Mechanism::ProcessGroup))
        .run()
        .unwrap_err();
    assert!(matches!(e, Error::Spawn { .. }), "{e}");
}
