"""Every group's final decision -> results/tuning/_second_look.json: every statement judged on the claim seeds, and
the groups the second look trains (merit_repro.report.second_look), once every run is checked as collect_runs does."""
import json
import sys

error_stream = sys.stderr
sys.stderr = sys.stdout = open(snakemake.log[0], "w")

from merit_repro.plan.tuning import read_decision  # noqa: E402
from merit_repro.report.second_look import write_first_look  # noqa: E402
from merit_repro.report.tables import check_collected  # noqa: E402
from merit_repro.utils import UserError  # noqa: E402

try:
    decisions = {path: read_decision(path) for path in snakemake.input.decisions}
    check_collected(decisions, json.loads(snakemake.params.expected), snakemake.params.results)
    print(write_first_look(snakemake.config, list(decisions.values()), snakemake.params.results,
                           snakemake.input.paper, snakemake.params.mal_threshold, snakemake.output[0]))
except UserError as err:
    for stream in (sys.stdout, error_stream):
        print(f"error: {err}", file=stream, flush=True)
    sys.exit(1)
