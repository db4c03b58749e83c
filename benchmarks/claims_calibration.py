"""How often the claims machinery gives a wrong verdict, and how biased the reported mean is.

    python benchmarks/claims_calibration.py [--experiments 4000] [--sd 0.1] [--seed 0]

1. False verdicts: every optimizer equal (seed sd --sd, 3 claim seeds a side), statements over 1, 2
   and 3 settings through merit_repro.report.claims.statement: the share that come out held or did not
   hold, against alpha. Also a one-seed side weighed with a pooled seed noise (pooled over 8 groups).
   For comparison, the rule before Welch (2 standard errors, no correction for the settings).
2. Selection bias: LR tuning through merit_repro.plan.tuning.tune on a bowl-shaped landscape with seed
   noise; the reported mean at the chosen LR minus its true mean, over many tuned groups, with claim
   seeds disjoint from the grid seed (the workflow's rule) and with the grid seed among them (before).
"""

import argparse
import math
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from merit_repro.config.configfiles import schema_defaults  # noqa: E402
from merit_repro.plan.tuning import tune  # noqa: E402
from merit_repro.report.claims import HELD, NOT_HELD, Estimate, Pooled, Setting, Stats, statement  # noqa: E402


def sample(rng, label, n, sd, mean=3.0):
    xs = [rng.gauss(mean, sd) for _ in range(n)]
    m = sum(xs) / n
    return Estimate(label, m, math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1)) if n > 1 else 0.0, n)


def false_verdict_rate(rng, settings, experiments, sd, stats, n_subject=3, pooled_groups=0, old_rule=False):
    wrong = 0
    for _ in range(experiments):
        rows = [Setting("S", str(k), sample(rng, "merit", n_subject, sd), sample(rng, "adamw", 3, sd))
                for k in range(settings)]
        pooled = Pooled.of([sample(rng, "g", 3, sd) for _ in range(pooled_groups)]) if pooled_groups else None
        if old_rule:
            wrong += old_verdict(rows, stats) in (HELD, NOT_HELD)
        else:
            wrong += statement("null", rows, stats, pooled=pooled).result in (HELD, NOT_HELD)
    return wrong / experiments


def old_verdict(rows, stats):
    """The rule this project used before: 2 standard errors, any part failing fails the claim."""
    outcomes = []
    for s in rows:
        d = s.subject.mean - s.reference.mean
        margin = max(stats.tolerance * abs(s.reference.mean),
                     2 * math.sqrt(s.subject.std ** 2 / s.subject.n + s.reference.std ** 2 / s.reference.n))
        outcomes.append("better" if d < -margin else "worse" if d > margin else "tie")
    return NOT_HELD if "worse" in outcomes else HELD if set(outcomes) == {"better"} else "inconclusive"


def selection_bias(rng, groups, sd, claim_seeds):
    """Mean of (reported - true) at the chosen LR over tuned groups of a 5-point grid around a bowl."""
    lrs = ["1e-3", "2e-3", "4e-3", "8e-3", "1.6e-2"]
    truth = {lr: 3.0 + 0.01 * math.log(float(lr) / 4e-3) ** 2 for lr in lrs}
    errors = []
    for _ in range(groups):
        draws = {}

        def train(cells):
            return {c: draws.setdefault(c, truth.get(c[0], 3.5) + rng.gauss(0, sd)) for c in cells}
        spec = {"lrs": lrs, "grid_seeds": [0], "claim_seeds": claim_seeds, "max_extensions": 0, "extension_factor": 2.0}
        best = tune(spec, train)["best_lr"]
        reported = [draws[(best, s)] for s in claim_seeds]
        errors.append(sum(reported) / len(reported) - truth[best])
    mean = sum(errors) / len(errors)
    se = math.sqrt(sum((e - mean) ** 2 for e in errors) / (len(errors) - 1) / len(errors))
    return mean, se


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--experiments", type=int, default=4000)
    parser.add_argument("--sd", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    stats, rng = Stats.from_report(schema_defaults("report")), random.Random(args.seed)
    print(f"false verdicts with every optimizer equal (seed sd {args.sd}, n = 3 a side, {args.experiments} "
          f"experiments each; alpha {stats.alpha:g}):")
    print("| settings | Welch + Bonferroni (now) | 2 standard errors, no correction (before) |")
    print("|---|---|---|")
    for k in (1, 2, 3):
        now = false_verdict_rate(rng, k, args.experiments, args.sd, stats)
        before = false_verdict_rate(rng, k, args.experiments, args.sd, stats, old_rule=True)
        print(f"| {k} | {now:.4f} | {before:.4f} |")
    pooled = false_verdict_rate(rng, 1, args.experiments, args.sd, stats, n_subject=1, pooled_groups=8)
    print(f"one-seed subject against 3 seeds, pooled seed noise over 8 groups: {pooled:.4f}")
    print(f"\nselection bias of the reported mean (5-point grid chosen on 1 grid seed, seed sd {args.sd}):")
    for name, seeds in (("claim seeds [1, 2, 3], disjoint (now)", [1, 2, 3]),
                        ("claim seeds [0, 1, 2], grid seed among them (before)", [0, 1, 2])):
        mean, se = selection_bias(rng, args.experiments, args.sd, seeds)
        print(f"  {name}: {mean:+.4f} ± {se:.4f} (MC standard error)")


if __name__ == "__main__":
    main()
