"""Launch one training cell as the workflow does: cell.yaml beside the run, one process per GPU.

    python -m merit_repro.launch --cell '{"model": ...}' [--run-settings '{"save_model": true}'] --out RUN
        [--gpus N] [--threads T]

``launch_cell`` writes RUN/cell.yaml and runs ``python -m merit_repro.train`` on it: for a CPU cell
in a warm trainer forked for it (merit_repro.launch.warmstart, no start-up cost), else in a new process;
``merit_repro.launch.torchrun`` (torchrun, passing the cell's stop code on) for several GPUs. On a workstation it takes GPU slots first (merit_repro.launch.gpu_slots);
under SLURM the scheduler has chosen the devices. SIGTERM/SIGINT are forwarded to the trainer,
and its exit code is returned. Only the standard library and PyYAML are imported here, so a job
starts fast.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import yaml

from merit_repro.utils import UserError, atomic_write_bytes, cli

from . import warmstart
from .gpu_slots import device_pool, gpu_slots

JOB_START = time.time()   # this module is imported first thing in a job


def stop_time(time_budget_seconds, start=JOB_START):
    """When a job with a time budget stops training: early enough to write a checkpoint (the last fifth of
    the budget, at most five minutes, is left for it), counted from the job's start; None without a budget."""
    if not time_budget_seconds:
        return None
    return start + time_budget_seconds - min(300.0, 0.2 * time_budget_seconds)


def train_argv(config_path, out_dir, time_budget_seconds=None):
    stop_at = stop_time(time_budget_seconds)
    return ["--config", str(config_path), "--out", str(out_dir), *(["--stop-at", f"{stop_at:.3f}"] if stop_at else [])]


def train_command(config_path, out_dir, gpus, time_budget_seconds=None):
    train = ["-m", "merit_repro.train", *train_argv(config_path, out_dir, time_budget_seconds)]
    if gpus > 1:
        return [sys.executable, "-m", "merit_repro.launch.torchrun", "--standalone", "--nproc_per_node", str(gpus), *train]
    return [sys.executable, *train]


def launch_cell(cell, out_dir, gpus=0, threads=1, time_budget_seconds=None):
    out_dir = Path(out_dir)
    # A cell given GPUs trains on them or fails at once (no quiet fall-back to the CPU), unless its config
    # says device: cpu on purpose.
    device = "cpu" if gpus == 0 else ("cuda" if cell.get("device", "auto") == "auto" else cell["device"])
    scheduler_assigns_gpus = "SLURM_JOB_ID" in os.environ
    visible = len(device_pool(scheduler=scheduler_assigns_gpus)) if device != "cpu" else gpus
    if visible < gpus:   # before torchrun starts a process per GPU to fail each
        raise UserError(f"this cell needs {gpus} GPUs but {visible} are visible (CUDA_VISIBLE_DEVICES="
                        f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')!r}, MERIT_GPUS="
                        f"{os.environ.get('MERIT_GPUS', 'unset')!r}); run it where they are, or give the model gpus: 0")
    out_dir.mkdir(parents=True, exist_ok=True)
    cell = {**cell, "device": device}
    config_path = out_dir / "cell.yaml"
    atomic_write_bytes(config_path, yaml.safe_dump(cell, sort_keys=True).encode())
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1"}
    if warmstart.enabled(gpus):
        code = warmstart.run_train(
            train_argv(config_path, out_dir, time_budget_seconds), env,
            started=lambda pid: print(f"[launch] training in a process forked from the warm trainer (pid {pid})",
                                      flush=True),
            declined=lambda reason: print(f"[launch] no warm trainer ({reason}); starting a new process", flush=True))
        if code is not None:
            return code
    slots = gpu_slots(gpus) if gpus > 0 and not scheduler_assigns_gpus else nullcontext(None)
    with slots as devices:
        if devices is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(devices)
            print(f"[launch] GPU slots {','.join(devices)}", flush=True)
        proc = subprocess.Popen(train_command(config_path, out_dir, gpus, time_budget_seconds), env=env)
        forward = lambda signum, frame: proc.send_signal(signum)  # noqa: E731
        previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            return proc.wait()
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)


@cli
def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m merit_repro.launch", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cell", required=True, help="the cell's settings as JSON (merit_repro.plan.cell.CellConfig keys)")
    parser.add_argument("--run-settings", default="{}", help="more settings as JSON, merged into --cell: the workflow "
                        "passes the ones that do not change the result (merit_repro.plan.cell.RESOURCE_KEYS) here")
    parser.add_argument("--out", required=True, type=Path, help="run directory")
    parser.add_argument("--gpus", type=int, default=0, help="GPUs of the cell (0: CPU; more than 1: torchrun)")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads of the trainer")
    parser.add_argument("--time-budget-seconds", type=float, default=0,
                        help="the job's wall-time budget (0: none): the trainer checkpoints and exits before it")
    args = parser.parse_args(argv)
    cell = {**json.loads(args.cell), **json.loads(args.run_settings)}
    code = launch_cell(cell, args.out, args.gpus, args.threads, args.time_budget_seconds or None)
    return code if code >= 0 else 128 - code   # killed by a signal: the shell's convention


