"""Training FLOPs per token and parameter count of a cell's model, from its shape alone (no torch).

It reads one cell's settings (``grid.cell_config``), not the workflow config: the wall-time requests
(``plan.runtime``) and the bill (``python -m merit_repro.plan.cost``) both count with it. The counts are the
modules of ``merit_repro.models`` written out; tests/test_model.py checks them against the built models.
"""

from merit_repro.config.registry import MODEL_SIZES, padded_vocab_size
from merit_repro.data.tokenizers import TOKENIZERS

SHAPE_KEYS = ("n_layer", "n_head", "n_embd")


def shape_of(settings):
    """The model shape a cell's settings describe: its named size with the cell's overrides."""
    shape = {"family": "gpt2", "bias": False, "qk_norm": False, **MODEL_SIZES[settings["model"]]}
    shape.update({k: settings[k] for k in SHAPE_KEYS if settings.get(k)})
    shape.update(block_size=settings.get("block_size", 1024), qk_norm=bool(settings.get("qk_norm")),
                 vocab_size=padded_vocab_size(TOKENIZERS[settings["tokenizer"]].vocab_size))
    return shape


def parameters(shape):
    """(all parameters, those multiplied in the forward pass): the embedding tables only looked up are left out
    of the second (GPT-2's position table; Llama's token table, its lm_head being untied)."""
    L, C, V, T = shape["n_layer"], shape["n_embd"], shape["vocab_size"], shape["block_size"]
    head = C // shape["n_head"]
    if shape["family"] == "llama":
        norms = 2 * C + (2 * head if shape["qk_norm"] else 0)
        block = norms + 4 * C * C + 3 * C * shape["intermediate_size"]
        total = V * C + L * block + C + V * C
        return total, total - V * C
    b = 1 if shape["bias"] else 0
    norm = C * (1 + b)
    qk_norms = 2 * head * (1 + b) if shape["qk_norm"] else 0
    attention = 3 * C * C + 3 * C * b + C * C + C * b + qk_norms
    mlp = 4 * C * C + 4 * C * b + 4 * C * C + C * b
    total = V * C + T * C + L * (2 * norm + attention + mlp) + norm   # the token table is the tied lm_head
    return total, total - T * C


def of_cell(settings):
    """(training FLOPs per token, parameters) of the model a cell's settings describe: 6N for the multiplied
    weights plus the attention scores 12·L·C·T (PaLM appendix B)."""
    shape = shape_of(settings)
    total, multiplied = parameters(shape)
    return 6 * multiplied + 12 * shape["n_layer"] * shape["n_embd"] * shape["block_size"], total
