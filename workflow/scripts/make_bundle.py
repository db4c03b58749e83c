"""The tuned groups' runs, tables and corpora's meta.json -> results/bundle/<name>.tar.gz (merit_repro.bundle).
A bundle that cannot be made (a full disk, an unfinished run) is one `error:` line, in the log and on the console."""
import json
import sys

error_stream = sys.stderr
sys.stderr = sys.stdout = open(snakemake.log[0], "w")

from merit_repro import bundle  # noqa: E402
from merit_repro.utils import UserError, git_commit  # noqa: E402

decisions = {path: json.loads(open(path).read()) for path in snakemake.input.decisions}
corpora = [path.removesuffix("/meta.json") for path in snakemake.input.data]
try:
    manifest = bundle.create(snakemake.output[0], snakemake.params.results, decisions, corpora,
                             json.loads(snakemake.params.config), git_commit(), snakemake.params.lock)
except UserError as err:
    for stream in (sys.stdout, error_stream):
        print(f"error: {err}", file=stream, flush=True)
    sys.exit(1)
print(f"{snakemake.output[0]}: {len(manifest['files'])} files, commit {manifest['commit']}")
