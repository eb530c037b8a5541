# jobs/lib.sh - shell functions shared by hpcgc.sbatch, submit.sh and resubmit-failed.sh.
# shellcheck shell=bash
# Sourced, not run. Needs HPCGC_ROOT (the repository root) to be set by the caller.

hpcgc_die() { echo "hpcgc: error: $*" >&2; exit "${HPCGC_DIE_STATUS:-2}"; }

# hpcgc_site: load the site settings (jobs/site.env, or the file named by HPCGC_SITE_ENV).
# Values already in the environment win (site.env only fills in what is unset).
hpcgc_site() {
  local f=${HPCGC_SITE_ENV:-$HPCGC_ROOT/jobs/site.env}
  [ -r "$f" ] || hpcgc_die "site settings $f not found (HPCGC_SITE_ENV)"
  # shellcheck source=/dev/null
  source "$f"
}

# hpcgc_env: modules and virtualenv, as the site settings say.
hpcgc_env() {
  if [ -n "${HPCGC_MODULES:-}" ]; then
    if ! type module >/dev/null 2>&1; then
      for init in /etc/profile.d/lmod.sh /etc/profile.d/modules.sh /usr/share/lmod/lmod/init/bash \
                  /usr/share/modules/init/bash; do
        # shellcheck source=/dev/null
        [ -r "$init" ] && { source "$init"; break; }
      done
    fi
    type module >/dev/null 2>&1 || hpcgc_die "HPCGC_MODULES='$HPCGC_MODULES' but no 'module' command here"
    # shellcheck disable=SC2086
    module load $HPCGC_MODULES || hpcgc_die "module load $HPCGC_MODULES failed"
  fi
  if [ -n "${HPCGC_VENV:-}" ]; then
    local v=$HPCGC_VENV
    case "$v" in /*) ;; *) v=$HPCGC_ROOT/$v ;; esac
    [ -r "$v/bin/activate" ] || hpcgc_die "virtualenv $v not found (HPCGC_VENV; create it with scripts/setup.sh)"
    # shellcheck source=/dev/null
    source "$v/bin/activate"
  fi
  command -v "${HPCGC_PYTHON:-python}" >/dev/null || hpcgc_die "python '${HPCGC_PYTHON:-python}' not found (HPCGC_PYTHON)"
  export NUMBA_NUM_THREADS=${NUMBA_NUM_THREADS:-1} OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
}

# hpcgc_abspath PATH [BASE]: PATH made absolute against BASE (default: $PWD); no existence check.
hpcgc_abspath() {
  case "$1" in /*) printf '%s\n' "$1" ;; *) printf '%s/%s\n' "${2:-$PWD}" "$1" ;; esac
}

# hpcgc_experiment_info EXPERIMENT.toml [bench args...] -> prints "<name> <grid points>" (no data
# is read: this only parses the file and the --set overrides and expands the sweep).
hpcgc_experiment_info() {
  "${HPCGC_PYTHON:-python}" - "$@" <<'PY'
import argparse, sys
from hpcgc import config
from hpcgc.errors import UserError
p = argparse.ArgumentParser(add_help=False)
p.add_argument("--set", "-s", action="append", default=[], dest="overrides")
a, _ = p.parse_known_args(sys.argv[2:])
try:
    cfg = config.apply_overrides(config.load_file(sys.argv[1]), a.overrides)
except UserError as exc:
    sys.exit(f"hpcgc: error: {exc}")
print(cfg["name"], len(config.expand(cfg)))
PY
}

# hpcgc_safe_name NAME -> NAME with anything but [A-Za-z0-9_.-] replaced by _
hpcgc_safe_name() { printf '%s\n' "$1" | sed 's/[^A-Za-z0-9_.-]\{1,\}/_/g'; }

# hpcgc_ranges "0 1 2 5 7 8" -> "0-2,5,7-8" (sorted unique integers, for --array)
hpcgc_ranges() {
  tr ' ' '\n' <<<"$1" | sed '/^$/d' | sort -n -u | awk '
    NR == 1 { lo = hi = $1; next }
    $1 == hi + 1 { hi = $1; next }
    { out = out (out ? "," : "") (lo == hi ? lo : lo "-" hi); lo = hi = $1 }
    END { if (NR) print out (out ? "," : "") (lo == hi ? lo : lo "-" hi) }'
}

# hpcgc_sbatch_args: sbatch resource options from the site settings, one per line
hpcgc_sbatch_args() {
  [ -n "${HPCGC_PARTITION:-}" ] && echo "--partition=$HPCGC_PARTITION"
  [ -n "${HPCGC_ACCOUNT:-}" ] && echo "--account=$HPCGC_ACCOUNT"
  [ -n "${HPCGC_QOS:-}" ] && echo "--qos=$HPCGC_QOS"
  [ -n "${HPCGC_TIME:-}" ] && echo "--time=$HPCGC_TIME"
  [ -n "${HPCGC_NODES:-}" ] && echo "--nodes=$HPCGC_NODES"
  [ -n "${HPCGC_NTASKS:-}" ] && echo "--ntasks=$HPCGC_NTASKS"
  [ -n "${HPCGC_NTASKS_PER_NODE:-}" ] && echo "--ntasks-per-node=$HPCGC_NTASKS_PER_NODE"
  [ -n "${HPCGC_CPUS_PER_TASK:-}" ] && echo "--cpus-per-task=$HPCGC_CPUS_PER_TASK"
  [ -n "${HPCGC_MEM:-}" ] && echo "--mem=$HPCGC_MEM"
  if [ -n "${HPCGC_SBATCH_ARGS:-}" ]; then
    # shellcheck disable=SC2086
    printf '%s\n' $HPCGC_SBATCH_ARGS
  fi
  return 0
}

# hpcgc_max_array_size -> the site's MaxArraySize: HPCGC_MAX_ARRAY_SIZE, else scontrol, else 1001
hpcgc_max_array_size() {
  if [ -n "${HPCGC_MAX_ARRAY_SIZE:-}" ]; then echo "$HPCGC_MAX_ARRAY_SIZE setting HPCGC_MAX_ARRAY_SIZE"; return; fi
  local m
  m=$(scontrol show config 2>/dev/null | awk '$1 == "MaxArraySize" && !n++ {print $3}' || true)
  if [ -n "$m" ]; then echo "$m scontrol"; else echo "1001 SLURM-default"; fi
}

# hpcgc_quote ARGS... -> the arguments as one shell-readable line (quoted only where needed)
hpcgc_quote() {
  local a out=()
  for a in "$@"; do
    if [[ "$a" =~ ^[A-Za-z0-9_./=:,%@+-]+$ ]]; then out+=("$a"); else out+=("$(printf '%q' "$a")"); fi
  done
  printf '%s\n' "${out[*]}"
}
