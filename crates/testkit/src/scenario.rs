//! Table-driven scenario tests: a [`Row`] states a process tree (a shell
//! script of `$H` helpers), the command's settings, and what must come out
//! of it: the return bound, the outcome and root status, the signals sent,
//! the leftovers counted, the captured output, and the [`Fate`] of every
//! helper. [`Tier::run`] runs a row in one containment tier and asserts all
//! of it; a test body that needs more (a callback, a cancel, an OS-op
//! trace) configures the command through [`Tier::run_with`] and checks the
//! returned [`Report`] further.
//!
//! Cleanup stays independent of the code under test: [`Tier::new`] makes
//! the [`Scratch`] and starts its [`Watch`] before anything is spawned, and
//! the watch kills every helper still alive when the tier value is dropped.

use std::time::{Duration, Instant};

use corral::{
    Command, ContainmentChoice, LeftoverPolicy, Mechanism, Outcome, Report, RootStatus, Running,
    Signal,
};

use crate::{assert_between, Scratch, Watch};

/// Slack on every upper time bound (a loaded 2-core CI box).
pub const SLACK: Duration = Duration::from_millis(1500);

/// How long a helper that must be dead may take to be seen dead after
/// `wait` returned.
const DEAD_WITHIN: Duration = Duration::from_secs(2);

/// How long a helper that must stay alive is watched after `wait`
/// returned, before it is checked.
const ALIVE_AFTER: Duration = Duration::from_millis(100);

/// What becomes of one helper of a tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Gone (killed, or exited) once the run returned.
    Dead,
    /// Still running after the run returned (kept, or out of reach).
    Alive,
    /// Alive in the tiers listed (out of their reach), dead in every other.
    AliveIn(&'static [Mechanism]),
}

impl Fate {
    /// Whether the helper must be alive after a run in `tier`.
    pub fn alive_in(self, tier: Mechanism) -> bool {
        match self {
            Fate::Dead => false,
            Fate::Alive => true,
            Fate::AliveIn(tiers) => tiers.contains(&tier),
        }
    }
}

/// A count the report must state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Count {
    /// Exactly this many.
    Exactly(usize),
    /// At least this many.
    AtLeast(usize),
}

impl Count {
    #[track_caller]
    fn check(self, what: &str, got: usize, r: &Report) {
        match self {
            Count::Exactly(n) => assert_eq!(got, n, "{what}: {r:?}"),
            Count::AtLeast(n) => assert!(got >= n, "{what}: {got} < {n}: {r:?}"),
        }
    }
}

/// A value that may differ by tier: the same everywhere, or one value in
/// the tiers listed and another elsewhere.
#[derive(Clone, Copy, Debug)]
pub enum PerTier<T: 'static> {
    /// The same in every tier.
    All(T),
    /// `in_` in the tiers listed, `other` elsewhere.
    In(&'static [Mechanism], T, T),
}

impl<T: Copy> PerTier<T> {
    /// The value for `tier`.
    pub fn get(self, tier: Mechanism) -> T {
        match self {
            PerTier::All(v) => v,
            PerTier::In(tiers, v, other) => {
                if tiers.contains(&tier) {
                    v
                } else {
                    other
                }
            }
        }
    }
}

impl<T> From<T> for PerTier<T> {
    fn from(v: T) -> Self {
        PerTier::All(v)
    }
}

/// One scenario: the tree and the settings, and every expectation. Fields
/// left `None` are not asserted; `bound`, `outcome` and `fates` must be
/// given (the runner refuses a row without them).
#[derive(Clone, Debug, Default)]
pub struct Row {
    /// The tree: `sh -c` script with `$H` helpers.
    pub tree: String,
    /// `Command::timeout`.
    pub timeout: Option<Duration>,
    /// `Command::grace`.
    pub grace: Option<Duration>,
    /// `Command::wait_delay`.
    pub wait_delay: Option<Duration>,
    /// `Command::leftovers`.
    pub leftovers: Option<LeftoverPolicy>,
    /// Bounds on the time from just before `spawn` to the end of `wait`.
    pub bound: Option<(Duration, Duration)>,
    /// The outcome. The exit code is checked with it: `Some(code)` for
    /// `Exited(code)`, `None` otherwise.
    pub outcome: Option<Outcome>,
    /// The root's own status.
    pub root: Option<RootStatus>,
    /// The signals sent, in order.
    pub signals: Option<PerTier<&'static [Signal]>>,
    /// `leftovers.killed`.
    pub killed: Option<PerTier<Count>>,
    /// `leftovers.kept`.
    pub kept: Option<usize>,
    /// The captured stdout, byte for byte.
    pub stdout: Option<&'static [u8]>,
    /// The captured stderr, byte for byte.
    pub stderr: Option<&'static [u8]>,
    /// Every helper the tree starts, and its fate. Each is pinned (pid file
    /// seen, command exec'd) between `spawn` and `wait`.
    pub fates: &'static [(&'static str, Fate)],
}

/// The OS operations a command recorded, in order.
pub type Ops = std::sync::Arc<std::sync::Mutex<Vec<corral::OsOp>>>;

/// Records the OS operations of every run of `cmd` (`Command::trace_ops`).
pub fn traced(cmd: &mut Command) -> Ops {
    let ops: Ops = Ops::default();
    let o = ops.clone();
    cmd.trace_ops(move |op: &corral::OsOp| o.lock().unwrap().push(op.clone()));
    ops
}

/// A row's tree as a `String` (for struct literals).
pub fn tree(script: &str) -> String {
    script.to_owned()
}

/// `n` milliseconds.
pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// One test's world in one containment tier: its scratch directory, the
/// watch on it (started at once), and the tier every command is forced
/// into.
pub struct Tier {
    /// The tier (`ContainmentChoice::Only`).
    pub mechanism: Mechanism,
    /// Declared after `scratch`'s users: dropped first, it kills every
    /// helper still alive before the directory goes.
    pub watch: Watch,
    /// The scratch directory of the helpers.
    pub scratch: Scratch,
}

impl Tier {
    /// A fresh scratch and watch for a test in `mechanism`. The subreaper
    /// tier makes this process a child subreaper (once, process-wide).
    pub fn new(mechanism: Mechanism) -> Tier {
        #[cfg(target_os = "linux")]
        if mechanism == Mechanism::Subreaper {
            static ENABLE: std::sync::Once = std::sync::Once::new();
            ENABLE.call_once(|| {
                corral::process_wide::enable_subreaper().expect("PR_SET_CHILD_SUBREAPER")
            });
        }
        let scratch = Scratch::new();
        if mechanism == Mechanism::PidNamespace {
            scratch.namespaced();
        }
        let watch = Watch::new(&scratch);
        Tier {
            mechanism,
            watch,
            scratch,
        }
    }

    /// `program` forced into this tier.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new(program);
        c.containment(ContainmentChoice::Only(self.mechanism));
        c
    }

    /// `sh -c SCRIPT` with the scratch's environment, forced into this tier.
    pub fn sh(&self, script: &str) -> Command {
        let mut c = self.scratch.sh(script);
        c.containment(ContainmentChoice::Only(self.mechanism));
        c
    }

    /// Waits for every named helper to appear and to have exec'd its
    /// command (so the helper's own `mv` is gone and tree membership is
    /// stable). Returns their (host) pids in order.
    pub fn pin(&self, names: &[&str]) -> Vec<u32> {
        names
            .iter()
            .map(|n| {
                let pid = self
                    .watch
                    .pid(n, Duration::from_secs(5))
                    .unwrap_or_else(|| panic!("helper {n} never started"));
                let end = Instant::now() + Duration::from_secs(5);
                loop {
                    let comm =
                        std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
                    if comm.trim() != "H" || Instant::now() >= end {
                        break;
                    }
                    std::thread::sleep(ms(2));
                }
                pid
            })
            .collect()
    }

    /// Asserts that every named helper is (or becomes, within 2 s) dead.
    #[track_caller]
    pub fn assert_dead(&self, names: &[&str]) {
        for n in names {
            assert!(
                self.watch.wait_dead(n, DEAD_WITHIN),
                "{:?}: helper {n} is still alive",
                self.mechanism
            );
        }
    }

    /// Asserts every helper's fate in this tier.
    #[track_caller]
    pub fn assert_fates(&self, fates: &[(&str, Fate)]) {
        if fates.iter().any(|(_, f)| f.alive_in(self.mechanism)) {
            std::thread::sleep(ALIVE_AFTER);
        }
        for (n, f) in fates {
            if f.alive_in(self.mechanism) {
                assert!(
                    self.watch.is_alive(n),
                    "{:?}: helper {n} must still be alive",
                    self.mechanism
                );
            } else {
                self.assert_dead(&[n]);
            }
        }
    }

    /// `row`'s tree with the row's settings, forced into this tier (for a
    /// runner of its own, e.g. an async one; then [`Tier::pin`] the row's
    /// helpers and [`Tier::check`] the report).
    pub fn command_for(&self, row: &Row) -> Command {
        let mut cmd = self.sh(&row.tree);
        if let Some(d) = row.timeout {
            cmd.timeout(d);
        }
        if let Some(d) = row.grace {
            cmd.grace(d);
        }
        if let Some(d) = row.wait_delay {
            cmd.wait_delay(d);
        }
        if let Some(p) = row.leftovers {
            cmd.leftovers(p);
        }
        cmd
    }

    /// Runs `row` in this tier and asserts all it states.
    #[track_caller]
    pub fn run(&self, row: &Row) -> Report {
        self.run_with(row, |_| {}, |_, _| {})
    }

    /// Runs `row` with extra settings (`configure`, after the row's own)
    /// and a step between the pinning of the helpers and `wait` (`during`,
    /// given the running command and the helpers' pids in the row's
    /// order), and asserts all the row states. Returns the report for
    /// further checks.
    #[track_caller]
    pub fn run_with(
        &self,
        row: &Row,
        configure: impl FnOnce(&mut Command),
        during: impl FnOnce(&Running, &[u32]),
    ) -> Report {
        let mut cmd = self.command_for(row);
        configure(&mut cmd);
        let names: Vec<&str> = row.fates.iter().map(|(n, _)| *n).collect();
        let t = Instant::now();
        let running = cmd.spawn().expect("spawn");
        let pids = self.pin(&names);
        during(&running, &pids);
        let r = running.wait();
        let el = t.elapsed();
        self.check(row, &r, el);
        r
    }

    /// Asserts everything `row` states about a report `r` that took `el`
    /// (from just before spawn to the end of wait), and the helpers' fates.
    #[track_caller]
    pub fn check(&self, row: &Row, r: &Report, el: Duration) {
        let tier = self.mechanism;
        assert_eq!(r.containment, tier, "{r:?}");
        let (min, max) = row.bound.expect("a row states its return bound");
        assert_between(el, min, max);
        let outcome = row.outcome.expect("a row states its outcome");
        assert_eq!(r.outcome, outcome, "{tier:?}: {r:?}");
        let code = match outcome {
            Outcome::Exited(c) => Some(c),
            _ => None,
        };
        assert_eq!(r.exit_code(), code, "{tier:?}: {r:?}");
        assert_eq!(r.success(), code == Some(0), "{tier:?}: {r:?}");
        if let Some(root) = row.root {
            assert_eq!(r.root, Some(root), "{tier:?}: {r:?}");
        }
        if let Some(sig) = row.signals {
            assert_eq!(r.signals_sent, sig.get(tier), "{tier:?}: {r:?}");
        }
        if let Some(k) = row.killed {
            k.get(tier).check("leftovers.killed", r.leftovers.killed, r);
        }
        if let Some(k) = row.kept {
            assert_eq!(r.leftovers.kept, k, "{tier:?}: leftovers.kept: {r:?}");
        }
        if let Some(out) = row.stdout {
            assert_eq!(r.stdout.bytes(), out, "{tier:?}: stdout");
        }
        if let Some(err) = row.stderr {
            assert_eq!(r.stderr.bytes(), err, "{tier:?}: stderr");
        }
        assert!(
            !row.fates.is_empty(),
            "a row states the fate of every helper"
        );
        self.assert_fates(row.fates);
    }
}

/// Rows for escapers, which every tier but the process group holds: the
/// cgroup, PID-namespace and subreaper tests run them with their own
/// checks after.
pub mod escapers {
    use super::*;
    use crate::started;

    /// A `setsid` helper `esc` holding the output pipe; the root exits 0
    /// once it runs. The run is `output_held` after the 300 ms wait delay,
    /// and `esc` is killed (the one leftover).
    pub fn setsid_pipe_holder() -> Row {
        Row {
            tree: format!(r#"setsid "$H" esc & {}exit 0"#, started("esc")),
            wait_delay: Some(ms(300)),
            bound: Some((ms(300), Duration::from_secs(3))),
            outcome: Some(Outcome::OutputHeld),
            killed: Some(Count::Exactly(1).into()),
            fates: &[("esc", Fate::Dead)],
            ..Row::default()
        }
    }

    /// A daemon that detached twice (subshell + `setsid`) and redirected
    /// its output, so that it is an orphan before corral looks at the tree;
    /// killed when the 500 ms timeout ends the run.
    pub fn double_forked_daemon() -> Row {
        Row {
            tree: tree(r#"( setsid sh -c '"$H" daemon >/dev/null 2>&1 &' & ) ; sleep 30"#),
            timeout: Some(ms(500)),
            bound: Some((ms(500), Duration::from_secs(3))),
            outcome: Some(Outcome::TimedOut),
            killed: Some(Count::AtLeast(1).into()),
            fates: &[("daemon", Fate::Dead)],
            ..Row::default()
        }
    }

    /// A `setsid` helper `late` that closed its output, left by a root that
    /// exits `code` (not 0) once it runs: nothing holds the output, so the
    /// 5 s wait delay does not apply, and `late` is killed at once.
    pub fn setsid_survivor_of_nonzero_exit(code: i32) -> Row {
        Row {
            tree: format!(
                r#"setsid "$H" late >/dev/null 2>&1 & {}exit {code}"#,
                started("late")
            ),
            wait_delay: Some(Duration::from_secs(5)),
            bound: Some((Duration::ZERO, Duration::from_secs(2))),
            outcome: Some(Outcome::Exited(code)),
            killed: Some(Count::Exactly(1).into()),
            kept: Some(0),
            fates: &[("late", Fate::Dead)],
            ..Row::default()
        }
    }

    /// A `setsid` helper `keep` that closed its output, left by a root that
    /// exits 0 once it runs: kept under `KeepOnSuccess` (no signal sent),
    /// and the run returns at once.
    pub fn setsid_survivor_kept() -> Row {
        Row {
            tree: format!(
                r#"setsid "$H" keep >/dev/null 2>&1 & {}exit 0"#,
                started("keep")
            ),
            leftovers: Some(LeftoverPolicy::KeepOnSuccess),
            bound: Some((Duration::ZERO, Duration::from_secs(2))),
            outcome: Some(Outcome::Exited(0)),
            signals: Some(PerTier::All(&[])),
            killed: Some(Count::Exactly(0).into()),
            kept: Some(1),
            fates: &[("keep", Fate::Alive)],
            ..Row::default()
        }
    }
}
