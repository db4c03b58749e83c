"""Time one optimizer step on GPT-2 Small shapes (124M params, fp32) for AdamW, LAMB and MERIT.

    python benchmarks/optim_step.py [--device cpu] [--repeats 5]

Prints the median step time of each optimizer and its ratio to torch AdamW (foreach).
Targets (issue 2): MERIT <= 1.5x AdamW, LAMB <= 1.3x AdamW.
"""

import argparse
import statistics
import time

import torch

from merit_repro.model import GPT, GPTConfig
from merit_repro.optim import build, param_groups


def time_steps(opt, params, repeats, device):
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
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)
    model = GPT(GPTConfig.named(args.model)).to(device)
    for p in model.parameters():
        p.grad = torch.randn_like(p) * 1e-3
    n_params = sum(p.numel() for p in model.parameters())
    print(f"{args.model}: {n_params / 1e6:.1f}M params, fp32, {device}, threads={torch.get_num_threads()}")
    results = {}
    for name in args.optimizers.split(","):
        hparams = dict(lr=1e-3, betas=(0.9, 0.95))
        if name == "adamw":
            hparams["foreach"] = True
        opt = build(name, param_groups(model, 0.1), **hparams)
        results[name] = time_steps(opt, model.parameters(), args.repeats, device)
        del opt
    base = results.get("adamw")
    print(f"{'optimizer':<12}{'step ms':>10}{'x AdamW':>10}")
    for name, seconds in results.items():
        ratio = f"{seconds / base:.2f}" if base else "-"
        print(f"{name:<12}{seconds * 1e3:>10.1f}{ratio:>10}")


if __name__ == "__main__":
    main()
