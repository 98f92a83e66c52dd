"""``sandbox=``: the policy type, its mapping onto the library's run spec,
and the run refused (``SandboxError``, nothing run) where the sandbox
cannot be enforced."""

from __future__ import annotations

import json
import os

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


def test_a_sandbox_that_cannot_be_enforced_raises_and_runs_nothing(tree):
    marker = tree.dir / "ran"
    cmd = ["sh", "-c", f"touch {marker}"]
    for sandbox in (True, corral.Sandbox(network="loopback")):
        with pytest.raises(corral.SandboxError, match="sandbox"):
            corral.run(cmd, sandbox=sandbox)
        with pytest.raises(corral.SandboxError, match="sandbox"):
            corral.Popen(cmd, sandbox=sandbox)
    assert issubclass(corral.SandboxError, corral.CorralError)
    assert not marker.exists()
