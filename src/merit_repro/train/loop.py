"""Train one cell (model x optimizer x batch size x LR x token budget), resumably.

One device (CPU or GPU, chosen automatically):

    python -m merit_repro.train --config cell.yaml --out results/runs/demo
    python -m merit_repro.train --config cell.yaml --out results/runs/demo --set lr=3e-3 --set optimizer=lamb

Several GPUs (DDP; CPU processes with the gloo backend work too, for testing), through torchrun as
``merit_repro.launch.torchrun`` runs it, so that a stop's exit code comes out of torchrun:

    python -m merit_repro.launch.torchrun --standalone --nproc_per_node 2 -m merit_repro.train --config cell.yaml --out DIR

Writes DIR/metrics.csv, mal.csv, diagnostics.csv, eval.json, summary.json and train.log (see
runfiles.py for the columns and the summary). Checkpoints (DIR/ckpt.pt, merit_repro.train.checkpoint) are written
every ``checkpoint_every`` steps and at a stop: on SIGTERM/SIGINT (exit 143/130, so a scheduler retries) or at
the job's time budget (``--stop-at``, exit 75); every rank agrees on a stop at the step it comes
(merit_repro.train.stops) and waits until rank 0's checkpoint is written. Rerunning with the
same DIR resumes exactly. A diverged cell ends with status ``diverged`` and exit code 0, so a grid
search goes on. MAL probes run on rank 0 at exactly their steps, whatever ``log_every``.
"""

import argparse
import contextlib
import math
import os
import resource
import time
from pathlib import Path

import torch
import torch.distributed as dist
import yaml
from torch.nn.parallel import DistributedDataParallel

from merit_repro.data import batches
from merit_repro.models import build_config, build_model, padded_vocab_size
from merit_repro.optim import build, fastest_on, param_groups
from merit_repro.plan import records
from merit_repro.plan.cell import CellConfig, identity, load_cell_config
from merit_repro.utils import (
    UserError,
    atomic_write_json,
    cli,
    git_commit,
    library_versions,
)

from . import checkpoint, tracking
from .cell_data import CellData
from .checkpoint import atomic_torch_save
from .distributed import HostAgreement, all_reduce, autocast_for, setup_device
from .divergence import DivergenceRule
from .evaluate import lambada, validation_loss
from .hardware import describe_device, mfu, peak_flops
from .memory import fit_micro_batch
from .runfiles import (
    DIAGNOSTICS_COLUMNS,
    MAL_COLUMNS,
    METRICS_COLUMNS,
    CsvLog,
    RunLock,
    TextLog,
    last_step,
    run_summary,
    tokens_per_second,
)
from .state import Clock, LoopState
from .stops import EXIT_TIME_BUDGET, Stop, Stops
from .timing import synchronize


# ---------------------------------------------------------------- the run


class Run:
    """One cell: its model, optimizer, data and files, and the training loop."""

    def __init__(self, cfg: CellConfig, out_dir, stop_at=None, clock=time.perf_counter):
        """stop_at: the wall-clock time (epoch seconds) by which this job has checkpointed and exited; clock: what
        times training, probes, evaluation and checkpoints (a benchmark passes time.process_time)."""
        self.cfg = cfg
        self.now = clock
        self.out = Path(out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self.rank, self.world_size, self.device = setup_device(cfg)
        self.master = self.rank == 0
        self.log = TextLog(self.out / "train.log", echo=True) if self.master else (lambda msg: None)
        self.data = CellData(cfg)
        self.per_rank_batch = self.check_batch()
        self.autocast = autocast_for(cfg, self.device)
        torch.manual_seed(cfg.seed)
        self.model_config = build_config(
            cfg.model, block_size=cfg.block_size, vocab_size=padded_vocab_size(self.data.meta["vocab_size"]),
            qk_norm=cfg.qk_norm,
            **{k: getattr(cfg, k) for k in ("n_layer", "n_head", "n_embd") if getattr(cfg, k) is not None})
        # Rank 0 draws the initial weights from the CPU's generator (the same on any GPU model, and as every CPU
        # run); DDP broadcasts them to the other ranks, which build on their own GPU, so that a node's host
        # memory holds one fp32 copy of a large model, not one per rank.
        with torch.device("cpu") if self.master else self.device:
            self.model = build_model(self.model_config).to(self.device)
        self.optimizer = build(cfg.optimizer, param_groups(self.model, cfg.weight_decay), cfg.optimizer_source,
                               **fastest_on(self.device, cfg.optimizer, cfg.optimizer_kwargs()))
        self.flops_per_token = self.model.flops_per_token()
        self.peak_flops = peak_flops(describe_device(self.device), cfg.peak_flops) if self.device.type == "cuda" \
            else cfg.peak_flops
        self.micro_batch = self.agreed_micro_batch()
        self.accum = self.per_rank_batch // self.micro_batch
        self.train_model = self.wrapped_for_training()
        self.names = {p: n for n, p in self.model.named_parameters()}
        self.csv_logs = {name: CsvLog(self.out / f"{name}.csv", columns) for name, columns in
                         (("metrics", METRICS_COLUMNS), ("mal", MAL_COLUMNS), ("diagnostics", DIAGNOSTICS_COLUMNS))}
        self.ckpt_path = self.out / "ckpt.pt"
        self.stops = Stops(HostAgreement(self.world_size), cfg.steps, cfg.checkpoint_every,
                           cfg.checkpoint_every_minutes, stop_at, clock=clock)
        self.probes = {}   # step -> MAL rows, taken at that step, written when the step is recorded
        self.probe_steps = frozenset(cfg.probe_steps())
        self.state = LoopState()
        self.clock = Clock(self.device, clock)
        self.divergence = DivergenceRule(cfg.divergence_factor, cfg.divergence_window, cfg.spike_factor, cfg.steps)
        self.tracker = tracking.Tracker()   # run() opens the one MERIT_TRACKING asks for

    # -- set-up

    def check_batch(self):
        """The batch each rank trains on, once it divides into the devices and micro-batches (a ValueError naming
        the fix otherwise)."""
        cfg = self.cfg
        if cfg.batch_size % self.world_size:
            raise ValueError(f"batch_size={cfg.batch_size} is not divisible by the {self.world_size} devices")
        per_rank = cfg.batch_size // self.world_size
        if cfg.micro_batch_size and per_rank % cfg.micro_batch_size:
            raise ValueError(f"batch_size={cfg.batch_size} is not divisible by micro_batch_size={cfg.micro_batch_size} "
                             f"x {self.world_size} devices; choose a micro_batch_size that divides {per_rank}")
        return per_rank

    def agreed_micro_batch(self):
        """The configured micro-batch, else the largest that fits this device; the smallest over the ranks."""
        cfg = self.cfg
        micro_batch = cfg.micro_batch_size or fit_micro_batch(
            self.model, self.per_rank_batch, cfg.block_size, self.device, self.autocast, self.world_size, self.log)
        if self.world_size > 1:
            micro_batch = int(all_reduce(micro_batch, self.device, dist.ReduceOp.MIN))
        return micro_batch

    def wrapped_for_training(self):
        return wrap_for_training(self.model, self.world_size, self.device, self.cfg.compile)

    # -- pieces of a step

    def batch(self, step, micro_step):
        rows = batches.micro_batch_slice(self.cfg.batch_size, self.micro_batch, self.world_size, self.rank, micro_step)
        x, y = self.data.windows(step, rows)
        if self.device.type == "cuda":   # page-locked, so the copy overlaps with the GPU's work
            x, y = x.pin_memory(), y.pin_memory()
        return x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)

    def train_step(self, step, diagnostics=False):
        """One optimizer step: (lr, loss, grad norm), the last two still on the device. With diagnostics, the
        optimizer records its per-parameter diagnostics at this step (for the evaluation that follows)."""
        if hasattr(self.optimizer, "track_diagnostics"):
            self.optimizer.track_diagnostics = diagnostics
        for group in self.optimizer.param_groups:
            group["lr"] = self.cfg.lr_at(step)
        lr = self.optimizer.param_groups[0]["lr"]   # logged as the optimizer has it, not as the schedule says
        loss_sum = torch.zeros((), device=self.device)
        for micro_step in range(self.accum):
            x, y = self.batch(step, micro_step)
            sync = self.world_size == 1 or micro_step == self.accum - 1
            with (contextlib.nullcontext() if sync else self.train_model.no_sync()):
                with self.autocast:
                    _, loss = self.train_model(x, y)
                (loss / self.accum).backward()
            loss_sum += loss.detach()
        max_norm = self.cfg.grad_clip if self.cfg.grad_clip > 0 else math.inf
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return lr, loss_sum / self.accum, grad_norm   # on the device: read back at the next log point

    def evaluate(self):
        total, count = validation_loss(self.model, self.cfg.data_dir, self.data.meta, self.cfg.block_size,
                                       self.cfg.eval_tokens, self.micro_batch, self.device, self.autocast,
                                       self.rank, self.world_size)
        return float(all_reduce(total, self.device)) / float(all_reduce(count, self.device))

    def probe(self, step):
        """The MAL probe on the model as it is after `step`, under training's autocast (rank 0; its time is
        not training time)."""
        synchronize(self.device)   # the queued training steps finish on the training clock
        t0 = self.now()
        with self.autocast:
            mal, wq, wk = self.model.probe_attention(self.data.probe_batch.to(self.device))
        L, H = mal.shape
        mal, wq, wk = mal.tolist(), wq.tolist(), wk.tolist()
        self.probes[step] = [{"step": step, "layer": layer + 1, "head": head + 1, "mal": mal[layer][head],
                              "wq_max": wq[layer][head], "wk_max": wk[layer][head]}
                             for layer in range(L) for head in range(H)]
        seconds = self.now() - t0
        self.state.probe_seconds += seconds
        return seconds

    def optimizer_diagnostics(self, step):
        """Per-parameter rows and element-weighted means of the optimizer's diagnostics (one read-back)."""
        entries = [(p, key, value) for p, diag in self.optimizer.diagnostics.items() for key, value in diag.items()]
        values = torch.stack([value.double() for *_, value in entries]).tolist() if entries else []
        rows = {p: {"step": step, "param": self.names[p]} for p in self.optimizer.diagnostics}
        totals = {"clip_fraction": [0.0, 0], "floor_fraction": [0.0, 0]}
        for (p, key, _), value in zip(entries, values):
            rows[p][key] = value
            totals[key][0] += value * p.numel()
            totals[key][1] += p.numel()
        return list(rows.values()), {k: (s / n if n else None) for k, (s, n) in totals.items()}

    # -- the loop, top to bottom: resume, then per step LR -> micro-steps -> clip/step, a MAL probe at its
    # steps, and at log points the losses read back, evaluation, records and checkpoints

    def run(self):
        """Train to the end (or to a stop, which raises Stop) and return the run's summary."""
        cfg = self.cfg
        self.tracker = tracking.from_environment(self.out, cfg.to_dict()) if self.master else tracking.Tracker()
        try:
            start = self.resume()
            self.header(start)
            self.stops.catch_signals()
            if start == 0:
                self.probe(0)
                self.record(self.step_row(0, cfg.lr_at(0)), evaluate=True)
            reason = self.train_steps(start)
            reason = reason or self.divergence.final(self.state.initial_val_loss, self.state.last_val_loss)
            if reason:
                self.log(f"diverged: {reason}")
            return self.finish("diverged" if reason else "ok", reason)
        finally:
            self.tracker.close()

    def train_steps(self, start):
        """Steps start+1 .. cfg.steps; the reason the run diverged, or None."""
        cfg = self.cfg
        self.clock = Clock(self.device, self.now)   # start-up, resuming and step 0's evaluation are not training time
        pending = []   # (step, lr, loss, grad norm) since the last log point, the last two still on the device
        for step in range(start, cfg.steps):
            done = step + 1
            last = done == cfg.steps
            evaluate_now = done % cfg.eval_interval == 0 or last
            pending.append((done, *self.train_step(step, diagnostics=evaluate_now)))
            if step == start:   # compilation and warm-up: not on the training clock
                self.clock.start(self.state, done)
            if self.master and done in self.probe_steps:
                self.clock.window_start += self.probe(done)   # at this very step, whatever log_every
            stop_code, out_of_time, checkpoint_now = self.stops.agreed(done, self.state_bytes)   # every rank alike
            if not (evaluate_now or checkpoint_now or stop_code or out_of_time or done % cfg.log_every == 0 or last):
                continue   # no host synchronisation with the GPU between log points
            reason = self.flush(pending, evaluate_now)
            pending = []
            self.data.release()
            if reason:
                return reason
            if stop_code or out_of_time or checkpoint_now:
                self.save_checkpoint(done)
            if stop_code:
                self.log(f"stopped by signal after step {done}; checkpoint saved, rerun to resume")
                raise Stop(stop_code)
            if out_of_time:
                self.log(f"time budget of this job reached after step {done}; checkpoint saved: the next job "
                         "resumes from it")
                raise Stop(EXIT_TIME_BUDGET)
        return None

    def flush(self, pending, evaluate_now):
        """Read back the losses of the steps since the last log point (one host synchronisation), judge
        divergence step by step, and record them (the last one evaluated when due, or when it diverged)."""
        losses = torch.stack([loss for _, _, loss, _ in pending]).float()
        norms = torch.stack([norm for _, _, _, norm in pending]).float()
        if self.world_size > 1:
            losses = all_reduce(losses, self.device) / self.world_size
        losses, norms = losses.tolist(), norms.tolist()
        seconds = self.clock.lap(self.state, [done for done, *_ in pending])
        reason = None
        for i, (done, lr, _, _) in enumerate(pending):
            reason = self.divergence.update(self.state.divergence, losses[i])
            last = i == len(pending) - 1 or reason is not None
            self.record(self.step_row(done, lr, losses[i], norms[i], seconds), evaluate=last and (evaluate_now or reason))
            if reason:
                break
        self.clock.restart()   # evaluation and logging do not count as training time
        return reason

    def state_bytes(self):
        """What a checkpoint writes: the parameters and the optimizer's state."""
        tensors = [*self.model.parameters(), *(t for state in self.optimizer.state.values()
                                                for t in state.values() if torch.is_tensor(t))]
        return sum(t.numel() * t.element_size() for t in tensors)

    # -- resuming, checkpoints, records

    def resume(self):
        """The step to start from: the checkpoint's when there is one (model, optimizer, RNG, loop state and the
        CSV logs' text restored), else 0."""
        texts, start = {}, 0
        if self.ckpt_path.exists():
            # CPU runs load a copy: their optimizer state would otherwise stay views into the mapped file
            ckpt = checkpoint.load(self.ckpt_path, self.cfg, self.data.fingerprints, mmap=self.device.type == "cuda")
            self.model.load_state_dict(ckpt["model"])
            self.optimizer.load_state_dict(ckpt["optimizer"])
            checkpoint.set_rng_state(ckpt["rng"], self.device)
            self.state = LoopState.from_checkpoint(ckpt["loop"])
            texts, start = ckpt["logs"], ckpt["step"]
        if self.master:
            for name, log in self.csv_logs.items():
                log.start(texts.get(name))
        return start

    def save_checkpoint(self, done):
        """Rank 0 writes the checkpoint; every rank waits for it, so none exits (or is killed) before it is whole."""
        t0 = self.now()
        if self.master:
            checkpoint.save(self.ckpt_path, self.cfg, self.data.fingerprints, done, self.model, self.optimizer,
                            self.state.to_checkpoint(), self.csv_logs, self.device)
        self.stops.wait_for_save()
        self.clock.window_start = self.now()
        self.stops.saved(self.clock.window_start - t0)
        self.state.checkpoint_seconds += self.clock.window_start - t0

    def header(self, start_step):
        cfg = self.cfg
        lines = [f"# merit_repro.train  {time.strftime('%Y-%m-%d %H:%M:%S')}",
                 f"# {'resuming from step ' + str(start_step) if start_step else 'starting'} in {self.out}",
                 "# config:", *("#   " + line for line in yaml.safe_dump(cfg.to_dict(), sort_keys=True).splitlines()),
                 f"# code: {git_commit()}", f"# versions: {library_versions()}",
                 f"# device: {describe_device(self.device)} x {self.world_size}",
                 f"# model: {self.model.num_params() / 1e6:.2f}M params {self.model_config}",
                 f"# steps: {cfg.steps} x {cfg.batch_size} sequences x {cfg.block_size} tokens "
                 f"= {cfg.steps * cfg.tokens_per_step:,} tokens; micro-batch {self.micro_batch} x {self.accum} "
                 f"accumulation x {self.world_size} devices; warmup {cfg.lr_warmup_steps} steps"]
        self.log("\n".join(lines))

    def step_row(self, step, lr, train_loss=None, grad_norm=None, step_seconds=None):
        """A metrics.csv row (evaluate_into adds the validation loss and the diagnostics' means)."""
        tokens_per_step = self.cfg.tokens_per_step
        return {"step": step, "tokens": step * tokens_per_step, "lr": lr, "train_loss": train_loss,
                "grad_norm": grad_norm, "tokens_per_s": tokens_per_step / step_seconds if step_seconds else None}

    def evaluate_into(self, row):
        """The validation loss (and the optimizer's diagnostics) at the row's step, into the row and the state."""
        step, state = row["step"], self.state
        t0 = self.now()
        row["val_loss"] = self.evaluate()
        state.eval_seconds += self.now() - t0
        state.last_val_loss = row["val_loss"]
        if step == 0:
            state.initial_val_loss = row["val_loss"]
        if math.isfinite(row["val_loss"]):
            state.best_val_loss = min(state.best_val_loss or math.inf, row["val_loss"])
        if getattr(self.optimizer, "diagnostics", None) and step > 0:
            diag_rows, totals = self.optimizer_diagnostics(step)
            row.update(totals)
            if self.master:
                self.write("diagnostics", diag_rows)

    def record(self, row, evaluate):
        """One step's rows: metrics (evaluated first when asked), the MAL probe's if taken at it, a log line."""
        if evaluate:
            self.evaluate_into(row)
        mal_rows = self.probes.pop(row["step"], None)
        if mal_rows:
            self.write("mal", mal_rows)
        if self.master:
            self.write("metrics", [row])
        self.log(self.log_line(row, mal_rows))

    def log_line(self, row, mal_rows):
        message = f"step {row['step']}/{self.cfg.steps} | lr {row['lr']:.3e}"
        if row["train_loss"] is not None:
            message += f" | loss {row['train_loss']:.4f} | grad {row['grad_norm']:.3f}"
            if row["tokens_per_s"]:
                message += f" | {row['tokens_per_s']:,.0f} tok/s"
                utilisation = mfu(row["tokens_per_s"], self.flops_per_token, self.peak_flops, self.world_size)
                message += f" | MFU {utilisation:.1%}" if utilisation is not None else ""
            else:
                message += " | start-up step"
        if "val_loss" in row:
            message += f" | val {row['val_loss']:.4f}"
        if mal_rows:
            message += f" | max MAL {max(r['mal'] for r in mal_rows):.1f}"
        return message

    def write(self, kind, rows):
        """Rows of one CSV log (rank 0), and the same rows to the live tracker."""
        self.csv_logs[kind].write(rows)
        self.tracker.log(kind, rows)

    def measured(self):
        """What summary.json records of the machine and the model as this run built them."""
        if self.device.type == "cuda":
            peak_memory = torch.cuda.max_memory_allocated(self.device)
        else:
            peak_memory = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        return {"mfu": mfu(tokens_per_second(self.cfg, self.state), self.flops_per_token, self.peak_flops,
                           self.world_size),
                "peak_memory_bytes": peak_memory, "n_params": self.model.num_params(), "world_size": self.world_size,
                "micro_batch_size": self.micro_batch, "grad_accum": self.accum,
                "model_config": self.model.config_dict(), "device": describe_device(self.device),
                "data": self.data.meta.get("request"), "data_fingerprint": self.data.fingerprints}

    def finish(self, status, reason):
        """The run's final files (rank 0): weights when kept, eval.json, the CSVs closed, summary.json last."""
        cfg = self.cfg
        steps_done = last_step(self.csv_logs["metrics"].text) if self.master else None
        result = {"val_loss": self.state.last_val_loss, "val_tokens": None}
        if cfg.lambada_dir and status == "ok" and self.master:
            result.update(lambada(self.model, cfg.lambada_dir, cfg.block_size, self.device, self.autocast))
        summary = run_summary(cfg, self.state, status, reason, steps_done, self.measured())
        if self.master:
            if cfg.save_model:
                state = self.model.state_dict()
                if cfg.save_model == "bf16":
                    state = {k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in state.items()}
                atomic_torch_save(state, self.out / "model.pt")
            result["val_tokens"] = self.data.val_tokens
            for log in self.csv_logs.values():
                log.finish()
            atomic_write_json(self.out / "eval.json", result)
            summary["files"] = records.vouch(self.out)   # the collect step checks these rows and checksums
            if cfg.save_model:
                summary["weights"] = records.weights_record(self.out)   # scoring and export check it
            atomic_write_json(self.out / "summary.json", summary)
            if not cfg.keep_checkpoint:
                self.ckpt_path.unlink(missing_ok=True)
            self.log(f"done: status {status}, final val loss {summary['final_val_loss']}, "
                     f"{summary['tokens_per_s'] or 0:,.0f} tok/s, MAL probe {self.state.probe_seconds:.1f}s "
                     f"of {self.state.train_seconds:.1f}s training")
        return summary


def wrap_for_training(model, world_size, device, compile=False, compiler=torch.compile):
    """The model as the steps call it: in DDP over several ranks, then compiled when asked. DDP goes first, so
    that the compiler splits the graph at DDP's gradient buckets and each bucket's all-reduce overlaps the rest
    of the backward pass (compiling the bare model and wrapping it loses that overlap)."""
    if world_size > 1:
        model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    return compiler(model) if compile else model


def already_complete(cfg, out_dir):
    """The summary of the finished run in out_dir when it is this cell's, on the corpus there now; else an error
    saying what differs."""
    summary = records.read_summary(out_dir)
    try:
        same = identity(summary["config"]) == identity(cfg)
    except (TypeError, ValueError):
        same = False
    if not same:
        raise UserError(f"{out_dir} holds a finished run of a different cell; use another --out or delete it")
    then = summary.get("data_fingerprint")
    now = records.cell_fingerprints(cfg.to_dict())
    if then != now:
        raise UserError(f"{out_dir} was trained on corpora {then} but the cell now reads {now} (was {cfg.data_dir} "
                        f"prepared again?): its results are not this data's; restore the data, or delete "
                        f"{out_dir} to retrain the cell on it")
    damaged = records.file_problems(out_dir, summary)
    if damaged:
        raise UserError(f"{out_dir} is a finished run whose files no longer match its summary.json ({'; '.join(damaged)}); "
                        f"delete {out_dir / 'summary.json'} to retrain the cell")
    print(f"[train] {out_dir} is already complete ({summary['status']}); nothing to do", flush=True)
    return summary


def train(cfg: CellConfig, out_dir, stop_at=None):
    """Run (or resume, or skip when already complete) one cell; returns its summary. Given stop_at (epoch
    seconds: a scheduler's job limit less time to checkpoint), the run checkpoints at the first step
    after it and exits EXIT_TIME_BUDGET, for the next job to resume."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    lock = RunLock(out_dir).acquire() if int(os.environ.get("RANK", "0")) == 0 else None
    ended_together = False   # every rank got here: destroying the process group does not wait on a failed rank
    try:
        if (out_dir / "summary.json").exists():
            summary = already_complete(cfg, out_dir)
        else:
            summary = Run(cfg, out_dir, stop_at).run()
        ended_together = True
        return summary
    except Stop:
        ended_together = True
        raise
    finally:
        if ended_together and dist.is_initialized():
            dist.destroy_process_group()
        if lock:
            lock.release()


@cli
def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m merit_repro.train", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, help="cell YAML (keys: see merit_repro.plan.cell.CellConfig)")
    parser.add_argument("--out", type=Path, required=True, help="run directory (created; resumed when it exists)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    parser.add_argument("--stop-at", type=float, default=None, metavar="EPOCH_SECONDS",
                        help=f"checkpoint and exit {EXIT_TIME_BUDGET} at the first step after this time")
    args = parser.parse_args(argv)
    cfg = load_cell_config(args.config, args.set)
    for item in args.set:
        print(f"[train] override: {item}", flush=True)
    try:
        train(cfg, args.out, args.stop_at)
    except Stop as stop:
        return stop.args[0]
    return 0


