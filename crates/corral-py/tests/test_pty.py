"""``pty=`` (issue #26, part 3) with real process trees: the command sees a
terminal (its controlling one) of the given size, everything comes out as
stdout, input is typed then end of file, a descendant holding the terminal
past the wait delay is killed, and the idle timeout and the output cap apply
to the terminal's output."""

from __future__ import annotations

import sys
import time

import pytest

import corral

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="no pseudo-terminal on Windows")

SLACK = 5.0

# Waits until the holder has become `sleep` (its HUP trap is set).
READY_HOLDER = (
    'until [ "$(cat /proc/$(cat "$CORRAL_TEST_DIR/holder.pid" 2>/dev/null)/comm 2>/dev/null)" = sleep ]; '
    "do sleep 0.01; done; "
)


def test_the_command_sees_a_terminal_of_the_given_size():
    r = corral.run(
        ["sh", "-c", "[ -t 0 ] && [ -t 1 ] && [ -t 2 ] && echo isatty-ok; : </dev/tty && echo ctty-ok; "
         "echo size=$(stty size); echo to-stderr >&2"],
        pty=(97, 33), capture_output=True, timeout=30,
    )
    assert r.outcome == "exited" and r.returncode == 0, r
    for want in [b"isatty-ok\r\n", b"ctty-ok\r\n", b"size=33 97\r\n", b"to-stderr\r\n"]:
        assert want in r.stdout, r.stdout
    assert r.stderr == b"" and r.stderr_bytes == 0
    assert r.stdout_bytes == len(r.stdout)
    assert b"size=24 80" in corral.run(["sh", "-c", "echo size=$(stty size)"], pty=True, capture_output=True).stdout


def test_input_is_typed_then_end_of_file():
    t = time.monotonic()
    r = corral.run(["sh", "-c", "cat; echo cat-done-$?"], pty=True, input=b"typed\n", capture_output=True, timeout=30)
    assert r.returncode == 0
    assert r.stdout.count(b"typed") == 2  # echoed by the terminal, copied by cat
    assert b"cat-done-0" in r.stdout
    r = corral.run(["cat"], pty=True, stdin=corral.DEVNULL, capture_output=True, timeout=30)
    assert r.returncode == 0
    assert time.monotonic() - t < SLACK


def test_a_terminal_holder_is_killed_after_the_wait_delay(tree):
    t = time.monotonic()
    r = corral.run(
        ["sh", "-c", "\"$H\" holder sh -c \"trap '' HUP; exec sleep 30\" & " + READY_HOLDER + "echo root-done"],
        env=tree.env, pty=True, wait_delay=0.3, timeout=60, capture_output=True,
    )
    took = time.monotonic() - t
    assert r.outcome == "output_held", r
    assert b"root-done" in r.stdout
    assert 0.3 <= took < 0.3 + SLACK
    assert tree.wait_dead("holder")
    tree.assert_all_dead()


def test_idle_timeout_and_max_output_apply_to_the_terminal(tree):
    with pytest.raises(corral.TimeoutExpired) as e:
        corral.run(["sh", "-c", 'exec "$H" quiet'], env=tree.env, pty=True, idle_timeout=0.4, timeout=60,
                   capture_output=True)
    assert e.value.result.timeout_kind == "idle"
    assert tree.wait_dead("quiet")
    r = corral.run(["sh", "-c", 'exec "$H" flood yes'], env=tree.env, pty=True, max_output=5000, timeout=60,
                   capture_output=True)
    assert r.outcome == "output_limit"
    assert len(r.stdout) == 5000 and r.stderr_bytes == 0
    assert tree.wait_dead("flood")
    tree.assert_all_dead()


def test_spawn_on_a_terminal():
    with corral.spawn(["sh", "-c", "stty size"], pty=(40, 10), stdout=corral.PIPE) as p:
        r = p.wait(timeout=30)
    assert r.returncode == 0
    assert r.stdout == b"10 40\r\n"


def test_bad_pty_values_are_refused():
    with pytest.raises(ValueError):
        corral.run(["true"], pty=(0, 24))
    with pytest.raises(TypeError):
        corral.run(["true"], pty="80x24")
    with pytest.raises(TypeError):
        corral.run(["true"], pty=(80.0, 24))
