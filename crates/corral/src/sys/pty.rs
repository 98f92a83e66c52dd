//! Pseudo-terminals (Unix): a new terminal for one run (the master, which
//! corral reads and writes; the slave, which the child gets as its three
//! standard streams and makes its controlling terminal), its window size,
//! and the input relay (bytes, a file or corral's own stdin into the
//! master, then the terminal's end-of-file character once).
//!
//! Built on rustix's `pty` and `termios` modules: rustix is already the
//! platform layer's one dependency for system calls, and those two modules
//! are thin typed wrappers over `posix_openpt`/`grantpt`/`unlockpt`/
//! `ptsname` (`TIOCGPTPEER` on Linux) and `tcgetattr`/`TIOCSWINSZ`, which is
//! all a runner needs: no terminal emulation, no extra crate.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use rustix::event::{poll, PollFd, PollFlags};
use rustix::pty::OpenptFlags;
use rustix::termios::Winsize;

/// A new terminal: the master (close-on-exec, blocking: the caller makes
/// it non-blocking), the slave (close-on-exec; the child's three streams)
/// and the terminal's end-of-file character.
pub(crate) struct Opened {
    pub(crate) master: OwnedFd,
    pub(crate) slave: File,
    pub(crate) eof: u8,
}

/// Opens a new pseudo-terminal of `cols` x `rows`. Neither side becomes
/// corral's controlling terminal (`O_NOCTTY`).
pub(crate) fn open(cols: u16, rows: u16) -> io::Result<Opened> {
    #[cfg(any(target_os = "linux", target_os = "freebsd", target_os = "netbsd"))]
    let master =
        rustix::pty::openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC)?;
    #[cfg(not(any(target_os = "linux", target_os = "freebsd", target_os = "netbsd")))]
    let master = {
        let m = rustix::pty::openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY)?;
        rustix::io::fcntl_setfd(&m, rustix::io::FdFlags::CLOEXEC)?;
        m
    };
    rustix::pty::grantpt(&master)?;
    rustix::pty::unlockpt(&master)?;
    let slave = open_slave(&master)?;
    resize(&master, cols, rows)?;
    let eof = rustix::termios::tcgetattr(&slave)
        .map(|t| t.special_codes[rustix::termios::SpecialCodeIndex::VEOF])
        .ok()
        .filter(|&c| c != 0)
        .unwrap_or(4);
    Ok(Opened {
        master,
        slave: slave.into(),
        eof,
    })
}

/// The slave of `master`: through `TIOCGPTPEER` on Linux (no path lookup,
/// right in a container whose `/dev/pts` is another instance), else by
/// its name.
fn open_slave(master: &OwnedFd) -> io::Result<OwnedFd> {
    #[cfg(target_os = "linux")]
    if let Ok(fd) = rustix::pty::ioctl_tiocgptpeer(
        master,
        OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC,
    ) {
        return Ok(fd);
    }
    let name = rustix::pty::ptsname(master, Vec::new())?;
    Ok(rustix::fs::open(
        name.as_c_str(),
        rustix::fs::OFlags::RDWR | rustix::fs::OFlags::NOCTTY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?)
}

/// Sets the terminal's window size (the kernel sends SIGWINCH to the
/// terminal's foreground process group when it changes).
pub(crate) fn resize(master: impl AsFd, cols: u16, rows: u16) -> io::Result<()> {
    Ok(rustix::termios::tcsetwinsize(
        master,
        Winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        },
    )?)
}

/// The window size of the terminal `fd` (cols, rows), if it is one.
pub(crate) fn size_of(fd: impl AsFd) -> io::Result<(u16, u16)> {
    let w = rustix::termios::tcgetwinsize(fd)?;
    Ok((w.ws_col, w.ws_row))
}

/// Where the terminal's input comes from.
pub(crate) enum InputSource {
    /// These bytes.
    Bytes(Arc<[u8]>),
    /// What this descriptor gives until its end (a file, a pipe, corral's
    /// own stdin).
    Fd(OwnedFd),
    /// Nothing.
    Nothing,
}

/// The input relay's thread, stopped when this drops (it never blocks but
/// in `poll`, which also waits on the stop pipe).
pub(crate) struct InputRelay {
    _stop: OwnedFd,
}

impl InputRelay {
    /// Writes `source` into `master` (non-blocking: waits for room in
    /// `poll`), then `eof` once, on a thread of its own.
    pub(crate) fn start(
        source: InputSource,
        master: Arc<OwnedFd>,
        eof: u8,
    ) -> io::Result<InputRelay> {
        // std's pipe is close-on-exec on every Unix.
        let (stop_rx, stop_tx) = io::pipe()?;
        let (stop_rx, stop_tx) = (OwnedFd::from(stop_rx), OwnedFd::from(stop_tx));
        std::thread::Builder::new()
            .name("corral-pty-input".into())
            .spawn(move || relay_input(source, &master, eof, &stop_rx))?;
        Ok(InputRelay { _stop: stop_tx })
    }
}

/// The relay's body: returns when everything and the EOF character were
/// written, the terminal went away, or the relay was stopped.
fn relay_input(source: InputSource, master: &OwnedFd, eof: u8, stop: &OwnedFd) {
    let write_all = |mut data: &[u8]| -> bool {
        while !data.is_empty() {
            match rustix::io::write(master, data) {
                Ok(n) => data = &data[n..],
                Err(rustix::io::Errno::INTR) => {}
                Err(rustix::io::Errno::AGAIN) => {
                    if !wait_for(master, PollFlags::OUT, stop) {
                        return false;
                    }
                }
                Err(_) => return false,
            }
        }
        true
    };
    let done = match source {
        InputSource::Nothing => true,
        InputSource::Bytes(b) => write_all(&b),
        InputSource::Fd(src) => {
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                if !wait_for(&src, PollFlags::IN, stop) {
                    break false;
                }
                match rustix::io::read(&src, &mut buf) {
                    Ok(0) => break true,
                    Ok(n) => {
                        if !write_all(&buf[..n]) {
                            break false;
                        }
                    }
                    Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => {}
                    // A source that cannot be read ended.
                    Err(_) => break true,
                }
            }
        }
    };
    if done {
        write_all(&[eof]);
    }
}

/// Waits until `fd` is ready for `flags` (or hung up), or the stop pipe
/// closes: true when `fd` is ready.
fn wait_for(fd: &OwnedFd, flags: PollFlags, stop: &OwnedFd) -> bool {
    loop {
        let mut fds = [PollFd::new(fd, flags), PollFd::new(stop, PollFlags::IN)];
        match poll(&mut fds, None) {
            Ok(_) => {
                if !fds[1].revents().is_empty() {
                    return false;
                }
                if !fds[0].revents().is_empty() {
                    return true;
                }
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => return false,
        }
    }
}
