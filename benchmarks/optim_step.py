"""Time and count one optimizer step on GPT-2 Small shapes (124M params, fp32) for AdamW, LAMB and MERIT.

    python benchmarks/optim_step.py [--device cpu] [--repeats 5]

Prints, per optimizer and path, the median step time and its ratio to torch AdamW (foreach), the
aten operators dispatched per step and their ratio to AdamW's, and the host transfers per step
(syncs and host<->device copies, merit_repro.optim.dispatch_count). Paths: ``default`` is
foreach=None (the chunked per-tensor path on the CPU, the multi-tensor path on CUDA), ``foreach``
the multi-tensor path. On the CPU every tensor stands for a device tensor, so AdamW's host
transfers there are its ``.item()`` reads of the step counters it keeps on the host (none on CUDA),
and MERIT's multi-tensor path takes abs + amax where CUDA takes one vector_norm (150 more operators).

Targets: MERIT and LAMB operators per step <= 10x AdamW (foreach) on the multi-tensor path;
0 host transfers on both paths; CPU time no worse than before this count (MERIT 0.83-0.91x
AdamW foreach on a 2-core CPU); on CUDA (issue 2) MERIT <= 1.5x AdamW, LAMB <= 1.3x AdamW.
"""

import argparse
import statistics
import time

import torch

from merit_repro.models import GPT, GPTConfig
from merit_repro.optim import build, param_groups
from merit_repro.optim.dispatch_count import count_step


def time_steps(opt, repeats, device):
    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()
    opt.step()  # state allocation outside the timing
    times = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        opt.step()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--model", default="gpt2-small")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--optimizers", default="adamw,lamb,merit")
    parser.add_argument("--paths", default="default,foreach", help="default (foreach=None), foreach (multi-tensor)")
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)
    model = GPT(GPTConfig.named(args.model)).to(device)
    for p in model.parameters():
        p.grad = torch.randn_like(p) * 1e-3
    n_params = sum(p.numel() for p in model.parameters())
    print(f"{args.model}: {n_params / 1e6:.1f}M params, fp32, {device}, threads={torch.get_num_threads()}")
    host = torch.device("cpu") if device.type != "cpu" else None
    runs = []   # (optimizer, path, foreach)
    for name in args.optimizers.split(","):
        if name == "adamw":
            runs.append((name, "foreach", True))
            continue
        for path in args.paths.split(","):
            if path == "default" and device.type == "cuda" and "foreach" in args.paths:
                continue   # the default on CUDA is the multi-tensor path
            runs.append((name, path, {"default": None, "foreach": True}[path]))
    results = {}
    for name, path, foreach in runs:
        opt = build(name, param_groups(model, 0.1), lr=1e-3, betas=(0.9, 0.95), foreach=foreach)
        seconds = time_steps(opt, args.repeats, device)
        counter = count_step(opt, host)
        results[name, path] = seconds, counter.ops, counter.host_transfers
        del opt
    base_seconds, base_ops, _ = results.get(("adamw", "foreach"), (None, None, None))
    header = f"{'optimizer':<12}{'path':<10}{'step ms':>9}{'x AdamW':>9}{'ops/step':>10}{'x AdamW':>9}"
    print(f"{header}{'host transfers':>16}")
    for (name, path), (seconds, ops, transfers) in results.items():
        time_ratio = f"{seconds / base_seconds:.2f}" if base_seconds else "-"
        ops_ratio = f"{ops / base_ops:.2f}" if base_ops else "-"
        print(f"{name:<12}{path:<10}{seconds * 1e3:>9.1f}{time_ratio:>9}{ops:>10}{ops_ratio:>9}{transfers:>16}")


if __name__ == "__main__":
    main()
