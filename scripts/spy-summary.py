"""Summarise a py-spy collapsed-stack file (``py-spy record --format raw``) of an hpcgc run:
samples inside the loop by phase function (inclusive), and the top leaf frames (self time).

    python scripts/spy-summary.py spy-0.txt [--top 12]

Used by ``scripts/profile-rank0.sh`` (issue 31's profile of the d = 2^20 iteration).
"""
from __future__ import annotations

import argparse
import collections
import re

PHASES = (("grad", r"worker_compute"), ("compress", r"\b(encode|compress|_compress|worker_sent)\b"),
          ("server", r"\b(server_step|server_reduced|step_from_sum|second_stage_step)\b"),
          ("MPI", r"transport/core\.py"), ("evaluate", r"\bevaluate\b"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("--top", type=int, default=12)
    a = ap.parse_args()
    total, loop = 0, 0
    phase = collections.Counter()
    leaf = collections.Counter()
    for line in open(a.file):
        stack, _, n = line.rstrip("\n").rpartition(" ")
        if not n.isdigit():
            continue
        n = int(n)
        total += n
        if "iterate" not in stack:
            continue
        loop += n
        for name, pat in PHASES:
            if re.search(pat, stack):
                phase[name] += n
                break
        leaf[stack.split(";")[-1]] += n
    print(f"{a.file}: {total} samples, {loop} inside the loop (run/loop.py:iterate)")
    for name, _ in PHASES:
        print(f"  {name:10s} {phase[name]:7d}  {100 * phase[name] / max(loop, 1):5.1f} %")
    print("top leaves (self):")
    for fr, n in leaf.most_common(a.top):
        print(f"  {n:7d}  {100 * n / max(loop, 1):5.1f} %  {fr[:110]}")


if __name__ == "__main__":
    main()
