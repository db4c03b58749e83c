"""Launch one training cell as the workflow does: cell.yaml beside the run, one process per GPU.

    python -m merit_repro.launch --cell '{"model": ...}' --out RUN [--tracking '{"backend": "tensorboard"}']
        [--gpus N] [--nodes K] [--threads T] [--time-budget-seconds S] [--signal-lead-seconds L]

``launch_cell`` writes RUN/cell.yaml and runs ``python -m merit_repro.train`` on it: for a CPU cell in a warm
trainer forked for it (merit_repro.launch.warmstart, no start-up cost), else in a new process;
``merit_repro.launch.torchrun`` (torchrun, passing the cell's stop code on) for several GPUs, and srun of one
torchrun per node for several nodes. On a workstation it takes GPU slots first (merit_repro.launch.gpu_slots)
and passes SIGTERM/SIGINT on to the trainer; under SLURM the scheduler has chosen the devices and signals every
process itself. The trainer stops before the job's end (SLURM's end time, or the time budget) less the signal
lead. Each rank gets the node's cores shared out as OpenMP threads. Only the standard library and PyYAML are
imported here, so a job starts fast; its exit code is the trainer's.
"""

import argparse
import os
import subprocess
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import yaml

from merit_repro.plan.cell import load_cell_config
from merit_repro.train.tracking import ENV as TRACKING_ENV
from merit_repro.utils import UserError, atomic_write_bytes, check_numbers, cli, lead_within, parse_data, to_console

from . import signals, torchrun, warmstart
from .gpu_slots import device_pool, gpu_slots

JOB_START = time.time()   # this module is imported first thing in a job
SLURM_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S"


def slurm_end_time(environ=None, run=subprocess.run):
    """The time (epoch seconds) SLURM ends this job at, from squeue, or None outside SLURM or when it does not
    say (no limit, squeue missing or slow)."""
    environ = os.environ if environ is None else environ
    job = environ.get("SLURM_JOB_ID")
    if not job:
        return None
    try:
        r = run(["squeue", "-h", "-j", job, "-o", "%e"], capture_output=True, text=True, timeout=20)
        return time.mktime(time.strptime(r.stdout.strip(), SLURM_TIME_FORMAT)) if r.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None


def job_end(time_budget_seconds, start=JOB_START, end=None):
    """(when the job ends, who says so): the scheduler's end time or the start of this process plus the budget,
    whichever comes first; (None, None) without either."""
    limits = [(t, who) for t, who in ((end, "the scheduler"),
                                      (start + time_budget_seconds if time_budget_seconds else None, "its time budget"))
              if t]
    return min(limits) if limits else (None, None)


def stop_time(time_budget_seconds, signal_lead_seconds=240, start=JOB_START, end=None):
    """When the trainer must have checkpointed and exited, or None without a limit: the job's end less the signal
    lead (a fifth of a short budget at most, merit_repro.utils.lead_within), so that it has usually stopped before
    the scheduler's SIGTERM (SLURM may send it up to a minute early: the trainer then stops on it and saves the
    same). The trainer stops earlier still by its measured step and checkpoint times."""
    ends, _ = job_end(time_budget_seconds, start, end)
    return ends - lead_within(signal_lead_seconds, time_budget_seconds) if ends else None


def train_argv(config_path, out_dir, stop_at=None):
    return ["--config", str(config_path), "--out", str(out_dir), *(["--stop-at", f"{stop_at:.3f}"] if stop_at else [])]


def train_command(config_path, out_dir, gpus, stop_at=None, nodes=1, threads=1, hosts=None):
    """The command that trains the cell: the trainer, torchrun on this node, or srun of one torchrun a node (on
    the job's hosts)."""
    train = ["-m", "merit_repro.train", *train_argv(config_path, out_dir, stop_at)]
    if nodes > 1:
        return torchrun.multi_node_command(nodes, gpus // nodes, threads, train, os.environ["SLURM_JOB_ID"],
                                           torchrun.first_host(hosts))
    if gpus > 1:
        return [sys.executable, "-m", "merit_repro.launch.torchrun", "--standalone", "--nproc_per_node", str(gpus), *train]
    return [sys.executable, *train]


def threads_per_rank(threads, gpus, nodes=1):
    """OpenMP threads of each rank: the node's cores shared by its ranks."""
    return max(1, threads // max(1, gpus // nodes))


def check_layout(gpus, nodes):
    if nodes < 1 or gpus < 0:
        raise UserError(f"--nodes {nodes} --gpus {gpus}: a cell needs at least one node and no negative GPU count")
    if nodes > 1 and (gpus < nodes or gpus % nodes):
        raise UserError(f"--gpus {gpus} over --nodes {nodes}: a cell over several nodes needs the same number of GPUs, "
                        "at least one, on each")


def check_visible(gpus, nodes, device, scheduler):
    """The GPUs this node must see before anything starts a process per GPU to fail each."""
    if nodes > 1 or device == "cpu":
        return   # srun gives each node's torchrun its GPUs
    visible = len(device_pool(scheduler=scheduler))
    if visible < gpus:
        raise UserError(f"this cell needs {gpus} GPUs but {visible} are visible (CUDA_VISIBLE_DEVICES="
                        f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')!r}, MERIT_GPUS="
                        f"{os.environ.get('MERIT_GPUS', 'unset')!r}); run it where they are, or give the model gpus: 0")


def launch_cell(cell, out_dir, gpus=0, threads=1, time_budget_seconds=None, nodes=1, signal_lead_seconds=240,
                tracking=None):
    out_dir = Path(out_dir)
    # A cell given GPUs trains on them or fails at once (no quiet fall-back to the CPU), unless its config
    # says device: cpu on purpose.
    device = "cpu" if gpus == 0 else ("cuda" if cell.get("device", "auto") == "auto" else cell["device"])
    scheduler_assigns_gpus = "SLURM_JOB_ID" in os.environ
    check_layout(gpus, nodes)
    hosts = torchrun.check_nodes(nodes, os.environ) if nodes > 1 else None
    check_visible(gpus, nodes, device, scheduler_assigns_gpus)
    out_dir.mkdir(parents=True, exist_ok=True)
    cell = {**cell, "device": device}
    config_path = out_dir / "cell.yaml"
    atomic_write_bytes(config_path, yaml.safe_dump(cell, sort_keys=True).encode())
    load_cell_config(config_path)   # the trainer's own check, once here, not once a rank (nor after GPU slots)
    ranks_threads = str(threads_per_rank(threads, gpus, nodes))
    env = {**os.environ, "OMP_NUM_THREADS": ranks_threads, "MKL_NUM_THREADS": ranks_threads, "PYTHONUNBUFFERED": "1"}
    if tracking is not None:   # never part of the cell: switching it on retrains nothing
        env[TRACKING_ENV] = tracking
    if gpus > 1 and nodes == 1:   # every rank on this host: the ranks' host-side gloo group on the loopback too
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    if device != "cpu" and not {"PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"} & set(env):
        env["PYTORCH_ALLOC_CONF"] = "expandable_segments:True"   # less fragmentation over a long run
    end = slurm_end_time()
    stop_at = stop_time(time_budget_seconds, signal_lead_seconds, end=end)
    if stop_at:
        ends, who = job_end(time_budget_seconds, end=end)
        print(f"[launch] the job ends at {time.ctime(ends)} ({who}); training stops by {time.ctime(stop_at)}",
              flush=True)
    if warmstart.enabled(gpus):
        code = warmstart.run_train(
            train_argv(config_path, out_dir, stop_at), env,
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
        command = train_command(config_path, out_dir, gpus, stop_at, nodes, threads, hosts)
        if nodes > 1:
            print(f"[launch] {nodes} nodes: {' '.join(command[:command.index('-m')])} ...", flush=True)
        return run_forwarding_signals(command, env, forward=not scheduler_assigns_gpus)


def run_forwarding_signals(command, env, forward=True):
    """Run command and return its exit code, outliving SIGTERM/SIGINT (launch.signals): they reach the command
    through this process, unless the scheduler signals every process of the job itself (SLURM: each process of a
    step), where a second copy could cut short torchrun's grace for the ranks to save."""
    started, pending = [], []

    def pass_on(signum):
        if forward and started:
            started[0].send_signal(signum)
        elif forward:
            pending.append(signum)   # before the command exists: sent to it as soon as it does

    with signals.passed_on(pass_on):
        started.append(subprocess.Popen(command, env=env))
        for signum in pending:
            started[0].send_signal(signum)
        return started[0].wait()


def json_object(flag, text):
    """The JSON object of cell settings a flag gives, or a UserError naming the flag."""
    example = '(e.g. \'{"model": "demo-tiny", "lr": 0.001}\')'
    try:
        value = parse_data(text, flag)
    except ValueError as err:
        raise UserError(f"{flag} is not JSON ({err}); give an object of cell settings {example}") from None
    if not isinstance(value, dict):
        raise UserError(f"{flag} {text[:60]!r} is not a JSON object; give an object of cell settings {example}")
    return value


@cli
def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m merit_repro.launch", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cell", required=True, help="the cell's settings as JSON (merit_repro.plan.cell.CellConfig keys)")
    parser.add_argument("--out", required=True, type=Path, help="run directory")
    parser.add_argument("--tracking", help=f"live tracking as JSON (merit_repro.train.tracking), passed to the trainer "
                        f"as {TRACKING_ENV}; default: {TRACKING_ENV} as set here, else none")
    parser.add_argument("--gpus", type=int, default=0, help="GPUs of the cell (0: CPU; more than 1: torchrun)")
    parser.add_argument("--nodes", type=int, default=1,
                        help="nodes of the cell (more than 1: srun, one torchrun a node)")
    parser.add_argument("--threads", type=int, default=1, help="CPU cores of the job on each node, shared by its ranks")
    parser.add_argument("--time-budget-seconds", type=float, default=0,
                        help="the job's wall-time budget (0: none): the trainer checkpoints and exits before it")
    parser.add_argument("--signal-lead-seconds", type=float, default=240,
                        help="how long before its limit the scheduler sends SIGTERM: the trainer stops before that")
    args = parser.parse_args(argv)
    check_numbers(args, non_negative=("time_budget_seconds", "signal_lead_seconds"))
    cell = json_object("--cell", args.cell)
    code = launch_cell(cell, args.out, args.gpus, args.threads, args.time_budget_seconds or None, args.nodes,
                       args.signal_lead_seconds, args.tracking)
    if code in torchrun.STOP_CODES:   # the trainer's own exit after its checkpoint, not a death by a signal
        to_console(f"[launch] {args.out}: stopped with its checkpoint, exit {code} ({torchrun.STOP_CODES[code]}); "
                   "a retry resumes it")
    return code if code >= 0 else 128 - code   # killed by a signal: the shell's convention


