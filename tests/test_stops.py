"""When a run stops (merit_repro.train.stops): signals, the deadline, the checkpoints due, on clocks set here; and
the launcher's hand-off of the stop signals (merit_repro.launch.signals)."""

import os
import signal
import subprocess
import sys

import pytest

from merit_repro.train.distributed import HostAgreement
from merit_repro.train.stops import ASSUMED_SAVE_BYTES_PER_SECOND, EXIT_TIME_BUDGET, Stops


class Clocks:
    """A wall clock and a training clock the test moves by hand."""

    def __init__(self):
        self.wall = 1000.0
        self.clock = 0.0


def stops(clocks, steps=100, every=10, minutes=None, deadline=None):
    return Stops(HostAgreement(1), steps, every, minutes, deadline, clock=lambda: clocks.clock,
                 wall=lambda: clocks.wall)


def one_second_of_state():
    return ASSUMED_SAVE_BYTES_PER_SECOND   # a checkpoint estimated at one second to save


def test_a_checkpoint_is_due_every_n_steps_but_never_at_the_last():
    s = stops(Clocks(), steps=20, every=10)
    assert [s.agreed(done, one_second_of_state) for done in (9, 10, 20)] == [(0, False, False), (0, False, True),
                                                                           (0, False, False)]


def test_a_checkpoint_is_due_after_its_minutes_and_again_after_the_save():
    clocks = Clocks()
    s = stops(clocks, every=1000, minutes=1)
    clocks.clock = 59.0
    assert s.agreed(1, one_second_of_state)[2] is False
    clocks.clock = 61.0
    assert s.agreed(2, one_second_of_state)[2] is True
    s.saved(3.0)
    assert s.agreed(3, one_second_of_state)[2] is False


def test_the_deadline_counts_the_last_step_and_the_save():
    """With 1 s to save (estimated from the bytes until a save is timed), a check 2 s before the deadline lets one
    more step run; the next, 1.5 s later, sees that the step it measured and the save would end past it."""
    clocks = Clocks()
    s = stops(clocks, deadline=1002.0)
    assert s.agreed(1, one_second_of_state) == (0, False, False)
    clocks.wall += 1.5
    assert s.agreed(2, one_second_of_state)[1] is True   # 1001.5 + 1.5 (the step) + 1 (the save) > 1002
    s.saved(0.1)   # a timed save replaces the estimate
    clocks.wall += 0.1
    assert s.past_deadline(one_second_of_state) is False   # 1001.6 + 0.1 + 0.1 <= 1002
    assert s.agreed(100, one_second_of_state)[1] is False   # the last step: finishing is cheaper than stopping


def test_the_estimate_is_asked_for_once():
    asked = []
    s = stops(Clocks(), deadline=2000.0)
    for done in range(1, 4):
        s.agreed(done, lambda: asked.append(1) or 1.0)
    assert asked == [1]


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_caught_signal_stops_with_its_code_even_at_the_last_step(signum, code):
    saved = {n: signal.getsignal(n) for n in (signal.SIGTERM, signal.SIGINT)}
    try:
        s = stops(Clocks(), steps=5)
        s.catch_signals()
        os.kill(os.getpid(), signum)
        assert s.signal == signum
        assert s.agreed(3, one_second_of_state)[0] == code and s.agreed(5, one_second_of_state)[0] == code
    finally:
        for n, handler in saved.items():
            signal.signal(n, handler)
    assert EXIT_TIME_BUDGET == 75   # what merit_repro.launch.torchrun passes through for the next job to resume


def test_the_launcher_passes_stops_on_while_its_trainer_runs_and_outlives_them_after():
    """Inside the block each SIGTERM or SIGINT goes to send; after it (the trainer has ended) they are ignored and
    the process exits with its own code: a stop of the job's whole group just after a finished cell's trainer exits
    must not turn the finished job into a failed one. (A process of its own: the handlers stay for its lifetime.)"""
    program = """if True:
        import os, signal, sys, time
        from merit_repro.launch import signals
        got = []
        with signals.passed_on(got.append):
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)
        print(",".join(signal.Signals(s).name for s in got))
        sys.exit(3)
    """
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (3, "SIGTERM,SIGINT\n"), done.stderr


@pytest.mark.parametrize("outlived, code", [(False, -signal.SIGTERM), (True, 0)])
def test_a_trainer_whose_code_is_decided_outlives_a_stop_while_python_shuts_down(outlived, code):
    """Python puts a stop signal's default action back as it shuts down: a SIGTERM then (here from a module
    global's finaliser) kills the process, a finished cell's trainer too, unless it has outlived the stops."""
    program = f"""if True:
        import os, signal, sys
        from merit_repro.train import stops
        stops.Stops(None, 1, 1).catch_signals()
        class Late:
            def __del__(self):
                os.kill(os.getpid(), signal.SIGTERM)
        late = Late()
        if {outlived}:
            stops.outlive_stops()
        sys.exit(0)
    """
    assert subprocess.run([sys.executable, "-c", program], timeout=60).returncode == code
