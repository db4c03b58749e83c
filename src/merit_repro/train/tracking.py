"""Optional live tracking: a run's CSV rows, also sent to TensorBoard, Weights & Biases or Trackio as it trains.

The CSVs (metrics.csv, mal.csv, diagnostics.csv) stay the source of truth; a tracker gets the same rows, as
scalars at each row's ``step``, tagged ``<file>/<the row's identifying columns>/<column>``:

    metrics/val_loss                                  every numeric column of metrics.csv but step
    mal/layer1/head2/mal, mal/layer1/head2/wq_max     mal.csv, by layer and head (1-based)
    diagnostics/transformer.h.0.mlp.c_fc.weight/clip_fraction    diagnostics.csv, by parameter

The workflow's ``tracking`` config reaches the trainer as the environment variable MERIT_TRACKING (JSON, set by
the launcher's --tracking, a resource of the train rule), never as part of a cell's config: switching it on
retrains nothing.
By hand, the trainer reads the same variable (a backend name alone will do):

    MERIT_TRACKING='{"backend": "tensorboard"}' python -m merit_repro.train --config cell.yaml --out DIR
    tensorboard --logdir DIR/tensorboard

Only rank 0 tracks. A resumed run goes on logging from its checkpoint's step, so the steps between that
checkpoint and the stop are logged twice: TensorBoard shows both, W&B ignores a step lower than one it has
seen; the CSVs, rewound on resume, hold each step once.
"""

import importlib.util
import json
import os
from pathlib import Path

from merit_repro.plan import paths
from merit_repro.utils import UserError, parse_data

from .runfiles import DIAGNOSTICS_COLUMNS, MAL_COLUMNS, METRICS_COLUMNS

ENV = "MERIT_TRACKING"
PACKAGES = {"none": None, "tensorboard": "tensorboard", "wandb": "wandb", "trackio": "trackio"}
COLUMNS = {"metrics": METRICS_COLUMNS, "mal": MAL_COLUMNS, "diagnostics": DIAGNOSTICS_COLUMNS}
KEYS = {"metrics": (), "mal": ("layer", "head"), "diagnostics": ("param",)}   # what names a row besides its step


def scalars(kind, row):
    """{tag: value} of the numbers of one row of the CSV `kind`."""
    prefix = "/".join([kind, *(str(row[k]) if k == "param" else f"{k}{row[k]}" for k in KEYS[kind])])
    return {f"{prefix}/{c}": row[c] for c in COLUMNS[kind] if c != "step" and c not in KEYS[kind]
            and isinstance(row.get(c), (int, float)) and not isinstance(row[c], bool)}


class Tracker:
    """The interface, and the `none` backend: `log(kind, rows)` with the rows of one CSV, then `close()`."""

    def log(self, kind, rows):
        by_step = {}
        for row in rows:
            by_step.setdefault(row["step"], {}).update(scalars(kind, row))
        for step, values in by_step.items():
            if values:
                self.write(step, values)

    def write(self, step, values):
        """One step's {tag: value} to the backend."""

    def close(self):
        pass


class TensorBoard(Tracker):
    def __init__(self, project, name, config, run_dir):
        from torch.utils.tensorboard import SummaryWriter
        self.writer = SummaryWriter(str(Path(run_dir) / "tensorboard"))

    def write(self, step, values):
        for tag, value in values.items():
            self.writer.add_scalar(tag, value, step)

    def close(self):
        self.writer.close()


class WandB(Tracker):
    """Offline (synced later with `wandb sync`) unless WANDB_MODE says otherwise."""

    def __init__(self, project, name, config, run_dir):
        import wandb
        self.run = wandb.init(project=project, name=name, config=config, dir=str(run_dir),
                              mode=os.environ.get("WANDB_MODE", "offline"))

    def write(self, step, values):
        self.run.log(values, step=step)

    def close(self):
        self.run.finish()


class Trackio(Tracker):
    """Local-first: `trackio show` opens the dashboard."""

    def __init__(self, project, name, config, run_dir):
        import trackio
        self.trackio = trackio
        trackio.init(project=project, name=name, config=config)

    def write(self, step, values):
        self.trackio.log(values, step=step)

    def close(self):
        self.trackio.finish()


BACKENDS = {"tensorboard": TensorBoard, "wandb": WandB, "trackio": Trackio}


def check_available(backend):
    """Raise UserError when the backend is unknown or its package is not installed (nothing is imported)."""
    if not isinstance(backend, str) or backend not in PACKAGES:
        raise UserError(f"tracking backend {backend!r} is unknown; known backends: {', '.join(PACKAGES)}")
    package = PACKAGES[backend]
    if package and importlib.util.find_spec(package) is None:
        raise UserError(f"tracking backend {backend} needs the {package} package, which is not installed: "
                        f"pip install {package} (or set tracking.backend: none)")


def run_name(run_dir):
    """The cell's path under runs/ (as the workflow lays runs out), else the run directory's name."""
    return paths.cell_of_run(run_dir) or Path(run_dir).absolute().name


def from_environment(run_dir, config):
    """The tracker MERIT_TRACKING asks for ({"backend": ..., "project": ...} or a backend name; unset: none)."""
    text = os.environ.get(ENV, "").strip()
    try:
        settings = parse_data(text, ENV) if text.startswith("{") else {"backend": text or "none"}
    except json.JSONDecodeError as err:
        raise UserError(f"{ENV}={text!r} is not JSON ({err.msg}); e.g. '{{\"backend\": \"tensorboard\"}}'") from None
    if not isinstance(settings, dict) or not isinstance(settings.get("project", ""), str):
        raise UserError(f"{ENV}={text!r} is not {{\"backend\": NAME, \"project\": NAME}}; e.g. "
                        "'{\"backend\": \"tensorboard\"}'")
    backend = settings.get("backend", "none")
    check_available(backend)
    if backend == "none":
        return Tracker()
    return BACKENDS[backend](settings.get("project", "merit-repro"), run_name(run_dir), config, run_dir)
