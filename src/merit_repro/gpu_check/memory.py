"""Part 5: the trainer's micro-batch fit for GPT-2 Small at the paper's batch per GPU, then real MERIT steps at the
fitted size with gradient accumulation: no OOM, and peak memory within the limit the fit assumed."""

import math

import torch

from merit_repro.optim import build, fastest_on, param_groups
from merit_repro.train.hardware import mfu, peak_flops
from merit_repro.train.timing import autocast, device_name, time_steps

from .common import PAPER_HP, accumulated_step, first_line, gib, new_model, params, percent


def part_memory(plan, device, workdir):
    from merit_repro.train.memory import HEADROOM, fit_micro_batch

    cfg, batch = plan.fit_model, plan.fit_batch
    model = new_model(cfg, device)
    ac = autocast(device, device.type == "cuda")
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        limit = (1 - HEADROOM) * (free + torch.cuda.memory_reserved(device))   # as fit_micro_batch computes it
    micro = fit_micro_batch(model, batch, cfg.block_size, device, ac, plan.fit_world_size,
                            log=lambda message: print(f"[gpu_check]   {message}", flush=True))
    accum = batch // micro
    rows = [(f"micro-batch fitted for {batch} sequences x {cfg.block_size} tokens per device "
             f"({params(model)}, DDP of {plan.fit_world_size} counted)", f"{micro} x {accum} "
             "accumulation", f"divides {batch}", batch % micro == 0)]
    opt = build("merit", param_groups(model, PAPER_HP["weight_decay"]), **fastest_on(device, "merit", dict(PAPER_HP)))
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    losses = []

    def step():   # fresh tokens each micro-batch, as a real batch would be
        micro_batches = [tuple(torch.randint(0, cfg.vocab_size, (micro, cfg.block_size), device=device) for _ in range(2))
                         for _ in range(accum)]
        losses.append(accumulated_step(model, model, opt, micro_batches, ac, grad_clip=1.0))

    oom, timed = None, None
    try:   # the first step untimed (allocation, warm-up), as the trainer's tokens/s leaves its start-up out
        timed = time_steps(step, plan.fit_steps - 1, device, warmup=1)
    except torch.OutOfMemoryError as err:
        oom = first_line(err, 100)
    tokens_per_s = batch * cfg.block_size / timed.seconds_per_step if timed else None
    finite = oom is None and all(math.isfinite(v) for v in torch.stack(losses).float().tolist())
    what = f"{plan.fit_steps} MERIT steps of {accum} x {micro} sequences"
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device)
        buckets = sum(p.numel() * p.element_size() for p in model.parameters()) if plan.fit_world_size > 1 else 0
        rows.append((f"{what}: no OOM, peak (+ DDP buckets) within the fit's limit",
                     oom or f"peak {gib(peak):.1f} GiB (+{gib(buckets):.1f}) of {gib(total):.0f} GiB",
                     f"<= {gib(limit):.1f} GiB (the fit's limit: {1 - HEADROOM:.0%} of free + cached)",
                     oom is None and peak + buckets <= limit))
    else:
        rows.append((f"{what}: no OOM", oom or "none (CPU: peak memory not measured)", "no OOM", oom is None))
    utilisation = mfu(tokens_per_s, model.flops_per_token(), peak_flops(device_name(device)))
    rows.append((f"{what}: finite loss; tokens/s, MFU (eager {'bf16' if device.type == 'cuda' else 'fp32'})",
                 f"{tokens_per_s or 0:,.0f} tok/s, MFU {percent(utilisation)}", "finite loss", finite))
    return rows
