"""``python -m analysis.project``: the network projection's command line (see :mod:`analysis.projection`)."""
import sys

from .projection import main

if __name__ == "__main__":
    sys.exit(main())
