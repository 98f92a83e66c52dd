"""``idle_timeout=`` and ``max_output=`` (issue #26, parts 1 and 2) with
real process trees: the outcome, ``timeout_kind``, the byte counts and each
helper's fate."""

from __future__ import annotations

import time

import pytest

import corral

SLACK = 5.0


def test_idle_timeout_kills_a_silent_tree_and_spares_a_chatty_one(tree):
    t = time.monotonic()
    # A timeout always raises, as subprocess's (the idle one too), with the
    # result on the exception.
    with pytest.raises(corral.TimeoutExpired) as e:
        corral.run(["sh", "-c", '"$H" kid & exec "$H" root'], env=tree.env, idle_timeout=0.4, timeout=60,
                   capture_output=True)
    took = time.monotonic() - t
    r = e.value.result
    assert e.value.timeout == 0.4
    assert r.outcome == "timed_out"
    assert r.timeout_kind == "idle"
    assert 0.4 <= took < 0.4 + SLACK
    assert tree.wait_dead("root") and tree.wait_dead("kid")
    tree.assert_all_dead()
    chatty = "i=0; while [ $i -lt 12 ]; do echo tick; sleep 0.1; i=$((i+1)); done"
    r = corral.run(["sh", "-c", chatty], env=tree.env, idle_timeout=0.5, timeout=60, capture_output=True)
    assert r.outcome == "exited" and r.returncode == 0
    assert r.timeout_kind is None
    assert r.stdout.count(b"tick") == 12
    # Nothing captured: nothing could restart the timer.
    with pytest.raises(ValueError, match="idle timeout"):
        corral.run(["true"], stdout=corral.DEVNULL, stderr=corral.DEVNULL, idle_timeout=1)


def test_max_output_kills_a_flood_at_the_limit(tree):
    r = corral.run(["sh", "-c", '"$H" kid & exec yes'], env=tree.env, max_output=100_000, timeout=60,
                   capture_output=True)
    assert r.outcome == "output_limit"
    assert r.timeout_kind is None
    assert len(r.stdout) == 100_000
    assert r.stdout_bytes > 100_000
    tree.assert_all_dead()
    r = corral.run(
        ["sh", "-c", "head -c 3000 /dev/zero; head -c 3000 /dev/zero >&2; exec sleep 30"],
        max_output=4000,
        timeout=60,
        capture_output=True,
    )
    assert r.outcome == "output_limit"
    assert (r.stdout_bytes, r.stderr_bytes) == (3000, 3000)
    assert (len(r.stdout), len(r.stderr)) == (3000, 1000)
    with pytest.raises(corral.OutputLimitExceeded):
        corral.run(["yes"], max_output=10, check=True, capture_output=True)
