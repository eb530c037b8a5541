"""Sent and received bytes per rank and iteration of DIANA + qsgd under each collective and rank count,
read from the results files' ledgers (``bits_up_wire``, ``bits_received_wire``; ``docs/results.md``).
Byte counts do not depend on the machine's load.

    .venv/bin/python scripts/bytes-per-rank.py [--ranks 2 4 8] [--d 65536] [--out DIR]  → CSV on stdout

The documented table (docs/cost-models.md) is docs/data/reduce-scatter/bytes-per-rank.csv: redirect the
output there, then `python -m hpcgc.docs_tables render`.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import h5py

ROOT = Path(__file__).resolve().parents[1]


def measure(n: int, collective: str, d: int, out: Path, iterations: int = 6) -> tuple[float, float, float, float]:
    path = out / f"{collective}-{n}.h5"
    exe = Path(sys.executable).parent / "mpiexec"
    cmd = [str(exe), "-n", str(n), sys.executable, "-m", "hpcgc.bench",
           "--set", f"data.dataset=synthetic:sparse,n=400,d={d},nnz=8", "--set", "problem.reference=none",
           "--set", "data.partition=iid", "--set", "run.algorithm=diana", "--set", "run.compressor=qsgd:s=4",
           "--set", f"run.collective={collective}", "--set", f"run.iterations={iterations}",
           "--set", f"run.eval_every={iterations}", "--set", "run.step_rule=learning-rate",
           "--set", "run.learning_rate=0.1", "-o", str(path), "--overwrite", "--quiet"]
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True)
    with h5py.File(path) as f:
        g = f["runs"][next(iter(f["runs"]))]
        sent = g["bits_up_wire"][-1] / 8 / iterations
        recv = g["bits_received_wire"][-1] / 8 / iterations
        down = float(g["bits_down_wire"][-1]) / 8 / iterations
    return float(sent.mean()), float(recv.mean()), float(recv.max()), down


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, nargs="+", default=[2, 4, 8])
    p.add_argument("--d", type=int, default=1 << 16)
    p.add_argument("--collectives", nargs="+", default=["gather", "allgather", "reduce-scatter"])
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args()
    out = a.out or Path(tempfile.mkdtemp(prefix="hpcgc-bytes-"))
    print("collective,n,d,sent_bytes_mean,received_bytes_mean,received_bytes_max,down_bcast_bytes_root")
    for c in a.collectives:
        for n in a.ranks:
            sent, recv, rmax, down = measure(n, c, a.d, out)
            print(f"{c},{n},{a.d},{sent:.0f},{recv:.0f},{rmax:.0f},{down:.0f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
