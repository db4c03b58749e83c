"""Plain float64 references written from the formulas (../shared/paper/PAPER.md beside the checkout), one tensor
at a time: what tests/test_optim.py and the GPU check's part 7 hold MERIT and LAMB to.

Deliberately naive: whole tensors, explicit loops over rows and columns, no chunks, no foreach. It imports
torch only, none of the package's optimizer code.
"""

import torch


def adam_direction(w, g, m, v, step, *, beta1, beta2, eps, weight_decay, bias_correction=False,
                   decoupled=False):
    m = beta1 * m + (1 - beta1) * g
    v = beta2 * v + (1 - beta2) * g * g
    m_hat, v_hat = m, v
    if bias_correction:
        m_hat = m / (1 - beta1**step)
        v_hat = v / (1 - beta2**step)
    a = m_hat / (v_hat.sqrt() + eps)
    if not decoupled:
        a = a + weight_decay * w
    return a, m, v


def _ratio(num, den):
    return 1.0 if num == 0 or den == 0 else num / den


def merit_scale(w, a, *, elementwise=True, weight_floor=True):
    """s from Algorithm 1 with the official code's zero guard, element by element."""
    if w.dim() < 2 or not elementwise:
        return torch.full_like(w, _ratio(w.abs().max().item(), a.abs().max().item()))
    w3 = w.reshape(w.shape[0], w.shape[1], -1)  # trailing dims are batch dims of both reductions
    a3 = a.reshape_as(w3)
    b_num, b_den = w.abs().max().item(), a.abs().max().item()
    s = torch.empty_like(w3)
    for k in range(w3.shape[2]):
        for i in range(w3.shape[0]):
            for j in range(w3.shape[1]):
                rw, ra = w3[i, :, k].abs().max().item(), a3[i, :, k].abs().max().item()
                cw, ca = w3[:, j, k].abs().max().item(), a3[:, j, k].abs().max().item()
                if 0 in (rw, ra, cw, ca):
                    s[i, j, k] = 1.0
                    continue
                value = max(rw / ra, cw / ca)
                if weight_floor:
                    value = max(value, b_num / b_den)
                s[i, j, k] = value
    return s.reshape_as(w)


def reference_step(kind, w, g, m, v, step, *, lr, beta1, beta2, eps, weight_decay,
                   elementwise=True, weight_floor=True, clip=True, bias_correction=False,
                   decoupled=False, max_weight_norm=10.0):
    """One step of 'merit' (with its switches) or 'lamb' on float64 tensors; returns (w, m, v)."""
    a, m, v = adam_direction(w, g, m, v, step, beta1=beta1, beta2=beta2, eps=eps,
                             weight_decay=weight_decay, bias_correction=bias_correction,
                             decoupled=decoupled)
    if kind == "merit":
        u = merit_scale(w, a, elementwise=elementwise, weight_floor=weight_floor) * a
        if clip:
            u = u.clamp(-1, 1)
    elif kind == "lamb":
        w_norm = w.norm().item()
        if max_weight_norm is not None:
            w_norm = min(w_norm, max_weight_norm)
        u = _ratio(w_norm, a.norm().item()) * a
    else:
        raise ValueError(kind)
    if decoupled:
        w = w * (1 - lr * weight_decay)
    return w - lr * u, m, v


# The reference kind of each optimizer class merit_repro.config.registry names; adamw (torch's) has none here.
KINDS = {"MERIT": "merit", "Lamb": "lamb"}


def variants(registry):
    """name -> (reference kind, reference switches) for every optimizer of the registry (name -> Optimizer)
    whose class the reference implements; the switches are the ones its name fixes."""
    return {name: (KINDS[spec.cls], dict(spec.fixed)) for name, spec in registry.items() if spec.cls in KINDS}
