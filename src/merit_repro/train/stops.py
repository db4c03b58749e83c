"""When a run stops before its end, and how every rank comes to the same step for it.

Three things stop or interrupt a run between steps, each checked after every step and agreed over the ranks'
host group (``distributed.HostAgreement``: no GPU synchronisation):

    a signal       SIGTERM or SIGINT (a scheduler's preemption, ctrl-C): checkpoint and exit 143 or 130, so that a
                   scheduler retries the job and it resumes; ranks given different signals take the largest code;
    the deadline   the job's time budget (``--stop-at``, epoch seconds): when one more step and a checkpoint would
                   end after it, checkpoint and exit EXIT_TIME_BUDGET (75, EX_TEMPFAIL), for the next job to resume;
                   the step is timed as the time since the last check, the save as the last one (or estimated from
                   the bytes it writes until one is timed);
    a checkpoint   due every ``checkpoint_every`` steps or ``checkpoint_every_minutes`` minutes.

At the last step finishing is cheaper than a checkpoint or a stop at the deadline, so neither fires there (a signal
still stops the run: the scheduler is taking the job back).
"""

import signal
import time

EXIT_CODES = {signal.SIGTERM: 143, signal.SIGINT: 130}
EXIT_TIME_BUDGET = 75   # EX_TEMPFAIL: stopped at its time budget with a checkpoint; the next job resumes
# Until a checkpoint of this job has been timed, its save is estimated at this rate (a single stream to a busy
# parallel file system), so that a stop before the job's end leaves it time to save.
ASSUMED_SAVE_BYTES_PER_SECOND = 200e6


def outlive_stops():
    """SIGTERM and SIGINT ignored for the rest of this process, whose exit code is decided (a finished cell's, or a
    stop's). Python puts their default action back as it shuts down (a torch process takes a while), and a stop of a
    job's whole process group (`timeout`, snakemake stopped with its jobs) in that moment would kill it: a finished
    cell would become a failed job, whose outputs snakemake removes."""
    for signum in EXIT_CODES:
        signal.signal(signum, signal.SIG_IGN)


class Stop(Exception):
    """Raised when a signal or the job's time budget stopped the run after checkpointing (args: exit code)."""


class Stops:
    """A run's stops: the signal caught, the deadline, the checkpoints due. clock: seconds for the minutes between
    checkpoints (the trainer's perf_counter); wall: epoch seconds for the deadline."""

    def __init__(self, agreement, steps, checkpoint_every, checkpoint_every_minutes=None, deadline=None,
                 clock=time.perf_counter, wall=time.time):
        self.agreement, self.steps, self.deadline = agreement, steps, deadline
        self.checkpoint_every, self.checkpoint_every_minutes = checkpoint_every, checkpoint_every_minutes
        self.clock, self.wall = clock, wall
        self.signal = None          # the last stop signal caught
        self.save_seconds = None    # the last checkpoint's save: timed, or estimated from its bytes until one is
        self.last_check = None      # when the previous step's stops were agreed (epoch seconds)
        self.last_checkpoint = clock()

    def catch_signals(self):
        def on_signal(signum, frame):
            self.signal = signum
        for signum in EXIT_CODES:
            signal.signal(signum, on_signal)

    def agreed(self, done, state_bytes):
        """(exit code of a signal that stops the run, or 0; past the deadline; a checkpoint due) after step `done`,
        the same on every rank. state_bytes() -> what a checkpoint writes (asked once, for the first estimate)."""
        code, out_of_time, due = self.agreement.max([
            EXIT_CODES.get(self.signal, 143) if self.signal is not None else 0,
            self.past_deadline(state_bytes),
            bool(self.checkpoint_every_minutes)
            and self.clock() - self.last_checkpoint > 60 * self.checkpoint_every_minutes])
        more = done < self.steps
        return int(code), bool(out_of_time) and more, (done % self.checkpoint_every == 0 or bool(due)) and more

    def past_deadline(self, state_bytes):
        """Whether one more step and a checkpoint would end after the deadline."""
        if self.deadline is None:
            return False
        now = self.wall()
        step = now - self.last_check if self.last_check is not None else 0.0
        self.last_check = now
        if self.save_seconds is None:   # once, after a step: the optimizer's state is there
            self.save_seconds = state_bytes() / ASSUMED_SAVE_BYTES_PER_SECOND
        return now + step + self.save_seconds > self.deadline

    def wait_for_save(self):
        """Every rank waits here for rank 0's checkpoint, so that none exits (or is killed) before it is whole."""
        self.agreement.barrier()

    def saved(self, seconds):
        """A checkpoint was written in `seconds`: the next deadline check counts on that, and the minutes between
        checkpoints start again."""
        self.save_seconds = seconds
        self.last_checkpoint = self.clock()
