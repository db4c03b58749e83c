"""The rebuttal's MAL tables: peak MAL vs batch size (with the validation loss beside it), the number of
layers whose MAL exceeds 100, and the layer of the peak at the largest batch (GPT-2 Medium).

Statements: MERIT vs AdamW, LAMB vs AdamW and MERIT vs LAMB on peak MAL at each batch size, in the
paper's direction there (descriptive below the largest batch, which is where the paper claims an
ordering); every optimizer's peak MAL grows from the smallest to the largest batch (on the log
scale: a ratio); MERIT's and LAMB's grow less than AdamW's, on the same log scale (the paper's own numbers
order LAMB and MERIT differently on the two scales: from 512 to 4096 AdamW rises x3.5, MERIT x2.7, LAMB
x1.7, but by +826, +286, +340. A ratio is the scale of the mechanism, a product of the query and key
weights' norms, and it does not favour whichever optimizer starts lower); AdamW has more layers above the
threshold at the largest batch than at the smallest; MERIT has fewer layers above the threshold than AdamW and LAMB at the largest batch. The threshold
(100 in the paper) is a statement about MAL of that size: where no run of the experiment reaches it,
the count is zero everywhere and the statement is not tested at this scale.
"""

import pandas as pd

from merit_repro.config.registry import OPTIMIZERS
from merit_repro.report.claims import Setting, finite_mean, statement
from merit_repro.report.figures import Line, Panel

from .context import record
from .paper import differences, paper_rows

TABLE = "peak_mal_vs_batch"
HALF_A_LAYER = 0.5   # counts of layers differ by whole layers: the tolerance of a count


def mal_tables(ctx, prefix):
    threshold = ctx.report["mal_threshold"]
    over = f"layers_mal>{threshold:g}"
    rows, panels, settings, counts = [], [], [], []
    growth, more, rise = ({o: [] for o in ctx.optimizers()} for _ in range(3))

    def count(model, opt, batch):
        return ctx.estimate(model, opt, batch, "n_layers_mal_over_threshold")
    reported = [ctx.seed_runs(r.model, r.optimizer, r.batch) for r in ctx.best.itertuples()]
    peaks = pd.concat([pd.to_numeric(r.peak_mal, errors="coerce") for r in reported if len(r)] or [pd.Series([0.0])])
    reached = peaks.max() if peaks.notna().any() else 0.0
    untested = "" if reached >= threshold else (f"no reported run of this experiment has a MAL above {threshold:g} "
                                                f"(the largest is {reached:.3g}): the count is zero for every optimizer")
    for model in ctx.spec["models"]:
        batches = ctx.batches(model)
        panel = Panel(f"{model}", "batch size (sequences)", "peak MAL (all layers and steps)", logx=True, logy=True,
                      xticks=batches, hline=(threshold, f"MAL {threshold:g} (report.mal_threshold)"))
        for opt in ctx.optimizers():
            est = [ctx.estimate(model, opt, b, "peak_mal") for b in batches]
            ours = [(b, e) for b, e in zip(batches, est) if finite_mean(e) is not None]
            band = [sorted(e.values.values()) if e.values and e.n > 1 else [e.mean] for _, e in ours]
            panel.lines.append(Line(ctx.label(model, opt), [b for b, _ in ours], [e.mean for _, e in ours], opt,
                                    marker="o", band=([v[0] for v in band], [v[-1] for v in band])))
            if not ctx.stands_in(model):
                paper = [(b, ctx.paper_value(TABLE, model, opt, b, "peak_mal")) for b in batches]
                paper = [(b, v) for b, v in paper if v is not None]
                panel.lines.append(Line(f"{ctx.label(model, opt)} (paper)", [b for b, _ in paper],
                                        [v for _, v in paper], opt, ":", "o", hollow=True))
            for b in batches:
                row = ctx.best_row(model, opt, b)
                beside = lambda table, metric: ctx.paper_beside(model, ctx.paper_value(table, model, opt, b, metric))  # noqa: E731
                loss, mal = ctx.estimate(model, opt, b), ctx.estimate(model, opt, b, "peak_mal")
                layers = ctx.estimate(model, opt, b, "n_layers_mal_over_threshold")
                rows.append({
                    "model": model, "batch": b, "paper_batch": ctx.paper_batch(model, b),
                    "optimizer": ctx.label(model, opt), "n_seeds": loss.n,
                    "val_loss": finite_mean(loss), "val_loss std": loss.std if loss.n > 1 else None,
                    "val_loss (paper)": beside(TABLE, "val_loss"),
                    "peak_mal": finite_mean(mal), "peak_mal std": mal.std if mal.n > 1 else None,
                    "peak_mal (paper)": beside(TABLE, "peak_mal"),
                    over: finite_mean(layers), f"{over} (paper)": beside("layers_mal_over_100", "n_layers_mal_gt_100"),
                    "peak_layer": row.peak_mal_layer if row is not None and b == batches[-1] else None,
                    "peak_layer (paper)": beside("peak_mal_layer", "peak_mal_layer") if b == batches[-1] else None,
                })
        if len(batches) > 1:
            for found, new in zip((growth, rise, more), across_batches(ctx, model, batches[0], batches[-1], untested)):
                for opt, setting in new.items():
                    found[opt].append(setting)
        panels.append(panel)
        stand_in = ctx.paper_panel(model, "peak MAL", "the paper's batch size", "peak MAL", {
            opt: [(ctx.paper_batch(model, b), ctx.paper_value(TABLE, model, opt, b, "peak_mal")) for b in batches]
            for opt in ctx.optimizers()}, logx=True, logy=True, hline=(100, "MAL 100 (the paper's threshold)"),
            xticks=[ctx.paper_batch(model, b) for b in batches if ctx.paper_batch(model, b)] or None)
        if stand_in:
            panels.append(stand_in)
        rows += paper_rows(ctx, model, batches, lambda b: {
            f"{ctx.label(model, o)} peak_mal": ctx.paper_value(TABLE, model, o, b, "peak_mal") for o in ctx.optimizers()})
        settings += [(model, b) for b in batches]
        large = batches[-1]
        counts += [(o, Setting(model, str(large), count(model, "merit", large), count(model, o, large),
                               floor=HALF_A_LAYER, not_tested=untested))
                   for o in ctx.optimizers() if o in ("adamw", "lamb") and "merit" in ctx.optimizers()]
    ctx.figure(panels, prefix, "Peak max attention logit vs batch size (seed mean; band: the seeds' range, which a "
               "log axis can draw where mean ± sd would fall below zero)")
    statements = ctx.pairwise("{a} vs {b}: lower peak MAL, in the direction the paper prints at this batch", TABLE,
                              "peak_mal", settings, "peak_mal", added_claim="{a} vs {b}: lower peak MAL (a comparison "
                              "the config adds)")
    pooled = ctx.pooled("peak_mal")
    statements += [statement(f"{ctx.name(o)}'s peak MAL grows from the smallest to the largest batch (log scale)",
                             found, ctx.stats.of("peak_mal"), pooled=pooled)
                   for o, found in growth.items() if found and o in OPTIMIZERS]   # the paper's optimizers' growth
    if "adamw" in ctx.optimizers():
        statements += [statement(f"{ctx.name(o)}'s peak MAL grows less than AdamW's from the smallest to the largest "
                                 "batch (log scale: a ratio)", rise[o], ctx.stats.of("peak_mal"), pooled=pooled)
                       for o in ("merit", "lamb") if rise.get(o)]
    if more.get("adamw"):
        statements.append(statement(f"AdamW has more layers with MAL > {threshold:g} at the largest batch than at the "
                                    "smallest", more["adamw"], ctx.stats,
                                    pooled=ctx.pooled("n_layers_mal_over_threshold")))
    for o in ("adamw", "lamb"):
        found = [s for opt, s in counts if opt == o]
        if found:
            statements.append(statement(f"MERIT has fewer layers with MAL > {threshold:g} than {ctx.name(o)} at the "
                                        "largest batch", found, ctx.stats, pooled=ctx.pooled("n_layers_mal_over_threshold")))
    return pd.DataFrame(rows), record("rebuttal tables: peak MAL vs batch, layers with MAL > 100, layer of the peak at 4K",
                                      statements, differences(ctx), [tracking(rows)])


def across_batches(ctx, model, small, large, untested):
    """A model's settings of the statements from its smallest to its largest batch: ({optimizer: its log peak
    MAL's growth}, {MERIT, LAMB: its rise against AdamW's}, {optimizer: its layers over the threshold})."""
    where, opts = f"{small}->{large}", ctx.optimizers()
    log_mal = lambda o, b: ctx.tested(model, o, b, "peak_mal").at(b)  # noqa: E731
    count = lambda o, b: ctx.estimate(model, o, b, "n_layers_mal_over_threshold").at(b)  # noqa: E731
    growth = {o: Setting(model, where, log_mal(o, small), log_mal(o, large), floor=ctx.floor("peak_mal")) for o in opts}
    rise = {o: Setting(model, where, log_mal(o, large) - log_mal(o, small),
                       log_mal("adamw", large) - log_mal("adamw", small),
                       "the rise is log peak MAL at the largest batch minus at the smallest",
                       floor=ctx.floor("peak_mal"))
            for o in opts if o != "adamw" and "adamw" in opts}
    more = {o: Setting(model, where, count(o, small), count(o, large), floor=HALF_A_LAYER, not_tested=untested)
            for o in opts}
    return growth, rise, more


def tracking(rows):
    """The rebuttal's "peak MAL tracks validation loss", across the groups: a rank correlation, described and not
    judged (the groups share seeds, so they are not independent draws, and there are a handful of them)."""
    found = pd.DataFrame(rows)
    if not {"model", "peak_mal", "val_loss"} <= set(found.columns):
        found = found.iloc[0:0]
    else:   # our groups only: the paper's own rows stand apart
        found = found[~found.model.astype(str).str.startswith("paper:") & found.peak_mal.notna() & found.val_loss.notna()]
    if len(found) < 3:
        return "peak MAL against validation loss across the groups: fewer than 3 groups with both, nothing to describe"
    rho = found.peak_mal.rank().corr(found.val_loss.rank())   # Spearman's rho: Pearson's r of the ranks
    return (f"the rebuttal says peak MAL tracks validation loss: across the {len(found)} groups here, Spearman's rho "
            f"= {rho:+.2f} between their mean peak MAL and mean validation loss (descriptive: the groups share their "
            "seeds and are few, so no test is made)")
