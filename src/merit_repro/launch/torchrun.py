"""torchrun for one cell, with the trainer's exit code coming out of it.

    python -m merit_repro.launch.torchrun --standalone --nproc_per_node 2 -m merit_repro.train --config cell.yaml --out RUN

The ranks of a cell that stops agree on the stop, wait for rank 0's checkpoint and exit with the same
code: 75 at the job's time budget, 143 or 130 after SIGTERM or SIGINT. torchrun itself reports any
non-zero exit as a failure and exits 1, which a scheduler would retry as a crash. This runs torchrun
(``torch.distributed.run``) in this process and exits with the ranks' stop code instead; any other
failure still exits 1. On a signal torchrun passes it to the ranks and waits ``--shutdown-timeout``
seconds before killing them: the default here (``SHUTDOWN_GRACE_SECONDS``) is longer than one step
plus the save of a GPT-2 Large checkpoint (about 9 GB), where torchrun's own is 30 s.
"""

import os
import sys

SHUTDOWN_GRACE_SECONDS = 600
STOP_CODES = {75, 130, 143}   # train.EXIT_TIME_BUDGET and train.EXIT_CODES (this module starts without torch)


def stop_code(exit_codes):
    """The cell's exit code from its ranks' codes: the stop code they agreed on (ranks torchrun killed
    afterwards exit with a negative code), or 1 for any other failure."""
    stops = set(exit_codes) & STOP_CODES
    errors = {c for c in exit_codes if c > 0} - STOP_CODES
    return stops.pop() if len(stops) == 1 and not errors else 1


def with_grace(argv, supported=True, environ=None):
    """argv with SHUTDOWN_GRACE_SECONDS as torchrun's shutdown timeout, unless one is given already (flag or
    environment), or this torch's torchrun has no such option (older ones: a fixed 30 s, said in a warning)."""
    environ = os.environ if environ is None else environ
    given = any(a.split("=")[0] in ("--shutdown-timeout", "--shutdown_timeout") for a in argv) or \
        {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "PET_SHUTDOWN_TIMEOUT"} & set(environ)
    if given:
        return list(argv)
    if not supported:
        print(f"[torchrun] warning: this torch's torchrun kills ranks 30 s after a signal (no --shutdown-timeout); "
              "a checkpoint that takes longer to save is lost: a torch whose torchrun has it (2.13 does) gives "
              f"the {SHUTDOWN_GRACE_SECONDS} s grace", file=sys.stderr, flush=True)
        return list(argv)
    return ["--shutdown-timeout", str(SHUTDOWN_GRACE_SECONDS), *argv]


def main(argv=None):
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser, parse_args, run

    supported = "--shutdown-timeout" in get_args_parser()._option_string_actions
    try:
        run(parse_args(with_grace(sys.argv[1:] if argv is None else argv, supported)))
    except ChildFailedError as err:
        codes = [failure.exitcode for failure in err.failures.values()]
        code = stop_code(codes)
        print(f"[torchrun] ranks exited with {sorted(set(codes))}: exit {code}", file=sys.stderr, flush=True)
        return code
    except SignalException as err:   # the ranks were given the signal and the grace to save
        return 128 + int(err.sigval)
    return 0


if __name__ == "__main__":
    sys.exit(main())
