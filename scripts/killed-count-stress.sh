#!/usr/bin/env bash
# Stress test of the killed count (issue 37): `corral run -t 0.4s --report -`
# on the two trees of the issue, N times per tier, J at a time, and a count
# of the runs whose report is not exact.
#
#   A: sh -c "sh -c 'sleep 30 & sleep 30' & sleep 31"   4 members besides the root
#   B: sh -c 'sleep 30 & sleep 31'                       2 members besides the root
#
# Every member is alive at the deadline and dies of corral's SIGKILL, so
# each report must say: outcome timed_out, killed 4 (A) or 2 (B), no
# survivor, no cleanup error. After all runs no process of any run may be
# alive (each carries a marker in its environment).
#
# Usage (not part of `cargo test`):
#   scripts/killed-count-stress.sh [-n RUNS] [-j PARALLEL] [-t TIMEOUT] [--bin CORRAL] [--tiers "T1 T2"]
#   as an unprivileged user (the binary must be readable by that user):
#   cp target/release/corral /tmp/corral && chmod 755 /tmp/corral
#   setpriv --reuid=corral-ci --regid=corral-ci --clear-groups env -i PATH=/usr/local/bin:/usr/bin:/bin \
#     HOME=/tmp scripts/killed-count-stress.sh --bin /tmp/corral
#   the cgroup tier as that user needs a delegated cgroup it sits in, e.g. (as root):
#   d=/sys/fs/cgroup/unified/corral-stress   # the cgroup v2 mount, /sys/fs/cgroup on most systems
#   mkdir $d && chown corral-ci: $d $d/cgroup.procs $d/cgroup.threads $d/cgroup.subtree_control
#   sh -c "echo \$\$ > $d/cgroup.procs && exec setpriv ... scripts/killed-count-stress.sh --bin /tmp/corral"
# Defaults: 500 runs per tree and tier, 8 at a time, every tier
# (process-group subreaper cgroup pid-namespace); without --bin it builds
# the release CLI first. A tier that cannot run here (the cgroup tier
# without a delegated cgroup, as an unprivileged user) is skipped, and
# said so. The counts assume /bin/sh is dash (it does not exec the last
# command of `-c`); EXPECT_A and EXPECT_B override them. Exit status 0
# only when no run miscounted or failed and nothing was left alive.
# The premise is that every member has started by the deadline: on a
# machine so loaded that `sh` cannot fork twice in 0.4 s (a hundred
# processes spinning on two cores) every tier "miscounts" alike (a member
# not yet started is not killed); compare the tiers, or give a longer -t.
set -uo pipefail

runs=500
jobs=8
limit=0.4s
bin=
tiers="process-group subreaper cgroup pid-namespace"
while [ $# -gt 0 ]; do
  case "$1" in
    -n) runs=$2; shift 2 ;;
    -j) jobs=$2; shift 2 ;;
    -t) limit=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --tiers) tiers=$2; shift 2 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
if [ -z "$bin" ]; then
  cd "$(dirname "$0")/.." || exit 2
  cargo build --release --locked -q -p corral-cli || exit 2
  bin=$PWD/target/release/corral
fi
if [ "$(basename "$(readlink -f /bin/sh)")" != dash ] && [ -z "${EXPECT_A:-}${EXPECT_B:-}" ]; then
  echo "warning: /bin/sh is not dash: the expected counts (4, 2) may not hold; set EXPECT_A/EXPECT_B" >&2
fi
expect_a=${EXPECT_A:-4}
expect_b=${EXPECT_B:-2}
shape_a="sh -c 'sleep 30 & sleep 30' & sleep 31"
shape_b="sleep 30 & sleep 31"
mark=corral-stress-$$-$(date +%s%N)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# one TIER SHAPE_NAME EXPECTED INDEX: one run; prints "ok" or what was wrong.
one() {
  local tier=$1 name=$2 want=$3 cmd report killed outcome survivors errors
  if [ "$name" = A ]; then cmd=$shape_a; else cmd=$shape_b; fi
  report=$(env CORRAL_STRESS_MARK="$mark" "$bin" run --containment "$tier" -t "$limit" --report - -- sh -c "$cmd" 2>/dev/null)
  killed=$(printf '%s' "$report" | grep -o '"killed":[0-9]*' | cut -d: -f2)
  outcome=$(printf '%s' "$report" | grep -o '"outcome":"[a-z_]*"' | cut -d'"' -f4)
  survivors=$(printf '%s' "$report" | grep -o '"survivors":\[[^]]*\]' | cut -d: -f2)
  errors=$(printf '%s' "$report" | grep -o '"cleanup_errors":\[[^]]*\]' | cut -d: -f2)
  if [ "$outcome" = timed_out ] && [ "$killed" = "$want" ] && [ "$survivors" = "[]" ] && [ "$errors" = "[]" ]; then
    echo ok
  elif [ "$outcome" = timed_out ] && [ "$survivors" = "[]" ] && [ "$errors" = "[]" ]; then
    # With the run's timings: a spawn that took most of the deadline left
    # the tree no time to start its members (a loaded machine).
    echo "miscount killed=$killed $(printf '%s' "$report" | grep -o '"timings_ms":{[^}]*}')"
  else
    echo "failed outcome=$outcome killed=$killed survivors=$survivors errors=$errors"
  fi
}
export -f one
export bin limit mark shape_a shape_b

# Live processes carrying this run's marker.
left() {
  local p
  for p in /proc/[0-9]*; do
    if { tr '\0' '\n' <"$p/environ"; } 2>/dev/null | grep -qx "CORRAL_STRESS_MARK=$mark"; then
      echo "${p#/proc/}"
    fi
  done
}

bad=0
printf '%-14s %-5s %5s %6s %9s %7s\n' tier tree runs exact miscount failed
for tier in $tiers; do
  probe=$(env CORRAL_STRESS_MARK="$mark" "$bin" run --containment "$tier" -t 5s --report - -- true 2>/dev/null)
  if ! printf '%s' "$probe" | grep -q '"outcome":"exited"'; then
    why=$(printf '%s' "$probe" | grep -o '"error":"[^"]*"' | cut -d'"' -f4)
    echo "$tier: skipped, cannot run here as $(id -un): ${why:-no report}"
    continue
  fi
  for name in A B; do
    if [ "$name" = A ]; then want=$expect_a; else want=$expect_b; fi
    seq "$runs" | xargs -P "$jobs" -I{} bash -c 'one "$@"' _ "$tier" "$name" "$want" {} >"$out/$tier.$name"
    exact=$(grep -c '^ok$' "$out/$tier.$name")
    miss=$(grep -c '^miscount' "$out/$tier.$name")
    failed=$(grep -c '^failed' "$out/$tier.$name")
    printf '%-14s %-5s %5s %6s %9s %7s\n' "$tier" "$name" "$runs" "$exact" "$miss" "$failed"
    grep -v '^ok$' "$out/$tier.$name" | sort | uniq -c | sed 's/^/    /'
    if [ "$exact" != "$runs" ]; then bad=1; fi
  done
done
sleep 1
alive=$(left)
if [ -n "$alive" ]; then
  echo "left alive: $alive"
  for p in $alive; do kill -9 "$p" 2>/dev/null; done
  bad=1
fi
exit $bad
