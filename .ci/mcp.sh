#!/usr/bin/env bash
# .ci/mcp.sh -- `corral mcp` end to end with a real MCP client: the official
# Python SDK (`mcp` on PyPI), through its stdio client and ClientSession, as
# an agent would use it (crates/corral-cli/tests/mcp_sdk).
#
#   bash .ci/mcp.sh
#
# Needs python3 (>= 3.10, with venv; the SDK's own floor) and the Rust
# toolchain; installs mcp and pytest into a throwaway virtual environment.
set -euo pipefail
cd "$(dirname "$0")/.."
# step, die, $PY (>= 3.10, the SDK's own floor), $work, venv.
NAME=mcp PY_MIN=10
. .ci/pyenv.sh
export PYTHONDONTWRITEBYTECODE=1

step "the MCP Python SDK and pytest in a virtual environment"
venv "$work/venv" mcp pytest
"$work/venv/bin/python" -c 'import importlib.metadata as m; print("mcp", m.version("mcp"))'

step "cargo build -p corral-cli"
cargo build --locked -q -p corral-cli || die "cargo build failed"
bin="$(cargo metadata --format-version 1 --no-deps | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/debug/corral"
[ -x "$bin" ] || die "no binary at $bin"

step "pytest: corral mcp through the SDK client (real process trees)"
set +e
# Bounded: a hang fails the step instead of the whole CI run.
(cd crates/corral-cli/tests/mcp_sdk && CORRAL_BIN="$bin" timeout 600 \
    "$work/venv/bin/python" -m pytest -p no:cacheprovider -v test_mcp_sdk.py)
rc=$?
set -e
[ "$rc" -eq 5 ] && die "pytest collected no tests"
[ "$rc" -eq 0 ] || die "pytest failed (exit $rc)"
