//! `corral run --pty`: corral's side of the program's terminal. The
//! window's size comes from corral's stdout when that is a terminal (and
//! follows it: each SIGWINCH is passed on), else from `--pty-size`; when
//! corral's stdin is a terminal it is put in raw mode for the run (keys,
//! Ctrl-C and Ctrl-D included, reach the program's terminal as typed, and
//! are not echoed twice), and restored after.

use corral::PtySize;

/// The terminal's size at the start: corral's stdout's when it is a
/// terminal with a size, else `given`, else 80x24.
pub fn initial_size(given: Option<PtySize>) -> PtySize {
    #[cfg(unix)]
    if let Some(size) = stdout_size() {
        return size;
    }
    given.unwrap_or_default()
}

/// corral's stdout's window size, when it is a terminal that has one.
#[cfg(unix)]
fn stdout_size() -> Option<PtySize> {
    let out = std::io::stdout();
    if !rustix::termios::isatty(&out) {
        return None;
    }
    let w = rustix::termios::tcgetwinsize(&out).ok()?;
    (w.ws_col > 0 && w.ws_row > 0).then(|| PtySize::new(w.ws_col, w.ws_row))
}

/// What corral changed for the run (the raw mode of its stdin, the
/// SIGWINCH watch): both undone on drop.
pub struct Session {
    #[cfg(unix)]
    saved: Option<rustix::termios::Termios>,
    #[cfg(unix)]
    winch: Option<signal_hook::iterator::Handle>,
}

impl Session {
    /// Starts following corral's terminal for `running`'s terminal.
    pub fn start(running: &corral::Running) -> Session {
        #[cfg(unix)]
        {
            Session {
                saved: raw_stdin(),
                winch: running.pty_window().and_then(follow_resizes),
            }
        }
        #[cfg(not(unix))]
        {
            let _ = running;
            Session {}
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        #[cfg(unix)]
        {
            if let Some(h) = self.winch.take() {
                h.close();
            }
            if let Some(t) = self.saved.take() {
                let _ = rustix::termios::tcsetattr(
                    std::io::stdin(),
                    rustix::termios::OptionalActions::Now,
                    &t,
                );
            }
        }
    }
}

/// Puts corral's stdin in raw mode when it is a terminal that corral may
/// change (it is in the terminal's foreground group); returns the settings
/// to restore.
#[cfg(unix)]
fn raw_stdin() -> Option<rustix::termios::Termios> {
    use rustix::termios::{isatty, tcgetattr, tcgetpgrp, tcsetattr, OptionalActions};
    let stdin = std::io::stdin();
    if !isatty(&stdin) || Some(tcgetpgrp(&stdin).ok()?) != crate::tty::own_group() {
        return None;
    }
    let saved = tcgetattr(&stdin).ok()?;
    let mut raw = saved.clone();
    raw.make_raw();
    tcsetattr(&stdin, OptionalActions::Now, &raw).ok()?;
    Some(saved)
}

/// Passes each SIGWINCH of corral's stdout's terminal on to the program's
/// terminal, on a thread of its own, until the handle is closed.
#[cfg(unix)]
fn follow_resizes(window: corral::PtyWindow) -> Option<signal_hook::iterator::Handle> {
    stdout_size()?;
    let mut signals = signal_hook::iterator::Signals::new([signal_hook::consts::SIGWINCH]).ok()?;
    let handle = signals.handle();
    std::thread::Builder::new()
        .name("corral-winch".into())
        .spawn(move || {
            for _ in signals.forever() {
                if let Some(size) = stdout_size() {
                    let _ = window.resize(size);
                }
            }
        })
        .ok()?;
    Some(handle)
}
