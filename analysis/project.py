"""``python -m analysis.project``: the network projection table (the library is :mod:`hpcgc.analysis.project`)."""
import sys

from hpcgc.analysis.project import main

if __name__ == "__main__":
    sys.exit(main())
