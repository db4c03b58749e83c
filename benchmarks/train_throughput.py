"""Our trainer against a plain loop at the same cell, in one process on the CPU.

    python benchmarks/train_throughput.py [--steps 80] [--model demo-tiny] [--block-size 64] [--batch-size 8]
        [--optimizer merit] [--log-every 3] [--mal-every 1000000] [--repeats 5] [--cpu-time]

The trainer runs a cell on the Shakespeare bytes corpus (prepared under results/data if missing), evaluating only
at its first and last step and never checkpointing; the plain loop (``merit_repro.gpu_check.plain_loop``, part 8's
yardstick) then trains that cell's model, micro-batch, optimizer and clipping on one fixed batch, nothing else.
Both use one thread and time their steps alike: the first excluded. Prints, per repeat and as medians, the
trainer's tokens/s by its own clock (which leaves out probes, evaluation and records), the plain loop's and their
ratio, and where the trainer's other seconds went. On a shared machine the wall clock measures the neighbours as
much as the code: --cpu-time reads this process's CPU time instead.
"""

import argparse
import contextlib
import io
import statistics
import tempfile
import time
from pathlib import Path

import torch

from merit_repro.data.tokens import prepare
from merit_repro.gpu_check.plain_loop import plain_loop
from merit_repro.plan.cell import CellConfig
from merit_repro.train.loop import Run


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--model", default="demo-tiny")
    parser.add_argument("--block-size", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--optimizer", default="merit")
    parser.add_argument("--log-every", type=int, default=3)
    parser.add_argument("--mal-every", type=int, default=10**6)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--cpu-time", action="store_true", help="time by this process's CPU time, not the wall clock")
    args = parser.parse_args()
    clock = time.process_time if args.cpu_time else time.perf_counter   # the trainer's and the plain loop's
    torch.set_num_threads(1)
    data_dir = Path("results/data/shakespeare-bytes")
    prepare("shakespeare", "bytes", data_dir)
    cfg = CellConfig(data_dir=str(data_dir), model=args.model, block_size=args.block_size, batch_size=args.batch_size,
                     tokens=args.steps * args.batch_size * args.block_size, optimizer=args.optimizer, lr=1e-3,
                     eval_every=10**9, eval_tokens=8 * args.block_size, mal_every=args.mal_every,
                     log_every=args.log_every, checkpoint_every=10**9, device="cpu")
    print(f"{args.model}, {args.batch_size} x {args.block_size}, {args.optimizer}, {args.steps} steps, log every "
          f"{args.log_every}, MAL probe every {args.mal_every}, 1 thread, {'CPU' if args.cpu_time else 'wall'} time")
    ours, plain = [], []
    for repeat in range(args.repeats):
        with tempfile.TemporaryDirectory() as out, contextlib.redirect_stdout(io.StringIO()):
            t0 = clock()
            summary = Run(cfg, out, clock=clock).run()
            total = clock() - t0
        ours.append(summary["tokens_per_s"])
        plain.append(plain_loop(summary, torch.device("cpu"), args.steps, threads=1, clock=clock)["tokens_per_s"])
        beside = {k: summary[f"{k}_seconds"] for k in ("startup", "eval", "mal_probe", "checkpoint")}
        beside["set-up, records, files"] = total - summary["train_seconds"] - sum(beside.values())
        print(f"  {repeat + 1}: trainer {ours[-1]:,.0f} tok/s, plain loop {plain[-1]:,.0f}, ratio "
              f"{ours[-1] / plain[-1]:.3f}; beside the trainer's {summary['train_seconds']:.2f} s clock: "
              + ", ".join(f"{k} {v:.2f} s" for k, v in beside.items()))
    ours, plain = statistics.median(ours), statistics.median(plain)
    print(f"medians: trainer {ours:,.0f} tok/s, plain loop {plain:,.0f} tok/s, ratio {ours / plain:.3f}")


if __name__ == "__main__":
    main()
