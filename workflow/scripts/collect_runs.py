"""Every tuned group's cells -> results/tables/runs.csv (one row per distinct cell) and cells.csv (which
cells each experiment trained, and why)."""
import json
import sys

sys.stderr = sys.stdout = open(snakemake.log[0], "w")

from merit_repro.tables import runs_table  # noqa: E402

decisions = [json.loads(open(path).read()) for path in snakemake.input]
runs, cells = runs_table(decisions, snakemake.params.results, snakemake.params.mal_threshold)
runs.to_csv(snakemake.output.runs, index=False)
cells.to_csv(snakemake.output.cells, index=False)
print(f"{len(runs)} runs ({(runs.status != 'ok').sum()} not ok) in {len(decisions)} groups")
