"""Part 8: the one-GPU tier's cost from a measurement, not an assumed MFU. One cell of config/gpu1.yaml's model
(GPT-2 Small, context 1024, GPT-2's vocabulary) trains a few steps through the trainer's own path
(``python -m merit_repro.launch``: bf16, the fitted micro-batch, ``compile: true``); its tokens/s (the trainer's
timed steps, compilation excluded) price config/gpu1.yaml as ``merit_repro.plan.cost --tokens-per-s-per-gpu`` does:
its GPU-hours, tuning's bound included (``merit_repro.plan.cost.gpu_hours``), must fit the tier's day. Then a plain
loop at the same cell (``plain_loop``: the same work without the trainer) sets the yardstick for the trainer's
tokens/s: their ratio is judged on a GPU, reported on the CPU."""

import json
import math
import sys
from pathlib import Path

from merit_repro.plan.cost import gpu_hours

from .common import REPO, corpus, first_line, percent, run_command
from .plain_loop import plain_loop

TIER_HOURS = 24
TRAINER_RATIO = 0.97   # the trainer's tokens/s at least this share of the plain loop's at the same cell


def judge_tier(code, summary, hours, device_type, log_tail="", plain=None):
    """The tier's rows; plain: the plain loop's result at the cell (plain_loop()), the error it raised as text, or
    None when it did not run."""
    cell_ok = code == 0 and (summary or {}).get("status") == "ok" and (summary or {}).get("tokens_per_s")
    compiled = (summary or {}).get("config", {}).get("compile")
    rows = [(f"a config/gpu1.yaml cell through merit_repro.launch (compile: {compiled}): tokens/s",
             f"{summary['tokens_per_s']:,.0f} tok/s, MFU {summary.get('mfu') or 0:.1%}" if cell_ok
             else f"exit {code}: {log_tail}", "exit 0, status ok", bool(cell_ok))]
    if hours is not None:
        total = sum(hours)
        rows.append(("config/gpu1.yaml GPU-hours at that rate (grid + tuning at most)",
                     f"{hours[0]:,.1f} + {hours[1]:,.1f} = {total:,.1f}", f"<= {TIER_HOURS} (the tier's day)",
                     total <= TIER_HOURS if device_type == "cuda" else None))
    if plain is None:
        return rows
    ran = isinstance(plain, dict)
    shape = f"micro-batch {plain['micro_batch']} x {plain['accum']}" if ran else "the cell's micro-batch"
    rows.append((f"a plain loop at that cell ({shape}, its optimizer, autocast, compile and clipping; nothing "
                 "else): tokens/s", f"{plain['tokens_per_s']:,.0f} tok/s, MFU {percent(plain['mfu'])}" if ran
                 else plain, "finite loss", ran and math.isfinite(plain["loss"])))
    if cell_ok and ran:
        ratio = summary["tokens_per_s"] / plain["tokens_per_s"]
        rows.append(("the trainer's tokens/s over the plain loop's",
                     f"{summary['tokens_per_s']:,.0f} / {plain['tokens_per_s']:,.0f} = {ratio:.3f}",
                     f">= {TRAINER_RATIO}", ratio >= TRAINER_RATIO if device_type == "cuda" else None))
    return rows


def part_tier(plan, device, workdir):
    folder = Path(workdir) / "tier"
    cell = {**plan.tier_cell, "data_dir": str(corpus(workdir, plan.tier_cell["tokenizer"])),
            "tokens": plan.tier_steps * plan.tier_cell["batch_size"] * plan.tier_cell["block_size"],
            "optimizer": "merit", "lr": 1e-3, "eval_every": 10**6, "eval_tokens": 8 * plan.tier_cell["block_size"],
            "mal_every": 10**6, "mal_batch": 1, "log_every": 3, "checkpoint_every": 10**6}
    gpus = 1 if device.type == "cuda" else 0
    threads = 8 if gpus else 1
    r = run_command([sys.executable, "-m", "merit_repro.launch", "--cell", json.dumps(cell), "--out", str(folder),
                     "--gpus", str(gpus), "--threads", str(threads)], plan.tier_timeout, cwd=REPO)
    (Path(workdir) / "tier.log").write_text(r.stdout + r.stderr)
    summary_path = folder / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else None
    tokens_per_s = (summary or {}).get("tokens_per_s")
    hours = gpu_hours(REPO / plan.tier_config, tokens_per_s) if r.returncode == 0 and tokens_per_s else None
    plain = None
    if hours is not None:
        try:
            plain = plain_loop(summary, device, plan.tier_steps, threads)
        except Exception as err:   # its failure is a row; the trainer's rows stand
            plain = f"{type(err).__name__}: {first_line(err, 100)}"
    return judge_tier(r.returncode, summary, hours, device.type, first_line((r.stdout + r.stderr).splitlines()[-1]
                                                                             if (r.stdout + r.stderr).strip() else ""),
                      plain)
