//! Persistent shell sessions (`corral::Session`) with real trees: the
//! shell's state carries over, each command is bounded and contained on its
//! own, background jobs outlive their command but not the session (nor its
//! owner), output is exact, a command that ends the shell ends the session.

#![cfg(target_os = "linux")]

use std::time::{Duration, Instant};

use corral::{Error, Outcome, RunOptions, Session, SessionEnd, SessionOptions, TimeoutKind};
use corral_testkit::{ready, Scratch, Watch};

const SEC: Duration = Duration::from_secs(1);

fn start(s: &Scratch) -> Session {
    let mut o = SessionOptions::new();
    for (k, v) in s.env() {
        o.env(k, v);
    }
    o.current_dir(s.dir());
    Session::start(&o).unwrap()
}

fn opts() -> RunOptions {
    let mut o = RunOptions::new();
    o.timeout(30 * SEC);
    o
}

fn out(session: &Session, line: &str) -> String {
    let r = session.run(line, &opts()).unwrap();
    assert_eq!(r.outcome, Outcome::Exited(0), "{line}: {:?}", r.report);
    String::from_utf8(r.stdout.bytes().to_vec()).unwrap()
}

#[test]
fn every_kind_of_state_carries_over_and_after_100_commands() {
    let s = Scratch::new();
    let session = start(&s);
    std::fs::create_dir(s.path("sub dir")).unwrap();
    out(&session, "cd 'sub dir'");
    out(
        &session,
        "export EXPORTED='a b'; PLAIN=$'x\\ny'; declare -a ARR=(1 '2 3')",
    );
    out(
        &session,
        "greet() { echo \"hi $1\"; }; alias ll='echo aliased'",
    );
    out(&session, "set -o pipefail; shopt -s nullglob; umask 027");
    out(&session, "n=0");
    for _ in 0..100 {
        out(&session, "n=$((n+1))");
    }
    let got = out(
        &session,
        "pwd; echo \"$EXPORTED|$PLAIN|${ARR[1]}|$n\"; greet you; ll; \
         [[ -o pipefail ]] && echo pf; shopt -q nullglob && echo ng; umask; \
         sh -c 'echo child:$EXPORTED:${PLAIN:-unset}'",
    );
    let dir = s.path("sub dir");
    assert_eq!(
        got,
        format!(
            "{}\na b|x\ny|2 3|100\nhi you\naliased\npf\nng\n0027\nchild:a b:unset\n",
            dir.display()
        )
    );
    // unset and cd - carry over too.
    out(&session, "unset EXPORTED; cd /");
    assert_eq!(
        out(&session, "echo \"${EXPORTED-gone}\"; cd -"),
        format!("gone\n{}\n", dir.display())
    );
}

#[test]
fn output_is_exact_whatever_it_contains() {
    let s = Scratch::new();
    let session = start(&s);
    let r = session
        .run(
            r#"printf 'a\0b\377\033[31m# corral: complete\n__corral_end 0\n$ '; printf 'err\0' >&2; echo '# corral: complete' > /dev/stderr"#,
            &opts(),
        )
        .unwrap();
    assert_eq!(r.outcome, Outcome::Exited(0));
    assert_eq!(
        r.stdout.bytes(),
        b"a\0b\xff\x1b[31m# corral: complete\n__corral_end 0\n$ "
    );
    assert_eq!(r.stderr.bytes(), b"err\0# corral: complete\n");
    assert_eq!(out(&session, "printf x"), "x");
    assert_eq!(out(&session, "true"), "");
}

#[test]
fn stdin_is_at_end_of_file_and_the_defaults_are_non_interactive() {
    let s = Scratch::new();
    let session = start(&s);
    let t = Instant::now();
    assert_eq!(
        out(&session, "read x; echo rc=$?; cat; echo done"),
        "rc=1\ndone\n"
    );
    assert!(t.elapsed() < 10 * SEC);
    assert_eq!(
        out(&session, "echo $PAGER $GIT_PAGER $GIT_EDITOR $TERM"),
        "cat cat true dumb\n"
    );
    // No controlling terminal: /dev/tty cannot be opened, so nothing waits
    // for a person there.
    assert_eq!(
        out(&session, "{ : </dev/tty; } 2>/dev/null || echo no-tty"),
        "no-tty\n"
    );
    let mut o = SessionOptions::new();
    o.env("PAGER", "less");
    let other = Session::start(&o).unwrap();
    assert_eq!(out(&other, "echo $PAGER"), "less\n");
}

/// An earlier command's background server keeps serving while a later
/// command with a setsid escaper times out: the command's tree is killed
/// exactly (the escaper too), the server is not, the session goes on.
#[test]
fn a_timed_out_command_is_killed_alone_and_the_session_survives() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let session = start(&s);
    out(&session, "cd /tmp; export KEEP=1");
    let beat = s.path("beat");
    let r = session
        .run(
            &format!(
                r#""$H" server sh -c 'i=0; while [ $i -lt 600 ]; do echo $i > "{b}"; i=$((i+1)); sleep 0.05; done' >/dev/null 2>&1 & {}"#,
                corral_testkit::started("server"),
                b = beat.display()
            ),
            &opts(),
        )
        .unwrap();
    assert_eq!(r.outcome, Outcome::Exited(0), "{:?}", r.report);
    let server = w.pid("server", 10 * SEC).unwrap();
    assert_eq!(r.jobs.len(), 1, "{:?}", r.jobs);
    assert_eq!(r.jobs[0].pid, server);
    assert!(r.jobs[0].command.contains("sh -c"), "{:?}", r.jobs);
    assert_eq!(session.jobs(), r.jobs);

    let mut o = RunOptions::new();
    // Long enough for the escaper to be ready on a loaded machine.
    o.timeout(3 * SEC);
    let t = Instant::now();
    let r = session
        .run(
            &format!(
                r#"setsid "$H" escaper & {} echo started; sleep 30"#,
                ready("escaper")
            ),
            &o,
        )
        .unwrap();
    assert_eq!(r.outcome, Outcome::TimedOut, "{:?}", r.report);
    assert_eq!(r.timeout_kind, Some(TimeoutKind::Deadline));
    assert!(r.leftovers.killed >= 1, "{:?}", r.report);
    assert_eq!(r.stdout.bytes(), b"started\n");
    assert!(r.ended.is_none());
    assert!(t.elapsed() < 15 * SEC);
    assert!(w.wait_dead("escaper", 3 * SEC), "the escaper survived");
    assert!(w.is_alive("server"), "the server died with another command");
    // Still serving: the beat moves on (within a generous bound).
    let before = std::fs::read_to_string(&beat).unwrap();
    let t = Instant::now();
    while std::fs::read_to_string(&beat).unwrap() == before {
        assert!(t.elapsed() < 5 * SEC, "the server stopped serving");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(out(&session, "echo $PWD $KEEP"), "/tmp 1\n");
    assert_eq!(session.jobs().len(), 1);

    // Killed by its handle.
    let job = session.jobs().remove(0);
    assert!(session.kill_job(&job));
    assert!(w.wait_dead("server", 3 * SEC));
    let left = session.jobs();
    assert!(left.is_empty(), "{left:?}");
    assert!(!session.kill_job(&job));
}

#[test]
fn idle_timeout_output_cap_and_held_output_are_per_command() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let session = start(&s);
    let mut o = RunOptions::new();
    o.idle_timeout(Duration::from_millis(300)).timeout(20 * SEC);
    let r = session.run("echo x; sleep 30", &o).unwrap();
    assert_eq!(r.timeout_kind, Some(TimeoutKind::Idle));
    let mut o = RunOptions::new();
    o.output_limit(1000).timeout(20 * SEC);
    let r = session.run("yes", &o).unwrap();
    assert_eq!(r.outcome, Outcome::OutputLimit);
    let mut o = RunOptions::new();
    o.capture_limit(100).timeout(20 * SEC);
    let r = session.run("head -c 100000 /dev/zero", &o).unwrap();
    assert_eq!(r.outcome, Outcome::Exited(0));
    assert!(r.stdout.omitted() > 0 && r.stdout.total_bytes() == 100_000);
    let mut o = RunOptions::new();
    o.wait_delay(Duration::from_millis(200)).timeout(20 * SEC);
    let r = session
        .run(&format!(r#""$H" holder & {} echo hi"#, ready("holder")), &o)
        .unwrap();
    assert_eq!(r.outcome, Outcome::OutputHeld, "{:?}", r.report);
    assert!(w.wait_dead("holder", 3 * SEC));
    assert_eq!(out(&session, "echo alive"), "alive\n");
}

#[test]
fn exit_exec_and_kill_end_the_session_and_leave_nothing() {
    for (line, end) in [
        ("exit 3", SessionEnd::Exited(3)),
        ("exec true", SessionEnd::Exited(0)),
        ("kill -9 $$", SessionEnd::Signaled(corral::Signal::KILL)),
    ] {
        let s = Scratch::new();
        let w = Watch::new(&s);
        let session = start(&s);
        out(
            &session,
            &format!(r#""$H" job >/dev/null 2>&1 & {}"#, ready("job")),
        );
        assert!(w.is_alive("job"));
        let r = session.run(line, &opts()).unwrap();
        assert_eq!(r.ended, Some(end.clone()), "{line}");
        assert_eq!(session.ended(), Some(end));
        assert!(w.wait_dead("job", 3 * SEC), "{line}: the job survived");
        assert!(matches!(
            session.run("echo hi", &opts()),
            Err(Error::SessionClosed)
        ));
        s.assert_none_left();
    }
}

#[test]
fn close_and_drop_kill_the_jobs() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let session = start(&s);
    out(
        &session,
        &format!(r#""$H" a >/dev/null 2>&1 & {}"#, ready("a")),
    );
    session.close();
    assert!(w.wait_dead("a", 3 * SEC));
    assert!(matches!(
        session.run("true", &opts()),
        Err(Error::SessionClosed)
    ));
    let session = start(&s);
    out(
        &session,
        &format!(r#"setsid "$H" b >/dev/null 2>&1 & {}"#, ready("b")),
    );
    drop(session);
    assert!(w.wait_dead("b", 3 * SEC));
    s.assert_none_left();
}

#[test]
fn runs_are_one_at_a_time_and_sessions_independent() {
    let s = Scratch::new();
    let a = std::sync::Arc::new(start(&s));
    let b = start(&s);
    out(&b, "X=b");
    let a2 = a.clone();
    let t = Instant::now();
    let th = std::thread::spawn(move || out(&a2, "sleep 0.5; X=a; echo first"));
    std::thread::sleep(Duration::from_millis(100));
    // Waits for the first run, then sees its state.
    assert_eq!(out(&a, "echo $X"), "a\n");
    assert!(t.elapsed() >= Duration::from_millis(450));
    assert_eq!(th.join().unwrap(), "first\n");
    assert_eq!(out(&b, "echo $X"), "b\n");
}

#[test]
fn plain_sh_carries_the_directory_and_variables() {
    let s = Scratch::new();
    let mut o = SessionOptions::new();
    o.shell("/bin/sh").current_dir(s.dir());
    let session = Session::start(&o).unwrap();
    out(&session, "cd /; export A=1; B='x y'; umask 077");
    assert_eq!(
        out(
            &session,
            "echo $PWD $A \"$B\"; umask; sh -c 'echo ${A}${B:-}'"
        ),
        "/ 1 x y\n0077\n1\n"
    );
}

/// The owner is SIGKILLed with a live session (a kept job, a setsid job,
/// a command running): everything the session started dies within ~1 s.
#[test]
fn the_owner_killed_with_a_live_session_leaves_nothing() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    // The owner's temporary folder, its own: where its session's
    // directory is left when it is killed.
    let tmp = s.path("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let host = |mode: &str| {
        let mut host = std::process::Command::new(std::env::current_exe().unwrap());
        host.args(["--exact", "session_host", "--nocapture", "--ignored"])
            .env("CORRAL_SESSION_HOST", mode)
            .env("TMPDIR", &tmp)
            .envs(s.env())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        host
    };
    let mut parent = host("own").spawn().unwrap();
    for n in ["kept", "escaped", "live"] {
        assert!(w.pid(n, 15 * SEC).is_some(), "helper {n} never started");
    }
    assert!(s.wait_file("all.started", 15 * SEC));
    parent.kill().unwrap();
    let t = Instant::now();
    parent.wait().unwrap();
    for n in ["kept", "escaped", "live"] {
        assert!(w.wait_dead(n, 3 * SEC), "{n} survived the owner's death");
    }
    assert!(t.elapsed() < 3 * SEC, "{:?}", t.elapsed());
    s.assert_none_left();
    // Its directory outlived it (nobody was there to remove it) ...
    let left = |tmp: &std::path::Path| -> Vec<_> {
        std::fs::read_dir(tmp)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect()
    };
    let dead = format!("corral-session-{}.s1", parent.id());
    assert_eq!(left(&tmp), vec![std::ffi::OsString::from(&dead)]);
    // ... and the next session started there removes it, and no live
    // session's: one held open by this process (same uid, same folder)
    // stays; nor a folder that only starts like a session's (another
    // program's `mkdtemp("corral-session-XXXXXX")`).
    let live = tmp.join("corral-session-1.s999999");
    std::fs::create_dir(&live).unwrap();
    std::fs::create_dir(tmp.join("corral-session-lxKJHM")).unwrap();
    let held = std::fs::File::open(&live).unwrap();
    rustix::fs::flock(&held, rustix::fs::FlockOperation::LockShared).unwrap();
    let status = host("sweep").status().unwrap();
    assert!(status.success(), "{status:?}");
    let mut stayed = left(&tmp);
    stayed.sort();
    assert_eq!(
        stayed,
        ["corral-session-1.s999999", "corral-session-lxKJHM"].map(std::ffi::OsString::from)
    );
    drop(held);
}

#[test]
#[ignore = "helper: the owner of the_owner_killed_with_a_live_session_leaves_nothing"]
fn session_host() {
    let Some(mode) = std::env::var_os("CORRAL_SESSION_HOST") else {
        return;
    };
    if mode == "sweep" {
        // A session started and closed: it sweeps what dead owners left.
        let session = Session::start(&SessionOptions::new()).unwrap();
        session.close();
        return;
    }
    let dir = std::env::var("CORRAL_TEST_DIR").unwrap();
    let session = Session::start(&SessionOptions::new()).unwrap();
    let r = session
        .run(
            &format!(
                r#""$H" kept >/dev/null 2>&1 & setsid "$H" escaped >/dev/null 2>&1 & {} {}"#,
                ready("kept"),
                ready("escaped")
            ),
            &opts(),
        )
        .unwrap();
    assert_eq!(r.jobs.len(), 2, "{r:?}");
    std::thread::spawn(move || {
        let path = format!("{dir}/all.started");
        while !std::path::Path::new(&format!("{dir}/live.pinned")).exists() {
            std::thread::sleep(Duration::from_millis(5));
        }
        std::fs::write(path, b"").unwrap();
    });
    let _ = session.run(r#""$H" live"#, &opts());
}

/// The processes whose command line names the session's directory: its
/// warm shell (started ahead for the next command) and any command's
/// shell.
fn shells_of(session_id: &str) -> Vec<u32> {
    let dir = std::env::temp_dir().join(format!("corral-session-{session_id}"));
    let needle = dir.to_string_lossy().into_owned().into_bytes();
    let mut pids = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rsplit(") ").next().map(|r| r.starts_with('Z')))
            .unwrap_or(true);
        if !zombie && cmdline.split(|&b| b == 0).any(|a| a == needle.as_slice()) {
            pids.push(pid);
        }
    }
    pids
}

/// Every session shell on the machine, for a failure's message.
fn all_sessions() -> String {
    let mut out = String::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let cmdline = std::fs::read(format!("/proc/{name}/cmdline")).unwrap_or_default();
        let stat = std::fs::read_to_string(format!("/proc/{name}/stat")).unwrap_or_default();
        if cmdline.windows(15).any(|w| w == b"corral-session-") {
            let args: Vec<String> = cmdline
                .split(|&b| b == 0)
                .filter(|a| a.len() < 100)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            out.push_str(&format!("\n{name}: {args:?} {stat}"));
        }
    }
    out
}

/// Polls `f` until it holds or `within` passes.
fn eventually(within: Duration, mut f: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + within;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Kills what is left of `pids` (a guard: a warm shell that outlived its
/// session would wait on its FIFO for ever).
fn kill_left(pids: &[u32]) {
    for &p in pids {
        if shells_alive(&[p]) {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &p.to_string()])
                .status();
        }
    }
}

fn shells_alive(pids: &[u32]) -> bool {
    pids.iter().any(|p| {
        std::fs::read_to_string(format!("/proc/{p}/stat"))
            .is_ok_and(|s| !s.rsplit(") ").next().unwrap_or("").starts_with('Z'))
    })
}

/// The next command's shell is started ahead and waits: its command's
/// deadline and idle timeout count from when the command is sent, not from
/// the shell's start; a deadline still fires in it, and the session goes on.
#[test]
fn a_warm_shells_limits_start_when_its_command_is_sent() {
    let s = Scratch::new();
    let session = start(&s);
    out(&session, "X=1");
    // The warm shell waits well past the limits below: counted from its
    // start, they would have fired before the command was sent.
    std::thread::sleep(4 * SEC);
    let mut o = RunOptions::new();
    o.timeout(3 * SEC).idle_timeout(3 * SEC);
    let r = session.run("echo $X", &o).unwrap();
    assert_eq!(r.outcome, Outcome::Exited(0), "{:?}", r.report);
    assert_eq!(r.stdout.bytes(), b"1\n");
    assert!(r.timings.root_exit.unwrap() < 3 * SEC, "{:?}", r.timings);
    std::thread::sleep(SEC);
    let mut o = RunOptions::new();
    o.timeout(Duration::from_millis(300));
    let t = Instant::now();
    let r = session.run("X=2; sleep 28", &o).unwrap();
    assert_eq!(r.outcome, Outcome::TimedOut, "{:?}", r.report);
    assert_eq!(r.timeout_kind, Some(TimeoutKind::Deadline));
    assert!(
        t.elapsed() >= Duration::from_millis(290),
        "{:?}",
        t.elapsed()
    );
    assert!(t.elapsed() < 25 * SEC, "{:?}", t.elapsed());
    // Its state was never written: the next shell has the one before.
    assert_eq!(out(&session, "echo $X"), "1\n");
}

/// `$?`, the positional parameters and the directory stack carry over, and
/// so does a variable a command declared without a value.
#[test]
fn the_status_positional_parameters_and_directory_stack_carry_over() {
    let s = Scratch::new();
    let session = start(&s);
    let r = session.run("false", &opts()).unwrap();
    assert_eq!(r.outcome, Outcome::Exited(1));
    assert_eq!(out(&session, "echo $?"), "1\n");
    out(&session, "set -- a 'b c' $'d\\ne'; declare -i N");
    assert_eq!(
        out(&session, "echo $# \"$2\"; printf '%s|' \"$@\""),
        "3 b c\na|b c|d\ne|"
    );
    out(
        &session,
        "N=2+3; pushd -n /usr >/dev/null; pushd -n / >/dev/null",
    );
    let dir = s.dir().display().to_string();
    assert_eq!(
        out(&session, "echo $N; dirs -l -p"),
        format!("5\n{dir}\n/\n/usr\n")
    );
    // A long line (through a file), a line with a grace (started cold:
    // the warm shell is dropped), then the warm shells again.
    let long = format!(": {}; echo long $N", "x".repeat(3000));
    assert_eq!(out(&session, &long), "long 5\n");
    let mut o = opts();
    o.grace(Duration::from_millis(100));
    let r = session.run("N=6; echo cold", &o).unwrap();
    assert_eq!(r.stdout.bytes(), b"cold\n");
    assert_eq!(out(&session, "echo $N"), "6\n");
    // bash's own variables are its own, not the state's.
    let a = out(&session, "echo $BASHPID $RANDOM $SECONDS");
    let b = out(&session, "echo $BASHPID $RANDOM $SECONDS");
    assert_ne!(a, b);
}

/// The warm shell counts for nothing: closing or dropping the session kills
/// it (and nothing else runs), whether it is still starting or waiting.
#[test]
fn closing_or_dropping_the_session_kills_its_warm_shell() {
    let s = Scratch::new();
    for close in [true, false] {
        let session = start(&s);
        out(&session, "true");
        let id = session.id().to_owned();
        let mut seen = Vec::new();
        assert!(
            eventually(5 * SEC, || {
                seen = shells_of(&id);
                !seen.is_empty()
            }),
            "no warm shell after a command"
        );
        if close {
            session.close();
        } else {
            drop(session);
        }
        let gone = !shells_alive(&seen) && shells_of(&id).is_empty();
        kill_left(&seen);
        assert!(gone, "the warm shell outlived its session ({seen:?})");
        // A session closed right after a command: its shell may be starting.
        let session = start(&s);
        out(&session, "true");
        let id = session.id().to_owned();
        if close {
            session.close();
        } else {
            drop(session);
        }
        let left = shells_of(&id);
        kill_left(&left);
        assert!(left.is_empty(), "{left:?}");
    }
}

/// The owner SIGKILLed while its session's warm shell waits: the shell dies
/// too (the keeper holds it as every command's tree).
#[test]
fn the_owner_killed_with_a_warm_shell_waiting_leaves_nothing() {
    let s = Scratch::new();
    let mut host = std::process::Command::new(std::env::current_exe().unwrap());
    host.args(["--exact", "warm_session_host", "--nocapture", "--ignored"])
        .env("CORRAL_SESSION_HOST", "1")
        .envs(s.env())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut parent = host.spawn().unwrap();
    assert!(s.wait_file("warm.id", 25 * SEC));
    let id = std::fs::read_to_string(s.path("warm.id")).unwrap();
    let mut seen = Vec::new();
    let found = eventually(15 * SEC, || {
        seen = shells_of(&id);
        !seen.is_empty()
    });
    parent.kill().unwrap();
    parent.wait().unwrap();
    let gone = eventually(3 * SEC, || !shells_alive(&seen));
    kill_left(&seen);
    assert!(
        found,
        "no warm shell in the host's session {id}: {}",
        all_sessions()
    );
    assert!(gone, "the warm shell survived its owner ({seen:?})");
}

#[test]
#[ignore = "helper: the owner of the_owner_killed_with_a_warm_shell_waiting_leaves_nothing"]
fn warm_session_host() {
    if std::env::var_os("CORRAL_SESSION_HOST").is_none() {
        return;
    }
    let dir = std::env::var("CORRAL_TEST_DIR").unwrap();
    let session = Session::start(&SessionOptions::new()).unwrap();
    out(&session, "true");
    std::fs::write(format!("{dir}/warm.id"), session.id()).unwrap();
    // Killed long before; gone by itself within 30 s otherwise.
    std::thread::sleep(25 * SEC);
}

/// The async run (feature `tokio`): state carries over between awaited
/// commands, and a future dropped unresolved cancels its command (the tree,
/// a setsid escaper included, is killed) while the session lives on.
#[cfg(feature = "tokio")]
#[test]
fn run_async_keeps_state_and_a_dropped_future_cancels_its_command() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let session = std::sync::Arc::new(start(&s));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let r = session
            .clone()
            .run_async("cd /tmp; export A=1", &opts())
            .await
            .unwrap();
        assert_eq!(r.outcome, Outcome::Exited(0), "{:?}", r.report);
        let line = format!(
            r#"setsid "$H" escaper & {} echo started; sleep 30"#,
            ready("escaper")
        );
        let o = opts();
        let fut = session.clone().run_async(&line, &o);
        // Dropped once the escaper is up.
        let dropped = tokio::time::timeout(20 * SEC, async {
            tokio::select! {
                r = fut => panic!("the command ended by itself: {r:?}"),
                _ = async {
                    while w.pid("escaper", Duration::ZERO).is_none() {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                } => {}
            }
        })
        .await;
        assert!(dropped.is_ok(), "the escaper never started");
        let t = Instant::now();
        // The next command waits for the cancelled one, then runs.
        let r = session
            .clone()
            .run_async("echo $PWD $A", &opts())
            .await
            .unwrap();
        assert!(t.elapsed() < 15 * SEC, "took {:?}", t.elapsed());
        assert_eq!(r.stdout.bytes(), b"/tmp 1\n", "{:?}", r.report);
    });
    assert!(w.wait_dead("escaper", 5 * SEC), "the escaper survived");
}
