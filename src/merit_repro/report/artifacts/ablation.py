"""Figure 7 and the rebuttal's maxLAMB ablation, at the largest batch.

Statements: full MERIT beats each of its ablations (no clip, no weight-wise floor, no element-wise
ratio, and maxLAMB: the max-norm ratio alone), each its own statement; maxLAMB beats LAMB (the
max-norm helps LAMB).
"""

import pandas as pd

from merit_repro.config.registry import OPTIMIZERS
from merit_repro.report.claims import Setting, statement

from .context import BASELINES, estimate_columns, record
from .loss_curves import curve_panel
from .paper import differences


def ablation(ctx, prefix):
    model = ctx.spec["models"][0]
    batch = ctx.batches(model)[-1]
    opts = ctx.optimizers()
    panel = curve_panel(ctx, model, batch, opts, f"{model}, batch {batch}")
    rows = [{"optimizer": opt, "batch": batch, "n_seeds": ctx.estimate(model, opt, batch).n,
             **estimate_columns(ctx.estimate(model, opt, batch), ctx.paper_beside(
                 model, ctx.paper_value("ablation_maxlamb", model, opt, batch, "val_loss")), "val_loss")}
            for opt in opts]
    if ctx.stands_in(model):   # the paper's numbers in rows of their own
        rows += [{"optimizer": f"paper: {opt}", "batch": ctx.paper_batch(model, batch), "val_loss": value}
                 for opt in opts
                 if (value := ctx.paper_value("ablation_maxlamb", model, opt, batch, "val_loss")) is not None]
    ctx.figure([panel], prefix, "Figure 7 and maxLAMB: ablations of MERIT")
    pooled = ctx.pooled()
    pairs = [("merit", o) for o in opts if o in OPTIMIZERS and o not in BASELINES + ("merit",)]   # Figure 7's own
    if "maxlamb" in opts and "lamb" in opts:
        pairs.append(("maxlamb", "lamb"))
    statements = [statement(f"{ctx.name(a)} beats {ctx.name(b)}",
                            [Setting(model, str(batch), ctx.estimate(model, a, batch), ctx.estimate(model, b, batch))],
                            ctx.stats, pooled=pooled) for a, b in pairs if a in opts]
    return pd.DataFrame(rows), record("Figure 7 and the rebuttal's maxLAMB ablation", statements, differences(ctx))
