"""Check a CUDA machine before spending GPU-hours on the paper's grid (scripts/gpu_check.sh).

    python -m merit_repro.gpu_check [--steps 30] [--batch 16] [--out gpu_check.json] [--device cpu]

1. The optimizers on the device against the float64 reference (tests/optim_reference.py): the
   multi-tensor and per-tensor paths with fp32 parameters, both paths against each other, and bf16
   parameters against fp32.
2. GPT-2 Small trained for a few dozen steps in bf16, eager and with torch.compile: tokens/s, MFU
   against the device's peak (merit_repro.hardware), peak memory.
3. One optimizer step on GPT-2 Small's parameters: MERIT and LAMB against fused AdamW.
4. The MAL probe on GPT-2 Small (finite, one value per layer and head).
5. Micro-batch fitting for GPT-2 Small at the paper's batch of 480 sequences per device.

It prints a table and exits 1 if any check fails; without a GPU it says so and exits 0. Every check
also runs on the CPU (``--device cpu``, slow; the tests use small sizes), so only what needs CUDA is
left to a CUDA machine. About 3 minutes on one H100.
"""

import argparse
import contextlib
import json
import math
import sys
import time
from pathlib import Path

import torch

from .hardware import mfu, peak_flops
from .model import GPT, GPTConfig
from .optim import build, fastest_on, param_groups
from .utils import cli

REPO = Path(__file__).resolve().parents[2]
OPTIMIZERS = ("merit", "lamb", "maxlamb", "merit_noclip", "merit_nofloor", "merit_noelementwise")
REFERENCE_KIND = {"merit": ("merit", {}), "lamb": ("lamb", {}), "maxlamb": ("merit", {"elementwise": False, "clip": False}),
                  "merit_noclip": ("merit", {"clip": False}), "merit_nofloor": ("merit", {"weight_floor": False}),
                  "merit_noelementwise": ("merit", {"elementwise": False})}
HP = dict(lr=3e-2, betas=(0.9, 0.95), eps=1e-6, weight_decay=0.1)


def reference_step():
    sys.path.insert(0, str(REPO / "tests"))
    from optim_reference import reference_step as step

    return step


def problem(steps, scale=1, seed=0):
    """Weights and gradients covering many chunks, zero rows and a 3-D tensor, in float64."""
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
    opt = build(name, list(params.values()), foreach=foreach, **HP)
    for g in grads:
        for n, p in params.items():
            p.grad = g[n].to(device, dtype)
        opt.step()
    return {n: p.detach().double().cpu() for n, p in params.items()}


def relative_error(a, b):
    return max(((a[n] - b[n]).norm() / max(b[n].norm().item(), 1e-12)).item() for n in b)


def check_optimizers(device, steps=20, scale=1):
    """Rows (check, value, limit, ok) for every optimizer on the device (tensors 1/scale of the size)."""
    step = reference_step()
    weights, grads = problem(steps, scale)
    rows = []
    for name in OPTIMIZERS:
        kind, switches = REFERENCE_KIND[name]
        reference = {}
        for n, w in weights.items():
            w, m, v = w.clone(), torch.zeros_like(w), torch.zeros_like(w)
            for t, g in enumerate(grads):
                w, m, v = step(kind, w, g[n], m, v, t + 1, lr=HP["lr"], beta1=HP["betas"][0], beta2=HP["betas"][1],
                               eps=HP["eps"], weight_decay=HP["weight_decay"], **switches)
            reference[n] = w
        multi = run_optimizer(name, weights, grads, device, torch.float32, foreach=True)
        single = run_optimizer(name, weights, grads, device, torch.float32, foreach=False)
        bf16 = run_optimizer(name, weights, grads[:5], device, torch.bfloat16, foreach=None)
        fp32_5 = run_optimizer(name, weights, grads[:5], device, torch.float32, foreach=None)
        rows += [(f"{name}: multi-tensor fp32 vs float64 reference", relative_error(multi, reference), 1e-4),
                 (f"{name}: per-tensor fp32 vs float64 reference", relative_error(single, reference), 1e-4),
                 (f"{name}: multi-tensor vs per-tensor", relative_error(multi, single), 1e-5),
                 (f"{name}: bf16 parameters vs fp32 after 5 steps", relative_error(bf16, fp32_5), 3e-2)]
    return [(check, value, limit, bool(value <= limit)) for check, value, limit in rows]


def autocast(device):
    return torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else contextlib.nullcontext()


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train_speed(config, device, batch, steps, compile_model):
    """(tokens/s, MFU, peak memory in GiB, final loss) of a few bf16 AdamW steps on random tokens."""
    torch.manual_seed(0)
    model = GPT(config).to(device)
    runner = torch.compile(model) if compile_model else model
    opt = build("adamw", param_groups(model, 0.1), **fastest_on(device, "adamw", {"lr": 1e-4}))
    x = torch.randint(0, config.vocab_size, (batch, config.block_size), device=device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    warmup = max(3, steps // 5)
    for i in range(steps):
        if i == warmup:
            synchronize(device)
            start = time.perf_counter()
        with autocast(device):
            _, loss = runner(x, x)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    synchronize(device)
    tokens_per_s = (steps - warmup) * batch * config.block_size / (time.perf_counter() - start)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    memory = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else float("nan")
    return tokens_per_s, mfu(tokens_per_s, model.flops_per_token(), peak_flops(name)), memory, loss.item()


def step_times(config, device, repeats=10):
    """Seconds per optimizer step on the model's parameters: fused AdamW, LAMB, MERIT."""
    model = GPT(config).to(device)
    for p in model.parameters():
        p.grad = torch.randn_like(p) * 1e-3
    times = {}
    for name in ("adamw", "lamb", "merit"):
        opt = build(name, param_groups(model, 0.1), **fastest_on(device, name, {"lr": 1e-4}))
        opt.step()   # state allocated outside the timing
        synchronize(device)
        start = time.perf_counter()
        for _ in range(repeats):
            opt.step()
        synchronize(device)
        times[name] = (time.perf_counter() - start) / repeats
    return times


def mal_probe(config, device):
    torch.manual_seed(0)
    model = GPT(config).to(device)
    x = torch.randint(0, config.vocab_size, (4, config.block_size), device=device)
    mal, wq, wk = model.probe_attention(x)
    return mal.shape == (config.n_layer, config.n_head) and bool(torch.isfinite(mal).all()), float(mal.max())


def micro_batch(config, device, per_device_batch):
    from .cell import CellConfig
    from .train import fit_micro_batch

    model = GPT(config).to(device)
    cfg = CellConfig(block_size=config.block_size, batch_size=per_device_batch)
    return fit_micro_batch(cfg, model, per_device_batch, device, autocast(device) if device.type == "cuda" else None)


def run(device, config, steps, batch, per_device_batch, compiled_too=True, scale=1):
    rows = [(check, f"{value:.2e}", f"<= {limit:g}", ok) for check, value, limit, ok in check_optimizers(device, scale=scale)]
    for compiled in (False, True) if compiled_too else (False,):
        label = "compiled" if compiled else "eager"
        tokens_per_s, utilisation, memory, loss = train_speed(config, device, batch, steps, compiled)
        rows.append((f"GPT-2 Small {label}: tokens/s, MFU, peak GiB",
                     f"{tokens_per_s:,.0f}, {utilisation if utilisation is None else f'{utilisation:.1%}'}, {memory:.1f}",
                     "finite loss", math.isfinite(loss)))
    times = step_times(config, device)
    for name in ("lamb", "merit"):
        rows.append((f"{name} step vs fused AdamW", f"{times[name] / times['adamw']:.2f}x "
                     f"({times[name] * 1e3:.1f} vs {times['adamw'] * 1e3:.1f} ms)", "reported", True))
    ok, peak = mal_probe(config, device)
    rows.append(("MAL probe: finite, one per layer and head", f"max {peak:.2f}", "finite", ok))
    fitted = micro_batch(config, device, per_device_batch)
    rows.append((f"micro-batch fitted for {per_device_batch} sequences per device", str(fitted),
                 f"divides {per_device_batch}", per_device_batch % fitted == 0))
    return rows


@cli
def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m merit_repro.gpu_check", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu (slow; for testing the check)")
    parser.add_argument("--steps", type=int, default=30, help="training steps per speed measurement")
    parser.add_argument("--batch", type=int, default=16, help="sequences per training step")
    parser.add_argument("--per-device-batch", type=int, default=240, help="for the micro-batch fit (480 on 2 GPUs)")
    parser.add_argument("--model", default="gpt2-small")
    parser.add_argument("--block-size", type=int, default=1024)
    parser.add_argument("--out", type=Path, default=None, help="also write the table as JSON")
    args = parser.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA device is visible: nothing to check here (run this on a GPU machine)")
        return 0
    device = torch.device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"# merit_repro.gpu_check on {name}, torch {torch.__version__}, CUDA {torch.version.cuda}", flush=True)
    config = GPTConfig.named(args.model, block_size=args.block_size)
    rows = run(device, config, args.steps, args.batch, args.per_device_batch)
    width = max(len(r[0]) for r in rows)
    for check, value, limit, ok in rows:
        print(f"{'ok  ' if ok else 'FAIL'} {check:<{width}}  {value}  ({limit})")
    if args.out:
        args.out.write_text(json.dumps([dict(zip(("check", "value", "limit", "ok"), r)) for r in rows], indent=1))
    failed = [r for r in rows if not r[3]]
    print(f"{len(rows) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
