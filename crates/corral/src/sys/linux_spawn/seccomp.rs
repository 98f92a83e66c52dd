//! The sandbox's seccomp program (issue 33): one filter for the whole
//! policy, shaped so that a call reaches its answer in a dozen
//! instructions.
//!
//! `seccompiler` compiles a policy into a linear chain (one comparison per
//! refused call number, every one of them walked by every allowed call),
//! and on x86_64 the x32 numbers (`nr | 0x4000_0000`) needed a copy of
//! every rule. Installing such a program costs the child most of its
//! sandbox setup: the kernel emulates the program once per call number to
//! fill its action cache (`seccomp_cache_prepare`), and converts it to
//! eBPF. Here the dispatch on the call number is ours:
//!
//! - the architecture check, taken from `seccompiler`'s own output (a
//!   foreign architecture kills the process, as before);
//! - on x86_64, one comparison refusing every x32 call with `EPERM`
//!   (numbers from `0x4000_0000` up, but -1, which a tracer uses to skip a
//!   call, as libseccomp does; the x32 table has numbers of its own for
//!   `ioctl`, `ptrace`, `process_vm_*`, which a copy of the native rules at
//!   `nr | 0x4000_0000` did not name; no x32 program is expected inside a
//!   sandbox);
//! - a binary search over the refused call numbers (`jge`), ending in at
//!   most three `jeq` and an inline `ret ALLOW`;
//! - a refused call without conditions jumps to one shared `ret EPERM`
//!   (or `ret USER_NOTIF` for the notified ones); a call with argument
//!   conditions (`ioctl`'s `TIOCSTI`, `socket(AF_UNIX)` under `loopback`)
//!   jumps to its rule chain as `seccompiler` compiled it for that call
//!   alone, copied verbatim (its jumps are relative and stay inside it).
//!
//! Every instruction the dispatch uses (`ld` of the number or the
//! architecture, `jeq`, `jge`, `ret`) is one the kernel's action
//! cache can emulate, so allowed calls without conditions are still
//! answered from the cache without running the filter at all.
//!
//! The network policy's `socket(2)` refusals are part of the same program
//! ([`Programs`]: a variant returning `SECCOMP_RET_USER_NOTIF` for them, to
//! be installed with a listener, and the same with `EPERM`, the fallback),
//! so the child installs one filter, not two. The programs depend only on
//! the policy's network and whether namespaces are used: they are compiled
//! once per process ([`programs`]).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use seccompiler::{sock_filter, SeccompRule};

use crate::spec::Network;

/// The bit of an x32 call number on x86_64.
#[cfg(target_arch = "x86_64")]
pub(super) const X32_SYSCALL_BIT: u32 = 0x4000_0000;

// Classic BPF opcodes (linux/bpf_common.h).
const LD_W_ABS: u16 = 0x20;
const JMP_JA: u16 = 0x05;
const JMP_JEQ_K: u16 = 0x15;
const JMP_JGE_K: u16 = 0x35;
#[cfg(test)]
const JMP_JSET_K: u16 = 0x45;
const RET_K: u16 = 0x06;

/// `offsetof(struct seccomp_data, nr)`.
const DATA_NR: u32 = 0;

pub(super) const RET_ALLOW: u32 = libc::SECCOMP_RET_ALLOW;
pub(super) const RET_EPERM: u32 = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
pub(super) const RET_NOTIFY: u32 = libc::SECCOMP_RET_USER_NOTIF;

/// A refused call number: refused always (`conditions` empty) or when one
/// of the rules matches its arguments; `notified`: the refusal is notified
/// to corral (the `socket(2)` rules) in the listener variant.
#[derive(Clone)]
pub(super) struct Refusal {
    pub(super) conditions: Vec<SeccompRule>,
    pub(super) notified: bool,
}

/// A policy: the refused call numbers (native numbers; on x86_64 every x32
/// call is refused besides).
pub(super) type Rules = BTreeMap<u32, Refusal>;

/// The compiled programs of one policy.
pub(crate) struct Programs {
    /// Every refusal answered `EPERM`.
    pub(super) plain: Vec<sock_filter>,
    /// The notified refusals answered `USER_NOTIF` (installed with a
    /// listener); `None` when nothing is notified.
    pub(super) notify: Option<Vec<sock_filter>>,
}

/// The compiled programs for a sandbox with (or without) namespaces and
/// `network`, compiled on first use and kept for the process (`rules`
/// builds the policy's rules; the same key always gives the same rules).
pub(super) fn programs(
    key: (bool, Network),
    rules: impl FnOnce() -> Result<Rules, String>,
) -> Result<Arc<Programs>, String> {
    static CACHE: Cache = Mutex::new(Vec::new());
    cached(&CACHE, key, rules)
}

type Cache = Mutex<Vec<((bool, Network), Arc<Programs>)>>;

fn cached(
    cache: &Cache,
    key: (bool, Network),
    rules: impl FnOnce() -> Result<Rules, String>,
) -> Result<Arc<Programs>, String> {
    if let Ok(c) = cache.lock() {
        if let Some((_, p)) = c.iter().find(|(k, _)| *k == key) {
            return Ok(p.clone());
        }
    }
    let rules = rules()?;
    let plain = compile(&rules, false)?;
    let notify = if rules.values().any(|r| r.notified) {
        Some(compile(&rules, true)?)
    } else {
        None
    };
    let p = Arc::new(Programs { plain, notify });
    if let Ok(mut c) = cache.lock() {
        if !c.iter().any(|(k, _)| *k == key) {
            c.push((key, p.clone()));
        }
    }
    Ok(p)
}

fn stmt(code: u16, k: u32) -> sock_filter {
    sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

/// `seccompiler`'s program for `rules` on this architecture: the
/// architecture check, then for each call number its chain, `EPERM` on a
/// match, everything else allowed.
fn seccompiler_program(
    rules: BTreeMap<i64, Vec<SeccompRule>>,
) -> Result<seccompiler::BpfProgram, String> {
    #[cfg(target_arch = "x86_64")]
    let arch = seccompiler::TargetArch::x86_64;
    #[cfg(target_arch = "aarch64")]
    let arch = seccompiler::TargetArch::aarch64;
    let filter = seccompiler::SeccompFilter::new(
        rules,
        seccompiler::SeccompAction::Allow,
        seccompiler::SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(|e| format!("seccomp filter: {e}"))?;
    filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| format!("seccomp program: {e}"))
}

/// Where a jump goes.
#[derive(Clone, Copy)]
enum To {
    /// The next instruction.
    Next,
    /// A label of the dispatch.
    Label(usize),
    /// The shared `ret EPERM` and `ret USER_NOTIF`.
    Eperm,
    Notify,
    /// The first instruction of a copied rule chain.
    Chain(usize),
}

#[derive(Default)]
struct Asm {
    ins: Vec<sock_filter>,
    /// Jumps to resolve: (index, jt, jf).
    fix: Vec<(usize, To, To)>,
    labels: Vec<usize>,
}

impl Asm {
    fn stmt(&mut self, code: u16, k: u32) {
        self.ins.push(stmt(code, k));
    }

    fn jump(&mut self, code: u16, k: u32, jt: To, jf: To) {
        self.fix.push((self.ins.len(), jt, jf));
        self.ins.push(stmt(code, k));
    }

    fn label(&mut self) -> usize {
        self.labels.push(usize::MAX);
        self.labels.len() - 1
    }

    fn place(&mut self, l: usize) {
        self.labels[l] = self.ins.len();
    }

    /// A binary search over `keys` (sorted call numbers and where each
    /// goes); a number not among them is allowed.
    fn search(&mut self, keys: &[(u32, To)]) {
        if keys.len() <= 3 {
            for &(nr, to) in keys {
                self.jump(JMP_JEQ_K, nr, to, To::Next);
            }
            self.stmt(RET_K, RET_ALLOW);
            return;
        }
        let mid = keys.len() / 2;
        let upper = self.label();
        self.jump(JMP_JGE_K, keys[mid].0, To::Label(upper), To::Next);
        self.search(&keys[..mid]);
        self.place(upper);
        self.search(&keys[mid..]);
    }
}

/// The rule chain of one call number with conditions, as `seccompiler`
/// compiles it for that number alone: the instructions after its
/// architecture check and number load, entered with the number in the
/// accumulator. Checked to be self-contained (every jump lands inside it,
/// it ends with a return) and to return only ALLOW or EPERM.
fn chain(
    header: &[sock_filter],
    nr: u32,
    rules: &[SeccompRule],
) -> Result<Vec<sock_filter>, String> {
    let prog = seccompiler_program(BTreeMap::from([(i64::from(nr), rules.to_vec())]))?;
    let h = header.len();
    let same =
        |a: &sock_filter, b: &sock_filter| (a.code, a.jt, a.jf, a.k) == (b.code, b.jt, b.jf, b.k);
    if prog.len() <= h + 1
        || !prog[..h].iter().zip(header).all(|(a, b)| same(a, b))
        || !same(&prog[h], &stmt(LD_W_ABS, DATA_NR))
    {
        return Err(format!("seccomp: unexpected program shape for call {nr}"));
    }
    let piece = prog[h + 1..].to_vec();
    let len = piece.len();
    for (i, ins) in piece.iter().enumerate() {
        let class = ins.code & 0x07;
        let ok = match class {
            // ld, alu: no control flow.
            0x00 | 0x04 => true,
            0x06 => ins.code == RET_K && (ins.k == RET_ALLOW || ins.k == RET_EPERM),
            0x05 if ins.code == JMP_JA => i + 1 + (ins.k as usize) < len,
            0x05 => i + 1 + usize::from(ins.jt.max(ins.jf)) < len,
            _ => false,
        };
        if !ok {
            return Err(format!(
                "seccomp: call {nr}'s rule chain leaves itself or returns something unexpected"
            ));
        }
    }
    if piece[len - 1].code != RET_K {
        return Err(format!(
            "seccomp: call {nr}'s rule chain does not end in a return"
        ));
    }
    Ok(piece)
}

/// The program of `rules`: the notified refusals answered with
/// `USER_NOTIF` when `notify`, every other refusal (and on x86_64 every
/// x32 call, every number from `0x4000_0000` up but -1) with `EPERM`,
/// every other call allowed.
pub(super) fn compile(rules: &Rules, notify: bool) -> Result<Vec<sock_filter>, String> {
    // seccompiler's program without rules: its architecture check and the
    // default return.
    let empty = seccompiler_program(BTreeMap::new())?;
    let header = &empty[..empty.len() - 1];
    let mut chains = Vec::new();
    let mut keys = Vec::new();
    for (&nr, r) in rules {
        let to = if r.conditions.is_empty() {
            if notify && r.notified {
                To::Notify
            } else {
                To::Eperm
            }
        } else {
            let mut c = chain(header, nr, &r.conditions)?;
            if notify && r.notified {
                for ins in c.iter_mut().filter(|i| i.code == RET_K && i.k == RET_EPERM) {
                    ins.k = RET_NOTIFY;
                }
            }
            chains.push(c);
            To::Chain(chains.len() - 1)
        };
        keys.push((nr, to));
    }
    let mut a = Asm::default();
    a.ins.extend_from_slice(header);
    a.stmt(LD_W_ABS, DATA_NR);
    #[cfg(target_arch = "x86_64")]
    {
        // x32 (and any number above): refused, but -1 (a tracer's skipped
        // call), which goes on to be allowed.
        let native = a.label();
        a.jump(JMP_JGE_K, X32_SYSCALL_BIT, To::Next, To::Label(native));
        a.jump(JMP_JEQ_K, u32::MAX, To::Next, To::Eperm);
        a.stmt(RET_K, RET_ALLOW);
        a.place(native);
    }
    a.search(&keys);
    let mut chain_at = Vec::new();
    for c in &chains {
        chain_at.push(a.ins.len());
        a.ins.extend_from_slice(c);
    }
    let eperm = a.ins.len();
    a.stmt(RET_K, RET_EPERM);
    let notified = a.ins.len();
    a.stmt(RET_K, RET_NOTIFY);
    for &(at, jt, jf) in &a.fix {
        let off = |to: To| -> Result<u8, String> {
            let target = match to {
                To::Next => at + 1,
                To::Label(l) => a.labels[l],
                To::Eperm => eperm,
                To::Notify => notified,
                To::Chain(c) => chain_at[c],
            };
            target
                .checked_sub(at + 1)
                .and_then(|d| u8::try_from(d).ok())
                .ok_or_else(|| "seccomp: program too long for its jumps".to_string())
        };
        let (t, f) = (off(jt)?, off(jf)?);
        a.ins[at].jt = t;
        a.ins[at].jf = f;
    }
    if a.ins.len() > usize::from(u16::MAX) {
        return Err("seccomp program too long".into());
    }
    Ok(a.ins)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use seccompiler::{SeccompCmpArgLen, SeccompCmpOp, SeccompCondition};

    /// A classic BPF interpreter for seccomp programs (the instructions
    /// these programs use); also counts the instructions run and whether
    /// only those the kernel's action cache can emulate were met.
    pub(in crate::sys::linux_spawn) fn run(
        prog: &[sock_filter],
        arch: u32,
        nr: u32,
        args: [u64; 6],
    ) -> (u32, usize, bool) {
        let word = |off: u32| -> u32 {
            match off {
                0 => nr,
                4 => arch,
                16..=63 => {
                    let a = args[((off - 16) / 8) as usize];
                    if (off - 16).is_multiple_of(8) {
                        a as u32
                    } else {
                        (a >> 32) as u32
                    }
                }
                _ => panic!("load at {off}"),
            }
        };
        let (mut acc, mut pc, mut steps, mut constant) = (0u32, 0usize, 0, true);
        loop {
            let i = &prog[pc];
            steps += 1;
            pc += 1;
            match i.code {
                LD_W_ABS => {
                    constant &= i.k == 0 || i.k == 4;
                    acc = word(i.k);
                }
                0x54 => acc &= i.k, // alu and k
                JMP_JA => pc += i.k as usize,
                JMP_JEQ_K | JMP_JGE_K | JMP_JSET_K | 0x25 => {
                    let taken = match i.code {
                        JMP_JEQ_K => acc == i.k,
                        JMP_JGE_K => acc >= i.k,
                        JMP_JSET_K => acc & i.k != 0,
                        _ => acc > i.k,
                    };
                    pc += usize::from(if taken { i.jt } else { i.jf });
                }
                RET_K => return (i.k, steps, constant),
                c => panic!("opcode {c:#x}"),
            }
        }
    }

    pub(in crate::sys::linux_spawn) fn audit_arch() -> u32 {
        let empty = seccompiler_program(BTreeMap::new()).unwrap();
        empty[1].k
    }

    /// A policy shaped like the sandbox's: calls refused always, `ioctl`
    /// refused for two commands, `socket` notified (always, or for one
    /// family).
    fn sample(loopback: bool) -> Rules {
        let cond = |arg: u8, v: u64| {
            SeccompRule::new(vec![SeccompCondition::new(
                arg,
                SeccompCmpArgLen::Dword,
                SeccompCmpOp::Eq,
                v,
            )
            .unwrap()])
            .unwrap()
        };
        let mut r = Rules::new();
        for nr in [
            101u32, 165, 166, 175, 176, 246, 310, 311, 425, 428, 429, 430, 431, 432, 442, 1, 2,
        ] {
            r.insert(
                nr,
                Refusal {
                    conditions: vec![],
                    notified: false,
                },
            );
        }
        r.insert(
            16,
            Refusal {
                conditions: vec![cond(1, 0x5412), cond(1, 0x541c)],
                notified: false,
            },
        );
        r.insert(
            41,
            Refusal {
                conditions: if loopback { vec![cond(0, 1)] } else { vec![] },
                notified: true,
            },
        );
        r
    }

    /// The same rules as `seccompiler` alone compiles them (the linear
    /// chain used before), with the x32 copies it needed.
    pub(in crate::sys::linux_spawn) fn linear(rules: &Rules) -> Vec<sock_filter> {
        let mut m = BTreeMap::new();
        for (&nr, r) in rules {
            m.insert(i64::from(nr), r.conditions.clone());
            #[cfg(target_arch = "x86_64")]
            m.insert(i64::from(nr | X32_SYSCALL_BIT), r.conditions.clone());
        }
        seccompiler_program(m).unwrap()
    }

    pub(in crate::sys::linux_spawn) fn arg_sets() -> Vec<[u64; 6]> {
        let mut v = vec![[0; 6]];
        for a0 in [1u64, 2, 10, 1 | (1 << 32)] {
            for a1 in [0x5412u64, 0x541c, 0x5413, 0x5412 | (7 << 32)] {
                v.push([a0, a1, 0, 0, 0, 0]);
            }
        }
        v
    }

    /// The shaped program answers every native call number and argument
    /// set exactly as the linear chain does; on x86_64 every x32 call is
    /// refused (the linear chain let the x32-only numbers through); a
    /// foreign architecture is killed.
    #[test]
    fn the_shaped_program_answers_as_the_linear_one() {
        let arch = audit_arch();
        for loopback in [false, true] {
            let rules = sample(loopback);
            let old = linear(&rules);
            let new = compile(&rules, false).unwrap();
            assert!(new.len() < old.len() / 2, "{} vs {}", new.len(), old.len());
            for nr in 0..1100u32 {
                for args in arg_sets() {
                    let (o, ..) = run(&old, arch, nr, args);
                    let (n, ..) = run(&new, arch, nr, args);
                    assert_eq!(o, n, "nr {nr} args {args:?}");
                    #[cfg(target_arch = "x86_64")]
                    {
                        let (x, ..) = run(&new, arch, nr | X32_SYSCALL_BIT, args);
                        assert_eq!(x, RET_EPERM, "x32 nr {nr}");
                    }
                }
            }
            // -1 (a tracer's skipped call) is let through, as before.
            assert_eq!(run(&new, arch, u32::MAX, [0; 6]).0, RET_ALLOW);
            assert_eq!(run(&old, arch, u32::MAX, [0; 6]).0, RET_ALLOW);
            #[cfg(target_arch = "x86_64")]
            for nr in [0x8000_0000u32, 0xffff_fffe] {
                assert_eq!(run(&new, arch, nr, [0; 6]).0, RET_EPERM, "nr {nr:#x}");
            }
            let (k, ..) = run(&new, arch ^ 1, 16, [0; 6]);
            assert_eq!(k, libc::SECCOMP_RET_KILL_PROCESS);
        }
    }

    /// The notify variant differs from the plain one exactly where a
    /// notified refusal is answered.
    #[test]
    fn only_the_notified_refusals_are_notified() {
        let arch = audit_arch();
        for loopback in [false, true] {
            let rules = sample(loopback);
            let plain = compile(&rules, false).unwrap();
            let notify = compile(&rules, true).unwrap();
            for nr in 0..600u32 {
                for args in arg_sets() {
                    let (p, ..) = run(&plain, arch, nr, args);
                    let (n, ..) = run(&notify, arch, nr, args);
                    if nr == 41 && p == RET_EPERM {
                        assert_eq!(n, RET_NOTIFY, "nr {nr} args {args:?}");
                    } else {
                        assert_eq!(p, n, "nr {nr} args {args:?}");
                    }
                }
            }
            let (s, ..) = run(&notify, arch, 41, [2, 1, 0, 0, 0, 0]);
            assert_eq!(s, if loopback { RET_ALLOW } else { RET_NOTIFY });
            let (s, ..) = run(&notify, arch, 41, [1, 1, 0, 0, 0, 0]);
            assert_eq!(s, RET_NOTIFY);
        }
    }

    /// The common path is short: an allowed call without conditions is
    /// answered within a dozen instructions, all of them ones the
    /// kernel's action cache emulates (so it is cached: the filter does
    /// not run for it at all), where the linear chain walked two per rule.
    #[test]
    fn an_allowed_call_is_answered_in_a_dozen_instructions() {
        let arch = audit_arch();
        let rules = sample(false);
        let new = compile(&rules, false).unwrap();
        let old = linear(&rules);
        for nr in (0..460u32).filter(|n| !rules.contains_key(n)) {
            let (r, steps, constant) = run(&new, arch, nr, [0; 6]);
            assert_eq!(r, RET_ALLOW);
            assert!(constant, "nr {nr}");
            assert!(steps <= 12, "nr {nr}: {steps} instructions");
            let (_, old_steps, _) = run(&old, arch, nr, [0; 6]);
            assert!(old_steps > 2 * rules.len(), "nr {nr}: {old_steps}");
        }
        // ioctl's chain reads an argument: not cacheable, as before.
        let (_, _, constant) = run(&new, arch, 16, [0; 6]);
        assert!(!constant);
    }

    /// A policy too large for 8-bit jumps is refused, not mangled.
    #[test]
    fn a_program_too_long_for_its_jumps_is_refused() {
        let mut r = Rules::new();
        for nr in 0..400u32 {
            r.insert(
                nr,
                Refusal {
                    conditions: vec![],
                    notified: false,
                },
            );
        }
        assert!(compile(&r, false).is_err());
    }

    /// The cache gives the same programs for the same key.
    #[test]
    fn the_programs_are_compiled_once_per_key() {
        let cache = Cache::default();
        let key = (true, Network::Host);
        let a = cached(&cache, key, || Ok(sample(false))).unwrap();
        let b = cached(&cache, key, || panic!("compiled twice")).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert!(a.notify.is_some());
        let c = cached(&cache, (false, Network::Host), || {
            let mut r = sample(false);
            r.remove(&41);
            Ok(r)
        })
        .unwrap();
        assert!(!Arc::ptr_eq(&a, &c));
        assert!(c.notify.is_none());
    }
}
