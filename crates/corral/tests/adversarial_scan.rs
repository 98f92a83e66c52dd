//! Attacks on counting a process group killed without a grace: corral
//! stops the group (SIGSTOP), scans /proc once (`OsOp::MembersScanned`),
//! pinning and watching every member, sends SIGKILL, and scans once more
//! when every pinned member is gone, to confirm. Each test builds a real
//! tree that tries to slip past those scans (members forking as fast as
//! they can, zombie leaders whose threads still run, stopped members,
//! members in the middle of `exec`, zombies that exited by themselves, a
//! large tree cancelled at a random moment) and asserts the return bound,
//! the outcome, no cleanup error, a `killed` count no larger than the
//! processes really in the tree (exact where the tree allows it), every
//! descendant dead at return, and exactly one scan before the SIGKILL
//! (of the stopped tree: none of the live one) and one after it.
#![cfg(target_os = "linux")]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use corral::Mechanism::ProcessGroup;
use corral::{Command, ContainmentChoice, OsOp, Outcome, Report, Running, Signal};
use corral_testkit::{Scratch, Watch};

const SEC: Duration = Duration::from_secs(1);

/// One tree at a time: the forking trees use many processes and
/// descriptors (two cores, `ulimit -n 1024`).
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static ONE: Mutex<()> = Mutex::new(());
    ONE.lock().unwrap_or_else(|e| e.into_inner())
}

/// The command in the process-group tier, killed first (no grace), with
/// every OS operation recorded into the returned log.
fn kill_first(c: &mut Command) -> Arc<Mutex<Vec<OsOp>>> {
    let ops: Arc<Mutex<Vec<OsOp>>> = Arc::default();
    let log = ops.clone();
    c.trace_ops(move |op| log.lock().unwrap().push(op.clone()))
        .containment(ContainmentChoice::Only(ProcessGroup))
        .grace(Duration::ZERO);
    ops
}

/// Exactly one scan of /proc after the group's SIGKILL, and one before it,
/// of the stopped group.
#[track_caller]
fn one_scan_after_the_kill(ops: &[OsOp]) {
    scans_after_the_kill(ops, 0);
}

/// As [`one_scan_after_the_kill`] for a tree of up to `members`
/// processes: when they may not all get a descriptor (pidfd) under this
/// process's `RLIMIT_NOFILE`, the members the scan could not pin make the
/// next check scan again, so at least one scan after the kill.
#[track_caller]
fn scans_after_the_kill(ops: &[OsOp], members: usize) {
    corral_testkit::invariants::assert_one_scan_after_the_kill(ops, members, true);
}

#[track_caller]
fn assert_clean(r: &Report, outcome: Outcome) {
    assert_eq!(r.containment, ProcessGroup);
    assert_eq!(r.outcome, outcome, "{r:?}");
    assert_eq!(r.signals_sent, vec![Signal::KILL], "{r:?}");
    assert!(r.cleanup_errors.is_empty(), "{r:?}");
    // Dead at return, not merely doomed (`assert_none_left` waits 2 s).
    let left = group_not_dead(r.pid);
    assert!(
        left.is_empty(),
        "{} members of group {} not dead at return: {:?}",
        left.len(),
        r.pid,
        &left[..left.len().min(5)]
    );
}

/// Waits until the root (pid `pid`) runs `sleep`: the script before its
/// `exec sleep` (loops, their short-lived `cat` and `sleep`) is over.
fn root_is_sleep(pid: u32) {
    let comm = format!("/proc/{pid}/comm");
    let end = Instant::now() + 20 * SEC;
    while std::fs::read_to_string(&comm).map_or(true, |c| c.trim() != "sleep") {
        assert!(Instant::now() < end, "the root never became sleep");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The first field after the name in `/proc/PID/stat` (the state).
fn state(pid: u32) -> Option<u8> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.trim_start().bytes().next()
}

fn perl() -> bool {
    std::process::Command::new("perl")
        .args(["-e", "exit 0"])
        .status()
        .is_ok_and(|s| s.success())
}

/// Forker: records its own pid first thing, then forks `N` children as
/// fast as it can; each child records itself and forks `G` grandchildren
/// the same way. A parent also records each child right after the fork.
/// So a process not recorded has not run a statement since its fork (it
/// has no child), and each parent has at most one such child: at most as
/// many unrecorded processes as recorded ones. Nothing is reaped (no pid
/// is reused while the run lasts); everything ends within 30 s.
const FORKER: &str = r#"
use Fcntl;
my ($out, $n, $g) = @ARGV;
sysopen(my $fh, $out, O_WRONLY | O_APPEND | O_CREAT) or die "open: $!";
sub rec { syswrite($fh, "$_[0]\n") }
rec($$);
my ($level, $kids) = (0, $n);
FORK: for (my $i = 0; $i < $kids; $i++) {
    my $p = fork;
    if (!defined $p) { select(undef, undef, undef, 0.01); next }
    if ($p == 0) {
        rec($$);
        $level++;
        last FORK if $level >= 2;
        ($kids, $i) = ($g, -1);
        next;
    }
    rec($p);
}
sleep 25;
exit 0;
"#;

fn recorded(s: &Scratch) -> usize {
    let text = std::fs::read_to_string(s.path("forked")).unwrap_or_default();
    let mut pids: Vec<&str> = text.lines().collect();
    pids.sort_unstable();
    pids.dedup();
    pids.len()
}

/// Spawners (perl `fork()` loops, children forking too) killed first by a
/// timeout while they fork as fast as they can: the scan of the stopped
/// group must find every member there will ever be.
#[test]
fn perl_fork_loops_killed_first_leave_nothing() {
    assert!(perl(), "this test needs perl (in every Debian base system)");
    let _one = serial();
    let spawners = 4;
    for round in 0..4u64 {
        let s = Scratch::new();
        std::fs::write(s.path("forker.pl"), FORKER).unwrap();
        let script = format!(
            r#"i=0; while [ $i -lt {spawners} ]; do i=$((i+1)); perl "$CORRAL_TEST_DIR/forker.pl" "$CORRAL_TEST_DIR/forked" 100 2 & done; exec sleep 30"#
        );
        let mut c = s.sh(&script);
        let ops = kill_first(&mut c);
        c.timeout(Duration::from_millis(200 + 150 * round));
        let t = Instant::now();
        let r = c.run().unwrap();
        let el = t.elapsed();
        assert!(el < 10 * SEC, "took {el:?}");
        assert_clean(&r, Outcome::TimedOut);
        // Recorded, at most as many unrecorded, the spawners not yet
        // started, the root.
        let rec = recorded(&s);
        let real = 2 * rec + spawners + 1;
        assert!(
            r.leftovers.killed <= real,
            "killed {} but at most {real} processes were in the tree ({rec} recorded)",
            r.leftovers.killed
        );
        assert!(r.leftovers.killed >= 1, "{r:?}");
        s.assert_none_left();
        scans_after_the_kill(&ops.lock().unwrap(), real);
    }
}

/// Helpers whose main thread exited while a second thread runs (`Z` in
/// their stat, more than one thread): killed first, the scan must pin them
/// as alive (not take them for dead), they must die, and each counts as
/// killed exactly once.
#[test]
fn zombie_leaders_killed_first_are_pinned_and_die() {
    let _one = serial();
    const ZL: usize = 6;
    let s = Scratch::new();
    let w = Watch::new(&s);
    let mut script = String::new();
    for i in 0..ZL {
        script.push_str(&format!(r#""$H" zl{i} "$ZL" zl{i} & "#));
    }
    script.push_str(&format!(
        r#"i=0; while [ $i -lt {ZL} ]; do until [ -e "$CORRAL_TEST_DIR/zl$i.zombie" ]; do sleep 0.01; done; i=$((i+1)); done; exec sleep 30"#
    ));
    let mut c = s.sh(&script);
    let ops = kill_first(&mut c);
    c.timeout(60 * SEC);
    let running = c.spawn().unwrap();
    let mut pids = Vec::new();
    for i in 0..ZL {
        let name = format!("zl{i}");
        let pid = w.pid(&name, 20 * SEC).expect("helper started");
        assert!(s.wait_file(&format!("{name}.zombie"), 20 * SEC));
        assert_eq!(state(pid), Some(b'Z'), "premise: {name}'s leader shows Z");
        assert!(corral_testkit::thread_group_alive(pid), "premise: alive");
        pids.push(pid);
    }
    root_is_sleep(running.id());
    let t = Instant::now();
    running.cancel();
    let r = running.wait();
    assert!(t.elapsed() < 8 * SEC, "took {:?}", t.elapsed());
    assert_clean(&r, Outcome::Cancelled);
    for (i, pid) in pids.iter().enumerate() {
        assert!(
            w.wait_dead(&format!("zl{i}"), 2 * SEC),
            "zl{i} (pid {pid}, leader exited) survived"
        );
    }
    // The tree at the kill: the root (`sleep`, not counted: `killed`
    // counts the members besides the root) and the helpers.
    assert_eq!(r.leftovers.killed, ZL, "{r:?}");
    s.assert_none_left();
    one_scan_after_the_kill(&ops.lock().unwrap());
}

/// Stopped members, members that `exec` themselves in a loop, and members
/// that fork and exec `true` in a loop, all at once: killed first, every
/// one dies, and the count is bounded on both sides (each one alive when
/// the group was stopped is watched, and dies of the SIGKILL).
#[test]
fn stopped_and_execing_members_killed_first_are_all_counted_and_die() {
    assert!(perl(), "this test needs perl (in every Debian base system)");
    let _one = serial();
    const STOPPED: usize = 5;
    const EXECS: usize = 3;
    const FORKEXECS: usize = 3;
    for _ in 0..3 {
        let s = Scratch::new();
        let w = Watch::new(&s);
        let end = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            + 20;
        std::fs::write(
            s.path("exec.pl"),
            "my $end = $ARGV[0]; exec $^X, $0, $end if time < $end; exit 0;\n",
        )
        .unwrap();
        std::fs::write(
            s.path("forkexec.pl"),
            "my $end = $ARGV[0]; while (time < $end) { my $p = fork; \
             if (defined $p && $p == 0) { exec '/bin/true'; exit 1 } \
             waitpid($p, 0) if $p } exit 0;\n",
        )
        .unwrap();
        let mut script = String::new();
        for i in 0..STOPPED {
            script.push_str(&format!(
                r#""$H" st{i} sh -c 'kill -STOP $$; exec sleep 30' & "#
            ));
        }
        for i in 0..EXECS {
            script.push_str(&format!(
                r#""$H" ex{i} perl "$CORRAL_TEST_DIR/exec.pl" {end} & "#
            ));
        }
        for i in 0..FORKEXECS {
            script.push_str(&format!(
                r#""$H" fx{i} perl "$CORRAL_TEST_DIR/forkexec.pl" {end} & "#
            ));
        }
        script.push_str("exec sleep 30");
        let mut c = s.sh(&script);
        let ops = kill_first(&mut c);
        c.timeout(60 * SEC);
        let running = c.spawn().unwrap();
        let mut names = Vec::new();
        for i in 0..STOPPED {
            let name = format!("st{i}");
            let pid = w.pid(&name, 20 * SEC).expect("helper started");
            let until = Instant::now() + 20 * SEC;
            while state(pid) != Some(b'T') {
                assert!(Instant::now() < until, "{name} never stopped");
                std::thread::sleep(Duration::from_millis(2));
            }
            names.push(name);
        }
        for n in (0..EXECS)
            .map(|i| format!("ex{i}"))
            .chain((0..FORKEXECS).map(|i| format!("fx{i}")))
        {
            let pid = w.pid(&n, 20 * SEC).expect("helper started");
            // Past the helper script: perl runs (and loops).
            let until = Instant::now() + 20 * SEC;
            while std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim() == "H")
            {
                assert!(Instant::now() < until, "{n} never started perl");
                std::thread::sleep(Duration::from_millis(2));
            }
            names.push(n);
        }
        root_is_sleep(running.id());
        let t = Instant::now();
        running.cancel();
        let r = running.wait();
        assert!(t.elapsed() < 8 * SEC, "took {:?}", t.elapsed());
        assert_clean(&r, Outcome::Cancelled);
        for n in &names {
            assert!(w.wait_dead(n, 2 * SEC), "{n} survived");
        }
        // Alive at the stop: every helper (the root is not counted in
        // `killed`), and at most one `true` child per fork-exec loop
        // besides.
        let at_least = STOPPED + EXECS + FORKEXECS;
        let k = r.leftovers.killed;
        assert!(
            (at_least..=at_least + FORKEXECS).contains(&k),
            "killed {k}, expected {at_least}..={}: {r:?}",
            at_least + FORKEXECS
        );
        s.assert_none_left();
        one_scan_after_the_kill(&ops.lock().unwrap());
    }
}

/// Many zombies already in the group at the kill, never reaped (their
/// parent became `sleep`): children that exited 0, that exited with code
/// 9 (its stat's exit code is 9 << 8, not signal 9), and that SIGTERM
/// ended. None was killed by corral: `killed` (the members besides the
/// root) counts the parent only.
#[test]
fn zombies_that_exited_by_themselves_are_not_counted_as_killed() {
    assert!(perl(), "this test needs perl (in every Debian base system)");
    let _one = serial();
    let s = Scratch::new();
    let w = Watch::new(&s);
    // Forks 60 children (exit 0), 20 (exit 9), 20 (SIGTERM themselves),
    // waits (without reaping) until each is a zombie, writes `zombies`,
    // becomes `sleep`.
    std::fs::write(
        s.path("zombies.pl"),
        r#"
my @kids;
for my $i (1 .. 100) {
    my $p = fork;
    die "fork: $!" unless defined $p;
    if ($p == 0) {
        if ($i <= 60) { exit 0 }
        if ($i <= 80) { exit 9 }
        kill 'TERM', $$;
        sleep 5;
        exit 1;
    }
    push @kids, $p;
}
my $end = time + 20;
for my $p (@kids) {
    while (time < $end) {
        open(my $f, '<', "/proc/$p/stat") or die "stat $p: $!";
        my $line = <$f>;
        last if $line =~ /\)\s+Z/;
        select(undef, undef, undef, 0.005);
    }
}
open(my $d, '>', "$ENV{CORRAL_TEST_DIR}/zombies") or die;
close $d;
exec 'sleep', '30';
"#,
    )
    .unwrap();
    let script = r#""$H" z perl "$CORRAL_TEST_DIR/zombies.pl" & until [ -e "$CORRAL_TEST_DIR/zombies" ]; do sleep 0.01; done; exec sleep 30"#;
    let mut c = s.sh(script);
    let ops = kill_first(&mut c);
    c.timeout(60 * SEC);
    let running = c.spawn().unwrap();
    let z = w.pid("z", 20 * SEC).expect("helper started");
    assert!(s.wait_file("zombies", 20 * SEC), "the children never died");
    // The helper is `sleep` with its 100 zombies.
    let until = Instant::now() + 20 * SEC;
    while std::fs::read_to_string(format!("/proc/{z}/comm")).map_or(true, |c| c.trim() != "sleep") {
        assert!(Instant::now() < until, "the helper never became sleep");
        std::thread::sleep(Duration::from_millis(2));
    }
    root_is_sleep(running.id());
    let t = Instant::now();
    running.cancel();
    let r = running.wait();
    assert!(t.elapsed() < 8 * SEC, "took {:?}", t.elapsed());
    assert_clean(&r, Outcome::Cancelled);
    assert!(w.wait_dead("z", 2 * SEC));
    assert_eq!(
        r.leftovers.killed, 1,
        "only the helper (besides the root) was alive at the kill: {r:?}"
    );
    s.assert_none_left();
    one_scan_after_the_kill(&ops.lock().unwrap());
}

/// A tree of a few hundred members still forking, cancelled from another
/// thread at a random moment (from right after the spawn to well after the
/// tree is built), 20 times.
#[test]
fn a_large_tree_cancelled_at_a_random_moment_leaves_nothing() {
    let _one = serial();
    let spawners = 3;
    let per = 100;
    let one = format!(
        "i=0; while [ $i -lt {per} ]; do sleep 30 & echo $! >> \"$CORRAL_TEST_DIR/forked\"; i=$((i+1)); done; exec sleep 30"
    );
    let mut script = String::new();
    for _ in 0..spawners {
        script.push_str(&format!(
            "sh -c '{one}' & echo $! >> \"$CORRAL_TEST_DIR/forked\"; "
        ));
    }
    script.push_str("exec sleep 30");
    // A small xorshift seeded by the clock: a different moment each run,
    // printed on failure.
    let mut x = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as u64
        | 1;
    for round in 0..20 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        // Every other round right at the spawn (the root may not have
        // forked yet), the others while the tree is built or complete.
        let max = if round % 2 == 0 { 30_000 } else { 900_000 };
        let delay = Duration::from_micros(x % max);
        let s = Scratch::new();
        let mut c = s.sh(&script);
        let ops = kill_first(&mut c);
        c.timeout(60 * SEC);
        let running: Running = c.spawn().unwrap();
        let t = Instant::now();
        let token = running.cancel_token();
        let canceller = std::thread::spawn(move || {
            std::thread::sleep(delay);
            token.cancel();
        });
        // Waiting while the other thread cancels.
        let r = running.wait();
        let el = t.elapsed();
        canceller.join().unwrap();
        assert!(
            el < delay + 8 * SEC,
            "round {round} ({delay:?}): took {el:?}"
        );
        assert_clean(&r, Outcome::Cancelled);
        // Each spawner may have forked one child not yet recorded, the
        // root one spawner; and the root. No lower bound: a cancel right
        // at the spawn can come before the root forked anything (seen:
        // `killed: 0` at 4 µs), and what was recorded may not be all
        // started at the stop.
        let real = recorded(&s) + spawners + 2;
        assert!(
            r.leftovers.killed <= real,
            "round {round} ({delay:?}): killed {}, at most {real} in the tree: {r:?}",
            r.leftovers.killed
        );
        s.assert_none_left();
        one_scan_after_the_kill(&ops.lock().unwrap());
    }
}

/// Members of the group (by `getpgid`) that are not dead (state other
/// than `Z`/`X`) right now.
fn group_not_dead(pgid: u32) -> Vec<u32> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            // The group from the stat (rustix's `getpgid` asserts on the
            // group 0 of kernel threads).
            let pgrp = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|st| {
                    let (_, rest) = st.rsplit_once(')')?;
                    rest.split_whitespace().nth(2)?.parse::<u32>().ok()
                });
            pgrp == Some(pgid) && !matches!(state(pid), Some(b'Z' | b'X') | None)
        })
        .collect()
}

/// The caller already uses nearly all of its descriptors when the tree is
/// killed first: the scans (of the stopped group, then after the SIGKILL)
/// cannot pin (pidfd) the members, and must not take them for gone while
/// they are still dying (it did: the run returned
/// with members still running, no cleanup error, one scan). At return every
/// member is dead, not merely doomed: the members it could not pin make
/// the next check scan again (so more than one scan here, by design).
#[test]
fn members_that_cannot_be_pinned_are_not_taken_for_gone() {
    let _one = serial();
    const N: usize = 200;
    let s = Scratch::new();
    let fifo = s.fifo("go");
    let script = format!(
        r#"i=0; while [ $i -lt {N} ]; do i=$((i+1)); sh -c 'read x < "$CORRAL_TEST_DIR/go"; while :; do :; done' & echo $! >> "$CORRAL_TEST_DIR/forked"; done; exec sleep 30"#
    );
    let mut c = s.sh(&script);
    let ops = kill_first(&mut c);
    c.timeout(60 * SEC);
    let running = c.spawn().unwrap();
    let pgid = running.id();
    root_is_sleep(pgid);
    assert_eq!(recorded(&s), N);
    // Every helper blocks on the FIFO: open it (the readers are there) and
    // close it, they all spin.
    drop(rustix::fs::open(
        &fifo,
        rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::NONBLOCK,
        rustix::fs::Mode::empty(),
    ));
    std::thread::sleep(Duration::from_millis(100));
    // Fill the descriptor table but for a few.
    let mut filler = Vec::new();
    while let Ok(fd) = rustix::fs::open(
        "/dev/null",
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    ) {
        filler.push(fd);
    }
    // Room for the /proc directory, the epoll set and a few pins.
    for _ in 0..8 {
        filler.pop();
    }
    let t = Instant::now();
    running.cancel();
    let r = running.wait();
    let left = group_not_dead(pgid);
    drop(filler);
    let el = t.elapsed();
    assert!(el < 40 * SEC, "took {el:?}");
    assert_clean(&r, Outcome::Cancelled);
    assert!(
        left.is_empty(),
        "{} members not dead at return: {:?}; {r:?}; {:?}",
        left.len(),
        &left[..left.len().min(5)],
        ops.lock().unwrap()
    );
    assert!(r.leftovers.killed <= N, "{r:?}");
    s.assert_none_left();
}
