"""Part 4: host synchronisations in MERIT's and LAMB's multi-tensor steps and in the trainer's gradient clipping
(none allowed), and those steps' times against AdamW's (reported)."""

import time

import torch

from merit_repro.optim import build, fastest_on, param_groups

from .common import PAPER_HP, first_line, new_model, params, synchronize


def host_sync(fn, device):
    """None when fn() runs without synchronising with the host; else what did. On CUDA the verdict is
    torch.cuda.set_sync_debug_mode("error")'s; the ops named come from merit_repro.optim.dispatch_count,
    which on the CPU is the verdict too (the same rule: a read-back or a host-to-device copy)."""
    from merit_repro.optim.dispatch_count import DispatchCounter

    error = None
    if device.type == "cuda":
        synchronize(device)
        torch.cuda.set_sync_debug_mode("error")
        try:
            fn()
        except RuntimeError as err:
            error = first_line(err, 80)
        finally:
            torch.cuda.set_sync_debug_mode(0)
        if error is None:
            return None
    with DispatchCounter() as counter:
        fn()
    ops = ", ".join(f"{op} x{n}" for op, n in sorted(counter.transfers_by_op.items()))
    if device.type == "cuda":
        return f"{error} ({ops or 'ops not identified'})"
    return ops or None


def step_seconds(opt, device, repeats=10):
    opt.step()   # state allocated outside the timing
    synchronize(device)
    t0 = time.perf_counter()
    for _ in range(repeats):
        opt.step()
    synchronize(device)
    return (time.perf_counter() - t0) / repeats


def part_host_syncs(plan, device, workdir):
    model = new_model(plan.sync_model, device)
    for p in model.parameters():
        p.grad = torch.randn_like(p) * 1e-3
    shapes = params(model)
    rows = []
    for name in ("merit", "lamb"):
        opt = build(name, param_groups(model, 0.1), **{**PAPER_HP, "foreach": True})
        opt.step()   # state allocated outside the check, as after a run's first step
        for diagnostics in (False, True):
            opt.track_diagnostics = diagnostics
            found = host_sync(opt.step, device)
            rows.append((f"{name} multi-tensor step ({shapes}), diagnostics {'on' if diagnostics else 'off'}: "
                         "no host sync", found or "none", "none", found is None))
    found = host_sync(lambda: torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0), device)
    rows.append(("the trainer's clip_grad_norm_(1.0): no host sync", found or "none", "none", found is None))
    times = {name: step_seconds(build(name, param_groups(model, 0.1), **fastest_on(device, name, dict(PAPER_HP))),
                                device) for name in ("adamw", "lamb", "merit")}
    for name in ("merit", "lamb"):
        rows.append((f"{name} step vs {'fused ' if device.type == 'cuda' else ''}AdamW ({shapes})",
                     f"{times[name] / times['adamw']:.2f}x ({times[name] * 1e3:.1f} vs {times['adamw'] * 1e3:.1f} ms)",
                     "reported", True))
    return rows
