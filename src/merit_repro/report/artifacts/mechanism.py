"""The mechanism's statements and the line that reads them (issue 55), for mal_vs_lr's curves.

The paper names a mechanism: at large batch AdamW's max attention logit (MAL) explodes and its loss degrades;
MERIT holds MAL down. MAL rises steeply with the LR and nominal LRs are not comparable across optimizers (MERIT's
is a step relative to a max-norm), so each statement is placed where it can tell the mechanism from its absence,
and carries the outcome the paper expects ("paper: ..."). Fixed before the runs that read them.

The design is read from the experiment's models: each model without QK-norm that trains the largest batch is a
warmup rule (fewer warmup steps there: the short rule, the other the long one); the small batch is trained under
the first model that has it; a QK-norm model at the large batch under the short rule is the control. LR* is a
group's tuned LR (chosen by its grid seeds); the claim seeds report it; the curve seeds (the experiment's ``curve``)
train at k x LR* after the choice and report there. No seed both chooses and reports. MAL on the log scale.

The paper's MAL claims, at tuned LRs as the paper compares them (short warmup):
    S1   AdamW's peak MAL at the large batch's LR* is above the small batch's at its own (paper: held).
    S3   MERIT's peak MAL is below AdamW's at the large batch, each at its LR* (paper: held).
    S4a  MERIT's final loss is below AdamW's at the large batch: AdamW's gap exists (paper: held).
The LR-robust form (large batch, short warmup), which no choice of grid point can make:
    L1   MERIT's peak MAL is below AdamW's at 2 x and at 4 x each one's own LR* (paper: held), on the curve seeds,
         paired; k = 1/2 and 1 are drawn and tabled, not tested (below LR* neither explodes).
    L2   AdamW's LR ceiling is a MAL ceiling: at the first of its grid LRs above LR* (up to 4 x) whose grid-seed
         loss is worse than LR*'s by more than the tolerance, its peak MAL (curve seeds) is at least 3 x that at
         LR* (claim seeds) (paper: held). No such LR: not tested (no ceiling inside 4 x LR*).
    described: each arm's MAL / (max |W_q| x max |W_k|) at the peak probe at LR* and 2 x LR* (from mal.csv: how much
         of the MAL is the weights' scale); MAL at equal loss on the high-LR side (interpolated in loss over 1, 2,
         4 x LR*).
Causal probes, read apart from the line:
    S4b  AdamW's loss gap to MERIT at the large batch is smaller under the long warmup (the paper does not say);
    S4m  AdamW's peak MAL at the large batch's LR* is lower under the long warmup. Read together: a gap that
         closes (S4b held) while AdamW's MAL does not fall (S4m not held) argues against MAL mediating the gap.
    S4c  AdamW + QK-norm under the short warmup is no worse than MERIT (paper: did not hold; the rebuttal's
         AdamW + QK-norm best loss 3.475 against MERIT's 3.28).
    S2   at matched LRs, AdamW's peak MAL at the large batch against the small batch's: described, the log ratio
         and its interval at each LR both trained (one grid seed a side cannot test it: see docs/mechanism.md).

The line (``mechanism``) reads the family S1, S3, S4a, L1, L2: **supported** when every member held (each at
alpha: an intersection-union test); **not supported** when a member's verdict is against it (did not hold, or
equivalent) and survives Holm's correction over the family's 2 x 5 p-values (each member's did-not-hold and
equivalence p); else **inconclusive**, naming the open members. Where the config records that a pilot found the
premise absent (``premise_absent``), the line says so first: its verdicts are not read as the paper's.
"""

import dataclasses
import math
import re

import numpy as np
import pandas as pd

from merit_repro.plan.grid import grid_seeds
from merit_repro.plan.tuning import CURVE, SELECTION_METRIC, curve_lrs
from merit_repro.report.claims import DESCRIPTIVE, EQUIVALENT, HELD, NOT_HELD, NO_WORSE, Setting, statement
from merit_repro.report.stats import Estimate, holm, of_values

from .context import log_of, seed_values

LABEL = re.compile(r"^(S\d[abcm]?|L\d) \(")
FAMILY = ("S1", "S3", "S4a", "L1", "L2")    # the line's members, each expected to hold
CURVE_TESTED = (2.0, 4.0)                   # L1's multiples of LR*
CEILING_RATIO = 3.0                         # L2: MAL at the ceiling over MAL at LR*
CEILING_REACH = 4.0                         # L2 looks for the ceiling up to this multiple of LR*
EQUAL_LOSS_STEPS = (0.02, 0.05, 0.1)        # loss above the worse LR*'s where MAL at equal loss is read


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


def schedule_of(ctx, model, batch):
    """The warmup a model's AdamW cells at a batch trained with, as their trainer recorded it (runs.csv); another
    optimizer's cells where AdamW trains none there (one warmup rule a model, unless an optimizer sets its own)."""
    r = ctx.runs
    rows = r[(r.model == model) & (r.batch == batch) & (r.optimizer == "adamw")]
    return (rows if len(rows) else r[(r.model == model) & (r.batch == batch)]).iloc[0]


def warmup_steps(ctx, model, batch):
    return int(schedule_of(ctx, model, batch).warmup_steps)


def warmup_of(ctx, model, batch):
    """A model's warmup rule and the steps it gives at a batch: "warmup_frac 0.05: 26 steps at batch 64"."""
    row = schedule_of(ctx, model, batch)
    return f"{row.warmup_rule}: {int(row.warmup_steps)} steps at batch {batch}"


def rule_text(ctx, model, d):
    return f"{model}, {warmup_of(ctx, model, d.large)}"


def tuned(ctx, model, optimizer, batch, metric="final_val_loss"):
    """An optimizer's estimate at its tuned LR (log for MAL), labelled with its batch and model."""
    e = ctx.tested(model, optimizer, batch, metric)
    return dataclasses.replace(e, label=f"{e.label}@{batch} ({model})")


def at_lr(ctx, model, batch, lr):
    """AdamW's log peak MAL at one LR over every seed there but those that chose it (S2)."""
    r = ctx.runs.drop_duplicates("run_dir")
    cells = r[(r.model == model) & (r.optimizer == "adamw") & (r.batch == batch) & (r.lr == lr)]
    tuned_here = ctx.best_row(model, "adamw", batch)
    if tuned_here is not None and tuned_here.lr == lr:   # the grid seeds chose this LR: they do not report it
        cells = cells[~cells.seed.isin(grid_seeds(ctx.config, ctx.experiment))]
    label = f"AdamW@{batch} ({model})"
    values = seed_values(cells, "peak_mal")
    if not values:
        return Estimate(label, None)
    return log_of(of_values(label, values, (model, batch), lr=lr, metric="peak_mal"))


def curve_runs(ctx, model, optimizer, batch, k):
    """(the LR k x LR*, the curve seeds' runs there), or (None, no runs) where the group has no LR* or k is 1."""
    row = ctx.best_row(model, optimizer, batch)
    if row is None or row.status != "ok":
        return None, ctx.runs.iloc[0:0]
    lr = curve_lrs({"curve_multiples": [k]}, row.lr)[0]
    r = ctx.runs.drop_duplicates("run_dir")
    return lr, r[(r.model == model) & (r.optimizer == optimizer) & (r.batch == batch) & (r.lr == lr)
                 & (r.seed_origin == CURVE)]


def at_multiple(ctx, model, optimizer, batch, k, metric="peak_mal"):
    """An optimizer's estimate at k x its LR* over its curve seeds (log for MAL); k = 1: its claim seeds'."""
    if k == 1:
        return tuned(ctx, model, optimizer, batch, metric)
    label = f"{ctx.label(model, optimizer)}@{batch} ({model}) at {k:g}x LR*"
    lr, runs = curve_runs(ctx, model, optimizer, batch, k)
    if runs.empty:
        return Estimate(label, None, lr=lr)
    row = ctx.best_row(model, optimizer, batch)
    failed = runs[runs.status != "ok"]
    if len(failed):
        return Estimate(label, math.inf, lr=lr, at_edge=bool(row.at_edge), metric=metric,
                        inf_text=f"diverged on {len(failed)} of {len(runs)} curve seeds at {lr}")
    values = seed_values(runs, metric)
    if not values:
        return Estimate(label, None, lr=lr)
    e = of_values(label, values, (model, batch), bool(row.at_edge), lr, metric)
    return log_of(e) if metric == "peak_mal" else e


def expected(text, outcome):
    return f"{text} (paper: {outcome})"


def statements(ctx, d):
    """Every statement the experiment has what it compares for (see the module docstring), in the order above."""
    out, opts = [], set(ctx.optimizers())
    floor, stats, pooled = ctx.floor("peak_mal"), ctx.stats.of("peak_mal"), ctx.pooled("peak_mal")

    def on_mal(label, where, text, settings, kind=None):
        return statement(f"{label} ({where}): {text} (log scale)", settings, stats,
                         **({"kind": kind} if kind else {}), pooled=pooled)

    def peak(model, opt, batch):
        return tuned(ctx, model, opt, batch, "peak_mal")

    if "short" not in d.rules:
        return out
    short, large, small = d.rules["short"], d.large, d.small
    where = f"short warmup, {rule_text(ctx, short, d)}"
    if "adamw" in opts and small != large:
        rise = Setting(short, f"{small}->{large}", peak(d.reference, "adamw", small), peak(short, "adamw", large),
                       floor=floor)
        out.append(on_mal("S1", where, expected(f"AdamW's peak MAL at batch {large}'s tuned LR is above batch "
                                                f"{small}'s at its own", HELD), [rise]))
    if {"adamw", "merit"} <= opts:
        lower = Setting(short, str(large), peak(short, "merit", large), peak(short, "adamw", large), floor=floor)
        out.append(on_mal("S3", where, expected(f"MERIT's peak MAL is below AdamW's at batch {large}, each at its "
                                                "tuned LR", HELD), [lower]))
    out += gap_statements(ctx, d)
    if {"adamw", "merit"} <= opts:
        out += lr_robust(ctx, d, on_mal)
    if "adamw" in opts and small != large:
        lrs = matched(ctx, d, short)
        out += [on_mal("S2", where, f"at matched LRs, AdamW's peak MAL at batch {large} against batch {small}'s, "
                                    "over every seed at each LR but those that chose it (described: the log ratio "
                                    "and its interval)", lrs, DESCRIPTIVE)] if lrs else []
    return out


def lr_robust(ctx, d, on_mal):
    """L1 and L2 at the large batch under the short rule, where its groups have curve seeds."""
    short, large, floor = d.rules["short"], d.large, ctx.floor("peak_mal")
    where = f"short warmup, {rule_text(ctx, short, d)}"
    settings = [Setting(short, f"{large} at {k:g}x LR*", at_multiple(ctx, short, "merit", large, k),
                        at_multiple(ctx, short, "adamw", large, k), "each at k x its own tuned LR, curve seeds",
                        floor=floor) for k in CURVE_TESTED]
    out = [on_mal("L1", where, expected(f"MERIT's peak MAL is below AdamW's at batch {large} at "
                                        f"{' and '.join(f'{k:g}x' for k in CURVE_TESTED)} each one's own tuned LR",
                                        HELD), settings)]
    lr, why = ceiling(ctx, short, large)
    base = tuned(ctx, short, "adamw", large, "peak_mal")
    if lr is None:
        top = Estimate(f"AdamW@{large} ({short}) at its ceiling", None)
    else:
        k = float(lr) / float(ctx.best_row(short, "adamw", large).lr)
        top = at_multiple(ctx, short, "adamw", large, round(k, 6))
    ratio = Estimate(f"log 1/{CEILING_RATIO:g}", -math.log(CEILING_RATIO))   # subject: log (3 x MAL at LR*)
    out.append(on_mal("L2", where, expected(f"AdamW's LR ceiling is a MAL ceiling: at its first LR above its tuned LR "
                                            f"whose loss is worse by more than the tolerance, its peak MAL is at least "
                                            f"{CEILING_RATIO:g}x that at its tuned LR", HELD),
                      [Setting(short, str(large), base - ratio, top, f"the ceiling: {lr or 'none'} ({why}); "
                               f"subject: log MAL at the tuned LR + log {CEILING_RATIO:g}", not_tested="" if lr
                               else why, floor=floor)]))
    return out


def ceiling(ctx, model, batch):
    """(AdamW's first grid LR above LR*, up to 4 x, whose grid-seed loss is worse than LR*'s by more than the
    tolerance; why), or (None, why not). The grid seeds chose LR*; the ceiling is theirs to locate too, and the
    curve seeds report MAL there."""
    row = ctx.best_row(model, "adamw", batch)
    if row is None or row.status != "ok":
        return None, "AdamW has no tuned LR"
    r = ctx.runs.drop_duplicates("run_dir")
    seeds = grid_seeds(ctx.config, ctx.experiment)
    g = r[(r.model == model) & (r.optimizer == "adamw") & (r.batch == batch) & r.seed.isin(seeds)]
    loss = pd.to_numeric(g[SELECTION_METRIC], errors="coerce").where(g.status == "ok", math.inf)
    by_lr = loss.groupby(g.lr).mean()
    best = by_lr.get(row.lr)
    tol = ctx.stats.of(SELECTION_METRIC).tolerance * abs(best)
    curve = {float(x) for x in curve_lrs({"curve_multiples": [2.0, CEILING_REACH]}, row.lr)}
    for lr in sorted((x for x in by_lr.index if float(row.lr) < float(x) <= CEILING_REACH * float(row.lr) * 1.001),
                     key=float):
        if by_lr[lr] > best + tol:
            if float(lr) not in curve:
                return None, f"the first worse LR {lr} has no curve seeds (curve multiples: 2x and 4x LR*)"
            return lr, f"grid-seed loss {by_lr[lr]:.4g} against {best:.4g} at LR* {row.lr}"
    return None, f"no grid LR up to {CEILING_REACH:g}x LR* ({row.lr}) is worse than it by more than the tolerance"


def matched(ctx, d, model):
    """S2's settings: AdamW at the large batch against the small batch at each LR both trained."""
    r = ctx.runs.drop_duplicates("run_dir")
    adamw = r[r.optimizer == "adamw"]

    def lrs(m, b):
        return set(adamw[(adamw.model == m) & (adamw.batch == b)].lr)
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
    """S4a (the line's), then the causal probes S4b, S4m and S4c, on the large batch."""
    if not {"adamw", "merit"} <= set(ctx.optimizers()):
        return []
    short, large, pooled = d.rules["short"], d.large, ctx.pooled()

    def on_loss(label, where, text, setting):
        return statement(f"{label} ({where}): {text}", [setting], ctx.stats, pooled=pooled)

    def loss(model, opt):
        return tuned(ctx, model, opt, large)

    def gap(model):
        return loss(model, "adamw") - loss(model, "merit")
    out = [on_loss("S4a", "short warmup", expected(f"MERIT's final loss is below AdamW's at batch {large}: AdamW's "
                                                   "large-batch gap exists", HELD),
                   Setting(short, str(large), loss(short, "merit"), loss(short, "adamw")))]
    if "long" in d.rules:
        long = d.rules["long"]
        out.append(on_loss("S4b", "long against short warmup", f"AdamW's loss gap to MERIT at batch {large} is "
                           "smaller under the long warmup (the paper does not say)",
                           Setting(f"{long} vs {short}", str(large), gap(long), gap(short),
                                   "the gap: AdamW's loss minus MERIT's")))
        mal = [Setting(f"{long} vs {short}", str(large), tuned(ctx, long, "adamw", large, "peak_mal"),
                       tuned(ctx, short, "adamw", large, "peak_mal"), floor=ctx.floor("peak_mal"))]
        out.append(statement(f"S4m (long against short warmup): AdamW's peak MAL at batch {large}'s tuned LR is lower "
                             "under the long warmup (read with S4b: a gap that closes while MAL does not fall argues "
                             "against MAL mediating it) (log scale)", mal, ctx.stats.of("peak_mal"),
                             pooled=ctx.pooled("peak_mal")))
    if d.control:
        out.append(on_loss("S4c", "AdamW + QK-norm, short warmup", expected(
            f"AdamW + QK-norm is no worse than MERIT at batch {large}: the control closes the gap",
            f"{NOT_HELD}; the rebuttal's AdamW + QK-norm 3.475 against MERIT 3.28"),
            Setting(f"{d.control} vs {short}", str(large), loss(d.control, "adamw"), loss(short, "merit"),
                    kind=NO_WORSE)))
    return out


# ---------------------------------------------------------------- described beside the statements


def peak_probe(run_dir):
    """(MAL, max |W_q|, max |W_k|) at the run's peak probe (mal.csv), or None."""
    try:
        mal = pd.read_csv(f"{run_dir}/mal.csv")
    except (OSError, pd.errors.EmptyDataError):
        return None
    if mal.empty or not {"wq_max", "wk_max"} <= set(mal.columns):
        return None
    row = mal.loc[mal["mal"].fillna(-np.inf).idxmax()]
    return float(row["mal"]), float(row["wq_max"]), float(row["wk_max"])


def decomposition(ctx, d):
    """Rows: each arm's MAL / (max |W_q| max |W_k|) at its peak probe, at LR* (claim seeds) and 2 x LR* (curve
    seeds), seed means: how much of the MAL the weights' scale carries."""
    rows = []
    short, large = d.rules.get("short"), d.large
    for opt in ("adamw", "merit"):
        for k in (1.0, 2.0):
            runs = (ctx.seed_runs(short, opt, large) if k == 1 else curve_runs(ctx, short, opt, large, k)[1])
            found = [p for p in map(peak_probe, runs.run_dir) if p and all(math.isfinite(x) and x > 0 for x in p)]
            if not found:
                continue
            mal, wq, wk = (float(np.mean(x)) for x in zip(*found))
            ratio = float(np.mean([m / (q * w) for m, q, w in found]))
            rows.append({"section": "decomposition", "model": short, "optimizer": ctx.label(short, opt),
                         "batch": large, "k x LR*": k, "lr": runs.lr.iloc[0], "seeds": len(found), "peak_mal": mal,
                         "wq_max": wq, "wk_max": wk, "mal / (wq_max wk_max)": ratio})
    return rows


def equal_loss(ctx, d):
    """Rows: each arm's peak MAL at the same final losses on its high-LR side (1, 2, 4 x LR*; log MAL interpolated
    linearly in the loss), at the worse LR*'s loss plus each of EQUAL_LOSS_STEPS where both arms reach it."""
    short, large = d.rules.get("short"), d.large
    curves = {}
    for opt in ("adamw", "merit"):
        points = []
        for k in (1.0, 2.0, 4.0):
            loss, mal = (at_multiple(ctx, short, opt, large, k, m) for m in ("final_val_loss", "peak_mal"))
            if not loss.missing and not mal.missing and math.isfinite(loss.mean) and math.isfinite(mal.mean):
                points.append((loss.mean, mal.mean))
        curves[opt] = points
    if any(len(p) < 2 for p in curves.values()):
        return []
    rows = []
    start = max(p[0][0] for p in curves.values())
    for step in EQUAL_LOSS_STEPS:
        level, at = start + step, {}
        for opt, points in curves.items():
            for (l0, m0), (l1, m1) in zip(points, points[1:]):
                if min(l0, l1) <= level <= max(l0, l1) and l0 != l1:
                    at[opt] = math.exp(m0 + (m1 - m0) * (level - l0) / (l1 - l0))
                    break
        if len(at) == 2:
            rows.append({"section": "MAL at equal loss", "model": short, "batch": large, "final_val_loss": level,
                         "adamw peak_mal": at["adamw"], "merit peak_mal": at["merit"]})
    return rows


# ---------------------------------------------------------------- the line


def mechanism(found, ctx):
    """The mechanism line from the statements' final verdicts ([{claim, result, p_against, p_equivalent}], after
    any second look), at the alpha of the context's look."""
    members = {}
    for s in found:
        m = LABEL.match(s["claim"])
        if m and m[1] in FAMILY:
            members[m[1]] = s
    ps = [(label, verdict, s.get(key)) for label, s in members.items()
          for verdict, key in ((NOT_HELD, "p_against"), (EQUIVALENT, "p_equivalent"))]
    rejected = holm([1.0 if p is None else float(p) for _, _, p in ps], ctx.stats.alpha)
    against = sorted({label for (label, verdict, _), r in zip(ps, rejected)
                      if r and members[label]["result"] == verdict})
    held = [label for label in FAMILY if members.get(label, {}).get("result") == HELD]
    if len(held) == len(FAMILY):
        verdict = "supported"
    elif against:
        verdict = f"not supported ({', '.join(against)} against it after Holm's correction over the family)"
    else:
        verdict = "inconclusive (open: " + ", ".join(
            f"{label} {members[label]['result'] if label in members else 'not stated'}"
            for label in FAMILY if label not in held) + ")"
    said = "; ".join(f"{label} {s['result']}" for label, s in sorted(members.items()))
    premise = ctx.spec.get("premise_absent")
    lead = (f"The premise is absent at this scale ({premise}): these verdicts are not read as the paper's. "
            if premise else "")
    return (f"{lead}The mechanism (S1, S3, S4a, L1 and L2 each held; fixed before the runs): {verdict}. "
            f"Verdicts: {said or 'none stated'} (S4b, S4m, S4c and S2 are read apart).")
