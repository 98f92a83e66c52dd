#!/usr/bin/env bash
# .ci/node.sh -- the npm package `corral` (crates/corral-node): install the
# napi-rs CLI from the committed package-lock.json (npm ci), build the addon
# (release), run the node:test suite (real process trees), and the Node
# benchmark in quick mode, and check that the addon compiles for macOS.
#
#   bash .ci/node.sh
#
# Needs node (>= 18) and npm, and the Rust toolchain.
set -euo pipefail
cd "$(dirname "$0")/../crates/corral-node"
export CARGO_TERM_COLOR=never
T0=$SECONDS
step() { printf '\n=== [node %3ds] %s ===\n' "$((SECONDS - T0))" "$*"; }
die() { printf '[node] ERROR: %s\n' "$*" >&2; exit 1; }

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    step "install node and npm (Debian packages)"
    apt-get update -qq && apt-get install -y -qq nodejs npm >/dev/null || die "cannot install node and npm"
fi
node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 18 ? 0 : 1)' || die "Node >= 18 needed"

step "npm ci (the napi-rs CLI, from package-lock.json)"
npm ci --no-audit --no-fund || die "npm ci failed"

step "napi build --release (the addon and its TypeScript declarations)"
npm run build || die "napi build failed"
ls -l ./*.node native.d.ts

step "npm test (node:test, real process trees)"
log=$(mktemp)
set +e
# Bounded: a hang fails the step instead of the whole CI run.
timeout 900 npm test 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
grep -q '^# pass [1-9]' "$log" || die "node:test ran no tests"
[ "$rc" -eq 0 ] || die "npm test failed (exit $rc)"

step "benchmark against child_process.execFile, quick mode (asserts nothing about speed)"
node bench/bench.js --quick || die "benchmark failed"

step "compile check: macOS (the unix path without Linux; Windows needs libnode.dll to link)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/../../target/cross}"
rustup target add x86_64-apple-darwin >/dev/null 2>&1 || die "rustup target add x86_64-apple-darwin failed"
cargo clippy --locked --quiet --target x86_64-apple-darwin -p corral-node -- -D warnings \
    || die "clippy failed for x86_64-apple-darwin"
echo "x86_64-apple-darwin: ok"

# node:test's counts, last, for whoever reads the log (.ci/run adds up the
# "# pass N" lines above, not this one).
awk '/^# (pass|fail|skipped) [0-9]+$/ { n[$2] = $3 }
     END { printf "node tests: %d passed, %d failed, %d skipped\n", n["pass"], n["fail"], n["skipped"] }' "$log"
rm -f "$log"
