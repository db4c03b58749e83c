"""Part 1: the trainer on the device through the real workflow, ``snakemake`` on config/gpu_check.yaml (4 tiny
cells) into the work folder: the workflow exits 0 and every run's summary.json says it trained on the device."""

import json
import sys
from pathlib import Path

import yaml

from .common import REPO, first_line, run_command

WORKFLOW_CONFIG = REPO / "config" / "gpu_check.yaml"


def workflow_config(device, workdir, source=WORKFLOW_CONFIG):
    """A copy of config/gpu_check.yaml writing into workdir (gpus: 0 on the CPU); (its path, the config)."""
    config = yaml.safe_load(Path(source).read_text())
    config["results"], config["figures"] = str(Path(workdir) / "results"), str(Path(workdir) / "figures")
    if device.type != "cuda":
        for model in config["models"].values():
            model["gpus"] = 0
    path = Path(workdir) / "gpu_check_workflow.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path, config


def expected_cells(config):
    """Cells the tiny workflow trains: per experiment, models x optimizers x batches x LRs x (grid + claim seeds)."""
    seeds = len(config.get("seeds", [0])) + len(config.get("claim_seeds", config.get("seeds", [0])))
    return sum(len(exp["models"]) * len(exp["batch_sizes"]) * len(exp["lr_grid"][opt]) * seeds
               for exp in config["experiments"].values() for opt in exp["optimizers"])


def judge_workflow(returncode, summaries, expected, device_type, log_tail=""):
    """Rows for the workflow's exit code and its runs' summary.json (dicts)."""
    devices = sorted({s.get("device", "?") for s in summaries})
    on_device = [s for s in summaries if str(s.get("device", "")).startswith(device_type)]
    ok_runs = [s for s in on_device if s.get("status") == "ok"]
    return [
        (f"snakemake --configfile config/gpu_check.yaml (tiny cells, gpus: {int(device_type == 'cuda')}): exit code",
         f"exit {returncode}" + (f": {log_tail}" if returncode and log_tail else ""), "exit 0", returncode == 0),
        (f"runs trained on {device_type}, status ok (summary.json)", f"{len(ok_runs)} of {len(summaries)} runs, on "
         f"{'; '.join(devices) or 'none'}", f"{expected} runs, all on {device_type}",
         len(summaries) == expected and len(ok_runs) == expected),
    ]


def error_line(log):
    """The first line of a Snakemake log that names an error, for the table."""
    for line in log.splitlines():
        if line.startswith("error: ") or "Error in rule" in line or "WorkflowError" in line:
            return first_line(line)
    return first_line(log.splitlines()[-1] if log.strip() else "")


def part_workflow(plan, device, workdir):
    path, config = workflow_config(device, workdir)
    cmd = [sys.executable, "-m", "snakemake", "--cores", str(plan.workflow_cores), "--resources", "gpu=1",
           "--configfile", str(path)]
    print(f"[gpu_check]   {' '.join(cmd[1:])}  (log: {workdir}/workflow.log)", flush=True)
    r = run_command(cmd, plan.workflow_timeout, cwd=REPO)
    log = r.stdout + r.stderr
    (Path(workdir) / "workflow.log").write_text(log)
    summaries = [json.loads(p.read_text()) for p in sorted((Path(config["results"]) / "runs").rglob("summary.json"))]
    return judge_workflow(r.returncode, summaries, expected_cells(config), device.type, error_line(log))
