"""The pilot that chooses the mechanism experiment's setting: AdamW alone, on seeds that never choose or report.

    python scripts/mechanism_pilot.py [--configfile config/mechanism.yaml] [--experiment mechanism]
        [--contexts 64 128] [--tokens 1048576 2097152] [--seeds 200 201] [--budget-minutes 40] [--jobs 2]

The paper's mechanism is AdamW's max attention logit (MAL) growing at large batch. Where a small GPT on a CPU
shows that growth depends on the steps, the context and the LR, so the setting is chosen by this rule, written
down before any LAMB or MERIT cell of the experiment ran:

1. Candidates are (context, tokens) pairs. For each, AdamW trains at the experiment's largest batch at every
   LR of its AdamW grid, once per pilot seed. A candidate's score is the pilot-seed mean peak MAL at the LR
   with the lowest pilot-seed mean final validation loss (an LR where a seed diverged is out): the LR the
   workflow's tuning picks the same way, so the score predicts the MAL the experiment will report.
2. A candidate is allowed if the experiment it implies is projected to train within the budget on 2 cores:
   3 optimizers x 2 batches x (the grid's LRs + the claim seeds) cells, at the large batch's measured
   tokens/s and half of it at the small batch (checked by step 4 and printed).
3. The chosen candidate is the cheapest allowed one whose score reaches LEVEL (the paper's own layer
   threshold, 100); if none does, the allowed one with the largest score.
4. At the chosen candidate AdamW trains at the smallest batch too (same LRs and seeds). Its score sets the
   layer threshold of this scale: 100 x (our small-batch score) / 326, the paper's threshold in units of
   its AdamW small-batch peak MAL (GPT-2 Medium at 512: 326), to 2 significant figures. If the large-batch
   score is not above the small-batch one, the pilot says so: the mechanism does not show at this scale.

Runs go to ``<results>/pilot/<experiment>/ctx<C>/tokens<T>/bs<B>/lr<lr>/seed<seed>`` and resume like any
cell; the table goes to ``<results>/pilot/<experiment>/pilot.csv``. The corpus must be prepared first
(``snakemake --cores 2 --configfile config/mechanism.yaml <results>/data/<name>/meta.json``).
"""

import argparse
import statistics
import sys
from pathlib import Path

import pandas as pd

from merit_repro.config import configfiles
from merit_repro.plan import grid
from merit_repro.plan.tuning import canonical
from merit_repro.report.tables import summarise_run
from merit_repro.plan.validate import validate
from merit_repro.train.pilot import refuse_reporting_seeds, train_all
from merit_repro.utils import UserError, check_numbers, cli

LEVEL = 100.0                  # the paper's layer threshold: a MAL the mechanism is about
PAPER_SMALL_BATCH_MAL = 326.0  # the rebuttal's AdamW peak MAL, GPT-2 Medium at batch 512
SMALL_BATCH_SLOWDOWN = 2.0     # projected tokens/s at the small batch: the large batch's / this (step 2)


def cells(config, exp, model, context, tokens, batch, seeds):
    """{(context, tokens, batch, lr, seed): (settings, run folder)} of AdamW on the experiment's grid."""
    root = Path(config["results"]) / "pilot" / exp
    out = {}
    for lr in (canonical(lr) for lr in grid.lr_list(config["experiments"][exp], model, "adamw")):
        for seed in seeds:
            settings = grid.cell_config(config, model, tokens, "adamw", batch, lr, seed)
            settings.update(block_size=context, eval_every_tokens=tokens // 4)
            out[(context, tokens, batch, lr, seed)] = (
                settings, str(root / f"ctx{context}" / f"tokens{tokens}" / f"bs{batch}" / f"lr{lr}" / f"seed{seed}"))
    return out


def measure(jobs, n_jobs, threshold):
    """Train the jobs; one row per run: its coordinates, loss, peak MAL, layers over threshold and speed."""
    summaries = train_all(jobs, n_jobs)
    rows = []
    for key, (_, run_dir) in jobs.items():
        context, tokens, batch, lr, seed = key
        row = summarise_run(run_dir, dict(context=context, tokens=tokens, batch=batch, lr=lr, seed=seed), threshold)
        rows.append({**row, "ok": summaries[key]["status"] == "ok"})
    return pd.DataFrame(rows)


def score(runs):
    """(score, lr, mean loss at it): the seed-mean peak MAL at the LR tuning would choose (lowest mean loss)."""
    by_lr = {lr: g for lr, g in runs.groupby("lr") if g.ok.all()}
    if not by_lr:
        return None, None, None
    lr = min(by_lr, key=lambda k: by_lr[k].final_val_loss.mean())
    return statistics.fmean(by_lr[lr].peak_mal), lr, by_lr[lr].final_val_loss.mean()


def projected_minutes(config, exp, tokens, tokens_per_s):
    spec = config["experiments"][exp]
    n = len(grid.lr_list(spec, spec["models"][0], "adamw")) + len(grid.claim_seeds(config, exp))
    per_batch = 3 * n * tokens
    return (per_batch / tokens_per_s + per_batch * SMALL_BATCH_SLOWDOWN / tokens_per_s) / 2 / 60


@cli
def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configfile", type=Path, default=Path("config/mechanism.yaml"))
    parser.add_argument("--experiment", default="mechanism")
    parser.add_argument("--contexts", type=int, nargs="+", default=[64, 128])
    parser.add_argument("--tokens", type=int, nargs="+", default=[2 ** 20, 2 ** 21])
    parser.add_argument("--seeds", type=int, nargs="+", default=[200, 201])
    parser.add_argument("--budget-minutes", type=float, default=40.0)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    check_numbers(args, positive=("contexts", "tokens", "budget_minutes", "jobs"), non_negative=("seeds",))
    config = validate(configfiles.load(args.configfile))
    config.setdefault("results", "results")
    if args.experiment not in config.get("experiments", {}):
        raise UserError(f"{args.configfile} has no experiment {args.experiment!r}; name one with --experiment")
    if "adamw" not in config["experiments"][args.experiment]["optimizers"]:
        raise UserError(f"experiment {args.experiment!r} of {args.configfile} has no adamw among its optimizers; the "
                        "pilot trains AdamW on its grid: name another with --experiment")
    refuse_reporting_seeds(config, args.seeds)
    spec = config["experiments"][args.experiment]
    model = spec["models"][0]
    batches = grid.batch_list(spec, model, "adamw")
    small, large = min(batches), max(batches)
    threshold = config.get("report", {}).get("mal_threshold", LEVEL)
    candidates = [(c, t) for t in sorted(args.tokens) for c in sorted(args.contexts)]
    jobs = {k: v for c, t in candidates
            for k, v in cells(config, args.experiment, model, c, t, large, args.seeds).items()}
    runs = measure(jobs, args.jobs, threshold)
    table = []
    for (c, t), found in runs.groupby(["context", "tokens"], sort=False):
        value, lr, loss = score(found)
        tps = found.tokens_per_s.median()
        table.append(dict(context=c, tokens=t, steps=int(found.steps.max()), best_lr=lr, val_loss=loss,
                          adamw_peak_mal=value, max_over_lrs=found.groupby("lr").peak_mal.mean().max(),
                          tokens_per_s=tps, projected_minutes=projected_minutes(config, args.experiment, t, tps)))
    table = pd.DataFrame(table)
    table["allowed"] = table.projected_minutes <= args.budget_minutes
    allowed = table[table.allowed & table.adamw_peak_mal.notna()]
    if allowed.empty:
        raise UserError(f"no candidate fits {args.budget_minutes:g} minutes with a finite score; allow more with "
                        "--budget-minutes or give cheaper --contexts/--tokens")
    crossing = allowed[allowed.adamw_peak_mal >= LEVEL].sort_values("projected_minutes")
    chosen = (crossing if len(crossing) else allowed.sort_values("adamw_peak_mal", ascending=False)).iloc[0]
    why = f"the cheapest reaching {LEVEL:g}" if len(crossing) else f"none reaches {LEVEL:g}: the largest score"
    c, t = int(chosen.context), int(chosen.tokens)
    small_runs = measure(cells(config, args.experiment, model, c, t, small, args.seeds), args.jobs, threshold)
    small_score, small_lr, small_loss = score(small_runs)
    if small_score is None:
        raise UserError(f"AdamW diverged at every LR at batch {small} (context {c}, tokens {t}), so the pilot sets "
                        "no threshold; give the experiment lower AdamW LRs and run the pilot again")
    out = Path(config["results"]) / "pilot" / args.experiment
    pd.concat([runs, small_runs]).to_csv(out / "pilot.csv", index=False)
    print(f"\n{args.experiment}: AdamW, {model}, batch {large} (large), pilot seeds {args.seeds}, "
          f"budget {args.budget_minutes:g} min on 2 cores")
    print("| context | tokens | steps | best LR | val loss | AdamW peak MAL (score) | max over LRs | tokens/s | "
          "projected min | allowed |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in table.itertuples():
        print(f"| {r.context} | {r.tokens} | {r.steps} | {r.best_lr} | {r.val_loss:.3f} | {r.adamw_peak_mal:.1f} | "
              f"{r.max_over_lrs:.1f} | {r.tokens_per_s:,.0f} | {r.projected_minutes:.0f} | "
              f"{'yes' if r.allowed else 'no'} |")
    print("\nper run (large batch):")
    print(runs[["context", "tokens", "lr", "seed", "final_val_loss", "peak_mal", "peak_mal_layer", "ok"]]
          .to_string(index=False, float_format="{:.3f}".format))
    print(f"\nchosen: context {c}, tokens {t} ({why}); AdamW peak MAL {chosen.adamw_peak_mal:.1f} "
          f"at lr {chosen.best_lr}")
    small_tps = small_runs.tokens_per_s.median()
    print(f"small batch {small} there: AdamW peak MAL {small_score:.1f} at lr {small_lr} (val loss {small_loss:.3f}), "
          f"{small_tps:,.0f} tokens/s ({chosen.tokens_per_s / small_tps:.2f}x slower than the large batch; projected "
          f"with {SMALL_BATCH_SLOWDOWN:g}x)")
    print(small_runs[["lr", "seed", "final_val_loss", "peak_mal", "peak_mal_layer", "ok"]]
          .to_string(index=False, float_format="{:.3f}".format))
    if chosen.adamw_peak_mal <= small_score:
        print(f"AdamW's peak MAL at the large batch ({chosen.adamw_peak_mal:.1f}) is not above the small batch's "
              f"({small_score:.1f}): the mechanism does not show at this scale")
    mal_threshold = float(f"{LEVEL * small_score / PAPER_SMALL_BATCH_MAL:.2g}")
    print(f"report.mal_threshold: {mal_threshold:g}  (100 x {small_score:.1f} / {PAPER_SMALL_BATCH_MAL:g})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
