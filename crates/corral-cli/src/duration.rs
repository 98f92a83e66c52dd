//! Durations and sizes as people type them (`10s`, `1m30s`, GNU's `0.5`;
//! `64M`): the parsers of the command line, the manifest and the MCP
//! server's options. A leaf (GNU's grammar comes from `gnu`).

use std::time::Duration;

/// Bytes with an optional binary suffix: `1048576`, `512K`, `64M`, `2G`.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m: u64 = match c.to_ascii_uppercase() {
                'K' => 1 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                'T' => 1 << 40,
                _ => {
                    return Err(format!(
                        "invalid size {s:?} (use e.g. 1048576, 512K, 64M, 2G)"
                    ))
                }
            };
            (&t[..i], m)
        }
        _ => (t, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("invalid size {s:?} (use e.g. 1048576, 512K, 64M, 2G)"))
}

/// A duration as people type it: GNU `timeout`'s grammar (a number of
/// seconds, `0.5`, `1e-3`, `0x1p3`, with an optional `s`, `m`, `h` or `d`;
/// huge values clamped, a positive one rounded up to the nanosecond) or
/// corral's forms (`500ms`, `1m30s`, `2h 30m`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    if let Some(d) = crate::gnu::duration(s) {
        return Ok(d);
    }
    let t = s.trim();
    if t.is_empty() {
        return Err("empty duration".into());
    }
    humantime::parse_duration(t).map_err(|e| {
        format!(
            "invalid duration {s:?}: {e} (use e.g. 500ms, 10s, 1m30s, 2h, 1d, or a number of \
             seconds such as 10, 0.5 or 1e-3)"
        )
    })
}
