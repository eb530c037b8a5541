"""Experiment files: TOML schema, ``--set`` overrides, sweep expansion.

An experiment file describes a grid of runs (`DESIGN.md`, "Experiment file"). Every key has a type
and a default; an unknown key or a wrongly typed value is a :class:`ConfigError` naming it. Lists
in ``[sweep]`` expand to their Cartesian product, in the order the keys are written; a sweep key is
either a bare key name that exists in exactly one section (``algorithm``) or ``section.key``.
A key given with ``--set`` wins over the same key in ``[sweep]``.

``[[variant]]`` tables (optional) name settings that go together — e.g. an allocation with the
compressor and budget it needs — which a Cartesian product cannot express: the grid is then
variants × sweep. Each variant holds ``section.key = value`` settings (or sub-tables) and an
optional ``label``.
"""
from __future__ import annotations

import copy
import itertools
import json
import math

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from .errors import ConfigError

_NUM = (int, float)


class Key:
    def __init__(self, types, default, help, choices=None, check=None):
        self.types = types if isinstance(types, tuple) else (types,)
        self.default = default
        self.help = help
        self.choices = choices
        self.check = check  # (predicate, description)


def _positive(v):
    return v > 0


def _nonneg(v):
    return v >= 0


def _iterations(v):
    return 0 < v <= MAX_ITERATIONS


def _repeats(v):
    return 1 <= v <= MAX_REPEATS


MAX_ITERATIONS = 10**9
MAX_REPEATS = 100
"""Largest ``run.repeats``: a hundred repeats pin a median's 95 % interval to a few order statistics;
more is a mistake (a typo, or seconds meant as a count)."""
NOT_SWEPT = ("run.repeats",)
"""Experiment-wide keys: not in [sweep] or a [[variant]] (every grid point is repeated alike)."""
MAX_GRID = 100_000
"""Largest grid an experiment may expand to (runs); SLURM arrays and results files beyond that are
not what anyone wants by accident."""
INT64 = 2**63


SCHEMA: dict[str, dict[str, Key]] = {
    "": {
        "name": Key(str, "default", "experiment name (results file is <name>-<timestamp>.h5)"),
        "label": Key(str, "", "a run's label, e.g. the method name a [[variant]] gives (used in tables and plots)"),
    },
    "data": {
        "dataset": Key(str, "breast-cancer", "built-in name, 'libsvm:<path>' or 'synthetic:<kind>,opt=val,...'"),
        "partition": Key(str, "label-sorted", "iid | label-sorted | norm-sorted | dirichlet:<alpha> | skew:<s>"),
        "sizes": Key(list, [], "per-worker sample counts or fractions (empty = equal)"),
        "partition_seed": Key(int, 0, "seed of randomized partitions (iid, dirichlet) and of the test split",
                              check=(_nonneg, ">= 0")),
        "test_fraction": Key(_NUM, 0.0, "fraction of samples held out as a test set (accuracy is measured on it)"),
    },
    "problem": {
        "kind": Key(str, "logreg", "logreg | ridge (convex, f* known) | sigmoid-loss (nonconvex, L known) | "
                    "softmax | mlp (classifiers: local-sgd, or dcgd/diana with run.learning_rate)"),
        "hidden": Key(int, 32, "hidden units per hidden layer of the MLP", check=(_positive, "> 0")),
        "depth": Key(int, 1, "hidden layers of the MLP (d = p·H + H + (depth−1)(H²+H) + H·C + C; "
                     "docs/methods.md)", check=(_positive, "> 0")),
        "l2": Key(_NUM, 1e-2, "weight λ of (λ/2)‖x‖² (strong convexity μ = λ)", check=(_nonneg, ">= 0")),
        "l1": Key(_NUM, 0.0, "weight of l1‖x‖₁, applied by prox on the server", check=(_nonneg, ">= 0")),
        "reference": Key(str, "solve", "'solve': rank 0 holds the whole data set, solves f* and evaluates on it; "
                         "'none': no f*, loss and ‖∇f‖² by a reduction over the shards, rank 0 holds only its "
                         "shard (synthetic:sparse generated per rank; docs/data.md)", choices=("solve", "none")),
    },
    "run": {
        "algorithm": Key(str, "diana", "dcgd | diana | ef | ef21 | local-sgd | dcgd+ | diana+ (see `python -m hpcgc.bench list`)"),
        "compressor": Key(str, "quant:p=inf,block=8", "name:param=value,... (see `list`); a bare param is a "
                          "flag set to true, e.g. identity:fp16"),
        "allocation": Key(str, "uniform", "per-worker compression ratios: uniform | dagc | dagc-reference | dagc-a"),
        "budget": Key(_NUM, 0.0, "mean kept fraction δ̄ (or mean threshold λ̄ for dagc-a); 0 = compressor's own k",
                      check=(_nonneg, ">= 0")),
        "budget_unit": Key(str, "fraction", "run.budget as a mean kept 'fraction' or total 'coordinates' per round",
                           choices=("fraction", "coordinates")),
        "iterations": Key(int, 1000, "number of iterations (communication rounds)",
                          check=(_iterations, f"between 1 and {MAX_ITERATIONS:.0e}")),
        "step_multiplier": Key(_NUM, 1.0, "γ = step_multiplier × theoretical step size", check=(_positive, "> 0")),
        "step_rule": Key(str, "auto", "dcgd/diana step rule: auto | flpytorch | paper9107 | sadiev | unified | "
                         "horvath-thm4 | learning-rate (auto: flpytorch on logreg/ridge, horvath-thm4 on "
                         "sigmoid-loss, learning-rate on softmax/mlp; docs/methods.md)"),
        "alpha": Key((str, *_NUM), "theory", "DIANA shift step α ('theory' = 1/(1+ω))"),
        "momentum": Key(_NUM, 0.0, "momentum β in [0, 1), the weight on the past (0 = none): DIANA's heavy ball, "
                         "EF21-SGDM's η = 1 − β, DASHA-MVR's b = 1 − β"),
        "learning_rate": Key(_NUM, 0.0, "step size γ where no theory step is used: local-sgd (0 = not set: 0.1), "
                             "dcgd/diana/ef/ef21 on softmax/mlp or with step_rule 'learning-rate' (required there)",
                             check=(_nonneg, ">= 0")),
        "local_steps": Key(int, 0, "local SGD steps per round H (local-sgd: 0 = not set: 1 = compressed SGD; "
                           "diloco: required, >= 1)", check=(_nonneg, ">= 0")),
        "outer_learning_rate": Key(_NUM, 0.7, "diloco's outer (Nesterov) step size on the averaged pseudo-gradient",
                                   check=(_positive, "> 0")),
        "outer_momentum": Key(_NUM, 0.9, "diloco's outer Nesterov momentum μ in [0, 1) (0 = plain outer SGD)"),
        "dgc_clip": Key(_NUM, 0.0, "dgc: local gradient clipping, the global norm threshold c; each worker clips "
                        "its gradient to norm c/sqrt(n) (Lin et al. 2018; 0 = off)", check=(_nonneg, ">= 0")),
        "dgc_warmup": Key(int, 0, "dgc: iterations of the sparsity warm-up, four equal stages keeping 1/4, 1/16, "
                          "1/64, 1/256 of the coordinates (at least k) before top-k (Lin et al. 2018; 0 = off)",
                          check=(_nonneg, ">= 0")),
        "error_feedback": Key(bool, False, "error feedback: compress residual + update, keep the rest (local-sgd, diloco)"),
        "probability": Key((str, *_NUM), "theory", "the shared coin's p: VR-DIANA reference refresh (theory: b/m), "
                            "ADIANA w-update (its theorem), MARINA dense round (1/(1+ω)); in (0, 1]"),
        "dasha_variant": Key(str, "full", "dasha's gradient estimator: 'full' (DASHA, full local gradients), 'page' "
                             "(DASHA-PAGE: run.batch, coin run.probability, theory B/(B+m)) or 'mvr' (DASHA-MVR: "
                             "run.batch, b = 1 − run.momentum); docs/methods.md", choices=("full", "page", "mvr")),
        "batch": Key(int, 0, "mini-batch size per worker (0 = full local gradient)", check=(_nonneg, ">= 0")),
        "repeats": Key(int, 1, "run every grid point this many times with the same seed (identical iterates; "
                       "the spread is the machine's), interleaved p0r0, p1r0, …, p0r1, …; recorded as the "
                       "run's repeat 0 … R−1 (docs/results.md); between 1 and 100; not sweepable",
                       check=(_repeats, "between 1 and 100")),
        "seed": Key(int, 0, "random seed (rank r uses SeedSequence(seed).spawn(world_size)[r])",
                    check=(_nonneg, ">= 0")),
        "eval_every": Key(int, 10, "evaluate and record every this many iterations", check=(_positive, "> 0")),
        "tolerance": Key(_NUM, 0.0, "stop when f − f* <= tolerance, or, without f* (sigmoid-loss, softmax, mlp), "
                         "when ‖∇f(x)‖²/‖∇f(x⁰)‖² <= tolerance (0 = never)", check=(_nonneg, ">= 0")),
        "max_bits": Key(_NUM, 0.0, "stop when a worker has sent this many model bits (0 = no limit)", check=(_nonneg, ">= 0")),
        "max_seconds": Key(_NUM, 0.0, "stop a run after this many seconds of wall time (0 = no limit)", check=(_nonneg, ">= 0")),
        "collective": Key(str, "gather", "how messages travel: 'gather' (parameter server: Gatherv to rank 0, "
                          "Bcast of the iterate), 'allreduce' (summable messages: identity, identity:fp16, "
                          "identity:bf16, int8, sign (signsgd-mv's vote), randk shared_seed, powersgd; no server), 'allgather' (every rank "
                          "decodes every payload; no server), "
                          "'reduce-scatter' (compressed Allreduce: Alltoallv of compressed segments, decode and "
                          "sum, re-compress, Allgatherv; no server; segment-wise compressors)",
                          choices=("gather", "allreduce", "allgather", "reduce-scatter")),
        "topology": Key(str, "flat", "'flat': every rank is a worker of the collective; 'hierarchical': the ranks "
                        "of a node (shared memory) sum their gradients uncompressed onto the node's leader "
                        "(MPI_Reduce), the leaders run run.collective with run.compressor among themselves, "
                        "each leader broadcasts the iterate in its node — the workers are the nodes "
                        "(dcgd, dgc, diana, ef, ef21, ef21-sgdm; full gradients; docs/collectives.md, Hierarchical)",
                        choices=("flat", "hierarchical")),
        "downlink": Key(str, "dense", "the server's broadcast: 'dense' (the float64 iterate) or a compressor spec "
                        "(EF21-P: C(x − w) is sent, workers evaluate at w; gather with dcgd, diana)"),
        "checkpoint_every": Key((int, str), "600s", "save the run's whole state every this many iterations, or "
                                "seconds as '600s' / '10min' (0 = only when a stop signal ends the run); "
                                "--resume continues from it"),
        "server": Key(str, "worker", "'worker': rank 0 is server and worker; 'dedicated': rank 0 holds no data",
                      choices=("worker", "dedicated")),
        "divergence_factor": Key(_NUM, 1e6, "mark diverged when f − f* exceeds this × (f(x⁰) − f*)", check=(_positive, "> 0")),
        "per_iteration_times": Key(bool, True, "store every iteration's per-rank phase times (per_iteration/)"),
        "wait_phases": Key(bool, True, "time the waiting for other ranks apart (wait_up/wait_down: the lengths' "
                           "Gather, the control word's Bcast, a barrier before an Allreduce), so that "
                           "comm_up/comm_down hold transfer only (false: waiting is in comm_*)"),
        "wait": Key(str, "spin", "how a rank waits where it waits for another rank's computation (the payload "
                    "lengths' Gather/Allgather/Alltoall, the downlink's Bcasts, the barrier before an Allreduce): "
                    "'spin' (MPI's blocking call, which polls: the lowest latency), 'yield' (the non-blocking call, "
                    "tested between short sleeps: the waiting rank's core goes to the ranks that compute), "
                    "'auto' = 'yield' when a host runs more of the job's ranks than the CPUs they may use "
                    "(oversubscribed), else 'spin'. Default spin: on a quiet 2-core host at -n 32 'yield' made the "
                    "default experiment's iteration 1.1-2.4x slower (docs/performance.md); same iterates and bits "
                    "either way; recorded as the run attribute wait_mode", choices=("auto", "spin", "yield")),
        "overlap": Key(bool, False, "start each layer's exchange (non-blocking Iallreduce) as soon as the backward "
                       "pass has computed its gradient and wait only before the step (PyTorch DDP's buckets); "
                       "mlp/softmax under allreduce with dcgd/diana/ef and identity, identity:fp16/bf16/fp64, or "
                       "under allgather or gather (one Iallgather / Igather per bucket, each layer compressed alone) with dcgd/diana "
                       "and randk or ef and topk (docs/overlap.md); a warning on a problem with one parameter tensor"),
        "overlap_blocking": Key(bool, False, "with run.overlap = true under allgather or gather: the same per-bucket "
                                "compressor and exchange with blocking Allgather / Gather calls after the backward pass "
                                "(the reference an overlapped run equals bit for bit; docs/overlap.md)"),
        "warm_up": Key(bool, False, "one untimed iteration before the timed loop, then every state restored as "
                       "from a checkpoint: MPI connection set-up and first-touch costs are not the method's "
                       "(costs one copy of the run's state at the start)"),
    },
}

DEFAULT_SWEEP = {  # keys always in their resolved "section.key" form
    "run.algorithm": ["dcgd", "diana"],
    "run.compressor": ["qsgd:s=2", "quant:p=inf,block=8", "randk:k=6"],
}


def defaults() -> dict:
    cfg = {}
    for sec, keys in SCHEMA.items():
        target = cfg if sec == "" else cfg.setdefault(sec, {})
        for k, spec in keys.items():
            target[k] = copy.deepcopy(spec.default)
    cfg["sweep"] = {}
    cfg["variant"] = []
    return cfg


def default_experiment() -> dict:
    """The built-in default experiment: DCGD vs DIANA × three compressors on breast cancer."""
    cfg = defaults()
    cfg["name"] = "default"
    cfg["problem"]["l2"] = 0.1
    cfg["run"].update(iterations=2000, eval_every=10, tolerance=1e-12)
    cfg["sweep"] = copy.deepcopy(DEFAULT_SWEEP)
    return cfg


def _check_value(section: str, key: str, value):
    spec = SCHEMA[section][key]
    where = f"{section}.{key}" if section else key
    if isinstance(value, bool) and bool not in spec.types:
        raise ConfigError(f"{where}: expected {_typename(spec)}, got a boolean ({value!r})")
    if not isinstance(value, spec.types):
        raise ConfigError(f"{where}: expected {_typename(spec)}, got {type(value).__name__} {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{where}: must be finite, got {value!r}")
    if isinstance(value, int) and not isinstance(value, bool) and not -INT64 < value < INT64:
        raise ConfigError(f"{where}: {value} is outside the 64-bit integer range")
    if spec.choices and value not in spec.choices:
        raise ConfigError(f"{where}: must be one of {', '.join(spec.choices)}; got {value!r}")
    if spec.check and isinstance(value, _NUM) and not isinstance(value, bool) and not spec.check[0](value):
        raise ConfigError(f"{where}: must be {spec.check[1]}, got {value!r}")


def _typename(spec: Key) -> str:
    names = {str: "a string", int: "an integer", float: "a number", bool: "true/false", list: "a list"}
    return " or ".join(dict.fromkeys(names[t] for t in spec.types))


def _locate(key: str) -> tuple[str, str]:
    """'section.key' or a bare key that exists in exactly one section → (section, key)."""
    if "." in key:
        sec, k = key.split(".", 1)
        if sec in SCHEMA and sec != "" and k in SCHEMA[sec]:
            return sec, k
        raise ConfigError(f"unknown key {key!r}; valid keys: {', '.join(all_keys())}")
    hits = [sec for sec, keys in SCHEMA.items() if key in keys]
    if len(hits) == 1:
        return hits[0], key
    raise ConfigError(f"unknown key {key!r}; valid keys: {', '.join(all_keys())}")


def all_keys() -> list[str]:
    return [f"{s}.{k}" if s else k for s, keys in SCHEMA.items() for k in keys]


def merge(cfg: dict, user: dict, source: str, problems: list | None = None) -> dict:
    """Merge a parsed TOML document into cfg, validating every key and type. Every bad key is
    reported: one ConfigError with one line per key, or, with ``problems``, appended to that list
    (cfg then holds the valid keys)."""
    errors: list[str] = []

    def each(items, fn):
        for item in items:
            try:
                fn(*item)
            except ConfigError as exc:
                errors.append(str(exc))

    def variant_key(entry, vk, vv):
        sec, k = _locate(vk)
        _not_swept(sec, k, f"{source}: a [[variant]]")
        _check_value(sec, k, vv)
        entry[f"{sec}.{k}" if sec else k] = vv

    def sweep_key(sk, sv):
        sec, k = _locate(sk)
        _not_swept(sec, k, f"{source}: [sweep]")
        if not isinstance(sv, list) or not sv:
            raise ConfigError(f"{source}: sweep.{sk} must be a non-empty list, got {sv!r}")
        for item in sv:
            _check_value(sec, k, item)
        cfg["sweep"][f"{sec}.{k}" if sec else k] = sv

    def section_key(top, k, v):
        if k not in SCHEMA[top]:
            raise ConfigError(f"{source}: unknown key {top}.{k}; valid keys in [{top}]: {', '.join(SCHEMA[top])}")
        _check_value(top, k, v)
        cfg[top][k] = v

    def top_level(top, val):
        if top == "variant":
            if not isinstance(val, list) or not all(isinstance(v, dict) for v in val):
                raise ConfigError(f"{source}: variants are written as [[variant]] tables")
            for table in val:
                entry = {}
                each(((entry, vk, vv) for vk, vv in _flatten(table)), variant_key)
                cfg["variant"].append(entry)
        elif top == "sweep":
            if not isinstance(val, dict):
                raise ConfigError(f"{source}: [sweep] must be a table")
            each(_flatten(val), sweep_key)
        elif top in SCHEMA[""]:
            _check_value("", top, val)
            cfg[top] = val
        elif top in SCHEMA and isinstance(val, dict):
            each(((top, k, v) for k, v in val.items()), section_key)
        elif top in SCHEMA:
            raise ConfigError(f"{source}: [{top}] must be a table, got {type(val).__name__} {val!r}")
        else:
            raise ConfigError(f"{source}: unknown key or section {top!r}; sections: "
                              f"{', '.join(s for s in SCHEMA if s)}, sweep")

    each(user.items(), top_level)
    return _report(cfg, errors, problems)


def _not_swept(sec: str, k: str, where: str) -> None:
    if f"{sec}.{k}" in NOT_SWEPT:
        raise ConfigError(f"{where} cannot set {sec}.{k}: it applies to the whole experiment (set it in [{sec}])")


def _report(cfg: dict, errors: list, problems: list | None) -> dict:
    errors = list(dict.fromkeys(line for e in errors for line in e.splitlines()))
    if problems is not None:
        problems.extend(e for e in errors if e not in problems)
    elif errors:
        raise ConfigError("\n".join(errors))
    return cfg


def _flatten(table: dict, prefix=""):
    for k, v in table.items():
        if isinstance(v, dict):
            yield from _flatten(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}", v


def load_file(path: str, problems: list | None = None) -> dict:
    """Read an experiment file; bad keys as in :func:`merge` (a missing or unparsable file raises)."""
    try:
        with open(path, "rb") as fh:
            doc = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    return merge(defaults(), doc, path, problems)


def parse_value(text: str):
    """A --set value: a TOML literal if it parses as one (numbers, booleans, lists), else a string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def apply_overrides(cfg: dict, overrides: list[str], problems: list | None = None) -> dict:
    """Apply ``--set`` items in order; every bad item is reported as in :func:`merge`."""
    errors: list[str] = []
    for item in overrides:
        try:
            _apply_override(cfg, item)
        except ConfigError as exc:
            errors.append(str(exc))
    return _report(cfg, errors, problems)


def _apply_override(cfg: dict, item: str) -> None:
    if "=" not in item:
        raise ConfigError(f"--set expects section.key=value, got {item!r}")
    key, text = item.split("=", 1)
    key = key.strip()
    value = parse_value(text.strip())
    if key.startswith("sweep."):
        merge(cfg, {"sweep": {key[len("sweep."):]: value}}, "--set")
        return
    sec, k = _locate(key)
    if sec == "":
        merge(cfg, {k: value}, "--set")
    else:
        merge(cfg, {sec: {k: value}}, "--set")
    full = f"{sec}.{k}" if sec else k
    cfg["sweep"].pop(full, None)
    for variant in cfg["variant"]:
        variant.pop(full, None)


def expand(cfg: dict) -> list[dict]:
    """The grid: one fully resolved config (without [sweep] and [[variant]]) per run;
    variants outermost, then the sweep's Cartesian product."""
    keys = list(cfg["sweep"])
    grids = [cfg["sweep"][k] for k in keys]
    size = max(len(cfg.get("variant") or [{}]), 1) * math.prod(len(g) for g in grids)
    if size > MAX_GRID:
        raise ConfigError(f"the experiment expands to {size:.3g} runs (variants × sweep); at most {MAX_GRID} are "
                          "allowed: split it into several experiment files")
    runs = []
    for variant in cfg.get("variant") or [{}]:
        for combo in itertools.product(*grids) if keys else [()]:
            run = copy.deepcopy({k: v for k, v in cfg.items() if k not in ("sweep", "variant")})
            settings = list(variant.items()) + list(zip(keys, combo))
            for key, value in settings:
                sec, k = _locate(key)
                if sec == "":
                    run[k] = value
                else:
                    run[sec][k] = value
            runs.append(run)
    return runs


def to_toml(cfg: dict) -> str:
    """Serialize a (resolved) config; the output parses back to the same dict."""
    lines = []
    for k, v in cfg.items():
        if not isinstance(v, dict):
            lines.append(f"{k} = {_lit(v)}")
    for sec, table in cfg.items():
        if isinstance(table, dict) and table:
            lines.append(f"\n[{sec}]")
            for k, v in table.items():
                key = k if k.replace("_", "").isalnum() else json.dumps(k)
                lines.append(f"{key} = {_lit(v)}")
    return "\n".join(lines) + "\n"


def _lit(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_lit(x) for x in v) + "]"
    raise TypeError(f"cannot write {v!r} to TOML")


def schema_help() -> str:
    out = []
    for sec, keys in SCHEMA.items():
        for k, spec in keys.items():
            name = f"{sec}.{k}" if sec else k
            out.append(f"  {name:26s} {spec.help} (default: {_lit(spec.default)})")
    return "\n".join(out)
