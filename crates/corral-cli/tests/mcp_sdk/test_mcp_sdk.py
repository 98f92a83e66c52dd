"""`corral mcp` driven by the official MCP Python SDK (`mcp` on PyPI).

Run by .ci/mcp.sh: CORRAL_BIN names the corral binary. Each test opens a
session the way an agent does (stdio_client + ClientSession), and checks
the tools on real process trees: every helper records its pid, is pinned by
a pidfd before anything is killed, and must be dead at the end.
"""

import asyncio
import json
import os
import select
import tempfile
import time

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

try:  # the SDK's 2.x name, then 1.x's
    from mcp import MCPError as McpError
except ImportError:  # pragma: no cover
    from mcp.shared.exceptions import McpError

BIN = os.environ.get("CORRAL_BIN", "corral")


def session(scratch, *args):
    """The SDK's stdio client to `corral mcp ARGS`, run in `scratch`."""
    params = StdioServerParameters(
        command=BIN,
        args=["mcp", *args],
        cwd=scratch,
        env={**os.environ, "T": scratch},
    )
    return stdio_client(params)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 120))


def pin(path, timeout=10.0):
    """A pidfd of the process whose pid `path` holds (waiting for it)."""
    end = time.monotonic() + timeout
    while True:
        try:
            with open(path) as f:
                text = f.read().strip()
            if text:
                return os.pidfd_open(int(text))
        except FileNotFoundError:
            pass
        assert time.monotonic() < end, f"{path} never appeared"
        time.sleep(0.01)


def dead(pidfd, timeout):
    """Whether the pinned process is gone within `timeout` seconds."""
    r, _, _ = select.select([pidfd], [], [], timeout)
    return bool(r)


def kill_pinned(fds):
    for fd in fds:
        try:
            # Cleanup through the pinned identity only (never by name).
            import signal

            signal.pidfd_send_signal(fd, signal.SIGKILL)
        except (ProcessLookupError, OSError):
            pass
        os.close(fd)


@pytest.fixture
def scratch():
    with tempfile.TemporaryDirectory(prefix="corral-mcp-") as d:
        yield os.path.realpath(d)


# A tree: a child and a setsid escaper, each writing its pid, then sleeping.
TREE = (
    'sh -c \'echo $$ > "$T/child.pid"; exec sleep 30\' & '
    'setsid sh -c \'echo $$ > "$T/esc.pid"; exec sleep 30\' >/dev/null 2>&1 & '
    'until [ -s "$T/child.pid" ] && [ -s "$T/esc.pid" ]; do sleep 0.01; done; '
)


def attr(obj, snake, camel):
    """A field under the SDK's 2.x name (snake case) or 1.x's (camel case)."""
    return getattr(obj, snake) if hasattr(obj, snake) else getattr(obj, camel)


def is_error(result):
    return bool(attr(result, "is_error", "isError"))


def structured(result):
    assert not is_error(result), result
    sc = attr(result, "structured_content", "structuredContent")
    assert sc is not None, result
    # The text content says the same, for clients without structure.
    assert json.loads(result.content[0].text) == sc
    return sc


def test_tools_are_listed(scratch):
    async def main():
        async with session(scratch) as (r, w), ClientSession(r, w) as s:
            init = await s.initialize()
            assert attr(init, "server_info", "serverInfo").name == "corral"
            tools = await s.list_tools()
            assert sorted(t.name for t in tools.tools) == [
                "kill", "list", "read", "run", "session_close", "session_run",
                "session_start", "start", "write",
            ]

    run(main())


def test_run_exit_code_timeout_and_cap(scratch):
    fds = []

    async def main():
        async with session(scratch) as (r, w), ClientSession(r, w) as s:
            await s.initialize()
            res = structured(await s.call_tool(
                "run", {"argv": ["sh", "-c", "cat; echo err >&2; exit 5"], "input": "in"}))
            assert res["outcome"] == "exited"
            assert res["exit_code"] == 5
            assert res["stdout"] == "in" and res["stderr"] == "err\n"
            assert res["stdout_bytes"] == 2 and res["stderr_bytes"] == 4

            t = time.monotonic()
            call = asyncio.ensure_future(s.call_tool(
                "run", {"command": TREE + "sleep 30", "timeout_ms": 1500}))
            # Pinned while the run goes, long before its deadline.
            for n in ("child.pid", "esc.pid"):
                fds.append(await asyncio.to_thread(pin, os.path.join(scratch, n)))
            res = structured(await call)
            assert time.monotonic() - t < 8
            assert res["outcome"] == "timed_out" and res["timeout_kind"] == "deadline"
            assert res["exit_code"] is None

            res = structured(await s.call_tool(
                "run", {"command": "echo once; sleep 30", "idle_timeout_ms": 500}))
            assert res["outcome"] == "timed_out" and res["timeout_kind"] == "idle"

            res = structured(await s.call_tool(
                "run", {"argv": ["yes"], "max_output": 50000}))
            assert res["outcome"] == "output_limit"
            assert res["stdout_bytes"] > 50000

    fds = []
    try:
        run(main())
        for fd in fds:
            assert dead(fd, 3), "a timed-out tree's process survived"
    finally:
        kill_pinned(fds)


def test_start_read_write_kill_list(scratch):
    fds = []

    async def read_until(s, rid, want):
        seen = ""
        end = time.monotonic() + 10
        while want not in seen:
            assert time.monotonic() < end, seen
            res = structured(await s.call_tool("read", {"id": rid, "wait_ms": 500}))
            seen += res["stdout"]
        return seen, res

    async def main():
        async with session(scratch) as (r, w), ClientSession(r, w) as s:
            await s.initialize()
            res = structured(await s.call_tool("start", {
                "command": TREE + 'echo ready; while IFS= read -r l; do echo "got $l"; done'}))
            rid = res["id"]
            assert isinstance(rid, str)
            fds.extend(pin(os.path.join(scratch, n)) for n in ("child.pid", "esc.pid"))
            await read_until(s, rid, "ready\n")
            res = structured(await s.call_tool("write", {"id": rid, "data": "ping\n"}))
            assert res["written"] == 5
            seen, res = await read_until(s, rid, "got ping\n")
            assert seen == "got ping\n" and res["running"] is True

            listed = structured(await s.call_tool("list", {}))
            assert [x["id"] for x in listed["runs"]] == [rid]
            assert listed["runs"][0]["running"] is True

            res = structured(await s.call_tool("kill", {"id": rid}))
            assert res["running"] is False and res["outcome"] == "cancelled"
            for fd in fds:
                assert dead(fd, 3), "kill left a process of the tree"

            # Tool errors are results with isError; an unknown tool is a
            # JSON-RPC error (the SDK raises McpError, or returns isError
            # when it checks the name against tools/list itself).
            bad = await s.call_tool("read", {"id": "999"})
            assert is_error(bad)
            bad = await s.call_tool("run", {"argv": "not a list"})
            assert is_error(bad)
            try:
                bad = await s.call_tool("no_such_tool", {})
            except McpError as e:
                assert "no_such_tool" in str(e)
            else:
                assert is_error(bad)

    try:
        run(main())
    finally:
        kill_pinned(fds)


def test_session_end_kills_every_tree(scratch):
    """The client closes the session (the server's stdin) while a started
    tree runs: the server kills it and exits."""
    fds = []

    async def main():
        async with session(scratch) as (r, w), ClientSession(r, w) as s:
            await s.initialize()
            structured(await s.call_tool("start", {"command": TREE + "exec cat"}))
            fds.extend(pin(os.path.join(scratch, n)) for n in ("child.pid", "esc.pid"))

    try:
        run(main())
        for fd in fds:
            assert dead(fd, 5), "a tree outlived the server's session"
    finally:
        kill_pinned(fds)


def test_shell_sessions(scratch):
    """A persistent shell: state carries over, a timed-out command with a
    setsid escaper is killed while an earlier command's background server
    keeps running, exit ends the session, close kills the jobs, the
    server's limits hold."""
    fds = []

    async def main():
        async with session(scratch, "--max-runs", "2", "--max-timeout", "20s") as (r, w), \
                ClientSession(r, w) as s:
            await s.initialize()
            os.mkdir(os.path.join(scratch, "sub"))
            sid = structured(await s.call_tool(
                "session_start", {"cwd": "sub", "env": {"GREETING": "hi"}}))["session_id"]
            res = structured(await s.call_tool("session_run", {
                "session_id": sid, "command": "cd ..; X=1; f() { echo \"f $1\"; }"}))
            assert res["outcome"] == "exited" and res["exit_code"] == 0
            assert res["session_id"] == sid and res["session_ended"] is None
            res = structured(await s.call_tool("session_run", {
                "session_id": sid,
                "command": "echo \"$PWD $X $GREETING $PAGER\"; f y; printf 'no newline'>&2"}))
            assert res["stdout"] == f"{scratch} 1 hi cat\nf y\n"
            assert res["stderr"] == "no newline"

            # A background server, then a command that times out.
            res = structured(await s.call_tool("session_run", {
                "session_id": sid,
                "command": 'sh -c \'echo $$ > "$T/server.pid"; exec sleep 30\' >/dev/null 2>&1 & '
                           'until [ -s "$T/server.pid" ]; do sleep 0.01; done'}))
            fds.append(pin(os.path.join(scratch, "server.pid")))
            assert [j["pid"] for j in res["jobs"]] == [int(open(os.path.join(scratch, "server.pid")).read())]
            call = asyncio.ensure_future(s.call_tool("session_run", {
                "session_id": sid, "command": TREE + "sleep 30", "timeout_ms": 1500}))
            esc = []
            for n in ("child.pid", "esc.pid"):
                esc.append(await asyncio.to_thread(pin, os.path.join(scratch, n)))
            fds.extend(esc)
            res = structured(await call)
            assert res["outcome"] == "timed_out" and res["session_ended"] is None
            for fd in esc:
                assert dead(fd, 3), "a timed-out command's process survived"
            assert not dead(fds[0], 0.2), "the server died with another command"
            res = structured(await s.call_tool("session_run", {
                "session_id": sid, "command": "echo $X"}))
            assert res["stdout"] == "1\n"

            # Limits: the timeout, the root.
            bad = await s.call_tool("session_run", {
                "session_id": sid, "command": "true", "timeout_ms": 60000})
            assert is_error(bad)
            assert is_error(await s.call_tool("session_start", {"cwd": "/"}))

            # Closing kills the server.
            structured(await s.call_tool("session_close", {"session_id": sid}))
            assert dead(fds[0], 3), "the session's job outlived session_close"
            assert is_error(await s.call_tool("session_run", {
                "session_id": sid, "command": "true"}))

            # exit ends a session.
            sid = structured(await s.call_tool("session_start", {}))["session_id"]
            res = structured(await s.call_tool("session_run", {
                "session_id": sid, "command": "exit 3"}))
            assert res["exit_code"] == 3 and "3" in res["session_ended"]
            assert is_error(await s.call_tool("session_run", {
                "session_id": sid, "command": "true"}))

    try:
        run(main())
        for fd in fds:
            assert dead(fd, 3)
    finally:
        kill_pinned(fds)


def test_server_end_kills_the_sessions_jobs(scratch):
    fds = []

    async def main():
        async with session(scratch) as (r, w), ClientSession(r, w) as s:
            await s.initialize()
            sid = structured(await s.call_tool("session_start", {}))["session_id"]
            structured(await s.call_tool("session_run", {
                "session_id": sid,
                "command": 'setsid sh -c \'echo $$ > "$T/job.pid"; exec sleep 30\' >/dev/null 2>&1 & '
                           'until [ -s "$T/job.pid" ]; do sleep 0.01; done'}))
            fds.append(pin(os.path.join(scratch, "job.pid")))

    try:
        run(main())
        assert dead(fds[0], 5), "a session's job outlived the server"
    finally:
        kill_pinned(fds)


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-v"]))


def test_sandboxed_server_refuses_what_it_cannot_enforce(scratch):
    """`corral mcp --sandbox`: a request cannot give or drop the sandbox;
    where the sandbox cannot be enforced (here: no namespaces, forced, and
    a private loopback asked for), every run is a tool error naming why,
    and its command never runs."""

    async def main():
        params = StdioServerParameters(
            command=BIN,
            args=["mcp", "--sandbox", "--network", "loopback"],
            cwd=scratch,
            env={**os.environ, "T": scratch, "CORRAL_SANDBOX_NO_NAMESPACES": "1"},
        )
        async with stdio_client(params) as (r, w), ClientSession(r, w) as s:
            await s.initialize()
            bad = await s.call_tool("run", {"argv": ["true"], "sandbox": False})
            assert is_error(bad) and "`sandbox` is not offered" in bad.content[0].text
            for tool in ("run", "start"):
                res = await s.call_tool(tool, {"command": 'touch "$T/ran"'})
                assert is_error(res), res
                assert "namespace" in res.content[0].text

    run(main())
    assert not os.path.exists(os.path.join(scratch, "ran"))


@pytest.fixture
def outside():
    """A directory outside the server's root and outside /tmp (private in
    a sandbox)."""
    d = tempfile.mkdtemp(prefix="corral-mcp-sbx-", dir="/var/tmp")
    os.chmod(d, 0o777)
    yield d
    import shutil

    shutil.rmtree(d, ignore_errors=True)


def test_sandboxed_server_confines_every_run(scratch, outside):
    """An escape (a write outside the working directory fails, the host's
    file intact) and ordinary work (the working directory, /tmp, a pipe,
    an --allow-write path) through the SDK client."""
    victim = os.path.join(outside, "victim")
    with open(victim, "w") as f:
        f.write("host\n")
    allowed = os.path.join(outside, "allowed")
    os.mkdir(allowed)
    os.chmod(allowed, 0o777)

    async def main():
        async with session(scratch, "--sandbox", "--allow-write", allowed) as (r, w), \
                ClientSession(r, w) as s:
            await s.initialize()
            res = structured(await s.call_tool("run", {
                "command": f"echo bad > {victim} && exit 9; rm -f {victim} && exit 8; exit 0"}))
            assert res["outcome"] == "exited" and res["exit_code"] == 0, res
            res = structured(await s.call_tool("run", {
                "command": f"echo in > inside && echo t > /tmp/t && cat /tmp/t | cat "
                           f"&& echo ok > {allowed}/f && cat {allowed}/f"}))
            assert res["exit_code"] == 0, res
            assert res["stdout"] == "t\nok\n"
            # A request cannot turn it off.
            bad = await s.call_tool("run", {"argv": ["true"], "sandbox": False})
            assert is_error(bad)

    run(main())
    with open(victim) as f:
        assert f.read() == "host\n"
    with open(os.path.join(scratch, "inside")) as f:
        assert f.read() == "in\n"
