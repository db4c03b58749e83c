"""Table 1: zero-shot accuracy (ARC, COPA, HellaSwag, RACE, WiC and their average) of AdamW at the standard batch
against LAMB and MERIT at the large batch, through lm-evaluation-harness (merit_repro.evals.zeroshot).

Every number is the mean ± sd over a group's claim seeds at its best LR (chosen by validation loss on the grid
seeds, never by these accuracies). We report lm-eval's ``acc`` (zeroshot.metric): the paper's numbers sit on
its scale (GPT-2 Small's published lm-eval scores: HellaSwag acc 28.9 / acc_norm 31.1, ARC-Easy acc 43.8 /
acc_norm 39.5, against the paper's AdamW 29.2 and 43.4), and its "ARC" is ARC-Easy for the same reason
(ARC-Challenge is near 20 at this size).

Statements, on the average accuracy: MERIT at the large batch is no worse than AdamW at the standard batch (the
paper's reading of Table 1: large-batch MERIT keeps the small-batch downstream quality), and MERIT beats LAMB at
the same large batch. Tested as errors (100 - accuracy), lower is better, through merit_repro.report.claims. Both
sides score the same items, so each comparison's se adds the item-sampling variance of its difference
(``item_variance``), which the spread over seeds leaves out (200 items alone give an accuracy an sd of about 3
points).
"""

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd

from merit_repro.config.registry import OPTIMIZERS
from merit_repro.plan.paths import zeroshot_file
from merit_repro.report.claims import LOWER, NO_WORSE, Setting, statement
from merit_repro.report.stats import Estimate, Pooled, of_values
from merit_repro.report.figures import Line, Panel

from .context import record
from .paper import differences

TABLE = "downstream_zero_shot"
PAPER_METRICS = {"arc_easy": "acc_arc", "copa": "acc_copa", "hellaswag": "acc_hellaswag", "race": "acc_race",
                 "wic": "acc_wic", "average": "acc_avg"}


def group_scores(ctx, model, optimizer, batch):
    """({task or "average": {claim seed: accuracy in %}}, {claim seed: {task: its items' record
    (merit_repro.evals.zeroshot.item_scores)}, or None where the result has no record of every task (written before
    they were kept)}) of a group's best-LR claim-seed runs."""
    path = Path(zeroshot_file(ctx.results, ctx.experiment, model, optimizer, batch))
    if not path.is_file():
        return {}, {}
    runs = ctx.seed_runs(model, optimizer, batch)
    wanted = {Path(d).parts[-7:]: int(seed) for d, seed in zip(runs.run_dir, runs.seed)}
    scores, items = {}, {}
    for run, result in json.loads(path.read_text())["runs"].items():
        if Path(run).parts[-7:] not in wanted:   # not a reported seed of the best LR
            continue
        ours, seed = result["merit_repro"], wanted[Path(run).parts[-7:]]
        for task, value in {**ours["accuracy"], "average": ours["mean"]}.items():
            scores.setdefault(task, {})[seed] = 100 * value
        kept = ours.get("items") or {}
        items[seed] = kept if set(kept) == set(ours["accuracy"]) else None
    return scores, items


def correctness(record):
    """A task's items as an array: 1 right, 0 wrong, nan not scored ("-", below "0")."""
    codes = np.frombuffer(record["correct"].encode(), np.uint8).astype(float) - ord("0")
    codes[codes < 0] = np.nan
    return codes


def item_variance(subject, reference):
    """The variance of d = subject's average error - reference's (percentage points) from the sampling of items,
    given each side's per-item correctness ({seed: {task: array, 1 right, 0 wrong, nan not scored}}, the same seeds,
    tasks and scored items on both sides). The average error is the mean over tasks of each task's mean item error,
    so d is a weighted mean of the seed-averaged item contrasts delta_i = err_subject(i) - err_reference(i), weight
    1 / (n_tasks n_items of the task), and its variance over independently drawn items is
    sum over tasks of var_i(delta_i) / n_items / n_tasks²."""
    tasks = list(next(iter(subject.values())))
    total = 0.0
    for task in tasks:
        delta = 100 * (np.mean([reference[s][task] for s in reference], axis=0)
                       - np.mean([subject[s][task] for s in subject], axis=0))
        delta = delta[~np.isnan(delta)]
        total += delta.var(ddof=1) / len(delta) if len(delta) > 1 else 0.0
    return total / len(tasks) ** 2


def item_noise(subject, reference):
    """(the item-sampling variance of a comparison's difference, a note for its setting) from the two groups' item
    records (group_scores); 0 with the reason where the items or seeds do not pair (the seed-only test)."""
    if not subject or not reference:   # a side without results: the comparison says so
        return 0.0, ""
    if set(subject) != set(reference):
        return 0.0, (f"seed-only test (no item noise in the se): the claim seeds differ, "
                     f"{' '.join(map(str, sorted(subject)))} vs {' '.join(map(str, sorted(reference)))}")
    runs = [*subject.values(), *reference.values()]
    if any(r is None for r in runs):
        return 0.0, "seed-only test (no item noise in the se): results without per-item scores of every task"
    tasks = set(runs[0])
    if any(set(r) != tasks for r in runs):
        return 0.0, "seed-only test (no item noise in the se): the runs scored different tasks"
    arrays = [{t: correctness(r[t]) for t in tasks} for r in runs]
    for t in sorted(tasks):
        if len({r[t]["docs"] for r in runs}) > 1 or any(
                not np.array_equal(np.isnan(a[t]), np.isnan(arrays[0][t])) for a in arrays):
            return 0.0, f"seed-only test (no item noise in the se): the runs scored different items of {t}"
    n = len(subject)
    variance = item_variance(dict(zip(subject, arrays[:n])), dict(zip(reference, arrays[n:])))
    scored = sum(int((~np.isnan(arrays[0][t])).sum()) for t in tasks)
    return variance, f"item-paired over the {scored} items of {len(tasks)} task(s) both sides scored"


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
    return of_values(label, {seed: 100 - v for seed, v in values.items()}, (model, batch), bool(row.at_edge), row.lr,
                     "zeroshot_error", ctx.rivals(model, optimizer, batch))


def setting(model, where, found, items, subject, reference):
    """A statement's setting: found[subject] against found[reference] ((optimizer, batch) keys), with the item noise of
    their difference."""
    missing = Estimate("missing", None)
    variance, note = item_noise(items.get(subject), items.get(reference))
    return Setting(model, where, found.get(subject, missing), found.get(reference, missing), note=note,
                   extra_variance=variance)


def zeroshot(ctx, prefix):
    tasks = list(ctx.config.get("zeroshot", {}).get("tasks", []))
    rows, panels, vs_adamw, vs_lamb, estimates = [], [], [], [], []
    for model in ctx.spec["models"]:
        batches = ctx.batches(model)
        small, large = batches[0], batches[-1]
        panel = Panel(f"{ctx.model_title(model)}: " + ", ".join(f"{i + 1} {t}" for i, t in enumerate(tasks)),
                      "task (last: average)", "zero-shot accuracy, % (seed mean ± sd)")
        found, items = {}, {}
        for opt in ctx.optimizers():
            for batch in batches:
                if ctx.best_row(model, opt, batch) is None:
                    continue
                scores, items[opt, batch] = group_scores(ctx, model, opt, batch)
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
        vs_adamw.append(setting(model, f"{large} vs {small}", found, items, ("merit", large), ("adamw", small)))
        vs_lamb.append(setting(model, str(large), found, items, ("merit", large), ("lamb", large)))
    ctx.figure(panels, prefix, "Table 1: zero-shot accuracy, AdamW at the standard batch vs LAMB and MERIT at a "
                               "large batch")
    pooled = Pooled.of(estimates)
    statements = [
        statement("MERIT at the large batch matches or beats AdamW at the standard batch in average zero-shot "
                  "accuracy (tested as error, no worse)", vs_adamw, ctx.stats_once, NO_WORSE, pooled)]
    if "lamb" in ctx.optimizers():
        statements.append(statement("MERIT beats LAMB at the large batch in average zero-shot accuracy (tested as "
                                    "error, lower)", vs_lamb, ctx.stats_once, LOWER, pooled))
    notes = [f"tasks {', '.join(tasks)} at 0 shots, metric {ctx.config.get('zeroshot', {}).get('metric', 'acc')}, "
             "through lm-evaluation-harness; accuracies in %, errors (100 - accuracy) in claims.csv",
             "each comparison pairs the claim seeds as claims.csv's basis says and pairs items: both sides score the "
             "same items, so its se adds the item-sampling variance of the difference (per task, the variance over "
             "items of the seed-averaged error contrast over the number of items, summed over the tasks over their "
             "number squared), which the spread over seeds leaves out. Results written without per-item scores, or "
             "whose seeds or items differ, are tested on the seeds alone, said in the row's reason"]
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
