"""corral.Popen and corral.create_subprocess_exec/shell with real trees:
pipes as file objects, communicate bounded when a grandchild holds a pipe,
signals to the whole tree, the report once ended."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time

import pytest

import corral

SLACK = 5.0


def test_pipes_talk_to_a_running_program(tree):
    with corral.Popen(["cat"], stdin=corral.PIPE, stdout=corral.PIPE, text=True, bufsize=1) as p:
        assert p.pid > 0 and p.poll() is None and p.returncode is None
        for word in ("one", "two"):
            p.stdin.write(word + "\n")
            assert p.stdout.readline() == word + "\n"
        p.stdin.close()
        assert p.stdout.read() == ""
    assert p.returncode == 0 and p.result.outcome == "exited"
    assert p.stdin.closed and p.stdout.closed


def test_communicate_input_output_text_and_bytes(tree):
    p = corral.Popen(["sh", "-c", "tr a-z A-Z; printf 'e\\r\\nf' >&2; exit 3"], stdin=corral.PIPE, stdout=corral.PIPE, stderr=corral.PIPE)
    assert p.communicate(b"abc" * 100000) == (b"ABC" * 100000, b"e\r\nf")
    assert p.returncode == 3 and p.wait() == 3
    p = corral.Popen(["sh", "-c", "cat; printf 'e\\r\\nf' >&2"], stdin=corral.PIPE, stdout=corral.PIPE, stderr=corral.PIPE, universal_newlines=True)
    assert p.communicate("é\n") == ("é\n", "e\nf")
    p = corral.Popen(["sh", "-c", "echo out; echo err >&2"], stdout=corral.PIPE, stderr=corral.STDOUT)
    assert p.communicate() == (b"out\nerr\n", None)


def test_communicate_returns_when_a_grandchild_holds_the_pipe(tree):
    t0 = time.monotonic()
    p = corral.Popen(["sh", "-c", '"$H" holder & echo done; exit 0'], env=tree.env, stdout=corral.PIPE, stderr=corral.PIPE, wait_delay=0.5)
    out, err = p.communicate(timeout=60)
    elapsed = time.monotonic() - t0
    assert out == b"done\n" and err == b""
    assert 0.5 <= elapsed < 0.5 + SLACK
    assert p.returncode == 0 and p.result.outcome == "output_held" and p.result.killed >= 1
    tree.pid("holder")
    assert tree.wait_dead("holder"), "the holder survived"


def test_communicate_timeout_then_kill_ends_the_tree(tree):
    p = corral.Popen(["sh", "-c", 'echo started; "$H" kid & "$H" root'], env=tree.env, stdout=corral.PIPE)
    t0 = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired) as e:
        p.communicate(timeout=0.5)
    assert 0.5 <= time.monotonic() - t0 < 0.5 + SLACK
    assert isinstance(e.value, corral.TimeoutExpired) and e.value.timeout == 0.5
    tree.pid("kid")
    tree.pid("root")
    assert tree.alive("kid") and tree.alive("root"), "a communicate timeout must not end the run"
    p.kill()
    out, _ = p.communicate()
    assert out == b"started\n"  # what was read before the timeout is kept, as subprocess
    assert p.returncode == -signal.SIGKILL
    tree.assert_all_dead()


def test_signals_act_on_the_whole_tree(tree):
    p = corral.Popen(["sh", "-c", '"$H" kid & "$H" root; wait'], env=tree.env)
    tree.pid("kid")
    tree.pid("root")
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=SLACK) == -signal.SIGTERM
    assert p.result.outcome == "signaled"
    tree.assert_all_dead()
    # terminate() after the end does nothing (no pid is signalled blindly).
    p.terminate()
    p.kill()

    p = corral.Popen(["sh", "-c", '"$H" kid2 & exec "$H" root2'], env=tree.env)
    tree.pid("kid2")
    with pytest.raises(subprocess.TimeoutExpired):
        p.wait(timeout=0.1)
    p.terminate()
    assert p.wait(timeout=SLACK) == -signal.SIGTERM
    tree.assert_all_dead()


def test_a_signal_the_root_survives_does_not_end_the_run(tree):
    p = corral.Popen(["sh", "-c", "trap 'echo got-usr1' USR1; while :; do sleep 0.05; done"], stdout=corral.PIPE, text=True)
    time.sleep(0.3)
    p.send_signal(signal.SIGUSR1)
    assert p.stdout.readline() == "got-usr1\n"
    assert p.poll() is None
    p.kill()
    assert p.wait(timeout=SLACK) == -signal.SIGKILL


def test_context_manager_waits_and_closes(tree):
    with corral.Popen(["sh", "-c", "echo x"], stdout=corral.PIPE) as p:
        assert p.stdout.read() == b"x\n"
    assert p.returncode == 0 and p.stdout.closed
    assert isinstance(p.result, corral.Result) and p.result.pid == p.pid


def test_dropped_popen_kills_its_tree(tree):
    import gc

    p = corral.Popen(["sh", "-c", '"$H" dropped-kid & "$H" dropped-root'], env=tree.env)
    tree.pid("dropped-kid")
    with pytest.warns(ResourceWarning):
        del p
        gc.collect()
    assert tree.wait_dead("dropped-kid") and tree.wait_dead("dropped-root")


def test_create_subprocess_exec_and_shell(tree):
    async def main():
        p = await corral.create_subprocess_exec("cat", stdin=corral.PIPE, stdout=corral.PIPE)
        p.stdin.write(b"line\n")
        await p.stdin.drain()
        assert await p.stdout.readline() == b"line\n"
        out, err = await p.communicate(b"rest")
        assert (out, err) == (b"rest", None) and p.returncode == 0
        assert p.result.outcome == "exited"

        p = await corral.create_subprocess_shell("echo out; echo err >&2; exit 4", stdout=corral.PIPE, stderr=corral.PIPE)
        assert await p.communicate() == (b"out\n", b"err\n")
        assert await p.wait() == 4

        # Held pipe: communicate comes back after the wait delay, holder killed.
        t0 = time.monotonic()
        p = await corral.create_subprocess_shell('"$H" aholder & echo done', env=tree.env, stdout=corral.PIPE, wait_delay=0.5)
        assert (await p.communicate())[0] == b"done\n"
        assert time.monotonic() - t0 < 0.5 + SLACK and p.result.outcome == "output_held"

        p = await corral.create_subprocess_exec("sh", "-c", '"$H" akid & "$H" aroot', env=tree.env)
        tree.pid("akid")
        p.terminate()
        assert await asyncio.wait_for(p.wait(), SLACK) == -signal.SIGTERM

    asyncio.run(main())
    tree.pid("aholder")
    tree.assert_all_dead()


def test_async_waiters_share_one_completion(tree):
    async def main():
        p = await corral.create_subprocess_exec("sh", "-c", "sleep 0.3; exit 5")
        codes = await asyncio.wait_for(asyncio.gather(p.wait(), p.wait(), p.communicate()), SLACK)
        assert codes[:2] == [5, 5] and codes[2] == (None, None)
        assert await p.wait() == 5

    asyncio.run(main())
