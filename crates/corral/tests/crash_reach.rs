//! The keeper's reach when a library host dies:
//! in the subreaper tier (what `auto` picks for every unprivileged user)
//! and the process-group tier, escapers that left the root's process group
//! (`setsid`, a double fork re-parented to the host) die with the host,
//! found by the tree's cookie; and the keeper holds the tree before the
//! root exists (`OsOp::KeeperHolds` before `OsOp::Spawned`), so no moment
//! between the spawn and the root's own registration is uncovered.
//!
//! Each host is a child process (this binary, one `#[ignore]`d test): the
//! keeper is per process, and the host is SIGKILLed.
#![cfg(linux_raw)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use corral::{Command, ContainmentChoice, Mechanism, OsOp, Outcome, Output};
use corral_testkit::{ready, Scratch, Watch};

const SEC: Duration = Duration::from_secs(1);

/// How soon after the host's death every process of its trees is gone
/// (the README's bound: the keeper sees the death at once and kills within
/// milliseconds; slack for a loaded machine).
const BOUND: Duration = Duration::from_secs(3);

/// One at a time: each starts a host and kills it.
static SERIAL: Mutex<()> = Mutex::new(());

/// The helpers of the host's tree: a plain child (in the root's group), a
/// `setsid` escaper, a double-forked `setsid` daemon (its parent gone, it
/// is re-parented to the host when the host is a subreaper), and a child
/// of the escaper.
const NAMES: [&str; 4] = ["plain", "sid", "dbl", "sidkid"];

fn escaper_script() -> String {
    format!(
        r#""$H" plain & setsid sh -c '"$H" sidkid & exec "$H" sid' & (setsid "$H" dbl &) ; {}{}{}{} echo > "$CORRAL_TEST_DIR/started"; sleep 30"#,
        ready("plain"),
        ready("sid"),
        ready("dbl"),
        ready("sidkid"),
    )
}

/// Starts this binary's `reach_host` as the host of one run in `tier`
/// (`auto`, `subreaper`, `process-group`), optionally as another user
/// (`setpriv`), kills it once the tree is up, and asserts that every
/// helper dies within [`BOUND`].
fn host_death_kills_escapers(tier: &str, as_user: Option<&str>) {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let s = Scratch::new();
    if as_user.is_some() {
        // The helpers (run as that user) write their pid files here.
        std::fs::set_permissions(s.dir(), std::os::unix::fs::PermissionsExt::from_mode(0o777))
            .unwrap();
    }
    let w = Watch::new(&s);
    let exe = std::env::current_exe().unwrap();
    let mut host = match as_user {
        Some(user) => {
            let mut c = std::process::Command::new("setpriv");
            c.args([
                &format!("--reuid={user}"),
                &format!("--regid={user}"),
                "--clear-groups",
                "--",
            ])
            .arg(&exe);
            c
        }
        None => std::process::Command::new(&exe),
    };
    host.args(["--exact", "reach_host", "--nocapture", "--ignored"])
        .env("CORRAL_REACH_TIER", tier)
        .envs(s.env())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let mut parent = host.spawn().unwrap();
    if !s.wait_file("started", 20 * SEC) {
        let _ = parent.kill();
        let out = parent.wait_with_output().unwrap();
        panic!(
            "{tier}: the host's tree never started: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for n in NAMES {
        assert!(w.pid(n, 5 * SEC).is_some(), "{tier}: helper {n} not seen");
    }
    let picked = std::fs::read_to_string(s.path("mechanism")).unwrap_or_default();
    parent.kill().unwrap();
    let t = Instant::now();
    parent.wait().unwrap();
    for n in NAMES {
        assert!(
            w.wait_dead(n, BOUND.saturating_sub(t.elapsed())),
            "{tier} ({picked}, as {as_user:?}): {n} survived the host's death"
        );
    }
    assert!(t.elapsed() < BOUND, "{:?}", t.elapsed());
    if tier == "auto" && as_user.is_some() {
        assert_eq!(picked.trim(), "subreaper", "auto for an unprivileged user");
    }
}

#[test]
fn subreaper_host_death_kills_setsid_and_double_fork_escapers() {
    host_death_kills_escapers("subreaper", None);
}

#[test]
fn process_group_host_death_kills_escapers_that_kept_the_cookie() {
    host_death_kills_escapers("process-group", None);
}

/// `auto` as it is for this user (root: cgroup where writable; otherwise
/// the subreaper tier).
#[test]
fn auto_host_death_kills_escapers() {
    host_death_kills_escapers("auto", None);
}

/// `auto` as `nobody`, from a root test run: the subreaper tier, what
/// every unprivileged user gets.
#[corral_testkit::needs(root)]
#[test]
fn auto_as_nobody_host_death_kills_escapers() {
    host_death_kills_escapers("auto", Some("65534"));
}

/// The host of `host_death_kills_escapers` (only in that child).
#[test]
#[ignore = "helper: the host process of host_death_kills_escapers (run only in that child)"]
fn reach_host() {
    let Ok(tier) = std::env::var("CORRAL_REACH_TIER") else {
        return;
    };
    // What the CLI does: the subreaper switch on, `auto` then picks the
    // subreaper tier where no cgroup is writable.
    corral::process_wide::enable_subreaper().unwrap();
    let dir = std::env::var("CORRAL_TEST_DIR").unwrap();
    let choice = match tier.as_str() {
        "auto" => ContainmentChoice::Auto,
        t => ContainmentChoice::Only(t.replace('-', "_").parse::<Mechanism>().unwrap()),
    };
    // What this choice picks here, for the parent to check.
    let probe = Command::new("true").containment(choice).run().unwrap();
    std::fs::write(format!("{dir}/mechanism"), probe.containment.to_string()).unwrap();
    let mut c = Command::new("/bin/sh");
    c.args(["-c", &escaper_script()])
        .containment(choice)
        .timeout(60 * SEC)
        .stdout(Output::null())
        .stderr(Output::null());
    let r = c.run().unwrap();
    eprintln!("{r:?}");
}

/// A member the cookie cannot find (it cleared its environment, made its
/// own session and ignores SIGTERM), seen by the subreaper tier's scan at
/// the deadline: the host dies during the grace period, and the keeper,
/// which the scan handed the member to (pinned by a pidfd), kills it.
#[test]
fn subreaper_host_death_during_the_grace_kills_a_seen_member_without_cookie() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let s = Scratch::new();
    let w = Watch::new(&s);
    let mut host = std::process::Command::new(std::env::current_exe().unwrap());
    host.args(["--exact", "grace_host", "--nocapture", "--ignored"])
        .env("CORRAL_GRACE_HOST", "1")
        .envs(s.env())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut parent = host.spawn().unwrap();
    assert!(
        w.pid("noenv", 20 * SEC).is_some(),
        "the member never started"
    );
    let noenv = w.pid("noenv", SEC).unwrap();
    let env = std::fs::read(format!("/proc/{noenv}/environ")).unwrap_or_default();
    assert!(
        !env.split(|&b| b == 0)
            .any(|kv| kv.starts_with(b"CORRAL_TREE=")),
        "the member must not carry the cookie"
    );
    assert!(
        s.wait_file("term.sent", 20 * SEC),
        "no SIGTERM at the deadline"
    );
    std::thread::sleep(Duration::from_millis(100));
    assert!(w.is_alive("noenv"), "the member must ignore SIGTERM");
    parent.kill().unwrap();
    let t = Instant::now();
    parent.wait().unwrap();
    assert!(
        w.wait_dead("noenv", BOUND),
        "the member the scan saw survived the host's death during the grace"
    );
    assert!(t.elapsed() < BOUND, "{:?}", t.elapsed());
}

/// The host of `subreaper_host_death_during_the_grace_...` (only in that
/// child).
#[test]
#[ignore = "helper: the host process of the grace-period host-death test (run only in that child)"]
fn grace_host() {
    if std::env::var_os("CORRAL_GRACE_HOST").is_none() {
        return;
    }
    corral::process_wide::enable_subreaper().unwrap();
    let dir = std::env::var("CORRAL_TEST_DIR").unwrap();
    let mark = std::env::var("CORRAL_TEST_MARK").unwrap();
    let h = std::env::var("H").unwrap();
    let path = std::env::var("PATH").unwrap_or_default();
    let script = format!(
        r#"env -i PATH="{path}" CORRAL_TEST_DIR="{dir}" CORRAL_TEST_MARK="{mark}" setsid sh -c 'trap "" TERM; exec "{h}" noenv' & {} sleep 30"#,
        ready("noenv")
    );
    let term = format!("{dir}/term.sent");
    let mut c = Command::new("/bin/sh");
    c.args(["-c", &script])
        .containment(ContainmentChoice::Only(Mechanism::Subreaper))
        .timeout(Duration::from_millis(300))
        .grace(60 * SEC)
        .stdout(Output::null())
        .stderr(Output::null())
        .trace_ops(move |op| {
            if matches!(op, OsOp::SignalTree { signal, .. } if *signal == corral::Signal::TERM) {
                let _ = std::fs::write(&term, b"");
            }
        });
    let r = c.run();
    eprintln!("{r:?}");
}

/// The window between the spawn returning and the root's registration is
/// closed (item 11): the keeper holds the tree by its cookie before the
/// root exists, in both tiers whose roots `std` spawns, run after run.
/// Deterministic, through the recorded OS operations.
#[test]
fn the_keeper_holds_the_tree_before_the_spawn() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    corral::process_wide::enable_subreaper().unwrap();
    for m in [Mechanism::ProcessGroup, Mechanism::Subreaper] {
        for _ in 0..20 {
            let ops: Arc<Mutex<Vec<OsOp>>> = Arc::default();
            let rec = ops.clone();
            let r = Command::new("true")
                .containment(ContainmentChoice::Only(m))
                .trace_ops(move |op| rec.lock().unwrap().push(op.clone()))
                .run()
                .unwrap();
            assert_eq!(r.outcome, Outcome::Exited(0), "{r:?}");
            assert!(r.crash_safety.is_held(), "{r:?}");
            let ops = ops.lock().unwrap();
            let held = ops
                .iter()
                .position(|o| matches!(o, OsOp::KeeperHolds { via } if *via == m));
            let spawned = ops.iter().position(|o| matches!(o, OsOp::Spawned { .. }));
            assert!(
                matches!((held, spawned), (Some(h), Some(s)) if h < s),
                "{m}: the keeper must hold the tree before the spawn: {ops:?}"
            );
        }
    }
}
