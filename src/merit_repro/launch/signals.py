"""SIGTERM and SIGINT passed on to the trainer a launcher started, and outlived once the trainer has ended.

A stop of a job's whole process group (`timeout` on scripts/mechanism_gpu.sh, snakemake stopped with its jobs)
can reach the launcher just after its trainer wrote summary.json and exited 0. Dying of that signal then would
turn a finished cell into a failed job, whose outputs snakemake removes; so after the trainer the launcher ignores
these signals, and exits with the trainer's code a moment later.
"""

import signal
from contextlib import contextmanager

STOPS = (signal.SIGTERM, signal.SIGINT)


@contextmanager
def passed_on(send):
    """send(signum) for each SIGTERM or SIGINT this process gets inside the block; ignored after it (for the rest
    of this process, which only exits with the trainer's code: a child started after would inherit that)."""
    for signum in STOPS:
        signal.signal(signum, lambda received, frame: send(received))
    try:
        yield
    finally:
        for signum in STOPS:
            signal.signal(signum, signal.SIG_IGN)
