"""Wall-time requests for training jobs, from each cell's FLOPs at a deliberately low rate, so that a scheduler
never kills a job early."""

from . import flops
from .grid import model_gpus, model_settings


def flops_per_token(config, model):
    """(training FLOPs per token, parameters) of a model variant of the config."""
    return flops.of_cell(model_settings(config, model))


# Training FLOP/s of one cell on one CPU core (one thread), by the count of flops_per_token: the lower end of
# what this project's cells measured on its 2-core machines (the mechanism pilot's demo-small cells 19-30 GFLOP/s
# at contexts 64 and 128, batches 8 and 64; the demo's context-64 cells 40-51), so that no estimate is short.
CPU_FLOPS_PER_CORE = 20e9
# Rates for wall-time requests, deliberately low so jobs are not killed early: 25% of an H100's bf16
# peak per GPU; a CPU core at the lower end above.
GPU_FLOPS_FOR_RUNTIME = 0.25 * 989e12


def runtime_minutes(config, model, tokens):
    gpus = model_gpus(config, model)
    rate = gpus * GPU_FLOPS_FOR_RUNTIME if gpus else CPU_FLOPS_PER_CORE
    seconds = float(tokens) * flops_per_token(config, model)[0] / rate
    return int(10 + 1.2 * seconds / 60)
