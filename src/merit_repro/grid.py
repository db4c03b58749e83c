"""Experiments as grids of training cells: expansion, cell paths, cell configs, semantic checks.

The workflow (workflow/rules/common.smk) and the cost estimate (merit_repro.cost) both read the
config through this module, so they always agree on what a config asks to train and what it costs
(``flops_per_token``, counted by merit_repro.flops on the model a cell trains).

A cell is identified by its coordinates (model, tokens, optimizer, batch, lr, seed); every
other setting comes from ``cell_defaults``, ``models[model]`` and ``optimizers[optimizer]``, so a
cell shared by several experiments is one path and trains once.
"""

import math
from dataclasses import dataclass, fields

from . import flops
from .tuning import canonical

ARTIFACTS = ("val_loss_vs_batch", "lambada_ppl_vs_batch", "headline", "steps_to_target", "lr_sensitivity",
             "mal_vs_step", "mal_tables", "loss_curves", "ablation", "qknorm", "llama_c4", "zeroshot")
COORDINATES = ("model", "tokens", "optimizer", "batch_size", "lr", "seed", "data_dir", "tokenizer", "lambada_dir")
MODEL_ONLY_KEYS = ("data", "paper_model", "gpus")


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


@dataclass(frozen=True, order=True)
class Group:
    """The cells of one experiment that share a model, optimizer and batch size: tuned over LR together."""
    experiment: str
    model: str
    tokens: str
    optimizer: str
    batch: int
    lrs: tuple   # the configured grid, canonical strings

    def wildcards(self):
        return {"experiment": self.experiment, "model": self.model, "optimizer": self.optimizer, "batch": str(self.batch)}

    def path(self, results):
        return f"{results}/tuning/{self.experiment}/{self.model}/{self.optimizer}/bs{self.batch}"


def grid_seeds(config, name):
    """Seeds every LR of an experiment's grid is trained with."""
    return [int(s) for s in config["experiments"][name].get("seeds", config.get("seeds", [0]))]


def claim_seeds(config, name):
    """Seeds the best LR of each group is trained with after the choice, and the only seeds its results are
    reported over (default: as many seeds as the grid's, numbered after them). Disjoint from the grid seeds."""
    exp = config["experiments"][name]
    seeds = exp.get("claim_seeds", config.get("claim_seeds"))
    if seeds is None:
        grid = grid_seeds(config, name)
        return [max(grid) + 1 + i for i in range(len(grid))]
    return [int(s) for s in seeds]


def lr_list(exp, model, optimizer):
    grid = exp["lr_grid"]
    return _per(grid[model], optimizer) if model in grid else grid[optimizer]


def experiment_groups(config, name):
    exp = config["experiments"][name]
    groups = []
    for model in exp["models"]:
        tokens = canonical(_per(exp["tokens"], model))
        for optimizer in exp["optimizers"]:
            lrs = tuple(sorted({canonical(lr) for lr in lr_list(exp, model, optimizer)}, key=float))
            for batch in _per(exp["batch_sizes"], model, optimizer):
                groups.append(Group(name, model, tokens, optimizer, int(batch), lrs))
    return groups


def all_groups(config):
    return {(g.experiment, g.model, g.optimizer, g.batch): g for name in sorted(config["experiments"])
            for g in experiment_groups(config, name)}


def tuning_spec(config, group):
    """What merit_repro.tuning.decide needs to know about a group, besides its results."""
    tuning = config.get("tuning", {})
    return {"group": {"experiment": group.experiment, "model": group.model, "tokens": group.tokens,
                      "optimizer": group.optimizer, "batch": group.batch},
            "lrs": list(group.lrs), "grid_seeds": grid_seeds(config, group.experiment),
            "claim_seeds": claim_seeds(config, group.experiment),
            "max_extensions": int(tuning.get("max_extensions", 2)),
            "extension_factor": float(tuning.get("extension_factor", 2.0))}


def tuning_owners(config):
    """{group key: the group whose rounds tune it}. Groups of several experiments that share a model, tokens,
    optimizer, batch, LR grid, seeds and tuning settings train the same cells (a cell's settings do not depend
    on its experiment), so ``tuning.decide`` takes the same decisions for each: the first of them (by experiment
    name) walks the rounds and the others adopt its final decision (``tuning --adopt``). Each checkpoint round
    costs Snakemake a pass over the whole DAG, so the demo walks 25 groups' rounds instead of 43."""
    owners, first = {}, {}
    for key, group in sorted(all_groups(config).items()):
        spec = tuning_spec(config, group)
        spec["group"] = {k: v for k, v in spec["group"].items() if k != "experiment"}
        owners[key] = first.setdefault(repr(sorted(spec.items())), group)
    return owners


def group_expectation(config, group):
    """What the collect step checks a tuned group's runs against: its tuning spec, and the settings its cells
    share (cell_settings adds each cell's lr and seed)."""
    return {"spec": tuning_spec(config, group),
            "settings": cell_config(config, group.model, group.tokens, group.optimizer, group.batch, "1", 0)}


def cell_settings(expectation, lr, seed):
    return {**expectation["settings"], "lr": float(lr), "seed": int(seed)}


def group_corpora(config, group):
    settings = cell_config(config, group.model, group.tokens, group.optimizer, group.batch, "1", 0)
    return [d for d in (settings["data_dir"], settings["lambada_dir"]) if d]


def experiment_cells(config, name):
    """The configured cells of an experiment (its grids with the grid seeds; tuning may add more)."""
    seeds = grid_seeds(config, name)
    return [Cell(g.model, g.tokens, g.optimizer, g.batch, lr, seed)
            for g in experiment_groups(config, name) for lr in g.lrs for seed in seeds]


def all_cells(config):
    """Every distinct cell of the config, with the experiments that use it, in an order that does not
    depend on the order of keys in the config (rule params are compared as text)."""
    cells = {}
    for name in sorted(config["experiments"]):
        for cell in experiment_cells(config, name):
            cells.setdefault(cell, []).append(name)
    return dict(sorted(cells.items()))


ZEROSHOT_DEFAULTS = {"tasks": ["arc_easy", "copa", "hellaswag", "race", "wic"], "task_dirs": [], "local_tasks": {},
                     "metric": "acc", "limit": None, "batch_size": 32, "weights": "bf16", "offline": True}


def zeroshot_settings(config):
    return {**ZEROSHOT_DEFAULTS, **(config.get("zeroshot") or {})}


def zeroshot_groups(config):
    """The tuned groups whose best-LR claim-seed cells a zeroshot artifact scores."""
    groups = []
    for name in sorted(config["experiments"]):
        if "zeroshot" in config["experiments"][name].get("artifacts", []):
            try:
                groups += experiment_groups(config, name)
            except (KeyError, TypeError):   # a malformed grid: validate() names it
                continue
    return groups


def zeroshot_file(results, experiment, model, optimizer, batch):
    """Where a tuned group's zero-shot scores go (the workflow's zeroshot rule; the zeroshot artifact reads them)."""
    return f"{results}/zeroshot/{experiment}/{model}/{optimizer}/bs{batch}.json"


def keeps_weights(config, model, tokens, optimizer, batch, seed):
    """Whether a cell saves its final weights: it is a claim-seed cell of a group that a zeroshot artifact reads
    (a claim seed trains only at its group's best LR)."""
    return any((g.model, g.tokens, g.optimizer, g.batch) == (model, canonical(tokens), optimizer, int(batch))
               and int(seed) in claim_seeds(config, g.experiment) for g in zeroshot_groups(config))


def data_dir(config, data_key):
    return f"{config['results']}/data/{data_key}"


def cell_config(config, model, tokens, optimizer, batch, lr, seed):
    """The CellConfig dict of one cell (what `python -m merit_repro.train` receives)."""
    from .cell import CellConfig
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
    if "save_model" not in settings and keeps_weights(config, model, tokens, optimizer, batch, seed):
        settings["save_model"] = zeroshot_settings(config)["weights"]
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


def flops_per_token(config, model):
    """(training FLOPs per token, parameters) of a model variant of the config."""
    return flops.of_cell(cell_config(config, model, 1, "adamw", 1, 1e-3, 0))


# Rates for wall-time requests, deliberately low so jobs are not killed early: 25% of an H100's bf16
# peak per GPU; a CPU is counted at 20 GFLOP/s.
GPU_FLOPS_FOR_RUNTIME = 0.25 * 989e12
CPU_FLOPS_FOR_RUNTIME = 20e9


def runtime_minutes(config, model, tokens):
    gpus = model_gpus(config, model)
    rate = gpus * GPU_FLOPS_FOR_RUNTIME if gpus else CPU_FLOPS_FOR_RUNTIME
    seconds = float(tokens) * flops_per_token(config, model)[0] / rate
    return int(10 + 1.2 * seconds / 60)


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
    from .cell import CellConfig

    settings = cell_config(config, cell.model, cell.tokens, cell.optimizer, cell.batch, cell.lr, cell.seed)
    known = {f.name for f in fields(CellConfig)}
    unknown = sorted(set(settings) - known)
    if unknown:
        return [f"{key_path(config, cell, key)} is not a cell setting; known settings: {', '.join(sorted(known))}"
                for key in unknown], None
    cfg = CellConfig.from_dict(settings)
    return [f"{key_path(config, cell, key)}: {message}" for key, message in cfg.problems()], cfg


def optimizer_problems(config, cell, cfg):
    """Build the cell's optimizer with its configured hyperparameters on a dummy tensor: a mistyped key
    or a bad value fails here, before any job, not in the middle of training. Importing torch for it is
    most of a Snakemake start-up (about 3 s), so a setting that built is remembered (optimizer_check_mark)."""
    mark = optimizer_check_mark(cfg)
    if mark is not None and mark.is_file():
        return []
    import torch

    from .optim import build

    group = {"params": [torch.nn.Parameter(torch.zeros(2, 2))], "weight_decay": cfg.weight_decay}
    try:
        build(cfg.optimizer, [group], **cfg.optimizer_kwargs())
    except (TypeError, ValueError) as err:
        return [f"optimizers.{cell.optimizer}: {err}"]
    if mark is not None:
        try:
            mark.parent.mkdir(parents=True, exist_ok=True)
            mark.touch()
        except OSError:
            pass   # a read-only cache only costs the next start-up the build
    return []


def optimizer_check_mark(cfg):
    """The file that says these optimizer settings built with this code and torch: named by a hash of the
    settings, merit_repro/optim's source and torch's version, in $XDG_CACHE_HOME/merit-repro (None when
    torch's version cannot be read without importing it)."""
    import hashlib
    import importlib.metadata
    import json
    import os
    from pathlib import Path

    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None
    digest = hashlib.sha256(json.dumps([cfg.optimizer, cfg.optimizer_kwargs(), cfg.weight_decay, torch_version],
                                       sort_keys=True, default=str).encode())
    for source in sorted((Path(__file__).parent / "optim").glob("*.py")):
        digest.update(source.read_bytes())
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "merit-repro" / "optimizer-checks"
    return cache / digest.hexdigest()[:32]


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
    from .optim_names import OPTIMIZER_NAMES

    problems = [f"{where}={value} must be a finite number" for where, value in non_finite(config)]
    if problems:   # every comparison below would pass or fail the wrong way
        raise ValueError("invalid workflow config:\n  " + "\n  ".join(problems))
    models, data = config["models"], config["data"]
    for key, spec in models.items():
        if spec.get("data") not in data:
            problems.append(f"models.{key}.data={spec.get('data')!r} is not a key of data ({', '.join(data)})")
    if config.get("lambada") and config["lambada"] not in data:
        problems.append(f"lambada={config['lambada']!r} is not a key of data ({', '.join(data)})")
    for opt in config.get("optimizers", {}):
        if opt not in OPTIMIZER_NAMES:
            problems.append(f"optimizers.{opt} is unknown; known optimizers: {', '.join(sorted(OPTIMIZER_NAMES))}")
    for key in config.get("cell_defaults", {}):
        if key in COORDINATES:
            problems.append(f"cell_defaults.{key} is a cell coordinate; set it in the experiments or models")
    built, reported = set(), set()
    for name, exp in config["experiments"].items():
        where = f"experiments.{name}"
        for model in exp["models"]:
            if model not in models:
                problems.append(f"{where}.models: {model!r} is not a key of models ({', '.join(models)})")
        for opt in exp["optimizers"]:
            if opt not in OPTIMIZER_NAMES:
                problems.append(f"{where}.optimizers: {opt!r} is unknown; known optimizers: "
                                f"{', '.join(sorted(OPTIMIZER_NAMES))}")
        shared = sorted(set(grid_seeds(config, name)) & set(claim_seeds(config, name)))
        if shared:
            problems.append(f"{where}: claim seeds {shared} are also grid seeds; the seeds that choose an LR must not "
                            "report it (its mean would be biased low): give claim_seeds other seeds than seeds")
        if not claim_seeds(config, name):
            problems.append(f"{where}: claim_seeds is empty; every best LR needs at least one seed to report it")
        for artifact in exp.get("artifacts", []):
            if artifact not in ARTIFACTS:
                problems.append(f"{where}.artifacts: {artifact!r} is unknown; known artifacts: {', '.join(ARTIFACTS)}")
        if problems:
            continue
        grid_problems = [p for model in exp["models"] for opt in exp["optimizers"]
                         for p in lr_grid_problems(exp, where, model, opt)]
        if grid_problems:
            problems += grid_problems
            continue
        for model in exp["models"]:
            sizes = {opt: len(lr_list(exp, model, opt)) for opt in exp["optimizers"]}
            if len(set(sizes.values())) > 1 and not exp.get("allow_unequal_lr_grids", False):
                problems.append(f"{where}.lr_grid: optimizers get grids of different density {sizes}; give every "
                                "optimizer the same number of LRs (fair tuning) or set allow_unequal_lr_grids: true")
        try:
            cells = experiment_cells(config, name)
        except KeyError as err:
            problems.append(f"{where}: no value for {err.args[0]} in tokens/batch_sizes (dict keyed by model or optimizer)")
            continue
        for cell in sorted({Cell(c.model, c.tokens, c.optimizer, c.batch, c.lr, 0) for c in cells}):
            found, cfg = cell_problems(config, cell)   # every cell: seeds do not change a cell's settings
            if not found and cell.optimizer not in built:
                built.add(cell.optimizer)
                found = optimizer_problems(config, cell, cfg)
            for problem in found:   # once, at the first cell it shows in
                if problem not in reported:
                    reported.add(problem)
                    problems.append(f"{problem} (in {where}, cell {cell.path('results')})")
    problems += corpus_problems(config) + zeroshot_problems(config)
    if problems:
        raise ValueError("invalid workflow config:\n  " + "\n  ".join(problems))
    return config


def zeroshot_problems(config):
    """The zeroshot block against the data keys, and a zeroshot artifact without tasks."""
    settings, problems = zeroshot_settings(config), []
    for name, spec in settings["local_tasks"].items():
        if spec.get("data") not in config["data"]:
            problems.append(f"zeroshot.local_tasks.{name}.data={spec.get('data')!r} is not a key of data "
                            f"({', '.join(config['data'])})")
    wanted = any("zeroshot" in exp.get("artifacts", []) for exp in config["experiments"].values())
    if wanted and not settings["tasks"]:
        problems.append("zeroshot.tasks is empty, but an experiment asks for the zeroshot artifact: name its tasks")
    return problems


def corpus_problems(config):
    """Corpora already prepared under a data key with another request than the config's (a manual prepare
    with other options): training on them would report another corpus's numbers as the config's."""
    import json
    from pathlib import Path

    from .data import requested

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
