"""The torch.optim.Optimizer plumbing shared by MERIT and LAMB: validation, state, dispatch."""

import torch
from torch import Tensor
from torch.optim import Optimizer

from .trust_ratio import StepOptions, multi_tensor_step, single_tensor_step

# Chunks of 2^18 elements (1 MiB in fp32) keep a chunk's moments, weights and buffers in cache.
DEFAULT_CHUNK_NUMEL = 1 << 18


def validate_adam_hparams(lr, betas, eps, weight_decay):
    if isinstance(lr, Tensor) and lr.numel() != 1:
        raise ValueError(f"Invalid learning rate lr={lr}: a tensor lr must have one element")
    if not 0.0 <= lr:
        raise ValueError(f"Invalid learning rate lr={lr}: must be >= 0")
    if not 0.0 <= eps:
        raise ValueError(f"Invalid eps={eps}: must be >= 0")
    if len(betas) != 2:
        raise ValueError(f"Invalid betas={betas}: expected two values (beta1, beta2)")
    for i, beta in enumerate(betas):
        if not 0.0 <= beta < 1.0:
            raise ValueError(f"Invalid beta parameter at index {i}: betas[{i}]={beta}, must be in [0, 1)")
    if not 0.0 <= weight_decay:
        raise ValueError(f"Invalid weight_decay={weight_decay}: must be >= 0")


class TrustRatioOptimizer(Optimizer):
    """Adam moments, a direction, a trust ratio: the part MERIT and LAMB have in common.

    Subclasses set their switches in ``defaults`` and implement ``make_ratio(group)`` (a ratio
    from ``trust_ratio``). State names follow AdamW (``step``, ``exp_avg``, ``exp_avg_sq``).
    ``foreach=None`` picks the multi-tensor path on CUDA, and on the CPU for a group whose every tensor
    fits in one chunk (there the per-tensor path only adds Python dispatches: 2-3x the step time on
    the demo's models); else the cache-chunked per-tensor path. Both give the same results (bit for
    bit for MERIT, and for LAMB where every tensor is one chunk; else up to float rounding of its
    norms). Set ``track_diagnostics = True`` before a step to get, per parameter, the fraction
    of elements clipped and of elements where MERIT's tensor-level floor binds, as 0-d tensors
    in ``self.diagnostics`` (ordinary steps pay nothing for this).

    ``torch.compile(opt.step)`` works (the multi-tensor path, fused by the compiler): ``step`` keeps
    everything that changes in ``state`` (``step`` is a tensor), sets no attribute on the optimizer
    and reads no tensor's value in Python. ``lr`` may be a 0-d tensor (on the parameters' device),
    as for torch's optimizers: a schedule that updates it in place (``group["lr"].fill_(x)``) then
    does not recompile the step, as a new float each step would.
    """

    def __init__(self, params, defaults):
        validate_adam_hparams(defaults["lr"], defaults["betas"], defaults["eps"], defaults["weight_decay"])
        if not defaults.get("chunk_numel", 1) >= 1:
            raise ValueError(f"Invalid chunk_numel={defaults['chunk_numel']}: must be >= 1")
        super().__init__(params, defaults)
        self.track_diagnostics = False
        self.diagnostics = {}

    def __setstate__(self, state):
        super().__setstate__(state)
        for group in self.param_groups:
            for key, value in self.defaults.items():
                group.setdefault(key, value)
        for param, param_state in self.state.items():   # load_state_dict leaves step where it was saved (CPU)
            if "step" in param_state:
                param_state["step"] = param_state["step"].to(param.device, torch.float32, copy=True)

    def make_ratio(self, group):
        raise NotImplementedError

    def _gather(self, group):
        params, grads, exp_avgs, exp_avg_sqs, steps = [], [], [], [], []
        for p in group["params"]:
            if p.grad is None:
                continue
            if p.grad.is_sparse:
                raise RuntimeError(
                    f"{type(self).__name__} does not support sparse gradients; "
                    "use dense gradients (e.g. nn.Embedding(sparse=False))"
                )
            state = self.state[p]
            if len(state) == 0:
                state["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
                state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            params.append(p)
            grads.append(p.grad)
            exp_avgs.append(state["exp_avg"])
            exp_avg_sqs.append(state["exp_avg_sq"])
            steps.append(state["step"])
        return params, grads, exp_avgs, exp_avg_sqs, steps

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        diagnostics = self.diagnostics if self.track_diagnostics else None
        if diagnostics is not None:
            diagnostics.clear()   # filled in place: a compiled step cannot set attributes on the optimizer
        for group in self.param_groups:
            tensors = self._gather(group)
            if not tensors[0]:
                continue
            impl = multi_tensor_step if uses_multi_tensor(group, tensors[0]) else single_tensor_step
            impl(*tensors, self.make_ratio(group), step_options(group), diagnostics)
        return loss


def uses_multi_tensor(group, params):
    """The group's ``foreach``, where None means on CUDA or when no tensor has more than one chunk; always
    when compiled (see trust_ratio)."""
    if torch.compiler.is_compiling():
        return True
    if group["foreach"] is not None:
        return group["foreach"]
    return params[0].is_cuda or max(p.numel() for p in params) <= group["chunk_numel"]


def step_options(group):
    beta1, beta2 = group["betas"]
    return StepOptions(
        lr=group["lr"], beta1=beta1, beta2=beta2, eps=group["eps"], weight_decay=group["weight_decay"],
        decoupled_weight_decay=group.get("decoupled_weight_decay", False),
        bias_correction=group.get("bias_correction", False), clip=group.get("clip", False),
        chunk_numel=group["chunk_numel"],
    )
