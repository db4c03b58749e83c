"""Experiments as grids of training cells: expansion, cell paths, cell configs, semantic checks.

The workflow (workflow/rules/common.smk) and the cost estimate (merit_repro.plan.cost) both read the
config through this module, so they always agree on what a config asks to train and what it costs
(``flops_per_token``, counted by merit_repro.plan.flops on the model a cell trains).

A cell is identified by its coordinates (model, tokens, optimizer, batch, lr, seed); every
other setting comes from ``cell_defaults``, ``models[model]`` and ``optimizers[optimizer]``, so a
cell shared by several experiments is one path and trains once.
"""

from dataclasses import dataclass, fields

from merit_repro.config import optimizer_sources
from merit_repro.config.configfiles import with_defaults
from merit_repro.config.registry import ARTIFACTS

from . import paths
from .cell import BUILT_IN_HPARAMS, CellConfig
from .tuning import canonical

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
        return paths.run_dir(results, self.model, self.tokens, self.optimizer, self.batch, self.lr, self.seed)


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
        return paths.tuning_dir(results, self.experiment, self.model, self.optimizer, self.batch)


def grid_seeds(config, name):
    """Seeds every LR of an experiment's grid is trained with."""
    return [int(s) for s in config["experiments"][name].get("seeds", with_defaults(config, "seeds"))]


def claim_seeds(config, name):
    """Seeds the best LR of each group is trained with after the choice, and the only seeds its results are
    reported over (default: as many seeds as the grid's, numbered after them). Disjoint from the grid seeds."""
    exp = config["experiments"][name]
    seeds = exp.get("claim_seeds", config.get("claim_seeds"))
    if seeds is None:
        grid = grid_seeds(config, name)
        return [max(grid) + 1 + i for i in range(len(grid))]
    return [int(s) for s in seeds]


def curve_seeds(config, name):
    """Seeds trained at multiples of a group's chosen LR after the choice (the experiment's ``curve``): they never
    choose, so an LR-robust statement (merit_repro.report.artifacts.mal_vs_lr) reads them away from the choice."""
    return [int(s) for s in (config["experiments"][name].get("curve") or {}).get("seeds", [])]


def curve_multiples(config, group):
    """The multiples k of the chosen LR its curve seeds train at, for a group the experiment's curve names (else [])."""
    curve = config["experiments"][group.experiment].get("curve") or {}
    at = curve.get("batch_sizes", {}).get(group.model, {})
    return [float(k) for k in curve.get("multiples", [])] if group.batch in at.get(group.optimizer, []) else []


def curve_cells(config, group):
    """[(multiple, seed)] a group's curve seeds train at once it is tuned (the LR is k x its chosen LR)."""
    return [(k, s) for k in curve_multiples(config, group) for s in curve_seeds(config, group.experiment)]


def second_look_seeds(config):
    """Seeds a second look trains at the chosen LR of each group whose statements the first look left undecided
    for want of seeds (merit_repro.report.looks); none: one look."""
    return [int(s) for s in config.get("second_look_seeds") or []]


def looks(config):
    """How many looks at the claim seeds the verdicts take (each at its share of alpha)."""
    return 2 if second_look_seeds(config) else 1


def experiment_artifacts(config, name):
    """The artifacts an experiment makes: those it asks for, but a LAMBADA one only with a LAMBADA corpus."""
    return [a for a in config["experiments"][name].get("artifacts", [])
            if not ARTIFACTS[a].needs_lambada or config.get("lambada")]


def lr_list(exp, model, optimizer):
    grid = exp["lr_grid"]
    return _per(grid[model], optimizer) if model in grid else grid[optimizer]


def batch_list(exp, model, optimizer):
    """The batch sizes an experiment trains one optimizer at on one model: one list for all, a list per model or
    per optimizer, or per model a list per optimizer ({model: {optimizer: [...]}}), where an optimizer the model's
    entry does not name trains nothing on that model (AdamW alone on a QK-norm control, say)."""
    batches = _per(exp["batch_sizes"], model, optimizer)
    return batches.get(optimizer, []) if isinstance(batches, dict) else batches


def trained_pairs(exp):
    """The (model, optimizer) pairs of an experiment that train at some batch size."""
    return [(m, o) for m in exp["models"] for o in exp["optimizers"] if batch_list(exp, m, o)]


def experiment_groups(config, name):
    exp = config["experiments"][name]
    groups = []
    for model, optimizer in trained_pairs(exp):
        tokens = canonical(_per(exp["tokens"], model))
        lrs = tuple(sorted({canonical(lr) for lr in lr_list(exp, model, optimizer)}, key=float))
        for batch in batch_list(exp, model, optimizer):
            groups.append(Group(name, model, tokens, optimizer, int(batch), lrs))
    return groups


def all_groups(config):
    return {(g.experiment, g.model, g.optimizer, g.batch): g for name in sorted(config["experiments"])
            for g in experiment_groups(config, name)}


def tuning_spec(config, group):
    """What merit_repro.plan.tuning.decide needs to know about a group, besides its results."""
    tuning = with_defaults(config, "tuning")
    return {"group": {"experiment": group.experiment, "model": group.model, "tokens": group.tokens,
                      "optimizer": group.optimizer, "batch": group.batch},
            "lrs": list(group.lrs), "grid_seeds": grid_seeds(config, group.experiment),
            "claim_seeds": claim_seeds(config, group.experiment),
            "max_extensions": int(tuning["max_extensions"]), "extension_factor": float(tuning["extension_factor"]),
            "lr_choice_noise": float(tuning["lr_choice_noise"]), "max_rivals": int(tuning["max_rivals"]),
            **({"curve_seeds": curve_seeds(config, group.experiment), "curve_multiples": curve_multiples(config, group)}
               if curve_cells(config, group) else {})}


def tuning_owners(config):
    """{group key: the group whose rounds tune it}. Groups of several experiments that share a model, tokens,
    optimizer, batch, LR grid, seeds and tuning settings train the same cells (a cell's settings do not depend
    on its experiment), so ``tuning.decide`` takes the same decisions for each: the first of them (by experiment
    name) walks the rounds and the others adopt its final decision (``tuning --adopt``). Each checkpoint round
    costs Snakemake a pass over the whole DAG, so shared rounds are walked once."""
    owners, first = {}, {}
    for key, group in sorted(all_groups(config).items()):
        spec = tuning_spec(config, group)
        spec["group"] = {k: v for k, v in spec["group"].items() if k != "experiment"}
        owners[key] = first.setdefault(repr(sorted(spec.items())), group)
    return owners


def group_expectation(config, group):
    """What the collect step checks a tuned group's runs against: its tuning spec, and the settings its cells
    share (expected_settings adds each cell's lr and seed)."""
    return {"spec": {**tuning_spec(config, group), "second_look_seeds": second_look_seeds(config)},
            "settings": group_settings(config, group.model, group.tokens, group.optimizer, group.batch)}


def expected_settings(expectation, lr, seed):
    """The settings the config gives one kept cell of a group (its expectation, with the cell's lr and seed)."""
    return {**expectation["settings"], "lr": float(lr), "seed": int(seed)}


def group_corpora(config, group):
    settings = model_settings(config, group.model)
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


def zeroshot_settings(config):
    return with_defaults(config, "zeroshot")


def zeroshot_groups(config):
    """The tuned groups whose best-LR claim-seed cells a zeroshot artifact scores."""
    groups = []
    for name in sorted(config["experiments"]):
        if any(ARTIFACTS[a].needs_zeroshot for a in config["experiments"][name].get("artifacts", []) if a in ARTIFACTS):
            try:
                groups += experiment_groups(config, name)
            except (KeyError, TypeError):   # a malformed grid: validate() names it
                continue
    return groups


def keeps_weights(config, model, tokens, optimizer, batch, seed):
    """Whether a cell saves its final weights: it is a claim-seed cell of a group that a zeroshot artifact reads
    (a claim seed trains only at its group's best LR)."""
    return any((g.model, g.tokens, g.optimizer, g.batch) == (model, canonical(tokens), optimizer, int(batch))
               and int(seed) in claim_seeds(config, g.experiment) for g in zeroshot_groups(config))


def data_dir(config, data_key):
    return paths.data_dir(config["results"], data_key)


def cell_config(config, model, tokens, optimizer, batch, lr, seed):
    """The CellConfig dict of one cell (what `python -m merit_repro.train` receives): its group's settings, its
    LR and seed, and whether it keeps its final weights."""
    settings = {**group_settings(config, model, tokens, optimizer, batch), "lr": float(lr), "seed": int(seed)}
    if "save_model" not in settings and keeps_weights(config, model, tokens, optimizer, batch, seed):
        settings["save_model"] = zeroshot_settings(config)["weights"]
    return settings


def group_settings(config, model, tokens, optimizer, batch):
    """The settings every cell of a group shares: all of a cell's but its lr and seed (and save_model, which a
    zeroshot artifact sets on its claim seeds)."""
    settings = model_settings(config, model)
    known = {f.name for f in fields(CellConfig)}
    spec = config.get("optimizers", {}).get(optimizer, {})
    source = optimizer_sources.source(optimizer, spec)
    if source is not None:   # an optimizer from outside takes betas and eps only as its config gives them
        settings["optimizer_source"] = source
        known -= set(BUILT_IN_HPARAMS)
    extra = {}
    for key, value in spec.items():
        if key not in optimizer_sources.SOURCE_KEYS + optimizer_sources.STYLE_KEYS:
            (settings if key in known else extra)[key] = value
    if extra:
        settings["optimizer_hparams"] = {**settings.get("optimizer_hparams", {}), **extra}
    settings.update(optimizer=optimizer, batch_size=int(batch), tokens=float(tokens))
    if "betas" in settings:
        settings["betas"] = list(settings["betas"])
    return settings


def model_settings(config, model):
    """A model's settings, whatever it trains with: cell_defaults, the model's own, and the corpora it reads."""
    model_spec = config["models"][model]
    data_key = model_spec["data"]
    settings = dict(config.get("cell_defaults", {}))
    settings.update({k: v for k, v in model_spec.items() if k not in MODEL_ONLY_KEYS})
    lambada = config.get("lambada")
    tokenizer = config["data"][data_key]["tokenizer"]
    settings.update(
        data_dir=data_dir(config, data_key), tokenizer=tokenizer,
        lambada_dir=data_dir(config, lambada) if lambada and config["data"][lambada]["tokenizer"] == tokenizer else None,
    )
    return settings


def model_gpus(config, model):
    return int(config["models"][model].get("gpus", 0))
