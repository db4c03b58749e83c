"""Figure 2 and the rebuttal's MAL across all layers at 4K: max attention logit vs step for layer 1 and
the middle layer, and the peak MAL of every layer, at the largest batch.

Statements (the rebuttal, GPT-2 Medium at 4K, layer groups by depth: 1-8, 9-17, 18-24 of 24): in the
early layers MERIT and LAMB suppress AdamW's MAL (each below AdamW); in the middle layers MERIT
reduces LAMB's spikes (below LAMB); over all layers MERIT's peak is below LAMB's and AdamW's. The
deep layers ("similar or slightly higher") are shown, not claimed. A model of L layers is split at
the same depth fractions (8/24, 17/24).
"""

from pathlib import Path

import pandas as pd

from merit_repro.config.registry import OPTIMIZERS
from merit_repro.report.claims import Setting, statement
from merit_repro.report.stats import Estimate, Pooled, of_values
from merit_repro.report.figures import Line, Panel
from merit_repro.report.mal import mal_by_layer, spikes_kept

from .context import log_of, mal_curve, record
from .paper import differences

GROUPS = {"early": 8 / 24, "middle": 17 / 24, "deep": 1.0}   # the rebuttal's groups' upper ends, as depth fractions


def layers_of(group, n_layers):
    """The layers of a group in a model of n_layers (layer 1 is always early; "all" is every layer)."""
    if group == "all":
        return list(range(1, n_layers + 1))
    ends = [0] + [max(1, round(n_layers * f)) for f in GROUPS.values()]
    i = list(GROUPS).index(group) + 1
    return list(range(ends[i - 1] + 1, ends[i] + 1))


def per_seed_layers(ctx, model, opt, batch, lr=None):
    """[per-layer peak MAL over steps, one Series per claim seed] (at the chosen LR, or at lr)."""
    def read(run_dir):
        mal = pd.read_csv(Path(run_dir) / "mal.csv")
        return mal_by_layer(spikes_kept(mal))
    return [read(d) for d in ctx.seed_runs(model, opt, batch, lr).run_dir]


def group_estimate(ctx, model, opt, batch, group, n_layers, lr=None):
    """The peak MAL over a group of layers at the chosen LR (with the estimates at its rivals), or at lr. Over every
    layer it is the run's peak MAL, the metric mal_tables tests: the same test, counted once."""
    label = ctx.label(model, opt)
    row = ctx.best_row(model, opt, batch)
    if row is None:
        return Estimate(label, None)
    if row.status != "ok":
        return ctx.estimate(model, opt, batch)   # the tuning failure, said once
    layers = layers_of(group, n_layers)
    runs = ctx.seed_runs(model, opt, batch, lr)
    peaks = {int(seed): float(s.reindex(layers).max())
             for seed, s in zip(runs.seed, per_seed_layers(ctx, model, opt, batch, lr))}
    if not peaks or not layers:
        return Estimate(label, None)
    rivals, alternatives = ((), ()) if lr else ctx.choice(
        model, opt, batch, lambda x: group_estimate(ctx, model, opt, batch, group, n_layers, x))
    metric = "peak_mal" if len(layers) == n_layers else f"peak_mal, layers {layers[0]}-{layers[-1]}"
    return of_values(label, peaks, (model, batch), bool(row.at_edge) and not lr, lr or row.lr, metric, rivals,
                     (model, opt, int(batch)), alternatives)


def mal_vs_step(ctx, prefix):
    model = ctx.spec["models"][0]
    batch = ctx.batches(model)[-1]
    n_layers = ctx.runs[ctx.runs.model == model].n_layers.max()
    n_layers = int(n_layers) if pd.notna(n_layers) else 0
    middle = max(1, n_layers // 2)
    threshold = ctx.report["mal_threshold"]
    level = (threshold, f"MAL {threshold:g} (report.mal_threshold)")
    panels = []
    for layer in (1, middle):
        panel = Panel(f"layer {layer}", "step", "max attention logit (seed mean, band: seed range)", logy=True,
                      hline=level)
        for opt in ctx.optimizers():
            x, y, band = ctx.seed_mean_curve(model, opt, batch, mal_curve(layer))
            panel.lines.append(Line(ctx.label(model, opt), x, y, opt, band=band))
        panels.append(panel)
    groups = {g: layers_of(g, n_layers) for g in GROUPS}
    all_layers = Panel(f"every layer (batch {batch}); groups " + ", ".join(
        f"{g} {v[0]}-{v[-1]}" for g, v in groups.items() if v), "layer", "peak MAL over steps (seed mean, band: range)",
        logy=True, xticks=list(range(1, n_layers + 1)), hline=level)
    rows = []
    for opt in ctx.optimizers():
        per_seed = per_seed_layers(ctx, model, opt, batch)
        if not per_seed:
            continue
        table = pd.concat(per_seed, axis=1)
        mean, std = table.mean(axis=1), table.std(axis=1, ddof=1)
        band = (list(table.min(axis=1)), list(table.max(axis=1))) if len(per_seed) > 1 else None
        all_layers.lines.append(Line(ctx.label(model, opt), list(mean.index), list(mean.values), opt, marker="o",
                                     band=band))
        rows += [{"optimizer": ctx.label(model, opt), "batch": batch, "layer": layer,
                  "group": next((g for g, v in groups.items() if layer in v), ""), "peak_mal": mean[layer],
                  "peak_mal std": std[layer] if len(per_seed) > 1 else None, "n_seeds": len(per_seed)}
                 for layer in mean.index]
    panels.append(all_layers)
    paper = ctx.paper_panel(model, "peak MAL and its layer at 4K", "layer (of 24)", "peak MAL", {
        opt: [(ctx.paper_value("peak_mal_layer", model, opt, batch, "peak_mal_layer"),
               ctx.paper_value("peak_mal_layer", model, opt, batch, "peak_mal"))] for opt in ctx.optimizers()},
        logy=True, hline=(100, "MAL 100 (the paper's threshold)"))
    if paper:
        panels.append(paper)
    ctx.figure(panels, prefix, f"Figure 2: MAL of {model} at batch {batch}, layers 1 and {middle}, and every layer")
    est = {(o, g): group_estimate(ctx, model, o, batch, g, n_layers) for o in ctx.optimizers()
           for g in (*GROUPS, "all")}
    pooled = Pooled.of([log_of(est[(o, "all")]) for o in ctx.optimizers() if o in OPTIMIZERS])   # one per group
    claims = [("early", "merit", "adamw", "in the early layers (1-8 of 24), MERIT suppresses AdamW's MAL"),
              ("early", "lamb", "adamw", "in the early layers (1-8 of 24), LAMB suppresses AdamW's MAL"),
              ("middle", "merit", "lamb", "in the middle layers (9-17 of 24), MERIT reduces LAMB's MAL spikes"),
              ("all", "merit", "lamb", "MERIT's peak MAL over all layers is below LAMB's"),
              ("all", "merit", "adamw", "MERIT's peak MAL over all layers is below AdamW's")]
    statements = []
    for group, a, b, claim in claims:
        if a in ctx.optimizers() and b in ctx.optimizers():
            layers = layers_of(group, n_layers)
            span = (f"layer {layers[0]}" if len(layers) == 1 else f"layers {layers[0]}-{layers[-1]}") if layers else ""
            where = f"{model}, {span}" if span else model
            untested = "" if layers else f"a {n_layers}-layer model has no layer in the {group} group"
            statements.append(statement(f"{claim} (peak over the group's layers and steps, largest batch, log scale)",
                                        [Setting(where, str(batch), log_of(est[(a, group)]), log_of(est[(b, group)]),
                                                 f"{ctx.name(a)} vs {ctx.name(b)}", not_tested=untested,
                                                 floor=ctx.floor("peak_mal"))], ctx.stats.of("peak_mal"),
                                        pooled=pooled))
    return pd.DataFrame(rows), record("Figure 2 and the rebuttal's MAL across all layers at 4K", statements,
                                      differences(ctx))
