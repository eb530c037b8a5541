#!/usr/bin/env bash
# The measurements behind docs/performance.md's current figures, one command per target, in a row.
# Prints the load average and the CPU before each. Run on a quiet machine; figures from a loaded one
# measure the machine. (The sessions' own measure4/5/6.sh lists were not kept; this is the same
# list of commands as docs/performance.md states them, without the interleaving with a previous
# commit — run this script from two checkouts alternately for that.)
#
#   bash scripts/measure-performance.sh [TARGET...]     # targets: 2 2-a9a 4 5 6 7 traffic n32 n32-hand n32-busy n32-wait n32-sched n32-cpu allreduce-emu
#                                                       # (default: 2 2-a9a 4 5 6)
#   NP=32 bash scripts/measure-performance.sh 5         # start-up at -n NP (default 32)
#   CHECKOUTS="/path/to/before ." bash scripts/measure-performance.sh 5   # interleaved with another checkout
#   GRID="0 2 7 4" ITERS=40 bash scripts/measure-performance.sh traffic   # issue 31 target 1
#   NP=32 ROUNDS=3 ITERS=2000 bash scripts/measure-performance.sh n32-hand   # issue 31 target 3: hpcgc's
#       DIANA + qsgd:s=2 (floor table) and scripts/handwritten-loop.py alternately, ROUNDS rounds
#   NP=32 ROUNDS=3 BUSY="0 5 20" [ROOT=1] bash scripts/measure-performance.sh n32-busy   # issue 31 target 3: the
#       hand-written loop with BUSY µs of extra work per rank and iteration (ROOT=1: on rank 0's server step
#       alone) — what a rank's own overhead, and rank 0's serial work, cost at -n 32
#   NP=32 ROUNDS=3 ITERS=2000 bash scripts/measure-performance.sh n32-wait   # issue 31 target 3: run.wait
#       = spin and yield alternately (ROUNDS rounds of the n32 command with --set run.wait=...), then
#       scripts/wait-ab.py on the files (CSV=path: also the documented table's cells)
#   NP=32 ROUNDS=2 ITERS=1000 MODES="default nice poll" bash scripts/measure-performance.sh n32-sched   # issue 31
#       target 3: hpcgc's DIANA + qsgd:s=2 (floor table) and the hand-written loop under scheduling modes,
#       alternately: default; nice (every rank but 0 at nice NICE=5: scripts/nice-workers.sh); poll
#       (MPICH's waiting ranks yield the core after POLL=100 polls instead of 1000:
#       MPIR_CVAR_POLLS_BEFORE_YIELD, MPIR_CVAR_POSIX_POLL_FREQUENCY)
#   NP=32 ROUNDS=2 ITERS=1000 bash scripts/measure-performance.sh n32-cpu   # issue 31 target 3: each rank's CPU
#       time per iteration outside MPI, hpcgc's DIANA + qsgd:s=2 (scripts/rank-cpu.py) and the hand-written
#       loop (--cpu) alternately
#   AUTHORS=/tmp/Paper_9107_code bash scripts/measure-performance.sh 7
#   ROUNDS=3 ITERS=60 CALLS=100 bash scripts/measure-performance.sh allreduce-emu   # issue 31 target 2 (as root)
#       an emulated 4-node 1 Gb/s cluster of its own (hpcgc-bare-<pid>, removed again also on failure);
#       ROUNDS interleaved rounds of: does-it-pay.toml grid points 0 (fp32) and 5 (fp16) with ITERS
#       iterations and no tolerance stop, then a bare Allreduce of the runs' buffer (scripts/allreduce-emu.py
#       bare: CALLS timed calls, fp32 and fp16, holding ones and the run's message at the fp16 run's final
#       iterate); then scripts/allreduce-emu.py report (CSV=path: also the documented table, e.g.
#       CSV=docs/data/performance/allreduce-emu.csv; NOTE=text for its sidecar; RATE=1gbit)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
MPIEXEC=${MPIEXEC:-$(dirname "$PY")/mpiexec}
export NUMBA_NUM_THREADS=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
out=${OUT:-/tmp/hpcgc-measure}
mkdir -p "$out"
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(2 2-a9a 4 5 6)

say() {
  echo
  echo "### $* — $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs), commit $(git rev-parse --short HEAD)"
}

# Issue 31 target 3's pair at -n $np_ with $it iterations (set by the target): hpcgc's DIANA + qsgd:s=2 on
# the default experiment ("$@" after OUT: the launch and entry point — "$PY" -m hpcgc.bench, or
# scripts/rank-cpu.py), and the hand-written loop of the same shape (the launch, then -- and its flags).
diana_n32() {
  local o=$1; shift
  "$@" floor --config jobs/experiments/default.toml --set run.iterations="$it" --set run.tolerance=0 \
    --set 'sweep.algorithm=["diana"]' --set 'sweep.compressor=["qsgd:s=2"]' -q -o "$o" --overwrite
}
hand_n32() {
  local launch=()
  while [ "$1" != -- ]; do launch+=("$1"); shift; done
  shift
  "${launch[@]}" scripts/handwritten-loop.py --iterations "$it" --rows $(( 569 / np_ )) "$@"
}

for t in "${targets[@]}"; do
  case "$t" in
    2)
      say "target 2: default experiment, DIANA + qsgd:s=2, n = 2 (median iteration / collectives, / collectives + kernels)"
      "$MPIEXEC" -n 2 "$PY" -m hpcgc.bench floor --set run.iterations=3000 --set 'sweep.algorithm=["diana"]' \
        --set 'sweep.compressor=["qsgd:s=2"]' --set run.tolerance=0 -q -o "$out/t2.h5" --overwrite
      say "target 2: the same method written by hand (kernels and collectives only)"
      "$MPIEXEC" -n 2 "$PY" scripts/handwritten-loop.py --iterations 3000 ;;
    2-a9a)
      say "target 2: a9a label-sorted, DIANA + qsgd:s=4, n = 2"
      "$MPIEXEC" -n 2 "$PY" -m hpcgc.bench floor --set data.dataset=libsvm:../shared/data/libsvm/a9a \
        --set data.partition=label-sorted --set run.iterations=2000 --set 'sweep.algorithm=["diana"]' \
        --set 'sweep.compressor=["qsgd:s=4"]' --set run.tolerance=0 -q -o "$out/t2-a9a.h5" --overwrite ;;
    4)
      say "target 4: d = 2^20 sparse logreg, DIANA + qsgd:s=64, n = 2 (hpcgc's own time: other / iter)"
      "$MPIEXEC" -n 2 "$PY" -m hpcgc.bench floor --set 'data.dataset="synthetic:sparse,n=2000,d=1048576,nnz=40,seed=0"' \
        --set 'problem.reference="none"' --set run.iterations=40 --set run.eval_every=10 --set run.tolerance=0 \
        --set 'sweep.algorithm=["diana"]' --set 'sweep.compressor=["qsgd:s=64"]' -q -o "$out/t4.h5" --overwrite ;;
    5)
      np_=${NP:-32}
      say "target 5: start-up at -n $np_, warm cache: bare, then hpcgc (each of CHECKOUTS), three times interleaved (seconds)"
      py=$(realpath -s "$PY"); mpx=$(realpath -s "$MPIEXEC")     # absolute, the venv kept (no symlink resolution)
      read -r -a checkouts <<< "${CHECKOUTS:-.}"
      t5() {    # the timed command, run in checkout $1 (this venv's python runs that checkout's hpcgc)
        (cd "$1" && "$mpx" -n "$2" "$py" -m hpcgc.bench --set run.iterations=1 --set 'sweep.algorithm=["diana"]' \
          --set 'sweep.compressor=["qsgd:s=2"]' -o "$out/t5.h5" --overwrite -q)
      }
      # warm: numba's kernel cache (filled by an untimed first run) and Python's bytecode cache —
      # with PYTHONDONTWRITEBYTECODE=1 and no .pyc every rank would compile hpcgc's sources each start
      for c in "${checkouts[@]}"; do
        (cd "$c" && "$py" -m compileall -q hpcgc)
        t5 "$c" 2 > /dev/null
      done
      for i in 1 2 3; do
        echo "# round $i, load $(cut -d' ' -f1-3 /proc/loadavg)"
        /usr/bin/time -f "bare %e s wall, %U + %S s cpu (all ranks)" "$MPIEXEC" -n "$np_" "$PY" -c "from mpi4py import MPI; import numpy, numba; MPI.COMM_WORLD.Barrier()"
        for c in "${checkouts[@]}"; do
          /usr/bin/time -f "hpcgc ($c, $(git -C "$c" rev-parse --short HEAD)) %e s wall, %U + %S s cpu (all ranks)" \
            bash -c "$(declare -f t5); out=$out mpx=$mpx py=$py; t5 $c $np_" > /dev/null
        done
      done ;;
    6)
      say "target 6: compressor kernels against a paired copy, 2^22..2^24"
      "$PY" -m hpcgc.bench micro --compressors qsgd:s=4 natural natural-dither:s=8 terngrad quant:p=2 identity sign \
        --min-log2 22 --max-log2 24 ;;
    7)
      say "target 7: against the authors' code (DIANA+ quant+, a9a, n = 6): defaults, then without wait phases"
      : "${AUTHORS:?set AUTHORS to a checkout of bokun-wang/Paper_9107_code at 144c6f35}"
      bash scripts/vs-authors.sh "$AUTHORS" 3 2000
      bash scripts/vs-authors.sh "$AUTHORS" 3 2000 --set run.wait_phases=false ;;
    traffic)
      say "issue 31 target 1: d = 2^20 does-it-pay grid points ${GRID:-0 2 7 4}, n = 2: phases against their memory-traffic floor"
      for g in ${GRID:-0 2 7 4}; do
        "$MPIEXEC" -n 2 "$PY" -m hpcgc.bench floor --config jobs/experiments/does-it-pay.toml --grid-index "$g" \
          --set run.iterations="${ITERS:-40}" --set run.eval_every=10 --set run.tolerance=0 -q \
          -o "$out/traffic-$g.h5" --overwrite
      done ;;
    n32)
      say "issue 31 target 3: the default experiment at -n ${NP:-32} (median iteration / collectives, / collectives + kernels)"
      "$MPIEXEC" -n "${NP:-32}" "$PY" -m hpcgc.bench floor --config jobs/experiments/default.toml \
        --set run.iterations="${ITERS:-2000}" --set run.tolerance=0 -q -o "$out/n32.h5" --overwrite ;;
    n32-hand)
      np_=${NP:-32} rounds=${ROUNDS:-3} it=${ITERS:-2000}
      say "issue 31 target 3: hpcgc (default experiment, DIANA + qsgd:s=2) against the hand-written loop (scripts/handwritten-loop.py, $(( 569 / np_ )) rows per rank) at -n $np_, $rounds rounds interleaved, $it iterations"
      for i in $(seq "$rounds"); do
        order=(hpcgc hand); [ $((i % 2)) -eq 0 ] && order=(hand hpcgc)      # alternate which goes first
        for w in "${order[@]}"; do
          echo "# round $i, $w, load $(cut -d' ' -f1-3 /proc/loadavg)"
          if [ "$w" = hpcgc ]; then
            diana_n32 "$out/n32-hand-$i.h5" "$MPIEXEC" -n "$np_" "$PY" -m hpcgc.bench \
              | grep -A2 '^run   algorithm compressor  *collective  iters'
          else
            hand_n32 "$MPIEXEC" -n "$np_" "$PY" -- | sed -n '1,3p;$p'
          fi
        done
      done ;;
    n32-busy)
      np_=${NP:-32} rounds=${ROUNDS:-3} it=${ITERS:-2000} busy=(${BUSY:-0 5 20}) flag=--busy
      [ -z "${ROOT:-}" ] || flag=--root-busy                 # ROOT=1: the extra work on rank 0's server step alone
      say "issue 31 target 3: the hand-written loop at -n $np_ with ${busy[*]} µs of extra work per iteration ($flag: every rank's, or rank 0's in its server step; scripts/handwritten-loop.py), $rounds rounds interleaved, $it iterations"
      for i in $(seq "$rounds"); do
        order=("${busy[@]}"); [ $((i % 2)) -eq 0 ] && order=($(printf '%s\n' "${busy[@]}" | tac))   # alternate the order
        for b in "${order[@]}"; do
          echo "# round $i, $flag $b µs, load $(cut -d' ' -f1-3 /proc/loadavg)"
          hand_n32 "$MPIEXEC" -n "$np_" "$PY" -- "$flag" "$b" | sed -n '1,3p;$p'
        done
      done ;;
    n32-sched)
      np_=${NP:-32} rounds=${ROUNDS:-2} it=${ITERS:-1000} modes=(${MODES:-default nice poll})
      say "issue 31 target 3: hpcgc (default experiment, DIANA + qsgd:s=2) and the hand-written loop at -n $np_ under scheduling modes ${modes[*]} (nice: ranks but 0 at nice ${NICE:-5}; poll: MPICH yields after ${POLL:-100} polls), $rounds rounds interleaved, $it iterations"
      for i in $(seq "$rounds"); do
        order=("${modes[@]}"); [ $((i % 2)) -eq 0 ] && order=($(printf '%s\n' "${modes[@]}" | tac))
        for m in "${order[@]}"; do
          pre=() envs=()
          case "$m" in
            default) ;;
            nice) pre=(bash scripts/nice-workers.sh) ;;
            poll) envs=(MPIR_CVAR_POLLS_BEFORE_YIELD="${POLL:-100}" MPIR_CVAR_POSIX_POLL_FREQUENCY="${POLL:-100}") ;;
            *) echo "unknown mode $m (default nice poll)" >&2; exit 2 ;;
          esac
          echo "# round $i, mode $m, hpcgc, load $(cut -d' ' -f1-3 /proc/loadavg)"
          diana_n32 "$out/n32-sched.h5" env "${envs[@]}" "$MPIEXEC" -n "$np_" "${pre[@]}" "$PY" -m hpcgc.bench \
            | grep -A2 '^run   algorithm compressor  *collective  iters'
          echo "# round $i, mode $m, hand, load $(cut -d' ' -f1-3 /proc/loadavg)"
          hand_n32 env "${envs[@]}" "$MPIEXEC" -n "$np_" "${pre[@]}" "$PY" -- | sed -n '1,3p;$p'
        done
      done ;;
    n32-cpu)
      np_=${NP:-32} rounds=${ROUNDS:-2} it=${ITERS:-1000}
      say "issue 31 target 3: CPU µs per iteration outside MPI at -n $np_, hpcgc (default experiment, DIANA + qsgd:s=2; scripts/rank-cpu.py) and the hand-written loop (--cpu), $rounds rounds interleaved, $it iterations"
      for i in $(seq "$rounds"); do
        order=(hpcgc hand); [ $((i % 2)) -eq 0 ] && order=(hand hpcgc)
        for w in "${order[@]}"; do
          echo "# round $i, $w, load $(cut -d' ' -f1-3 /proc/loadavg)"
          if [ "$w" = hpcgc ]; then
            diana_n32 "$out/n32-cpu.h5" "$MPIEXEC" -n "$np_" "$PY" scripts/rank-cpu.py \
              | grep -E '^(# CPU|000 |rank |0 |workers)'
          else
            hand_n32 "$MPIEXEC" -n "$np_" "$PY" -- --cpu | grep -E '^(# CPU|rank  |0 |workers|hand)'
          fi
        done
      done ;;
    n32-wait)
      np_=${NP:-32} rounds=${ROUNDS:-3} files=()
      say "issue 31 target 3: the default experiment at -n $np_, run.wait = spin and yield alternately, $rounds rounds (${ITERS:-2000} iterations)"
      for i in $(seq "$rounds"); do
        order=(spin yield); [ $((i % 2)) -eq 0 ] && order=(yield spin)    # alternate which goes first
        for w in "${order[@]}"; do
          echo "# round $i, run.wait = $w, load $(cut -d' ' -f1-3 /proc/loadavg)"
          "$MPIEXEC" -n "$np_" "$PY" -m hpcgc.bench floor --config jobs/experiments/default.toml \
            --set run.iterations="${ITERS:-2000}" --set run.tolerance=0 --set run.wait="$w" -q \
            -o "$out/n32-wait-$w-$i.h5" --overwrite > /dev/null
          files+=("$out/n32-wait-$w-$i.h5")
        done
      done
      "$PY" scripts/wait-ab.py ${CSV:+--csv "$CSV"} "${files[@]}" ;;
    allreduce-emu)
      rounds=${ROUNDS:-3} iters=${ITERS:-60} calls=${CALLS:-100} rate=${RATE:-1gbit}
      name=hpcgc-bare-$$ dir="$out/allreduce-emu"
      say "issue 31 target 2: emulated 4-node $rate cluster ($name), $rounds rounds: bare Allreduce ($calls calls) vs does-it-pay grid points 0, 5 ($iters iterations), rank 0 medians; $(getconf _NPROCESSORS_ONLN) cores"
      # the ranks run this checkout's venv (emulated-cluster.sh takes mpiexec and python from PATH)
      abs_py=$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")
      export PATH="$(dirname "$abs_py"):$PATH" HPCGC_MPIEXEC="$(cd "$(dirname "$MPIEXEC")" && pwd)/$(basename "$MPIEXEC")"
      rm -rf "$dir" && mkdir -p "$dir"
      bash scripts/emulated-cluster.sh up --nodes 4 --rate "$rate" --name "$name"
      trap 'bash scripts/emulated-cluster.sh down --name "'"$name"'" >/dev/null 2>&1 || true' EXIT
      trap 'exit 130' INT TERM
      emu() { bash scripts/emulated-cluster.sh run --name "$name" -- -n 4 "$abs_py" "$@"; }
      for r in $(seq 1 "$rounds"); do
        echo "# round $r/$rounds — $(date -u +%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
        for pair in "0 fp32" "5 fp16"; do
          read -r g w <<<"$pair"
          emu -m hpcgc.bench --config jobs/experiments/does-it-pay.toml --grid-index "$g" \
            --set run.iterations="$iters" --set run.tolerance=0 -q -o "$dir/r$r-$w.h5" --overwrite
        done
        emu scripts/allreduce-emu.py bare --out "$dir/r$r-bare.json" --calls "$calls" --x-from "$dir/r$r-fp16.h5"
      done
      bash scripts/emulated-cluster.sh down --name "$name"
      trap - EXIT INT TERM
      echo "# done — $(date -u +%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
      "$abs_py" scripts/allreduce-emu.py report "$dir" ${CSV:+--csv "$CSV"} \
        --note "${NOTE:-load $(cut -d' ' -f1-3 /proc/loadavg) after the rounds; ROUNDS=$rounds ITERS=$iters CALLS=$calls}" ;;
    *) echo "unknown target $t (2 2-a9a 4 5 6 7 traffic n32 n32-hand n32-busy n32-wait n32-sched n32-cpu allreduce-emu)" >&2; exit 2 ;;
  esac
done
