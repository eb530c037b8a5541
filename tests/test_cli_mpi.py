"""The command line under a real mpiexec: the pytest-mpi suite, the default benchmark, bad input.

Every launch goes through ``run_mpi`` (MPIEXEC_TIMEOUT + a subprocess timeout), so a rank that
hangs fails the test instead of hanging CI.
"""
from __future__ import annotations

import h5py
import pytest

from hpcgc import results
from tests.conftest import MPI_TIMEOUT, ROOT, libsvm_path, mpi_env, run_mpi, show

N = 4




MPI_FILES = sorted((ROOT / "tests" / "mpi").glob("test_*.py"))


SUITE_TIMEOUT = 2 * MPI_TIMEOUT
"""One file of tests/mpi takes 0.5-2 min on an idle 2-core machine, 4+ min on a loaded one (resume:
12 runs that are interrupted and resumed): its launch gets twice the budget of a single run."""


@pytest.mark.timeout(SUITE_TIMEOUT + 60)
@pytest.mark.parametrize("path", MPI_FILES, ids=lambda p: p.stem)
def test_pytest_mpi_suite_on_4_ranks(path):
    """Each file of tests/mpi in its own mpiexec -n 4 launch (its own MPIEXEC_TIMEOUT budget)."""
    p = run_mpi(N, ["-m", "pytest", "--with-mpi", "-q", "-p", "no:cacheprovider", "-x", str(path)],
                mpi_timeout=SUITE_TIMEOUT)
    assert p.returncode == 0, show(p)
    assert "passed" in p.stdout and "failed" not in p.stdout


def test_default_benchmark_runs_and_writes_results(tmp_path):
    out = tmp_path / "default.h5"
    p = run_mpi(N, ["-m", "hpcgc.bench", "--set", "run.iterations=60", "-o", str(out)])
    assert p.returncode == 0, show(p)
    assert p.stdout.count("wire/model") == 1                  # one table, printed by rank 0 only
    for col in ("grad(ms)", "compress(ms)", "comm_up(ms)", "server(ms)", "comm_down(ms)", "MB up"):
        assert col in p.stdout
    res = results.load(out)
    assert res.complete and len(res) == 6
    assert {r.attrs["algorithm"] for r in res} == {"dcgd", "diana"}
    assert not (tmp_path / "default.h5.partial").exists()


def test_list_and_help():
    import subprocess
    import sys
    p = subprocess.run([sys.executable, "-m", "hpcgc.bench", "list"], capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    for word in ("qsgd", "quant", "randk", "identity", "terngrad", "diana", "dcgd", "uniform", "breast-cancer",
                 "label-sorted", "norm-sorted"):
        assert word in p.stdout, word
    h = subprocess.run([sys.executable, "-m", "hpcgc.bench", "--help"], capture_output=True, text=True, cwd=ROOT)
    assert h.returncode == 0 and "run.step_multiplier" in h.stdout and "--set" in h.stdout


BAD = [
    (["--set", "run.algorithm=adam"], "unknown algorithm 'adam'"),
    (["--set", "run.compressor=zip"], "unknown compressor"),
    (["--set", "data.partition=random"], "partition"),
    (["--set", "data.dataset=nosuchset"], "nosuchset"),
    (["--set", "run.compressor=qsgd:s=0"], "s"),
    (["--set", "run.compressor=randk:k=0"], "k"),
    (["--set", "run.compressor=randk:k=31"], "k"),
    (["--set", "run.compressor=quant:p=inf,block=0"], "block"),
    (["--set", "run.iterations=many"], "run.iterations"),
    (["--set", "run.itrations=5"], "run.itrations"),
    (["--set", "data.dataset=libsvm:/nonexistent/a9a"], "/nonexistent/a9a"),
    (["--set", "data.dataset=synthetic:logreg,n=3,d=5"], "worker"),
    (["--config", "/nonexistent.toml"], "/nonexistent.toml"),
    (["--set", "run.allocation=dagc", "--set", "run.budget=1.5"], "run.budget"),
    (["--set", "run.allocation=dagc-a", "--set", "run.budget=0.1"], "threshold"),
    (["--set", "run.allocation=dagc", "--set", "run.budget=0.01", "--set", "run.compressor=randk:k=1"],
     "too small"),
    (["--set", "data.partition=skew:0.5"], "skew"),
    (["--set", "data.dataset=synthetic:sparse,d=10,nnz=40"], "nnz = 40 nonzeros per row exceeds the number of features"),
    (["--set", "data.dataset=synthetic:sparse,n=3,d=100,nnz=5", "--set", "problem.reference=none",
      "--set", "data.partition=iid"], "worker"),
    (["--set", "problem.reference=none", "--set", "data.test_fraction=0.2"], "data.test_fraction needs problem.reference"),
    (["--set", "run.collective=allreduce"], "cannot ride run.collective = 'allreduce'; collectives it can use: "
     "gather, allgather"),
    (["--set", "run.collective=allgather", "--set", "run.server=dedicated"],
     "run.server = 'dedicated' needs run.collective = 'gather'"),
    (["--set", "run.collective=broadcast"], "run.collective"),
    (["--set", "run.collective=allreduce", "--set", "run.compressor=randk:k=3,shared_seed=true",
      "--set", "run.allocation=dagc", "--set", "run.budget=0.2"], "messages of different sizes"),
    (["--set", "run.collective=allreduce", "--set", "run.compressor=identity", "--set", "run.algorithm=diana+"],
     "cannot run under run.collective = 'allreduce'"),
    (["--set", "run.compressor=powersgd", "--set", "run.collective=allreduce"],
     "is biased. Algorithms that take biased compressors: ef, ef21, local-sgd"),
    (["--set", "run.compressor=powersgd", "--set", "run.algorithm=local-sgd", "--set", "run.collective=allreduce",
      "--set", "run.error_feedback=true"], "has only the vector x"),
    (["--set", "run.compressor=powersgd:rank=11", "--set", "run.algorithm=local-sgd", "--set", "problem.kind=softmax",
      "--set", "data.dataset=digits", "--set", "run.collective=allreduce", "--set", "run.error_feedback=true"],
     "larger than the 64x10 layer allows"),
    (["--set", "run.compressor=powersgd", "--set", "run.algorithm=local-sgd", "--set", "problem.kind=softmax",
      "--set", "data.dataset=digits", "--set", "run.error_feedback=true"],
     "cannot ride run.collective = 'gather'; collectives it can use: allreduce"),
    (["--set", "data.partition=dirichlet:0"], "dirichlet"),
    (["--set", "problem.kind=mlp", "--set", "data.dataset=digits"], "run.learning_rate is required for 'dcgd'"),
    (["--set", "run.step_rule=fastest"], "unknown run.step_rule 'fastest' for algorithm 'dcgd'; available: auto, "),
    (["--set", "run.algorithm=dcgd", "--set", "run.compressor=topk:k=3"],
     "dcgd needs an unbiased compressor; topk:k=3 is biased. Algorithms that take biased compressors: ef, ef21, "
     "local-sgd"),
    (["--set", "run.algorithm=ef21", "--set", "run.compressor=sign"],
     "ef21 cannot use sign: its step and its recursion need the contraction δ"),
    (["--set", "run.algorithm=ef", "--set", "run.compressor=topk:k=3", "--set", "problem.kind=mlp",
      "--set", "data.dataset=digits"], "run.learning_rate is required for 'ef'"),
    (["--set", "run.algorithm=ef21", "--set", "run.compressor=identity", "--set", "run.collective=allreduce"],
     "algorithm 'ef21' cannot run under run.collective = 'allreduce'"),
    (["--set", "run.collective=allreduce", "--set", "run.compressor=identity", "--set", "run.downlink=randk:k=5"],
     "run.downlink = 'randk:k=5' needs a parameter server (run.collective = 'gather')"),
    (["--set", "run.algorithm=local-sgd", "--set", "run.downlink=topk:k=5"],
     "algorithm 'local-sgd' has no downlink state (EF21-P: workers evaluate at the broadcast model w); "
     "run.downlink = 'topk:k=5' is taken by: dcgd, diana"),
    (["--set", "run.downlink=randq:k=5"], "run.downlink: unknown compressor 'randq'"),
    (["--set", "run.downlink=sign"], "no contraction"),
    (["--set", "problem.kind=mlp", "--set", "problem.depth=0", "--set", "run.learning_rate=0.1"],
     "problem.depth: must be > 0, got 0"),
    (["--set", "problem.kind=mlp", "--set", "problem.hidden=100000", "--set", "problem.depth=2", "--set",
      "run.learning_rate=0.1"], "problem.hidden = 100000 with problem.depth = 2 gives more than 1e+10 parameters"),
]


@pytest.mark.parametrize("args,needle", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_one_message_nonzero_everywhere_no_file(tmp_path, args, needle):
    out = tmp_path / "bad.h5"
    p = run_mpi(N, ["-m", "hpcgc.bench", *args, "-o", str(out)], timeout=120)
    assert p.returncode == 2, show(p)
    errors = [line for line in p.stderr.splitlines() if line.startswith("hpcgc: error:")]
    assert len(errors) == 1, show(p)                         # one message, not one per rank
    assert needle in errors[0], errors[0]
    assert "Traceback" not in p.stderr
    assert list(tmp_path.iterdir()) == []                      # nothing half-written


def test_malformed_libsvm_names_file_and_line(tmp_path):
    bad = tmp_path / "bad.svm"
    bad.write_text("+1 1:0.5 2:1\n-1 3:1\n+1 4:x\n")
    p = run_mpi(N, ["-m", "hpcgc.bench", "--set", f"data.dataset=libsvm:{bad}", "-o", str(tmp_path / "o.h5")],
                timeout=120)
    assert p.returncode == 2, show(p)
    assert str(bad) in p.stderr and "3" in p.stderr
    assert not (tmp_path / "o.h5").exists() and not (tmp_path / "o.h5.partial").exists()


def test_unknown_toml_key_in_file(tmp_path):
    cfg = tmp_path / "x.toml"
    cfg.write_text('name = "x"\n[run]\nalgorithm = "diana"\nstepsize = 3\n')
    p = run_mpi(N, ["-m", "hpcgc.bench", "--config", str(cfg), "-o", str(tmp_path / "o.h5")], timeout=120)
    assert p.returncode == 2 and "run.stepsize" in p.stderr, show(p)


def test_diverging_run_is_recorded_and_experiment_continues(tmp_path):
    out = tmp_path / "div.h5"
    p = run_mpi(N, ["-m", "hpcgc.bench", "--set", "run.iterations=300", "--set", "problem.kind=ridge",
                    "--set", "sweep.step_multiplier=[30.0, 1.0]", "--set", "sweep.algorithm=['diana']",
                    "--set", "sweep.compressor=['identity']", "-o", str(out)], timeout=180)
    assert p.returncode == 0, show(p)
    res = results.load(out)
    assert [r.status for r in res] == ["diverged", "completed"], [(r.status, r.attrs["stop_reason"]) for r in res]
    with h5py.File(out) as f:        # the diverged run's rows are there and readable
        assert f["runs"][res[0].run_id]["loss"].shape[0] >= 2


def test_more_ranks_oversubscribed_and_dedicated_server(tmp_path):
    a9a = libsvm_path("a9a")
    out = tmp_path / "ded.h5"
    p = run_mpi(6, ["-m", "hpcgc.bench", "--set", f"data.dataset=libsvm:{a9a}", "--set", "run.server=dedicated",
                    "--set", "run.iterations=30", "--set", "sweep.algorithm=['diana']",
                    "--set", "sweep.compressor=['randk:k=12']", "-o", str(out)], timeout=240)
    assert p.returncode == 0, show(p)
    run = results.load(out)[0]
    assert run.attrs["n_workers"] == 5
    assert list(run.workers["rank"]) == [1, 2, 3, 4, 5] and all(run.workers["crossed_network"])
    assert run.time["grad"].shape[1] == 6 and run.time["grad"][-1, 0] == 0.0


def test_validate_reports_every_problem_at_once_before_any_data(tmp_path):
    """Three independent mistakes: three lines, exit 2, fast, and the data file is never opened (it
    does not exist; the message says so without trying to parse it)."""
    import subprocess
    import sys
    import time
    cfg = tmp_path / "three.toml"
    cfg.write_text('name = "three"\n[data]\ndataset = "libsvm:/no/such/dir/a9a"\n[run]\nmomentum = 1.5\n'
                   '[sweep]\nalgorithm = ["diana"]\ncompressor = ["topk:k=3"]\n')
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "hpcgc", "validate", "--config", str(cfg)], capture_output=True,
                       text=True, cwd=tmp_path, env=mpi_env())
    took = time.monotonic() - t0
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 3, p.stderr
    assert all(ln.startswith("hpcgc: error: ") for ln in lines)
    assert "data file not found: /no/such/dir/a9a" in lines[0]
    assert "run.momentum must be in [0, 1)" in p.stderr and "topk:k=3 is biased" in p.stderr
    assert took < 2.0, f"validate took {took:.2f} s"
    # the run refuses the same way, before any data is read or any file written
    r = run_mpi(2, ["-m", "hpcgc", "--config", str(cfg), "-o", str(tmp_path / "x.h5")], cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.count("hpcgc: error:") == 3, show(r)
    assert not list(tmp_path.glob("x.h5*"))


def test_one_command_with_every_subcommand():
    import subprocess
    import sys
    v = subprocess.run([sys.executable, "-m", "hpcgc", "--version"], capture_output=True, text=True, cwd=ROOT)
    assert v.returncode == 0 and v.stdout.startswith("hpcgc 0.") and "(git " in v.stdout, v.stdout
    h = subprocess.run([sys.executable, "-m", "hpcgc", "--help"], capture_output=True, text=True, cwd=ROOT)
    for sub in ("run", "list", "validate", "micro", "collectives", "report", "project", "breakeven"):
        assert f"\n  {sub} " in h.stdout, sub
    for sub in ("micro", "report", "project", "breakeven", "validate", "list", "run"):
        p = subprocess.run([sys.executable, "-m", "hpcgc", sub, "--help"], capture_output=True, text=True, cwd=ROOT)
        assert p.returncode == 0 and "usage:" in p.stdout, (sub, p.stderr)
