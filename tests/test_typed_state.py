"""Typed state trees (hpcgc.typed_state): what checkpoints hold instead of pickles — written to HDF5
and read back as plain arrays, numbers and strings, checked name for name, shape for shape, dtype for
dtype against the run's own state; generators' 128-bit states exact."""
from __future__ import annotations

import h5py
import numpy as np
import pytest

from hpcgc.typed_state import StateMismatch, conform, read, rng_state, set_rng_state, write


def _tree():
    return {"iteration": 57, "x": np.arange(5.0), "worker": {"h": np.ones(3), "k": np.array([4], np.int64),
                                                            "fresh": np.array([True])},
            "exchange": {}, "root": {"down": 1.5, "start": float("nan"), "rows": 6, "flag": True},
            "name": "PCG64", "c": np.array([1 + 2j])}


def _roundtrip(tmp_path, tree):
    with h5py.File(tmp_path / "s.h5", "w") as f:
        write(f.create_group("rank_0"), tree)
    with h5py.File(tmp_path / "s.h5", "r") as f:
        return read(f["rank_0"])


def test_roundtrip_keeps_names_types_shapes_and_values(tmp_path):
    tree = _tree()
    back = conform(tree, _roundtrip(tmp_path, tree))
    assert set(back) == set(tree) and back["exchange"] == {}
    assert back["iteration"] == 57 and type(back["iteration"]) is int
    assert back["root"]["flag"] is True and back["root"]["rows"] == 6 and np.isnan(back["root"]["start"])
    assert back["name"] == "PCG64"
    for key in ("x", "c"):
        assert back[key].dtype == tree[key].dtype and np.array_equal(back[key], tree[key])
    assert back["worker"]["k"].dtype == np.int64 and back["worker"]["fresh"].dtype == bool


@pytest.mark.parametrize("change, says", [
    (lambda t: t.update(x=np.arange(4.0)), r"/x is float64\[4\], this run's is float64\[5\]"),
    (lambda t: t.update(x=np.arange(5, dtype=np.float32)), r"/x is float32\[5\]"),
    (lambda t: t["worker"].pop("h"), r"/worker lacks h"),
    (lambda t: t["worker"].update(evil=np.zeros(1)), r"/worker has unexpected evil"),
    (lambda t: t.update(iteration=1.5), r"/iteration is float64, this run's is int"),
    (lambda t: t.update(name=np.zeros(1)), r"/name should be a string"),
    (lambda t: t.update(worker=np.zeros(1)), r"/worker should be a group"),
])
def test_conform_names_the_first_difference(tmp_path, change, says):
    stored = _tree()
    change(stored)
    with pytest.raises(StateMismatch, match=says) as exc:
        conform(_tree(), _roundtrip(tmp_path, stored), "checkpoint")
    assert "\n" not in str(exc.value)


def test_generator_state_128_bit_exact(tmp_path):
    g = np.random.default_rng(2024)
    g.integers(0, 10, size=7)
    g.standard_normal(3)
    saved = _roundtrip(tmp_path, {"g": rng_state(g)})["g"]
    assert isinstance(saved["state"]["state"], str) and int(saved["state"]["state"]) >= 2**64  # beyond int64
    expect = g.standard_normal(5)
    h = np.random.default_rng(0)
    set_rng_state(h, saved)
    assert np.array_equal(h.standard_normal(5), expect)
    saved["state"]["inc"] = "__import__('os')"          # nothing is evaluated: it is not a decimal
    with pytest.raises(StateMismatch, match="not a decimal integer"):
        set_rng_state(np.random.default_rng(0), saved)
    mt = np.random.Generator(np.random.MT19937(5))       # other bit generators (arrays in their state)
    mt.random(3)
    saved = _roundtrip(tmp_path, {"g": rng_state(mt)})["g"]
    other = np.random.Generator(np.random.MT19937(0))
    set_rng_state(other, saved)
    assert np.array_equal(other.random(4), mt.random(4))
    with pytest.raises(StateMismatch):                  # a PCG64 state into an MT19937 generator
        set_rng_state(np.random.Generator(np.random.MT19937(0)), rng_state(np.random.default_rng(1)))


def test_write_refuses_what_is_not_typed_state(tmp_path):
    with h5py.File(tmp_path / "w.h5", "w") as f:
        for bad, says in (({"o": np.array([object()])}, "dtype object"), ({"i": 2**70}, "outside int64"),
                          ({"f": lambda: 0}, "function"), ({3: np.zeros(1)}, "keys are"),
                          ({"a/b": 1}, "keys are")):
            with pytest.raises(TypeError, match=says):
                write(f.create_group(f"g{len(f)}"), bad)


def test_read_refuses_other_datasets_and_runs_nothing(tmp_path):
    import pickle

    marker = tmp_path / "ran"

    class Hostile:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    with h5py.File(tmp_path / "r.h5", "w") as f:
        f.create_dataset("a/blob", data=np.frombuffer(pickle.dumps(Hostile()), dtype=np.uint8))
        f.create_dataset("b/objs", data=np.array([b"x", b"yy"], dtype=h5py.special_dtype(vlen=bytes)))
        f.create_dataset("c/rec", data=np.zeros(2, dtype=[("p", "f8"), ("q", "i4")]))
        f["d/link"] = h5py.SoftLink("/a/blob")
    with h5py.File(tmp_path / "r.h5", "r") as f:
        blob = read(f["a"])["blob"]                    # bytes stay bytes: uint8 numbers, never unpickled
        assert blob.dtype == np.uint8 and not marker.exists()
        with pytest.raises(StateMismatch, match="not a number array or a string"):
            read(f["b"])
        with pytest.raises(StateMismatch, match="not a number array or a string"):
            read(f["c"])
        with pytest.raises(StateMismatch, match="is a link"):
            read(f["d"])
        with pytest.raises(StateMismatch, match="lacks x"):      # and a blob fits no run's state
            conform({"x": np.zeros(3)}, read(f["a"]))
    assert not marker.exists()


def test_checkpoint_file_refuses_other_formats_before_reading_state(tmp_path):
    from hpcgc.errors import UserError
    from hpcgc.results import checkpoint as cf
    path = tmp_path / "run.h5"
    assert cf.problem(path, 2) is None                                 # no checkpoint: nothing to refuse
    trees = [_tree(), {**_tree(), "x": np.arange(3.0)}]
    cf.save(path, 57, 6, "run", trees)
    assert cf.problem(path, 2) is None and cf.iteration(path) == 57
    k, rows, back = cf.load(path, 2)
    assert (k, rows) == (57, 6) and np.array_equal(back[1]["x"], np.arange(3.0))
    assert "not the groups rank_0 … rank_2" in cf.problem(path, 3)     # another rank count
    for attrs, says in (({"format": "one pickled dict per rank (hpcgc.run.checkpoint.RunState)"},
                         "predates typed checkpoints"),
                        ({"checkpoint_version": 2}, "not an hpcgc typed checkpoint"),
                        ({"iteration": "57"}, "no iteration and rows")):
        cf.save(path, 57, 6, "run", trees)
        with h5py.File(path, "r+") as f:
            f.attrs.update(attrs)
        assert says in cf.problem(path, 2)
        with pytest.raises(UserError, match=says):
            cf.load(path, 2)
