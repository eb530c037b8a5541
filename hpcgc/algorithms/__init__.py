"""Algorithm registry. Adding an algorithm = one file in this package + one line in ``REGISTRY``."""
from __future__ import annotations

from ..errors import ConfigError
from .adiana import Adiana
from .adiana_plus import AdianaPlus
from .dasha import Dasha
from .dgc import DGC
from .diana import Dcgd, Diana
from .diloco import DiLoCo
from .ef import EF
from .ef21 import EF21
from .ef21_sgdm import EF21SGDM
from .local_sgd import LocalSGD
from .marina import Marina
from .signsgd_mv import SignSgdMV
from .smoothness import DcgdPlus, DianaPlus
from .vr_diana import VrDiana

REGISTRY = {
    "dcgd": (Dcgd, "distributed compressed (S)GD = DIANA with α = 0 (QSGD / TernGrad / DQGD)"),
    "diana": (Diana, "DIANA: compressed gradient differences with learned shifts (Mishchenko et al. 2019)"),
    "local-sgd": (LocalSGD, "local SGD rounds, per-tensor compressed model deltas, error feedback (DAGC setting)"),
    "dcgd+": (DcgdPlus, "DCGD+: DCGD with smoothness-aware compression S_i Q(S_i^- g) (Wang, Safaryan, Richtárik 2022)"),
    "ef": (EF, "EF (EF14 / EF-SGD): error feedback, compressed γ·g plus memory (Seide et al. 2014, Karimireddy et al. 2019)"),
    "ef21": (EF21, "EF21: error feedback by compressed gradient differences (Richtárik, Sokolov, Fatkhullin 2021)"),
    "vr-diana": (VrDiana, "VR-DIANA: DIANA with L-SVRG variance-reduced mini-batch gradients (Horváth et al. 2019)"),
    "adiana": (Adiana, "ADIANA: accelerated DIANA, two compressed messages per iteration (Li et al. 2020)"),
    "adiana+": (AdianaPlus, "ADIANA+: ADIANA with smoothness-aware compression (Safaryan, Hanzely, Richtárik 2021)"),
    "marina": (Marina, "MARINA: compressed gradient differences, dense rounds with probability p (Gorbunov et al. 2021)"),
    "diloco": (DiLoCo, "DiLoCo: local SGD rounds, compressed pseudo-gradient, outer Nesterov step (Douillard et al. 2023)"),
    "ef21-sgdm": (EF21SGDM, "EF21-SGDM: EF21 on a momentum of stochastic gradients, η = 1 − run.momentum (Fatkhullin, Tyurin, Richtárik 2023)"),
    "dasha": (Dasha, "DASHA: MARINA without dense rounds, momentum a = 1/(2ω+1); run.dasha_variant full | page | mvr (Tyurin, Richtárik 2023)"),
    "diana+": (DianaPlus, "DIANA+: DIANA with smoothness-aware compression S_i Q(S_i^- .) (Wang, Safaryan, Richtárik 2022)"),
    "dgc": (DGC, "DGC: top-k with momentum correction, factor masking, local clipping, sparsity warm-up (Lin et al. 2018)"),
    "signsgd-mv": (SignSgdMV, "signSGD / Signum with majority vote: 1 bit per coordinate each way (Bernstein et al. 2019)"),
}


def available() -> list[str]:
    return sorted(REGISTRY)


def describe(name: str) -> str:
    return REGISTRY[name][1]


def get(name: str):
    try:
        return REGISTRY[name][0]
    except KeyError:
        raise ConfigError(f"unknown algorithm {name!r}; available: {', '.join(available())}") from None


def make(name: str, compressor, **kwargs):
    return get(name)(compressor, **kwargs)
