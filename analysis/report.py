"""``python -m analysis.report``: figures, tables and report.html (the library is :mod:`hpcgc.analysis.report`)."""
import sys

from hpcgc.analysis.report import main

if __name__ == "__main__":
    sys.exit(main())
