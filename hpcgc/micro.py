"""``python -m hpcgc.bench micro``: the compressor micro-benchmark (being written)."""
from .errors import UserError


def main(argv) -> int:
    raise UserError("the micro-benchmark is not available in this version")
