//! GNU coreutils `timeout`'s grammar for durations and signals, shared by
//! `corral run` (which also takes its own forms, `500ms`, `1m30s`) and the
//! `timeout` personality (which takes exactly GNU's).

use std::time::Duration;

use corral::Signal;

/// What the personality changes in a run: GNU's words and statuses.
#[derive(Debug, Clone)]
pub struct Style {
    /// The program name in messages: `argv[0]` as given (`timeout`,
    /// `/usr/local/bin/timeout`), as GNU prints it.
    pub program: String,
    /// The command as given, for `-v` lines and "failed to run" messages.
    pub command: String,
}

/// The longest duration: what GNU clamps a huge one to (the largest
/// `time_t` in seconds). corral's deadline treats it as "never".
pub const MAX_DURATION: Duration = Duration::from_secs(i64::MAX as u64);

/// A duration as GNU `timeout` reads it: a C `strtod` number (leading
/// blanks, a sign, decimal digits with an optional exponent, a hex float
/// such as `0x1.8p3`, `inf`, `infinity`) and one optional suffix `s`, `m`,
/// `h` or `d`. Negative values and NaN are refused; `-0` is 0; a value too
/// large is clamped to [`MAX_DURATION`]; a positive value is rounded *up*
/// to the nanosecond, so an infinitesimal one (even one that underflows,
/// `1e-10000`) is 1 ns, never 0.
pub fn duration(s: &str) -> Option<Duration> {
    let (value, rest) = strtod(s)?;
    let mult = match rest.as_bytes() {
        [] | [b's'] => 1.0,
        [b'm'] => 60.0,
        [b'h'] => 3600.0,
        [b'd'] => 86400.0,
        _ => return None,
    };
    let (negative, v) = value;
    match v {
        Value::Zero if !negative => Some(Duration::ZERO),
        // `-0` is 0; a negative value that underflowed is still negative.
        Value::Zero => Some(Duration::ZERO),
        Value::Tiny if !negative => Some(Duration::from_nanos(1)),
        Value::Finite(x) if !negative => Some(round_up(x * mult)),
        Value::Inf if !negative => Some(MAX_DURATION),
        _ => None,
    }
}

/// `secs` (positive) as a duration rounded up to the nanosecond, clamped.
fn round_up(secs: f64) -> Duration {
    if secs.is_nan() || secs >= MAX_DURATION.as_secs() as f64 {
        return MAX_DURATION;
    }
    let whole = secs.floor();
    let nanos = ((secs - whole) * 1e9).ceil();
    let d = if nanos >= 1e9 {
        Duration::from_secs(whole as u64 + 1)
    } else {
        Duration::new(whole as u64, nanos as u32)
    };
    if d.is_zero() && secs > 0.0 {
        Duration::from_nanos(1)
    } else {
        d
    }
}

/// A parsed number's magnitude.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Value {
    /// Exactly zero (all digits 0).
    Zero,
    /// Nonzero digits whose value underflows a double (strtod's ERANGE
    /// with 0): a positive bound, not zero.
    Tiny,
    Finite(f64),
    Inf,
    Nan,
}

/// Reads the longest prefix of `s` that C's `strtod` reads, in the C
/// locale: `((negative, value), rest)`, or `None` when no number starts
/// the string.
fn strtod(s: &str) -> Option<((bool, Value), &str)> {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r') {
        i += 1;
    }
    let mut negative = false;
    if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
        negative = b[i] == b'-';
        i += 1;
    }
    let rest = &s[i..];
    let lower = rest.get(..8).unwrap_or(rest).to_ascii_lowercase();
    if lower.starts_with("infinity") {
        return Some(((negative, Value::Inf), &rest[8..]));
    }
    if lower.starts_with("inf") {
        return Some(((negative, Value::Inf), &rest[3..]));
    }
    if lower.starts_with("nan") {
        // `nan(chars)` is one token too.
        let mut end = 3;
        if rest[3..].starts_with('(') {
            if let Some(close) = rest[3..].find(')') {
                let inner = &rest[4..3 + close];
                if inner
                    .bytes()
                    .all(|c| c.is_ascii_alphanumeric() || c == b'_')
                {
                    end = 3 + close + 1;
                }
            }
        }
        return Some(((negative, Value::Nan), &rest[end..]));
    }
    let hex = rest.len() > 2 && (rest.starts_with("0x") || rest.starts_with("0X")) && {
        let r = &rest.as_bytes()[2..];
        r[0].is_ascii_hexdigit() || (r[0] == b'.' && r.len() > 1 && r[1].is_ascii_hexdigit())
    };
    if hex {
        let (v, used) = hex_float(&rest[2..]);
        return Some(((negative, v), &rest[2 + used..]));
    }
    let (v, used) = decimal(rest)?;
    Some(((negative, v), &rest[used..]))
}

/// A decimal float: digits, an optional fraction, an optional exponent
/// (only when digits follow it). Returns the value and the bytes used.
fn decimal(s: &str) -> Option<(Value, usize)> {
    let b = s.as_bytes();
    let mut i = 0;
    let mut digits = 0;
    let mut nonzero = false;
    while i < b.len() && b[i].is_ascii_digit() {
        nonzero |= b[i] != b'0';
        i += 1;
        digits += 1;
    }
    if i < b.len() && b[i] == b'.' {
        i += 1;
        while i < b.len() && b[i].is_ascii_digit() {
            nonzero |= b[i] != b'0';
            i += 1;
            digits += 1;
        }
    }
    if digits == 0 {
        return None;
    }
    let mantissa_end = i;
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        let mut j = i + 1;
        if j < b.len() && (b[j] == b'+' || b[j] == b'-') {
            j += 1;
        }
        if j < b.len() && b[j].is_ascii_digit() {
            while j < b.len() && b[j].is_ascii_digit() {
                j += 1;
            }
            i = j;
        }
    }
    let _ = mantissa_end;
    if !nonzero {
        return Some((Value::Zero, i));
    }
    // Rust reads this same syntax (a trailing `.` and a leading `.` too);
    // a huge exponent gives inf, a tiny one 0.
    let text = &s[..i];
    let v: f64 = text.parse().ok().or_else(|| {
        // An exponent too long for Rust's parser: decide by its sign.
        let e = text.find(['e', 'E'])?;
        Some(if text[e + 1..].starts_with('-') {
            0.0
        } else {
            f64::INFINITY
        })
    })?;
    Some((classify(v), i))
}

/// A hex float after `0x`: hex digits, an optional fraction, an optional
/// binary exponent `p[+-]N`.
fn hex_float(s: &str) -> (Value, usize) {
    let b = s.as_bytes();
    let mut i = 0;
    let mut v = 0f64;
    let mut nonzero = false;
    while i < b.len() && b[i].is_ascii_hexdigit() {
        let d = (b[i] as char).to_digit(16).unwrap_or(0);
        nonzero |= d != 0;
        v = v * 16.0 + f64::from(d);
        i += 1;
    }
    if i < b.len() && b[i] == b'.' {
        i += 1;
        let mut scale = 1.0 / 16.0;
        while i < b.len() && b[i].is_ascii_hexdigit() {
            let d = (b[i] as char).to_digit(16).unwrap_or(0);
            nonzero |= d != 0;
            v += f64::from(d) * scale;
            scale /= 16.0;
            i += 1;
        }
    }
    let mut exp: i64 = 0;
    if i < b.len() && (b[i] == b'p' || b[i] == b'P') {
        let mut j = i + 1;
        let mut neg = false;
        if j < b.len() && (b[j] == b'+' || b[j] == b'-') {
            neg = b[j] == b'-';
            j += 1;
        }
        if j < b.len() && b[j].is_ascii_digit() {
            while j < b.len() && b[j].is_ascii_digit() {
                exp = (exp * 10 + i64::from(b[j] - b'0')).min(1 << 20);
                j += 1;
            }
            if neg {
                exp = -exp;
            }
            i = j;
        }
    }
    if !nonzero {
        return (Value::Zero, i);
    }
    let v = v * 2f64.powi(exp as i32);
    (classify(v), i)
}

fn classify(v: f64) -> Value {
    if v.is_nan() {
        Value::Nan
    } else if v.is_infinite() {
        Value::Inf
    } else if v == 0.0 {
        Value::Tiny
    } else {
        Value::Finite(v)
    }
}

/// A signal as GNU `timeout -s` reads it: a number (as the shell's `$?`
/// gives it too: 130 is INT), or a name with or without `SIG` in any case
/// (`TERM`, `sigkill`, `RTMIN+3`), or `0`/`EXIT`: `Some(None)` means signal
/// 0 (nothing is sent). `None`: not a signal.
pub fn signal(s: &str) -> Option<Option<Signal>> {
    let b = s.as_bytes();
    let n: i64 = if b.first().is_some_and(u8::is_ascii_digit) {
        if !b.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let n: i64 = s.parse().ok().filter(|&n| n <= i64::from(i32::MAX))?;
        n & if n >= 0xFF { 0xFF } else { 0x7F }
    } else {
        let upper = s.to_ascii_uppercase();
        if upper == "EXIT" || upper == "SIGEXIT" {
            return Some(None);
        }
        // corral's own names: the same set (RTMIN+n, RTMAX-n, IOT, CLD,
        // POLL), without its leniency about blanks.
        if upper.trim() != upper || upper.contains(' ') || upper.starts_with(['+', '-']) {
            return None;
        }
        return upper.parse::<Signal>().ok().map(Some);
    };
    if n == 0 {
        return Some(None);
    }
    Signal::from_raw(n as i32).map(Some)
}

/// A signal's name as GNU prints it in `-v` lines (`sig2str`): `TERM`,
/// `KILL`, `RTMIN+3`, `RTMAX-1`, else the number; `0` for signal 0.
pub fn signal_name(sig: Option<Signal>) -> String {
    let Some(sig) = sig else {
        return "0".into();
    };
    let shown = sig.to_string();
    match shown.strip_prefix("SIG") {
        Some(name) => name.to_string(),
        None => sig.as_raw().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> Option<Duration> {
        duration(s)
    }

    #[test]
    fn gnu_durations() {
        assert_eq!(d("10"), Some(Duration::from_secs(10)));
        assert_eq!(d("10.34"), Some(Duration::from_millis(10340)));
        assert_eq!(d("1d"), Some(Duration::from_secs(86400)));
        assert_eq!(d("1.5m"), Some(Duration::from_secs(90)));
        assert_eq!(d("2h"), Some(Duration::from_secs(7200)));
        assert_eq!(d("3s"), Some(Duration::from_secs(3)));
        assert_eq!(d(".5"), Some(Duration::from_millis(500)));
        assert_eq!(d("5."), Some(Duration::from_secs(5)));
        assert_eq!(d(" 5"), Some(Duration::from_secs(5)));
        assert_eq!(d("+5"), Some(Duration::from_secs(5)));
        assert_eq!(d("0"), Some(Duration::ZERO));
        assert_eq!(d("-0"), Some(Duration::ZERO));
        assert_eq!(d("0x0"), Some(Duration::ZERO));
        assert_eq!(d("1e-3"), Some(Duration::from_millis(1)));
        assert_eq!(d("1E3"), Some(Duration::from_secs(1000)));
        assert_eq!(d("2.34e+5d"), Some(Duration::from_secs(20_217_600_000)));
        // `d` is a hex digit: 0x0.1d is 29/256 s, not a sixteenth of a day.
        assert_eq!(d("0x0.1d"), Some(Duration::from_nanos(113_281_250)));
        assert_eq!(d("0x1p3"), Some(Duration::from_secs(8)));
        assert_eq!(d("0X.8"), Some(Duration::from_millis(500)));
        assert_eq!(d("9.999999999"), Some(Duration::new(9, 999_999_999)));
        // Rounded up, never to zero.
        assert_eq!(d(".0000000001"), Some(Duration::from_nanos(1)));
        assert_eq!(d("1e-10000"), Some(Duration::from_nanos(1)));
        assert_eq!(d("1e-400"), Some(Duration::from_nanos(1)));
        assert_eq!(d("0x1p-2000"), Some(Duration::from_nanos(1)));
        // Clamped, not refused.
        assert_eq!(d("9223372036854775808"), Some(MAX_DURATION));
        assert_eq!(d("9223372036854775808d"), Some(MAX_DURATION));
        assert_eq!(d("4294967296"), Some(Duration::from_secs(4294967296)));
        assert_eq!(d("1e400"), Some(MAX_DURATION));
        assert_eq!(d("1e99999999999999999999"), Some(MAX_DURATION));
        assert_eq!(d("inf"), Some(MAX_DURATION));
        assert_eq!(d("Infinity"), Some(MAX_DURATION));
        assert_eq!(d("infs"), Some(MAX_DURATION));
        let ldbl_max = "1.18973149535723176502e+4932";
        assert_eq!(d(ldbl_max), Some(MAX_DURATION));
        for bad in [
            "",
            " ",
            "invalid",
            "xyz",
            " -0.1",
            "-1",
            " -1e-10000",
            "-inf",
            "nan",
            "NaN(1)",
            "42D",
            "1x",
            "5 ",
            "5ss",
            "1.2.3",
            "1e",
            "1e+",
            ".",
            "0x",
            "0xg",
            "1ms",
            "1m30s",
            "-1.18973149535723176502e+4932",
        ] {
            assert_eq!(d(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn gnu_signals() {
        assert_eq!(signal("TERM"), Some(Some(Signal::TERM)));
        assert_eq!(signal("sigkill"), Some(Some(Signal::KILL)));
        assert_eq!(signal("9"), Some(Some(Signal::KILL)));
        assert_eq!(signal("0"), Some(None));
        assert_eq!(signal("EXIT"), Some(None));
        assert_eq!(signal("130").map(|s| s.map(Signal::as_raw)), Some(Some(2)));
        assert_eq!(signal("265").map(|s| s.map(Signal::as_raw)), Some(Some(9)));
        for bad in [
            "",
            "invalid",
            " TERM",
            "TERM ",
            // corral's `Display` of an unnamed signal (issue 37), not GNU's.
            "signal 33",
            "+9",
            "-9",
            "9x",
            "65",
            "99999999999",
        ] {
            assert_eq!(signal(bad), None, "{bad:?}");
        }
        assert_eq!(signal_name(None), "0");
        assert_eq!(signal_name(Some(Signal::KILL)), "KILL");
        #[cfg(target_os = "linux")]
        {
            assert_eq!(signal_name(Signal::from_raw(37)), "RTMIN+3");
            assert_eq!(signal_name(Signal::from_raw(32)), "32");
        }
    }
}
