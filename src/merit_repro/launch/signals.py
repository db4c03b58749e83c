"""SIGTERM and SIGINT passed on to the trainer a launcher started, and outlived once the trainer has ended.

A stop of a job's whole process group (`timeout` on scripts/mechanism_gpu.sh, snakemake stopped with its jobs)
can reach the launcher just after its trainer wrote summary.json and exited 0. Dying of that signal then would
turn a finished cell into a failed job, whose outputs snakemake removes; so after the trainer the launcher ignores
these signals, as the trainer itself does once its exit code is decided (train.stops.outlive_stops), and exits
with the trainer's code a moment later.
"""

import signal
from contextlib import contextmanager

from merit_repro.train.stops import EXIT_CODES, outlive_stops


@contextmanager
def passed_on(send):
    """send(signum) for each SIGTERM or SIGINT this process gets inside the block; ignored after it (for the rest
    of this process, which only exits with the trainer's code: a child started after would inherit that)."""
    for signum in EXIT_CODES:
        signal.signal(signum, lambda received, frame: send(received))
    try:
        yield
    finally:
        outlive_stops()
