#!/usr/bin/env bash
# Run "$@" with every MPI rank but rank 0 at a lower scheduling priority (nice NICE, default 5):
# on an oversubscribed host rank 0's serial work (the parameter server's step, between the Gatherv
# and the Bcast where every other rank waits) then gets a larger share of a core. For measurements
# of the scheduler's part in an -n 32 iteration on 2 cores (scripts/measure-performance.sh
# n32-sched); any user may lower a process's own priority. Reads MPICH's PMI_RANK (Open MPI:
# OMPI_COMM_WORLD_RANK).
#   mpiexec -n 32 bash scripts/nice-workers.sh python -m hpcgc.bench ...
rank=${PMI_RANK:-${OMPI_COMM_WORLD_RANK:-0}}
[ "$rank" = 0 ] || exec nice -n "${NICE:-5}" "$@"
exec "$@"
