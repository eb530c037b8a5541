"""``hpcgc generate``: write a generated data set as a LIBSVM file.

    hpcgc generate synthetic:sparse,n=100000,d=1048576,nnz=40,zipf=1.1,seed=0 -o sparse.svm
    hpcgc generate synthetic:logreg,n=2000,d=50 -o logreg.svm

Same specification ⇒ same bytes. The sparse generator writes one block of rows at a time (memory:
one block plus w*); the dense ones are generated whole, then written. The file reads back with
``libsvm:<file>`` (1-based indices, no header).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from hpcgc.errors import ConfigError, DataError

from .generators import SYNTHETIC_PREFIX
from .specs import load, sparse_generator


def build_parser(prog: str = "hpcgc generate") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0],
                                epilog="options of the sparse generator: docs/data.md "
                                       "(hpcgc list shows every synthetic kind and its defaults)")
    p.add_argument("spec", help="a synthetic data set, e.g. synthetic:sparse,n=100000,d=1048576,nnz=40,zipf=1.1")
    p.add_argument("--out", "-o", required=True, metavar="FILE.svm", help="the LIBSVM file to write")
    p.add_argument("--overwrite", action="store_true", help="replace an existing file")
    return p


def write(spec: str, out, overwrite: bool = False) -> int:
    """Write ``spec``'s rows to ``out`` as LIBSVM; returns the bytes written."""
    if not spec.strip().lower().startswith(SYNTHETIC_PREFIX):
        raise ConfigError(f"generate writes synthetic data sets ({SYNTHETIC_PREFIX}<kind>,...), got {spec!r}")
    out = Path(out)
    if out.exists() and not overwrite:
        raise DataError(f"{out} exists; give --overwrite to replace it")
    if out.is_dir():
        raise DataError(f"{out} is a directory; give a file name")
    gen = sparse_generator(spec)
    if gen is not None:
        return gen.write_libsvm(out)
    ds = load(spec)
    from sklearn.datasets import dump_svmlight_file
    with open(out, "wb") as f:
        dump_svmlight_file(ds.X, ds.y, f, zero_based=False)
        return f.tell()


def main(argv=None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    t0 = time.perf_counter()
    size = write(args.spec, args.out, args.overwrite)
    print(f"wrote {args.out}: {size / 1e6:.1f} MB in {time.perf_counter() - t0:.1f} s")
    return 0
