"""The checkpoint file ``<results>.checkpoint/<run_id>.h5`` (rank 0): one typed state tree per rank
(:mod:`hpcgc.typed_state`, groups ``rank_<r>``) and the attributes ``format``,
``checkpoint_version``, ``iteration``, ``rows``, ``ranks``, ``run_id`` (``docs/results.md``,
"Resumed files and checkpoints"). No pickle: a file someone else wrote is read as numbers, arrays
and strings, and refused with one line when it is not this format (:func:`problem`) — files of
hpcgc before typed checkpoints held pickles, and are refused as such.
"""
from __future__ import annotations

import os
from pathlib import Path

import h5py

from ..errors import UserError
from ..typed_state import StateMismatch, read, write

FORMAT = "hpcgc typed state, one group per rank"
VERSION = 1
PICKLED = "one pickled dict"            # how the older format's `format` attribute began


def _py(v):
    if isinstance(v, bytes):
        return v.decode()
    return v.item() if hasattr(v, "item") and getattr(v, "shape", None) == () else v


def save(path: Path, iteration: int, rows: int, run_id: str, trees: list) -> int:
    """Write the per-rank ``trees`` beside ``path`` and rename over it (a crash while writing
    leaves the previous checkpoint intact); returns the bytes of array data written."""
    tmp = path.with_name(path.name + ".tmp")
    nbytes = 0
    with h5py.File(tmp, "w") as f:
        for r, tree in enumerate(trees):
            nbytes += write(f.create_group(f"rank_{r}"), tree)
        f.attrs.update(iteration=iteration, rows=rows, ranks=len(trees), run_id=run_id, format=FORMAT,
                       checkpoint_version=VERSION)
    os.replace(tmp, path)
    return nbytes


def problem(path: Path, ranks: int) -> str | None:
    """Why the checkpoint at ``path`` cannot be loaded at ``ranks`` ranks (None: it can, or there is
    none): its format, its groups, its iteration and rows — before anything runs."""
    if not path.exists():
        return None
    try:
        with h5py.File(path, "r") as f:
            fmt = str(_py(f.attrs.get("format", "")))
            version = _py(f.attrs.get("checkpoint_version"))
            names = [f"rank_{r}" for r in range(ranks)]
            held = sorted(f)
            groups = held == sorted(names) and _py(f.attrs.get("ranks")) == ranks and all(
                isinstance(f.get(n, getlink=True), h5py.HardLink) and isinstance(f[n], h5py.Group) for n in names)
            counts = [_py(f.attrs.get(k)) for k in ("iteration", "rows")]
    except OSError as exc:
        return f"{path} cannot be read ({getattr(exc, 'strerror', None) or exc})"
    if fmt.startswith(PICKLED):
        return (f"{path} predates typed checkpoints (it holds pickled state, which hpcgc no longer loads: "
                "unpickling a file can run code); delete it to rerun that run from its start")
    if fmt != FORMAT or version != VERSION:
        return f"{path} is not an hpcgc typed checkpoint (version {VERSION})"
    if not groups:
        return f"{path} holds {', '.join(held[:6])}, not the groups rank_0 … rank_{ranks - 1}"
    if not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in counts):
        return f"{path} has no iteration and rows (non-negative integers)"
    return None


def iteration(path: Path) -> int:
    """The iteration of a checkpoint :func:`problem` accepted."""
    with h5py.File(path, "r") as f:
        return int(f.attrs["iteration"])


def load(path: Path, ranks: int) -> tuple[int, int, list]:
    """(iteration, rows, [per-rank trees]) read as plain arrays, numbers and strings (each rank
    checks its own tree against its run: ``RunState.load``); UserError (one line) otherwise."""
    why = problem(path, ranks)
    if why:
        raise UserError(f"--resume: {why}")
    try:
        with h5py.File(path, "r") as f:
            trees = [read(f[f"rank_{r}"]) for r in range(ranks)]
            return int(f.attrs["iteration"]), int(f.attrs["rows"]), trees
    except (StateMismatch, OSError, KeyError, ValueError, TypeError) as exc:
        raise UserError(f"--resume: checkpoint {path}: {exc}") from None
