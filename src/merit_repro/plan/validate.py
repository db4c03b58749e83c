"""Checks the JSON schema cannot express, on every cell of a config, before any job: each problem named by its
key path in the config, with the fix.

The optimizers' hyperparameters are checked by building each optimizer once (``optimizer_settings`` lists
what to build; ``merit_repro.optim.check`` builds them), which needs torch: the workflow does it when a run
starts, not while Snakemake parses the workflow.
"""

import json
import math
import os
from dataclasses import fields
from pathlib import Path

from merit_repro.config import optimizer_sources
from merit_repro.config.configfiles import ALLOW_TASK_DIRS
from merit_repro.config.registry import ARTIFACTS
from merit_repro.data.tokens import requested

from . import paths, resources
from .cell import CellConfig
from .grid import (
    COORDINATES,
    Cell,
    batch_list,
    cell_config,
    claim_seeds,
    curve_seeds,
    data_dir,
    experiment_cells,
    grid_seeds,
    lr_list,
    second_look_seeds,
    trained_pairs,
    zeroshot_settings,
)


def lr_grid_problems(exp, where, model, optimizer):
    """What is wrong with one LR list of an experiment's grid, named by its key path."""
    grid = exp["lr_grid"]
    path = f"{where}.lr_grid.{model}.{optimizer}" if model in grid else f"{where}.lr_grid.{optimizer}"
    owner = grid[model] if model in grid else grid
    if not isinstance(owner, dict) or optimizer not in owner:
        return [f"{path} is missing: give every optimizer of the experiment its LR list"]
    lrs = owner[optimizer]
    if not isinstance(lrs, list) or not lrs:
        return [f"{path}={lrs!r} must be a non-empty list of learning rates"]
    return [f"{path}[{i}]={lr!r} must be a number > 0" for i, lr in enumerate(lrs)
            if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not lr > 0]


def batch_problems(exp, where):
    """What in an experiment's batch_sizes would drop cells silently (grid.batch_list reads a mapping by model first,
    then by optimizer): a key that is none of the experiment's models and optimizers, an optimizer's key beside
    models' keys (a model's entry hides it), a mapping under an optimizer's key (never read), and under a model's
    key an optimizer that is not the experiment's."""
    sizes = exp["batch_sizes"]
    if not isinstance(sizes, dict):
        return []
    model_keys = [key for key in sizes if key in exp["models"]]
    return [problem for key, value in sizes.items()
            for problem in batch_key_problems(exp, f"{where}.batch_sizes.{key}", key, value, model_keys)]


def batch_key_problems(exp, path, key, value, model_keys):
    """batch_problems of one key of a batch_sizes mapping, at path; model_keys: the mapping's keys that are models."""
    models, optimizers = exp["models"], exp["optimizers"]
    if key in models:
        named = value if isinstance(value, dict) else {}
        return [f"{path}.{opt}: {opt!r} is not one of the experiment's optimizers ({', '.join(optimizers)}): rename "
                "it to one of them or remove it" for opt in named if opt not in optimizers]
    if key not in optimizers:
        return [f"{path}: {key!r} is neither a model ({', '.join(models)}) nor an optimizer ({', '.join(optimizers)}) "
                "of the experiment, so its batch sizes would train nothing: rename it to one of them or remove it"]
    per_model = f"{{{(model_keys or models)[0]}: {{{key}: [...]}}}}"
    if model_keys:
        return [f"{path}: an optimizer's key beside models' keys ({', '.join(model_keys)}), whose entries hide it "
                f"({key} would train nothing there): key batch_sizes by model or by optimizer, not both; per model "
                f"and optimizer, write {per_model}"]
    if isinstance(value, dict):
        return [f"{path}: a mapping under an optimizer's key is never read ({key} would train nothing): give {key} a "
                f"list of batch sizes, or key batch_sizes by model, {per_model}"]
    return []


def key_path(config, cell, key):
    """Where a cell's setting comes from in the config: its optimizer's, its model's, or cell_defaults."""
    if key in config.get("optimizers", {}).get(cell.optimizer, {}):
        return f"optimizers.{cell.optimizer}.{key}"
    if key in config["models"][cell.model]:
        return f"models.{cell.model}.{key}"
    if key in config.get("cell_defaults", {}):
        return f"cell_defaults.{key}"
    return f"the cell's {key}"


def cell_problems(config, cell):
    """Every bad setting of one cell, named by its key path in the config."""
    settings = cell_config(config, *cell_args(cell))
    known = {f.name for f in fields(CellConfig)}
    unknown = sorted(set(settings) - known)
    if unknown:
        return [f"{key_path(config, cell, key)} is not a cell setting; known settings: {', '.join(sorted(known))}"
                for key in unknown], None
    cfg = CellConfig.from_dict(settings)
    problems = [f"{key_path(config, cell, key)}: {message}" for key, message in cfg.problems()]
    if isinstance(cfg.optimizer_hparams, dict) and "lr" in cfg.optimizer_hparams:
        problems.append(f"{key_path(config, cell, 'optimizer_hparams')}.lr does nothing: every cell's lr comes from "
                        f"{COORDINATE_SOURCES['lr']}; remove it")
    return problems, cfg


def non_finite(obj, where="config"):
    """(key path, value) of every inf or nan anywhere in obj."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return [(where, obj)]
    if isinstance(obj, dict):
        return [found for k, v in obj.items() for found in non_finite(v, f"{where}.{k}" if where != "config" else str(k))]
    if isinstance(obj, (list, tuple)):
        return [found for i, v in enumerate(obj) for found in non_finite(v, f"{where}[{i}]")]
    return []


def validate(config):
    """Checks the JSON schema cannot express, on every cell, before any job runs; raises ValueError
    naming the key path and the fix."""
    problems = [f"{where}={value} must be a finite number" for where, value in non_finite(config)]
    if problems:   # every comparison below would pass or fail the wrong way
        raise ValueError("invalid workflow config:\n  " + "\n  ".join(problems))
    problems = reference_problems(config) + limit_problems(config) + resources.problems(config)
    reported = set()   # a problem of a setting is named once, at the first cell it shows in
    for name, exp in config["experiments"].items():
        problems += experiment_problems(config, name, exp)
        if not problems:   # the grid and its cells only when the names they use are sound
            problems += grid_problems(config, name, exp, reported)
    problems += zeroshot_problems(config)
    if problems:
        raise ValueError("invalid workflow config:\n  " + "\n  ".join(problems))
    return config


def reference_problems(config):
    """Names the config uses that are not defined: corpora, optimizers, coordinates set as defaults."""
    problems, data = [], config["data"]
    for key, spec in config["models"].items():
        if spec.get("data") not in data:
            problems.append(f"models.{key}.data={spec.get('data')!r} is not a key of data ({', '.join(data)})")
    if config.get("lambada") and config["lambada"] not in data:
        problems.append(f"lambada={config['lambada']!r} is not a key of data ({', '.join(data)})")
    for opt, spec in config.get("optimizers", {}).items():
        problems += optimizer_sources.form_problems(opt, spec)
    return problems + overwritten_problems(config) + colour_problems(config)


# Where each cell coordinate comes from (merit_repro.plan.grid.cell_config): set in cell_defaults, a model or an
# optimizer, it is overwritten by the cell's own value and does nothing.
COORDINATE_SOURCES = {
    "model": "models.<name>.model", "tokens": "experiments.<name>.tokens",
    "optimizer": "experiments.<name>.optimizers", "batch_size": "experiments.<name>.batch_sizes",
    "lr": "experiments.<name>.lr_grid, and the schedule sets every step's LR from it",
    "seed": "seeds and claim_seeds", "data_dir": "models.<name>.data", "tokenizer": "data.<key>.tokenizer",
    "lambada_dir": "lambada",
}


def overwritten_problems(config):
    """Cell coordinates set in cell_defaults, a model or an optimizer (models.<name>.model aside): each cell
    overwrites them with its own, so they would do nothing (an optimizer's would still enter its cells' identity)."""
    places = [("cell_defaults", config.get("cell_defaults", {}))]
    places += [(f"models.{name}", {k: v for k, v in spec.items() if k != "model"})
               for name, spec in config["models"].items()]
    places += [(f"optimizers.{name}", spec or {}) for name, spec in config.get("optimizers", {}).items()]
    return [f"{where}.{key} does nothing: every cell's {key} comes from {COORDINATE_SOURCES.get(key, 'its grid')}; "
            "remove it" for where, spec in places for key in spec if key in COORDINATES]


def colour_problems(config):
    """Optimizer colours matplotlib cannot draw with (they used to fail the figures after every cell trained)."""
    specs = {name: spec for name, spec in config.get("optimizers", {}).items() if spec and "color" in spec}
    if not specs:
        return []
    from matplotlib.colors import is_color_like   # here: only a config that sets colours pays for importing matplotlib

    return [f"optimizers.{name}.color={spec['color']!r} is not a matplotlib colour; use a name (crimson), a hex code "
            "(#1f77b4) or a cycle colour (C3)" for name, spec in specs.items() if not is_color_like(spec["color"])]


# A training job starts Python and torch (3 to 9 s on a test machine) and keeps a fifth of its time to checkpoint in
# (merit_repro.utils.lead_within): a shorter job can end before its first step, so a chain of them never finishes its
# cell. tests/test_cluster.py chains 18 s jobs, the shortest that make sense on a test machine.
MIN_JOB_MINUTES = 0.25


def limit_problems(config):
    """Limits that make no sense, and paths that would put line breaks in jobs' commands."""
    problems = []
    limit = config.get("max_job_minutes")
    if limit is not None and limit < MIN_JOB_MINUTES:
        problems.append(f"max_job_minutes={limit} is shorter than a training job needs to start, take a step and "
                        f"checkpoint; give at least {MIN_JOB_MINUTES} ({60 * MIN_JOB_MINUTES:g} s), or your partition's limit")
    for key in ("results", "figures", "bundle"):
        if isinstance(config.get(key), str) and any(ord(c) < 32 for c in config[key]):
            problems.append(f"{key}={config[key]!r} holds a line break or control character; remove it")
    return problems


def experiment_problems(config, name, exp):
    """An experiment's models, optimizers, seeds and artifacts."""
    where, models, problems = f"experiments.{name}", config["models"], []
    for model in exp["models"]:
        if model not in models:
            problems.append(f"{where}.models: {model!r} is not a key of models ({', '.join(models)})")
    for opt in exp["optimizers"]:
        if opt not in optimizer_sources.optimizer_names(config):
            problems.append(f"{where}.optimizers: {opt!r} is unknown; known optimizers: "
                            f"{', '.join(optimizer_sources.optimizer_names(config))} (one from outside is "
                            f"declared under optimizers.{opt} with its class or entry point)")
    shared = sorted(set(grid_seeds(config, name)) & set(claim_seeds(config, name)))
    if shared:
        problems.append(f"{where}: claim seeds {shared} are also grid seeds; the seeds that choose an LR must not "
                        "report it (its mean would be biased low): give claim_seeds other seeds than seeds")
    if not claim_seeds(config, name):
        problems.append(f"{where}: claim_seeds is empty; every best LR needs at least one seed to report it")
    looked = sorted(set(second_look_seeds(config)) & (set(grid_seeds(config, name)) | set(claim_seeds(config, name))))
    if looked:
        problems.append(f"second_look_seeds: {looked} are also seeds or claim seeds of experiment {name}; a second "
                        "look adds seeds the first did not have: give it other seeds")
    problems += curve_problems(config, name, exp)
    for artifact in exp.get("artifacts", []):
        if artifact not in ARTIFACTS:
            problems.append(f"{where}.artifacts: {artifact!r} is unknown; known artifacts: {', '.join(ARTIFACTS)}")
    return problems


def curve_problems(config, name, exp):
    """An experiment's curve: fresh seeds, at groups it trains, never at the chosen LR itself (the claim seeds')."""
    where, curve = f"experiments.{name}.curve", exp.get("curve")
    if not curve:
        return []
    problems = []
    taken = set(grid_seeds(config, name)) | set(claim_seeds(config, name)) | set(second_look_seeds(config))
    if set(curve_seeds(config, name)) & taken:
        problems.append(f"{where}.seeds: {sorted(set(curve_seeds(config, name)) & taken)} are also grid, claim or "
                        "second-look seeds; curve seeds must never have chosen or reported: give others")
    if any(float(k) == 1.0 for k in curve["multiples"]):
        problems.append(f"{where}.multiples: 1 is the chosen LR, which the claim seeds report: leave it out")
    for model, by_optimizer in curve["batch_sizes"].items():
        for optimizer, batches in by_optimizer.items():
            trained = (batch_list(exp, model, optimizer) if model in exp["models"] and optimizer in exp["optimizers"]
                       else [])
            if set(batches) - set(trained):
                problems.append(f"{where}.batch_sizes: {model} {optimizer} at batch {sorted(set(batches) - set(trained))}"
                                " is no group of the experiment: name groups it trains")
    return problems


def grid_problems(config, name, exp, reported):
    """An experiment's LR grids (each list, equal density) and every setting of every cell they make."""
    where = f"experiments.{name}"
    problems = batch_problems(exp, where)
    if problems:   # before a missing key's KeyError: a misspelt key is the likelier cause
        return problems
    try:
        pairs = trained_pairs(exp)
    except KeyError as err:
        return [f"{where}: no value for {err.args[0]} in tokens/batch_sizes (dict keyed by model or optimizer)"]
    problems = [p for m, opt in pairs for p in lr_grid_problems(exp, where, m, opt)]
    if problems:
        return problems
    for model in exp["models"]:
        sizes = {opt: len(lr_list(exp, model, opt)) for m, opt in pairs if m == model}
        if len(set(sizes.values())) > 1 and not exp.get("allow_unequal_lr_grids", False):
            problems.append(f"{where}.lr_grid: optimizers get grids of different density {sizes}; give every "
                            "optimizer the same number of LRs (fair tuning) or set allow_unequal_lr_grids: true")
    try:
        cells = seedless_cells(config, name)
    except KeyError as err:
        return problems + [f"{where}: no value for {err.args[0]} in tokens/batch_sizes (dict keyed by model or optimizer)"]
    for cell in cells:
        found, _ = cell_problems(config, cell)
        for problem in found:
            if problem not in reported:
                reported.add(problem)
                problems.append(f"{problem} (in {where}, cell {cell.path('results')})")
    return problems


def zeroshot_problems(config):
    """The zeroshot block against the data keys, a zeroshot artifact without tasks, and task folders from
    elsewhere without the opt-in (their YAMLs can import Python, see configfiles.ALLOW_TASK_DIRS)."""
    settings, problems = zeroshot_settings(config), []
    # (a rebuild from a bundle scores nothing, it reads the bundle's results, so it needs no opt-in)
    if settings["task_dirs"] and not config.get("bundle") and os.environ.get(ALLOW_TASK_DIRS) != "1":
        problems.append(f"zeroshot.task_dirs={settings['task_dirs']}: task YAMLs can run Python (lm-eval's "
                        f"`!function`), so task folders are used only with {ALLOW_TASK_DIRS}=1; set it for folders "
                        "you made (python -m merit_repro.evals.zeroshot export) or have read")
    for name, spec in settings["local_tasks"].items():
        if spec.get("data") not in config["data"]:
            problems.append(f"zeroshot.local_tasks.{name}.data={spec.get('data')!r} is not a key of data "
                            f"({', '.join(config['data'])})")
    wanted = any(ARTIFACTS[a].needs_zeroshot for exp in config["experiments"].values() for a in exp.get("artifacts", [])
                 if a in ARTIFACTS)
    if wanted and not settings["tasks"]:
        problems.append("zeroshot.tasks is empty, but an experiment asks for the zeroshot artifact: name its tasks")
    return problems


def corpus_problems(config):
    """Corpora already prepared under a data key with another request than the config's (a manual prepare
    with other options): training on them would report another corpus's numbers as the config's. It reads the
    prepared meta.json files, so the workflow asks it when a run starts."""
    problems = []
    for key, spec in sorted(config["data"].items()):
        meta = Path(data_dir(config, key)) / "meta.json"
        try:
            prepared = json.loads(meta.read_text()).get("request")
        except (OSError, ValueError, AttributeError):
            continue   # not prepared yet (or unreadable: the trainer's verify names it)
        if prepared != requested(spec):
            problems.append(f"data.{key}: {meta.parent} was prepared with {prepared}, but the config asks for "
                            f"{requested(spec)}; delete {meta.parent} (the workflow prepares it again) or fix the config")
    return problems


def source_problems(config):
    """Finished runs of an optimizer from outside that trained with another version of its package than
    the config's: Snakemake would retrain them over their results. Another version is another cell, so the
    workflow stops and says how to keep both. It reads the runs' summary.json files, so it runs when a run starts."""
    problems = []
    for name in optimizer_sources.external_names(config):
        wanted = optimizer_sources.source(name, config["optimizers"][name])
        pattern = paths.cell_path("*", "*", name, "*", "*", "*")
        for summary in sorted(Path(config["results"], paths.RUNS).glob(f"{pattern}/summary.json")):
            try:
                then = json.loads(summary.read_text())["config"].get("optimizer_source") or {}
                version = then.get("version")
            except (OSError, ValueError, KeyError, AttributeError, TypeError):
                continue   # unreadable: the report's integrity check names it
            if version not in (None, wanted["version"]):
                problems.append(f"optimizers.{name}: {summary.parent} trained with {wanted['package']} "
                                f"{version}, and the config's is {wanted['version']}; another version is "
                                f"another cell, so keep both: give this one another name (optimizers.{name}_new), "
                                f"or pin the old one (optimizers.{name}.version: '{version}')")
                break
    return problems


def optimizer_settings(config):
    """[{where, cell, optimizer, hparams, weight_decay, source}]: each distinct optimizer setting the config's cells
    train with, with its key path and first cell, for ``merit_repro.optim.check`` to build once."""
    found = {}
    for name in sorted(config["experiments"]):
        for cell in seedless_cells(config, name):
            cfg = CellConfig.from_dict(cell_config(config, *cell_args(cell)))
            setting = {"optimizer": cfg.optimizer, "hparams": cfg.optimizer_kwargs(), "weight_decay": cfg.weight_decay,
                       "source": cfg.optimizer_source}
            key = json.dumps(setting, sort_keys=True, default=str)
            found.setdefault(key, {"where": f"optimizers.{cell.optimizer}",
                                   "cell": f"in experiments.{name}, cell {cell.path('results')}", **setting})
    return list(found.values())


def seedless_cells(config, name):
    """An experiment's cells once per setting: seeds do not change a cell's settings."""
    return sorted({Cell(c.model, c.tokens, c.optimizer, c.batch, c.lr, 0) for c in experiment_cells(config, name)})


def cell_args(cell):
    return cell.model, cell.tokens, cell.optimizer, cell.batch, cell.lr, cell.seed
