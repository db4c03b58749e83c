"""Wall-time requests for training jobs, from each cell's FLOPs at a deliberately low rate, so that a scheduler
never kills a job early."""

from . import flops
from .grid import cell_config, model_gpus


def flops_per_token(config, model):
    """(training FLOPs per token, parameters) of a model variant of the config."""
    return flops.of_cell(cell_config(config, model, 1, "adamw", 1, 1e-3, 0))


# Rates for wall-time requests, deliberately low so jobs are not killed early: 25% of an H100's bf16
# peak per GPU; a CPU is counted at 20 GFLOP/s.
GPU_FLOPS_FOR_RUNTIME = 0.25 * 989e12
CPU_FLOPS_FOR_RUNTIME = 20e9


def runtime_minutes(config, model, tokens):
    gpus = model_gpus(config, model)
    rate = gpus * GPU_FLOPS_FOR_RUNTIME if gpus else CPU_FLOPS_FOR_RUNTIME
    seconds = float(tokens) * flops_per_token(config, model)[0] / rate
    return int(10 + 1.2 * seconds / 60)
