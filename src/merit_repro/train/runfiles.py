"""The files of one run directory: its lock, append-only CSV logs that a resumed run rewinds, the text log, and the
summary a run ends with."""

import fcntl
import math
import os
import socket
import time
from pathlib import Path

from merit_repro.utils import UserError, git_commit, library_versions

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


class RunLocked(UserError):
    pass


class RunLock:
    """An exclusive lock on a run directory, held for the life of the process that trains it: a second
    trainer on the same cell (another Snakemake, a manual run) stops at once and names the holder. The
    kernel releases it when the process ends, however it ends."""

    def __init__(self, run_dir):
        self.run_dir = Path(run_dir)
        self.file = None

    def acquire(self):
        self.file = open(self.run_dir / ".lock", "a+")
        try:
            fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.file.seek(0)
            holder = self.file.read().strip() or "another process"
            self.file.close()
            raise RunLocked(f"{self.run_dir} is being trained by {holder}; wait for it to finish (or stop it), "
                            "then run again") from None
        self.file.seek(0)
        self.file.truncate()
        self.file.write(f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        self.file.flush()
        return self

    def release(self):
        if self.file:
            self.file.close()
            self.file = None


class CsvLog:
    """A CSV file written row by row, whose whole text the log also keeps. That text goes into each
    checkpoint and ``start(text)`` restores it on resume, so a resumed run rewrites exactly the rows it
    repeats; and a file deleted while the run goes on (a workflow manager cleaning up a job it thinks
    failed) is written again whole at the next row, never restarted headerless."""

    def __init__(self, path, columns):
        self.path = Path(path)
        self.columns = columns
        self.text = ""

    def start(self, text=None):
        self.text = text if text is not None else ",".join(self.columns) + "\n"
        self._rewrite()

    def _rewrite(self):
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        try:
            tmp.write_text(self.text)
            os.replace(tmp, self.path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    def snapshot(self):
        return self.text

    def write(self, rows):
        lines = "".join(",".join(_format(row.get(c)) for c in self.columns) + "\n" for row in rows)
        self.text += lines
        if not self.path.exists():
            self._rewrite()
            return
        with open(self.path, "a") as f:
            f.write(lines)

    def finish(self):
        """The file as the log knows it, whatever happened to it meanwhile."""
        self._rewrite()


class TextLog:
    """train.log, echoed to stdout while stdout has a reader (a closed pipe stops the echo, not the run)."""

    def __init__(self, path, echo=True):
        self.path = Path(path)
        self.echo = echo

    def __call__(self, message):
        with open(self.path, "a") as f:
            f.write(message + "\n")
        if self.echo:
            try:
                print(message, flush=True)
            except OSError:   # BrokenPipeError: whoever read our output is gone
                self.echo = False


def tokens_per_second(cfg, state):
    """Training tokens a second over the timed steps (start-up, evaluation, probes and checkpoints left out)."""
    return state.timed_steps * cfg.tokens_per_step / state.train_seconds if state.train_seconds else None


def run_summary(cfg, state, status, reason, steps_done, measured):
    """summary.json of a run that ended (without its files' records, which come last). measured: what the run
    measured of its machine and model (Run.measured)."""
    return {
        "status": status, "divergence_reason": reason,
        "final_val_loss": state.last_val_loss if status == "ok" else None,
        "best_val_loss": state.best_val_loss, "initial_val_loss": state.initial_val_loss,
        "eval_interval": cfg.eval_interval,
        "loss_spikes": state.divergence["loss_spikes"], "steps": steps_done, "planned_steps": cfg.steps,
        **cfg.schedule(steps_done or 0),
        "tokens": (steps_done or 0) * cfg.tokens_per_step, "train_seconds": state.train_seconds,
        "timed_steps": state.timed_steps,
        "startup_seconds": state.startup_seconds, "eval_seconds": state.eval_seconds,
        "mal_probe_seconds": state.probe_seconds, "checkpoint_seconds": state.checkpoint_seconds,
        "tokens_per_s": tokens_per_second(cfg, state), **measured, "config": cfg.to_dict(),
        "versions": library_versions(), "git_commit": git_commit(),
    }


def last_step(metrics_text):
    """The last step a metrics.csv's text records (0 with no rows)."""
    lines = metrics_text.splitlines()
    return int(lines[-1].split(",", 1)[0]) if len(lines) > 1 else 0
