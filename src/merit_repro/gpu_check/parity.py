"""Part 2: bf16 autocast and torch.compile parity. GPT-2 Small trained a few AdamW steps on one fixed batch from
the same weights, three ways (bf16 eager, bf16 compiled, fp32): the losses agree at every step and fall."""

import math
import time

import torch

from merit_repro.optim import build, fastest_on, param_groups
from merit_repro.train.timing import autocast, synchronize

from .common import accumulated_step, new_model, random_batch

COMPILE_TOLERANCE = 0.02   # nats, |loss compiled - loss eager| at every step (both bf16; the loss is about 10)
BF16_TOLERANCE = 0.05      # nats, |loss bf16 autocast - loss fp32| at every step


def train_losses(config, device, batch, steps, bf16, compiled):
    """Losses of `steps` AdamW steps on one fixed batch from seed 0's weights, and the first step's seconds."""
    model = new_model(config, device)
    runner = torch.compile(model) if compiled else model
    opt = build("adamw", param_groups(model, 0.1), **fastest_on(device, "adamw", {"lr": 1e-3}))
    x, y = random_batch(config, batch, device, seed=1)
    losses, first_step = [], None
    t0 = time.perf_counter()
    for _ in range(steps):
        losses.append(accumulated_step(runner, model, opt, [(x, y)], autocast(device, bf16)))
        if first_step is None:
            synchronize(device)
            first_step = time.perf_counter() - t0
    return torch.stack(losses).float().tolist(), first_step


def judge_parity(eager, compiled, fp32, compile_seconds=None):
    """Rows comparing loss curves (lists, one loss per step; compiled None when not run)."""
    def gap(a, b):
        return max(abs(x - y) for x, y in zip(a, b)) if all(map(math.isfinite, a + b)) else math.inf

    curve = f"{eager[0]:.3f} -> {eager[-1]:.3f}"
    rows = [(f"bf16 eager: loss falls over {len(eager)} steps on one batch", curve, "last < first",
             math.isfinite(eager[-1]) and eager[-1] < eager[0])]
    if compiled is None:
        rows.append(("bf16 torch.compile vs bf16 eager: max |loss gap| per step", "not run (CPU or --quick)",
                     f"<= {COMPILE_TOLERANCE}", None))
    else:
        g = gap(compiled, eager)
        rows.append(("bf16 torch.compile vs bf16 eager: max |loss gap| per step",
                     f"{g:.2e} (compile + first step {compile_seconds:.1f} s)", f"<= {COMPILE_TOLERANCE}",
                     g <= COMPILE_TOLERANCE))
    g = gap(eager, fp32)
    rows.append(("bf16 autocast vs fp32: max |loss gap| per step", f"{g:.2e}", f"<= {BF16_TOLERANCE}",
                 g <= BF16_TOLERANCE))
    return rows


def part_parity(plan, device, workdir):
    cfg, batch, steps = plan.parity_model, plan.parity_batch, plan.parity_steps
    eager, _ = train_losses(cfg, device, batch, steps, bf16=True, compiled=False)
    compiled, seconds = (train_losses(cfg, device, batch, steps, bf16=True, compiled=True)
                         if plan.compile and device.type == "cuda" else (None, None))
    fp32, _ = train_losses(cfg, device, batch, steps, bf16=False, compiled=False)
    return [(f"{label} ({cfg.n_layer} layers, d {cfg.n_embd}, {batch} x {cfg.block_size} tokens)", *rest)
            for label, *rest in judge_parity(eager, compiled, fp32, seconds)]
