"""GPU slots under concurrent jobs, and the workflow on a real (local, one-node) SLURM cluster.

The SLURM tests need scripts/local_slurm.sh to have started the cluster; they are skipped without
it, unless MERIT_REQUIRE_SLURM=1 (as in CI), where a missing cluster fails them.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time

import pandas as pd
import pytest
import yaml
from helpers import REPO, WORKFLOW, copy_workflow, dump_config, slow_trainer_env

from merit_repro.train.runfiles import TIMING_COLUMNS
from merit_repro.utils import UserError

HOLDER = """
import json, sys, time
from merit_repro.launch.gpu_slots import gpu_slots
n, out = int(sys.argv[1]), sys.argv[2]
with gpu_slots(n, poll_seconds=0.02) as devices:
    start = time.time()
    time.sleep(0.3)
    end = time.time()
with open(out, "a") as f:
    f.write(json.dumps({"devices": devices, "start": start, "end": end}) + "\\n")
"""


@pytest.mark.slow
def test_gpu_slots_are_never_shared_by_concurrent_jobs(tmp_path):
    env = {**os.environ, "MERIT_GPUS": "4", "MERIT_GPU_LOCK_DIR": str(tmp_path / "locks")}
    out = tmp_path / "held.jsonl"
    needs = [1, 2, 1, 3, 1, 2, 1, 1, 2, 4]
    procs = [subprocess.Popen([sys.executable, "-c", HOLDER, str(n), str(out)], env=env) for n in needs]
    assert all(p.wait(120) == 0 for p in procs)
    held = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(len(h["devices"]) for h in held) == sorted(needs)
    for i, a in enumerate(held):
        assert set(a["devices"]) <= {"0", "1", "2", "3"} and len(set(a["devices"])) == len(a["devices"])
        for b in held[i + 1:]:
            overlap = a["start"] < b["end"] and b["start"] < a["end"]
            assert not (overlap and set(a["devices"]) & set(b["devices"])), (a, b)


def test_gpu_slots_refuse_more_than_the_pool(monkeypatch, tmp_path):
    from merit_repro.launch.gpu_slots import gpu_slots

    monkeypatch.setenv("MERIT_GPU_LOCK_DIR", str(tmp_path))
    with pytest.raises(UserError, match="needs 3 GPUs but the pool has 2"):
        with gpu_slots(3, pool=["0", "1"]):
            pass


def test_cells_share_a_gpu_only_as_far_as_it_is_allowed(monkeypatch, tmp_path):
    """MERIT_CELLS_PER_GPU=3 (config/mechanism_gpu.yaml's runner sets 12): three jobs hold places on the one GPU at
    once and a fourth waits; a job of two GPUs still takes two devices; a bad count is one line."""
    from contextlib import ExitStack

    from merit_repro.launch.gpu_slots import gpu_slots

    quiet = dict(poll_seconds=0.01, log=lambda _: None)
    monkeypatch.setenv("MERIT_GPU_LOCK_DIR", str(tmp_path))
    monkeypatch.setenv("MERIT_CELLS_PER_GPU", "3")
    with ExitStack() as held:
        assert [held.enter_context(gpu_slots(1, pool=["0"], **quiet)) for _ in range(3)] == [["0"]] * 3
        with pytest.raises(TimeoutError):
            with gpu_slots(1, pool=["0"], timeout_seconds=0.05, **quiet):
                pass
    with gpu_slots(2, pool=["0", "1"], **quiet) as two:
        assert two == ["0", "1"]
    monkeypatch.setenv("MERIT_CELLS_PER_GPU", "0")
    with pytest.raises(UserError, match="MERIT_CELLS_PER_GPU='0' must be a whole number >= 1"):
        with gpu_slots(1, pool=["0"], **quiet):
            pass


@pytest.mark.slow
def test_a_killed_job_releases_its_slots(tmp_path):
    env = {**os.environ, "MERIT_GPUS": "1", "MERIT_GPU_LOCK_DIR": str(tmp_path / "locks")}
    holder = subprocess.Popen([sys.executable, "-c", "from merit_repro.launch.gpu_slots import gpu_slots\nimport time\n"
                               "with gpu_slots(1):\n    print('held', flush=True)\n    time.sleep(60)"],
                              env=env, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    holder.kill()
    holder.wait()
    r = subprocess.run([sys.executable, "-c", "from merit_repro.launch.gpu_slots import gpu_slots\n"
                        "with gpu_slots(1, timeout_seconds=10) as d: print(d)"], env=env, capture_output=True, text=True)
    assert r.returncode == 0 and "['0']" in r.stdout


# ---------------------------------------------------------------- SLURM


def cluster_up():
    try:
        r = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0 and any(state in r.stdout for state in ("idle", "mix", "alloc"))


@pytest.fixture(scope="module")
def slurm():
    if not cluster_up():
        if os.environ.get("MERIT_REQUIRE_SLURM") == "1":
            pytest.fail("MERIT_REQUIRE_SLURM=1 but no SLURM cluster answers; run scripts/local_slurm.sh start")
        pytest.skip("no SLURM cluster (scripts/local_slurm.sh start)")


# profiles/slurm as a site would use it (as README says), with the local cluster's partition and sizes
# The first status check 2 s after a change: the plugin waits 10 s more after each check that finds nothing finished,
# so a job of up to 14 s is seen at 14 s (at 5 s, every job of 6 to 20 s was seen at 20 s)
SLURM_OVERRIDES = ["--workflow-profile", "profiles/slurm", "--jobs", "4", "--slurm-init-seconds-before-status-checks", "2",
                   "--default-resources", "slurm_partition=debug", "slurm_account=''", "mem_mb=1000", "runtime=30",
                   "cpus_per_task=1", "--set-resources", "train:mem_mb=1000", "prepare_data:mem_mb=1000",
                   "prepare_data:cpus_per_task=1", "--set-threads", "train=1", "prepare_data=1"]


def workflow_dir(tmp_path, name, config):
    workdir = copy_workflow(tmp_path / name)
    shutil.copytree(REPO / "profiles", workdir / "profiles")
    (workdir / "cfg.yaml").write_text(dump_config(config))
    return workdir


def with_data_of(cluster, local):
    """The corpus the local run prepared, in the cluster run's results: a test of a training job's chain needs no
    data job of its own (the profile test runs one on SLURM)."""
    shutil.copytree(local / "results" / "data", cluster / "results" / "data")
    return cluster


def run_snakemake(workdir, *args, wait=True):
    cmd = [sys.executable, "-m", "snakemake", "--configfile", "cfg.yaml", *args]
    if not wait:
        return subprocess.Popen(cmd, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return subprocess.run(cmd, cwd=workdir, capture_output=True, text=True)


def comparable_runs(workdir):
    runs = pd.read_csv(workdir / "results" / "tables" / "runs.csv")
    return runs.drop(columns=["tokens_per_s", "train_seconds"]).reset_index(drop=True)


def read_metrics(path):
    return pd.read_csv(path).drop(columns=TIMING_COLUMNS)


@pytest.mark.slurm
@pytest.mark.slow
def test_slurm_profile_gives_the_same_outputs_as_a_local_run(slurm, tmp_path):
    config = yaml.safe_load(WORKFLOW.read_text())
    config["experiments"] = {"sweep": config["experiments"]["sweep"]}
    local = workflow_dir(tmp_path, "local", config)
    cluster = workflow_dir(tmp_path, "cluster", config)
    r = run_snakemake(local, "--cores", "2")
    assert r.returncode == 0, r.stderr[-3000:]
    r = run_snakemake(cluster, *SLURM_OVERRIDES)
    assert r.returncode == 0, (r.stdout + r.stderr)[-5000:]
    assert "sbatch" in r.stdout + r.stderr or "SLURM" in r.stdout + r.stderr
    pd.testing.assert_frame_equal(comparable_runs(local).drop(columns="run_dir"), comparable_runs(cluster).drop(columns="run_dir"))
    for metrics in (local / "results" / "runs").rglob("metrics.csv"):
        twin = cluster / metrics.relative_to(local)
        pd.testing.assert_frame_equal(read_metrics(metrics), read_metrics(twin))
    for table in (local / "paper_figures").rglob("*.csv"):
        assert table.read_text() == (cluster / table.relative_to(local)).read_text(), table


@pytest.mark.slurm
@pytest.mark.slow
def test_a_signalled_job_saves_a_slow_checkpoint_is_retried_and_resumes_to_identical_results(slurm, tmp_path):
    """What a scheduler does to a preempted job, or before a time limit: SIGTERM to every process of its steps. The
    trainer (which the rule `exec`s: no shell between it and the signal) checkpoints although rank 0's save takes
    SAVE_SECONDS, exits 143, the job fails and Snakemake resubmits it, and the new job resumes from that step.
    Before the rule `exec`ed its command, the shell died of the signal at once, the job ended and SLURM killed
    the trainer mid-save. (A plain `scancel`, or a SIGKILL sent through it, leaves the state "CANCELLED by <uid>",
    which snakemake-executor-plugin-slurm 2.8.0 does not count as failed: see docs/scaling.md, A SLURM cluster. SIGKILL mid-step is
    covered by test_train.)"""
    save_seconds = 8
    config = yaml.safe_load(WORKFLOW.read_text())
    config["models"]["T"]["gpus"] = 1  # asks SLURM for a (fake) GPU: --gpus=1 ...
    config["cell_defaults"].update(checkpoint_every=10**6, device="cpu")   # ... trains on the CPU, on purpose,
    config["experiments"] = {"one": {"models": ["T"], "tokens": 32 * 8 * 80, "optimizers": ["merit"],   # and saves
                                     "batch_sizes": [8], "lr_grid": {"merit": [5e-3]}, "artifacts": []}}
    cell = "results/runs/T/20480/merit/bs8/lr5e-3/seed0"
    local = workflow_dir(tmp_path, "local", config)
    r = subprocess.run([sys.executable, "-m", "snakemake", f"{cell}/summary.json", "--configfile", "cfg.yaml",
                        "--cores", "1"], cwd=local, capture_output=True, text=True,
                       env={**os.environ, "MERIT_GPUS": "1", "MERIT_GPU_LOCK_DIR": str(tmp_path / "locks")})
    assert r.returncode == 0, r.stderr[-3000:]
    cluster = with_data_of(workflow_dir(tmp_path, "cluster", config), local)
    cmd = [sys.executable, "-m", "snakemake", f"{cell}/summary.json", "--configfile", "cfg.yaml", *SLURM_OVERRIDES]
    proc = subprocess.Popen(cmd, cwd=cluster, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, **slow_trainer_env(tmp_path, save_seconds=save_seconds)})
    metrics = cluster / cell / "metrics.csv"
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:   # only at a stop: no periodic checkpoint
        if metrics.exists() and len(metrics.read_text().splitlines()) > 20:
            break
        time.sleep(0.2)
    assert proc.poll() is None, proc.stdout.read()[-3000:]
    jobs = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True).stdout.split()
    assert jobs, "no SLURM job to cancel"
    subprocess.run(["scancel", "--signal=TERM", *jobs], check=True)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-5000:]
    log = (cluster / cell / "train.log").read_text()
    stopped = re.search(r"stopped by signal after step (\d+); checkpoint saved", log)
    assert stopped, log[-2000:]
    assert f"resuming from step {stopped.group(1)}" in log, log[-2000:]
    first_job = min((cluster / ".snakemake" / "slurm_logs").rglob("*.log"), key=lambda p: int(p.stem))
    first_log = first_job.read_text()   # the launcher outlived the signal and said how the trainer stopped
    assert f"{cell}: stopped with its checkpoint, exit 143 (SIGTERM)" in first_log and "died with" not in first_log
    for name in ["metrics.csv", "mal.csv", "diagnostics.csv"]:
        pd.testing.assert_frame_equal(read_metrics(local / cell / name) if name == "metrics.csv"
                                      else pd.read_csv(local / cell / name),
                                      read_metrics(cluster / cell / name) if name == "metrics.csv"
                                      else pd.read_csv(cluster / cell / name))


@pytest.mark.slurm
@pytest.mark.slow
def test_a_cell_longer_than_its_job_limit_completes_through_a_chain_of_jobs(slurm, tmp_path):
    """max_job_minutes = 0.25 (15 s, the least the config check allows, of which the trainer keeps a fifth to stop
    in, and 2 to 9 go to starting Python and torch): each job's trainer stops in time to checkpoint and exits 75,
    Snakemake resubmits it, and the chain ends with metrics identical to one uninterrupted run. In the cluster each
    of the cell's 300 steps takes 40 ms longer (the numbers stay the same), so the cell needs at least 12 s of
    training whatever the machine: two jobs at least, more where start-up is slow (20 retries leave room for a
    machine three times slower). The uninterrupted run, local, takes its steps at full speed (about 2 s)."""
    config = yaml.safe_load(WORKFLOW.read_text())
    config["cell_defaults"].update(checkpoint_every=10**6)   # only the time budget makes checkpoints here
    config["experiments"] = {"one": {"models": ["T"], "tokens": 32 * 8 * 300, "optimizers": ["merit"],
                                     "batch_sizes": [8], "lr_grid": {"merit": [5e-3]}, "artifacts": []}}
    config["claim_seeds"] = [1]
    cell = "results/runs/T/76800/merit/bs8/lr5e-3/seed0"
    local = workflow_dir(tmp_path, "local", config)
    r = run_snakemake(local, "--cores", "1", f"{cell}/summary.json")
    assert r.returncode == 0, r.stderr[-3000:]
    cluster = with_data_of(workflow_dir(tmp_path, "cluster", config), local)
    cmd = [sys.executable, "-m", "snakemake", "--configfile", "cfg.yaml", *SLURM_OVERRIDES, "--config",
           "max_job_minutes=0.25", "--retries", "20", f"{cell}/summary.json"]
    r = subprocess.run(cmd, cwd=cluster, capture_output=True, text=True,
                       env={**os.environ, **slow_trainer_env(tmp_path, step_seconds=0.04)})
    assert r.returncode == 0, (r.stdout + r.stderr)[-5000:]
    job_log = (cluster / cell.replace("results/runs", "results/logs/train")).with_suffix(".log").read_text()
    assert "[test] each step 0.04 s slower" in job_log, job_log[-3000:]
    log = (cluster / cell / "train.log").read_text()
    assert log.count("time budget of this job reached") >= 1, log[-3000:]   # two jobs at least, more on slow machines
    assert log.count("resuming from step") == log.count("time budget of this job reached")
    for name in ["metrics.csv", "mal.csv", "diagnostics.csv"]:
        pd.testing.assert_frame_equal(read_metrics(local / cell / name) if name == "metrics.csv"
                                      else pd.read_csv(local / cell / name),
                                      read_metrics(cluster / cell / name) if name == "metrics.csv"
                                      else pd.read_csv(cluster / cell / name))
