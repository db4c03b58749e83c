"""Functional core shared by MERIT and LAMB.

Both optimizers take an Adam direction ``a = m / (sqrt(v) + eps) + wd * w`` (no bias correction
by default, L2 decay inside the direction) and scale it by a trust ratio built from norms of the
weight ``w`` and of ``a``. They differ only in the ratio:

- ``MaxNormRatio`` (MERIT): max-norms per tensor, per row (dim-0 index) and per column (dim-1
  index), combined element-wise as ``max(max(r_i, c_j), b)`` with the official zero guard.
- ``L2NormRatio`` (LAMB): ``‖w‖₂ / ‖a‖₂`` per tensor, ``‖w‖₂`` optionally capped.

A ratio needs statistics of the whole tensor before any element is updated, so every step makes
two passes: one that updates the moments and gathers statistics, one that applies the update.
The per-tensor path walks each tensor in row chunks small enough to stay in cache and recomputes
``a`` in the second pass instead of storing it, which brings the memory traffic close to the
two-pass floor on CPU. The multi-tensor path computes ``a`` for all tensors with ``torch._foreach_*``
kernels (the fast choice on CUDA). Statistics are reduced over the same chunks in both paths, so
the two give bit-identical results.

Nothing here calls ``.item()``: zero guards and diagnostics stay on the device.
"""

import math
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class StepOptions:
    """Hyperparameters of one param group, resolved for one step."""

    lr: float
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


class MaxNormRatio:
    """MERIT's trust ratio from max-norms (Algorithm 1 and the official code).

    For a tensor with >= 2 dims and ``elementwise`` on: ``r_i = max_j|w_ij| / max_j|a_ij|`` (a
    reduction over dim 1), ``c_j = max_i|w_ij| / max_i|a_ij|`` (over dim 0), ``b = ‖w‖_m / ‖a‖_m``,
    ``s_ij = max(max(r_i, c_j), b)``, and ``s_ij = 1`` where any of the four maxima is zero.
    Dims beyond the second are kept as batch dims of both reductions, exactly as the official
    code's ``amax(dim=1)`` / ``amax(dim=0)`` do. Otherwise (1-D tensors, or ``elementwise`` off)
    the ratio is ``b`` alone, 1 when either max is zero.
    """

    def __init__(self, param: Tensor, elementwise: bool = True, weight_floor: bool = True):
        self.matrix = elementwise and param.dim() >= 2
        self.weight_floor = weight_floor
        if self.matrix:
            row_shape = param.shape[:1] + param.shape[2:]
            self.row_w = param.new_empty(row_shape)
            self.row_a = param.new_empty(row_shape)
            self.col_w = param.new_zeros(param.shape[1:])
            self.col_a = param.new_zeros(param.shape[1:])
        else:
            self.max_w = param.new_zeros(())
            self.max_a = param.new_zeros(())

    def accumulate(self, rows: slice, w: Tensor, a: Tensor, scratch: Tensor) -> None:
        for x, row_max, col_max in ((w, "row_w", "col_w"), (a, "row_a", "col_a")):
            x_abs = torch.abs(x, out=scratch)
            if self.matrix:
                torch.amax(x_abs, dim=1, out=getattr(self, row_max)[rows])
                torch.maximum(getattr(self, col_max), x_abs.amax(dim=0), out=getattr(self, col_max))
            else:
                name = "max_w" if row_max == "row_w" else "max_a"
                torch.maximum(getattr(self, name), x_abs.amax(), out=getattr(self, name))

    def finalize(self, track_diagnostics: bool) -> dict:
        diagnostics = {}
        if not self.matrix:
            zero = (self.max_w == 0) | (self.max_a == 0)
            self.ratio = torch.where(zero, torch.ones_like(self.max_w), self.max_w / self.max_a)
            return diagnostics
        tensor_ratio = self.row_w.amax() / self.row_a.amax()
        row_ratio = self.row_w / self.row_a
        col_ratio = self.col_w / self.col_a
        row_zero = (self.row_w == 0) | (self.row_a == 0)
        col_zero = (self.col_w == 0) | (self.col_a == 0)
        if track_diagnostics and self.weight_floor:
            # The floor binds at (i, j) iff r_i < b and c_j < b, so the count factorises.
            rows_below = ((row_ratio < tensor_ratio) & ~row_zero).sum(0)
            cols_below = ((col_ratio < tensor_ratio) & ~col_zero).sum(0)
            numel = self.row_w.numel() * self.col_w.shape[0]
            diagnostics["floor_fraction"] = (rows_below * cols_below).sum() / numel
        if self.weight_floor:  # max(max(r, c), b) == max(max(r, b), c)
            row_ratio = torch.maximum(row_ratio, tensor_ratio)
        # NaN marks a zero-guarded row or column: torch.maximum propagates it to every element
        # of that row/column, and scale() turns it into the guard's ratio of 1.
        nan = row_ratio.new_tensor(math.nan)
        self.row_ratio = torch.where(row_zero, nan, row_ratio).unsqueeze(1)
        self.col_ratio = torch.where(col_zero, nan, col_ratio).unsqueeze(0)
        return diagnostics

    def scale(self, rows: slice, scratch: Tensor) -> Tensor:
        if not self.matrix:
            return self.ratio
        s = torch.maximum(self.row_ratio[rows], self.col_ratio, out=scratch)
        return s.nan_to_num_(nan=1.0, posinf=math.inf, neginf=-math.inf)


class L2NormRatio:
    """LAMB's trust ratio ``‖w‖₂ / ‖a‖₂`` per tensor, 1 when either norm is zero.

    ``max_weight_norm`` caps ``‖w‖₂`` (10 in cybertronai's pytorch-lamb and torch_optimizer;
    None for no cap). Squares are summed in at least float32, over the same chunks in both paths.
    """

    def __init__(self, param: Tensor, max_weight_norm: float | None = 10.0):
        self.max_weight_norm = max_weight_norm
        self.dtype = torch.promote_types(param.dtype, torch.float32)
        self.sumsq_w = param.new_zeros((), dtype=self.dtype)
        self.sumsq_a = param.new_zeros((), dtype=self.dtype)

    def accumulate(self, rows: slice, w: Tensor, a: Tensor, scratch: Tensor) -> None:
        self.sumsq_w += torch.linalg.vector_norm(w, dtype=self.dtype).square()
        self.sumsq_a += torch.linalg.vector_norm(a, dtype=self.dtype).square()

    def finalize(self, track_diagnostics: bool) -> dict:
        w_norm = self.sumsq_w.sqrt()
        if self.max_weight_norm is not None:
            w_norm = w_norm.clamp(max=self.max_weight_norm)
        a_norm = self.sumsq_a.sqrt()
        zero = (w_norm == 0) | (a_norm == 0)
        self.ratio = torch.where(zero, torch.ones_like(w_norm), w_norm / a_norm)
        return {}

    def scale(self, rows: slice, scratch: Tensor) -> Tensor:
        return self.ratio


def bias_corrections(step: Tensor, opts: StepOptions):
    """(1 - beta1^t, sqrt(1 - beta2^t)) as 0-d tensors, or (None, None) when switched off."""
    if not opts.bias_correction:
        return None, None
    return 1 - opts.beta1**step, (1 - opts.beta2**step).sqrt()


def direction(exp_avg, exp_avg_sq, param, out, opts: StepOptions, bc1=None, bc2_sqrt=None):
    """a = m / (sqrt(v) + eps) + wd * w, written into out (one chunk or one whole tensor)."""
    torch.sqrt(exp_avg_sq, out=out)
    if bc2_sqrt is not None:
        out.div_(bc2_sqrt.to(out.dtype))
    out.add_(opts.eps)
    torch.div(exp_avg, out, out=out)
    if bc1 is not None:
        out.div_(bc1.to(out.dtype))
    if opts.weight_decay != 0 and not opts.decoupled_weight_decay:
        out.add_(param, alpha=opts.weight_decay)
    return out


def apply_update(param, update, scale, opts: StepOptions, clip_count=None):
    """w <- w * (1 - lr*wd if decoupled) - lr * clip(scale * update); update is overwritten."""
    update.mul_(scale)
    if clip_count is not None:
        clip_count += (update.abs() > 1).sum()
    if opts.clip:
        update.clamp_(-1.0, 1.0)
    if opts.weight_decay != 0 and opts.decoupled_weight_decay:
        param.mul_(1 - opts.lr * opts.weight_decay)
    param.add_(update, alpha=-opts.lr)


def _update_moments(exp_avg, exp_avg_sq, grad, opts: StepOptions):
    exp_avg.lerp_(grad, 1 - opts.beta1)
    exp_avg_sq.mul_(opts.beta2).addcmul_(grad, grad, value=1 - opts.beta2)


def single_tensor_step(params, grads, exp_avgs, exp_avg_sqs, steps, make_ratio, opts, diagnostics=None):
    """Per-tensor path: two cache-sized passes over each tensor, recomputing a in the second."""
    for param, grad, exp_avg, exp_avg_sq, step in zip(params, grads, exp_avgs, exp_avg_sqs, steps):
        step += 1
        bc1, bc2_sqrt = bias_corrections(step, opts)
        ratio = make_ratio(param)
        chunks = row_chunks(param, opts.chunk_numel)
        buffer_rows = chunks[0].stop - chunks[0].start
        update_buf = param.new_empty((buffer_rows,) + param.shape[1:])
        scratch = torch.empty_like(update_buf)
        for rows in chunks:
            n = rows.stop - rows.start
            m, v, w = exp_avg[rows], exp_avg_sq[rows], param[rows]
            _update_moments(m, v, grad[rows], opts)
            a = direction(m, v, w, update_buf[:n], opts, bc1, bc2_sqrt)
            ratio.accumulate(rows, w, a, scratch[:n])
        diag = ratio.finalize(diagnostics is not None)
        clip_count = param.new_zeros((), dtype=torch.int64) if diagnostics is not None else None
        for rows in chunks:
            n = rows.stop - rows.start
            m, v, w = exp_avg[rows], exp_avg_sq[rows], param[rows]
            a = direction(m, v, w, update_buf[:n], opts, bc1, bc2_sqrt)
            apply_update(w, a, ratio.scale(rows, scratch[:n]), opts, clip_count)
        if diagnostics is not None:
            if opts.clip:
                diag["clip_fraction"] = clip_count / param.numel()
            diagnostics[param] = diag


def multi_tensor_step(params, grads, exp_avgs, exp_avg_sqs, steps, make_ratio, opts, diagnostics=None):
    """Multi-tensor path: moments and directions of all tensors through torch._foreach_* kernels."""
    if not params:
        return
    torch._foreach_add_(steps, 1)
    torch._foreach_lerp_(exp_avgs, grads, 1 - opts.beta1)
    torch._foreach_mul_(exp_avg_sqs, opts.beta2)
    torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1 - opts.beta2)
    denominators = torch._foreach_sqrt(exp_avg_sqs)
    corrections = [bias_corrections(step, opts) for step in steps]
    if opts.bias_correction:
        for d, (_, bc2_sqrt) in zip(denominators, corrections):
            d.div_(bc2_sqrt.to(d.dtype))
    torch._foreach_add_(denominators, opts.eps)
    updates = torch._foreach_div(exp_avgs, denominators)
    del denominators
    if opts.bias_correction:
        for u, (bc1, _) in zip(updates, corrections):
            u.div_(bc1.to(u.dtype))
    if opts.weight_decay != 0 and not opts.decoupled_weight_decay:
        torch._foreach_add_(updates, params, alpha=opts.weight_decay)
    scales = []
    for param, a in zip(params, updates):
        ratio = make_ratio(param)
        scratch = torch.empty_like(a)
        for rows in row_chunks(param, opts.chunk_numel):
            ratio.accumulate(rows, param[rows], a[rows], scratch[rows])
        diag = ratio.finalize(diagnostics is not None)
        scales.append(ratio.scale(slice(None), scratch))
        if diagnostics is not None:
            diagnostics[param] = diag
    for u, s in zip(updates, scales):  # 0-d and full-size scales mixed: no foreach broadcast
        u.mul_(s)
    if diagnostics is not None and opts.clip:
        for param, u in zip(params, updates):
            diagnostics[param]["clip_fraction"] = (u.abs() > 1).sum() / param.numel()
    if opts.clip:
        torch._foreach_clamp_min_(updates, -1.0)
        torch._foreach_clamp_max_(updates, 1.0)
    if opts.weight_decay != 0 and opts.decoupled_weight_decay:
        torch._foreach_mul_(params, 1 - opts.lr * opts.weight_decay)
    torch._foreach_add_(params, updates, alpha=-opts.lr)
