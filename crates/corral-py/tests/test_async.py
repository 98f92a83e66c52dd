"""corral.run_async: no thread per command, cancellation kills the tree."""

from __future__ import annotations

import asyncio
import subprocess
import threading
import time

import pytest

import corral


def os_threads() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    raise AssertionError("no Threads: line")


def test_run_async_result_and_check(tree):
    async def main():
        r = await corral.run_async(["sh", "-c", "echo hi; exit 2"], capture_output=True)
        assert r.outcome == "exited" and r.returncode == 2 and r.stdout == b"hi\n"
        with pytest.raises(subprocess.CalledProcessError):
            await corral.run_async(["false"], check=True)
        r = await corral.run_async(["sh", "-c", '"$H" held & exit 0'], env=tree.env, wait_delay=0.3, capture_output=True)
        assert r.outcome == "output_held"

    asyncio.run(main())
    tree.assert_all_dead()


def test_cancelling_the_task_kills_the_tree(tree):
    async def main():
        task = asyncio.ensure_future(corral.run_async(["sh", "-c", '"$H" grandchild & "$H" root'], env=tree.env))
        for name in ("grandchild", "root"):
            deadline = time.monotonic() + 10
            while not tree.alive(name):
                assert time.monotonic() < deadline, f"helper {name} never started"
                await asyncio.sleep(0.01)
        t0 = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return time.monotonic() - t0

    elapsed = asyncio.run(main())
    assert elapsed < 5
    # Dead by the time the cancellation completed.
    assert not tree.alive("grandchild") and not tree.alive("root")


def test_timeout_via_wait_for_kills_the_tree(tree):
    async def main():
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(corral.run_async(["sh", "-c", '"$H" slow'], env=tree.env), 0.5)

    asyncio.run(main())
    tree.pid("slow")
    assert not tree.alive("slow")


def test_fifty_concurrent_runs_use_no_thread_each():
    async def main():
        await corral.run_async(["true"])  # the shared runtime thread exists now
        before = os_threads()
        peak = before
        tasks = [asyncio.ensure_future(corral.run_async(["sleep", "0.5"])) for _ in range(50)]
        while not all(t.done() for t in tasks):
            peak = max(peak, os_threads())
            await asyncio.sleep(0.02)
        results = [t.result() for t in tasks]
        return before, peak, results

    before, peak, results = asyncio.run(main())
    assert all(r.returncode == 0 for r in results)
    assert peak == before, f"threads grew from {before} to {peak} for 50 runs"
    assert threading.active_count() >= 1


def test_run_in_threads_concurrently(tree):
    # Many Python threads each blocked in run(): the GIL is released.
    results = []

    def one(i):
        results.append(corral.run(["sh", "-c", f"sleep 0.3; echo {i}"], capture_output=True))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert time.monotonic() - t0 < 0.3 * 8
    assert sorted(int(r.stdout) for r in results) == list(range(8))
