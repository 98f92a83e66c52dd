//! The `timeout` personality: the corral binary run under the name
//! `timeout` (a symlink or hard link), or `corral timeout ARGS...`, takes
//! GNU coreutils `timeout`'s exact grammar, messages, `-v` lines and exit
//! statuses, and runs the command with corral's containment underneath.
//!
//! `timeout [OPTION]... DURATION COMMAND [ARG]...`: options stop at the
//! first operand (getopt's `+`), long options may be abbreviated, short
//! ones clustered (`-vs9`), arguments attached (`-k5`, `--signal=INT`).

use std::ffi::{OsStr, OsString};
use std::ops::ControlFlow;
use std::path::Path;
use std::time::Duration;

use crate::args::{ContainmentArg, FirstSignal, Leftovers, RunOpts};
use crate::exit;
use crate::gnu::Style;
use crate::text::quote;

/// Whether `argv[0]` names the personality (its last component is
/// `timeout`, or `timeout.exe`).
pub fn invoked_as_timeout(argv0: &OsStr) -> bool {
    Path::new(argv0)
        .file_name()
        .and_then(OsStr::to_str)
        .is_some_and(|n| n == "timeout" || n.eq_ignore_ascii_case("timeout.exe"))
}

/// `corral timeout ARGS...` or the binary invoked as `timeout`: `program`
/// is the name used in messages, `args` what follows it.
pub fn main(program: String, args: Vec<OsString>) -> i32 {
    match parse(&args) {
        Ok(Parsed::Run(mut opts)) => {
            if let Some(s) = opts.gnu.as_mut() {
                s.program = program;
            }
            crate::run::run(*opts)
        }
        Ok(Parsed::Help) => {
            print_out(&help(&program));
            0
        }
        Ok(Parsed::Version) => {
            print_out(&version());
            0
        }
        Err(msg) => {
            let mut text = String::new();
            if let Some(m) = msg {
                text.push_str(&format!("{program}: {m}\n"));
            }
            text.push_str(&format!("Try '{program} --help' for more information.\n"));
            print_err(&text);
            exit::CORRAL_FAILED
        }
    }
}

fn print_out(s: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(s.as_bytes()).and_then(|()| out.flush());
}

fn print_err(s: &str) {
    use std::io::Write;
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(s.as_bytes()).and_then(|()| err.flush());
}

#[derive(Debug)]
enum Parsed {
    Run(Box<RunOpts>),
    Help,
    Version,
}

const LONG: &[(&str, bool, char)] = &[
    ("foreground", false, 'f'),
    ("kill-after", true, 'k'),
    ("preserve-status", false, 'p'),
    ("signal", true, 's'),
    ("verbose", false, 'v'),
    ("help", false, 'h'),
    ("version", false, 'V'),
];

/// The options seen so far.
#[derive(Default)]
struct Seen {
    foreground: bool,
    kill_after: Option<Duration>,
    preserve: bool,
    signal: Option<Option<corral::Signal>>,
    verbose: bool,
}

impl Seen {
    /// Applies option `c` (its argument `val` for `-k` and `-s`); `Ok(Some)`
    /// for `--help` and `--version`, which end the parse.
    fn apply(&mut self, c: char, val: Option<String>) -> Result<Option<Parsed>, Option<String>> {
        match c {
            'f' => self.foreground = true,
            'p' => self.preserve = true,
            'v' => self.verbose = true,
            'k' => self.kill_after = Some(interval(&val.unwrap_or_default())?),
            's' => {
                let v = val.unwrap_or_default();
                let sig = crate::gnu::signal(&v)
                    .ok_or_else(|| Some(format!("{}: invalid signal", quote(&v))))?;
                self.signal = Some(sig);
            }
            'h' => return Ok(Some(Parsed::Help)),
            'V' => return Ok(Some(Parsed::Version)),
            _ => {}
        }
        Ok(None)
    }
}

/// Parses GNU's grammar. `Err(Some(message))`: a diagnostic then the "Try"
/// line; `Err(None)`: the "Try" line alone (missing operands).
fn parse(args: &[OsString]) -> Result<Parsed, Option<String>> {
    let mut seen = Seen::default();
    let first_operand = match options(args, &mut seen)? {
        ControlFlow::Break(parsed) => return Ok(parsed),
        ControlFlow::Continue(i) => i,
    };
    let operands = &args[first_operand..];
    if operands.len() < 2 {
        return Err(None);
    }
    let duration = interval(&lossy(&operands[0]))?;
    Ok(Parsed::Run(Box::new(run_opts(
        seen,
        duration,
        operands[1..].to_vec(),
    ))))
}

/// `a` as text (GNU reads its options as bytes; a non-UTF-8 one is never a
/// valid option or value anyway).
fn lossy(a: &OsStr) -> String {
    a.to_string_lossy().into_owned()
}

/// Reads the options into `seen`, up to the first operand (or past `--`):
/// its index, or `Break` for `--help` and `--version`, which end the parse.
fn options(
    args: &[OsString],
    seen: &mut Seen,
) -> Result<ControlFlow<Parsed, usize>, Option<String>> {
    let mut i = 0;
    while i < args.len() {
        let a = lossy(&args[i]);
        let next = args.get(i + 1).map(|v| lossy(v));
        if a == "--" {
            return Ok(ControlFlow::Continue(i + 1));
        }
        let used = if let Some(long) = a.strip_prefix("--") {
            let (c, val, used) = long_option(long, next)?;
            if let Some(p) = seen.apply(c, val)? {
                return Ok(ControlFlow::Break(p));
            }
            used
        } else if a.len() > 1 && a.starts_with('-') {
            short_options(&a[1..], next, seen)?
        } else {
            break;
        };
        i += 1 + usize::from(used);
    }
    Ok(ControlFlow::Continue(i))
}

/// A long option `--name[=value]` (`name` abbreviated or not), its value
/// taken from `next` when it needs one and none is attached: the option,
/// its value, and whether `next` was used.
fn long_option(
    long: &str,
    next: Option<String>,
) -> Result<(char, Option<String>, bool), Option<String>> {
    let (name, inline) = match long.split_once('=') {
        Some((n, v)) => (n, Some(v.to_string())),
        None => (long, None),
    };
    let (full, takes, c) = long_name(name)?;
    match (takes, inline) {
        (true, Some(v)) => Ok((c, Some(v), false)),
        (true, None) => match next {
            Some(v) => Ok((c, Some(v), true)),
            None => Err(Some(format!("option '--{full}' requires an argument"))),
        },
        (false, Some(_)) => Err(Some(format!("option '--{full}' doesn't allow an argument"))),
        (false, None) => Ok((c, None, false)),
    }
}

/// The long option `name` stands for: itself, or the only one it is an
/// abbreviation of.
fn long_name(name: &str) -> Result<(&'static str, bool, char), Option<String>> {
    if let Some(&o) = LONG.iter().find(|(n, _, _)| *n == name) {
        return Ok(o);
    }
    let matches: Vec<_> = LONG
        .iter()
        .filter(|(n, _, _)| n.starts_with(name))
        .collect();
    match matches.as_slice() {
        [&o] => Ok(o),
        [] => Err(Some(format!("unrecognized option '--{name}'"))),
        many => {
            let names: Vec<String> = many.iter().map(|(n, _, _)| format!("'--{n}'")).collect();
            Err(Some(format!(
                "option '--{name}' is ambiguous; possibilities: {}",
                names.join(" ")
            )))
        }
    }
}

/// A cluster of short options (`-vs9`, `-k 5`) into `seen`; `-k` and `-s`
/// take the rest of the cluster, or else `next`. Whether `next` was used.
fn short_options(
    cluster: &str,
    next: Option<String>,
    seen: &mut Seen,
) -> Result<bool, Option<String>> {
    let chars: Vec<char> = cluster.chars().collect();
    for (j, &c) in chars.iter().enumerate() {
        match c {
            'f' | 'p' | 'v' => {
                seen.apply(c, None)?;
            }
            'k' | 's' => {
                let attached: String = chars[j + 1..].iter().collect();
                if !attached.is_empty() {
                    seen.apply(c, Some(attached))?;
                    return Ok(false);
                }
                let Some(val) = next else {
                    return Err(Some(format!("option requires an argument -- '{c}'")));
                };
                seen.apply(c, Some(val))?;
                return Ok(true);
            }
            _ => return Err(Some(format!("invalid option -- '{c}'"))),
        }
    }
    Ok(false)
}

/// The run GNU's options ask for: `command` killed after `duration`, with
/// GNU's defaults where corral's differ.
fn run_opts(seen: Seen, duration: Duration, command: Vec<OsString>) -> RunOpts {
    RunOpts {
        timeout: Some(duration),
        idle_timeout: None,
        max_output: None,
        pty: false,
        pty_size: None,
        wait_delay: Duration::from_secs(2),
        // `-k 0` disables the kill: corral's own escalation then applies.
        grace: seen.kill_after.filter(|k| !k.is_zero()),
        // GNU's default: TERM at the deadline.
        signal: Some(FirstSignal(
            seen.signal.unwrap_or(Some(corral::Signal::TERM)),
        )),
        preserve_status: seen.preserve,
        foreground: seen.foreground,
        verbose: seen.verbose,
        leftovers: Leftovers::KeepOnSuccess,
        containment: ContainmentArg::Auto,
        memory_max: None,
        pids_max: None,
        confirm_window: Duration::from_secs(1),
        require_crash_safety: false,
        report: None,
        // GNU's command line has no sandbox.
        sandbox: Default::default(),
        gnu: Some(Style {
            program: String::new(),
            command: command[0].to_string_lossy().into_owned(),
        }),
        command,
    }
}

/// A duration operand or `-k` value, or GNU's diagnostic.
fn interval(s: &str) -> Result<Duration, Option<String>> {
    crate::gnu::duration(s).ok_or_else(|| Some(format!("invalid time interval {}", quote(s))))
}

/// `--version`.
fn version() -> String {
    format!(
        "timeout (corral) {}\n\
         GNU coreutils timeout's command line, run by corral: the command's whole\n\
         process tree is contained and ends with it.\n",
        env!("CARGO_PKG_VERSION")
    )
}

/// `--help`: GNU's text, with corral's differences.
fn help(program: &str) -> String {
    format!(
        "\
Usage: {program} [OPTION] DURATION COMMAND [ARG]...
  or:  {program} [OPTION]
Start COMMAND, and kill it if still running after DURATION.

Mandatory arguments to long options are mandatory for short options too.
  -f, --foreground
         when not running timeout directly from a shell prompt,
         allow COMMAND to read from the TTY and get TTY signals
         (corral: COMMAND's children are still timed out)
  -k, --kill-after=DURATION
         also send a KILL signal if COMMAND is still running
         this long after the initial signal was sent
         (corral: 10s when not given, so that timeout always returns)
  -p, --preserve-status
         exit with the same status as COMMAND,
         even when the command times out
  -s, --signal=SIGNAL
         specify the signal to be sent on timeout;
         SIGNAL may be a name like 'HUP' or a number;
         see 'kill -l' for a list of signals
  -v, --verbose
         diagnose to standard error any signal sent upon timeout
      --help        display this help and exit
      --version     output version information and exit

DURATION is a floating point number with an optional suffix:
's' for seconds (the default), 'm' for minutes, 'h' for hours or 'd' for days.
A duration of 0 disables the associated timeout.

Upon timeout, send the TERM signal to COMMAND, if no other SIGNAL specified.
The TERM signal kills any process that does not block or catch that signal.
It may be necessary to use the KILL signal, since this signal can't be caught.

Exit status:
  124  if COMMAND times out, and --preserve-status is not specified
  125  if the timeout command itself fails
  126  if COMMAND is found but cannot be invoked
  127  if COMMAND cannot be found
  137  if COMMAND (or timeout itself) is sent the KILL (9) signal (128+9)
  -    the exit status of COMMAND otherwise

This is corral's timeout: COMMAND and every process it starts are
contained (cgroup, PID namespace, subreaper or process group) and signalled
together; they are killed if corral itself dies. See `corral run --help`
and docs/differences.md for the differences from GNU timeout.
"
    )
}

/// `corral install-timeout DIR`: creates DIR/timeout, a symlink to this
/// binary, without following or replacing anything already there. Silent
/// on success, as `ln -s`.
pub fn install(dir: &Path) -> i32 {
    let say = |m: std::fmt::Arguments<'_>| print_err(&format!("corral: {m}\n"));
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            say(format_args!("cannot find corral's own path: {e}"));
            return exit::CORRAL_FAILED;
        }
    };
    // DIR itself may be a symlink to a directory (a user's choice); the
    // entry created in it is never followed.
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            say(format_args!("{} is not a directory", dir.display()));
            return exit::CORRAL_FAILED;
        }
        Err(e) => {
            say(format_args!("cannot use {}: {e}", dir.display()));
            return exit::CORRAL_FAILED;
        }
    }
    let link = dir.join("timeout");
    match create_link(&exe, &link) {
        Ok(()) => 0,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let what = match std::fs::symlink_metadata(&link) {
                Ok(m) if m.file_type().is_symlink() => match std::fs::read_link(&link) {
                    Ok(t) => format!("a symlink to {}", t.display()),
                    Err(_) => "a symlink".into(),
                },
                Ok(m) if m.is_dir() => "a directory".into(),
                _ => "a file".into(),
            };
            say(format_args!(
                "{} already exists ({what}); nothing was changed (remove it first to \
                 install corral's timeout there)",
                link.display()
            ));
            exit::CORRAL_FAILED
        }
        Err(e) => {
            say(format_args!("cannot create {}: {e}", link.display()));
            exit::CORRAL_FAILED
        }
    }
}

/// symlink(2) fails with EEXIST on any existing entry, a dangling or
/// planted symlink included: nothing is followed or replaced.
#[cfg(unix)]
fn create_link(exe: &Path, link: &Path) -> std::io::Result<()> {
    std::os::unix::fs::symlink(exe, link)
}

#[cfg(not(unix))]
fn create_link(exe: &Path, link: &Path) -> std::io::Result<()> {
    // A copy under the new name (symlinks need privileges on Windows);
    // `create_new` refuses an existing entry.
    let mut src = std::fs::File::open(exe)?;
    let mut dst = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(link.with_extension("exe"))?;
    std::io::copy(&mut src, &mut dst).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Parsed, Option<String>> {
        let v: Vec<OsString> = args.iter().map(OsString::from).collect();
        parse(&v)
    }

    fn run(args: &[&str]) -> RunOpts {
        match p(args) {
            Ok(Parsed::Run(o)) => *o,
            other => panic!("{args:?}: {other:?}"),
        }
    }

    #[test]
    fn grammar() {
        let o = run(&["-vk5", "-s", "INT", "--pres", "1.5", "sleep", "-s"]);
        assert!(o.verbose && o.preserve_status);
        assert_eq!(o.grace, Some(Duration::from_secs(5)));
        assert_eq!(o.signal, Some(FirstSignal(Some(corral::Signal::INT))));
        assert_eq!(o.timeout, Some(Duration::from_millis(1500)));
        assert_eq!(
            o.command,
            vec![OsString::from("sleep"), OsString::from("-s")]
        );
        // Options stop at the first operand.
        let o = run(&["5", "-s0", "x"]);
        assert_eq!(o.command, vec![OsString::from("-s0"), OsString::from("x")]);
        let o = run(&["--signal=0", "--kill-after=1", "-f", "-p", "--", "1", "x"]);
        assert_eq!(o.signal, Some(FirstSignal(None)));
        assert!(o.foreground && o.preserve_status);
        let o = run(&["1", "x"]);
        assert_eq!(o.signal, Some(FirstSignal(Some(corral::Signal::TERM))));
        assert_eq!(o.grace, None);
        // A long option's value in the next argument, a short one's after
        // its cluster; `-` alone is an operand.
        let o = run(&["--kill", "3", "-fs", "HUP", "2", "-"]);
        assert_eq!(o.grace, Some(Duration::from_secs(3)));
        assert_eq!(o.signal, Some(FirstSignal(Some(corral::Signal::HUP))));
        assert!(o.foreground);
        assert_eq!(o.command, vec![OsString::from("-")]);
        assert!(matches!(p(&["--help"]), Ok(Parsed::Help)));
        assert!(matches!(p(&["--he"]), Ok(Parsed::Help)));
        assert!(matches!(p(&["--vers"]), Ok(Parsed::Version)));
        assert!(matches!(p(&["-v", "--version", "1"]), Ok(Parsed::Version)));
    }

    #[test]
    fn diagnostics() {
        let e = |args: &[&str]| p(args).err().unwrap();
        assert_eq!(e(&["1"]), None);
        assert_eq!(e(&[]), None);
        assert_eq!(
            e(&["xyz", "sleep"]),
            Some("invalid time interval 'xyz'".into())
        );
        assert_eq!(e(&["-x", "1", "a"]), Some("invalid option -- 'x'".into()));
        assert_eq!(
            e(&["-s"]),
            Some("option requires an argument -- 's'".into())
        );
        assert_eq!(
            e(&["--signal"]),
            Some("option '--signal' requires an argument".into())
        );
        assert_eq!(
            e(&["--verbose=3", "1", "a"]),
            Some("option '--verbose' doesn't allow an argument".into())
        );
        assert_eq!(
            e(&["--v", "1", "a"]),
            Some("option '--v' is ambiguous; possibilities: '--verbose' '--version'".into())
        );
        assert_eq!(
            e(&["--foo", "1", "a"]),
            Some("unrecognized option '--foo'".into())
        );
        assert_eq!(
            e(&["-s", "foo", "1", "a"]),
            Some("'foo': invalid signal".into())
        );
        assert_eq!(
            e(&["-k", "invalid", "1", "a"]),
            Some("invalid time interval 'invalid'".into())
        );
    }

    #[test]
    fn names() {
        assert!(invoked_as_timeout(OsStr::new("timeout")));
        assert!(invoked_as_timeout(OsStr::new("/usr/local/bin/timeout")));
        assert!(!invoked_as_timeout(OsStr::new("corral")));
        assert!(!invoked_as_timeout(OsStr::new("timeout2")));
    }
}
