"""``python -m hpcgc`` is ``python -m hpcgc.bench``."""
import sys

from .bench import main

sys.exit(main())
