//! The machine's stalls, seen from the harness: a thread that asks to wake
//! every 10 ms and records each wake-up that came more than
//! [`GAP`] late. A run that returned past its bound while the harness
//! itself was not scheduled for that long is slowed by the machine (its
//! vCPUs taken away, every process of it stalled alike), not by corral:
//! the run is `stalled`, reported apart with its figures, its other checks
//! still applied. A return later than its bound by more than the stalls
//! within it is still a `slow-return` failure.

use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// A wake-up this late is a stall of the harness.
const GAP: Duration = Duration::from_millis(100);
const TICK: Duration = Duration::from_millis(10);

/// Stalls older than this are forgotten (no run lasts this long).
const KEEP: Duration = Duration::from_secs(300);

fn stalls() -> &'static Mutex<Vec<(Instant, Instant)>> {
    static S: OnceLock<Mutex<Vec<(Instant, Instant)>>> = OnceLock::new();
    S.get_or_init(|| {
        std::thread::spawn(|| {
            let mut last = Instant::now();
            loop {
                std::thread::sleep(TICK);
                let now = Instant::now();
                if now.saturating_duration_since(last) > TICK + GAP {
                    let mut s = stalls().lock().unwrap();
                    s.retain(|&(_, end)| now.saturating_duration_since(end) < KEEP);
                    s.push((last + TICK, now));
                }
                last = now;
            }
        });
        Mutex::new(Vec::new())
    })
}

/// Starts the watch (before the first run).
pub fn start() {
    let _ = stalls();
}

/// How long the harness was stalled within `[from, to]`.
pub fn within(from: Instant, to: Instant) -> Duration {
    overlap(&stalls().lock().unwrap(), from, to)
}

/// The total overlap of `gaps` with `[from, to]`.
fn overlap(gaps: &[(Instant, Instant)], from: Instant, to: Instant) -> Duration {
    gaps.iter()
        .map(|&(a, b)| b.min(to).saturating_duration_since(a.max(from)))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_part_of_a_stall_inside_the_window_counts() {
        let t = Instant::now();
        let ms = |n: u64| t + Duration::from_millis(n);
        let gaps = [(ms(0), ms(100)), (ms(200), ms(700)), (ms(900), ms(1000))];
        assert_eq!(overlap(&gaps, ms(50), ms(800)), Duration::from_millis(550));
        assert_eq!(overlap(&gaps, ms(750), ms(850)), Duration::ZERO);
        assert_eq!(overlap(&gaps, ms(0), ms(2000)), Duration::from_millis(700));
    }
}
