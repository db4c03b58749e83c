"""Batch sampling from a token memmap: which windows each step, rank and micro-step reads, and the fixed
validation windows. Every offset is a function of (seed, step), so runs of different optimizers at the same
seed see the same batches."""

import numpy as np
import torch

from .tokens import DataError


def batch_offsets(n_tokens, block_size, batch_size, seed, step):
    """Start offsets of the global batch of a step: a function of (seed, step) alone.

    Every rank and micro-step takes its slice of these, so the global batch is the same whatever
    the split into devices and gradient-accumulation steps, and a resumed run sees the same batches.
    """
    high = n_tokens - block_size - 1
    if high < 1:
        raise DataError(f"block_size {block_size} needs more than {block_size + 1} tokens; the split has {n_tokens}")
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, step])))
    return rng.integers(0, high + 1, size=batch_size)


def micro_batch_slice(global_batch, micro_batch, world_size, rank, micro_step):
    """Indices into the global batch for (rank, micro_step): micro-steps outer, ranks inner."""
    start = (micro_step * world_size + rank) * micro_batch
    if start + micro_batch > global_batch:
        raise ValueError(f"micro_step {micro_step} of rank {rank} is past the global batch {global_batch}")
    return slice(start, start + micro_batch)


def windows(tokens, offsets, block_size):
    """(x, y) int64 tensors of shape (len(offsets), block_size), y shifted by one."""
    idx = np.asarray(offsets)[:, None] + np.arange(block_size + 1)[None, :]
    data = torch.from_numpy(np.asarray(tokens[idx], dtype=np.int64))
    return data[:, :-1].contiguous(), data[:, 1:].contiguous()


def validation_offsets(n_tokens, block_size, eval_tokens):
    """The fixed validation windows: non-overlapping and spread evenly over the whole split, so that a
    small evaluation budget still samples every part of it (not just the first document)."""
    n_windows = min(eval_tokens // block_size, (n_tokens - 1) // block_size)
    if n_windows < 1:
        raise DataError(f"val split has {n_tokens} tokens, fewer than one window of block_size {block_size} + 1")
    stride = (n_tokens - 1) // n_windows   # >= block_size, so windows never overlap
    return np.arange(n_windows) * stride
