"""What a training job asks a scheduler for, scaled with its cell's GPUs: nodes, GPUs per node, cores and memory
per node, and the signal that comes before its time limit.

A cell of G GPUs runs on one node while G <= gpus_per_node, else on G / gpus_per_node whole nodes (one torchrun
per node, merit_repro.launch.torchrun); cores and memory are per GPU, so that each rank gets its share
(cores_per_gpu OpenMP threads, mem_mb_per_gpu to build its model). A CPU cell (G = 0) gets one core.
"""

import math

from merit_repro.config.configfiles import with_defaults
from merit_repro.utils import lead_within

from .grid import model_gpus

CPU_CELL_MEM_MB = 4000


def nodes(config, model):
    """Nodes of one of the model's cells: 1, or the whole nodes its GPUs fill."""
    return max(1, math.ceil(model_gpus(config, model) / with_defaults(config, "gpus_per_node")))


def gpus_per_node(config, model):
    return model_gpus(config, model) // nodes(config, model)


def threads(config, model):
    """CPU cores per node (SLURM's --cpus-per-task, one task per node)."""
    return with_defaults(config, "cores_per_gpu") * gpus_per_node(config, model) or 1


def mem_mb(config, model, attempt=1):
    """Memory per node, more at each retry (a job that ran out gets more)."""
    per_node = with_defaults(config, "mem_mb_per_gpu") * gpus_per_node(config, model) or CPU_CELL_MEM_MB
    return per_node * attempt


def multi_node(config, model):
    return nodes(config, model) > 1


def signal_lead(config, job_minutes):
    """Whole seconds between the scheduler's SIGTERM and a job's limit (merit_repro.utils.lead_within)."""
    return math.ceil(lead_within(with_defaults(config, "signal_lead_seconds"), 60 * job_minutes))


def slurm_extra(config, model, job_minutes):
    """sbatch options of a training job: SIGTERM signal_lead() before its limit, so that the trainer checkpoints
    (the trainer also stops that long, plus its measured step and save times, before the job's end on its own);
    a cell over several nodes asks for its GPUs per node and one task per node."""
    options = [f"--signal=TERM@{signal_lead(config, job_minutes)}"]
    if multi_node(config, model):
        options += [f"--gpus-per-node={gpus_per_node(config, model)}", "--ntasks-per-node=1"]
    return " ".join(options)


def problems(config):
    """Models whose GPUs cannot be laid out on whole nodes."""
    per_node, found = with_defaults(config, "gpus_per_node"), []
    for name in config["models"]:
        gpus = model_gpus(config, name)
        if gpus > per_node and gpus % per_node:
            found.append(f"models.{name}.gpus={gpus} spans nodes but is not a multiple of gpus_per_node={per_node}; "
                         f"use {per_node * math.ceil(gpus / per_node)} or {per_node * (gpus // per_node)} GPUs")
    return found
