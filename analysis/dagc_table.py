"""``python -m analysis.dagc_table``: the DAGC comparison table (the library is :mod:`hpcgc.analysis.dagc_table`)."""
import sys

from hpcgc.analysis.dagc_table import main

if __name__ == "__main__":
    sys.exit(main())
