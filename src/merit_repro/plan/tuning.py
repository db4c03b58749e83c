"""LR tuning of one group of cells (experiment, model, optimizer, batch size): what to train next.

A group starts from its configured LR grid, each LR trained with the grid seeds. Each time its
cells have finished, ``decide`` reads their results and asks for at most one more thing:

1. The best LR is on an edge of the LRs tried (the lowest or the highest), or every LR diverged,
   and fewer than ``max_extensions`` points were added: the next point beyond that edge (below the
   grid when every LR diverged), spaced as the grid is at that edge (``extension_factor`` for a
   one-point grid) and rounded to 3 significant digits, trained with the grid seeds.
2. Otherwise, the best LR lacks some of the claim seeds: those seeds at the best LR.
3. Otherwise, the choice's close calls (``rivals``): every other LR whose grid-seed loss is within
   ``lr_choice_noise`` standard deviations of a difference of two grid-seed means of the chosen one's (as a
   Student t quantile at the spread's df: ``choice_margin``), the sd the group's own claim-seed spread (pooled
   over every LR it has claim seeds at). One grid seed's choice
   has noise of its own: where another LR is this close, another grid seed could have chosen it, so the
   claim seeds train there too, and a verdict must hold at each rival as at the choice (an
   intersection-union test: merit_repro.report.claims), the closest ``max_rivals`` of them (a close call beyond
   those is left untested, and the verdicts it could overturn undecided). A rival whose claim seeds widen the spread can
   make another LR a rival; every round adds cells from a finite set, so this ends too.
4. Otherwise, where the group has curve seeds (``curve_seeds``, ``curve_multiples``: the experiment's ``curve``),
   those seeds at each multiple k of the best LR (k x best, rounded as an extension is): seeds that never chose,
   so a statement about the LRs around the choice reads them, not the grid seeds that chose it.
5. Otherwise the group is tuned (``done``).

The best LR is the lowest mean final validation loss over the grid seeds (the seeds every LR
has, so extra seeds at one LR never move the choice), ties to the smaller LR. An LR is
disqualified when one of its grid seeds diverged. The choice is made by the grid seeds alone and
never revised: the claim seeds report the first choice, and a claim seed that diverges there is
counted as a divergence of that LR (``claim_diverged``), not a reason to choose again on the seeds
that report (which would bias the reported mean). Every round adds cells from a finite set, so
tuning ends. A best LR still on an edge once the extensions are spent is reported as
such (``at_edge``), and the verdicts treat it as a tuning failure.

This module is stdlib-only: the workflow's checkpoint job runs
``python -m merit_repro.plan.tuning --spec JSON --out round.json`` (``write_round``) once per group and round,
then ``python -m merit_repro.plan.tuning --adopt LAST_ROUND --group JSON --out final.json`` (``write_final``)
writes each group's final decision: its own last round's, or that of the group of another experiment whose
rounds it shares (``grid.tuning_owners``: the same cells, so the same decisions), named ``rounds_of``.
"""

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

from merit_repro.plan.records import DECISION_TYPES, LOOK_TYPES, read_summary, read_typed
from merit_repro.utils import UserError, cli

# The metric the best LR minimises: the one result that more tuning can only improve at a grid edge.
SELECTION_METRIC = "final_val_loss"

ORIGIN_CONFIGURED = "configured"
# Seeds that report: the claim seeds, and those a second look adds at the same first-choice LR (report.looks)
CLAIM, SECOND_LOOK, CURVE = "claim", "second look", "curve"
REPORTING = (CLAIM, SECOND_LOOK)


def canonical(x):
    """A number as it appears in paths and tables: 6e-4, 1.5e-2, 1.31072e5, 2e9, 480 (the shortest
    scientific form that reads back as the same float; integers below 1e5 as they are)."""
    x = float(x)
    if x.is_integer() and abs(x) < 1e5:
        return str(int(x))
    for digits in range(17):
        text = f"{x:.{digits}e}"
        if float(text) == x:
            break
    mantissa, exponent = text.split("e")
    return f"{mantissa}e{int(exponent)}"


def lr_key(lr):
    return float(lr)


def per_lr(results, lrs, grid_seeds, curve_seeds=()):
    """One row per LR tried: its seeds' losses (None when diverged), selection loss, disqualification, and the
    reporting seeds that diverged there (a curve seed's divergence is its own, not a claim seed's)."""
    rows = []
    for lr in sorted(lrs, key=lr_key):
        seeds = {seed: loss for (cell_lr, seed), loss in results.items() if cell_lr == lr}
        diverged = sorted(s for s, loss in seeds.items() if loss is None)
        grid_diverged = [s for s in diverged if s in grid_seeds]
        grid = [seeds[s] for s in grid_seeds if s in seeds]
        complete = len(grid) == len(grid_seeds)
        selection = statistics.fmean(grid) if complete and not grid_diverged else None
        finished = [loss for loss in seeds.values() if loss is not None]
        rows.append({"lr": lr, "seeds": {str(s): seeds[s] for s in sorted(seeds)}, "diverged_seeds": diverged,
                     "selection_loss": selection, "mean": statistics.fmean(finished) if finished else None,
                     "disqualified": bool(grid_diverged),
                     "claim_diverged": [s for s in diverged if s not in grid_seeds and s not in curve_seeds]})
    return rows


def choose(rows):
    """The best LR of per_lr's rows (lowest selection loss, ties to the smaller LR), or None."""
    candidates = [r for r in rows if r["selection_loss"] is not None]
    if not candidates:
        return None
    return min(candidates, key=lambda r: (r["selection_loss"], lr_key(r["lr"])))["lr"]


def next_point(lrs, direction, factor):
    """The LR beyond the lowest (direction -1) or highest (+1) of lrs, at the grid's spacing there."""
    lrs = sorted(lrs, key=lr_key)
    if direction > 0:
        edge, inner = lrs[-1], (lrs[-2] if len(lrs) > 1 else None)
    else:
        edge, inner = lrs[0], (lrs[1] if len(lrs) > 1 else None)
    ratio = abs(math.log(float(edge) / float(inner))) if inner else math.log(factor)
    return canonical(f"{float(edge) * math.exp(direction * ratio):.3g}")


def choice_sd(results, lrs, claim_seeds):
    """The group's own seed sd of the loss: its claim seeds' spread pooled over every LR where two or more of them
    finished (sum (n - 1) s² / sum (n - 1)), with its df; (None, 0) without one."""
    squares, df = 0.0, 0
    for lr in lrs:
        xs = [results[(lr, s)] for s in claim_seeds if results.get((lr, s)) is not None]
        if len(xs) > 1:
            mean = statistics.fmean(xs)
            squares += sum((x - mean) ** 2 for x in xs)
            df += len(xs) - 1
    return (math.sqrt(squares / df), df) if df else (None, 0)


def t_cdf(t, df):
    """Student's t distribution function at a whole number of degrees of freedom, in closed form (Abramowitz and
    Stegun 26.7.3-4): the tuning job stays stdlib-only, as scipy would cost each round a third of a second."""
    theta = math.atan(t / math.sqrt(df))
    c, s = math.cos(theta), math.sin(theta)
    if df % 2:
        term, total = c, 0.0 if df == 1 else c   # 1 + 2/3 c^2 + ..., times sin cos, plus theta
        for k in range(3, df - 1, 2):
            term *= (k - 1) / k * c * c
            total += term
        inside = 2 / math.pi * (theta + s * total)
    else:
        term, total = 1.0, 1.0
        for k in range(2, df, 2):
            term *= (k - 1) / k * c * c
            total += term
        inside = s * total
    return 0.5 + 0.5 * inside


def t_quantile(p, df):
    """The p quantile of Student's t at df (a whole number >= 1), by bisection on t_cdf."""
    low, high = -1e6, 1e6
    for _ in range(200):
        mid = (low + high) / 2
        low, high = (mid, high) if t_cdf(mid, df) < p else (low, mid)
    return (low + high) / 2


def choice_margin(sd, df, n_grid, noise):
    """How far above the chosen LR's grid-seed loss another LR's may lie and still be a close call: noise standard
    deviations of a difference of two grid-seed means (sd x sqrt(2 / n_grid)), as a Student t quantile at the
    spread's df (the normal quantile noise sds stand for): an sd from a few claim seeds may well be an underestimate,
    and a smaller margin would miss the LR another grid seed could have chosen."""
    level = statistics.NormalDist().cdf(noise)
    return t_quantile(level, max(1, int(df))) * sd * math.sqrt(2 / n_grid)


def close_calls(rows, best, sd, df, n_grid, noise):
    """The LRs of per_lr's rows whose selection loss is within choice_margin of the best's (where another grid seed
    could have chosen them), best first excluded."""
    chosen = next(r["selection_loss"] for r in rows if r["lr"] == best)
    margin = choice_margin(sd, df, n_grid, noise)
    return [r["lr"] for r in rows if r["lr"] != best and r["selection_loss"] is not None
            and r["selection_loss"] - chosen <= margin]


def rivals_of(spec, rows, best, results):
    """(rival LRs the claim seeds train at, every close call, the sd and df they were judged by): the LRs that already
    have claim seeds beside the best (a rival stays one once trained), then the closest of those within the noise of
    the choice now, up to max_rivals in all (a close call beyond them is left untested: the verdicts it could overturn
    stay undecided)."""
    lrs = [r["lr"] for r in rows]
    claim = [s for s in spec["claim_seeds"] if s not in spec["grid_seeds"]]
    sd, df = choice_sd(results, lrs, claim)
    trained = [lr for lr in lrs if lr != best and any((lr, s) in results for s in claim)]
    close = close_calls(rows, best, sd, df, len(spec["grid_seeds"]), spec["lr_choice_noise"]) if sd else []
    loss = {r["lr"]: r["selection_loss"] for r in rows}
    room = max(0, spec["max_rivals"] - len(trained))
    rivals = trained + sorted((lr for lr in close if lr not in trained), key=lambda x: (loss[x], lr_key(x)))[:room]
    return sorted(rivals, key=lr_key), sorted(set(close) | set(trained), key=lr_key), sd, df


def decide(spec, results):
    """The next step of one group.

    spec: ``lrs`` (configured), ``extensions`` (added so far, in order), ``grid_seeds``, ``claim_seeds``,
    ``max_extensions``, ``extension_factor``, ``lr_choice_noise``, ``max_rivals``. results: {(lr, seed): final val loss, None when
    diverged} for every cell of the group trained so far. Returns the round record (see the module docstring).
    """
    extensions = list(spec.get("extensions", []))
    lrs = sorted(set(spec["lrs"]) | set(extensions), key=lr_key)
    grid_seeds, claim_seeds = list(spec["grid_seeds"]), list(spec["claim_seeds"])
    rows = per_lr(results, lrs, grid_seeds, spec.get("curve_seeds", ()))
    best = choose(rows)
    at_edge = best is not None and best in (lrs[0], lrs[-1])
    cells = sorted(results, key=lambda c: (lr_key(c[0]), c[1]))
    record = {"best_lr": best, "at_edge": at_edge, "status": "ok" if best else "diverged at every LR",
              "extensions": extensions, "table": rows, "rivals": [], "close_calls": [], "choice_sd": None,
              "choice_df": 0}
    if (best is None or at_edge) and len(extensions) < spec["max_extensions"]:
        new = next_point(lrs, +1 if best == lrs[-1] else -1, spec["extension_factor"])
        extensions.append(new)
        reason = "every LR diverged" if best is None else f"best LR {best} is on the {'upper' if best == lrs[-1] else 'lower'} edge"
        return {**record, "done": False, "action": f"extend the grid to {new} ({reason})", "extensions": extensions,
                "cells": cells + [(new, s) for s in grid_seeds]}
    missing = [s for s in claim_seeds if best is not None and (best, s) not in results]
    if missing:
        return {**record, "done": False, "action": f"claim seeds {missing} at the best LR {best}",
                "cells": cells + [(best, s) for s in missing]}
    if best is not None and not any(results.get((best, s)) is None for s in claim_seeds):
        rivals, close, sd, df = rivals_of(spec, rows, best, results)
        record.update(rivals=rivals, close_calls=close, choice_sd=sd, choice_df=df)
        wanted = [(lr, s) for lr in rivals for s in claim_seeds if (lr, s) not in results]
        if wanted:
            new = sorted({lr for lr, _ in wanted}, key=lr_key)
            return {**record, "done": False, "cells": cells + wanted,
                    "action": f"claim seeds {claim_seeds} at {', '.join(new)}: close calls of the choice {best} "
                              f"(grid-seed loss within {spec['lr_choice_noise']:g} sd of a difference; the group's "
                              f"claim-seed sd {sd:.3g})"}
    curve = curve_lrs(spec, best)
    wanted = [(lr, s) for lr in curve for s in spec.get("curve_seeds", []) if (lr, s) not in results]
    if wanted:
        return {**record, "done": False, "cells": cells + wanted,
                "action": f"curve seeds {spec['curve_seeds']} at {', '.join(curve)}: "
                          f"{', '.join(f'{k:g}' for k in spec['curve_multiples'])} x the choice {best}"}
    return {**record, "done": True, "action": "done", "cells": cells}


def curve_lrs(spec, best):
    """The LRs a group's curve seeds train at: each of its curve multiples of the best LR (none without a best)."""
    if best is None:
        return []
    return [canonical(f"{k * float(best):.3g}") for k in spec.get("curve_multiples", [])]


def tune(spec, train):
    """Every round of one group at once: train(cells) -> {(lr, seed): loss or None} for the cells asked for.
    The workflow runs the same rounds as checkpoint jobs; this is the whole algorithm in one loop."""
    results = train([(lr, seed) for lr in spec["lrs"] for seed in spec["grid_seeds"]])
    while True:
        record = decide(spec, results)
        if record["done"]:
            return record
        spec = {**spec, "extensions": record["extensions"]}
        results.update(train([c for c in record["cells"] if c not in results]))


def annotate(spec, record):
    """The round record as written to disk: the group, and for each cell why it exists (its LR: the
    configured grid or the k-th extension; its seed: a grid or a claim seed)."""
    curve = dict(zip(curve_lrs(spec, record["best_lr"]), spec.get("curve_multiples", [])))

    def origin(lr, seed):
        lr_origin = (ORIGIN_CONFIGURED if lr in spec["lrs"] else f"extension {record['extensions'].index(lr) + 1}"
                     if lr in record["extensions"] else f"curve {curve[lr]:g}x")
        seed_origin = ("grid" if seed in spec["grid_seeds"] else CURVE if seed in spec.get("curve_seeds", [])
                       else CLAIM)
        return {"lr": lr, "seed": seed, "lr_origin": lr_origin, "seed_origin": seed_origin}
    return {**record, "group": spec["group"], "cells": [origin(lr, seed) for lr, seed in record["cells"]]}


# ---------------------------------------------------------------- the workflow's checkpoint job


def read_results(run_dirs):
    """{(lr, seed): final val loss or None} from each cell's summary.json (keys: (lr, seed) -> run dir)."""
    results = {}
    for (lr, seed), run_dir in run_dirs.items():
        summary = read_summary(run_dir)
        results[(lr, int(seed))] = summary[SELECTION_METRIC] if summary["status"] == "ok" else None
    return results


def read_decision(path):
    """A tuning round's or final decision as a dict, or a UserError naming the file and the fix."""
    return read_typed(path, DECISION_TYPES, "a tuning decision",
                      "delete it and run the workflow again to decide the group again")


def adopt(decision, group):
    """A group's final decision from the last round of the group whose rounds it shares (maybe itself)."""
    if not decision.get("done"):
        raise ValueError(f"{decision.get('group')}'s round is not its last (done: false)")
    return {**decision, "group": group, "rounds_of": decision["group"]["experiment"]}


def with_second_look(decision, look):
    """A group's final decision with the cells the second look asks of it (look: merit_repro.report.looks's record):
    each second-look seed at the first-choice LR and at each of its rivals (where the claim seeds are), never another
    LR; unchanged when the look sends it none."""
    group = decision["group"]
    sent = any(g == group for g in look["groups"]) and decision["best_lr"] is not None
    have = {(c["lr"], c["seed"]) for c in decision["cells"]}
    origin = {c["lr"]: c["lr_origin"] for c in decision["cells"]}
    lrs = [decision["best_lr"], *decision.get("rivals", [])] if sent else []
    added = [{"lr": lr, "seed": seed, "lr_origin": origin[lr], "seed_origin": SECOND_LOOK}
             for lr in lrs for seed in look["seeds"] if (lr, seed) not in have]
    return {**decision, "cells": decision["cells"] + added, "second_look": [c["seed"] for c in added]}


def write_json(path, record):
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    tmp.replace(path)


def write_round(spec, out):
    """One round of a group (spec: its tuning spec plus 'runs': [[lr, seed, run_dir], ...]) -> out; what it
    decided, in words."""
    results = read_results({(lr, int(seed)): run_dir for lr, seed, run_dir in spec["runs"]})
    record = annotate(spec, decide(spec, results))
    write_json(out, record)
    return f"{spec['group']}: {record['action']}"


def write_final(last_round, group, out):
    """A group's final decision -> out, from the last round of the rounds that tune it."""
    write_json(out, adopt(read_decision(last_round), group))
    return f"{group}: the decision of {last_round}"


def write_looked(final, look, out):
    """A group's final decision with its second-look cells -> out."""
    record = read_typed(look, LOOK_TYPES, "the first look at the claim seeds",
                        "delete it and run the workflow again to look again")   # as report.second_look reads it
    decision = with_second_look(read_decision(final), record)
    write_json(out, decision)
    return f"{decision['group']}: second-look seeds {decision['second_look'] or 'none'}"


@cli
def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m merit_repro.plan.tuning", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spec", help="JSON: the group's spec plus 'runs': [[lr, seed, run_dir], ...]")
    parser.add_argument("--adopt", type=Path, help="a last round (done): write it as the final decision of --group")
    parser.add_argument("--group", help="JSON: the group adopting --adopt's decision")
    parser.add_argument("--final", type=Path, help="a final decision: write it with --second-look's cells added")
    parser.add_argument("--second-look", type=Path, help="the first look's record (merit_repro.report.looks)")
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    modes = [bool(args.spec), bool(args.adopt and args.group), bool(args.final and args.second_look)]
    if sum(modes) != 1 or bool(args.adopt) != bool(args.group) or bool(args.final) != bool(args.second_look):
        parser.error("give --spec, or --adopt with --group, or --final with --second-look")
    if args.final:
        print(write_looked(args.final, args.second_look, args.out))
    elif args.adopt:
        print(write_final(args.adopt, json.loads(args.group), args.out))
    else:
        print(write_round(json.loads(args.spec), args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
