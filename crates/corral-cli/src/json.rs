//! The JSON report: one object per run.

use serde::Serialize;

use corral::{Error, Report, RootStatus};

#[derive(Serialize)]
pub struct JsonReport {
    pub outcome: &'static str,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub containment: Option<&'static str>,
    pub containment_note: Option<String>,
    pub killed: usize,
    pub kept: usize,
    pub duration_ms: f64,
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    pub error: Option<String>,
    pub pid: Option<u32>,
    pub signals_sent: Vec<i32>,
    pub received_signal: Option<i32>,
    pub survivors: Vec<u32>,
    pub timings_ms: Option<Timings>,
    pub usage: Option<Usage>,
    pub limits_hit: Vec<&'static str>,
    pub corral_exit: i32,
}

#[derive(Serialize)]
pub struct Usage {
    pub cpu_user_ms: Option<f64>,
    pub cpu_system_ms: Option<f64>,
    pub memory_peak: Option<u64>,
    pub pids_peak: Option<u64>,
}

#[derive(Serialize)]
pub struct Timings {
    pub spawn: f64,
    pub root_exit: Option<f64>,
    pub output_closed: Option<f64>,
    pub cleanup_done: f64,
}

fn ms(d: std::time::Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

impl JsonReport {
    pub fn from_report(r: &Report, received: Option<i32>, exit: i32, relayed: [bool; 2]) -> Self {
        let (exit_code, signal) = match r.root {
            Some(RootStatus::Exited(c)) => (Some(c), None),
            Some(RootStatus::Signaled(s)) => (None, Some(s.as_raw())),
            None => (None, None),
        };
        let survivors = match &r.cleanup_error {
            Some(corral::CleanupError::Survivors { pids }) => pids.clone(),
            _ => Vec::new(),
        };
        let error = match (&r.cleanup_error, r.outcome) {
            (Some(e), _) => Some(e.to_string()),
            (None, corral::Outcome::TimedOut) => Some("timed out".into()),
            (None, corral::Outcome::Cancelled) => Some(match received {
                Some(s) => format!("cancelled by signal {s}"),
                None => "cancelled".into(),
            }),
            (None, corral::Outcome::OutputHeld) => Some(format!(
                "output still held open by a descendant when the wait delay ended; {} holder(s) killed",
                r.leftovers.killed
            )),
            _ => None,
        };
        let _ = relayed;
        JsonReport {
            outcome: r.outcome_name(),
            exit_code,
            signal,
            containment: Some(r.containment.name()),
            containment_note: r.containment_note.clone(),
            killed: r.leftovers.killed,
            kept: r.leftovers.kept,
            duration_ms: ms(r.duration()),
            stdout_bytes: r.stdout.total_bytes(),
            stderr_bytes: r.stderr.total_bytes(),
            error,
            pid: Some(r.pid),
            signals_sent: r.signals_sent.iter().map(|s| s.as_raw()).collect(),
            received_signal: received,
            survivors,
            timings_ms: Some(Timings {
                spawn: ms(r.timings.spawn),
                root_exit: r.timings.root_exit.map(ms),
                output_closed: r.timings.output_closed.map(ms),
                cleanup_done: ms(r.timings.cleanup_done),
            }),
            usage: r.usage.map(|u| Usage {
                cpu_user_ms: u.cpu_user.map(ms),
                cpu_system_ms: u.cpu_system.map(ms),
                memory_peak: u.memory_peak,
                pids_peak: u.pids_peak,
            }),
            limits_hit: r.limits_hit.iter().map(|l| l.name()).collect(),
            corral_exit: exit,
        }
    }

    pub fn from_error(
        e: &Error,
        received: Option<i32>,
        exit: i32,
        elapsed: std::time::Duration,
    ) -> Self {
        JsonReport {
            outcome: e.outcome_name(),
            exit_code: None,
            signal: None,
            containment: match e {
                Error::Containment { mechanism, .. } => Some(mechanism.name()),
                _ => None,
            },
            containment_note: None,
            killed: 0,
            kept: 0,
            duration_ms: ms(elapsed),
            stdout_bytes: 0,
            stderr_bytes: 0,
            error: Some(e.to_string()),
            pid: None,
            signals_sent: Vec::new(),
            received_signal: received,
            survivors: Vec::new(),
            timings_ms: None,
            usage: None,
            limits_hit: Vec::new(),
            corral_exit: exit,
        }
    }
}
