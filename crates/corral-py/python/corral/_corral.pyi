"""The Rust core of corral (use the ``corral`` module itself)."""

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

class ContainmentUnavailable(Exception): ...
class SessionClosed(Exception): ...

class Session:
    def __init__(
        self,
        *,
        shell: Optional[str] = None,
        cwd: Optional[str] = None,
        env: Optional[List[Tuple[str, str]]] = None,
        env_clear: bool = False,
        containment: str = "auto",
        require_crash_safety: bool = False,
    ) -> None: ...
    @property
    def id(self) -> str: ...
    @property
    def ended(self) -> Optional[str]: ...
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
    ) -> Dict[str, Any]: ...
    def jobs(self) -> List[Tuple[int, str]]: ...
    def kill_job(self, pid: int) -> bool: ...
    def close(self) -> None: ...
class SandboxUnavailable(Exception): ...

MULTI_THREADED_DRIVER: bool
__version__: str

class Job:
    @property
    def pid(self) -> int: ...
    def cancel(self) -> None: ...
    def cancel_with(self, signal: Union[int, str]) -> None: ...
    def signal(self, signal: Union[int, str]) -> bool: ...
    def done(self) -> bool: ...
    def poll(self) -> Optional[Dict[str, Any]]: ...
    def wait(self, timeout: Optional[float] = None) -> Optional[Dict[str, Any]]: ...
    def wait_quiet(self, timeout: float) -> Optional[Dict[str, Any]]: ...
    def on_done(self, callback: Callable[[], None]) -> bool: ...

def start(
    argv: Sequence[str],
    *,
    cwd: Optional[str] = None,
    env: Optional[List[Tuple[str, str]]] = None,
    input: Optional[bytes] = None,
    stdin: str = "null",
    stdin_fd: Optional[int] = None,
    stdout: Union[str, int, None] = None,
    stderr: Union[str, int, None] = None,
    timeout: Optional[float] = None,
    grace: Optional[float] = None,
    wait_delay: Optional[float] = None,
    idle_timeout: Optional[float] = None,
    max_output: Optional[int] = None,
    pty: Optional[Tuple[int, int]] = None,
    signal: Union[int, str, None] = None,
    leftovers: Optional[str] = None,
    capture_limit: Optional[int] = None,
    containment: str = "auto",
    confirm_window: Optional[float] = None,
    memory_max: Optional[int] = None,
    pids_max: Optional[int] = None,
    require_crash_safety: bool = False,
    sandbox: Union[bool, Dict[str, Any], None] = None,
    stdout_relay: Optional[int] = None,
    stderr_relay: Optional[int] = None,
    program: Optional[str] = None,
    keep_fds: Optional[Sequence[int]] = None,
    restore_signals: bool = True,
    new_session: bool = False,
    uid: Optional[int] = None,
    gid: Optional[int] = None,
    groups: Optional[Sequence[int]] = None,
    umask: Optional[int] = None,
) -> Job: ...
def _spec(argv: Sequence[str], **options: Any) -> str:
    """The library's run spec (JSON, docs/run-spec-schema.json) that
    ``start(argv, **options)`` runs: a test seam."""
def _shutdown(timeout: float = 30.0) -> int: ...
def enable_subreaper() -> None: ...
def raise_nofile_limit() -> Optional[int]: ...
