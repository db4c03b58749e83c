"""Every cell's summary -> results/tables/runs.csv (one row per cell)."""
import sys

sys.stderr = sys.stdout = open(snakemake.log[0], "w")

from merit_repro.tables import collect_runs  # noqa: E402

runs = collect_runs(snakemake.params.cells, snakemake.params.mal_threshold)
runs.to_csv(snakemake.output[0], index=False)
print(f"{len(runs)} runs, {(runs.status != 'ok').sum()} not ok")
