"""LAMB (You et al., 2020) with the semantics of cybertronai's pytorch-lamb by default."""

from .base import DEFAULT_CHUNK_NUMEL, TrustRatioOptimizer
from .trust_ratio import L2NormRatio


class Lamb(TrustRatioOptimizer):
    r"""LAMB. Defaults follow cybertronai's pytorch-lamb, the file the official MERIT code edits::

        m = β1·m + (1-β1)·g ;  v = β2·v + (1-β2)·g²             (no bias correction)
        a = m / (sqrt(v) + eps) + weight_decay·w                 (L2 decay inside the direction)
        w = w - lr · min(‖w‖₂, 10) / ‖a‖₂ · a                     (ratio 1 when either norm is 0)

    Implementations disagree; the switches where they differ:

    - ``bias_correction=True``: Adam bias correction of m and v (timm, the LAMB paper's Algorithm 2).
    - ``decoupled_weight_decay=True``: ``w *= 1 - lr·weight_decay`` outside the ratio
      (AdamW-style, as in some libraries) instead of L2 inside the direction.
    - ``max_weight_norm``: the cap on ‖w‖₂ (10 here and in torch_optimizer; ``None`` for none).

    timm's Lamb also clips the global gradient norm inside the optimizer; here the trainer clips
    gradients for every optimizer alike, so the optimizer does not.
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0,
                 bias_correction=False, decoupled_weight_decay=False, max_weight_norm=10.0,
                 foreach=None, chunk_numel=DEFAULT_CHUNK_NUMEL):
        if max_weight_norm is not None and not max_weight_norm > 0:
            raise ValueError(f"Invalid max_weight_norm={max_weight_norm}: must be > 0 or None")
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                        bias_correction=bias_correction, decoupled_weight_decay=decoupled_weight_decay,
                        max_weight_norm=max_weight_norm, clip=False, foreach=foreach,
                        chunk_numel=chunk_numel)
        super().__init__(params, defaults)

    def make_ratio(self, group):
        return L2NormRatio(group["params"], max_weight_norm=group["max_weight_norm"])
