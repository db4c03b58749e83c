"""Pilots: runs that fix a setting before the runs it judges, on seeds that never choose an LR or report.

Shared by ``scripts/pilot_target.py`` (Figure 1's targets) and ``scripts/mechanism_pilot.py`` (the mechanism
experiment's setting). A pilot's runs go to ``<results>/pilot/...`` and resume like any cell.
"""

from concurrent.futures import ProcessPoolExecutor

from merit_repro.plan import grid
from merit_repro.utils import UserError


def refuse_reporting_seeds(config, seeds):
    """A UserError if any pilot seed is a grid, claim or curve seed of any experiment of the config."""
    taken = {s for name in config["experiments"]
             for s in grid.grid_seeds(config, name) + grid.claim_seeds(config, name) + grid.curve_seeds(config, name)}
    if taken & set(seeds):
        raise UserError(f"pilot seeds {sorted(taken & set(seeds))} are grid, claim or curve seeds of the config; give "
                        "others with --seeds (a pilot's seeds never choose or report)")


def train_one(job):
    """(cell settings, run folder) -> the run's summary.json as a dict (one thread: pilots run cells side by side)."""
    settings, out_dir = job
    import torch

    from merit_repro.plan.cell import CellConfig
    from merit_repro.train.loop import train
    torch.set_num_threads(1)
    settings = {**settings, "betas": tuple(settings["betas"])} if "betas" in settings else settings
    return train(CellConfig(**settings).validate(), out_dir)


def train_all(jobs, n_jobs):
    """{key: (settings, run folder)} -> {key: summary}, n_jobs cells at a time."""
    with ProcessPoolExecutor(n_jobs) as pool:
        return dict(zip(jobs, pool.map(train_one, jobs.values())))
