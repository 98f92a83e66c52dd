"""Every field of the library's report on the result object, crash safety
(reported, and required), and running out of file descriptors: with real
process trees, each helper's fate checked through its pidfd."""

from __future__ import annotations

import errno
import os
import resource
import subprocess
import sys
import textwrap
import time

import pytest

import corral
from conftest import cgroup_available

SLACK = 5.0


def _child(script: str, env: dict, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_result_has_every_field_of_the_report(tree):
    script = """trap '' TERM; "$H" stubborn sh -c 'trap "" TERM; while :; do sleep 0.05; done' & echo out; "$H" waiter"""
    t0 = time.monotonic()
    with pytest.raises(corral.TimeoutExpired) as e:
        corral.run(["sh", "-c", script], env=tree.env, timeout=0.5, grace=0.3, capture_output=True)
    r = e.value.result
    elapsed = time.monotonic() - t0
    tree.pid("stubborn")
    tree.pid("waiter")
    tree.assert_all_dead()
    assert r.outcome == "timed_out", r
    assert elapsed < 0.8 + SLACK
    # Field by field: every key of the report is an attribute.
    converted = {"timings", "usage", "stdout", "stderr", "returncode"}
    for k, v in r.report.items():
        assert hasattr(r, k), f"Result lacks {k}"
        if k not in converted:
            assert getattr(r, k) == v, (k, getattr(r, k), v)
    assert r.crash_safe is True and r.crash_safety_note is None
    assert r.signals_sent == ["TERM", "KILL"]
    assert r.cleanup_error is None and r.cleanup_errors == [] and r.survivors == []
    assert r.limits_hit == []
    assert r.stdout == b"out\n" and r.stdout_bytes == 4 and r.stderr_bytes == 0
    assert r.containment in ("cgroup", "subreaper", "process_group")
    assert r.containment_note is None or isinstance(r.containment_note, str)
    t = r.timings
    assert isinstance(t, corral.Timings)
    assert t == tuple(r.report["timings"][f] for f in corral.Timings._fields)
    assert 0 <= t.spawn <= t.cleanup_done <= r.duration + 0.001
    # The root was killed at the deadline: its exit was seen, after it.
    assert t.root_exit is not None and 0.5 <= t.root_exit <= t.cleanup_done
    if r.containment == "cgroup":
        assert isinstance(r.usage, corral.Usage)
        assert r.usage == tuple(r.report["usage"][f] for f in corral.Usage._fields)
    else:
        assert r.usage is None
    # Streams not captured: no bytes seen, None as the stream itself.
    r = corral.run(["sh", "-c", "echo gone"], stdout=corral.DEVNULL, stderr=corral.PIPE)
    assert r.stdout is None and r.stdout_bytes is None and r.stderr_bytes == 0


def test_every_failed_cleanup_step_is_shown_in_order():
    # Two steps failing for real needs a frozen tree and a killed keeper (the
    # library's frozen_survivors test does it); here the report of a clean
    # run is given the two failures, as the library reports them, to check
    # what Python makes of them.
    r = corral.run(["true"], timeout=10, capture_output=True)
    assert r.cleanup_errors == [] and r.cleanup_error is None and r.ok
    report = dict(r.report)
    failures = [
        {"step": "confirm_death", "error": "2 process(es) of the tree survived SIGKILL past the confirm window: [7, 8]", "os_error": None},
        {"step": "crash_safety", "error": "crash safety was required but lost during the run: the keeper died", "os_error": None},
    ]
    report.update(
        outcome="cleanup_failed",
        cleanup_errors=failures,
        cleanup_error="; ".join(f["error"] for f in failures),
        survivors=[7, 8],
        returncode=None,
    )
    res = corral.Result(r.args, report, False, None, None)
    assert res.outcome == "cleanup_failed" and not res.ok
    assert [f["step"] for f in res.cleanup_errors] == ["confirm_death", "crash_safety"]
    assert res.cleanup_errors == failures
    err = corral._error_for(res)
    assert isinstance(err, corral.CleanupFailed)
    msg = str(err)
    assert msg.index("survived SIGKILL") < msg.index("the keeper died"), msg


def test_usage_and_limits_hit_in_the_cgroup_tier(tree):
    if not cgroup_available():
        pytest.skip("no writable cgroup v2 here (needs root or a delegated cgroup)")
    script = 'for i in 1 2 3 4 5 6; do "$H" "k$i" sleep 0.3 & done; wait'
    r = corral.run(["sh", "-c", script], env=tree.env, containment="cgroup", pids_max=4, timeout=60)
    assert r.containment == "cgroup"
    assert "pids" in r.limits_hit, r.report
    assert r.usage is not None and r.usage.pids_peak is not None and r.usage.pids_peak <= 4
    assert r.crash_safe is True
    tree.assert_all_dead()


def test_required_crash_safety_runs_as_usual_when_it_can_be_had(tree):
    r = corral.run(["sh", "-c", '"$H" kid >/dev/null 2>&1 & while [ ! -e "$CORRAL_TEST_DIR/kid.pid" ]; do sleep 0.01; done; exit 2'], env=tree.env, require_crash_safety=True, timeout=60)
    assert r.returncode == 2 and r.crash_safe is True and r.crash_safety_note is None
    tree.pid("kid")
    assert tree.wait_dead("kid"), "a nonzero exit left its child"
    with corral.spawn(["sh", "-c", 'exec "$H" root'], env=tree.env, require_crash_safety=True) as p:
        tree.pid("root")
    assert p.result.outcome == "cancelled" and p.result.crash_safe is True
    assert tree.wait_dead("root")


def test_keeper_failure_is_reported_and_refused_when_required(tree):
    # The test seam makes the keeper fail to start in that process: in a
    # child interpreter (the keeper is started once per process).
    env = dict(tree.env, CORRAL_TEST_FAIL_KEEPER="1")
    r = _child(
        """
        import asyncio, corral
        corral.enable_subreaper()
        for tier in ("process_group", "subreaper"):
            script = '"$H" kid-{t} >/dev/null 2>&1 & while [ ! -e "$CORRAL_TEST_DIR/kid-{t}.pid" ]; do sleep 0.01; done; exit 3'
            r = corral.run(["sh", "-c", script.format(t=tier)], containment=tier, timeout=60)
            print(tier, r.outcome, r.returncode, r.crash_safe, "keeper" in (r.crash_safety_note or ""))
            for how in ("run", "spawn", "async"):
                argv = ["sh", "-c", '"$H" never-%s-%s' % (tier, how)]
                kw = dict(containment=tier, require_crash_safety=True, timeout=60)
                try:
                    if how == "run":
                        corral.run(argv, **kw)
                    elif how == "spawn":
                        corral.spawn(argv, **kw).wait()
                    else:
                        asyncio.run(corral.run_async(argv, **kw))
                    print(tier, how, "ran")
                except corral.ContainmentError as e:
                    print(tier, how, "refused", "crash safety required" in str(e))
        # The namespace's init, not the keeper, kills that tree.
        try:
            r = corral.run(["true"], containment="pid_namespace", require_crash_safety=True)
            print("pidns", r.returncode, r.crash_safe)
        except corral.ContainmentError as e:
            print("pidns unavailable", "crash safety" in str(e))
        """,
        env,
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    for tier in ("process_group", "subreaper"):
        # Not required: the run goes ahead, says it is not crash-safe, and
        # is contained as usual (the child of a nonzero exit is killed).
        assert f"{tier} exited 3 False True" in lines, r.stdout
        for how in ("run", "spawn", "async"):
            assert f"{tier} {how} refused True" in lines, r.stdout
            # Refused before the command ran.
            assert not os.path.exists(tree.path(f"never-{tier}-{how}.pid"))
        tree.pid(f"kid-{tier}")
        assert tree.wait_dead(f"kid-{tier}"), f"{tier}: the child of a nonzero exit survived"
    assert "pidns 0 True" in lines or "pidns unavailable False" in lines, r.stdout


def test_out_of_descriptors_is_an_oserror_with_emfile(tree):
    r = _child(
        """
        import corral, errno, os, resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        def open_fds():
            return len(os.listdir("/proc/self/fd")) - 1  # less listdir's own
        # Before any run: the binding's own runtime cannot be made either.
        resource.setrlimit(resource.RLIMIT_NOFILE, (open_fds(), hard))
        try:
            corral.run(["sh", "-c", '"$H" first'], capture_output=True)
            print("first ran")
        except OSError as e:
            print("first", e.errno == errno.EMFILE, type(e) is OSError, "RLIMIT_NOFILE" in str(e))
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        assert corral.run(["true"]).returncode == 0
        # Room for a few runs only.
        resource.setrlimit(resource.RLIMIT_NOFILE, (open_fds() + 12, hard))
        started, err = [], None
        for i in range(64):
            try:
                started.append(corral.spawn(["sh", "-c", 'exec "$H" s%d' % i], timeout=60, capture_output=True))
            except OSError as e:
                err = e
                break
        print("started", len(started))
        print("emfile", err.errno == errno.EMFILE, type(err) is OSError, err.filename)
        print("message", "RLIMIT_NOFILE" in str(err), "corral.raise_nofile_limit()" in str(err))
        # Each started helper ran (so the test can pin it) before its cancel.
        import time
        end = time.monotonic() + 20
        d = os.environ["CORRAL_TEST_DIR"]
        while not all(os.path.exists(f"{d}/s{i}.pid") for i in range(len(started))):
            assert time.monotonic() < end, "helpers never started"
            time.sleep(0.01)
        time.sleep(0.1)  # the test's watcher pins them
        for p in started:
            p.cancel()
            assert p.wait().outcome == "cancelled"
        # raise_nofile_limit: the soft limit up to the hard one.
        got = corral.raise_nofile_limit()
        want = None if hard == resource.RLIM_INFINITY else hard
        print("raised", got == want, resource.getrlimit(resource.RLIMIT_NOFILE)[0] == hard)
        print("after", corral.run(["true"]).returncode)
        """,
        tree.env,
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "first True True True" in lines, r.stdout
    assert not os.path.exists(tree.path("first.pid"))
    n = int(next(line for line in lines if line.startswith("started ")).split()[1])
    assert 1 <= n < 64, r.stdout
    assert "emfile True True sh" in lines, r.stdout
    assert "message True True" in lines, r.stdout
    assert "raised True True" in lines and "after 0" in lines, r.stdout
    for i in range(n):
        tree.pid(f"s{i}")
    # The runs started were cancelled, the spawns that failed left nothing
    # (the fixture fails the test for any process of this tree left alive).
    tree.assert_all_dead()


def test_raise_nofile_limit_in_this_process_is_idempotent():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        got = corral.raise_nofile_limit()
        want = None if hard == resource.RLIM_INFINITY else hard
        assert got == want
        assert corral.raise_nofile_limit() == want
        assert resource.getrlimit(resource.RLIMIT_NOFILE) == (hard, hard)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_fields_through_run_async(tree):
    import asyncio

    r = asyncio.run(corral.run_async(["sh", "-c", "echo x; exit 4"], require_crash_safety=True, capture_output=True))
    assert r.returncode == 4 and r.crash_safe is True and r.stdout_bytes == 2
    assert isinstance(r.timings, corral.Timings) and r.signals_sent == []
    assert errno.EMFILE == 24  # the number the binding raises on every Unix


_FREEZER = "/sys/fs/cgroup/freezer"


def _own_keeper(timeout: float = 10.0):
    """This process's live crash-safety keeper: its child named
    corral-keeper (unreaped while this process lives, so its pid names it)."""
    end = time.monotonic() + timeout
    while True:
        kids = []
        for t in os.listdir(f"/proc/{os.getpid()}/task"):
            try:
                with open(f"/proc/{os.getpid()}/task/{t}/children") as f:
                    kids += f.read().split()
            except OSError:
                pass
        for p in kids:
            try:
                with open(f"/proc/{p}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            if "(corral-keeper)" in stat and stat[stat.rindex(")") + 2] != "Z":
                return int(p)
        if time.monotonic() > end:
            return None
        time.sleep(0.005)


@pytest.mark.skipif(
    os.geteuid() != 0 or not os.path.exists(os.path.join(_FREEZER, "cgroup.procs")),
    reason="needs root and the cgroup v1 freezer",
)
def test_two_real_cleanup_failures_are_both_shown_in_order(tree):
    # The run requires crash safety and its keeper is killed; then the
    # command and its child are frozen, so they survive the SIGKILL after
    # the deadline: two steps fail, in this order.
    frozen = os.path.join(_FREEZER, f"corral-pytest-{os.getpid()}")
    os.mkdir(frozen)
    try:
        script = 'echo $$ > "$CORRAL_TEST_DIR/root.pid"; "$H" child & wait'
        job = corral.spawn(
            ["sh", "-c", script],
            env=tree.env,
            containment="process_group",
            require_crash_safety=True,
            timeout=2,
            stdout=corral.DEVNULL,
            stderr=corral.DEVNULL,
        )
        keeper = _own_keeper()
        assert keeper, "no keeper while a run is registered"
        os.kill(keeper, 9)
        root, child = tree.pid("root"), tree.pid("child")
        for pid in (root, child):
            with open(os.path.join(frozen, "cgroup.procs"), "w") as f:
                f.write(str(pid))
        with open(os.path.join(frozen, "freezer.state"), "w") as f:
            f.write("FROZEN")
        end = time.monotonic() + 5
        while open(os.path.join(frozen, "freezer.state")).read().strip() != "FROZEN":
            assert time.monotonic() < end, "the freezer cgroup did not freeze"
            time.sleep(0.005)
        t0 = time.monotonic()
        r = job.wait()
        assert time.monotonic() - t0 < 40
    finally:
        try:
            with open(os.path.join(frozen, "freezer.state"), "w") as f:
                f.write("THAWED")
        except OSError:
            pass
        end = time.monotonic() + 5
        while True:
            try:
                os.rmdir(frozen)
                break
            except OSError:
                if time.monotonic() > end:
                    break
                time.sleep(0.01)
    assert r.outcome == "cleanup_failed", r
    assert [e["step"] for e in r.cleanup_errors] == ["confirm_death", "crash_safety"], r.cleanup_errors
    assert r.cleanup_errors == r.report["cleanup_errors"]
    assert sorted(r.survivors) == sorted([root, child])
    assert r.cleanup_error.index(r.cleanup_errors[0]["error"]) < r.cleanup_error.index(r.cleanup_errors[1]["error"])
    assert isinstance(corral._error_for(r), corral.CleanupFailed)
    tree.assert_all_dead()
