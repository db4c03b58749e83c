"""Part 8: the one-GPU tier's cost from a measurement, not an assumed MFU. One cell of config/gpu1.yaml's model
(GPT-2 Small, context 1024, GPT-2's vocabulary) trains a few steps through the trainer's own path
(``python -m merit_repro.launch``: bf16, the fitted micro-batch, ``compile: true``); its tokens/s (the trainer's
timed steps, compilation excluded) price config/gpu1.yaml as ``merit_repro.plan.cost --tokens-per-s-per-gpu`` does:
its GPU-hours, tuning's bound included (``merit_repro.plan.cost.gpu_hours``), must fit the tier's day."""

import json
import sys
from pathlib import Path

from merit_repro.plan.cost import gpu_hours

from .common import REPO, corpus, first_line, run_command

TIER_HOURS = 24


def judge_tier(code, summary, hours, device_type, log_tail=""):
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
    return rows


def part_tier(plan, device, workdir):
    folder = Path(workdir) / "tier"
    cell = {**plan.tier_cell, "data_dir": str(corpus(workdir, plan.tier_cell["tokenizer"])),
            "tokens": plan.tier_steps * plan.tier_cell["batch_size"] * plan.tier_cell["block_size"],
            "optimizer": "merit", "lr": 1e-3, "eval_every": 10**6, "eval_tokens": 8 * plan.tier_cell["block_size"],
            "mal_every": 10**6, "mal_batch": 1, "log_every": 3, "checkpoint_every": 10**6}
    gpus = 1 if device.type == "cuda" else 0
    r = run_command([sys.executable, "-m", "merit_repro.launch", "--cell", json.dumps(cell), "--out", str(folder),
                     "--gpus", str(gpus), "--threads", "8" if gpus else "1"], plan.tier_timeout, cwd=REPO)
    (Path(workdir) / "tier.log").write_text(r.stdout + r.stderr)
    summary_path = folder / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else None
    tokens_per_s = (summary or {}).get("tokens_per_s")
    hours = gpu_hours(REPO / plan.tier_config, tokens_per_s) if r.returncode == 0 and tokens_per_s else None
    return judge_tier(r.returncode, summary, hours, device.type, first_line((r.stdout + r.stderr).splitlines()[-1]
                                                                             if (r.stdout + r.stderr).strip() else ""))
