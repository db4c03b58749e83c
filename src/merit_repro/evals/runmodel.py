"""A finished run as a model to evaluate: its final weights, its model class and its tokenizer.

The zero-shot evaluation (merit_repro.evals.harness) and the HuggingFace export (merit_repro.evals.export) read a run
directory through ``load_run``. The weights are ``model.pt``, which the trainer writes when a cell's
``save_model`` is set (the workflow sets it for the cells that a ``zeroshot`` artifact reads).
"""

import pickle
from dataclasses import dataclass
from pathlib import Path

import torch

from merit_repro.data.tokenizers import get_tokenizer
from merit_repro.models import build_model, config_from_dict
from merit_repro.plan.records import check_weights, read_summary
from merit_repro.utils import UserError, read_json


@dataclass
class LoadedRun:
    run_dir: Path
    model: torch.nn.Module      # in eval mode, float32, on the device asked for
    tokenizer: object           # merit_repro.data.tokenizers: encode_ordinary, decode, vocab_size, eot
    block_size: int             # the context the run trained with
    vocab_size: int             # the tokenizer's real vocabulary (the model's rows beyond it are padding)
    summary: dict


def tokenizer_of(summary):
    """The run's tokenizer, from its corpus's meta.json where it names a file (T5), else by name."""
    name = summary["config"]["tokenizer"]
    meta_path = Path(summary["config"]["data_dir"]) / "meta.json"
    described = read_json(meta_path).get("tokenizer", {}) if meta_path.is_file() else {}
    return get_tokenizer(name, described.get("source"))


def load_run(run_dir, device="cpu"):
    """The run's model with its final weights (bf16 ones cast to float32), tokenizer and context length."""
    run_dir = Path(run_dir)
    summary = read_summary(run_dir)
    if summary["status"] != "ok":
        raise UserError(f"{run_dir} ended with status {summary['status']!r}; only a run that finished training "
                        "can be evaluated or exported")
    weights = run_dir / "model.pt"
    if not weights.is_file():
        raise UserError(f"{weights} not found: the cell was trained without save_model. The workflow keeps the "
                        "weights of the claim-seed cells that a zeroshot artifact reads; for another cell retrain "
                        "it with `python -m merit_repro.train --config CELL.json --out DIR --set save_model=true`")
    check_weights(run_dir, summary)
    model = build_model(config_from_dict(summary["model_config"]))
    try:
        state = torch.load(weights, map_location="cpu", weights_only=True, mmap=True)
        model.load_state_dict(state)   # copies into the float32 parameters, casting bf16 weights
    except (RuntimeError, EOFError, OSError, pickle.UnpicklingError) as err:
        raise UserError(f"{weights} cannot be loaded as this run's weights ({str(err).splitlines()[0][:160]}); "
                        "retrain the cell with save_model") from None
    model.to(device).eval()
    tokenizer = tokenizer_of(summary)
    if tokenizer.vocab_size > model.config.vocab_size:
        raise UserError(f"{run_dir}: its tokenizer {tokenizer.name!r} has {tokenizer.vocab_size} tokens but the model "
                        f"only {model.config.vocab_size} rows; the run's corpus was prepared with another tokenizer")
    return LoadedRun(run_dir, model, tokenizer, int(summary["config"]["block_size"]), tokenizer.vocab_size, summary)
