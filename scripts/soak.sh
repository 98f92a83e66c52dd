#!/usr/bin/env bash
# The soak (#37, part 3): random process trees through the library, in every
# tier, as root and as an unprivileged user; each run checked (bounded
# return, the legal outcome, exact counts, no survivor, the kept alive) and,
# between epochs, the harness's own descriptors, cgroups and RSS. Not part of
# the test suite. See docs/BENCHMARKS.md, "Soak".
#
#   scripts/soak.sh [--runs N] [--tier T|all] [--seed S] [--jobs J]
#                   [--user NAME | --no-user] [--no-root]
#
# Tiers: process-group, subreaper, cgroup, pid-namespace, and
# process-group+host-subreaper (the process-group tier in a host that is a
# child subreaper, as the CLI is); all: each in turn. The unprivileged runs use NAME (default corral-ci, made if missing,
# as .ci/run does); its cgroup tier runs in a cgroup delegated to NAME (made
# here, removed after). One summary line per tier and user (SOAK ...); a
# failure prints its run seed, replayed with
#   corral-soak --tier T --run-seed X
# Exit status 1 if any run failed or anything leaked.
set -uo pipefail
cd "$(dirname "$0")/.."

runs=1000 tiers=all seed=$(date +%s) jobs=8 user=corral-ci as_root=1 show=20
while [ $# -gt 0 ]; do
  case "$1" in
  --runs) runs=$2; shift 2 ;;
  --tier) tiers=$2; shift 2 ;;
  --seed) seed=$2; shift 2 ;;
  --jobs) jobs=$2; shift 2 ;;
  --show) show=$2; shift 2 ;;
  --user) user=$2; shift 2 ;;
  --no-user) user=; shift ;;
  --no-root) as_root=0; shift ;;
  *) echo "usage: $0 [--runs N] [--tier T|all] [--seed S] [--jobs J] [--user NAME|--no-user] [--no-root]" >&2; exit 2 ;;
  esac
done
# process-group+host-subreaper: the process-group tier in a host that is a
# child subreaper reaping every orphan, as the CLI always is.
[ "$tiers" = all ] && tiers="process-group process-group+host-subreaper subreaper cgroup pid-namespace"

cargo build --release --locked -q -p corral-soak || exit 2
# A copy the unprivileged user can read (/work may be closed to it).
dir=$(mktemp -d /tmp/corral-soak.XXXXXX)
deleg=
cleanup() {
  [ -n "$deleg" ] && rmdir "$deleg" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
cp target/release/corral-soak "$dir/"
chmod -R a+rX "$dir"
exe=$dir/corral-soak

if [ -n "$user" ] && [ "$(id -u)" -eq 0 ]; then
  id "$user" >/dev/null 2>&1 ||
    useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$user"
elif [ -n "$user" ]; then
  echo "not root: runs as $(id -un) only" >&2
  user=
fi

# The cgroup v2 mount point.
cg2=$(awk '{ split($0, h, " - "); split(h[2], f, " "); split(h[1], m, " ");
             if (f[1] == "cgroup2") { print m[5]; exit } }' /proc/self/mountinfo)

summaries=()
rc=0
run() { # LABEL COMMAND...
  local log label=$1
  shift
  log=$(mktemp)
  "$@" | tee "$log"
  local st=${PIPESTATUS[0]}
  summaries+=("$(grep '^SOAK ' "$log" || echo "SOAK $label: no summary (exit $st)")")
  [ "$st" -eq 0 ] || rc=1
  rm -f "$log"
}

for config in $tiers; do
  tier=${config%%+*}
  args=(--tier "$tier" --runs "$runs" --seed "$seed" --jobs "$jobs" --show "$show")
  [ "$config" != "${config%+host-subreaper}" ] && args+=(--host-subreaper)
  if [ "$as_root" -eq 1 ]; then
    run "$config/$(id -un)" "$exe" "${args[@]}"
  fi
  [ -n "$user" ] || continue
  as_user=(setpriv --reuid="$user" --regid="$user" --clear-groups
    env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/nonexistent "$exe" "${args[@]}")
  if [ "$tier" = cgroup ]; then
    # A delegated cgroup (the directory and its cgroup.procs, as systemd's
    # Delegate=yes gives): the harness starts in it, corral makes the runs'
    # cgroups below it.
    [ -n "$cg2" ] || { echo "no cgroup v2 hierarchy: cgroup tier skipped as $user"; continue; }
    deleg=$cg2/soak-delegated-$$
    mkdir -p "$deleg" &&
      chown "$user" "$deleg" "$deleg/cgroup.procs" "$deleg/cgroup.threads" "$deleg/cgroup.subtree_control" ||
      { echo "cannot delegate $deleg"; rc=1; continue; }
    run "$config/$user" sh -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$deleg" "${as_user[@]}"
    rmdir "$deleg" 2>/dev/null || { echo "LEAK: $deleg not empty after the soak"; rc=1; }
    deleg=
  else
    run "$config/$user" "${as_user[@]}"
  fi
done

echo
printf '%s\n' "${summaries[@]}"
exit $rc
