"""What the demo's seeds can decide: margins under the old rule and the paired one, and the seed count.

    python benchmarks/claims_power.py [--configfile config/config.yaml] [--results results]

1. Design (no runs needed; this is the calculation that fixed the demo's claim seed count): the margin a
   comparison must clear, in units of one run's seed sd, for n claim seeds, under Welch (independent
   groups: Hsu's df, and the Welch–Satterthwaite df of the old rule) and under the paired test at a seeds'
   correlation r (the per-seed difference has sd sqrt(2 (1 - r)) seed sds); the effect decided with 80%
   power; and what one more claim seed costs (one cell per tuned group of the config). Every verdict is a
   one-sided test at alpha (merit_repro.report.claims), so the margins are t(1 - alpha, df) standard errors.
2. On the demo's runs (results/tables after `snakemake`): MERIT vs AdamW, LAMB vs AdamW and MERIT vs LAMB
   at each model's largest batch: the difference, the old margin (Welch–Satterthwaite) and the new one
   (paired), side by side, the new one in seed sds, the difference decided with 80% power at this noise
   ("detectable"), the seeds' correlation, and the verdict under each.
"""

import argparse
import math
import sys
from pathlib import Path

import yaml
from scipy import stats as scipy_stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from merit_repro.plan import grid  # noqa: E402
from merit_repro.report.artifacts import load_context  # noqa: E402
from merit_repro.report.artifacts.context import PAIRS  # noqa: E402
from merit_repro.report.claims import Estimate, Setting, compare, statement, t_critical, t_one_sided  # noqa: E402

ALPHA = 0.05
PAPER_NUMBERS = Path(__file__).resolve().parents[1] / "workflow" / "resources" / "paper_numbers.csv"


def paired_margin(n, r):
    return t_one_sided(ALPHA, n - 1) * math.sqrt(2 * (1 - r) / n)


def welch_margin(n, hsu=True):
    df = n - 1 if hsu else 2 * (n - 1)   # equal spreads: Welch–Satterthwaite gives 2 (n - 1)
    return t_one_sided(ALPHA, df) * math.sqrt(2 / n)


def power_80(n, scale, df):
    """The true difference (seed sds) a one-sided t test at ALPHA decides with probability 0.8."""
    crit = t_one_sided(ALPHA, df)
    lo, hi = 0.0, 50.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if scipy_stats.nct.sf(crit, df, mid / scale) < 0.8 else (lo, mid)
    return hi


def design(config):
    groups = len({(g.model, g.tokens, g.optimizer, g.batch) for g in grid.all_groups(config).values()})
    print(f"1. Design: margin (and the effect decided with 80% power) in seed sds, alpha {ALPHA:g}; one more claim "
          f"seed trains {groups} more cells (one per distinct tuned group)\n")
    print("| claim seeds | Welch, old df | Welch, Hsu df | paired r=0.5 | paired r=0.84 | paired r=0.96 |")
    print("|---|---|---|---|---|---|")
    for n in (3, 4, 5, 8):
        cells = [f"{welch_margin(n, False):.2f} ({power_80(n, math.sqrt(2 / n), 2 * (n - 1)):.2f})",
                 f"{welch_margin(n):.2f} ({power_80(n, math.sqrt(2 / n), n - 1):.2f})"]
        cells += [f"{paired_margin(n, r):.2f} ({power_80(n, math.sqrt(2 * (1 - r) / n), n - 1):.2f})"
                  for r in (0.5, 0.84, 0.96)]
        print(f"| {n} | " + " | ".join(cells) + " |")


def old_rule(a, b, tolerance):
    """The rule before (Welch–Satterthwaite df, at alpha for one setting): (margin, verdict)."""
    va, vb = a.std ** 2 / a.n, b.std ** 2 / b.n
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va ** 2 / (a.n - 1) + vb ** 2 / (b.n - 1))
    margin = max(t_critical(ALPHA, df) * se, tolerance * abs(b.mean))
    d = a.mean - b.mean
    return margin, "held" if d < -margin else "did not hold" if d > margin else "inconclusive"


def on_runs(config, results):
    tables = Path(results) / "tables"
    print("\n2. The demo's runs, each model's largest batch (final validation loss, claim seeds):\n")
    print("| experiment | model | batch | comparison | difference | seed sd | old margin (Welch-S) | old verdict | "
          "new margin (paired) | in seed sds | detectable | r | new verdict |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    seen = set()
    for experiment, spec in config["experiments"].items():
        if not {"adamw", "lamb", "merit"} <= set(spec["optimizers"]):
            continue
        ctx = load_context(experiment, config, tables / "runs.csv", tables / "cells.csv", tables / "best_lr.csv",
                           PAPER_NUMBERS)
        for model in spec["models"]:
            batch = ctx.batches(model)[-1]
            for a, b in PAIRS:
                if (model, batch, a, b) in seen:
                    continue
                seen.add((model, batch, a, b))
                ea, eb = ctx.estimate(model, a, batch), ctx.estimate(model, b, batch)
                if ea.missing or eb.missing or ea.diverged or eb.diverged or min(ea.n, eb.n) < 2:
                    continue
                plain = (Estimate(ea.label, ea.mean, ea.std, ea.n), Estimate(eb.label, eb.mean, eb.std, eb.n))
                margin, before = old_rule(*plain, ctx.stats.tolerance)
                c = compare(ea, eb, ctx.stats)
                now = statement("x", [Setting(model, str(batch), ea, eb)], ctx.stats).rows[0]
                low, high = c.interval(ALPHA)
                new_margin = max(high - c.difference, c.tolerance) if c.testable else float("nan")
                r = f"{c.correlation:.2f}" if c.correlation is not None else "–"
                sd = math.sqrt((ea.std ** 2 + eb.std ** 2) / 2)   # one run's seed sd, the two sides pooled
                print(f"| {experiment} | {model} | {batch} | {ctx.name(a)} vs {ctx.name(b)} | "
                      f"{ea.mean - eb.mean:+.4f} | "
                      f"{sd:.4f} | {margin:.4f} | {before} | {new_margin:.4f} | {new_margin / sd:.2f} | "
                      f"{power_80(ea.n, (high - c.difference) / t_one_sided(ALPHA, c.df) / sd, c.df) * sd:.4f} | "
                      f"{r} | {now.verdict}{f' ({now.why})' if now.why else ''} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configfile", type=Path, default=Path("config/config.yaml"))
    parser.add_argument("--results", default=None, help="the results folder (default: the config's)")
    args = parser.parse_args()
    config = yaml.safe_load(args.configfile.read_text())
    design(config)
    results = Path(args.results or config.get("results", "results"))
    if (results / "tables" / "best_lr.csv").exists():
        on_runs(config, results)
    else:
        print(f"\n2. No runs at {results}/tables: run the workflow first for the demo's own margins.")


if __name__ == "__main__":
    main()
