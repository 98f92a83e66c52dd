//! `corral mcp` end to end: JSON-RPC 2.0 over the real binary's stdin and
//! stdout. Each tool on real trees (helpers pinned by the testkit's watch),
//! the protocol errors and tool errors, and the server's end: stdin closed
//! or the server SIGKILLed, every tree it started is dead.

#![cfg(target_os = "linux")]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use corral_testkit::{ready, Scratch, Watch};
use serde_json::{json, Value};

use common::{ms, BIN, FATE};

const SEC: Duration = Duration::from_secs(1);

/// A JSON-RPC client of one `corral mcp` process.
struct Client {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<Value>,
    next: u64,
}

impl Client {
    /// `corral mcp ARGS` in the scratch (its environment and directory),
    /// initialized.
    fn start(s: &Scratch, args: &[&str]) -> Client {
        let mut child = Command::new(BIN)
            .arg("mcp")
            .args(args)
            .envs(s.env())
            .current_dir(s.dir())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                let v: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("not JSON from the server: {e}: {line}"));
                if tx.send(v).is_err() {
                    break;
                }
            }
        });
        let mut c = Client {
            stdin: child.stdin.take(),
            child,
            lines,
            next: 0,
        };
        let init = c.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "corral-test", "version": "0"}}),
        );
        assert_eq!(init["result"]["serverInfo"]["name"], "corral", "{init}");
        assert!(
            init["result"]["capabilities"]["tools"].is_object(),
            "{init}"
        );
        c.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        c
    }

    fn send(&mut self, v: &Value) {
        let w = self.stdin.as_mut().unwrap();
        writeln!(w, "{v}").unwrap();
        w.flush().unwrap();
    }

    /// One request and its response (result or error), within 30 s.
    fn request(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let id = self.next;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let end = Instant::now() + 30 * SEC;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            let v = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no answer to {method} within 30 s"));
            if v["id"] == json!(id) {
                return v;
            }
        }
    }

    /// A tool call's result (a JSON-RPC error fails the test).
    fn call(&mut self, tool: &str, args: Value) -> Value {
        let r = self.request("tools/call", json!({"name": tool, "arguments": args}));
        assert!(r.get("error").is_none(), "{tool}: {r}");
        r["result"].clone()
    }

    /// A tool call that must succeed: its structured content.
    fn ok(&mut self, tool: &str, args: Value) -> Value {
        let r = self.call(tool, args);
        assert_ne!(r["isError"], true, "{tool}: {r}");
        let sc = r["structuredContent"].clone();
        // The text content says the same, for clients without structure.
        let text: Value = serde_json::from_str(r["content"][0]["text"].as_str().unwrap()).unwrap();
        assert_eq!(text, sc);
        sc
    }

    /// A tool call that must fail as a tool: its message.
    fn tool_error(&mut self, tool: &str, args: Value) -> String {
        let r = self.call(tool, args);
        assert_eq!(r["isError"], true, "{tool}: {r}");
        r["content"][0]["text"].as_str().unwrap().to_owned()
    }

    /// Closes the server's stdin and waits (bounded) for it to exit.
    fn close(&mut self, bound: Duration) -> std::process::ExitStatus {
        drop(self.stdin.take());
        self.exit(bound)
    }

    /// Waits (bounded) for the server to exit.
    fn exit(&mut self, bound: Duration) -> std::process::ExitStatus {
        let end = Instant::now() + bound;
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st;
            }
            assert!(
                Instant::now() < end,
                "the server outlived its stdin by {bound:?}"
            );
            std::thread::sleep(ms(10));
        }
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reads a started run until `pred` holds on the output so far or it ends.
fn read_until(c: &mut Client, id: &str, pred: impl Fn(&str) -> bool) -> (String, Value) {
    let mut all = String::new();
    let end = Instant::now() + 10 * SEC;
    loop {
        let r = c.ok("read", json!({"id": id, "wait_ms": 500}));
        all.push_str(r["stdout"].as_str().unwrap());
        if pred(&all) || r["running"] == false {
            return (all, r);
        }
        assert!(Instant::now() < end, "read {id}: {all:?}");
    }
}

#[test]
fn initialize_lists_the_nine_tools() {
    let s = Scratch::new();
    let mut c = Client::start(&s, &[]);
    let r = c.request("tools/list", json!({}));
    let mut names: Vec<&str> = r["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "kill",
            "list",
            "read",
            "run",
            "session_close",
            "session_run",
            "session_start",
            "start",
            "write"
        ]
    );
    for t in r["result"]["tools"].as_array().unwrap() {
        assert_eq!(t["inputSchema"]["type"], "object", "{t}");
    }
    assert!(c.close(5 * SEC).success());
}

#[test]
fn run_reports_exit_code_output_and_counts() {
    let s = Scratch::new();
    let mut c = Client::start(&s, &[]);
    let r = c.ok(
        "run",
        json!({"argv": ["sh", "-c", "echo out; printf err >&2; read x; echo \"in:$x:$V\"; exit 3"],
               "input": "hello\n", "env": {"V": "set"}}),
    );
    assert_eq!(r["outcome"], "exited", "{r}");
    assert_eq!(r["exit_code"], 3);
    assert_eq!(r["signal"], Value::Null);
    assert_eq!(r["stdout"], "out\nin:hello:set\n");
    assert_eq!(r["stderr"], "err");
    assert_eq!(r["stdout_bytes"], 17);
    assert_eq!(r["stderr_bytes"], 3);
    assert_eq!(r["killed"], 0);
    assert_eq!(r["kept"], 0);
    assert!(r["duration_ms"].as_u64().unwrap() < 5000);
    // A shell command string, run in a cwd inside the root.
    std::fs::create_dir(s.path("sub")).unwrap();
    let r = c.ok("run", json!({"command": "pwd; kill -9 $$", "cwd": "sub"}));
    assert_eq!(r["outcome"], "signaled", "{r}");
    assert_eq!(r["signal"], "SIGKILL");
    assert_eq!(r["exit_code"], Value::Null);
    assert!(
        r["stdout"].as_str().unwrap().trim_end().ends_with("/sub"),
        "{r}"
    );
}

#[test]
fn run_timeout_kills_the_whole_tree() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let mut c = Client::start(&s, &[]);
    let script = format!(
        r#""$H" plain & setsid "$H" esc >/dev/null 2>&1 & {}{} sleep 30"#,
        ready("plain"),
        ready("esc")
    );
    let t = Instant::now();
    let r = c.ok("run", json!({"command": script, "timeout_ms": 1500}));
    let el = t.elapsed();
    assert_eq!(r["outcome"], "timed_out", "{r}");
    assert_eq!(r["timeout_kind"], "deadline");
    assert_eq!(r["exit_code"], Value::Null);
    assert!(el >= ms(1400) && el < 1500 * ms(1) + 5 * SEC, "{el:?}");
    for n in ["plain", "esc"] {
        assert!(w.pid(n, SEC).is_some(), "{n} never ran");
        assert!(w.wait_dead(n, FATE), "{n} survived the timeout");
    }
    assert!(r["killed"].as_u64().unwrap() >= 2, "{r}");
}

#[test]
fn idle_timeout_kills_the_silent_and_spares_the_chatty() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let mut c = Client::start(&s, &[]);
    let silent = format!(r#""$H" quiet & {} echo started; sleep 30"#, ready("quiet"));
    let t = Instant::now();
    let r = c.ok("run", json!({"command": silent, "idle_timeout_ms": 600}));
    assert_eq!(r["outcome"], "timed_out", "{r}");
    assert_eq!(r["timeout_kind"], "idle");
    assert_eq!(r["stdout"], "started\n");
    assert!(t.elapsed() < 10 * SEC);
    assert!(w.wait_dead("quiet", FATE));
    // Output every 100 ms for 1.5 s under a 600 ms idle timeout.
    let chatty = "i=0; while [ $i -lt 15 ]; do echo $i; sleep 0.1; i=$((i+1)); done";
    let r = c.ok("run", json!({"command": chatty, "idle_timeout_ms": 600}));
    assert_eq!(r["outcome"], "exited", "{r}");
    assert_eq!(r["exit_code"], 0);
    assert_eq!(r["timeout_kind"], Value::Null);
}

#[test]
fn max_output_kills_at_the_cap() {
    let s = Scratch::new();
    let mut c = Client::start(&s, &["--max-output-kept", "4K"]);
    let t = Instant::now();
    let r = c.ok("run", json!({"argv": ["yes"], "max_output": 100000}));
    assert!(t.elapsed() < 10 * SEC);
    assert_eq!(r["outcome"], "output_limit", "{r}");
    assert_eq!(r["exit_code"], Value::Null);
    assert_eq!(r["timeout_kind"], Value::Null);
    assert!(r["stdout_bytes"].as_u64().unwrap() > 100000, "{r}");
    // Only the tail is returned, at most --max-output-kept of it.
    let out = r["stdout"].as_str().unwrap();
    assert!(out.len() <= 4096 && out.len() >= 2048, "{}", out.len());
    assert!(out.ends_with("y\n") || out.ends_with('y'), "{out:?}");
    assert_eq!(
        r["stdout_omitted"].as_u64().unwrap() + out.len() as u64,
        r["stdout_bytes"].as_u64().unwrap()
    );
}

#[test]
fn start_read_write_list_kill_a_tree() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let mut c = Client::start(&s, &[]);
    let script = format!(
        r#""$H" plain & setsid "$H" esc >/dev/null 2>&1 & {}{} echo ready; while IFS= read -r l; do echo "got $l"; done"#,
        ready("plain"),
        ready("esc")
    );
    let r = c.ok("start", json!({"command": script}));
    let id = r["id"].as_str().unwrap().to_owned();
    let (out, r) = read_until(&mut c, &id, |o| o.contains("ready"));
    assert_eq!(out, "ready\n");
    assert_eq!(r["running"], true, "{r}");
    assert_eq!(r["outcome"], Value::Null);
    let r = c.ok("write", json!({"id": id, "data": "hello\n"}));
    assert_eq!(r["written"], 6);
    let (out, _) = read_until(&mut c, &id, |o| o.contains("got hello\n"));
    assert_eq!(out, "got hello\n", "a read returns only what is new");
    let l = c.ok("list", json!({}));
    let runs = l["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "{l}");
    assert_eq!(runs[0]["id"], id);
    assert_eq!(runs[0]["running"], true);
    assert_eq!(l["active"], 1);
    let t = Instant::now();
    let r = c.ok("kill", json!({"id": id}));
    assert!(t.elapsed() < 5 * SEC);
    assert_eq!(r["running"], false, "{r}");
    assert_eq!(r["outcome"], "cancelled");
    for n in ["plain", "esc"] {
        assert!(w.wait_dead(n, FATE), "{n} survived kill");
    }
    let l = c.ok("list", json!({}));
    assert_eq!(l["runs"][0]["running"], false);
    assert_eq!(l["runs"][0]["outcome"], "cancelled");
    assert_eq!(l["active"], 0);
    let e = c.tool_error("write", json!({"id": id, "data": "x"}));
    assert!(e.contains("ended"), "{e}");
    assert!(c.close(5 * SEC).success());
}

#[test]
fn start_with_input_then_eof_ends_the_run() {
    let s = Scratch::new();
    let mut c = Client::start(&s, &[]);
    let id = c.ok("start", json!({"argv": ["cat"], "input": "one\n"}))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    c.ok("write", json!({"id": id, "data": "two\n", "eof": true}));
    let (out, r) = read_until(&mut c, &id, |_| false);
    assert_eq!(out, "one\ntwo\n");
    assert_eq!(r["running"], false);
    assert_eq!(r["outcome"], "exited", "{r}");
    assert_eq!(r["exit_code"], 0);
    assert_eq!(r["stdout_bytes"], 8);
    let e = c.tool_error("write", json!({"id": id, "data": "x"}));
    assert!(e.contains("ended") || e.contains("closed"), "{e}");
}

#[test]
fn kill_with_a_signal_the_root_ignores_ends_in_sigkill() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let mut c = Client::start(&s, &[]);
    let script = format!(
        r#"trap '' INT; (trap '' INT TERM; exec "$H" ign) & {} echo ready; while :; do sleep 1; done"#,
        ready("ign")
    );
    let id = c.ok("start", json!({"command": script}))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    read_until(&mut c, &id, |o| o.contains("ready"));
    let t = Instant::now();
    let r = c.ok("kill", json!({"id": id, "signal": "INT"}));
    let el = t.elapsed();
    assert_eq!(r["outcome"], "cancelled", "{r}");
    assert!(
        el >= ms(1800) && el < 6 * SEC,
        "INT, then KILL after 2 s: {el:?}"
    );
    assert!(w.wait_dead("ign", FATE));
    let e = c.tool_error("kill", json!({"id": id, "signal": "NOPE"}));
    assert!(e.contains("unknown signal"), "{e}");
}

#[test]
fn a_cancelled_request_kills_its_run() {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let mut c = Client::start(&s, &[]);
    let script = r#""$H" plain & setsid "$H" esc >/dev/null 2>&1 & sleep 30"#;
    c.next += 1;
    let id = c.next;
    c.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                   "params": {"name": "run", "arguments": {"command": script}}}));
    for n in ["plain", "esc"] {
        assert!(w.pid(n, 10 * SEC).is_some(), "{n} never ran");
    }
    c.send(
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                   "params": {"requestId": id, "reason": "test"}}),
    );
    for n in ["plain", "esc"] {
        assert!(w.wait_dead(n, FATE), "{n} outlived its cancelled request");
    }
    // The server goes on.
    let r = c.ok("run", json!({"argv": ["true"]}));
    assert_eq!(r["exit_code"], 0);
    assert_eq!(c.ok("list", json!({}))["active"], 0);
}

#[test]
fn protocol_errors_and_tool_errors() {
    let s = Scratch::new();
    let mut c = Client::start(&s, &["--max-runs", "1", "--max-timeout", "10s"]);
    // An unknown tool is a JSON-RPC error.
    let r = c.request("tools/call", json!({"name": "nope", "arguments": {}}));
    assert!(r["error"]["code"].is_i64(), "{r}");
    assert!(
        r["error"]["message"].as_str().unwrap().contains("nope"),
        "{r}"
    );
    // An unknown method too, and malformed params.
    for (method, params) in [
        ("nope/nope", json!({})),
        ("tools/call", json!({"name": "run", "arguments": 5})),
        ("tools/call", json!(null)),
        ("tools/call", json!({"arguments": {}})),
    ] {
        let r = c.request(method, params.clone());
        assert!(r["error"]["code"].is_i64(), "{method} {params}: {r}");
    }
    // Bad arguments: tool errors with a clear message.
    for (tool, args, says) in [
        ("run", json!({}), "argv"),
        ("run", json!({"argv": "true"}), "invalid arguments"),
        ("run", json!({"argv": []}), "argv"),
        (
            "run",
            json!({"argv": ["true"], "command": "true"}),
            "not both",
        ),
        ("run", json!({"argv": ["true"], "bogus": 1}), "bogus"),
        (
            "run",
            json!({"argv": ["true"], "timeout_ms": 20000}),
            "max-timeout",
        ),
        (
            "run",
            json!({"argv": ["true"], "timeout_ms": -5}),
            "invalid arguments",
        ),
        (
            "run",
            json!({"argv": ["true"], "timeout_ms": u64::MAX}),
            "max-timeout",
        ),
        (
            "run",
            json!({"argv": ["true"], "max_output": 1.5}),
            "invalid arguments",
        ),
        ("read", json!({"id": "99999999999999999999999"}), "no run"),
        ("run", json!({"argv": ["true"], "cwd": "/"}), "outside"),
        ("run", json!({"argv": ["true"], "cwd": "../.."}), "outside"),
        (
            "run",
            json!({"argv": ["/nonexistent/program"]}),
            "cannot run",
        ),
        (
            "start",
            json!({"argv": ["true"], "env": {"A=B": "1"}}),
            "env",
        ),
        ("read", json!({"id": "12345"}), "no run"),
        ("read", json!({}), "invalid arguments"),
        ("write", json!({"id": "x", "data": "y"}), "no run"),
        ("kill", json!({"id": 7}), "invalid arguments"),
        ("list", json!({"x": 1}), "invalid arguments"),
    ] {
        let e = c.tool_error(tool, args.clone());
        assert!(e.contains(says), "{tool} {args}: {e}");
    }
    // A symlink out of the root is refused too.
    std::os::unix::fs::symlink("/", s.path("out")).unwrap();
    let e = c.tool_error("run", json!({"argv": ["true"], "cwd": "out"}));
    assert!(e.contains("outside"), "{e}");
    // --max-runs 1: a second run while one goes is refused.
    let id = c.ok("start", json!({"argv": ["sleep", "30"]}))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let e = c.tool_error("run", json!({"argv": ["true"]}));
    assert!(e.contains("max-runs"), "{e}");
    c.ok("kill", json!({"id": id, "signal": "KILL"}));
    let r = c.ok("run", json!({"argv": ["true"]}));
    assert_eq!(r["exit_code"], 0);
    // Not JSON at all: a JSON-RPC parse error or ignored, never a crash.
    c.send(&json!("garbage"));
    let w = c.stdin.as_mut().unwrap();
    writeln!(w, "{{not json").unwrap();
    w.flush().unwrap();
    let r = c.ok("run", json!({"argv": ["true"]}));
    assert_eq!(r["exit_code"], 0, "the server still answers");
}

/// The server's end, by `how`: every tree it started (a background tree,
/// a foreground run in flight) dies, escapers included.
fn server_end_kills_everything(how: &str) {
    let s = Scratch::new();
    let w = Watch::new(&s);
    let mut c = Client::start(&s, &[]);
    let bg = format!(
        r#""$H" bg_plain & setsid "$H" bg_esc >/dev/null 2>&1 & {}{} echo ready; cat"#,
        ready("bg_plain"),
        ready("bg_esc")
    );
    let id = c.ok("start", json!({"command": bg}))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    read_until(&mut c, &id, |o| o.contains("ready"));
    // A foreground run, not answered yet.
    let fg = r#"trap '' TERM; "$H" fg_plain & setsid "$H" fg_esc >/dev/null 2>&1 & sleep 30"#;
    c.next += 1;
    let fid = c.next;
    c.send(&json!({"jsonrpc": "2.0", "id": fid, "method": "tools/call",
                   "params": {"name": "run", "arguments": {"command": fg}}}));
    let names = ["bg_plain", "bg_esc", "fg_plain", "fg_esc"];
    for n in names {
        assert!(w.pid(n, 10 * SEC).is_some(), "{n} never ran");
    }
    let t = Instant::now();
    match how {
        "stdin" => {
            // At once: not after the requests in flight (the `run`) end.
            let st = c.close(3 * SEC);
            assert!(st.success(), "{st:?}");
        }
        "sigterm" => {
            // Our own child, not reaped yet: its pid is still its own.
            let pid = rustix::process::Pid::from_raw(c.child.id() as i32).unwrap();
            rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
            // Its stdin still open.
            let st = c.exit(3 * SEC);
            assert!(st.success(), "{st:?}");
        }
        _ => {
            c.child.kill().unwrap();
            c.child.wait().unwrap();
        }
    }
    for n in names {
        let left = (3 * SEC).saturating_sub(t.elapsed());
        assert!(w.wait_dead(n, left), "{how}: {n} outlived the server");
    }
}

#[test]
fn stdin_closed_kills_every_tree() {
    server_end_kills_everything("stdin");
}

#[test]
fn sigterm_to_the_server_kills_every_tree() {
    server_end_kills_everything("sigterm");
}

#[test]
fn sigkilled_server_kills_every_tree() {
    server_end_kills_everything("sigkill");
}

#[test]
fn bad_server_flags_are_usage_errors() {
    let s = Scratch::new();
    for (args, says) in [
        (&["--root", "/nonexistent/dir"][..], "--root"),
        (&["--max-runs", "0"][..], "max-runs"),
        (&["--max-output-kept", "0"][..], "max-output-kept"),
        (
            &["--default-timeout", "2m", "--max-timeout", "1m"][..],
            "default-timeout",
        ),
        (&["--max-timeout", "soon"][..], "max-timeout"),
        (&["--sandbox", "--network", "bogus"][..], "bogus"),
        (
            &["--sandbox", "--allow-write", "/nonexistent/dir"][..],
            "/nonexistent/dir",
        ),
        (
            &["--sandbox", "--deny-read", "/nonexistent/dir"][..],
            "/nonexistent/dir",
        ),
        (&["--allow-write", "/tmp"][..], "--sandbox"),
        (&["--network", "host"][..], "--sandbox"),
    ] {
        let out = Command::new(BIN)
            .arg("mcp")
            .args(args)
            .current_dir(s.dir())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(125), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

/// `corral mcp --sandbox`: every run is sandboxed (a write outside its
/// working directory fails, the host's file intact; its working directory
/// is writable); a request cannot give or drop a sandbox.
#[test]
fn the_servers_sandbox_applies_to_every_run() {
    let s = Scratch::new();
    let outside = tempfile::Builder::new()
        .prefix("corral-mcp-sbx-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let victim = outside.path().join("victim");
    std::fs::write(&victim, "host\n").unwrap();
    let mut c = Client::start(&s, &["--sandbox"]);
    for off in [json!(false), json!({"network": "host"})] {
        let e = c.tool_error("run", json!({"argv": ["true"], "sandbox": off}));
        assert!(e.contains("`sandbox` is not offered"), "{e}");
    }
    for tool in ["run", "start"] {
        // Each tool its own file: the started run may still be writing
        // when the other's is read.
        let cmd = format!(
            "echo bad > {v} && exit 9; rm -f {v} && exit 8; echo in > inside-{tool}.tmp && mv inside-{tool}.tmp inside-{tool}",
            v = victim.display()
        );
        let r = c.ok(tool, json!({"command": cmd}));
        if tool == "run" {
            assert_eq!(r["exit_code"], 0, "{r}");
        }
    }
    // The started run's file, written whole (renamed) once it is done.
    let started = s.path("inside-start");
    let t = Instant::now();
    while !started.exists() {
        assert!(
            t.elapsed() < 20 * SEC,
            "the started run never wrote its file"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(c.close(10 * SEC).success());
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "host\n");
    for tool in ["run", "start"] {
        let got = std::fs::read_to_string(s.path(&format!("inside-{tool}"))).unwrap();
        assert_eq!(got, "in\n", "{tool}");
    }
}
