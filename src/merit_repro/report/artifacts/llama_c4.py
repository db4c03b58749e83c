"""The rebuttal's Llama / C4 table: final validation loss of AdamW, LAMB and MERIT for Llama-100M, 250M and
350M on C4 in its "large-batch setting" (C-Optim codebase), which states neither the batch size, the token
budget nor the LRs: the experiment's config writes down ours.

Statements (the rebuttal's table, MERIT below LAMB below AdamW at each size): MERIT vs AdamW, LAMB vs AdamW
and MERIT vs LAMB, each over every model size at the experiment's largest batch.
"""

import pandas as pd

from .context import estimate_columns, record
from .loss_curves import curve_panel
from .paper import differences, paper_rows

TABLE = "llama_c4"


def llama_c4(ctx, prefix):
    def paper(model, optimizer, batch=None):   # printed without a batch size
        return ctx.paper_any_batch(TABLE, model, optimizer)

    rows, panels, settings = [], [], []
    for model in ctx.spec["models"]:
        batch = ctx.batches(model)[-1]
        panels.append(curve_panel(ctx, model, batch, ctx.optimizers(), f"{ctx.model_title(model)}, batch {batch}"))
        row = {"model": model, "batch": batch}
        for opt in ctx.optimizers():
            row.update(estimate_columns(ctx.estimate(model, opt, batch), ctx.paper_beside(model, paper(model, opt))))
        rows.append(row)
        rows += paper_rows(ctx, model, [batch], lambda _: {ctx.label(model, o): paper(model, o) for o in ctx.optimizers()})
        settings.append((model, batch))
    ctx.figure(panels, prefix, "Rebuttal: Llama on C4, validation loss at large batch")
    statements = ctx.pairwise("{a} vs {b}: lower final validation loss at every Llama size (large batch)", TABLE,
                              "final_val_loss", settings, together=True, paper=paper)
    return pd.DataFrame(rows), record("the rebuttal's Llama / C4 table (C-Optim codebase, large-batch setting)",
                                      statements, differences(ctx))
