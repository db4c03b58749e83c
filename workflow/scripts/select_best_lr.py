"""Tuned groups + runs.csv -> results/tables/best_lr.csv: per (experiment, model, optimizer, batch) the best
LR, its grid (with extensions) and the run metrics at the best LR over its seeds (merit_repro.report.tables)."""
import sys

error_stream = sys.stderr
sys.stderr = sys.stdout = open(snakemake.log[0], "w")

import pandas as pd  # noqa: E402

from merit_repro.plan.tuning import read_decision  # noqa: E402
from merit_repro.report.tables import best_lr_table  # noqa: E402
from merit_repro.utils import UserError  # noqa: E402

try:
    decisions = [read_decision(path) for path in snakemake.input.decisions]
except UserError as err:
    for stream in (sys.stdout, error_stream):
        print(f"error: {err}", file=stream, flush=True)
    sys.exit(1)
runs = pd.read_csv(snakemake.input.runs, dtype={"lr": str, "tokens": str})
best = best_lr_table(decisions, runs)
best.to_csv(snakemake.output[0], index=False)
print(best.drop(columns="grid").to_string())
