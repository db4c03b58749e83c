"""The paper's artifacts, one module each: its table (ours beside the paper's number), its figure, and
the paper's statements it tests (decided in merit_repro.report.claims, never here).

    make(artifact, experiment, config, runs_csv, cells_csv, best_csv, paper_csv, prefix)

writes prefix.{csv,md,tex,png,pdf,json}; write_index gathers every artifact's JSON into
paper_figures/README.md and paper_figures/claims.csv.
"""

import json
from pathlib import Path

import pandas as pd

from merit_repro.plan import paths
from merit_repro.report.stats import Stats
from merit_repro.report.tables import write_table

from .ablation import ablation
from .context import Context
from .headline import headline
from . import looks
from .index import protocol, protocol_summary, write_index
from .llama_c4 import llama_c4
from .loss_curves import loss_curves
from .lr_sensitivity import lr_sensitivity
from .mal_tables import mal_tables
from .mal_vs_lr import mal_vs_lr
from .mal_vs_step import mal_vs_step
from .mechanism import mechanism
from .qknorm import qknorm
from .steps_to_target import steps_to_target
from .val_loss import lambada_ppl_vs_batch, val_loss_vs_batch
from .zeroshot import zeroshot

ARTIFACT_FUNCTIONS = {f.__name__: f for f in (val_loss_vs_batch, lambada_ppl_vs_batch, headline, steps_to_target,
                                               lr_sensitivity, mal_vs_step, mal_tables, mal_vs_lr, loss_curves,
                                               ablation, qknorm, llama_c4, zeroshot)}
# Lines an artifact derives from its statements' final verdicts (after a second look too) and its context:
# {artifact: recap(statements, ctx)}
ARTIFACT_RECAPS = {"mal_vs_lr": mechanism}

__all__ = ["ARTIFACT_FUNCTIONS", "load_context", "make", "write_index"]


def load_context(experiment, config, runs_csv, cells_csv, best_csv, paper_csv, results=None, drawing=True, look=2):
    """One experiment's Context from the tables; results: the folder runs.csv's run_dirs are under (default: the
    one the tables are in); drawing: False for statements only; look: 1 at the first of two looks."""
    runs = pd.read_csv(runs_csv, dtype={"lr": str, "tokens": str})
    results = Path(results or paths.results_of_table(Path(runs_csv).resolve())).resolve()
    runs["run_dir"] = [str(results / d) for d in runs.run_dir]
    cells = pd.read_csv(cells_csv, dtype={"lr": str, "tokens": str})
    best = pd.read_csv(best_csv, dtype={"lr": str, "tokens": str, "seeds": str, "rivals": str})
    keys = ["model", "tokens", "optimizer", "batch", "lr", "seed"]
    mine = cells[cells.experiment == experiment].drop_duplicates(keys).merge(runs, on=keys, how="left")
    return Context(experiment, config, mine, best[best.experiment == experiment].reset_index(drop=True),
                   pd.read_csv(paper_csv), results, drawing, look=look)


def make(artifact, experiment, config, runs_csv, cells_csv, best_csv, paper_csv, prefix, first_look=None):
    """first_look: with a second look at the claim seeds, its record (merit_repro.report.looks): the statements it
    decided, or that no seed could decide, keep its verdicts."""
    ctx = load_context(experiment, config, runs_csv, cells_csv, best_csv, paper_csv)
    prefix = Path(prefix)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    table, verdict = ARTIFACT_FUNCTIONS[artifact](ctx, prefix)
    if first_look is not None:
        verdict = looks.settle(verdict, first_look, artifact, experiment,
                               Stats.from_report(ctx.report, 2, look=1).alpha)
    if artifact in ARTIFACT_RECAPS:
        verdict["recap"] = ARTIFACT_RECAPS[artifact](verdict["statements"], ctx)
    caption = (f"{verdict['reproduces']} ({experiment}): ours (mean ± std over the claim seeds) beside the paper's "
               f"numbers where the setting is the paper's. {protocol(config)}")
    write_table(table, prefix, caption)
    with prefix.with_suffix(".md").open("a") as md:
        md.write("\nMean ± sd over the claim seeds at each best LR (disjoint from the grid seeds that chose it). "
                 f"{protocol_summary(config)} Rows in [claims.csv](../claims.csv), the rule in [README](../README.md).\n")
    verdict.update(artifact=artifact, experiment=experiment)
    prefix.with_suffix(".json").write_text(json.dumps(verdict, indent=2, default=str, allow_nan=False) + "\n")
    return verdict
