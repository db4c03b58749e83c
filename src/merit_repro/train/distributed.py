"""Devices and ranks of a training process: one device, or DDP under torchrun (NCCL, or gloo on CPUs)."""

import os

import torch
import torch.distributed as dist

from merit_repro.utils import UserError

from .timing import autocast


BACKEND_ENV = "MERIT_DDP_BACKEND"   # gloo: ranks may share a GPU (a check on a one-GPU machine); NCCL refuses that


def setup_device(cfg):
    """(rank, world_size, device), starting the process group when run under torchrun: NCCL on GPUs, gloo on
    CPUs, or the backend $MERIT_DDP_BACKEND names."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    backend = os.environ.get(BACKEND_ENV)
    if cfg.device == "auto":
        device = torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")
    else:
        device = torch.device(cfg.device)
        if device.type == "cuda" and device.index is None:
            device = torch.device(f"cuda:{local_rank}")
    if device.type == "cuda" and backend == "gloo" and torch.cuda.is_available():
        device = torch.device(f"cuda:{device.index % torch.cuda.device_count()}")   # ranks share the GPUs there are
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UserError(f"this cell asks for a GPU (device {cfg.device!r}) but none is visible: "
                            f"torch.cuda.is_available() is False (CUDA_VISIBLE_DEVICES="
                            f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')!r}, torch {torch.__version__}); run it on "
                            "a GPU node, install a CUDA build of torch, or give the model gpus: 0")
        torch.cuda.set_device(device)
    if world_size > 1 and not dist.is_initialized():
        dist.init_process_group(backend=backend or ("nccl" if device.type == "cuda" else "gloo"))
    return rank, world_size, device


def autocast_for(cfg, device):
    """The cell's autocast: bf16 when its dtype says so (auto: on a GPU), else a context that does nothing."""
    return autocast(device, cfg.dtype == "bfloat16" or (cfg.dtype == "auto" and device.type == "cuda"))


def all_reduce(value, device, op=None):
    if not dist.is_initialized():
        return value
    t = torch.as_tensor(value, dtype=torch.float64, device=device).clone()
    dist.all_reduce(t, op=op or dist.ReduceOp.SUM)
    return t


class HostAgreement:
    """Decisions every rank takes together (stop, checkpoint), agreed each step over a gloo group on the
    host: no GPU synchronisation, so the GPU's queue of work stays full."""

    def __init__(self, world_size, own_group=None):
        """own_group: a gloo group of its own (default: unless the ranks' group is gloo already, as on CPUs)."""
        self.world_size = world_size
        self.group = None
        if world_size > 1:
            own_group = dist.get_backend() != "gloo" if own_group is None else own_group
            self.group = dist.new_group(backend="gloo") if own_group else None

    def max(self, values):
        """Each value's largest over the ranks (a flag: true on any rank), the same list on every rank."""
        values = [float(v) for v in values]
        if self.world_size == 1:
            return values
        t = torch.tensor(values, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.group)
        return t.tolist()

    def barrier(self):
        if self.world_size > 1:
            dist.barrier(group=self.group)
