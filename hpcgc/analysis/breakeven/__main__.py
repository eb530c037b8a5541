"""``python -m hpcgc.analysis.breakeven``: the ``hpcgc breakeven`` command."""
import sys

from .cli import main

sys.exit(main())
