"""Every tuned group's cells -> results/tables/runs.csv (one row per distinct cell) and cells.csv (which
cells each experiment trained, and why), once every one of them is checked to be a configured cell's
complete, intact run on the corpus prepared now (merit_repro.report.integrity); otherwise no table is written."""
import json
import sys

error_stream = sys.stderr
sys.stderr = sys.stdout = open(snakemake.log[0], "w")

from merit_repro.plan.tuning import read_decision  # noqa: E402
from merit_repro.report.tables import check_collected, runs_table  # noqa: E402
from merit_repro.utils import UserError  # noqa: E402

try:
    decisions = {path: read_decision(path) for path in snakemake.input.decisions}
    check_collected(decisions, json.loads(snakemake.params.expected), snakemake.params.results)
except UserError as err:
    for stream in (sys.stdout, error_stream):
        print(f"error: {err}", file=stream, flush=True)
    sys.exit(1)
runs, cells = runs_table(list(decisions.values()), snakemake.params.results, snakemake.params.mal_threshold)
runs.to_csv(snakemake.output.runs, index=False)
cells.to_csv(snakemake.output.cells, index=False)
print(f"{len(runs)} runs ({(runs.status != 'ok').sum()} not ok) in {len(decisions)} groups, each checked")
