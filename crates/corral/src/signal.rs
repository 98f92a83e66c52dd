//! A portable signal number, with the names people type.

use std::fmt;
use std::str::FromStr;

/// A signal number, as the operating system gives it.
///
/// Any valid number can be held, named or not (SIGSYS, SIGPWR, real-time
/// signals): a report carries the number the root really died of, never a
/// substitute. [`Signal::name`] names what this platform names; real-time
/// signals display as `SIGRTMIN+n` / `SIGRTMAX-n`.
///
/// It is a plain number so that reports can carry it on every platform. On
/// Windows only [`Signal::TERM`], [`Signal::INT`] and [`Signal::KILL`] have a
/// meaning (CTRL_BREAK for the first two, TerminateJobObject for the last).
///
/// With the `serde` feature a signal serialises as its `Display` name
/// (`"SIGTERM"`, `"SIGRTMIN+3"`) when it has one, else as its number (`32`
/// on Linux); both forms, and every form [`FromStr`] accepts, deserialise.
/// (The JSON report keeps numbers: `signal` plus `signal_name`.)
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Signal(i32);

const LINUX: bool = cfg!(target_os = "linux");
const BSD_LIKE: bool = cfg!(any(
    target_os = "macos",
    target_os = "ios",
    target_os = "freebsd",
    target_os = "netbsd",
    target_os = "openbsd",
    target_os = "dragonfly"
));

/// Names and numbers; the first name of a number is its canonical one.
const NAMES: &[(&str, i32)] = &[
    ("HUP", 1),
    ("INT", 2),
    ("QUIT", 3),
    ("ILL", 4),
    ("TRAP", 5),
    ("ABRT", 6),
    ("IOT", 6),
    ("BUS", if LINUX { 7 } else { 10 }),
    ("FPE", 8),
    ("KILL", 9),
    ("USR1", if LINUX { 10 } else { 30 }),
    ("SEGV", 11),
    ("USR2", if LINUX { 12 } else { 31 }),
    ("PIPE", 13),
    ("ALRM", 14),
    ("TERM", 15),
    ("CHLD", if LINUX { 17 } else { 20 }),
    ("CLD", if LINUX { 17 } else { 20 }),
    ("CONT", if LINUX { 18 } else { 19 }),
    ("STOP", if LINUX { 19 } else { 17 }),
    ("TSTP", if LINUX { 20 } else { 18 }),
    ("TTIN", 21),
    ("TTOU", 22),
    ("URG", if LINUX { 23 } else { 16 }),
    ("XCPU", 24),
    ("XFSZ", 25),
    ("VTALRM", 26),
    ("PROF", 27),
    ("WINCH", 28),
    ("IO", if LINUX { 29 } else { 23 }),
    ("POLL", if LINUX { 29 } else { 23 }),
    ("SYS", if LINUX { 31 } else { 12 }),
    // Linux only (0: not on this platform).
    ("STKFLT", if LINUX { 16 } else { 0 }),
    ("PWR", if LINUX { 30 } else { 0 }),
    // BSD and macOS only.
    ("EMT", if BSD_LIKE { 7 } else { 0 }),
    ("INFO", if BSD_LIKE { 29 } else { 0 }),
];

/// The real-time signal range, as the C library sees it (glibc keeps the
/// kernel's first two for itself, as `kill -l` shows), and the highest
/// signal number.
#[cfg(target_os = "linux")]
const RT: Option<(i32, i32)> = Some((34, 64));
#[cfg(target_os = "freebsd")]
const RT: Option<(i32, i32)> = Some((65, 126));
#[cfg(not(any(target_os = "linux", target_os = "freebsd")))]
const RT: Option<(i32, i32)> = None;

#[cfg(target_os = "linux")]
const MAX: i32 = 64;
#[cfg(target_os = "freebsd")]
const MAX: i32 = 128;
#[cfg(not(any(target_os = "linux", target_os = "freebsd")))]
const MAX: i32 = if BSD_LIKE { 31 } else { 64 };

impl Signal {
    /// SIGHUP.
    pub const HUP: Signal = Signal(1);
    /// SIGINT.
    pub const INT: Signal = Signal(2);
    /// SIGKILL.
    pub const KILL: Signal = Signal(9);
    /// SIGCONT.
    pub const CONT: Signal = Signal(if LINUX { 18 } else { 19 });
    /// SIGTERM, the default first signal.
    pub const TERM: Signal = Signal(15);
    /// SIGSTOP (the process-group tier stops its tree to count it before
    /// the SIGKILL).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) const STOP: Signal = Signal(if LINUX { 19 } else { 17 });

    /// The signal with this number: any number from 1 to the platform's
    /// highest signal (64 on Linux), named or not.
    pub fn from_raw(n: i32) -> Option<Signal> {
        (1..=MAX).contains(&n).then_some(Signal(n))
    }

    /// The signal's number.
    pub fn as_raw(self) -> i32 {
        self.0
    }

    /// The signal's name without the `SIG` prefix, e.g. `TERM`, when this
    /// platform has a fixed name for it (real-time signals have none: see
    /// the `Display` form, `SIGRTMIN+3`).
    pub fn name(self) -> Option<&'static str> {
        NAMES
            .iter()
            .find(|&&(_, v)| v != 0 && v == self.0)
            .map(|&(n, _)| n)
    }

    /// Whether this is a real-time signal (`SIGRTMIN` to `SIGRTMAX`).
    pub fn is_realtime(self) -> bool {
        RT.is_some_and(|(lo, hi)| (lo..=hi).contains(&self.0))
    }
}

impl fmt::Debug for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(n) = self.name() {
            return write!(f, "SIG{n}");
        }
        match RT {
            Some((lo, _)) if self.0 == lo => write!(f, "SIGRTMIN"),
            Some((_, hi)) if self.0 == hi => write!(f, "SIGRTMAX"),
            Some((lo, hi)) if self.0 > lo && self.0 <= (lo + hi) / 2 => {
                write!(f, "SIGRTMIN+{}", self.0 - lo)
            }
            Some((lo, hi)) if self.0 > lo && self.0 < hi => write!(f, "SIGRTMAX-{}", hi - self.0),
            _ => write!(f, "signal {}", self.0),
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
#[error(
    "unknown signal {0:?} (use a name such as TERM, INT, KILL, SYS, RTMIN+3, or a number such as 15)"
)]
pub struct UnknownSignal(pub String);

impl FromStr for Signal {
    type Err = UnknownSignal;

    /// Accepts `TERM`, `SIGTERM`, `term`, `15`, on platforms with
    /// real-time signals `RTMIN`, `RTMIN+3`, `SIGRTMAX-1`, `RTMAX`, and
    /// the `Display` form of a signal without a name (`signal 32`): every
    /// signal's `Display` reads back as it.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || UnknownSignal(s.to_owned());
        let t = s.trim();
        if let Ok(n) = t.parse::<i32>() {
            return Signal::from_raw(n).ok_or_else(bad);
        }
        let upper = t.to_ascii_uppercase();
        // The `Display` form of a signal without a name: `signal 32`.
        if let Some(n) = upper.strip_prefix("SIGNAL ") {
            let n = n.trim_start();
            if n.bytes().all(|b| b.is_ascii_digit()) {
                return n.parse().ok().and_then(Signal::from_raw).ok_or_else(bad);
            }
            return Err(bad());
        }
        let name = upper.strip_prefix("SIG").unwrap_or(&upper);
        if let Some(&(_, v)) = NAMES.iter().find(|&&(n, v)| v != 0 && n == name) {
            return Ok(Signal(v));
        }
        let (lo, hi) = RT.ok_or_else(bad)?;
        let offset = |rest: &str, sign: char| -> Option<i32> {
            if rest.is_empty() {
                return Some(0);
            }
            let digits = rest.strip_prefix(sign)?;
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            digits.parse().ok()
        };
        let n = if let Some(rest) = name.strip_prefix("RTMIN") {
            offset(rest, '+').map(|k| lo + k)
        } else if let Some(rest) = name.strip_prefix("RTMAX") {
            offset(rest, '-').map(|k| hi - k)
        } else {
            None
        };
        match n {
            Some(n) if (lo..=hi).contains(&n) => Ok(Signal(n)),
            _ => Err(bad()),
        }
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for Signal {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.name().is_some() || self.is_realtime() {
            s.collect_str(self)
        } else {
            s.serialize_i32(self.0)
        }
    }
}

#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for Signal {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Signal, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Signal;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a signal name such as \"SIGTERM\" or a signal number")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Signal, E> {
                v.parse().map_err(E::custom)
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Signal, E> {
                i32::try_from(v)
                    .ok()
                    .and_then(Signal::from_raw)
                    .ok_or_else(|| E::custom(UnknownSignal(v.to_string())))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Signal, E> {
                i32::try_from(v)
                    .ok()
                    .and_then(Signal::from_raw)
                    .ok_or_else(|| E::custom(UnknownSignal(v.to_string())))
            }
        }
        d.deserialize_any(V)
    }
}

/// Serde helpers for a signal as its number (the JSON report's form).
#[cfg(feature = "serde")]
pub(crate) mod as_number {
    use super::Signal;

    pub(crate) fn serialize<S: serde::Serializer>(sig: &Signal, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_i32(sig.as_raw())
    }

    pub(crate) fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Signal, D::Error> {
        let n = <i32 as serde::Deserialize>::deserialize(d)?;
        Signal::from_raw(n)
            .ok_or_else(|| serde::de::Error::custom(super::UnknownSignal(n.to_string())))
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
        assert!("-3".parse::<Signal>().is_err());
        assert_eq!(Signal::TERM.to_string(), "SIGTERM");
    }

    /// Found by the fuzz target `signal` (docs/FUZZING.md): `signal 33`,
    /// the `Display` of a number without a name, did not parse.
    #[test]
    fn every_signal_display_parses_back() {
        for n in 1..=MAX {
            let sig = Signal::from_raw(n).unwrap();
            assert_eq!(sig.to_string().parse::<Signal>(), Ok(sig), "{sig}");
            assert_eq!(sig.to_string().to_lowercase().parse::<Signal>(), Ok(sig));
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn every_linux_number_is_kept_and_named_where_it_can_be() {
        assert_eq!("SYS".parse::<Signal>().unwrap().as_raw(), 31);
        assert_eq!("SIGPWR".parse::<Signal>().unwrap().as_raw(), 30);
        assert_eq!("io".parse::<Signal>().unwrap().as_raw(), 29);
        assert_eq!("STKFLT".parse::<Signal>().unwrap().as_raw(), 16);
        assert_eq!("RTMIN".parse::<Signal>().unwrap().as_raw(), 34);
        assert_eq!("RTMIN+3".parse::<Signal>().unwrap().as_raw(), 37);
        assert_eq!("SIGRTMAX-1".parse::<Signal>().unwrap().as_raw(), 63);
        assert_eq!("RTMAX".parse::<Signal>().unwrap().as_raw(), 64);
        assert_eq!("40".parse::<Signal>().unwrap().as_raw(), 40);
        assert!("RTMIN+31".parse::<Signal>().is_err());
        assert!("RTMIN-1".parse::<Signal>().is_err());
        assert!("RTMIN+".parse::<Signal>().is_err());
        assert!("65".parse::<Signal>().is_err());
        assert_eq!(Signal::from_raw(31).unwrap().to_string(), "SIGSYS");
        assert_eq!("signal 32".parse::<Signal>().unwrap().as_raw(), 32);
        assert!("signal 0".parse::<Signal>().is_err());
        assert!("signal TERM".parse::<Signal>().is_err());
        assert!("signal 65".parse::<Signal>().is_err());
        assert_eq!(Signal::from_raw(37).unwrap().to_string(), "SIGRTMIN+3");
        assert_eq!(Signal::from_raw(63).unwrap().to_string(), "SIGRTMAX-1");
        assert_eq!(Signal::from_raw(32).unwrap().to_string(), "signal 32");
        for n in 1..=64 {
            let s = Signal::from_raw(n).unwrap();
            assert_eq!(s.as_raw(), n);
            if n != 32 && n != 33 {
                let shown = s.to_string();
                assert_eq!(shown.parse::<Signal>().unwrap(), s, "{shown}");
            }
        }
    }

    #[cfg(all(feature = "serde", target_os = "linux"))]
    #[test]
    fn serde_uses_the_name_or_the_number() {
        let term = serde_json::to_string(&Signal::TERM).unwrap();
        assert_eq!(term, "\"SIGTERM\"");
        let rt = Signal::from_raw(37).unwrap();
        assert_eq!(serde_json::to_string(&rt).unwrap(), "\"SIGRTMIN+3\"");
        let unnamed = Signal::from_raw(32).unwrap();
        assert_eq!(serde_json::to_string(&unnamed).unwrap(), "32");
        for text in ["\"SIGTERM\"", "\"term\"", "15"] {
            assert_eq!(serde_json::from_str::<Signal>(text).unwrap(), Signal::TERM);
        }
        assert_eq!(
            serde_json::from_str::<Signal>("\"SIGRTMIN+3\"").unwrap(),
            rt
        );
        assert_eq!(serde_json::from_str::<Signal>("32").unwrap(), unnamed);
        assert!(serde_json::from_str::<Signal>("0").is_err());
        assert!(serde_json::from_str::<Signal>("\"NOPE\"").is_err());
    }
}
