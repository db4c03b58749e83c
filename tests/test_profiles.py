"""The effective settings of each command the README documents, as Snakemake resolves them with its
profiles (no overrides here), and what the paper-scale SLURM plan asks the scheduler for."""

import json
import os
import re
import subprocess
import sys

import pytest
from test_workflow import REPO

DEMO = "snakemake --cores 2"
CLUSTER = "snakemake --configfile config/paper.yaml --workflow-profile profiles/slurm"
CLUSTER_AS_PROFILE = "snakemake --configfile config/paper.yaml --profile profiles/slurm"
WORKSTATION = "snakemake --configfile config/paper.yaml --cores all --resources gpu=8"
ONE_GPU = "snakemake --configfile config/gpu1.yaml --cores 8 --resources gpu=1"

RESOLVE = """
import json, sys
from snakemake.cli import parse_args
_, a = parse_args(sys.argv[1:])
print(json.dumps({"executor": a.executor, "retries": a.retries, "latency_wait": a.latency_wait, "cores": a.cores,
                  "jobs": a.jobs, "config": a.config, "rerun_incomplete": a.rerun_incomplete,
                  "keep_going": a.keep_going, "default_resources": sorted((a.default_resources or {}).keys()),
                  "set_threads": {k: v.value for k, v in (a.set_threads or {}).items()},
                  "set_resources": {r: sorted(v) for r, v in (a.set_resources or {}).items()},
                  "rate": [a.max_jobs_per_timespan.max_jobs, a.max_jobs_per_timespan.timespan],
                  "scheduler": a.scheduler}))
"""


def effective(command):
    assert command in (REPO / "README.md").read_text(), f"the README no longer documents {command!r}"
    r = subprocess.run([sys.executable, "-c", RESOLVE, *command.split()[1:]], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.splitlines()[-1])


def test_the_demo_command_runs_locally_with_the_workstation_profile():
    s = effective(DEMO)
    assert s["executor"] is None and s["cores"] == 2
    assert s["rerun_incomplete"] and s["keep_going"]
    # job selection re-run every 5 s, not every second, without an ILP solve each time (profiles/default)
    assert s["rate"] == [100, 5] and s["scheduler"] == "greedy"


@pytest.mark.parametrize("command", [CLUSTER, CLUSTER_AS_PROFILE])
def test_the_cluster_command_gets_the_slurm_profile_not_the_local_one(command):
    s = effective(command)
    assert s["executor"] == "slurm" and s["jobs"] == 64
    assert s["retries"] == 10 and s["latency_wait"] == 60 and s["cores"] is None
    assert s["config"] == ["max_job_minutes=1440"]
    assert s["set_threads"] == {"train": 8, "prepare_data": 16}
    assert "cpus_per_task" not in s["default_resources"]   # would override the threads of every rule
    assert "slurm_extra" in s["set_resources"]["train"]
    assert s["rate"] == [100, 5] and s["scheduler"] == "greedy"


def test_the_workstation_command_counts_gpus():
    s = effective(WORKSTATION)
    assert s["executor"] is None and s["cores"] == os.cpu_count()


@pytest.mark.slow
def test_the_paper_plan_on_slurm_asks_for_no_job_longer_than_the_limit(tmp_path):
    r = subprocess.run([sys.executable, "-m", "snakemake", "-n", *CLUSTER.split()[1:]], cwd=REPO,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    runtimes = [int(m) for m in re.findall(r"runtime=(\d+)", r.stdout + r.stderr)]
    trains = len(re.findall(r"rule train:", r.stdout + r.stderr))
    assert trains >= 240 and len(runtimes) >= trains   # the paper plan: 241 configured cells before tuning
    for size in ("llama-100m", "llama-250m", "llama-350m"):   # the Llama / C4 table: 3 optimizers x 5 LRs a size
        assert len(re.findall(rf"wildcards: model={size}, tokens=[0-9.e]+, optimizer=", r.stdout + r.stderr)) == 15
    assert "wildcards: dataset=c4-t5" in r.stdout + r.stderr
    zeroshot = re.findall(r"rule zeroshot:\n(?:    .*\n)*?    wildcards: experiment=(\w+), model=(\w+), optimizer=(\w+), "
                          r"batch=(\d+)", r.stdout + r.stderr)   # Table 1: one job per group, its claim seeds
    assert sorted(zeroshot) == sorted([("headline_48b", "medium", "adamw", "480"), ("headline_48b", "medium", "lamb", "6144"),
                                       ("headline_48b", "medium", "merit", "6144"), ("table1_small", "small", "adamw", "480"),
                                       ("table1_small", "small", "lamb", "4096"), ("table1_small", "small", "merit", "4096")])
    evals = re.findall(r"-m merit_repro.evals.zeroshot eval (.*?) --tasks", r.stdout + r.stderr)
    assert len(evals) == 6 and not any(evals), evals[:1]   # their runs are tuning's to choose: none named yet
    assert max(runtimes) == 1440   # the 48B-token cells (about 79 hours at this rate) are capped and chain
    budgets = [float(m) for m in re.findall(r"time_budget_s=([0-9.]+)", r.stdout + r.stderr)]
    assert budgets and max(budgets) == 1440 * 60


@pytest.mark.slow
def test_the_one_gpu_tier_validates_plans_and_fits_a_day():
    """config/gpu1.yaml: plain data, valid, planned by a dry run (18 grid cells of GPT-2 Small on one GPU each),
    and at most 24 H100-hours by merit_repro.plan.cost's own defaults, tuning's upper bound included."""
    from merit_repro.config import configfiles

    assert configfiles.problems(REPO / "config/gpu1.yaml") == []
    s = effective(ONE_GPU)
    assert s["executor"] is None and s["cores"] == 8
    r = subprocess.run([sys.executable, "-m", "snakemake", "-n", *ONE_GPU.split()[1:]], cwd=REPO,
                       capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert len(re.findall(r"rule train:", out)) == 18 and len(re.findall(r"gpu=1,", out)) == 18
    assert "wildcards: model=small, tokens=7.86432e8," in out
    r = subprocess.run([sys.executable, "-m", "merit_repro.plan.cost", "--configfile", "config/gpu1.yaml"], cwd=REPO,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "989 TFLOP/s x MFU 0.4" in r.stdout and "small: 124.4M params" in r.stdout
    total = [line for line in r.stdout.splitlines() if line.startswith("total (distinct cells)")]
    *_, hours, tuning, _, _ = total[0].split()   # then the CPU minutes
    assert float(hours) + float(tuning) <= 24, total[0]


@pytest.mark.slow
@pytest.mark.parametrize("gpus", [1])
def test_a_cell_that_asks_for_a_gpu_without_one_fails_within_seconds(tmp_path, gpus):
    import time

    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible here")
    from test_train import TINY

    cell = {**TINY, "data_dir": str(tmp_path / "no-data")}
    start = time.time()
    r = subprocess.run([sys.executable, "-m", "merit_repro.launch", "--cell", json.dumps(cell), "--out",
                        str(tmp_path / "run"), "--gpus", str(gpus)], capture_output=True, text=True,
                       env={**os.environ, "MERIT_GPUS": "1",
                            "MERIT_GPU_LOCK_DIR": str(tmp_path / "locks")})
    assert r.returncode == 2 and time.time() - start < 30
    assert "asks for a GPU (device 'cuda') but none is visible" in r.stdout + r.stderr
