"""Part 6: tokens/s, MFU and peak memory per model size (bf16 AdamW steps on random tokens), eager, and compiled
for the sizes the plan names."""

import math

import torch

from merit_repro.optim import build, fastest_on, param_groups
from merit_repro.train.hardware import mfu, peak_flops
from merit_repro.train.timing import autocast, device_name, time_steps

from .common import accumulated_step, first_line, gib, new_model, percent, random_batch, release


def train_speed(config, device, batch, steps, warmup, compiled):
    """(tokens/s, MFU, peak GiB, final loss, seconds of the warm-up steps) of bf16 AdamW steps on random tokens."""
    model = new_model(config, device)
    runner = torch.compile(model) if compiled else model
    opt = build("adamw", param_groups(model, 0.1), **fastest_on(device, "adamw", {"lr": 1e-4}))
    x, y = random_batch(config, batch, device, seed=1)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    timed = time_steps(lambda: accumulated_step(runner, model, opt, [(x, y)], autocast(device, device.type == "cuda")),
                       steps, device, warmup)
    tokens_per_s = batch * config.block_size / timed.seconds_per_step
    loss = timed.result
    memory = f"{gib(torch.cuda.max_memory_allocated(device)):.1f}" if device.type == "cuda" else "n/a"
    return (tokens_per_s, mfu(tokens_per_s, model.flops_per_token(), peak_flops(device_name(device))), memory,
            loss.item(), timed.warmup_seconds)


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
