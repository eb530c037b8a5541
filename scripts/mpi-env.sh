# Sourced by the scripts: environment for launching MPI jobs from this venv.
# Open MPI refuses to run as root unless told so, and needs --oversubscribe for more ranks than
# cores; MPICH needs neither. These are launcher settings, deliberately not hidden in the library.
export PATH="$PWD/.venv/bin:$PATH"
export NUMBA_NUM_THREADS=${NUMBA_NUM_THREADS:-1} OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
MPIEXEC_FLAGS=()
if mpiexec --version 2>/dev/null | grep -q "Open MPI\|OpenRTE"; then
  MPIEXEC_FLAGS+=(--oversubscribe)
  export OMPI_MCA_btl=${OMPI_MCA_btl:-^ofi}
  if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
fi
