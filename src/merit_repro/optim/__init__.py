"""Optimizers the experiments compare, by name: ``build(name, params, **hparams)``; one from outside this package
(a library's class, or an installed package's entry point) with its ``source`` (merit_repro.optim.sources).

The names, their classes and the switches each name fixes are listed once, in
``merit_repro.config.registry.OPTIMIZERS``: adamw is torch.optim.AdamW, lamb is LAMB with cybertronai
semantics (``Lamb``), merit is MERIT with the official semantics (``MERIT``), and maxlamb, merit_noclip,
merit_nofloor and merit_noelementwise are MERIT with switches off (Figure 7).
"""

import importlib

import torch

from merit_repro.config.registry import OPTIMIZERS

from .lamb import Lamb
from .merit import MERIT
from .sources import build_external


def optimizer_class(name):
    spec = OPTIMIZERS[name]
    return getattr(importlib.import_module(spec.module), spec.cls)


def build(name, params, source=None, **hparams):
    """The optimizer called ``name`` over ``params`` (tensors or param groups): a built-in one, or with ``source``
    ({package, version, class | entry_point}: merit_repro.config.optimizer_sources) one from outside."""
    if source is not None:
        return build_external(name, source, params, _tuples(hparams))
    if name not in OPTIMIZERS:
        raise ValueError(f"Unknown optimizer {name!r}; known optimizers: {', '.join(sorted(OPTIMIZERS))}")
    cls, fixed = optimizer_class(name), OPTIMIZERS[name].fixed
    for key, value in fixed.items():
        if key in hparams and hparams[key] != value:
            raise ValueError(f"Optimizer {name!r} fixes {key}={value}; remove {key}={hparams[key]} from its hparams")
    try:
        return cls(params, **{**_tuples(hparams), **fixed})
    except TypeError as err:
        raise ValueError(f"Bad hyperparameter for optimizer {name!r}: {err}") from None


def _tuples(hparams):
    """hparams with betas a tuple, as torch's optimizers want it (a config's YAML or JSON gives a list)."""
    return {**hparams, "betas": tuple(hparams["betas"])} if isinstance(hparams.get("betas"), list) else dict(hparams)


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


__all__ = ["MERIT", "Lamb", "OPTIMIZERS", "build", "fastest_on", "optimizer_class", "param_groups"]
