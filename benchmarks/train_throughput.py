"""Our trainer against a minimal nanoGPT-style loop on the same shapes, in one run.

    python benchmarks/train_throughput.py [--steps 60] [--model demo-small] [--optimizer adamw]

Both train the same model with the same optimizer and batch for the same number of steps on the
Shakespeare bytes corpus (prepared under results/data if missing). Ours runs the full trainer
(schedule, grad clip, metrics, the MAL probe every --mal-every steps, checkpoints), minus its
start-up and the validation passes. Prints tokens/s of each, the ratio (target >= 0.95x) and the
MAL probe's share of our training time.
"""

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from merit_repro.data.tokens import prepare
from merit_repro.models import GPT, GPTConfig
from merit_repro.optim import build, param_groups
from merit_repro.plan.cell import CellConfig
from merit_repro.train.loop import Run


def minimal_loop(cfg, train_bin, steps):
    """nanoGPT's loop: random windows from the memmap, forward, backward, clip, step."""
    torch.manual_seed(cfg.seed)
    model = GPT(GPTConfig.named(cfg.model, block_size=cfg.block_size, vocab_size=256))
    optimizer = build(cfg.optimizer, param_groups(model, cfg.weight_decay), **cfg.optimizer_kwargs())
    data = np.memmap(train_bin, dtype=np.uint8, mode="r")
    t0 = time.perf_counter()
    for step in range(steps):
        for g in optimizer.param_groups:
            g["lr"] = cfg.lr_at(step)
        ix = torch.randint(len(data) - cfg.block_size - 1, (cfg.batch_size,))
        x = torch.stack([torch.from_numpy(data[i:i + cfg.block_size].astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + cfg.block_size].astype(np.int64)) for i in ix])
        _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        loss.item()
    return steps * cfg.tokens_per_step / (time.perf_counter() - t0)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--model", default="demo-small")
    parser.add_argument("--block-size", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--optimizer", default="adamw")
    parser.add_argument("--mal-every", type=int, default=128)
    args = parser.parse_args()
    data_dir = Path("results/data/shakespeare-bytes")
    prepare("shakespeare", "bytes", data_dir)
    cfg = CellConfig(data_dir=str(data_dir), model=args.model, block_size=args.block_size, batch_size=args.batch_size,
                     tokens=args.steps * args.batch_size * args.block_size, optimizer=args.optimizer, lr=1e-3,
                     eval_every=10**9, mal_every=args.mal_every, checkpoint_every=10**9, device="cpu")
    minimal = minimal_loop(cfg, data_dir / "train.bin", args.steps)
    with tempfile.TemporaryDirectory() as out:
        run = Run(cfg, out)
        t0 = time.perf_counter()
        summary = run.run()
        wall = time.perf_counter() - t0 - summary["eval_seconds"]
    ours = summary["tokens"] / wall
    print(f"{args.model}, block {args.block_size}, batch {args.batch_size}, {args.optimizer}, {args.steps} steps, "
          f"{torch.get_num_threads()} threads")
    print(f"minimal loop : {minimal:,.0f} tokens/s")
    print(f"our trainer  : {ours:,.0f} tokens/s  (ratio {ours / minimal:.3f}x)")
    print(f"MAL probe    : {summary['mal_probe_seconds']:.3f} s = {100 * summary['mal_probe_seconds'] / wall:.2f}% "
          f"of training time, probing every {args.mal_every} steps")


if __name__ == "__main__":
    main()
