"""corral: ``subprocess.run(timeout=...)`` that keeps four promises.

1. **Bounded return.** ``run`` comes back in bounded time, even when a
   grandchild keeps the captured output open after the command exits,
   ignores SIGTERM, or is stopped.
2. **Nothing left behind.** The whole process tree is contained (a cgroup, a
   subreaper, a process group; a Job Object on Windows) and killed on
   timeout, cancellation, output held past the wait delay, Ctrl-C, and when a
   handle is garbage-collected or the interpreter exits.
3. **Never the wrong process.** No signal reaches a process outside the tree
   through PID reuse.
4. **The truth about what happened.** ``result.outcome`` separates a normal
   exit from a signal, a timeout, a cancellation, held output and a cleanup
   failure; ``result.returncode`` is the exit code only when every lifecycle
   step was clean.

>>> import corral
>>> r = corral.run(["sh", "-c", "echo hi; sleep 600 & exit 0"], timeout=10, wait_delay=0.5)
>>> r.outcome, r.returncode, r.stdout
('output_held', None, b'hi\\n')

Output is captured by default, bounded by ``capture_limit`` (head and tail
kept, the middle counted in ``stdout_omitted``), so a runaway writer costs at
most the limit. Standard input is the null device by default.
"""

from __future__ import annotations

import atexit
import locale
import os
import subprocess
import sys
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, Union

from . import _corral

__all__ = [
    "__version__",
    "run",
    "call",
    "check_call",
    "check_output",
    "getoutput",
    "getstatusoutput",
    "Popen",
    "CompletedProcess",
    "SubprocessError",
    "create_subprocess_exec",
    "create_subprocess_shell",
    "run_async",
    "spawn",
    "Process",
    "Result",
    "Timings",
    "Usage",
    "CorralError",
    "TimeoutExpired",
    "CalledProcessError",
    "OutputHeld",
    "OutputLimitExceeded",
    "Signaled",
    "Cancelled",
    "CleanupFailed",
    "ContainmentError",
    "Session",
    "SessionClosed",
    "SandboxError",
    "Sandbox",
    "enable_subreaper",
    "raise_nofile_limit",
    "PIPE",
    "STDOUT",
    "DEVNULL",
]

SubprocessError = subprocess.SubprocessError
PIPE = subprocess.PIPE
STDOUT = subprocess.STDOUT
DEVNULL = subprocess.DEVNULL

#: How long the cleanup after an interrupt or a cancelled task may take before
#: corral stops waiting for it (the library bounds it by the grace plus the
#: confirm window; this is a backstop).
_CLEANUP_SLACK = 30.0

enable_subreaper = _corral.enable_subreaper
#: The package's version: the Rust crate's (Cargo.toml), which maturin also
#: writes into the wheel's metadata.
__version__: str = _corral.__version__
raise_nofile_limit = _corral.raise_nofile_limit


def _root_status(report: Mapping[str, Any]) -> Optional[int]:
    """subprocess's returncode: the exit code, or -N for signal N."""
    if report["exit_code"] is not None:
        return report["exit_code"]
    if report["signal"] is not None:
        return -report["signal"]
    return None


def _text(data: bytes, encoding: str, errors: str) -> str:
    return data.decode(encoding, errors).replace("\r\n", "\n").replace("\r", "\n")


class Timings(NamedTuple):
    """When each lifecycle step was done, in seconds since the run began
    (just before the spawn); None for a step that did not happen."""

    #: How long the spawn itself took.
    spawn: float
    #: When the root's exit was observed.
    root_exit: Optional[float]
    #: When every captured stream reached end of file.
    output_closed: Optional[float]
    #: When cleanup (signals, death confirmed, identity released) was done.
    cleanup_done: float


class Usage(NamedTuple):
    """Tree-wide resource usage, read from the cgroup (cgroup containment
    only; each field None when the kernel does not provide it)."""

    #: CPU time in user mode, the whole tree, seconds.
    cpu_user: Optional[float]
    #: CPU time in kernel mode, the whole tree, seconds.
    cpu_system: Optional[float]
    #: Peak memory of the whole tree, bytes.
    memory_peak: Optional[int]
    #: Most processes alive at once in the tree.
    pids_peak: Optional[int]


class Result(subprocess.CompletedProcess):
    """What happened to one run: a ``subprocess.CompletedProcess`` (``args``,
    ``returncode``, ``stdout``, ``stderr``, ``check_returncode()``) carrying
    corral's report.

    ``outcome``: ``"exited"``, ``"signaled"``, ``"timed_out"``,
    ``"cancelled"``, ``"output_held"``, ``"output_limit"`` or
    ``"cleanup_failed"``; ``timeout_kind``: ``"deadline"`` or ``"idle"`` on
    a ``"timed_out"`` run, else None.
    ``returncode``: as in ``subprocess``, how the command itself ended: its
    exit code, or ``-N`` when signal N ended it (None if it never ended, which
    only a cleanup failure leaves). Whether every lifecycle step was clean is
    ``outcome == "exited"`` (and ``ok``). ``exit_code`` / ``signal``: the
    same, apart; ``signal_name``: the signal's name (``"SIGKILL"``).
    ``error``: what kept the run from being an ordinary exit, in words (None
    for an exit or a signal the root died of by itself). ``stdout`` / ``stderr``: head and tail of the
    output (bytes, or str with ``text=True``; None for a stream not
    captured, as in ``subprocess``); ``stdout_omitted`` /
    ``stderr_omitted``: bytes left out between them; ``stdout_bytes`` /
    ``stderr_bytes``: every byte the command wrote there (None for a stream
    not captured). ``killed`` / ``kept``: leftover processes. ``duration`` in
    seconds. ``containment``: the mechanism used; ``containment_note``: why
    a stronger one was not (or None). ``crash_safe``: whether the tree
    would have been killed had this process died during the run (False
    when the keeper could not be started); ``crash_safety_note``: why not
    (or None). ``signals_sent``: the signals corral sent the tree, in order
    (names, or numbers for unnamed ones). ``cleanup_errors``: every
    cleanup step that failed, in order, each once, as dicts with ``step``
    (``"confirm_death"``, ``"signal"``, ``"members"``, ``"wait"``,
    ``"release"``, ``"crash_safety"``), ``error`` (in words) and
    ``os_error`` (the errno, or None); empty unless the outcome is
    ``"cleanup_failed"``. ``cleanup_error``: all of them in one line (or
    None); ``survivors``: the pids that survived
    SIGKILL. ``timings``: a :class:`Timings`; ``usage``: a :class:`Usage`
    (cgroup containment only, else None); ``limits_hit``: ``"memory"``,
    ``"pids"``. ``report``: everything, as a dict.
    """

    __slots__ = (
        "args",
        "report",
        "outcome",
        "timeout_kind",
        "returncode",
        "exit_code",
        "signal",
        "signal_name",
        "error",
        "stdout",
        "stderr",
        "stdout_omitted",
        "stderr_omitted",
        "stdout_bytes",
        "stderr_bytes",
        "killed",
        "kept",
        "duration",
        "containment",
        "containment_note",
        "crash_safe",
        "crash_safety_note",
        "signals_sent",
        "cleanup_errors",
        "cleanup_error",
        "survivors",
        "timings",
        "usage",
        "limits_hit",
        "pid",
        "timeout",
        "session_id",
        "jobs",
        "session_ended",
        "_raw",
    )

    def __init__(self, args: Any, report: Dict[str, Any], text: bool, encoding: Optional[str], errors: Optional[str]):
        self.args = args
        self.report = report
        self.outcome: str = report["outcome"]
        self.timeout_kind: Optional[str] = report.get("timeout_kind")
        self.exit_code: Optional[int] = report["exit_code"]
        self.signal: Optional[int] = report["signal"]
        self.signal_name: Optional[str] = report["signal_name"]
        self.error: Optional[str] = report["error"]
        self.returncode: Optional[int] = _root_status(report)
        self.stdout_omitted: int = report["stdout_omitted"]
        self.stderr_omitted: int = report["stderr_omitted"]
        self.stdout_bytes: Optional[int] = report["stdout_bytes"]
        self.stderr_bytes: Optional[int] = report["stderr_bytes"]
        self.killed: int = report["killed"]
        self.kept: int = report["kept"]
        self.duration: float = report["duration"]
        self.containment: str = report["containment"]
        self.containment_note: Optional[str] = report["containment_note"]
        self.crash_safe: bool = report["crash_safe"]
        self.crash_safety_note: Optional[str] = report["crash_safety_note"]
        self.signals_sent: List[Union[str, int]] = list(report["signals_sent"])
        self.cleanup_errors: List[Dict[str, Any]] = [dict(e) for e in report["cleanup_errors"]]
        self.cleanup_error: Optional[str] = report["cleanup_error"]
        self.survivors: List[int] = list(report["survivors"])
        self.timings = Timings(**report["timings"])
        self.usage: Optional[Usage] = Usage(**report["usage"]) if report["usage"] is not None else None
        self.limits_hit: List[str] = list(report["limits_hit"])
        #: What the sandbox enforced, rule by rule (None without ``sandbox=``).
        self.sandbox: Optional[Dict[str, Any]] = report.get("sandbox")
        self.pid: int = report["pid"]
        self.timeout: Optional[float] = None
        # A command of a :class:`Session` (None otherwise).
        self.session_id: Optional[str] = report.get("session_id")
        self.jobs: List[tuple] = [tuple(j) for j in report.get("jobs", ())]
        self.session_ended: Optional[str] = report.get("session_ended")
        out, err = report["stdout"], report["stderr"]
        # The bytes as captured (TimeoutExpired carries them undecoded, as
        # subprocess does).
        self._raw = (out, err)
        if text:
            enc = encoding or locale.getpreferredencoding(False)
            # As subprocess's text mode: universal newlines. A cut between
            # head and tail may split a character: replaced, not an error.
            out = _text(out, enc, errors or ("replace" if self.stdout_omitted else "strict"))
            err = _text(err, enc, errors or ("replace" if self.stderr_omitted else "strict"))
        self.stdout: Union[bytes, str, None] = out
        self.stderr: Union[bytes, str, None] = err

    @property
    def ok(self) -> bool:
        """True when the command exited 0 and every lifecycle step was clean."""
        return self.outcome == "exited" and self.returncode == 0

    def check_returncode(self) -> None:
        """Raises the ``CorralError`` subclass for this result unless it is a
        clean exit 0 (as ``subprocess.CompletedProcess.check_returncode``)."""
        exc = _error_for(self)
        if exc is not None:
            raise exc

    def __repr__(self) -> str:
        return (
            f"corral.Result(args={self.args!r}, outcome={self.outcome!r}, "
            f"returncode={self.returncode!r}, exit_code={self.exit_code!r}, "
            f"signal={self.signal!r}, duration={self.duration:.3f})"
        )


class CorralError(Exception):
    """Base of every error corral raises about a run. ``result`` is the
    :class:`Result` (None when nothing ran)."""

    result: Optional[Result] = None


class TimeoutExpired(CorralError, subprocess.TimeoutExpired):
    """The deadline passed; the whole tree was terminated."""

    def __init__(
        self, result: Optional[Result], cmd: Any, timeout: float, output: Optional[bytes] = None, stderr: Optional[bytes] = None
    ):
        if result is not None:
            # Bytes even in text mode, as subprocess documents; None for a
            # stream that was not captured.
            output = result._raw[0] if result.stdout is not None else None
            stderr = result._raw[1] if result.stderr is not None else None
        subprocess.TimeoutExpired.__init__(self, cmd, timeout, output=output, stderr=stderr)
        self.result = result


class CalledProcessError(CorralError, subprocess.CalledProcessError):
    """The command exited with a nonzero code (every lifecycle step clean)."""

    def __init__(self, result: Result):
        subprocess.CalledProcessError.__init__(
            self, result.returncode, result.args, output=result.stdout, stderr=result.stderr
        )
        self.result = result


class _ResultError(CorralError):
    def __init__(self, result: Result, message: str):
        super().__init__(message)
        self.result = result


class OutputHeld(_ResultError):
    """The command exited but a descendant held its output open past the wait
    delay; the holders were killed. ``result.exit_code`` is the command's own
    code."""


class OutputLimitExceeded(_ResultError):
    """The command's output passed ``max_output`` bytes; the tree was
    terminated."""


class Signaled(CalledProcessError):
    """The command was ended by a signal corral did not send: a
    ``subprocess.CalledProcessError`` whose ``returncode`` is ``-N``."""


class Cancelled(_ResultError):
    """The run was cancelled; the tree was terminated."""


class CleanupFailed(_ResultError):
    """The tree could not be cleaned up (survivors, or a failure to signal or
    release it): whatever the command printed, the run is not clean."""


class ContainmentError(CorralError):
    """The requested containment could not be set up, or crash safety was
    required (``require_crash_safety=True``) and cannot be had; nothing was
    run (a root already started is killed and released before this is
    raised)."""


class SandboxError(CorralError):
    """The sandbox asked for (``sandbox=``) cannot be enforced here (the
    kernel, the privileges, a missing mechanism: the message names what is
    missing); nothing was run. A sandbox never degrades silently."""


_NETWORKS = ("none", "loopback", "host")


class Sandbox:
    """A confinement policy for the whole tree (``run(..., sandbox=...)``;
    ``sandbox=True`` is ``Sandbox()``).

    Everything stays readable but the ``deny_read`` paths (reading, listing,
    executing them or anything under them fails). Writable: the working
    directory's subtree, a private empty /tmp (and /dev/shm) gone after the
    run, the usual devices, and the ``allow_write`` paths; every other
    write fails. ``network``: ``"none"`` (default: no TCP, UDP or host
    unix socket), ``"loopback"`` (a private loopback, nothing of the
    host's) or ``"host"`` (not confined). The tree cannot signal or ptrace
    a process outside it, and gains no privileges from set-uid programs.
    Paths must exist (``ValueError`` otherwise); relative ones are taken
    from the current directory.

    >>> import corral
    >>> corral.Sandbox(allow_write=["/tmp"], network="loopback")
    Sandbox(allow_write=['/tmp'], deny_read=[], network='loopback')
    """

    __slots__ = ("allow_write", "deny_read", "network")

    def __init__(
        self,
        allow_write: Sequence[Union[str, bytes, "os.PathLike[Any]"]] = (),
        deny_read: Sequence[Union[str, bytes, "os.PathLike[Any]"]] = (),
        network: str = "none",
    ) -> None:
        def paths(v: Any, what: str) -> List[str]:
            if isinstance(v, (str, bytes, os.PathLike)):
                raise TypeError(f"{what} must be a list of paths, not a single path {v!r}")
            out = []
            for p in v:
                p = os.fsdecode(p)
                if not p or "\0" in p:
                    raise ValueError(f"{what}: bad path {p!r}")
                out.append(os.path.abspath(p))
            return out

        if network not in _NETWORKS:
            raise ValueError(f"network must be one of {', '.join(_NETWORKS)}, not {network!r}")
        self.allow_write: List[str] = paths(allow_write, "allow_write")
        self.deny_read: List[str] = paths(deny_read, "deny_read")
        self.network: str = network

    def __repr__(self) -> str:
        return f"Sandbox(allow_write={self.allow_write!r}, deny_read={self.deny_read!r}, network={self.network!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sandbox):
            return NotImplemented
        return (self.allow_write, self.deny_read, self.network) == (other.allow_write, other.deny_read, other.network)

    def _native(self) -> Dict[str, Any]:
        return {"allow_write": self.allow_write, "deny_read": self.deny_read, "network": self.network}


def _sandbox(value: Any) -> Any:
    """``sandbox=`` -> what _corral.start takes."""
    if value is None or value is False:
        return None
    if value is True:
        return True
    if isinstance(value, Sandbox):
        return value._native()
    raise TypeError(f"sandbox must be True, False, None or a corral.Sandbox, not {value!r}")


def _error_for(r: Result) -> Optional[CorralError]:
    if r.outcome == "cleanup_failed":
        return CleanupFailed(r, f"cleanup failed: {r.cleanup_error}")
    if r.outcome == "timed_out":
        return TimeoutExpired(r, r.args, r.timeout or 0.0)
    if r.outcome == "output_held":
        return OutputHeld(
            r, f"command {r.args!r} exited ({r.exit_code}) but its output was held open past the wait delay"
        )
    if r.outcome == "output_limit":
        return OutputLimitExceeded(r, f"command {r.args!r} wrote more than its output limit")
    if r.outcome == "signaled":
        return Signaled(r)
    if r.outcome == "cancelled":
        return Cancelled(r, f"command {r.args!r} was cancelled")
    if r.returncode is not None and r.returncode != 0:
        return CalledProcessError(r)
    return None


_DEFAULT: Any = object()


class SessionClosed(CorralError):
    """The session has ended: a command ended its shell (``exit``,
    ``exec``, a signal), or it was closed. Nothing was run."""


class Session:
    """A persistent shell session: the shell's state (working directory,
    variables exported or not, functions, aliases, ``set -o``/``shopt``
    options, umask) carries over from one :meth:`run` to the next, while
    each command runs as a fresh bash (else sh) in its own contained tree,
    bounded on its own: when its ``timeout``, ``idle_timeout`` or
    ``max_output`` fires, only its tree is killed and the session goes on.

    ``cwd`` and ``env`` (a mapping added to this process's environment;
    ``env_clear=True`` starts from nothing) are the first state; ``PAGER``,
    ``GIT_PAGER`` are ``cat``, ``GIT_EDITOR`` is ``true`` and ``TERM`` is
    ``dumb`` unless ``env`` sets them. stdin is at end of file and there is
    no controlling terminal: nothing waits for a person. Background jobs
    that closed their output (``server >log 2>&1 &``) keep running between
    commands: ``result.jobs`` lists those a command left, :meth:`jobs` the
    live ones, :meth:`kill_job` kills one; :meth:`close` (or leaving the
    ``with`` block, or this process's death) kills them all. A command that
    ends the shell ends the session (``result.session_ended`` says how);
    later runs raise :class:`SessionClosed`. One command at a time: a
    concurrent :meth:`run` waits.

    >>> with corral.Session(cwd="/tmp") as s:
    ...     s.run("cd /; export X=1")
    ...     s.run("echo $PWD $X", text=True).stdout
    '/ 1\n'
    """

    def __init__(
        self,
        *,
        cwd: Any = None,
        env: Optional[Mapping[str, str]] = None,
        env_clear: bool = False,
        shell: Any = None,
        containment: str = "auto",
        require_crash_safety: bool = False,
    ) -> None:
        self._s = _corral.Session(
            shell=None if shell is None else os.fspath(shell),
            cwd=None if cwd is None else os.fspath(cwd),
            env=None if env is None else [(str(k), str(v)) for k, v in env.items()],
            env_clear=env_clear,
            containment=containment,
            require_crash_safety=require_crash_safety,
        )

    @property
    def id(self) -> str:
        """The session's id (``result.session_id`` of its commands)."""
        return self._s.id

    @property
    def ended(self) -> Optional[str]:
        """How the session ended, in words (None while it is open)."""
        return self._s.ended

    def run(
        self,
        command: str,
        *,
        timeout: Optional[float] = None,
        idle_timeout: Optional[float] = None,
        max_output: Optional[int] = None,
        capture_limit: Optional[int] = None,
        wait_delay: Optional[float] = None,
        grace: Optional[float] = None,
        text: bool = False,
        encoding: Optional[str] = None,
        errors: Optional[str] = None,
        check: bool = False,
    ) -> Result:
        """Runs one shell command line in the session; returns a
        :class:`Result` (as :func:`corral.run`'s, with ``session_id``,
        ``jobs`` and ``session_ended``). Unlike :func:`corral.run`, a
        timeout does not raise: the result says ``outcome == "timed_out"``
        (``check=True`` raises for it and any other unclean ending)."""
        try:
            report = self._s.run(
                command,
                timeout=timeout,
                idle_timeout=idle_timeout,
                max_output=max_output,
                capture_limit=capture_limit,
                wait_delay=wait_delay,
                grace=grace,
            )
        except _corral.SessionClosed as e:
            raise SessionClosed(str(e)) from None
        r = Result(command, report, bool(text or encoding or errors), encoding, errors)
        r.timeout = idle_timeout if r.timeout_kind == "idle" else timeout
        if check:
            r.check_returncode()
        return r

    def jobs(self) -> List[tuple]:
        """The live background jobs, as ``(pid, command line)`` pairs."""
        return [tuple(j) for j in self._s.jobs()]

    def kill_job(self, pid: int) -> bool:
        """Kills the background job ``pid`` (and what it started): whether
        it was running."""
        return self._s.kill_job(pid)

    def close(self) -> None:
        """Closes the session: every background job is killed."""
        self._s.close()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"corral.Session(id={self.id!r}, ended={self.ended!r})"


def _stdio(value: Any, name: str) -> Any:
    """subprocess-style stream spec -> what _corral.start takes."""
    if value == PIPE:
        return "capture"
    if value is None or value is _DEFAULT:
        return "inherit"
    if value == DEVNULL:
        return "null"
    if value == STDOUT:
        if name != "stderr":
            raise ValueError("STDOUT is only valid for stderr")
        return "stdout"
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"bad {name}: {value}")
        return value
    if hasattr(value, "fileno"):
        if hasattr(value, "flush"):
            value.flush()
        return value.fileno()
    raise TypeError(f"{name} must be PIPE, DEVNULL, None, a file descriptor or a file object")


def _argv(args: Any, shell: bool, executable: Any) -> tuple:
    """(argv, program to run or None: argv[0])."""
    if executable is not None:
        executable = os.fsdecode(executable)
    if shell:
        if isinstance(args, os.PathLike):
            raise TypeError("path-like args is not allowed when shell is true")
        # As subprocess: a string is the command; a list's first item is the
        # command and the rest its positional parameters ($0, $1, ...).
        if os.name == "nt":
            if not isinstance(args, (str, bytes)):
                args = subprocess.list2cmdline([os.fsdecode(a) for a in args])
            comspec = os.environ.get("COMSPEC", "cmd.exe")
            return [executable or comspec, "/c", os.fsdecode(args)], None
        rest = [os.fsdecode(args)] if isinstance(args, (str, bytes)) else [os.fsdecode(a) for a in args]
        if not rest:
            raise ValueError("args is empty")
        # As subprocess: executable replaces the shell (and is its argv[0]).
        return [executable or "/bin/sh", "-c", *rest], None
    if isinstance(args, (str, bytes, os.PathLike)):
        argv = [os.fsdecode(args)]
    else:
        argv = [os.fsdecode(a) for a in args]
    if not argv:
        raise ValueError("args is empty")
    return argv, executable


_PREEXEC_FN_ERROR = (
    "preexec_fn cannot run in corral's child: corral starts the command without running Python "
    "code between fork and exec (that is what keeps it safe with threads and fast). Use the "
    "keywords that do the usual jobs instead: start_new_session=True (setsid), process_group=, "
    "user=, group=, extra_groups=, umask=, pass_fds=, restore_signals=, cwd=, env=; or wrap the "
    "command (for example [\"sh\", \"-c\", 'ulimit -n 256; exec \"$0\" \"$@\"', *args])"
)


def _popen_keywords(
    bufsize: int,
    preexec_fn: Any,
    close_fds: bool,
    pass_fds: Sequence[int],
    startupinfo: Any,
    creationflags: int,
    restore_signals: bool,
    start_new_session: bool,
    process_group: Optional[int],
    user: Any,
    group: Any,
    extra_groups: Any,
    umask: int,
    pipesize: int,
) -> Dict[str, Any]:
    """Checks subprocess.Popen's keywords as subprocess does; returns what
    _corral.start takes for them."""
    if bufsize is None:
        bufsize = -1
    if not isinstance(bufsize, int):
        raise TypeError("bufsize must be an integer")
    if pipesize is None:
        pipesize = -1
    if not isinstance(pipesize, int):
        raise TypeError("pipesize must be an integer")
    if preexec_fn is not None:
        raise ValueError(_PREEXEC_FN_ERROR)
    if os.name != "nt":
        if startupinfo is not None:
            raise ValueError("startupinfo is only supported on Windows platforms")
        if creationflags != 0:
            raise ValueError("creationflags is only supported on Windows platforms")
    elif startupinfo is not None or creationflags:
        raise ValueError("startupinfo and creationflags are not supported by corral yet")
    pass_fds = tuple(sorted(map(int, pass_fds)))
    if pass_fds and not close_fds:
        import warnings

        warnings.warn("pass_fds overriding close_fds.", RuntimeWarning, stacklevel=4)
        close_fds = True
    kw: Dict[str, Any] = {}
    if close_fds:
        kw["keep_fds"] = list(pass_fds)
    if not restore_signals:
        kw["restore_signals"] = False
    if start_new_session:
        kw["new_session"] = True
    if process_group is not None and process_group != 0:
        # 0 (a group of its own, pgid = pid) is what corral does anyway.
        raise ValueError(
            f"process_group={process_group!r}: corral runs the command as the leader of a process "
            "group of its own (process_group=0), which is how it finds and kills the whole tree; "
            "joining another group would let a kill reach processes outside it"
        )
    ids = _ids(user, group, extra_groups)
    kw.update(ids)
    if umask is not None and umask >= 0:
        kw["umask"] = int(umask)
    return kw


def _id_ok(n: int, what: str, too_large: type = OverflowError) -> int:
    # As subprocess: negative is a ValueError; too large for an id_t an
    # OverflowError (a ValueError in extra_groups).
    if n < 0:
        raise ValueError(f"{what} ID cannot be negative, got {n}")
    if n >= 2**32 - 1:
        raise too_large(f"{what} ID is too large: {n}")
    return n


def _ids(user: Any, group: Any, extra_groups: Any) -> Dict[str, Any]:
    """user=/group=/extra_groups= resolved as subprocess does."""
    kw: Dict[str, Any] = {}
    if group is not None:
        if isinstance(group, str):
            import grp

            kw["gid"] = grp.getgrnam(group).gr_gid
        elif isinstance(group, int):
            kw["gid"] = group
        else:
            raise TypeError("Group must be a string or an integer, not {}".format(type(group)))
        _id_ok(kw["gid"], "Group")
    if extra_groups is not None:
        gids = []
        for g in extra_groups:
            if isinstance(g, str):
                import grp

                gids.append(grp.getgrnam(g).gr_gid)
            elif isinstance(g, int):
                gids.append(g)
            else:
                raise TypeError("Items in extra_groups must be a string or integer, not {}".format(type(g)))
        for g in gids:
            _id_ok(g, "Group", ValueError)
        kw["groups"] = gids
    if user is not None:
        if isinstance(user, str):
            import pwd

            kw["uid"] = pwd.getpwnam(user).pw_uid
        elif isinstance(user, int):
            kw["uid"] = user
        else:
            raise TypeError("User must be a string or an integer")
        _id_ok(kw["uid"], "User")
    return kw


def _cwd_error(cwd: Any, err: OSError) -> OSError:
    """A spawn failure with a cwd given: the chdir's own error when the cwd
    is what failed (subprocess's FileNotFoundError/NotADirectoryError/
    PermissionError with filename=cwd), else the error as it is."""
    import errno as _errno

    path = os.fsdecode(cwd)
    try:
        st = os.stat(path)
    except OSError as e:
        return type(e)(e.errno, e.strerror, path)
    import stat as _stat

    if not _stat.S_ISDIR(st.st_mode):
        return NotADirectoryError(_errno.ENOTDIR, os.strerror(_errno.ENOTDIR), path)
    if not os.access(path, os.X_OK):
        return PermissionError(_errno.EACCES, os.strerror(_errno.EACCES), path)
    return err


def _pty_size(pty: Any) -> Optional[tuple]:
    """``pty=``: None/False (no terminal), True (80x24) or (cols, rows)."""
    if pty is None or pty is False:
        return None
    if pty is True:
        return (80, 24)
    if isinstance(pty, (tuple, list)) and len(pty) == 2:
        cols, rows = pty
        if all(isinstance(n, int) and not isinstance(n, bool) for n in (cols, rows)):
            if 1 <= cols <= 65535 and 1 <= rows <= 65535:
                return (cols, rows)
            raise ValueError(f"pty size must be 1..65535 columns and rows, not {pty!r}")
    raise TypeError(f"pty must be a bool or a (cols, rows) tuple of ints, not {pty!r}")


def _start(
    args: Any,
    *,
    timeout: Optional[float] = None,
    grace: Optional[float] = None,
    wait_delay: Optional[float] = None,
    idle_timeout: Optional[float] = None,
    max_output: Optional[int] = None,
    signal: Union[str, int, None] = None,
    leftovers: Optional[str] = None,
    capture_limit: Optional[int] = None,
    input: Union[bytes, str, None] = None,
    stdin: Any = _DEFAULT,
    stdout: Any = _DEFAULT,
    stderr: Any = _DEFAULT,
    capture_output: bool = False,
    cwd: Union[str, bytes, os.PathLike, None] = None,
    env: Optional[Mapping[Any, Any]] = None,
    shell: bool = False,
    executable: Any = None,
    text: Optional[bool] = None,
    encoding: Optional[str] = None,
    errors: Optional[str] = None,
    universal_newlines: Optional[bool] = None,
    containment: str = "auto",
    confirm_window: Optional[float] = None,
    memory_max: Optional[int] = None,
    pids_max: Optional[int] = None,
    require_crash_safety: bool = False,
    sandbox: Any = None,
    bufsize: int = -1,
    preexec_fn: Any = None,
    close_fds: bool = True,
    pass_fds: Sequence[int] = (),
    startupinfo: Any = None,
    creationflags: int = 0,
    restore_signals: bool = True,
    start_new_session: bool = False,
    process_group: Optional[int] = None,
    user: Any = None,
    group: Any = None,
    extra_groups: Any = None,
    umask: int = -1,
    pipesize: int = -1,
    pty: Any = None,
    _relay: tuple = (None, None),
) -> tuple:
    if capture_output:
        if stdout is not _DEFAULT and stdout is not None or stderr is not _DEFAULT and stderr is not None:
            raise ValueError("stdout and stderr arguments may not be used with capture_output.")
        stdout = stderr = PIPE
    if input is not None and stdin is not _DEFAULT and stdin is not None:
        raise ValueError("stdin and input arguments may not both be used.")
    if text is not None and universal_newlines is not None and bool(universal_newlines) != bool(text):
        raise subprocess.SubprocessError(
            "Cannot disambiguate when both text and universal_newlines are supplied but different. "
            "Pass one or the other."
        )
    extra = _popen_keywords(
        bufsize, preexec_fn, close_fds, pass_fds, startupinfo, creationflags, restore_signals,
        start_new_session, process_group, user, group, extra_groups, umask, pipesize,
    )
    pty_size = _pty_size(pty)
    argv, program = _argv(args, shell, executable)
    text_mode = bool(text or universal_newlines or encoding or errors)
    if isinstance(input, str):
        input = input.encode(encoding or locale.getpreferredencoding(False), errors or "strict")
    stdin_mode = "inherit"
    stdin_fd = None
    if input is not None:
        pass
    elif stdin is None or stdin is _DEFAULT:
        stdin_mode = "inherit"
    elif stdin == DEVNULL:
        stdin_mode = "null"
    elif stdin == PIPE:
        # run(): nothing to write, then end of file (subprocess's
        # communicate(None) closes the pipe at once).
        input = b""
    else:
        s = _stdio(stdin, "stdin")
        if not isinstance(s, int):
            raise ValueError(f"bad stdin: {stdin!r}")
        stdin_fd = s
    out_mode, err_mode = _stdio(stdout, "stdout"), _stdio(stderr, "stderr")
    if _relay[0] is not None:
        out_mode = "inherit"
    if _relay[1] is not None and err_mode != "stdout":
        err_mode = "inherit"
    captured = (out_mode == "capture", err_mode == "capture")
    for a in argv if program is None else [*argv, program]:
        if "\0" in a:
            raise ValueError("embedded null byte")
    env_list = None
    if env is not None:
        env_list = []
        for k, v in env.items():
            k, v = os.fsdecode(k), os.fsdecode(v)
            if "\0" in k or "\0" in v:
                raise ValueError("embedded null byte")
            if "=" in k or not k:
                raise ValueError("illegal environment variable name")
            env_list.append((k, v))
    try:
        job = _corral.start(
            argv,
            cwd=os.fsdecode(cwd) if cwd is not None else None,
            env=env_list,
            input=bytes(input) if input is not None else None,
            stdin=stdin_mode,
            stdin_fd=stdin_fd,
            stdout=out_mode,
            stderr=err_mode,
            stdout_relay=_relay[0],
            stderr_relay=_relay[1] if err_mode != "stdout" else None,
            timeout=timeout,
            grace=grace,
            wait_delay=wait_delay,
            idle_timeout=idle_timeout,
            max_output=max_output,
            signal=signal,
            leftovers=leftovers,
            capture_limit=capture_limit,
            containment=containment,
            confirm_window=confirm_window,
            memory_max=memory_max,
            pids_max=pids_max,
            require_crash_safety=bool(require_crash_safety),
            sandbox=_sandbox(sandbox),
            **({"program": program} if program is not None else {}),
            **({"pty": pty_size} if pty_size is not None else {}),
            **extra,
        )
    except _corral.ContainmentUnavailable as e:
        raise ContainmentError(str(e)) from None
    except _corral.SandboxUnavailable as e:
        raise SandboxError(str(e)) from None
    except OSError as e:
        if cwd is not None:
            raise _cwd_error(cwd, e) from None
        raise
    return job, (args, text_mode, encoding, errors, (timeout, idle_timeout), captured)


def _result(job_report: Dict[str, Any], meta: tuple) -> Result:
    args, text_mode, encoding, errors, (timeout, idle_timeout), captured = meta
    r = Result(args, job_report, text_mode, encoding, errors)
    # As subprocess: None for a stream that was not captured (and its byte
    # count: corral did not see those bytes, as the CLI's null).
    if not captured[0]:
        r.stdout = None
        r.stdout_bytes = None
    if not captured[1]:
        r.stderr = None
        r.stderr_bytes = None
    # The limit that fired, for `TimeoutExpired.timeout`: the idle timeout
    # when it was the one.
    r.timeout = idle_timeout if r.timeout_kind == "idle" else timeout
    return r


def _cleanup_bound(kw: Mapping[str, Any]) -> float:
    # The confirm window stretches while the tree is visibly dying: its
    # limit is 10 times the window, at least 5 s, and a tree that keeps
    # dying is waited for up to 6 such limits from the SIGKILL.
    window = kw.get("confirm_window")
    window = 1.0 if window is None else window
    return (kw.get("grace") or 0.0) + 6 * max(10 * window, 5.0) + _CLEANUP_SLACK


_POPEN_POSITIONAL = (
    "bufsize",
    "executable",
    "stdin",
    "stdout",
    "stderr",
    "preexec_fn",
    "close_fds",
    "shell",
    "cwd",
    "env",
    "universal_newlines",
    "startupinfo",
    "creationflags",
    "restore_signals",
    "start_new_session",
    "pass_fds",
)


def _popen_args(popenargs: tuple, kwargs: Dict[str, Any]) -> Any:
    """subprocess's positional Popen arguments (args, bufsize, executable,
    ...) folded into kwargs; returns args."""
    if not popenargs:
        if "args" not in kwargs:
            raise TypeError("run() missing 1 required positional argument: 'args'")
        return kwargs.pop("args")
    if len(popenargs) > 1 + len(_POPEN_POSITIONAL):
        raise TypeError("too many positional arguments")
    for name, value in zip(_POPEN_POSITIONAL, popenargs[1:]):
        if name in kwargs:
            raise TypeError(f"got multiple values for argument {name!r}")
        kwargs[name] = value
    return popenargs[0]


def _finish_run(r: Result, check: bool) -> Result:
    # As subprocess: a timeout always raises (the tree is already killed).
    if r.outcome == "timed_out":
        raise TimeoutExpired(r, r.args, r.timeout or 0.0)
    if check:
        r.check_returncode()
    return r


def run(*popenargs: Any, check: bool = False, **kwargs: Any) -> Result:
    """Runs a command with its whole process tree contained; returns a
    :class:`Result` in bounded time.

    ``args``: a list (``["make", "check"]``), or a string with
    ``shell=True`` (run by ``/bin/sh -c``).

    Time (seconds, float): ``timeout`` (none by default: the tree is
    terminated when it passes), ``grace`` (between the first signal,
    ``signal="TERM"``, and SIGKILL; default 0: SIGKILL at once),
    ``wait_delay`` (after the command exits, how long descendants may hold
    its output open before they are killed: outcome ``"output_held"``;
    default 2), ``idle_timeout`` (the tree is terminated, like at the
    timeout, when no output arrived on a captured stream for that long:
    outcome ``"timed_out"`` with ``result.timeout_kind == "idle"``; the
    timer starts at the spawn and runs until the run ends, wait delay
    included; ValueError when neither stdout nor stderr is captured).

    ``max_output`` (bytes): stdout and stderr together may carry that many
    bytes; one more ends the run (outcome ``"output_limit"``): no more than
    ``max_output`` bytes are kept, the tree is terminated like at the
    timeout, and ``stdout_bytes``/``stderr_bytes`` count every byte read,
    the dropped ones included. ``result.timeout_kind`` says which limit
    ended a ``"timed_out"`` run (``"deadline"`` or ``"idle"``; None
    otherwise).

    ``pty=True`` (80x24) or ``pty=(cols, rows)`` (Unix): the command runs
    on a new pseudo-terminal, the controlling terminal of its session: its
    stdin, stdout and stderr are the terminal (``isatty`` is true, ``tput
    cols`` answers). What it writes comes out as stdout, with the
    terminal's line discipline (``\n`` as ``\r\n``, typed input echoed):
    captured, passed on or counted as ``stdout`` says, under
    ``idle_timeout`` and ``max_output``; ``stderr`` is not used
    (``stderr_bytes`` is 0). ``input`` (or the stdin given) is typed on the
    terminal, then the end-of-file character (Ctrl-D) once. A descendant
    still holding the terminal past ``wait_delay`` after the command exits
    is killed (``"output_held"``). The tree is contained as without it.

    ``leftovers``: what happens to descendants still running after a clean
    exit: ``"keep-on-success"`` (default: kept after exit 0, killed after
    anything else), ``"kill"`` or ``"keep"``.

    Streams, as in ``subprocess``: inherited unless asked for;
    ``capture_output=True`` or ``stdout=PIPE`` / ``stderr=PIPE`` capture, at
    most ``capture_limit`` bytes each (default 16 MiB; half head, half tail;
    what is left out is counted in ``stdout_omitted``); ``DEVNULL``
    discards, a file object or descriptor receives it, ``stderr=STDOUT``
    merges. ``input`` (bytes, or str) is written to stdin.
    ``text=True`` (or ``encoding``/``errors``) decodes the output to str.
    Every ``subprocess.Popen`` keyword is accepted with its meaning
    (``executable``, ``close_fds``, ``pass_fds``, ``start_new_session``,
    ``process_group``, ``user``, ``group``, ``extra_groups``, ``umask``,
    ``restore_signals``, ``bufsize``, ``pipesize``), but ``preexec_fn``
    (no Python code runs in corral's child: ``ValueError``).

    ``cwd``; ``env`` replaces the environment as in ``subprocess``.
    ``containment``: ``"auto"`` (the strongest available: a cgroup, else the
    subreaper tier if :func:`enable_subreaper` was called, else a process
    group), ``"cgroup"``, ``"pid_namespace"`` (Linux, also unprivileged;
    never picked by auto), ``"subreaper"``, ``"process_group"``,
    ``"job_object"``; ``memory_max`` (bytes) and ``pids_max`` cap the tree
    (need a cgroup). ``confirm_window``: how long to wait for the tree to be
    gone after SIGKILL before reporting survivors (default 1; a tree still
    visibly dying is waited for, up to 10 times the window, at least 5 s).
    ``require_crash_safety=True``: raise :class:`ContainmentError` (nothing
    run) rather than run a command whose tree would outlive this process's
    own death (the keeper that kills it then could not be started); by
    default the run goes ahead and ``result.crash_safe`` is False.

    ``sandbox=True`` (or a :class:`Sandbox`) confines the tree: writes only
    in ``cwd``, a private /tmp and the policy's ``allow_write`` paths; no
    network by default; see :class:`Sandbox`. Where the sandbox cannot be
    enforced, :class:`SandboxError` is raised and nothing runs.

    As ``subprocess.run``, a timeout always raises :class:`TimeoutExpired`
    (a ``subprocess.TimeoutExpired`` carrying the result; the whole tree is
    killed first). ``check=True`` raises unless the command exited 0 with
    every lifecycle step clean: :class:`CalledProcessError` (a
    ``subprocess.CalledProcessError``), :class:`Signaled` (one too,
    ``returncode`` -N), :class:`OutputHeld`, :class:`Cancelled`,
    :class:`CleanupFailed`, all :class:`CorralError` with ``.result``.
    A program that cannot be started raises ``FileNotFoundError`` /
    ``PermissionError`` (``OSError``); out of file descriptors, an
    ``OSError`` with ``errno.EMFILE`` (or ``ENFILE``) whose message names
    the limit (see :func:`raise_nofile_limit`), nothing left running;
    unavailable containment (or crash safety, when required) raises
    :class:`ContainmentError`; a sandbox that cannot be enforced,
    :class:`SandboxError`.

    The GIL is released while the run is supervised. Ctrl-C
    (KeyboardInterrupt) while ``run`` waits kills the tree, waits for the
    cleanup, and re-raises.
    """
    args = _popen_args(popenargs, kwargs)
    job, meta = _start(args, **kwargs)
    try:
        report = job.wait()
    except BaseException:
        job.cancel()
        job.wait_quiet(_cleanup_bound(kwargs))
        raise
    return _finish_run(_result(report, meta), check)


def call(*popenargs: Any, timeout: Optional[float] = None, **kwargs: Any) -> Optional[int]:
    """As ``subprocess.call``: runs the command (tree contained) and returns
    its ``returncode``; a timeout raises :class:`TimeoutExpired`."""
    return run(*popenargs, timeout=timeout, **kwargs).returncode


def check_call(*popenargs: Any, **kwargs: Any) -> int:
    """As ``subprocess.check_call``: returns 0 or raises
    :class:`CalledProcessError` (``output`` None, as subprocess)."""
    args = _popen_args(popenargs, kwargs)
    r = run(args, **kwargs)
    if r.outcome != "exited" or r.returncode != 0:
        exc = _error_for(r)
        if exc is not None:
            raise exc
    return 0


def check_output(*popenargs: Any, timeout: Optional[float] = None, **kwargs: Any) -> Any:
    """As ``subprocess.check_output``: the captured stdout, or raises."""
    for kw in ("stdout", "check"):
        if kw in kwargs:
            raise ValueError(f"{kw} argument not allowed, it will be overridden.")
    if "input" in kwargs and kwargs["input"] is None:
        # As subprocess: input=None means an empty input, not inherit.
        text_mode = kwargs.get("universal_newlines") or kwargs.get("text") or kwargs.get("encoding") or kwargs.get("errors")
        kwargs["input"] = "" if text_mode else b""
    return run(*popenargs, stdout=PIPE, timeout=timeout, check=True, **kwargs).stdout


def getstatusoutput(cmd: Any, *, encoding: Optional[str] = None, errors: Optional[str] = None) -> tuple:
    """As ``subprocess.getstatusoutput``: ``(exitcode, output)`` of a shell
    command, stderr merged, one trailing newline removed."""
    try:
        data = check_output(cmd, shell=True, text=True, stderr=STDOUT, encoding=encoding, errors=errors)
        exitcode = 0
    except subprocess.CalledProcessError as ex:
        data = ex.output
        exitcode = ex.returncode
    if data[-1:] == "\n":
        data = data[:-1]
    return exitcode, data


def getoutput(cmd: Any, *, encoding: Optional[str] = None, errors: Optional[str] = None) -> str:
    """As ``subprocess.getoutput``: the output of a shell command."""
    return getstatusoutput(cmd, encoding=encoding, errors=errors)[1]


async def run_async(args: Any, *, check: bool = False, **kwargs: Any) -> Result:
    """``await corral.run_async(...)``: :func:`run` for asyncio, same
    arguments and result. No thread per command: every run is driven by one
    shared background thread. Cancelling the awaiting task kills the tree
    (the cancellation completes once the tree is cleaned up)."""
    import asyncio  # here: importing asyncio costs about 8 MB of memory

    loop = asyncio.get_running_loop()
    fut = loop.create_future()

    def _wake(f: Any = fut) -> None:
        if not f.done():
            f.set_result(None)

    def _done() -> None:  # on the runtime thread, with the GIL
        try:
            loop.call_soon_threadsafe(_wake)
        except RuntimeError:  # the loop is closed
            pass

    job, meta = _start(args, **kwargs)
    if not job.on_done(_done):
        _wake()
    try:
        await asyncio.shield(fut)
    except asyncio.CancelledError:
        job.cancel()
        try:
            await asyncio.wait_for(asyncio.shield(fut), _cleanup_bound(kwargs))
        except (asyncio.CancelledError, asyncio.TimeoutError):
            pass
        raise
    report = job.poll()
    return _finish_run(_result(report, meta), check)


class Process:
    """A running command (from :func:`spawn`), like ``subprocess.Popen``.

    ``pid``; ``poll()`` (None while running, else the :class:`Result`);
    ``wait(timeout=None)`` (the :class:`Result`; raises
    :class:`TimeoutExpired` with ``result=None`` if ``timeout`` passes first,
    the run going on); ``cancel()`` (terminate the tree); ``returncode`` and
    ``result`` once finished. Used as a context manager, leaving the block
    cancels a run still going and waits for it. A Process garbage-collected
    before its run ended cancels it, and at interpreter exit every live run is
    cancelled: the tree is killed, not leaked.
    """

    def __init__(self, args: Any, check: bool = False, **kwargs: Any):
        self.args = args
        self._check = check
        self._kwargs = kwargs
        self._job, self._meta = _start(args, **kwargs)
        self.pid: int = self._job.pid
        self.result: Optional[Result] = None

    @property
    def returncode(self) -> Optional[int]:
        """``result.returncode`` once finished (None while running, and for a
        run that did not merely exit)."""
        return self.result.returncode if self.result is not None else None

    def _finish(self, report: Dict[str, Any]) -> Result:
        if self.result is None:
            self.result = _result(report, self._meta)
        if self._check:
            self.result.check_returncode()
        return self.result

    def poll(self) -> Optional[Result]:
        report = self._job.poll()
        return None if report is None else self._finish(report)

    def wait(self, timeout: Optional[float] = None) -> Result:
        report = self._job.wait(timeout)
        if report is None:
            raise TimeoutExpired(None, self.args, timeout or 0.0)
        return self._finish(report)

    def cancel(self) -> None:
        """Terminates the tree (first signal, SIGKILL after the grace). Idempotent."""
        self._job.cancel()

    def send_signal(self, sig: Union[int, str]) -> None:
        """Cancels the run with ``sig`` as the first signal (to the whole tree)."""
        self._job.cancel_with(sig)

    terminate = cancel

    def kill(self) -> None:
        """Cancels the run with SIGKILL to the whole tree."""
        self._job.cancel_with("KILL")

    def __enter__(self) -> "Process":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.result is None:
            if not self._job.done():
                self._job.cancel()
            try:
                self._job.wait()
            except BaseException:
                self._job.wait_quiet(_cleanup_bound(self._kwargs))
                raise
            self._finish(self._job.poll())

    def __repr__(self) -> str:
        state = "running" if self.result is None else self.result.outcome
        return f"<corral.Process pid={self.pid} {state}>"


def spawn(args: Any, *, check: bool = False, **kwargs: Any) -> Process:
    """Starts a command and returns a :class:`Process` handle (the
    ``subprocess.Popen`` of corral). Same arguments as :func:`run`; the
    deadline counts from now and the run is supervised in the background."""
    return Process(args, check=check, **kwargs)


def _translate(data: bytes, encoding: Optional[str], errors: Optional[str]) -> str:
    return _text(data, encoding or locale.getpreferredencoding(False), errors or "strict")


class Popen:
    """``subprocess.Popen`` with the whole tree contained.

    Same signature and behaviour as ``subprocess.Popen``: ``stdin`` /
    ``stdout`` / ``stderr`` (``PIPE`` gives file objects; text mode with
    ``text`` / ``universal_newlines`` / ``encoding`` / ``errors``),
    ``communicate(input, timeout)``, ``poll()``, ``wait(timeout)``,
    ``send_signal()``, ``terminate()``, ``kill()``, ``returncode``,
    ``pid``, a context manager. Differences, each for a promise (see the
    table in docs/differences.md): signals go to the whole tree; a descendant that holds a
    ``PIPE`` open after the command exited is killed after ``wait_delay``
    (default 2 s), so ``communicate()`` and reading to end of file return in
    bounded time; the tree is killed when the handle is garbage-collected
    while running, and at interpreter exit; ``returncode`` is set once the
    whole lifecycle ended (descendants handled, output closed). corral's
    own keywords are accepted too (``timeout`` as a deadline for the whole
    run, ``grace``, ``wait_delay``, ``leftovers``, ``containment``, ...).
    ``result``: the :class:`Result` with corral's report once it ended.
    """

    def __init__(
        self,
        args: Any,
        bufsize: int = -1,
        executable: Any = None,
        stdin: Any = None,
        stdout: Any = None,
        stderr: Any = None,
        preexec_fn: Any = None,
        close_fds: bool = True,
        shell: bool = False,
        cwd: Any = None,
        env: Optional[Mapping[Any, Any]] = None,
        universal_newlines: Optional[bool] = None,
        startupinfo: Any = None,
        creationflags: int = 0,
        restore_signals: bool = True,
        start_new_session: bool = False,
        pass_fds: Sequence[int] = (),
        *,
        user: Any = None,
        group: Any = None,
        extra_groups: Any = None,
        encoding: Optional[str] = None,
        errors: Optional[str] = None,
        text: Optional[bool] = None,
        umask: int = -1,
        pipesize: int = -1,
        process_group: Optional[int] = None,
        **corral_kw: Any,
    ):
        import io

        self.args = args
        self.stdin: Any = None
        self.stdout: Any = None
        self.stderr: Any = None
        self.returncode: Optional[int] = None
        self.result: Optional[Result] = None
        self.pid: Optional[int] = None
        self._job: Any = None
        self._communication_started = False
        self._fileobj2output: Dict[Any, List[bytes]] = {}
        self._input: Optional[memoryview] = None
        self._input_offset = 0
        self.encoding = encoding
        self.errors = errors
        self.pipesize = pipesize
        if text is not None and universal_newlines is not None and bool(universal_newlines) != bool(text):
            raise subprocess.SubprocessError(
                "Cannot disambiguate when both text and universal_newlines are supplied but different. "
                "Pass one or the other."
            )
        self.text_mode = bool(text or universal_newlines or encoding or errors)
        self.universal_newlines = self.text_mode
        if bufsize is None:
            bufsize = -1
        if not isinstance(bufsize, int):
            raise TypeError("bufsize must be an integer")
        line_buffering = bufsize == 1 and self.text_mode
        if bufsize == 1:
            if not self.text_mode:
                import warnings

                warnings.warn(
                    "line buffering (buffering=1) isn't supported in binary mode, "
                    "the default buffer size will be used",
                    RuntimeWarning,
                )
            bufsize = -1
        if "input" in corral_kw:
            raise TypeError("Popen() got an unexpected keyword argument 'input' (use communicate(input))")
        child_ends: List[int] = []
        mine: List[Any] = []
        relay: List[Optional[int]] = [None, None]
        try:
            if stdin == PIPE:
                r, w = self._pipe()
                child_ends.append(r)
                stdin = r
                self.stdin = io.open(w, "wb", bufsize)
                mine.append(self.stdin)
                if self.text_mode:
                    self.stdin = io.TextIOWrapper(
                        self.stdin, write_through=True, line_buffering=line_buffering, encoding=encoding, errors=errors
                    )
            if stdout == PIPE:
                r, w = self._pipe()
                child_ends.append(w)
                relay[0] = w
                self.stdout = io.open(r, "rb", bufsize)
                mine.append(self.stdout)
                if self.text_mode:
                    self.stdout = io.TextIOWrapper(self.stdout, encoding=encoding, errors=errors)
            if stderr == PIPE:
                r, w = self._pipe()
                child_ends.append(w)
                relay[1] = w
                self.stderr = io.open(r, "rb", bufsize)
                mine.append(self.stderr)
                if self.text_mode:
                    self.stderr = io.TextIOWrapper(self.stderr, encoding=encoding, errors=errors)
            elif stderr == STDOUT and stdout is None:
                # As subprocess: stderr goes where stdout goes (inherited).
                stderr = 1
            self._job, self._meta = _start(
                args,
                stdin=stdin,
                stdout=stdout if stdout != PIPE else None,
                stderr=stderr if stderr != PIPE else None,
                bufsize=bufsize,
                executable=executable,
                preexec_fn=preexec_fn,
                close_fds=close_fds,
                shell=shell,
                cwd=cwd,
                env=env,
                startupinfo=startupinfo,
                creationflags=creationflags,
                restore_signals=restore_signals,
                start_new_session=start_new_session,
                pass_fds=pass_fds,
                user=user,
                group=group,
                extra_groups=extra_groups,
                umask=umask,
                pipesize=pipesize,
                process_group=process_group,
                text=self.text_mode,
                encoding=encoding,
                errors=errors,
                _relay=tuple(relay),
                **corral_kw,
            )
        except BaseException:
            for f in mine:
                try:
                    f.close()
                except OSError:
                    pass
            raise
        finally:
            for fd in child_ends:
                os.close(fd)
        self._cleanup_kw = corral_kw
        self.pid = self._job.pid

    __class_getitem__ = classmethod(__import__("types").GenericAlias)

    def _pipe(self) -> tuple:
        r, w = os.pipe()
        if self.pipesize is not None and self.pipesize > 0 and hasattr(__import__("fcntl"), "F_SETPIPE_SZ"):
            import fcntl

            fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, self.pipesize)
        return r, w

    # -- state

    def _set(self, report: Dict[str, Any]) -> Optional[int]:
        if self.result is None:
            self.result = _result(report, self._meta)
            self.returncode = self.result.returncode
        return self.returncode

    def poll(self) -> Optional[int]:
        """The returncode once the run ended, else None."""
        if self.result is None:
            report = self._job.poll()
            if report is not None:
                self._set(report)
        return self.returncode

    def wait(self, timeout: Optional[float] = None) -> Optional[int]:
        """Waits for the run to end and returns ``returncode``; raises
        :class:`TimeoutExpired` (``result`` None, the run goes on) when
        ``timeout`` passes first."""
        if self.result is None:
            report = self._job.wait(timeout)
            if report is None:
                raise TimeoutExpired(None, self.args, timeout or 0.0)
            self._set(report)
        return self.returncode

    # -- signals

    def send_signal(self, sig: int) -> None:
        """Sends ``sig`` to the whole tree (nothing once the run ended: the
        tree's identity is released, a pid is never signalled blindly)."""
        if self.poll() is not None:
            return
        if not self._job.signal(int(sig)):
            if not self._job.done():
                self._job.cancel_with(int(sig))

    def terminate(self) -> None:
        """SIGTERM to the whole tree."""
        import signal as _signal

        self.send_signal(_signal.SIGTERM if os.name != "nt" else 15)

    def kill(self) -> None:
        """Kills the whole tree (SIGKILL to every process in it, then the
        death of each is confirmed)."""
        if self.poll() is not None:
            return
        self._job.cancel_with("KILL")

    # -- I/O

    def _stdin_write(self, input: Any) -> None:
        if input:
            try:
                self.stdin.write(input)
            except BrokenPipeError:
                pass
            except OSError as exc:
                import errno as _errno

                if exc.errno != _errno.EINVAL:
                    raise
        try:
            self.stdin.close()
        except BrokenPipeError:
            pass
        except OSError as exc:
            import errno as _errno

            if exc.errno != _errno.EINVAL:
                raise

    def communicate(self, input: Any = None, timeout: Optional[float] = None) -> tuple:
        """As ``subprocess.Popen.communicate``: writes ``input``, reads
        stdout and stderr to end of file, waits; returns ``(stdout,
        stderr)``. Bounded even when a descendant holds a pipe open: it is
        killed after the wait delay and the pipe closes."""
        import time

        if self._communication_started and input:
            raise ValueError("Cannot send input after starting communication")
        if timeout is None and not self._communication_started and [self.stdin, self.stdout, self.stderr].count(None) >= 2:
            stdout = stderr = None
            if self.stdin:
                self._stdin_write(input)
            elif self.stdout:
                stdout = self.stdout.read()
                self.stdout.close()
            elif self.stderr:
                stderr = self.stderr.read()
                self.stderr.close()
            self.wait()
            return (stdout, stderr)
        endtime = None if timeout is None else time.monotonic() + timeout
        try:
            stdout, stderr = self._communicate(input, endtime, timeout)
        finally:
            self._communication_started = True
        self.wait(None if endtime is None else max(0.0, endtime - time.monotonic()))
        return (stdout, stderr)

    def _communicate(self, input: Any, endtime: Optional[float], orig_timeout: Optional[float]) -> tuple:
        import selectors
        import time

        if self.stdin and not self._communication_started:
            try:
                self.stdin.flush()
            except BrokenPipeError:
                pass
            if not input:
                try:
                    self.stdin.close()
                except BrokenPipeError:
                    pass
        if not self._communication_started:
            self._fileobj2output = {}
            if self.stdout:
                self._fileobj2output[self.stdout] = []
            if self.stderr:
                self._fileobj2output[self.stderr] = []
            if self.stdin and input:
                if self.text_mode:
                    input = input.encode(self.stdin.encoding, self.stdin.errors)
                self._input = memoryview(input)
                self._input_offset = 0
        stdout = self._fileobj2output.get(self.stdout) if self.stdout else None
        stderr = self._fileobj2output.get(self.stderr) if self.stderr else None
        with selectors.PollSelector() as sel:
            if self.stdin and self._input is not None and not self.stdin.closed:
                # Non-blocking: each write takes what the pipe has room for,
                # not PIPE_BUF bytes per wake-up.
                os.set_blocking(self.stdin.fileno(), False)
                sel.register(self.stdin, selectors.EVENT_WRITE)
            if self.stdout and not self.stdout.closed:
                sel.register(self.stdout, selectors.EVENT_READ)
            if self.stderr and not self.stderr.closed:
                sel.register(self.stderr, selectors.EVENT_READ)
            while sel.get_map():
                remaining = None if endtime is None else endtime - time.monotonic()
                if remaining is not None and remaining < 0:
                    raise TimeoutExpired(None, self.args, orig_timeout or 0.0)
                # In slices, so that a stdin nobody will read any more (the
                # run ended, a descendant kept it open) is given up.
                ready = sel.select(0.1 if remaining is None else min(remaining, 0.1))
                for key, _events in ready:
                    if key.fileobj is self.stdin:
                        assert self._input is not None
                        chunk = self._input[self._input_offset : self._input_offset + (1 << 20)]
                        try:
                            self._input_offset += os.write(key.fd, chunk)
                        except BlockingIOError:
                            continue
                        except BrokenPipeError:
                            sel.unregister(key.fileobj)
                            key.fileobj.close()
                        else:
                            if self._input_offset >= len(self._input):
                                sel.unregister(key.fileobj)
                                key.fileobj.close()
                    else:
                        data = os.read(key.fd, 32768)
                        if not data:
                            sel.unregister(key.fileobj)
                            key.fileobj.close()
                        self._fileobj2output[key.fileobj].append(data)
                if self._job.done() and self.stdin and not self.stdin.closed:
                    try:
                        sel.unregister(self.stdin)
                    except (KeyError, ValueError):
                        pass
                    try:
                        self.stdin.close()
                    except OSError:
                        pass
        out = b"".join(stdout) if stdout is not None else None
        err = b"".join(stderr) if stderr is not None else None
        if self.text_mode:
            if out is not None:
                out = _translate(out, self.stdout.encoding, self.stdout.errors)
            if err is not None:
                err = _translate(err, self.stderr.encoding, self.stderr.errors)
        return (out, err)

    # -- context manager

    def __enter__(self) -> "Popen":
        return self

    def __del__(self, _warn: Any = __import__("warnings").warn) -> None:
        # As subprocess: a handle dropped while its command runs is a bug
        # worth a ResourceWarning. Unlike subprocess, the tree is then killed
        # (the job's drop cancels the run): nothing is left behind.
        job = getattr(self, "_job", None)
        if job is not None and self.result is None and not job.done():
            _warn(f"subprocess {self.pid} is still running", ResourceWarning, source=self)

    def __exit__(self, exc_type: Any, value: Any, traceback: Any) -> None:
        if self.stdout:
            self.stdout.close()
        if self.stderr:
            self.stderr.close()
        try:  # as subprocess: a flush that fails (EPIPE) is raised, after the wait
            if self.stdin:
                self.stdin.close()
        finally:
            try:
                self.wait()
            except BaseException:
                self._job.cancel()
                self._job.wait_quiet(_cleanup_bound(self._cleanup_kw))
                raise

    def __repr__(self) -> str:
        return f"<corral.Popen: returncode: {self.returncode} args: {self.args!r}>"


class AsyncProcess:
    """What :func:`create_subprocess_exec` returns, as
    ``asyncio.subprocess.Process``: ``stdin`` (a ``StreamWriter``),
    ``stdout`` / ``stderr`` (``StreamReader``), ``pid``, ``returncode``,
    ``wait()``, ``communicate(input)``, ``send_signal``, ``terminate``,
    ``kill`` (on the whole tree); ``result``: the :class:`Result` once it
    ended."""

    def __init__(self, popen: Popen, stdin: Any, stdout: Any, stderr: Any) -> None:
        self._popen = popen
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = stderr
        self.pid = popen.pid
        self._fut: Any = None

    @property
    def returncode(self) -> Optional[int]:
        return self._popen.poll()

    @property
    def result(self) -> Optional[Result]:
        self._popen.poll()
        return self._popen.result

    def _ended(self) -> Any:
        """One future per process, set once the run ended (the job takes one
        completion callback: every waiter shares it)."""
        import asyncio

        if self._fut is None:
            loop = asyncio.get_running_loop()
            fut = loop.create_future()

            def _wake(f: Any = fut) -> None:
                if not f.done():
                    f.set_result(None)

            def _done() -> None:
                try:
                    loop.call_soon_threadsafe(_wake)
                except RuntimeError:  # the loop is closed
                    pass

            if not self._popen._job.on_done(_done):
                _wake()
            self._fut = fut
        return self._fut

    async def wait(self) -> Optional[int]:
        """Waits for the run to end; returns ``returncode``. Cancelling the
        wait leaves the run going, as asyncio's."""
        import asyncio

        await asyncio.shield(self._ended())
        return self._popen.poll()

    async def communicate(self, input: Optional[bytes] = None) -> tuple:
        import asyncio

        async def feed() -> None:
            if self.stdin is None:
                return
            if input:
                self.stdin.write(input)
                try:
                    await self.stdin.drain()
                except (BrokenPipeError, ConnectionResetError):
                    pass
            self.stdin.close()

        async def read(s: Any) -> Optional[bytes]:
            if s is None:
                return None
            return await s.read()

        _, out, err = await asyncio.gather(feed(), read(self.stdout), read(self.stderr))
        await self.wait()
        return (out, err)

    def send_signal(self, sig: int) -> None:
        self._popen.send_signal(sig)

    def terminate(self) -> None:
        self._popen.terminate()

    def kill(self) -> None:
        self._popen.kill()

    def __repr__(self) -> str:
        return f"<corral.AsyncProcess {self.pid}>"


async def create_subprocess_exec(
    program: Any, *args: Any, stdin: Any = None, stdout: Any = None, stderr: Any = None, limit: int = 2**16, **kwds: Any
) -> AsyncProcess:
    """As ``asyncio.create_subprocess_exec``, with the whole tree contained
    (corral's keywords accepted too)."""
    return await _create(False, [program, *args], stdin, stdout, stderr, limit, kwds)


async def create_subprocess_shell(
    cmd: Any, stdin: Any = None, stdout: Any = None, stderr: Any = None, limit: int = 2**16, **kwds: Any
) -> AsyncProcess:
    """As ``asyncio.create_subprocess_shell``, with the whole tree contained."""
    return await _create(True, cmd, stdin, stdout, stderr, limit, kwds)


async def _create(shell: bool, args: Any, stdin: Any, stdout: Any, stderr: Any, limit: int, kwds: Dict[str, Any]) -> AsyncProcess:
    import asyncio

    for k in ("universal_newlines", "text", "encoding", "errors"):
        if kwds.get(k):
            raise ValueError(f"{k} must be False" if k != "encoding" and k != "errors" else f"{k} must be None")
    if kwds.get("bufsize", 0) not in (0, -1):
        raise ValueError("bufsize must be 0")
    kwds.pop("bufsize", None)
    loop = asyncio.get_running_loop()
    p = Popen(args, shell=shell, stdin=stdin, stdout=stdout, stderr=stderr, bufsize=0, **kwds)
    w = r_out = r_err = None
    try:
        if p.stdin is not None:
            proto = asyncio.StreamReaderProtocol(asyncio.StreamReader(limit=limit))
            transport, _ = await loop.connect_write_pipe(lambda: proto, p.stdin)
            w = asyncio.StreamWriter(transport, proto, None, loop)
        for which in ("stdout", "stderr"):
            f = getattr(p, which)
            if f is None:
                continue
            reader = asyncio.StreamReader(limit=limit)
            await loop.connect_read_pipe(lambda rd=reader: asyncio.StreamReaderProtocol(rd), f)
            if which == "stdout":
                r_out = reader
            else:
                r_err = reader
    except BaseException:
        p.kill()
        raise
    return AsyncProcess(p, w, r_out, r_err)


CompletedProcess = Result


def _at_exit() -> None:
    # Every run still live is cancelled and its tree killed before the
    # interpreter goes away.
    _corral._shutdown(60.0)


atexit.register(_at_exit)
