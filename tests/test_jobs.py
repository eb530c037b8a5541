"""The SLURM job scripts without a SLURM: syntax, experiment files that validate, the array limit,
the choice of failed tasks, and the batch script run outside SLURM (as an array task too).
The real cluster is in tests/test_slurm.py."""
from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from hpcgc import config, results
from tests.conftest import ROOT, libsvm_path, mpi_env, show

JOBS = ROOT / "jobs"
SCRIPTS = sorted([*JOBS.glob("*.sh"), *JOBS.glob("*.sbatch"), JOBS / "site.env",
                  *(ROOT / "scripts" / "local-slurm").glob("*.sh")])
EXPERIMENTS = sorted((JOBS / "experiments").glob("*.toml"))


def jobs_env(**extra) -> dict:
    """Environment for the job scripts: the venv of this interpreter, no SLURM job variables."""
    env = {k: v for k, v in mpi_env().items() if not k.startswith("SLURM_")}
    venv = Path(sys.executable).parent.parent
    if (venv / "bin" / "activate").exists():
        env["HPCGC_VENV"] = str(venv)
    else:
        env["HPCGC_VENV"], env["HPCGC_PYTHON"] = "", sys.executable
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run(cmd, env=None, timeout=180, **kw):
    return subprocess.run(cmd, cwd=ROOT, env=env or jobs_env(), capture_output=True, text=True,
                          timeout=timeout, **kw)




@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_bash_syntax(script):
    p = run(["bash", "-n", str(script)])
    assert p.returncode == 0, p.stderr
    if script.suffix in (".sh", ".sbatch") and script.name != "lib.sh":      # lib.sh is sourced
        assert script.stat().st_mode & stat.S_IXUSR, f"{script} is not executable"
        assert script.read_text().startswith("#!"), script


@pytest.fixture(scope="module")
def validated(tmp_path_factory):
    """``hpcgc validate --config`` of every experiment file, one after another in one process
    (tests/cli_cases.py: each process would pay the imports — scikit-learn's reader, scipy — again):
    {file name: that command's return code, stdout and stderr}."""
    d = tmp_path_factory.mktemp("validate")
    (d / "cases.json").write_text(json.dumps([["validate", "--config", str(exp)] for exp in EXPERIMENTS]))
    p = run([sys.executable, "-m", "tests.cli_cases", str(d / "cases.json"), str(d)], timeout=600)
    assert p.returncode == 0, show(p)
    return dict(zip((exp.name for exp in EXPERIMENTS), json.loads((d / "rank-0.json").read_text())))


@pytest.mark.parametrize("exp", EXPERIMENTS, ids=lambda p: p.name)
def test_experiment_file_validates(exp, validated):
    m = re.search(r'"libsvm:\.\./shared/data/libsvm/([^"]+)"', exp.read_text())
    if m:
        libsvm_path(m.group(1))            # names the missing real data (a failure under CI=true)
    p = validated[exp.name]
    assert p["rc"] == 0, p
    n = int(re.search(r"^grid points: (\d+)$", p["stdout"], re.MULTILINE).group(1))
    assert n == len(config.expand(config.load_file(str(exp))))
    assert len(re.findall(r"^  \S+: ", p["stdout"], re.MULTILINE)) == n      # the plan: one line per grid point


@pytest.mark.parametrize("exp", EXPERIMENTS, ids=lambda p: p.name)
def test_every_experiment_has_its_job_script(exp):
    job = JOBS / f"{exp.stem}.sbatch"
    assert job.exists(), f"{exp} has no job script {job}"
    text = job.read_text()
    assert f"jobs/experiments/{exp.stem}.toml" in text and "#SBATCH --job-name" in text
    assert 'exec bash "$ROOT/jobs/hpcgc.sbatch"' in text


def test_experiment_files_are_the_reproductions():
    default = config.load_file(str(JOBS / "experiments" / "default.toml"))
    assert config.expand(default) == config.expand(config.default_experiment())
    a9a = config.load_file(str(JOBS / "experiments" / "diana-vs-dcgd-a9a.toml"))
    grid = config.expand(a9a)
    assert len(grid) == 18
    g = grid[0]
    assert g["data"]["dataset"] == "libsvm:../shared/data/libsvm/a9a" and g["data"]["partition"] == "label-sorted"
    assert (g["problem"]["kind"], g["problem"]["l2"]) == ("logreg", 0.05)
    assert (g["run"]["iterations"], g["run"]["tolerance"]) == (3000, 1e-11)
    assert {(r["run"]["algorithm"], r["run"]["compressor"], r["run"]["seed"]) for r in grid} == {
        (a, c, s) for a in ("dcgd", "diana") for c in ("quant:p=inf,block=16", "qsgd:s=4", "randk:k=12")
        for s in (0, 1, 2)}


@pytest.fixture
def fake_slurm(tmp_path):
    """sbatch/squeue stand-ins that record their arguments (no SLURM needed)."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    log = tmp_path / "sbatch.log"
    (bin_ / "sbatch").write_text(f'#!/bin/bash\nprintf "%s\\n" "$@" >> {log}\necho "4242"\n')
    (bin_ / "squeue").write_text('#!/bin/bash\necho "${FAKE_SQUEUE_TASKS:-}" | tr " " "\\n" | sed "/^$/d"\n')
    for f in bin_.iterdir():
        f.chmod(0o755)
    env = jobs_env(PATH=f"{bin_}{os.pathsep}{os.environ['PATH']}")
    return env, log


def test_submit_refuses_more_tasks_than_max_array_size(fake_slurm, tmp_path):
    env, log = fake_slurm
    env["HPCGC_MAX_ARRAY_SIZE"] = "4"
    p = run([str(JOBS / "submit.sh"), "--out-dir", str(tmp_path / "out"), "jobs/experiments/default.toml"], env=env)
    assert p.returncode == 3, show(p)
    assert "6 grid points -> 6 array tasks" in p.stderr and "MaxArraySize of 4" in p.stderr, p.stderr
    assert "--chunk 2" in p.stderr and "Nothing submitted" in p.stderr
    assert not log.exists()                                            # said so before submitting
    # with two grid points per task it fits: 3 tasks, and the job script learns the chunk
    p = run([str(JOBS / "submit.sh"), "--chunk", "2", "--out-dir", str(tmp_path / "out"),
             "jobs/experiments/default.toml", "--set", "run.iterations=50"], env=env)
    assert p.returncode == 0, show(p)
    args = log.read_text().splitlines()
    assert "--array=0-2" in args and "--ntasks=4" in args and "--time=00:20:00" in args   # jobs/default.sbatch
    assert any(a.startswith("--export=ALL,") and "HPCGC_CHUNK=2" in a for a in args)
    assert args[-4:] == [str(JOBS / "hpcgc.sbatch"), str(JOBS / "experiments" / "default.toml"),
                         "--set", "run.iterations=50"]
    sweep = (tmp_path / "out" / "sweep.env").read_text()
    assert "TASKS=3" in sweep and "CHUNK=2" in sweep and 'ARRAY_JOB_IDS="4242"' in sweep
    # a second submission into the same directory is refused (it would mix two sweeps)
    (tmp_path / "out" / "task-0.h5").write_bytes(b"")
    p = run([str(JOBS / "submit.sh"), "--chunk", "2", "--out-dir", str(tmp_path / "out"),
             "jobs/experiments/default.toml"], env=env)
    assert p.returncode == 2 and "earlier submission" in p.stderr, show(p)


def test_submit_rejects_invalid_experiment(fake_slurm, tmp_path):
    env, log = fake_slurm
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "bad"\n[run]\ncompressor = "zip"\n')
    p = run([str(JOBS / "submit.sh"), str(bad)], env=env)
    assert p.returncode == 2 and "unknown compressor" in p.stderr and "nothing submitted" in p.stderr, show(p)
    assert not log.exists()


def _results_file(path: Path, complete: bool) -> Path:
    return results.ResultsWriter(path, {"world_size": 1}).close(complete=complete)


def test_resubmit_failed_picks_missing_and_incomplete(fake_slurm, tmp_path):
    env, log = fake_slurm
    d = tmp_path / "sweep"
    d.mkdir()
    (d / "sweep.env").write_text(
        f"EXPERIMENT={JOBS / 'experiments' / 'default.toml'}\nBENCH_ARGS=(--set run.iterations=50 )\n"
        "SBATCH_ARGS=(--ntasks=2 --array=0-4 --job-name=hpcgc-default --export=ALL,HPCGC_CHUNK=1 )\n"
        "GRID=5\nCHUNK=1\nTASKS=5\nNAME=default\nARRAY_JOB_IDS=\"77\"\n")
    _results_file(d / "task-0.h5", complete=True)                 # done
    _results_file(d / "task-1.h5", complete=False)                # killed: only task-1.h5.partial
    # task 2: missing
    _results_file(d / "t3.h5", complete=False).rename(d / "task-3.h5")   # complete = false
    _results_file(d / "task-4.h5", complete=True)
    p = run([str(JOBS / "resubmit-failed.sh"), str(d), "--time=02:00:00"], env=env)
    assert p.returncode == 0, show(p)
    assert "task 1: only a .partial file" in p.stdout and "task 2: no results file" in p.stdout
    assert "task 3: complete = false" in p.stdout and "2 complete, 0 queued/running, 3 failed" in p.stdout
    args = log.read_text().splitlines()
    assert "--array=1-3" in args and "--array=0-4" not in args and args[-1] == "run.iterations=50"
    assert args.index("--time=02:00:00") > args.index("--ntasks=2")    # extra options come last: they win
    assert 'ARRAY_JOB_IDS="$ARRAY_JOB_IDS 4242"' in (d / "sweep.env").read_text()
    # a task still queued or running is left alone
    log.unlink()
    env["FAKE_SQUEUE_TASKS"] = "2"
    p = run([str(JOBS / "resubmit-failed.sh"), "--dry-run", str(d)], env=env)
    assert p.returncode == 0 and "task 2: still queued or running" in p.stdout, show(p)
    assert "--array=1,3" in p.stdout and "dry run" in p.stdout and not log.exists()
    # nothing to do
    for i in (1, 2, 3):
        (d / f"task-{i}.h5.partial").unlink(missing_ok=True)
        (d / f"task-{i}.h5").unlink(missing_ok=True)
        _results_file(d / f"task-{i}.h5", complete=True)
    p = run([str(JOBS / "resubmit-failed.sh"), str(d)], env=env)
    assert p.returncode == 0 and "nothing to resubmit" in p.stdout and not log.exists(), show(p)
    p = run([str(JOBS / "resubmit-failed.sh"), str(tmp_path)], env=env)
    assert p.returncode == 2 and "sweep.env not found" in p.stderr


TINY = """
name = "tiny"
[data]
dataset = "breast-cancer"
[problem]
l2 = 0.1
[run]
iterations = 20
eval_every = 10
[sweep]
algorithm = ["diana"]
compressor = ["randk:k=6", "qsgd:s=2", "quant:p=inf,block=8"]
"""


def test_batch_script_outside_slurm_as_array_task(tmp_path):
    """The batch script run by hand as array task 1 with 2 grid points per task: on a 3-point grid it
    runs grid point 2 only, on 2 ranks, into task-1.h5 of the results directory."""
    exp = tmp_path / "tiny.toml"
    exp.write_text(TINY)
    env = jobs_env(HPCGC_NTASKS=2, HPCGC_CHUNK=2, SLURM_ARRAY_TASK_ID=1, HPCGC_RESULTS_DIR=tmp_path / "res")
    p = run(["bash", str(JOBS / "hpcgc.sbatch"), str(exp)], env=env, timeout=240)
    assert p.returncode == 0, show(p)
    out = tmp_path / "res" / "tiny" / "task-1.h5"
    res = results.load(out)
    assert res.complete and res.attrs["world_size"] == 2 and res.attrs["slurm_array_task_id"] == "1"
    assert [r.run_id[:3] for r in res] == ["002"]
    assert "--grid-index 2 " in p.stdout and "exit status 0" in p.stdout
    # a task beyond the grid is an error before anything runs
    env["SLURM_ARRAY_TASK_ID"] = "2"
    p = run(["bash", str(JOBS / "hpcgc.sbatch"), str(exp)], env=env)
    assert p.returncode == 2 and "beyond the grid of 3 point(s)" in p.stderr, show(p)


def test_does_it_pay_campaign_against_the_baseline_a_user_would_run():
    """Issue 27: fp16 (and bf16) Allreduce baselines beside fp32; DIANA + QSGD and natural compression
    under reduce-scatter beside their gather form; EF + top-k under reduce-scatter beside its allgather
    form; PowerSGD; shared-seed rand-k; the targets 1e-2 and 1e-4 (sparse) and the accuracy target (MLP).
    (`hpcgc validate` of these files — test_experiment_file_validates — needs the casts and the
    reduce-scatter collective.)"""
    import tomllib

    def variants(name):
        cfg = tomllib.loads((JOBS / "experiments" / f"{name}.toml").read_text())
        return cfg, {(v["run"]["algorithm"], v["run"]["compressor"], v["run"]["collective"]) for v in cfg["variant"]}

    cfg, v = variants("does-it-pay")
    assert {("dcgd", c, "allreduce") for c in ("identity", "identity:fp16", "identity:bf16")} <= v
    for comp in ("qsgd:s=64", "natural"):
        assert {("diana", comp, "gather"), ("diana", comp, "reduce-scatter")} <= v
    assert {("ef", "topk:k=16384", "allgather"), ("ef", "topk:k=16384", "reduce-scatter")} <= v
    assert ("diana", "randk:k=131072,shared_seed=true", "allreduce") in v
    assert cfg["run"]["tolerance"] == 1e-4 and cfg["run"]["iterations"] >= 1000
    labels = [x["label"] for x in cfg["variant"]]
    assert labels[:5] == ["allreduce-uncompressed", "ps-uncompressed", "diana-qsgd", "diana-randk-shared", "ef-topk"]
    cfg, v = variants("does-it-pay-mlp")
    assert {("local-sgd", "identity", "allreduce"), ("local-sgd", "powersgd:rank=4", "allreduce"),
            ("dcgd", "identity:fp16", "allreduce"), ("dcgd", "identity:bf16", "allreduce")} <= v
    assert cfg["data"]["test_fraction"] > 0 and cfg["run"]["tolerance"] == 0
    sh = (JOBS / "does-it-pay.sh").read_text()
    for word in ("DIP_GRID", "DIP_NP", "DIP_RATES", "--eps 1e-4", "--eps 1e-2", "--accuracy-within 0.5",
                 "manifest.txt", "breakeven-all.csv"):
        assert word in sh
    p = run(["bash", str(JOBS / "does-it-pay.sh"), "--help"])
    assert p.returncode == 0 and "DIP_GRID" in p.stdout and "quick check" in p.stdout
