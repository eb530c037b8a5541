"""Running an experiment (see ``docs/architecture.md``):

    setup.py       plan (no data) and the data set-up of every rank
    run.py         one run: compressors, algorithm, exchange, observers
    finish.py      its end: timings and ledgers to rank 0, its tables, its summary (RunSummary)
    loop.py        the iteration loop: compute → encode → exchange → step
    observers.py   timers, bit ledger, stop rules, recorder, progress (called at iteration boundaries)
    experiment.py  prepare every run, then execute them into one results file

Data flows one way (`DESIGN.md`): config → data shard per rank → per iteration (gradient →
compress → exchange (:mod:`hpcgc.exchange`) → step) → results on rank 0. Only
:mod:`hpcgc.transport` calls MPI; HDF5 only through :mod:`hpcgc.results`.
"""
from .experiment import execute, parse_selection, prepare, warm_jit
from .finish import RunSummary
from .run import Run
from .setup import DataCache, RunPlan, Setup, plan, split_test

__all__ = ["DataCache", "Run", "RunPlan", "RunSummary", "Setup", "execute", "parse_selection", "plan", "prepare",
           "split_test", "warm_jit"]
