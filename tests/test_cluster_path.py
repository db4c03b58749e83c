"""The cluster path without a cluster: what a training job asks for per GPU, when it stops before its end, the
multi-node command and its refusals, the micro-batch fit on allocation failures, the host-side gloo group and the
order of DDP and compile, and a job's `error:` line on the console when the rule `exec`s its command."""

import os
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist

from merit_repro.launch import launcher, torchrun
from merit_repro.models import GPT, GPTConfig
from merit_repro.plan import resources
from merit_repro.train import memory
from merit_repro.train.loop import wrap_for_training
from merit_repro.utils import UserError

SITE = {"gpus_per_node": 8, "cores_per_gpu": 8, "mem_mb_per_gpu": 32000, "signal_lead_seconds": 240}


def config_with(gpus, **site):
    return {**SITE, **site, "models": {"m": {"model": "gpt2-small", "data": "d", "gpus": gpus}}}


@pytest.mark.parametrize("gpus, nodes, threads, mem_mb, extra", [
    (0, 1, 1, 4000, "--signal=TERM@240"),
    (1, 1, 8, 32000, "--signal=TERM@240"),
    (2, 1, 16, 64000, "--signal=TERM@240"),
    (8, 1, 64, 256000, "--signal=TERM@240"),
    (16, 2, 64, 256000, "--signal=TERM@240 --gpus-per-node=8 --ntasks-per-node=1"),
])
def test_a_job_asks_for_cores_and_memory_per_gpu_and_whole_nodes(gpus, nodes, threads, mem_mb, extra):
    config = config_with(gpus)
    assert resources.nodes(config, "m") == nodes and resources.threads(config, "m") == threads
    assert resources.mem_mb(config, "m") == mem_mb and resources.mem_mb(config, "m", attempt=2) == 2 * mem_mb
    assert resources.slurm_extra(config, "m", job_minutes=1440) == extra
    assert resources.problems(config) == []


def test_a_short_jobs_signal_comes_a_fifth_of_it_before_its_limit():
    """SLURM sends a signal whose lead is longer than what is left of the job at once: a 1-minute job would be
    stopped as it starts."""
    assert resources.signal_lead(config_with(1), 1440) == 240
    assert resources.signal_lead(config_with(1), 1) == 12
    assert resources.slurm_extra(config_with(1), "m", job_minutes=1) == "--signal=TERM@12"


def test_gpus_that_do_not_fill_whole_nodes_are_refused():
    (problem,) = resources.problems(config_with(12))
    assert "models.m.gpus=12 spans nodes but is not a multiple of gpus_per_node=8; use 16 or 8 GPUs" in problem


def test_the_stop_comes_before_the_jobs_end_less_the_signal_lead():
    start = 1000.0
    # the scheduler's end time comes first (Snakemake started inside the job before the launcher)
    assert launcher.stop_time(3600, 240, start=start, end=start + 3590) == start + 3590 - 240
    assert launcher.stop_time(3600, 240, start=start, end=None) == start + 3600 - 240   # no end time: the budget
    assert launcher.stop_time(0, 240, start=start, end=start + 600) == start + 600 - 240   # no budget: the end time
    assert launcher.stop_time(0, 240, start=start, end=None) is None
    assert launcher.stop_time(18, 240, start=start) == pytest.approx(start + 18 - 3.6)   # a short budget: a fifth


def test_the_end_time_is_squeues_in_a_slurm_job_and_none_elsewhere():
    calls = []

    def squeue(argv, **kwargs):
        calls.append(argv)
        return SimpleNamespace(returncode=0, stdout="2026-12-04T10:52:33\n")

    end = launcher.slurm_end_time({"SLURM_JOB_ID": "42"}, run=squeue)
    assert calls == [["squeue", "-h", "-j", "42", "-o", "%e"]]
    assert time.strftime(launcher.SLURM_TIME_FORMAT, time.localtime(end)) == "2026-12-04T10:52:33"
    assert launcher.slurm_end_time({}, run=squeue) is None
    unknown = lambda argv, **kwargs: SimpleNamespace(returncode=0, stdout="Unknown\n")  # noqa: E731
    assert launcher.slurm_end_time({"SLURM_JOB_ID": "42"}, run=unknown) is None


def test_each_rank_gets_its_share_of_the_nodes_cores():
    assert launcher.threads_per_rank(64, 8) == 8
    assert launcher.threads_per_rank(64, 16, nodes=2) == 8
    assert launcher.threads_per_rank(4, 8) == 1
    assert launcher.threads_per_rank(1, 0) == 1


def slurm(answers):
    """A stand-in for squeue and scontrol: their output by command name."""
    def run(argv, **kwargs):
        return SimpleNamespace(returncode=0, stdout=answers[argv[0]], stderr="")
    return run


# What a job's shell has of SLURM's variables under the executor plugin's mpi mode (jobstep 0.6.1 keeps these)
MPI_MODE_ENV = {"SLURM_JOB_ID": "1234", "SLURM_SUBMIT_DIR": "/work", "SLURM_CLUSTER_NAME": "c"}


def test_a_multi_node_cell_is_one_torchrun_a_node_under_srun_meeting_on_the_first_host():
    run = slurm({"squeue": "2 gpu[07-08]\n", "scontrol": "gpu07\ngpu08\n"})
    hosts = torchrun.check_nodes(2, MPI_MODE_ENV, run=run)
    assert hosts == "gpu[07-08]" and torchrun.first_host(hosts, run=run) == "gpu07"
    command = torchrun.multi_node_command(2, 8, 64, ["-m", "merit_repro.train", "--config", "c.yaml"], "1234", "gpu07")
    assert command[:8] == ["srun", "--jobid=1234", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1",
                           "--cpus-per-task=64", "--gpus-per-node=8", "--kill-on-bad-exit=1"]
    torchrun_args = command[command.index("merit_repro.launch.torchrun") + 1:]
    assert torchrun_args == ["--nnodes", "2", "--nproc_per_node", "8", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                             "gpu07:29634", "--rdzv-id", "merit-1234", "-m", "merit_repro.train", "--config", "c.yaml"]


@pytest.mark.parametrize("env, answers, message", [
    ({}, {}, "only a SLURM job of that many nodes can give"),
    (MPI_MODE_ENV, {"squeue": "1 gpu07\n"}, "spans 2 nodes but its SLURM job has 1"),
    (MPI_MODE_ENV, {"squeue": ""}, "cannot read the nodes of SLURM job 1234 from squeue"),
])
def test_a_multi_node_cell_without_its_nodes_is_refused(env, answers, message):
    with pytest.raises(UserError, match=message):
        torchrun.check_nodes(2, env, run=slurm(answers))


def test_hosts_that_scontrol_cannot_list_are_one_error():
    def broken(argv, **kwargs):
        return SimpleNamespace(returncode=1, stdout="", stderr="Invalid hostlist")
    with pytest.raises(UserError, match="cannot list the hosts of 'gpu\\[07'"):
        torchrun.first_host("gpu[07", run=broken)


@pytest.mark.parametrize("gpus, nodes, message", [(16, 0, "at least one node"), (0, 2, "at least one, on each"),
                                                  (12, 8, "the same number of GPUs")])
def test_a_launch_whose_gpus_do_not_fill_its_nodes_is_refused(gpus, nodes, message):
    with pytest.raises(UserError, match=message):
        launcher.check_layout(gpus, nodes)


def test_the_launcher_refuses_it_in_one_line_before_anything_starts(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    r = subprocess.run([sys.executable, "-m", "merit_repro.launch", "--cell", "{}", "--out", str(tmp_path / "run"),
                        "--gpus", "16", "--nodes", "2"], capture_output=True, text=True, env=env)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and r.stderr.startswith("error: this cell spans 2 nodes")
    assert not (tmp_path / "run").exists()


def test_a_rules_exec_keeps_the_error_line_on_the_console_and_in_the_log(tmp_path):
    """The shell a rule runs (common.smk EXEC): the CLI replaces the shell and its stderr goes to the log, yet its
    `error:` line reaches the console too, and no child process inherits the descriptor's name."""
    log = tmp_path / "job.log"
    script = (f"exec 3>&2; MERIT_ERROR_FD=3 exec {sys.executable} -m merit_repro.launch --cell '{{}}' "
              f"--out {tmp_path / 'run'} --gpus 16 --nodes 2 > {log} 2>&1")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    r = subprocess.run(["bash", "-c", "set -euo pipefail; " + script], capture_output=True, text=True, env=env)
    assert r.returncode == 2
    assert r.stderr.startswith("error: this cell spans 2 nodes") and log.read_text() == r.stderr


def test_ddp_wraps_the_model_before_it_is_compiled():
    store = dist.HashStore()
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        model = GPT(GPTConfig.named("demo-tiny", block_size=16, vocab_size=64))
        compiled = []
        wrapped = wrap_for_training(model, 2, torch.device("cpu"), compile=True,
                                    compiler=lambda m: compiled.append(m) or m)
        assert isinstance(compiled[0], torch.nn.parallel.DistributedDataParallel) and compiled[0].module is model
        assert wrapped is compiled[0]
        assert wrap_for_training(model, 1, torch.device("cpu")) is model
    finally:
        dist.destroy_process_group()


def host_agreement_rank(rank, init_file, results):
    from merit_repro.train.distributed import HostAgreement

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    agreement = HostAgreement(2, own_group=True)   # the NCCL branch: a gloo group of its own beside the ranks' group
    assert agreement.group is not None
    results.put((rank, agreement.max([rank, 1 - rank, 0.5])))
    agreement.barrier()
    dist.destroy_process_group()


def test_the_host_side_gloo_group_agrees_beside_the_ranks_group(tmp_path):
    ctx = torch.multiprocessing.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=host_agreement_rank, args=(rank, tmp_path / "init", results)) for rank in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    assert sorted(results.get(timeout=5) for _ in range(2)) == [(0, [1.0, 1.0, 0.5]), (1, [1.0, 1.0, 0.5])]


GiB = 2**30


@pytest.mark.parametrize("message", [
    "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
    "cuDNN error: CUDNN_STATUS_ALLOC_FAILED",
    "CUDA error: out of memory",
])
def test_an_allocation_failure_from_cublas_or_cudnn_is_a_micro_batch_that_does_not_fit(monkeypatch, message):
    model = GPT(GPTConfig.named("demo-tiny", block_size=16, vocab_size=64))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device: None)
    monkeypatch.setattr(model, "forward", lambda x, y: (_ for _ in ()).throw(RuntimeError(message)))
    assert memory.peak_bytes_of_step(model, 8, 16, "cpu", None) is None


@pytest.mark.parametrize("message", ["shape mismatch", "CUDA error: CUBLAS_STATUS_NOT_INITIALIZED"])
def test_another_runtime_error_is_not_taken_for_one(monkeypatch, message):
    model = GPT(GPTConfig.named("demo-tiny", block_size=16, vocab_size=64))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device: None)
    monkeypatch.setattr(model, "forward", lambda x, y: (_ for _ in ()).throw(RuntimeError(message)))
    with pytest.raises(RuntimeError, match=message):
        memory.peak_bytes_of_step(model, 8, 16, "cpu", None)


def test_the_fit_starts_from_the_estimate_of_two_small_measurements():
    tried = []

    def peak(micro):   # 3 GiB fixed, 1 GiB a sequence, out of memory above 20
        tried.append(micro)
        return None if micro > 20 else (3 + micro) * GiB

    micro = memory.largest_fitting(memory.divisors_of(480), peak, limit_bytes=36 * GiB, extra_bytes=10 * GiB)
    assert micro == 20 and tried == [1, 2, 20]   # (36 - 10 - 3) / 1 = 23: 20 is the largest divisor below


def test_an_estimate_that_is_too_large_falls_back_to_smaller_sizes():
    tried = []

    def peak(micro):   # linear at 1 and 2, but activations grow faster above 8
        tried.append(micro)
        return None if micro > 8 else micro * GiB

    assert memory.largest_fitting(memory.divisors_of(480), peak, limit_bytes=36 * GiB, extra_bytes=0) == 8
    assert tried == [1, 2, 32, 30, 24, 20, 16, 15, 12, 10, 8]
