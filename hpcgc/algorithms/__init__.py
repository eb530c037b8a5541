"""Algorithm registry. Adding an algorithm = one file in this package + one line in ``REGISTRY``."""
from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from importlib import import_module

from ..errors import ConfigError

_MODULES: dict[str, tuple[str, str]] = {
    "dcgd": ("diana:Dcgd", "distributed compressed (S)GD = DIANA with α = 0 (QSGD / TernGrad / DQGD)"),
    "diana": ("diana:Diana", "DIANA: compressed gradient differences with learned shifts (Mishchenko et al. 2019)"),
    "local-sgd": ("local_sgd:LocalSGD", "local SGD rounds, per-tensor compressed model deltas, error feedback (DAGC setting)"),
    "dcgd+": ("smoothness:DcgdPlus", "DCGD+: DCGD with smoothness-aware compression S_i Q(S_i^- g) (Wang, Safaryan, Richtárik 2022)"),
    "ef": ("ef:EF", "EF (EF14 / EF-SGD): error feedback, compressed γ·g plus memory (Seide et al. 2014, Karimireddy et al. 2019)"),
    "ef21": ("ef21:EF21", "EF21: error feedback by compressed gradient differences (Richtárik, Sokolov, Fatkhullin 2021)"),
    "vr-diana": ("vr_diana:VrDiana", "VR-DIANA: DIANA with L-SVRG variance-reduced mini-batch gradients (Horváth et al. 2019)"),
    "adiana": ("adiana:Adiana", "ADIANA: accelerated DIANA, two compressed messages per iteration (Li et al. 2020)"),
    "adiana+": ("adiana_plus:AdianaPlus", "ADIANA+: ADIANA with smoothness-aware compression (Safaryan, Hanzely, Richtárik 2021)"),
    "marina": ("marina:Marina", "MARINA: compressed gradient differences, dense rounds with probability p (Gorbunov et al. 2021)"),
    "diloco": ("diloco:DiLoCo", "DiLoCo: local SGD rounds, compressed pseudo-gradient, outer Nesterov step (Douillard et al. 2023)"),
    "ef21-sgdm": ("ef21_sgdm:EF21SGDM", "EF21-SGDM: EF21 on a momentum of stochastic gradients, "
                  "η = 1 − run.momentum (Fatkhullin, Tyurin, Richtárik 2023)"),
    "dasha": ("dasha:Dasha", "DASHA: MARINA without dense rounds, momentum a = 1/(2ω+1); "
              "run.dasha_variant full | page | mvr (Tyurin, Richtárik 2023)"),
    "diana+": ("smoothness:DianaPlus", "DIANA+: DIANA with smoothness-aware compression S_i Q(S_i^- .) (Wang, Safaryan, Richtárik 2022)"),
    "dgc": ("dgc:DGC", "DGC: top-k with momentum correction, factor masking, local clipping, sparsity warm-up (Lin et al. 2018)"),
    "signsgd-mv": ("signsgd_mv:SignSgdMV", "signSGD / Signum with majority vote: 1 bit per coordinate each way (Bernstein et al. 2019)"),
}
"""Name → (``module:Class`` in this package, description): the registry's one line per algorithm."""


class _Registry(MutableMapping):
    """Name → (class, description), importing an algorithm's module on first use: a run imports
    its own algorithm only (start-up at -n 32, ``docs/performance.md``); iterating imports all.
    An entry set at run time (``REGISTRY[name] = (cls, description)``: tests) is held apart."""

    def __init__(self):
        self._set: dict[str, tuple[type, str]] = {}

    def __getitem__(self, name: str) -> tuple[type, str]:
        if name in self._set:
            return self._set[name]
        where, desc = _MODULES[name]
        module, _, cls = where.partition(":")
        return getattr(import_module(f".{module}", __name__), cls), desc

    def __setitem__(self, name: str, value: tuple[type, str]) -> None:
        self._set[name] = value

    def __delitem__(self, name: str) -> None:
        del self._set[name]

    def __iter__(self) -> Iterator[str]:
        return iter([*_MODULES, *(k for k in self._set if k not in _MODULES)])

    def __len__(self) -> int:
        return len(set(_MODULES) | set(self._set))

    def __contains__(self, name) -> bool:
        return name in _MODULES or name in self._set


REGISTRY = _Registry()


def available() -> list[str]:
    return sorted(REGISTRY)


def describe(name: str) -> str:
    return REGISTRY[name][1] if name in REGISTRY._set else _MODULES[name][1]


def get(name: str):
    if name not in REGISTRY:
        raise ConfigError(f"unknown algorithm {name!r}; available: {', '.join(available())}")
    return REGISTRY[name][0]


def make(name: str, compressor, **kwargs):
    return get(name)(compressor, **kwargs)
