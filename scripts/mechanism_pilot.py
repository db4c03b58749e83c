"""The pilot that chooses the mechanism experiment's geometry: AdamW alone, on seeds that never choose or report.

    python scripts/mechanism_pilot.py [--configfile config/mechanism.yaml] [--experiment mechanism]
        [--geometries 4x2x48@64 2x1x64@64 4x1x48@128] [--tokens 2097152] [--lrs 2e-3 ... 1.28e-1]
        [--seeds 200 201] [--budget-minutes 40] [--jobs 2]

The paper's mechanism needs a premise: AdamW's max attention logit (MAL) explodes as the LR (or the batch it is
tuned at) grows. On one GPU (the project's GPT of 6 layers x 6 heads x 384, context 256) AdamW's peak MAL goes
53 -> 10,205 over LR 1e-3 -> 8e-3; on the demo's 4-layer model of width 48 it stayed at 28-54 over a 4x range. A
CPU verdict in a regime without the explosion reads a regime the paper never describes, so the geometry (layers,
heads, width and so head size, context, tokens) is chosen by this rule, written down before the pilot ran
(issue 55):

1. Each candidate geometry ``LxHxW@C`` (L layers, H heads, width W, context C; tokens per cell --tokens) trains
   AdamW at the experiment's largest batch, under its first model's settings (the short warmup rule), at every LR
   of --lrs (x2 apart, wider than any grid of the experiment), once per pilot seed.
2. Its best LR (LR*) is the LR of the lowest pilot-seed mean final validation loss among the LRs where no seed
   diverged: the LR the workflow's tuning picks the same way.
3. Its rise is the pilot-seed geometric mean peak MAL at the highest LR at most 4 x LR* where no seed diverged,
   over that at the lowest LR at least LR* / 2: the range the experiment's LR-robust statements read
   (k x LR*, k in 1/2, 1, 2, 4). The premise is present when the rise is at least PREMISE_RISE (10) and LR* is
   below the top of --lrs (else the range above it went unseen).
4. A candidate is allowed when the experiment, with this geometry, is projected to train within
   TRAINING_SHARE of --budget-minutes on 2 cores (the rest is the workflow's own steps): every cell the config
   plans before extensions (grid, claim and curve seeds; ``merit_repro.plan.cost.planned_cells``), each at the
   candidate's median measured seconds a cell, x SMALL_BATCH_SLOWDOWN at the small batch and x MERIT_SLOWDOWN for MERIT, --jobs at
   a time.
5. The chosen geometry is the allowed candidate with the premise and the largest rise. If none has it, the
   premise is absent at this scale: the config keeps its geometry and says so (``premise_absent``), and its
   verdicts are not read as the paper's.

Runs go to ``<results>/pilot/<experiment>/<geometry>/tokens<T>/bs<B>/lr<lr>/seed<seed>`` and resume like any
cell; the table goes to ``<results>/pilot/<experiment>/pilot.csv``. The corpus must be prepared first
(``snakemake --cores 2 --configfile config/mechanism.yaml <results>/data/<name>/meta.json``).
"""

import argparse
import math
import re
import sys
from pathlib import Path

import pandas as pd

from merit_repro.config import configfiles
from merit_repro.plan import grid
from merit_repro.plan.cost import planned_cells
from merit_repro.plan.tuning import canonical
from merit_repro.plan.validate import validate
from merit_repro.report.tables import summarise_run
from merit_repro.train.pilot import refuse_reporting_seeds, train_all
from merit_repro.utils import UserError, check_numbers, cli

PREMISE_RISE = 10.0            # step 3: AdamW's peak MAL rises at least this much over 1/2 .. 4 x LR*
TRAINING_SHARE = 0.75          # step 4: the share of the budget training may take
SMALL_BATCH_SLOWDOWN = 1.3     # step 4: seconds a cell at the small batch / at the large (measured 1.26 at width 48)
MERIT_SLOWDOWN = 1.25          # step 4: MERIT's seconds a cell / AdamW's (measured about 1.25 at width 48)
LRS = [2e-3, 4e-3, 8e-3, 1.6e-2, 3.2e-2, 6.4e-2, 1.28e-1]
# The largest value each numeric flag may take: beyond these it is a typo, not a pilot (an LR above 10 diverges at once)
MOST = {"lrs": 10.0, "tokens": 2 ** 40, "budget_minutes": 7 * 24 * 60.0, "jobs": 64, "seeds": 2 ** 63 - 1}
GEOMETRY = re.compile(r"^([1-9]\d{0,2})x([1-9]\d{0,2})x([1-9]\d{0,4})@([1-9]\d{0,4})$")


def geometry(text):
    """'4x2x48@64' -> {n_layer: 4, n_head: 2, n_embd: 48, block_size: 64}, or a UserError."""
    m = GEOMETRY.match(text)
    if not m or int(m[3]) % int(m[2]):
        raise UserError(f"geometry {text!r} is not LAYERSxHEADSxWIDTH@CONTEXT with the width a multiple of the "
                        "heads: give one like 4x2x48@64")
    return dict(zip(("n_layer", "n_head", "n_embd", "block_size"), map(int, m.groups())))


def folder_name(text):
    g = geometry(text)
    return f"L{g['n_layer']}-H{g['n_head']}-W{g['n_embd']}-C{g['block_size']}"


def cells(config, exp, model, shape, tokens, batch, lrs, seeds):
    """{(geometry, batch, lr, seed): (settings, run folder)} of AdamW at every LR."""
    root = Path(config["results"]) / "pilot" / exp / folder_name(shape) / f"tokens{tokens}" / f"bs{batch}"
    out = {}
    for lr in map(canonical, lrs):
        for seed in seeds:
            settings = grid.cell_config(config, model, tokens, "adamw", batch, lr, seed)
            settings.update(geometry(shape), eval_every_tokens=tokens // 4)
            out[(shape, batch, lr, seed)] = (settings, str(root / f"lr{lr}" / f"seed{seed}"))
    return out


def measure(jobs, n_jobs, threshold):
    """Train the jobs; one row per run: its coordinates, loss, peak MAL and seconds."""
    summaries = train_all(jobs, n_jobs)
    rows = []
    for key, (_, run_dir) in jobs.items():
        shape, batch, lr, seed = key
        row = summarise_run(run_dir, dict(geometry=shape, batch=batch, lr=lr, seed=seed), threshold)
        rows.append({**row, "ok": summaries[key]["status"] == "ok"})
    return pd.DataFrame(rows)


def geometric_mean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values))


def premise(runs, lrs):
    """Steps 2 and 3 for one candidate: {best_lr, val_loss, low_lr, high_lr, mal_low, mal_high, rise, premise}."""
    finished = {lr: g for lr, g in runs.groupby("lr") if g.ok.all()}
    out = dict(best_lr=None, val_loss=None, low_lr=None, high_lr=None, mal_low=None, mal_high=None, rise=None,
               premise=False)
    if not finished:
        return out
    best = min(finished, key=lambda lr: (finished[lr].final_val_loss.mean(), float(lr)))
    low = min((lr for lr in finished if float(lr) >= float(best) / 2 * (1 - 1e-9)), key=float)
    high = max((lr for lr in finished if float(lr) <= 4 * float(best) * (1 + 1e-9)), key=float)
    mal_low, mal_high = (geometric_mean(finished[lr].peak_mal) for lr in (low, high))
    rise = mal_high / mal_low
    top = max(map(canonical, lrs), key=float)
    return dict(best_lr=best, val_loss=finished[best].final_val_loss.mean(), low_lr=low, high_lr=high,
                mal_low=mal_low, mal_high=mal_high, rise=rise, premise=rise >= PREMISE_RISE and best != top)


def projected_minutes(planned, seconds_at_large, large, jobs):
    total = sum(seconds_at_large * (SMALL_BATCH_SLOWDOWN if batch < large else 1.0)
                * (MERIT_SLOWDOWN if optimizer == "merit" else 1.0) for optimizer, batch in planned)
    return total / jobs / 60


@cli
def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configfile", type=Path, default=Path("config/mechanism.yaml"))
    parser.add_argument("--experiment", default="mechanism")
    parser.add_argument("--geometries", nargs="+", default=["4x2x48@64", "2x1x64@64", "4x1x48@128"])
    parser.add_argument("--tokens", type=int, default=2 ** 21)
    parser.add_argument("--lrs", type=float, nargs="+", default=LRS)
    parser.add_argument("--seeds", type=int, nargs="+", default=[200, 201])
    parser.add_argument("--budget-minutes", type=float, default=40.0)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    check_numbers(args, positive=("tokens", "lrs", "budget_minutes", "jobs"), non_negative=("seeds",), at_most=MOST)
    shapes = {text: geometry(text) for text in args.geometries}
    config = validate(configfiles.load(args.configfile))
    config.setdefault("results", "results")
    if args.experiment not in config.get("experiments", {}):
        raise UserError(f"{args.configfile} has no experiment {args.experiment!r}; name one with --experiment")
    if "adamw" not in config["experiments"][args.experiment]["optimizers"]:
        raise UserError(f"experiment {args.experiment!r} of {args.configfile} has no adamw among its optimizers; the "
                        "pilot trains AdamW: name another with --experiment")
    refuse_reporting_seeds(config, args.seeds)
    spec = config["experiments"][args.experiment]
    model = spec["models"][0]
    batches = grid.batch_list(spec, model, "adamw")
    large = max(batches)
    threshold = config.get("report", {}).get("mal_threshold", 100.0)
    jobs = {k: v for shape in shapes
            for k, v in cells(config, args.experiment, model, shape, args.tokens, large, args.lrs, args.seeds).items()}
    runs = measure(jobs, args.jobs, threshold)
    planned = planned_cells(config, args.experiment)
    table = []
    for shape, found in runs.groupby("geometry", sort=False):
        seconds = found.train_seconds.median()
        table.append(dict(geometry=shape, **premise(found, args.lrs), seconds_a_cell=seconds,
                          projected_minutes=projected_minutes(planned, seconds, large, args.jobs)))
    table = pd.DataFrame(table)
    table["allowed"] = table.projected_minutes <= TRAINING_SHARE * args.budget_minutes
    out = Path(config["results"]) / "pilot" / args.experiment
    runs.to_csv(out / "pilot.csv", index=False)
    print(f"\n{args.experiment}: AdamW, {model}'s settings, batch {large}, {args.tokens} tokens a cell, pilot seeds "
          f"{args.seeds}; {len(planned)} planned cells; training budget {TRAINING_SHARE:g} x {args.budget_minutes:g} "
          "min on 2 cores")
    print("| geometry | LR* | val loss | MAL at low LR | MAL at high LR | rise | premise | s a cell | projected min "
          "| allowed |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    fmt = lambda x, f: "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, f)  # noqa: E731
    for r in table.itertuples():
        print(f"| {r.geometry} | {r.best_lr} | {fmt(r.val_loss, '.3f')} | {fmt(r.mal_low, '.1f')} at {r.low_lr} | "
              f"{fmt(r.mal_high, '.1f')} at {r.high_lr} | {fmt(r.rise, '.1f')}x | {'yes' if r.premise else 'no'} | "
              f"{r.seconds_a_cell:.0f} | {r.projected_minutes:.0f} | {'yes' if r.allowed else 'no'} |")
    print("\nper run:")
    print(runs[["geometry", "lr", "seed", "final_val_loss", "peak_mal", "peak_mal_layer", "train_seconds", "ok"]]
          .to_string(index=False, float_format="{:.3f}".format))
    chosen = table[table.premise & table.allowed].sort_values("rise", ascending=False)
    if chosen.empty:
        print(f"\nno allowed geometry has the premise (AdamW's peak MAL rising {PREMISE_RISE:g}x over 1/2 .. 4 x LR*): "
              "the premise is absent at this scale; the config keeps its geometry and says so (premise_absent)")
    else:
        c = chosen.iloc[0]
        print(f"\nchosen: {c.geometry} ({folder_name(c.geometry)}): rise {c.rise:.1f}x, LR* {c.best_lr}, projected "
              f"{c.projected_minutes:.0f} min of training")
    return 0


if __name__ == "__main__":
    sys.exit(main())
