"""Snakemake's own cost of scheduling, with its defaults and with the settings of profiles/default.

    python benchmarks/scheduler.py                 # 120 jobs of 0.5 s on 2 cores
    python benchmarks/scheduler.py --jobs 300 --seconds 0.2

Runs a synthetic workflow (N independent jobs that sleep, all ready from the start, as the demo's
training cells are) in a temporary folder, once per setting, and prints the wall time, the CPU of the
Snakemake process and its children, and how many job selections Snakemake made (its "Ready jobs"
debug lines) and at what rate in the last tenth of the run. Snakemake 9 re-selects one timespan after
every selection, so with the default 100/1s the rate grows with every job that finishes.
"""

import argparse
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SNAKEFILE = """
rule all:
    input: expand("out/{{i}}.txt", i=range({jobs}))

rule one:
    output: "out/{{i}}.txt"
    shell: "sleep {seconds}; touch {{output}}"
"""

SETTINGS = {
    "Snakemake's defaults": [],
    "profiles/default": ["--max-jobs-per-timespan", "100/5s", "--scheduler", "greedy"],
}


def run(folder, args, cores):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "snakemake", "--cores", str(cores), "--verbose", *args], cwd=folder,
                       capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode:
        raise SystemExit(f"error: snakemake failed:\n{r.stderr[-2000:]}")
    stamps, selections = None, []
    for line in r.stderr.splitlines():
        if m := re.match(r"^\[(\w+ \w+ +\d+ [\d:]+ \d+)\]$", line):
            stamps = time.mktime(time.strptime(m.group(1), "%a %b %d %H:%M:%S %Y"))
        elif line.startswith("Ready jobs") and stamps is not None:
            selections.append(stamps)
    last = [t for t in selections if t >= selections[-1] - 0.1 * (selections[-1] - selections[0])] if selections else []
    span = (last[-1] - last[0]) if len(last) > 1 else 0
    return {"wall": wall, "cpu": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
            "selections": len(selections), "rate": len(last) / span if span else float("nan")}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=120)
    parser.add_argument("--seconds", type=float, default=0.5, help="each job's sleep")
    parser.add_argument("--cores", type=int, default=2)
    args = parser.parse_args()
    print(f"{args.jobs} jobs of {args.seconds} s on {args.cores} cores "
          f"(at least {args.jobs * args.seconds / args.cores:.0f} s)")
    print(f"{'settings':22s} {'wall s':>7s} {'CPU s':>6s} {'selections':>10s} {'per s at the end':>16s}")
    for name, extra in SETTINGS.items():
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "Snakefile").write_text(SNAKEFILE.format(jobs=args.jobs, seconds=args.seconds))
            r = run(tmp, extra, args.cores)
        print(f"{name:22s} {r['wall']:7.1f} {r['cpu']:6.1f} {r['selections']:10d} {r['rate']:16.1f}")


if __name__ == "__main__":
    main()
