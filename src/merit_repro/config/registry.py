"""The names other parts look up: optimizers, model sizes and paper artifacts, each listed once.

Standard library only: the workflow's wildcards, the config checks, the cost estimate and the report read
these without importing torch; ``merit_repro.optim.build`` and ``merit_repro.models.build_model`` turn a name
into an object.
"""

import math
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Optimizer:
    """An optimizer the experiments may name: its class (module, attribute), the switches its name fixes, and how
    the report shows it."""
    module: str
    cls: str
    label: str
    color: str
    fixed: dict = field(default_factory=dict)


OPTIMIZERS = {
    "adamw": Optimizer("torch.optim", "AdamW", "AdamW", "tab:blue"),
    "lamb": Optimizer("merit_repro.optim.lamb", "Lamb", "LAMB", "tab:orange"),
    "merit": Optimizer("merit_repro.optim.merit", "MERIT", "MERIT", "tab:green"),
    # MERIT's max-norm tensor ratio only: no element-wise ratio, no clip
    "maxlamb": Optimizer("merit_repro.optim.merit", "MERIT", "maxLAMB", "tab:purple",
                         {"elementwise": False, "clip": False}),
    # Figure 7's ablations
    "merit_noclip": Optimizer("merit_repro.optim.merit", "MERIT", "MERIT without the clip", "tab:olive",
                              {"clip": False}),
    "merit_nofloor": Optimizer("merit_repro.optim.merit", "MERIT", "MERIT without the weight-wise floor", "tab:cyan",
                               {"weight_floor": False}),
    "merit_noelementwise": Optimizer("merit_repro.optim.merit", "MERIT", "MERIT without the element-wise ratio",
                                     "tab:pink", {"elementwise": False}),
}
OPTIMIZER_NAMES = tuple(OPTIMIZERS)
# The figures' lines that are not an optimizer's, with their colours: no optimizer may take these names.
FIGURE_LINE_COLORS = {"adamw+qknorm": "tab:red", "merit+qknorm": "tab:brown", "ideal": "tab:gray"}


@dataclass(frozen=True)
class Artifact:
    """A paper artifact an experiment may ask for, and what it needs beyond the tuned runs: a LAMBADA corpus
    (``needs_lambada``: skipped when the config has none) or the groups' zero-shot scores (``needs_zeroshot``)."""
    needs_lambada: bool = False
    needs_zeroshot: bool = False


ARTIFACTS = {
    "val_loss_vs_batch": Artifact(),
    "lambada_ppl_vs_batch": Artifact(needs_lambada=True),
    "headline": Artifact(),
    "steps_to_target": Artifact(),
    "lr_sensitivity": Artifact(),
    "mal_vs_step": Artifact(),
    "mal_tables": Artifact(),
    "mal_vs_lr": Artifact(),
    "loss_curves": Artifact(),
    "ablation": Artifact(),
    "qknorm": Artifact(),
    "llama_c4": Artifact(),
    "zeroshot": Artifact(needs_zeroshot=True),
}


# The paper's model sizes, plus small ones for CPU demos. Context 1024 and vocab 50304 by default. An entry's
# "family" picks its class (model.build_config): none is GPT-2 (model.GPTConfig), "llama" is llama.LlamaConfig.
MODEL_SIZES = {
    "gpt2-small": dict(n_layer=12, n_head=12, n_embd=768),
    "gpt2-medium": dict(n_layer=24, n_head=16, n_embd=1024),
    "gpt2-large": dict(n_layer=36, n_head=20, n_embd=1280),
    "demo-tiny": dict(n_layer=2, n_head=2, n_embd=64, block_size=128),     # 0.12M params with a byte vocabulary
    "demo-small": dict(n_layer=4, n_head=2, n_embd=48, block_size=128),    # 0.13M: deeper at the same cost
    "demo-medium": dict(n_layer=4, n_head=2, n_embd=64, block_size=128),   # 0.22M
    # one head of GPT-2's head size, where AdamW's MAL explodes on a CPU (the mechanism pilot, issue 55)
    "demo-head64": dict(n_layer=2, n_head=1, n_embd=64, block_size=128),   # 0.13M
    # GPT-2's shape at nanoGPT's shakespeare_char size (heads of 64): 10.7M with a byte vocabulary, for one GPU
    "gpt2-6x384": dict(n_layer=6, n_head=6, n_embd=384, block_size=256),
    # The rebuttal's C4 Llamas: GaLore/C-Optim's configs/llama_{100m,250m,350m}.json, sequence length 256
    "llama-100m": dict(family="llama", n_layer=12, n_head=10, n_embd=640, intermediate_size=1708, block_size=256),
    "llama-250m": dict(family="llama", n_layer=24, n_head=16, n_embd=768, intermediate_size=2560, block_size=256),
    "llama-350m": dict(family="llama", n_layer=24, n_head=16, n_embd=1024, intermediate_size=2736, block_size=256),
    "demo-llama": dict(family="llama", n_layer=2, n_head=2, n_embd=64, intermediate_size=172, block_size=128),  # 0.13M
}


def padded_vocab_size(vocab_size, multiple=64):
    return multiple * math.ceil(vocab_size / multiple)
