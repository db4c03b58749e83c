"""torchrun for one cell, with the trainer's exit code coming out of it.

    python -m merit_repro.launch.torchrun --standalone --nproc_per_node 2 -m merit_repro.train --config cell.yaml --out RUN

Over several nodes (``multi_node_command``): srun starts one of these per node, each with ``--nnodes N`` and a
c10d rendezvous on the job's first host.

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

from merit_repro.utils import UserError

SHUTDOWN_GRACE_SECONDS = 600
RENDEZVOUS_PORT = 29400   # plus the job id modulo 1000: jobs that share a first node do not share a port
# train.stops.EXIT_TIME_BUDGET and EXIT_CODES, and what stopped the run (this module starts without torch)
STOP_CODES = {75: "the job's time budget", 130: "SIGINT", 143: "SIGTERM"}


def stop_code(exit_codes):
    """The cell's exit code from its ranks' codes: the stop code they agreed on (ranks torchrun killed
    afterwards exit with a negative code), or 1 for any other failure."""
    stops = set(exit_codes) & STOP_CODES.keys()
    errors = {c for c in exit_codes if c > 0} - STOP_CODES.keys()
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


def job_nodes(environ, run=None):
    """(node count, host list) of the SLURM job this runs in, from squeue: a job's shell under the SLURM executor
    plugin's mpi mode keeps SLURM_JOB_ID but not SLURM_JOB_NUM_NODES or SLURM_JOB_NODELIST."""
    import subprocess

    run = run or subprocess.run
    try:
        r = run(["squeue", "-h", "-j", environ["SLURM_JOB_ID"], "-o", "%D %N"], capture_output=True, text=True,
                timeout=30)
        count, hosts = r.stdout.split()
        return int(count), hosts
    except (OSError, subprocess.TimeoutExpired, ValueError) as err:
        raise UserError(f"cannot read the nodes of SLURM job {environ['SLURM_JOB_ID']} from squeue ({err}); run the "
                        "cell where squeue answers") from None


def check_nodes(nodes, environ, run=None):
    """A cell over several nodes runs only in a SLURM job of that many nodes: one error line otherwise. Returns
    the job's host list."""
    if not environ.get("SLURM_JOB_ID"):
        raise UserError(f"this cell spans {nodes} nodes (models.<name>.gpus over gpus_per_node), which only a SLURM "
                        "job of that many nodes can give (snakemake --workflow-profile profiles/slurm); on one machine "
                        "give the model at most gpus_per_node GPUs")
    have, hosts = job_nodes(environ, run)
    if have < nodes:
        raise UserError(f"this cell spans {nodes} nodes but its SLURM job has {have}; the train rule asks for "
                        f"--nodes={nodes}: a profile or site option that replaces it (nodes, slurm_extra) must keep it")
    return hosts


def first_host(hosts, run=None):
    """The first host of a SLURM host list ("gpu[07-08]"), the rendezvous, by `scontrol show hostnames`."""
    import subprocess

    run = run or subprocess.run
    try:
        r = run(["scontrol", "show", "hostnames", hosts], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise UserError(f"cannot list the hosts of {hosts!r} ({err}); run the cell where scontrol answers") from None
    names = r.stdout.split()
    if r.returncode or not names:
        raise UserError(f"cannot list the hosts of {hosts!r} (scontrol: {r.stderr.strip()[:200]}); run the cell where "
                        "scontrol works")
    return names[0]


def multi_node_command(nodes, gpus_per_node, threads, train, job, host):
    """srun of one torchrun per node in SLURM job `job`, meeting at a c10d rendezvous on `host`, each with the
    node's cores and GPUs (srun inherits neither from the job since SLURM 22.05)."""
    return ["srun", f"--jobid={job}", f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1",
            f"--cpus-per-task={threads}", f"--gpus-per-node={gpus_per_node}", "--kill-on-bad-exit=1",
            sys.executable, "-m", "merit_repro.launch.torchrun", "--nnodes", str(nodes),
            "--nproc_per_node", str(gpus_per_node), "--rdzv-backend", "c10d",
            "--rdzv-endpoint", f"{host}:{RENDEZVOUS_PORT + int(job) % 1000}", "--rdzv-id", f"merit-{job}", *train]


def on_loopback(argv, supported=True):
    """argv with --local-addr 127.0.0.1 for a one-node (--standalone) run: its rendezvous then never looks this
    host's name up, which hangs where the name does not resolve (a container, a node's odd /etc/hosts)."""
    if "--standalone" not in argv or not supported or any(a.split("=")[0] in ("--local-addr", "--local_addr")
                                                            for a in argv):
        return list(argv)
    return ["--local-addr", "127.0.0.1", *argv]


def main(argv=None):
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser, parse_args, run

    options = get_args_parser()._option_string_actions
    argv = on_loopback(sys.argv[1:] if argv is None else argv, "--local-addr" in options)
    try:
        run(parse_args(with_grace(argv, "--shutdown-timeout" in options)))
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
