"""The Python column of docs/run-spec-surfaces.json: every keyword the
table claims reaches the library's run spec (``_corral._spec`` returns the
spec ``_corral.start`` would run, as JSON); every field it does not offer
says why. The rows themselves are held to the spec's fields by the Rust
test crates/corral-cli/src/surfaces.rs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corral import _corral

TABLE = Path(__file__).resolve().parents[3] / "docs" / "run-spec-surfaces.json"


def _rows():
    fields = json.loads(TABLE.read_text())["fields"]
    return [(name, row["python"]) for name, row in fields.items()]


def _spec(argv, **kw) -> dict:
    return json.loads(_corral._spec(argv, **kw))


@pytest.mark.parametrize("field,cell", _rows(), ids=[r[0] for r in _rows()])
def test_each_keyword_reaches_the_spec(field, cell):
    if "not_offered" in cell:
        assert len(cell["not_offered"]) > 10, field
        return
    plain = _spec(["true"])
    if "argv" in cell:
        got = _spec(cell["argv"])
    else:
        value = cell["value"]
        if isinstance(value, list) and cell["keyword"] == "pty":
            value = tuple(value)
        if cell["keyword"] == "env":
            value = [tuple(kv) for kv in value]
        got = _spec(["true"], **{cell["keyword"]: value})
    assert got.get(field) != plain.get(field), (field, cell, got)


def test_the_table_covers_every_keyword_of_start():
    """A keyword of start that is an option of the run is in the table."""
    claimed = {c["keyword"] for _, c in _rows() if "keyword" in c}
    # start's keywords that are its streams, not options of the run.
    streams = {"input", "stdin", "stdin_fd", "stdout", "stderr", "stdout_relay", "stderr_relay"}
    options = {
        "cwd", "env", "timeout", "grace", "wait_delay", "idle_timeout", "max_output", "signal",
        "leftovers", "capture_limit", "containment", "confirm_window", "memory_max", "pids_max",
        "require_crash_safety", "program", "keep_fds", "restore_signals", "new_session", "uid",
        "gid", "groups", "umask", "pty", "sandbox",
    }
    assert claimed == options
    for k in options:
        _corral._spec(["true"], **{k: None})
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        _corral._spec(["true"], bogus=1)
    assert not streams & options


def test_values_are_checked_with_their_names():
    with pytest.raises(ValueError, match="timeout must be a non-negative number of seconds"):
        _corral._spec(["true"], timeout=-1.0)
    with pytest.raises(TypeError, match="bad memory_max"):
        _corral._spec(["true"], memory_max="lots")
    spec = _spec(["true"], timeout=1.5, signal="INT", containment="pid_namespace")
    assert spec["timeout_ms"] == 1500
    assert spec["signal"] == "SIGINT"
    assert spec["containment"] == "pid-namespace"
