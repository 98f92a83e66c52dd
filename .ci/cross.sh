#!/usr/bin/env bash
# .ci/cross.sh -- compile checks for the other Unix targets: macOS and
# FreeBSD (process-group containment there). No linker or SDK is needed:
# `cargo check` and clippy stop before linking. Library and CLI under
# clippy; the whole workspace with its tests, benches and examples under
# `cargo check`, so a contributor on macOS or FreeBSD can build the tests
# (those that need pidfd and /proc compile to nothing there by cfg).
#
#   bash .ci/cross.sh
#
# Honours CARGO_TARGET_DIR (default: target/cross, separate from the host
# build so the two never invalidate each other).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target/cross}"
TARGETS=(x86_64-apple-darwin x86_64-unknown-freebsd)
T0=$SECONDS
step() { printf '\n=== [cross %3ds] %s ===\n' "$((SECONDS - T0))" "$*"; }
die() { printf '[cross] ERROR: %s\n' "$*" >&2; exit 1; }

step "rustup target add ${TARGETS[*]}"
rustup target add "${TARGETS[@]}" || die "rustup target add failed"
rustup component add clippy >/dev/null 2>&1 || true

for t in "${TARGETS[@]}"; do
    step "cargo check ($t)"
    cargo check --locked --target "$t" -p corral-process -p corral-cli --lib --bins \
        || die "cargo check failed for $t"
    step "cargo clippy ($t)"
    cargo clippy --locked --target "$t" -p corral-process -p corral-cli --lib --bins -- -D warnings \
        || die "clippy failed for $t"
    step "cargo check --workspace --all-targets ($t)"
    cargo check --locked --target "$t" --workspace --all-targets \
        || die "cargo check of the workspace's tests failed for $t"
done
# Neither Unix nor Windows: the library's `sys/unsupported.rs` (every spawn
# fails with `Unsupported`) must keep the same items as the other platforms.
step "cargo clippy (wasm32-wasip1: the unsupported platform layer)"
rustup target add wasm32-wasip1 || die "rustup target add wasm32-wasip1 failed"
cargo clippy --locked --target wasm32-wasip1 -p corral-process --features serde,schema -- -D warnings \
    || die "clippy failed for wasm32-wasip1"
step "done"
