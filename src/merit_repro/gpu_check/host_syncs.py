"""Part 4: host synchronisations in MERIT's and LAMB's multi-tensor steps and in the trainer's gradient clipping
(none allowed), and those steps' times against AdamW's (reported); with torch.compile, the compiled steps
(``torch.compile(opt.step)``, a tensor lr): they compile, agree with the eager steps, and their times."""

import time

import torch

from merit_repro.optim import build, fastest_on, param_groups

from merit_repro.train.timing import synchronize, time_steps

from .common import PAPER_HP, first_line, new_model, params

COMPILED_TOLERANCE = 1e-5   # fp32 rounding of the fused kernels over 3 steps (max-norms are exact); a bug is O(1)


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


def step_seconds(step, device, repeats=10):
    return time_steps(step, repeats, device).seconds_per_step   # the first call allocates the state, untimed


def twin_params(model):
    """Copies of the model's parameters with their gradients, for an optimizer of their own."""
    twins = []
    for p in model.parameters():
        twins.append(torch.nn.Parameter(p.detach().clone()))
        twins[-1].grad = p.grad.clone()
    return twins


def compiled_step(name, model, device, steps=3):
    """(seconds per ``torch.compile(opt.step)`` call, seconds its first ``steps`` calls took (compilation), its
    largest relative difference from the eager step's parameters after those steps) for the optimizer on copies of
    the model's parameters, after an eager step of both that allocates their state (one graph to compile)."""
    hparams = {**PAPER_HP, "lr": torch.tensor(PAPER_HP["lr"], device=device)}
    eager, compiled = (build(name, twin_params(model), **hparams) for _ in range(2))
    eager.step()
    compiled.step()
    step = torch.compile(compiled.step)
    synchronize(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        eager.step()
        step()
    synchronize(device)
    compile_seconds = time.perf_counter() - t0
    pairs = zip(eager.param_groups[0]["params"], compiled.param_groups[0]["params"])
    difference = max(((a - b).norm() / a.norm().clamp_min(1e-12)).item() for a, b in pairs)
    return step_seconds(step, device), compile_seconds, difference


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
    times = {name: step_seconds(build(name, param_groups(model, 0.1),
                                      **fastest_on(device, name, dict(PAPER_HP))).step, device)
             for name in ("adamw", "lamb", "merit")}
    adamw = f"{'fused ' if device.type == 'cuda' else ''}AdamW"
    for name in ("merit", "lamb"):
        rows.append((f"{name} step vs {adamw} ({shapes})",
                     f"{times[name] / times['adamw']:.2f}x ({times[name] * 1e3:.1f} vs {times['adamw'] * 1e3:.1f} ms)",
                     "reported", True))
    for name in ("merit", "lamb") if plan.compile else ():
        what = (f"{name} compiled step (torch.compile(opt.step), tensor lr) vs {adamw} ({shapes}); its parameters vs "
                "the eager step's after 3 steps")
        try:
            seconds, compile_seconds, difference = compiled_step(name, model, device)
        except Exception as err:   # e.g. Dynamo refusing the step on this torch
            rows.append((what, f"{type(err).__name__}: {first_line(err, 100)}", "compiles", False))
            continue
        rows.append((what, f"{seconds / times['adamw']:.2f}x ({seconds * 1e3:.1f} vs {times['adamw'] * 1e3:.1f} ms; "
                     f"compiled in {compile_seconds:.0f} s); relative difference {difference:.1e}",
                     f"compiles; difference <= {COMPILED_TOLERANCE:g}", difference <= COMPILED_TOLERANCE))
    return rows
