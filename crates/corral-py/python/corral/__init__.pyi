"""Type stubs for corral: subprocess.run(timeout=...) that keeps four promises."""

import os
import subprocess
from typing import IO, Any, Dict, List, Literal, Mapping, NamedTuple, Optional, Sequence, Union, overload

_Args = Union[str, bytes, os.PathLike, Sequence[Union[str, bytes, os.PathLike]]]
_Stream = Union[None, int, IO[Any]]
_Env = Mapping[Union[str, bytes], Union[str, bytes]]
_Outcome = Literal["exited", "signaled", "timed_out", "cancelled", "output_held", "output_limit", "cleanup_failed"]
_Leftovers = Literal["keep-on-success", "kill", "keep"]
_Containment = Literal["auto", "cgroup", "pid_namespace", "subreaper", "process_group", "job_object"]

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

class Result:
    args: Any
    report: Dict[str, Any]
    outcome: _Outcome
    timeout_kind: Optional[Literal["deadline", "idle"]]
    returncode: Optional[int]
    exit_code: Optional[int]
    signal: Optional[int]
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
    cleanup_error: Optional[str]
    survivors: List[int]
    timings: Timings
    usage: Optional[Usage]
    limits_hit: List[Literal["memory", "pids"]]
    pid: int
    timeout: Optional[float]
    @property
    def ok(self) -> bool: ...
    def check_returncode(self) -> None: ...

class CorralError(Exception):
    result: Optional[Result]

class TimeoutExpired(CorralError, subprocess.TimeoutExpired):
    def __init__(self, result: Optional[Result], cmd: Any, timeout: float) -> None: ...

class CalledProcessError(CorralError, subprocess.CalledProcessError):
    def __init__(self, result: Result) -> None: ...

class OutputHeld(CorralError): ...
class OutputLimitExceeded(CorralError): ...
class Signaled(CorralError): ...
class Cancelled(CorralError): ...
class CleanupFailed(CorralError): ...
class ContainmentError(CorralError): ...

def run(
    args: _Args,
    *,
    check: bool = ...,
    timeout: Optional[float] = ...,
    grace: Optional[float] = ...,
    wait_delay: Optional[float] = ...,
    idle_timeout: Optional[float] = ...,
    max_output: Optional[int] = ...,
    signal: Union[str, int, None] = ...,
    leftovers: Optional[_Leftovers] = ...,
    capture_limit: Optional[int] = ...,
    input: Union[bytes, str, None] = ...,
    stdin: _Stream = ...,
    stdout: _Stream = ...,
    stderr: _Stream = ...,
    capture_output: Optional[bool] = ...,
    cwd: Union[str, bytes, os.PathLike, None] = ...,
    env: Optional[_Env] = ...,
    shell: bool = ...,
    executable: Optional[str] = ...,
    text: Optional[bool] = ...,
    encoding: Optional[str] = ...,
    errors: Optional[str] = ...,
    universal_newlines: Optional[bool] = ...,
    containment: _Containment = ...,
    confirm_window: Optional[float] = ...,
    memory_max: Optional[int] = ...,
    pids_max: Optional[int] = ...,
    require_crash_safety: bool = ...,
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
    signal: Union[str, int, None] = ...,
    leftovers: Optional[_Leftovers] = ...,
    capture_limit: Optional[int] = ...,
    input: Union[bytes, str, None] = ...,
    stdin: _Stream = ...,
    stdout: _Stream = ...,
    stderr: _Stream = ...,
    capture_output: Optional[bool] = ...,
    cwd: Union[str, bytes, os.PathLike, None] = ...,
    env: Optional[_Env] = ...,
    shell: bool = ...,
    executable: Optional[str] = ...,
    text: Optional[bool] = ...,
    encoding: Optional[str] = ...,
    errors: Optional[str] = ...,
    universal_newlines: Optional[bool] = ...,
    containment: _Containment = ...,
    confirm_window: Optional[float] = ...,
    memory_max: Optional[int] = ...,
    pids_max: Optional[int] = ...,
    require_crash_safety: bool = ...,
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
    signal: Union[str, int, None] = ...,
    leftovers: Optional[_Leftovers] = ...,
    capture_limit: Optional[int] = ...,
    input: Union[bytes, str, None] = ...,
    stdin: _Stream = ...,
    stdout: _Stream = ...,
    stderr: _Stream = ...,
    capture_output: Optional[bool] = ...,
    cwd: Union[str, bytes, os.PathLike, None] = ...,
    env: Optional[_Env] = ...,
    shell: bool = ...,
    executable: Optional[str] = ...,
    text: Optional[bool] = ...,
    encoding: Optional[str] = ...,
    errors: Optional[str] = ...,
    universal_newlines: Optional[bool] = ...,
    containment: _Containment = ...,
    confirm_window: Optional[float] = ...,
    memory_max: Optional[int] = ...,
    pids_max: Optional[int] = ...,
    require_crash_safety: bool = ...,
) -> Process: ...
def enable_subreaper() -> None: ...
def raise_nofile_limit() -> Optional[int]: ...
