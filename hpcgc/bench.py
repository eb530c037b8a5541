"""``python -m hpcgc.bench``: run experiments under MPI, list what is available, validate files.

    mpirun -n 4 python -m hpcgc.bench                       # the built-in default experiment
    mpirun -n 4 python -m hpcgc.bench --config exp.toml --set run.iterations=500 -o results/x.h5
    python -m hpcgc.bench list                              # compressors, algorithms, data sets, ...
    python -m hpcgc.bench validate --config exp.toml        # check every grid point, print the plan

One entry, a table of subcommands, argparse for the rest (the pattern of ``mpi4py.bench``).
"""
from __future__ import annotations

import os

# One numba / BLAS thread per rank: MPI ranks are the parallelism. Set before numpy/numba load;
# a value the user exported wins.
for _var in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
# After a source change the kernel-cache guard (hpcgc/compressors/kernels/_numba_cache.py) need not
# compile the whole catalogue under MPI: a run compiles its own compressors' kernels on one rank
# first (hpcgc.run.experiment.warm_jit) and the other ranks load them.
os.environ.setdefault("HPCGC_KERNEL_WARMUP", "run")

import argparse  # noqa: E402
import datetime  # noqa: E402
import gc  # noqa: E402
import math  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from pathlib import Path  # noqa: E402

from . import __version__  # noqa: E402
from .errors import UserError  # noqa: E402
from .summary import floor_table, spread_table, summary_table  # noqa: E402

DESCRIPTION = """\
hpcgc: MPI benchmark suite for communication-compressed distributed optimization.

Every MPI rank is a worker holding a data shard. With run.collective = "gather" (the default)
rank 0 is also the server (or only the server, with run.server = "dedicated"): each iteration the
workers compress their messages, rank 0 gathers the bytes with MPI Gatherv, aggregates, steps,
and broadcasts the new iterate. With "allreduce" the messages are summed by MPI_Allreduce
(identity = the uncompressed baseline, randk shared_seed, powersgd), with "allgather" every
rank receives every payload, and with "reduce-scatter" (a compressed Allreduce) each rank receives,
sums and re-compresses one segment, then Allgatherv's it; then every rank takes the same step and
there is no server. With run.topology = "hierarchical" the ranks of a node sum their gradients
uncompressed onto the node's leader (MPI_Reduce in shared memory), only the leaders run the
collective with the compressor, and each leader broadcasts the iterate in its node (the workers are
the nodes; HPCGC_TEST_RANKS_PER_NODE=k is a test-only node assignment by rank // k). Results (loss,
f - f*, bits per worker in two ledgers - model bits and wire bytes - and per-rank phase times)
go to one HDF5 file written by rank 0."""

EPILOG = """\
commands (each has --help, e.g. `hpcgc report --help`):
  run       (default) run an experiment: the built-in default, or --config FILE.toml
  list      list compressors, algorithms, allocations, data sets and partitions
  validate  check an experiment file (every grid point) without reading any data: every problem
            found, one line each (exit 2); if none, set up the data and print the plan
  floor     run the experiment, then time each run's own collectives with its message sizes and
            nothing else, and its own kernels alone; print hpcgc's median iteration / that floor,
            and / (collectives + kernels) (= run --floor), and rank 0's memory-traffic floor
            per phase (bytes the phase's mathematics moves at the measured copy bandwidth; then
            the same counted in 64-byte lines where the access is scattered: lineMB, lratio;
            docs/performance.md):
            mpiexec -n 2 hpcgc floor --config exp.toml
  micro     compressor micro-benchmark (throughput vs memory bandwidth, bits, omega)
  collectives  OSU-style sweep of the MPI collectives hpcgc uses (Gather+Gatherv, Bcast, Allreduce,
            Allgatherv), 4 B .. 256 MiB per rank, with fitted latency alpha and inverse bandwidth beta:
            mpiexec -n 4 hpcgc collectives   (docs/collectives.md)
  generate  write a generated data set as a LIBSVM file (same spec, same bytes):
            hpcgc generate synthetic:sparse,n=100000,d=1048576,nnz=40,zipf=1.1 -o sparse.svm
  report    figures, tables and a self-contained report.html from results files (docs/analysis.md;
            needs the analysis extra: pip install "hpcgc[analysis]")
  project   the projected time-to-epsilon on other networks (docs/projection.md)
  breakeven the bandwidth below which each method beats the fastest fp16/bf16/fp32 Allreduce,
            from results files and a collectives file (docs/breakeven.md)

experiment keys (--set section.key=value; values are TOML literals, else strings):
{keys}

examples:
  mpirun -n 4 python -m hpcgc.bench
  mpirun -n 8 python -m hpcgc.bench --set data.dataset=libsvm:path/to/a9a --set run.iterations=2000
  mpirun -n 4 python -m hpcgc.bench --config jobs/experiments/diana-vs-dcgd-a9a.toml -o results/a9a.h5
  python -m hpcgc.bench validate --config jobs/experiments/diana-vs-dcgd-a9a.toml

spread and noise: with run.repeats = R (or several seeds) the summary ends with a table of the median
and 95 % interval (order statistics of the median) over the runs of each configuration; every results
file records the machine's load, CPU model and frequency at start and end and the other processes'
CPU share, and the output ends with "WARNING: the machine was busy: ..." when it was (docs/results.md).

exit status: 0 success; 2 invalid input (config, data), reported as one line on rank 0;
1 internal error (traceback on the failing rank, all ranks aborted).
Docs: README.md, docs/ (results schema, methods, data, compressors)."""


def prog() -> str:
    """``hpcgc`` when started as the console script, else ``python -m hpcgc.bench``."""
    arg0 = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path()
    if arg0.name in ("hpcgc", "hpcgc-bench"):
        return arg0.name
    return "python -m hpcgc" if arg0.parent.name == "hpcgc" and arg0.name == "__main__.py" else "python -m hpcgc.bench"


def version_string() -> str:
    """``hpcgc 0.1.0 (git 1a2b3c4d5e)``; ``+dirty`` for uncommitted changes, ``unknown`` outside a clone."""
    from .provenance import _git
    commit = _git("rev-parse", "HEAD")
    dirty = "+dirty" if commit and _git("status", "--porcelain", "--untracked-files=no") else ""
    return f"hpcgc {__version__} (git {commit[:10] + dirty if commit else 'unknown'})"


class _Version(argparse.Action):
    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_string())
        parser.exit()


def build_parser():
    from .config import schema_help
    p = argparse.ArgumentParser(prog=prog(), description=DESCRIPTION,
                                epilog=EPILOG.format(keys=schema_help()),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", nargs="?", default="run", choices=("run", "list", "validate", "floor"),
                   metavar="COMMAND",
                   help="run (default), list, validate or floor (= run --floor, then the floor table); micro, "
                        "collectives, report, project and breakeven come first and take their own options "
                        "(hpcgc COMMAND --help)")
    p.add_argument("--config", "-c", metavar="FILE.toml", help="experiment file (default: the built-in experiment)")
    p.add_argument("--set", "-s", metavar="KEY=VALUE", action="append", default=[], dest="overrides",
                   help="override a key, e.g. --set run.iterations=500 --set sweep.seed=[0,1,2]")
    p.add_argument("--out", "-o", metavar="PATH", help="results file (default: results/<name>-<UTC time>.h5)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing results file at --out (default: refuse it, and never touch a file "
                        "another invocation is writing)")
    p.add_argument("--resume", action="store_true",
                   help="continue the interrupted invocation that wrote --out (its .partial file): finished runs "
                        "are kept, an interrupted run continues from its checkpoint (run.checkpoint_every) with "
                        "identical iterates, the other runs run; refused if the experiment, rank count or "
                        "code version differ")
    p.add_argument("--grid-index", metavar="I", help="run only these grid points: I, I,J or I-J (0-based; "
                   "e.g. $SLURM_ARRAY_TASK_ID); `validate` prints the grid size")
    p.add_argument("--floor", action="store_true",
                   help="after each run, time exactly its collectives with its message sizes and nothing else "
                        "(the floor) and the run's kernels alone, and store median iteration / floor as floor_ratio and / (floor + "
                        "kernels) as floor_ratio_kernels (docs/performance.md)")
    p.add_argument("--floor-seconds", type=float, default=0.5, metavar="S",
                   help="time spent measuring each run's floor (default 0.5)")
    p.add_argument("--quiet", "-q", action="store_true", help="print only the final table")
    p.add_argument("--version", action=_Version, help="print the version and git commit, then exit")
    return p


def cmd_list(args) -> int:
    from . import algorithms, allocation, compressors, data
    print("compressors (name:param=value,...):")
    for name in compressors.available():
        print(f"  {compressors.describe(name)}")
    print("algorithms:")
    for name in algorithms.available():
        print(f"  {name:12s} {algorithms.describe(name)}")
    print("allocations:")
    for name in allocation.available():
        print(f"  {name:12s} {allocation.describe(name)}")
    print("data sets:")
    for name, desc in data.describe():
        print(f"  {name:34s} {desc}")
    print("partitions:")
    for name in data.partition_schemes():
        print(f"  {name}")
    from . import exchange
    print("collectives (run.collective):")
    for name, cls in exchange.REGISTRY.items():
        riders = [c for c in compressors.available() if name in compressors.get(c).collectives
                  or (name == "allreduce" and c == "randk")]
        which = "every compressor" if len(riders) == len(compressors.available()) else ", ".join(
            "randk (shared_seed=true)" if c == "randk" else
            "identity (float32, :fp64, :fp16, :bf16)" if c == "identity" and name == "allreduce" else c for c in riders)
        print(f"  {name:12s} {cls.summary}; compressors: {which}")
    print("problems (problem.kind):\n  logreg       l2-regularized logistic regression (labels mapped to ±1)\n"
          "  ridge        l2-regularized least squares\n"
          "  sigmoid-loss nonconvex (1 - sigmoid(y a'x))^2 + l2/2 |x|^2 (labels ±1; L known, no f*)\n"
          "  softmax      multinomial logistic regression (local-sgd; dcgd/diana with run.learning_rate)\n"
          "  mlp          ReLU network, problem.depth hidden layers of problem.hidden units, "
          "d = p*H + H + (depth-1)(H^2 + H) + H*C + C\n"
          "               (local-sgd; the nonconvex-capable algorithms with run.learning_rate)\n"
          f"step rules (run.step_rule, dcgd/diana): {', '.join(['auto', *algorithms.get('diana').step_rules])}")
    return 0


def _load_config(args):
    """The experiment: file, then --set items. Returns (cfg, problems): every bad key or value of
    both, one message each (cfg then holds the valid part, so the plan-time checks still run)."""
    from . import config
    problems: list[str] = []
    cfg = config.load_file(args.config, problems) if args.config else config.default_experiment()
    config.apply_overrides(cfg, args.overrides, problems)
    return cfg, problems


def default_out(name: str) -> Path:
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name) or "experiment"
    return Path("results") / f"{safe}-{stamp}.h5"


def cmd_run(args, argv, validate_only=False) -> int:
    from . import config
    from .errors import ConfigError
    from .run import execute, prepare
    from .run.setup import check
    from .run.signals import REQUEST
    from .transport import Transport

    cfg, problems = _load_config(args)     # identical on every rank: a bad file fails everywhere alike
    out = Path(args.out) if args.out else default_out(cfg["name"])
    # every problem that can be known without data, at once, before any data set is read (same on every rank)
    problems += [p for p in check(cfg, None if validate_only else out) if p not in problems]
    if not (args.floor_seconds > 0 and math.isfinite(args.floor_seconds)):
        problems.append(f"--floor-seconds must be > 0, got {args.floor_seconds}")
    if (args.floor or args.command == "floor") and any(rc["run"]["topology"] == "hierarchical"
                                                       for rc in config.expand(cfg)):
        problems.append("--floor times the flat collectives; it does not model run.topology = 'hierarchical' "
                        "(its two levels): measure the floor of the flat runs")
    if problems:
        raise ConfigError("\n".join(problems))
    t = Transport()
    REQUEST.install(abort=t.abort)
    say = print if t.is_root else (lambda *a, **k: None)
    log = (lambda *a: None) if args.quiet else say
    t0 = time.perf_counter()
    if args.resume and not args.out:
        raise UserError("--resume needs -o PATH: the results file of the invocation to continue")
    if args.resume and args.overwrite:
        raise UserError("--resume continues a results file, --overwrite replaces it: choose one")
    if not validate_only and not args.overwrite and not args.resume:     # before any data is read
        error = None
        if t.is_root:
            from . import results  # h5py: rank 0 only
            try:
                results.refuse_existing(out)
            except FileExistsError as exc:
                error = UserError(str(exc))
        t.agree(error)
    runs = prepare(cfg, t, select=args.grid_index)
    if validate_only:
        say(f"experiment {cfg['name']!r}: {len(runs)} run(s) valid for {t.size} rank(s)")
        say(f"grid points: {len(config.expand(cfg))}")      # jobs/submit.sh reads this line as it is
        if cfg["run"]["repeats"] > 1:
            say(f"repeats: {cfg['run']['repeats']} of each grid point (same seed; run order p0r0, p1r0, ..., "
                "p0r1, ...; --grid-index selects grid points, each with all its repeats)")
        for r in runs:
            rc = r.rp.cfg
            params = "  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                               for k, v in r.alg.describe().items())
            say(f"  {r.rp.run_id}{f' (repeat {r.rp.repeat})' if cfg['run']['repeats'] > 1 else ''}: "
                f"{rc['data']['dataset']} [{rc['data']['partition']}] {rc['problem']['kind']} "
                f"collective={rc['run']['collective']} "
                f"l2={rc['problem']['l2']:g}  d={r.s.d} n={r.s.n_workers}  {params}  iterations={rc['run']['iterations']}"
                + (f"  layers={'-'.join(map(str, r.s.model.widths))}" if r.s.model is not None else ""))
        return 0
    floor = args.floor or args.command == "floor"
    for r in runs:
        r.floor = args.floor_seconds if floor else 0.0
    path, summaries = execute(runs, t, out, argv, log=log, t_start=t0, name=cfg["name"], progress=not args.quiet,
                              overwrite=args.overwrite, resume=args.resume)
    if t.is_root:
        say(summary_table(summaries))
        without_seed = {r.rp.run_id: config.to_toml({**r.rp.cfg, "run": {**r.rp.cfg["run"], "seed": 0}})
                        for r in runs}
        spread = spread_table(summaries, lambda s: without_seed[s.run_id])
        if spread:
            say(spread)
        if args.command == "floor":
            say(floor_table(summaries))
        warnings = getattr(summaries, "warnings", [])
        if warnings:                      # after a blank line: the tables above end there for a parser
            say("\n" + "\n".join(warnings))
        say(f"# results: {path}")
    return 0


def _print_error(exc) -> None:
    """A user error: one ``hpcgc: error:`` line per problem."""
    for line in str(exc).splitlines() or [""]:
        print(f"hpcgc: error: {line}", file=sys.stderr)


def _mpi_command(fn) -> int:
    """Run ``fn()`` on every rank: a UserError is one ``hpcgc: error:`` line on rank 0 and exit 2
    everywhere; any other exception takes every rank down with a traceback (exit 1)."""
    from .run.signals import Interrupted
    rank = 0
    try:
        from mpi4py import MPI
        rank = MPI.COMM_WORLD.Get_rank()
        status = fn()
        # The command is done and the process ends next: without this, the interpreter's exit runs
        # full garbage collections over every object numba, scipy and hpcgc created (~0.3 s of CPU
        # per rank, ~5 s of wall-clock at -n 32 on 2 cores: docs/performance.md, start-up). Frozen
        # objects are still freed by reference counting; only cyclic garbage made before this point
        # is left to the operating system.
        gc.freeze()
        return status
    except UserError as exc:
        if rank == 0:
            _print_error(exc)
        return 2
    except Interrupted as exc:            # a stop signal: everything so far is in the .partial file
        if rank == 0:
            print(f"hpcgc: {exc.message}", file=sys.stderr)
        return 128 + exc.signum
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:               # output piped into `head` and closed: not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception:  # noqa: BLE001 (a bug, not a user mistake): show it and take every rank down (no hang)
        sys.stderr.write(f"hpcgc: internal error on rank {rank}:\n{traceback.format_exc()}")
        from .transport import Transport
        Transport().abort(1)
        return 1


def _analysis_command(module: str, argv) -> int:
    """``report`` / ``project`` / ``breakeven``: the analysis commands (need the analysis extra: matplotlib, pandas)."""
    import importlib
    try:
        mod = importlib.import_module(f"hpcgc.analysis.{module}")
    except ImportError as exc:
        print(f"hpcgc: error: {module} needs the analysis extra ({exc}); pip install \"hpcgc[analysis]\"",
              file=sys.stderr)
        return 2
    return mod.main(argv)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["report"], ["project"], ["breakeven"]):
        return _analysis_command(argv[0], argv[1:])
    if argv[:1] == ["micro"]:             # the compressor micro-benchmark has its own options
        from . import micro
        try:
            return micro.main(argv[1:])
        except UserError as exc:
            _print_error(exc)
            return 2
    if argv[:1] == ["generate"]:          # write a generated data set as LIBSVM (no MPI)
        from .data import generate
        try:
            return generate.main(argv[1:])
        except UserError as exc:
            _print_error(exc)
            return 2
    if argv[:1] == ["collectives"]:       # the MPI collectives benchmark has its own options
        from . import collectives
        return _mpi_command(lambda: collectives.main(argv[1:]))
    args = build_parser().parse_args(argv)
    if args.command == "list":
        try:
            return cmd_list(args)
        except BrokenPipeError:           # `hpcgc list | head`
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0
    return _mpi_command(lambda: cmd_run(args, argv, validate_only=args.command == "validate"))


if __name__ == "__main__":
    sys.exit(main())
