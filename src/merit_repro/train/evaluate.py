"""Evaluation: validation loss on fixed windows, and LAMBADA last-word perplexity and accuracy.

The trainer calls these during and at the end of every cell (writing ``eval.json``). The CLI
evaluates a finished run again from its saved weights (``model.pt``, written with ``save_model``):

    python -m merit_repro.train.evaluate --run results/runs/<cell> [--lambada-dir results/data/lambada-gpt2]
"""

import argparse
import contextlib
import json
import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from merit_repro.data.batches import validation_offsets, windows
from merit_repro.data.tokens import open_tokens, verify
from merit_repro.models import build_model, config_from_dict
from merit_repro.plan.cell import CellConfig
from merit_repro.plan.records import file_record
from merit_repro.utils import UserError, atomic_write_json, cli, read_json


@torch.no_grad()
def validation_loss(model, data_dir, meta, block_size, eval_tokens, batch_size, device, autocast=None,
                    rank=0, world_size=1):
    """Mean next-token loss over the fixed validation windows (this rank's share; sum and count returned)."""
    tokens = open_tokens(data_dir, "val", meta)
    offsets = validation_offsets(len(tokens), block_size, eval_tokens)[rank::world_size]
    total, count = torch.zeros((), device=device, dtype=torch.float64), 0
    model.eval()
    for i in range(0, len(offsets), batch_size):
        x, y = windows(tokens, offsets[i:i + batch_size], block_size)
        with autocast or contextlib.nullcontext():
            logits, _ = model(x.to(device))
        loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.to(device).view(-1), reduction="sum")
        total += loss.double()
        count += y.numel()
    model.train()
    return total, count


@torch.no_grad()
def lambada(model, lambada_dir, block_size, device, autocast=None):
    """LAMBADA: perplexity = exp(mean over passages of the target's summed NLL), and greedy accuracy."""
    examples = read_json(Path(lambada_dir) / "lambada.json")
    nll_sum, correct = 0.0, 0
    model.eval()
    for ex in examples:
        ids = (ex["context"] + ex["target"])[-(block_size + 1):]
        n_target = min(len(ex["target"]), len(ids) - 1)
        x = torch.tensor(ids[:-1], device=device)[None]
        y = torch.tensor(ids[1:], device=device)[None]
        with autocast or contextlib.nullcontext():
            logits, _ = model(x)
        logits, y = logits[0, -n_target:].float(), y[0, -n_target:]
        nll_sum += F.cross_entropy(logits, y, reduction="sum").item()
        correct += int(torch.equal(logits.argmax(-1), y))
    model.train()
    return {"lambada_ppl": math.exp(nll_sum / len(examples)), "lambada_acc": correct / len(examples),
            "lambada_examples": len(examples)}


@cli
def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m merit_repro.train.evaluate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", required=True, type=Path, help="a finished run directory with model.pt")
    parser.add_argument("--lambada-dir", type=Path, default=None)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch-size", type=int, default=8, help="validation windows per forward pass")
    parser.add_argument("--out", type=Path, default=None, help="default: RUN/eval.json")
    args = parser.parse_args(argv)
    weights = args.run / "model.pt"
    if not weights.exists():
        raise UserError(f"{weights} not found; train the cell with save_model: true")
    summary = read_json(args.run / "summary.json")
    cfg = CellConfig.from_dict(summary["config"])
    model = build_model(config_from_dict(summary["model_config"])).to(args.device)
    model.load_state_dict(torch.load(weights, map_location=args.device, weights_only=True))
    meta = verify(cfg.data_dir, tokenizer=cfg.tokenizer)
    total, count = validation_loss(model, cfg.data_dir, meta, cfg.block_size, cfg.eval_tokens, args.batch_size,
                                   args.device)
    result = {"val_loss": total.item() / count, "val_tokens": count}
    if args.lambada_dir:
        verify(args.lambada_dir, tokenizer=cfg.tokenizer)
        result.update(lambada(model, args.lambada_dir, cfg.block_size, args.device))
    out = args.out or args.run / "eval.json"
    atomic_write_json(out, result)
    if Path(out).resolve() == (args.run / "eval.json").resolve() and "files" in summary:   # its summary vouches anew
        summary["files"]["eval.json"] = file_record(out)
        atomic_write_json(args.run / "summary.json", summary)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
