"""Training FLOPs per token and parameter count of a cell's model, counted on the model the trainer builds.

It reads one cell's settings (``grid.cell_config``), not the workflow config, so it depends on neither
``grid`` nor ``cost``: ``grid.flops_per_token`` (wall-time requests) and ``merit_repro.cost`` (the bill) both
count with it. The model is built on torch's meta device (shapes only, nothing allocated), once per shape.
"""

import functools
import json

from .sizes import padded_vocab_size
from .tokenizers import TOKENIZERS

SHAPE_KEYS = ("model", "n_layer", "n_head", "n_embd", "qk_norm")


def of_cell(settings):
    """(training FLOPs per token, parameters) of the model a cell's settings describe."""
    shape = {k: settings.get(k) for k in SHAPE_KEYS}
    shape.update(block_size=settings.get("block_size", 1024),
                 vocab_size=padded_vocab_size(TOKENIZERS[settings["tokenizer"]].vocab_size))
    return _model_flops(json.dumps(shape, sort_keys=True))


@functools.lru_cache(maxsize=None)
def _model_flops(shape_json):
    # torch only when a model is counted: grid imports this module, and grid itself imports without torch
    import torch

    from .model import build_config, build_model

    shape = json.loads(shape_json)
    overrides = {k: shape[k] for k in ("n_layer", "n_head", "n_embd") if shape.get(k)}
    with torch.device("meta"):
        model = build_model(build_config(shape["model"], block_size=shape["block_size"], vocab_size=shape["vocab_size"],
                                         qk_norm=bool(shape.get("qk_norm")), **overrides))
    return model.flops_per_token(), model.num_params()
