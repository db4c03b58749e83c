"""What the training loop carries from step to step: the state a checkpoint saves, and the clock that keeps
training time apart from start-up, evaluation, probes and checkpoints."""

import time
from dataclasses import asdict, dataclass, field, fields

from .divergence import new_state
from .timing import synchronize


@dataclass
class LoopState:
    """Saved in every checkpoint (as a dict), so a resumed run continues its records and timers."""
    divergence: dict = field(default_factory=new_state)
    initial_val_loss: float | None = None
    best_val_loss: float | None = None
    last_val_loss: float | None = None
    train_seconds: float = 0.0      # the steps after each process's first, without evaluation or probes
    timed_steps: int = 0
    startup_seconds: float = 0.0    # each process's first step: compilation, allocation, warm-up
    probe_seconds: float = 0.0
    eval_seconds: float = 0.0
    checkpoint_seconds: float = 0.0

    @classmethod
    def from_checkpoint(cls, saved):
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in saved.items() if k in known})

    def to_checkpoint(self):
        return asdict(self)


class Clock:
    """The training clock: a window opens after each log point, and what is not training (probes,
    evaluation, checkpoints) moves its start on."""

    def __init__(self, device, clock=time.perf_counter):
        self.device, self.now = device, clock
        self.window_start = clock()
        self.untimed_step = None   # the first step of this process, on the start-up clock

    def start(self, state, done):
        """After the first step of this process: its time is start-up, and the training clock starts."""
        synchronize(self.device)
        now = self.now()
        state.startup_seconds += now - self.window_start
        self.window_start, self.untimed_step = now, done

    def lap(self, state, steps):
        """Close the window over these steps (their losses just read back): seconds per timed step, or None."""
        elapsed = self.now() - self.window_start
        timed = sum(done != self.untimed_step for done in steps)
        state.train_seconds += elapsed
        state.timed_steps += timed
        return elapsed / timed if timed else None

    def restart(self):
        self.window_start = self.now()
