#!/usr/bin/env bash
# MPICH's Bcast algorithm at -n 32 on 2 cores (issue 31 target 3): the default (binomial / device
# choice) against a flat k-ary tree (every worker one hop from rank 0), hpcgc's DIANA + qsgd:s=2 on the
# default experiment, ROUNDS rounds alternating the order; prints each run's floor summary line
# (median iteration, collectives floor, ratio, + kernels, ratio). Run from the repository root:
#   ROUNDS=3 bash docs/campaigns/performance-2026-11-27/bcast-tree-ab.sh
export NUMBA_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
run() {
  env "$@" .venv/bin/mpiexec -n 32 .venv/bin/python -m hpcgc.bench floor --config jobs/experiments/default.toml \
    --set run.iterations=${ITERS:-2000} --set run.tolerance=0 --set 'sweep.algorithm=["diana"]' \
    --set 'sweep.compressor=["qsgd:s=2"]' -q -o /tmp/bcast-tree-ab.h5 --overwrite 2>&1 \
    | grep -E 'gather +[0-9]+ +[0-9.]+ +[0-9.]+' | tail -1
}
echo "### $(date -u +%FT%TZ), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs), commit $(git rev-parse --short HEAD)"
for r in $(seq "${ROUNDS:-3}"); do
  order="default flat"; [ $((r % 2)) -eq 0 ] && order="flat default"
  for v in $order; do
    echo -n "round $r $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg) $v: "
    if [ "$v" = flat ]; then
      run MPIR_CVAR_BCAST_DEVICE_COLLECTIVE=0 MPIR_CVAR_BCAST_INTRA_ALGORITHM=tree MPIR_CVAR_BCAST_TREE_TYPE=kary MPIR_CVAR_BCAST_TREE_KVAL=32
    else
      run X=1
    fi
  done
done
