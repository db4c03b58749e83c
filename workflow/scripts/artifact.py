"""One artifact of one experiment: table + figure + verdict (merit_repro.report.artifacts)."""
import sys

error_stream = sys.stderr
sys.stderr = sys.stdout = open(snakemake.log[0], "w")

from pathlib import Path  # noqa: E402

from merit_repro.report.artifacts import make  # noqa: E402
from merit_repro.report.second_look import read_first_look  # noqa: E402
from merit_repro.utils import UserError  # noqa: E402

try:
    first_look = read_first_look(snakemake.input.first_look[0]) if snakemake.input.first_look else None
    verdict = make(snakemake.wildcards.artifact, snakemake.wildcards.experiment, snakemake.config,
                   snakemake.input.runs, snakemake.input.cells, snakemake.input.best, snakemake.input.paper,
                   Path(snakemake.output.png).with_suffix(""), first_look)
except UserError as err:
    for stream in (sys.stdout, error_stream):
        print(f"error: {err}", file=stream, flush=True)
    sys.exit(1)
print(verdict)
