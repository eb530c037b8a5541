"""The job scripts on a real SLURM: a single-node cluster (slurmctld + slurmd on localhost, munge,
no cgroups) started by scripts/local-slurm/start-hpcgc-slurm.sh, which installs Debian's slurm-wlm
and munge when they are missing. Where that is impossible (not root, no apt-get, packages cannot be
installed) the tests say so and skip — except under CI=true, where they fail (tests/required.txt).

Submits jobs/hpcgc.sbatch with sbatch (2 MPI ranks, the venv's MPICH mpiexec inside the
allocation), then a job array through jobs/submit.sh with one task killed mid-run by scancel, then
jobs/resubmit-failed.sh, which must resubmit exactly the killed and the missing task. Checks that
the results files exist, are complete and carry the SLURM job / array ids. Jobs are polled with
squeue/scontrol (``sbatch --wait`` polls only every 10-30 s).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from hpcgc import results
from tests.conftest import ROOT, need
from tests.test_jobs import JOBS, jobs_env

START = ROOT / "scripts" / "local-slurm" / "start-hpcgc-slurm.sh"
STOP = ROOT / "scripts" / "local-slurm" / "stop-hpcgc-slurm.sh"
STATE = Path(os.environ.get("HPCGC_SLURM_DIR", "/tmp/hpcgc-slurm"))
JOB_TIMEOUT = 240


def _alive(name: str) -> bool:
    pf = STATE / "run" / f"{name}.pid"
    try:
        pid = int(pf.read_text().strip())
        return Path(f"/proc/{pid}/comm").read_text().strip() == name
    except (OSError, ValueError):
        return False


@pytest.fixture(scope="module")
def cluster():
    how = ("run the tests as root (CI does): scripts/local-slurm/start-hpcgc-slurm.sh then installs Debian's "
           "slurmctld slurmd slurm-client munge with apt-get and starts them (scripts/local-slurm/README.md)")
    if os.geteuid() != 0:
        need("a local SLURM needs root (it installs slurm-wlm/munge and runs slurmctld/slurmd)", how)
    if not shutil.which("slurmctld") and not shutil.which("apt-get"):
        need("SLURM is not installed and there is no apt-get to install it", how)
    was_running = _alive("slurmctld")
    env = dict(os.environ, HPCGC_SLURM_DIR=str(STATE))
    t0 = time.monotonic()
    p = subprocess.run(["bash", str(START)], env=env, capture_output=True, text=True, timeout=900)
    if p.returncode == 3:
        need(f"cannot install the SLURM packages on this machine: {p.stderr.strip()[-500:]}", how)
    assert p.returncode == 0, f"start-hpcgc-slurm.sh failed:\n{p.stdout}\n{p.stderr}"
    print(f"\nlocal SLURM ready in {time.monotonic() - t0:.1f} s")
    yield {"ready_seconds": time.monotonic() - t0}
    if not was_running:       # leave a cluster that was up before the tests as it was
        s = subprocess.run(["bash", str(STOP)], env=env, capture_output=True, text=True, timeout=120)
        assert s.returncode == 0, f"stop-hpcgc-slurm.sh:\n{s.stdout}\n{s.stderr}"


def _slurm(*cmd, timeout=60) -> str:
    p = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"{' '.join(cmd)}: {p.stderr}"
    return p.stdout


def wait_gone(job: str, timeout=JOB_TIMEOUT):
    """Poll squeue until no element of the job is pending or running any more."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not _slurm("squeue", "-h", "-j", job, "-o", "%i").strip():
            return
        time.sleep(0.3)
    subprocess.run(["scancel", job])
    pytest.fail(f"job {job} still queued/running after {timeout} s:\n{_slurm('scontrol', 'show', 'job', job)}")


def job_states(job: str) -> list[tuple[str, str]]:
    """(JobState, ExitCode) of every element of a job (one for a plain job, one per array task)."""
    text = _slurm("scontrol", "show", "job", job)
    return re.findall(r"JobState=(\S+).*?ExitCode=(\S+)", text, re.DOTALL)


TINY = """
name = "slurm-tiny"
[data]
dataset = "breast-cancer"
[problem]
l2 = 0.1
[run]
iterations = 30
eval_every = 10
max_seconds = {max_seconds}
[sweep]
algorithm = ["diana"]
compressor = ["randk:k=6"]
iterations = {iterations}
"""


def test_single_job_runs_mpi_and_records_ids(cluster, tmp_path):
    exp = tmp_path / "tiny.toml"
    exp.write_text(TINY.format(max_seconds=0, iterations="[30, 40]"))
    out = tmp_path / "single"
    env = jobs_env(HPCGC_OUT_DIR=out)
    t0 = time.monotonic()
    job = subprocess.run(["sbatch", "--parsable", "--ntasks=2", "--time=00:05:00", f"--output={tmp_path}/%x-%j.out",
                          str(JOBS / "hpcgc.sbatch"), str(exp)], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=60)
    assert job.returncode == 0, job.stderr
    jid = job.stdout.strip().split(";")[0]
    wait_gone(jid)
    seconds = time.monotonic() - t0
    log = (tmp_path / f"hpcgc-{jid}.out").read_text()
    assert job_states(jid) == [("COMPLETED", "0:0")], log
    res = results.load(out / f"job-{jid}.h5")
    assert res.complete and len(res) == 2 and all(r.status == "completed" for r in res)
    assert res.attrs["slurm_job_id"] == jid and res.attrs["world_size"] == 2
    assert "slurm_array_task_id" not in res.attrs
    assert "mpiexec -n 2" in log and "exit status 0" in log
    print(f"single job {jid}: submitted to finished in {seconds:.1f} s")


def test_array_kill_and_resubmit_failed(cluster, tmp_path):
    """3 array tasks through submit.sh; task 2 is long and killed mid-run (scancel) -> only a
    .partial file; task 1's file is then deleted; resubmit-failed.sh resubmits exactly 1 and 2."""
    exp = tmp_path / "arr.toml"
    # task 2 would run 10^6 iterations; max_seconds = 8 ends it (status 'stopped') when it is re-run
    exp.write_text(TINY.format(max_seconds=8, iterations="[30, 40, 1000000]"))
    out = tmp_path / "arr"
    env = jobs_env(HPCGC_NTASKS=1, HPCGC_TIME="00:05:00")
    t0 = time.monotonic()
    p = subprocess.run([str(JOBS / "submit.sh"), "--out-dir", str(out), str(exp)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "array of 3 task(s)" in p.stdout and "MaxArraySize 1001 from scontrol" in p.stdout, p.stdout
    jid = re.search(r'ARRAY_JOB_IDS="(\d+)"', (out / "sweep.env").read_text()).group(1)

    # kill task 2 once it has written its results file (the .partial exists while it runs)
    partial = out / "task-2.h5.partial"
    end = time.monotonic() + JOB_TIMEOUT
    while not partial.exists() and time.monotonic() < end:
        time.sleep(0.2)
    assert partial.exists(), _slurm("scontrol", "show", "job", jid)
    time.sleep(3.0)                     # into its run (the writer flushes every 2 s), before max_seconds
    _slurm("scancel", f"{jid}_2")
    wait_gone(jid)
    states = dict(zip(("0", "1", "2"), job_states(jid)))
    assert [s for s, _ in job_states(jid)].count("COMPLETED") == 2 and "CANCELLED" in str(states), states
    for i in (0, 1):
        res = results.load(out / f"task-{i}.h5")
        assert res.complete and [r.run_id[:3] for r in res] == [f"{i:03d}"]
        assert res.attrs["slurm_array_job_id"] == jid and res.attrs["slurm_array_task_id"] == str(i)
        assert res.attrs["slurm_job_id"]
    assert not (out / "task-2.h5").exists() and partial.exists()
    print(f"array {jid}: 2 tasks done, task 2 killed after {time.monotonic() - t0:.1f} s")

    # the analysis reads the killed task's file as far as it goes and says so
    from hpcgc.analysis import report
    notes = "\n".join(report.collect([out]).notes)
    assert "task-2.h5.partial: unfinished file (complete = false" in notes, notes

    (out / "task-1.h5").unlink()
    t1 = time.monotonic()
    p = subprocess.run([str(JOBS / "resubmit-failed.sh"), str(out)], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "task 1: no results file" in p.stdout and "task 2: only a .partial file" in p.stdout, p.stdout
    assert "--array=1-2" in p.stdout, p.stdout
    jid2 = re.search(r"submitted array job (\d+)", p.stdout).group(1)
    wait_gone(jid2)
    assert job_states(jid2) == [("COMPLETED", "0:0")] * 2, _slurm("scontrol", "show", "job", jid2)
    res = results.load(out / "task-1.h5")                               # no file left: run again
    assert res.complete and res.attrs["slurm_array_job_id"] == jid2 and res.attrs["slurm_array_task_id"] == "1"
    res = results.load(out / "task-2.h5")                               # its .partial: resumed (--resume)
    assert res.complete and res.attrs["resumed"] == 1 and res.attrs["slurm_array_job_id"] == jid
    assert res.attrs["resumed_slurm_array_job_id"] == jid2 and res.attrs["resumed_slurm_array_task_id"] == "2"
    assert res[0].status == "stopped"                                   # the wall-time budget ended it
    assert not partial.exists()
    p = subprocess.run([str(JOBS / "resubmit-failed.sh"), str(out)], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0 and "3 complete" in p.stdout and "nothing to resubmit" in p.stdout, p.stdout
    print(f"resubmitted tasks 1-2 as {jid2}: done in {time.monotonic() - t1:.1f} s")
