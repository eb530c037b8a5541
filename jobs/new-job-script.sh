#!/usr/bin/env bash
# new-job-script.sh - write jobs/<name>.sbatch, the job script of an experiment file: a thin
# wrapper that runs jobs/hpcgc.sbatch on jobs/experiments/<name>.toml with its own #SBATCH defaults.
#
# usage: jobs/new-job-script.sh jobs/experiments/NAME.toml [--ntasks N] [--time HH:MM:SS] [--force]
#   --ntasks  default: the N of an "mpiexec -n N" in the experiment file's comments, else 4
#   --time    default 01:00:00
# Every experiment file in jobs/experiments/ must have one (tests/test_jobs.py checks it).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
EXP=""; NT=""; TIME="01:00:00"; FORCE=0
while [ $# -gt 0 ]; do
  case "$1" in
    --ntasks) NT=$2; shift 2 ;;
    --time) TIME=$2; shift 2 ;;
    --force) FORCE=1; shift ;;
    -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) EXP=$1; shift ;;
  esac
done
[ -f "$EXP" ] || { echo "usage: jobs/new-job-script.sh jobs/experiments/NAME.toml [--ntasks N] [--time T]" >&2; exit 2; }
NAME=$(basename "$EXP" .toml)
[ "$(cd "$(dirname "$EXP")" && pwd)" = "$HERE/experiments" ] || {
  echo "hpcgc: error: $EXP is not in jobs/experiments/" >&2; exit 2; }
OUT=$HERE/$NAME.sbatch
[ -e "$OUT" ] && [ "$FORCE" = 0 ] && { echo "hpcgc: error: $OUT exists (--force to overwrite)" >&2; exit 2; }
[ -n "$NT" ] || NT=$(sed -n 's/^#.*mpiexec -n \([0-9][0-9]*\).*/\1/p' "$EXP" | sed -n 1p)
NT=${NT:-4}
DESC=$(sed -n '1,/^[^#]/{/^# /p}' "$EXP" | sed -n 1p | sed 's/^# //')
cat >"$OUT" <<SBATCH
#!/bin/bash
#SBATCH --job-name=hpcgc-$NAME
#SBATCH --ntasks=$NT
#SBATCH --cpus-per-task=1
#SBATCH --time=$TIME
#SBATCH --output=slurm-%x-%j.out
#SBATCH --signal=B:TERM@60
#
# Job script of jobs/experiments/$NAME.toml:
#   ${DESC:-(see the experiment file)}
# A thin wrapper around jobs/hpcgc.sbatch (written by jobs/new-job-script.sh):
#   sbatch jobs/$NAME.sbatch [hpcgc.bench options]      # the whole experiment in one job
#   sbatch --array=0-N jobs/$NAME.sbatch                 # one array task per grid point (N = points - 1)
#   jobs/submit.sh jobs/experiments/$NAME.toml           # the array, grid counted, site settings applied
# Results: results/$NAME/ (job-<jobid>.h5, or task-<id>.h5 per array task); docs/cluster.md.
set -euo pipefail
hpcgc_find_root() {  # the batch script runs from a spool copy: find the repo from the submit dir
  local d
  for d in "\${HPCGC_ROOT:-}" "\$(cd "\$(dirname "\${BASH_SOURCE[0]}")/.." 2>/dev/null && pwd)" \\
           "\${SLURM_SUBMIT_DIR:-}" "\$PWD"; do
    while [ -n "\$d" ] && [ "\$d" != / ]; do
      [ -f "\$d/jobs/hpcgc.sbatch" ] && [ -d "\$d/hpcgc" ] && { echo "\$d"; return 0; }
      d=\$(dirname "\$d")
    done
  done
  return 1
}
ROOT=\$(hpcgc_find_root) || {
  echo "hpcgc: error: cannot find the hpcgc repository (submit from inside it, or set HPCGC_ROOT)" >&2; exit 2; }
export HPCGC_ROOT=\$ROOT
exec bash "\$ROOT/jobs/hpcgc.sbatch" "\$ROOT/jobs/experiments/$NAME.toml" "\$@"
SBATCH
chmod +x "$OUT"
echo "wrote $OUT (ntasks $NT, time $TIME)"
