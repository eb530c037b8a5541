#!/usr/bin/env bash
# hpcgc against the authors' mpi4py code (issue 16, target 7): DIANA+ (quant+) on a9a, n = 6 ranks,
# norm-sorted split, λ = 1e-3, the same number of iterations on both sides; prints the median
# milliseconds per iteration of each loop and their ratio. docs/performance.md, "Against the
# authors' code", says what each figure contains.
#
#   git clone https://github.com/bokun-wang/Paper_9107_code /tmp/Paper_9107_code
#   git -C /tmp/Paper_9107_code checkout 144c6f35
#   bash scripts/vs-authors.sh /tmp/Paper_9107_code [RUNS=3] [ITERATIONS=2000] [hpcgc options...]
#   bash scripts/vs-authors.sh /tmp/Paper_9107_code 3 2000 --set run.wait_phases=false
#
# Options after ITERATIONS go to hpcgc's side only (python -m hpcgc.bench ...), after the script's own.
#
# Their code is copied to a work directory and adapted there by scripts/vs-authors.patch (listed
# at its top); the checkout is never modified and nothing of it enters this repository. Runs are
# interleaved (theirs, hpcgc, hpcgc, theirs, ...). Environment: NP (ranks, 6), VS_AUTHORS_DATA (the
# LIBSVM a9a file, ../shared/data/libsvm/a9a), VS_AUTHORS_WORKDIR (kept work directory; default a
# fresh mktemp -d, removed at the end unless VS_AUTHORS_KEEP=1). Both sides run with one BLAS /
# OpenMP thread per rank (hpcgc sets that itself; the script exports it for theirs too).
set -euo pipefail
usage="usage: bash scripts/vs-authors.sh PATH_TO_Paper_9107_code [RUNS [ITERATIONS [hpcgc options...]]]"
[ $# -ge 1 ] || { echo "$usage" >&2; exit 2; }
[ -d "$1" ] || { echo "vs-authors: $1: no such directory ($usage)" >&2; exit 2; }
THEIRS=$(cd "$1" && pwd)
RUNS=${2:-3}
ITERS=${3:-2000}
NP=${NP:-6}
EXTRA=("${@:4}")
for v in RUNS ITERS NP; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "vs-authors: $v must be a positive integer, got '${!v}'" >&2; exit 2; }
done
# their trace period is floor(iterations / 100): 0 (a ZeroDivisionError in their loop) below 100
[ "$ITERS" -ge 100 ] || { echo "vs-authors: ITERATIONS must be >= 100 (the authors' code evaluates every 1 %)" >&2; exit 2; }
for f in algorithms/SD-DIANA-plus.py preprocessing.py EliasOmega.py; do
  [ -f "$THEIRS/$f" ] || { echo "vs-authors: $THEIRS is not a checkout of bokun-wang/Paper_9107_code (no $f)" >&2; exit 2; }
done

cd "$(dirname "$0")/.."
ROOT=$PWD
source scripts/mpi-env.sh
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1} MKL_NUM_THREADS=${MKL_NUM_THREADS:-1}
export MPIEXEC_TIMEOUT=${MPIEXEC_TIMEOUT:-3600}   # a hung run is killed (MPICH hydra and Open MPI honour it)
DATA=${VS_AUTHORS_DATA:-../shared/data/libsvm/a9a}
[ -f "$DATA" ] || { echo "vs-authors: data file $DATA not found (set VS_AUTHORS_DATA to LIBSVM's a9a)" >&2; exit 2; }
DATA=$(cd "$(dirname "$DATA")" && pwd)/$(basename "$DATA")

WORK=${VS_AUTHORS_WORKDIR:-$(mktemp -d "${TMPDIR:-/tmp}/vs-authors.XXXXXX")}
if [ -z "${VS_AUTHORS_WORKDIR:-}" ] && [ "${VS_AUTHORS_KEEP:-0}" != 1 ]; then
  trap 'rm -rf "$WORK"' EXIT
fi
rm -rf "$WORK/code" && mkdir -p "$WORK/code"
tar -C "$THEIRS" --exclude=.git -cf - . | tar -C "$WORK/code" -xf -
if ! out=$(patch -d "$WORK/code" -p1 --forward --batch --quiet < scripts/vs-authors.patch 2>&1); then
  echo "$out" | head -5 >&2
  echo "vs-authors: scripts/vs-authors.patch does not apply to $THEIRS (expected commit 144c6f35)" >&2
  exit 2
fi
mkdir -p "$WORK/code/datasets"
ln -sf "$DATA" "$WORK/code/datasets/a9a"           # their loader reads ./datasets/a9a

echo "vs-authors: work directory $WORK; $RUNS runs × 2 of $ITERS iterations on $NP ranks; extra hpcgc options: ${EXTRA[*]:-none}"
# Their split and x* (x* only feeds their progress trace, not the timing: 500 GD steps, not 20000).
(cd "$WORK/code" && python preprocessing.py --data a9a --cond 1e-30 --it_max 500 --n "$NP") \
  > "$WORK/preprocessing.log" 2>&1 || { echo "vs-authors: their preprocessing.py failed, see $WORK/preprocessing.log" >&2; exit 1; }

theirs() {  # one run of their DIANA+ (quant+) loop, one seed
  (cd "$WORK/code" && VS_AUTHORS_SEEDS=1 VS_AUTHORS_TIMES="$WORK/theirs-$1.npy" \
     mpiexec "${MPIEXEC_FLAGS[@]}" -n "$NP" python algorithms/SD-DIANA-plus.py \
       --it "$ITERS" --norm_type inf --data a9a) > "$WORK/theirs-$1.log" 2>&1 \
    || { echo "vs-authors: the authors' run $1 failed, see $WORK/theirs-$1.log" >&2; exit 1; }
}
hpcgc() {  # the same experiment in hpcgc (docs/smoothness.md), evaluated every 1 % as theirs
  mpiexec "${MPIEXEC_FLAGS[@]}" -n "$NP" python -m hpcgc.bench \
    --set "data.dataset=\"libsvm:$DATA\"" --set data.partition=norm-sorted \
    --set problem.kind=logreg --set problem.l2=1e-3 \
    --set run.algorithm=diana+ --set run.compressor=quant+ --set run.seed=0 \
    --set run.iterations="$ITERS" --set run.eval_every=$((ITERS / 100)) --set run.tolerance=0 \
    --set run.per_iteration_times=true "${EXTRA[@]}" -o "$WORK/hpcgc-$1.h5" --overwrite -q > "$WORK/hpcgc-$1.log" 2>&1 \
    || { echo "vs-authors: the hpcgc run $1 failed, see $WORK/hpcgc-$1.log" >&2; exit 1; }
}
for r in $(seq 1 "$RUNS"); do
  if [ $((r % 2)) = 1 ]; then theirs "$r"; hpcgc "$r"; else hpcgc "$r"; theirs "$r"; fi
  echo "vs-authors: run $r of $RUNS done"
done
PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" python scripts/vs-authors-report.py "$WORK" "$RUNS" "$ITERS" "$NP"
