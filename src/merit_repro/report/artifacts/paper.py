"""The paper's side of an artifact: which of our models stand in for the paper's, the paper's batch size and
token budget for ours, its printed numbers for a setting, and where they may be shown (beside ours, or in a
panel and rows of their own when our model is a stand-in).

``PaperNumbers`` is the part of ``Context`` that reads ``workflow/resources/paper_numbers.csv`` and the
experiment's ``paper`` block.
"""

import pandas as pd

from merit_repro.report.figures import Line, Panel


class PaperNumbers:
    """Needs ``config``, ``spec`` (the experiment), ``paper`` (the paper's numbers) and ``label(model, optimizer)``."""

    def stands_in(self, model):
        return stands_in(self.config, model, self.spec)

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


def _same_number(target):
    def match(value):
        try:
            return float(value) == float(target)
        except ValueError:
            return False
    return match


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
