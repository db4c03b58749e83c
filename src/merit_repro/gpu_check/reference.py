"""Part 7: every MERIT and LAMB of the registry on the device against the float64 reference (``optim_reference``),
through both code paths and with bf16 parameters, and the MAL probe on GPT-2 Small."""

import torch

from merit_repro.config.registry import OPTIMIZERS
from merit_repro.optim import build

from merit_repro.train.timing import autocast

from .common import new_model, random_batch
from .optim_reference import reference_step, variants

# name -> (reference kind, switches): every MERIT and LAMB of the registry (all but adamw), in its order
REFERENCE_KIND = variants(OPTIMIZERS)
HP = dict(lr=3e-2, betas=(0.9, 0.95), eps=1e-6, weight_decay=0.1)
CHUNK_NUMEL = 64   # small chunks, so that these small tensors span many, as GPT-2's do at the default chunk size


def problem(steps, scale=1, seed=0):
    """Weights and gradients with zero rows and a 3-D tensor, in float64 (many chunks of CHUNK_NUMEL)."""
    gen = torch.Generator().manual_seed(seed)
    shapes = {"embedding": (512 // scale, 96 // scale), "matrix": (96 // scale, 384 // scale), "cube": (12, 8, 4),
              "vector": (96 // scale,)}
    weights = {n: torch.randn(s, generator=gen, dtype=torch.float64) * 0.1 for n, s in shapes.items()}
    grads = [{n: torch.randn(s, generator=gen, dtype=torch.float64) for n, s in shapes.items()} for _ in range(steps)]
    for g in grads:
        g["embedding"][::7] = 0   # rows without gradient, as for unused token embeddings
    return weights, grads


def run_optimizer(name, weights, grads, device, dtype, foreach):
    params = {n: torch.nn.Parameter(w.to(device, dtype)) for n, w in weights.items()}
    opt = build(name, list(params.values()), foreach=foreach, chunk_numel=CHUNK_NUMEL, **HP)
    for g in grads:
        for n, p in params.items():
            p.grad = g[n].to(device, dtype)
        opt.step()
    return {n: p.detach().double().cpu() for n, p in params.items()}


def relative_error(a, b):
    return max(((a[n] - b[n]).norm() / max(b[n].norm().item(), 1e-12)).item() for n in b)


CHECKS = (("multi-tensor fp32 vs float64 reference", 1e-4), ("per-tensor fp32 vs float64 reference", 1e-4),
          ("multi-tensor vs per-tensor", 1e-5), ("bf16 parameters vs fp32 after 5 steps", 3e-2))


def optimizer_errors(device, steps=20, scale=1):
    """{check: {optimizer: relative error}} for every optimizer on the device (tensors 1/scale of the size)."""
    weights, grads = problem(steps, scale)
    errors = {check: {} for check, _ in CHECKS}
    for name, (kind, switches) in REFERENCE_KIND.items():
        reference = {}
        for n, w in weights.items():
            w, m, v = w.clone(), torch.zeros_like(w), torch.zeros_like(w)
            for t, g in enumerate(grads):
                w, m, v = reference_step(kind, w, g[n], m, v, t + 1, lr=HP["lr"], beta1=HP["betas"][0],
                                         beta2=HP["betas"][1], eps=HP["eps"], weight_decay=HP["weight_decay"],
                                         **switches)
            reference[n] = w
        multi = run_optimizer(name, weights, grads, device, torch.float32, foreach=True)
        single = run_optimizer(name, weights, grads, device, torch.float32, foreach=False)
        bf16 = run_optimizer(name, weights, grads[:5], device, torch.bfloat16, foreach=None)
        fp32_5 = run_optimizer(name, weights, grads[:5], device, torch.float32, foreach=None)
        pairs = ((multi, reference), (single, reference), (multi, single), (bf16, fp32_5))
        for (check, _), (a, b) in zip(CHECKS, pairs):
            errors[check][name] = relative_error(a, b)
    return errors


def check_optimizers(device, steps=20, scale=1):
    """One row per check over every optimizer: the largest relative error, and which optimizers fail."""
    errors = optimizer_errors(device, steps, scale)
    rows = []
    for check, limit in CHECKS:
        by_name = errors[check]
        worst = max(by_name, key=by_name.get)
        failed = [n for n, e in by_name.items() if not e <= limit]
        rows.append((f"{check}: {len(by_name)} optimizers (MERIT, LAMB, ablations)",
                     f"max {by_name[worst]:.2e} ({worst})" + (f"; over: {', '.join(failed)}" if failed else ""),
                     f"<= {limit:g}", not failed))
    return rows


def mal_probe(config, device):
    model = new_model(config, device)
    x, _ = random_batch(config, 4, device, seed=1)
    with autocast(device, device.type == "cuda"):
        mal, wq, wk = model.probe_attention(x)
    ok = mal.shape == (config.n_layer, config.n_head) and bool(torch.isfinite(mal).all())
    return [("MAL probe (bf16 autocast on CUDA): finite, one value per layer and head",
             f"{tuple(mal.shape)}, max {float(mal.max()):.2f}", f"({config.n_layer}, {config.n_head}), finite", ok)]


def part_reference(plan, device, workdir):
    return check_optimizers(device, plan.optimizer_steps, plan.optimizer_scale) + mal_probe(plan.mal_model, device)
