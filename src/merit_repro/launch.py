"""Launch one training cell as the workflow does: cell.yaml beside the run, one process per GPU.

``launch_cell`` writes RUN/cell.yaml, picks the devices (GPU slots on a workstation, the
scheduler's own on SLURM, CPU when the cell asks for no GPU), starts ``python -m merit_repro.train``
(``torchrun`` for several GPUs), forwards SIGTERM/SIGINT to it, and returns its exit code.
"""

import os
import signal
import subprocess
import sys
from contextlib import nullcontext
from pathlib import Path

import yaml

from .gpu_slots import gpu_slots
from .utils import atomic_write_bytes


def train_command(config_path, out_dir, gpus):
    train = ["-m", "merit_repro.train", "--config", str(config_path), "--out", str(out_dir)]
    if gpus > 1:
        return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(gpus), *train]
    return [sys.executable, *train]


def launch_cell(cell, out_dir, gpus=0, threads=1, log_path=None):
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    cell = {**cell, "device": "cpu" if gpus == 0 else cell.get("device", "auto")}
    config_path = out_dir / "cell.yaml"
    atomic_write_bytes(config_path, yaml.safe_dump(cell, sort_keys=True).encode())
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1"}
    log = open(log_path, "a") if log_path else None
    say = (lambda msg: print(msg, file=log, flush=True)) if log else print
    scheduler_assigns_gpus = "SLURM_JOB_ID" in os.environ
    slots = gpu_slots(gpus, log=say) if gpus > 0 and not scheduler_assigns_gpus else nullcontext(None)
    with slots as devices:
        if devices is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(devices)
            say(f"[launch] GPU slots {','.join(devices)}")
        proc = subprocess.Popen(train_command(config_path, out_dir, gpus), env=env, stdout=log, stderr=log)
        forward = lambda signum, frame: proc.send_signal(signum)  # noqa: E731
        previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            return proc.wait()
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
            if log:
                log.close()
