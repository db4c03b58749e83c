"""MERIT: Maximum-normalized Element-wise Ratio (Luo et al., ICML 2025)."""

from .base import DEFAULT_CHUNK_NUMEL, TrustRatioOptimizer
from .trust_ratio import MaxNormRatio


class MERIT(TrustRatioOptimizer):
    r"""MERIT, with the semantics of the authors' official ``optim/merit.py``.

    Per tensor ``w`` with gradient ``g``::

        m = β1·m + (1-β1)·g ;  v = β2·v + (1-β2)·g²             (no bias correction)
        a = m / (sqrt(v) + eps) + weight_decay·w                 (L2 decay inside the direction)
        s = max(max(r_i, c_j), b)  for >= 2-D tensors             (row, column and tensor max-norm ratios)
        s = b                      for 1-D tensors
        w = w - lr · clip(s ⊙ a, -1, 1)

    with ``s = 1`` wherever a max-norm in its ratio is zero (see ``MaxNormRatio``). Tensors with
    more than two dims reduce over dim 1 for rows and dim 0 for columns and keep the other dims,
    as the official code does.

    Args:
        params: parameters or param groups.
        lr: learning rate (official default 1e-3); a 0-d tensor when a compiled step's schedule changes it in place.
        betas: (β1, β2) (official default (0.9, 0.999)).
        eps: added to sqrt(v) (official code 1e-6; its docstring says 1e-8).
        weight_decay: L2 coefficient added inside the direction (official default 0).
        elementwise: use row/column ratios (False: the tensor ratio ``b`` alone, Figure 7).
        weight_floor: floor the element-wise ratio by ``b`` (False: Figure 7 ablation).
        clip: clip the scaled step element-wise to [-1, 1] (False: Figure 7 ablation).
        foreach: multi-tensor path (None: on CUDA, and on CPU where every tensor is one chunk; compiled: always).
        chunk_numel: elements per chunk in the per-tensor path (a speed knob; results do not depend on it
            except through float32 summation order, which MERIT's max-norms do not have).
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0,
                 elementwise=True, weight_floor=True, clip=True, foreach=None,
                 chunk_numel=DEFAULT_CHUNK_NUMEL):
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                        elementwise=elementwise, weight_floor=weight_floor, clip=clip,
                        foreach=foreach, chunk_numel=chunk_numel)
        super().__init__(params, defaults)

    def make_ratio(self, group):
        return MaxNormRatio(elementwise=group["elementwise"], weight_floor=group["weight_floor"])
