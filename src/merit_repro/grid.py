"""Experiments as grids of training cells: expansion, cell paths, cell configs, semantic checks.

The workflow (workflow/rules/common.smk) and the cost estimate (merit_repro.cost) both read the
config through this module, so they always agree on what a config asks to train.

A cell is identified by its coordinates (model, tokens, optimizer, batch, lr, seed); every
other setting comes from ``cell_defaults``, ``models[model]`` and ``optimizers[optimizer]``, so a
cell shared by several experiments is one path and trains once.
"""

from dataclasses import dataclass, fields

import numpy as np

from .cell import CellConfig
from .optim import OPTIMIZERS

ARTIFACTS = ("val_loss_vs_batch", "lambada_ppl_vs_batch", "steps_to_target", "lr_sensitivity", "mal_vs_step",
             "mal_tables", "loss_curves", "ablation", "qknorm")
COORDINATES = ("model", "tokens", "optimizer", "batch_size", "lr", "seed", "data_dir", "tokenizer", "lambada_dir")
MODEL_ONLY_KEYS = ("data", "paper_model", "gpus")


def canonical(x):
    """A number as it appears in paths and tables: 6e-4, 1e-2, 1.31072e5, 2e9, 480."""
    x = float(x)
    if x.is_integer() and abs(x) < 1e5:
        return str(int(x))
    return np.format_float_scientific(x, trim="-", exp_digits=1).replace("e+", "e")


@dataclass(frozen=True, order=True)
class Cell:
    model: str
    tokens: str
    optimizer: str
    batch: int
    lr: str
    seed: int

    def path(self, results):
        return f"{results}/runs/{self.model}/{self.tokens}/{self.optimizer}/bs{self.batch}/lr{self.lr}/seed{self.seed}"


def _per(value, *keys):
    """value, or value[key] for the first key it has when it is a dict keyed by model/optimizer."""
    if isinstance(value, dict):
        for key in keys:
            if key in value:
                return value[key]
        raise KeyError(keys)
    return value


def experiment_cells(config, name):
    exp = config["experiments"][name]
    cells = []
    for model in exp["models"]:
        tokens = canonical(_per(exp["tokens"], model))
        for optimizer in exp["optimizers"]:
            grid = exp["lr_grid"]
            lrs = _per(grid[model], optimizer) if model in grid else grid[optimizer]
            for batch in _per(exp["batch_sizes"], model, optimizer):
                for lr in lrs:
                    for seed in exp.get("seeds", config.get("seeds", [0])):
                        cells.append(Cell(model, tokens, optimizer, int(batch), canonical(lr), int(seed)))
    return cells


def all_cells(config):
    """Every distinct cell of the config, with the experiments that use it, in an order that does not
    depend on the order of keys in the config (rule params are compared as text)."""
    cells = {}
    for name in sorted(config["experiments"]):
        for cell in experiment_cells(config, name):
            cells.setdefault(cell, []).append(name)
    return dict(sorted(cells.items()))


def data_dir(config, data_key):
    return f"{config['results']}/data/{data_key}"


def cell_config(config, model, tokens, optimizer, batch, lr, seed):
    """The CellConfig dict of one cell (what `python -m merit_repro.train` receives)."""
    model_spec = config["models"][model]
    data_key = model_spec["data"]
    settings = dict(config.get("cell_defaults", {}))
    settings.update({k: v for k, v in model_spec.items() if k not in MODEL_ONLY_KEYS})
    known = {f.name for f in fields(CellConfig)}
    extra = {}
    for key, value in config.get("optimizers", {}).get(optimizer, {}).items():
        (settings if key in known else extra)[key] = value
    if extra:
        settings["optimizer_hparams"] = {**settings.get("optimizer_hparams", {}), **extra}
    lambada = config.get("lambada")
    tokenizer = config["data"][data_key]["tokenizer"]
    settings.update(
        optimizer=optimizer, lr=float(lr), batch_size=int(batch), tokens=float(tokens), seed=int(seed),
        data_dir=data_dir(config, data_key), tokenizer=tokenizer,
        lambada_dir=data_dir(config, lambada) if lambada and config["data"][lambada]["tokenizer"] == tokenizer else None,
    )
    if "betas" in settings:
        settings["betas"] = list(settings["betas"])
    return sorted_dict(settings)


def sorted_dict(obj):
    """obj with every dict's keys sorted: Snakemake compares params by their text, so the order of keys in a
    config file must not make a cell look changed (and retrain it)."""
    if isinstance(obj, dict):
        return {k: sorted_dict(obj[k]) for k in sorted(obj, key=str)}
    if isinstance(obj, (list, tuple)):
        return [sorted_dict(v) for v in obj]
    return obj


def model_gpus(config, model):
    return int(config["models"][model].get("gpus", 0))


# Rates for wall-time requests, deliberately low so jobs are not killed early: 25% of an H100's bf16
# peak per GPU; a CPU is counted at 20 GFLOP/s.
GPU_FLOPS_FOR_RUNTIME = 0.25 * 989e12
CPU_FLOPS_FOR_RUNTIME = 20e9


def runtime_minutes(config, model, tokens):
    from .cost import flops_per_token

    gpus = model_gpus(config, model)
    rate = gpus * GPU_FLOPS_FOR_RUNTIME if gpus else CPU_FLOPS_FOR_RUNTIME
    seconds = float(tokens) * flops_per_token(config, model)[0] / rate
    return int(10 + 1.2 * seconds / 60)


def validate(config):
    """Checks the JSON schema cannot express; raises ValueError naming the key and the fix."""
    problems = []
    models, data = config["models"], config["data"]
    for key, spec in models.items():
        if spec.get("data") not in data:
            problems.append(f"models.{key}.data={spec.get('data')!r} is not a key of data ({', '.join(data)})")
    if config.get("lambada") and config["lambada"] not in data:
        problems.append(f"lambada={config['lambada']!r} is not a key of data ({', '.join(data)})")
    for opt in config.get("optimizers", {}):
        if opt not in OPTIMIZERS:
            problems.append(f"optimizers.{opt} is unknown; known optimizers: {', '.join(sorted(OPTIMIZERS))}")
    for key in config.get("cell_defaults", {}):
        if key in COORDINATES:
            problems.append(f"cell_defaults.{key} is a cell coordinate; set it in the experiments or models")
    for name, exp in config["experiments"].items():
        where = f"experiments.{name}"
        for model in exp["models"]:
            if model not in models:
                problems.append(f"{where}.models: {model!r} is not a key of models ({', '.join(models)})")
        for opt in exp["optimizers"]:
            if opt not in OPTIMIZERS:
                problems.append(f"{where}.optimizers: {opt!r} is unknown; known optimizers: {', '.join(sorted(OPTIMIZERS))}")
        for artifact in exp.get("artifacts", []):
            if artifact not in ARTIFACTS:
                problems.append(f"{where}.artifacts: {artifact!r} is unknown; known artifacts: {', '.join(ARTIFACTS)}")
        if problems:
            continue
        for model in exp["models"]:
            grid = exp["lr_grid"][model] if model in exp["lr_grid"] else exp["lr_grid"]
            try:
                sizes = {opt: len(_per(grid, opt)) for opt in exp["optimizers"]}
            except KeyError:
                problems.append(f"{where}.lr_grid has no LRs for some of {exp['optimizers']} (model {model})")
                continue
            if len(set(sizes.values())) > 1 and not exp.get("allow_unequal_lr_grids", False):
                problems.append(f"{where}.lr_grid: optimizers get grids of different density {sizes}; give every "
                                "optimizer the same number of LRs (fair tuning) or set allow_unequal_lr_grids: true")
        try:
            cells = experiment_cells(config, name)
        except KeyError as err:
            problems.append(f"{where}: no value for {err.args[0]} in tokens/batch_sizes (dict keyed by model or optimizer)")
            continue
        for cell in cells[:1] + cells[-1:]:
            try:
                CellConfig.from_dict(cell_config(config, cell.model, cell.tokens, cell.optimizer, cell.batch,
                                                 cell.lr, cell.seed)).validate()
            except (TypeError, ValueError) as err:
                problems.append(f"{where} (cell {cell.path('results')}): {err}")
    if problems:
        raise ValueError("invalid workflow config:\n  " + "\n  ".join(problems))
    return config
