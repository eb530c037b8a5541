"""The compressed downlink ``run.downlink`` (EF21-P) of the parameter server.

Gruntkowska, Tyurin, Richtárik, *EF21-P and Friends: Improved Theoretical Communication Complexity
for Distributed Optimization with Bidirectional Compression*, ICML 2023, arXiv 2209.15218, eq. (5)
and Algorithms 2–3 (EF21-P + DIANA, EF21-P + DCGD)::

    server:   x^{k+1} = x^k − γ·g^k                         (g^k: the algorithm's estimate at w^k)
              broadcast  c^k = C_P(x^{k+1} − w^k)
    every rank:  w^{k+1} = w^k + c^k                         (the same decoded bytes everywhere)
    workers:  evaluate their gradients at w^{k+1}

The server keeps its own iterate x (the algorithm's server state, unchanged); the workers' model is
w. C_P is a *contractive* compressor in the paper (C_P ∈ B(α): E‖C_P(v) − v‖² ≤ (1 − α)‖v‖²):
a biased one (top-k, α = k/d; scaled-sign, α = 1/d) is applied as it is; an unbiased one with
variance ω (rand-k, qsgd, natural, …) is scaled by 1/(1 + ω) at decode, the paper's reduction
(Sect. 2: C ∈ U(ω) ⇒ C/(ω + 1) ∈ B(1/(ω + 1))) — rand-k:k then keeps k coordinates of x − w
unscaled, α = k/d. Without the scaling an unbiased compressor with ω ≥ 1 would amplify the error
x − w every iteration.

``dense`` (the default) is no downlink compressor: today's broadcast of the float64 iterate. A
lossless compressor (``identity:fp64=true``) broadcasts x^{k+1} itself and sets w = x^{k+1}, which
is EF21-P with C_P = I evaluated exactly (in floating point w + (x − w) ≠ x in general).

Only algorithms that declare ``downlink_ok = True`` take a downlink (their workers only read the
broadcast model; the server step is theirs, unchanged); only ``run.collective = 'gather'`` has a
downlink at all.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import compressors
from ..errors import ConfigError, UserError

DENSE = "dense"
PLAN_D = 1 << 20
"""The dimension at which the plan-time check asks a biased compressor for its contraction δ
(δ depends on d for top-k; it is None for every d for sign and threshold)."""


def parse(spec: str):
    """``run.downlink`` → None (``dense``) or the compressor; ConfigError naming the key otherwise."""
    if not isinstance(spec, str):
        raise ConfigError(f"run.downlink must be 'dense' or a compressor spec, got {spec!r}")
    if spec.strip().lower() == DENSE:
        return None
    try:
        comp = compressors.make(spec)
    except UserError as exc:
        try:
            known = compressors.parse_spec(spec)[0] in compressors.REGISTRY
        except UserError:
            known = False
        raise ConfigError(f"run.downlink: {exc}" + ("" if known else " (or 'dense', the uncompressed broadcast)")) \
            from None
    if getattr(comp, "matrices_only", False):
        raise ConfigError(f"run.downlink = {comp.spec!r}: it compresses matrix-shaped parameters only; "
                          "the downlink is the whole vector x − w")
    if getattr(comp, "aware", False):
        raise ConfigError(f"run.downlink = {comp.spec!r}: a smoothness-aware compressor is bound to one worker's "
                          "smoothness matrix; the downlink needs a plain compressor (e.g. topk, randk, qsgd)")
    if not comp.unbiased and comp.delta(PLAN_D) is None:
        raise ConfigError(f"run.downlink = {comp.spec!r} is biased with no contraction δ > 0 for every input "
                          "(EF21-P needs a contractive compressor): use e.g. topk, scaled-sign or an unbiased one")
    return comp


def takers() -> list[str]:
    """The algorithms that take a compressed downlink (``downlink_ok``)."""
    from .. import algorithms
    return sorted(k for k, (cls, _) in algorithms.REGISTRY.items() if getattr(cls, "downlink_ok", False))


def check(spec: str, *, alg_cls, collective: str) -> None:
    """Plan-time check of ``run.downlink`` against the algorithm and the collective (no data)."""
    comp = parse(spec)
    if comp is None:
        return
    if collective != "gather":
        raise ConfigError(f"run.downlink = {comp.spec!r} needs a parameter server (run.collective = 'gather'): "
                          f"under {collective!r} every rank holds the server state and nothing is broadcast; "
                          "remove run.downlink or use 'gather'")
    if not getattr(alg_cls, "downlink_ok", False):
        raise ConfigError(f"algorithm {alg_cls.name!r} has no downlink state (EF21-P: workers evaluate at the "
                          f"broadcast model w); run.downlink = {comp.spec!r} is taken by: {', '.join(takers())}")


@dataclass
class Downlink:
    """A run's downlink compressor, resolved for dimension d: decoded as w += scale·C(x − w)."""

    comp: object
    scale: float            # 1 (contractive as it is) or 1/(1 + ω) (unbiased, the paper's reduction)
    delta: float            # contraction α of scale·C (the paper's α of C_P ∈ B(α))
    lossless: bool          # identity:fp64=true: w = x exactly
    direct: bool = False    # the algorithm's own step message C(u), not C(x − w) (Algorithm.step_downlink)

    @property
    def spec(self) -> str:
        return self.comp.spec

    def describe(self) -> dict:
        return {"downlink": self.spec, "downlink_scale": self.scale, "downlink_delta": self.delta}


def direct(comp, scale: float) -> Downlink:
    """The downlink of an algorithm whose step every rank applies from a broadcast message
    (:meth:`hpcgc.algorithms.base.Algorithm.step_downlink`): w += scale·C(u), with u the algorithm's."""
    return Downlink(comp=comp, scale=float(scale), delta=float("nan"), lossless=False, direct=True)


def build(spec: str, *, d: int, n_workers: int) -> Downlink | None:
    """The downlink of a run (None for ``dense``): its compressor resolved and checked for d."""
    comp = parse(spec)
    if comp is None:
        return None
    comp = comp.for_run(d=d, n_workers=n_workers)
    comp.validate(d)
    try:
        omega = comp.omega(d) if comp.unbiased else None
    except ConfigError as exc:
        raise ConfigError(f"run.downlink = {comp.spec!r}: {exc}") from None
    if omega is not None:
        scale = 1.0 / (1.0 + omega)
        delta = scale
    else:
        scale, delta = 1.0, comp.delta(d)
        if delta is None:
            raise ConfigError(f"run.downlink = {comp.spec!r} has no contraction δ > 0 for d = {d}")
    lossless = comp.name == "identity" and comp.params.get("fp64", False)
    return Downlink(comp=comp, scale=scale, delta=float(delta), lossless=lossless)
