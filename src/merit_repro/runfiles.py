"""The files of one run directory: append-only CSV logs that a resumed run rewinds, and the text log."""

import math
import os
from pathlib import Path

METRICS_COLUMNS = ["step", "tokens", "lr", "train_loss", "val_loss", "grad_norm", "tokens_per_s",
                   "clip_fraction", "floor_fraction"]
MAL_COLUMNS = ["step", "layer", "head", "mal", "wq_max", "wk_max"]
DIAGNOSTICS_COLUMNS = ["step", "param", "clip_fraction", "floor_fraction"]
# Columns that measure the machine, not the model: they differ between identical runs.
TIMING_COLUMNS = ["tokens_per_s"]


def _format(value):
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else str(value)
    return str(value)


class CsvLog:
    """A CSV file written row by row. Its text up to a step is kept in that step's checkpoint, and
    ``start(text)`` restores it on resume: a resumed run rewrites exactly the rows it repeats, even
    when a workflow manager deleted the files of the failed job."""

    def __init__(self, path, columns):
        self.path = Path(path)
        self.columns = columns

    def start(self, text=None):
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        tmp.write_text(text if text is not None else ",".join(self.columns) + "\n")
        os.replace(tmp, self.path)

    def snapshot(self):
        return self.path.read_text()

    def write(self, rows):
        with open(self.path, "a") as f:
            for row in rows:
                f.write(",".join(_format(row.get(c)) for c in self.columns) + "\n")


class TextLog:
    def __init__(self, path, echo=True):
        self.path = Path(path)
        self.echo = echo

    def __call__(self, message):
        if self.echo:
            print(message, flush=True)
        with open(self.path, "a") as f:
            f.write(message + "\n")
