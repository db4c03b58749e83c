"""The tuned groups' runs, tables and corpora's meta.json -> results/bundle/<name>.tar.gz (merit_repro.report.bundle)."""
import json
import sys

sys.stderr = sys.stdout = open(snakemake.log[0], "w")

from merit_repro.report import bundle  # noqa: E402
from merit_repro.utils import git_commit  # noqa: E402

decisions = {path: json.loads(open(path).read()) for path in snakemake.input.decisions}
corpora = [path.removesuffix("/meta.json") for path in snakemake.input.data]
manifest = bundle.create(snakemake.output[0], snakemake.params.results, decisions, corpora, snakemake.params.config,
                         git_commit(), snakemake.params.lock)
print(f"{snakemake.output[0]}: {len(manifest['files'])} files, commit {manifest['commit']}")
