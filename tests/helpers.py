"""What the tests share: the tiny workflow and how to run it, the tiny cell and how to train it, a command's one
`error:` line, private copies of a finished run and of the demo corpus. Fixtures are conftest.py's."""

import csv
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from merit_repro.data import tokens
from merit_repro.train.runfiles import TIMING_COLUMNS

REPO = Path(__file__).resolve().parents[1]
WORKFLOW = REPO / "tests" / "workflow_config.yaml"   # the tiny workflow config
CELL = dict(model="demo-tiny", block_size=32, batch_size=8, tokens=8 * 32 * 40, eval_every=10, mal_every=10,
            eval_tokens=2048, mal_batch=2, checkpoint_every=3, lr=3e-3)   # the tiny cell


# ---------------------------------------------------------------- the workflow


def copy_workflow(dest):
    dest.mkdir(parents=True, exist_ok=True)
    for name in ["Snakefile", "workflow", "config", "src"]:
        src = REPO / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dest / name)
    return dest


def snakemake(workdir, *args, config=WORKFLOW, env=None):
    cmd = [sys.executable, "-m", "snakemake", *args, "--cores", "2", "--configfile", str(config)]  # nargs="+" last
    return subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, env=env)


class PlainDumper(yaml.SafeDumper):
    """Writes a value shared by two keys twice, as a person would: no anchors (the workflow refuses them)."""

    def ignore_aliases(self, data):
        return True


def dump_config(config):
    return yaml.dump(config, Dumper=PlainDumper)


def edited(edit):
    config = yaml.safe_load(WORKFLOW.read_text())
    edit(config)
    return config


# ---------------------------------------------------------------- one cell


def cell_file(tmp_path, data_dir, **overrides):
    path = tmp_path / f"cell-{len(list(tmp_path.glob('cell-*')))}.yaml"
    path.write_text(yaml.safe_dump({**CELL, "data_dir": str(data_dir), **overrides}))
    return path


def run_cli(config, out, *extra, wait=True, env=None):
    cmd = [sys.executable, "-m", "merit_repro.train", "--config", str(config), "--out", str(out), *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    if not wait:
        return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    return subprocess.run(cmd, capture_output=True, text=True, env=env)


def read_rows(path, drop=TIMING_COLUMNS):
    with open(path) as f:
        return [{k: v for k, v in row.items() if k not in drop} for row in csv.DictReader(f)]


def rows_written(path):
    return max(0, len(path.read_text().splitlines()) - 1) if path.exists() else 0


def kill_after_rows(proc, metrics, rows, sig, timeout=120):
    """Send sig to a running trainer once it has logged `rows` steps; its exit code."""
    deadline = time.time() + timeout
    while rows_written(metrics) < rows and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert proc.poll() is None, "the run finished before it could be killed"
    proc.send_signal(sig)
    return proc.wait(60)


SLOW_TRAINER = """import os, sys, time
argv = sys.orig_argv
if argv[argv.index("-m") + 1:argv.index("-m") + 2] == ["merit_repro.train"] and os.environ.get("RANK", "0") == "0":
    from merit_repro.train import checkpoint, loop   # the trainer's rank 0 only, not torchrun's agent nor Snakemake
    if "SLOW_SAVE_SECONDS" in os.environ:
        real_save = checkpoint.save
        def slow_save(*args, **kwargs):
            print(f"[test] saving {os.environ['SLOW_SAVE_SECONDS']} s slower", flush=True)
            time.sleep(float(os.environ["SLOW_SAVE_SECONDS"]))
            return real_save(*args, **kwargs)
        checkpoint.save = slow_save
    if "SLOW_STEP_SECONDS" in os.environ:
        print(f"[test] each step {os.environ['SLOW_STEP_SECONDS']} s slower", flush=True)
        real_step = loop.Run.train_step
        def slow_step(self, *args, **kwargs):
            time.sleep(float(os.environ["SLOW_STEP_SECONDS"]))
            return real_step(self, *args, **kwargs)
        loop.Run.train_step = slow_step
if argv[argv.index("-m") + 1:argv.index("-m") + 2] == ["merit_repro.launch"] and "SLOW_EXIT_SECONDS" in os.environ:
    from merit_repro.launch import launcher   # the launcher's last moments, after its trainer has ended
    real_launch = launcher.launch_cell
    def slow_launch(*args, **kwargs):
        code = real_launch(*args, **kwargs)
        seconds = os.environ["SLOW_EXIT_SECONDS"]
        print(f"[test] trainer ended at {time.time():.3f}; exiting {seconds} s later", flush=True)
        time.sleep(float(seconds))
        return code
    launcher.launch_cell = slow_launch
"""


def slow_trainer_env(tmp_path, save_seconds=None, step_seconds=None, exit_seconds=None):
    """Environment in which the trainer's rank 0 takes `save_seconds` longer to save each checkpoint and
    `step_seconds` longer for each step (the numbers stay the same), and the launcher exits `exit_seconds` after its
    trainer has ended: a sitecustomize on PYTHONPATH, which every Python started with it, in a SLURM job too, loads
    first."""
    shim = tmp_path / "slow-trainer"
    shim.mkdir(exist_ok=True)
    (shim / "sitecustomize.py").write_text(SLOW_TRAINER)
    slower = {"SLOW_SAVE_SECONDS": save_seconds, "SLOW_STEP_SECONDS": step_seconds, "SLOW_EXIT_SECONDS": exit_seconds}
    return {"PYTHONPATH": os.pathsep.join([str(shim), *filter(None, [os.environ.get("PYTHONPATH")])]),
            **{name: str(seconds) for name, seconds in slower.items() if seconds is not None}}


def launch(warm_dir, data_dir, out, *, warm, wait=True, **overrides):
    """python -m merit_repro.launch as the train rule runs it, with its own warm trainer."""
    import json

    cell = {**CELL, "data_dir": str(data_dir), **overrides}
    cmd = [sys.executable, "-m", "merit_repro.launch", "--cell", json.dumps(cell), "--out", str(out)]
    env = {**os.environ, "MERIT_WARM_START": "1" if warm else "0", "TMPDIR": warm_dir, "MERIT_WARM_START_IDLE": "20"}
    if not wait:
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    return subprocess.run(cmd, capture_output=True, text=True, env=env)


def in_process_run(tmp_path, data_dir, **overrides):
    from merit_repro.plan.cell import CellConfig
    from merit_repro.train.loop import Run

    settings = {**CELL, "data_dir": str(data_dir), "device": "cpu", **overrides}
    return Run(CellConfig.from_dict(settings).validate(), tmp_path / "run")


# ---------------------------------------------------------------- runs, corpora and error lines


SCHEMA = str(REPO / "workflow" / "schemas" / "config.schema.yaml")


def cli_error(main, argv, capsys):
    """The one `error:` line a CLI main prints for bad input (and its exit code 2)."""
    code = main(argv)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


def private_copy(finished_run, tmp_path):
    run, corpus = finished_run
    shutil.copytree(corpus, tmp_path / "corpus")
    shutil.copytree(run, tmp_path / "run")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    settings = {**summary["config"], "data_dir": str(tmp_path / "corpus")}
    return tmp_path / "run", tmp_path / "corpus", settings


def result_keys(settings):
    from merit_repro.plan.cell import identity

    return identity(settings)


def prepare_again(corpus):
    tokens.prepare("shakespeare", "bytes", corpus, max_train_tokens=50_000, force=True)


def trained_on_a_copy(tmp_path, data_dir, capsys, **overrides):
    """A complete cell (trained in this process) on a private copy of the demo corpus: (config, run, corpus)."""
    corpus = tmp_path / "corpus"
    shutil.copytree(data_dir, corpus)
    config, out = cell_file(tmp_path, corpus, tokens=8 * 32 * 10, **overrides), tmp_path / "run"
    from merit_repro.train import loop

    assert loop.main(["--config", str(config), "--out", str(out)]) == 0
    capsys.readouterr()
    return config, out, corpus


def tiny_config():
    return yaml.safe_load(WORKFLOW.read_text())


def inductor_builds():
    """Skips the test unless inductor builds its C++ kernels here (a compiler it can use)."""
    import torch

    try:
        torch.compile(lambda x: x + 1)(torch.ones(2))
    except Exception as err:
        pytest.skip(f"inductor cannot build its C++ kernels here: {type(err).__name__}: {str(err)[:200]}")
