"""paper_figures/README.md from every artifact's verdict and table."""
import sys

sys.stderr = sys.stdout = open(snakemake.log[0], "w")

from merit_repro.artifacts import write_index  # noqa: E402

write_index([p for p in snakemake.input if p.endswith(".json")], snakemake.output[0], snakemake.config)
