//! The grammar of a soak run: a random process tree, the settings it runs
//! with, and what ends it. Everything here is plain data made from one
//! 64-bit seed, so a run is replayed from its seed alone.

use std::fmt::Write as _;

/// SplitMix64: small, fast, and good enough to draw trees from.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// A number in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// The seed of run `index` of a soak started with `seed`.
pub fn run_seed(seed: u64, index: u64) -> u64 {
    let mut r = Rng::new(seed ^ index.wrapping_mul(0xD6E8_FEB8_6659_FD93));
    r.next()
}

/// How a node leaves its parent's process group and session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Detach {
    No,
    /// `setsid()` as its first act.
    Setsid,
    /// Double fork: the process its parent started forks, exits, and the
    /// grandchild calls `setsid()` (an orphan from its first instant).
    DoubleFork,
}

/// What a node does with SIGTERM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Term {
    Default,
    Ignore,
    /// Catches it, tells the harness, and exits 0 by itself.
    Catch,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub parent: Option<usize>,
    pub detach: Detach,
    pub term: Term,
    /// Stopped (SIGSTOP from the harness) once the tree is set up.
    pub stopped: bool,
    /// Keeps the captured stdout/stderr open (else /dev/null once its
    /// children are started and its flood written).
    pub hold: bool,
    /// Exits by itself (code 0) during the set-up, its children started.
    pub transient: bool,
    /// Bytes it writes to stdout during the set-up.
    pub flood: u64,
    /// Writes to stdout without end once triggered (output-limit runs).
    pub endless: bool,
}

impl Node {
    fn plain(parent: Option<usize>) -> Node {
        Node {
            parent,
            detach: Detach::No,
            term: Term::Default,
            stopped: false,
            hold: false,
            transient: false,
            flood: 0,
            endless: false,
        }
    }
}

/// What ends the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// The root exits with this code once the tree is set up.
    Exit(i32),
    /// The root kills itself with this signal (one whose default action
    /// ends the process without a core).
    SelfSignal(i32),
    /// The deadline (ms from the spawn).
    Timeout(u64),
    /// The idle timeout (ms of silence).
    Idle(u64),
    /// The harness cancels `delay` ms after the set-up.
    Cancel(u64),
    /// The root exits with this code and the harness cancels `offset` µs
    /// later (negative: before): two legal outcomes.
    Race(i32, i64),
    /// An endless flooder runs into this output limit (bytes).
    OutputLimit(u64),
}

/// The leftovers policy, as drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    KeepOnSuccess,
    Kill,
    Keep,
}

/// The containment tier under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tier {
    ProcessGroup,
    Subreaper,
    Cgroup,
    PidNamespace,
}

impl Tier {
    pub fn parse(s: &str) -> Option<Tier> {
        Some(match s {
            "process-group" => Tier::ProcessGroup,
            "subreaper" => Tier::Subreaper,
            "cgroup" => Tier::Cgroup,
            "pid-namespace" => Tier::PidNamespace,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Tier::ProcessGroup => "process-group",
            Tier::Subreaper => "subreaper",
            Tier::Cgroup => "cgroup",
            Tier::PidNamespace => "pid-namespace",
        }
    }
}

/// One run: the tree, its settings, what ends it.
#[derive(Clone, Debug)]
pub struct Case {
    pub seed: u64,
    pub nodes: Vec<Node>,
    pub trigger: Trigger,
    pub policy: Policy,
    pub grace_ms: u64,
    pub wait_delay_ms: u64,
}

/// The most nodes in a tree (root included).
const MAX_NODES: usize = 9;

impl Case {
    /// The run drawn from `seed` for `tier`: only trees whose fate the tier's
    /// contract determines (in the process-group tier an escaper is out of
    /// reach, so it never holds the output, floods or is stopped).
    pub fn generate(seed: u64, tier: Tier) -> Case {
        let mut r = Rng::new(seed);
        let mut trigger = match r.below(100) {
            0..=21 => Trigger::Exit(0),
            22..=35 => Trigger::Exit(*pick(&mut r, &[1, 2, 3, 42, 125, 255])),
            36..=40 => Trigger::SelfSignal(*pick(
                &mut r,
                &[
                    libc::SIGTERM,
                    libc::SIGUSR2,
                    libc::SIGHUP,
                    libc::SIGINT,
                    libc::SIGALRM,
                ],
            )),
            41..=54 => Trigger::Timeout(r.range(700, 2000)),
            55..=59 => Trigger::Idle(r.range(600, 1500)),
            60..=73 => Trigger::Cancel(r.range(0, 50)),
            74..=89 => Trigger::Race(*pick(&mut r, &[0, 0, 1]), r.range(0, 3000) as i64 - 1000),
            _ => Trigger::OutputLimit(r.range(1, 1 << 20)),
        };
        let policy = match r.below(10) {
            0..=4 => Policy::KeepOnSuccess,
            5..=7 => Policy::Kill,
            _ => Policy::Keep,
        };
        let grace_ms = if r.chance(55) { 0 } else { r.range(100, 400) };
        let wait_delay_ms = r.range(50, 300);

        // The shape: breadth first, up to depth 3 below the root.
        let mut nodes = vec![Node::plain(None)];
        let mut depth = vec![0usize];
        let mut i = 0;
        while i < nodes.len() {
            let kids = match depth[i] {
                0 => r.range(0, 4),
                1 => *pick(&mut r, &[0, 0, 1, 1, 2]),
                2 => *pick(&mut r, &[0, 0, 0, 1, 2]),
                _ => 0,
            };
            for _ in 0..kids {
                if nodes.len() >= MAX_NODES {
                    break;
                }
                nodes.push(Node::plain(Some(i)));
                depth.push(depth[i] + 1);
            }
            i += 1;
        }

        // Behaviours.
        // The root is stopped only when it is asked nothing (an output
        // limit's flooder may be the root).
        let exits = !matches!(
            trigger,
            Trigger::Timeout(_) | Trigger::Idle(_) | Trigger::Cancel(_)
        );
        for (id, n) in nodes.iter_mut().enumerate() {
            n.term = match r.below(10) {
                0..=6 => Term::Default,
                7..=8 => Term::Ignore,
                _ => Term::Catch,
            };
            if id == 0 {
                // The root holds its output until it exits; it is stopped
                // only when the harness never asks it to exit.
                n.stopped = !exits && r.chance(10);
                continue;
            }
            n.detach = match r.below(100) {
                0..=13 => Detach::Setsid,
                14..=22 => Detach::DoubleFork,
                _ => Detach::No,
            };
            n.transient = r.chance(10);
            n.hold = !n.transient && r.chance(12);
            n.flood = if r.chance(10) {
                r.range(1, 256 << 10)
            } else {
                0
            };
            n.stopped = !n.transient && r.chance(12);
        }
        // In the process-group tier an escaper (and everything below it)
        // is out of reach: it neither holds the output nor floods, and it
        // is not stopped (predicted to live on, and cleaned up by the
        // harness).
        if tier == Tier::ProcessGroup {
            for id in 1..nodes.len() {
                if escaped_from_group(&nodes, id) {
                    let n = &mut nodes[id];
                    n.hold = false;
                    n.flood = 0;
                    n.stopped = false;
                }
            }
        }
        if let Trigger::OutputLimit(extra) = trigger {
            // The set-up's floods stay within the limit: the endless
            // flooder passes it.
            let floods: u64 = nodes.iter().map(|n| n.flood).sum();
            trigger = Trigger::OutputLimit(floods + extra);
            // One contained flooder (the root when no other is fit).
            let fit: Vec<usize> = (0..nodes.len())
                .filter(|&id| {
                    let n = &nodes[id];
                    !n.transient
                        && !n.stopped
                        && (tier != Tier::ProcessGroup || !escaped_from_group(&nodes, id))
                })
                .collect();
            let f = *pick(&mut r, &fit);
            nodes[f].endless = true;
            nodes[f].term = Term::Default;
        }
        Case {
            seed,
            nodes,
            trigger,
            policy,
            grace_ms,
            wait_delay_ms,
        }
    }

    /// The tree as one argument for the node processes: one token per node,
    /// `P.D.T.S.H.X.F.E` (parent or `-`, detach, term, stopped, hold,
    /// transient, flood bytes, endless), separated by `,`.
    pub fn encode(&self) -> String {
        let mut s = String::new();
        for (i, n) in self.nodes.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            let parent = n.parent.map_or("-".to_owned(), |p| p.to_string());
            let d = match n.detach {
                Detach::No => 0,
                Detach::Setsid => 1,
                Detach::DoubleFork => 2,
            };
            let t = match n.term {
                Term::Default => 0,
                Term::Ignore => 1,
                Term::Catch => 2,
            };
            let _ = write!(
                s,
                "{parent}.{d}.{t}.{}.{}.{}.{}.{}",
                n.stopped as u8, n.hold as u8, n.transient as u8, n.flood, n.endless as u8
            );
        }
        s
    }

    /// The inverse of [`encode`](Self::encode) (the nodes only).
    pub fn decode(s: &str) -> Option<Vec<Node>> {
        let mut nodes = Vec::new();
        for tok in s.split(',') {
            let f: Vec<&str> = tok.split('.').collect();
            if f.len() != 8 {
                return None;
            }
            let flag = |x: &str| -> Option<bool> {
                match x {
                    "0" => Some(false),
                    "1" => Some(true),
                    _ => None,
                }
            };
            nodes.push(Node {
                parent: if f[0] == "-" {
                    None
                } else {
                    Some(f[0].parse().ok()?)
                },
                detach: match f[1] {
                    "0" => Detach::No,
                    "1" => Detach::Setsid,
                    "2" => Detach::DoubleFork,
                    _ => return None,
                },
                term: match f[2] {
                    "0" => Term::Default,
                    "1" => Term::Ignore,
                    "2" => Term::Catch,
                    _ => return None,
                },
                stopped: flag(f[3])?,
                hold: flag(f[4])?,
                transient: flag(f[5])?,
                flood: f[6].parse().ok()?,
                endless: flag(f[7])?,
            });
        }
        Some(nodes)
    }

    /// What the root does when the harness says go: `exit:N`, `sig:N`, or
    /// `stay` (it waits to be killed, or for its 30 s).
    pub fn root_action(&self) -> String {
        match self.trigger {
            Trigger::Exit(c) | Trigger::Race(c, _) => format!("exit:{c}"),
            Trigger::SelfSignal(s) => format!("sig:{s}"),
            _ => "stay".into(),
        }
    }

    /// A one-line description of the shape, for failure reports.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "trigger={:?} policy={:?} grace={}ms wait_delay={}ms nodes=[",
            self.trigger, self.policy, self.grace_ms, self.wait_delay_ms
        );
        for (i, n) in self.nodes.iter().enumerate() {
            if i > 0 {
                s.push_str(", ");
            }
            let _ = write!(s, "{i}");
            if let Some(p) = n.parent {
                let _ = write!(s, "<{p}");
            }
            let mut tags = Vec::new();
            match n.detach {
                Detach::No => {}
                Detach::Setsid => tags.push("setsid".to_owned()),
                Detach::DoubleFork => tags.push("double-fork".to_owned()),
            }
            match n.term {
                Term::Default => {}
                Term::Ignore => tags.push("ign-TERM".to_owned()),
                Term::Catch => tags.push("catch-TERM".to_owned()),
            }
            if n.stopped {
                tags.push("stopped".into());
            }
            if n.hold {
                tags.push("holds-output".into());
            }
            if n.transient {
                tags.push("exits".into());
            }
            if n.flood > 0 {
                tags.push(format!("flood={}", n.flood));
            }
            if n.endless {
                tags.push("endless-flood".into());
            }
            if !tags.is_empty() {
                let _ = write!(s, "({})", tags.join(" "));
            }
        }
        s.push(']');
        s
    }
}

fn pick<'a, T>(r: &mut Rng, xs: &'a [T]) -> &'a T {
    &xs[r.below(xs.len() as u64) as usize]
}

/// Whether node `id` left the root's process group: it, or an ancestor
/// below the root, detached.
pub fn escaped_from_group(nodes: &[Node], id: usize) -> bool {
    let mut at = Some(id);
    while let Some(i) = at {
        if i == 0 {
            return false;
        }
        if nodes[i].detach != Detach::No {
            return true;
        }
        at = nodes[i].parent;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_decode_round_trip() {
        for seed in 0..2000 {
            for tier in [Tier::ProcessGroup, Tier::Cgroup] {
                let c = Case::generate(run_seed(7, seed), tier);
                assert_eq!(Case::decode(&c.encode()).unwrap(), c.nodes);
                assert!(c.nodes.len() <= MAX_NODES);
            }
        }
    }

    #[test]
    fn same_seed_same_case() {
        let a = Case::generate(99, Tier::Subreaper);
        let b = Case::generate(99, Tier::Subreaper);
        assert_eq!(a.encode(), b.encode());
        assert_eq!(a.trigger, b.trigger);
    }
}
