"""Part 3: DDP through ``merit_repro.launch.torchrun`` on every visible GPU: a tiny cell run to its end, the same
cell stopped at once (exit 75 with its checkpoint), and its rerun, which resumes to the uninterrupted run's loss."""

import json
import os
import sys
import time
from pathlib import Path

import torch
import yaml

from merit_repro.train.distributed import BACKEND_ENV

from .common import corpus, first_line, run_command

RESUME_TOLERANCE = 1e-3    # relative, final validation loss of a stopped-and-resumed run vs the uninterrupted one


DDP_CELL = dict(model="demo-tiny", block_size=64, tokens=64 * 10, eval_every=5, eval_tokens=4096, mal_every=5,
                mal_batch=2, checkpoint_every=100, log_every=5, lr=3e-3, optimizer="merit")


def ddp_run(cell_path, out, processes, timeout, *extra, backend=None):
    """One torchrun of the cell: its exit code, summary.json (or None), whether ckpt.pt exists, train.log."""
    cmd = [sys.executable, "-m", "merit_repro.launch.torchrun", "--standalone", "--nproc_per_node", str(processes),
           "-m", "merit_repro.train", "--config", str(cell_path), "--out", str(out), *extra]
    r = run_command(cmd, timeout, env={**os.environ, "OMP_NUM_THREADS": "1",
                                       **({BACKEND_ENV: backend} if backend else {})})
    out = Path(out)
    (out.parent / f"{out.name}.{'stop' if extra else 'run'}.log").write_text(r.stdout + r.stderr)
    summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else None
    log = (out / "train.log").read_text() if (out / "train.log").exists() else ""
    return {"code": r.returncode, "summary": summary, "ckpt": (out / "ckpt.pt").exists(), "log": log,
            "stderr": first_line("\n".join(r.stderr.splitlines()[-3:]))}


def judge_ddp(processes, device_type, full, stopped, resumed, shared=False):
    """Rows for the uninterrupted run, the stopped run and its resumption (ddp_run's dicts); shared: the ranks
    share one GPU over gloo."""
    backend = "gloo, one GPU shared" if shared else ("NCCL" if device_type == "cuda" else "gloo")
    where = f"{processes} process{'es' if processes > 1 else ''}" + (f", {backend}" if processes > 1 else "")

    def ran(run, world_size):
        s = run["summary"] or {}
        return (run["code"] == 0 and s.get("status") == "ok" and s.get("world_size") == world_size
                and str(s.get("device", "")).startswith(device_type))

    def described(run):
        s = run["summary"] or {}
        text = f"exit {run['code']}, world_size {s.get('world_size')}, {str(s.get('device', 'no summary'))[:40]}"
        return text + (f": {run['stderr']}" if run["code"] not in (0, 75) and run["stderr"] else "")

    resumed_ok = "resuming from step" in resumed["log"]
    rows = [(f"torchrun ({where}): a cell to its end", described(full),
             f"exit 0, world_size {processes}, {device_type}", ran(full, processes)),
            (f"torchrun ({where}): --stop-at now exits 75 with ckpt.pt",
             f"exit {stopped['code']}, ckpt.pt {'written' if stopped['ckpt'] else 'missing'}", "exit 75, ckpt.pt",
             stopped["code"] == 75 and stopped["ckpt"]),
            (f"torchrun ({where}): the rerun resumes and completes",
             described(resumed) + (", resumed" if resumed_ok else ", not resumed"),
             "exit 0, 'resuming from step' in train.log", ran(resumed, processes) and resumed_ok)]
    a, b = ((run["summary"] or {}).get("final_val_loss") for run in (resumed, full))
    same = a is not None and b is not None and abs(a - b) <= RESUME_TOLERANCE * abs(b)
    rows.append((f"torchrun ({where}): resumed run's final val loss vs the uninterrupted run's",
                 f"{a:.6f} vs {b:.6f}" if None not in (a, b) else f"{a} vs {b}",
                 f"within {RESUME_TOLERANCE:g} relative", same))
    if shared:
        rows.append(("DDP over NCCL (all-reduce between GPUs)", "skipped: one GPU visible (its two ranks ran over "
                     "gloo: NCCL refuses two ranks on one device)", "needs 2 GPUs", None))
    return rows


def part_ddp(plan, device, workdir):
    processes = plan.ddp_processes or torch.cuda.device_count()
    shared = device.type == "cuda" and processes == 1   # one GPU: two ranks share it, over gloo
    processes = 2 if shared else processes
    folder = Path(workdir) / "ddp"
    folder.mkdir(parents=True, exist_ok=True)
    cell = {**DDP_CELL, "data_dir": str(corpus(workdir)), "device": device.type, "batch_size": 8 * processes,
            "tokens": 8 * processes * DDP_CELL["tokens"]}   # 10 steps whatever the process count
    cell_path = folder / "cell.yaml"
    cell_path.write_text(yaml.safe_dump(cell))
    backend = "gloo" if shared else None
    full = ddp_run(cell_path, folder / "full", processes, plan.ddp_timeout, backend=backend)
    stopped = ddp_run(cell_path, folder / "stopped", processes, plan.ddp_timeout, "--stop-at", f"{time.time():.3f}",
                      backend=backend)
    resumed = ddp_run(cell_path, folder / "stopped", processes, plan.ddp_timeout, backend=backend)
    return judge_ddp(processes, device.type, full, stopped, resumed, shared)
