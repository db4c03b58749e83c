"""Signum (Bernstein et al., 2018, "signSGD: compressed optimisation for non-convex problems"): each weight moves
by lr times the sign of its gradient's momentum, with decoupled weight decay as AdamW's."""

import torch


class Signum(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-3, momentum=0.9, weight_decay=0.0):
        if not lr > 0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"Invalid momentum: {momentum}")
        if not weight_decay >= 0.0:
            raise ValueError(f"Invalid weight_decay: {weight_decay}")
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["momentum_buffer"] = torch.zeros_like(p)
                buf = state["momentum_buffer"]
                buf.mul_(group["momentum"]).add_(p.grad, alpha=1 - group["momentum"])
                p.mul_(1 - group["lr"] * group["weight_decay"])
                p.add_(buf.sign(), alpha=-group["lr"])
        return loss
