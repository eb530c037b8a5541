"""``python -m analysis.breakeven``: the break-even report (the library is :mod:`hpcgc.analysis.breakeven`)."""
import sys

from hpcgc.analysis.breakeven import main

if __name__ == "__main__":
    sys.exit(main())
