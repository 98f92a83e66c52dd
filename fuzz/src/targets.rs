//! The targets' bodies: each takes libFuzzer's bytes and asserts.

use std::path::Path;
use std::time::Duration;

use corral::Signal;

use crate::args::{parse_bytes, parse_duration};
use crate::gnu;

/// The input as text (lossy: a parser of `&str` never sees invalid UTF-8).
fn text(data: &[u8]) -> String {
    String::from_utf8_lossy(data).into_owned()
}

/// Durations, both grammars: GNU `timeout`'s (`gnu::duration`) and
/// `corral run`'s (`args::parse_duration`: GNU's, else humantime's).
pub fn duration(data: &[u8]) {
    let s = text(data);
    let gnu_d = gnu::duration(&s);
    let ours = parse_duration(&s);
    if let Some(d) = gnu_d {
        // GNU's grammar comes first and decides.
        assert_eq!(ours.as_ref().ok(), Some(&d), "{s:?}");
        assert!(d <= gnu::MAX_DURATION, "{s:?}: {d:?}");
        // Display as GNU seconds (`S.NNNNNNNNN`) and read back: the same
        // duration, to the nanosecond, within f64's precision (GNU's
        // grammar is C's strtod: a double).
        let shown = format!("{}.{:09}", d.as_secs(), d.subsec_nanos());
        let back = gnu::duration(&shown).expect(&shown);
        let slack = Duration::from_nanos(1).max(d.mul_f64(4.0 * f64::EPSILON));
        assert!(
            back.abs_diff(d) <= slack,
            "{s:?}: {d:?} shown {shown} read {back:?}"
        );
        // Whole seconds display exactly.
        if d.subsec_nanos() == 0 {
            assert_eq!(gnu::duration(&d.as_secs().to_string()), Some(d), "{s:?}");
        }
    }
    if let Ok(d) = ours {
        // corral's display of a duration (humantime's, as in messages and
        // `--help` defaults) reads back as the same duration.
        let shown = humantime::format_duration(d).to_string();
        assert_eq!(
            parse_duration(&shown),
            Ok(d),
            "{s:?}: {d:?} shown {shown:?}"
        );
    }
}

/// Sizes (`--max-output`, `--memory-max`, the manifest's sizes).
pub fn size(data: &[u8]) {
    let s = text(data);
    let Ok(n) = parse_bytes(&s) else { return };
    assert_eq!(parse_bytes(&n.to_string()), Ok(n), "{s:?}");
    // The largest binary suffix that divides it displays it exactly.
    for (suffix, shift) in [("T", 40), ("G", 30), ("M", 20), ("K", 10)] {
        if n != 0 && n % (1u64 << shift) == 0 {
            let shown = format!("{}{suffix}", n >> shift);
            assert_eq!(parse_bytes(&shown), Ok(n), "{s:?}: {shown}");
            assert_eq!(parse_bytes(&shown.to_lowercase()), Ok(n), "{s:?}: {shown}");
            break;
        }
    }
}

/// Signal names and numbers: corral's (`Signal: FromStr`, the manifest's,
/// MCP's `kill`), GNU `timeout -s`'s, and `corral run -s`'s.
pub fn signal(data: &[u8]) {
    // Every signal number, from the first byte: display ∘ parse = id.
    if let Some(&b) = data.first() {
        if let Some(sig) = Signal::from_raw(i32::from(b)) {
            assert_round_trips(sig);
        }
    }
    let s = text(data);
    if let Ok(sig) = s.parse::<Signal>() {
        assert_round_trips(sig);
    }
    if let Some(g) = gnu::signal(&s) {
        if let Some(sig) = g {
            assert_round_trips(sig);
        }
        // GNU's name of what it read reads back as it.
        assert_eq!(gnu::signal(&gnu::signal_name(g)), Some(g), "{s:?}");
    }
    if let Ok(first) = crate::args::parse_signal(&s) {
        if let Some(sig) = first.0 {
            assert_round_trips(sig);
        }
    }
}

fn assert_round_trips(sig: Signal) {
    let shown = sig.to_string();
    assert_eq!(shown.parse::<Signal>(), Ok(sig), "{shown:?}");
    assert_eq!(sig.as_raw().to_string().parse::<Signal>(), Ok(sig));
    if let Some(name) = sig.name() {
        assert_eq!(name.parse::<Signal>(), Ok(sig), "{name}");
        assert_eq!(name.to_lowercase().parse::<Signal>(), Ok(sig), "{name}");
    }
    // The report's form (serde) reads back too.
    let json = serde_json::to_string(&sig).unwrap();
    assert_eq!(
        serde_json::from_str::<Signal>(&json).ok(),
        Some(sig),
        "{json}"
    );
    let g = gnu::signal_name(Some(sig));
    assert_eq!(gnu::signal(&g), Some(Some(sig)), "{g:?}");
}

/// `--partition K/N` and `env:VAR/N`, and the rule that places runs in
/// shards: every run of a selection lands in exactly one shard, the same
/// one for `corral batch` and `corral merge`.
pub fn partition(data: &[u8]) {
    use crate::batch::exec::{shard_of, Batch, Partition, RunOptions, Selection};
    use crate::batch::parse_partition;

    let s = text(data);
    // `SPEC` or `SPEC\nVALUE`: VALUE is what any `env:VAR` holds.
    let (spec, value) = match s.split_once('\n') {
        Some((spec, value)) => (spec, Some(value.to_owned())),
        None => (s.as_str(), None),
    };
    if let Ok(p) = parse_partition(spec, |_| value.clone()) {
        assert!(
            p.count >= 1 && (1..=p.count).contains(&p.index),
            "{s:?}: {p:?}"
        );
        let again = format!("{}/{}", p.index, p.count);
        assert_eq!(parse_partition(&again, |_| None).ok(), Some(p), "{s:?}");
        let zero = Some((p.index - 1).to_string());
        let env = format!("env:I/{}", p.count);
        assert_eq!(
            parse_partition(&env, |_| zero.clone()).ok(),
            Some(p),
            "{s:?}"
        );
    }

    // A selection from the bytes: up to 8 tasks (repeat, warmup, selected)
    // and a shard count; each shard's plan from `Batch::new`.
    let (Some(&n), rest) = (data.first(), data.get(1..).unwrap_or_default()) else {
        return;
    };
    static TASK: std::sync::OnceLock<crate::batch::manifest::Task> = std::sync::OnceLock::new();
    let task = TASK.get_or_init(|| {
        let m = "[[task]]\nname = \"t\"\nrun = [\"true\"]\n";
        crate::batch::manifest::parse("m.toml", m, Path::new("/")).unwrap()[0].clone()
    });
    let count = u32::from(n % 16) + 1;
    let mut tasks = Vec::new();
    let mut selected = Vec::new();
    for (i, c) in rest.chunks_exact(3).take(8).enumerate() {
        let mut t = task.clone();
        t.name = format!("t{i}");
        (t.repeat, t.warmup) = (u32::from(c[0] % 12) + 1, u32::from(c[1] % 3));
        tasks.push(t);
        selected.push(c[2] % 4 != 0);
    }
    if selected.is_empty() {
        return;
    }
    let mut wanted = std::collections::BTreeSet::new();
    let mut ordinal = 0usize;
    for (ti, t) in tasks.iter().enumerate() {
        if selected[ti] {
            for run in 0..t.repeat {
                wanted.insert((ti, run, shard_of(ordinal, count)));
                ordinal += 1;
            }
        }
    }
    let mut got = std::collections::BTreeSet::new();
    for index in 1..=count {
        let sel = Selection {
            tasks: selected.clone(),
            partition: Some(Partition { index, count }),
        };
        let opts = RunOptions {
            fail_fast: false,
            keep_output: 0,
            containment: corral::ContainmentChoice::Auto,
            retries: None,
            output_dir: None,
            require_crash_safety: false,
        };
        let b = Batch::new(tasks.clone(), sel, opts);
        let mut warm = std::collections::BTreeMap::<usize, u32>::new();
        for j in &b.plan {
            assert_eq!(j.shard, index);
            assert!(selected[j.task]);
            if j.warmup {
                *warm.entry(j.task).or_default() += 1;
                continue;
            }
            // Once in all the shards: the set never had it.
            assert!(got.insert((j.task, j.run, index)), "{j:?} twice");
        }
        // A task's warmups run in a shard that has a measured run of it.
        for (t, w) in warm {
            assert_eq!(w, tasks[t].warmup);
            assert!(b.plan.iter().any(|j| j.task == t && !j.warmup));
        }
    }
    assert_eq!(got, wanted);
    // Shard sizes within one of each other.
    let sizes: Vec<usize> = (1..=count)
        .map(|k| got.iter().filter(|&&(_, _, s)| s == k).count())
        .collect();
    let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
    assert!(hi - lo <= 1, "{sizes:?}");
}

/// The keeper's messages (host ↔ keeper datagrams) and the `SCM_RIGHTS`
/// control buffer the keeper reads descriptors from.
pub fn keeper_codec(data: &[u8]) {
    corral::fuzz_keeper_protocol::check(data);
}

/// The batch manifest: TOML text to checked tasks, or a clean error that
/// points inside the text.
pub fn manifest(data: &[u8]) {
    use crate::batch::manifest::{fingerprint, parse};
    let s = text(data);
    match parse("m.toml", &s, Path::new("/base")) {
        Err(e) => {
            assert_eq!(e.file, "m.toml");
            assert!(!e.message.is_empty(), "{s:?}");
            // A position is inside the text (1-based; one past the last
            // line for an error at the end).
            if e.line > 0 {
                assert!(e.line <= s.lines().count() + 1, "{s:?}: {e:?}");
                assert!(e.col >= 1, "{s:?}: {e:?}");
            }
            let _ = e.to_string();
        }
        Ok(tasks) => {
            assert!(!tasks.is_empty());
            let mut names = std::collections::BTreeSet::new();
            for t in &tasks {
                assert!(names.insert(t.name.clone()), "{s:?}: two tasks {}", t.name);
                assert!(t.repeat >= 1, "{s:?}");
                let spec = &t.spec;
                // Exactly one of `run` (argv) and `shell` (command), and
                // what runs is a program with its arguments.
                assert!(
                    spec.argv.is_some() != spec.command.is_some(),
                    "{s:?}: {t:?}"
                );
                let argv = spec
                    .program_and_args()
                    .unwrap_or_else(|e| panic!("{s:?}: {t:?}: {e}"));
                assert!(!argv.is_empty() && !argv[0].is_empty(), "{s:?}: {t:?}");
                assert!(
                    argv.iter().all(|a| !a.as_encoded_bytes().contains(&0)),
                    "{s:?}"
                );
                if let Some(c) = &spec.command {
                    assert_eq!(argv, [corral::document::SHELL, "-c", c.as_str()], "{s:?}");
                }
                for (k, v) in spec.env.iter().flatten() {
                    let (k, v) = (k.to_str().unwrap(), v.to_str().unwrap());
                    assert!(!k.is_empty() && !k.contains(['=', '\0']), "{s:?}: {k:?}");
                    assert!(!v.contains('\0'), "{s:?}");
                }
                if let Some(c) = &spec.cwd {
                    assert!(c.is_absolute(), "{s:?}: {c:?}");
                }
                assert_eq!(spec.cwd.is_some(), t.cwd_raw.is_some(), "{s:?}: {t:?}");
                // The manifest's own defaults are written into the spec;
                // 0 is no deadline, never a deadline at the spawn.
                assert!(spec.timeout_ms.is_none_or(|d| !d.is_zero()), "{s:?}");
                assert!(
                    spec.wait_delay_ms.is_some()
                        && spec.grace_ms.is_some()
                        && spec.signal.is_some()
                        && spec.leftovers.is_some(),
                    "{s:?}: {t:?}"
                );
                assert!(spec.pids_max.is_none_or(|n| n >= 1), "{s:?}");
                // What the batch runs is the spec.
                corral::Command::from_spec(spec).unwrap_or_else(|e| panic!("{s:?}: {t:?}: {e}"));
            }
            // Re-serialised in corral's canonical form, a manifest with the
            // same tasks: the same fingerprint, the same tasks.
            let again = reserialise(&tasks);
            let back = parse("m.toml", &again, Path::new("/base"))
                .unwrap_or_else(|e| panic!("{s:?} re-serialised as {again:?}: {e}"));
            assert_eq!(fingerprint(&back), fingerprint(&tasks), "{s:?}\n{again}");
            assert_eq!(back.len(), tasks.len());
            for (a, b) in tasks.iter().zip(&back) {
                assert_eq!(format!("{a:?}"), format!("{b:?}"), "{s:?}\n{again}");
            }
        }
    }
}

/// Tasks as a manifest (every key written out, none from `[defaults]`).
fn reserialise(tasks: &[crate::batch::manifest::Task]) -> String {
    use toml::Value;
    let q = |s: &str| Value::String(s.to_owned()).to_string();
    // humantime's form: read back exactly (a decimal number of seconds is
    // read as GNU reads it, through a double).
    let dur = |d: Duration| q(&humantime::format_duration(d).to_string());
    let mut out = String::new();
    for t in tasks {
        out.push_str("[[task]]\n");
        out.push_str(&format!("name = {}\n", q(&t.name)));
        let sp = &t.spec;
        let text = |o: &std::ffi::OsString| o.to_str().unwrap().to_owned();
        match (&sp.argv, &sp.command) {
            (Some(argv), None) => {
                let argv: Vec<String> = argv.iter().map(|a| q(&text(a))).collect();
                out.push_str(&format!("run = [{}]\n", argv.join(", ")));
            }
            (None, Some(c)) => out.push_str(&format!("shell = {}\n", q(c))),
            _ => panic!("a task with neither or both of argv and command: {t:?}"),
        }
        if let Some(c) = &t.cwd_raw {
            out.push_str(&format!("cwd = {}\n", q(c)));
        }
        if let Some(env) = sp.env.as_ref().filter(|e| !e.is_empty()) {
            let env: Vec<String> = env
                .iter()
                .map(|(k, v)| format!("{} = {}", q(&text(k)), q(&text(v))))
                .collect();
            out.push_str(&format!("env = {{ {} }}\n", env.join(", ")));
        }
        if let Some(d) = sp.timeout_ms {
            out.push_str(&format!("timeout = {}\n", dur(d)));
        }
        if let Some(d) = sp.idle_timeout_ms {
            out.push_str(&format!("idle_timeout = {}\n", dur(d)));
        }
        if let Some(n) = sp.max_output {
            out.push_str(&format!("max_output = {}\n", q(&n.to_string())));
        }
        if let Some(d) = sp.wait_delay_ms {
            out.push_str(&format!("wait_delay = {}\n", dur(d)));
        }
        if let Some(d) = sp.grace_ms {
            out.push_str(&format!("grace = {}\n", dur(d)));
        }
        if let Some(sig) = sp.signal {
            out.push_str(&format!("signal = {}\n", q(&sig.to_string())));
        }
        if let Some(l) = sp.leftovers {
            out.push_str(&format!(
                "leftovers = {}\n",
                toml::Value::try_from(l).unwrap()
            ));
        }
        if let Some(c) = sp.containment {
            out.push_str(&format!("containment = {}\n", q(&kebab(&format!("{c:?}")))));
        }
        if let Some(r) = &t.result_event {
            out.push_str(&format!(
                "result_event = {{ type = {}, field = {} }}\n",
                q(&r.ty),
                q(&r.field)
            ));
        }
        out.push_str(&format!("repeat = {}\n", t.repeat));
        out.push_str(&format!("expect_exit = {}\n", t.expect_exit));
        out.push_str(&format!("retries = {}\n", t.retries));
        out.push_str(&format!("warmup = {}\n", t.warmup));
        out.push_str(&format!("serial = {}\n", t.serial));
        if let Some(n) = sp.memory_max {
            out.push_str(&format!("memory_max = {}\n", q(&n.to_string())));
        }
        if let Some(n) = sp.pids_max {
            out.push_str(&format!("pids_max = {n}\n"));
        }
        out.push_str(&format!(
            "require_crash_safety = {}\n",
            sp.require_crash_safety
        ));
    }
    out
}

/// The MCP server's `run`/`start` arguments: JSON to a checked run, or a
/// tool error.
pub fn mcp_args(data: &[u8]) {
    use crate::mcp::limits::{Limits, RunArgs, OFFERED};
    use std::sync::OnceLock;
    static ROOT: OnceLock<(tempfile::TempDir, Limits)> = OnceLock::new();
    let (_, limits) = ROOT.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::os::unix::fs::symlink("/", dir.path().join("out")).unwrap();
        let limits = Limits {
            max_runs: 2,
            kept: 1024,
            default_timeout: Duration::from_secs(5),
            max_timeout: Duration::from_secs(60),
            root: dir.path().canonicalize().unwrap(),
            require_crash_safety: false,
            sandbox: None,
        };
        (dir, limits)
    });
    let Ok(serde_json::Value::Object(args)) = serde_json::from_slice(data) else {
        return;
    };
    let args: serde_json::Map<String, serde_json::Value> = args.into_iter().collect();
    let parsed = RunArgs::parse(args.clone());
    let a = match parsed {
        Err(e) => {
            assert!(!e.is_empty());
            // An `input` that is not text is refused first; then a key the
            // tools do not take is refused, and the error names one such
            // key (which one, when there are several, depends on the
            // map's order after `input` is taken out).
            let refused: Vec<&String> = args
                .keys()
                .filter(|k| *k != "input" && !OFFERED.contains(&k.as_str()))
                .collect();
            let input_ok = matches!(
                args.get("input"),
                None | Some(serde_json::Value::Null | serde_json::Value::String(_))
            );
            if !input_ok {
                assert!(e.starts_with("input must be a string"), "{e}");
            } else if !refused.is_empty() {
                assert!(
                    refused.iter().any(|k| e.contains(&format!("`{k}`"))),
                    "{refused:?}: {e}"
                );
            }
            return;
        }
        Ok(a) => a,
    };
    // Only the offered fields (and `input`) are read.
    assert!(
        args.keys()
            .all(|k| k == "input" || OFFERED.contains(&k.as_str())),
        "{args:?}"
    );
    assert_eq!(
        a.input.as_deref(),
        args.get("input").and_then(|v| v.as_str())
    );
    let asked = a.spec.clone();
    let Ok(run) = limits.check(a) else { return };
    let spec = &run.spec;
    assert!(!run.argv.is_empty() && !run.argv[0].is_empty(), "{run:?}");
    assert!(run.argv.iter().all(|a| !a.contains('\0')));
    // `list` shows what runs.
    let runs: Vec<String> = spec
        .program_and_args()
        .unwrap()
        .iter()
        .map(|s| s.to_str().unwrap().to_owned())
        .collect();
    assert_eq!(run.argv, runs);
    let cwd = spec.cwd.as_ref().expect("a checked run has its cwd");
    assert!(cwd.starts_with(&limits.root) && cwd.is_dir(), "{run:?}");
    let timeout = spec.timeout_ms.expect("a checked run has its deadline");
    assert!(timeout > Duration::ZERO && timeout <= limits.max_timeout);
    assert!(spec.idle_timeout_ms.is_none_or(|d| d > Duration::ZERO));
    for (k, v) in spec.env.iter().flatten() {
        let (k, v) = (k.to_str().unwrap(), v.to_str().unwrap());
        assert!(!k.is_empty() && !k.contains(['=', '\0']) && !v.contains('\0'));
    }
    // The server's own settings, whatever the request said.
    assert_eq!(spec.leftovers, Some(corral::LeftoverPolicy::Kill));
    assert_eq!(spec.grace_ms, Some(crate::mcp::limits::KILL_AFTER));
    assert_eq!(spec.capture_limit, Some(limits.kept as u64 * 2));
    assert_eq!(spec.require_crash_safety, asked.require_crash_safety);
    // What the request said is what runs.
    match args.get("argv") {
        Some(serde_json::Value::Array(a)) => {
            let want: Vec<&str> = a.iter().map(|v| v.as_str().unwrap()).collect();
            assert_eq!(run.argv, want);
        }
        _ => {
            let c = args["command"].as_str().unwrap();
            assert_eq!(run.argv, [corral::document::SHELL, "-c", c]);
        }
    }
    match args.get("timeout_ms").and_then(|v| v.as_f64()) {
        Some(ms) => assert_eq!(
            Some(timeout),
            Duration::try_from_secs_f64(ms / 1e3).ok(),
            "{ms}"
        ),
        None => assert_eq!(timeout, limits.default_timeout),
    }
    assert_eq!(
        spec.max_output,
        args.get("max_output").and_then(|v| v.as_u64())
    );
    // Every other offered field goes through as given.
    let mut through = asked;
    through.cwd = spec.cwd.clone();
    through.timeout_ms = spec.timeout_ms;
    through.leftovers = spec.leftovers;
    through.grace_ms = spec.grace_ms;
    through.capture_limit = spec.capture_limit;
    assert_eq!(&through, spec);
    corral::Command::from_spec(spec).unwrap_or_else(|e| panic!("{run:?}: {e}"));
}

/// `corral merge`: shard reports (arbitrary JSON) merge or fail cleanly;
/// see `merge_split` for the round trip of a valid split.
pub fn merge(data: &[u8]) {
    crate::merge_target::run(data);
}

/// `ProcessGroup` as `process-group`.
fn kebab(camel: &str) -> String {
    let mut out = String::new();
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('-');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}
