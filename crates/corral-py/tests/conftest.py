"""Process-tree helpers for the corral Python tests (Linux).

As in the Rust testkit: a test gets a ``tree`` fixture (a scratch directory
with the helper script ``$H``) whose watcher is running **before** the code
under test. ``"$H" NAME [COMMAND...]`` writes its pid to ``NAME.pid`` and then
becomes COMMAND (default ``sleep 30``), so every helper exits by itself within
30 s. The watcher pins each helper as soon as its pid file appears (a pidfd,
after checking that the process carries this scratch's unique marker in its
environment), answers "is it alive?" through that pidfd, and at teardown
SIGKILLs every helper still alive through it. Cleanup never depends on the
code under test, and never kills by name.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest

HELPER = """#!/bin/sh
# corral test helper: record my pid, then become COMMAND (default: sleep 30).
name="$1"; shift
echo $$ > "$CORRAL_TEST_DIR/$name.tmp" && mv "$CORRAL_TEST_DIR/$name.tmp" "$CORRAL_TEST_DIR/$name.pid"
if [ $# -eq 0 ]; then exec sleep 30; fi
exec "$@"
"""

if not sys.platform.startswith("linux") or not hasattr(os, "pidfd_open"):
    pytest.skip("the process-tree tests need Linux with pidfd", allow_module_level=True)


def _exited(fd: int, timeout: float) -> bool:
    p = select.poll()
    p.register(fd, select.POLLIN)
    return bool(p.poll(max(0, int(timeout * 1000))))


class Tree:
    def __init__(self) -> None:
        self.mark = f"corral-pytest-{os.getpid()}-{uuid.uuid4().hex}"
        self.dir = Path(tempfile.gettempdir()) / self.mark
        self.dir.mkdir()
        h = self.dir / "H"
        h.write_text(HELPER)
        h.chmod(0o755)
        self.pinned: dict = {}  # name -> (pid, pidfd or None when already gone)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    @property
    def env(self) -> dict[str, str]:
        """os.environ plus what helpers need."""
        e = dict(os.environ)
        e.update(H=str(self.dir / "H"), CORRAL_TEST_DIR=str(self.dir), CORRAL_TEST_MARK=self.mark)
        return e

    def path(self, name: str) -> str:
        return str(self.dir / name)

    def _scan(self) -> None:
        for f in self.dir.glob("*.pid"):
            name = f.name[:-4]
            with self._lock:
                if name in self.pinned:
                    continue
            try:
                pid = int(f.read_text().strip())
            except (OSError, ValueError):
                continue  # being written (it is renamed into place: rare)
            # A helper writes its pid file while alive, so from here on a
            # helper that cannot be pinned is gone: recorded as dead (fd None).
            try:
                fd: "int | None" = os.pidfd_open(pid)
            except OSError:
                fd = None
            if fd is not None:
                # Pinned: the pidfd refers to this process whatever happens
                # to the pid. Ours only if it carries the marker (exec keeps
                # the environment); a zombie's environ reads empty.
                try:
                    environ = Path(f"/proc/{pid}/environ").read_bytes()
                except OSError:
                    environ = b""
                if f"CORRAL_TEST_MARK={self.mark}".encode() not in environ.split(b"\0") and not _exited(fd, 0):
                    # Not (yet) readable as ours: mid-exec the environment
                    # reads empty for a moment. Look again on the next scan
                    # (a pid reused by a stranger is never pinned).
                    os.close(fd)
                    continue
            with self._lock:
                self.pinned[name] = (pid, fd)

    def _watch(self) -> None:
        while not self._stop.is_set():
            self._scan()
            time.sleep(0.001)

    def pid(self, name: str, timeout: float = 10.0) -> int:
        end = time.monotonic() + timeout
        while True:
            with self._lock:
                if name in self.pinned:
                    return self.pinned[name][0]
            if time.monotonic() >= end:
                raise AssertionError(f"helper {name} never started")
            time.sleep(0.002)

    def alive(self, name: str) -> bool:
        with self._lock:
            p = self.pinned.get(name)
        return p is not None and p[1] is not None and not _exited(p[1], 0)

    def wait_dead(self, name: str, timeout: float = 5.0) -> bool:
        with self._lock:
            p = self.pinned.get(name)
        return p is None or p[1] is None or _exited(p[1], timeout)

    def assert_all_dead(self, timeout: float = 5.0) -> None:
        self._scan()
        with self._lock:
            names = list(self.pinned)
        alive = [n for n in names if not self.wait_dead(n, timeout)]
        assert not alive, f"left behind: {alive}"

    def marked_alive(self) -> dict:
        """Every live process carrying this tree's marker (helpers or not),
        pinned by pidfd: {pid: pidfd}."""
        found = {}
        needle = f"CORRAL_TEST_MARK={self.mark}".encode()
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            pid = int(entry)
            try:
                fd = os.pidfd_open(pid)
            except OSError:
                continue
            try:
                environ = Path(f"/proc/{pid}/environ").read_bytes()
            except OSError:
                environ = b""
            if needle in environ.split(b"\0") and not _exited(fd, 0):
                found[pid] = fd
            else:
                os.close(fd)
        return found

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._scan()
        with self._lock:
            for _pid, fd in self.pinned.values():
                if fd is None:
                    continue
                try:
                    signal.pidfd_send_signal(fd, signal.SIGKILL)
                except OSError:
                    pass
                os.close(fd)
            self.pinned.clear()
        for f in self.dir.iterdir():
            f.unlink()
        self.dir.rmdir()


@pytest.fixture
def tree():
    """The scratch tree. At teardown every process still carrying its marker
    is killed (through a pidfd), and the test fails if any was left behind
    that the test did not declare in ``tree.expect_left`` (helper names)."""
    t = Tree()
    t.expect_left = set()
    try:
        yield t
    finally:
        time.sleep(0.05)  # a cancelled tree's last members are being reaped
        allowed = set()
        with t._lock:
            for name in t.expect_left:
                if name in t.pinned:
                    allowed.add(t.pinned[name][0])
        left = t.marked_alive()
        for pid, fd in left.items():
            try:
                signal.pidfd_send_signal(fd, signal.SIGKILL)
            except OSError:
                pass
            os.close(fd)
        t.close()
        stray = sorted(set(left) - allowed)
        if stray:
            pytest.fail(f"processes of this test left behind: {stray}", pytrace=False)


def cgroup_available() -> bool:
    import corral

    try:
        r = corral.run(["true"], containment="cgroup")
    except corral.ContainmentError:
        return False
    return r.returncode == 0
