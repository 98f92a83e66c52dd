//! The JSON report: one object per run, of the schema in
//! docs/report-schema.json. A run's fields come from the library's own
//! serialisation of [`Report`] (feature `serde`); the command line adds what
//! only it knows: `output`, `received_signal`, `corral_exit`.

use serde::Serialize;
use serde_json::{Map, Value};

use corral::{Error, Report};

/// The report's fields, in the order they are written (the schema's).
const FIELDS: &[&str] = &[
    "outcome",
    "timeout_kind",
    "exit_code",
    "signal",
    "signal_name",
    "containment",
    "containment_note",
    "crash_safe",
    "crash_safety_note",
    "killed",
    "kept",
    "duration_ms",
    "stdout_bytes",
    "stderr_bytes",
    "output",
    "error",
    "pid",
    "signals_sent",
    "received_signal",
    "survivors",
    "timings_ms",
    "usage",
    "limits_hit",
    "corral_exit",
];

/// One run's report, ready to be written.
#[derive(Serialize)]
#[serde(transparent)]
pub struct JsonReport(Map<String, Value>);

/// How each of corral's streams reached the program: `relayed` (a pipe or
/// socket: counted, holders waited for at most the wait delay) or
/// `passed_through` (a terminal or file: written directly, not counted, not
/// waited for; leftovers policy only).
fn path_name(relayed: bool) -> &'static str {
    if relayed {
        "relayed"
    } else {
        "passed_through"
    }
}

fn ms(d: std::time::Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

impl JsonReport {
    /// In the schema's order, every field present.
    fn ordered(mut m: Map<String, Value>) -> Self {
        let mut out = Map::new();
        for &k in FIELDS {
            out.insert(k.to_owned(), m.remove(k).unwrap_or(Value::Null));
        }
        JsonReport(out)
    }

    /// The report of a `corral run`: `relayed` says which of corral's
    /// streams went through corral (counted); the others were passed through
    /// to the program and their counts are null.
    pub fn from_run(r: &Report, received: Option<i32>, exit: i32, relayed: [bool; 2]) -> Self {
        let mut j = Self::from_report(r, received, exit);
        for (i, key) in ["stdout_bytes", "stderr_bytes"].into_iter().enumerate() {
            if !relayed[i] {
                j.0.insert(key.into(), Value::Null);
            }
        }
        j.0.insert(
            "output".into(),
            serde_json::json!({
                "stdout": path_name(relayed[0]),
                "stderr": path_name(relayed[1]),
            }),
        );
        j
    }

    /// A report whose output was captured (every byte counted).
    pub fn from_report(r: &Report, received: Option<i32>, exit: i32) -> Self {
        let mut m = match serde_json::to_value(r) {
            Ok(Value::Object(m)) => m,
            // Serialising a report into a value cannot fail; keep the
            // outcome if it ever did.
            _ => Map::from_iter([("outcome".to_owned(), r.outcome_name().into())]),
        };
        if let (Some(s), corral::Outcome::Cancelled, None) = (received, r.outcome, &r.cleanup_error)
        {
            m.insert("error".into(), format!("cancelled by signal {s}").into());
        }
        m.insert("received_signal".into(), received.into());
        m.insert("corral_exit".into(), exit.into());
        let mut j = Self::ordered(m);
        for key in ["signals_sent", "survivors", "limits_hit"] {
            if j.0[key].is_null() {
                j.0[key] = Value::Array(Vec::new());
            }
        }
        j
    }

    /// The report of a run that could not start.
    pub fn from_error(
        e: &Error,
        received: Option<i32>,
        exit: i32,
        elapsed: std::time::Duration,
    ) -> Self {
        let containment = match e {
            Error::Containment { mechanism, .. } => Some(mechanism.name()),
            _ => None,
        };
        let m = serde_json::json!({
            "outcome": e.outcome_name(),
            "containment": containment,
            "killed": 0,
            "kept": 0,
            "duration_ms": ms(elapsed),
            "error": crate::exit::error_message(e),
            "signals_sent": [],
            "received_signal": received,
            "survivors": [],
            "limits_hit": [],
            "corral_exit": exit,
        });
        match m {
            Value::Object(m) => Self::ordered(m),
            _ => unreachable!("a JSON object literal"),
        }
    }

    /// The report as a JSON value (batch embeds it in each run).
    pub fn into_value(self) -> Value {
        Value::Object(self.0)
    }
}
