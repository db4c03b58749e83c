"""Count the aten operators a piece of code dispatches, and those that would move data between host and
device on CUDA (a sync or a copy): ``with DispatchCounter() as counter: opt.step()``.

Host transfers counted:

- ``_local_scalar_dense``: ``.item()``, ``bool(t)``, ``float(t)``, Python control flow on a tensor;
- ``equal``: returns a Python bool;
- ``lift_fresh``: a tensor from Python data (``torch.tensor``, ``t.new_tensor``), copied to the device;
- ``nonzero``, ``masked_select``, and indexing with boolean masks: the output size is read back;
- ``_to_copy`` and ``copy_`` whose source and destination devices differ.

Without ``host``, every tensor stands for a device tensor, so a run on the CPU counts what would sync on
CUDA. With ``host=torch.device("cpu")`` (a run on CUDA), ops on host tensors only do not count. A Python
number given to an op (``x.add_(1.0)``, ``torch.where(c, x, 1.0)``) is a kernel argument, not a transfer.
"""

from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

aten = torch.ops.aten
SYNCING = {aten._local_scalar_dense, aten.equal, aten.lift_fresh, aten.lift_fresh_copy, aten.nonzero,
           aten.masked_select}
INDEXING = {aten.index, aten.index_put, aten.index_put_, aten._index_put_impl_}


def is_host_transfer(func, args, kwargs, host=None) -> bool:
    packet = func.overloadpacket
    if packet is aten._to_copy:
        return kwargs.get("device") is not None and torch.device(kwargs["device"]) != args[0].device
    if packet is aten.copy_:
        return args[0].device != args[1].device
    tensors = [x for x in tree_leaves((args, kwargs)) if isinstance(x, torch.Tensor)]
    if host is not None and all(t.device == host for t in tensors):
        return False
    if packet in INDEXING:
        return any(t.dtype == torch.bool for t in tree_leaves(args[1]) if isinstance(t, torch.Tensor))
    return packet in SYNCING


class DispatchCounter(TorchDispatchMode):
    """Counts the aten ops dispatched inside the ``with`` block: ``ops``, ``host_transfers`` (see the
    module docstring) and, by op name, ``by_op`` and ``transfers_by_op``."""

    def __init__(self, host: torch.device | None = None):
        super().__init__()
        self.host = host
        self.ops = 0
        self.host_transfers = 0
        self.by_op = Counter()
        self.transfers_by_op = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.ops += 1
        self.by_op[str(func.overloadpacket)] += 1
        if is_host_transfer(func, args, kwargs, self.host):
            self.host_transfers += 1
            self.transfers_by_op[str(func.overloadpacket)] += 1
        return func(*args, **kwargs)


def count_step(opt, host: torch.device | None = None) -> DispatchCounter:
    """The counter of one ``opt.step()`` (call it after a first step, which allocates the state)."""
    with DispatchCounter(host) as counter:
        opt.step()
    return counter
