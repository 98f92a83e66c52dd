"""CPython's own subprocess tests, run against corral.

Imports the interpreter's installed ``test.test_subprocess`` (python.org and
pyenv builds ship it; Debian splits it into ``libpython3.X-testsuite``: then
this module is skipped and ``test_subprocess_compat.py`` still covers the
same contracts) and binds ``run``, ``call``, ``check_call``,
``check_output``, ``getoutput``, ``getstatusoutput`` and ``Popen`` in that
module's ``subprocess`` to corral's. Nothing of CPython is copied here.

Every case runs, except those listed in ``BY_DESIGN`` (a difference the
table in docs/differences.md gives with the promise it serves) and ``INTERNALS`` (cases
that test CPython's implementation: its private functions, its
``_posixsubprocess`` module, or waiting for the child with ``os.waitpid``
behind Popen's back, which corral's supervisor owns).
"""

from __future__ import annotations

import subprocess
import sys
import types
import unittest

import pytest

import corral

if not sys.platform.startswith("linux"):
    pytest.skip("Linux only", allow_module_level=True)

T = pytest.importorskip("test.test_subprocess", reason="the interpreter ships no test.test_subprocess")

_proxy = types.ModuleType("subprocess")
_proxy.__dict__.update(subprocess.__dict__)
for _name in ("run", "call", "check_call", "check_output", "getoutput", "getstatusoutput", "Popen"):
    setattr(_proxy, _name, getattr(corral, _name))
T.subprocess = _proxy

BY_DESIGN = {
    # No Python code runs in corral's child: preexec_fn is refused with a
    # ValueError saying what to use instead.
    "test_preexec": "preexec_fn",
    "test_preexec_exception": "preexec_fn",
    "test_preexec_fork_failure": "preexec_fn",
    "test_preexec_gc_module_failure": "preexec_fn",
    "test_close_fds_after_preexec": "preexec_fn",
    "test_preexec_errpipe_does_not_double_close_pipes": "preexec_fn",
    # The pipe corral.Popen's caller reads is fed by corral's relay (so the
    # wait delay can apply to it), which sizes it for throughput.
    "test_pipesize_default": "relayed pipes",
    "test_pipesizes": "relayed pipes",
    # Ctrl-C while corral waits kills the tree (then re-raises):
    # subprocess lets the child run on.
    "test_call_keyboardinterrupt_no_kill": "Ctrl-C kills the tree",
    "test_run_keyboardinterrupt_no_kill": "Ctrl-C kills the tree",
    "test_context_manager_keyboardinterrupt_no_kill": "Ctrl-C kills the tree",
}

INTERNALS = {
    "test__use_vfork": "CPython's _USE_VFORK switch",
    "test_repr": "patches Popen._execute_child",
    "test_surrogates_error_message": "CPython's _posixsubprocess.fork_exec",
    "test_leak_fast_process_del_killed": "subprocess._active",
    "test_zombie_fast_process_del": "subprocess._active",
    "test_send_signal_race": "reaps the child with os.waitpid behind Popen",
    "test_stopped": "reaps the child with os.waitpid behind Popen",
}


def _adapt(base: type) -> type:
    attrs = {}
    for name, why in {**BY_DESIGN, **INTERNALS}.items():
        if hasattr(base, name):
            attrs[name] = unittest.skip(f"differs by design or tests CPython internals: {why}")(getattr(base, name))
    return type(f"TestCPython{base.__name__}", (base,), attrs)


TestCPythonRunFuncTestCase = _adapt(T.RunFuncTestCase)
TestCPythonProcessTestCase = _adapt(T.ProcessTestCase)
TestCPythonPOSIXProcessTestCase = _adapt(T.POSIXProcessTestCase)
TestCPythonContextManagerTests = _adapt(T.ContextManagerTests)
TestCPythonMiscTests = _adapt(T.MiscTests)
