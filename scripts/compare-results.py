#!/usr/bin/env python3
"""Compare two hpcgc results files on everything but timing and provenance.

    python scripts/compare-results.py A.h5 B.h5      # exit 0 equal, 1 different, 2 usage/unreadable

The logic (and the list of what is ignored) is hpcgc.results.compare; docs/results.md,
"Comparing two results files".
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from hpcgc.results.compare import main

if __name__ == "__main__":
    sys.exit(main())
