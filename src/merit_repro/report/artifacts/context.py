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

from merit_repro.config.configfiles import with_defaults
from merit_repro.config.registry import OPTIMIZERS
from merit_repro.report.claims import DESCRIPTIVE, Estimate, Pooled, Setting, Stats, finite_mean, statement
from merit_repro.report.figures import draw, save

from .paper import PaperNumbers, _per, budget_only

BASELINES = ("adamw", "lamb")
NAMES = {name: spec.label for name, spec in OPTIMIZERS.items()}
# The paper's statements about the three optimizers, in the order the paper ranks them at a large batch
# (review: "MERIT shows small advantages over LAMB, and LAMB over AdamW").
PAIRS = (("merit", "adamw"), ("lamb", "adamw"), ("merit", "lamb"))


def name(optimizer):
    return NAMES.get(optimizer, optimizer)


@dataclass
class Context(PaperNumbers):
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
        return with_defaults(self.config, "report")

    @property
    def stats(self):
        return Stats.from_report(self.report)

    def optimizers(self):
        return list(self.spec["optimizers"])

    def label(self, model, optimizer):
        return f"{optimizer}+qknorm" if self.config["models"][model].get("qk_norm") else optimizer

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
        report = self.report
        fig = draw(panels, report["figure_width"], report["figure_height"], suptitle)
        save(fig, prefix, report["dpi"])

    def model_title(self, model):
        spec = self.config["models"][model]
        stand_in = "" if not self.stands_in(model) else (
            f", {_per(self.spec['tokens'], model):.3g} tokens, the paper's {self.paper_tokens(model):.3g}"
            if budget_only(self.config, model, self.spec) else f" standing in for {spec.get('paper_model')}")
        return f"{model} ({spec['model']}{stand_in})"

def _number(value):
    return 0.0 if value is None or pd.isna(value) else float(value)


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
