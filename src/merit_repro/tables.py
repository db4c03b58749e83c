"""Pure table functions: per-run files -> DataFrames -> CSV, Markdown and LaTeX.

Nothing here reads checkpoints: runs are summarised from summary.json, eval.json and mal.csv.
"""

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

RUN_COLUMNS = ["model", "tokens", "optimizer", "batch", "lr", "seed", "run_dir", "status", "final_val_loss",
               "best_val_loss", "steps", "lambada_ppl", "lambada_acc", "peak_mal", "peak_mal_layer", "peak_mal_step",
               "n_layers", "n_layers_mal_over_threshold", "tokens_per_s", "train_seconds"]


def mal_by_layer(mal):
    """Per layer: the max over heads and steps of the MAL (mal: DataFrame of mal.csv)."""
    return mal.groupby("layer")["mal"].max()


def summarise_run(run_dir, coords, mal_threshold):
    run_dir = Path(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    evaluation = json.loads((run_dir / "eval.json").read_text())
    mal = pd.read_csv(run_dir / "mal.csv")
    row = dict(coords, run_dir=str(run_dir), status=summary["status"], final_val_loss=summary["final_val_loss"],
               best_val_loss=summary["best_val_loss"], steps=summary["steps"],
               lambada_ppl=evaluation.get("lambada_ppl"), lambada_acc=evaluation.get("lambada_acc"),
               tokens_per_s=summary["tokens_per_s"], train_seconds=summary["train_seconds"])
    finite = mal[np.isfinite(mal["mal"])]
    if len(finite):
        peak = finite.loc[finite["mal"].idxmax()]
        per_layer = mal_by_layer(finite)
        row.update(peak_mal=float(peak["mal"]), peak_mal_layer=int(peak["layer"]), peak_mal_step=int(peak["step"]),
                   n_layers=int(mal["layer"].max()), n_layers_mal_over_threshold=int((per_layer > mal_threshold).sum()))
    return row


def collect_runs(runs, mal_threshold):
    """runs: iterable of (run_dir, coordinates dict) -> one row per cell."""
    rows = [summarise_run(run_dir, coords, mal_threshold) for run_dir, coords in runs]
    return pd.DataFrame(rows).reindex(columns=RUN_COLUMNS).sort_values(["model", "optimizer", "batch", "lr"])


def select_best_lr(runs, experiment_cells):
    """Best LR per (experiment, model, optimizer, batch): lowest final val loss (mean over seeds) among
    non-diverged cells; ties go to the smaller LR. The whole grid is recorded beside the choice.

    experiment_cells: DataFrame (experiment, model, tokens, optimizer, batch, lr, seed).
    """
    keys = ["model", "tokens", "optimizer", "batch", "lr", "seed"]
    merged = experiment_cells.astype({"tokens": str, "lr": str}).merge(
        runs.astype({"tokens": str, "lr": str}), on=keys, how="left")
    rows = []
    for (exp, model, tokens, opt, batch), group in merged.groupby(["experiment", "model", "tokens", "optimizer", "batch"]):
        ok = group[group["status"] == "ok"]
        per_lr = ok.groupby("lr")["final_val_loss"].mean()
        grid = "; ".join(f"{lr}: {'diverged' if lr not in per_lr.index else f'{per_lr[lr]:.4f}'}"
                         for lr in sorted(group["lr"].unique(), key=float))
        row = dict(experiment=exp, model=model, tokens=tokens, optimizer=opt, batch=batch, lr=None,
                   final_val_loss=None, n_lrs=group["lr"].nunique(), n_diverged=int((group["status"] == "diverged").sum()),
                   grid=grid)
        if len(per_lr):
            best = min(per_lr.items(), key=lambda kv: (kv[1], float(kv[0])))
            row.update(lr=best[0], final_val_loss=best[1])
            at_edge = best[0] in (min(group["lr"], key=float), max(group["lr"], key=float)) and group["lr"].nunique() > 1
            row["best_at_grid_edge"] = bool(at_edge)
        rows.append(row)
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- output formats


def _fmt(value, digits=3):
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, (float, np.floating)):
        return f"{value:.{digits}f}" if abs(value) < 1e4 else f"{value:.3g}"
    return str(value)


def to_markdown(df, digits=3):
    header = "| " + " | ".join(map(str, df.columns)) + " |"
    rule = "|" + "|".join("---" for _ in df.columns) + "|"
    body = ["| " + " | ".join(_fmt(v, digits) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join([header, rule, *body]) + "\n"


def _tex_escape(text):
    for a, b in [("\\", r"\textbackslash{}"), ("_", r"\_"), ("%", r"\%"), ("&", r"\&"), ("#", r"\#"),
                 ("–", "--"), ("±", r"$\pm$"), (">", r"$>$")]:
        text = text.replace(a, b)
    return text


def to_latex(df, caption, digits=3):
    lines = [r"\begin{table}[h]", r"\centering", r"\begin{tabular}{" + "l" * len(df.columns) + "}", r"\toprule",
             " & ".join(_tex_escape(str(c)) for c in df.columns) + r" \\", r"\midrule"]
    lines += [" & ".join(_tex_escape(_fmt(v, digits)) for v in row) + r" \\" for row in df.itertuples(index=False)]
    lines += [r"\bottomrule", r"\end{tabular}", r"\caption{" + _tex_escape(caption) + "}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def write_table(df, prefix, caption, digits=3):
    """prefix.csv, prefix.md, prefix.tex."""
    prefix = Path(prefix)
    df.to_csv(prefix.with_suffix(".csv"), index=False)
    prefix.with_suffix(".md").write_text(to_markdown(df, digits))
    prefix.with_suffix(".tex").write_text(to_latex(df, caption, digits))
