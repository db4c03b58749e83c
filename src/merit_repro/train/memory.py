"""The micro-batch that fits on a GPU for the whole run, not only for its first forward and backward.

A forward and backward at a candidate size is measured (peak bytes: weights, activations, gradients);
what that attempt does not hold yet is added from the parameter count: the optimizer's two moments, the
transient buffers of its step (at most two parameter-sized lists: MERIT's and LAMB's update and
denominator), and DDP's gradient buckets (one more copy of the gradients). The sum must stay below
``1 - HEADROOM`` of the memory the process can have (free memory plus what its allocator already
holds), which leaves room for fragmentation, NCCL's buffers, the evaluation and the MAL probe.
The largest divisor of the per-device batch that passes is taken, trying first the largest one that
two small measurements (1 and 2 sequences: fixed bytes plus bytes per sequence) say should fit, then smaller
ones; a failed attempt is freed before the next one. An allocation failure counts as "does not fit" however
it comes: torch's OutOfMemoryError, or a RuntimeError from cuBLAS, cuDNN or the caching allocator.
"""

import contextlib
import math

import torch

from merit_repro.utils import UserError

HEADROOM = 0.10
STEP_BUFFERS = 2      # parameter-sized tensors an optimizer step allocates at once
MOMENTS = 2           # Adam's exp_avg and exp_avg_sq, every optimizer compared here


def divisors_of(n):
    """Every divisor of n, largest first (in sqrt(n) steps: a batch of millions must not take minutes)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted({*small, *(n // d for d in small)}, reverse=True)


def unmeasured_bytes(model, world_size):
    """Bytes the run holds later that a forward and backward do not: optimizer state, the step's buffers
    and, under DDP, the gradient buckets."""
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    return param_bytes * (MOMENTS + STEP_BUFFERS + (1 if world_size > 1 else 0))


# (Not cuBLAS' NOT_INITIALIZED, which a handle created short of memory can also read: a broken CUDA install
# reads the same, and would pass for "no micro-batch fits".)
ALLOCATION_FAILURES = ("out of memory", "CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED",
                       "cudaErrorMemoryAllocation")


def is_allocation_failure(err):
    """An error that means the device ran out of memory (cuBLAS and cuDNN say so in RuntimeErrors of their own)."""
    return isinstance(err, torch.OutOfMemoryError) or (
        isinstance(err, RuntimeError) and any(sign in str(err) for sign in ALLOCATION_FAILURES))


def first_guess(divisors, peak_bytes, limit_bytes, extra_bytes):
    """Divisors in the order to try: from the largest that the peaks at 1 and 2 sequences, taken as linear in
    the micro-batch, say fits (the largest divisor when those do not tell), down to 1."""
    one, two = (peak_bytes(1), peak_bytes(2)) if len(divisors) > 1 else (None, None)
    if one is None or two is None or two <= one:
        return divisors
    per_sequence, fixed = two - one, 2 * one - two
    estimate = (limit_bytes - extra_bytes - fixed) / per_sequence
    fitting = [d for d in divisors if d <= estimate]
    return fitting or divisors[-1:]


def largest_fitting(divisors, peak_bytes, limit_bytes, extra_bytes):
    """The first of divisors whose peak_bytes(d) + extra_bytes <= limit_bytes; peak_bytes returns None
    when the attempt ran out of memory."""
    tried, measured = [], {}

    def measure(micro):   # the estimate's sizes (1 and 2) are not measured again
        if micro not in measured:
            measured[micro] = peak_bytes(micro)
        return measured[micro]

    for micro in first_guess(divisors, measure, limit_bytes, extra_bytes):
        peak = measure(micro)
        if peak is not None and peak + extra_bytes <= limit_bytes:
            return micro
        tried.append(f"{micro}: {'out of memory' if peak is None else f'{(peak + extra_bytes) / 2**30:.1f} GiB'}")
    raise UserError(f"no micro-batch fits in {limit_bytes / 2**30:.1f} GiB (tried {', '.join(tried[-3:])}); use a "
                    "smaller model or block_size, or more GPUs")


def peak_bytes_of_step(model, micro, block_size, device, autocast):
    """Peak CUDA memory of one forward and backward at micro sequences; None when it runs out."""
    torch.cuda.reset_peak_memory_stats(device)
    try:
        x = torch.randint(0, model.config.vocab_size, (micro, block_size), device=device)
        with autocast or contextlib.nullcontext():
            _, loss = model(x, x)
        loss.backward()
        del x, loss
        return torch.cuda.max_memory_allocated(device)
    except (torch.OutOfMemoryError, RuntimeError) as err:
        if not is_allocation_failure(err):
            raise
        return None   # the frame, and the attempt's tensors with it, go when the exception is handled
    finally:
        model.zero_grad(set_to_none=True)


def fit_micro_batch(model, per_rank_batch, block_size, device, autocast, world_size, log=print):
    """The micro-batch of the run: on the CPU the largest divisor up to 64; on CUDA the largest that fits."""
    divisors = divisors_of(per_rank_batch)
    if device.type != "cuda":
        return next(d for d in divisors if d <= 64)
    free, _ = torch.cuda.mem_get_info(device)
    limit = (1 - HEADROOM) * (free + torch.cuda.memory_reserved(device))
    extra = unmeasured_bytes(model, world_size)

    def measure(micro):
        peak = peak_bytes_of_step(model, micro, block_size, device, autocast)
        torch.cuda.empty_cache()
        return peak

    micro = largest_fitting(divisors, measure, limit, extra)
    log(f"micro-batch {micro}: fits in {limit / 2**30:.1f} GiB with {extra / 2**30:.1f} GiB of optimizer state, "
        f"step buffers and DDP buckets counted ({HEADROOM:.0%} headroom)")
    return micro
