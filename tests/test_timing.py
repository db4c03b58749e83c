"""One way of timing steps (merit_repro.train.timing), on a clock the test moves."""

import pytest
import torch

from merit_repro.train.state import Clock, LoopState
from merit_repro.train.timing import autocast, time_steps

CPU = torch.device("cpu")


class Ticks:
    """A clock that moves only when a step says so."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_the_first_steps_are_left_out_and_the_rest_averaged_on_the_given_clock():
    ticks, seconds = Ticks(), iter([10.0, 1.0, 2.0, 3.0])

    def step():
        ticks.now += next(seconds)   # the first (compilation, say) takes 10
        return ticks.now
    timed = time_steps(step, 3, CPU, warmup=1, clock=ticks)
    assert (timed.seconds_per_step, timed.result, timed.warmup_seconds) == (2.0, 16.0, 10.0)
    with pytest.raises(ValueError, match="at least one step"):
        time_steps(step, 0, CPU)


def test_the_trainers_clock_reads_the_clock_it_is_given():
    ticks, state = Ticks(), LoopState()
    clock = Clock(CPU, ticks)
    ticks.now = 5.0
    clock.start(state, 1)   # the first step: start-up
    ticks.now = 9.0
    assert clock.lap(state, [2, 3]) == 2.0 and state.startup_seconds == 5.0 and state.train_seconds == 4.0


def test_autocast_off_does_nothing():
    with autocast(CPU, enabled=False):
        assert torch.ones(2).dtype == torch.float32
