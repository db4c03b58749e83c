"""How often the claims machinery gives a false verdict, under every null the data can present.

    python benchmarks/claims_calibration.py [--experiments 4000] [--seed 0]

Each row simulates --experiments statements through merit_repro.report.claims.statement, with seeds drawn
the way the runs present them, and counts the verdicts that contradict the truth: held, did not hold or
equivalent where the truth is otherwise. Each verdict is false on one side of the tolerance only and is its own
one-sided test at alpha, so each verdict's rate is counted apart and the row shows the largest; with the truth
at the edge of a verdict (a null), it must be at most alpha; "± MC" is its Monte Carlo standard error. Columns:
the scenario, the test the design gets, the false verdict, its rate, its error, and whether it is within alpha
(rate <= alpha + 2 MC errors).

1. Equal means, independent groups (Welch, Hsu's df), seed sd ratio 1 to 6, n = 3 and 5 a side.
2. Equal means, paired seeds (common random numbers) with correlation 0, 0.5, 0.9, unequal spreads too.
3. Trends: AdamW degrades (two batches, Welch) with one wide side; a growing gap (a paired contrast of four).
4. Boundaries: no-worse with the truth exactly at the tolerance (held is false); a difference exactly at
   the tolerance (equivalent is false).
5. Statements over 1, 2, 3 settings (held needs all at alpha; did not hold is Holm-corrected).
6. The whole path: tuning.tune on two optimizers with the same LR landscape and seed-correlated noise,
   the claim seeds at each first choice, then the paired statement.
7. Zero-shot: both models score the same 200 items, equal on the population of items but not item by item;
   the seeds alone miss the item sampling, the item-paired variance (artifacts.zeroshot.item_variance) adds it.
8. Through the production path (benchmarks/claims_production.py): synthetic runs -> the tables -> Context -> the
   artifacts' statements, with mixed truths across settings, one null among true settings, a grid edge on a
   MAL term and on the reference, paired contrasts across batches; the rules before beside each.
Also: power, the rules before (two-sided, Welch across batches) and now on the same alternatives; the old rule
(Welch–Satterthwaite df) on the unequal-spread null; and the selection bias of the reported mean with claim
seeds disjoint from the grid seed and not.
"""

import argparse
import math
import random
import sys
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "src"), str(Path(__file__).resolve().parent)]

import claims_production as production  # noqa: E402

from merit_repro.config.configfiles import schema_defaults  # noqa: E402
from merit_repro.report.artifacts.zeroshot import item_variance  # noqa: E402
from merit_repro.plan.tuning import tune  # noqa: E402
from merit_repro.report.claims import EQUIVALENT, HELD, LOWER, NOT_HELD, NO_WORSE, Setting, statement  # noqa: E402
from merit_repro.report.stats import Estimate, Stats, of_values, t_critical  # noqa: E402

MEAN = 3.0


def draws(rng, n, sds, rho):
    """n seeds of len(sds) correlated runs: x_i = sd_i (sqrt(rho) z_shared + sqrt(1 - rho) z_i)."""
    out = []
    for _ in range(n):
        shared = rng.gauss(0, 1)
        out.append([sd * (math.sqrt(rho) * shared + math.sqrt(1 - rho) * rng.gauss(0, 1)) for sd in sds])
    return out


def side(label, values, setting, independent):
    """An estimate of one side; independent groups carry no per-seed values, so they are tested by Welch."""
    e = of_values(label, dict(enumerate(values, 1)), setting)
    return Estimate(label, e.mean, e.std, e.n) if independent else e


def pair(rng, n, sds, rho, shift=0.0, independent=False, setting=("S", 64)):
    rows = draws(rng, n, sds, rho)
    a = side("subject", [MEAN + shift + r[0] for r in rows], setting, independent)
    b = side("reference", [MEAN + r[1] for r in rows], setting, independent)
    return a, b


def rates(stats, experiments, make):
    """{verdict: share of experiments} of the statements make() -> (settings, kind) gives."""
    counts = {}
    for _ in range(experiments):
        settings, kind = make()
        result = statement("null", settings, stats, kind or LOWER).result
        counts[result] = counts.get(result, 0) + 1
    return {k: v / experiments for k, v in counts.items()}


def rate(stats, experiments, make, wrong):
    """(the false verdict with the largest share, its share, its MC error): each verdict counted apart."""
    found = rates(stats, experiments, make)
    verdict = max(sorted(wrong), key=lambda v: found.get(v, 0.0))
    p = found.get(verdict, 0.0)
    return verdict, p, math.sqrt(max(p * (1 - p), 1e-12) / experiments)


def row(name, test, verdict, p, mc, alpha):
    ok = "yes" if p <= alpha + 2 * mc else "NO"
    print(f"| {name} | {test} | {verdict} | {p:.4f} | {mc:.4f} | {ok} |")
    return p <= alpha + 2 * mc


def scenarios(rng, stats):
    """(name, test, make, wrong verdicts) for every null."""
    tol = stats.tolerance * MEAN
    decided = {HELD, NOT_HELD}
    out = []
    for n in (3, 5):
        for ratio in (1, 2, 4, 6):
            out.append((f"equal means, independent, n={n}, sd ratio {ratio}", "Welch (Hsu df)",
                        lambda n=n, ratio=ratio: ([Setting("S", "64", *pair(rng, n, (0.1 * ratio, 0.1), 0.0,
                                                                           independent=True))], None), decided))
    for rho in (0.0, 0.5, 0.9):
        for ratio in (1, 4):
            out.append((f"equal means, paired, r={rho}, sd ratio {ratio}", "paired t",
                        lambda rho=rho, ratio=ratio: ([Setting("S", "64", *pair(rng, 3, (0.1 * ratio, 0.1), rho))],
                                                      None), decided))

    def degrades():
        small = side("adamw@16", [MEAN + x[0] for x in draws(rng, 3, (0.225,), 0)], ("S", 16), False)
        large = side("adamw@64", [MEAN + x[0] for x in draws(rng, 3, (0.041,), 0)], ("S", 64), False)
        return [Setting("S", "16->64", small, large)], None
    out.append(("trend: one optimizer across batches, sd 0.225 vs 0.041", "Welch (Hsu df)", degrades, decided))

    def gap(rho):
        def make():
            terms = {}
            for batch, sds in ((64, (0.06, 0.2)), (16, (0.02, 0.03))):
                rows = draws(rng, 3, sds, rho)
                terms[batch] = [side(o, [MEAN + r[i] for r in rows], ("S", batch), False)
                                for i, o in enumerate(("merit", "adamw"))]
            return [Setting("S", "16->64", terms[64][0] - terms[64][1], terms[16][0] - terms[16][1])], None
        return make
    for rho in (0.0, 0.9):
        out.append((f"trend: a growing gap (four terms), r={rho}, unequal spreads", "paired t", gap(rho), decided))
    out.append(("no worse, truth at the tolerance, paired r=0.5", "paired t",
                lambda: ([Setting("S", "64", *pair(rng, 3, (0.05, 0.05), 0.5, shift=tol))], NO_WORSE), {HELD}))
    out.append(("no worse, truth at the tolerance, independent, sd ratio 4", "Welch (Hsu df)",
                lambda: ([Setting("S", "64", *pair(rng, 3, (0.2, 0.05), 0.0, shift=tol, independent=True))],
                         NO_WORSE), {HELD}))
    for shift in (tol, -tol):
        out.append((f"difference {shift:+.3f} = the tolerance, paired r=0.9, seed sd 0.002", "paired t",
                    lambda shift=shift: ([Setting("S", "64", *pair(rng, 3, (0.002, 0.002), 0.9, shift=shift))], None),
                    {EQUIVALENT}))
    for k in (1, 2, 3):
        out.append((f"equal means over {k} settings, paired r=0.5", "paired t",
                    lambda k=k: ([Setting("S", str(i), *pair(rng, 3, (0.1, 0.1), 0.5, setting=("S", i)))
                                  for i in range(k)], None), decided))
        out.append((f"equal means over {k} settings, independent, sd ratio 4", "Welch (Hsu df)",
                    lambda k=k: ([Setting("S", str(i), *pair(rng, 3, (0.4, 0.1), 0.0, independent=True))
                                  for i in range(k)], None), decided))
    return out


def tuned_path(rng, stats, experiments, sd=0.05, rho=0.8):
    """Two optimizers with the same bowl over LRs, seed noise shared at a seed (rho), tuned on grid seed 0,
    reported on claim seeds 1-3 at each one's first choice: how often the paired statement decides."""
    lrs = ["1e-3", "2e-3", "4e-3", "8e-3", "1.6e-2"]
    truth = {lr: MEAN + 0.01 * math.log(float(lr) / 4e-3) ** 2 for lr in lrs}
    hits = {HELD: 0, NOT_HELD: 0}
    for _ in range(experiments):
        shared = {}

        def noise(lr, seed, own):
            common = shared.setdefault((lr, seed), rng.gauss(0, 1))
            return sd * (math.sqrt(rho) * common + math.sqrt(1 - rho) * own)
        estimates = []
        for label in ("merit", "adamw"):
            draws_ = {}

            def train(cells):
                return {c: draws_.setdefault(c, truth.get(c[0], MEAN + 0.5) + noise(*c, rng.gauss(0, 1))) for c in cells}
            spec = {"lrs": lrs, "grid_seeds": [0], "claim_seeds": [1, 2, 3], "max_extensions": 1,
                    "extension_factor": 2.0}
            best = tune(spec, train)["best_lr"]
            estimates.append(of_values(label, {s: draws_[(best, s)] for s in (1, 2, 3)}, ("S", 64)))
        result = statement("null", [Setting("S", "64", *estimates)], stats).result
        hits[result] = hits.get(result, 0) + 1
    verdict = max((HELD, NOT_HELD), key=hits.get)
    p = hits[verdict] / experiments
    return verdict, p, math.sqrt(max(p * (1 - p), 1e-12) / experiments)


def zeroshot_nulls(rng, items=200, seeds=3):
    """Both models equally good over the population of items (d = 0) but not item by item: a model mostly knows
    an item or not whatever its seed (its latent draw per item is shared by its seeds; one in ten is drawn anew at
    each seed), and a seed shifts its ability (sd 0.02). The same items score both models at every seed, so the
    seeds alone see a small spread and miss the items' sampling. (name, test, make with the item noise, wrong
    verdicts, make with the seeds alone)."""
    def draw():
        difficulty = [rng.uniform(0.2, 0.8) for _ in range(items)]
        sides = {}
        for name in ("merit", "adamw"):
            known = [rng.random() for _ in range(items)]
            sides[name] = {}
            for s in range(1, seeds + 1):
                shift = rng.gauss(0, 0.02)
                latent = [rng.random() if rng.random() < 0.1 else u for u in known]
                sides[name][s] = [float(u < p + shift) for u, p in zip(latent, difficulty)]
        errors = {n: of_values(n, {s: 100 * (1 - sum(c) / items) for s, c in v.items()}, ("S", 64))
                  for n, v in sides.items()}
        arrays = {n: {s: {"t": np.array(c)} for s, c in v.items()} for n, v in sides.items()}
        return errors, item_variance(arrays["merit"], arrays["adamw"])

    def make(with_items):
        def settings():
            errors, variance = draw()
            return [Setting("S", "64", errors["merit"], errors["adamw"], extra_variance=variance if with_items
                            else 0.0, floor=0.5)], None
        return settings
    return [(f"zero-shot: equal over the items' population, {items} items, {seeds} seeds, tolerance 0.5 points",
             "paired t + item noise", make(True), {HELD, NOT_HELD}, make(False))]


def power(rng, stats, experiments):
    """How often a true verdict is reached, the rules before (two-sided: alpha / 2 a side; Welch across batches)
    and now (one-sided at alpha; paired wherever the seeds are the same)."""
    tol = stats.tolerance * MEAN
    old = Stats(stats.alpha / 2, stats.tolerance)
    print("\npower on the same alternatives, before and now (paired, n = 3 unless said):\n")
    print("| truth | verdict | before | now |")
    print("|---|---|---|---|")
    cases = [("d = -3 tol, contrast sd 2 tol", HELD,
              lambda: [Setting("S", "64", *pair(rng, 3, (2 * tol / math.sqrt(2),) * 2, 0.0, shift=-3 * tol))], False),
             ("d = 0, contrast sd 0.6 tol", EQUIVALENT,
              lambda: [Setting("S", "64", *pair(rng, 3, (0.6 * tol / math.sqrt(2),) * 2, 0.0))], False),
             ("across batches: +1.5 seed sds, r = 0.5 (before: Welch, Hsu df)", HELD,
              lambda: [Setting("S", "16->64", *reversed(pair(rng, 3, (0.1, 0.1), 0.5, shift=0.15)))], True)]
    for name, verdict, make, across in cases:
        before = now = 0
        for _ in range(experiments // 2):
            settings = make()
            now += statement("x", settings, stats).result == verdict
            if across:   # the old rule paired only within a (model, batch): these sides were independent groups
                settings = [Setting(s.model, s.batch, *(Estimate(e.label, e.mean, e.std, e.n) for e in
                                                        (s.subject, s.reference))) for s in settings]
            before += statement("x", settings, old).result == verdict
        print(f"| {name} | {verdict} | {before / (experiments // 2):.3f} | {now / (experiments // 2):.3f} |")


def old_rule_rate(rng, stats, experiments, ratio=6):
    """The rule before this one: Welch–Satterthwaite df at 3 seeds a side with unequal spreads."""
    hits = 0
    for _ in range(experiments):
        a, b = pair(rng, 3, (0.1 * ratio, 0.1), 0.0, independent=True)
        va, vb = a.std ** 2 / 3, b.std ** 2 / 3
        df = (va + vb) ** 2 / (va ** 2 / 2 + vb ** 2 / 2)
        margin = max(t_critical(stats.alpha, df) * math.sqrt(va + vb), stats.tolerance * b.mean)
        hits += abs(a.mean - b.mean) > margin
    p = hits / experiments
    return p, math.sqrt(max(p * (1 - p), 1e-12) / experiments)


def selection_bias(rng, groups, sd, claim_seeds):
    """Mean of (reported - true) at the chosen LR over tuned groups of a 5-point grid around a bowl."""
    lrs = ["1e-3", "2e-3", "4e-3", "8e-3", "1.6e-2"]
    truth = {lr: MEAN + 0.01 * math.log(float(lr) / 4e-3) ** 2 for lr in lrs}
    errors = []
    for _ in range(groups):
        draws_ = {}

        def train(cells):
            return {c: draws_.setdefault(c, truth.get(c[0], 3.5) + rng.gauss(0, sd)) for c in cells}
        spec = {"lrs": lrs, "grid_seeds": [0], "claim_seeds": claim_seeds, "max_extensions": 0, "extension_factor": 2.0}
        best = tune(spec, train)["best_lr"]
        errors.append(sum(draws_[(best, s)] for s in claim_seeds) / len(claim_seeds) - truth[best])
    mean = sum(errors) / len(errors)
    return mean, math.sqrt(sum((e - mean) ** 2 for e in errors) / (len(errors) - 1) / len(errors))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--experiments", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--production", type=int, default=200,
                        help="experiments per null through the production path (0: skip; about 0.3 s each)")
    args = parser.parse_args()
    stats, rng = Stats.from_report(schema_defaults("report")), random.Random(args.seed)
    print(f"false verdicts under each null, {args.experiments} experiments each, alpha {stats.alpha:g}, tolerance "
          f"{stats.tolerance:g} of {MEAN} (means {MEAN}, seed sd 0.1 unless said):\n")
    print("| null | test | false verdict (the largest) | rate | ± MC | within alpha |")
    print("|---|---|---|---|---|---|")
    ok = True
    for name, test, make, wrong in scenarios(rng, stats):
        ok &= row(name, test, *rate(stats, args.experiments, make, wrong), stats.alpha)
    ok &= row("tune -> claims: same landscape, r=0.8, first choices on grid seed 0", "paired t",
              *tuned_path(rng, stats, max(500, args.experiments // 4)), stats.alpha)
    for name, test, make, wrong, seeds_only in zeroshot_nulls(rng):
        ok &= row(name, test, *rate(stats, args.experiments // 4, make, wrong), stats.alpha)
        verdict, p, mc = rate(stats, args.experiments // 4, seeds_only, wrong)
        print(f"|   the same without the item noise (seeds alone) | paired t | {verdict} | {p:.4f} | {mc:.4f} | – |")
    power(rng, stats, args.experiments)
    if args.production:
        ok &= production.run(args.production, args.seed, stats.alpha)
    p, mc = old_rule_rate(rng, stats, args.experiments)
    print(f"\nthe old rule (Welch–Satterthwaite df) on equal means, n=3, sd ratio 6: {p:.4f} ± {mc:.4f} "
          f"(alpha {stats.alpha:g})")
    print("\nselection bias of the reported mean (5-point grid chosen on 1 grid seed, seed sd 0.1):")
    for name, seeds in (("claim seeds [1, 2, 3], disjoint (the rule)", [1, 2, 3]),
                        ("claim seeds [0, 1, 2], grid seed among them", [0, 1, 2])):
        mean, se = selection_bias(rng, args.experiments, 0.1, seeds)
        print(f"  {name}: {mean:+.4f} ± {se:.4f} (MC standard error)")
    print("\nevery null within alpha" if ok else "\nSOME NULL EXCEEDS ALPHA")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
