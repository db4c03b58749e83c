"""The paper's artifacts: for one experiment, a table (ours beside the paper's number), a figure,
and the paper's claim with whether it held at this scale.

    make(artifact, experiment, config, runs_csv, best_csv, paper_csv, prefix)

writes prefix.{csv,md,tex,png,pdf,json}. Inputs are the small per-run files only.
"""

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from .figures import Line, Panel, draw, save
from .tables import mal_by_layer, write_table

BASELINES = ("adamw", "lamb")


@dataclass
class Context:
    experiment: str
    config: dict
    runs: pd.DataFrame
    best: pd.DataFrame
    paper: pd.DataFrame

    @property
    def spec(self):
        return self.config["experiments"][self.experiment]

    @property
    def report(self):
        return self.config.get("report", {})

    def label(self, model, optimizer):
        return f"{optimizer}+qknorm" if self.config["models"][model].get("qk_norm") else optimizer

    def paper_batch(self, model, batch):
        mapping = self.spec.get("paper", {}).get("batch_sizes", {}) or {}
        if model in mapping:
            mapping = mapping[model]
        elif any(isinstance(v, dict) for v in mapping.values()):
            return None
        value = mapping.get(batch, mapping.get(str(batch)))
        return int(value) if value is not None else None

    def paper_lr(self, lr):
        mapping = self.spec.get("paper", {}).get("lr", {}) or {}
        return str(mapping.get(lr, mapping.get(float(lr), lr)))

    def paper_value(self, table, model, optimizer, batch, metric, lr="best"):
        pb = self.paper_batch(model, batch)
        paper_model = self.config["models"][model].get("paper_model")
        if pb is None or not paper_model:
            return None
        p = self.paper
        rows = p[(p.table == table) & (p.model == paper_model) & (p.optimizer == self.label(model, optimizer))
                 & (p.batch_size == pb) & (p.metric == metric)]
        if lr != "best":
            rows = rows[rows.lr.astype(str).map(_same_number(self.paper_lr(lr)))]
        else:
            rows = rows[rows.lr == "best"]
        return float(rows.value.iloc[0]) if len(rows) and pd.notna(rows.value.iloc[0]) else None

    def best_rows(self, model=None):
        """One row per (model, optimizer, batch): the best-LR cell joined with its run summary."""
        best = self.best.dropna(subset=["lr"])
        if model is not None:
            best = best[best.model == model]
        keys = ["model", "tokens", "optimizer", "batch", "lr"]
        runs = self.runs.astype({"tokens": str, "lr": str})
        merged = best.astype({"tokens": str, "lr": str}).merge(runs, on=keys, suffixes=("", "_run"))
        return merged.drop_duplicates(subset=["model", "optimizer", "batch"])

    def largest_batch(self, model):
        rows = self.best[self.best.model == model]
        return int(rows.batch.max())

    def optimizers(self):
        return list(self.spec["optimizers"])

    def figure(self, panels, prefix, suptitle):
        fig = draw(panels, self.report.get("figure_width", 6.4), self.report.get("figure_height", 4.0), suptitle)
        save(fig, prefix, self.report.get("dpi", 150))


def _same_number(target):
    def match(value):
        try:
            return float(value) == float(target)
        except ValueError:
            return False
    return match


def metrics(run_dir):
    return pd.read_csv(Path(run_dir) / "metrics.csv")


def val_curve(run_dir):
    m = metrics(run_dir)
    m = m[m.val_loss.notna()]
    return list(m.step), list(m.val_loss)


def claim(reproduces, text, held, detail):
    return {"reproduces": reproduces, "claim": text, "held": held, "detail": detail}


def _merit_best_at(values, what, lower=True):
    """held if MERIT's value beats every baseline present (None when MERIT or all baselines are missing)."""
    merit = values.get("merit")
    others = {k: v for k, v in values.items() if k in BASELINES and v is not None and np.isfinite(v)}
    if merit is None or not np.isfinite(merit) or not others:
        return None, f"{what}: not enough finished runs"
    held = all((merit < v) if lower else (merit > v) for v in others.values())
    detail = ", ".join(f"{k} {v:.3f}" for k, v in {"merit": merit, **others}.items())
    return bool(held), f"{what}: {detail}"


# ---------------------------------------------------------------- the artifacts


def metric_vs_batch(ctx, prefix, metric, column, table, ylabel, reproduces, logy=False):
    rows, panels, verdicts = [], [], []
    for model in ctx.spec["models"]:
        best = ctx.best_rows(model)
        panel = Panel(f"{model} ({ctx.config['models'][model].get('paper_model') or 'no paper model'})",
                      "batch size (sequences)", ylabel, logx=True, logy=logy,
                      xticks=sorted(best.batch.unique().tolist()))
        for opt in ctx.optimizers():
            sub = best[best.optimizer == opt].sort_values("batch")
            panel.lines.append(Line(ctx.label(model, opt), list(sub.batch), list(sub[column]), opt, marker="o"))
        panels.append(panel)
        for batch in sorted(best.batch.unique()):
            row = {"model": model, "batch": batch, "paper_batch": ctx.paper_batch(model, batch)}
            for opt in ctx.optimizers():
                sub = best[(best.optimizer == opt) & (best.batch == batch)]
                row[ctx.label(model, opt)] = float(sub[column].iloc[0]) if len(sub) else None
                row[f"{ctx.label(model, opt)} (paper)"] = ctx.paper_value(table, model, opt, batch, metric)
            rows.append(row)
        largest = ctx.largest_batch(model)
        at_largest = {opt: rows[-1].get(ctx.label(model, opt)) for opt in ctx.optimizers()}
        verdicts.append(_merit_best_at(at_largest, f"{model} at batch {largest}"))
    ctx.figure(panels, prefix, f"{ylabel} vs batch size ({ctx.experiment})")
    held = [h for h, _ in verdicts if h is not None]
    return pd.DataFrame(rows), claim(reproduces, f"MERIT has the lowest {ylabel} at the largest batch",
                                     all(held) if held else None, "; ".join(d for _, d in verdicts))


def val_loss_vs_batch(ctx, prefix):
    return metric_vs_batch(ctx, prefix, "val_loss", "final_val_loss", "val_loss_vs_batch", "validation loss",
                           "rebuttal tables: validation loss vs batch size (GPT-2 Small, Medium)")


def lambada_ppl_vs_batch(ctx, prefix):
    return metric_vs_batch(ctx, prefix, "lambada_ppl", "lambada_ppl", "lambada_ppl_vs_batch", "LAMBADA perplexity",
                           "rebuttal tables: LAMBADA perplexity vs batch size", logy=True)


def steps_to_target(ctx, prefix):
    tol = ctx.report.get("target_tolerance", 0.05)
    rows, panels, verdicts = [], [], []
    for model in ctx.spec["models"]:
        best = ctx.best_rows(model)
        target = float(best.final_val_loss.max())
        panel = Panel(f"{model}: target val loss {target:.3f} (±{tol})", "batch size (sequences)",
                      "steps to reach target", logx=True, logy=True, xticks=sorted(best.batch.unique().tolist()))
        steps = {}
        for r in best.itertuples():
            m = metrics(r.run_dir)
            hit = m[m.val_loss.notna() & (m.val_loss <= target + tol)]
            steps[(r.optimizer, r.batch)] = int(hit.step.iloc[0]) if len(hit) else None
        for opt in ctx.optimizers():
            pts = sorted((b, s) for (o, b), s in steps.items() if o == opt and s is not None)
            panel.lines.append(Line(ctx.label(model, opt), [b for b, _ in pts], [s for _, s in pts], opt, marker="o"))
        panels.append(panel)
        for batch in sorted(best.batch.unique()):
            rows.append({"model": model, "batch": batch, "target_val_loss": target,
                         **{ctx.label(model, o): steps.get((o, batch)) for o in ctx.optimizers()}})
        largest = ctx.largest_batch(model)
        verdicts.append(_merit_best_at({o: (float(steps[(o, largest)]) if steps.get((o, largest)) else None)
                                        for o in ctx.optimizers()}, f"{model} steps at batch {largest}"))
    ctx.figure(panels, prefix, "Figure 1: steps to reach the target validation loss")
    held = [h for h, _ in verdicts if h is not None]
    text = ("MERIT reaches the target loss in fewer steps than AdamW and LAMB at the largest batch "
            f"(target: the worst best-LR final val loss of the experiment; reached within +{tol}; ours)")
    return pd.DataFrame(rows), claim("Figure 1", text, all(held) if held else None, "; ".join(d for _, d in verdicts))


def lr_sensitivity(ctx, prefix):
    cells = ctx.runs.astype({"lr": str})
    rows, panels = [], []
    for model in ctx.spec["models"]:
        sub = cells[(cells.model == model) & cells.optimizer.isin(ctx.optimizers())]
        panel = Panel(f"{model}", "peak learning rate", "final validation loss", logx=True)
        styles = ["-", "--", ":", "-."]
        for i, batch in enumerate(sorted(sub.batch.unique())):
            for opt in ctx.optimizers():
                s = sub[(sub.optimizer == opt) & (sub.batch == batch)].copy()
                s["lr_value"] = s.lr.astype(float)
                s = s.sort_values("lr_value")
                panel.lines.append(Line(f"{ctx.label(model, opt)} bs{batch}", list(s.lr_value), list(s.final_val_loss),
                                        opt, styles[i % 4], "o"))
                rows += [{"model": model, "optimizer": ctx.label(model, opt), "batch": batch, "lr": r.lr,
                          "status": r.status, "final_val_loss": r.final_val_loss} for r in s.itertuples()]
        panels.append(panel)
    ctx.figure(panels, prefix, "LR sensitivity: final validation loss vs peak LR")
    return pd.DataFrame(rows), claim("LR grids behind every table (AlgoPerf-style record)",
                                     "descriptive: the whole LR grid, one line per optimizer and batch", None,
                                     "best LR per cell group in results/tables/best_lr.csv")


def _mal_per_step(run_dir, layer):
    mal = pd.read_csv(Path(run_dir) / "mal.csv")
    per = mal[mal.layer == layer].groupby("step")["mal"].max()
    return list(per.index), list(per.values)


def mal_vs_step(ctx, prefix):
    model = ctx.spec["models"][0]
    batch = ctx.largest_batch(model)
    best = ctx.best_rows(model)
    best = best[best.batch == batch]
    n_layers = int(best.n_layers.max())
    middle = max(1, n_layers // 2)
    panels = []
    for layer in (1, middle):
        panel = Panel(f"layer {layer}", "step", "max attention logit", logy=True)
        for r in best.itertuples():
            x, y = _mal_per_step(r.run_dir, layer)
            panel.lines.append(Line(ctx.label(model, r.optimizer), x, y, r.optimizer))
        panels.append(panel)
    all_layers = Panel(f"every layer (batch {batch})", "layer", "peak MAL over steps", logy=True,
                       xticks=list(range(1, n_layers + 1)))
    rows, peaks = [], {}
    for r in best.itertuples():
        per_layer = mal_by_layer(pd.read_csv(Path(r.run_dir) / "mal.csv"))
        all_layers.lines.append(Line(ctx.label(model, r.optimizer), list(per_layer.index), list(per_layer.values),
                                     r.optimizer, marker="o"))
        peaks[r.optimizer] = float(per_layer.max())
        rows += [{"optimizer": ctx.label(model, r.optimizer), "batch": batch, "layer": layer, "peak_mal": v}
                 for layer, v in per_layer.items()]
    panels.append(all_layers)
    ctx.figure(panels, prefix, f"Figure 2: MAL of {model} at batch {batch}, layers 1 and {middle}, and every layer")
    held, detail = _merit_best_at(peaks, f"peak MAL at batch {batch}")
    return pd.DataFrame(rows), claim("Figure 2 and the rebuttal's MAL across all layers at 4K",
                                     "MERIT keeps the max attention logit below AdamW's and LAMB's", held, detail)


def mal_tables(ctx, prefix):
    threshold = ctx.report.get("mal_threshold", 100)
    rows, verdicts, panels = [], [], []
    for model in ctx.spec["models"]:
        best = ctx.best_rows(model)
        largest = ctx.largest_batch(model)
        panel = Panel(f"{model}", "batch size (sequences)", "peak MAL (all layers and steps)", logx=True, logy=True,
                      xticks=sorted(best.batch.unique().tolist()))
        for opt in ctx.optimizers():
            sub = best[best.optimizer == opt].sort_values("batch")
            panel.lines.append(Line(ctx.label(model, opt), list(sub.batch), list(sub.peak_mal), opt, marker="o"))
            for r in sub.itertuples():
                pv = lambda table, metric: ctx.paper_value(table, model, opt, r.batch, metric)  # noqa: E731
                rows.append({
                    "model": model, "batch": r.batch, "paper_batch": ctx.paper_batch(model, r.batch),
                    "optimizer": ctx.label(model, opt), "val_loss": r.final_val_loss,
                    "val_loss (paper)": pv("peak_mal_vs_batch", "val_loss"),
                    "peak_mal": r.peak_mal, "peak_mal (paper)": pv("peak_mal_vs_batch", "peak_mal"),
                    f"layers_mal>{threshold:g}": r.n_layers_mal_over_threshold,
                    f"layers_mal>{threshold:g} (paper)": pv("layers_mal_over_100", "n_layers_mal_gt_100"),
                    "peak_layer": r.peak_mal_layer if r.batch == largest else None,
                    "peak_layer (paper)": pv("peak_mal_layer", "peak_mal_layer") if r.batch == largest else None,
                })
        panels.append(panel)
        for batch in sorted(best.batch.unique()):
            sub = best[best.batch == batch]
            verdicts.append(_merit_best_at(dict(zip(sub.optimizer, sub.peak_mal)), f"{model} bs{batch}"))
    ctx.figure(panels, prefix, "Peak max attention logit vs batch size")
    held = [h for h, _ in verdicts if h is not None]
    return pd.DataFrame(rows), claim(
        "rebuttal tables: peak MAL vs batch, layers with MAL > 100, layer of the peak at 4K",
        "MERIT has the lowest peak MAL at every batch size", all(held) if held else None,
        "; ".join(d for _, d in verdicts))


def _curve_panels(ctx, model, batch, optimizers, best, title):
    panel = Panel(title, "step", "validation loss")
    finals = {}
    for r in best[(best.batch == batch) & best.optimizer.isin(optimizers)].itertuples():
        x, y = val_curve(r.run_dir)
        label = ctx.label(model, r.optimizer)
        panel.lines.append(Line(f"{label} (final {r.final_val_loss:.3f})", x, y, label))
        finals[r.optimizer] = r.final_val_loss
    return panel, finals


def loss_curves(ctx, prefix):
    rows, panels, verdicts = [], [], []
    for model in ctx.spec["models"]:
        best = ctx.best_rows(model)
        batch = ctx.largest_batch(model)
        panel, finals = _curve_panels(ctx, model, batch, ctx.optimizers(), best,
                                      f"{model} ({ctx.config['models'][model].get('paper_model')}), batch {batch}")
        panels.append(panel)
        row = {"model": model, "batch": batch, "paper_batch": ctx.paper_batch(model, batch)}
        for opt in ctx.optimizers():
            row[opt] = finals.get(opt)
            row[f"{opt} (paper)"] = ctx.paper_value("large_batch_by_model", model, opt, batch, "val_loss") \
                if ctx.paper_batch(model, batch) else _paper_any_batch(ctx, model, opt)
        rows.append(row)
        verdicts.append(_merit_best_at(finals, f"{model}"))
    ctx.figure(panels, prefix, "Figure 4: validation loss at large batch by model size")
    held = [h for h, _ in verdicts if h is not None]
    return pd.DataFrame(rows), claim("Figure 4 and the rebuttal's large batch by model size",
                                     "MERIT reaches the lowest final validation loss at every model size",
                                     all(held) if held else None, "; ".join(d for _, d in verdicts))


def _paper_any_batch(ctx, model, opt):
    """Paper rows printed without a batch size (GPT-2 Large in the rebuttal)."""
    p = ctx.paper
    rows = p[(p.table == "large_batch_by_model") & (p.model == ctx.config["models"][model].get("paper_model"))
             & (p.optimizer == opt) & p.batch_size.isna()]
    return float(rows.value.iloc[0]) if len(rows) else None


def ablation(ctx, prefix):
    model = ctx.spec["models"][0]
    batch = ctx.largest_batch(model)
    best = ctx.best_rows(model)
    panel, finals = _curve_panels(ctx, model, batch, ctx.optimizers(), best, f"{model}, batch {batch}")
    rows = [{"optimizer": opt, "batch": batch, "final_val_loss": finals.get(opt),
             "paper": ctx.paper_value("ablation_maxlamb", model, opt, batch, "val_loss")} for opt in ctx.optimizers()]
    ctx.figure([panel], prefix, "Figure 7 and maxLAMB: ablations of MERIT")
    merit = finals.get("merit")
    others = {k: v for k, v in finals.items() if k != "merit" and v is not None}
    held = None if merit is None or not others else all(merit <= v for v in others.values())
    detail = ", ".join(f"{k} {v:.3f}" for k, v in finals.items() if v is not None)
    if "maxlamb" in finals and "lamb" in finals and None not in (finals["maxlamb"], finals["lamb"]):
        detail += f"; maxLAMB {'beats' if finals['maxlamb'] < finals['lamb'] else 'does not beat'} LAMB"
    return pd.DataFrame(rows), claim("Figure 7 and the rebuttal's maxLAMB ablation",
                                     "full MERIT beats each ablation (and max-norm helps LAMB: maxLAMB < LAMB)",
                                     held, detail)


def qknorm(ctx, prefix):
    cells = ctx.runs.astype({"lr": str})
    rows = []
    for model in ctx.spec["models"]:
        for opt in ctx.optimizers():
            sub = cells[(cells.model == model) & (cells.optimizer == opt)]
            for r in sub.sort_values(["batch", "lr"]).itertuples():
                label = ctx.label(model, opt)
                table = "qknorm_lr_sweep" if label == "adamw+qknorm" else "merit_qknorm"
                rows.append({"optimizer": label, "batch": r.batch, "lr": r.lr, "final_val_loss": r.final_val_loss,
                             "paper": ctx.paper_value(table, model, opt, r.batch, "val_loss", lr=r.lr)})
    panels, finals = [], {}
    for model in ctx.spec["models"]:
        best = ctx.best_rows(model)
        batch = ctx.largest_batch(model)
        for r in best[best.batch == batch].itertuples():
            finals[ctx.label(model, r.optimizer)] = (r.final_val_loss, r.run_dir)
    panel = Panel("Figure 6b (largest batch)", "step", "validation loss")
    for label, (final, run_dir) in sorted(finals.items()):
        x, y = val_curve(run_dir)
        panel.lines.append(Line(f"{label} (final {final:.3f})", x, y, label))
    ctx.figure([panel], prefix, "QK-LayerNorm against MERIT")
    merit, adamw_qk = finals.get("merit", (None,))[0], finals.get("adamw+qknorm", (None,))[0]
    held = None if merit is None or adamw_qk is None else bool(merit < adamw_qk)
    detail = ", ".join(f"{k} {v[0]:.3f}" for k, v in sorted(finals.items()) if v[0] is not None)
    return pd.DataFrame(rows), claim("Figure 6b and the rebuttal's QK-norm LR sweeps",
                                     "QK-LayerNorm does not give AdamW MERIT's large-batch loss", held, detail)


ARTIFACT_FUNCTIONS = {f.__name__: f for f in (val_loss_vs_batch, lambada_ppl_vs_batch, steps_to_target, lr_sensitivity,
                                               mal_vs_step, mal_tables, loss_curves, ablation, qknorm)}


def make(artifact, experiment, config, runs_csv, best_csv, paper_csv, prefix):
    runs = pd.read_csv(runs_csv, dtype={"lr": str, "tokens": str})
    best = pd.read_csv(best_csv, dtype={"lr": str, "tokens": str})
    ctx = Context(experiment, config, runs, best[best.experiment == experiment], pd.read_csv(paper_csv))
    prefix = Path(prefix)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    table, verdict = ARTIFACT_FUNCTIONS[artifact](ctx, prefix)
    caption = f"{verdict['reproduces']} ({experiment}): ours beside the paper's numbers where it prints one"
    write_table(table, prefix, caption)
    verdict.update(artifact=artifact, experiment=experiment)
    prefix.with_suffix(".json").write_text(json.dumps(verdict, indent=2, default=str) + "\n")
    return verdict


VERDICT_WORDS = {True: "held", False: "did not hold", None: "undecided (not enough finished runs, or descriptive)"}


def write_index(verdict_paths, out, config):
    """paper_figures/README.md: every artifact, what it reproduces, the claim, ours beside the paper's."""
    out = Path(out)
    verdicts = [json.loads(Path(p).read_text()) for p in sorted(map(str, verdict_paths))]
    lines = ["# The paper's artifacts, regenerated", "",
             "Generated by the workflow (`snakemake`); do not edit. Each artifact is a table (`.csv`, `.md`, `.tex`) "
             "and a figure (`.png`, `.pdf`) named `<artifact>/<experiment>`. Columns marked `(paper)` hold the "
             "number the paper prints for the same model, optimizer and batch size (mapped through the "
             "experiment's `paper` block of the config); `–` where it prints none.", "",
             "Models: " + ", ".join(f"{k} = {v['model']} (stands for {v.get('paper_model')})"
                                    for k, v in config["models"].items()) + ".",
             "At demo scale the models, data and budgets are tiny, so the numbers are not comparable with the paper's "
             "in value; the claims are checked for direction only.", "",
             "| artifact | experiment | reproduces | claim | result |", "|---|---|---|---|---|"]
    for v in verdicts:
        lines.append(f"| [{v['artifact']}]({v['artifact']}/{v['experiment']}.md) | {v['experiment']} | {v['reproduces']} "
                     f"| {v['claim']} | {VERDICT_WORDS[v['held']]} |")
    for v in verdicts:
        stem = f"{v['artifact']}/{v['experiment']}"
        lines += ["", f"## {v['artifact']} — {v['experiment']}", "", f"Reproduces: {v['reproduces']}.", "",
                  f"Claim: {v['claim']}. **{VERDICT_WORDS[v['held']]}** at this scale ({v['detail']}).", "",
                  f"![{stem}]({stem}.png)", "", (out.parent / f"{stem}.md").read_text().rstrip()]
    if not config.get("lambada"):
        lines += ["", "LAMBADA perplexity tables are not produced: `lambada` is null in the config "
                  "(LAMBADA needs GPT-2 BPE and a download; see config/README.md)."]
    out.write_text("\n".join(lines) + "\n")
