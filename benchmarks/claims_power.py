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
3. Fixed vs sequential (``second_look_seeds``), simulated through merit_repro.report.claims at the demo's median
   spread of a per-seed difference (from its runs) and at 0.6 tolerances: for each true difference, the share of
   statements decided and the claim seeds each group spends, with n seeds at alpha, 2n at alpha, and n then n
   more where the first n left it undecided for want of seeds, each look at alpha/2; and the rate of the most
   often false verdict (held, did not hold, equivalent: each a test at alpha of its own).
4. The split of alpha between the two looks (``report.first_look_share``): for each share of alpha the first look
   takes (the second the rest), the share of statements decided, averaged over the true gaps of part 3, the seeds a
   group spends and the largest false-verdict rate, at the same spreads. The rule, fixed before it ran: the share that
   decides the most, averaged over both spreads, among those whose false rate stays within alpha + 2 Monte Carlo
   errors; ties to the even split. config/config.yaml's first_look_share is its choice.
"""

import argparse
import math
import random
import sys
from pathlib import Path

import yaml
from scipy import stats as scipy_stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from merit_repro.plan import grid  # noqa: E402
from merit_repro.report.artifacts import load_context  # noqa: E402
from merit_repro.report.artifacts.context import PAIRS  # noqa: E402
from merit_repro.report.claims import DECIDED, EQUIVALENT, HELD, NOT_HELD, Setting, statement  # noqa: E402
from merit_repro.report.stats import Estimate, Stats, compare, of_values, t_critical, t_one_sided  # noqa: E402

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


def largest_batch_pairs(config, results):
    """(experiment, Context, model, batch, a, b, estimate of a, estimate of b) of MERIT, LAMB and AdamW pairwise at
    each model's largest batch, each comparison once, where both sides have two or more claim seeds."""
    tables = Path(results) / "tables"
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
                if not (ea.missing or eb.missing or ea.diverged or eb.diverged or min(ea.n, eb.n) < 2):
                    yield experiment, ctx, model, batch, a, b, ea, eb


def on_runs(config, results):
    print("\n2. The demo's runs, each model's largest batch (final validation loss, claim seeds):\n")
    print("| experiment | model | batch | comparison | difference | seed sd | old margin (Welch-S) | old verdict | "
          "new margin (paired) | in seed sds | detectable | r | new verdict |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for experiment, ctx, model, batch, a, b, ea, eb in largest_batch_pairs(config, results):
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


def contrast_sds(config, results):
    """The demo's per-seed differences' sd in tolerances (MERIT, LAMB, AdamW pairwise at each model's largest
    batch), or [] without its runs."""
    if not (Path(results) / "tables" / "best_lr.csv").exists():
        return []
    sds = []
    for _, ctx, _, _, _, _, ea, eb in largest_batch_pairs(config, results):
        c = compare(ea, eb, ctx.stats)
        if c.testable and c.test == "paired t":
            sds.append(c.se * math.sqrt(c.subject.n) / c.tolerance)
    return sds


def draw(gap, sd, seeds, tolerance, rng):
    """Per-seed values of a and b with a - b = gap tolerances plus noise of sd tolerances at each seed (what a
    seed's runs share cancels in the paired difference); the reference's level is 3.0."""
    b = {s: 3.0 + 0.05 * rng.gauss(0.0, 1.0) for s in seeds}
    return {s: b[s] + tolerance * (gap + sd * rng.gauss(0.0, 1.0)) for s in seeds}, b


def judged(values, seeds, stats):
    """claims.statement's "a is lower than b" in one setting, on the given seeds of draw's values."""
    a, b = ({s: v[s] for s in seeds} for v in values)
    return statement("a is lower", [Setting("S", "8", of_values("a", a, ("S", 8), group=("S", "a", 8)),
                                            of_values("b", b, ("S", 8), group=("S", "b", 8)))], stats)


def sequential(sd, n=3, trials=2000, seed=0):
    """Decided share, false verdicts and seeds per group at each true gap: n at alpha, 2n at alpha, n + n later."""
    rng = random.Random(seed)
    one, half = Stats(ALPHA, 0.005), Stats(ALPHA / 2, 0.005, looks=2)
    tolerance = one.tolerance * 3.0
    first, both = list(range(1, n + 1)), list(range(1, 2 * n + 1))
    print(f"\n3. Fixed vs sequential at a per-seed difference sd of {sd:.2f} tolerances ({trials} statements per gap; "
          f"alpha {ALPHA:g}; sequential: {n} claim seeds, then {n} more where the first look left the statement "
          "undecided for want of seeds, each look at alpha/2)\n")
    print(f"| true gap (tolerances) | decided, {n} seeds | decided, {2 * n} seeds | decided, sequential | seeds per "
          f"group, sequential | the most often false verdict's rate: {n} / {2 * n} / sequential |")
    print("|---|---|---|---|---|---|")
    for gap in (-4.0, -3.0, -2.0, -1.5, -0.5, 0.0, 2.0):
        # what each verdict claims (merit_repro.report.claims): held, d < 0 (its point beyond the tolerance);
        # equivalent, |d| < the tolerance; did not hold, d > the tolerance
        truth = {v for v, true in ((HELD, gap < 0), (EQUIVALENT, abs(gap) < 1), (NOT_HELD, gap > 1)) if true}
        decided, spent = {"n": 0, "2n": 0, "seq": 0}, 0
        wrong = {k: {v: 0 for v in DECIDED} for k in decided}   # each verdict is a test at alpha of its own
        for _ in range(trials):
            values = draw(gap, sd, both, tolerance, rng)
            early = judged(values, first, half)
            again = bool(early.needs_seeds())
            spent += len(both) if again else n
            results = {"n": judged(values, first, one).result, "2n": judged(values, both, one).result,
                       "seq": judged(values, both, half).result if again else early.result}
            for name, result in results.items():
                decided[name] += result in DECIDED
                if result in DECIDED and result not in truth:
                    wrong[name][result] += 1
        print(f"| {gap:+.1f} | {decided['n'] / trials:.3f} | {decided['2n'] / trials:.3f} | "
              f"{decided['seq'] / trials:.3f} | {spent / trials:.2f} | "
              + " / ".join(f"{max(wrong[k].values()) / trials:.3f}" for k in ("n", "2n", "seq")) + " |")


GAPS = (-4.0, -3.0, -2.0, -1.5, -0.5, 0.0, 2.0)
SHARES = (0.2, 0.3, 0.4, 0.5, 0.6)


def truths(gap):
    """What each verdict claims (merit_repro.report.claims): held, d < 0 (its point beyond the tolerance); equivalent,
    |d| < the tolerance; did not hold, d > the tolerance."""
    return {v for v, true in ((HELD, gap < 0), (EQUIVALENT, abs(gap) < 1), (NOT_HELD, gap > 1)) if true}


def split(sd, share, n=3, trials=1000, seed=0):
    """(decided share averaged over GAPS, seeds per group, the largest false-verdict rate) of two looks with the first
    at share x alpha and the second at the rest."""
    rng = random.Random(seed)
    first_look, second_look = Stats(ALPHA * share, 0.005, looks=2), Stats(ALPHA * (1 - share), 0.005, looks=2)
    tolerance = first_look.tolerance * 3.0
    first, both = list(range(1, n + 1)), list(range(1, 2 * n + 1))
    decided, spent, worst = 0, 0, 0.0
    for gap in GAPS:
        wrong = {v: 0 for v in DECIDED}
        for _ in range(trials):
            values = draw(gap, sd, both, tolerance, rng)
            early = judged(values, first, first_look)
            again = bool(early.needs_seeds())
            spent += len(both) if again else n
            result = judged(values, both, second_look).result if again else early.result
            decided += result in DECIDED
            if result in DECIDED and result not in truths(gap):
                wrong[result] += 1
        worst = max(worst, max(wrong.values()) / trials)
    return decided / (trials * len(GAPS)), spent / (trials * len(GAPS)), worst


def splits(sds, trials=1000):
    """Part 4: every share of SHARES at each spread, and the one the rule picks."""
    print(f"\n4. The split of alpha {ALPHA:g} between the looks ({trials} statements per gap and share; gaps "
          f"{', '.join(f'{g:+g}' for g in GAPS)} tolerances)\n")
    print("| first look's share | " + " | ".join(f"decided / seeds / false at sd {sd:.2f}" for sd in sds) + " |")
    print("|---|" + "---|" * len(sds))
    found = {}
    for share in SHARES:
        found[share] = [split(sd, share, trials=trials) for sd in sds]
        print(f"| {share:g} | " + " | ".join(f"{d:.3f} / {s:.2f} / {w:.3f}" for d, s, w in found[share]) + " |")
    mc = 2 * math.sqrt(ALPHA * (1 - ALPHA) / trials)
    within = [s for s in SHARES if all(w <= ALPHA + mc for _, _, w in found[s])]
    mean = {s: sum(d for d, _, _ in found[s]) / len(sds) for s in within}
    best = max(within, key=lambda s: (round(mean[s], 3), s == 0.5))
    print(f"\nthe rule's choice: first_look_share {best:g} (decides {mean[best]:.3f} averaged over both spreads; the "
          f"even split {mean.get(0.5, float('nan')):.3f})")
    return best


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
    sds = sorted(contrast_sds(config, results))
    spreads = ([sds[len(sds) // 2]] if sds else []) + [0.6]   # the demo's median, and a run far less noisy
    for sd in spreads:
        sequential(sd)
    splits(spreads)


if __name__ == "__main__":
    main()
