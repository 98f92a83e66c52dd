#!/usr/bin/env bash
# .ci/windows.sh -- build corral for x86_64-pc-windows-gnu (mingw-w64),
# lint it, and run its test suite under Wine 8 (tests/windows.rs is the
# Job Object scenario suite; the Linux suites are cfg'd out there).
#
#   bash .ci/windows.sh
#
# Honours CARGO_TARGET_DIR (default: target/windows) and WINEPREFIX.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target/windows}"
TARGET=x86_64-pc-windows-gnu
T0=$SECONDS
step() { printf '\n=== [windows %3ds] %s ===\n' "$((SECONDS - T0))" "$*"; }
die() { printf '[windows] ERROR: %s\n' "$*" >&2; exit 1; }

step "wine setup"
bash .ci/wine-setup.sh || die "wine setup failed"
export WINEPREFIX="${WINEPREFIX:-$HOME/.wine}" WINEDEBUG=-all
export CARGO_TARGET_X86_64_PC_WINDOWS_GNU_LINKER=x86_64-w64-mingw32-gcc
export CARGO_TARGET_X86_64_PC_WINDOWS_GNU_RUNNER=wine
unset DISPLAY WAYLAND_DISPLAY
rustup component add clippy >/dev/null 2>&1 || true

step "clippy ($TARGET)"
cargo clippy --locked --target "$TARGET" -p corral-process -p corral-cli \
    --lib --bins --tests --example win_helper -- -D warnings \
    || die "clippy failed for $TARGET"

step "tests under wine ($TARGET)"
# Every test has its own bounds; the outer timeout only guards against a
# wedged wineserver. stdin from /dev/null: no console (as in CI anywhere).
timeout 900 cargo test --locked --target "$TARGET" -p corral-process -p corral-cli </dev/null \
    || die "tests under wine failed for $TARGET"
wineserver -w || true
step "done"
