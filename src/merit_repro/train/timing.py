"""Timing steps on a device, one way for the trainer, the GPU check and the benchmarks: the device's queue drained
before a clock is read (``synchronize``), the first steps left out (compilation, allocation, warm-up), and any clock
(the wall's by default; a benchmark on a shared machine reads its own CPU time with ``time.process_time``)."""

import contextlib
import time
from dataclasses import dataclass

import torch


def synchronize(device):
    """Wait for the device's queued work (a no-op on the CPU, which runs eagerly)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def device_name(device):
    """The GPU's name (what merit_repro.train.hardware.peak_flops looks up), or "cpu"."""
    return torch.cuda.get_device_name(device) if torch.device(device).type == "cuda" else "cpu"


def autocast(device, enabled=True):
    """bf16 autocast on the device, or a context that does nothing."""
    return torch.autocast(torch.device(device).type, dtype=torch.bfloat16) if enabled else contextlib.nullcontext()


@dataclass
class Timed:
    seconds_per_step: float   # on the clock, over the timed steps
    result: object            # the last step's return value
    warmup_seconds: float     # on the clock, the untimed steps


def time_steps(step, steps, device, warmup=1, clock=time.perf_counter):
    """step() `warmup` times untimed, then `steps` times timed (>= 1), the device drained before each reading."""
    if steps < 1:
        raise ValueError(f"steps={steps}: at least one step must be timed")
    result = None
    t0 = clock()
    for _ in range(warmup):
        result = step()
    synchronize(device)
    start = clock()
    for _ in range(steps):
        result = step()
    synchronize(device)
    return Timed((clock() - start) / steps, result, start - t0)
