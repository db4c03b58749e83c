"""Figure 1: steps to reach a target validation loss vs batch size.

The rebuttal says how the figure was made: an optimizer "achieves" the target when its final
validation loss falls within ±0.05 of it (3.23–3.33 for GPT-2 Small's plot, target 3.28), with runs
of a given length, not where a curve first crosses it. Here every batch size trains the same
tokens, so a run at batch B takes tokens / B steps: reaching the target at the largest batch is
perfect scaling (steps falling as 1/B), and missing it means that batch needs more steps.

Statements (at the largest batch, as the figure shows): MERIT reaches the target; AdamW and LAMB
do not. The target comes from the config (`target_val_loss`, with `target_rule` saying how it was
derived before the runs); an experiment without one cannot test the figure.
"""

import pandas as pd

from merit_repro.report.claims import Setting, finite_mean, statement
from merit_repro.report.stats import Estimate
from merit_repro.report.figures import Line, Panel

from .context import record
from .paper import _per, differences


def target_of(ctx, model):
    given = ctx.spec.get("target_val_loss")
    if given is None or (isinstance(given, dict) and model not in given):
        return None
    return float(_per(given, model))


def steps_of(ctx, model, opt, batch):
    steps = ctx.seed_runs(model, opt, batch).steps.dropna()
    return int(steps.iloc[0]) if len(steps) else None


def steps_to_target(ctx, prefix):
    tol = ctx.report["target_tolerance"]
    rule = ctx.spec.get("target_rule", "")
    rows, panels, settings, everyone = [], [], {o: [] for o in ctx.optimizers()}, []
    for model in ctx.spec["models"]:
        target = target_of(ctx, model)
        batches = ctx.batches(model)
        edge = None if target is None else target + tol
        untested = "" if target is not None else ("no target_val_loss is configured for this model (the paper states "
                                                  "the target of GPT-2 Small's plot only: 3.28 ± 0.05)")
        title = f"{model}: target {'none' if target is None else f'{target:.3f} + {tol:g}'}"
        panel = Panel(title, "batch size (sequences)", "steps to the target (final loss within it)", logx=True,
                      logy=True, xticks=batches)
        first = steps_of(ctx, model, ctx.optimizers()[0], batches[0])
        if first:
            panel.lines.append(Line("perfect scaling", batches, [first * batches[0] / b for b in batches], "ideal",
                                    "--"))
        for opt in ctx.optimizers():
            reached, missed = [], []
            for b in batches:
                est, steps = ctx.estimate(model, opt, b), steps_of(ctx, model, opt, b)
                ok = edge is not None and finite_mean(est) is not None and est.mean <= edge
                finals = ctx.seed_runs(model, opt, b).final_val_loss
                hits = int((finals <= edge).sum()) if edge is not None else 0
                if steps:
                    (reached if ok else missed).append((b, steps))
                rows.append({"model": model, "batch": b, "optimizer": ctx.label(model, opt), "steps": steps,
                             "target_val_loss": target, "final_val_loss": finite_mean(est),
                             "final_val_loss std": est.std if est.n > 1 else None,
                             "seeds within the target": f"{hits}/{len(finals)}" if edge is not None else "–",
                             "reached (seed mean)": ok if edge is not None else None})
            label = ctx.label(model, opt)
            panel.lines.append(Line(f"{label} reached", [b for b, _ in reached], [s for _, s in reached], opt,
                                    "-", "o"))
            panel.lines.append(Line(f"{label} not reached in these steps", [b for b, _ in missed],
                                    [s for _, s in missed], opt, "none", "x"))
            large, small = batches[-1], batches[0]
            line = Estimate(f"target+{tol:g}", edge, n=0) if edge is not None else Estimate("target", None)
            est = ctx.estimate(model, opt, large)
            pair = (est, line) if opt == "merit" else (line, est)
            settings[opt].append(Setting(model, str(large), *pair, f"target rule: {rule}" if rule else "",
                                         not_tested=untested))
            if small != large and opt in ("merit", "adamw", "lamb"):
                everyone.append(Setting(f"{model}, {ctx.name(opt)}", str(small), ctx.estimate(model, opt, small), line,
                                        not_tested=untested))
        panels.append(panel)
    ctx.figure(panels, prefix, "Figure 1: steps to the target validation loss; x: not reached in the steps run")
    statements = []
    for opt, found in settings.items():
        if opt not in ("merit", "adamw", "lamb"):
            continue
        claim = (f"{ctx.name(opt)} reaches the target at the largest batch in the same tokens (perfect scaling)"
                 if opt == "merit" else
                 f"{ctx.name(opt)} does not reach the target at the largest batch in the same tokens")
        statements.append(statement(claim, found, ctx.stats, pooled=ctx.pooled()))
    if everyone:
        statements.append(statement("every optimizer reaches the target at the smallest batch (the rebuttal: all reach "
                                    "it at the smaller batches)", everyone, ctx.stats, pooled=ctx.pooled()))
    notes = [f"target ± {tol:g} as the rebuttal's Figure 1; " + (f"target rule: {rule}" if rule else
                                                                  "the paper's target where stated")]
    return pd.DataFrame(rows), record("Figure 1", statements, differences(ctx), notes)
