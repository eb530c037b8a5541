"""Results files (HDF5): the writer used by rank 0, the reader ``load``, the collectives file.

Layout (schema version 1; `docs/results.md` is the reference):

    /                attrs: schema_version, hpcgc_version, git_commit, git_dirty, created, command_line,
                            mpi_library_version, *_version, hostnames, world_size, slurm_* when present,
                            machine_start_*, machine_end_*, noise_* (hpcgc.machine)
    /runs/<run_id>/  attrs: config (resolved TOML), algorithm, compressor, allocation, gamma, alpha, beta,
                            seed, repeat, dataset, d, n_workers, f_star, status, stop_reason, ...
      iteration, loss, suboptimality, dist_to_opt, grad_norm_sq, accuracy        (T,)
      bits_up_model, bits_up_wire, bits_received_wire                             (T, n)
      bits_down_wire, bits_down_model                                             (T,)
      time/<phase>                                                                (T, world_size)
      mpi_bytes/<collective>                                                      (T, world_size)
      node_bytes/<inter|intra>_<sent|received>  (run.topology = "hierarchical")   (T, world_size)
      workers/...                                                                 (n,) tables
      per_iteration/<phase>                                                       (iterations, world_size)
      x_final                                                                     (d,) last iterate

Series are chunked and resizable; the file is flushed as the run goes (at most every
``FLUSH_SECONDS``) and at the end of every run, so a killed job leaves a readable file. It is
written as ``<path>.partial`` and renamed to ``<path>`` when the whole invocation completes.

Modules: ``schema`` (names, suffixes, attribute conversion), ``writer`` (:class:`ResultsWriter`,
:class:`RunWriter`), ``checkpoint`` (the typed checkpoint file of an interrupted run), ``reader``
(:func:`load`, :class:`Results`, :class:`Run`), ``frames`` (the same as pandas frames),
``collectives`` (the file of ``hpcgc collectives``), ``compare`` (two files on everything but
timing: ``scripts/compare-results.py``). The names below are the public API
(``from hpcgc import results; results.load(path)``); importing this package imports h5py, so worker
ranks never import it (``tests/test_startup.py``).
"""
from __future__ import annotations

from .collectives import (
                          COLLECTIVE_ARRAYS,
                          COLLECTIVE_FIT,
                          COLLECTIVES_SCHEMA,
                          COLLECTIVES_SCHEMA_VERSION,
                          CollectivesResults,
                          CollectiveTable,
                          load_collectives,
                          write_collectives,
)
from .reader import TORN_READ_PAUSE_S, TORN_READ_RETRIES, Results, ResultsFormatError, Run, find_files, load
from .schema import (
                          CHECKPOINT_SUFFIX,
                          FLUSH_SECONDS,
                          LEDGER,
                          METADATA_MARGIN,
                          NODE_BYTES,
                          PARTIAL_SUFFIX,
                          PHASES,
                          SCALAR_SERIES,
                          SCHEMA_VERSION,
                          WORKER_SERIES,
)
from .writer import ResultsWriter, RunWriter, WriteFailed, estimate_run_bytes, guarded, refuse_existing

__all__ = [
    "CHECKPOINT_SUFFIX", "COLLECTIVES_SCHEMA", "COLLECTIVES_SCHEMA_VERSION", "COLLECTIVE_ARRAYS", "COLLECTIVE_FIT",
    "FLUSH_SECONDS", "LEDGER", "METADATA_MARGIN", "NODE_BYTES", "PARTIAL_SUFFIX", "PHASES", "SCALAR_SERIES", "SCHEMA_VERSION",
    "TORN_READ_PAUSE_S", "TORN_READ_RETRIES", "WORKER_SERIES",
    "CollectiveTable", "CollectivesResults", "Results", "ResultsFormatError", "ResultsWriter", "Run", "RunWriter",
    "WriteFailed", "estimate_run_bytes", "find_files", "guarded", "load", "load_collectives", "refuse_existing",
    "write_collectives",
]
