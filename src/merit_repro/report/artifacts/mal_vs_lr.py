"""The mechanism as curves (issues 43, 55): final validation loss and peak max attention logit (MAL) against the peak
LR, per optimizer and batch size, over every LR each group trained (its grid, the points tuning added and the curve
seeds' multiples of its tuned LR), each LR over every seed it has (band: their range); each batch's tuned LR marked
with its claim seeds' mean; the batch sizes of one optimizer on one panel, so that batch at a matched LR shows. The
table adds the MAL phases (max over the first quarter of the tokens, mean over the last quarter, layers over each
level of merit_repro.report.mal) at every LR, and the described rows of merit_repro.report.artifacts.mechanism (the
MAL decomposition, MAL at equal loss). The paper prints MAL only at its tuned settings (the rebuttal's tables, at
LRs it does not state): its numbers stand in a panel of their own, against its batch size, never on an LR axis.

The statements, their expected outcomes and the mechanism line: merit_repro.report.artifacts.mechanism.
"""

import pandas as pd

from merit_repro.report.figures import Line, Panel
from merit_repro.report.mal import MAL_LEVELS

from .context import record
from .mechanism import decomposition, design, equal_loss, rule_text, statements, warmup_of, warmup_steps
from .paper import differences, paper_rows

PHASES = ["mal_first_quarter_max", "mal_last_quarter_mean", *(f"n_layers_peak_mal_over_{v:g}" for v in MAL_LEVELS)]
MARKERS = {"short": "o", "long": "s", "control": "^"}


def per_lr(ctx):
    """One row per (model, optimizer, batch, LR): every seed's runs there, summarised (finished runs only)."""
    runs = ctx.runs.drop_duplicates("run_dir").assign(ok=lambda r: r.status == "ok")
    rows = []
    for (model, opt, batch, lr), g in runs.groupby(["model", "optimizer", "batch", "lr"]):
        done = g[g.ok]
        row = {"model": model, "optimizer": opt, "batch": int(batch), "lr": lr, "lr_value": float(lr),
               "origin": g.lr_origin.iloc[0], "seeds": " ".join(map(str, sorted(g.seed))), "n_seeds": len(g),
               "n_diverged": int((~g.ok).sum())}
        for metric in ("final_val_loss", "peak_mal", *PHASES):
            values = pd.to_numeric(done[metric], errors="coerce").dropna()
            row.update({metric: values.mean() if len(values) else None,
                        f"{metric} std": values.std() if len(values) > 1 else None,
                        f"{metric} min": values.min() if len(values) else None,
                        f"{metric} max": values.max() if len(values) else None})
        rows.append(row)
    return pd.DataFrame(rows)


def mal_vs_lr(ctx, prefix):
    d = design(ctx)
    table = per_lr(ctx) if len(ctx.runs) else pd.DataFrame()
    if d is None or table.empty:
        ctx.figure([Panel("no finished runs", "peak learning rate", "")], prefix, "MAL and loss against the LR")
        return pd.DataFrame(), record("MAL and loss against the LR at each batch (issues 43, 55)", [],
                                      differences(ctx))
    role = {m: r for r, m in d.rules.items()} | ({d.control: "control"} if d.control else {})
    panels = []
    for opt in ctx.optimizers():
        lrs = sorted(set(table[table.optimizer == opt].lr_value)) or None
        loss = Panel(f"{ctx.name(opt)}: final validation loss", "peak learning rate", "final validation loss",
                     logx=True, xticks=lrs)
        mal = Panel(f"{ctx.name(opt)}: peak MAL (band: the seeds' range)", "peak learning rate", "peak MAL", logx=True,
                    logy=True, xticks=lrs, hline=(ctx.report["mal_threshold"], f"MAL {ctx.report['mal_threshold']:g}"))
        for model in ctx.spec["models"]:
            for batch in ctx.batches(model):
                s = table[(table.model == model) & (table.optimizer == opt) & (table.batch == batch)]
                if s.empty:
                    continue
                s = s.sort_values("lr_value")
                name = f"{ctx.label(model, opt)} bs{batch}" + (f", {role[model]}" if model in role else "")
                style = dict(color_key=ctx.label(model, opt), linestyle="-" if batch == d.small else "--",
                             marker=MARKERS.get(role.get(model), "o"))
                for panel, metric in ((loss, "final_val_loss"), (mal, "peak_mal")):
                    ok = s[s[metric].notna()]
                    panel.lines.append(Line(name, list(ok.lr_value), list(ok[metric]), **style,
                                            band=(list(ok[f"{metric} min"]), list(ok[f"{metric} max"]))))
                best = ctx.best_row(model, opt, batch)
                if best is not None and best.status == "ok":
                    for panel, metric in ((loss, "final_val_loss"), (mal, "peak_mal")):
                        e = ctx.estimate(model, opt, batch, metric, choice=False)
                        if not e.missing and not e.diverged:
                            panel.lines.append(Line(f"{name}: tuned {best.lr}", [float(best.lr)],
                                                    [e.mean], style["color_key"], "none", "*"))
        panels += [loss, mal]
    stand_in = ctx.paper_panel(d.reference, "peak MAL at its tuned LRs (the only MAL it prints; it states no LR)",
                               "the paper's batch size", "peak MAL", {
        o: [(ctx.paper_batch(d.reference, b), ctx.paper_value("peak_mal_vs_batch", d.reference, o, b, "peak_mal"))
            for b in (d.small, d.large)] for o in ctx.optimizers()}, logx=True, logy=True,
        xticks=[b for b in (ctx.paper_batch(d.reference, b) for b in (d.small, d.large)) if b] or None)
    ctx.figure(panels + ([stand_in] if stand_in else []), prefix, "MAL and final loss against the peak LR, each "
               "batch of one optimizer on one panel (lines: every seed at each LR; star: the tuned LR's claim seeds)")
    stated = statements(ctx, d)
    notes = [f"warmup rules: {'; '.join(f'{r}: {rule_text(ctx, m, d)}' for r, m in d.rules.items())}; batch {d.small} "
             f"is trained under {d.reference} ({warmup_steps(ctx, d.reference, d.small)} warmup steps)",
             "the paper prints MAL only at its tuned settings (the rebuttal's peak MAL tables, at LRs it does not "
             "state): its values are in their own panel and rows, against its batch size, never on an LR axis",
             "S1, S3, S4 read the claim seeds at the tuned LRs; L1 and L2 the curve seeds at k x each tuned LR "
             "(seeds that never chose); S2 every seed at each matched LR but the grid seeds at a tuned LR (they "
             "chose it)"]
    if ctx.spec.get("premise_absent"):
        notes.insert(0, f"the premise is absent at this scale: {ctx.spec['premise_absent']}")
    return rows(ctx, d, table), record("MAL and loss against the LR at each batch (issues 43, 55)", stated,
                                       differences(ctx), notes)


def rows(ctx, d, table):
    """The table: one row per LR of each group (every seed there), the tuned one marked; the described rows (the MAL
    decomposition, MAL at equal loss); the paper's numbers beside a tuned row where our model is the paper's, else
    in rows of their own."""
    out = []
    for _, r in table.sort_values(["model", "optimizer", "batch", "lr_value"]).iterrows():
        best = ctx.best_row(r.model, r.optimizer, r.batch)
        tuned_here = best is not None and best.lr == r.lr
        paper = lambda metric: ctx.paper_beside(r.model, ctx.paper_value(  # noqa: E731
            "peak_mal_vs_batch", r.model, r.optimizer, r.batch, metric)) if tuned_here else None
        out.append({"model": r.model, "warmup": warmup_of(ctx, r.model, r.batch), "optimizer":
                    ctx.label(r.model, r.optimizer), "batch": r.batch, "lr": r.lr, "origin": r.origin,
                    "tuned": "yes" if tuned_here else "", "seeds": r.seeds, "n_diverged": r.n_diverged,
                    **{c: r[c] for c in ("final_val_loss", "final_val_loss std", "peak_mal", "peak_mal std", *PHASES)},
                    "val_loss (paper)": paper("val_loss"), "peak_mal (paper)": paper("peak_mal")})
    if "short" in d.rules and {"adamw", "merit"} <= set(ctx.optimizers()):
        out += decomposition(ctx, d) + equal_loss(ctx, d)
    out += paper_rows(ctx, d.reference, [d.small, d.large], lambda b: {
        f"{ctx.label(d.reference, o)} {metric}": ctx.paper_value("peak_mal_vs_batch", d.reference, o, b, metric)
        for o in ctx.optimizers() for metric in ("val_loss", "peak_mal")})
    return pd.DataFrame(out)
