"""Where everything a workflow writes lives under its results folder; the rules, the grid, the bundle, the
artifacts and the tracker all ask here.

    results/data/<corpus>/                          prepared corpora (meta.json, train.bin, val.bin)
    results/runs/<model>/<tokens>/<optimizer>/bs<batch>/lr<lr>/seed<seed>/
                                                    one training cell: RUN_FILES, train.log, ckpt.pt, model.pt
    results/tuning/<experiment>/<model>/<optimizer>/bs<batch>/round<k>.json, final.json (, looked.json)
    results/tuning/_second_look.json                with second_look_seeds: the first look's verdicts
    results/zeroshot/<experiment>/<model>/<optimizer>/bs<batch>.json, results/zeroshot_tasks/
    results/tables/{runs,cells,best_lr}.csv         what the report reads
    results/logs/, results/benchmarks/, results/bundle/

Every function takes the results folder and the coordinates, or Snakemake wildcards such as "{model}": the
rules build their patterns with the same functions.
"""

from pathlib import Path

SUMMARY = "summary.json"
VOUCHED = ("metrics.csv", "mal.csv", "diagnostics.csv", "eval.json")   # summary.json records their rows and sha256
RUN_FILES = (SUMMARY, *VOUCHED)   # a finished run; the train rule declares them
RUN_LOGS = ("train.log",)   # kept with a run in bundles, not declared
RUNS, TUNING, TABLES, DATA, ZEROSHOT = "runs", "tuning", "tables", "data", "zeroshot"
TABLE_FILES = ("runs.csv", "cells.csv", "best_lr.csv")
SECOND_LOOK = "_second_look.json"   # under tuning/ ('_': no experiment's name)
ORIGIN = "origin"   # a rebuild's: the bundle's own tables, manifest and config, to compare with what it makes


def cell_path(model, tokens, optimizer, batch, lr, seed):
    """A cell's folder under runs/ (and under logs/train/): every coordinate that changes its result."""
    return f"{model}/{tokens}/{optimizer}/bs{batch}/lr{lr}/seed{seed}"


def group_path(experiment, model, optimizer, batch):
    """A tuned group's folder under tuning/ (and under logs/tuning/, logs/zeroshot/)."""
    return f"{experiment}/{model}/{optimizer}/bs{batch}"


def run_dir(results, model, tokens, optimizer, batch, lr, seed):
    return f"{results}/{RUNS}/{cell_path(model, tokens, optimizer, batch, lr, seed)}"


def run_outputs(run):
    """{name: path} of a finished run's files, as the train rule declares them (summary, eval, metrics, ...)."""
    return {Path(name).stem: f"{run}/{name}" for name in RUN_FILES}


def tuning_dir(results, experiment, model, optimizer, batch):
    return f"{results}/{TUNING}/{group_path(experiment, model, optimizer, batch)}"


def tuning_round(results, experiment, model, optimizer, batch, round_):
    return f"{tuning_dir(results, experiment, model, optimizer, batch)}/round{round_}.json"


def tuning_final(results, experiment, model, optimizer, batch):
    return f"{tuning_dir(results, experiment, model, optimizer, batch)}/final.json"


def tuning_looked(results, experiment, model, optimizer, batch):
    """A tuned group's final decision with the cells of the second look at its claim seeds, if any."""
    return f"{tuning_dir(results, experiment, model, optimizer, batch)}/looked.json"


def second_look(results):
    """The first look's verdicts and the groups it sends to a second look."""
    return f"{results}/{TUNING}/{SECOND_LOOK}"


def zeroshot_file(results, experiment, model, optimizer, batch):
    """A tuned group's zero-shot scores (the zeroshot rule writes it; the zeroshot artifact reads it)."""
    return f"{results}/{ZEROSHOT}/{experiment}/{model}/{optimizer}/bs{batch}.json"


def zeroshot_tasks(results):
    return f"{results}/zeroshot_tasks"


def data_dir(results, corpus):
    return f"{results}/{DATA}/{corpus}"


def table(results, name):
    return f"{results}/{TABLES}/{name}"


def log(results, stage, name):
    return f"{results}/logs/{stage}/{name}.log"


def benchmark(results, stage, name):
    return f"{results}/benchmarks/{stage}/{name}.tsv"


def bundle(results, name):
    return f"{results}/bundle/{name}.tar.gz"


def results_of_table(path):
    """The results folder of one of its tables (results/tables/<name>.csv)."""
    return Path(path).parents[1]


def results_of_corpus(meta):
    """The results folder of a corpus's meta.json (results/data/<corpus>/meta.json)."""
    return Path(meta).parents[2]


def cell_of_run(run):
    """A run directory's cell path under runs/ ("<model>/.../seed<seed>"), or None when it is not laid out so."""
    parts = Path(run).absolute().parts
    found = [i for i, part in enumerate(parts[:-1]) if part == RUNS]
    return "/".join(parts[found[-1] + 1:]) if found else None
