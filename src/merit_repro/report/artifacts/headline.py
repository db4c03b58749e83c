"""The abstract's headline: GPT-2 Medium, MERIT at batch 6K "without any performance degradation compared
to the standard batch size (480) with 48B training tokens" — MERIT at the large batch no worse than AdamW
at the standard batch, with the same tokens; LAMB at the large batch for context.

The abstract's claim is made at 48B tokens for a 355M-parameter model (about 135 tokens per parameter,
6x the Chinchilla budget of 20) and a 12.8x batch ratio (480 -> 6144). An experiment that reaches
neither scale cannot test it: its comparison is kept for the record, its verdict is "not tested at
this scale", with the reason.
"""

import pandas as pd

from merit_repro.config.registry import MODEL_SIZES, padded_vocab_size
from merit_repro.data.tokenizers import TOKENIZERS
from merit_repro.report.claims import NO_WORSE, Setting, statement
from merit_repro.report.figures import Line, Panel

from .context import estimate_columns, record, val_curve_by_tokens
from .paper import differences

TOKENS_PER_PARAMETER = 48e9 / 355e6   # the abstract's budget for GPT-2 Medium
BATCH_RATIO = 6144 / 480


def parameters(config, model):
    """The model's parameter count (transformer blocks 12 L d², token and position embeddings)."""
    spec = config["models"][model]
    size = {**MODEL_SIZES[spec["model"]], **{k: spec[k] for k in ("n_layer", "n_embd") if spec.get(k)}}
    block = config.get("cell_defaults", {}).get("block_size", size.get("block_size", 1024))
    vocab = padded_vocab_size(TOKENIZERS[config["data"][spec["data"]]["tokenizer"]].vocab_size)
    return 12 * size["n_layer"] * size["n_embd"] ** 2 + (vocab + block) * size["n_embd"]


def scale_gap(ctx, model, small, large):
    """Why this setting cannot test the abstract's claim ("" when it can)."""
    tokens = float(ctx.spec["tokens"][model] if isinstance(ctx.spec["tokens"], dict) else ctx.spec["tokens"])
    per_parameter = tokens / parameters(ctx.config, model)
    short = []
    if per_parameter < 0.95 * TOKENS_PER_PARAMETER:
        short.append(f"{per_parameter:.1f} tokens per parameter (the abstract: {TOKENS_PER_PARAMETER:.0f})")
    if large / small < 0.95 * BATCH_RATIO:
        short.append(f"a {large / small:g}x batch ratio (the abstract: {BATCH_RATIO:.1f}x)")
    return ("the abstract's claim is made at 6x the Chinchilla budget and a 12.8x batch; this experiment has "
            + " and ".join(short)) if short else ""


def headline(ctx, prefix):
    rows, settings, panels = [], [], []
    for model in ctx.spec["models"]:
        batches = ctx.batches(model)
        small, large = batches[0], batches[-1]
        merit, reference = ctx.estimate(model, "merit", large).at(large), ctx.estimate(model, "adamw", small).at(small)
        context = ", ".join(f"{o}@{large} {ctx.estimate(model, o, large).text()}" for o in ctx.optimizers()
                            if o == "lamb")
        settings.append(Setting(model, f"{large} vs {small}", merit, reference,
                                f"for context, not part of the claim: {context}" if context else "",
                                not_tested=scale_gap(ctx, model, small, large)))
        panel = Panel(ctx.model_title(model), "tokens", "validation loss (seed mean)")
        for opt in ctx.optimizers():
            for b in batches:
                if ctx.best_row(model, opt, b) is None:
                    continue
                est = ctx.estimate(model, opt, b)
                rows.append({"model": model, "optimizer": ctx.label(model, opt), "batch": b,
                             "paper_batch": ctx.paper_batch(model, b), "n_seeds": est.n,
                             **estimate_columns(est, ctx.paper_beside(model, ctx.paper_value(
                                 "headline", model, opt, b, "val_loss")), "val_loss")})
                x, y, _ = ctx.seed_mean_curve(model, opt, b, val_curve_by_tokens)
                panel.lines.append(Line(f"bs{b}: {est.text()}", x, y, opt))
        panels.append(panel)
    ctx.figure(panels, prefix, "Headline: MERIT at a large batch vs AdamW at the standard batch, same tokens")
    claim = statement("MERIT at the largest batch is no worse than AdamW at the smallest batch (same tokens)",
                      settings, ctx.stats, NO_WORSE, ctx.pooled())
    return pd.DataFrame(rows), record("abstract: GPT-2 Medium, MERIT at batch 6K matches batch 480 with 48B tokens",
                                      [claim], differences(ctx))
