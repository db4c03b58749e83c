"""What a workflow config costs to train, before launching it.

    python -m merit_repro.plan.cost --configfile config/paper.yaml [--mfu 0.4] [--peak-flops 989e12]
    python -m merit_repro.plan.cost --configfile config/paper.yaml --tokens-per-s-per-gpu 180000
    python -m merit_repro.plan.cost --configfile config/mechanism.yaml --cores 2

Per experiment: cells, tokens, training FLOPs (6N + attention per token, nanoGPT/PaLM), GPU-hours at the
stated throughput, and the wall minutes on a CPU of --cores cores (one cell per core, at --cpu-flops per
core: the lower end of what this project's cells measured, runtime.CPU_FLOPS_PER_CORE); then the total over
distinct cells (a cell shared by several experiments trains once). LR tuning adds cells once results are in (grid
extensions, claim seeds at each best LR: merit_repro.plan.tuning); the "+ tuning" columns bound what they can
add, per experiment and in total (without sharing, so an upper bound). Evaluation and the MAL probe are not
counted.
"""

import argparse
import sys
from collections import defaultdict

from merit_repro.config import configfiles
from merit_repro.utils import UserError, cli

from . import grid
from .runtime import CPU_FLOPS_PER_CORE, flops_per_token
from .validate import validate


def tuning_cells(config, group):
    """At most how many cells tuning adds to a group: max_extensions points x the grid seeds, then the claim
    seeds the grid seeds lack at the best LR (chosen once)."""
    spec = grid.tuning_spec(config, group)
    extra_seeds = len(set(spec["claim_seeds"]) - set(spec["grid_seeds"]))
    return spec["max_extensions"] * len(spec["grid_seeds"]) + extra_seeds


def estimate(config):
    """[(experiment, cells, tokens, FLOPs, tuning FLOPs at most)] and the total over distinct cells; per model
    (FLOPs per token, parameters)."""
    per_model = {m: flops_per_token(config, m) for m in config["models"]}
    flops_of = lambda model, tokens: float(tokens) * per_model[model][0]  # noqa: E731
    rows, totals = [], defaultdict(float)
    for cell in grid.all_cells(config):
        totals["cells"] += 1
        totals["tokens"] += float(cell.tokens)
        totals["flops"] += flops_of(cell.model, cell.tokens)
    for name in config["experiments"]:
        cells = grid.experiment_cells(config, name)
        tuning = sum(tuning_cells(config, g) * flops_of(g.model, g.tokens)
                     for g in grid.experiment_groups(config, name))
        totals["tuning"] += tuning
        rows.append((name, len(cells), sum(float(c.tokens) for c in cells),
                     sum(flops_of(c.model, c.tokens) for c in cells), tuning))
    rows.append(("total (distinct cells)", int(totals["cells"]), totals["tokens"], totals["flops"], totals["tuning"]))
    return rows, per_model


def seconds_per_flop(config, peak_flops=989e12, mfu=0.4, tokens_per_s_per_gpu=None):
    """GPU-seconds per training FLOP: at peak x MFU, or at a measured throughput of the config's largest model."""
    if tokens_per_s_per_gpu:
        biggest = max(config["models"], key=lambda m: flops_per_token(config, m)[0])
        return 1 / (tokens_per_s_per_gpu * flops_per_token(config, biggest)[0])
    return 1 / (peak_flops * mfu)


def gpu_hours(configfile, tokens_per_s_per_gpu):
    """(GPU-hours of the config's distinct cells, + what tuning can add at most) at a measured throughput."""
    config = configfiles.load(configfile)
    validate(config)
    rows, _ = estimate(config)
    _, _, _, flops, tuning = rows[-1]   # the total over distinct cells
    per_flop = seconds_per_flop(config, tokens_per_s_per_gpu=tokens_per_s_per_gpu)
    return flops * per_flop / 3600, tuning * per_flop / 3600


@cli
def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m merit_repro.plan.cost", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configfile", default="config/config.yaml")
    parser.add_argument("--peak-flops", type=float, default=989e12, help="per GPU (H100 SXM bf16 dense: 989e12)")
    parser.add_argument("--mfu", type=float, default=0.4, help="model FLOPs utilisation assumed")
    parser.add_argument("--tokens-per-s-per-gpu", type=float, default=None,
                        help="measured throughput of the largest model instead of peak x MFU")
    parser.add_argument("--cores", type=int, default=2, help="CPU cores, one cell on each (default 2)")
    parser.add_argument("--cpu-flops", type=float, default=CPU_FLOPS_PER_CORE,
                        help=f"training FLOP/s of one cell on one core (default {CPU_FLOPS_PER_CORE:.3g}, measured)")
    args = parser.parse_args(argv)
    for flag in ("cores", "cpu_flops", "peak_flops", "mfu", "tokens_per_s_per_gpu"):
        value = getattr(args, flag)
        if value is not None and not value > 0:
            raise UserError(f"--{flag.replace('_', '-')} {value:g} must be > 0")
    config = configfiles.load(args.configfile)
    validate(config)
    gpu_seconds_per_flop = seconds_per_flop(config, args.peak_flops, args.mfu, args.tokens_per_s_per_gpu)
    cpu_minutes_per_flop = 1 / (args.cpu_flops * args.cores) / 60
    rows, per_model = estimate(config)
    rate = (f"{args.tokens_per_s_per_gpu:,.0f} tokens/s per GPU (largest model)" if args.tokens_per_s_per_gpu
            else f"{args.peak_flops / 1e12:.0f} TFLOP/s x MFU {args.mfu}")
    print(f"# cost of {args.configfile} at {rate}; on a CPU: {args.cores} cores at {args.cpu_flops / 1e9:.3g} "
          "GFLOP/s each")
    for m, (fpt, n) in per_model.items():
        print(f"#   {m}: {n / 1e6:.1f}M params, {fpt / 1e9:.3g} GFLOP per token")
    header = ["cells", "tokens", "FLOPs", "GPU-hours", "+ tuning", "CPU minutes", "+ tuning"]
    print(f"{'experiment':<28}" + " ".join(f"{h:>12}" for h in header))
    for name, cells, tokens, flops, tuning in rows:
        values = [f"{cells}", f"{tokens:.3g}", f"{flops:.3g}", f"{flops * gpu_seconds_per_flop / 3600:,.1f}",
                  f"{tuning * gpu_seconds_per_flop / 3600:,.1f}", f"{flops * cpu_minutes_per_flop:,.1f}",
                  f"{tuning * cpu_minutes_per_flop:,.1f}"]
        print(f"{name:<28}" + " ".join(f"{v:>12}" for v in values))
    return 0


if __name__ == "__main__":
    sys.exit(main())
