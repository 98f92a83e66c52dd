//! Samples, their statistics, and the one markdown table the run prints.

use std::time::Duration;

/// Durations measured for one variant.
#[derive(Debug, Default, Clone)]
pub struct Samples(pub Vec<Duration>);

impl Samples {
    pub fn push(&mut self, d: Duration) {
        self.0.push(d);
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn sorted(&self) -> Vec<Duration> {
        let mut v = self.0.clone();
        v.sort_unstable();
        v
    }

    /// The median (mean of the two middle values for an even count).
    pub fn median(&self) -> Duration {
        let v = self.sorted();
        if v.is_empty() {
            return Duration::ZERO;
        }
        let m = v.len() / 2;
        if v.len() % 2 == 1 {
            v[m]
        } else {
            (v[m - 1] + v[m]) / 2
        }
    }

    /// The 99th percentile (nearest rank).
    pub fn p99(&self) -> Duration {
        let v = self.sorted();
        if v.is_empty() {
            return Duration::ZERO;
        }
        let rank = ((v.len() as f64) * 0.99).ceil() as usize;
        v[rank.clamp(1, v.len()) - 1]
    }
}

/// A duration for people: µs below 1 ms, ms below 10 s.
pub fn fmt_dur(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 1000.0 {
        format!("{us:.0} µs")
    } else if us < 10_000.0 {
        format!("{:.2} ms", us / 1000.0)
    } else if us < 10_000_000.0 {
        format!("{:.1} ms", us / 1000.0)
    } else {
        format!("{:.2} s", us / 1e6)
    }
}

/// Bytes per second as GiB/s.
pub fn fmt_rate(bytes: u64, d: Duration) -> String {
    format!("{:.2} GiB/s", rate(bytes, d) / (1u64 << 30) as f64)
}

pub fn rate(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / d.as_secs_f64().max(1e-9)
}

/// KiB as MiB.
pub fn fmt_kib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

pub fn ratio(corral: f64, peer: f64) -> String {
    if peer <= 0.0 {
        return "—".into();
    }
    format!("{:.2}", corral / peer)
}

pub fn dur_ratio(corral: Duration, peer: Duration) -> String {
    ratio(corral.as_secs_f64(), peer.as_secs_f64())
}

/// One row: what is measured, corral's value, the peer and its value, the
/// ratio corral / peer, and the target the project set itself.
pub struct Row {
    pub fig: &'static str,
    pub what: String,
    pub corral: String,
    pub peer: String,
    pub peer_value: String,
    pub ratio: String,
    pub target: String,
}

#[derive(Default)]
pub struct Table {
    pub rows: Vec<Row>,
    pub notes: Vec<String>,
}

impl Table {
    #[allow(clippy::too_many_arguments)]
    pub fn row(
        &mut self,
        fig: &'static str,
        what: impl Into<String>,
        corral: impl Into<String>,
        peer: impl Into<String>,
        peer_value: impl Into<String>,
        ratio: impl Into<String>,
        target: impl Into<String>,
    ) {
        self.rows.push(Row {
            fig,
            what: what.into(),
            corral: corral.into(),
            peer: peer.into(),
            peer_value: peer_value.into(),
            ratio: ratio.into(),
            target: target.into(),
        });
    }

    pub fn note(&mut self, n: impl Into<String>) {
        let n = n.into();
        eprintln!("note: {n}");
        self.notes.push(n);
    }

    pub fn render(&self) -> String {
        let mut s = String::new();
        s.push_str("| # | measurement | corral | peer | peer value | corral / peer | target |\n");
        s.push_str("|---|---|---|---|---|---|---|\n");
        for r in &self.rows {
            s.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} |\n",
                r.fig, r.what, r.corral, r.peer, r.peer_value, r.ratio, r.target
            ));
        }
        if !self.notes.is_empty() {
            s.push('\n');
            for n in &self.notes {
                s.push_str(&format!("- {n}\n"));
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_p99() {
        let s = Samples((1..=100).map(Duration::from_millis).collect());
        assert_eq!(s.median(), Duration::from_micros(50_500));
        assert_eq!(s.p99(), Duration::from_millis(99));
        let one = Samples(vec![Duration::from_millis(3)]);
        assert_eq!(one.median(), Duration::from_millis(3));
        assert_eq!(one.p99(), Duration::from_millis(3));
    }
}
