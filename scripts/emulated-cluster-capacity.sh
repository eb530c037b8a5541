#!/usr/bin/env bash
# emulated-cluster-capacity.sh - how large an emulated cluster this machine holds (docs/emulated-cluster.md,
# "How large"). For each shape NODESxRANKS_PER_NODE: bring the cluster up (timed), run a short collectives
# sweep on every rank (timed; the memory of every process in the cluster's namespaces sampled every 0.5 s:
# the sum of their proportional set sizes, Pss, so shared pages count once), bring it down (timed); one
# CSV row per shape on stdout (or -o FILE).
#
# usage (as root, venv active): scripts/emulated-cluster-capacity.sh [-o FILE] [--rate R] [--name PREFIX] [SHAPE...]
#   SHAPE   NxK, default: 16x1 32x1 4x4
#   --rate  the links' rate (default 1gbit); --name the clusters' name prefix (default hpcgc-capacity-<pid>)
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OUT=/dev/stdout RATE=1gbit PREFIX=hpcgc-capacity-$$ SHAPES=()
while [ $# -gt 0 ]; do
  case "$1" in
    -o) OUT=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --name) PREFIX=$2; shift 2 ;;
    -h|--help) sed -n '2,11p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) SHAPES+=("$1"); shift ;;
  esac
done
[ ${#SHAPES[@]} -gt 0 ] || SHAPES=(16x1 32x1 4x4)
PY=${PYTHON:-python}

pss_mb() {   # total Pss (MiB) of every process in the namespaces of cluster $1
  local ns pid total=0 kb
  for ns in $(ip netns list | awk '{print $1}' | grep -E "^$1-(hub|n[0-9]+)$"); do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do
      kb=$(awk '/^Pss:/ {print $2}' "/proc/$pid/smaps_rollup" 2>/dev/null || echo 0)
      total=$((total + ${kb:-0}))
    done
  done
  echo $((total / 1024))
}
avail_mb() { awk '/^MemAvailable:/ {print int($2 / 1024)}' /proc/meminfo; }
now() { date +%s.%N; }

echo "shape,nodes,ranks_per_node,ranks,cores,mem_total_mb,load1_before,up_s,run_s,down_s,run_status,peak_pss_mb,pss_per_rank_mb,mem_available_drop_mb,commit" >"$OUT"
commit=$(git -C "$HERE/.." rev-parse --short HEAD 2>/dev/null || echo unknown)
for shape in "${SHAPES[@]}"; do
  nodes=${shape%x*} k=${shape#*x} name=$PREFIX-$shape ranks=$((${shape%x*} * ${shape#*x}))
  load=$(cut -d' ' -f1 /proc/loadavg) before=$(avail_mb)
  t0=$(now)
  HPCGC_EMULATED_MAX_RANKS=$ranks bash "$HERE/emulated-cluster.sh" up --nodes "$nodes" --ranks-per-node "$k" \
    --rate "$RATE" --name "$name" >/dev/null
  t1=$(now)
  peak=0 low=$before
  MPIEXEC_TIMEOUT=${MPIEXEC_TIMEOUT:-900} bash "$HERE/emulated-cluster.sh" run --name "$name" -- -n "$ranks" \
    "$PY" -m hpcgc.bench collectives -c allreduce --min-size 4 --max-size 64K --max-seconds 0.05 \
    -o "/tmp/$name.h5" >/dev/null 2>"/tmp/$name.err" &
  job=$!
  while kill -0 "$job" 2>/dev/null; do
    m=$(pss_mb "$name"); [ "$m" -gt "$peak" ] && peak=$m
    a=$(avail_mb); [ "$a" -lt "$low" ] && low=$a
    sleep 0.5
  done
  status=0; wait "$job" || status=$?
  t2=$(now)
  bash "$HERE/emulated-cluster.sh" down --name "$name" >/dev/null
  t3=$(now)
  rm -f "/tmp/$name.h5"
  printf '%s,%d,%d,%d,%d,%d,%s,%.2f,%.1f,%.2f,%d,%d,%d,%d,%s\n' "$shape" "$nodes" "$k" "$ranks" "$(nproc)" \
    "$(awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo)" "$load" "$(echo "$t1 - $t0" | bc)" \
    "$(echo "$t2 - $t1" | bc)" "$(echo "$t3 - $t2" | bc)" "$status" "$peak" $((peak / ranks)) \
    $((before - low)) "$commit" >>"$OUT"
done
