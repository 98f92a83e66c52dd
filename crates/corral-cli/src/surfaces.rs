//! Every field of the run spec is reachable from every surface that claims
//! it: docs/run-spec-surfaces.json is the table (field x surface: how the
//! surface sets it, or why it does not), and these tests hold it to the
//! spec's fields (from the generated schema, so a new field without a row
//! fails) and to the command line, batch and MCP; the Python and Node
//! columns are checked by their own suites
//! (crates/corral-py/tests/test_spec_surfaces.py,
//! crates/corral-node/test/spec.test.js).

use clap::Parser;
use corral::document::RunSpec;
use serde_json::{Map, Value};

use crate::args::{Cli, Cmd};

const SURFACES: [&str; 5] = ["cli", "batch", "mcp", "python", "node"];

fn table() -> Map<String, Value> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/run-spec-surfaces.json"
    );
    let text = std::fs::read_to_string(path).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    v["fields"].as_object().unwrap().clone()
}

/// The spec as JSON, each field present (null when absent).
fn fields(spec: &RunSpec) -> Map<String, Value> {
    let v = serde_json::to_value(spec).unwrap();
    v.as_object().unwrap().clone()
}

/// Whether `field` differs between the plain run's spec and the cell's.
fn changes(field: &str, plain: &RunSpec, cell: &RunSpec) -> bool {
    fields(plain).get(field) != fields(cell).get(field)
}

fn cli_spec(line: &str) -> RunSpec {
    let cli = Cli::try_parse_from(line.split(' ')).unwrap_or_else(|e| panic!("{line}: {e}"));
    let Cmd::Run(opts) = cli.command else {
        panic!("{line}: not a run")
    };
    opts.spec()
}

fn batch_spec(keys: &str) -> RunSpec {
    let program = if keys.starts_with("run ") || keys.starts_with("shell ") {
        ""
    } else {
        "run = [\"true\"]\n"
    };
    let text = format!("[[task]]\nname = \"t\"\n{program}{keys}\n");
    crate::batch::first_task_spec(&text).unwrap_or_else(|e| panic!("{keys}: {e}"))
}

fn mcp_spec(json: &Value) -> RunSpec {
    let mut args = Map::new();
    let own = json.as_object().unwrap();
    if !own.contains_key("argv") && !own.contains_key("command") {
        args.insert("argv".into(), serde_json::json!(["true"]));
    }
    args.extend(own.clone());
    crate::mcp::request_spec(args).unwrap_or_else(|e| panic!("{json}: {e}"))
}

/// The table has a row for every field of the spec (and no other), and in
/// each row a cell per surface: how it sets the field, or why not.
#[test]
fn the_table_has_every_field_and_every_surface() {
    let schema = corral::document::run_spec_schema();
    let mut want: Vec<&String> = schema["properties"].as_object().unwrap().keys().collect();
    let table = table();
    let mut have: Vec<&String> = table.keys().collect();
    want.sort();
    have.sort();
    assert_eq!(
        have, want,
        "docs/run-spec-surfaces.json must have one row per RunSpec field: add the new field's \
         row, saying for each surface how it sets it or why it does not"
    );
    for (field, row) in &table {
        let row = row.as_object().unwrap();
        let mut keys: Vec<&str> = row.keys().map(String::as_str).collect();
        keys.sort();
        let mut surfaces = SURFACES.to_vec();
        surfaces.sort();
        assert_eq!(keys, surfaces, "{field}");
        for (surface, cell) in row {
            let cell = cell.as_object().unwrap();
            let mut keys: Vec<&str> = cell.keys().map(String::as_str).collect();
            keys.sort();
            let ways: &[&[&str]] = match surface.as_str() {
                "cli" => &[&["line"]],
                "batch" => &[&["toml"]],
                "mcp" => &[&["json"]],
                "python" => &[&["argv"], &["keyword", "value"]],
                _ => &[&["argv"], &["option", "value"]],
            };
            if keys == ["not_offered"] {
                assert!(
                    cell["not_offered"].as_str().is_some_and(|w| w.len() > 10),
                    "{field}.{surface}: say why it is not offered"
                );
            } else {
                assert!(
                    ways.contains(&keys.as_slice()),
                    "{field}.{surface}: {keys:?} is no way of {ways:?}, nor not_offered"
                );
            }
        }
    }
}

/// Each `corral run` line of the table sets its field.
#[test]
fn every_cli_cell_sets_its_field() {
    let plain = cli_spec("corral run -- true");
    let mut offered = 0;
    for (field, row) in table() {
        let Some(line) = row["cli"].get("line").and_then(Value::as_str) else {
            continue;
        };
        assert!(
            changes(&field, &plain, &cli_spec(line)),
            "cli: `{line}` does not set {field}"
        );
        offered += 1;
    }
    assert!(offered >= 15, "{offered}");
}

/// Each batch key of the table sets its field.
#[test]
fn every_batch_cell_sets_its_field() {
    let plain = batch_spec("");
    let mut offered = 0;
    for (field, row) in table() {
        let Some(keys) = row["batch"].get("toml").and_then(Value::as_str) else {
            continue;
        };
        assert!(
            changes(&field, &plain, &batch_spec(keys)),
            "batch: `{keys}` does not set {field}"
        );
        offered += 1;
    }
    assert!(offered >= 15, "{offered}");
}

/// Each MCP argument of the table sets its field; the fields the table
/// says MCP does not offer are the ones the server refuses, for the same
/// reason.
#[test]
fn every_mcp_cell_sets_its_field() {
    let plain = mcp_spec(&serde_json::json!({}));
    let mut offered = 0;
    for (field, row) in table() {
        let cell = &row["mcp"];
        let refused = crate::mcp::NOT_OFFERED
            .iter()
            .find(|(f, _)| *f == field)
            .map(|(_, why)| *why);
        match cell.get("json") {
            Some(json) => {
                assert_eq!(refused, None, "mcp: {field} is offered and refused");
                assert!(
                    changes(&field, &plain, &mcp_spec(json)),
                    "mcp: {json} does not set {field}"
                );
                offered += 1;
            }
            None => {
                assert_eq!(
                    refused,
                    cell["not_offered"].as_str(),
                    "mcp: {field}: the table and the server's NOT_OFFERED differ"
                );
                // And the server does refuse it, naming it.
                let mut args = Map::new();
                args.insert("argv".into(), serde_json::json!(["true"]));
                args.insert(field.clone(), Value::Bool(true));
                let e = crate::mcp::request_spec(args).unwrap_err();
                assert!(e.contains(&format!("`{field}` is not offered")), "{e}");
            }
        }
    }
    assert!(offered >= 10, "{offered}");
}
