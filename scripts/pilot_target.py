"""The pilot that fixes Figure 1's target before the runs it judges, on seeds that never choose or report.

    python scripts/pilot_target.py [--configfile config/config.yaml] [--seeds 100 101 102] [--jobs 2]

The rule (config's ``target_rule``): for each experiment with the ``steps_to_target`` artifact, AdamW at its
smallest batch is trained at every LR of its configured grid with the pilot seeds; the target is the lowest
seed-mean final validation loss over those LRs, rounded to 0.01: what the standard batch reaches, which
Figure 1 asks the larger batches to reach in the same tokens. The pilot seeds must be neither grid nor claim
seeds of any experiment (refused otherwise), so the target never sees a seed whose runs report. Runs go to
``<results>/pilot/<experiment>/lr<lr>/seed<seed>`` and resume like any cell; the corpus must be prepared
(``snakemake --cores 2 <results>/data/<name>/meta.json``). Prints the table and each target.
"""

import argparse
import statistics
import sys
from pathlib import Path

from merit_repro.config import configfiles
from merit_repro.plan import grid
from merit_repro.plan.tuning import canonical
from merit_repro.plan.validate import validate
from merit_repro.train.pilot import refuse_reporting_seeds, train_all
from merit_repro.utils import UserError, check_numbers, cli


def pilot_cells(config, seeds):
    """{experiment: (model, batch, [(lr, seed, cell settings), ...])} for every steps_to_target experiment."""
    refuse_reporting_seeds(config, seeds)
    out = {}
    for name, exp in config["experiments"].items():
        if "steps_to_target" not in exp.get("artifacts", []) or "adamw" not in exp["optimizers"]:
            continue
        model = exp["models"][0]
        batches = exp["batch_sizes"]["adamw"] if isinstance(exp["batch_sizes"], dict) else exp["batch_sizes"]
        batch = min(batches)
        lrs = [canonical(lr) for lr in grid.lr_list(exp, model, "adamw")]
        out[name] = (model, batch, [(lr, s, grid.cell_config(config, model, exp["tokens"], "adamw", batch, lr, s))
                                    for lr in lrs for s in seeds])
    return out


@cli
def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configfile", type=Path, default=Path("config/config.yaml"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[100, 101, 102])
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    check_numbers(args, positive=("jobs",), non_negative=("seeds",))
    config = validate(configfiles.load(args.configfile))
    config.setdefault("results", "results")
    plan = pilot_cells(config, args.seeds)
    jobs = {(name, lr, s): (settings, str(Path(config["results"]) / "pilot" / name / f"lr{lr}" / f"seed{s}"))
            for name, (_, _, cells) in plan.items() for lr, s, settings in cells}
    finals = {key: summary["final_val_loss"] if summary["status"] == "ok" else None
              for key, summary in train_all(jobs, args.jobs).items()}
    for name, (model, batch, cells) in plan.items():
        print(f"\n{name}: AdamW, {model}, batch {batch}, pilot seeds {args.seeds}")
        print("| lr | " + " | ".join(f"seed {s}" for s in args.seeds) + " | mean |")
        print("|---|" + "---|" * (len(args.seeds) + 1))
        means = {}
        for lr in dict.fromkeys(lr for lr, _, _ in cells):
            values = [finals[(name, lr, s)] for s in args.seeds]
            mean = statistics.fmean(values) if None not in values else None
            means[lr] = mean
            print(f"| {lr} | " + " | ".join("diverged" if v is None else f"{v:.4f}" for v in values)
                  + f" | {'–' if mean is None else f'{mean:.4f}'} |")
        finite = [(m, lr) for lr, m in means.items() if m is not None]
        if not finite:
            raise UserError(f"{name}: AdamW diverged at every LR of its grid, so the pilot sets no target; give the "
                            "experiment lower AdamW LRs and run the pilot again")
        best = min(finite)
        print(f"target_val_loss: {round(best[0], 2):.2f}  (lowest mean {best[0]:.4f} at lr {best[1]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
