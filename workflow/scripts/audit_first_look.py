"""A rebuild from a bundle: its first look at the claim seeds, made again from its runs, must be the bundle's own
(merit_repro.report.second_look.audit_first_look)."""
import sys

error_stream = sys.stderr
sys.stderr = sys.stdout = open(snakemake.log[0], "w")

from pathlib import Path  # noqa: E402

from merit_repro.plan.tuning import read_decision  # noqa: E402
from merit_repro.report.second_look import audit_first_look  # noqa: E402
from merit_repro.utils import UserError  # noqa: E402

try:
    decisions = [read_decision(path) for path in snakemake.input.decisions]
    looked = [read_decision(path) for path in snakemake.input.looked]
    lines = audit_first_look(snakemake.config, decisions, snakemake.params.results, snakemake.input.paper,
                             snakemake.params.mal_threshold, snakemake.input.first_look, looked)
except UserError as err:
    for stream in (sys.stdout, error_stream):
        print(f"error: {err}", file=stream, flush=True)
    sys.exit(1)
Path(snakemake.output[0]).write_text("\n".join(lines) + "\n")
print("\n".join(lines))
