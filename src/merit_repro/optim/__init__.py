"""Optimizers the experiments compare, by name: ``build(name, params, **hparams)``.

| name                 | what it is                                                             |
|----------------------|------------------------------------------------------------------------|
| adamw                | torch.optim.AdamW                                                      |
| lamb                 | LAMB, cybertronai semantics (see ``Lamb``)                             |
| merit                | MERIT, official semantics (see ``MERIT``)                              |
| maxlamb              | MERIT's max-norm tensor ratio only: no element-wise ratio, no clip     |
| merit_noclip         | MERIT without the element-wise clip (Figure 7)                         |
| merit_nofloor        | MERIT without the tensor-ratio floor on the element-wise ratio (Fig 7) |
| merit_noelementwise  | MERIT with the tensor ratio only, clip kept (Figure 7)                 |
"""

import torch

from ..optim_names import OPTIMIZER_NAMES
from .lamb import Lamb
from .merit import MERIT

# name -> (class, switches fixed by the name)
OPTIMIZERS = {
    "adamw": (torch.optim.AdamW, {}),
    "lamb": (Lamb, {}),
    "merit": (MERIT, {}),
    "maxlamb": (MERIT, {"elementwise": False, "clip": False}),
    "merit_noclip": (MERIT, {"clip": False}),
    "merit_nofloor": (MERIT, {"weight_floor": False}),
    "merit_noelementwise": (MERIT, {"elementwise": False}),
}
assert tuple(OPTIMIZERS) == OPTIMIZER_NAMES, "merit_repro.optim_names lists the same optimizers"


def build(name, params, **hparams):
    """The optimizer called ``name`` over ``params`` (tensors or param groups)."""
    if name not in OPTIMIZERS:
        raise ValueError(f"Unknown optimizer {name!r}; known optimizers: {', '.join(sorted(OPTIMIZERS))}")
    cls, fixed = OPTIMIZERS[name]
    for key, value in fixed.items():
        if key in hparams and hparams[key] != value:
            raise ValueError(f"Optimizer {name!r} fixes {key}={value}; remove {key}={hparams[key]} from its hparams")
    if "betas" in hparams:
        hparams["betas"] = tuple(hparams["betas"])
    try:
        return cls(params, **{**hparams, **fixed})
    except TypeError as err:
        raise ValueError(f"Bad hyperparameter for optimizer {name!r}: {err}") from None


def fastest_on(device, name, hparams):
    """hparams for the fastest implementation of the optimizer on the device: torch's fused AdamW on CUDA,
    so that the baseline is never slowed by a default (unless the caller chose an implementation)."""
    device = torch.device(device)
    if name == "adamw" and device.type == "cuda" and not {"fused", "foreach"} & set(hparams):
        return {**hparams, "fused": True}
    return dict(hparams)


def param_groups(model, weight_decay, decay_min_dim=2, no_decay=()):
    """nanoGPT's grouping: decay tensors with >= decay_min_dim dims, none for the rest.

    ``no_decay`` lists name substrings exempted from decay even when 2-D (e.g. ``("wte", "wpe")``).
    """
    decay, no_decay_params = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        exempt = p.dim() < decay_min_dim or any(s in name for s in no_decay)
        (no_decay_params if exempt else decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay},
              {"params": no_decay_params, "weight_decay": 0.0}]
    return [g for g in groups if g["params"]]


__all__ = ["MERIT", "Lamb", "OPTIMIZERS", "build", "fastest_on", "param_groups"]
