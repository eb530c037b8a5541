"""Config fuzzing (hypothesis, fixed seed, bounded examples): any key, any value — wrong types,
extreme integers, non-finite floats, empty strings, unknown keys, huge sweeps — through ``--set``
and through a TOML document, then the plan of every grid point. Validation either accepts the
configuration or raises the project's one-line ConfigError; never another exception."""
from __future__ import annotations

import string

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from hpcgc import config
from hpcgc.errors import UserError
from hpcgc.run import plan

KEYS = config.all_keys()
WORDS = ["diana", "dcgd", "local-sgd", "diana+", "qsgd:s=4", "randk:k=3,shared_seed=true", "powersgd",
         "identity", "topk:k=2", "allreduce", "allgather", "gather", "dedicated", "logreg", "mlp", "softmax",
         "dagc", "uniform", "dagc-a", "theory", "iid", "dirichlet:0.5", "skew:10", "synthetic:logreg,n=40,d=5",
         "threshold:lam=1", "quant:p=inf,block=0", "nan", "inf", "-inf", "1e400", "", " ", "x" * 300]
SCALARS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, 1, -1, 2**31, 2**63 - 1, 2**63, -(2**63), 10**12]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.sampled_from(WORDS),
    st.text(alphabet=string.printable, max_size=20),
)
VALUES = st.one_of(SCALARS, st.lists(SCALARS, max_size=4), st.lists(st.integers(0, 3), min_size=300, max_size=400))
KEY = st.one_of(st.sampled_from(KEYS), st.sampled_from([f"sweep.{k.split('.')[-1]}" for k in KEYS]),
                st.text(alphabet=string.ascii_lowercase + "._", min_size=1, max_size=15))


def _lit(v) -> str:
    if isinstance(v, str):
        return v                                    # --set: anything that is not a TOML literal is a string
    if isinstance(v, float):
        return {float("inf"): "inf", float("-inf"): "-inf"}.get(v, "nan" if v != v else repr(v))
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return "[" + ", ".join(_lit(x) if not isinstance(x, str) else repr(x) for x in v) + "]"
    return repr(v)


def _one_line_each(msg):
    """A user error: one line per problem (several independent mistakes are all reported), no traceback."""
    lines = msg.split("\n")
    assert msg and all(line.strip() for line in lines) and "Traceback" not in msg, msg
    assert len(lines) == len(set(lines)), msg      # each problem once


def _validate(cfg):
    for rp in plan(cfg):
        config.to_toml(rp.cfg)                        # every accepted run config must also be writable


@seed(20261124)
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(KEY, VALUES), min_size=1, max_size=4))
def test_set_overrides_never_crash(pairs):
    args = [f"{k}={_lit(v)}" for k, v in pairs]
    try:
        cfg = config.apply_overrides(config.default_experiment(), args)
        _validate(cfg)
    except UserError as exc:
        _one_line_each(str(exc))


@seed(20261125)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(["data", "problem", "run", "sweep", "name", "label", "bogus"]),
                       st.one_of(SCALARS, st.dictionaries(st.sampled_from([k.split(".")[-1] for k in KEYS] + ["zz"]),
                                                           VALUES, max_size=4)), max_size=4))
def test_toml_documents_never_crash(doc):
    try:
        _validate(config.merge(config.defaults(), doc, "fuzz.toml"))
    except UserError as exc:
        _one_line_each(str(exc))


@pytest.mark.parametrize("arg,needle", [
    ("run.iterations=1000000000000", "run.iterations"),
    ("run.seed=-3", "run.seed"),
    ("run.seed=99999999999999999999", "64-bit"),
    ("sweep.seed=[" + ",".join(map(str, range(2000))) + "]", "at most"),
])
def test_the_reported_cases_are_config_errors(arg, needle):
    with pytest.raises(UserError, match=needle):
        _validate(config.apply_overrides(config.default_experiment(),
                                         [arg, "sweep.step_multiplier=" + str(list(range(1, 60)))]))
