"""corral.Session: a persistent shell whose state carries over, each command
bounded and contained on its own (real process trees, pinned by the tree
fixture before anything runs)."""

import os
import subprocess
import time

import pytest

import corral


def wait_until(cond, timeout=10.0):
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end
        time.sleep(0.01)


def test_state_carries_over(tree, tmp_path):
    (tmp_path / "sub").mkdir()
    with corral.Session(cwd=tmp_path / "sub", env={"GREETING": "hi"}) as s:
        r = s.run("cd ..; export A=1; B='x y'; f() { echo \"f $1\"; }; alias g='echo aliased'; set -o pipefail; umask 027")
        assert isinstance(r, corral.Result) and r.ok and r.session_id == s.id
        for _ in range(100):
            s.run("n=$((n+1))")
        r = s.run("echo \"$PWD|$A|$B|$n|$GREETING|$PAGER\"; f y; g; [[ -o pipefail ]] && echo pf; umask", text=True)
        assert r.stdout == f"{os.path.realpath(tmp_path)}|1|x y|100|hi|cat\nf y\naliased\npf\n0027\n"
        assert r.session_ended is None and r.jobs == []


def test_exact_output_and_eof_stdin(tree):
    with corral.Session() as s:
        r = s.run(r"printf 'a\0b\377# corral: complete\n$ '; printf 'e' >&2; read x; echo rc=$? >&2")
        assert r.stdout == b"a\0b\xff# corral: complete\n$ "
        assert r.stderr == b"erc=1\n"
        assert s.run("printf x", text=True).stdout == "x"


def test_timeout_kills_the_command_alone_and_the_session_survives(tree):
    with corral.Session(env=tree.env) as s:
        r = s.run('"$H" server >/dev/null 2>&1 & until [ -s "$CORRAL_TEST_DIR/server.pid" ]; do sleep 0.01; done; X=1')
        server = tree.pid("server")
        assert [p for p, _ in r.jobs] == [server]
        t = time.monotonic()
        r = s.run('setsid "$H" escaper & until [ -s "$CORRAL_TEST_DIR/escaper.pid" ]; do sleep 0.01; done; sleep 30', timeout=1)
        assert r.outcome == "timed_out" and r.timeout_kind == "deadline"
        assert time.monotonic() - t < 10
        tree.pid("escaper")
        assert tree.wait_dead("escaper"), "the escaper survived the timeout"
        assert tree.alive("server"), "the server died with another command"
        assert s.run("echo $X", text=True).stdout == "1\n"
        with pytest.raises(corral.TimeoutExpired):
            s.run("sleep 5", timeout=0.2, check=True)
        assert s.run("echo idle; sleep 30", idle_timeout=0.3).timeout_kind == "idle"
        assert s.run("yes", max_output=10000).outcome == "output_limit"
        assert [p for p, _ in s.jobs()] == [server]
        assert s.kill_job(server)
        assert tree.wait_dead("server")
        assert s.jobs() == []


def test_close_kills_the_jobs(tree):
    s = corral.Session(env=tree.env)
    s.run('setsid "$H" job >/dev/null 2>&1 & until [ -s "$CORRAL_TEST_DIR/job.pid" ]; do sleep 0.01; done')
    tree.pid("job")
    s.close()
    assert tree.wait_dead("job")
    with pytest.raises(corral.SessionClosed):
        s.run("true")


@pytest.mark.parametrize("line,code", [("exit 3", 3), ("exec true", 0), ("kill -9 $$", -9)])
def test_ending_the_shell_ends_the_session(tree, line, code):
    with corral.Session(env=tree.env) as s:
        s.run('"$H" job >/dev/null 2>&1 & until [ -s "$CORRAL_TEST_DIR/job.pid" ]; do sleep 0.01; done')
        tree.pid("job")
        r = s.run(line)
        assert r.returncode == code and r.session_ended is not None
        assert s.ended is not None
        assert tree.wait_dead("job"), "a job outlived its session"
        with pytest.raises(corral.SessionClosed):
            s.run("true")


def test_owner_killed_leaves_nothing(tree):
    script = (
        "import corral, time\n"
        "s = corral.Session()\n"
        "s.run('\"$H\" job >/dev/null 2>&1 & until [ -s \"$CORRAL_TEST_DIR/job.pid\" ]; do sleep 0.01; done')\n"
        "print('ready', flush=True)\n"
        "s.run('\"$H\" live')\n"
    )
    p = subprocess.Popen([os.sys.executable, "-c", script], env=tree.env, stdout=subprocess.PIPE)
    try:
        assert p.stdout.readline() == b"ready\n"
        tree.pid("job")
        tree.pid("live")
        p.kill()
        p.wait()
        assert tree.wait_dead("job", 3), "a job outlived its owner"
        assert tree.wait_dead("live", 3), "a running command outlived its owner"
    finally:
        p.kill()
        p.wait()
