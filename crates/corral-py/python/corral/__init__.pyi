"""Type stubs for corral: subprocess.run(timeout=...) that keeps four promises."""

import asyncio
import os
import subprocess
from typing import IO, Any, Dict, List, Literal, Mapping, NamedTuple, Optional, Sequence, Tuple, TypedDict, Union, overload

__version__: str

_Args = Union[str, bytes, os.PathLike, Sequence[Union[str, bytes, os.PathLike]]]
_Stream = Union[None, int, IO[Any]]
_Env = Mapping[Union[str, bytes], Union[str, bytes]]
_Outcome = Literal["exited", "signaled", "timed_out", "cancelled", "output_held", "output_limit", "cleanup_failed"]
_Network = Literal["none", "loopback", "host"]
_Leftovers = Literal["keep-on-success", "kill", "keep"]
_Containment = Literal["auto", "cgroup", "pid_namespace", "subreaper", "process_group", "job_object"]

CompletedProcess = Result
SubprocessError = subprocess.SubprocessError

PIPE: int
STDOUT: int
DEVNULL: int

class Timings(NamedTuple):
    spawn: float
    root_exit: Optional[float]
    output_closed: Optional[float]
    cleanup_done: float

class Usage(NamedTuple):
    cpu_user: Optional[float]
    cpu_system: Optional[float]
    memory_peak: Optional[int]
    pids_peak: Optional[int]

class _CleanupFailure(TypedDict):
    step: Literal["confirm_death", "signal", "members", "wait", "release", "crash_safety"]
    error: str
    os_error: Optional[int]

class Result(subprocess.CompletedProcess[Any]):
    args: Any
    report: Dict[str, Any]
    outcome: _Outcome
    timeout_kind: Optional[Literal["deadline", "idle"]]
    returncode: Optional[int]  # type: ignore[assignment]  # None only if the command never ended (cleanup failure)
    exit_code: Optional[int]
    signal: Optional[int]
    signal_name: Optional[str]
    error: Optional[str]
    stdout: Union[bytes, str, None]
    stderr: Union[bytes, str, None]
    stdout_omitted: int
    stderr_omitted: int
    stdout_bytes: Optional[int]
    stderr_bytes: Optional[int]
    killed: int
    kept: int
    duration: float
    containment: str
    containment_note: Optional[str]
    crash_safe: bool
    crash_safety_note: Optional[str]
    signals_sent: List[Union[str, int]]
    cleanup_errors: List[_CleanupFailure]
    cleanup_error: Optional[str]
    survivors: List[int]
    timings: Timings
    usage: Optional[Usage]
    limits_hit: List[Literal["memory", "pids"]]
    session_id: Optional[str]
    jobs: List[Tuple[int, str]]
    session_ended: Optional[str]
    sandbox: Optional[Dict[str, Any]]
    pid: int
    timeout: Optional[float]
    @property
    def ok(self) -> bool: ...
    def check_returncode(self) -> None: ...

class CorralError(Exception):
    result: Optional[Result]

class TimeoutExpired(CorralError, subprocess.TimeoutExpired):
    def __init__(
        self,
        result: Optional[Result],
        cmd: Any,
        timeout: float,
        output: Optional[bytes] = None,
        stderr: Optional[bytes] = None,
    ) -> None: ...

class CalledProcessError(CorralError, subprocess.CalledProcessError):
    def __init__(self, result: Result) -> None: ...

class OutputHeld(CorralError): ...
class OutputLimitExceeded(CorralError): ...
class Signaled(CalledProcessError): ...
class Cancelled(CorralError): ...
class CleanupFailed(CorralError): ...
class ContainmentError(CorralError): ...
class SessionClosed(CorralError): ...

class Session:
    def __init__(
        self,
        *,
        cwd: Union[str, os.PathLike, None] = ...,
        env: Optional[Mapping[str, str]] = ...,
        env_clear: bool = ...,
        shell: Union[str, os.PathLike, None] = ...,
        containment: _Containment = ...,
        require_crash_safety: bool = ...,
    ) -> None: ...
    @property
    def id(self) -> str: ...
    @property
    def ended(self) -> Optional[str]: ...
    def run(
        self,
        command: str,
        *,
        timeout: Optional[float] = ...,
        idle_timeout: Optional[float] = ...,
        max_output: Optional[int] = ...,
        capture_limit: Optional[int] = ...,
        wait_delay: Optional[float] = ...,
        grace: Optional[float] = ...,
        text: bool = ...,
        encoding: Optional[str] = ...,
        errors: Optional[str] = ...,
        check: bool = ...,
    ) -> Result: ...
    def jobs(self) -> List[Tuple[int, str]]: ...
    def kill_job(self, pid: int) -> bool: ...
    def close(self) -> None: ...
    def __enter__(self) -> "Session": ...
    def __exit__(self, *exc: Any) -> None: ...
class SandboxError(CorralError): ...

class Sandbox:
    allow_write: List[str]
    deny_read: List[str]
    network: _Network
    def __init__(
        self,
        allow_write: Sequence[Union[str, bytes, os.PathLike[Any]]] = ...,
        deny_read: Sequence[Union[str, bytes, os.PathLike[Any]]] = ...,
        network: _Network = ...,
    ) -> None: ...

def run(
    args: _Args,
    *popenargs: Any,
    check: bool = ...,
    timeout: Optional[float] = ...,
    grace: Optional[float] = ...,
    wait_delay: Optional[float] = ...,
    idle_timeout: Optional[float] = ...,
    max_output: Optional[int] = ...,
    pty: Union[bool, Tuple[int, int], None] = ...,
    signal: Union[str, int, None] = ...,
    leftovers: Optional[_Leftovers] = ...,
    capture_limit: Optional[int] = ...,
    input: Union[bytes, str, None] = ...,
    stdin: _Stream = ...,
    stdout: _Stream = ...,
    stderr: _Stream = ...,
    capture_output: bool = ...,
    cwd: Union[str, bytes, os.PathLike, None] = ...,
    env: Optional[_Env] = ...,
    shell: bool = ...,
    executable: Union[str, bytes, os.PathLike, None] = ...,
    text: Optional[bool] = ...,
    encoding: Optional[str] = ...,
    errors: Optional[str] = ...,
    universal_newlines: Optional[bool] = ...,
    containment: _Containment = ...,
    confirm_window: Optional[float] = ...,
    memory_max: Optional[int] = ...,
    pids_max: Optional[int] = ...,
    require_crash_safety: bool = ...,
    sandbox: Union[bool, Sandbox, None] = ...,
    bufsize: int = ...,
    preexec_fn: None = ...,
    close_fds: bool = ...,
    pass_fds: Sequence[int] = ...,
    startupinfo: Any = ...,
    creationflags: int = ...,
    restore_signals: bool = ...,
    start_new_session: bool = ...,
    process_group: Optional[int] = ...,
    user: Union[str, int, None] = ...,
    group: Union[str, int, None] = ...,
    extra_groups: Optional[Sequence[Union[str, int]]] = ...,
    umask: int = ...,
    pipesize: int = ...,
) -> Result: ...
async def run_async(
    args: _Args,
    *,
    check: bool = ...,
    timeout: Optional[float] = ...,
    grace: Optional[float] = ...,
    wait_delay: Optional[float] = ...,
    idle_timeout: Optional[float] = ...,
    max_output: Optional[int] = ...,
    pty: Union[bool, Tuple[int, int], None] = ...,
    signal: Union[str, int, None] = ...,
    leftovers: Optional[_Leftovers] = ...,
    capture_limit: Optional[int] = ...,
    input: Union[bytes, str, None] = ...,
    stdin: _Stream = ...,
    stdout: _Stream = ...,
    stderr: _Stream = ...,
    capture_output: bool = ...,
    cwd: Union[str, bytes, os.PathLike, None] = ...,
    env: Optional[_Env] = ...,
    shell: bool = ...,
    executable: Union[str, bytes, os.PathLike, None] = ...,
    text: Optional[bool] = ...,
    encoding: Optional[str] = ...,
    errors: Optional[str] = ...,
    universal_newlines: Optional[bool] = ...,
    containment: _Containment = ...,
    confirm_window: Optional[float] = ...,
    memory_max: Optional[int] = ...,
    pids_max: Optional[int] = ...,
    require_crash_safety: bool = ...,
    sandbox: Union[bool, Sandbox, None] = ...,
    bufsize: int = ...,
    preexec_fn: None = ...,
    close_fds: bool = ...,
    pass_fds: Sequence[int] = ...,
    startupinfo: Any = ...,
    creationflags: int = ...,
    restore_signals: bool = ...,
    start_new_session: bool = ...,
    process_group: Optional[int] = ...,
    user: Union[str, int, None] = ...,
    group: Union[str, int, None] = ...,
    extra_groups: Optional[Sequence[Union[str, int]]] = ...,
    umask: int = ...,
    pipesize: int = ...,
) -> Result: ...

class Process:
    args: Any
    pid: int
    result: Optional[Result]
    @property
    def returncode(self) -> Optional[int]: ...
    def poll(self) -> Optional[Result]: ...
    def wait(self, timeout: Optional[float] = None) -> Result: ...
    def cancel(self) -> None: ...
    def terminate(self) -> None: ...
    def kill(self) -> None: ...
    def send_signal(self, sig: Union[int, str]) -> None: ...
    def __enter__(self) -> "Process": ...
    def __exit__(self, *exc: Any) -> None: ...

def spawn(
    args: _Args,
    *,
    check: bool = ...,
    timeout: Optional[float] = ...,
    grace: Optional[float] = ...,
    wait_delay: Optional[float] = ...,
    idle_timeout: Optional[float] = ...,
    max_output: Optional[int] = ...,
    pty: Union[bool, Tuple[int, int], None] = ...,
    signal: Union[str, int, None] = ...,
    leftovers: Optional[_Leftovers] = ...,
    capture_limit: Optional[int] = ...,
    input: Union[bytes, str, None] = ...,
    stdin: _Stream = ...,
    stdout: _Stream = ...,
    stderr: _Stream = ...,
    capture_output: bool = ...,
    cwd: Union[str, bytes, os.PathLike, None] = ...,
    env: Optional[_Env] = ...,
    shell: bool = ...,
    executable: Union[str, bytes, os.PathLike, None] = ...,
    text: Optional[bool] = ...,
    encoding: Optional[str] = ...,
    errors: Optional[str] = ...,
    universal_newlines: Optional[bool] = ...,
    containment: _Containment = ...,
    confirm_window: Optional[float] = ...,
    memory_max: Optional[int] = ...,
    pids_max: Optional[int] = ...,
    require_crash_safety: bool = ...,
    sandbox: Union[bool, Sandbox, None] = ...,
    bufsize: int = ...,
    preexec_fn: None = ...,
    close_fds: bool = ...,
    pass_fds: Sequence[int] = ...,
    startupinfo: Any = ...,
    creationflags: int = ...,
    restore_signals: bool = ...,
    start_new_session: bool = ...,
    process_group: Optional[int] = ...,
    user: Union[str, int, None] = ...,
    group: Union[str, int, None] = ...,
    extra_groups: Optional[Sequence[Union[str, int]]] = ...,
    umask: int = ...,
    pipesize: int = ...,
) -> Process: ...
def enable_subreaper() -> None: ...
def raise_nofile_limit() -> Optional[int]: ...

def call(args: _Args, *popenargs: Any, timeout: Optional[float] = ..., **kwargs: Any) -> Optional[int]: ...
def check_call(args: _Args, *popenargs: Any, **kwargs: Any) -> int: ...
def check_output(args: _Args, *popenargs: Any, timeout: Optional[float] = ..., **kwargs: Any) -> Any: ...
def getstatusoutput(cmd: _Args, *, encoding: Optional[str] = ..., errors: Optional[str] = ...) -> Tuple[int, str]: ...
def getoutput(cmd: _Args, *, encoding: Optional[str] = ..., errors: Optional[str] = ...) -> str: ...

class Popen:
    args: Any
    stdin: Optional[IO[Any]]
    stdout: Optional[IO[Any]]
    stderr: Optional[IO[Any]]
    pid: int
    returncode: Optional[int]  # type: ignore[assignment]  # None only if the command never ended (cleanup failure)
    result: Optional[Result]
    text_mode: bool
    universal_newlines: bool
    encoding: Optional[str]
    errors: Optional[str]
    def __init__(
        self,
        args: _Args,
        bufsize: int = ...,
        executable: Union[str, bytes, os.PathLike, None] = ...,
        stdin: _Stream = ...,
        stdout: _Stream = ...,
        stderr: _Stream = ...,
        preexec_fn: None = ...,
        close_fds: bool = ...,
        shell: bool = ...,
        cwd: Union[str, bytes, os.PathLike, None] = ...,
        env: Optional[_Env] = ...,
        universal_newlines: Optional[bool] = ...,
        startupinfo: Any = ...,
        creationflags: int = ...,
        restore_signals: bool = ...,
        start_new_session: bool = ...,
        pass_fds: Sequence[int] = ...,
        *,
        user: Union[str, int, None] = ...,
        group: Union[str, int, None] = ...,
        extra_groups: Optional[Sequence[Union[str, int]]] = ...,
        encoding: Optional[str] = ...,
        errors: Optional[str] = ...,
        text: Optional[bool] = ...,
        umask: int = ...,
        pipesize: int = ...,
        process_group: Optional[int] = ...,
        timeout: Optional[float] = ...,
        grace: Optional[float] = ...,
        wait_delay: Optional[float] = ...,
        signal: Union[str, int, None] = ...,
        leftovers: Optional[_Leftovers] = ...,
        capture_limit: Optional[int] = ...,
        containment: _Containment = ...,
        confirm_window: Optional[float] = ...,
        memory_max: Optional[int] = ...,
        pids_max: Optional[int] = ...,
        require_crash_safety: bool = ...,
        sandbox: Union[bool, Sandbox, None] = ...,
    ) -> None: ...
    def __class_getitem__(cls, item: Any) -> Any: ...
    def poll(self) -> Optional[int]: ...
    def wait(self, timeout: Optional[float] = None) -> Optional[int]: ...
    def communicate(self, input: Any = None, timeout: Optional[float] = None) -> Tuple[Any, Any]: ...
    def send_signal(self, sig: int) -> None: ...
    def terminate(self) -> None: ...
    def kill(self) -> None: ...
    def __enter__(self) -> "Popen": ...
    def __exit__(self, exc_type: Any, value: Any, traceback: Any) -> None: ...

class AsyncProcess:
    stdin: Optional[asyncio.StreamWriter]
    stdout: Optional[asyncio.StreamReader]
    stderr: Optional[asyncio.StreamReader]
    pid: int
    @property
    def returncode(self) -> Optional[int]: ...
    @property
    def result(self) -> Optional[Result]: ...
    async def wait(self) -> Optional[int]: ...
    async def communicate(self, input: Optional[bytes] = None) -> Tuple[Optional[bytes], Optional[bytes]]: ...
    def send_signal(self, sig: int) -> None: ...
    def terminate(self) -> None: ...
    def kill(self) -> None: ...

async def create_subprocess_exec(
    program: Union[str, bytes, os.PathLike],
    *args: Union[str, bytes, os.PathLike],
    stdin: _Stream = ...,
    stdout: _Stream = ...,
    stderr: _Stream = ...,
    limit: int = ...,
    **kwds: Any,
) -> AsyncProcess: ...
async def create_subprocess_shell(
    cmd: Union[str, bytes],
    stdin: _Stream = ...,
    stdout: _Stream = ...,
    stderr: _Stream = ...,
    limit: int = ...,
    **kwds: Any,
) -> AsyncProcess: ...
