//! A portable signal number, with the names people type.

use std::fmt;
use std::str::FromStr;

/// A signal that corral may send to a process tree as its first, graceful
/// signal (see [`Command::signal`](crate::Command::signal)).
///
/// It is a plain number so that reports can carry it on every platform. On
/// Windows only [`Signal::TERM`], [`Signal::INT`] and [`Signal::KILL`] have a
/// meaning (CTRL_BREAK for the first two, TerminateJobObject for the last).
#[derive(Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct Signal(i32);

const NAMES: &[(&str, i32)] = &[
    ("HUP", 1),
    ("INT", 2),
    ("QUIT", 3),
    ("ILL", 4),
    ("TRAP", 5),
    ("ABRT", 6),
    ("BUS", if cfg!(target_os = "linux") { 7 } else { 10 }),
    ("FPE", 8),
    ("KILL", 9),
    ("USR1", if cfg!(target_os = "linux") { 10 } else { 30 }),
    ("SEGV", 11),
    ("USR2", if cfg!(target_os = "linux") { 12 } else { 31 }),
    ("PIPE", 13),
    ("ALRM", 14),
    ("TERM", 15),
    ("CHLD", if cfg!(target_os = "linux") { 17 } else { 20 }),
    ("CONT", if cfg!(target_os = "linux") { 18 } else { 19 }),
    ("STOP", if cfg!(target_os = "linux") { 19 } else { 17 }),
    ("TSTP", if cfg!(target_os = "linux") { 20 } else { 18 }),
    ("TTIN", 21),
    ("TTOU", 22),
    ("URG", if cfg!(target_os = "linux") { 23 } else { 16 }),
    ("XCPU", 24),
    ("XFSZ", 25),
    ("VTALRM", 26),
    ("PROF", 27),
    ("WINCH", 28),
];

impl Signal {
    /// SIGHUP.
    pub const HUP: Signal = Signal(1);
    /// SIGINT.
    pub const INT: Signal = Signal(2);
    /// SIGKILL.
    pub const KILL: Signal = Signal(9);
    /// SIGCONT.
    pub const CONT: Signal = Signal(if cfg!(target_os = "linux") { 18 } else { 19 });
    /// SIGTERM, the default first signal.
    pub const TERM: Signal = Signal(15);

    /// The signal with this number, if it is one this platform knows.
    pub fn from_raw(n: i32) -> Option<Signal> {
        NAMES.iter().any(|&(_, v)| v == n).then_some(Signal(n))
    }

    /// The signal's number.
    pub fn as_raw(self) -> i32 {
        self.0
    }

    /// The signal's name without the `SIG` prefix, e.g. `TERM`.
    pub fn name(self) -> Option<&'static str> {
        NAMES.iter().find(|&&(_, v)| v == self.0).map(|&(n, _)| n)
    }
}

impl fmt::Debug for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "SIG{n}"),
            None => write!(f, "Signal({})", self.0),
        }
    }
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// The error for a signal name or number that is not known.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown signal {0:?} (use a name such as TERM, INT, KILL or a number such as 15)")]
pub struct UnknownSignal(pub String);

impl FromStr for Signal {
    type Err = UnknownSignal;

    /// Accepts `TERM`, `SIGTERM`, `term` or `15`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        if let Ok(n) = t.parse::<i32>() {
            return Signal::from_raw(n).ok_or_else(|| UnknownSignal(s.to_owned()));
        }
        let upper = t.to_ascii_uppercase();
        let name = upper.strip_prefix("SIG").unwrap_or(&upper);
        NAMES
            .iter()
            .find(|&&(n, _)| n == name)
            .map(|&(_, v)| Signal(v))
            .ok_or_else(|| UnknownSignal(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_and_numbers() {
        assert_eq!("TERM".parse::<Signal>().unwrap(), Signal::TERM);
        assert_eq!("sigint".parse::<Signal>().unwrap(), Signal::INT);
        assert_eq!("9".parse::<Signal>().unwrap(), Signal::KILL);
        assert!("NOPE".parse::<Signal>().is_err());
        assert!("0".parse::<Signal>().is_err());
        assert_eq!(Signal::TERM.to_string(), "SIGTERM");
    }
}
