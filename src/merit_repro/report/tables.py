"""Pure table functions: per-run files -> DataFrames -> CSV, Markdown and LaTeX.

Nothing here reads checkpoints: runs are summarised from summary.json, eval.json and mal.csv.
"""

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from merit_repro.plan.cell import CellConfig, identity
from merit_repro.plan.grid import Cell, expected_settings
from merit_repro.plan.tuning import REPORTING

from .integrity import check_runs
from .mal import MAL_LEVELS, mal_phases

RUN_COLUMNS = ["model", "tokens", "optimizer", "batch", "lr", "seed", "run_dir", "status", "final_val_loss",
               "best_val_loss", "steps", "warmup_rule", "warmup_steps", "probes", "lambada_ppl", "lambada_acc", "peak_mal", "peak_mal_layer", "peak_mal_step",
               "n_layers", "n_layers_mal_over_threshold", "loss_spikes", "tokens_per_s", "train_seconds",
               "mal_first_quarter_max", "mal_last_quarter_mean", *(f"n_layers_peak_mal_over_{v:g}" for v in MAL_LEVELS)]
GROUP_COLUMNS = ["experiment", "model", "tokens", "optimizer", "batch"]
CELL_COLUMNS = ["model", "tokens", "optimizer", "batch", "lr", "seed"]
# Run metrics aggregated over the seeds at a group's best LR (mean, and std as "<metric>_std").
AGGREGATED = ["final_val_loss", "best_val_loss", "lambada_ppl", "lambada_acc", "peak_mal", "n_layers_mal_over_threshold", "loss_spikes"]


def summarise_run(run_dir, coords, mal_threshold, results=None):
    """One row of runs.csv; its run_dir is relative to results (when given), so the table does not depend on
    where the results tree lies (a rebuild from a bundle gives the same bytes)."""
    run_dir = Path(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    evaluation = json.loads((run_dir / "eval.json").read_text())
    mal = pd.read_csv(run_dir / "mal.csv")
    row = dict(coords, run_dir=str(run_dir.relative_to(results) if results else run_dir), status=summary["status"], final_val_loss=summary["final_val_loss"],
               best_val_loss=summary["best_val_loss"], steps=summary["steps"],
               lambada_ppl=evaluation.get("lambada_ppl"), lambada_acc=evaluation.get("lambada_acc"),
               loss_spikes=summary.get("loss_spikes"), tokens_per_s=summary["tokens_per_s"],
               train_seconds=summary["train_seconds"], **schedule(summary))
    if len(mal):
        per_layer, run = mal_phases(mal, summary["planned_steps"])
        row.update(run, n_layers_mal_over_threshold=int((per_layer["peak"] > mal_threshold).sum()))
    return row


def schedule(summary):
    """The warmup rule, warmup steps and number of MAL probes a run used, as its trainer recorded them; a run
    recorded before the trainer wrote them has them from its own config and the steps it took."""
    if "warmup_steps" not in summary:
        summary = CellConfig.from_dict(summary["config"]).schedule(summary["steps"] or 0)
    return {"warmup_rule": summary["warmup_rule"], "warmup_steps": summary["warmup_steps"],
            "probes": len(summary["probe_steps"])}


def collect_runs(runs, mal_threshold, results=None):
    """runs: iterable of (run_dir, coordinates dict) -> one row per cell."""
    rows = [summarise_run(run_dir, coords, mal_threshold, results) for run_dir, coords in runs]
    return pd.DataFrame(rows).reindex(columns=RUN_COLUMNS).sort_values(["model", "optimizer", "batch", "lr", "seed"])


def runs_table(decisions, results, mal_threshold):
    """(runs, cells) from the tuned groups' decisions: one row per distinct cell (read from its run
    directory under results/, which its run_dir is relative to), and which cells each experiment trained."""
    cells = cells_table(decisions)
    distinct = cells[CELL_COLUMNS].drop_duplicates().itertuples(index=False)
    runs = collect_runs([(Cell(*c).path(results), c._asdict()) for c in distinct], mal_threshold, results)
    return runs, cells


def check_collected(decisions, expected, results):
    """UserError unless every cell each tuned group kept is its configured cell's complete, intact run on the
    corpus there now. decisions and expected: {final.json path: its decision, grid.group_expectation}."""


    groups = []
    for path, decision in decisions.items():
        expectation, g = expected[path], decision["group"]
        cells = [(Cell(g["model"], g["tokens"], g["optimizer"], g["batch"], c["lr"], c["seed"]).path(results),
                  expected_settings(expectation, c["lr"], c["seed"])) for c in decision["cells"]]
        groups.append((decision, expectation["spec"], cells))
    check_runs(groups, identity, lambda run_dir: f"delete {run_dir}/summary.json and run the workflow again to "
                                                        "retrain it")


def cells_table(decisions):
    """Every cell each experiment trained, with why it exists (configured grid, extension, claim seed)."""
    rows = [dict(zip(GROUP_COLUMNS, (d["group"][k] for k in GROUP_COLUMNS)), lr=c["lr"], seed=c["seed"], lr_origin=c["lr_origin"],
                 seed_origin=c["seed_origin"]) for d in decisions for c in d["cells"]]
    return pd.DataFrame(rows, columns=GROUP_COLUMNS + ["lr", "seed", "lr_origin", "seed_origin"])


def grid_se(decision):
    """The standard error of one LR's grid-seed mean loss: the group's own claim-seed sd over sqrt(grid seeds), or None
    without a spread (merit_repro.plan.tuning.choice_sd)."""
    sd, seeds = decision.get("choice_sd"), {c["seed"] for c in decision["cells"] if c["seed_origin"] == "grid"}
    return sd / math.sqrt(len(seeds)) if sd is not None and seeds else None


def _grid_text(decision):
    """The whole grid of a group in one line: LR (+ when added by an extension, * the choice, ~ a rival: a close
    call): grid-seed mean loss ± its standard error, or 'diverged'."""
    parts, se, rivals = [], grid_se(decision), decision.get("rivals", [])
    for row in decision["table"]:
        mark = ("+" if row["lr"] in decision["extensions"] else "") + (
            "*" if row["lr"] == decision["best_lr"] else "~" if row["lr"] in rivals else "")
        value = (f"diverged (seeds {', '.join(map(str, row['diverged_seeds']))})" if row["disqualified"]
                 else f"{row['selection_loss']:.4f}" + (f" ± {se:.4f}" if se is not None else "")
                 if row["selection_loss"] is not None else "missing")
        parts.append(f"{row['lr']}{mark}: {value}")
    return "; ".join(parts)


def best_lr_table(decisions, runs):
    """Per group: the tuning decision (best LR, grid edge, extensions) and the run metrics at its best LR,
    aggregated over its claim seeds (mean and sample std). The grid seeds that chose the LR are left out,
    so the reported mean is not biased by the choice (the winner's curse)."""
    runs = runs.astype({"tokens": str, "lr": str})
    rows = []
    for d in decisions:
        g = d["group"]
        row = {k: g[k] for k in GROUP_COLUMNS}
        row.update(status=d["status"], lr=d["best_lr"], at_edge=bool(d["at_edge"]), n_lrs=len(d["table"]),
                   extensions=" ".join(d["extensions"]), n_diverged=sum(len(r["diverged_seeds"]) for r in d["table"]),
                   rivals=" ".join(d.get("rivals", [])), choice_sd=d.get("choice_sd"), choice_df=d.get("choice_df"),
                   grid_se=grid_se(d),
                   grid=_grid_text(d))
        if d["best_lr"] is not None:
            seeds = [c["seed"] for c in d["cells"] if c["lr"] == d["best_lr"] and c["seed_origin"] in REPORTING]
            at_best = runs[(runs.model == g["model"]) & (runs.tokens == str(g["tokens"]))
                           & (runs.optimizer == g["optimizer"]) & (runs.batch == int(g["batch"]))
                           & (runs.lr == d["best_lr"]) & runs.seed.isin(seeds)]
            row.update(n_seeds=len(at_best), seeds=" ".join(map(str, sorted(at_best.seed))),
                       n_claim_diverged=int((at_best.status != "ok").sum()))
            at_best = at_best[at_best.status == "ok"]   # a diverged claim seed is counted, never averaged
            for metric in AGGREGATED:
                values = pd.to_numeric(at_best[metric], errors="coerce").dropna()
                row[metric] = float(values.mean()) if len(values) else None
                row[f"{metric}_std"] = float(values.std(ddof=1)) if len(values) > 1 else 0.0 if len(values) else None
                row[f"{metric}_n"] = len(values)   # seeds with a value (a seed may lack LAMBADA or a finite MAL)
            layers = at_best.peak_mal_layer.dropna()
            row["peak_mal_layer"] = int(layers.mode().min()) if len(layers) else None
        rows.append(row)
    columns = GROUP_COLUMNS + ["status", "lr", "at_edge", "n_lrs", "extensions", "rivals", "choice_sd", "choice_df", "grid_se",
                               "n_diverged", "n_seeds", "seeds", "n_claim_diverged"] + \
        [c for m in AGGREGATED for c in (m, f"{m}_std", f"{m}_n")] + ["peak_mal_layer", "grid"]
    return pd.DataFrame(rows).reindex(columns=columns)


# ---------------------------------------------------------------- output formats


def _fmt(value, digits=3):
    if value is None or (isinstance(value, (float, np.floating)) and math.isnan(value)):
        return "–"
    if isinstance(value, (float, np.floating)):
        return f"{value:.{digits}f}" if abs(value) < 1e4 else f"{value:.3g}"
    return str(value)


def _counts(column):
    """True for a column of whole numbers (counts, layers, steps) that a missing value made float."""
    values = pd.to_numeric(column, errors="coerce").dropna()
    return column.dtype.kind == "f" and len(values) > 0 and bool((values == values.round()).all())


def display(df, digits=3):
    """The table as text cells: "X" and "X std" columns merged into "mean ± std"."""
    out = {}
    for column in df.columns:
        if column.endswith(" std") and column[:-4] in df.columns:
            continue
        counts = _counts(df[column])
        values = [_fmt(int(v) if counts and pd.notna(v) else v, digits) for v in df[column]]
        std = f"{column} std"
        if std in df.columns:
            values = [v if _fmt(s, digits) == "–" or v == "–" else f"{v} ± {_fmt(s, digits)}"
                      for v, s in zip(values, df[std])]
        out[column] = values
    return pd.DataFrame(out, columns=list(out))


def to_markdown(df, digits=3):
    df = display(df, digits)
    header = "| " + " | ".join(map(str, df.columns)) + " |"
    rule = "|" + "|".join("---" for _ in df.columns) + "|"
    body = ["| " + " | ".join(row) + " |" for row in df.itertuples(index=False)]
    return "\n".join([header, rule, *body]) + "\n"


def _tex_escape(text):
    for a, b in [("\\", r"\textbackslash{}"), ("_", r"\_"), ("%", r"\%"), ("&", r"\&"), ("#", r"\#"),
                 ("–", "--"), ("±", r"$\pm$"), (">", r"$>$")]:
        text = text.replace(a, b)
    return text


def to_latex(df, caption, digits=3):
    df = display(df, digits)
    lines = [r"\begin{table}[h]", r"\centering", r"\begin{tabular}{" + "l" * len(df.columns) + "}", r"\toprule",
             " & ".join(_tex_escape(str(c)) for c in df.columns) + r" \\", r"\midrule"]
    lines += [" & ".join(_tex_escape(v) for v in row) + r" \\" for row in df.itertuples(index=False)]
    lines += [r"\bottomrule", r"\end{tabular}", r"\caption{" + _tex_escape(caption) + "}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def write_table(df, prefix, caption, digits=3):
    """prefix.csv, prefix.md, prefix.tex."""
    prefix = Path(prefix)
    df.to_csv(prefix.with_suffix(".csv"), index=False)
    prefix.with_suffix(".md").write_text(to_markdown(df, digits))
    prefix.with_suffix(".tex").write_text(to_latex(df, caption, digits))
