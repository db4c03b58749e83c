"""Figure 4 and the rebuttal's large batch by model size: validation loss curves at the large batch for
each model size, final losses in the legend.

Statements: MERIT vs AdamW, LAMB vs AdamW and MERIT vs LAMB at every model size, in the direction the
paper prints for that size (its GPT-2 Large row has no batch size; its values are used as printed).
"""

import pandas as pd

from merit_repro.report.figures import Line, Panel

from .context import estimate_columns, record, val_curve
from .paper import differences


def curve_panel(ctx, model, batch, optimizers, title):
    panel = Panel(title, "step", "validation loss (seed mean)")
    for opt in optimizers:
        x, y, _ = ctx.seed_mean_curve(model, opt, batch, val_curve)
        panel.lines.append(Line(f"{ctx.label(model, opt)}: {ctx.estimate(model, opt, batch).text()}", x, y,
                                ctx.label(model, opt)))
    return panel


PAPER_PARAMETERS = {"gpt2-small": 124, "gpt2-medium": 355, "gpt2-large": 774}   # millions


def paper_by_size(ctx):
    """The paper's final losses by model size, in their own panel when our models stand in for its."""
    models = [m for m in ctx.spec["models"] if ctx.stands_in(m)]
    if not models:
        return None
    panel = Panel("the paper's final losses at large batch", "the paper's model (M parameters)", "validation loss",
                  logx=True, xticks=sorted({PAPER_PARAMETERS.get(ctx.config["models"][m].get("paper_model"), 0)
                                            for m in models} - {0}) or None,
                  empty_text="the paper prints no such numbers")
    for opt in ctx.optimizers():
        pts = []
        for m in models:
            paper_model = ctx.config["models"][m].get("paper_model")
            value = ctx.paper_value("large_batch_by_model", m, opt, ctx.batches(m)[-1], "val_loss")
            value = value if value is not None else ctx.paper_any_batch("large_batch_by_model", m, opt)
            if value is not None and paper_model in PAPER_PARAMETERS:
                pts.append((PAPER_PARAMETERS[paper_model], value))
        panel.lines.append(Line(f"{ctx.label(models[0], opt)} (paper)", [x for x, _ in pts], [y for _, y in pts], opt,
                                ":", "o", hollow=True))
    return panel


def loss_curves(ctx, prefix):
    rows, panels, settings = [], [], []
    for model in ctx.spec["models"]:
        batch = ctx.batches(model)[-1]
        panels.append(curve_panel(ctx, model, batch, ctx.optimizers(), f"{ctx.model_title(model)}, batch {batch}"))
        row = {"model": model, "batch": batch, "paper_batch": ctx.paper_batch(model, batch)}
        for opt in ctx.optimizers():
            paper = ctx.paper_value("large_batch_by_model", model, opt, batch, "val_loss")
            if paper is None and not ctx.stands_in(model):
                paper = ctx.paper_any_batch("large_batch_by_model", model, opt)
            row.update(estimate_columns(ctx.estimate(model, opt, batch), ctx.paper_beside(model, paper)))
        rows.append(row)
        settings.append((model, batch))
    paper = paper_by_size(ctx)
    if paper:
        panels.append(paper)
    ctx.figure(panels, prefix, "Figure 4: validation loss at large batch by model size")
    statements = ctx.pairwise("{a} vs {b}: lower final validation loss at every model size (large batch)",
                              "large_batch_by_model", "final_val_loss", settings, together=True)
    return pd.DataFrame(rows), record("Figure 4 and the rebuttal's large batch by model size", statements,
                                      differences(ctx))
