//! One process of a soak tree (`corral-soak node SOCKET TREE ROOT-ACTION ID`).
//!
//! It detaches if asked, sends the harness a pidfd of itself (so the harness
//! holds it from its first instant, in any PID namespace), starts its
//! children, lets go of the output unless it holds it, and then waits: for
//! SIGUSR1 (the harness's "go": exit, flood, or the root's action), for
//! SIGTERM when it catches it, or for its 30 s to pass. It reaps its own
//! children as they exit. Every node exits by itself within 30 s.

use std::io::{IoSlice, Write};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use rustix::net::{
    sendmsg_addr, socket_with, AddressFamily, SendAncillaryBuffer, SendAncillaryMessage, SendFlags,
    SocketAddrUnix, SocketFlags, SocketType,
};
use rustix::process::{pidfd_open, PidfdFlags};

use crate::tree::{Case, Detach, Node, Term};

/// How long a node lives at most.
const LIFE: Duration = Duration::from_secs(30);

pub fn main(args: &[String]) -> i32 {
    let [sock, tree, action, id] = args else {
        eprintln!("usage: corral-soak node SOCKET TREE ROOT-ACTION ID");
        return 2;
    };
    let (Some(nodes), Ok(id)) = (Case::decode(tree), id.parse::<usize>()) else {
        eprintln!("corral-soak node: bad tree or id");
        return 2;
    };
    let Some(me) = nodes.get(id).cloned() else {
        return 2;
    };
    let start = Instant::now();
    let Ok(addr) = SocketAddrUnix::new_abstract_name(sock.as_bytes()) else {
        return 2;
    };

    // The signal mask and dispositions are set here, whatever was
    // inherited: USR1 and CHLD (and TERM when caught) are taken by
    // sigtimedwait; HUP, INT, QUIT and TERM otherwise have their default
    // action (or TERM is ignored).
    // SAFETY: plain libc calls on local, initialised signal sets; no
    // handler is installed.
    let waited = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGUSR1);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        if me.term == Term::Catch {
            libc::sigaddset(&mut set, libc::SIGTERM);
        }
        libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
        for s in [
            libc::SIGHUP,
            libc::SIGINT,
            libc::SIGQUIT,
            libc::SIGUSR2,
            libc::SIGALRM,
        ] {
            libc::signal(s, libc::SIG_DFL);
        }
        libc::signal(
            libc::SIGTERM,
            if me.term == Term::Ignore {
                libc::SIG_IGN
            } else {
                libc::SIG_DFL
            },
        );
        set
    };

    match me.detach {
        Detach::No => {}
        Detach::Setsid => {
            let _ = rustix::process::setsid();
        }
        Detach::DoubleFork => {
            // SAFETY: this process is single-threaded here (nothing has
            // started a thread yet), so the child may run Rust code.
            let pid = unsafe { libc::fork() };
            if pid < 0 {
                return 3;
            }
            if pid > 0 {
                // SAFETY: ends the intermediate process at once.
                unsafe { libc::_exit(0) };
            }
            // Registered only once the intermediate is gone (re-parented),
            // so that no unregistered process of the tree is alive when the
            // harness triggers the end.
            let intermediate = rustix::process::getppid();
            let end = Instant::now() + Duration::from_secs(5);
            while rustix::process::getppid() == intermediate && Instant::now() < end {
                std::thread::sleep(Duration::from_micros(200));
            }
            let _ = rustix::process::setsid();
        }
    }

    // Register: a pidfd of myself, over the harness's socket.
    let Ok(out) = socket_with(
        AddressFamily::UNIX,
        SocketType::DGRAM,
        SocketFlags::CLOEXEC,
        None,
    ) else {
        return 3;
    };
    let send = |msg: &[u8], fd: Option<std::os::fd::BorrowedFd<'_>>| {
        let fds;
        let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        if let Some(fd) = fd {
            fds = [fd];
            control.push(SendAncillaryMessage::ScmRights(&fds));
        }
        sendmsg_addr(
            &out,
            &addr,
            &[IoSlice::new(msg)],
            &mut control,
            SendFlags::empty(),
        )
    };
    let Ok(me_fd) = pidfd_open(rustix::process::getpid(), PidfdFlags::empty()) else {
        return 3;
    };
    if send(format!("r{id}").as_bytes(), Some(me_fd.as_fd())).is_err() {
        return 3;
    }
    drop(me_fd);

    // Children, started with my output (each lets go of it itself).
    let exe = std::env::current_exe().unwrap_or_else(|_| "/proc/self/exe".into());
    for (cid, c) in nodes.iter().enumerate() {
        if c.parent == Some(id) {
            let _ = std::process::Command::new(&exe)
                .args(["node", sock, tree, action, &cid.to_string()])
                .stdin(std::process::Stdio::null())
                .spawn();
        }
    }
    if id != 0 && !me.hold && me.flood == 0 && !me.endless {
        let_go_of_output();
    }
    // Set up: my children started, my output let go of.
    if send(format!("s{id}").as_bytes(), None).is_err() {
        return 3;
    }

    loop {
        let left = LIFE.saturating_sub(start.elapsed());
        if left.is_zero() {
            return 0;
        }
        let ts = libc::timespec {
            tv_sec: left.as_secs() as libc::time_t,
            tv_nsec: left.subsec_nanos() as libc::c_long,
        };
        // SAFETY: `waited` is an initialised set, `ts` a valid timespec;
        // no siginfo is asked for.
        let sig = unsafe { libc::sigtimedwait(&waited, std::ptr::null_mut(), &ts) };
        match sig {
            libc::SIGCHLD => reap(),
            libc::SIGTERM => {
                let _ = send(format!("t{id}").as_bytes(), None);
                return 0;
            }
            libc::SIGUSR1 => {
                if let Some(code) = go(&me, id, action, &send, start) {
                    return code;
                }
            }
            _ => {}
        }
    }
}

/// Sends a message (and a descriptor) to the harness.
type Send<'a> =
    dyn Fn(&[u8], Option<std::os::fd::BorrowedFd<'_>>) -> rustix::io::Result<usize> + 'a;

/// The harness's "go". `Some(code)`: exit with it.
fn go(me: &Node, id: usize, action: &str, send: &Send<'_>, start: Instant) -> Option<i32> {
    if me.endless {
        let buf = [b'e'; 16 << 10];
        let mut o = std::io::stdout().lock();
        while start.elapsed() < LIFE {
            if o.write_all(&buf).is_err() {
                break;
            }
        }
        return None;
    }
    if me.flood > 0 {
        let buf = [b'f'; 16 << 10];
        let mut left = me.flood as usize;
        let mut o = std::io::stdout().lock();
        while left > 0 {
            let n = left.min(buf.len());
            if o.write_all(&buf[..n]).is_err() {
                break;
            }
            left -= n;
        }
        let _ = o.flush();
        drop(o);
        if !me.hold && id != 0 {
            let_go_of_output();
        }
        let _ = send(format!("f{id}").as_bytes(), None);
        return me.transient.then_some(0);
    }
    if me.transient {
        return Some(0);
    }
    if id == 0 {
        if let Some(c) = action.strip_prefix("exit:") {
            return Some(c.parse().unwrap_or(1));
        }
        if let Some(s) = action.strip_prefix("sig:") {
            let s: i32 = s.parse().unwrap_or(libc::SIGTERM);
            // SAFETY: default action for a signal that ends the process,
            // unblocked, then sent to myself.
            unsafe {
                libc::signal(s, libc::SIG_DFL);
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::sigaddset(&mut set, s);
                libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
                libc::kill(libc::getpid(), s);
            }
            std::thread::sleep(Duration::from_secs(1));
            return Some(99);
        }
    }
    None
}

/// stdout and stderr become /dev/null.
fn let_go_of_output() {
    if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
        let _ = rustix::stdio::dup2_stdout(&null);
        let _ = rustix::stdio::dup2_stderr(&null);
    }
}

/// Reaps every exited child.
fn reap() {
    loop {
        let mut status = 0;
        // SAFETY: waitpid with a valid status pointer.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return;
        }
    }
}
