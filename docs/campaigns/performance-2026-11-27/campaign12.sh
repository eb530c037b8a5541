#!/bin/bash
# quiet campaign, stop 9 (2026-11-27): before = a2bbf28 (/work/wt/before), after = /work/wt/lines (prefetch distances)
set -u
A=/work/wt/lines; B=/work/wt/before
L=/work/notes/c12; mkdir -p $L
st() { echo "$(date -u +%H:%M:%S) $* | load $(cut -d' ' -f1 /proc/loadavg) | probe $(python3 -c "import timeit; print(round(min(timeit.repeat('sum(range(10**6))', number=5, repeat=5))*1e3,1))") ms" | tee -a $L/status; }
ha=$(git -C $A rev-parse --short HEAD); hb=$(git -C $B rev-parse --short HEAD)
st c12 start $hb $ha
for w in $B $A; do (cd $w && .venv/bin/python -m compileall -q hpcgc && OUT=/tmp/c12-warm GRID="4" ITERS=5 bash scripts/measure-performance.sh traffic > /dev/null 2>&1); done
st warm
# target 1: the EF + top-k server's parts (evicted), both checkouts, alternating
for r in 1 2; do for w in $B $A; do h=$(git -C $w rev-parse --short HEAD)
  (cd $A && PYTHONPATH=$w .venv/bin/python scripts/ef-server-parts.py --evict --repeat 40 >> $L/ef-server-parts-$h-evicted.log 2>&1)
done; done
(cd $A && .venv/bin/python scripts/ef-server-parts.py --repeat 40 > $L/ef-server-parts-$ha-warm.log 2>&1)
st parts
# target 1: traffic, six rounds alternating
for r in 1 2 3 4 5 6; do
  order="$B $A"; [ $((r % 2)) -eq 0 ] && order="$A $B"
  for w in $order; do n=$(basename $w); h=$(git -C $w rev-parse --short HEAD)
    (cd $w && OUT=/tmp/c12-$n-$r bash scripts/measure-performance.sh traffic > $L/traffic-$h-c12-r$r.log 2>&1)
  done
  st traffic r$r
done
# target 3: the default experiment at -n 32 (after), then hpcgc against the hand-written loop
for r in 1 2; do
  (cd $A && OUT=/tmp/c12-n32-$r NP=32 bash scripts/measure-performance.sh n32 > $L/n32-$ha-c12-r$r.log 2>&1)
  st n32 r$r
done
(cd $A && OUT=/tmp/c12-hand NP=32 ROUNDS=4 bash scripts/measure-performance.sh n32-hand > $L/n32-hand-$ha-c12.log 2>&1)
st n32-hand
(cd $A && OUT=/tmp/c12-sched NP=32 ROUNDS=2 ITERS=1000 bash scripts/measure-performance.sh n32-sched > $L/n32-sched-$ha-c12.log 2>&1)
st n32-sched
(cd $A && OUT=/tmp/c12-cpu NP=32 ROUNDS=2 ITERS=1000 bash scripts/measure-performance.sh n32-cpu > $L/n32-cpu-$ha-c12.log 2>&1)
st n32-cpu
st c12 done
