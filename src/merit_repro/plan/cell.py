"""The configuration of one training cell: every knob of a run, in one dataclass.

A cell is (model, optimizer, batch size, peak LR, token budget, seed) plus the settings that the
paper leaves open and this project fixes (see config/README.md). Resource knobs (micro-batch,
device, compile) do not change the result beyond floating-point order.
"""

import json
import math
import sys
import types
import typing
from dataclasses import asdict, dataclass, field, fields

import yaml

from merit_repro.config.configfiles import check
from merit_repro.config.registry import MODEL_SIZES, OPTIMIZER_NAMES
from merit_repro.utils import parse_data

# Keys that choose resources, not results: a run may resume under different values of these.
# Settings that change how or where a cell runs, not its result. Where a corpus lies (data_dir, lambada_dir) is
# not what it is: its fingerprint is checked instead, so a results tree moved or rebuilt from a bundle still counts.
RESOURCE_KEYS = {"micro_batch_size", "device", "compile", "checkpoint_every", "checkpoint_every_minutes", "log_every",
                 "keep_checkpoint", "save_model", "peak_flops", "data_dir", "lambada_dir"}
# The cell's own hyperparameters that the built-in optimizers take (an optimizer from outside takes them only
# through optimizer_hparams, as its config names them).
BUILT_IN_HPARAMS = ("betas", "eps")
MAX_BATCH_SIZE = 2**24   # sequences in one global batch: far above the paper's 6144, far below a hang
# A cell's warmup rule: exactly one of these; none set is DEFAULT_WARMUP_FRAC of the steps, the rule of every cell
# made before the others existed.
WARMUP_RULES = ("warmup_frac", "warmup_steps", "warmup_tokens")
DEFAULT_WARMUP_FRAC = 0.02


def added_later():
    """A setting added after cells had trained: part of a cell's identity only once set, so that a run or
    checkpoint made before it existed is still the cell that would be made now."""
    return field(default=None, metadata={"added_later": True})


@dataclass
class CellConfig:
    # data
    data_dir: str = "results/data/shakespeare-bytes"
    tokenizer: str = "bytes"
    lambada_dir: str | None = None      # prepared LAMBADA (evaluated at the end when given)
    # model
    model: str = "demo-small"
    n_layer: int | None = None          # overrides of the named size
    n_head: int | None = None
    n_embd: int | None = None
    block_size: int = 128
    qk_norm: bool = False
    # optimization: the experiment's knobs
    optimizer: str = "merit"
    lr: float = 6e-3
    batch_size: int = 32                # global batch, in sequences of block_size tokens
    tokens: float = 1e6                 # token budget; steps = tokens // (batch_size * block_size)
    seed: int = 0
    # optimization: fixed by this project where the paper is silent
    betas: tuple = (0.9, 0.95)
    eps: float = 1e-6
    weight_decay: float = 0.1
    optimizer_hparams: dict = field(default_factory=dict)  # anything else build() accepts
    # an optimizer from outside (merit_repro.config.optimizer_sources): {package, version, class | entry_point}; it
    # takes lr and its optimizer_hparams only, not the betas and eps above
    optimizer_source: dict | None = None
    warmup_frac: float | None = None    # linear warmup over this share of the steps (WARMUP_RULES: one set) ...
    warmup_steps: int | None = added_later()     # ... or over this many steps at every batch ...
    warmup_tokens: float | None = added_later()  # ... or over this many tokens (the same tokens at every batch)
    min_lr_frac: float = 0.1            # cosine decay to this share of the peak (paper: 10%)
    grad_clip: float = 1.0              # global grad-norm clip (0: off)
    # evaluation and probes
    eval_every: int = 50                # steps between validation losses (and at the end) ...
    eval_every_tokens: int | None = None  # ... or, when set, training tokens between them (same points per batch)
    eval_tokens: int = 65536            # validation tokens, the same fixed windows for every cell
    mal_every: int = 128                # steps between MAL probes (the paper plots every 128) ...
    mal_probes: int | None = added_later()  # ... or, when set, this many, at the same tokens in every cell (probe_steps)
    mal_batch: int = 4                  # sequences in the fixed MAL probe batch (from val.bin)
    divergence_factor: float = 1.0      # diverged: non-finite loss, or loss above factor x the first loss ...
    divergence_window: float = 0.1      # ... for this share of the planned steps in a row (merit_repro.train.divergence)
    spike_factor: float = 1.3           # a loss spike (counted, not fatal): loss above this x the lowest so far
    # resources and robustness
    micro_batch_size: int | None = None  # per device; None: fitted automatically
    device: str = "auto"                # auto | cpu | cuda | cuda:N
    dtype: str = "auto"                 # auto (bf16 autocast on CUDA, fp32 on CPU) | float32 | bfloat16
    compile: bool = False
    checkpoint_every: int = 100         # steps between checkpoints (also written on SIGTERM/SIGINT) ...
    checkpoint_every_minutes: float | None = None  # ... and at least this often in wall time
    log_every: int = 1                  # steps between log points (losses read back from the device)
    keep_checkpoint: bool = False       # keep ckpt.pt after the cell completes
    save_model: bool | str = False      # write model.pt (final weights): true (fp32) or "bf16"
    peak_flops: float | None = None     # per device, for MFU; None: merit_repro.train.hardware's table

    def __post_init__(self):
        if all(getattr(self, rule) is None for rule in WARMUP_RULES):
            self.warmup_frac = DEFAULT_WARMUP_FRAC

    @property
    def tokens_per_step(self):
        return self.batch_size * self.block_size

    @property
    def steps(self):
        return max(1, int(self.tokens // self.tokens_per_step))

    @property
    def eval_interval(self):
        """Steps between validation losses."""
        if self.eval_every_tokens is None:
            return self.eval_every
        return max(1, round(self.eval_every_tokens / self.tokens_per_step))

    @property
    def lr_warmup_steps(self):
        """Steps of linear warmup, by the cell's rule (at least one when the rule asks for any)."""
        if self.warmup_steps is not None:
            return self.warmup_steps
        if self.warmup_tokens is not None:
            return max(1, round(self.warmup_tokens / self.tokens_per_step)) if self.warmup_tokens > 0 else 0
        return max(1, round(self.warmup_frac * self.steps)) if self.warmup_frac > 0 else 0

    @property
    def warmup_rule(self):
        """The rule that sets the warmup, as "warmup_frac 0.05"."""
        rule = next(r for r in WARMUP_RULES if getattr(self, r) is not None)
        return f"{rule} {getattr(self, rule):g}"

    def lr_at(self, step):
        """LR for update number step (0-based): linear warmup, then cosine to min_lr_frac x peak."""
        warmup = self.lr_warmup_steps
        if step < warmup:
            return self.lr * (step + 1) / warmup
        decay_steps = max(1, self.steps - 1 - warmup)
        progress = min(1.0, (step - warmup) / decay_steps)
        min_lr = self.min_lr_frac * self.lr
        return min_lr + 0.5 * (1 + math.cos(math.pi * progress)) * (self.lr - min_lr)

    def probe_steps(self, until=None):
        """The steps after which the MAL is probed, sorted: 0 (the untrained model), the last step, and every
        mal_every-th step or, with mal_probes, the steps nearest k/mal_probes of the token budget (k = 1 ..
        mal_probes): cells of any batch size and the same tokens are probed at the same tokens, as steps allow.
        until: only those up to that step (the probes a run that ended there took, each at its very step)."""
        if self.mal_probes is None:
            regular = range(self.mal_every, self.steps + 1, self.mal_every)
        elif self.mal_probes > self.steps:   # under a step apart: every step, without a loop over every probe
            regular = range(1, self.steps + 1)
        else:
            tokens_apart = self.tokens / self.mal_probes
            regular = (min(self.steps, max(1, round(k * tokens_apart / self.tokens_per_step)))
                       for k in range(1, self.mal_probes + 1))
        steps = sorted({0, *regular, self.steps})
        return steps if until is None else [s for s in steps if s <= until]

    def schedule(self, steps_done):
        """What a run of this cell that ended after steps_done records of its schedule (summary.json): the warmup
        rule, the warmup steps it sets and the steps the MAL was probed at."""
        return {"warmup_rule": self.warmup_rule, "warmup_steps": self.lr_warmup_steps,
                "probe_steps": self.probe_steps(until=steps_done)}

    def optimizer_kwargs(self):
        kwargs = dict(lr=self.lr)
        if self.optimizer_source is None:
            kwargs.update(betas=tuple(self.betas), eps=self.eps)
        kwargs.update(self.optimizer_hparams)
        return kwargs

    def problems(self):
        """(key, what is wrong) for every bad setting; needs no data or device."""
        problems = type_problems(self)
        if problems:   # the checks below compare values: they need the right kinds first
            return problems
        check = lambda ok, key, message: None if ok else problems.append((key, f"{key}={message}"))  # noqa: E731
        for f in fields(self):   # inf or nan pass every comparison below the wrong way, or hang a loop
            value = getattr(self, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                problems.append((f.name, f"{f.name}={value} must be a finite number"))
            elif isinstance(value, int) and abs(value) > sys.float_info.max:   # it would overflow where it meets one
                problems.append((f.name, f"{f.name}, a number of {len(str(abs(value)))} digits, is larger than a "
                                         "float holds: give a number that a run could take"))
        if problems:
            return problems
        check(self.model in MODEL_SIZES, "model", f"{self.model!r} is unknown; known models: {', '.join(MODEL_SIZES)}")
        check(self.optimizer in OPTIMIZER_NAMES or self.optimizer_source is not None, "optimizer",
              f"{self.optimizer!r} is unknown; known optimizers: {', '.join(sorted(OPTIMIZER_NAMES))} (or one from "
              "outside, with its optimizer_source)")
        check(self.optimizer_source is None or source_is_whole(self.optimizer_source), "optimizer_source",
              f"{self.optimizer_source!r} must name package, version and one of class or entry_point")
        for key in ("batch_size", "block_size", "eval_every", "mal_every", "mal_batch", "checkpoint_every", "eval_tokens",
                    "log_every"):
            check(getattr(self, key) >= 1, key, f"{getattr(self, key)} must be >= 1")
        for key in ("eval_every_tokens", "micro_batch_size", "mal_probes"):
            check(getattr(self, key) is None or getattr(self, key) >= 1, key, f"{getattr(self, key)} must be >= 1 or null")
        check(self.batch_size <= MAX_BATCH_SIZE, "batch_size",
              f"{self.batch_size} is more sequences than any run takes (at most {MAX_BATCH_SIZE:,})")
        check(0 <= self.seed < 2**63, "seed", f"{self.seed} must be in [0, 2**63)")
        for key in ("n_layer", "n_head", "n_embd"):
            check(getattr(self, key) is None or getattr(self, key) >= 1, key, f"{getattr(self, key)} must be >= 1 or null")
        shape = {**MODEL_SIZES.get(self.model, {}), **{k: getattr(self, k) for k in ("n_layer", "n_head", "n_embd")
                                                       if getattr(self, k) is not None}}
        if shape.get("n_head", 0) >= 1 and shape.get("n_embd", 0) >= 1:
            check(shape["n_embd"] % shape["n_head"] == 0, "n_embd",
                  f"{shape['n_embd']} is not divisible by n_head={shape['n_head']}")
            head = shape["n_embd"] // shape["n_head"]
            if shape["n_embd"] % shape["n_head"] == 0 and shape.get("family") == "llama":   # rotary: pairs of dims
                check(head % 2 == 0, "n_embd", f"{shape['n_embd']} gives heads of {head} dimensions with "
                      f"n_head={shape['n_head']}; rotary embeddings (the Llama family) need an even head size")
        check(self.lr > 0, "lr", f"{self.lr} must be > 0")
        check(len(self.betas) == 2 and all(isinstance(b, (int, float)) and not isinstance(b, bool) and 0 <= b < 1
                                           for b in self.betas), "betas",
              f"{list(self.betas)} must be two numbers in [0, 1) (beta1, beta2)")
        for key in ("eps", "weight_decay", "grad_clip"):
            check(getattr(self, key) >= 0, key, f"{getattr(self, key)} must be >= 0")
        check(self.tokens >= self.tokens_per_step, "tokens",
              f"{self.tokens:g} is less than one step of batch_size x block_size = {self.tokens_per_step}")
        problems += warmup_problems(self) + probe_problems(self)
        check(0 <= self.min_lr_frac <= 1, "min_lr_frac", f"{self.min_lr_frac} must be in [0, 1]")
        check(self.divergence_factor >= 1, "divergence_factor", f"{self.divergence_factor} must be >= 1")
        check(0 < self.divergence_window <= 1, "divergence_window", f"{self.divergence_window} must be in (0, 1]")
        check(self.spike_factor > 1, "spike_factor", f"{self.spike_factor} must be > 1")
        check(self.dtype in ("auto", "float32", "bfloat16"), "dtype", f"{self.dtype!r}: use auto, float32 or bfloat16")
        check(self.save_model in (True, False, "bf16"), "save_model", f"{self.save_model!r}: use true, false or bf16")
        check(not self.checkpoint_every_minutes or self.checkpoint_every_minutes > 0, "checkpoint_every_minutes",
              f"{self.checkpoint_every_minutes} must be > 0 or null")
        return problems

    def validate(self):
        """Raise ValueError listing every bad setting, before anything is loaded."""
        problems = self.problems()
        if problems:
            raise ValueError("invalid cell config: " + "; ".join(message for _, message in problems))
        return self

    @classmethod
    def from_dict(cls, d):
        """A CellConfig from to_dict()'s output (summary.json) or a workflow cell dict."""
        betas = d.get("betas", cls.betas)
        return cls(**{**d, "betas": tuple(betas) if isinstance(betas, (list, tuple)) else betas})

    def to_dict(self):
        d = asdict(self)
        d["betas"] = list(self.betas)
        return d


ADDED_LATER = {f.name for f in fields(CellConfig) if f.metadata.get("added_later")}
FLOAT_SETTINGS = {f.name for f in fields(CellConfig) if float in (f.type, *typing.get_args(f.type))}


def warmup_problems(cfg):
    """(key, what is wrong) with the cell's warmup rule: exactly one, within its range."""
    rules = [rule for rule in WARMUP_RULES if getattr(cfg, rule) is not None]
    if len(rules) > 1:
        given = " and ".join(f"{rule}={getattr(cfg, rule)}" for rule in rules)
        return [(rules[-1], f"{given} are {len(rules)} warmup rules: set one of {', '.join(WARMUP_RULES)} (a model's "
                            "or optimizer's rule replaces cell_defaults' only when it sets the others to null)")]
    rule, value = rules[0], getattr(cfg, rules[0])
    if rule == "warmup_frac" and not 0 <= value < 1:
        return [(rule, f"{rule}={value} must be in [0, 1)")]
    if value < 0:
        return [(rule, f"{rule}={value} must be >= 0")]
    # a share asks for its rounded steps; the one-step floor of a share too small to round to one is not its ask
    asked = round(value * cfg.steps) if rule == "warmup_frac" and has_steps(cfg) else cfg.lr_warmup_steps
    if has_steps(cfg) and asked >= cfg.steps:
        return [(rule, f"{rule}={value:g} warms up over {asked} steps, not fewer than the cell's "
                       f"{cfg.steps} (batch {cfg.batch_size}): its LR would never decay; lower {rule}")]
    return []


def probe_problems(cfg):
    """(key, what is wrong) with mal_probes: more probes than steps cannot fall on distinct steps."""
    if cfg.mal_probes is None or not has_steps(cfg) or cfg.mal_probes <= cfg.steps:
        return []
    return [("mal_probes", f"mal_probes={cfg.mal_probes} is more probes than the cell's {cfg.steps} steps (batch "
                           f"{cfg.batch_size}, {cfg.tokens:g} tokens): set mal_probes to at most {cfg.steps}, or to "
                           "null to probe every mal_every steps")]


def has_steps(cfg):
    """Whether the cell's batch, context and budget make whole steps (a bad one is named by problems())."""
    return cfg.tokens_per_step >= 1 and cfg.tokens >= cfg.tokens_per_step


def identity(settings):
    """What makes a cell's result, of its settings (a CellConfig, a workflow cell's dict, a summary.json's or a
    checkpoint's "config"): every setting but RESOURCE_KEYS, each default filled in, and no setting added later
    that is still unset. Cells of equal identity are one cell, however their config spells them: the training
    rule's one tracked param, and what a checkpoint or a finished run must share with the cell it is taken for."""
    cfg = settings if isinstance(settings, CellConfig) else CellConfig.from_dict(settings)
    return {k: v for k, v in cfg.to_dict().items()
            if k not in RESOURCE_KEYS and not (k in ADDED_LATER and v is None)}


def identity_text(settings):
    """A cell's identity as the workflow tracks it, as text: sorted JSON, with a whole number given for a float
    setting written as a float, so that text is equal exactly where identities are (1 == 1.0 in Python, not in
    JSON)."""
    return json.dumps({k: float(v) if k in FLOAT_SETTINGS and type(v) is int else v
                       for k, v in identity(settings).items()}, sort_keys=True)


def source_is_whole(source):
    """Whether an optimizer_source names its package and one class or entry point (its version may be null in a
    plan made without the package installed: merit_repro.optim refuses to build one without it)."""
    return (isinstance(source, dict) and isinstance(source.get("package"), str) and source["package"] != ""
            and (source.get("version") is None or isinstance(source["version"], str))
            and sum(isinstance(source.get(k), str) for k in ("class", "entry_point")) == 1)


def type_problems(cfg):
    """(key, message) for fields whose value is not of the declared kind (an int is a float; a bool is not a number)."""
    problems = []
    for f in fields(cfg):
        value, kinds = getattr(cfg, f.name), _kinds(f.type)
        ok = any(isinstance(value, k) and not (isinstance(value, bool) and k in (int, float)) for k in kinds)
        if not ok:
            names = " or ".join("null" if k is type(None) else k.__name__ for k in kinds)
            problems.append((f.name, f"{f.name}={value!r} must be {names}"))
    return problems


def _kinds(annotation):
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return tuple(k for a in typing.get_args(annotation) for k in _kinds(a))
    if annotation is float:
        return (float, int)
    if annotation is tuple:
        return (tuple, list)
    return (typing.get_origin(annotation) or annotation,)


def load_cell_config(path=None, overrides=()):
    """A CellConfig from a YAML file plus ``key=value`` overrides (values parsed as YAML)."""
    raw = {}
    if path is not None:
        check([path])   # duplicate keys, aliases, object tags: refused with their line
        with open(path) as f:
            raw = parse_data(f.read(), path, yaml.safe_load) or {}
        if not isinstance(raw, dict):
            raise ValueError(f"{path} is not a mapping of cell config keys")
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"override {item!r} is not key=value")
        raw[key.strip()] = parse_data(value, f"override {key.strip()}", yaml.safe_load)
    known = {f.name for f in fields(CellConfig)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ValueError(f"unknown cell config keys {unknown}; known keys: {', '.join(sorted(known))}")
    if not isinstance(raw.get("betas", ()), (list, tuple)):
        raise ValueError(f"betas={raw['betas']!r} must be a list of two numbers")
    if "betas" in raw:
        raw["betas"] = tuple(raw["betas"])
    for key in ("lr", "tokens", "eps", "weight_decay", "peak_flops", "warmup_tokens"):
        if isinstance(raw.get(key), str):  # YAML 1.1 reads "6e-4" as a string
            try:
                raw[key] = float(raw[key])
            except ValueError:
                raise ValueError(f"{key}={raw[key]!r} is not a number") from None
    return CellConfig(**raw).validate()
