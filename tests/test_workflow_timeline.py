"""benchmarks/workflow_timeline.py reads Snakemake's log as Snakemake 9 writes it."""

import importlib.util
from pathlib import Path

import pytest

SPEC = importlib.util.spec_from_file_location(
    "workflow_timeline", Path(__file__).resolve().parents[1] / "benchmarks" / "workflow_timeline.py")
timeline = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(timeline)

LOG = """Select jobs to execute...
Execute 2 jobs...

[Sun Dec  6 02:37:32 2026]
localrule train:
    output: results/runs/a/summary.json
    jobid: 45

[Sun Dec  6 02:37:32 2026]
localcheckpoint tune_lr:
    jobid: 131
[Sun Dec  6 02:37:42 2026]
Finished jobid: 131 (Rule: tune_lr)
1 of 3 steps (33%) done
[Sun Dec  6 02:37:44 2026]
Finished jobid: 45 (Rule: train)

[Sun Dec  6 02:37:50 2026]
localrule artifact:
    jobid: 7
[Sun Dec  6 02:37:53 2026]
Finished jobid: 7 (Rule: artifact)
"""


def test_jobs_pair_each_start_with_its_finish():
    done = timeline.jobs(LOG.splitlines())
    assert sorted((rule, end - start) for rule, start, end in done) == [("artifact", 3), ("train", 12), ("tune_lr", 10)]


def test_idle_and_partly_busy_seconds():
    assert timeline.busy_profile([(0, 12), (0, 10), (18, 21)], cores=2) == (6, 5)


def test_a_log_without_finished_jobs_is_one_error(tmp_path, capsys):
    log = tmp_path / "empty.snakemake.log"
    log.write_text("Building DAG of jobs...\n")
    with pytest.raises(SystemExit, match="^error: the log holds no finished job"):
        timeline.main(["--log", str(log)])
