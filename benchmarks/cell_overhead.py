"""Per-cell overhead of the workflow's training jobs: job wall time minus training, evaluation and MAL probe.

    python benchmarks/cell_overhead.py                      # read results/ of the last `snakemake` run
    python benchmarks/cell_overhead.py --results DIR
    python benchmarks/cell_overhead.py --run [--configfile config/config.yaml] [--cores 2]

Job wall time is what Snakemake's `benchmark:` file of each train job records (start-up, data checks,
model build, training, evaluation, writing files); the work is the summary's train + eval + probe
seconds. ``--run`` runs the workflow twice from an empty results folder in a temporary copy of the
repository, with fresh trainer processes (MERIT_WARM_START=0) and with the warm trainer
(merit_repro.launch.warmstart), and prints both, with the workflow's wall time.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]


def overhead(results):
    rows = []
    for bench in (Path(results) / "benchmarks" / "train").rglob("*.tsv"):
        cell = bench.relative_to(Path(results) / "benchmarks" / "train").with_suffix("")
        summary = json.loads((Path(results) / "runs" / cell / "summary.json").read_text())
        work = summary["train_seconds"] + summary["eval_seconds"] + summary["mal_probe_seconds"]
        rows.append({"cell": str(cell), "wall": float(pd.read_csv(bench, sep="\t")["s"].iloc[0]), "work": work})
    if not rows:
        raise SystemExit(f"error: no train benchmarks under {results}/benchmarks/train; run snakemake first")
    return pd.DataFrame(rows)


def report(label, df, wall=None):
    over = df.wall - df.work
    line = (f"{label}: {len(df)} cells, job wall {df.wall.sum():.1f} s, training+eval+probe {df.work.sum():.1f} s, "
            f"overhead {over.sum():.1f} s = {over.mean():.2f} s per cell (median {over.median():.2f}) = "
            f"{100 * over.sum() / df.wall.sum():.1f}% of training jobs' wall time")
    print(line + (f"; workflow wall time {wall:.0f} s" if wall else ""), flush=True)


def run(configfile, cores, warm):
    with tempfile.TemporaryDirectory() as tmp:
        for name in ["Snakefile", "workflow", "config", "src"]:
            (shutil.copytree if (REPO / name).is_dir() else shutil.copy)(REPO / name, Path(tmp) / name)
        env = {**os.environ, "MERIT_WARM_START": "1" if warm else "0"}
        start = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "snakemake", "--cores", str(cores), "--configfile",
                            str(Path(configfile).resolve())], cwd=tmp, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - start
        if r.returncode:
            raise SystemExit(f"error: snakemake failed:\n{r.stderr[-3000:]}")
        report("warm trainer" if warm else "fresh processes", overhead(Path(tmp) / "results"), wall)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", default="results")
    parser.add_argument("--run", action="store_true", help="run the workflow with fresh and with warm trainers")
    parser.add_argument("--configfile", default=str(REPO / "config" / "config.yaml"))
    parser.add_argument("--cores", type=int, default=2)
    args = parser.parse_args(argv)
    if args.run:
        for warm in (False, True):
            run(args.configfile, args.cores, warm)
    else:
        report(args.results, overhead(args.results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
