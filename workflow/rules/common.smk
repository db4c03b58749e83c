# Helpers: config checks, wildcard constraints, the grid of cells, input functions, final targets.
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(workflow.basedir) / "src"))  # run from a checkout without installing

from merit_repro import grid
from merit_repro.optim import OPTIMIZERS

grid.validate(config)

PYTHON = sys.executable  # the interpreter running Snakemake, so jobs see the same packages
ENV = "../../environment.yml"  # with --use-conda (sdm conda); relative to the rule files
PAPER_NUMBERS = str(Path(workflow.basedir) / "workflow" / "resources" / "paper_numbers.csv")
RESULTS = config["results"]
FIGURES = config["figures"]
CELL = "{model}/{tokens}/{optimizer}/bs{batch}/lr{lr}/seed{seed}"
CELLS = grid.all_cells(config)
RUN_FILES = ["summary.json", "eval.json", "metrics.csv", "mal.csv", "diagnostics.csv"]


def _alternatives(names):
    return "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))


wildcard_constraints:
    model=_alternatives(config["models"]),
    tokens=r"[0-9][0-9.e]*",
    optimizer=_alternatives(OPTIMIZERS),
    batch=r"[0-9]+",
    lr=r"[0-9][0-9.e-]*",
    seed=r"[0-9]+",
    dataset=_alternatives(config["data"]),
    experiment=_alternatives(config["experiments"]),
    artifact=_alternatives(grid.ARTIFACTS),


def run_dir(cell):
    return cell.path(RESULTS)


def cell_settings(wildcards):
    return grid.cell_config(config, wildcards.model, wildcards.tokens, wildcards.optimizer, wildcards.batch,
                            wildcards.lr, wildcards.seed)


def cell_data(wildcards):
    """The prepared corpora a cell reads (and LAMBADA when configured for its tokenizer)."""
    settings = cell_settings(wildcards)
    inputs = [f"{settings['data_dir']}/meta.json"]
    if settings["lambada_dir"]:
        inputs.append(f"{settings['lambada_dir']}/meta.json")
    return inputs


def cell_runtime_minutes(wildcards):
    """Wall-time request of a cell: its FLOPs at a conservative rate, plus start-up and evaluation."""
    return grid.runtime_minutes(config, wildcards.model, wildcards.tokens)


def all_run_files():
    return [f"{run_dir(cell)}/{name}" for cell in sorted(CELLS) for name in RUN_FILES]


def experiment_artifacts(name):
    exp = config["experiments"][name]
    artifacts = [a for a in exp.get("artifacts", []) if a != "lambada_ppl_vs_batch" or config.get("lambada")]
    return [f"{FIGURES}/{a}/{name}" for a in artifacts]


def final_outputs():
    outputs = [f"{RESULTS}/tables/best_lr.csv", f"{FIGURES}/README.md"]
    for name in config["experiments"]:
        outputs += [f"{prefix}{ext}" for prefix in experiment_artifacts(name) for ext in (".png", ".md")]
    return outputs
