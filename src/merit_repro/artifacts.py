"""The paper's artifacts: for one experiment, a table (ours beside the paper's number), a figure,
and the paper's claim with its verdict (merit_repro.claims).

    make(artifact, experiment, config, runs_csv, cells_csv, best_csv, paper_csv, prefix)

writes prefix.{csv,md,tex,png,pdf,json}. Inputs are the small per-run files and the aggregated
tables only (results/tables/): runs.csv (one row per cell), cells.csv (which cells each
experiment trained, and why) and best_lr.csv (per group: the tuning decision and the metrics at
the best LR over its seeds). Tables show mean ± std over those seeds; figures draw the seed mean
and the paper's values as hollow markers.
"""

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from .claims import DESCRIPTIVE, Estimate, Margins, beats, combine, matches
from .figures import Line, Panel, draw, save
from .tables import mal_by_layer, write_table

BASELINES = ("adamw", "lamb")
REFERENCE = "adamw"   # the headline's small-batch reference


@dataclass
class Context:
    experiment: str
    config: dict
    runs: pd.DataFrame      # the experiment's cells joined with their run summaries
    best: pd.DataFrame      # the experiment's groups (best_lr.csv rows)
    paper: pd.DataFrame

    @property
    def spec(self):
        return self.config["experiments"][self.experiment]

    @property
    def report(self):
        return self.config.get("report", {})

    @property
    def margins(self):
        return Margins.from_report(self.report)

    def optimizers(self):
        return list(self.spec["optimizers"])

    def label(self, model, optimizer):
        return f"{optimizer}+qknorm" if self.config["models"][model].get("qk_norm") else optimizer

    def stands_in(self, model):
        return stands_in(self.config, model)

    # -- the paper's numbers

    def paper_batch(self, model, batch):
        """The paper's batch size for ours: the same at paper scale, else the experiment's `paper` mapping."""
        mapping = (self.spec.get("paper") or {}).get("batch_sizes") or {}
        if not mapping:
            return int(batch) if not self.stands_in(model) else None
        if model in mapping:
            mapping = mapping[model]
        elif any(isinstance(v, dict) for v in mapping.values()):
            return None
        value = mapping.get(int(batch), mapping.get(str(batch)))
        return int(value) if value is not None else None

    def paper_tokens(self, model):
        """The paper's token budget for ours: the same at paper scale, else the `paper.tokens` mapping (if any)."""
        if not self.stands_in(model):
            return float(_per(self.spec["tokens"], model))
        tokens = (self.spec.get("paper") or {}).get("tokens")
        return float(tokens) if tokens is not None else None

    def paper_value(self, table, model, optimizer, batch, metric, lr="best"):
        pb = self.paper_batch(model, batch)
        paper_model = self.config["models"][model].get("paper_model")
        if pb is None or not paper_model:
            return None
        p = self.paper
        rows = p[(p.table == table) & (p.model == paper_model) & (p.optimizer == self.label(model, optimizer))
                 & (p.batch_size == pb) & (p.metric == metric)]
        tokens = self.paper_tokens(model)
        if tokens is not None:
            rows = rows[rows.tokens.isna() | (pd.to_numeric(rows.tokens, errors="coerce") == tokens)]
        rows = rows[rows.lr.astype(str).map(_same_number(self.paper_lr(lr)))] if lr != "best" else rows[rows.lr == "best"]
        return float(rows.value.iloc[0]) if len(rows) and pd.notna(rows.value.iloc[0]) else None

    def paper_lr(self, lr):
        mapping = (self.spec.get("paper") or {}).get("lr") or {}
        return str(mapping.get(lr, mapping.get(float(lr), lr)))

    def paper_any_batch(self, table, model, optimizer, metric="val_loss"):
        """Paper rows printed without a batch size (GPT-2 Large in the rebuttal)."""
        p = self.paper
        rows = p[(p.table == table) & (p.model == self.config["models"][model].get("paper_model"))
                 & (p.optimizer == optimizer) & p.batch_size.isna() & (p.metric == metric)]
        return float(rows.value.iloc[0]) if len(rows) else None

    # -- our results

    def best_rows(self, model=None):
        best = self.best if model is None else self.best[self.best.model == model]
        return best.sort_values(["model", "optimizer", "batch"])

    def best_row(self, model, optimizer, batch):
        rows = self.best[(self.best.model == model) & (self.best.optimizer == optimizer) & (self.best.batch == batch)]
        return rows.iloc[0] if len(rows) else None

    def batches(self, model):
        return sorted(int(b) for b in self.best[self.best.model == model].batch.unique())

    def estimate(self, model, optimizer, batch, metric="final_val_loss"):
        """One optimizer's best-LR result at one batch size, over its seeds (claims.Estimate)."""
        label = self.label(model, optimizer)
        row = self.best_row(model, optimizer, batch)
        if row is None:
            return Estimate(label, None)
        if row.status != "ok":
            return Estimate(label, math.inf)
        mean = row.get(metric)
        return Estimate(label, None if pd.isna(mean) else float(mean), _number(row.get(f"{metric}_std")),
                        int(row.n_seeds) if pd.notna(row.n_seeds) else 0, bool(row.at_edge), row.lr)

    def seed_runs(self, model, optimizer, batch):
        """The runs of every seed at a group's best LR (empty when it has none)."""
        row = self.best_row(model, optimizer, batch)
        if row is None or row.status != "ok":
            return self.runs.iloc[0:0]
        r = self.runs
        return r[(r.model == model) & (r.optimizer == optimizer) & (r.batch == batch) & (r.lr == row.lr)]

    def seed_mean_curve(self, model, optimizer, batch, read):
        """read(run_dir) -> pd.Series indexed by step; the mean over the best LR's seeds (steps all share)."""
        curves = [read(d) for d in self.seed_runs(model, optimizer, batch).run_dir]
        if not curves:
            return [], []
        mean = pd.concat(curves, axis=1).dropna().mean(axis=1)
        return list(mean.index), list(mean.values)

    def eval_interval(self, model, optimizer, batch):
        """Steps between validation losses of a group's runs (the resolution of steps to a target)."""
        for run_dir in self.seed_runs(model, optimizer, batch).run_dir:
            return int(json.loads((Path(run_dir) / "summary.json").read_text())["eval_interval"])
        return 1

    def figure(self, panels, prefix, suptitle):
        fig = draw(panels, self.report.get("figure_width", 6.4), self.report.get("figure_height", 4.0), suptitle)
        save(fig, prefix, self.report.get("dpi", 150))

    def model_title(self, model):
        spec = self.config["models"][model]
        stand_in = f" standing in for {spec.get('paper_model')}" if self.stands_in(model) else ""
        return f"{model} ({spec['model']}{stand_in})"


def stands_in(config, model):
    """True when the model is a smaller stand-in for the paper's (the demo), not the paper's model itself."""
    spec = config["models"][model]
    return spec.get("paper_model") != spec["model"]


def _per(value, key):
    return value[key] if isinstance(value, dict) else value


def _number(value):
    return 0.0 if value is None or pd.isna(value) else float(value)


def _same_number(target):
    def match(value):
        try:
            return float(value) == float(target)
        except ValueError:
            return False
    return match


def val_curve(run_dir, x="step"):
    m = pd.read_csv(Path(run_dir) / "metrics.csv")
    m = m[m.val_loss.notna()]
    return pd.Series(m.val_loss.values, index=m[x].values)


def val_curve_by_tokens(run_dir):
    return val_curve(run_dir, "tokens")


def mal_curve(layer):
    def read(run_dir):
        mal = pd.read_csv(Path(run_dir) / "mal.csv")
        return mal[mal.layer == layer].groupby("step")["mal"].max()
    return read


def verdict_record(reproduces, claim, verdict, differences=()):
    """What an artifact says about its claim (the JSON beside it, and its line in the index)."""
    if verdict is None:
        return {"reproduces": reproduces, "claim": claim, "result": DESCRIPTIVE, "reasons": [],
                "comparisons": [], "differences": list(differences)}
    return {"reproduces": reproduces, "claim": claim, **verdict.to_dict(), "differences": list(differences)}


def estimate_columns(estimate, paper, name=None):
    """Table columns of one estimate: mean, its std (merged as "mean ± std" in Markdown), the best LR (marked
    when on the grid edge, or "diverged" when every LR did) and the paper's value. name: the column stem
    (default: the estimate's label, for tables with a column per optimizer)."""
    name = name or estimate.label
    lr = f"{estimate.lr} (edge)" if estimate.lr and estimate.at_edge else estimate.lr
    return {name: _finite(estimate), f"{name} std": estimate.std if estimate.n > 1 else None,
            f"{name} lr": lr or ("diverged" if estimate.diverged else None), f"{name} (paper)": paper}


def paper_line(x, y, label, key, twin):
    """The paper's values as hollow markers (on a right-hand axis when our model is a stand-in)."""
    pts = [(a, b) for a, b in zip(x, y) if b is not None]
    return Line(f"{label} (paper)", [a for a, _ in pts], [b for _, b in pts], key, ":", "o", hollow=True, twin=twin)


def differences(ctx):
    """Where our setting differs from the paper's, said beside the verdict."""
    notes = []
    for model in ctx.spec["models"]:
        if ctx.stands_in(model):
            spec = ctx.config["models"][model]
            notes.append(f"{model} is {spec['model']} on {spec['data']}, a stand-in for {spec.get('paper_model')}: "
                         "compare directions, not values; batch sizes are mapped through the experiment's `paper` block")
    return notes


# ---------------------------------------------------------------- the artifacts


def metric_vs_batch(ctx, prefix, metric, table, paper_metric, ylabel, reproduces, logy=False):
    rows, panels, parts = [], [], []
    for model in ctx.spec["models"]:
        batches = ctx.batches(model)
        panel = Panel(ctx.model_title(model), "batch size (sequences)", ylabel, logx=True, logy=logy, xticks=batches)
        for opt in ctx.optimizers():
            est = [ctx.estimate(model, opt, b, metric) for b in batches]
            ours = [(b, e) for b, e in zip(batches, est) if not e.missing and not e.diverged]
            panel.lines.append(Line(ctx.label(model, opt), [b for b, _ in ours], [e.mean for _, e in ours], opt, marker="o",
                                    err=[e.std if e.n > 1 else 0.0 for _, e in ours]))
            panel.lines.append(paper_line(batches, [ctx.paper_value(table, model, opt, b, paper_metric) for b in batches],
                                          ctx.label(model, opt), opt, ctx.stands_in(model)))
        panels.append(panel)
        for b in batches:
            row = {"model": model, "batch": b, "paper_batch": ctx.paper_batch(model, b)}
            for opt in ctx.optimizers():
                row.update(estimate_columns(ctx.estimate(model, opt, b, metric),
                                            ctx.paper_value(table, model, opt, b, paper_metric)))
            rows.append(row)
        largest = batches[-1]
        merit = ctx.estimate(model, "merit", largest, metric)
        others = [ctx.estimate(model, o, largest, metric) for o in ctx.optimizers() if o in BASELINES]
        parts.append(beats(merit, others, ctx.margins, f"{model} at batch {largest}"))
    ctx.figure(panels, prefix, f"{ylabel} vs batch size ({ctx.experiment})")
    return pd.DataFrame(rows), verdict_record(reproduces, f"MERIT has the lowest {ylabel} at the largest batch",
                                              combine(parts), differences(ctx))


def val_loss_vs_batch(ctx, prefix):
    return metric_vs_batch(ctx, prefix, "final_val_loss", "val_loss_vs_batch", "val_loss", "validation loss",
                           "rebuttal tables: validation loss vs batch size (GPT-2 Small, Medium)")


def lambada_ppl_vs_batch(ctx, prefix):
    return metric_vs_batch(ctx, prefix, "lambada_ppl", "lambada_ppl_vs_batch", "lambada_ppl", "LAMBADA perplexity",
                           "rebuttal tables: LAMBADA perplexity vs batch size", logy=True)


def headline(ctx, prefix):
    """The abstract: MERIT at a large batch matches AdamW at the standard batch with the same tokens."""
    rows, parts, panels = [], [], []
    for model in ctx.spec["models"]:
        batches = ctx.batches(model)
        small, large = batches[0], batches[-1]
        reference = ctx.estimate(model, REFERENCE, small)
        merit = ctx.estimate(model, "merit", large)
        part = matches(merit, reference, ctx.margins, f"{model}: MERIT at batch {large} vs AdamW at batch {small}")
        context = [e for e in (ctx.estimate(model, o, large) for o in ctx.optimizers() if o in BASELINES) if not e.missing]
        if context:
            part.note = "for context, not part of the claim: " + "; ".join(
                c.text() for c in beats(merit, context, ctx.margins).comparisons)
        parts.append(part)
        panel = Panel(ctx.model_title(model), "tokens", "validation loss")
        for opt in ctx.optimizers():
            for b in batches:
                row = ctx.best_row(model, opt, b)
                if row is None:
                    continue
                est = ctx.estimate(model, opt, b)
                rows.append({"model": model, "optimizer": ctx.label(model, opt), "batch": b,
                             "paper_batch": ctx.paper_batch(model, b), "n_seeds": est.n,
                             **estimate_columns(est, ctx.paper_value("headline", model, opt, b, "val_loss"),
                                                "val_loss")})
                x, y = ctx.seed_mean_curve(model, opt, b, val_curve_by_tokens)
                panel.lines.append(Line(f"{ctx.label(model, opt)} bs{b} ({est.text()})", x, y, opt))
        panels.append(panel)
    ctx.figure(panels, prefix, "Headline: MERIT at a large batch vs AdamW at the standard batch, same tokens")
    return pd.DataFrame(rows), verdict_record(
        "abstract: GPT-2 Medium, MERIT at batch 6K matches batch 480 with 48B tokens",
        "MERIT at the largest batch is no worse than AdamW at the smallest batch, with the same token budget",
        combine(parts), differences(ctx))


def target_loss(ctx, model):
    """Figure 1's target: the experiment's `target_val_loss` where given (the paper states none), else the
    loss every optimizer reaches at the smallest batch (the worst of their best-LR final losses there)."""
    given = ctx.spec.get("target_val_loss")
    if given is not None:
        return float(_per(given, model)), "configured"
    small = ctx.batches(model)[0]
    finals = [e.mean for e in (ctx.estimate(model, o, small) for o in ctx.optimizers())
              if not e.missing and not e.diverged]
    return (max(finals) if finals else None), f"the worst best-LR final loss at batch {small}"


def steps_estimate(ctx, model, opt, batch, target, tol):
    """Steps until the validation loss first reaches target + tol, over the best LR's seeds; inf unless every
    seed reaches it. Returns (Estimate, 'k/n seeds reached')."""
    label = ctx.label(model, opt)
    row = ctx.best_row(model, opt, batch)
    if row is None or target is None:
        return Estimate(label, None, inf_text="did not reach the target"), ""
    steps = []
    runs = ctx.seed_runs(model, opt, batch)
    for run_dir in runs.run_dir:
        curve = val_curve(run_dir)
        hit = curve[curve <= target + tol]
        steps.append(int(hit.index[0]) if len(hit) else None)
    reached = [s for s in steps if s is not None]
    mean = float(np.mean(steps)) if steps and len(reached) == len(steps) else math.inf
    std = float(np.std(steps, ddof=1)) if len(reached) == len(steps) > 1 else 0.0
    return (Estimate(label, mean, std, len(steps), bool(row.at_edge) if row.status == "ok" else False,
                     row.lr if row.status == "ok" else None, inf_text="did not reach the target"),
            f"{len(reached)}/{len(steps)}")


def steps_to_target(ctx, prefix):
    tol = ctx.report.get("target_tolerance", 0.05)
    rows, panels, parts, notes = [], [], [], []
    for model in ctx.spec["models"]:
        target, source = target_loss(ctx, model)
        notes.append(f"{model}: target validation loss {target if target is None else round(target, 4)} ({source}), "
                     f"reached within +{tol}")
        batches = ctx.batches(model)
        panel = Panel(f"{model}: target {target if target is None else f'{target:.3f}'} (+{tol})",
                      "batch size (sequences)", "steps to reach the target", logx=True, logy=True, xticks=batches)
        found = {(o, b): steps_estimate(ctx, model, o, b, target, tol) for o in ctx.optimizers() for b in batches}
        for opt in ctx.optimizers():
            pts = [(b, found[(opt, b)][0]) for b in batches]
            pts = [(b, e) for b, e in pts if not e.missing and math.isfinite(e.mean)]
            panel.lines.append(Line(ctx.label(model, opt), [b for b, _ in pts], [e.mean for _, e in pts], opt, marker="o"))
        panels.append(panel)
        for b in batches:
            row = {"model": model, "batch": b, "target_val_loss": target}
            for opt in ctx.optimizers():
                est, reached = found[(opt, b)]
                row.update({ctx.label(model, opt): est.mean if not est.missing and math.isfinite(est.mean) else None,
                            f"{ctx.label(model, opt)} std": est.std if est.n > 1 else None,
                            f"{ctx.label(model, opt)} reached": reached})
            rows.append(row)
        largest = batches[-1]
        others = [found[(o, largest)][0] for o in ctx.optimizers() if o in BASELINES]
        interval = ctx.eval_interval(model, "merit", largest)
        part = beats(found[("merit", largest)][0], others, ctx.margins, f"{model} at batch {largest}", floor=interval)
        part.note = notes[-1]
        parts.append(part)
    ctx.figure(panels, prefix, "Figure 1: steps to reach the target validation loss")
    verdict = combine(parts)
    return pd.DataFrame(rows), verdict_record(
        "Figure 1", "MERIT reaches the target validation loss in fewer steps than AdamW and LAMB at the largest batch "
        "(a run that never reaches it counts as infinitely slow)", verdict,
        differences(ctx) + [f"the paper states no target value; ours: {'; '.join(notes)}; the margin on steps is one "
                            "evaluation interval at that batch size (their resolution)"])


def lr_sensitivity(ctx, prefix):
    grouped = (ctx.runs.assign(lr_value=ctx.runs.lr.astype(float), diverged=ctx.runs.status != "ok")
               .groupby(["model", "optimizer", "batch", "lr", "lr_value", "lr_origin"], as_index=False)
               .agg(n_seeds=("seed", "count"), n_diverged=("diverged", "sum"),
                    final_val_loss=("final_val_loss", "mean"), final_val_loss_std=("final_val_loss", "std")))
    rows, panels, edges = [], [], []
    styles = ["-", "--", ":", "-."]
    for model in ctx.spec["models"]:
        panel = Panel(f"{model}", "peak learning rate", "final validation loss", logx=True)
        for i, batch in enumerate(ctx.batches(model)):
            for opt in ctx.optimizers():
                s = grouped[(grouped.model == model) & (grouped.optimizer == opt) & (grouped.batch == batch)]
                s = s.sort_values("lr_value")
                best = ctx.best_row(model, opt, batch)
                best_lr = best.lr if best is not None and best.status == "ok" else None
                if best is not None and best.status == "ok" and best.at_edge:
                    edges.append(f"{ctx.label(model, opt)} bs{batch}: best LR {best_lr} on the grid edge")
                panel.lines.append(Line(f"{ctx.label(model, opt)} bs{batch}", list(s.lr_value), list(s.final_val_loss),
                                        opt, styles[i % 4], "o"))
                rows += [{"model": model, "optimizer": ctx.label(model, opt), "batch": batch, "lr": r.lr,
                          "origin": r.lr_origin, "n_seeds": r.n_seeds, "n_diverged": int(r.n_diverged),
                          "final_val_loss": r.final_val_loss, "final_val_loss std": r.final_val_loss_std,
                          "best": r.lr == best_lr} for r in s.itertuples()]
        panels.append(panel)
    ctx.figure(panels, prefix, "LR sensitivity: final validation loss (seed mean) vs peak LR")
    record = verdict_record("LR grids behind every table (AlgoPerf-style record)",
                            "descriptive: every LR each optimizer was tuned over, the points added by grid extension, "
                            "and the chosen LR", None, differences(ctx))
    record["reasons"] = edges or ["every best LR is inside its grid"]
    return pd.DataFrame(rows), record


def mal_vs_step(ctx, prefix):
    model = ctx.spec["models"][0]
    batch = ctx.batches(model)[-1]
    n_layers = int(ctx.runs[ctx.runs.model == model].n_layers.max())
    middle = max(1, n_layers // 2)
    panels = []
    for layer in (1, middle):
        panel = Panel(f"layer {layer}", "step", "max attention logit (seed mean)", logy=True)
        for opt in ctx.optimizers():
            x, y = ctx.seed_mean_curve(model, opt, batch, mal_curve(layer))
            panel.lines.append(Line(ctx.label(model, opt), x, y, opt))
        panels.append(panel)
    all_layers = Panel(f"every layer (batch {batch})", "layer", "peak MAL over steps (seed mean)", logy=True,
                       xticks=list(range(1, n_layers + 1)))
    rows = []
    for opt in ctx.optimizers():
        per_seed = [mal_by_layer(pd.read_csv(Path(d) / "mal.csv")) for d in ctx.seed_runs(model, opt, batch).run_dir]
        if not per_seed:
            continue
        table = pd.concat(per_seed, axis=1)
        mean, std = table.mean(axis=1), table.std(axis=1, ddof=1)
        all_layers.lines.append(Line(ctx.label(model, opt), list(mean.index), list(mean.values), opt, marker="o"))
        rows += [{"optimizer": ctx.label(model, opt), "batch": batch, "layer": layer, "peak_mal": mean[layer],
                  "peak_mal std": std[layer] if len(per_seed) > 1 else None, "n_seeds": len(per_seed)}
                 for layer in mean.index]
    panels.append(all_layers)
    ctx.figure(panels, prefix, f"Figure 2: MAL of {model} at batch {batch}, layers 1 and {middle}, and every layer")
    merit = ctx.estimate(model, "merit", batch, "peak_mal")
    others = [ctx.estimate(model, o, batch, "peak_mal") for o in ctx.optimizers() if o in BASELINES]
    return pd.DataFrame(rows), verdict_record(
        "Figure 2 and the rebuttal's MAL across all layers at 4K",
        "MERIT keeps the peak max attention logit below AdamW's and LAMB's at the largest batch",
        beats(merit, others, ctx.margins, f"{model} at batch {batch}"), differences(ctx))


def mal_tables(ctx, prefix):
    threshold = ctx.report.get("mal_threshold", 100)
    rows, parts, panels = [], [], []
    for model in ctx.spec["models"]:
        batches = ctx.batches(model)
        panel = Panel(f"{model}", "batch size (sequences)", "peak MAL (all layers and steps)", logx=True, logy=True,
                      xticks=batches)
        for opt in ctx.optimizers():
            est = [ctx.estimate(model, opt, b, "peak_mal") for b in batches]
            ours = [(b, e) for b, e in zip(batches, est) if not e.missing and not e.diverged]
            panel.lines.append(Line(ctx.label(model, opt), [b for b, _ in ours], [e.mean for _, e in ours], opt,
                                    marker="o", err=[e.std if e.n > 1 else 0.0 for _, e in ours]))
            panel.lines.append(paper_line(batches, [ctx.paper_value("peak_mal_vs_batch", model, opt, b, "peak_mal")
                                                    for b in batches], ctx.label(model, opt), opt, ctx.stands_in(model)))
            for b in batches:
                row = ctx.best_row(model, opt, b)
                pv = lambda table, metric: ctx.paper_value(table, model, opt, b, metric)  # noqa: E731
                loss, mal = ctx.estimate(model, opt, b), ctx.estimate(model, opt, b, "peak_mal")
                layers = ctx.estimate(model, opt, b, "n_layers_mal_over_threshold")
                rows.append({
                    "model": model, "batch": b, "paper_batch": ctx.paper_batch(model, b),
                    "optimizer": ctx.label(model, opt), "n_seeds": loss.n,
                    "val_loss": _finite(loss), "val_loss std": loss.std if loss.n > 1 else None,
                    "val_loss (paper)": pv("peak_mal_vs_batch", "val_loss"),
                    "peak_mal": _finite(mal), "peak_mal std": mal.std if mal.n > 1 else None,
                    "peak_mal (paper)": pv("peak_mal_vs_batch", "peak_mal"),
                    f"layers_mal>{threshold:g}": _finite(layers),
                    f"layers_mal>{threshold:g} (paper)": pv("layers_mal_over_100", "n_layers_mal_gt_100"),
                    "peak_layer": row.peak_mal_layer if row is not None and b == batches[-1] else None,
                    "peak_layer (paper)": pv("peak_mal_layer", "peak_mal_layer") if b == batches[-1] else None,
                })
        panels.append(panel)
        for b in batches:
            merit = ctx.estimate(model, "merit", b, "peak_mal")
            others = [ctx.estimate(model, o, b, "peak_mal") for o in ctx.optimizers() if o in BASELINES]
            parts.append(beats(merit, others, ctx.margins, f"{model} bs{b}"))
    ctx.figure(panels, prefix, "Peak max attention logit vs batch size")
    return pd.DataFrame(rows), verdict_record(
        "rebuttal tables: peak MAL vs batch, layers with MAL > 100, layer of the peak at 4K",
        "MERIT has the lowest peak MAL at every batch size", combine(parts), differences(ctx))


def _finite(estimate):
    return estimate.mean if not estimate.missing and not estimate.diverged else None


def curve_panel(ctx, model, batch, optimizers, title):
    panel = Panel(title, "step", "validation loss (seed mean)")
    for opt in optimizers:
        x, y = ctx.seed_mean_curve(model, opt, batch, val_curve)
        panel.lines.append(Line(f"{ctx.label(model, opt)} ({ctx.estimate(model, opt, batch).text()})", x, y,
                                ctx.label(model, opt)))
    return panel


def loss_curves(ctx, prefix):
    rows, panels, parts = [], [], []
    for model in ctx.spec["models"]:
        batch = ctx.batches(model)[-1]
        panels.append(curve_panel(ctx, model, batch, ctx.optimizers(), f"{ctx.model_title(model)}, batch {batch}"))
        row = {"model": model, "batch": batch, "paper_batch": ctx.paper_batch(model, batch)}
        for opt in ctx.optimizers():
            paper = ctx.paper_value("large_batch_by_model", model, opt, batch, "val_loss")
            if paper is None and ctx.config["models"][model].get("paper_model"):
                paper = ctx.paper_any_batch("large_batch_by_model", model, opt)
            row.update(estimate_columns(ctx.estimate(model, opt, batch), paper))
        rows.append(row)
        others = [ctx.estimate(model, o, batch) for o in ctx.optimizers() if o in BASELINES]
        parts.append(beats(ctx.estimate(model, "merit", batch), others, ctx.margins, f"{model} at batch {batch}"))
    ctx.figure(panels, prefix, "Figure 4: validation loss at large batch by model size")
    return pd.DataFrame(rows), verdict_record(
        "Figure 4 and the rebuttal's large batch by model size",
        "MERIT reaches the lowest final validation loss at every model size", combine(parts), differences(ctx))


def ablation(ctx, prefix):
    model = ctx.spec["models"][0]
    batch = ctx.batches(model)[-1]
    opts = ctx.optimizers()
    panel = curve_panel(ctx, model, batch, opts, f"{model}, batch {batch}")
    rows = [{"optimizer": opt, "batch": batch, "n_seeds": ctx.estimate(model, opt, batch).n,
             **estimate_columns(ctx.estimate(model, opt, batch),
                                ctx.paper_value("ablation_maxlamb", model, opt, batch, "val_loss"), "val_loss")}
            for opt in opts]
    ctx.figure([panel], prefix, "Figure 7 and maxLAMB: ablations of MERIT")
    merit = ctx.estimate(model, "merit", batch)
    ablations = [ctx.estimate(model, o, batch) for o in opts if o not in BASELINES + ("merit",)]
    parts = [beats(merit, ablations, ctx.margins, f"{model} bs{batch}: MERIT vs its ablations")]
    if "maxlamb" in opts and "lamb" in opts:
        parts.append(beats(ctx.estimate(model, "maxlamb", batch), [ctx.estimate(model, "lamb", batch)], ctx.margins,
                           f"{model} bs{batch}: maxLAMB vs LAMB"))
    return pd.DataFrame(rows), verdict_record(
        "Figure 7 and the rebuttal's maxLAMB ablation",
        "full MERIT beats each of its ablations, and max-norm helps LAMB (maxLAMB beats LAMB)", combine(parts),
        differences(ctx))


def qknorm(ctx, prefix):
    runs = (ctx.runs.assign(lr_value=ctx.runs.lr.astype(float))
            .groupby(["model", "optimizer", "batch", "lr", "lr_value"], as_index=False)
            .agg(n_seeds=("seed", "count"), final_val_loss=("final_val_loss", "mean"),
                 final_val_loss_std=("final_val_loss", "std")))
    rows = []
    for r in runs.sort_values(["model", "optimizer", "batch", "lr_value"]).itertuples():
        label = ctx.label(r.model, r.optimizer)
        table = "qknorm_lr_sweep" if label == "adamw+qknorm" else "merit_qknorm"
        rows.append({"optimizer": label, "batch": r.batch, "lr": r.lr, "n_seeds": r.n_seeds,
                     "final_val_loss": r.final_val_loss, "final_val_loss std": r.final_val_loss_std,
                     "paper": ctx.paper_value(table, r.model, r.optimizer, r.batch, "val_loss", lr=r.lr)})
    panel = Panel("Figure 6b (largest batch)", "step", "validation loss (seed mean)")
    estimates = {}
    for model in ctx.spec["models"]:
        batch = ctx.batches(model)[-1]
        for opt in ctx.optimizers():
            est = ctx.estimate(model, opt, batch)
            estimates[est.label] = est
            x, y = ctx.seed_mean_curve(model, opt, batch, val_curve)
            panel.lines.append(Line(est.text(), x, y, est.label))
    ctx.figure([panel], prefix, "QK-LayerNorm against MERIT")
    merit = estimates.get("merit", Estimate("merit", None))
    adamw_qk = estimates.get("adamw+qknorm", Estimate("adamw+qknorm", None))
    return pd.DataFrame(rows), verdict_record(
        "Figure 6b and the rebuttal's QK-norm LR sweeps",
        "QK-LayerNorm does not give AdamW MERIT's large-batch loss (MERIT beats AdamW+QK-norm)",
        beats(merit, [adamw_qk], ctx.margins, "largest batch"), differences(ctx))


ARTIFACT_FUNCTIONS = {f.__name__: f for f in (val_loss_vs_batch, lambada_ppl_vs_batch, headline, steps_to_target,
                                               lr_sensitivity, mal_vs_step, mal_tables, loss_curves, ablation, qknorm)}


def load_context(experiment, config, runs_csv, cells_csv, best_csv, paper_csv):
    runs = pd.read_csv(runs_csv, dtype={"lr": str, "tokens": str})
    cells = pd.read_csv(cells_csv, dtype={"lr": str, "tokens": str})
    best = pd.read_csv(best_csv, dtype={"lr": str, "tokens": str})
    keys = ["model", "tokens", "optimizer", "batch", "lr", "seed"]
    mine = cells[cells.experiment == experiment].drop_duplicates(keys).merge(runs, on=keys, how="left")
    return Context(experiment, config, mine, best[best.experiment == experiment].reset_index(drop=True),
                   pd.read_csv(paper_csv))


def make(artifact, experiment, config, runs_csv, cells_csv, best_csv, paper_csv, prefix):
    ctx = load_context(experiment, config, runs_csv, cells_csv, best_csv, paper_csv)
    prefix = Path(prefix)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    table, verdict = ARTIFACT_FUNCTIONS[artifact](ctx, prefix)
    caption = f"{verdict['reproduces']} ({experiment}): ours (mean ± std over seeds) beside the paper's numbers"
    write_table(table, prefix, caption)
    verdict.update(artifact=artifact, experiment=experiment)
    prefix.with_suffix(".json").write_text(json.dumps(verdict, indent=2, default=str, allow_nan=False) + "\n")
    return verdict


# ---------------------------------------------------------------- the index


def write_index(verdict_paths, out, config):
    """paper_figures/README.md: every artifact, what it reproduces, the claim, its verdict and why."""
    out = Path(out)
    verdicts = [json.loads(Path(p).read_text()) for p in sorted(map(str, verdict_paths))]
    report = config.get("report", {})
    margins = Margins.from_report(report)
    stand_ins = {k: v for k, v in config["models"].items() if stands_in(config, k)}
    lines = ["# The paper's artifacts, regenerated", "",
             "Generated by the workflow (`snakemake`); do not edit. Each artifact is a table (`.csv`, `.md`, `.tex`) "
             "and a figure (`.png`, `.pdf`) named `<artifact>/<experiment>`. Our numbers are the mean ± standard "
             "deviation over the seeds trained at each best learning rate; columns marked `(paper)` hold the number "
             "the paper prints for the same model, optimizer and batch size (`–` where it prints none), and figures "
             "show the paper's values as hollow markers.", "",
             "Models: " + ", ".join(f"{k} = {v['model']}" + (f" (stands for {v.get('paper_model')})" if k in stand_ins
                                                              else "") for k, v in config["models"].items()) + "."]
    if stand_ins:
        lines.append(f"{', '.join(stand_ins)} {'is a' if len(stand_ins) == 1 else 'are'} smaller stand-in"
                     f"{'' if len(stand_ins) == 1 else 's'} for the paper's models, trained on other data for far "
                     "fewer tokens: their numbers are not comparable with the paper's in value, only in direction.")
    lines += ["", "How a verdict is reached (`merit_repro.claims`): a difference between two optimizers counts when "
              f"it exceeds the margin, the larger of the tolerance ({margins.tolerance:g} of the value; one evaluation "
              f"interval for steps) and, where both sides have at least two seeds, {margins.noise_z:g} standard errors "
              "of the difference over seeds. A claim is **held** when every comparison it makes goes its way by more "
              "than the margin, **did not hold** when one goes against it by more than the margin, and "
              "**inconclusive** otherwise: a gap within the margin, a missing cell, or a best learning rate still on "
              "the edge of its grid after the configured extensions (a tuning failure). An optimizer that diverged "
              "at every learning rate counts as losing.", "",
              "| artifact | experiment | reproduces | claim | verdict |", "|---|---|---|---|---|"]
    for v in verdicts:
        lines.append(f"| [{v['artifact']}]({v['artifact']}/{v['experiment']}.md) | {v['experiment']} | {v['reproduces']} "
                     f"| {v['claim']} | **{v['result']}** |")
    for v in verdicts:
        stem = f"{v['artifact']}/{v['experiment']}"
        lines += ["", f"## {v['artifact']} — {v['experiment']}", "", f"Reproduces: {v['reproduces']}.", "",
                  f"Claim: {v['claim']}. **{v['result']}**.", ""]
        lines += [f"- {reason}" for reason in v["reasons"]]
        if v.get("differences"):
            lines += ["", "Where this differs from the paper: " + "; ".join(v["differences"]) + "."]
        lines += ["", f"![{stem}]({stem}.png)", "", (out.parent / f"{stem}.md").read_text().rstrip()]
    if not config.get("lambada"):
        lines += ["", "LAMBADA perplexity tables are not produced: `lambada` is null in the config "
                  "(LAMBADA needs GPT-2 BPE and a download; see config/README.md)."]
    out.write_text("\n".join(lines) + "\n")
