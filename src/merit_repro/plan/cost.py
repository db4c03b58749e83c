"""What a workflow config costs to train, before launching it.

    python -m merit_repro.plan.cost --configfile config/paper.yaml [--mfu 0.4] [--peak-flops 989e12]
    python -m merit_repro.plan.cost --configfile config/paper.yaml --tokens-per-s-per-gpu 180000
    python -m merit_repro.plan.cost --configfile config/mechanism.yaml --cores 2
    python -m merit_repro.plan.cost --configfile config/paper.yaml --from-gpu-check results/gpu_check.json
    python -m merit_repro.plan.cost --configfile config/mechanism_gpu.yaml --rate-of gpt2-small=450000
    python -m merit_repro.plan.cost --configfile config/mechanism_gpu.yaml --slots 12 --cell-seconds 16=58 128=33

Per experiment: cells, tokens, training FLOPs (6N + attention per token, nanoGPT/PaLM), GPU-hours at the
stated throughput, and the wall minutes on a CPU of --cores cores (one cell per core, at --cpu-flops per
core: the lower end of what this project's cells measured, runtime.CPU_FLOPS_PER_CORE); then the total over
distinct cells (a cell shared by several experiments trains once). LR tuning adds cells once results are in (grid
extensions, claim seeds at each best LR and at up to max_rivals close calls of it: merit_repro.plan.tuning); the
"+ tuning" columns bound what they can add, per experiment and in total (without sharing, so an upper bound). Evaluation and the MAL probe are not
counted. --from-gpu-check takes the throughput from a GPU check's table (scripts/gpu_check.sh --out): part 6's
tokens/s of the architecture of the config's largest model, compiled when the config compiles it and the check
measured it so, else eager (part 8's trainer cell does not name its model). --rate-of SIZE=TOKENS_PER_S takes a
throughput measured on another model (a named size at its own context, GPT-2 BPE) as a FLOP rate, the same for the
config's models: an upper bound on the speed of a model too small to fill a GPU alone. --slots N with
--cell-seconds BATCH=SECONDS ... prices the cells tuning plans before any extension or close call (grid, claim and
curve seeds: ``planned_cells``) at seconds a cell measured with N cells side by side, N at a time: their
cell-seconds over N, plus the longest cell (the last round's tail).
"""

import argparse
import json
import math
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

from merit_repro.config import configfiles
from merit_repro.config.registry import MODEL_SIZES
from merit_repro.utils import UserError, cli, parse_data

from . import flops, grid
from .runtime import CPU_FLOPS_PER_CORE, flops_per_token
from .validate import validate


def tuning_cells(config, group):
    """At most how many cells tuning adds to a group: max_extensions points x the grid seeds, then the claim
    seeds the grid seeds lack at the best LR (chosen once) and at up to max_rivals close calls of the choice, and the
    curve seeds at their multiples of it."""
    spec = grid.tuning_spec(config, group)
    extra_seeds = len(set(spec["claim_seeds"]) - set(spec["grid_seeds"]))
    rivals = min(spec["max_rivals"], len(spec["lrs"]) + spec["max_extensions"] - 1)
    curve = len(grid.curve_cells(config, group))
    return spec["max_extensions"] * len(spec["grid_seeds"]) + extra_seeds * (1 + rivals) + curve


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


def largest_model(config):
    return max(config["models"], key=lambda m: flops_per_token(config, m)[0])


def seconds_per_flop(config, peak_flops=989e12, mfu=0.4, tokens_per_s_per_gpu=None):
    """GPU-seconds per training FLOP: at peak x MFU, or at a measured throughput of the config's largest model."""
    if tokens_per_s_per_gpu:
        return 1 / (tokens_per_s_per_gpu * flops_per_token(config, largest_model(config))[0])
    return 1 / (peak_flops * mfu)


# Physical ceilings of what the cost tool is told: a rate beyond them is a typo, and a cost computed from it is
# no cost at all (an infinite or absurd rate prices every run at 0 GPU-hours).
MAX_GPU_FLOPS = 1e17        # FLOP/s of one GPU: 100x an H100's dense bf16 peak (989e12)
MAX_CPU_FLOPS = 1e13        # FLOP/s of one CPU core: 1,000x what this project's cells measured
MAX_CORES = 1_000_000


def bounded(flag, value, high, what):
    """value, or a UserError naming the flag when it is not a finite number in (0, high]."""
    if not (math.isfinite(value) and 0 < value <= high):
        raise UserError(f"{flag} {value:g} must be a finite number > 0 and at most {high:g} ({what})")
    return value


def gpu_rate(flag, tokens_per_s, per_token, model):
    """A measured tokens/s as one GPU's training FLOP/s, or a UserError naming the flag when that is not finite or
    beyond MAX_GPU_FLOPS."""
    rate = tokens_per_s * per_token
    if not (math.isfinite(rate) and 0 < rate <= MAX_GPU_FLOPS):
        raise UserError(f"{flag} {tokens_per_s:g} tokens/s of {model} ({per_token:.3g} FLOP a token) is {rate:g} "
                        f"training FLOP/s of one GPU: it must be finite and at most {MAX_GPU_FLOPS:g} (100x an H100's "
                        "peak); give the tokens/s measured")
    return rate


def rate_of(text):
    """(FLOP/s, what was measured) of --rate-of SIZE=TOKENS_PER_S: a named model size's measured tokens/s at its
    own context (1024 unless the size names one) with GPT-2 BPE, times its training FLOPs per token."""
    size, _, rate = text.partition("=")
    try:
        tokens_per_s = float(rate)
    except ValueError:
        tokens_per_s = None
    if size not in MODEL_SIZES or not tokens_per_s or not tokens_per_s > 0 or tokens_per_s == float("inf"):
        raise UserError(f"--rate-of {text!r} must be SIZE=TOKENS_PER_S with a model size ({', '.join(MODEL_SIZES)}) "
                        "and a number > 0, e.g. gpt2-small=450000")
    context = MODEL_SIZES[size].get("block_size", 1024)
    per_token, _ = flops.of_cell({"model": size, "tokenizer": "gpt2", "block_size": context})
    gpu_rate("--rate-of", tokens_per_s, per_token, size)
    return tokens_per_s * per_token, f"{size}'s {tokens_per_s:,.0f} tokens/s at context {context}, by FLOPs"


def gpu_hours(configfile, tokens_per_s_per_gpu):
    """(GPU-hours of the config's distinct cells, + what tuning can add at most) at a measured throughput."""
    config = configfiles.load(configfile)
    validate(config)
    rows, _ = estimate(config)
    _, _, _, flops, tuning = rows[-1]   # the total over distinct cells
    per_flop = seconds_per_flop(config, tokens_per_s_per_gpu=tokens_per_s_per_gpu)
    return flops * per_flop / 3600, tuning * per_flop / 3600


# Part 6's rows (merit_repro.gpu_check.speed): "gpt2-large eager: tokens/s, MFU, peak GiB (...)", "123,456, 41.0%, 9.8"
SPEED_ROW = re.compile(r"(\S+) (eager|compiled): tokens/s")


def measured_rates(check):
    """{(architecture, "eager" | "compiled"): tokens/s} of a GPU check's passed part 6 rows."""
    rates = {}
    for row in check["rows"]:
        found = SPEED_ROW.match(str(row.get("check", ""))) if isinstance(row, dict) else None
        if found and row.get("part") == 6 and row.get("result") == "ok":
            number = str(row.get("value", "")).split(", ")[0].replace(",", "")
            if re.fullmatch(r"[0-9.]+", number) and float(number) > 0:
                rates[found[1], found[2]] = float(number)
    return rates


def gpu_check_rate(path, config):
    """(tokens/s, what was measured) of the config's largest model from a GPU check's JSON (see the docstring)."""
    fix = "give the JSON that `bash scripts/gpu_check.sh --out FILE` wrote"
    try:
        check = parse_data(Path(path).read_text(encoding="utf-8"), f"--from-gpu-check {path}")
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise UserError(f"--from-gpu-check {path} is not JSON: {fix}") from None
    if not (isinstance(check, dict) and isinstance(check.get("rows"), list) and "device" in check):
        raise UserError(f"--from-gpu-check {path} is not a GPU check's table (no device and rows): {fix}")
    rates = measured_rates(check)
    model = largest_model(config)
    architecture = config["models"][model]["model"]
    compiled = grid.model_settings(config, model).get("compile")
    for mode in ("compiled", "eager") if compiled else ("eager",):
        if (architecture, mode) in rates:
            return rates[architecture, mode], f"{architecture} {mode} on {check['device']}, part 6 of {path}"
    measured = ", ".join(f"{a} {m}" for a, m in sorted(rates)) or "nothing"
    raise UserError(f"--from-gpu-check {path} has no tokens/s of {architecture} (the config's largest model, {model}); "
                    f"its part 6 measured {measured}: run part 6 of the check on the GPU "
                    "(bash scripts/gpu_check.sh --parts 6), or give --tokens-per-s-per-gpu")


def planned_cells(config, *names):
    """[(optimizer, batch)], one per distinct cell the named experiments (default: all) plan before any extension or
    close call: each group's grid with the grid seeds, the claim seeds at its best LR, its curve seeds."""
    cells = set()
    for name in sorted(names or config["experiments"]):
        for g in grid.experiment_groups(config, name):
            key = (g.model, g.tokens, g.optimizer, g.batch)
            cells |= {(key, lr, s) for lr in g.lrs for s in grid.grid_seeds(config, name)}
            cells |= {(key, "best", s) for s in grid.claim_seeds(config, name)}
            cells |= {(key, f"{k:g}x best", s) for k, s in grid.curve_cells(config, g)}
    return sorted((key[2], key[3]) for key, _, _ in cells)


def slot_plan(config, seconds_at, slots):
    """Lines: the planned cells per batch at their measured seconds, and the seconds slots cells at a time take."""
    cells = Counter(batch for _, batch in planned_cells(config))
    lost = sorted(set(cells) - set(seconds_at))
    if lost:
        raise UserError(f"--cell-seconds gives no seconds for batch {', '.join(map(str, lost))}: give BATCH=SECONDS "
                        "for every batch of the config")
    total = sum(n * seconds_at[b] for b, n in cells.items())
    tail = max(seconds_at[b] for b in cells)
    lines = [f"# {n} cells at batch {b}, {seconds_at[b]:g} s each: {n * seconds_at[b]:,.0f} cell-seconds"
             for b, n in cells.items()]
    return lines + [f"# {sum(cells.values())} cells, {total:,.0f} cell-seconds on {slots} slots: {total / slots:,.0f} s"
                    f", + {tail:g} s for the last round's tail = {total / slots + tail:,.0f} s of training"]


def cell_seconds(texts):
    """['16=58', '128=33'] -> {16: 58.0, 128: 33.0}, or a UserError."""
    out = {}
    for text in texts:
        m = re.fullmatch(r"([1-9][0-9]{0,7})=([0-9]{1,6}(?:\.[0-9]+)?)", text)
        if not m or not float(m[2]) > 0:
            raise UserError(f"--cell-seconds {text!r} must be BATCH=SECONDS with SECONDS > 0, like 16=58")
        out[int(m[1])] = float(m[2])
    return out


@cli
def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m merit_repro.plan.cost", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configfile", default="config/config.yaml")
    parser.add_argument("--peak-flops", type=float, default=989e12, help="per GPU (H100 SXM bf16 dense: 989e12)")
    parser.add_argument("--mfu", type=float, default=0.4, help="model FLOPs utilisation assumed")
    measured = parser.add_mutually_exclusive_group()
    measured.add_argument("--tokens-per-s-per-gpu", type=float, default=None,
                          help="measured throughput of the largest model instead of peak x MFU")
    measured.add_argument("--from-gpu-check", metavar="FILE", default=None,
                          help="that throughput from a GPU check's JSON (scripts/gpu_check.sh --out FILE): part 6's")
    measured.add_argument("--rate-of", metavar="SIZE=TOKENS_PER_S", default=None,
                          help="another model's measured throughput, as the FLOP rate of every model here")
    parser.add_argument("--cores", type=int, default=2, help="CPU cores, one cell on each (default 2)")
    parser.add_argument("--cpu-flops", type=float, default=CPU_FLOPS_PER_CORE,
                        help=f"training FLOP/s of one cell on one core (default {CPU_FLOPS_PER_CORE:.3g}, measured)")
    parser.add_argument("--slots", type=int, default=None, help="cells side by side (with --cell-seconds)")
    parser.add_argument("--cell-seconds", nargs="+", metavar="BATCH=SECONDS", default=None,
                        help="a cell's measured seconds at each batch, --slots of them side by side")
    args = parser.parse_args(argv)
    if (args.slots is None) != (args.cell_seconds is None):
        raise UserError("give --slots and --cell-seconds together")
    for flag in ("cores", "cpu_flops", "peak_flops", "mfu", "tokens_per_s_per_gpu"):
        value = getattr(args, flag)
        if value is not None and not value > 0:
            raise UserError(f"--{flag.replace('_', '-')} {value:g} must be > 0")
    bounded("--cores", args.cores, MAX_CORES, "cores of one machine")
    bounded("--cpu-flops", args.cpu_flops, MAX_CPU_FLOPS, "training FLOP/s of one core")
    bounded("--peak-flops", args.peak_flops, MAX_GPU_FLOPS, "FLOP/s of one GPU")
    bounded("--mfu", args.mfu, 1.0, "a share of the peak")
    config = configfiles.load(args.configfile)
    validate(config)
    if args.slots is not None:
        bounded("--slots", args.slots, MAX_CORES, "cells side by side")
        print(f"# planned cells of {args.configfile}, {args.slots} at a time")
        print("\n".join(slot_plan(config, cell_seconds(args.cell_seconds), args.slots)))
        return 0
    tokens_per_s, measured = args.tokens_per_s_per_gpu, "largest model"
    if args.from_gpu_check:
        tokens_per_s, measured = gpu_check_rate(args.from_gpu_check, config)
    if tokens_per_s:
        model = largest_model(config)
        gpu_rate(f"--from-gpu-check {args.from_gpu_check}:" if args.from_gpu_check else "--tokens-per-s-per-gpu",
                 tokens_per_s, flops_per_token(config, model)[0], f"{model}, the config's largest model")
    gpu_seconds_per_flop = seconds_per_flop(config, args.peak_flops, args.mfu, tokens_per_s)
    rate = (f"{tokens_per_s:,.0f} tokens/s per GPU ({measured})" if tokens_per_s
            else f"{args.peak_flops / 1e12:.0f} TFLOP/s x MFU {args.mfu}")
    if args.rate_of:
        flop_rate, measured = rate_of(args.rate_of)
        gpu_seconds_per_flop, rate = 1 / flop_rate, f"{flop_rate / 1e12:.0f} TFLOP/s per GPU ({measured})"
    cpu_minutes_per_flop = 1 / (args.cpu_flops * args.cores) / 60
    rows, per_model = estimate(config)
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
    _, _, _, flops_total, tuning_total = rows[-1]
    gpu_minutes = flops_total * gpu_seconds_per_flop / 60
    if gpu_minutes < 60:   # the hours' one decimal would round it away
        print(f"# GPU-minutes: {gpu_minutes:.2f}, + tuning at most {tuning_total * gpu_seconds_per_flop / 60:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
