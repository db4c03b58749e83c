"""Time and count one optimizer step on GPT-2 Small's parameter shapes (fp32) for AdamW, LAMB and MERIT, eager and
under ``torch.compile(opt.step)``.

    python benchmarks/optim_step.py [--device cpu] [--repeats 5] [--full] [--paths default,compiled]
    python benchmarks/optim_step.py --threads 1 --clock cpu     # on a machine shared with other jobs

By default the widths (embedding, MLP, vocabulary, context) and the number of blocks are 1/4 of GPT-2 Small's:
GPT-2 Small's shapes at 1/16 of their elements, 21 tensors instead of 75 (3.8M parameters), so that the eager rows
take seconds and each compiled step about a minute to compile on 2 cores (inductor's time grows with the number of
tensors, not their size); ``--full`` takes GPT-2 Small itself (124M, minutes per compiled step on 2 cores).

Prints, per optimizer and path, the median step time and its ratio to torch AdamW (foreach), the aten operators
dispatched per step and their ratio to AdamW's, and the host transfers per step (syncs and host<->device copies,
merit_repro.optim.dispatch_count). Paths, old beside new:

- ``default``: foreach=None, eager (the multi-tensor path on CUDA; on the CPU, per group, the chunked per-tensor path
  where a tensor has several chunks, else the multi-tensor one);
- ``foreach``: the multi-tensor path, eager;
- ``compiled``: ``torch.compile(opt.step)`` (MERIT and LAMB take the multi-tensor path, fused by inductor into two
  kernels per tensor on the CPU: moments and statistics, then the update), after one eager step that allocates the
  state (so one graph compiles, not two), with the seconds its first two calls took (compilation; inductor's
  caches make a rerun's a few seconds). A compiled step dispatches no aten operators of its own but allocations,
  so its counts are left out; a step that fails to compile prints its error instead.

Before this path, a compiled step took the chunked per-tensor path on the CPU (its chunks unrolled into the graph:
MERIT 2x and LAMB 6x slower than now, minutes to compile) and did not compile on torch 2.11 (an attribute set in
``step``).

On the CPU every tensor stands for a device tensor, so AdamW's host transfers there are its ``.item()`` reads of
the step counters it keeps on the host (none on CUDA), and MERIT's multi-tensor path takes abs + amax where CUDA
takes one vector_norm (one more operator per statistic).

Targets: MERIT and LAMB operators per step <= 10x AdamW (foreach) on the multi-tensor path; 0 host transfers on
the eager paths; CPU time no worse than before; on CUDA (issue 2) MERIT <= 1.5x AdamW, LAMB <= 1.3x AdamW, which
the eager multi-tensor path misses (10.7 ms against fused AdamW's 1.38 ms on an H200) and the compiled step is for.
"""

import argparse
import statistics
import time

import torch

from merit_repro.models import GPT, GPTConfig
from merit_repro.optim import build, param_groups
from merit_repro.optim.dispatch_count import count_step
from merit_repro.train.timing import synchronize

FOREACH = {"default": None, "foreach": True, "compiled": None}
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def median_step_seconds(step, repeats, device, clock=time.perf_counter):
    """(median seconds of a step on the clock, wall seconds of the first two calls): state allocation and
    compilation untimed. The median of single steps, not merit_repro.train.timing.time_steps' mean over a run of
    them: an optimizer step is short enough for a neighbour's burst to land in one and be discarded."""
    synchronize(device)
    t0 = time.perf_counter()
    for _ in range(2):
        step()
    synchronize(device)
    warmup = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        synchronize(device)
        t0 = clock()
        step()
        synchronize(device)
        times.append(clock() - t0)
    return statistics.median(times), warmup


def model_config(args):
    config = GPTConfig.named(args.model)
    if args.full:
        return config
    s = args.scale
    return GPTConfig.named(args.model, n_embd=config.n_embd // s, vocab_size=config.vocab_size // s,
                           block_size=config.block_size // s, n_layer=max(1, config.n_layer // s))


def measure(name, path, model, args, device):
    """(seconds, compile seconds or None, operators, host transfers) of one optimizer on one path."""
    opt = build(name, param_groups(model, 0.1), lr=1e-3, betas=(0.9, 0.95), foreach=FOREACH[path])
    if path == "compiled":
        torch._dynamo.reset()
        opt.step()
        seconds, warmup = median_step_seconds(torch.compile(opt.step), args.repeats, device, CLOCKS[args.clock])
        return seconds, warmup, None, None
    seconds, _ = median_step_seconds(opt.step, args.repeats, device, CLOCKS[args.clock])
    counter = count_step(opt, torch.device("cpu") if device.type != "cpu" else None)
    return seconds, None, counter.ops, counter.host_transfers


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--model", default="gpt2-small")
    parser.add_argument("--full", action="store_true", help="the model's own widths (default: 1/--scale of them)")
    parser.add_argument("--scale", type=int, default=4,
                        help="divide widths, vocabulary, context and blocks by this")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None,
                        help="CPU threads (default torch's); 1 on a machine shared with other jobs, whose threads "
                             "otherwise wait on each other and time the machine's load, not the step")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                        help="cpu: this process's CPU time (all its threads), for the CPU on a shared machine, where "
                             "wall time counts the other jobs' turns too (compilation's worker processes not counted)")
    parser.add_argument("--optimizers", default="adamw,lamb,merit")
    parser.add_argument("--paths", default="default,foreach,compiled", help="default, foreach, compiled")
    args = parser.parse_args()
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = model_config(args)
    model = GPT(config).to(device)
    for p in model.parameters():
        p.grad = torch.randn_like(p) * 1e-3
    tensors = list(model.parameters())
    print(f"{args.model} shapes ({config.n_layer} blocks, n_embd {config.n_embd}, vocab {config.vocab_size}, context "
          f"{config.block_size}): {len(tensors)} tensors, {sum(p.numel() for p in tensors) / 1e6:.1f}M params, fp32, "
          f"{device}, threads={torch.get_num_threads()}, torch {torch.__version__}, {args.clock} clock")
    paths = args.paths.split(",")
    runs = []
    for name in args.optimizers.split(","):
        for path in paths:
            if path == "default" and device.type == "cuda" and "foreach" in paths:
                continue   # the default on CUDA is the multi-tensor path
            if name == "adamw" and path == "default" and "foreach" in paths:
                continue   # AdamW's baseline is its foreach path
            runs.append((name, path))
    results = {}
    for name, path in runs:
        try:
            results[name, path] = measure(name, path, model, args, device)
        except Exception as err:   # a step that does not compile on this torch is a row, not the end
            results[name, path] = f"{type(err).__name__}: {str(err).strip().splitlines()[0][:80]}"
    base = results.get(("adamw", "foreach"))
    base_seconds, _, base_ops, _ = base if isinstance(base, tuple) else (None, None, None, None)
    print(f"{'optimizer':<10}{'path':<10}{'step ms':>9}{'x AdamW':>9}{'ops/step':>10}{'x AdamW':>9}"
          f"{'host transfers':>16}{'compile s':>11}")
    for (name, path), result in results.items():
        if isinstance(result, str):
            print(f"{name:<10}{path:<10}  {result}")
            continue
        seconds, warmup, ops, transfers = result
        cells = [f"{seconds / base_seconds:.2f}" if base_seconds else "-",
                 "-" if ops is None else str(ops), f"{ops / base_ops:.2f}" if ops and base_ops else "-",
                 "-" if transfers is None else str(transfers), "-" if warmup is None else f"{warmup:.0f}"]
        print(f"{name:<10}{path:<10}{seconds * 1e3:>9.1f}{cells[0]:>9}{cells[1]:>10}{cells[2]:>9}{cells[3]:>16}"
              f"{cells[4]:>11}")


if __name__ == "__main__":
    main()
