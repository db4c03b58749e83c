"""One artifact of one experiment: table + figure + verdict (merit_repro.report.artifacts)."""
import sys

sys.stderr = sys.stdout = open(snakemake.log[0], "w")

from pathlib import Path  # noqa: E402

from merit_repro.report.artifacts import make  # noqa: E402

verdict = make(snakemake.wildcards.artifact, snakemake.wildcards.experiment, snakemake.config,
               snakemake.input.runs, snakemake.input.cells, snakemake.input.best, snakemake.input.paper,
               Path(snakemake.output.png).with_suffix(""))
print(verdict)
