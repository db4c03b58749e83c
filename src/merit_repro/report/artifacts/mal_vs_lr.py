"""The mechanism as curves (issue 43): final validation loss and peak max attention logit (MAL) against the peak LR,
per optimizer and batch size, over every LR each group trained (its grid and the points tuning added), each LR over
every seed it has (band: their range); each batch's tuned LR marked with its claim seeds' mean; the batch sizes of one
optimizer on one panel, so that batch at a matched LR shows. The table adds the MAL phases (max over the first quarter
of the tokens, mean over the last quarter, layers over each level of merit_repro.report.mal) at every LR. The paper
prints MAL only at its tuned settings (the rebuttal's tables, at LRs it does not state): its numbers stand in a panel
of their own, against its batch size, never on an LR axis.

The design is read from the experiment's models: each model without QK-norm that trains the largest batch is a warmup
rule (the one with fewer warmup steps there is the short rule, the other the long one); the small batch is trained
under the first model that has it (the long rule's warmup steps are the small batch's, so its cells would be the same
runs); a QK-norm model at the large batch is the control.

Statements, fixed before the runs (each under both warmup rules where it applies; log scale for MAL):

    S1  AdamW's peak MAL at the large batch's tuned LR is above the small batch's at its own (held: the small
        batch's is lower).
    S2  At matched LRs (every LR both batches trained), AdamW's peak MAL does not depend on the batch: equivalent
        within the tolerance at each LR (held or did not hold there says which batch is higher: against S2).
    S3  MERIT's peak MAL is below AdamW's at the large batch, each at its tuned LR.
    S4  a. under the short warmup, MERIT's final loss is below AdamW's at the large batch (AdamW's gap exists);
        b. AdamW's gap to MERIT there is smaller under the long warmup than under the short one;
        c. under the short warmup AdamW + QK-norm is no worse than MERIT (the control closes the gap).

The mechanism line (``mechanism``) reads only these verdicts: **supported** when S1 and S3 hold under both rules and
S4's three parts hold; **depends on warmup** when S1 and S3 hold under one rule and one of them is decided against
(did not hold, or equivalent) under the other; **not supported** when one is decided against otherwise, or an S4
part is; else **inconclusive**. S2 is reported beside it (it says whether batch acts through the LR), not in it.

Seeds. S1, S3 and S4 compare tuned LRs: the claim seeds only, which did not choose the LR. S2 compares batches at LRs
the design fixed (every LR both trained), so no LR is chosen on the values it reads: at each LR it takes every seed
there, the grid seeds and, at a tuned LR, its claim seeds (fresh draws), but never the grid seeds at a tuned LR, which
chose it (on their loss, which goes with MAL): no seed both chooses and reports. A side with one seed takes the
experiment's pooled claim-seed spread of log MAL. S2 is judged once (a second look trains seeds at the tuned LRs
only, not at the LRs S2 compares), at the alpha of each look.
An LR where a run of either batch diverged is not tested in S2 (named instead): a diverged run has no finished MAL.
"""

import dataclasses
import re

import pandas as pd

from merit_repro.plan.cell import WARMUP_RULES, CellConfig
from merit_repro.plan.grid import cell_config, grid_seeds
from merit_repro.report.claims import (
    DECIDED,
    EQUIVALENT,
    HELD,
    NO_WORSE,
    Estimate,
    Setting,
    of_values,
    statement,
)
from merit_repro.report.figures import Line, Panel
from merit_repro.report.mal import MAL_LEVELS

from .context import log_of, record
from .paper import _per, differences, paper_rows

PHASES = ["mal_first_quarter_max", "mal_last_quarter_mean", *(f"n_layers_peak_mal_over_{v:g}" for v in MAL_LEVELS)]
# The verdict of each statement that supports the mechanism (S2: equivalence, the rest: held)
SUPPORTS = {"S1": HELD, "S2": EQUIVALENT, "S3": HELD, "S4a": HELD, "S4b": HELD, "S4c": HELD}
LABEL = re.compile(r"^(S\d[abc]?) \(([^):]+)")
MARKERS = {"short": "o", "long": "s", "control": "^"}


@dataclasses.dataclass
class Design:
    small: int
    large: int
    reference: str                  # the model that trains the small batch
    rules: dict                     # {"short" | "long": model} at the large batch
    control: str | None             # the QK-norm model at the large batch


def design(ctx):
    models = ctx.spec["models"]
    plain = [m for m in models if not ctx.config["models"][m].get("qk_norm")]
    batches = sorted({b for m in models for b in ctx.batches(m)})
    if not plain or not batches:
        return None
    small, large = batches[0], batches[-1]
    at_large = sorted((m for m in plain if large in ctx.batches(m)), key=lambda m: warmup_steps(ctx, m, large))
    reference = next((m for m in plain if small in ctx.batches(m)), plain[0])
    rules = dict(zip(("short", "long"), at_large[:1] + at_large[1:][-1:]))
    short = warmup_steps(ctx, rules["short"], large) if rules else None   # the control trains under the short rule
    control = next((m for m in models if m not in plain and large in ctx.batches(m)
                    and warmup_steps(ctx, m, large) == short), None)
    return Design(small, large, reference, rules, control)


def settings_of(ctx, model, batch):
    """A model's cell settings at a batch (only its schedule is read: where its data lie does not matter)."""
    return cell_config({"results": "results", **ctx.config}, model, _per(ctx.spec["tokens"], model), "adamw", batch,
                       "1", 0)


def warmup_steps(ctx, model, batch):
    return CellConfig.from_dict(settings_of(ctx, model, batch)).lr_warmup_steps


def warmup_of(ctx, model, batch):
    """A model's warmup rule and the steps it gives at a batch: "warmup_frac 0.05: 26 steps at batch 64"."""
    cfg = CellConfig.from_dict(settings_of(ctx, model, batch))
    rule = next(r for r in WARMUP_RULES if getattr(cfg, r) is not None)
    return f"{rule} {getattr(cfg, rule):g}: {cfg.lr_warmup_steps} steps at batch {batch}"


def rule_text(ctx, model, d):
    return f"{model}, {warmup_of(ctx, model, d.large)}"


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


def at_lr(ctx, model, batch, lr):
    """AdamW's log peak MAL at one LR over every seed there (S2), or why it has none."""
    r = ctx.runs.drop_duplicates("run_dir")
    cells = r[(r.model == model) & (r.optimizer == "adamw") & (r.batch == batch) & (r.lr == lr)]
    tuned_here = ctx.best_row(model, "adamw", batch)
    if tuned_here is not None and tuned_here.lr == lr:   # the grid seeds chose this LR: they do not report it
        cells = cells[~cells.seed.isin(grid_seeds(ctx.config, ctx.experiment))]
    label = f"AdamW@{batch} ({model})"
    values = {int(s): float(v) for s, v in zip(cells.seed, pd.to_numeric(cells.peak_mal, errors="coerce"))
              if pd.notna(v)}
    if not values:
        return Estimate(label, None)
    return log_of(of_values(label, values, (model, batch), lr=lr, metric="peak_mal"))


def tuned(ctx, model, optimizer, batch, metric="final_val_loss"):
    """An optimizer's estimate at its tuned LR (log for MAL), labelled with its batch and model."""
    e = ctx.tested(model, optimizer, batch, metric)
    return dataclasses.replace(e, label=f"{e.label}@{batch} ({model})")


def claim(label, where, text):
    return f"{label} ({where}): {text}"


def statements(ctx, d):
    """S1-S3 under each warmup rule, then S4 (see the module docstring), where the experiment has what they compare."""
    out, opts, floor = [], ctx.optimizers(), ctx.floor("peak_mal")
    stats, pooled = ctx.stats.of("peak_mal"), ctx.pooled("peak_mal")
    on_mal = lambda label, where, text, settings: statement(  # noqa: E731
        claim(label, where, f"{text} (log scale)"), settings, stats, pooled=pooled)
    peak = lambda model, opt, batch: tuned(ctx, model, opt, batch, "peak_mal")  # noqa: E731
    for rule, model in d.rules.items():
        where, large, small = f"{rule} warmup, {rule_text(ctx, model, d)}", d.large, d.small
        if "adamw" in opts and small != large:
            rise = Setting(model, f"{small}->{large}", peak(d.reference, "adamw", small), peak(model, "adamw", large),
                           floor=floor)
            out.append(on_mal("S1", where, f"AdamW's peak MAL at batch {large}'s tuned LR is above batch {small}'s at "
                                           "its own", [rise]))
            lrs = matched(ctx, d, model)
            out += [on_mal("S2", where, f"at matched LRs AdamW's peak MAL does not depend on the batch: batch "
                                        f"{large}'s within the tolerance of batch {small}'s at every LR both trained, "
                                        "over every seed there", lrs)] if lrs else []
        if {"adamw", "merit"} <= set(opts):
            lower = Setting(model, str(large), peak(model, "merit", large), peak(model, "adamw", large), floor=floor)
            out.append(on_mal("S3", where, f"MERIT's peak MAL is below AdamW's at batch {large}, each at its tuned "
                                           "LR", [lower]))
    return out + gap_statements(ctx, d)


def matched(ctx, d, model):
    """S2's settings: AdamW at the large batch against the small batch at each LR both trained."""
    r = ctx.runs.drop_duplicates("run_dir")
    adamw = r[r.optimizer == "adamw"]
    lrs = lambda m, b: set(adamw[(adamw.model == m) & (adamw.batch == b)].lr)  # noqa: E731
    settings = []
    for lr in sorted(lrs(d.reference, d.small) & lrs(model, d.large), key=float):
        cells = adamw[(adamw.lr == lr) & (((adamw.model == d.reference) & (adamw.batch == d.small))
                                           | ((adamw.model == model) & (adamw.batch == d.large)))]
        failed = cells[cells.status != "ok"]
        why = "" if failed.empty else ("a run diverged here (" + ", ".join(
            f"batch {b} seed {s}" for b, s in zip(failed.batch, failed.seed)) + "): no finished MAL to compare")
        subject, reference = at_lr(ctx, model, d.large, lr), at_lr(ctx, d.reference, d.small, lr)
        seeds = lambda e: ",".join(map(str, sorted(e.values))) if e.values else "none"  # noqa: E731
        settings.append(Setting(model, f"{d.large} vs {d.small} at lr {lr}", subject, reference,
                                f"seeds {seeds(subject)} vs {seeds(reference)}", not_tested=why,
                                floor=ctx.floor("peak_mal")))
    return settings


def gap_statements(ctx, d):
    """S4's three parts, on the final loss at the large batch, where the experiment has what each compares."""
    if not {"adamw", "merit"} <= set(ctx.optimizers()) or "short" not in d.rules:
        return []
    short, large, pooled = d.rules["short"], d.large, ctx.pooled()
    on_loss = lambda label, where, text, setting: statement(  # noqa: E731
        claim(label, where, text), [setting], ctx.stats, pooled=pooled)
    loss = lambda model, opt: tuned(ctx, model, opt, large)  # noqa: E731
    gap = lambda model: loss(model, "adamw") - loss(model, "merit")  # noqa: E731
    out = [on_loss("S4a", "short warmup", f"MERIT's final loss is below AdamW's at batch {large}: AdamW's "
                   "large-batch gap exists", Setting(short, str(large), loss(short, "merit"), loss(short, "adamw")))]
    if "long" in d.rules:
        long = d.rules["long"]
        out.append(on_loss("S4b", "long against short warmup", f"AdamW's loss gap to MERIT at batch {large} is "
                           "smaller under the long warmup", Setting(f"{long} vs {short}", str(large), gap(long),
                                                                    gap(short), "the gap: AdamW's loss minus MERIT's")))
    if d.control:
        out.append(on_loss("S4c", "AdamW + QK-norm, short warmup", f"AdamW + QK-norm is no worse than MERIT at batch "
                           f"{large}: the control closes the gap", Setting(f"{d.control} vs {short}", str(large),
                                                                           loss(d.control, "adamw"),
                                                                           loss(short, "merit"), kind=NO_WORSE)))
    return out


def mechanism(found):
    """The mechanism line from the statements' final verdicts ([{claim, result}], after any second look)."""
    verdicts = {}
    for s in found:
        m = LABEL.match(s["claim"])
        if m:
            verdicts.setdefault(m[1], {})[m[2].split(",")[0]] = s["result"]

    def side(label, result):
        return "for" if result == SUPPORTS[label] else "against" if result in DECIDED else "open"

    def together(sides):
        return "for" if sides and all(x == "for" for x in sides) else "against" if "against" in sides else "open"
    rules = sorted(set(verdicts.get("S1", {})) | set(verdicts.get("S3", {})))
    per_rule = [together([side(s, verdicts.get(s, {}).get(r)) for s in ("S1", "S3")]) for r in rules]
    gap = together([side(p, next(iter(verdicts.get(p, {}).values()), None)) for p in ("S4a", "S4b", "S4c")])
    if per_rule and all(x == "for" for x in per_rule) and gap == "for":
        verdict = "supported"
    elif gap == "against":   # S4 decided against: no warmup rule can support the mechanism
        verdict = "not supported"
    elif "for" in per_rule and "against" in per_rule:
        verdict = "depends on warmup"
    elif "against" in per_rule or gap == "against":
        verdict = "not supported"
    else:
        verdict = "inconclusive"
    said = "; ".join(f"{label} " + ", ".join(f"{where}: {result}" for where, result in by.items())
                     for label, by in verdicts.items())
    return (f"The mechanism (S1 and S3 under both warmup rules, and S4; fixed before the runs): {verdict}. "
            f"Verdicts: {said or 'none stated'} (S2 is reported, not part of the rule).")


def mal_vs_lr(ctx, prefix):
    d = design(ctx)
    table = per_lr(ctx) if len(ctx.runs) else pd.DataFrame()
    if d is None or table.empty:
        ctx.figure([Panel("no finished runs", "peak learning rate", "")], prefix, "MAL and loss against the LR")
        return pd.DataFrame(), record("MAL and loss against the LR at each batch (issue 43)", [], differences(ctx))
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
             "S2 reads every seed at each matched LR but the grid seeds at a tuned LR (they chose it): the grid seeds "
             "elsewhere, the claim seeds at a tuned LR; S1, S3 and S4 read the claim seeds at the tuned LRs only"]
    return rows(ctx, d, table), record("MAL and loss against the LR at each batch (issue 43)", stated,
                                       differences(ctx), notes)


def rows(ctx, d, table):
    """The table: one row per LR of each group (every seed there), the tuned one marked; the paper's numbers beside
    a tuned row where our model is the paper's, else in rows of their own."""
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
    out += paper_rows(ctx, d.reference, [d.small, d.large], lambda b: {
        f"{ctx.label(d.reference, o)} {metric}": ctx.paper_value("peak_mal_vs_batch", d.reference, o, b, metric)
        for o in ctx.optimizers() for metric in ("val_loss", "peak_mal")})
    return pd.DataFrame(out)
