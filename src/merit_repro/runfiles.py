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
    """A CSV file written row by row. ``start(resume_step)`` truncates it to the rows of steps <= that
    step (dropping any half-written last line), so a resumed run rewrites exactly what it repeats."""

    def __init__(self, path, columns):
        self.path = Path(path)
        self.columns = columns

    def start(self, resume_step=None):
        header = ",".join(self.columns) + "\n"
        keep = [header]
        if resume_step is not None and self.path.exists():
            for line in self.path.read_text().splitlines(keepends=True)[1:]:
                if line.endswith("\n") and int(line.split(",", 1)[0]) <= resume_step:
                    keep.append(line)
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        tmp.write_text("".join(keep))
        os.replace(tmp, self.path)

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
