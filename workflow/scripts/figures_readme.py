"""paper_figures/README.md and claims.csv from every artifact's statements and table."""
import sys

sys.stderr = sys.stdout = open(snakemake.log[0], "w")

from merit_repro.report.artifacts import write_index  # noqa: E402

write_index([p for p in snakemake.input if p.endswith(".json")], snakemake.output.readme, snakemake.config,
            snakemake.output.claims)
