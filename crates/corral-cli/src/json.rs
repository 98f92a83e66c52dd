//! The JSON report: one object per run.

use serde::Serialize;

use corral::{Error, Report, RootStatus};

#[derive(Serialize)]
pub struct JsonReport {
    pub outcome: &'static str,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub signal_name: Option<String>,
    pub containment: Option<&'static str>,
    pub containment_note: Option<String>,
    pub killed: usize,
    pub kept: usize,
    pub duration_ms: f64,
    /// Null when the stream was passed through (a terminal or a file):
    /// corral does not see those bytes.
    pub stdout_bytes: Option<u64>,
    pub stderr_bytes: Option<u64>,
    pub output: Option<OutputPaths>,
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

/// How each of corral's streams reached the program: `relayed` (a pipe or
/// socket: counted, holders waited for at most the wait delay) or
/// `passed_through` (a terminal or file: written directly, not counted, not
/// waited for; leftovers policy only).
#[derive(Serialize)]
pub struct OutputPaths {
    pub stdout: &'static str,
    pub stderr: &'static str,
}

fn path_name(relayed: bool) -> &'static str {
    if relayed {
        "relayed"
    } else {
        "passed_through"
    }
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
    /// The report of a `corral run`: `relayed` says which of corral's
    /// streams went through corral (counted); the others were passed through
    /// to the program and their counts are null.
    pub fn from_run(r: &Report, received: Option<i32>, exit: i32, relayed: [bool; 2]) -> Self {
        let mut j = Self::from_report(r, received, exit, relayed);
        if !relayed[0] {
            j.stdout_bytes = None;
        }
        if !relayed[1] {
            j.stderr_bytes = None;
        }
        j.output = Some(OutputPaths {
            stdout: path_name(relayed[0]),
            stderr: path_name(relayed[1]),
        });
        j
    }

    /// A report whose output was captured (every byte counted).
    pub fn from_report(r: &Report, received: Option<i32>, exit: i32, _relayed: [bool; 2]) -> Self {
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
        JsonReport {
            outcome: r.outcome_name(),
            exit_code,
            signal,
            signal_name: signal
                .and_then(corral::Signal::from_raw)
                .map(|s| s.to_string()),
            containment: Some(r.containment.name()),
            containment_note: r.containment_note.clone(),
            killed: r.leftovers.killed,
            kept: r.leftovers.kept,
            duration_ms: ms(r.duration()),
            stdout_bytes: Some(r.stdout.total_bytes()),
            stderr_bytes: Some(r.stderr.total_bytes()),
            output: None,
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
            signal_name: None,
            containment: match e {
                Error::Containment { mechanism, .. } => Some(mechanism.name()),
                _ => None,
            },
            containment_note: None,
            killed: 0,
            kept: 0,
            duration_ms: ms(elapsed),
            stdout_bytes: None,
            stderr_bytes: None,
            output: None,
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
