"""The configuration of one training cell: every knob of a run, in one dataclass.

A cell is (model, optimizer, batch size, peak LR, token budget, seed) plus the settings that the
paper leaves open and this project fixes (see config/README.md). Resource knobs (micro-batch,
device, compile) do not change the result beyond floating-point order.
"""

import math
from dataclasses import asdict, dataclass, field, fields

import yaml

from .model import MODEL_SIZES
from .optim import OPTIMIZERS


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
    warmup_frac: float = 0.02           # linear warmup, share of the steps
    min_lr_frac: float = 0.1            # cosine decay to this share of the peak (paper: 10%)
    grad_clip: float = 1.0              # global grad-norm clip (0: off)
    # evaluation and probes
    eval_every: int = 50                # steps between validation losses (and at the end)
    eval_tokens: int = 65536            # validation tokens, the same fixed windows for every cell
    mal_every: int = 128                # steps between MAL probes (the paper plots every 128)
    mal_batch: int = 4                  # sequences in the fixed MAL probe batch (from val.bin)
    divergence_factor: float = 1.5      # diverged: non-finite loss, or loss > factor x first loss
    # resources and robustness
    micro_batch_size: int | None = None  # per device; None: fitted automatically
    device: str = "auto"                # auto | cpu | cuda | cuda:N
    dtype: str = "auto"                 # auto (bf16 autocast on CUDA, fp32 on CPU) | float32 | bfloat16
    compile: bool = False
    checkpoint_every: int = 100         # steps between checkpoints (also written on SIGTERM/SIGINT)
    keep_checkpoint: bool = False       # keep ckpt.pt after the cell completes
    save_model: bool = False            # write model.pt (final weights) for later evaluation
    peak_flops: float = 989e12          # per device, for MFU (H100 SXM bf16 dense)

    @property
    def tokens_per_step(self):
        return self.batch_size * self.block_size

    @property
    def steps(self):
        return max(1, int(self.tokens // self.tokens_per_step))

    @property
    def warmup_steps(self):
        return max(1, round(self.warmup_frac * self.steps)) if self.warmup_frac > 0 else 0

    def lr_at(self, step):
        """LR for update number step (0-based): linear warmup, then cosine to min_lr_frac x peak."""
        if step < self.warmup_steps:
            return self.lr * (step + 1) / self.warmup_steps
        decay_steps = max(1, self.steps - 1 - self.warmup_steps)
        progress = min(1.0, (step - self.warmup_steps) / decay_steps)
        min_lr = self.min_lr_frac * self.lr
        return min_lr + 0.5 * (1 + math.cos(math.pi * progress)) * (self.lr - min_lr)

    def optimizer_kwargs(self):
        kwargs = dict(lr=self.lr, betas=tuple(self.betas), eps=self.eps)
        kwargs.update(self.optimizer_hparams)
        return kwargs

    def validate(self):
        """Errors that need no data or device: raised before anything is loaded."""
        problems = []
        if self.model not in MODEL_SIZES:
            problems.append(f"model={self.model!r} is unknown; known models: {', '.join(MODEL_SIZES)}")
        if self.optimizer not in OPTIMIZERS:
            problems.append(f"optimizer={self.optimizer!r} is unknown; known optimizers: {', '.join(sorted(OPTIMIZERS))}")
        for name in ("batch_size", "block_size", "eval_every", "mal_every", "mal_batch", "checkpoint_every", "eval_tokens"):
            if getattr(self, name) < 1:
                problems.append(f"{name}={getattr(self, name)} must be >= 1")
        if self.micro_batch_size is not None and self.micro_batch_size < 1:
            problems.append(f"micro_batch_size={self.micro_batch_size} must be >= 1 (or null for automatic)")
        if not self.lr > 0:
            problems.append(f"lr={self.lr} must be > 0")
        if self.tokens < self.tokens_per_step:
            problems.append(f"tokens={self.tokens:g} is less than one step of batch_size x block_size = {self.tokens_per_step}")
        if not 0 <= self.warmup_frac < 1 or not 0 <= self.min_lr_frac <= 1:
            problems.append("warmup_frac must be in [0, 1) and min_lr_frac in [0, 1]")
        if self.dtype not in ("auto", "float32", "bfloat16"):
            problems.append(f"dtype={self.dtype!r}: use auto, float32 or bfloat16")
        if problems:
            raise ValueError("invalid cell config:\n  " + "\n  ".join(problems))
        return self

    @classmethod
    def from_dict(cls, d):
        """A CellConfig from to_dict()'s output (summary.json) or a workflow cell dict."""
        return cls(**{**d, "betas": tuple(d.get("betas", cls.betas))})

    def to_dict(self):
        d = asdict(self)
        d["betas"] = list(self.betas)
        return d


def load_cell_config(path=None, overrides=()):
    """A CellConfig from a YAML file plus ``key=value`` overrides (values parsed as YAML)."""
    raw = {}
    if path is not None:
        with open(path) as f:
            raw = yaml.safe_load(f) or {}
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"override {item!r} is not key=value")
        raw[key.strip()] = yaml.safe_load(value)
    known = {f.name for f in fields(CellConfig)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ValueError(f"unknown cell config keys {unknown}; known keys: {', '.join(sorted(known))}")
    if "betas" in raw:
        raw["betas"] = tuple(raw["betas"])
    for key in ("lr", "tokens", "eps", "weight_decay", "peak_flops"):
        if isinstance(raw.get(key), str):  # YAML 1.1 reads "6e-4" as a string
            raw[key] = float(raw[key])
    return CellConfig(**raw).validate()
