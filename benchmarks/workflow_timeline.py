"""Where a finished workflow run's wall time went: each rule's jobs, the phases, and the idle cores.

    python benchmarks/workflow_timeline.py                  # the newest .snakemake/log/*.snakemake.log
    python benchmarks/workflow_timeline.py --log FILE --cores 2 --results results

Reads Snakemake's own log (a job's start is the timestamp before its `rule NAME:` block, its end the one before
`Finished jobid: N`; whole seconds) and prints, per rule, the jobs, their seconds summed, and when the first
started and the last ended, counted from the first job's start; then the core-seconds the run had (cores x span),
what its jobs used, and the seconds with every core idle or only some busy. With --results it adds the training
cells' own compute (their summaries' train_seconds), the floor that no change outside the cells can lower.
benchmarks/cell_overhead.py splits a training job's wall time finer.
"""

import argparse
import json
import re
import sys
from collections import defaultdict
from datetime import datetime
from pathlib import Path

STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")
STARTS = re.compile(r"^(?:local)?(?:rule|checkpoint) (\w+):$")
JOBID = re.compile(r"^\s+jobid: (\d+)$")
FINISHED = re.compile(r"^Finished jobid: (\d+) \(Rule: (\w+)\)$")


def jobs(lines):
    """[(rule, start, end)] in seconds since the epoch, for every job the log saw start and finish."""
    started, done, stamp, rule = {}, [], None, None
    for line in lines:
        if m := STAMP.match(line):
            stamp = datetime.strptime(" ".join(m.group(1).split()), "%a %b %d %H:%M:%S %Y").timestamp()
        elif m := STARTS.match(line):
            rule = m.group(1)
        elif (m := JOBID.match(line)) and rule:
            started[m.group(1)], rule = (rule, stamp), None
        elif (m := FINISHED.match(line)) and m.group(1) in started:
            name, start = started.pop(m.group(1))
            done.append((name, start, stamp))
    return done


def busy_profile(spans, cores):
    """Seconds with no job running and with some but not every core busy, between the first start and last end."""
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    running, last, idle, partial = 0, events[0][0], 0.0, 0.0
    for t, step in events:
        if running == 0:
            idle += t - last
        elif running < cores:
            partial += t - last
        running, last = running + step, t
    return idle, partial


def report(done, cores, results=None):
    if not done:
        raise SystemExit("error: the log holds no finished job; give the log of a run that finished jobs (--log)")
    t0 = min(start for _, start, _ in done)
    by_rule = defaultdict(list)
    for rule, start, end in done:
        by_rule[rule].append((start - t0, end - t0))
    print(f"{'rule':<16}{'jobs':>6}{'job s':>9}{'first start':>13}{'last end':>10}")
    for rule, spans in sorted(by_rule.items(), key=lambda item: min(s for s, _ in item[1])):
        print(f"{rule:<16}{len(spans):>6}{sum(e - s for s, e in spans):>9.0f}{min(s for s, _ in spans):>13.0f}"
              f"{max(e for _, e in spans):>10.0f}")
    spans = [span for rule_spans in by_rule.values() for span in rule_spans]
    span = max(e for _, e in spans)
    used = sum(e - s for s, e in spans)
    idle, partial = busy_profile(spans, cores)
    print(f"span {span:.0f} s from the first job's start to the last job's end; {cores} cores: {cores * span:.0f} "
          f"core-s, jobs used {used:.0f}; no job running {idle:.0f} s, fewer jobs than cores {partial:.0f} s")
    if results:
        summaries = list((Path(results) / "runs").rglob("summary.json"))
        compute = sum(json.loads(p.read_text()).get("train_seconds") or 0 for p in summaries)
        print(f"training cells: {len(summaries)}, train_seconds summed {compute:.0f} = {compute / cores:.0f} s of wall "
              f"on {cores} cores, the floor below the span")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--log", help="a Snakemake log (default: the newest under .snakemake/log)")
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--results", help="the run's results folder, for the training cells' own compute")
    args = parser.parse_args(argv)
    log = Path(args.log) if args.log else max(Path(".snakemake/log").glob("*.snakemake.log"), default=None,
                                               key=lambda p: p.stat().st_mtime)
    if log is None or not log.is_file():
        raise SystemExit(f"error: no Snakemake log at {args.log or '.snakemake/log/'}; run snakemake first, "
                         "or give --log")
    if args.cores < 1:
        raise SystemExit(f"error: --cores {args.cores}: give the cores the run had, at least 1")
    report(jobs(log.read_text().splitlines()), args.cores, args.results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
