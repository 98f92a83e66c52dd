# .ci/pyenv.sh -- sourced by .ci/python.sh and .ci/mcp.sh: the start both
# share. Set NAME (the tag of the log's lines) and PY_MIN (the oldest
# Python 3 minor version the script supports) first:
#
#   NAME=mcp PY_MIN=10
#   . .ci/pyenv.sh
#
# Defines step and die (as every .ci script has them), checks $PYTHON
# (default python3) and its version, makes a throwaway directory $work
# (removed at exit), and defines `venv DIR PACKAGE...`: a new virtual
# environment at DIR with PACKAGEs installed from the package index (or a
# wheel's path).
export CARGO_TERM_COLOR=never PIP_DISABLE_PIP_VERSION_CHECK=1
T0=$SECONDS
step() { printf '\n=== [%s %3ds] %s ===\n' "$NAME" "$((SECONDS - T0))" "$*"; }
die() { printf '[%s] ERROR: %s\n' "$NAME" "$*" >&2; exit 1; }

PY=${PYTHON:-python3}
command -v "$PY" >/dev/null || die "no $PY"
"$PY" -c "import sys; assert sys.version_info >= (3, $PY_MIN), sys.version" \
    || die "Python >= 3.$PY_MIN needed"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

venv() {
    local dir=$1
    shift
    "$PY" -m venv "$dir" || die "python -m venv $dir failed"
    "$dir/bin/pip" install -q "$@" || die "pip install $* failed"
}
