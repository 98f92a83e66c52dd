//! Denials as evidence (issue 33): the `socket(2)` calls a sandbox's
//! network policy refuses reach corral through seccomp user notification,
//! and the run's report lists them (operation, family and type, exact
//! count) instead of leaving an agent to guess from exit codes and stderr.
//!
//! - The parent compiles a second seccomp program ([`NetFilter`]) holding
//!   only the `socket(2)` rules (`none`: every family; `loopback`:
//!   `AF_UNIX`), built with `seccompiler` whose `EPERM` returns are then
//!   rewritten to `SECCOMP_RET_USER_NOTIF` ([`rewrite_to_notify`]; the
//!   crate has no such action). The same program unrewritten is the
//!   fallback.
//! - The child installs it last with `SECCOMP_FILTER_FLAG_NEW_LISTENER`
//!   and hands the listener (close-on-exec: the command never holds it) to
//!   corral over a socket pair made by the parent, before exec. Where the
//!   kernel refuses a listener (a filter around corral already has one:
//!   `EBUSY`), the child installs the plain `EPERM` program instead and
//!   the report says network denials were not observed.
//! - [`Supervisor`], a thread of corral, receives each notification,
//!   records it, and answers `EPERM`: the command sees exactly what the
//!   plain filter gave it. The arguments are registers (family, type,
//!   protocol): no memory of the command is read. A process blocked in a
//!   notified call is still killed by the deadline's SIGKILL; if corral
//!   dies, the listener closes and the kernel fails the call (`ENOSYS`).
//! - Files and processes: Landlock's denial records go to the kernel's
//!   audit log (host-wide, off unless an audit daemon turns it on,
//!   readable only with CAP_AUDIT_READ): corral does not turn the host's
//!   audit on, so those denials are not observed, and the report says so.

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::raw::c_int;
use std::sync::{Arc, Mutex};

use linux_raw_sys::general as k;

use super::raw::{self, Errno};
use crate::report::{SandboxDenial, SandboxObservation, SandboxReport};
use crate::spec::Network;

/// At most this many distinct denials are listed; attempts of others are
/// counted in `denials_unlisted`.
pub(crate) const MAX_LISTED: usize = 64;

/// Test hook: the supervisor holds each notification unanswered until the
/// run's report is made (proves a deadline still ends a notified call).
pub(crate) const HOLD_ENV: &str = "CORRAL_TEST_SECCOMP_HOLD";

#[repr(C)]
struct Fprog {
    len: u16,
    filter: *const seccompiler::sock_filter,
}

/// The notified `socket(2)` filter, its fallback, and the socket pair the
/// child hands the listener over.
pub(crate) struct NetFilter {
    _notify: Vec<seccompiler::sock_filter>,
    notify_prog: Fprog,
    _plain: Vec<seccompiler::sock_filter>,
    plain_prog: Fprog,
    /// The child's end (close-on-exec).
    tx: OwnedFd,
    /// corral's end (close-on-exec).
    rx: OwnedFd,
}

// SAFETY: only read after construction (the raw pointers in the programs
// point into the vectors owned by the same value).
unsafe impl Send for NetFilter {}
// SAFETY: as for Send.
unsafe impl Sync for NetFilter {}

/// The `BPF_RET | BPF_K` opcode.
const RET_K: u16 = 0x06;
/// What the plain program returns for a refused call.
const RET_EPERM: u32 = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;

/// Replaces every `return ERRNO(EPERM)` of `prog` with `return USER_NOTIF`.
/// In the `socket(2)` program those are exactly the refusals (its other
/// returns are ALLOW and the architecture check's KILL_PROCESS). The
/// number replaced.
fn rewrite_to_notify(prog: &mut [seccompiler::sock_filter]) -> usize {
    let mut n = 0;
    for ins in prog.iter_mut() {
        if ins.code == RET_K && ins.k == RET_EPERM {
            ins.k = libc::SECCOMP_RET_USER_NOTIF;
            n += 1;
        }
    }
    n
}

/// The plain `socket(2)` program of `network` (`None` for `host`: nothing
/// refused).
fn socket_program(network: Network) -> Result<Option<Vec<seccompiler::sock_filter>>, String> {
    use seccompiler::{SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompRule};
    let cond = match network {
        Network::Host => return Ok(None),
        Network::None => vec![],
        Network::Loopback => vec![SeccompCondition::new(
            0,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::Eq,
            libc::AF_UNIX as u64,
        )
        .and_then(|c| SeccompRule::new(vec![c]))
        .map_err(|e| format!("seccomp rule: {e}"))?],
    };
    let mut rules = BTreeMap::new();
    rules.insert(i64::from(k::__NR_socket), cond.clone());
    #[cfg(target_arch = "x86_64")]
    rules.insert(i64::from(k::__NR_socket | 0x4000_0000), cond); // x32
    compile(rules).map(Some)
}

/// Compiles `rules` (each call number's conditions) into a program that
/// answers a matching call with `EPERM` and lets every other call through,
/// for this architecture (`seccompiler`). The sandbox's own filter and the
/// `socket(2)` program are both made here.
pub(super) fn compile(
    rules: BTreeMap<i64, Vec<seccompiler::SeccompRule>>,
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

impl NetFilter {
    /// The filter for `network` (`None` for `host`).
    pub(crate) fn new(network: Network) -> Result<Option<NetFilter>, String> {
        let Some(plain) = socket_program(network)? else {
            return Ok(None);
        };
        let mut notify = plain.clone();
        if rewrite_to_notify(&mut notify) == 0 {
            return Err("seccomp: the socket program has no refusal to notify".into());
        }
        let mut pair = [0 as c_int; 2];
        // SAFETY: socketpair writes two descriptors into `pair`.
        if unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                0,
                pair.as_mut_ptr(),
            )
        } != 0
        {
            return Err(format!(
                "seccomp listener's socket pair: {}",
                std::io::Error::last_os_error()
            ));
        }
        // SAFETY: both descriptors were just made and are owned here.
        let (tx, rx) = unsafe { (OwnedFd::from_raw_fd(pair[0]), OwnedFd::from_raw_fd(pair[1])) };
        let prog = |p: &Vec<seccompiler::sock_filter>| Fprog {
            len: p.len() as u16,
            filter: p.as_ptr(),
        };
        Ok(Some(NetFilter {
            notify_prog: prog(&notify),
            plain_prog: prog(&plain),
            _notify: notify,
            _plain: plain,
            tx,
            rx,
        }))
    }

    /// The child's end of the socket pair (the PID namespace's init keeps
    /// it open for its command).
    pub(crate) fn child_fd(&self) -> c_int {
        self.tx.as_raw_fd()
    }

    /// Installs the filter in the child and hands its listener to corral;
    /// without a listener (`EBUSY`: a filter around corral has one;
    /// `EINVAL`: a kernel without them) the plain `EPERM` program.
    ///
    /// # Safety
    /// Only in a freshly cloned or forked child about to exec, after the
    /// sandbox's other steps.
    #[inline(always)]
    pub(super) unsafe fn install(&self) -> Result<(), Errno> {
        // SAFETY: `notify_prog` points into `_notify`, alive until the exec.
        match unsafe { raw::seccomp_filter_listener(&self.notify_prog as *const Fprog as usize) } {
            Ok(fd) => {
                let r = raw::send_fd(self.tx.as_raw_fd(), fd);
                raw::close(fd);
                r.map(|_| ())
            }
            Err(e) if e.raw() == libc::EBUSY || e.raw() == libc::EINVAL => {
                // SAFETY: `plain_prog` points into `_plain`, alive until the exec.
                unsafe { raw::seccomp_filter(&self.plain_prog as *const Fprog as usize) }
                    .map(|_| ())
            }
            Err(e) => Err(e),
        }
    }
}

/// What the supervisor saw.
#[derive(Default)]
struct Seen {
    /// Whether the child handed a listener over.
    listener: bool,
    /// Distinct denials, in the order first seen, with their counts.
    listed: Vec<SandboxDenial>,
    unlisted: u64,
}

impl Seen {
    fn record(&mut self, operation: &str, target: String) {
        if let Some(d) = self
            .listed
            .iter_mut()
            .find(|d| d.operation == operation && d.target == target)
        {
            d.count += 1;
        } else if self.listed.len() < MAX_LISTED {
            self.listed
                .push(SandboxDenial::new("network", operation, target, 1));
        } else {
            self.unlisted += 1;
        }
    }
}

/// A socket family's name.
fn family(f: u64) -> String {
    let name = match f as c_int {
        libc::AF_UNIX => "AF_UNIX",
        libc::AF_INET => "AF_INET",
        libc::AF_INET6 => "AF_INET6",
        libc::AF_NETLINK => "AF_NETLINK",
        libc::AF_PACKET => "AF_PACKET",
        libc::AF_VSOCK => "AF_VSOCK",
        libc::AF_BLUETOOTH => "AF_BLUETOOTH",
        libc::AF_ALG => "AF_ALG",
        _ => return format!("family {f}"),
    };
    name.to_string()
}

/// A socket type's name (the SOCK_NONBLOCK and SOCK_CLOEXEC flags left
/// out).
fn sock_type(t: u64) -> String {
    let name = match (t & 0xf) as c_int {
        libc::SOCK_STREAM => "SOCK_STREAM",
        libc::SOCK_DGRAM => "SOCK_DGRAM",
        libc::SOCK_RAW => "SOCK_RAW",
        libc::SOCK_SEQPACKET => "SOCK_SEQPACKET",
        libc::SOCK_RDM => "SOCK_RDM",
        _ => return format!("type {}", t & 0xf),
    };
    name.to_string()
}

/// The target of a refused `socket(domain, type, protocol)`.
fn socket_target(args: &[u64; 6]) -> String {
    let mut s = format!("{} {}", family(args[0]), sock_type(args[1]));
    let proto = args[2] as u32;
    if proto != 0 {
        s.push_str(&format!(" protocol {proto}"));
    }
    s
}

/// The thread that answers the notified calls of one run.
pub(crate) struct Supervisor {
    /// Closed to stop the thread (it drains what is pending first).
    stop: Option<OwnedFd>,
    thread: Option<std::thread::JoinHandle<()>>,
    seen: Arc<Mutex<Seen>>,
}

impl Supervisor {
    /// Starts watching `net`'s socket pair for the listener the child
    /// hands over. `None` when the thread cannot be had (then the report
    /// says network denials were not observed; the kernel still refuses
    /// every call: `ENOSYS` once the child's listener is gone).
    pub(crate) fn start(net: &NetFilter) -> Option<Supervisor> {
        let rx = net.rx.try_clone().ok()?;
        let mut pipe = [0 as c_int; 2];
        // SAFETY: pipe2 writes two descriptors into `pipe`.
        if unsafe { libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return None;
        }
        // SAFETY: both descriptors were just made and are owned here.
        let (stop_r, stop_w) =
            unsafe { (OwnedFd::from_raw_fd(pipe[0]), OwnedFd::from_raw_fd(pipe[1])) };
        let seen = Arc::new(Mutex::new(Seen::default()));
        let hold = std::env::var_os(HOLD_ENV).is_some_and(|v| v == "1");
        let s2 = seen.clone();
        let thread = std::thread::Builder::new()
            .name("corral-seccomp".into())
            .spawn(move || supervise(rx, stop_r, &s2, hold))
            .ok()?;
        Some(Supervisor {
            stop: Some(stop_w),
            thread: Some(thread),
            seen,
        })
    }

    /// Stops the thread (after it has answered what is pending) and puts
    /// what it saw into `report`.
    pub(crate) fn finish(mut self, report: &mut SandboxReport) {
        self.stop.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let seen = match self.seen.lock() {
            Ok(mut s) => std::mem::take(&mut *s),
            Err(_) => Seen::default(),
        };
        fill(report, seen, true);
    }
}

/// What the report says about denials when nothing was watched (`host`,
/// or no supervisor).
pub(crate) fn unwatched(report: &mut SandboxReport) {
    fill(report, Seen::default(), false);
}

fn fill(report: &mut SandboxReport, seen: Seen, watched: bool) {
    let audit = "not observed: Landlock's denial records go to the kernel's audit log, which is host-wide, off unless an audit daemon turns it on, and readable only with CAP_AUDIT_READ; corral does not turn the host's audit on, so a failed operation inside may be the sandbox's or the program's own";
    let network = if report.network == "host" {
        (
            false,
            "nothing is refused (network host is not confined)".to_string(),
        )
    } else if seen.listener {
        let what = if report.network == "loopback" {
            "socket(2) of AF_UNIX refused by seccomp (a host pathname socket); TCP and UDP reach the sandbox's own loopback, where the host's addresses are absent rather than denied, so those are not listed"
        } else {
            "socket(2) refused by seccomp for every family (TCP, UDP, unix sockets); the call is refused before any address is given, so the family and type are listed, not the address"
        };
        (
            true,
            format!("observed through seccomp user notification: {what}"),
        )
    } else if watched {
        (false, "not observed: the kernel gave no seccomp listener for the sandbox (a seccomp filter around corral already has one); the calls are still refused with EPERM".to_string())
    } else {
        (false, "not observed: corral could not start the thread that receives the seccomp notifications; the calls are still refused".to_string())
    };
    report.denials = seen.listed;
    report.denials_unlisted = seen.unlisted;
    report.denials_observed = vec![
        SandboxObservation::new("files", false, audit),
        SandboxObservation::new("network", network.0, network.1.clone()),
        SandboxObservation::new(
            "processes",
            false,
            "not observed: signals outside the tree are refused by Landlock scoping (audit records only, as for files), ptrace and process_vm_* by seccomp with EPERM and no record",
        ),
    ];
    report.denials_note = if network.0 {
        format!(
            "network denials are listed ({}); file and process denials are not observed (Landlock's records go only to the host's audit log)",
            if report.network == "loopback" { "unix sockets" } else { "every socket(2) refused" }
        )
    } else {
        format!("no denial is observed: network: {}; files and processes: Landlock's records go only to the host's audit log", network.1)
    };
}

fn poll(fds: &mut [libc::pollfd], timeout_ms: c_int) -> c_int {
    loop {
        // SAFETY: `fds` is a valid array of pollfd of its length.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
        if n >= 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return n;
        }
    }
}

/// Takes the listener the child sent over `rx`, if one is there.
fn receive_listener(rx: &OwnedFd) -> Option<OwnedFd> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // Room for one descriptor: CMSG_SPACE(sizeof(int)), aligned.
    let mut control = [0u64; 4];
    // SAFETY: an all-zero msghdr is valid; the pointers are set below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE only computes a size.
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(std::mem::size_of::<c_int>() as u32) } as _;
    // SAFETY: `msg` points to `iov`, `byte` and `control`, alive here.
    let n = unsafe {
        libc::recvmsg(
            rx.as_raw_fd(),
            &mut msg,
            libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC,
        )
    };
    if n < 0 {
        return None;
    }
    // SAFETY: `msg` was filled by recvmsg; the macros walk its control
    // buffer within `msg_controllen`.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        if c.is_null() || (*c).cmsg_level != libc::SOL_SOCKET || (*c).cmsg_type != libc::SCM_RIGHTS
        {
            return None;
        }
        let fd = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<c_int>());
        (fd >= 0).then(|| OwnedFd::from_raw_fd(fd))
    }
}

/// Receives one notification, records it and answers `EPERM` (unless
/// `hold`: then it waits for `stop` first). False when the listener is
/// broken.
fn answer_one(listener: &OwnedFd, stop: &OwnedFd, seen: &Mutex<Seen>, hold: bool) -> bool {
    // SAFETY: an all-zero seccomp_notif is what the kernel requires.
    let mut req: libc::seccomp_notif = unsafe { std::mem::zeroed() };
    // SAFETY: RECV writes one seccomp_notif into `req`.
    let r = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_RECV as _,
            &mut req,
        )
    };
    if r < 0 {
        // ENOENT: the caller was killed before it was received; EINTR.
        let e = std::io::Error::last_os_error().raw_os_error();
        return matches!(e, Some(libc::ENOENT) | Some(libc::EINTR));
    }
    let nr = (req.data.nr as u32) & !0x4000_0000;
    if nr == k::__NR_socket {
        if let Ok(mut s) = seen.lock() {
            s.record("socket", socket_target(&req.data.args));
        }
    }
    if hold {
        let mut fds = [libc::pollfd {
            fd: stop.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        poll(&mut fds, -1);
    }
    let mut resp = libc::seccomp_notif_resp {
        id: req.id,
        val: 0,
        error: -libc::EPERM,
        flags: 0,
    };
    // SAFETY: SEND reads one seccomp_notif_resp. ENOENT (the caller died
    // meanwhile) is not an error: the attempt was made and is counted.
    unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_SEND as _,
            &mut resp,
        )
    };
    true
}

fn supervise(rx: OwnedFd, stop: OwnedFd, seen: &Mutex<Seen>, hold: bool) {
    let mut listener: Option<OwnedFd> = None;
    // Whether `rx` may still bring the listener (a negative descriptor is
    // ignored by poll: no spinning on an error that stays).
    let mut rx_open = true;
    loop {
        let watched = match (&listener, rx_open) {
            (Some(l), _) => l.as_raw_fd(),
            (None, true) => rx.as_raw_fd(),
            (None, false) => -1,
        };
        let mut fds = [
            libc::pollfd {
                fd: watched,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: stop.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        if poll(&mut fds, -1) < 0 {
            break;
        }
        let stopping = fds[1].revents != 0;
        if listener.is_none() {
            if (rx_open && fds[0].revents != 0) || stopping {
                listener = receive_listener(&rx);
                if listener.is_some() {
                    if let Ok(mut s) = seen.lock() {
                        s.listener = true;
                    }
                } else if fds[0].revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0 {
                    rx_open = false;
                }
            }
            if listener.is_none() && stopping {
                break;
            }
            if !stopping {
                continue;
            }
        }
        let Some(l) = listener.as_ref() else { break };
        if stopping {
            // Answer what is pending, then end (a call made after the
            // report is refused by the kernel: ENOSYS without a listener).
            loop {
                let mut one = [libc::pollfd {
                    fd: l.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                }];
                if poll(&mut one, 0) <= 0 || one[0].revents & libc::POLLIN == 0 {
                    break;
                }
                if !answer_one(l, &stop, seen, false) {
                    break;
                }
            }
            break;
        }
        if fds[0].revents & libc::POLLIN != 0 {
            if !answer_one(l, &stop, seen, hold) {
                break;
            }
        } else if fds[0].revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
            // Every process under the filter has exited.
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rewrite turns exactly the program's EPERM returns into
    /// USER_NOTIF and touches nothing else; the other returns are ALLOW
    /// and the architecture check's KILL_PROCESS.
    #[test]
    fn the_rewrite_turns_each_refusal_into_a_notification() {
        for net in [Network::None, Network::Loopback] {
            let plain = socket_program(net).unwrap().unwrap();
            let mut notify = plain.clone();
            let n = rewrite_to_notify(&mut notify);
            let refusals = plain
                .iter()
                .filter(|i| i.code == RET_K && i.k == RET_EPERM)
                .count();
            assert!(n >= 1, "{net:?}: nothing rewritten");
            assert_eq!(n, refusals);
            for (a, b) in plain.iter().zip(&notify) {
                if a.code == RET_K && a.k == RET_EPERM {
                    assert_eq!(b.k, libc::SECCOMP_RET_USER_NOTIF);
                } else {
                    assert_eq!((a.code, a.k, a.jt, a.jf), (b.code, b.k, b.jt, b.jf));
                }
                if a.code == RET_K && a.k != RET_EPERM {
                    assert!(
                        a.k == libc::SECCOMP_RET_ALLOW || a.k == libc::SECCOMP_RET_KILL_PROCESS,
                        "{net:?}: unexpected return {:#x}",
                        a.k
                    );
                }
            }
        }
        assert!(socket_program(Network::Host).unwrap().is_none());
    }

    /// Distinct denials are listed up to the cap; the rest are counted
    /// exactly.
    #[test]
    fn the_list_is_capped_and_the_rest_counted() {
        let mut s = Seen::default();
        for i in 0..(MAX_LISTED as u64 + 10) {
            s.record("socket", format!("family {i}"));
        }
        s.record("socket", "family 0".into());
        assert_eq!(s.listed.len(), MAX_LISTED);
        assert_eq!(s.listed[0].count, 2);
        assert_eq!(s.unlisted, 10);
        assert_eq!(
            socket_target(&[2, 1 | libc::SOCK_CLOEXEC as u64, 0, 0, 0, 0]),
            "AF_INET SOCK_STREAM"
        );
        assert_eq!(
            socket_target(&[10, 2, 17, 0, 0, 0]),
            "AF_INET6 SOCK_DGRAM protocol 17"
        );
    }
}
