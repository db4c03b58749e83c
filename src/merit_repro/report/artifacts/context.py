"""What every artifact module reads: one experiment's cells, tuned groups and the paper's numbers.

Inputs are the small per-run files and the aggregated tables only (results/tables/): runs.csv (one
row per cell), cells.csv (which cells each experiment trained, and why) and best_lr.csv (per group:
the tuning decision and the metrics at the best LR over its claim seeds).
"""

import dataclasses
import functools
import json
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from merit_repro.config.configfiles import with_defaults
from merit_repro.config import optimizer_sources
from merit_repro.config.registry import OPTIMIZERS
from merit_repro.plan.grid import grid_seeds, looks
from merit_repro.plan.tuning import CLAIM, SELECTION_METRIC, choice_margin
from merit_repro.report.claims import ADDED, DESCRIPTIVE, NO_WORSE, PAPER, Setting, finite_mean, statement
from merit_repro.report.stats import Estimate, Pooled, Stats, of_values
from merit_repro.report.figures import draw, save

from .paper import PaperNumbers, _per, budget_only

BASELINES = ("adamw", "lamb")
# The paper's statements about the three optimizers, in the order the paper ranks them at a large batch
# (review: "MERIT shows small advantages over LAMB, and LAMB over AdamW").
PAIRS = (("merit", "adamw"), ("lamb", "adamw"), ("merit", "lamb"))
# Metrics whose differences are ratios, tested on the log scale: perplexity is exp(loss), and MAL spans orders of
# magnitude (the paper's 3 to 664), so "twice the MAL" is the same effect at any size.
LOG_SCALE = ("lambada_ppl", "peak_mal")


@dataclass
class Context(PaperNumbers):
    experiment: str
    config: dict
    runs: pd.DataFrame      # the experiment's cells joined with their run summaries
    best: pd.DataFrame      # the experiment's groups (best_lr.csv rows)
    paper: pd.DataFrame
    results: Path | None = None   # the results folder the tables are in (per-group files beside them)
    drawing: bool = True    # False: statements only (the first look at the claim seeds draws nothing)
    look: int = 2           # the look its statements are judged at, with two looks at the claim seeds
    _rivals: dict = dataclasses.field(default_factory=dict, repr=False)   # rivals(), once per group

    @property
    def spec(self):
        return self.config["experiments"][self.experiment]

    @property
    def report(self):
        return with_defaults(self.config, "report")

    @property
    def stats(self):
        return Stats.from_report(self.report, looks(self.config), self.look)

    @property
    def stats_once(self):
        """The stats of statements judged once whatever the looks (zero-shot scores only the claim seeds): the full
        alpha."""
        return Stats.from_report(self.report)

    def optimizers(self):
        return list(self.spec["optimizers"])

    @functools.cached_property
    def styles(self):
        """{optimizer: (label, colour)}: the registry's for the built-ins, the config's or the next free colour for
        the rest (merit_repro.config.optimizer_sources.styles)."""
        return optimizer_sources.styles(self.config)

    def name(self, optimizer):
        """An optimizer's name in statements: MERIT, AdamW, ..., or an optimizer from outside's label."""
        return self.styles.get(optimizer, (optimizer, None))[0]

    def added_pairs(self):
        """The comparisons a config adds for each optimizer from outside in the experiment: it against AdamW, and
        MERIT against it, where the experiment has them."""
        opts, added = self.optimizers(), optimizer_sources.external_names(self.config)
        return [(a, b) for x in opts if x in added for a, b in ((x, "adamw"), ("merit", x)) if a in opts and b in opts]

    def label(self, model, optimizer):
        return f"{optimizer}+qknorm" if self.config["models"][model].get("qk_norm") else optimizer

    # -- our results

    def best_row(self, model, optimizer, batch):
        rows = self.best[(self.best.model == model) & (self.best.optimizer == optimizer) & (self.best.batch == batch)]
        return rows.iloc[0] if len(rows) else None

    def batches(self, model):
        return sorted(int(b) for b in self.best[self.best.model == model].batch.unique())

    def estimate(self, model, optimizer, batch, metric="final_val_loss", choice=True, lr=None):
        """One optimizer's result at its first-choice LR at one batch size, over its claim seeds
        (claims.Estimate, with each seed's value for paired tests). A tuning failure (every LR diverged, or
        claim seeds diverged at the chosen LR) is an infinite estimate that says so with its counts. choice: with
        the LRs that rival the choice (``rivals``) and the estimate at each of them its claim seeds trained at
        (``alternatives``); lr: at that rival LR instead of the choice (the chosen LR's seeds)."""
        label = self.label(model, optimizer)
        row = self.best_row(model, optimizer, batch)
        if row is None:
            return Estimate(label, None)
        if row.status != "ok":
            return Estimate(label, math.inf, lr=None, inf_text=f"diverged at every LR ({int(row.n_diverged)} "
                                                                f"diverged runs over {int(row.n_lrs)} LRs)")
        failed = int(row.get("n_claim_diverged", 0) or 0)
        if failed:
            return Estimate(label, math.inf, at_edge=bool(row.at_edge), lr=row.lr, metric=metric,
                            inf_text=f"diverged on {failed} of {int(row.n_seeds)} claim seeds at its chosen LR {row.lr}")
        runs = self.seed_runs(model, optimizer, batch, lr)
        rivals, alternatives = self.choice(model, optimizer, batch, lambda x: self.estimate(
            model, optimizer, batch, metric, False, x)) if choice else ((), ())
        values = seed_values(runs, metric) if metric in runs else {}
        group = (model, optimizer, int(batch))
        if values:
            return of_values(label, values, (model, batch), bool(row.at_edge) and lr is None, lr or row.lr, metric,
                             rivals, group, alternatives)
        if lr is not None:
            return Estimate(label, None, lr=lr)
        mean, n = row.get(metric), row.get(f"{metric}_n", row.n_seeds)   # a metric of the group only
        return Estimate(label, None if pd.isna(mean) else float(mean), _number(row.get(f"{metric}_std")),
                        int(n) if pd.notna(n) else 0, bool(row.at_edge), row.lr, metric=metric, rivals=rivals,
                        group=group)

    def choice(self, model, optimizer, batch, at_lr):
        """(the rival LRs of a group's choice, the estimates at those its chosen LR's seeds trained at, from at_lr(lr)):
        an LR whose claim seeds diverged there is no rival (a diverged LR cannot be the best)."""
        rivals = self.rivals(model, optimizer, batch)
        found, seeds = [], set(self.seed_runs(model, optimizer, batch).seed) if rivals else set()
        for lr in rivals:
            runs = self.seed_runs(model, optimizer, batch, lr)
            if set(runs.seed) != seeds:
                continue   # uncovered: the verdicts it could overturn stay undecided
            if (runs.status != "ok").any():
                rivals = tuple(x for x in rivals if x != lr)
                continue
            e = at_lr(lr)
            if not e.missing:
                found.append(e)
        return rivals, tuple(found)

    def rivals(self, model, optimizer, batch):
        """The LRs whose grid-seed loss is within tuning.lr_choice_noise standard deviations of a difference
        of two grid-seed means of the chosen LR's, by the group's own claim-seed spread (``choice_sd`` in best_lr.csv,
        as tuning judged them: ``rivals``), or the experiment's pooled one where the group has none of its own (one
        claim seed). A verdict a rival could overturn must hold there too. Not max(own, pooled): a group's spread is
        its own (the demo's differ tenfold between its batch sizes), and the pool would judge a quiet group's choice
        by the noisy ones' noise, leaving close calls it flags untested (LR choice a close call) where the group's
        own seeds say the choice was clear."""
        key = (model, optimizer, int(batch))
        if key not in self._rivals:
            self._rivals[key] = self._close_to_choice(*key)
        return self._rivals[key]

    @functools.cached_property
    def _choice_noise(self):
        """(grid seeds, the experiment's pooled claim-seed sd of the loss at the chosen and rival LRs, tuning's
        lr_choice_noise), once per experiment: the claim seeds only (never a second look's), as tuning judged."""
        r = self.runs[self.runs.seed_origin == CLAIM]
        r = r[r.status == "ok"]
        losses = pd.to_numeric(r[SELECTION_METRIC], errors="coerce")
        by_cell = losses.groupby([r.model, r.optimizer, r.batch, r.lr]).agg(["var", "count"]).dropna()
        df = int((by_cell["count"] - 1).sum())
        pooled = math.sqrt(float(((by_cell["count"] - 1) * by_cell["var"]).sum()) / df) if df else None
        return grid_seeds(self.config, self.experiment), (pooled, df), float(with_defaults(self.config, "tuning")
                                                                             ["lr_choice_noise"])

    def _close_to_choice(self, model, optimizer, batch):
        row = self.best_row(model, optimizer, batch)
        if row is None or row.status != "ok":
            return ()
        seeds, pooled, noise = self._choice_noise
        found = set(str(row.get("rivals", "") or "").split()) if pd.notna(row.get("rivals")) else set()
        own, own_df = row.get("choice_sd"), row.get("choice_df")
        sd, df = (float(own), int(own_df)) if own is not None and pd.notna(own) and pd.notna(own_df) else pooled
        r = self.runs
        cells = r[(r.model == model) & (r.optimizer == optimizer) & (r.batch == batch) & r.seed.isin(seeds)]
        losses = pd.to_numeric(cells[SELECTION_METRIC], errors="coerce").where(cells.status == "ok")
        by_lr = losses.groupby(cells.lr).agg(["mean", "count"])
        by_lr = by_lr[by_lr["count"] == len(seeds)]["mean"]
        if sd is not None and row.lr in by_lr.index:
            margin = choice_margin(sd, df, len(seeds), noise)
            found |= {lr for lr in by_lr.index if lr != row.lr and by_lr[lr] - by_lr[row.lr] <= margin}
        return tuple(sorted(found, key=float))

    def tested(self, model, optimizer, batch, metric="final_val_loss", choice=True):
        """The estimate a statement tests: the metric's, or its logarithm's for a LOG_SCALE metric."""
        e = self.estimate(model, optimizer, batch, metric, choice)
        return log_of(e) if metric in LOG_SCALE else e

    def floor(self, metric):
        """A LOG_SCALE metric's tolerance as a difference of logarithms; None: relative to the reference."""
        return math.log1p(self.stats.of(metric).tolerance) if metric in LOG_SCALE else None

    def within_tolerance(self, metric, x, y):
        """Whether two of the paper's numbers differ by less than the metric's tolerance."""
        if metric in LOG_SCALE:
            return x > 0 and y > 0 and abs(math.log(x / y)) < self.floor(metric)
        return abs(x - y) < self.stats.of(metric).tolerance * abs(y)

    def pooled(self, metric="final_val_loss", paper=True):
        """The experiment's seed noise of a metric, pooled over its groups with two or more claim seeds: the paper's
        optimizers' groups for the paper's statements (an optimizer a config adds leaves their noise, and so their
        verdicts, as they were), every group for the comparisons the config adds (paper=False)."""
        return Pooled.of([self.tested(r.model, r.optimizer, r.batch, metric, choice=False)
                          for r in self.best.itertuples() if not paper or r.optimizer in OPTIMIZERS])

    def seed_runs(self, model, optimizer, batch, lr=None):
        """The runs of the claim seeds at a group's best LR (empty when it has none), or at lr with the same seeds."""
        row = self.best_row(model, optimizer, batch)
        if row is None or row.status != "ok" or pd.isna(row.seeds):
            return self.runs.iloc[0:0]
        seeds = [int(s) for s in str(row.seeds).split()]
        r = self.runs
        return r[(r.model == model) & (r.optimizer == optimizer) & (r.batch == batch) & (r.lr == (lr or row.lr))
                 & r.seed.isin(seeds)].drop_duplicates("run_dir")

    def seed_mean_curve(self, model, optimizer, batch, read):
        """read(run_dir) -> pd.Series indexed by step: (steps, the mean over the claim seeds, (their lowest, their
        highest)) at the steps all seeds share. The band is the seeds' range: it stays positive on a log axis."""
        curves = [read(d) for d in self.seed_runs(model, optimizer, batch).run_dir]
        if not curves:
            return [], [], None
        table = pd.concat(curves, axis=1).dropna()
        band = (list(table.min(axis=1)), list(table.max(axis=1))) if table.shape[1] > 1 else None
        return list(table.index), list(table.mean(axis=1)), band

    # -- statements and figures

    def ordered(self, paper, model, batch, a, b):
        """(subject, reference) of "a vs b" in the direction the paper prints at this setting: the one with
        the paper's lower value first; a first where the paper prints no number for both.
        paper(model, optimizer, batch) -> the paper's number or None."""
        pa, pb = (paper(model, o, batch) for o in (a, b))
        return (b, a) if pa is not None and pb is not None and pb < pa else (a, b)

    def pairwise(self, claim, table, metric, settings, paper_metric="val_loss", together=False, paper=None,
                 added_claim=None):
        """The paper's three pairwise statements (MERIT vs AdamW, LAMB vs AdamW, MERIT vs LAMB) at each of
        settings = [(model, batch), ...], in the paper's direction at each: one statement per setting, or one
        over all of them where the paper makes it so (together: "at every model size"). paper(model,
        optimizer, batch): the paper's numbers, by default the table's at the mapped batch.

        The paper claims the large-batch ordering only: at a model's smaller batches the ordering its single
        runs print is descriptive. Where the printed gap is below the tolerance, what the paper shows is that
        the one it prints lower is no worse, tested as non-inferiority (the rule is fixed by the paper's numbers,
        not ours).

        added_claim: the text of the comparisons the config adds (added_pairs: an optimizer from outside against
        AdamW, MERIT against it), tested by the same rule at every setting, since the paper ranks neither way, and
        marked ADDED: the report counts and corrects them apart from the paper's statements."""
        paper = paper or (lambda model, opt, batch: self.paper_value(table, model, opt, batch, paper_metric))
        out, pooled, stats = [], self.pooled(metric), self.stats.of(metric)

        def judged(text, rows, pooled, origin=PAPER):
            """One statement over all rows (together), or one per row."""
            groups = [rows] if together else [[row] for row in rows]
            return [dataclasses.replace(statement(text, g, stats, pooled=pooled), origin=origin) for g in groups]
        for a, b in PAIRS:
            if a not in self.optimizers() or b not in self.optimizers():
                continue
            rows = []
            for model, batch in settings:
                s, r = self.ordered(paper, model, batch, a, b)
                values = [paper(model, o, batch) for o in (s, r)]
                note = (f"paper: {self.name(s)} {values[0]:.3f} vs {self.name(r)} {values[1]:.3f}"
                        + (f" (at {self.config['models'][model].get('paper_model')}"
                           + (f", batch {pb}" if (pb := self.paper_batch(model, batch)) is not None else "") + ")"
                           if self.stands_in(model) else "")) if None not in values else ""
                kind = None
                if batch != self.batches(model)[-1]:
                    kind, note = DESCRIPTIVE, "; ".join(x for x in (note, "the paper claims the largest batch's "
                                                                    "ordering only") if x)
                elif None not in values and self.within_tolerance(metric, *values):
                    kind, note = NO_WORSE, (f"{note}: the paper's own gap is below the tolerance ({stats.tolerance:g} "
                                            "of the value), so what it shows is no worse, tested as non-inferiority "
                                            "(not worse by more than the tolerance)")
                rows.append(Setting(model, str(batch), self.tested(model, s, batch, metric),
                                    self.tested(model, r, batch, metric), note, floor=self.floor(metric), kind=kind))
            text = claim.format(a=self.name(a), b=self.name(b))
            out += judged(text, rows, pooled)
        pooled = self.pooled(metric, paper=False)
        for a, b in self.added_pairs() if added_claim else ():
            rows = [Setting(model, str(batch), self.tested(model, a, batch, metric),
                            self.tested(model, b, batch, metric), "", floor=self.floor(metric))
                    for model, batch in settings]
            text = added_claim.format(a=self.name(a), b=self.name(b))
            out += judged(text, rows, pooled, ADDED)
        return out

    def figure(self, panels, prefix, suptitle):
        if not self.drawing:
            return
        report = self.report
        fig = draw(panels, report["figure_width"], report["figure_height"], suptitle,
                   colors={opt: color for opt, (_, color) in self.styles.items()})
        save(fig, prefix, report["dpi"])

    def model_title(self, model):
        spec = self.config["models"][model]
        stand_in = "" if not self.stands_in(model) else (
            f", {_per(self.spec['tokens'], model):.3g} tokens, the paper's {self.paper_tokens(model):.3g}"
            if budget_only(self.config, model, self.spec) else f" standing in for {spec.get('paper_model')}")
        return f"{model} ({spec['model']}{stand_in})"


def seed_values(runs, metric):
    """{seed: value} of a metric over runs (one per seed), the runs without a value left out."""
    return {int(s): float(v) for s, v in zip(runs.seed, pd.to_numeric(runs[metric], errors="coerce")) if pd.notna(v)}


def log_of(e):
    """An estimate of the logarithm, from its seeds' values (a failure or a missing one as it is)."""
    if not e.values:
        return e
    return of_values(f"log {e.label}", {s: math.log(v) if v > 0 else -math.inf for s, v in e.values.items()},
                     e.setting, e.at_edge, e.lr, e.metric, e.rivals, e.group, tuple(map(log_of, e.alternatives)))


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
            "rows": [{**r.to_dict(), "origin": s.origin} for s in statements for r in s.rows],
            "result": DESCRIPTIVE if not statements else None, "differences": list(differences), "notes": list(notes)}


def estimate_columns(estimate, paper, name=None):
    """Table columns of one estimate: mean, its std (merged as "mean ± std" in Markdown), the best LR (marked
    when on the grid edge, or "diverged" when every LR did) and the paper's value where it may stand beside
    ours. name: the column stem (default: the estimate's label, for tables with a column per optimizer)."""
    name = name or estimate.label
    lr = f"{estimate.lr} (edge)" if estimate.lr and estimate.at_edge else estimate.lr
    return {name: finite_mean(estimate), f"{name} std": estimate.std if estimate.n > 1 else None,
            f"{name} lr": lr or ("diverged" if estimate.diverged else None), f"{name} (paper)": paper}
