#!/usr/bin/env bash
# .ci/slurm.sh -- corral on a real scheduler: a one-node Slurm cluster
# (Debian's slurm-wlm and munge) started from nothing in a private
# directory, then
#   1. a manifest with passing, failing and timing-out tasks as an N-task
#      array job (`sbatch --array=0-(N-1)`, each task `corral batch
#      --partition env:SLURM_ARRAY_TASK_ID/N`), the shard reports merged
#      with `corral merge`, and the merge compared with the unsharded run
#      (verdicts, outcomes, totals, per-task counts, JUnit cases) for
#      N = 1, 3, 4 and more shards than runs;
#   2. `scancel` of a job running `corral run`: report `cancelled`, the tree
#      gone (checked from here, by pid);
#   3. corral SIGKILLed inside a job: its keeper kills the tree while the job
#      still runs;
#   4. `corral run --leftovers keep` against Slurm's own end-of-job cleanup,
#      under each process-tracking plugin this host has (proctrack/cgroup
#      needs a cgroup v1 freezer hierarchy; proctrack/pgid and
#      proctrack/linuxproc run anywhere). What each does is printed and
#      checked against what the README says.
#
# Nothing outside the private directory is changed: slurm.conf and
# cgroup.conf are found through SLURM_CONF (and `-f`), munged gets its socket,
# key, pid, seed and log paths on its command line, the ports are free ones
# picked here. proctrack/cgroup creates /sys/fs/cgroup/freezer/slurm_<node>;
# it is removed at the end. Every daemon runs in the foreground as a child of
# this script and is stopped by its pid by the EXIT trap, on failure too.
# Runs as root (slurmd must); about 20-30 s once the packages are installed.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[slurm] %s\n' "$*"; }
die() {
  printf '[slurm] FAILED: %s\n' "$*" >&2
  exit 1
}

[ "$(id -u)" -eq 0 ] || die "run as root (slurmd and munged's socket need it)"

# --- packages ---------------------------------------------------------------
PACKAGES=(slurm-wlm munge jq)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-cache policy "${missing[@]}" 2>/dev/null | grep -q 'Candidate: [0-9]'; then
    apt-get update -q >/dev/null || die "apt-get update failed"
  fi
  log "apt-get install --no-install-recommends ${missing[*]}"
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null ||
    die "apt-get install ${missing[*]} failed"
fi
for c in munged slurmctld slurmd sbatch scancel squeue sinfo jq; do
  command -v "$c" >/dev/null || die "$c not found"
done
log "$(slurmctld -V), $(munged -V 2>&1 | head -n 1)"

cargo build --locked -q -p corral-cli
target_dir=$(cargo metadata --format-version 1 --no-deps | jq -r .target_directory)
corral="$target_dir/debug/corral"
[ -x "$corral" ] || die "no corral binary at $corral"

# --- the private cluster ----------------------------------------------------
W=$(mktemp -d /tmp/corral-slurm.XXXXXX)
# munged refuses a socket whose directories are not searchable by everyone
# ("Socket is inaccessible: execute permissions for all required"), and a
# key readable by others: the work directory is 0755, the key's 0700.
chmod 755 "$W"
mkdir -m 700 "$W/munge"
mkdir -m 755 "$W/run" "$W/state" "$W/spool" "$W/log" "$W/out"
NODE=corralci
export SLURM_CONF="$W/slurm.conf"

declare -A DAEMON=() # name -> pid
HELPERS=()           # pids of test trees, killed at the end if still alive
ok=0

stop_daemon() {
  local name=$1 pid=${DAEMON[$1]:-} i
  [ -n "$pid" ] || return 0
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
  unset "DAEMON[$name]"
}

cleanup() {
  local rc=$? p
  trap - EXIT INT TERM
  set +e
  stop_daemon slurmd
  stop_daemon slurmctld
  stop_daemon munged
  for p in "${HELPERS[@]}"; do kill -KILL "$p" 2>/dev/null; done
  # proctrack/cgroup's freezer directories (empty once slurmd is gone).
  [ -d "/sys/fs/cgroup/freezer/slurm_$NODE" ] &&
    find "/sys/fs/cgroup/freezer/slurm_$NODE" -depth -type d -exec rmdir {} + 2>/dev/null
  if [ "$ok" -ne 1 ]; then
    for f in "$W"/log/* "$W"/out/*; do
      [ -f "$f" ] || continue
      echo "--- $f (last 30 lines)"
      tail -n 30 "$f"
    done
  fi
  rm -rf "$W"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
  local p
  while :; do
    p=$((20000 + RANDOM % 20000))
    if command -v ss >/dev/null; then
      ss -Hltn "sport = :$p" | grep -q . || break
    else
      break
    fi
  done
  echo "$p"
}
CTLD_PORT=$(free_port)
SLURMD_PORT=$(free_port)
[ "$SLURMD_PORT" != "$CTLD_PORT" ] || SLURMD_PORT=$((CTLD_PORT + 1))

write_conf() { # PROCTRACK
  cat >"$W/slurm.conf" <<EOF
ClusterName=corralci
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$W/run/munge.sock
CredType=cred/munge
StateSaveLocation=$W/state
SlurmdSpoolDir=$W/spool
SlurmctldPidFile=$W/run/slurmctld.pid
SlurmdPidFile=$W/run/slurmd.pid
SlurmctldLogFile=$W/log/slurmctld.log
SlurmdLogFile=$W/log/slurmd.log
ProctrackType=$1
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
KillWait=2
MinJobAge=600
NodeName=$NODE NodeHostname=$(hostname) NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=ci Nodes=$NODE Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:16
EOF
  # Read from the directory of SLURM_CONF; used by proctrack/cgroup only.
  cat >"$W/cgroup.conf" <<EOF
CgroupPlugin=cgroup/v1
CgroupMountpoint=/sys/fs/cgroup
EOF
}

start_munge() {
  head -c 1024 /dev/urandom >"$W/munge/munge.key"
  chmod 400 "$W/munge/munge.key"
  munged --foreground --socket="$W/run/munge.sock" --key-file="$W/munge/munge.key" \
    --pid-file="$W/munge/munged.pid" --seed-file="$W/munge/munged.seed" \
    --log-file="$W/log/munged.log" >>"$W/log/munged.out" 2>&1 &
  DAEMON[munged]=$!
  local i
  for i in $(seq 50); do [ -S "$W/run/munge.sock" ] && return 0; sleep 0.1; done
  die "munged did not create its socket"
}

start_slurm() { # PROCTRACK
  write_conf "$1"
  # -D: in the foreground, our child (killed by pid); -c: no state recovered
  # from an earlier configuration.
  slurmctld -D -c -f "$SLURM_CONF" >>"$W/log/slurmctld.out" 2>&1 &
  DAEMON[slurmctld]=$!
  slurmd -D -f "$SLURM_CONF" -N "$NODE" >>"$W/log/slurmd.out" 2>&1 &
  DAEMON[slurmd]=$!
  local i st
  for i in $(seq 100); do
    st=$(sinfo -h -n "$NODE" -o %T 2>/dev/null || true)
    [ "$st" = idle ] && { log "cluster up ($1): node $NODE idle after $((i * 100)) ms"; return 0; }
    sleep 0.1
  done
  die "node $NODE not idle after 10 s (state: ${st:-none})"
}

stop_slurm() {
  stop_daemon slurmd
  stop_daemon slurmctld
}

# The state of every task of job JID, once none is pending or running
# (sbatch --wait polls every few seconds; this is 100 ms).
wait_job() { # JID TIMEOUT_S
  local jid=$1 limit=$(($2 * 10)) i states
  for i in $(seq "$limit"); do
    states=$(squeue -h -t all -j "$jid" -o %T 2>/dev/null | sort -u | tr '\n' ' ')
    if [ -n "$states" ] && ! grep -Eq 'PENDING|RUNNING|COMPLETING|CONFIGURING|SUSPENDED' <<<"$states"; then
      echo "$states"
      return 0
    fi
    sleep 0.1
  done
  die "job $jid not finished after $2 s (states: $states)"
}

wait_file() { # FILE TIMEOUT_S
  local i
  for i in $(seq $(($2 * 20))); do [ -s "$1" ] && return 0; sleep 0.05; done
  die "$1 not written after $2 s"
}

alive() { kill -0 "$1" 2>/dev/null && ! grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null; }

if [ -d /sys/fs/cgroup/freezer ] && grep -q ' /sys/fs/cgroup/freezer cgroup .*freezer' /proc/mounts; then
  TRACKERS=(proctrack/cgroup proctrack/pgid proctrack/linuxproc)
else
  TRACKERS=(proctrack/pgid proctrack/linuxproc)
  log "no cgroup v1 freezer hierarchy: proctrack/cgroup is not tried"
fi

start_munge
start_slurm "${TRACKERS[0]}"

# --- 1. shards of an array job, merged, equal the unsharded run --------------
cat >"$W/suite.toml" <<'EOF'
[defaults]
timeout = "10s"
wait_delay = "300ms"

[[task]]
name = "passes"
run = ["true"]
repeat = 3

[[task]]
name = "fails"
shell = "echo 'assertion failed' >&2; exit 3"
repeat = 2

[[task]]
name = "hangs"
shell = "sleep 30"
timeout = "300ms"

[[task]]
name = "holds-output"
shell = "sleep 30 & exit 0"
EOF
RUNS=7

# What must agree: the exit code, totals, per-task counts and every run's
# verdict and outcome (not times, not shard numbers); and the JUnit cases.
norm_report() {
  jq -S '{exit_code, totals,
          tasks: [.tasks[] | {name, runs, passed, failed, errors, not_run, flaky}],
          runs: [.runs[] | {task, run, status, reason, outcome, exit_code, signal, killed, kept}],
          not_run}' "$1"
}
norm_junit() { # one line per test case: suite, case, verdict and its type/message
  awk '
    /<testsuites / { match($0, /tests="[0-9]+" skipped="[0-9]+" failures="[0-9]+" errors="[0-9]+"/); print "SUITES " substr($0, RSTART, RLENGTH) }
    /<testcase / { if (c != "") print c " passed"; match($0, /name="[^"]*" classname="[^"]*"/); c = substr($0, RSTART, RLENGTH) }
    /<(failure|error|skipped)[ \/>]/ && c != "" { match($0, /<(failure|error|skipped)[^>]*/); print c " " substr($0, RSTART + 1, RLENGTH - 1); c = "" }
    /<\/testsuite>/ { if (c != "") print c " passed"; c = "" }
  ' "$1"
}

"$corral" batch "$W/suite.toml" --progress none --report "$W/full.json" --junit "$W/full.xml" \
  >"$W/out/full.txt" 2>&1 && full_rc=0 || full_rc=$?
[ "$full_rc" -eq 2 ] || die "unsharded batch exited $full_rc, expected 2"
[ "$(jq '.totals.runs' "$W/full.json")" -eq "$RUNS" ] || die "unsharded run has not $RUNS runs"
[ "$(jq -c '[.totals.passed, .totals.failed, .totals.errors]' "$W/full.json")" = "[3,2,2]" ] ||
  die "unsharded totals: $(jq -c .totals "$W/full.json")"
norm_report "$W/full.json" >"$W/full.norm"
norm_junit "$W/full.xml" >"$W/full.junit"

cat >"$W/shard.sbatch" <<EOF
#!/bin/sh
# \$1: the number of shards, \$2: the directory for the reports.
exec "$corral" batch "$W/suite.toml" --progress none \\
  --partition env:SLURM_ARRAY_TASK_ID/\$1 \\
  --report "\$2/shard-\$SLURM_ARRAY_TASK_ID.json" --junit "\$2/shard-\$SLURM_ARRAY_TASK_ID.xml"
EOF

for N in 1 3 4 $((RUNS + 2)); do
  d="$W/n$N"
  mkdir -p "$d"
  t0=$(date +%s%N)
  if [ "$N" -eq 4 ]; then
    # The recipe itself, as a user submits it (its --array=0-3, corral on
    # PATH, suite.toml and the reports in the submission directory).
    cp "$W/suite.toml" "$d/"
    jid=$(cd "$d" && PATH="$(dirname "$corral"):$PATH" sbatch --parsable -o "$W/out/shard-%A_%a.txt" \
      "$OLDPWD/examples/shards/slurm.sbatch")
  else
    jid=$(sbatch --parsable --array="0-$((N - 1))" -o "$W/out/shard-%A_%a.txt" -J "shards$N" \
      "$W/shard.sbatch" "$N" "$d")
  fi
  states=$(wait_job "$jid" 60)
  n_reports=$(find "$d" -maxdepth 1 -name 'shard-*.json' | wc -l)
  [ "$n_reports" -eq "$N" ] || die "N=$N: $n_reports shard reports, expected $N (job states: $states)"
  "$corral" merge --report "$d/merged.json" --junit "$d/merged.xml" "$d"/shard-*.json \
    >"$W/out/merge-$N.txt" 2>&1 && merge_rc=0 || merge_rc=$?
  [ "$merge_rc" -eq "$full_rc" ] || die "N=$N: merge exited $merge_rc, the unsharded batch $full_rc"
  norm_report "$d/merged.json" >"$d/merged.norm"
  diff -u "$W/full.norm" "$d/merged.norm" || die "N=$N: the merged report differs from the unsharded run"
  norm_junit "$d/merged.xml" >"$d/merged.junit"
  diff -u "$W/full.junit" "$d/merged.junit" || die "N=$N: the merged JUnit differs from the unsharded run"
  [ "$(jq -r '.merged_from | length' "$d/merged.json")" -eq "$N" ] || die "N=$N: merged_from"
  log "N=$N: array job $jid ($states), $N shard reports merged = the unsharded run" \
    "($(jq -c '[.totals.passed, .totals.failed, .totals.errors]' "$d/merged.json") passed/failed/errors, exit $merge_rc," \
    "$(wc -l <"$d/merged.junit") JUnit lines equal; $((($(date +%s%N) - t0) / 1000000)) ms)"
done

# --- 2. corral SIGKILLed inside a job: the keeper kills the tree --------------
# The job goes on after corral's death and looks at the tree itself, so it is
# the keeper (not Slurm's end-of-job cleanup) that is seen killing it.
cat >"$W/keeper.sbatch" <<EOF
#!/bin/bash
"$corral" run -t 120 -- sh -c 'sleep 300 & echo \$! >"$W/keeper.pids"; echo \$\$ >>"$W/keeper.pids"; wait' &
corral_pid=\$!
for i in \$(seq 200); do [ -s "$W/keeper.pids" ] && break; sleep 0.05; done
sleep 0.2
kill -KILL \$corral_pid
t0=\$(date +%s%N)
for i in \$(seq 200); do
  alive=0
  for p in \$(cat "$W/keeper.pids"); do kill -0 \$p 2>/dev/null && ! grep -q '^State:.*Z' /proc/\$p/status 2>/dev/null && alive=1; done
  [ \$alive -eq 0 ] && { echo "gone \$(( (\$(date +%s%N) - t0) / 1000000 ))" >"$W/keeper.result"; exit 0; }
  sleep 0.05
done
echo "alive" >"$W/keeper.result"
EOF
jid=$(sbatch --parsable -o "$W/out/keeper.txt" -J keeper "$W/keeper.sbatch")
states=$(wait_job "$jid" 30)
wait_file "$W/keeper.result" 5
mapfile -t tree <"$W/keeper.pids"
HELPERS+=("${tree[@]}")
read -r verdict ms <"$W/keeper.result"
[ "$verdict" = gone ] || die "SIGKILL: the tree outlived corral inside the job"
for p in "${tree[@]}"; do alive "$p" && die "SIGKILL: tree pid $p alive after the job"; done
log "SIGKILL of corral in job $jid ($states): tree pids ${tree[*]} killed by the keeper ${ms} ms later, inside the job"

# --- 3. under each process-tracking plugin --------------------------------
# a. scancel of a job running `corral run`. The batch script execs corral
#    (the recipe's advice): corral is the job's main process and gets
#    Slurm's SIGTERM (KillWait, 2 s here, later SIGKILL). Under
#    proctrack/pgid and linuxproc Slurm's signal reaches corral alone (the
#    tree is in its own process group, and Slurm signals the job's), so the
#    tree's death is corral's doing.
# b. The batch shell exits while corral runs (corral not exec'd, in the
#    background): slurmstepd kills what is left of the job at once: corral
#    with SIGKILL, its report never written; its keeper kills the tree.
#    Under proctrack/linuxproc, corral (re-parented away from slurmstepd
#    when the shell exits) is not found at all: corral and its tree outlive
#    the job, unseen by Slurm.
# c. --leftovers keep against Slurm's end-of-job cleanup: the command exits
#    0 leaving a daemon (setsid, its own session) that corral keeps; the job
#    then ends. Whether the daemon survives is the tracker's doing:
#    proctrack/cgroup kills everything in the job's v1 freezer cgroup
#    (corral's cgroup v2 tier does not take it out of the v1 hierarchy);
#    proctrack/pgid signals only the job's process groups (corral puts the
#    tree in its own); proctrack/linuxproc kills the descendants of
#    slurmstepd it finds through /proc parent links (the kept daemon was
#    re-parented away from them). The README's table says the same; this
#    checks it.
cat >"$W/cancel.sbatch" <<EOF
#!/bin/sh
# \$1: a tag for the files
exec "$corral" run --report "$W/cancel-\$1.json" -t 120 -- \\
  sh -c 'trap "" TERM; sleep 300 & echo \$! >"\$0"; echo \$\$ >>"\$0"; wait' "$W/cancel-\$1.pids"
EOF
cat >"$W/lost.sbatch" <<EOF
#!/bin/sh
# \$1: a tag for the files. corral in the background, not exec'd: wrong.
"$corral" run --report "$W/lost-\$1.json" -t 120 -- \\
  sh -c 'sleep 300 & echo \$! >"\$0"; echo \$\$ >>"\$0"; wait' "$W/lost-\$1.pids" &
echo \$! >"$W/lost-\$1.corral"
while [ ! -s "$W/lost-\$1.pids" ]; do sleep 0.05; done
sleep 0.2
exit 0
EOF
cat >"$W/keep.sbatch" <<EOF
#!/bin/sh
# \$1: a tag for the files
exec "$corral" run --leftovers keep --report "$W/keep-\$1.json" -- \\
  sh -c 'setsid sleep 300 </dev/null >/dev/null 2>&1 & echo \$! >"\$0"' "$W/keep-\$1.pid"
EOF
declare -A LOST=([proctrack/cgroup]=killed [proctrack/pgid]=killed [proctrack/linuxproc]=escapes)
declare -A EXPECT=([proctrack/cgroup]=killed [proctrack/pgid]=survives [proctrack/linuxproc]=survives)
first=1
for tracker in "${TRACKERS[@]}"; do
  if [ "$first" -eq 0 ]; then
    stop_slurm
    start_slurm "$tracker"
  fi
  first=0
  tag=${tracker#proctrack/}

  # a. scancel
  jid=$(sbatch --parsable -o "$W/out/cancel-$tag.txt" -J "cancel-$tag" "$W/cancel.sbatch" "$tag")
  wait_file "$W/cancel-$tag.pids" 30
  sleep 0.2
  mapfile -t tree <"$W/cancel-$tag.pids"
  HELPERS+=("${tree[@]}")
  for p in "${tree[@]}"; do alive "$p" || die "$tracker: scancel: tree pid $p not alive before the scancel"; done
  scancel "$jid"
  states=$(wait_job "$jid" 30)
  wait_file "$W/cancel-$tag.json" 5
  r="$W/cancel-$tag.json"
  outcome=$(jq -r .outcome "$r")
  # Under proctrack/pgid Slurm's SIGTERM reaches corral alone;
  # proctrack/cgroup and linuxproc signal every process of the job at once,
  # the tree's too, and a tree that died of it first would be reported as it
  # ended (`signaled`, or `exited` when its shell exits after its child
  # died). This tree ignores SIGTERM (inherited by the sleep), so what kills
  # it is corral's cancel (SIGKILL, grace 0), before KillWait's SIGKILL.
  received=$(jq -r .received_signal "$r")
  [ "$received" = 15 ] || die "$tracker: scancel: received_signal $received, expected 15"
  [ "$outcome" = cancelled ] || die "$tracker: scancel: corral's report says $outcome, expected cancelled"
  for p in "${tree[@]}"; do alive "$p" && die "$tracker: scancel: tree pid $p outlived the job"; done
  log "$tracker: scancel of job $jid ($states): report outcome $outcome, received_signal" \
    "$(jq -r .received_signal "$r"), killed $(jq -r .killed "$r"), survivors $(jq -c .survivors "$r"); tree pids ${tree[*]} gone"

  # b. the batch shell exits first
  jid=$(sbatch --parsable -o "$W/out/lost-$tag.txt" -J "lost-$tag" "$W/lost.sbatch" "$tag")
  states=$(wait_job "$jid" 30)
  mapfile -t tree <"$W/lost-$tag.pids"
  corral_pid=$(cat "$W/lost-$tag.corral")
  HELPERS+=("${tree[@]}" "$corral_pid")
  sleep 0.5 # slurmstepd's cleanup is done when the job's state is final; a margin
  if [ "${LOST[$tracker]}" = escapes ]; then
    alive "$corral_pid" || die "$tracker: batch shell exited first: corral was killed (this script expected it to escape)"
    for p in "${tree[@]}"; do alive "$p" || die "$tracker: batch shell exited first: tree pid $p is gone, corral alive"; done
    # corral still holds its tree: a SIGTERM to it (by pid) ends both, report written.
    kill -TERM "$corral_pid"
    wait_file "$W/lost-$tag.json" 10
    for p in "${tree[@]}"; do alive "$p" && die "$tracker: tree pid $p outlived corral's cancel"; done
    log "$tracker: batch shell exited before corral (job $jid, $states): corral and its tree escaped the" \
      "job, still running after it; a SIGTERM to corral: report $(jq -r .outcome "$W/lost-$tag.json"), tree gone"
  else
    gone=0
    for i in $(seq 40); do
      gone=1
      for p in "${tree[@]}" "$corral_pid"; do alive "$p" && gone=0; done
      [ "$gone" -eq 1 ] && break
      sleep 0.1
    done
    [ "$gone" -eq 1 ] || die "$tracker: batch shell exited first: corral or its tree (${tree[*]}) outlived the job"
    [ -e "$W/lost-$tag.json" ] &&
      die "$tracker: batch shell exited first, yet corral wrote its report (the recipe says it is lost)"
    log "$tracker: batch shell exited before corral (job $jid, $states): corral killed, no report written, tree pids ${tree[*]} gone"
  fi

  # c. --leftovers keep
  jid=$(sbatch --parsable -o "$W/out/keep-$tag.txt" -J "keep-$tag" "$W/keep.sbatch" "$tag")
  states=$(wait_job "$jid" 30)
  wait_file "$W/keep-$tag.json" 5
  pid=$(cat "$W/keep-$tag.pid")
  HELPERS+=("$pid")
  kept=$(jq -r .kept "$W/keep-$tag.json")
  [ "$kept" -ge 1 ] || die "$tracker: corral kept $kept processes, expected the daemon"
  # slurmstepd's cleanup runs as the job ends: give it KillWait and a margin.
  seen=survives
  for i in $(seq 40); do alive "$pid" || { seen=killed; break; }; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  log "$tracker: --leftovers keep: corral kept $kept (outcome $(jq -r .outcome "$W/keep-$tag.json")); at the job's end the kept daemon $seen"
  [ "$seen" = "${EXPECT[$tracker]}" ] ||
    die "$tracker: the kept daemon $seen, the README says ${EXPECT[$tracker]}"
done

ok=1
log "all Slurm checks passed"
