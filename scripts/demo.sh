#!/usr/bin/env bash
# A real demonstration of `corral run`: process trees that other runners get
# wrong. Each case is one line for corral (exit code, time, outcome, what was
# killed or kept) and one line for coreutils `timeout` on the same tree
# (bounded: the demo stops waiting after 2 s and cleans up by pid).
set -uo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked -q -p corral-cli
corral=target/release/corral # `cargo install --path crates/corral-cli --locked` puts it on PATH
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# A top-level field of a one-line JSON report: a string, an array (all of
# it: "signals_sent":[15,9]) or a number/null.
field() { sed -n "s/.*\"$1\":\\(\"[^\"]*\"\\|\\[[^]]*\\]\\|[^,}]*\\).*/\\1/p" "$2" | tr -d '"'; }
ms_since() { echo $((($(date +%s%N) - $1) / 1000000)); }

# The arguments as a reader would type them: one with a space or a quote in
# single quotes (none of the demo's contains a single quote).
shown() {
  local a out=()
  for a in "$@"; do
    if [[ $a =~ ^[A-Za-z0-9_./:=@%+,-]+$ ]]; then out+=("$a"); else out+=("'$a'"); fi
  done
  echo "${out[*]}"
}

# corral ARGS... : shows the command (exactly what runs), runs corral with a
# report, prints one line.
run_corral() {
  local t0 rc
  printf '  $ corral run %s\n' "$(shown "$@")"
  t0=$(date +%s%N)
  # stdout a pipe, as in a CI log: corral relays it.
  "$corral" run --report "$tmp/r.json" "$@" 2>/dev/null </dev/null | cat >/dev/null
  rc=${PIPESTATUS[0]}
  local took; took=$(ms_since "$t0")
  local r=$tmp/r.json
  printf '  corral : exit %-3s after %5s ms  %-12s signals sent [%s]  killed %s, kept %s  (%s)\n' \
    "$rc" "$took" "$(field outcome "$r")" "$(field signals_sent "$r" | tr -d '[]' | sed 's/,/ then /g')" \
    "$(field killed "$r")" "$(field kept "$r")" "$(field containment "$r")"
}

# timeout ARGS... : the same tree under coreutils timeout, its stdout a pipe
# as in a CI log; stops waiting after 2 s. Helpers write their pid to
# $tmp/pids, so whatever timeout left behind is reported and then killed.
run_timeout() {
  : >"$tmp/pids"
  local t0; t0=$(date +%s%N)
  (PIDS="$tmp/pids" timeout "$@" </dev/null 2>/dev/null | cat >/dev/null; echo "${PIPESTATUS[0]}" >"$tmp/rc") &
  local waiter=$! i
  for i in $(seq 200); do kill -0 "$waiter" 2>/dev/null || break; sleep 0.01; done
  local line
  if kill -0 "$waiter" 2>/dev/null; then
    line="still blocked after $(ms_since "$t0") ms (a descendant holds the pipe)"
  else
    line="exit $(cat "$tmp/rc") after $(ms_since "$t0") ms"
  fi
  local left=() p
  while read -r p; do [ -n "$p" ] && kill -0 "$p" 2>/dev/null && left+=("$p"); done <"$tmp/pids"
  if [ ${#left[@]} -gt 0 ]; then
    line="$line; left running: ${#left[@]} process(es), pid ${left[*]} (the demo kills them)"
    kill -KILL "${left[@]}" 2>/dev/null
  else
    line="$line; nothing left running"
  fi
  wait "$waiter" 2>/dev/null
  printf '  timeout: %s\n' "$line"
}

case_() { printf '\n## %s\n' "$1"; }

case_ "A grandchild keeps stdout open after the command exits 0"
run_corral --wait-delay 500ms -- sh -c 'echo "build ok"; sleep 600 & exit 0'
run_timeout 10 sh -c 'echo "build ok"; sleep 600 & echo $! >>"$PIDS"; exit 0'

case_ "The deadline passes; a child escaped with setsid and ignores TERM"
run_corral -t 1s -k 300ms -- sh -c 'setsid sh -c "trap \"\" TERM; exec sleep 600" >/dev/null 2>&1 & sleep 600'
run_timeout -k 0.3 1 sh -c 'setsid sh -c "trap \"\" TERM; exec sleep 600" >/dev/null 2>&1 & echo $! >>"$PIDS"; sleep 600'

case_ "Nonzero exit: a backgrounded helper (output redirected) is still running"
run_corral -- sh -c 'sleep 600 >/dev/null 2>&1 & exit 7'
run_timeout 10 sh -c 'sleep 600 >/dev/null 2>&1 & echo $! >>"$PIDS"; exit 7'

case_ "Clean exit 0: a detached child that closed its output keeps running (policy keep-on-success)"
run_corral -- sh -c 'sleep 1 >/dev/null 2>&1 & echo done'

case_ "Killed by a signal corral's old table did not know (SIGSYS): the number is kept"
run_corral -- sh -c 'kill -SYS $$'

case_ "Not found"
run_corral -- no-such-program-here

printf '\n## The full report of the first case\n'
"$corral" run --wait-delay 500ms --report - -- sh -c 'echo "build ok"; sleep 600 & exit 0' | cat

printf '\n## A batch: passing, failing, timing-out, output-holding and run_end-reporting tasks\n'
"$corral" batch --jobs 4 examples/batch.toml

shards=$(mktemp -d)
for k in 1 2 3; do
  printf '\n## Shard %s of 3 (three machines in CI: the same manifest, K from the matrix or env:JOB_COMPLETION_INDEX)\n' "$k"
  "$corral" batch --jobs 4 --progress none --partition "$k/3" --report "$shards/shard-$k.json" examples/batch.toml
done
printf '\n## The three shards merged: the same runs and exit code as the whole batch\n'
"$corral" merge --report "$shards/all.json" "$shards/shard-1.json" "$shards/shard-2.json" "$shards/shard-3.json"
rm -rf "$shards"
exit 0
