"""Progress of long runs on rank 0: a live line on a terminal, periodic plain lines in batch logs.

On a terminal the line is redrawn in place (``\\r``) a few times a second; when stdout is a file —
a SLURM output file, a pipe — a complete line is printed every ``HPCGC_PROGRESS_SECONDS``
(default 10 s), so logs stay readable and no bar is redrawn into them.
"""
from __future__ import annotations

import os
import sys
import time


class Progress:
    def __init__(self, label: str, total: int, stream=None, enabled: bool = True):
        self.label = label
        self.total = max(int(total), 1)
        self.stream = stream or sys.stdout
        self.enabled = enabled
        self.live = enabled and hasattr(self.stream, "isatty") and self.stream.isatty()
        self.interval = 0.25 if self.live else float(os.environ.get("HPCGC_PROGRESS_SECONDS", "10"))
        self.t0 = self.last = time.monotonic()
        self.drawn = False

    def update(self, k: int, subopt: float, mb_up: float, measure: str = "f-f*"):
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self.last < self.interval:
            return
        self.last = now
        done = k / self.total
        eta = (now - self.t0) * (1 - done) / max(done, 1e-9)
        text = (f"{self.label}: it {k}/{self.total} ({100 * done:3.0f}%)  {measure} {subopt:.3e}  "
                f"MB up {mb_up:.3f}  ETA {eta:.0f} s")
        if self.live:
            width = 30
            fill = int(width * done)
            self.stream.write(f"\r[{'#' * fill}{'.' * (width - fill)}] {text}\x1b[K")
            self.drawn = True
        else:
            self.stream.write(f"  {text}\n")
        self.stream.flush()

    def close(self):
        if self.live and self.drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
