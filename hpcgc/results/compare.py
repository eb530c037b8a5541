"""Compare two results files on everything that is not timing: the proof of "same iterates and bits".

``compare(a, b)`` walks both HDF5 files (root attributes, then every run matched by name: its
attributes, datasets and groups) and returns the differences as lines; ``strip(src, dst)`` writes a
copy of a results file without the timing content (the golden file of
``tests/test_golden_results.py``). ``scripts/compare-results.py`` is the command line.

Values are compared exactly (same dtype, same shape, same bits; NaN equals NaN). What is excluded
— timing and provenance, which differ between two runs of the same code by design — is the list
``TIMING`` below (fnmatch patterns on the path inside the file, attributes as ``<group path>@<name>``),
documented in docs/results.md, "Comparing two results files".
"""
from __future__ import annotations

import fnmatch
import os
from pathlib import Path

import numpy as np

TIMING: tuple[str, ...] = (
    # per-run timing datasets: cumulative phase times and every iteration's phase times
    "runs/*/time", "runs/*/time/*",
    "runs/*/per_iteration", "runs/*/per_iteration/*",
    # per-run timing attributes
    "runs/*@setup_seconds", "runs/*@checkpoint_seconds",
    "runs/*@floor_seconds", "runs/*@floor_ratio", "runs/*@floor_kernels_seconds", "runs/*@floor_ratio_kernels",
    "runs/*@wall_seconds", "runs/*@*_seconds",
    # how the waiting ranks waited (run.wait resolved: spin or yield; "auto" depends on the host's cores)
    "runs/*@wait_mode",
    # provenance of the invocation: when, where, by which code and library versions, how loaded
    "@created", "@command_line", "@git_commit", "@git_dirty", "@hostnames", "@hpcgc_version",
    "@*_version", "@slurm_*", "@resumed*", "@machine*", "@noise*", "@load*", "@cpu*",
    "runs/*@machine*", "runs/*@noise*",
)
"""What ``compare`` ignores: fnmatch patterns on ``<path>`` (datasets, groups) and ``<path>@<attr>``
(attributes; root attributes are ``@<attr>``). Everything else must be equal bit for bit."""


def excluded(key: str, patterns=TIMING) -> bool:
    return any(fnmatch.fnmatchcase(key, p) for p in patterns)


class Unreadable(Exception):
    """A file that is not an HDF5 results file (missing, another format): exit status 2."""


def _open(path):
    import h5py
    p = Path(path)
    if not p.is_file():
        raise Unreadable(f"{p}: no such file")
    try:
        return h5py.File(p, "r")
    except OSError as exc:
        raise Unreadable(f"{p}: not a readable HDF5 file ({exc})") from None


def _equal(a, b) -> tuple[bool, str]:
    """(equal, where they first differ) for two attribute or dataset values."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return False, f"shape {a.shape} vs {b.shape}"
    if a.dtype.kind != b.dtype.kind or (a.dtype.kind in "fiub" and a.dtype != b.dtype):
        return False, f"dtype {a.dtype} vs {b.dtype}"
    if a.dtype.kind == "f" or a.dtype.kind == "c":
        same = (a == b) | (np.isnan(a) & np.isnan(b))
        # same bits, not just ==: 0.0 and -0.0 differ
        same &= np.signbit(a.real) == np.signbit(b.real)
    elif a.dtype.kind in "OSU":
        same = np.vectorize(lambda x, y: _text(x) == _text(y), otypes=[bool])(a, b) if a.size else np.ones(0, bool)
    else:
        same = a == b
    same = np.asarray(same)
    if same.all():
        return True, ""
    idx = np.unravel_index(int(np.argmin(same.ravel())), a.shape) if a.shape else ()
    where = f"[{', '.join(map(str, idx))}] " if idx else ""
    return False, f"first difference at {where}{_show(a[idx])} vs {_show(b[idx])} ({int((~same).sum())} of {same.size} differ)"


def _text(x):
    return x.decode() if isinstance(x, bytes) else x


def _show(v) -> str:
    v = _text(v.item() if hasattr(v, "item") else v)
    if isinstance(v, float):
        return repr(v)
    s = str(v)
    return s if len(s) <= 60 else s[:57] + "..."


def _attrs(obj, path: str, patterns) -> dict:
    prefix = path + "@"
    return {k: obj.attrs[k] for k in obj.attrs if not excluded(prefix + k, patterns)}


def _walk(g, a_path: str, other, out: list, patterns, label_a: str, label_b: str):
    """Compare group ``g`` of A with the same group of B (``other``), recursively."""
    aa, ab = _attrs(g, a_path, patterns), _attrs(other, a_path, patterns)
    where = a_path or "/"
    for k in sorted(set(aa) | set(ab)):
        if k not in ab:
            out.append(f"{where} attribute {k}: only in {label_a}")
        elif k not in aa:
            out.append(f"{where} attribute {k}: only in {label_b}")
        else:
            ok, why = _equal(aa[k], ab[k])
            if not ok:
                out.append(f"{where} attribute {k}: {why}")
    import h5py
    names = sorted(k for k in set(g) | set(other) if not excluded(f"{a_path}/{k}".lstrip("/"), patterns))
    for k in names:
        path = f"{a_path}/{k}".lstrip("/")
        if k not in other:
            out.append(f"{path}: only in {label_a}")
            continue
        if k not in g:
            out.append(f"{path}: only in {label_b}")
            continue
        x, y = g[k], other[k]
        if isinstance(x, h5py.Group) != isinstance(y, h5py.Group):
            out.append(f"{path}: a group in one file, a dataset in the other")
        elif isinstance(x, h5py.Group):
            _walk(x, path, y, out, patterns, label_a, label_b)
        else:
            ok, why = _equal(x[()], y[()])
            if not ok:
                out.append(f"{path}: {why}")
            aa, ab = _attrs(x, path, patterns), _attrs(y, path, patterns)
            for an in sorted(set(aa) | set(ab)):
                if an not in aa or an not in ab:
                    out.append(f"{path} attribute {an}: only in {label_a if an in aa else label_b}")
                else:
                    ok, why = _equal(aa[an], ab[an])
                    if not ok:
                        out.append(f"{path} attribute {an}: {why}")


def compare(a: str | os.PathLike, b: str | os.PathLike, patterns=TIMING) -> list[str]:
    """Every non-timing difference between results files ``a`` and ``b`` (empty: equal). Runs are
    matched by name (``runs/<run_id>``); a run in one file only is one line. Raises ``Unreadable``."""
    with _open(a) as fa, _open(b) as fb:
        out: list[str] = []
        _walk(fa, "", fb, out, patterns, "A", "B")
        return out


def strip(src: str | os.PathLike, dst: str | os.PathLike, patterns=TIMING) -> Path:
    """Copy results file ``src`` to ``dst`` without anything ``compare`` ignores (compressed): a small
    file that compares equal to ``src``."""
    import h5py
    dst = Path(dst)
    with _open(src) as fs, h5py.File(dst, "w", libver="latest") as fd:

        def copy(g, d, path):
            for k, v in _attrs(g, path, patterns).items():
                d.attrs[k] = v
            for k in g:
                p = f"{path}/{k}".lstrip("/")
                if excluded(p, patterns):
                    continue
                if isinstance(g[k], h5py.Group):
                    copy(g[k], d.create_group(k), p)
                else:
                    data = g[k][()]
                    kw = {"compression": "gzip", "shuffle": True} if np.size(data) > 512 else {}
                    ds = d.create_dataset(k, data=data, **kw)
                    for an, av in _attrs(g[k], p, patterns).items():
                        ds.attrs[an] = av

        copy(fs, fd, "")
    return dst


def main(argv=None) -> int:
    """``compare-results.py A.h5 B.h5``: 0 equal, 1 different, 2 usage or unreadable file."""
    import argparse
    ap = argparse.ArgumentParser(
        prog="compare-results.py",
        description="Compare every non-timing dataset and attribute of two hpcgc results files (runs "
                    "matched by name). Ignored (timing and provenance): " + ", ".join(TIMING) + ". "
                    "Exit status: 0 equal, 1 different, 2 usage error or unreadable file.")
    ap.add_argument("a", help="results file A (.h5)")
    ap.add_argument("b", help="results file B (.h5)")
    ap.add_argument("--strip", action="store_true",
                    help="instead of comparing: write B as a copy of A without the ignored content "
                         "(how tests/golden/ is made)")
    ap.add_argument("--max", type=int, default=50, help="print at most this many differences (default 50)")
    try:
        args = ap.parse_args(argv)
    except SystemExit as exc:
        return 2 if exc.code else 0
    try:
        if args.strip:
            print(f"wrote {strip(args.a, args.b)}")
            return 0
        diffs = compare(args.a, args.b)
    except Unreadable as exc:
        print(f"compare-results: error: {exc}")
        return 2
    if not diffs:
        print(f"equal: {args.a} and {args.b} (timing and provenance ignored)")
        return 0
    print(f"{len(diffs)} difference(s) between A = {args.a} and B = {args.b}:")
    for line in diffs[:args.max]:
        print("  " + line)
    if len(diffs) > args.max:
        print(f"  ... {len(diffs) - args.max} more")
    return 1
