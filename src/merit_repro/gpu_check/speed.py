"""Part 6: tokens/s, MFU and peak memory per model size (bf16 AdamW steps on random tokens), eager, and compiled
for the sizes the plan names."""

import math
import time

import torch

from merit_repro.optim import build, fastest_on, param_groups
from merit_repro.train.hardware import mfu, peak_flops

from .common import (
    autocast,
    device_name,
    first_line,
    gib,
    new_model,
    percent,
    random_batch,
    release,
    synchronize,
    train_step,
)


def train_speed(config, device, batch, steps, warmup, compiled):
    """(tokens/s, MFU, peak GiB, final loss, seconds of the warm-up steps) of bf16 AdamW steps on random tokens."""
    model = new_model(config, device)
    runner = torch.compile(model) if compiled else model
    opt = build("adamw", param_groups(model, 0.1), **fastest_on(device, "adamw", {"lr": 1e-4}))
    x, y = random_batch(config, batch, device, seed=1)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    t0 = time.perf_counter()
    for i in range(warmup + steps):
        if i == warmup:
            synchronize(device)
            start = time.perf_counter()
        loss = train_step(runner, opt, x, y, autocast(device, device.type == "cuda"))
    synchronize(device)
    tokens_per_s = steps * batch * config.block_size / (time.perf_counter() - start)
    memory = f"{gib(torch.cuda.max_memory_allocated(device)):.1f}" if device.type == "cuda" else "n/a"
    return (tokens_per_s, mfu(tokens_per_s, model.flops_per_token(), peak_flops(device_name(device))), memory,
            loss.item(), start - t0)


def part_speed(plan, device, workdir):
    rows = []
    for name, cfg in plan.speed_models.items():
        modes = [False] + ([True] if plan.compile and device.type == "cuda" and name in plan.speed_compiled else [])
        for compiled in modes:
            what = f"{name} {'compiled' if compiled else 'eager'}: tokens/s, MFU, peak GiB"
            shape = f"{plan.speed_steps} steps of {plan.speed_batch} x {cfg.block_size}"
            try:   # one size out of memory does not hide the others
                tokens_per_s, utilisation, memory, loss, warmup_s = train_speed(
                    cfg, device, plan.speed_batch, plan.speed_steps, plan.speed_warmup, compiled)
            except Exception as err:
                rows.append((f"{what} ({shape})", f"{type(err).__name__}: {first_line(err, 100)}", "finite loss",
                             False))
            else:
                shape += f"; compile + warm-up {warmup_s:.0f} s" if compiled else ""
                rows.append((f"{what} ({shape})", f"{tokens_per_s:,.0f}, {percent(utilisation)}, {memory}",
                             "finite loss", math.isfinite(loss)))
            release(device)
    return rows
