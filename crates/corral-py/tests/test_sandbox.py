"""``sandbox=``: the policy type, its mapping onto the library's run spec,
and the run refused (``SandboxError``, nothing run) where the sandbox
cannot be enforced."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

import corral
from corral import _corral


def _spec(**kw) -> dict:
    return json.loads(_corral._spec(["true"], **kw))


def test_the_policy_is_checked_and_made_absolute(tmp_path):
    s = corral.Sandbox(allow_write=[tmp_path, "."], deny_read=[b"/etc"], network="loopback")
    assert s.allow_write == [str(tmp_path), os.getcwd()]
    assert s.deny_read == ["/etc"]
    assert s.network == "loopback"
    assert s == corral.Sandbox(allow_write=[str(tmp_path), os.getcwd()], deny_read=["/etc"], network="loopback")
    assert "loopback" in repr(s)
    d = corral.Sandbox()
    assert (d.allow_write, d.deny_read, d.network) == ([], [], "none")
    with pytest.raises(ValueError, match="network must be one of none, loopback, host"):
        corral.Sandbox(network="bogus")
    with pytest.raises(TypeError, match="a list of paths"):
        corral.Sandbox(allow_write="/tmp")
    with pytest.raises(ValueError, match="bad path"):
        corral.Sandbox(deny_read=[""])


def test_sandbox_reaches_the_spec(tmp_path):
    assert "sandbox" not in _spec()
    assert _spec(sandbox=True)["sandbox"] == {"network": "none"}
    got = corral.Sandbox(allow_write=[tmp_path], deny_read=["/etc"], network="host")._native()
    assert _spec(sandbox=got)["sandbox"] == {
        "allow_write": [str(tmp_path)],
        "deny_read": ["/etc"],
        "network": "host",
    }
    assert "sandbox" not in _spec(sandbox=False)
    with pytest.raises(TypeError, match="bad sandbox"):
        _spec(sandbox="yes")
    with pytest.raises(TypeError, match="unknown key"):
        _spec(sandbox={"allow": []})
    with pytest.raises(ValueError, match="expected none, loopback or host"):
        _spec(sandbox={"network": "bogus"})


def test_bad_values_are_refused_before_anything_runs(tree):
    marker = tree.dir / "ran"
    cmd = ["sh", "-c", f"touch {marker}"]
    with pytest.raises(TypeError, match="corral.Sandbox"):
        corral.run(cmd, sandbox="on")
    missing = tree.dir / "missing"
    with pytest.raises(ValueError, match="does not exist"):
        corral.run(cmd, sandbox=corral.Sandbox(allow_write=[missing]))
    with pytest.raises(ValueError, match="does not exist"):
        corral.Popen(cmd, sandbox=corral.Sandbox(deny_read=[missing]))
    assert not marker.exists()


def test_a_sandbox_that_cannot_be_enforced_raises_and_runs_nothing(tree, monkeypatch):
    # Without namespaces (forced), a private loopback cannot be had: the
    # run is refused, never run with the host's network.
    monkeypatch.setenv("CORRAL_SANDBOX_NO_NAMESPACES", "1")
    marker = tree.dir / "ran"
    cmd = ["sh", "-c", f"touch {marker}"]
    with pytest.raises(corral.SandboxError, match="namespace"):
        corral.run(cmd, sandbox=corral.Sandbox(network="loopback"))
    with pytest.raises(corral.SandboxError, match="namespace"):
        corral.Popen(cmd, sandbox=corral.Sandbox(network="loopback"))
    assert issubclass(corral.SandboxError, corral.CorralError)
    assert not marker.exists()


@pytest.fixture
def outside():
    """A directory outside the working directory and outside /tmp (which
    is private in a sandbox): a victim the sandbox must not write."""
    d = tempfile.mkdtemp(prefix="corral-sbx-", dir="/var/tmp")
    os.chmod(d, 0o777)
    yield Path(d)
    shutil.rmtree(d, ignore_errors=True)


def test_a_write_outside_the_working_directory_fails_and_the_host_file_is_intact(tmp_path, outside):
    work = tmp_path
    victim = outside / "victim"
    victim.write_text("host\n")
    script = f"echo bad > {victim} && exit 9; rm -f {victim} && exit 8; echo new > {outside}/new && exit 7; exit 0"
    r = corral.run(["sh", "-c", script], cwd=work, sandbox=True, capture_output=True)
    assert (r.outcome, r.returncode) == ("exited", 0), (r.stderr, r.report)
    assert victim.read_text() == "host\n"
    assert not (outside / "new").exists()
    assert r.report["sandbox"]["network"] == "none"
    # Through Popen too.
    with corral.Popen(["sh", "-c", script], cwd=work, sandbox=True) as p:
        assert p.wait(timeout=30) == 0
    assert victim.read_text() == "host\n"


def test_ordinary_work_runs_inside(tmp_path, outside):
    work = tmp_path
    allowed = outside / "allowed"
    allowed.mkdir()
    allowed.chmod(0o777)
    (outside / "secret").write_text("s3cret\n")
    script = (
        "echo in > inside && echo t > /tmp/t && cat /tmp/t && echo ok > %s/f"
        " && ls | tr '\\n' ' ' && if cat %s/secret; then exit 8; fi"
    ) % (allowed, outside)
    policy = corral.Sandbox(allow_write=[allowed], deny_read=[outside / "secret"])
    r = corral.run(["sh", "-c", script], cwd=work, sandbox=policy, capture_output=True, text=True)
    assert (r.outcome, r.returncode) == ("exited", 0), (r.stderr, r.report)
    assert r.stdout == "t\ninside "
    assert (work / "inside").read_text() == "in\n"
    assert (allowed / "f").read_text() == "ok\n"
    enforced = r.report["sandbox"]
    assert str(allowed) in enforced["allow_write"]
    assert str(outside / "secret") in enforced["deny_read"]
    # A denied path inside a writable one is masked: the command runs and
    # cannot read it; the host's file is intact.
    r = corral.run(
        ["sh", "-c", "if cat %s/secret; then exit 8; fi; echo ok > %s/g; exit 5" % (outside, outside)],
        cwd=work, sandbox=corral.Sandbox(allow_write=[outside], deny_read=[outside / "secret"]),
        capture_output=True, text=True,
    )
    assert (r.outcome, r.returncode) == ("exited", 5), (r.stderr, r.report)
    assert "s3cret" not in r.stdout
    assert (outside / "secret").read_text() == "s3cret\n"
    assert (outside / "g").read_text() == "ok\n"
    # A Python program, with a pipe between two processes (the
    # interpreter itself: a virtual environment under /tmp is not seen
    # inside, /tmp being private).
    python = os.path.realpath(sys.executable)
    r = corral.run(
        ["sh", "-c", f"{python} -c 'print(6 * 7)' | cat"], cwd=work, sandbox=True,
        capture_output=True, text=True,
    )
    assert (r.returncode, r.stdout) == (0, "42\n"), r.stderr


def test_refused_connections_are_listed_in_the_report(tmp_path):
    """The report lists what the kernel refused (not a guess from stderr):
    two TCP attempts, counted exactly, with the command seeing EPERM."""
    program = (
        "import socket\n"
        "for _ in range(2):\n"
        "    try:\n"
        "        socket.socket(socket.AF_INET, socket.SOCK_STREAM).connect(('127.0.0.1', 9))\n"
        "    except OSError as e:\n"
        "        print(e.errno)\n"
    )
    python = os.path.realpath(sys.executable)
    r = corral.run([python, "-c", program], cwd=tmp_path, sandbox=True, capture_output=True, text=True)
    assert (r.outcome, r.returncode) == ("exited", 0), (r.stderr, r.report)
    assert r.stdout == "1\n1\n"
    sb = r.report["sandbox"]
    assert sb["denials"] == [
        {"kind": "network", "operation": "socket", "target": "AF_INET SOCK_STREAM", "count": 2}
    ]
    assert sb["denials_unlisted"] == 0
    observed = {o["kind"]: o["observed"] for o in sb["denials_observed"]}
    assert observed == {"files": False, "network": True, "processes": False}
    # Nothing attempted: nothing listed.
    r = corral.run(["true"], cwd=tmp_path, sandbox=True)
    assert r.report["sandbox"]["denials"] == []
