"""Table 1: zero-shot accuracy (ARC, COPA, HellaSwag, RACE, WiC and their average) of AdamW at the standard batch
against LAMB and MERIT at the large batch, through lm-evaluation-harness (merit_repro.evals.zeroshot).

Every number is the mean ± sd over a group's claim seeds at its best LR (chosen by validation loss on the grid
seeds, never by these accuracies). We report lm-eval's ``acc`` (zeroshot.metric): the paper's numbers sit on
its scale (GPT-2 Small's published lm-eval scores: HellaSwag acc 28.9 / acc_norm 31.1, ARC-Easy acc 43.8 /
acc_norm 39.5, against the paper's AdamW 29.2 and 43.4), and its "ARC" is ARC-Easy for the same reason
(ARC-Challenge is near 20 at this size).

Statements, on the average accuracy: MERIT at the large batch is no worse than AdamW at the standard batch (the
paper's reading of Table 1: large-batch MERIT keeps the small-batch downstream quality), and MERIT beats LAMB at
the same large batch. Tested as errors (100 - accuracy), lower is better, through merit_repro.report.claims.
"""

import dataclasses
import json
from pathlib import Path

import pandas as pd

from merit_repro.config.registry import OPTIMIZERS
from merit_repro.plan.paths import zeroshot_file
from merit_repro.report.claims import LOWER, NO_WORSE, Estimate, Pooled, Setting, of_values, statement
from merit_repro.report.figures import Line, Panel

from .context import record
from .paper import differences

TABLE = "downstream_zero_shot"
PAPER_METRICS = {"arc_easy": "acc_arc", "copa": "acc_copa", "hellaswag": "acc_hellaswag", "race": "acc_race",
                 "wic": "acc_wic", "average": "acc_avg"}


def group_scores(ctx, model, optimizer, batch):
    """{task or "average": {claim seed: accuracy in %}} of a group's best-LR claim-seed runs."""
    path = Path(zeroshot_file(ctx.results, ctx.experiment, model, optimizer, batch))
    if not path.is_file():
        return {}
    runs = ctx.seed_runs(model, optimizer, batch)
    wanted = {Path(d).parts[-7:]: int(seed) for d, seed in zip(runs.run_dir, runs.seed)}
    scores = {}
    for run, result in json.loads(path.read_text())["runs"].items():
        if Path(run).parts[-7:] not in wanted:   # not a reported seed of the best LR
            continue
        ours = result["merit_repro"]
        for task, value in {**ours["accuracy"], "average": ours["mean"]}.items():
            scores.setdefault(task, {})[wanted[Path(run).parts[-7:]]] = 100 * value
    return scores


def estimate(ctx, model, optimizer, batch, scores):
    """The average zero-shot error (100 - accuracy, lower is better) over the claim seeds, as a claims Estimate
    with each seed's value (the groups at one batch share their seeds' initialisation and batch order)."""
    label = f"{ctx.label(model, optimizer)}@{batch}"
    row = ctx.best_row(model, optimizer, batch)
    values = scores.get("average", {})
    if row is not None and row.status != "ok":   # a tuning failure, said as in every other artifact
        return dataclasses.replace(ctx.estimate(model, optimizer, batch), label=label)
    if row is None or not values:
        return Estimate(label, None)
    return of_values(label, {seed: 100 - v for seed, v in values.items()}, (model, batch), bool(row.at_edge), row.lr)


def zeroshot(ctx, prefix):
    tasks = list(ctx.config.get("zeroshot", {}).get("tasks", []))
    rows, panels, vs_adamw, vs_lamb, estimates = [], [], [], [], []
    for model in ctx.spec["models"]:
        batches = ctx.batches(model)
        small, large = batches[0], batches[-1]
        panel = Panel(f"{ctx.model_title(model)}: " + ", ".join(f"{i + 1} {t}" for i, t in enumerate(tasks)),
                      "task (last: average)", "zero-shot accuracy, % (seed mean ± sd)")
        found = {}
        for opt in ctx.optimizers():
            for batch in batches:
                if ctx.best_row(model, opt, batch) is None:
                    continue
                scores = group_scores(ctx, model, opt, batch)
                found[opt, batch] = est = estimate(ctx, model, opt, batch, scores)
                if opt in OPTIMIZERS:   # the paper's statements' noise: its optimizers' groups only
                    estimates.append(est)
                row = {"model": model, "optimizer": ctx.label(model, opt), "batch": batch,
                       "paper_batch": ctx.paper_batch(model, batch), "lr": ctx.best_row(model, opt, batch).lr,
                       "n_seeds": len(scores.get("average", {}))}
                for task in tasks + ["average"]:
                    values = pd.Series(list(scores.get(task, {}).values()), dtype=float)
                    row[task] = values.mean() if len(values) else None
                    row[f"{task} std"] = values.std() if len(values) > 1 else None
                    if task in PAPER_METRICS and not ctx.stands_in(model):
                        row[f"{task} (paper)"] = ctx.paper_value(TABLE, model, opt, batch, PAPER_METRICS[task])
                rows.append(row)
                means = [row[t] for t in tasks + ["average"]]
                if all(m is not None for m in means):
                    panel.lines.append(Line(f"{ctx.label(model, opt)} bs{batch}", list(range(1, len(means) + 1)),
                                            means, opt, "none", "o", [row[f"{t} std"] or 0 for t in tasks + ["average"]]))
        if ctx.stands_in(model):   # the paper's numbers in rows of their own: another model, other tasks
            for opt in ctx.optimizers():
                for batch in batches:
                    paper = {t: ctx.paper_value(TABLE, model, opt, batch, m) for t, m in PAPER_METRICS.items()}
                    if any(v is not None for v in paper.values()):
                        rows.append({"model": f"paper: {ctx.config['models'][model].get('paper_model')}",
                                     "optimizer": opt, "batch": ctx.paper_batch(model, batch),
                                     **{f"{t} (paper)": v for t, v in paper.items()}})
        panels.append(panel)
        missing = Estimate("missing", None)
        vs_adamw.append(Setting(model, f"{large} vs {small}", found.get(("merit", large), missing),
                                found.get(("adamw", small), missing)))
        vs_lamb.append(Setting(model, str(large), found.get(("merit", large), missing),
                               found.get(("lamb", large), missing)))
    ctx.figure(panels, prefix, "Table 1: zero-shot accuracy, AdamW at the standard batch vs LAMB and MERIT at a "
                               "large batch")
    pooled = Pooled.of(estimates)
    statements = [
        statement("MERIT at the large batch matches or beats AdamW at the standard batch in average zero-shot "
                  "accuracy (tested as error, no worse)", vs_adamw, ctx.stats, NO_WORSE, pooled)]
    if "lamb" in ctx.optimizers():
        statements.append(statement("MERIT beats LAMB at the large batch in average zero-shot accuracy (tested as "
                                    "error, lower)", vs_lamb, ctx.stats, LOWER, pooled))
    notes = [f"tasks {', '.join(tasks)} at 0 shots, metric {ctx.config.get('zeroshot', {}).get('metric', 'acc')}, "
             "through lm-evaluation-harness; accuracies in %, errors (100 - accuracy) in claims.csv"]
    local = set(ctx.config.get("zeroshot", {}).get("local_tasks", {})) & set(tasks)
    if local:
        notes.append(f"{', '.join(sorted(local))}: built from the validation split, 1 true line among 4 (chance 25%)")
    diffs = differences(ctx)
    if set(tasks) != set(PAPER_METRICS) - {"average"}:
        diffs.append(f"the tasks are {', '.join(tasks)}, not the paper's ARC, COPA, HellaSwag, RACE and WiC: a "
                     "stand-in (the demo builds its own next-line task from the validation split, offline), so the "
                     "paper's numbers are in their own rows")
    return pd.DataFrame(rows), record("Table 1: zero-shot downstream accuracy, batch 480 AdamW vs 4K/6K LAMB and "
                                      "MERIT", statements, diffs, notes)
