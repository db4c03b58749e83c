"""The LR grids behind every table (an AlgoPerf-style record): every LR each optimizer was tuned over,
the points grid extension added, and the chosen LR.

The curve is what chose: the mean over the grid seeds at each LR (the seeds every LR has), with its standard
error from the group's own claim-seed spread, so its minimum is the LR marked best and the error bars show how
close the choice was. The claim seeds' mean ± sd at the best LR, the number the tables report, and at each rival
LR (a close call, where the verdicts are tested too), are drawn beside it as separate markers.
"""

import pandas as pd

from merit_repro.plan.tuning import REPORTING
from merit_repro.report.figures import Line, Panel

from .context import record
from .paper import differences

STYLES = ["-", "--", ":", "-."]


def lr_sensitivity(ctx, prefix):
    runs = ctx.runs.assign(lr_value=ctx.runs.lr.astype(float), diverged=ctx.runs.status.isin(["diverged"]))
    keys = ["model", "optimizer", "batch", "lr", "lr_value", "lr_origin"]
    grid = (runs[runs.seed_origin == "grid"].groupby(keys, as_index=False)
            .agg(grid_seeds=("seed", "count"), n_diverged=("diverged", "sum"), selection_loss=("final_val_loss", "mean")))
    claim = (runs[runs.seed_origin.isin(REPORTING)].groupby(keys, as_index=False)
             .agg(claim_seeds=("seed", "count"), claim_diverged=("diverged", "sum"),
                  claim_loss=("final_val_loss", "mean"), claim_loss_std=("final_val_loss", "std")))
    table = grid.merge(claim, on=keys, how="outer")
    rows, panels, edges = [], [], []
    for model in ctx.spec["models"]:
        lrs = sorted(set(table[table.model == model].lr_value))
        panel = Panel(f"{model}", "peak learning rate", "final validation loss", logx=True, xticks=lrs)
        for i, batch in enumerate(ctx.batches(model)):
            for opt in ctx.optimizers():
                s = table[(table.model == model) & (table.optimizer == opt) & (table.batch == batch)]
                s = s.sort_values("lr_value")
                best = ctx.best_row(model, opt, batch)
                best_lr = best.lr if best is not None and best.status == "ok" else None
                if best_lr is not None and best.at_edge:
                    edges.append(f"{ctx.label(model, opt)} bs{batch}: best LR {best_lr} on the grid edge")
                label = f"{ctx.label(model, opt)} bs{batch}"
                chosen = s[s.selection_loss.notna()]
                se = float(best.grid_se) if best is not None and pd.notna(best.get("grid_se")) else 0.0
                panel.lines.append(Line(f"{label} (grid seeds ± se)", list(chosen.lr_value),
                                        list(chosen.selection_loss), opt, STYLES[i % 4], "o", err=[se] * len(chosen)))
                rivals = ctx.rivals(model, opt, batch) if best_lr is not None else ()
                at_claim = s[s.lr.isin([best_lr, *rivals]) & s.claim_loss.notna()]
                panel.lines.append(Line(f"{label} claim seeds at the best LR and its rivals", list(at_claim.lr_value),
                                        list(at_claim.claim_loss), opt, "none", "*",
                                        err=[0.0 if pd.isna(v) else v for v in at_claim.claim_loss_std]))
                rows += [{"model": model, "optimizer": ctx.label(model, opt), "batch": batch, "lr": r.lr,
                          "origin": r.lr_origin, "grid_seeds": _count(r.grid_seeds), "n_diverged": _count(r.n_diverged),
                          "selection_loss": r.selection_loss, "selection_loss se": se if best_lr else None,
                          "best": r.lr == best_lr, "rival": r.lr in rivals,
                          "claim_seeds": _count(r.claim_seeds), "claim_diverged": _count(r.claim_diverged),
                          "claim_loss": r.claim_loss, "claim_loss std": r.claim_loss_std} for r in s.itertuples()]
        panels.append(panel)
    ctx.figure(panels, prefix, "LR sensitivity: final validation loss vs peak LR (grid seeds ± se; star: claim seeds "
                               "at the best LR and its rivals)")
    out = record("LR grids behind every table (AlgoPerf-style record)", [], differences(ctx),
                 edges or ["every best LR is inside its grid"])
    out["claim"] = ("descriptive: every LR each optimizer was tuned over, the points added by grid extension, and "
                    "the chosen LR")
    return pd.DataFrame(rows), out


def _count(value):
    return 0 if pd.isna(value) else int(value)
