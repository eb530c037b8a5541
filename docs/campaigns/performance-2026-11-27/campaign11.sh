#!/bin/bash
# (kept in the repository as the record of how the c11 logs beside it were made; /work/notes is the session's scratch directory, /work/wt/before and /work/wt/campaign detached checkouts of the two commits)
# quiet campaign, session 8: before = e6cd617 (/work/wt/before), after = merged main (/work/wt/campaign)
set -u
A=/work/wt/campaign; B=/work/wt/before
L=/work/notes/c11; mkdir -p $L
st() { echo "$(date -u +%H:%M:%S) $* | load $(cut -d' ' -f1 /proc/loadavg) | probe $(python3 -c "import timeit; print(round(min(timeit.repeat('sum(range(10**6))', number=5, repeat=5))*1e3,1))") ms" | tee -a $L/status; }
st c11 start
for w in $B $A; do (cd $w && .venv/bin/python -m compileall -q hpcgc && OUT=/tmp/c11-warm GRID="4" ITERS=5 bash scripts/measure-performance.sh traffic > /dev/null 2>&1); done
st warm
for r in 1 2 3 4 5 6; do
  order="$B $A"; [ $((r % 2)) -eq 0 ] && order="$A $B"
  for w in $order; do n=$(basename $w); h=$(git -C $w rev-parse --short HEAD)
    (cd $w && OUT=/tmp/c11-$n-$r bash scripts/measure-performance.sh traffic > $L/traffic-$h-c11-r$r.log 2>&1)
  done
  st traffic r$r
done
ha=$(git -C $A rev-parse --short HEAD); hb=$(git -C $B rev-parse --short HEAD)
for r in 1 2; do
  order="$B $A"; [ $((r % 2)) -eq 0 ] && order="$A $B"
  for w in $order; do h=$(git -C $w rev-parse --short HEAD)
    (cd $w && OUT=/tmp/c11-n32-$r NP=32 bash scripts/measure-performance.sh n32 > $L/n32-$h-c11-r$r.log 2>&1)
    st n32 $h r$r
  done
done
(cd $A && OUT=/tmp/c11-hand NP=32 ROUNDS=4 bash scripts/measure-performance.sh n32-hand > $L/n32-hand-$ha-c11.log 2>&1)
st n32-hand
(cd $A && OUT=/tmp/c11-busy NP=32 ROUNDS=2 BUSY="0 5 20" bash scripts/measure-performance.sh n32-busy > $L/n32-busy-$ha-c11.log 2>&1)
st n32-busy
for r in 1 2; do
  order="10 2000"; [ $((r % 2)) -eq 0 ] && order="2000 10"
  for e in $order; do
    (cd $A && echo "# round $r, eval_every $e, $(date -u +%T), load $(cut -d' ' -f1-3 /proc/loadavg)" >> $L/n32-eval-$ha-c11.log && \
     NUMBA_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 .venv/bin/mpiexec -n 32 .venv/bin/python -m hpcgc.bench floor --config jobs/experiments/default.toml \
       --set run.iterations=2000 --set run.tolerance=0 --set run.eval_every=$e --set 'sweep.algorithm=["diana"]' \
       --set 'sweep.compressor=["qsgd:s=2"]' -q -o /tmp/c11-eval.h5 --overwrite 2>&1 | grep -A2 '^run   algorithm compressor  *collective  iters' >> $L/n32-eval-$ha-c11.log)
    st n32-eval $e r$r
  done
done
(cd $A && bash scripts/profile-rank0.sh /tmp/c11-prof 4 2 200 > $L/profile-$ha-grid4.txt 2>&1)
st profile
st c11 done
