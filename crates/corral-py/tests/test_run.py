"""corral.run / spawn with real process trees: the return bound, the
outcome, and the fate of every descendant."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import time

import pytest

import corral
from conftest import cgroup_available

# Generous: these assert promises, not speed (the machine is shared).
SLACK = 5.0


def test_clean_exit_and_returncode(tree):
    r = corral.run(["sh", "-c", "echo out; echo err >&2; exit 7"], capture_output=True)
    assert r.outcome == "exited"
    assert r.returncode == 7 and r.exit_code == 7 and r.signal is None
    assert r.stdout == b"out\n" and r.stderr == b"err\n"
    assert r.stdout_omitted == 0 and r.report["stdout_bytes"] == 4
    assert not r.ok
    assert corral.run(["true"]).ok


def test_held_output_returns_at_wait_delay(tree):
    t0 = time.monotonic()
    r = corral.run(["sh", "-c", '"$H" holder & echo done; exit 0'], env=tree.env, wait_delay=0.5, timeout=60, capture_output=True)
    elapsed = time.monotonic() - t0
    assert r.outcome == "output_held", r
    assert r.returncode == 0 and r.exit_code == 0 and not r.ok
    assert r.stdout == b"done\n"
    assert 0.5 <= elapsed < 0.5 + SLACK
    tree.pid("holder")
    assert tree.wait_dead("holder"), "the holder survived"
    assert r.killed >= 1


def test_setsid_escaper_killed_in_cgroup(tree):
    if not cgroup_available():
        pytest.skip("no writable cgroup v2 here (needs root or a delegated cgroup)")
    script = 'setsid "$H" escaper >/dev/null 2>&1 </dev/null & while [ ! -e "$CORRAL_TEST_DIR/escaper.pid" ]; do sleep 0.01; done; exit 1'
    r = corral.run(["sh", "-c", script], env=tree.env, containment="cgroup", timeout=60)
    assert r.containment == "cgroup"
    assert r.outcome == "exited" and r.returncode == 1
    tree.pid("escaper")
    assert tree.wait_dead("escaper"), "the setsid escaper survived a nonzero exit"
    assert r.killed >= 1


def test_setsid_escaper_killed_in_subreaper_tier(tree):
    # Unprivileged too. enable_subreaper is process-wide: in a child interpreter.
    r = _child(
        """
        import corral
        corral.enable_subreaper()
        script = 'setsid "$H" escaper >/dev/null 2>&1 </dev/null & while [ ! -e "$CORRAL_TEST_DIR/escaper.pid" ]; do sleep 0.01; done; exit 1'
        r = corral.run(["sh", "-c", script], containment="subreaper", timeout=60)
        print(r.containment, r.outcome, r.returncode, r.killed)
        """,
        tree,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["subreaper", "exited", "1", "1"], r.stdout
    tree.pid("escaper")
    assert tree.wait_dead("escaper"), "the setsid escaper survived a nonzero exit"


def test_subreaper_tier_without_enable_names_the_python_call(tree):
    # In a child interpreter: enable_subreaper is process-wide and permanent.
    r = _child(
        """
        import corral
        try:
            corral.run(["true"], containment="subreaper")
        except corral.ContainmentError as e:
            print(e)
        """,
        tree,
    )
    assert r.returncode == 0, r.stderr
    assert "corral.enable_subreaper()" in r.stdout, r.stdout
    assert "::" not in r.stdout, r.stdout


def test_version_is_the_package_metadata():
    from importlib.metadata import version

    assert corral.__version__ == version("corral")
    assert corral.__version__ and corral.__version__[0].isdigit()


def test_timeout_with_term_ignoring_grandchild(tree):
    script = """trap '' TERM; "$H" stubborn sh -c 'trap "" TERM; while :; do sleep 0.05; done' & "$H" waiter"""
    t0 = time.monotonic()
    with pytest.raises(corral.TimeoutExpired) as e:
        corral.run(["sh", "-c", script], env=tree.env, timeout=0.5, grace=0.5)
    elapsed = time.monotonic() - t0
    r = e.value.result
    assert r.outcome == "timed_out", r
    assert r.returncode == -9
    assert r.report["signals_sent"] == ["TERM", "KILL"]
    assert 1.0 <= elapsed < 1.0 + SLACK
    tree.pid("stubborn")
    tree.pid("waiter")
    tree.assert_all_dead()


def test_leftovers_policy(tree):
    script = '"$H" kept >/dev/null 2>&1 & while [ ! -e "$CORRAL_TEST_DIR/kept.pid" ]; do sleep 0.01; done; exit 0'
    r = corral.run(["sh", "-c", script], env=tree.env, timeout=60)
    assert r.returncode == 0 and r.kept >= 1
    tree.pid("kept")
    assert tree.alive("kept"), "keep-on-success kept nothing"
    tree.expect_left.add("kept")
    r = corral.run(["sh", "-c", script.replace("kept", "killed")], env=tree.env, timeout=60, leftovers="kill")
    assert r.returncode == 0
    tree.pid("killed")
    assert tree.wait_dead("killed")


def test_check_raises_subprocess_compatible_errors(tree):
    with pytest.raises(subprocess.CalledProcessError) as e:
        corral.run(["sh", "-c", "echo x; exit 3"], check=True, capture_output=True)
    assert isinstance(e.value, corral.CalledProcessError)
    assert isinstance(e.value, corral.CorralError)
    assert e.value.returncode == 3 and e.value.output == b"x\n"
    assert e.value.result.outcome == "exited"

    with pytest.raises(subprocess.TimeoutExpired) as e:
        corral.run(["sh", "-c", '"$H" t'], env=tree.env, timeout=0.3, check=True)
    assert isinstance(e.value, corral.TimeoutExpired) and isinstance(e.value, corral.CorralError)
    assert e.value.timeout == 0.3 and e.value.result.outcome == "timed_out"

    with pytest.raises(corral.OutputHeld) as e:
        corral.run(["sh", "-c", '"$H" h & exit 0'], env=tree.env, wait_delay=0.2, check=True, capture_output=True)
    assert e.value.result.exit_code == 0

    with pytest.raises(corral.Signaled) as e:
        corral.run(["sh", "-c", "kill -KILL $$"], check=True)
    assert e.value.result.signal == 9 and e.value.returncode == -9
    assert isinstance(e.value, subprocess.CalledProcessError)

    assert corral.run(["true"], check=True).returncode == 0
    tree.assert_all_dead()


def test_spawn_failures_are_oserrors(tmp_path):
    with pytest.raises(FileNotFoundError):
        corral.run(["/nonexistent/program"])
    with pytest.raises(FileNotFoundError):
        # A PATH of searchable directories only: a directory we may not
        # search makes the lookup a PermissionError, as in subprocess.
        corral.run(["corral-no-such-program-anywhere"], env={"PATH": "/usr/bin:/bin"})
    f = tmp_path / "notexec"
    f.write_text("#!/bin/sh\n")
    with pytest.raises(PermissionError):
        corral.run([str(f)])
    with pytest.raises(ValueError):
        corral.run([])
    with pytest.raises(ValueError):
        corral.run(["true"], leftovers="sometimes")


def test_subprocess_feel(tmp_path):
    r = corral.run("echo $GREETING; pwd", shell=True, env={"GREETING": "hi", "PATH": os.environ["PATH"]}, cwd=tmp_path, text=True, capture_output=True)
    assert r.stdout == f"hi\n{tmp_path}\n"
    assert corral.run(["cat"], input=b"abc", capture_output=True).stdout == b"abc"
    assert corral.run(['echo "$0:$1"', "zero", "one"], shell=True, capture_output=True).stdout == b"zero:one\n"
    assert corral.run(["cat"], input="é", text=True, encoding="utf-8", capture_output=True).stdout == "é"
    assert corral.run(["printf", "a\\r\\nb\\rc"], text=True, stdout=corral.PIPE).stdout == "a\nb\nc"
    r = corral.run(["sh", "-c", "echo a; echo b >&2"], stderr=corral.STDOUT, stdout=corral.PIPE)
    assert r.stdout == b"a\nb\n" and r.stderr is None
    r = corral.run(["sh", "-c", "echo a"], stdout=corral.DEVNULL, stderr=corral.PIPE)
    assert r.stdout is None and r.stderr == b""
    out = tmp_path / "out"
    with open(out, "wb") as fh:
        corral.run(["sh", "-c", "echo to-file"], stdout=fh)
    assert out.read_bytes() == b"to-file\n"
    r = corral.run(["true"], capture_output=True)
    assert r.returncode == 0
    # stdout=None passes the stream through (here: pytest's captured fd 1).
    r = subprocess.run(
        [sys.executable, "-c", "import corral; corral.run(['echo', 'through'], stdout=None)"],
        capture_output=True,
    )
    assert r.stdout == b"through\n"


def test_capture_is_bounded_head_and_tail():
    r = corral.run(["sh", "-c", "echo BEGIN; head -c 1000000 /dev/zero | tr '\\0' x; echo; echo END"], capture_limit=1000, capture_output=True)
    assert r.stdout.startswith(b"BEGIN\n") and r.stdout.endswith(b"END\n")
    assert len(r.stdout) == 1000
    assert r.stdout_omitted == r.report["stdout_bytes"] - 1000 > 0


def test_process_handle(tree):
    p = corral.spawn(["sh", "-c", 'exec "$H" root'], env=tree.env, timeout=60)
    assert p.pid > 0 and p.poll() is None and p.returncode is None
    assert tree.pid("root") == p.pid
    with pytest.raises(subprocess.TimeoutExpired):
        p.wait(timeout=0.1)
    assert tree.alive("root"), "wait(timeout) must not end the run"
    p.cancel()
    r = p.wait()
    assert r.outcome == "cancelled" and p.returncode == -9
    assert p.poll() is r
    assert tree.wait_dead("root")

    with corral.spawn(["sh", "-c", '"$H" ctx'], env=tree.env) as p2:
        tree.pid("ctx")
    assert p2.result.outcome == "cancelled"
    assert tree.wait_dead("ctx")


def test_collected_handle_kills_its_tree(tree):
    p = corral.spawn(["sh", "-c", '"$H" orphan & "$H" root'], env=tree.env)
    tree.pid("orphan")
    tree.pid("root")
    del p
    gc.collect()
    assert tree.wait_dead("orphan", 10) and tree.wait_dead("root", 10), "a collected handle leaked its tree"


def _child(script: str, tree, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        env=tree.env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_interpreter_exit_kills_live_runs(tree):
    # The child exits (without waiting) only once this test pinned both
    # helpers, so their fate is observed, not inferred.
    go = tree.path("go")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                """
                import corral, os, sys, time
                p = corral.spawn(["sh", "-c", '"$H" a & "$H" b'])
                while not os.path.exists(sys.argv[1]):
                    time.sleep(0.01)
                print("exiting without wait")
                """
            ),
            go,
        ],
        env=tree.env,
    )
    try:
        tree.pid("a")
        tree.pid("b")
        assert tree.alive("a") and tree.alive("b")
        open(go, "w").close()
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert tree.wait_dead("a") and tree.wait_dead("b"), "interpreter exit leaked the tree"


def test_keyboard_interrupt_kills_tree_and_reraises(tree):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                """
                import corral, time, sys
                t0 = time.monotonic()
                try:
                    corral.run(["sh", "-c", '"$H" child & "$H" root'], timeout=120)
                except KeyboardInterrupt:
                    print("interrupted after %.3f" % (time.monotonic() - t0), flush=True)
                    sys.exit(42)
                print("not interrupted")
                """
            ),
        ],
        env=tree.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        tree.pid("child")
        tree.pid("root")
        t0 = time.monotonic()
        proc.send_signal(2)
        out, err = proc.communicate(timeout=60)
        elapsed = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 42, (out, err)
    assert "interrupted" in out
    assert elapsed < SLACK
    # The tree was dead before run() re-raised.
    assert not tree.alive("child") and not tree.alive("root")


def test_300mb_output_peak_rss_is_bounded(tree):
    r = _child(
        """
        import corral, resource
        r = corral.run(["sh", "-c", "head -c 300000000 /dev/zero"], capture_limit=1 << 20, timeout=120, capture_output=True)
        assert r.returncode == 0, r
        assert r.report["stdout_bytes"] == 300000000 and len(r.stdout) == 1 << 20
        # VmHWM: this interpreter's own peak (ru_maxrss would also count the
        # forked parent's pages from before exec).
        print([l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0].split()[1])
        """,
        tree,
        timeout=180,
    )
    assert r.returncode == 0, r.stderr
    rss_mb = int(r.stdout.split()[-1]) / 1024
    assert rss_mb < 40, f"peak RSS {rss_mb:.1f} MB"


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError):
        corral.run(["true"], timeout=-1)
    with pytest.raises(ValueError):
        corral.run(["true"], containment="bogus")
    with pytest.raises(ValueError):
        corral.run(["true"], stdout=corral.STDOUT)
    with pytest.raises(ValueError):
        corral.run(["cat"], input=b"x", stdin=corral.DEVNULL)
    with pytest.raises(ValueError):
        corral.run(["true"], signal="NOPE", grace=1)


def test_many_threads_waiting_on_one_process_share_one_result(tree):
    import threading

    p = corral.spawn(["sh", "-c", "sleep 0.3; echo once"], capture_output=True)
    got = []
    threads = [threading.Thread(target=lambda: got.append(p.wait())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 8 and all(r is got[0] for r in got)
    assert got[0].stdout == b"once\n"


def test_forked_child_exits_at_once_and_parent_run_goes_on(tree):
    # A child forked while a run is live inherits the job's memory but not the
    # thread that drives it: its exit (atexit hook included) must not wait for
    # that run, and the run still belongs to the parent.
    r = _child(
        """
        import corral, os, sys, time
        p = corral.spawn(["sh", "-c", 'exec "$H" root'], timeout=60)
        while not os.path.exists(os.environ["CORRAL_TEST_DIR"] + "/root.pid"):
            time.sleep(0.01)
        t0 = time.monotonic()
        pid = os.fork()
        if pid == 0:
            try:
                p.wait(timeout=1)
                os._exit(3)
            except RuntimeError:
                pass
            sys.exit(0)  # a normal exit: the atexit hook runs
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status), round(time.monotonic() - t0, 3), p.poll() is None)
        p.cancel()
        print(p.wait().outcome)
        """,
        tree,
    )
    assert r.returncode == 0, r.stderr
    code, elapsed, running, outcome = r.stdout.split()
    assert code == "0" and running == "True" and outcome == "cancelled", r.stdout
    assert float(elapsed) < SLACK
    tree.pid("root")
    assert tree.wait_dead("root")
