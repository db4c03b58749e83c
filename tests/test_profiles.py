"""The effective settings of each command the README and docs/ document, as Snakemake resolves them with its
profiles (no overrides here), and what the paper-scale SLURM plan asks the scheduler for."""

import json
import os
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest
from helpers import REPO

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
    documented = "".join(p.read_text() for p in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))])
    assert command in documented, f"neither the README nor docs/ documents {command!r} any more"
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
    assert s["config"] == ["max_job_minutes=1440", "gpus_per_node=8"]
    assert s["set_threads"] == {"prepare_data": 16}
    assert "cpus_per_task" not in s["default_resources"]   # would override the threads of every rule
    assert "train" not in s["set_resources"]   # training jobs size themselves per GPU (merit_repro.plan.resources)
    assert s["rate"] == [100, 5] and s["scheduler"] == "greedy"


def test_the_workstation_command_counts_gpus():
    s = effective(WORKSTATION)
    assert s["executor"] is None and s["cores"] == os.cpu_count()


def planned_jobs(out, rule):
    """(resources, shell command) of each job of a rule in a dry run's output."""
    jobs = re.findall(rf"\nrule {rule}:\n(?:    .*\n)*?    resources: (.*)\nShell command: (.*)", out)
    return [(dict(item.split("=", 1) for item in re.split(r", (?=\w+=)", resources)), shell)
            for resources, shell in jobs]


def sbatch_call(resources, threads):
    """The sbatch line snakemake-executor-plugin-slurm builds for a job with these resources."""
    from snakemake_executor_plugin_slurm.submit_string import get_submit_command

    class Resources(dict):
        __getattr__ = dict.__getitem__

    typed = Resources({k: int(v) if v.isdigit() else v for k, v in resources.items()})
    job = SimpleNamespace(resources=typed, threads=threads)
    params = dict(run_uuid="u", slurm_logfile="log", comment_str="c", account="", partition="", workdir=None)
    return get_submit_command(job, params)


@pytest.mark.slow
def test_the_paper_plan_on_slurm_asks_for_no_job_longer_than_the_limit_and_resources_per_gpu(tmp_path):
    """Also: cores and memory per GPU, one node per cell, and (with gpus_per_node=4 here) GPT-2 Large's 8 GPUs on
    two whole nodes, one task a node. `--cores` only lifts a dry run's own cap of 1 on threads: a run on the
    cluster has none."""
    r = subprocess.run([sys.executable, "-m", "snakemake", "-n", *CLUSTER.split()[1:], "--cores", "256",
                        "--config", "max_job_minutes=1440", "gpus_per_node=4"], cwd=REPO,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout + r.stderr
    one_node, two_nodes = planned_jobs(out, "train"), planned_jobs(out, "train_nodes")
    assert len(one_node) == 241 and len(two_nodes) == 15   # the 15 GPT-2 Large cells span two nodes
    for resources, shell in one_node:
        assert resources["gpu"] == "2" and resources["nodes"] == "1" and resources["mem_mb"] == "64000"
        assert resources["slurm_extra"] == "--signal=TERM@240" and "--gpus 2 --nodes 1 --threads 8 " in shell
        assert shell.startswith("exec 3>&2; MERIT_ERROR_FD=3 exec ")
    call = sbatch_call(one_node[0][0], threads=8)
    assert "--mem 64000 --nodes=1" in call and "--cpus-per-task=8 --signal=TERM@240" in call
    for resources, shell in two_nodes:
        assert (resources["gpu"], resources["nodes"], resources["tasks"], resources["mpi"]) == ("0", "2", "2", "srun")
        assert resources["mem_mb"] == "128000" and "--gpus 8 --nodes 2 --threads 16 " in shell
    call = sbatch_call(two_nodes[0][0], threads=16)
    assert "--mem 128000 --nodes=2" in call and "--ntasks=2 --cpus-per-task=16" in call
    assert call.endswith("--signal=TERM@240 --gpus-per-node=4 --ntasks-per-node=1")
    runtimes = [int(m) for m in re.findall(r"runtime=(\d+)", out)]
    trains = len(re.findall(r"rule train(?:_nodes)?:", out))
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
    from helpers import CELL

    cell = {**CELL, "data_dir": str(tmp_path / "no-data")}
    start = time.time()
    r = subprocess.run([sys.executable, "-m", "merit_repro.launch", "--cell", json.dumps(cell), "--out",
                        str(tmp_path / "run"), "--gpus", str(gpus)], capture_output=True, text=True,
                       env={**os.environ, "MERIT_GPUS": "1",
                            "MERIT_GPU_LOCK_DIR": str(tmp_path / "locks")})
    assert r.returncode == 2 and time.time() - start < 30
    assert "asks for a GPU (device 'cuda') but none is visible" in r.stdout + r.stderr


# conda's answers to the three questions Snakemake asks it before a dry run (channels cannot be reached from
# these machines, so no environment is built here: see docs/scaling.md, A SLURM cluster)
CONDA_STUB = """#!/bin/sh
case "$*" in
  "info --json") echo '{"conda_version": "24.7.1", "conda_prefix": "/nonexistent", "envs_dirs": [], "pkgs_dirs": [],
                        "platform": "linux-64", "channels": []}' ;;
  "--version") echo "conda 24.7.1" ;;
  "config --get channel_priority --json") echo '{"get": {"channel_priority": "strict"}}' ;;
  *) echo "conda stub: $*" >&2; exit 1 ;;
esac
"""


def test_the_conda_route_runs_the_environments_python_and_the_plain_route_snakemakes(tmp_path):
    (tmp_path / "conda").write_text(CONDA_STUB)
    (tmp_path / "conda").chmod(0o755)
    env = {**os.environ, "PATH": os.pathsep.join([str(tmp_path), os.environ["PATH"]])}
    shells = {}
    for route, extra in [("conda", ["--sdm", "conda"]), ("plain", [])]:
        # Folders of its own, so that no result the checkout already holds takes a job out of the plan
        folders = ["--config", f"results={tmp_path / 'results'}", f"figures={tmp_path / 'figures'}"]
        r = subprocess.run([sys.executable, "-m", "snakemake", "-n", "-p", "--cores", "2", *extra, *folders], cwd=REPO,
                           capture_output=True, text=True, timeout=300, env=env)
        assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
        shells[route] = re.findall(r"Shell command: (.*)", r.stdout + r.stderr)
    modules = ["merit_repro.data prepare", "merit_repro.launch", "merit_repro.plan.tuning",
               "merit_repro.evals.zeroshot eval"]
    for module in modules:
        assert any(f"MERIT_ERROR_FD=3 exec python -m {module}" in s for s in shells["conda"]), module
        assert any(f"{sys.executable} -m {module}" in s for s in shells["plain"]), module
    assert not any(sys.executable in s for s in shells["conda"])
