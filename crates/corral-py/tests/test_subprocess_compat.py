"""corral.run and friends keep subprocess's contracts (always run, whether
or not the interpreter ships CPython's own tests): timeouts raise, returncode
-N, CompletedProcess, capture opt-in, the helper functions, cwd errors,
executable=, mutually exclusive arguments, and every Popen keyword that
subprocess.run forwards. Real trees, cleaned up by the ``tree`` fixture."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import warnings

import pytest

import corral

SLACK = 5.0


def test_timeout_always_raises_with_bytes_output_and_kills_the_tree(tree):
    for check in (False, True):
        t0 = time.monotonic()
        with pytest.raises(subprocess.TimeoutExpired) as e:
            corral.run(
                ["sh", "-c", 'printf part; printf err >&2; "$H" kid-%s & "$H" root-%s' % (check, check)],
                env=tree.env, timeout=0.5, check=check, capture_output=True, text=True,
            )
        assert time.monotonic() - t0 < 0.5 + SLACK
        exc = e.value
        assert isinstance(exc, corral.TimeoutExpired) and exc.timeout == 0.5
        # Bytes even in text mode, as subprocess documents; stdout aliases output.
        assert exc.output == b"part" and exc.stdout == b"part" and exc.stderr == b"err"
        assert exc.result.outcome == "timed_out" and exc.result.returncode == -9
        tree.pid(f"kid-{check}")
        tree.pid(f"root-{check}")
        tree.assert_all_dead()
    # Not captured: None, as subprocess.
    with pytest.raises(corral.TimeoutExpired) as e:
        corral.run(["sleep", "30"], timeout=0.2)
    assert e.value.output is None and e.value.stderr is None
    # call() raises too (it does not report None).
    with pytest.raises(subprocess.TimeoutExpired):
        corral.call(["sleep", "30"], timeout=0.2)


def test_result_is_a_completed_process_and_signals_are_negative(tree):
    r = corral.run(["sh", "-c", "kill -TERM $$"])
    assert isinstance(r, subprocess.CompletedProcess) and isinstance(r, corral.Result)
    assert r.returncode == -signal.SIGTERM and r.outcome == "signaled" and r.signal == signal.SIGTERM
    with pytest.raises(subprocess.CalledProcessError) as e:
        r.check_returncode()
    assert e.value.returncode == -15 and isinstance(e.value, corral.Signaled)
    r = corral.run(["sh", "-c", "exit 5"])
    assert r.returncode == 5 and r.stdout is None and r.stderr is None  # capture is opt-in
    assert "returncode=5" in repr(r)


def test_capture_is_opt_in_and_streams_pass_through():
    code = "import corral, sys; r = corral.run(['sh', '-c', 'echo out; echo err >&2']); print('captured', r.stdout, r.stderr)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True)
    assert r.stdout == b"out\ncaptured None None\n" and r.stderr == b"err\n"
    r = corral.run(["sh", "-c", "echo out; echo err >&2"], stdout=corral.PIPE)
    assert r.stdout == b"out\n" and r.stderr is None
    r = corral.run(["sh", "-c", "echo out; echo err >&2"], capture_output=True)
    assert (r.stdout, r.stderr) == (b"out\n", b"err\n")
    # stdin=PIPE with no input: end of file at once (subprocess closes it).
    assert corral.run(["cat"], stdin=corral.PIPE, capture_output=True).stdout == b""


def test_helper_functions_have_subprocess_signatures():
    assert corral.call(["sh", "-c", "exit 3"]) == 3
    assert corral.call("exit 4", shell=True) == 4
    assert corral.check_call(["true"]) == 0
    with pytest.raises(subprocess.CalledProcessError) as e:
        corral.check_call(["sh", "-c", "exit 2"])
    assert e.value.returncode == 2 and e.value.output is None
    assert corral.check_output(["echo", "hi"]) == b"hi\n"
    assert corral.check_output(["cat"], input="x", text=True) == "x"
    assert corral.check_output(["cat"], input=None) == b""  # input=None is empty input, as subprocess
    with pytest.raises(subprocess.CalledProcessError) as e:
        corral.check_output(["sh", "-c", "echo partial; exit 1"])
    assert e.value.output == b"partial\n"
    with pytest.raises(ValueError):
        corral.check_output(["true"], stdout=corral.PIPE)
    assert corral.getstatusoutput("echo a; echo b >&2; exit 7") == (7, "a\nb")
    assert corral.getoutput("echo hello") == "hello"
    # Positional Popen arguments, as subprocess.run(args, bufsize, executable, ...).
    assert corral.run(["sh", "-c", "exit 6"], -1, None).returncode == 6


def test_bad_cwd_raises_the_chdir_error_with_filename(tmp_path):
    missing = tmp_path / "missing"
    with pytest.raises(FileNotFoundError) as e:
        corral.run(["true"], cwd=missing)
    assert e.value.filename == str(missing)
    f = tmp_path / "file"
    f.write_text("")
    with pytest.raises(NotADirectoryError) as e:
        corral.run(["true"], cwd=f)
    assert e.value.filename == str(f)
    if os.geteuid() != 0:
        d = tmp_path / "closed"
        d.mkdir(mode=0o000)
        with pytest.raises(PermissionError) as e:
            corral.run(["true"], cwd=d)
        assert e.value.filename == str(d)


def test_executable_replaces_the_program_not_argv0():
    r = corral.run(["my-name", "-c", "import sys; print(sys.orig_argv[0])"], executable=sys.executable, capture_output=True)
    assert r.stdout == b"my-name\n"
    r = corral.run("echo $0", shell=True, executable="/bin/sh", capture_output=True)
    assert r.stdout == b"/bin/sh\n"


def test_mutually_exclusive_arguments_are_value_errors(tmp_path):
    with open(tmp_path / "f", "wb+") as f:
        with pytest.raises(ValueError, match="capture_output"):
            corral.run(["true"], capture_output=True, stdout=f)
        with pytest.raises(ValueError, match="capture_output"):
            corral.run(["true"], capture_output=True, stderr=f)
        with pytest.raises(ValueError, match="stdin and input"):
            corral.run(["true"], stdin=f, input=b"x")
    with pytest.raises(ValueError, match="startupinfo"):
        corral.run(["true"], startupinfo=object())
    with pytest.raises(ValueError, match="creationflags"):
        corral.run(["true"], creationflags=1)
    with pytest.raises(ValueError, match="embedded null"):
        corral.run(["echo", "a\0b"])
    with pytest.raises(ValueError):
        corral.run(["true"], env={"A=B": "x"})
    with pytest.raises(ValueError):
        corral.run(["true"], extra_groups=[-1])
    with pytest.raises(OverflowError):
        corral.run(["true"], user=2**64)


def test_preexec_fn_is_refused_with_what_to_use_instead():
    ran = []
    with pytest.raises(ValueError) as e:
        corral.run(["true"], preexec_fn=lambda: ran.append(1))
    msg = str(e.value)
    assert "preexec_fn" in msg and "start_new_session" in msg and "umask" in msg
    assert ran == []


def test_inheritable_descriptors_reach_the_child_only_through_pass_fds():
    r, w = os.pipe()
    os.set_inheritable(w, True)
    try:
        probe = ["sh", "-c", f"[ -e /proc/self/fd/{w} ] && echo open || echo closed"]
        assert corral.run(probe, capture_output=True).stdout == b"closed\n"
        assert corral.run(probe, capture_output=True, pass_fds=[w]).stdout == b"open\n"
        assert corral.run(probe, capture_output=True, close_fds=False).stdout == b"open\n"
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            assert corral.run(probe, capture_output=True, close_fds=False, pass_fds=[w]).stdout == b"open\n"
        assert any(issubclass(x.category, RuntimeWarning) for x in got)
        # A pass_fds descriptor that is not inheritable in the parent still reaches the child.
        os.set_inheritable(w, False)
        assert corral.run(probe, capture_output=True, pass_fds=[w]).stdout == b"open\n"
        assert not os.get_inheritable(w)
        for c in ("process_group", "pid_namespace"):
            try:
                out = corral.run(probe, capture_output=True, containment=c).stdout
            except corral.ContainmentError:
                continue
            assert out == b"closed\n", c
    finally:
        os.close(r)
        os.close(w)


def test_umask_session_and_process_group(tree):
    r = corral.run([sys.executable, "-c", "import os; print(oct(os.umask(0)))"], umask=0o077, capture_output=True, text=True)
    assert r.stdout == "0o77\n"
    code = "import os; print(os.getsid(0) == os.getpid(), os.getpgid(0) == os.getpid())"
    r = corral.run([sys.executable, "-c", code], start_new_session=True, capture_output=True, text=True)
    assert r.stdout == "True True\n"
    r = corral.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.stdout == ("False True\n" if os.getsid(0) != os.getpid() else "True True\n")
    # A new session stays contained: its grandchild is killed on timeout.
    with pytest.raises(corral.TimeoutExpired):
        corral.run(["sh", "-c", '"$H" sess-kid & "$H" sess-root'], env=tree.env, start_new_session=True, timeout=0.5)
    tree.pid("sess-kid")
    tree.assert_all_dead()
    assert corral.run(["true"], process_group=0).returncode == 0
    with pytest.raises(ValueError, match="process group"):
        corral.run(["true"], process_group=os.getpgid(0))


def test_restore_signals():
    # CPython ignores SIGXFSZ and SIGPIPE; restore_signals (the default) resets them.
    code = "import signal; print(signal.getsignal(signal.SIGXFSZ) == signal.SIG_DFL)"
    sh = ["sh", "-c", "grep SigIgn /proc/self/status"]
    r = corral.run(sh, capture_output=True, text=True)
    ign = int(r.stdout.split()[1], 16)
    assert not ign & (1 << (signal.SIGXFSZ - 1)) and not ign & (1 << (signal.SIGPIPE - 1))
    r = corral.run(sh, capture_output=True, text=True, restore_signals=False)
    ign = int(r.stdout.split()[1], 16)
    assert ign & (1 << (signal.SIGXFSZ - 1)), "restore_signals=False keeps SIGXFSZ ignored"
    assert ign & (1 << (signal.SIGPIPE - 1)), "restore_signals=False keeps SIGPIPE ignored"
    del code


@pytest.mark.skipif(os.geteuid() != 0, reason="changing ids needs root")
def test_user_group_extra_groups_as_root():
    probe = ["sh", "-c", "id -u; id -g; id -G"]
    r = corral.run(probe, user=65534, group=65534, extra_groups=[65533, 65532], capture_output=True, text=True)
    uid, gid, groups = r.stdout.splitlines()
    assert (uid, gid) == ("65534", "65534") and set(groups.split()) == {"65534", "65533", "65532"}, r.stdout
    import pwd

    name = pwd.getpwuid(65534).pw_name
    r = corral.run(["id", "-u"], user=name, capture_output=True, text=True)
    assert r.stdout == "65534\n"


@pytest.mark.skipif(os.geteuid() == 0, reason="as root every id change is allowed")
def test_user_change_without_privilege_is_a_permission_error():
    with pytest.raises(PermissionError):
        corral.run(["true"], user=0 if os.getuid() != 0 else 1)


def test_bufsize_startupinfo_creationflags_are_accepted_as_subprocess():
    assert corral.run(["true"], bufsize=0, creationflags=0, startupinfo=None, pipesize=-1).returncode == 0
    with pytest.raises(TypeError):
        corral.run(["true"], bufsize="big")
