"""Typed state trees: what a checkpoint holds, without pickle (``docs/results.md`` "Checkpoints").

A *tree* is a nested ``dict`` of ``str`` → leaf or tree, a leaf one of

    numpy array (bool, integer, unsigned, float or complex dtype — no object arrays)
    int (within int64), float, bool, str

Trees are written into an HDF5 group (:func:`write`: a subgroup per dict, a dataset per leaf,
scalars as 0-d datasets, strings as UTF-8 string datasets) and read back (:func:`read`) as plain
numbers, arrays and strings: HDF5 holds no code, and nothing read is evaluated or unpickled.
:func:`conform` then checks a read tree against a *template* — the same tree captured from the
freshly set-up run it is meant to continue — name for name, shape for shape, dtype for dtype, and
returns it with the template's Python types; anything else is a :class:`StateMismatch` naming the
first difference.

Random generators' ``bit_generator.state`` (PCG64: a dict with two 128-bit ints) becomes a tree
with :func:`rng_state` (every int as a decimal string: exact at any width) and goes back with
:func:`set_rng_state`, which parses only what the live generator's own state has as ints.
"""
from __future__ import annotations

import re

import numpy as np

from .errors import UserError

ARRAY_KINDS = "biufc"            # bool, int, uint, float, complex
INT64 = (-2**63, 2**63 - 1)
_DECIMAL = re.compile(r"-?[0-9]{1,80}")


class StateMismatch(UserError):
    """A stored state that does not fit the run being resumed (names, shapes, dtypes, types)."""


def _check_leaf(path: str, v):
    if isinstance(v, np.ndarray):
        if v.dtype.kind not in ARRAY_KINDS:
            raise TypeError(f"state {path}: arrays of dtype {v.dtype} cannot be checkpointed")
    elif isinstance(v, (bool, np.bool_, float, np.floating, str)):
        pass
    elif isinstance(v, (int, np.integer)):
        if not INT64[0] <= int(v) <= INT64[1]:
            raise TypeError(f"state {path}: int {v} outside int64 (store it as a decimal string)")
    else:
        raise TypeError(f"state {path}: {type(v).__name__} is not an array, int, float, bool or str")


def flatten(tree: dict, prefix: str = "") -> dict:
    """``{"a": {"b": x}}`` → ``{"a/b": x}``; checks every key and leaf (TypeError: a programming error)."""
    out = {}
    for k, v in tree.items():
        if not isinstance(k, str) or not k or "/" in k or k in (".", ".."):
            raise TypeError(f"state key {prefix}{k!r}: keys are non-empty strings without '/'")
        path = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, path + "/"))
            if not v:
                out[path + "/"] = None            # an empty dict keeps its place
        else:
            _check_leaf(path, v)
            out[path] = v
    return out


def write(group, tree: dict) -> int:
    """Write ``tree`` into the h5py ``group``; returns the bytes of array data written."""
    import h5py
    nbytes = 0
    for path, v in flatten(tree).items():
        if v is None:
            group.require_group(path.rstrip("/"))
        elif isinstance(v, str):
            group.create_dataset(path, data=v, dtype=h5py.string_dtype())
        elif isinstance(v, np.ndarray):
            group.create_dataset(path, data=v)
            nbytes += v.nbytes
        elif isinstance(v, (bool, np.bool_)):
            group.create_dataset(path, data=np.bool_(v))
        elif isinstance(v, (int, np.integer)):
            group.create_dataset(path, data=np.int64(v))
        else:
            group.create_dataset(path, data=np.float64(v))
    return nbytes


def read(group) -> dict:
    """The tree stored in an h5py ``group``: arrays (0-d for scalars) and strings; StateMismatch for
    anything else (compound, variable-length, reference or opaque data, links)."""
    import h5py
    out = {}
    for k in group:
        link = group.get(k, getlink=True)
        if not isinstance(link, h5py.HardLink):
            raise StateMismatch(f"{group.name}/{k} is a link, not stored state")
        obj = group[k]
        if isinstance(obj, h5py.Group):
            out[k] = read(obj)
        elif h5py.check_string_dtype(obj.dtype) is not None and obj.shape == ():
            out[k] = obj.asstr()[()]
        elif obj.dtype.kind in ARRAY_KINDS and obj.dtype.fields is None and obj.dtype.subdtype is None:
            out[k] = obj[()] if obj.shape == () else obj[...]
            if obj.shape == ():
                out[k] = np.asarray(out[k])
        else:
            raise StateMismatch(f"{obj.name} has dtype {obj.dtype}, not a number array or a string")
    return out


def conform(template: dict, stored: dict, where: str = "") -> dict:
    """``stored`` checked against ``template`` (same names; arrays of the same shape and dtype;
    scalars of the same type), with the template's Python types. StateMismatch names the first
    difference as ``where/path``."""
    out = {}
    missing = sorted(set(template) - set(stored))
    extra = sorted(set(stored) - set(template))
    if missing or extra:
        what = (f"lacks {', '.join(missing)}" if missing else "") + ("; " if missing and extra else "") + \
               (f"has unexpected {', '.join(extra)}" if extra else "")
        raise StateMismatch(f"{where or '/'} {what}")
    for k, t in template.items():
        v, path = stored[k], f"{where}/{k}"
        if isinstance(t, dict):
            if not isinstance(v, dict):
                raise StateMismatch(f"{path} should be a group")
            out[k] = conform(t, v, path)
            continue
        if isinstance(v, dict):
            raise StateMismatch(f"{path} should be a value, not a group")
        if isinstance(t, str):
            if not isinstance(v, str):
                raise StateMismatch(f"{path} should be a string")
            out[k] = v
            continue
        if not isinstance(v, np.ndarray):
            raise StateMismatch(f"{path} should be numeric")
        if isinstance(t, np.ndarray):
            if v.shape != t.shape or v.dtype != t.dtype:
                raise StateMismatch(f"{path} is {v.dtype}{list(v.shape)}, this run's is {t.dtype}{list(t.shape)}")
            out[k] = v
            continue
        if v.shape != ():
            raise StateMismatch(f"{path} should be a scalar, got shape {list(v.shape)}")
        if isinstance(t, (bool, np.bool_)):
            kind, cast = "b", bool
        elif isinstance(t, (int, np.integer)):
            kind, cast = "iu", int
        else:
            kind, cast = "f", float
        if v.dtype.kind not in kind:
            raise StateMismatch(f"{path} is {v.dtype}, this run's is {type(t).__name__}")
        out[k] = cast(v[()])
    return out


# -- random generators -------------------------------------------------------------------------
def _plain(v):
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, np.ndarray):
        return v.copy()
    if isinstance(v, (float, str)):
        return v
    raise TypeError(f"generator state holds a {type(v).__name__}")


def rng_state(gen: np.random.Generator) -> dict:
    """``gen.bit_generator.state`` as a tree: ints (PCG64's 128-bit state and increment) as
    decimal strings, arrays copied."""
    return _plain(gen.bit_generator.state)


def _unplain(live, v, path):
    if isinstance(live, dict):
        return {k: _unplain(live[k], v[k], f"{path}/{k}") for k in live}
    if isinstance(live, (int, np.integer)) and not isinstance(live, (bool, np.bool_)):
        if not _DECIMAL.fullmatch(v):
            raise StateMismatch(f"{path} is not a decimal integer")
        return int(v)
    return v


def set_rng_state(gen: np.random.Generator, tree: dict, where: str = "rng") -> None:
    """Put a tree made by :func:`rng_state` (and checked by :func:`conform`) back into ``gen``."""
    live = gen.bit_generator.state
    try:
        gen.bit_generator.state = _unplain(live, conform(_plain(live), tree, where), where)
    except (ValueError, TypeError) as exc:     # numpy's own check of the values
        raise StateMismatch(f"{where}: {exc}") from None
