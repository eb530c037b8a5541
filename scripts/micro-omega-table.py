#!/usr/bin/env python3
"""A documented table of measured ω from a `python -m hpcgc.bench micro` file (docs/data/README.md).

    python scripts/micro-omega-table.py MICRO.h5 --table compressors/hadamard-vs-qsgd-omega [--d 1024 16384 1048576]

One row per compressor of the file: its model bits per entry (at the largest d), the measured ω
(mean ‖C(x) − x‖²/‖x‖² over the file's draws, float32 standard-normal x; ``micro``'s ``meas``) at
each requested d, and the ω bound (``omega(d)``, ``theory``) at the largest. Writes
docs/data/<table>.csv and its provenance sidecar (command, commit, machine and load from the micro
file), then renders the documents (``python -m hpcgc.docs_tables render``).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import h5py
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from hpcgc import docs_tables  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("micro", help="HDF5 file written by python -m hpcgc.bench micro")
    ap.add_argument("--table", required=True, help="table name under docs/data/, e.g. compressors/x")
    ap.add_argument("--d", type=int, nargs="+", default=[1024, 16384, 1048576], help="dimensions shown")
    a = ap.parse_args(argv)
    rows = [["compressor", "model bits / entry"] + [f"measured ω, d = {d:,}" for d in a.d]
            + [f"ω bound, d = {max(a.d):,}"]]
    with h5py.File(a.micro, "r") as f:
        fa = dict(f.attrs)
        for key in sorted(f["compressors"]):
            g = f["compressors"][key]
            if g.attrs.get("unbiased") is not None and not bool(g.attrs["unbiased"]):
                continue
            d = np.asarray(g["d"])
            meas, theory, bpe = np.asarray(g["param_measured"]), np.asarray(g["param_theory"]), np.asarray(g["model_bpe"])
            missing = [x for x in a.d if x not in d]
            if missing:
                print(f"{a.micro}: no d = {missing} for {g.attrs['spec']}", file=sys.stderr)
                return 2
            at = {int(x): i for i, x in enumerate(d)}
            big = at[max(a.d)]
            rows.append([str(g.attrs["spec"]), f"{bpe[big]:.3f}"] + [f"{meas[at[x]]:.3g}" for x in a.d]
                        + [f"{theory[big]:.3g}"])
    def s(v):
        return v.decode() if isinstance(v, bytes) else str(v)
    meta = {"source": "results", "commit": s(fa.get("git_commit", "unknown")), "date": s(fa.get("created", "unknown")),
            "cpu": s(fa.get("machine_start_cpu_model", "unknown")), "cores": int(fa.get("machine_start_cores", 0)),
            "ranks": 1, "mpi": "none (serial)", "load": float(fa.get("machine_start_load1", float("nan"))),
            "command": s(fa.get("command_line", "")),
            "regenerated_with": f"python scripts/micro-omega-table.py {a.micro} --table {a.table} --d "
                                + " ".join(map(str, a.d)),
            "note": f"input: {s(fa.get('input', ''))}; ω measured, not timed (the load does not change it)"}
    print(f"wrote {docs_tables.write_table(a.table, rows, meta)}")
    for line in docs_tables.render_all():
        print(f"rendered {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
