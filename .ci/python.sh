#!/usr/bin/env bash
# .ci/python.sh -- the Python package `corral` (crates/corral-py): build the
# abi3 wheel with maturin, install it into a fresh virtual environment, run
# the pytest suite against the installed wheel, run the Python benchmark in
# quick mode, and check that the binding compiles for Windows and macOS.
#
#   bash .ci/python.sh
#
# Needs python3 (>= 3.9, with venv) and the Rust toolchain; installs maturin
# and pytest from the package index into a throwaway virtual environment.
# Honours CARGO_TARGET_DIR for the cross checks (default: target/cross).
set -euo pipefail
cd "$(dirname "$0")/.."
# step, die, $PY (>= 3.9), $work, venv.
NAME=python PY_MIN=9
. .ci/pyenv.sh

step "build tools: maturin and pytest in a virtual environment"
venv "$work/tools" maturin pytest
"$work/tools/bin/maturin" --version

step "maturin build --release (abi3 wheel for CPython >= 3.9)"
"$work/tools/bin/maturin" build --release --locked -m crates/corral-py/Cargo.toml -o "$work/dist" \
    || die "maturin build failed"
wheel=$(ls "$work"/dist/corral-*.whl)
echo "built $(basename "$wheel")"

step "install the wheel into a fresh virtual environment"
venv "$work/venv" "$wheel" pytest
# The tests must import the installed wheel, not the source tree.
(cd "$work" && "$work/venv/bin/python" -c 'import corral, sys; print("corral from", corral.__file__)')

step "pytest (real process trees)"
log="$work/pytest.log"
set +e
# Bounded: a hang fails the step instead of the whole CI run.
(cd crates/corral-py && timeout 900 "$work/venv/bin/python" -m pytest -p no:cacheprovider -v tests) 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
[ "$rc" -eq 5 ] && die "pytest collected no tests"
[ "$rc" -eq 0 ] || die "pytest failed (exit $rc)"

step "benchmark against subprocess.run, quick mode (asserts nothing about speed)"
"$work/venv/bin/python" crates/corral-py/bench/bench.py --quick || die "benchmark failed"

step "compile checks: Windows and macOS (abi3: no interpreter needed)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target/cross}"
for t in x86_64-pc-windows-gnu x86_64-apple-darwin; do
    rustup target add "$t" >/dev/null 2>&1 || die "rustup target add $t failed"
    cargo check --locked --quiet --target "$t" -p corral-py || die "cargo check failed for $t"
    cargo clippy --locked --quiet --target "$t" -p corral-py -- -D warnings || die "clippy failed for $t"
    echo "$t: ok"
done

# pytest's closing line, last, for whoever reads the log.
grep -E '^=+ .*(passed|failed|skipped|error).* in [0-9.]+s' "$log" | tail -1
