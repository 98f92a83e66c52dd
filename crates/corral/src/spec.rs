//! What a run is asked to do, as plain values: the stdio kinds, the
//! leftovers policy, the line callback and the lifecycle's knobs
//! ([`Settings`]). The builder (`command`) fills them in and the lifecycle
//! reads them; neither is imported from here, so data flows down.

use std::fs::File;
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::signal::Signal;

/// Which output stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// What the child's standard input is.
#[derive(Debug, Default)]
pub struct Input(pub(crate) InputKind);

#[derive(Debug, Default)]
pub(crate) enum InputKind {
    /// `/dev/null` (the default: a command nobody types to must not wait
    /// for a terminal).
    #[default]
    Null,
    Inherit,
    Bytes(std::sync::Arc<[u8]>),
    File(File),
}

impl Input {
    /// Read from the null device (the default).
    pub fn null() -> Input {
        Input(InputKind::Null)
    }
    /// The caller's own standard input.
    pub fn inherit() -> Input {
        Input(InputKind::Inherit)
    }
    /// These bytes, then end of file. Written without blocking the lifecycle;
    /// a child that does not read them does not stall the deadline.
    pub fn bytes(data: impl Into<Vec<u8>>) -> Input {
        Input(InputKind::Bytes(data.into().into()))
    }
    /// An open file.
    pub fn file(f: File) -> Input {
        Input(InputKind::File(f))
    }
}

/// Where a child's output stream goes.
#[derive(Default)]
pub struct Output(pub(crate) OutputKind);

#[derive(Default)]
pub(crate) enum OutputKind {
    /// A pipe read by corral into a bounded capture (the default).
    #[default]
    Capture,
    /// A pipe read by corral into a bounded capture and copied, in order, to
    /// this writer on a writer thread.
    Relay(Box<dyn Write + Send>),
    /// A pipe whose bytes are moved to this file, pipe or socket without
    /// being captured (counted only); zero-copy on Linux.
    RelayFile(File),
    /// Handed to the child as is (a terminal stays a terminal). Not captured,
    /// so the wait delay does not apply to it.
    Inherit,
    /// The null device.
    Null,
    /// An open file, handed to the child directly.
    File(File),
    /// Only for stderr: the same pipe as stdout (order between the two kept).
    MergeWithStdout,
}

impl std::fmt::Debug for Output {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match &self.0 {
            OutputKind::Capture => "Capture",
            OutputKind::Relay(_) => "Relay",
            OutputKind::RelayFile(_) => "RelayFile",
            OutputKind::Inherit => "Inherit",
            OutputKind::Null => "Null",
            OutputKind::File(_) => "File",
            OutputKind::MergeWithStdout => "MergeWithStdout",
        };
        f.write_str(name)
    }
}

impl Output {
    /// Capture through a pipe, bounded by [`Command::capture_limit`](crate::Command::capture_limit).
    pub fn capture() -> Output {
        Output(OutputKind::Capture)
    }
    /// Capture, and copy every byte in order to `w` (for example corral's own
    /// stdout when it is a pipe). Slow consumers apply back-pressure to the
    /// child, never to the lifecycle's timers.
    pub fn relay(w: impl Write + Send + 'static) -> Output {
        Output(OutputKind::Relay(Box::new(w)))
    }
    /// Relay every byte, in order, into `f` (a pipe, socket or file: for
    /// example a duplicate of corral's own stdout), without capturing it:
    /// the report counts the bytes. On Linux the bytes are moved by
    /// `splice(2)` on a relay thread and never copied through user space.
    /// The wait delay applies as for a captured stream; when `f`'s reader
    /// goes away, the child's pipe is closed so the child sees EPIPE, as in
    /// a plain pipeline.
    pub fn relay_file(f: File) -> Output {
        Output(OutputKind::RelayFile(f))
    }
    /// Hand the caller's own stream to the child.
    pub fn inherit() -> Output {
        Output(OutputKind::Inherit)
    }
    /// Discard.
    pub fn null() -> Output {
        Output(OutputKind::Null)
    }
    /// Hand an open file to the child.
    pub fn file(f: File) -> Output {
        Output(OutputKind::File(f))
    }
    /// For stderr only: share stdout's pipe, so both interleave in one
    /// capture in the order written.
    pub fn merge_with_stdout() -> Output {
        Output(OutputKind::MergeWithStdout)
    }
}

/// Conversions like std's `Stdio`: an open file, descriptor or pipe end is
/// handed to the child as is ([`Input::file`], [`Output::file`]).
macro_rules! from_handle {
    ($($(#[$m:meta])* $t:ty),* $(,)?) => {$(
        $(#[$m])*
        impl From<$t> for Input {
            /// Reads from it ([`Input::file`]).
            fn from(h: $t) -> Input {
                Input::file(File::from(OwnedIo::from(h)))
            }
        }
        $(#[$m])*
        impl From<$t> for Output {
            /// Writes to it directly ([`Output::file`]): not captured.
            fn from(h: $t) -> Output {
                Output::file(File::from(OwnedIo::from(h)))
            }
        }
    )*};
}

#[cfg(any(unix, target_os = "wasi"))]
type OwnedIo = std::os::fd::OwnedFd;
#[cfg(windows)]
type OwnedIo = std::os::windows::io::OwnedHandle;

impl From<File> for Input {
    /// Reads from the file ([`Input::file`]).
    fn from(f: File) -> Input {
        Input::file(f)
    }
}

impl From<File> for Output {
    /// Writes to the file directly ([`Output::file`]): not captured.
    fn from(f: File) -> Output {
        Output::file(f)
    }
}

from_handle!(
    #[cfg(any(unix, target_os = "wasi"))]
    std::os::fd::OwnedFd,
    #[cfg(windows)]
    std::os::windows::io::OwnedHandle,
    #[cfg(any(unix, windows))]
    std::io::PipeReader,
    #[cfg(any(unix, windows))]
    std::io::PipeWriter,
    #[cfg(any(unix, windows))]
    std::process::ChildStdout,
    #[cfg(any(unix, windows))]
    std::process::ChildStderr,
    #[cfg(any(unix, windows))]
    std::process::ChildStdin,
);

impl From<Vec<u8>> for Input {
    /// These bytes, then end of file ([`Input::bytes`]).
    fn from(b: Vec<u8>) -> Input {
        Input::bytes(b)
    }
}

impl From<&[u8]> for Input {
    /// These bytes, then end of file ([`Input::bytes`]).
    fn from(b: &[u8]) -> Input {
        Input::bytes(b)
    }
}

impl From<String> for Input {
    /// This text, then end of file ([`Input::bytes`]).
    fn from(s: String) -> Input {
        Input::bytes(s)
    }
}

impl From<&str> for Input {
    /// This text, then end of file ([`Input::bytes`]).
    fn from(s: &str) -> Input {
        Input::bytes(s)
    }
}

/// The window size of a pseudo-terminal ([`Command::pty`](crate::Command::pty)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PtySize {
    /// Columns.
    pub cols: u16,
    /// Rows.
    pub rows: u16,
}

impl PtySize {
    /// `cols` x `rows`.
    pub fn new(cols: u16, rows: u16) -> PtySize {
        PtySize { cols, rows }
    }
}

impl Default for PtySize {
    /// 80 x 24, a terminal's classic size.
    fn default() -> Self {
        PtySize { cols: 80, rows: 24 }
    }
}

impl std::fmt::Display for PtySize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}x{}", self.cols, self.rows)
    }
}

impl std::str::FromStr for PtySize {
    type Err = String;
    /// `COLSxROWS`, each from 1 to 65535 (`120x40`).
    fn from_str(s: &str) -> Result<PtySize, String> {
        let bad = || format!("invalid terminal size '{s}': expected COLSxROWS, such as 80x24");
        let (c, r) = s.split_once(['x', 'X']).ok_or_else(bad)?;
        let num = |t: &str| {
            t.parse::<u16>()
                .ok()
                .filter(|&n| n > 0 && t.bytes().all(|b| b.is_ascii_digit()))
        };
        match (num(c), num(r)) {
            (Some(cols), Some(rows)) => Ok(PtySize { cols, rows }),
            _ => Err(bad()),
        }
    }
}

/// What happens to processes of the tree that are still running when the
/// root has exited and its output was drained.
///
/// "Keep" keeps what runs (Linux): a leftover that is stopped (by SIGSTOP,
/// SIGTSTP, ...) when the policy keeps the leftovers is killed (SIGKILL)
/// and counted in [`Leftovers::killed`](crate::Leftovers::killed), never
/// kept. Nothing would continue it once corral is gone, and its process
/// group, once orphaned (when corral, a child subreaper, or the PID
/// namespace's init goes; or at the root's exit when its orphans go to
/// init), would get SIGHUP then SIGCONT from the kernel because it has a
/// stopped member (POSIX's orphaned-group rule), which ends every member
/// that does not handle SIGHUP, the running ones too. A leftover that is
/// dying (a fatal signal pending, such as that SIGHUP) is neither kept nor
/// killed; the kept ones are counted once it is gone. A leftover stopped
/// later, after corral decided, is not corral's to see.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
#[non_exhaustive]
pub enum LeftoverPolicy {
    /// Keep them after a clean exit 0; kill them after any other ending.
    #[default]
    KeepOnSuccess,
    /// Always kill them.
    Kill,
    /// Keep them after any clean root exit (timeouts, cancellation and held
    /// output still kill the tree).
    Keep,
}

/// A callback for each line of output, called on the supervising thread.
pub type LineCallback = Box<dyn FnMut(Stream, &[u8]) + Send>;

/// The callback as the command keeps it: shared by every spawn of the same
/// command, like its other settings.
pub(crate) type SharedLineCallback = Arc<std::sync::Mutex<LineCallback>>;

/// A [`Duration`] in 12 bytes instead of 16, exactly: its seconds are
/// kept as two `u32` halves, so the type is 4-aligned and carries no
/// padding. Every `Duration` goes in and comes back out unchanged (no
/// rounding, no saturation). Used where a run or a command keeps several
/// durations for its whole life (figure 5: each byte a live run keeps is
/// 10 KB at 10,000 runs).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    secs: [u32; 2],
    nanos: u32,
}

/// `nanos` of a [`MaybeSpan`] that holds none (a `Duration`'s nanoseconds
/// are always below one second).
const NO_SPAN: u32 = u32::MAX;

impl Span {
    pub(crate) const fn new(d: Duration) -> Span {
        let s = d.as_secs();
        Span {
            secs: [s as u32, (s >> 32) as u32],
            nanos: d.subsec_nanos(),
        }
    }

    pub(crate) const fn get(self) -> Duration {
        let s = (self.secs[0] as u64) | ((self.secs[1] as u64) << 32);
        Duration::new(s, self.nanos)
    }
}

impl From<Duration> for Span {
    fn from(d: Duration) -> Span {
        Span::new(d)
    }
}

impl std::fmt::Debug for Span {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.get().fmt(f)
    }
}

/// An `Option<Duration>` in the 12 bytes of a [`Span`] (`Option<Duration>`
/// is 16), exactly: `None` is a nanosecond count no `Duration` has.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct MaybeSpan(Span);

impl MaybeSpan {
    pub(crate) const NONE: MaybeSpan = MaybeSpan(Span {
        secs: [0, 0],
        nanos: NO_SPAN,
    });

    pub(crate) const fn new(d: Option<Duration>) -> MaybeSpan {
        match d {
            Some(d) => MaybeSpan(Span::new(d)),
            None => MaybeSpan::NONE,
        }
    }

    pub(crate) const fn get(self) -> Option<Duration> {
        if self.0.nanos == NO_SPAN {
            None
        } else {
            Some(self.0.get())
        }
    }

    pub(crate) const fn is_some(self) -> bool {
        self.0.nanos != NO_SPAN
    }
}

impl From<Option<Duration>> for MaybeSpan {
    fn from(d: Option<Duration>) -> MaybeSpan {
        MaybeSpan::new(d)
    }
}

impl std::fmt::Debug for MaybeSpan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.get().fmt(f)
    }
}

/// The lifecycle's knobs, copied into the running command. The durations
/// are kept as [`Span`]s: a `Command` held across an `.await` is that
/// much smaller (figure 5).
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) timeout: MaybeSpan,
    pub(crate) deadline: Option<Instant>,
    pub(crate) wait_delay: Span,
    pub(crate) grace: Span,
    pub(crate) signal: Signal,
    /// Nothing is sent when the deadline or the idle timeout fires (or the
    /// token expires): SIGKILL follows after the grace.
    pub(crate) silent_deadline: bool,
    pub(crate) leftovers: LeftoverPolicy,
    pub(crate) capture_limit: usize,
    pub(crate) confirm_window: Span,
    pub(crate) line_limit: usize,
    pub(crate) require_crash_safety: bool,
    pub(crate) sigpipe_ignored: bool,
    /// No output on any seen stream for this long ends the run.
    pub(crate) idle_timeout: MaybeSpan,
    /// Bytes the captured/relayed streams may carry together.
    pub(crate) output_limit: Option<u64>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            timeout: MaybeSpan::NONE,
            deadline: None,
            wait_delay: Span::new(Duration::from_secs(2)),
            grace: Span::new(Duration::ZERO),
            signal: Signal::TERM,
            silent_deadline: false,
            leftovers: LeftoverPolicy::KeepOnSuccess,
            capture_limit: 16 << 20,
            confirm_window: Span::new(Duration::from_secs(1)),
            line_limit: 4 << 20,
            require_crash_safety: false,
            sigpipe_ignored: false,
            idle_timeout: MaybeSpan::NONE,
            output_limit: None,
        }
    }
}

/// The longest grace the crash-safety keeper (and a PID namespace's init)
/// waits between a run's first signal and its SIGKILL when corral dies: a
/// longer grace is cut to this, so that their work stays bounded.
pub(crate) const FAREWELL_GRACE_MAX: Duration = Duration::from_secs(10);

/// What is done to a run's tree when corral itself dies (the crash-safety
/// keeper; a PID namespace's init): `first` (if any) and SIGCONT, then
/// SIGKILL `grace` later to whatever is left, as at the deadline; no grace
/// is SIGKILL at once. From the run's signal and grace
/// ([`Farewell::of_settings`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) struct Farewell {
    /// The first signal; `None`: nothing before the SIGKILL.
    pub(crate) first: Option<Signal>,
    /// Between the first signal and the SIGKILL, at most
    /// [`FAREWELL_GRACE_MAX`].
    pub(crate) grace: Duration,
}

#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
impl Farewell {
    /// SIGKILL at once.
    pub(crate) const KILL: Farewell = Farewell {
        first: None,
        grace: Duration::ZERO,
    };

    /// The farewell of a run's settings: its signal and grace, and nothing
    /// first when the deadline is silent (`-s 0`: the tree gets no signal
    /// but the SIGKILL after the grace, at the deadline as at corral's
    /// death).
    pub(crate) fn of_settings(settings: &Settings) -> Farewell {
        let first = (!settings.silent_deadline).then_some(settings.signal);
        Farewell::with(first, settings.grace.get())
    }

    /// The farewell of first signal `signal` (`None`, or SIGKILL: nothing
    /// first) and grace `grace`: no grace, SIGKILL at once (as at the
    /// deadline); else the first signal, and SIGKILL the grace later, the
    /// grace cut to [`FAREWELL_GRACE_MAX`].
    fn with(signal: Option<Signal>, grace: Duration) -> Farewell {
        let grace = grace.min(FAREWELL_GRACE_MAX);
        if grace.is_zero() {
            return Farewell::KILL;
        }
        Farewell {
            first: signal.filter(|&s| s != Signal::KILL),
            grace,
        }
    }
}

/// How the child sets itself up before exec, beyond its streams and its
/// directory (the jobs of `subprocess.Popen`'s keywords, done without
/// running caller code in the child). All off by default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ChildSetup {
    /// The `argv[0]` the program sees (default: the program as given).
    pub(crate) arg0: Option<std::ffi::OsString>,
    /// setreuid(uid, uid), last.
    pub(crate) uid: Option<u32>,
    /// setregid(gid, gid), before the uid.
    pub(crate) gid: Option<u32>,
    /// setgroups(groups), before the gid.
    pub(crate) groups: Option<Vec<u32>>,
    /// umask(mask).
    pub(crate) umask: Option<u32>,
    /// setsid() instead of setpgid(0, 0): a new session (whose process
    /// group is the root's own, as without it).
    pub(crate) new_session: bool,
    /// Some: every descriptor above 2 is closed at exec but these, which
    /// the child inherits at the same numbers.
    pub(crate) keep_fds: Option<Vec<i32>>,
    /// SIGXFSZ back to the default disposition (SIGPIPE always is).
    pub(crate) restore_signals: bool,
    /// Standard input is a terminal to make the controlling terminal of
    /// the new session (`TIOCSCTTY`; `new_session` is set with it).
    pub(crate) controlling_tty: bool,
    /// The prepared sandbox the child enters last before exec.
    #[cfg(linux_raw)]
    pub(crate) sandbox: Option<PreparedSandbox>,
}

/// A prepared sandbox (the platform's own value, which the spawn paths
/// take back out), shared by the setups of one spawn (compared by
/// identity).
#[cfg(linux_raw)]
#[derive(Clone)]
pub(crate) struct PreparedSandbox(pub(crate) std::sync::Arc<dyn std::any::Any + Send + Sync>);

#[cfg(linux_raw)]
impl std::fmt::Debug for PreparedSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PreparedSandbox")
    }
}

#[cfg(linux_raw)]
impl PartialEq for PreparedSandbox {
    fn eq(&self, other: &PreparedSandbox) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

#[cfg(linux_raw)]
impl Eq for PreparedSandbox {}

#[cfg(unix)]
impl ChildSetup {
    /// Whether nothing beyond arg0 is asked for.
    pub(crate) fn is_plain(&self) -> bool {
        ChildSetup {
            arg0: self.arg0.clone(),
            ..ChildSetup::default()
        } == *self
    }
}

/// A confinement policy for the whole tree ([`Command::sandbox`](crate::Command::sandbox)):
/// what it may write, what it may not read, which network it has. Beside
/// containment (the tree ends), a sandbox limits what the tree touches
/// while it runs. Where the policy cannot be enforced, the spawn fails
/// with [`Error::Sandbox`](crate::Error::Sandbox) and nothing runs.
///
/// ```
/// use corral::{Network, Sandbox};
/// let policy = Sandbox::new()
///     .allow_write("/var/cache/build")
///     .deny_read("/root/.ssh")
///     .network(Network::Loopback);
/// assert_eq!(policy.network_policy(), Network::Loopback);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Sandbox {
    pub(crate) allow_write: Vec<std::path::PathBuf>,
    pub(crate) deny_read: Vec<std::path::PathBuf>,
    pub(crate) network: Network,
}

impl Sandbox {
    /// The default policy: everything readable, writes only in the working
    /// directory, a private /tmp and the usual devices, no network.
    pub fn new() -> Sandbox {
        Sandbox::default()
    }

    /// Also allows writes under `path` (which must exist).
    pub fn allow_write(mut self, path: impl Into<std::path::PathBuf>) -> Sandbox {
        self.allow_write.push(path.into());
        self
    }

    /// Denies reading, listing and executing `path` and everything under it.
    pub fn deny_read(mut self, path: impl Into<std::path::PathBuf>) -> Sandbox {
        self.deny_read.push(path.into());
        self
    }

    /// Which network the tree has (default [`Network::None`]).
    pub fn network(mut self, n: Network) -> Sandbox {
        self.network = n;
        self
    }

    /// The extra writable paths, in the order given.
    pub fn allowed_writes(&self) -> &[std::path::PathBuf] {
        &self.allow_write
    }

    /// The paths denied to reading, in the order given.
    pub fn denied_reads(&self) -> &[std::path::PathBuf] {
        &self.deny_read
    }

    /// The network policy.
    pub fn network_policy(&self) -> Network {
        self.network
    }
}

/// The network a sandboxed tree has.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
#[non_exhaustive]
pub enum Network {
    /// No network: no TCP or UDP to any address, no host unix socket
    /// (abstract, or at a path outside the writable ones).
    #[default]
    None,
    /// A private loopback inside the sandbox, nothing of the host's.
    Loopback,
    /// Not confined.
    Host,
}

impl Network {
    /// The policy's name (`none`, `loopback`, `host`).
    pub fn name(self) -> &'static str {
        match self {
            Network::None => "none",
            Network::Loopback => "loopback",
            Network::Host => "host",
        }
    }
}

impl std::fmt::Display for Network {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Network {
    type Err = String;
    fn from_str(s: &str) -> Result<Network, String> {
        match s {
            "none" => Ok(Network::None),
            "loopback" => Ok(Network::Loopback),
            "host" => Ok(Network::Host),
            _ => Err(format!(
                "unknown network policy {s:?} (expected none, loopback or host)"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{MaybeSpan, Span};
    use std::time::Duration;

    /// A span is exact: every duration comes back as it went in, the
    /// longest and the sub-millisecond ones too (no rounding, no cap).
    #[test]
    fn a_span_gives_back_the_very_duration_it_was_given() {
        let cases = [
            Duration::ZERO,
            Duration::from_nanos(1),
            Duration::from_micros(500),
            // 1 h 30 min 0.5 ms.
            Duration::from_secs(5400) + Duration::from_micros(500),
            // Past 49 days (u32 milliseconds) and past u32 seconds.
            Duration::from_secs(50 * 86_400) + Duration::from_nanos(7),
            Duration::from_secs(u64::from(u32::MAX) + 1),
            Duration::new(u64::MAX, 999_999_999),
            Duration::MAX,
        ];
        for d in cases {
            assert_eq!(Span::new(d).get(), d);
            assert_eq!(MaybeSpan::new(Some(d)).get(), Some(d));
            assert!(MaybeSpan::new(Some(d)).is_some());
        }
        assert_eq!(MaybeSpan::new(None).get(), None);
        assert!(!MaybeSpan::NONE.is_some());
    }
}
