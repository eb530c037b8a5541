"""Compressors: one class per compressor (kernels in ``kernels/``) and a lazy registry.

    from hpcgc import compressors
    c = compressors.make("qsgd", s=4)              # or make("qsgd:s=4"), make("quant:p=inf,block=32")
    payload = c.compress(x, rng)                    # uint8 array: exactly the bytes sent over MPI
    y = c.decompress(payload, d)                    # new float64 array
    c.decompress_add(payload, d, out, weight)       # out += weight * decompress(payload, d), fused
    c.model_bits(payload, d); c.omega(d); c.unbiased; c.spec; c.params

Adding a compressor = one new module with a :class:`Compressor` subclass + one line in
``_MODULES`` below, ``name: "module:Class"`` (the module is imported on first use; see
``docs/compressors.md``, "How to add a compressor").
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from importlib import import_module
from typing import Any

from ..errors import ConfigError
from .kernels._numba_cache import begin_invalidation

_rebuild = begin_invalidation()      # before any kernel module is imported (see _numba_cache)

from .base import Compressor
from .params import Param, parse_spec

_MODULES: dict[str, str] = {
    "identity": "identity:Identity",
    "qsgd": "qsgd:QSGD",
    "quant": "quant:Quant",
    "terngrad": "quant:TernGrad",
    "randk": "randk:RandK",
    "dither": "dither_plus:Dither",
    "quant+": "dither_plus:QuantPlus",
    "block-dither": "block_quant:BlockDither",
    "block-quant+": "block_quant:BlockQuantPlus",
    "rand-tau+": "sparsify_plus:RandTauPlus",
    "topk": "topk:TopK",
    "threshold": "threshold:Threshold",
    "sign": "sign:Sign",
    "scaled-sign": "sign:ScaledSign",
    "bernoulli": "bernoulli:Bernoulli",
    "natural": "natural:Natural",
    "natural-dither": "natural_dither:NaturalDither",
    "natural-randk": "natural:NaturalRandK",
    "powersgd": "powersgd:PowerSGD",
    "int8": "int8:Int8",
    "compose": "compose:Compose",
    "hadamard": "hadamard:Hadamard",
    "countsketch": "countsketch:CountSketch",
}
"""Name → ``module:Class`` in this package: the registry's one line per compressor."""


class _Registry(Mapping):
    """Name → class, importing a compressor's module (and so its numba kernels) on first use: a
    run loads the kernels of its own compressors only (``docs/performance.md``)."""

    def __getitem__(self, name: str) -> type[Compressor]:
        module, _, cls = _MODULES[name].partition(":")
        return getattr(import_module(f".{module}", __name__), cls)

    def __iter__(self) -> Iterator[str]:
        return iter(_MODULES)

    def __len__(self) -> int:
        return len(_MODULES)


REGISTRY: Mapping[str, type[Compressor]] = _Registry()
"""Name → class (imported on first access). Keys must equal the classes' ``name``."""

__all__ = ["REGISTRY", "Compressor", "Param", "available", "describe", "get", "make"]


def available() -> list[str]:
    """Registered compressor names, sorted."""
    return sorted(REGISTRY)


def get(name: str) -> type[Compressor]:
    """The class registered under ``name`` (ConfigError listing the available names otherwise)."""
    key = name.strip().lower() if isinstance(name, str) else name
    try:
        return REGISTRY[key]
    except (KeyError, TypeError):
        raise ConfigError(f"unknown compressor {name!r}; available: {', '.join(available())}") from None


def describe(name: str) -> str:
    """One line: name, description (ω, model bits, paper) and parameters with defaults/ranges."""
    return get(parse_spec(name)[0]).describe()


def make(spec: str | Compressor, **params: Any) -> Compressor:
    """Build a compressor from ``"name"`` or ``"name:k=v,k=v"`` plus keyword parameters.

    String values in either form are parsed (ints, floats, ``inf``, ``true``/``false``); a
    parameter given both in the string and as a keyword is an error. A :class:`Compressor` is returned as is,
    or rebuilt with the keywords overriding its parameters.
    """
    if isinstance(spec, Compressor):
        return type(spec)(**{**spec.params, **params}) if params else spec
    name, from_string = parse_spec(spec)
    cls = get(name)
    both = sorted(set(from_string) & set(params))
    if both:
        raise ConfigError(f"{name}: parameter {both[0]} given both in the spec string and as a keyword")
    return cls(**from_string, **params)


_WARM_UP_SPECS = ("identity", "identity:fp64=true", "qsgd", "qsgd:bucket=16,p=inf", "qsgd:fp64=true",
                  "qsgd:code=elias", "qsgd:bucket=16,fp64=true,code=elias", "quant",
                  "quant:p=inf,block=16", "terngrad", "randk:k=3", "randk:k=30", "randk:k=3,shared_seed=true",
                  "topk:k=3", "topk:k=30,fp64=true", "threshold:lam=0.5", "sign", "scaled-sign", "bernoulli:p=1",
                  "natural", "natural:fp64=true", "natural-dither", "natural-dither:p=inf,bucket=16",
                  "natural-randk:k=3", "natural-randk:k=3,fp64=true",
                  "powersgd", "powersgd:fp64=true", "identity:fp16", "identity:bf16", "int8",
                  "hadamard", "hadamard:p=2,fp64=true", "countsketch:cols=8",
                  "countsketch:rows=3,cols=8,decode=topk,k=2", "compose:randk:k=3+qsgd", "compose:topk:k=3+natural")


def _warm_up() -> None:
    """Compile (and cache) the catalogue's kernels for float32 and float64 input; run by one MPI
    rank after a source change while the others wait (``_numba_cache``)."""
    import numpy as np

    from .kernels import casts
    casts.warm()                        # incl. the bfloat16 SUM of the transport's MPI operation
    g = np.random.default_rng(0)
    for spec in _WARM_UP_SPECS:
        for dtype in (np.float32, np.float64):
            c = make(spec)
            x = g.standard_normal(61).astype(dtype)
            p = c.compress(x, g)
            c.decompress(p, 61)
            c.decompress_add(p, 61, np.zeros(61), 1.0)
            c.model_bits(p, 61)


if _rebuild is not None:
    _rebuild.finish(_warm_up)
del _rebuild
