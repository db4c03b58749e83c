"""What every artifact module reads: one experiment's cells, tuned groups and the paper's numbers.

Inputs are the small per-run files and the aggregated tables only (results/tables/): runs.csv (one
row per cell), cells.csv (which cells each experiment trained, and why) and best_lr.csv (per group:
the tuning decision and the metrics at the best LR over its claim seeds).
"""

import json
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from merit_repro.config.registry import OPTIMIZERS
from merit_repro.report.claims import DESCRIPTIVE, Estimate, Pooled, Setting, Stats, finite_mean, statement
from merit_repro.report.figures import Line, Panel, draw, save

BASELINES = ("adamw", "lamb")
NAMES = {name: spec.label for name, spec in OPTIMIZERS.items()}
# The paper's statements about the three optimizers, in the order the paper ranks them at a large batch
# (review: "MERIT shows small advantages over LAMB, and LAMB over AdamW").
PAIRS = (("merit", "adamw"), ("lamb", "adamw"), ("merit", "lamb"))


def name(optimizer):
    return NAMES.get(optimizer, optimizer)


@dataclass
class Context:
    experiment: str
    config: dict
    runs: pd.DataFrame      # the experiment's cells joined with their run summaries
    best: pd.DataFrame      # the experiment's groups (best_lr.csv rows)
    paper: pd.DataFrame
    results: Path | None = None   # the results folder the tables are in (per-group files beside them)

    @property
    def spec(self):
        return self.config["experiments"][self.experiment]

    @property
    def report(self):
        return self.config.get("report", {})

    @property
    def stats(self):
        return Stats.from_report(self.report)

    def optimizers(self):
        return list(self.spec["optimizers"])

    def label(self, model, optimizer):
        return f"{optimizer}+qknorm" if self.config["models"][model].get("qk_norm") else optimizer

    def stands_in(self, model):
        return stands_in(self.config, model, self.spec)

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

    def paper_value(self, table, model, optimizer, batch, metric, lr="best", label=None):
        """The paper's number for the setting ours maps to (for stand-ins: through the `paper` block; such
        numbers are drawn in their own panel, never beside ours). lr: "best" or an LR that must be the paper's."""
        pb = self.paper_batch(model, batch)
        paper_model = self.config["models"][model].get("paper_model")
        if pb is None or not paper_model:
            return None
        p = self.paper
        rows = p[(p.table == table) & (p.model == paper_model) & (p.optimizer == (label or self.label(model, optimizer)))
                 & (p.batch_size == pb) & (p.metric == metric)]
        tokens = self.paper_tokens(model)
        if tokens is not None:
            rows = rows[rows.tokens.isna() | (pd.to_numeric(rows.tokens, errors="coerce") == tokens)]
        rows = rows[rows.lr.astype(str).map(_same_number(lr))] if lr != "best" else rows[rows.lr == "best"]
        return float(rows.value.iloc[0]) if len(rows) and pd.notna(rows.value.iloc[0]) else None

    def paper_beside(self, model, value):
        """The paper's number where it may stand beside ours (our model is the paper's), else None."""
        return None if self.stands_in(model) else value

    def paper_any_batch(self, table, model, optimizer, metric="val_loss"):
        """Paper rows printed without a batch size (GPT-2 Large in the rebuttal)."""
        p = self.paper
        rows = p[(p.table == table) & (p.model == self.config["models"][model].get("paper_model"))
                 & (p.optimizer == optimizer) & p.batch_size.isna() & (p.metric == metric)]
        return float(rows.value.iloc[0]) if len(rows) else None

    # -- our results

    def best_row(self, model, optimizer, batch):
        rows = self.best[(self.best.model == model) & (self.best.optimizer == optimizer) & (self.best.batch == batch)]
        return rows.iloc[0] if len(rows) else None

    def batches(self, model):
        return sorted(int(b) for b in self.best[self.best.model == model].batch.unique())

    def estimate(self, model, optimizer, batch, metric="final_val_loss"):
        """One optimizer's best-LR result at one batch size, over its claim seeds (claims.Estimate)."""
        label = self.label(model, optimizer)
        row = self.best_row(model, optimizer, batch)
        if row is None:
            return Estimate(label, None)
        if row.status != "ok":
            return Estimate(label, math.inf)
        mean, n = row.get(metric), row.get(f"{metric}_n", row.n_seeds)   # seeds that have this metric
        return Estimate(label, None if pd.isna(mean) else float(mean), _number(row.get(f"{metric}_std")),
                        int(n) if pd.notna(n) else 0, bool(row.at_edge), row.lr)

    def pooled(self, metric="final_val_loss"):
        """The experiment's seed noise of a metric, pooled over its groups with two or more claim seeds."""
        return Pooled.of([self.estimate(r.model, r.optimizer, r.batch, metric) for r in self.best.itertuples()])

    def seed_runs(self, model, optimizer, batch):
        """The runs of the claim seeds at a group's best LR (empty when it has none)."""
        row = self.best_row(model, optimizer, batch)
        if row is None or row.status != "ok" or pd.isna(row.seeds):
            return self.runs.iloc[0:0]
        seeds = [int(s) for s in str(row.seeds).split()]
        r = self.runs
        return r[(r.model == model) & (r.optimizer == optimizer) & (r.batch == batch) & (r.lr == row.lr)
                 & r.seed.isin(seeds)].drop_duplicates("run_dir")

    def seed_mean_curve(self, model, optimizer, batch, read):
        """read(run_dir) -> pd.Series indexed by step; the mean over the claim seeds (steps all share)."""
        curves = [read(d) for d in self.seed_runs(model, optimizer, batch).run_dir]
        if not curves:
            return [], []
        mean = pd.concat(curves, axis=1).dropna().mean(axis=1)
        return list(mean.index), list(mean.values)

    # -- statements and figures

    def ordered(self, paper, model, batch, a, b):
        """(subject, reference) of "a vs b" in the direction the paper prints at this setting: the one with
        the paper's lower value first; a first where the paper prints no number for both.
        paper(model, optimizer, batch) -> the paper's number or None."""
        pa, pb = (paper(model, o, batch) for o in (a, b))
        return (b, a) if pa is not None and pb is not None and pb < pa else (a, b)

    def pairwise(self, claim, table, metric, settings, paper_metric="val_loss", together=False, paper=None):
        """The paper's three pairwise statements (MERIT vs AdamW, LAMB vs AdamW, MERIT vs LAMB) at each of
        settings = [(model, batch), ...], in the paper's direction at each: one statement per setting, or one
        over all of them where the paper makes it so (together: "at every model size"). paper(model,
        optimizer, batch): the paper's numbers, by default the table's at the mapped batch."""
        paper = paper or (lambda model, opt, batch: self.paper_value(table, model, opt, batch, paper_metric))
        out, pooled = [], self.pooled(metric)
        for a, b in PAIRS:
            if a not in self.optimizers() or b not in self.optimizers():
                continue
            rows = []
            for model, batch in settings:
                s, r = self.ordered(paper, model, batch, a, b)
                values = [paper(model, o, batch) for o in (s, r)]
                note = (f"paper: {name(s)} {values[0]:.3f} vs {name(r)} {values[1]:.3f}"
                        + (f" (at {self.config['models'][model].get('paper_model')}"
                           + (f", batch {pb}" if (pb := self.paper_batch(model, batch)) is not None else "") + ")"
                           if self.stands_in(model) else "")) if None not in values else ""
                rows.append(Setting(model, str(batch), self.estimate(model, s, batch, metric),
                                    self.estimate(model, r, batch, metric), note))
            text = claim.format(a=name(a), b=name(b))
            out += ([statement(text, rows, self.stats, pooled=pooled)] if together else
                    [statement(text, [row], self.stats, pooled=pooled) for row in rows])
        return out

    def figure(self, panels, prefix, suptitle):
        fig = draw(panels, self.report.get("figure_width", 6.4), self.report.get("figure_height", 4.0), suptitle)
        save(fig, prefix, self.report.get("dpi", 150))

    def model_title(self, model):
        spec = self.config["models"][model]
        stand_in = "" if not self.stands_in(model) else (
            f", {_per(self.spec['tokens'], model):.3g} tokens, the paper's {self.paper_tokens(model):.3g}"
            if budget_only(self.config, model, self.spec) else f" standing in for {spec.get('paper_model')}")
        return f"{model} ({spec['model']}{stand_in})"

    def paper_panel(self, model, title, xlabel, ylabel, points, **panel):
        """The paper's values for a stand-in model, in a panel of their own (its units are not ours).
        points: {optimizer: [(x, value or None), ...]}; None where nothing is drawn."""
        if not self.stands_in(model):
            return None
        p = Panel(f"the paper's {self.config['models'][model].get('paper_model')}: {title}", xlabel, ylabel,
                  empty_text="the paper prints no such numbers", **panel)
        for opt, pts in points.items():
            pts = [(x, y) for x, y in pts if y is not None]
            p.lines.append(Line(f"{self.label(model, opt)} (paper)", [x for x, _ in pts], [y for _, y in pts], opt,
                                ":", "o", hollow=True))
        return p


def stands_in(config, model, experiment=None):
    """True when our numbers for the model compare with the paper's in direction, not in value: the model is
    a smaller stand-in for the paper's (the demo), or, in an experiment, it is the paper's model trained on
    another token budget than the paper's (the experiment's `paper.tokens`, as in config/gpu1.yaml)."""
    spec = config["models"][model]
    return spec.get("paper_model") != spec["model"] or (experiment is not None
                                                         and budget_only(config, model, experiment))


def budget_only(config, model, experiment):
    """The paper's own model, trained in this experiment on another budget than the paper's `paper.tokens`."""
    spec = config["models"][model]
    paper = (experiment.get("paper") or {}).get("tokens")
    return (spec.get("paper_model") == spec["model"] and paper is not None
            and float(paper) != float(_per(experiment["tokens"], model)))


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


def eval_interval(run_dir):
    return int(json.loads((Path(run_dir) / "summary.json").read_text())["eval_interval"])


def record(reproduces, statements, differences=(), notes=()):
    """What an artifact says: the JSON beside it, its lines in the index, its rows in claims.csv."""
    return {"reproduces": reproduces, "statements": [s.to_dict() for s in statements],
            "rows": [r.to_dict() for s in statements for r in s.rows],
            "result": DESCRIPTIVE if not statements else None, "differences": list(differences), "notes": list(notes)}


def estimate_columns(estimate, paper, name=None):
    """Table columns of one estimate: mean, its std (merged as "mean ± std" in Markdown), the best LR (marked
    when on the grid edge, or "diverged" when every LR did) and the paper's value where it may stand beside
    ours. name: the column stem (default: the estimate's label, for tables with a column per optimizer)."""
    name = name or estimate.label
    lr = f"{estimate.lr} (edge)" if estimate.lr and estimate.at_edge else estimate.lr
    return {name: finite_mean(estimate), f"{name} std": estimate.std if estimate.n > 1 else None,
            f"{name} lr": lr or ("diverged" if estimate.diverged else None), f"{name} (paper)": paper}


def differences(ctx):
    """Where our setting differs from the paper's, said beside the verdict."""
    notes = []
    for model in ctx.spec["models"]:
        if ctx.stands_in(model):
            spec = ctx.config["models"][model]
            what = (f"the paper's {spec['model']} trained on {_per(ctx.spec['tokens'], model):.3g} tokens, the "
                    f"paper's on {ctx.paper_tokens(model):.3g}" if budget_only(ctx.config, model, ctx.spec) else
                    f"{spec['model']} on {spec['data']}, a stand-in for {spec.get('paper_model')}")
            notes.append(f"{model} is {what}: compare directions, not values; the paper's numbers are in their own "
                         "panel and table rows, at the batch sizes the experiment's `paper` block maps ours to")
    return notes


def paper_rows(ctx, model, batches, columns):
    """Table rows holding the paper's numbers for a stand-in model (never beside ours, whose units differ).
    columns(batch) -> {column: paper value}; the rows name the paper's model and batch."""
    if not ctx.stands_in(model):
        return []
    paper_model = ctx.config["models"][model].get("paper_model")
    rows = []
    for b in batches:
        values = columns(b)
        if any(v is not None for v in values.values()):
            rows.append({"model": f"paper: {paper_model}", "batch": ctx.paper_batch(model, b), **values})
    return rows
