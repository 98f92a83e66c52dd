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
    "run",
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
    "enable_subreaper",
    "raise_nofile_limit",
    "PIPE",
    "STDOUT",
    "DEVNULL",
]

PIPE = subprocess.PIPE
STDOUT = subprocess.STDOUT
DEVNULL = subprocess.DEVNULL

#: How long the cleanup after an interrupt or a cancelled task may take before
#: corral stops waiting for it (the library bounds it by the grace plus the
#: confirm window; this is a backstop).
_CLEANUP_SLACK = 30.0

enable_subreaper = _corral.enable_subreaper
raise_nofile_limit = _corral.raise_nofile_limit


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


class Result:
    """What happened to one run.

    ``outcome``: ``"exited"``, ``"signaled"``, ``"timed_out"``,
    ``"cancelled"``, ``"output_held"``, ``"output_limit"`` or
    ``"cleanup_failed"``; ``timeout_kind``: ``"deadline"`` or ``"idle"`` on
    a ``"timed_out"`` run, else None.
    ``returncode``: the exit code only when every lifecycle step was clean,
    else None. ``exit_code`` / ``signal``: how the root process itself ended
    (also after a timeout). ``stdout`` / ``stderr``: head and tail of the
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
    (names, or numbers for unnamed ones). ``cleanup_error``: why the
    cleanup failed (or None); ``survivors``: the pids that survived
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
        "cleanup_error",
        "survivors",
        "timings",
        "usage",
        "limits_hit",
        "pid",
        "timeout",
    )

    def __init__(self, args: Any, report: Dict[str, Any], text: bool, encoding: Optional[str], errors: Optional[str]):
        self.args = args
        self.report = report
        self.outcome: str = report["outcome"]
        self.timeout_kind: Optional[str] = report.get("timeout_kind")
        self.returncode: Optional[int] = report["returncode"]
        self.exit_code: Optional[int] = report["exit_code"]
        self.signal: Optional[int] = report["signal"]
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
        self.cleanup_error: Optional[str] = report["cleanup_error"]
        self.survivors: List[int] = list(report["survivors"])
        self.timings = Timings(**report["timings"])
        self.usage: Optional[Usage] = Usage(**report["usage"]) if report["usage"] is not None else None
        self.limits_hit: List[str] = list(report["limits_hit"])
        self.pid: int = report["pid"]
        self.timeout: Optional[float] = None
        out, err = report["stdout"], report["stderr"]
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
        return self.returncode == 0

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

    def __init__(self, result: Optional[Result], cmd: Any, timeout: float):
        subprocess.TimeoutExpired.__init__(
            self,
            cmd,
            timeout,
            output=result.stdout if result else None,
            stderr=result.stderr if result else None,
        )
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


class Signaled(_ResultError):
    """The command was ended by a signal corral did not send."""


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
        return Signaled(r, f"command {r.args!r} was killed by signal {r.signal}")
    if r.outcome == "cancelled":
        return Cancelled(r, f"command {r.args!r} was cancelled")
    if r.returncode is not None and r.returncode != 0:
        return CalledProcessError(r)
    return None


_DEFAULT: Any = object()


def _stdio(value: Any, name: str) -> Any:
    """subprocess-style stream spec -> what _corral.start takes."""
    if value is _DEFAULT or value == PIPE:
        return "capture"
    if value is None:
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


def _argv(args: Any, shell: bool, executable: Optional[str]) -> list:
    if shell:
        # As subprocess: a string is the command; a list's first item is the
        # command and the rest its positional parameters ($0, $1, ...).
        if os.name == "nt":
            if not isinstance(args, (str, bytes)):
                args = subprocess.list2cmdline([os.fsdecode(a) for a in args])
            comspec = os.environ.get("COMSPEC", "cmd.exe")
            return [executable or comspec, "/c", os.fsdecode(args)]
        rest = [os.fsdecode(args)] if isinstance(args, (str, bytes)) else [os.fsdecode(a) for a in args]
        if not rest:
            raise ValueError("args is empty")
        return [executable or "/bin/sh", "-c", *rest]
    if isinstance(args, (str, bytes, os.PathLike)):
        argv = [os.fsdecode(args)]
    else:
        argv = [os.fsdecode(a) for a in args]
    if not argv:
        raise ValueError("args is empty")
    if executable is not None:
        argv[0] = os.fsdecode(executable)
    return argv


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
    capture_output: Optional[bool] = None,
    cwd: Union[str, bytes, os.PathLike, None] = None,
    env: Optional[Mapping[Any, Any]] = None,
    shell: bool = False,
    executable: Optional[str] = None,
    text: Optional[bool] = None,
    encoding: Optional[str] = None,
    errors: Optional[str] = None,
    universal_newlines: Optional[bool] = None,
    containment: str = "auto",
    confirm_window: Optional[float] = None,
    memory_max: Optional[int] = None,
    pids_max: Optional[int] = None,
    require_crash_safety: bool = False,
) -> tuple:
    argv = _argv(args, shell, executable)
    if capture_output is not None:
        if capture_output and (stdout is not _DEFAULT or stderr is not _DEFAULT):
            raise ValueError("stdout and stderr arguments may not be used with capture_output.")
        if not capture_output:
            stdout = None if stdout is _DEFAULT else stdout
            stderr = None if stderr is _DEFAULT else stderr
    text_mode = bool(text or universal_newlines or encoding or errors)
    if isinstance(input, str):
        input = input.encode(encoding or locale.getpreferredencoding(False), errors or "strict")
    stdin_mode = "null"
    stdin_fd = None
    if input is not None:
        if stdin is not _DEFAULT:
            raise ValueError("stdin and input arguments may not both be used.")
    elif stdin is None:
        stdin_mode = "inherit"
    elif stdin is _DEFAULT or stdin == DEVNULL:
        stdin_mode = "null"
    elif stdin == PIPE:
        raise ValueError("stdin=PIPE: pass the bytes as input=...")
    else:
        s = _stdio(stdin, "stdin")
        if not isinstance(s, int):
            raise ValueError(f"bad stdin: {stdin!r}")
        stdin_fd = s
    out_mode, err_mode = _stdio(stdout, "stdout"), _stdio(stderr, "stderr")
    captured = (out_mode == "capture", err_mode == "capture")
    env_list = None
    if env is not None:
        env_list = [(os.fsdecode(k), os.fsdecode(v)) for k, v in env.items()]
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
        )
    except _corral.ContainmentUnavailable as e:
        raise ContainmentError(str(e)) from None
    return job, (args, text_mode, encoding, errors, timeout, captured)


def _result(job_report: Dict[str, Any], meta: tuple) -> Result:
    args, text_mode, encoding, errors, timeout, captured = meta
    r = Result(args, job_report, text_mode, encoding, errors)
    # As subprocess: None for a stream that was not captured (and its byte
    # count: corral did not see those bytes, as the CLI's null).
    if not captured[0]:
        r.stdout = None
        r.stdout_bytes = None
    if not captured[1]:
        r.stderr = None
        r.stderr_bytes = None
    r.timeout = timeout
    return r


def _cleanup_bound(kw: Mapping[str, Any]) -> float:
    # The confirm window stretches while the tree is visibly dying: its
    # limit is 10 times the window, at least 5 s, and a tree that keeps
    # dying is waited for up to 6 such limits from the SIGKILL.
    window = kw.get("confirm_window")
    window = 1.0 if window is None else window
    return (kw.get("grace") or 0.0) + 6 * max(10 * window, 5.0) + _CLEANUP_SLACK


def run(args: Any, *, check: bool = False, **kwargs: Any) -> Result:
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

    ``leftovers``: what happens to descendants still running after a clean
    exit: ``"keep-on-success"`` (default: kept after exit 0, killed after
    anything else), ``"kill"`` or ``"keep"``.

    Streams: stdout and stderr are captured by default, at most
    ``capture_limit`` bytes each (default 16 MiB; half head, half tail; what
    is left out is counted in ``stdout_omitted``). As in ``subprocess``:
    ``stdout=None`` passes the stream through, ``DEVNULL`` discards, a file
    object or descriptor receives it, ``stderr=STDOUT`` merges;
    ``capture_output=True`` is accepted. ``input`` (bytes, or str) is written
    to stdin; otherwise stdin is the null device (``stdin=None`` inherits).
    ``text=True`` (or ``encoding``/``errors``) decodes the output to str.

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

    Unlike ``subprocess.run``, nothing is raised without ``check=True``: a
    timeout is ``result.outcome == "timed_out"`` (``returncode`` None).
    ``check=True`` raises unless the command exited 0 with every lifecycle
    step clean: :class:`TimeoutExpired` (a ``subprocess.TimeoutExpired``),
    :class:`CalledProcessError` (a ``subprocess.CalledProcessError``),
    :class:`OutputHeld`, :class:`Signaled`, :class:`Cancelled`,
    :class:`CleanupFailed`, all :class:`CorralError` with ``.result``.
    A program that cannot be started raises ``FileNotFoundError`` /
    ``PermissionError`` (``OSError``); out of file descriptors, an
    ``OSError`` with ``errno.EMFILE`` (or ``ENFILE``) whose message names
    the limit (see :func:`raise_nofile_limit`), nothing left running;
    unavailable containment (or crash safety, when required) raises
    :class:`ContainmentError`.

    The GIL is released while the run is supervised. Ctrl-C
    (KeyboardInterrupt) while ``run`` waits kills the tree, waits for the
    cleanup, and re-raises.
    """
    job, meta = _start(args, **kwargs)
    try:
        report = job.wait()
    except BaseException:
        job.cancel()
        job.wait_quiet(_cleanup_bound(kwargs))
        raise
    r = _result(report, meta)
    if check:
        r.check_returncode()
    return r


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
    r = _result(report, meta)
    if check:
        r.check_returncode()
    return r


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


def _at_exit() -> None:
    # Every run still live is cancelled and its tree killed before the
    # interpreter goes away.
    _corral._shutdown(60.0)


atexit.register(_at_exit)
