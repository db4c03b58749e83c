"""Part 8's yardstick: a plain loop at a trainer cell's own shape, so that the trainer's tokens/s are read against
what the same work costs without the trainer around it.

From the cell's summary.json it takes the model config, the micro-batch and its accumulation, the block size, the
optimizer with the trainer's param groups and hyperparameters, the autocast (``merit_repro.train.distributed``), the
compile setting and the gradient clipping, and nothing else: one fixed batch on the device, no schedule, probes,
evaluation, logging or checkpoints. Its steps are timed as the trainer times its own: the first (compilation and
warm-up) excluded, the clock stopped once the device has finished."""

import contextlib
import time

import torch

from merit_repro.models import config_from_dict
from merit_repro.optim import build, fastest_on, param_groups
from merit_repro.plan.cell import CellConfig
from merit_repro.train.distributed import autocast_for
from merit_repro.train.hardware import mfu, peak_flops
from merit_repro.train.timing import device_name, time_steps

from .common import accumulated_step, new_model, random_batch


@contextlib.contextmanager
def cpu_threads(n):
    """torch's intra-op threads set to n (None: unchanged) for the block: the trainer's process had n."""
    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def plain_loop(summary, device, steps, threads=None, clock=time.perf_counter):
    """{tokens_per_s, mfu, loss, micro_batch, accum} of `steps` plain optimizer steps (>= 2: the first is not
    timed) at the cell of the trainer's summary, with `threads` intra-op threads as the trainer had, on the clock."""
    if steps < 2:
        raise ValueError(f"steps={steps}: the first step is not timed, so at least 2 are needed")
    cfg = CellConfig.from_dict(summary["config"])
    model_config = config_from_dict(summary["model_config"])
    micro, accum = summary["micro_batch_size"], summary["grad_accum"]
    model = new_model(model_config, device, cfg.seed)
    if cfg.compile:
        # this process compiled the model's forward at other shapes before (parts 2 and 6): from those caches the
        # compiler would guess a dynamic batch, where the trainer's fresh process compiles a static graph
        torch._dynamo.reset()
    runner = torch.compile(model) if cfg.compile else model
    opt = build(cfg.optimizer, param_groups(model, cfg.weight_decay), cfg.optimizer_source,
                **fastest_on(device, cfg.optimizer, cfg.optimizer_kwargs()))
    micro_batches = [random_batch(model_config, micro, device, seed=1)] * accum
    autocast_context = autocast_for(cfg, device)
    with cpu_threads(threads):
        timed = time_steps(lambda: accumulated_step(runner, model, opt, micro_batches, autocast_context, cfg.grad_clip),
                           steps - 1, device, clock=clock)
        loss = timed.result.item()
    tokens_per_s = accum * micro * cfg.block_size / timed.seconds_per_step
    return {"tokens_per_s": tokens_per_s, "loss": loss, "micro_batch": micro, "accum": accum,
            "mfu": mfu(tokens_per_s, model.flops_per_token(), peak_flops(device_name(device), cfg.peak_flops))}
