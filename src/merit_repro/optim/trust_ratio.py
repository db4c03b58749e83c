"""Functional core shared by MERIT and LAMB.

Both optimizers take an Adam direction ``a = m / (sqrt(v) + eps) + wd * w`` (no bias correction
by default, L2 decay inside the direction) and scale it by a trust ratio built from norms of the
weight ``w`` and of ``a``. They differ only in the ratio:

- ``MaxNormRatio`` (MERIT): max-norms per tensor, per row (dim-0 index) and per column (dim-1
  index), combined element-wise as ``max(max(r_i, c_j), b)`` with the official zero guard.
- ``L2NormRatio`` (LAMB): ``‖w‖₂ / ‖a‖₂`` per tensor, ``‖w‖₂`` optionally capped.

A ratio needs statistics of the whole tensor before any element is updated, so every step makes
two passes: one that updates the moments and gathers statistics, one that applies the update.

- The per-tensor path (the CPU default for tensors of several chunks) walks each tensor in row chunks
  small enough to stay in cache and recomputes ``a`` in the second pass instead of storing it, which
  brings the memory traffic close to the two-pass floor on CPU.
- The multi-tensor path (the CUDA default, and the CPU's where every tensor is one chunk) computes ``a``
  for all tensors with ``torch._foreach_*`` kernels and reduces whole tensors: LAMB's norms are two
  ``_foreach_norm`` calls, MERIT's row and column maxima one reduction per matrix and statistic
  (benchmarks/optim_step.py counts operators).

Both paths turn statistics into ratios with the same code (``finalize``, foreach ops over lists).
Max-norms are exact in any order, so MERIT's two paths give bit-identical results; LAMB's norms
are rounded per chunk on the per-tensor path, so its two paths agree to float rounding (and bit
for bit where a tensor is one chunk).

Nothing here reads a tensor back to the host or copies host data to the device (no ``.item()``,
no ``torch.tensor``, no boolean masks): zero guards and diagnostics stay on the device, and a step
never waits for the GPU (``dispatch_count`` counts such operators; tests/test_optim.py checks).

Both paths are functions of tensor lists and plain options, with no Python branch on a tensor's value, so
``torch.compile(opt.step)`` traces the multi-tensor path, which the compiler fuses down to the two passes
(on the CPU, inductor makes one kernel per tensor for the moments and the statistics, one for the update).
A compiled step takes that path whatever ``foreach`` says: the compiler makes its own loops, and unrolling
the chunks would only grow the graph.
"""

import math
from typing import NamedTuple

import torch
from torch import Tensor


class StepOptions(NamedTuple):
    """Hyperparameters of one param group, resolved for one step. ``lr`` is a float, or the group's 0-d
    tensor when the user gave one (a compiled step then reads it instead of recompiling when it changes)."""

    lr: float | Tensor
    beta1: float
    beta2: float
    eps: float
    weight_decay: float
    decoupled_weight_decay: bool
    bias_correction: bool
    clip: bool
    chunk_numel: int


def rows_per_chunk(param: Tensor, chunk_numel: int) -> int:
    row_numel = max(1, param.numel() // max(1, param.shape[0]))
    return max(1, chunk_numel // row_numel)


def row_chunks(param: Tensor, chunk_numel: int):
    """Slices along dim 0 (rows of a matrix, elements of a vector) of about chunk_numel elements."""
    n = param.shape[0]
    step = rows_per_chunk(param, chunk_numel)
    return [slice(i, min(i + step, n)) for i in range(0, n, step)]


def guarded_ratios(nums, dens):
    """num / den for lists of tensors >= 0, NaN where num or den is 0 (the zero guard, resolved later).

    min(num, den) / itself is 1 where both are positive and 0/0 = NaN where either is 0; multiplying
    by it leaves a ratio bit for bit as it was, or marks it.
    """
    ratios = torch._foreach_div(nums, dens)
    marks = torch._foreach_minimum(nums, dens)
    torch._foreach_div_(marks, marks)
    torch._foreach_mul_(ratios, marks)
    return ratios


def nan_to_one(x: Tensor) -> Tensor:
    """The guard's ratio of 1 where a NaN marks it (infinities are kept)."""
    return x.nan_to_num_(nan=1.0, posinf=math.inf, neginf=-math.inf)


def abs_maxima(x: Tensor, reductions):
    """max |x| over each tuple of dims, dims kept: one kernel per reduction on CUDA (vector_norm);
    on the CPU, where vector_norm's max is far slower, one abs and an amax per reduction."""
    if x.device.type != "cpu":
        return tuple(torch.linalg.vector_norm(x, math.inf, dims, keepdim=True) for dims in reductions)
    x_abs = x.abs()
    return tuple(x_abs.amax(dims, keepdim=True) for dims in reductions)


class MaxNormRatio:
    """MERIT's trust ratio from max-norms (Algorithm 1 and the official code).

    For a tensor with >= 2 dims and ``elementwise`` on: ``r_i = max_j|w_ij| / max_j|a_ij|`` (a
    reduction over dim 1), ``c_j = max_i|w_ij| / max_i|a_ij|`` (over dim 0), ``b = ‖w‖_m / ‖a‖_m``,
    ``s_ij = max(max(r_i, c_j), b)``, and ``s_ij = 1`` where any of the four maxima is zero.
    Dims beyond the second are kept as batch dims of both reductions, exactly as the official
    code's ``amax(dim=1)`` / ``amax(dim=0)`` do. Otherwise (1-D tensors, or ``elementwise`` off)
    the ratio is ``b`` alone, 1 when either max is zero.

    A tensor's statistics are ``(w_maxima, a_maxima)``: per reduction (see ``reductions``), the
    maxima of ``|w|`` and of ``|a|`` with dims kept.
    """

    def __init__(self, elementwise: bool = True, weight_floor: bool = True):
        self.elementwise = elementwise
        self.weight_floor = weight_floor

    def reductions(self, param: Tensor):
        """The dims each statistic reduces: (1,) per row and (0,) per column of a matrix, else all."""
        if self.elementwise and param.dim() >= 2:
            return (1,), (0,)
        return (tuple(range(param.dim())),)

    def statistics(self, params, updates):
        """Multi-tensor path: statistics of whole tensors."""
        return [(abs_maxima(p, self.reductions(p)), abs_maxima(a, self.reductions(p))) for p, a in zip(params, updates)]

    def new_statistics(self, param: Tensor):
        """Per-tensor path: zeroed statistics of one tensor, for accumulate to fill chunk by chunk."""
        shapes = [[1 if d in dims else n for d, n in enumerate(param.shape)] for dims in self.reductions(param)]
        return tuple(tuple(param.new_zeros(shape) for shape in shapes) for _ in "wa")

    def accumulate(self, statistics, rows: slice, w: Tensor, a: Tensor, scratch: Tensor) -> None:
        """Per-tensor path: fold rows ``rows`` (``w``, ``a``: those rows) into the statistics."""
        reductions = self.reductions(w)
        for maxima, x in zip(statistics, (w, a)):
            x_abs = torch.abs(x, out=scratch)
            for m, dims in zip(maxima, reductions):
                if 0 in dims:  # spans chunks: a running maximum
                    torch.maximum(m, x_abs.amax(dims, keepdim=True), out=m)
                else:          # one value per row: this chunk's rows
                    torch.amax(x_abs, dims, keepdim=True, out=m[rows])

    def finalize(self, params, statistics, diagnostics=None):
        """Per tensor, the factors of its scale: ``(r, c)`` of a matrix, with NaN marking a guarded
        row or column and ``r`` floored by ``b``; ``(b,)`` otherwise. ``diagnostics``: a dict per
        tensor to put ``floor_fraction`` in, or None."""
        w_maxima = [m for w, _ in statistics for m in w]
        a_maxima = [m for _, a in statistics for m in a]
        ratios = iter(guarded_ratios(w_maxima, a_maxima))
        factors = [tuple(next(ratios) for _ in w) for w, _ in statistics]   # regrouped per tensor
        matrices = [i for i, f in enumerate(factors) if len(f) == 2]
        if matrices:
            # b from the row maxima; no guard needed: where a max-norm is 0, every row is guarded.
            row_w, row_a = ([statistics[i][k][0] for i in matrices] for k in (0, 1))
            tensor_ratios = torch._foreach_div(*(torch._foreach_norm(rows, math.inf) for rows in (row_w, row_a)))
            if diagnostics is not None and self.weight_floor:
                # The floor binds at (i, j) iff r_i < b and c_j < b (a NaN mark compares false), so the
                # count factorises into rows below times columns below.
                for i, b in zip(matrices, tensor_ratios):
                    r, c = factors[i]
                    diagnostics[i]["floor_fraction"] = ((r < b).sum(0) * (c < b).sum(1)).sum() / params[i].numel()
            if self.weight_floor:  # max(max(r, c), b) == max(max(r, b), c)
                torch._foreach_maximum_([factors[i][0] for i in matrices], tensor_ratios)
        for f in factors:
            if len(f) == 1:
                nan_to_one(f[0])
        return factors

    def scale(self, factors, rows: slice | None = None, out: Tensor | None = None) -> Tensor:
        """s for rows ``rows`` (None: all) of a tensor, from its factors; NaN marks become the guard's 1."""
        if len(factors) == 1:
            return factors[0]
        r, c = factors
        return nan_to_one(torch.maximum(r if rows is None else r[rows], c, out=out))


class L2NormRatio:
    """LAMB's trust ratio ``‖w‖₂ / ‖a‖₂`` per tensor, 1 when either norm is zero.

    ``max_weight_norm`` caps ``‖w‖₂`` (10 in cybertronai's pytorch-lamb and torch_optimizer;
    None for no cap). Norms are taken in at least float32 (float64 if any of ``params`` is). A
    tensor's statistics are ``(‖w‖₂, ‖a‖₂)``.
    """

    def __init__(self, params, max_weight_norm: float | None = 10.0):
        self.max_weight_norm = max_weight_norm
        self.dtype = torch.float64 if torch.float64 in [p.dtype for p in params] else torch.float32

    def statistics(self, params, updates):
        """Multi-tensor path: the norms of whole tensors."""
        return list(zip(*(torch._foreach_norm(tensors, 2, dtype=self.dtype) for tensors in (params, updates))))

    def new_statistics(self, param: Tensor):
        """Per-tensor path: zero norms, for accumulate to fill chunk by chunk."""
        return param.new_zeros((), dtype=self.dtype), param.new_zeros((), dtype=self.dtype)

    def accumulate(self, statistics, rows: slice, w: Tensor, a: Tensor, scratch: Tensor) -> None:
        """Per-tensor path: the norm of the rows so far and this chunk's, hypot(‖so far‖, ‖chunk‖)."""
        for norm, x in zip(statistics, (w, a)):
            torch.hypot(norm, torch.linalg.vector_norm(x, dtype=self.dtype), out=norm)

    def finalize(self, params, statistics, diagnostics=None):
        """Per tensor, ``(ratio,)`` as a 0-d tensor."""
        w_norm, a_norm = (torch.stack(norms) for norms in zip(*statistics))
        if self.max_weight_norm is not None:
            w_norm = w_norm.clamp(max=self.max_weight_norm)
        (ratio,) = guarded_ratios([w_norm], [a_norm])
        return [(r,) for r in nan_to_one(ratio).unbind()]

    def scale(self, factors, rows: slice | None = None, out: Tensor | None = None) -> Tensor:
        return factors[0]


def bias_corrections(steps, opts: StepOptions):
    """Per step tensor, 1 - beta1^t and sqrt(1 - beta2^t) as lists of 0-d tensors (Nones when switched off)."""
    if not opts.bias_correction:
        return [None] * len(steps), [None] * len(steps)
    corrections = torch._foreach_pow(opts.beta1, steps), torch._foreach_pow(opts.beta2, steps)
    for c in corrections:
        torch._foreach_neg_(c)
        torch._foreach_add_(c, 1)
    torch._foreach_sqrt_(corrections[1])
    return corrections


def direction(exp_avg, exp_avg_sq, param, out, opts: StepOptions, bc1=None, bc2_sqrt=None):
    """a = m / (sqrt(v) + eps) + wd * w, written into out (one chunk or one whole tensor)."""
    torch.sqrt(exp_avg_sq, out=out)
    if bc2_sqrt is not None:
        out.div_(bc2_sqrt)
    out.add_(opts.eps)
    torch.div(exp_avg, out, out=out)
    if bc1 is not None:
        out.div_(bc1)
    if opts.weight_decay != 0 and not opts.decoupled_weight_decay:
        out.add_(param, alpha=opts.weight_decay)
    return out


def descend(params, updates, opts: StepOptions):
    """w <- w * (1 - lr*wd if decoupled) - lr * u for lists of tensors; a tensor lr scales u in place first
    (``alpha`` takes numbers only)."""
    if opts.weight_decay != 0 and opts.decoupled_weight_decay:
        torch._foreach_mul_(params, 1 - opts.lr * opts.weight_decay)
    if isinstance(opts.lr, Tensor):
        torch._foreach_mul_(updates, opts.lr)
        torch._foreach_sub_(params, updates)
    else:
        torch._foreach_add_(params, updates, alpha=-opts.lr)


def apply_update(param, update, scale, opts: StepOptions, clip_count=None):
    """w <- w * (1 - lr*wd if decoupled) - lr * clip(scale * update); update is overwritten."""
    update.mul_(scale)
    if clip_count is not None:
        clip_count += (update.abs() > 1).sum()
    if opts.clip:
        update.clamp_(-1.0, 1.0)
    descend([param], [update], opts)


def _update_moments(exp_avg, exp_avg_sq, grad, opts: StepOptions):
    exp_avg.lerp_(grad, 1 - opts.beta1)
    exp_avg_sq.mul_(opts.beta2).addcmul_(grad, grad, value=1 - opts.beta2)


def single_tensor_step(params, grads, exp_avgs, exp_avg_sqs, steps, ratio, opts, diagnostics=None):
    """Per-tensor path: two cache-sized passes over each tensor, recomputing a in the second."""
    for param, grad, exp_avg, exp_avg_sq, step in zip(params, grads, exp_avgs, exp_avg_sqs, steps):
        step += 1
        (bc1,), (bc2_sqrt,) = bias_corrections([step], opts)
        statistics = ratio.new_statistics(param)
        chunks = row_chunks(param, opts.chunk_numel)
        buffer_rows = chunks[0].stop - chunks[0].start
        update_buf = param.new_empty((buffer_rows,) + param.shape[1:])
        scratch = torch.empty_like(update_buf)
        for rows in chunks:
            n = rows.stop - rows.start
            m, v, w = exp_avg[rows], exp_avg_sq[rows], param[rows]
            _update_moments(m, v, grad[rows], opts)
            a = direction(m, v, w, update_buf[:n], opts, bc1, bc2_sqrt)
            ratio.accumulate(statistics, rows, w, a, scratch[:n])
        diag = {} if diagnostics is not None else None
        (factors,) = ratio.finalize([param], [statistics], None if diag is None else [diag])
        clip_count = param.new_zeros((), dtype=torch.int64) if diag is not None else None
        for rows in chunks:
            n = rows.stop - rows.start
            m, v, w = exp_avg[rows], exp_avg_sq[rows], param[rows]
            a = direction(m, v, w, update_buf[:n], opts, bc1, bc2_sqrt)
            apply_update(w, a, ratio.scale(factors, rows, scratch[:n]), opts, clip_count)
        if diag is not None:
            if opts.clip:
                diag["clip_fraction"] = clip_count / param.numel()
            diagnostics[param] = diag


def multi_tensor_step(params, grads, exp_avgs, exp_avg_sqs, steps, ratio, opts, diagnostics=None):
    """Multi-tensor path: moments, directions and updates of all tensors through torch._foreach_* kernels."""
    if not params:
        return
    torch._foreach_add_(steps, 1)
    torch._foreach_lerp_(exp_avgs, grads, 1 - opts.beta1)
    torch._foreach_mul_(exp_avg_sqs, opts.beta2)
    torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1 - opts.beta2)
    bc1, bc2_sqrt = bias_corrections(steps, opts)
    denominators = torch._foreach_sqrt(exp_avg_sqs)
    if opts.bias_correction:
        torch._foreach_div_(denominators, bc2_sqrt)
    torch._foreach_add_(denominators, opts.eps)
    updates = torch._foreach_div(exp_avgs, denominators)
    del denominators
    if opts.bias_correction:
        torch._foreach_div_(updates, bc1)
    if opts.weight_decay != 0 and not opts.decoupled_weight_decay:
        torch._foreach_add_(updates, params, alpha=opts.weight_decay)
    diag = [{} for _ in params] if diagnostics is not None else None
    factors = ratio.finalize(params, ratio.statistics(params, updates), diag)
    torch._foreach_mul_(updates, [ratio.scale(f) for f in factors])
    if diag is not None:
        if opts.clip:
            for d, u in zip(diag, updates):
                d["clip_fraction"] = (u.abs() > 1).sum() / u.numel()
        diagnostics.update(zip(params, diag))
    if opts.clip:
        torch._foreach_clamp_min_(updates, -1.0)
        torch._foreach_clamp_max_(updates, 1.0)
    descend(params, updates, opts)
