"""The results file's layout: schema version, file-name suffixes, the series and their columns, and
how values become HDF5 attributes and come back (shared by the writer, the reader, the collectives
file and the frames; no h5py here beyond the string dtype)."""
from __future__ import annotations

import h5py
import numpy as np

SCHEMA_VERSION = 1
FLUSH_SECONDS = 2.0
METADATA_MARGIN = 256 * 1024          # bytes kept free beyond a write's data (HDF5 metadata, chunk index)
PARTIAL_SUFFIX = ".partial"
CHECKPOINT_SUFFIX = ".checkpoint"     # a directory beside the results file: one <run_id>.h5 per interrupted run

SCALAR_SERIES = ("iteration", "loss", "suboptimality", "dist_to_opt", "grad_norm_sq", "accuracy", "train_accuracy",
                 "test_loss", "bits_down_wire", "bits_down_model", "grad_evals")
WORKER_SERIES = ("bits_up_model", "bits_up_wire", "bits_received_wire")
"""Per-worker cumulative series; ``bits_received_wire`` (bytes MPI delivered into the worker's
receive buffers from other ranks, ×8) is absent from files written before it existed."""
PHASES = ("grad", "compress", "wait_up", "comm_up", "server", "wait_down", "comm_down", "other", "iter",
          "comm_hidden")
"""= transport.PHASES; files written before ``wait_up``, ``wait_down`` and ``other`` existed lack them
(their ``comm_*`` include the waiting, their ``iter`` is the sum of the five others); files written
before ``run.overlap`` lack ``comm_hidden`` (0 in every run without overlap)."""
NODE_BYTES = ("inter_sent", "inter_received", "intra_sent", "intra_received")
"""The ``node_bytes/`` series of a ``run.topology = "hierarchical"`` run (absent from flat runs):
cumulative bytes per rank that crossed between nodes (the per-collective ledgers summed: sent as in
``mpi_bytes``, received as in ``bits_received_wire``) and inside the rank's node (its Reduce and
Bcast)."""
LEDGER = ("Gather", "Gatherv", "Bcast", "Allgather", "Allgatherv", "Allreduce", "Alltoall", "Alltoallv")
"""= transport.LEDGER; files written before Alltoall/Alltoallv were appended lack those two."""


def _attr(v):
    if v is None:
        return ""
    if isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v):
        return np.array(v, dtype=h5py.string_dtype())
    return v



def _py(v):
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, np.ndarray) and v.dtype.kind in "OS":
        return [x.decode() if isinstance(x, bytes) else x for x in v.tolist()]
    if isinstance(v, np.generic):
        return v.item()
    return v
