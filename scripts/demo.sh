#!/usr/bin/env bash
# A real demonstration of `corral run`: four commands that other runners get
# wrong, each with corral's exit code and JSON report.
set -uo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked -q -p corral-cli
corral=target/release/corral

show() {
  local title="$1"; shift
  printf '\n## %s\n$ corral' "$title"; printf ' %q' "$@"; printf '\n'
  local start=$SECONDS
  "$corral" "$@" | cat   # corral's stdout is a pipe: it relays
  local rc=${PIPESTATUS[0]}
  printf -- '-> exit %s after ~%ss\n' "$rc" "$((SECONDS - start))"
}

show "A grandchild keeps stdout open after the command exits 0 (most runners hang here)" \
  run --wait-delay 500ms --report - -- sh -c 'echo "build ok"; sleep 600 & exit 0'

show "The deadline passes; a TERM-ignoring child is killed when the 300ms grace ends" \
  run -t 1s -k 300ms --report - -- sh -c 'trap "" TERM; sleep 600 & wait'

show "Nonzero exit: the backgrounded helper (output redirected) is killed, code 7 kept" \
  run --report - -- sh -c 'sleep 600 >/dev/null 2>&1 & exit 7'

show "Clean exit 0: a detached child that closed its output keeps running (policy keep-on-success)" \
  run --report - -- sh -c 'sleep 2 >/dev/null 2>&1 & echo done'

show "Not found" run --report - -- no-such-program-here

show "A batch: passing, failing, timing-out, output-holding and run_end-reporting tasks" \
  batch --jobs 4 examples/batch.toml

shards=$(mktemp -d)
for k in 1 2 3; do
  show "Shard $k of 3 (on three machines in CI: same manifest, K from the matrix or env:JOB_COMPLETION_INDEX)" \
    batch --jobs 4 --progress none --partition "$k/3" --report "$shards/shard-$k.json" examples/batch.toml
done
show "The three shards merged: the same runs and exit code as the whole batch" \
  merge --report "$shards/all.json" "$shards/shard-1.json" "$shards/shard-2.json" "$shards/shard-3.json"
rm -rf "$shards"
exit 0
