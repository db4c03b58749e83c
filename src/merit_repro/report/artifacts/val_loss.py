"""The rebuttal's tables of validation loss (and LAMBADA perplexity) vs batch size, GPT-2 Small and Medium.

Statements (the rebuttal's): MERIT vs AdamW, LAMB vs AdamW and MERIT vs LAMB at each batch size, in
the direction the paper prints there; AdamW degrades from the smallest to the largest batch; MERIT's
advantage over AdamW, and over LAMB, grows from the smallest to the largest batch.
"""

import pandas as pd

from merit_repro.report.claims import Setting, finite_mean, statement
from merit_repro.report.figures import Line, Panel

from .context import estimate_columns, record
from .paper import differences, paper_rows

LOSS = ("final_val_loss", "val_loss_vs_batch", "val_loss", "validation loss",
        "rebuttal tables: validation loss vs batch size (GPT-2 Small, Medium)")
LAMBADA = ("lambada_ppl", "lambada_ppl_vs_batch", "lambada_ppl", "LAMBADA perplexity",
           "rebuttal tables: LAMBADA perplexity vs batch size")


def trends(ctx, metric, ylabel):
    """AdamW degrades with the batch; MERIT's advantage over AdamW and over LAMB grows with it."""
    models = [m for m in ctx.spec["models"] if len(ctx.batches(m)) > 1]
    pooled, stats, floor = ctx.pooled(metric), ctx.stats.of(metric), ctx.floor(metric)
    out = []
    if "adamw" in ctx.optimizers():
        settings = []
        for m in models:
            small, large = ctx.batches(m)[0], ctx.batches(m)[-1]
            settings.append(Setting(m, f"{small}->{large}", ctx.tested(m, "adamw", small, metric).at(small),
                                    ctx.tested(m, "adamw", large, metric).at(large), floor=floor))
        out.append(statement(f"AdamW degrades from the smallest to the largest batch (its {ylabel} is lower at "
                             "the smallest)", settings, stats, pooled=pooled))
    for other in ("adamw", "lamb"):
        if other not in ctx.optimizers() or "merit" not in ctx.optimizers():
            continue
        settings = []
        for m in models:
            small, large = ctx.batches(m)[0], ctx.batches(m)[-1]
            gap = {b: ctx.tested(m, "merit", b, metric).at(b) - ctx.tested(m, other, b, metric).at(b)
                   for b in (small, large)}
            settings.append(Setting(m, f"{small}->{large}", gap[large], gap[small],
                                    "the gap is MERIT minus the baseline: more negative is a larger advantage",
                                    floor=floor))
        out.append(statement(f"MERIT's advantage over {'AdamW' if other == 'adamw' else 'LAMB'} grows from the "
                             "smallest to the largest batch", settings, stats, pooled=pooled))
    return out


def metric_vs_batch(ctx, prefix, metric, table, paper_metric, ylabel, reproduces, logy=False):
    rows, panels, settings = [], [], []
    for model in ctx.spec["models"]:
        batches = ctx.batches(model)
        panel = Panel(ctx.model_title(model), "batch size (sequences)", ylabel, logx=True, logy=logy, xticks=batches)
        for opt in ctx.optimizers():
            est = [ctx.estimate(model, opt, b, metric) for b in batches]
            ours = [(b, e) for b, e in zip(batches, est) if finite_mean(e) is not None]
            panel.lines.append(Line(ctx.label(model, opt), [b for b, _ in ours], [e.mean for _, e in ours], opt,
                                    marker="o", err=[e.std if e.n > 1 else 0.0 for _, e in ours]))
            if not ctx.stands_in(model):
                paper = [(b, ctx.paper_value(table, model, opt, b, paper_metric)) for b in batches]
                paper = [(b, v) for b, v in paper if v is not None]
                panel.lines.append(Line(f"{ctx.label(model, opt)} (paper)", [b for b, _ in paper],
                                        [v for _, v in paper], opt, ":", "o", hollow=True))
        panels.append(panel)
        stand_in = ctx.paper_panel(model, ylabel, "the paper's batch size", ylabel, {
            opt: [(ctx.paper_batch(model, b), ctx.paper_value(table, model, opt, b, paper_metric)) for b in batches]
            for opt in ctx.optimizers()}, logx=True, logy=logy,
            xticks=[ctx.paper_batch(model, b) for b in batches if ctx.paper_batch(model, b)] or None)
        if stand_in:
            panels.append(stand_in)
        for b in batches:
            row = {"model": model, "batch": b, "paper_batch": ctx.paper_batch(model, b)}
            for opt in ctx.optimizers():
                est = ctx.estimate(model, opt, b, metric)
                row.update(estimate_columns(est, ctx.paper_beside(model, ctx.paper_value(table, model, opt, b,
                                                                                         paper_metric))))
                if metric == "final_val_loss":
                    best = ctx.estimate(model, opt, b, "best_val_loss")
                    row.update({f"{ctx.label(model, opt)} best-reached": finite_mean(best),
                                f"{ctx.label(model, opt)} best-reached std": best.std if best.n > 1 else None})
            rows.append(row)
            settings.append((model, b))
        rows += paper_rows(ctx, model, batches, lambda b: {
            ctx.label(model, o): ctx.paper_value(table, model, o, b, paper_metric) for o in ctx.optimizers()})
    ctx.figure(panels, prefix, f"{ylabel} vs batch size ({ctx.experiment}): seed mean ± sd at each best LR")
    statements = ctx.pairwise("{a} vs {b}: lower " + ylabel + ", in the direction the paper prints at this batch",
                              table, metric, settings, paper_metric,
                              added_claim="{a} vs {b}: lower " + ylabel + " (a comparison the config adds)"
                              ) + trends(ctx, metric, ylabel)
    notes = []
    if metric == "final_val_loss":
        notes.append("Verdicts and LR tuning use the final validation loss (ours); the rebuttal's tables report the "
                     "best validation loss reached, tabled here as `best-reached` (equal to the final loss for a run "
                     "whose loss falls to the end, as a cosine schedule's does)")
    return pd.DataFrame(rows), record(reproduces, statements, differences(ctx), notes)


def val_loss_vs_batch(ctx, prefix):
    return metric_vs_batch(ctx, prefix, *LOSS)


def lambada_ppl_vs_batch(ctx, prefix):
    return metric_vs_batch(ctx, prefix, *LAMBADA, logy=True)
