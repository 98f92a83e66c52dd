//! Denials as evidence (issue 33): the `socket(2)` calls a sandbox's
//! network policy refuses reach corral through seccomp user notification,
//! and the run's report lists them (operation, family and type, exact
//! count) instead of leaving an agent to guess from exit codes and stderr.
//!
//! - The sandbox's seccomp program ([`super::seccomp`]) holds the
//!   `socket(2)` rules (`none`: every family; `loopback`: `AF_UNIX`) beside
//!   its other refusals, in two variants: one answering them with
//!   `SECCOMP_RET_USER_NOTIF`, one with `EPERM` (the fallback).
//! - The child installs the notifying variant last with
//!   `SECCOMP_FILTER_FLAG_NEW_LISTENER` and hands the listener
//!   (close-on-exec: the command never holds it) to corral over a socket
//!   pair made by the parent ([`NetFilter`]), before exec. Where the
//!   kernel refuses a listener (a filter around corral already has one:
//!   `EBUSY`), the child installs the `EPERM` variant instead and the
//!   report says network denials were not observed.
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

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::raw::c_int;
use std::sync::{Arc, Mutex};

use linux_raw_sys::general as k;

use super::raw::{self, Errno};
use super::seccomp::{Programs, Refusal};
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

impl Fprog {
    #[inline(always)]
    fn of(p: &[seccompiler::sock_filter]) -> Fprog {
        Fprog {
            len: p.len() as u16,
            filter: p.as_ptr(),
        }
    }
}

/// The socket pair the child hands the seccomp listener over.
pub(crate) struct NetFilter {
    /// The child's end (close-on-exec).
    tx: OwnedFd,
    /// corral's end (close-on-exec).
    rx: OwnedFd,
}

/// The `socket(2)` refusal of `network` (`None` for `host`: nothing
/// refused), notified to corral.
pub(super) fn socket_refusal(network: Network) -> Result<Option<Refusal>, String> {
    use seccompiler::{SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompRule};
    let conditions = match network {
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
    Ok(Some(Refusal {
        conditions,
        notified: true,
    }))
}

/// Installs the plain program (every refusal `EPERM`).
///
/// # Safety
/// Only in a freshly cloned or forked child about to exec, after the
/// sandbox's other steps.
#[inline(always)]
pub(super) unsafe fn install_plain(progs: &Programs) -> Result<(), Errno> {
    let f = Fprog::of(&progs.plain);
    // SAFETY: `f` points into `progs.plain`, alive for the call.
    unsafe { raw::seccomp_filter(&f as *const Fprog as usize) }.map(|_| ())
}

impl NetFilter {
    /// The socket pair for a sandbox whose program notifies.
    pub(crate) fn new() -> Result<NetFilter, String> {
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
        Ok(NetFilter { tx, rx })
    }

    /// The child's end of the socket pair (the PID namespace's init keeps
    /// it open for its command).
    pub(crate) fn child_fd(&self) -> c_int {
        self.tx.as_raw_fd()
    }

    /// Installs `progs`' notifying program in the child and hands its
    /// listener to corral; without a listener (`EBUSY`: a filter around
    /// corral has one; `EINVAL`: a kernel without them) the plain `EPERM`
    /// program.
    ///
    /// # Safety
    /// Only in a freshly cloned or forked child about to exec, after the
    /// sandbox's other steps.
    #[inline(always)]
    pub(super) unsafe fn install(&self, progs: &Programs) -> Result<(), Errno> {
        let Some(notify) = progs.notify.as_deref() else {
            // SAFETY: as the caller promises.
            return unsafe { install_plain(progs) };
        };
        let f = Fprog::of(notify);
        // SAFETY: `f` points into `progs.notify`, alive for the call.
        match unsafe { raw::seccomp_filter_listener(&f as *const Fprog as usize) } {
            Ok(fd) => {
                let r = raw::send_fd(self.tx.as_raw_fd(), fd);
                raw::close(fd);
                r.map(|_| ())
            }
            Err(e) if e.raw() == libc::EBUSY || e.raw() == libc::EINVAL => {
                // SAFETY: as the caller promises.
                unsafe { install_plain(progs) }
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

    /// The network policies' `socket(2)` refusals: every family under
    /// `none`, one rule (`AF_UNIX`) under `loopback`, nothing under
    /// `host`; each notified.
    #[test]
    fn each_network_policy_refuses_its_sockets() {
        let none = socket_refusal(Network::None).unwrap().unwrap();
        assert!(none.notified && none.conditions.is_empty());
        let lo = socket_refusal(Network::Loopback).unwrap().unwrap();
        assert!(lo.notified);
        assert_eq!(lo.conditions.len(), 1);
        assert!(socket_refusal(Network::Host).unwrap().is_none());
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
