"""The check's command line: runs the parts in turn, prints one table, writes it as JSON (``--out``) and exits 1
on any FAIL; ``--help`` prints the package's description of every part."""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

import merit_repro.gpu_check as package
from merit_repro.utils import cli

from merit_repro.train.timing import device_name

from .common import Plan, first_line, gib, release
from .ddp import part_ddp
from .host_syncs import part_host_syncs
from .memory import part_memory
from .parity import part_parity
from .reference import part_reference
from .speed import part_speed
from .tier import part_tier
from .workflow import part_workflow

BUDGET_SECONDS = 420   # the whole check on one H200 (set-up by scripts/gpu_check.sh not counted)


PARTS = {
    1: ("the trainer on the device through the workflow (snakemake, config/gpu_check.yaml)", part_workflow),
    2: ("bf16 autocast and torch.compile parity", part_parity),
    3: ("DDP through merit_repro.launch.torchrun: a run, a stop (exit 75) and its resumption", part_ddp),
    4: ("host synchronisations in MERIT's and LAMB's steps", part_host_syncs),
    5: ("micro-batch fit, then real MERIT steps at the fitted size", part_memory),
    6: ("tokens/s and MFU per model size", part_speed),
    7: ("optimizers vs the float64 reference, the MAL probe", part_reference),
    8: ("config/gpu1.yaml's cost from a compiled trainer cell's measured tokens/s, beside a plain loop's", part_tier),
}
QUICK_PARTS = (2, 3, 4, 5, 7)   # --quick: no workflow, no speed table, no tier cell, no torch.compile


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
    parser = argparse.ArgumentParser(prog="python -m merit_repro.gpu_check", description=package.__doc__,
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
