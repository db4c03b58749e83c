"""Live tracking (merit_repro.train.tracking): the CSVs' rows in TensorBoard, a missing backend named before any job,
and tracking never part of a cell (switching it on retrains nothing); beside it, what is part of a cell through the
workflow: its identity, the train rule's one tracked param (merit_repro.plan.cell.identity)."""

import csv
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import CELL, WORKFLOW, cell_file, copy_workflow, dump_config, snakemake

from merit_repro.config import configfiles
from merit_repro.train import tracking
from merit_repro.utils import UserError


def csv_rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def tensorboard_scalars(run_dir):
    """{tag: [(step, value)]} of every event file under run_dir/tensorboard, as TensorBoard reads them."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


@pytest.mark.slow
def test_tensorboard_holds_every_row_of_the_csvs_across_a_stop_and_its_resumption(tmp_path, data_dir, monkeypatch):
    """A run stopped at its time budget after step 1, then resumed to the end: its tracker is closed at the
    stop and at the end, and TensorBoard has each CSV row, once, at its step."""
    from merit_repro.plan.cell import CellConfig
    from merit_repro.train.loop import EXIT_TIME_BUDGET, Run, Stop

    monkeypatch.setenv(tracking.ENV, '{"backend": "tensorboard"}')
    closed, close = [], tracking.TensorBoard.close
    monkeypatch.setattr(tracking.TensorBoard, "close", lambda self: (closed.append(self), close(self)))
    cfg = CellConfig.from_dict({**CELL, "data_dir": str(data_dir), "device": "cpu", "tokens": 8 * 32 * 12,
                                "eval_every": 4, "mal_every": 4}).validate()
    out = tmp_path / "run"
    with pytest.raises(Stop) as stop:
        Run(cfg, out, stop_at=0).run()
    assert stop.value.args[0] == EXIT_TIME_BUDGET and len(closed) == 1
    assert [s for s, _ in tensorboard_scalars(out)["metrics/train_loss"]] == [1]
    Run(cfg, out).run()
    assert len(closed) == 2
    scalars = tensorboard_scalars(out)

    assert [int(r["step"]) for r in csv_rows(out / "metrics.csv")] == list(range(13))
    assert {int(r["step"]) for r in csv_rows(out / "mal.csv")} == {0, 4, 8, 12} and csv_rows(out / "diagnostics.csv")
    want = {}   # every non-empty cell of the three CSVs but their step and identifying columns
    for kind, keys in [("metrics", ()), ("mal", ("layer", "head")), ("diagnostics", ("param",))]:
        for row in csv_rows(out / f"{kind}.csv"):
            where = "".join(f"/{row[k]}" if k == "param" else f"/{k}{row[k]}" for k in keys)
            for column, value in row.items():
                if column not in ("step", *keys) and value != "":
                    want.setdefault(f"{kind}{where}/{column}", []).append((int(row["step"]), float(value)))
    assert sorted(scalars) == sorted(want)
    assert {"metrics/val_loss", "metrics/tokens_per_s", "mal/layer2/head1/mal", "mal/layer1/head2/wk_max",
            "diagnostics/transformer.h.0.mlp.c_fc.weight/clip_fraction"} <= set(scalars)
    for tag, rows in want.items():
        assert [step for step, _ in scalars[tag]] == [step for step, _ in rows], tag
        assert [v for _, v in scalars[tag]] == pytest.approx([v for _, v in rows], rel=1e-6, abs=1e-12), tag   # float32


def test_tags_name_each_row_by_its_identifying_columns():
    assert tracking.scalars("mal", {"step": 4, "layer": 2, "head": 1, "mal": 3.5, "wq_max": 0.1, "wk_max": None}) == \
        {"mal/layer2/head1/mal": 3.5, "mal/layer2/head1/wq_max": 0.1}
    assert tracking.scalars("metrics", {"step": 0, "tokens": 0, "lr": 1e-3, "train_loss": None}) == \
        {"metrics/tokens": 0, "metrics/lr": 1e-3}
    assert tracking.scalars("diagnostics", {"step": 3, "param": "lm_head.weight", "clip_fraction": 0.25}) == \
        {"diagnostics/lm_head.weight/clip_fraction": 0.25}
    assert tracking.run_name("results/runs/T/4096/merit/bs8/lr5e-3/seed0") == "T/4096/merit/bs8/lr5e-3/seed0"
    assert tracking.run_name("/tmp/somewhere/run") == "run"


@pytest.mark.parametrize("backend", ["tensorboard", "wandb", "trackio"])
def test_a_backend_whose_package_is_missing_is_named_with_the_package(backend, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == backend else real(name, *a))
    with pytest.raises(UserError, match=f"backend {backend} needs the {backend} package.*pip install {backend}"):
        tracking.check_available(backend)
    monkeypatch.setenv(tracking.ENV, backend)
    with pytest.raises(UserError, match=f"pip install {backend}"):
        tracking.from_environment("run", {})
    tracking.check_available("none")   # never needs a package


def test_the_environment_variable_unset_or_none_tracks_nothing_and_bad_values_are_named(monkeypatch):
    monkeypatch.delenv(tracking.ENV, raising=False)
    assert type(tracking.from_environment("run", {})) is tracking.Tracker
    monkeypatch.setenv(tracking.ENV, '{"backend": "none", "project": "p"}')
    assert type(tracking.from_environment("run", {})) is tracking.Tracker
    monkeypatch.setenv(tracking.ENV, '{"backend": tensorboard}')
    with pytest.raises(UserError, match=f"{tracking.ENV}=.* is not JSON"):
        tracking.from_environment("run", {})
    monkeypatch.setenv(tracking.ENV, "mlflow")
    with pytest.raises(UserError, match="tracking backend 'mlflow' is unknown; known backends: none, tensorboard"):
        tracking.from_environment("run", {})
    monkeypatch.setenv(tracking.ENV, '{"backend": []}')
    with pytest.raises(UserError, match=r"tracking backend \[\] is unknown"):
        tracking.from_environment("run", {})
    monkeypatch.setenv(tracking.ENV, '{"backend": "none", "project": 3}')
    with pytest.raises(UserError, match=f"{tracking.ENV}=.* is not .*backend.*project"):
        tracking.from_environment("run", {})


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("trackio") is not None, reason="trackio is installed here")
def test_the_trainer_run_by_hand_reads_the_variable_and_fails_before_training(tmp_path, data_dir):
    cmd = [sys.executable, "-m", "merit_repro.train", "--config", str(cell_file(tmp_path, data_dir)),
           "--out", str(tmp_path / "run")]
    r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, tracking.ENV: "trackio"})
    assert r.returncode == 2 and "error: tracking backend trackio needs the trackio package" in r.stderr, r.stderr
    assert not (tmp_path / "run" / "metrics.csv").exists()


def test_the_schema_refuses_an_unknown_backend_with_its_choices():
    config = yaml.safe_load(WORKFLOW.read_text())
    config["tracking"] = {"backend": "mlflow"}
    with pytest.raises(UserError, match=r"tracking.backend: 'mlflow' is not one of \['none', 'tensorboard', 'wandb', "
                                        r"'trackio'\] \(where the rows also go"):
        configfiles.check_schema(config, configfiles.SCHEMA)
    config["tracking"] = {"backend": "tensorboard", "projekt": "x"}
    with pytest.raises(UserError, match=r"tracking: Additional properties are not allowed \('projekt' was"):
        configfiles.check_schema(config, configfiles.SCHEMA)


# ---------------------------------------------------------------- through the workflow, on its smallest config

RUN_PATH = "results/runs/T/4096/adamw/bs8/lr3e-3/seed{seed}"
ON = ("--config", "tracking={backend: tensorboard}")


@pytest.fixture(scope="module")
def one_cell(tmp_path_factory):
    """A copy of the workflow that has trained one cell (seed 0) without tracking."""
    tmp = tmp_path_factory.mktemp("wf")
    config = yaml.safe_load(WORKFLOW.read_text())
    config["experiments"] = {"one": {"models": ["T"], "tokens": 4096, "optimizers": ["adamw"], "batch_sizes": [8],
                                     "lr_grid": {"adamw": [3.0e-3]}}}
    path = tmp / "one.yaml"
    path.write_text(dump_config(config))
    workdir = copy_workflow(tmp / "wf")
    r = snakemake(workdir, f"{RUN_PATH.format(seed=0)}/summary.json", config=path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert not (workdir / RUN_PATH.format(seed=0) / "tensorboard").exists()
    return workdir, path


@pytest.mark.slow
def test_switching_tracking_on_retrains_nothing_and_reaches_the_trainers(one_cell):
    workdir, config = one_cell
    target = f"{RUN_PATH.format(seed=0)}/summary.json"
    r = snakemake(workdir, "-n", target, *ON, config=config)
    assert r.returncode == 0 and "Nothing to be done" in r.stdout + r.stderr, (r.stdout + r.stderr)[-3000:]
    other = f"{RUN_PATH.format(seed=1)}/summary.json"   # trained with tracking on: the variable reaches the job
    r = snakemake(workdir, other, *ON, config=config)
    assert r.returncode == 0, r.stderr[-3000:]
    assert list((workdir / RUN_PATH.format(seed=1) / "tensorboard").glob("events.out.tfevents.*"))


@pytest.mark.slow
@pytest.mark.parametrize("edit, retrains", [
    ({"spike_factor": 1.3, "grad_clip": 1}, False),   # CellConfig's defaults, written out (1 for 1.0)
    ({"checkpoint_every": 7, "log_every": 2}, False),   # how the cell runs, not what it is
    ({"grad_clip": 0.5}, True),
    ({"warmup_frac": None, "warmup_steps": 1}, True),   # a setting added later, once set
])
def test_only_a_change_of_the_cells_identity_retrains_it(one_cell, tmp_path, edit, retrains):
    workdir, path = one_cell
    config = yaml.safe_load(path.read_text())
    config["cell_defaults"] = dict(reversed({**config["cell_defaults"], **edit}.items()))   # another order of keys
    edited = tmp_path / "edited.yaml"
    edited.write_text(dump_config(config))
    r = snakemake(workdir, "-n", f"{RUN_PATH.format(seed=0)}/summary.json", config=edited)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert ("Nothing to be done" not in out) == retrains, out[-3000:]


@pytest.mark.slow
def test_the_environment_moved_retrains_nothing(one_cell, tmp_path):
    """The interpreter reaches every job as a resource, not a param: the same environment under another path (a
    link to it here) changes no job."""
    workdir, config = one_cell
    moved = tmp_path / "env"
    moved.symlink_to(sys.prefix, target_is_directory=True)
    python = moved / "bin" / Path(sys.executable).name
    if not python.exists():
        pytest.skip(f"{sys.executable} is not in {sys.prefix}/bin")
    seen = subprocess.run([str(python), "-c", "import sys; print(sys.executable)"], capture_output=True, text=True)
    assert seen.stdout.strip() == str(python)   # the jobs would run it under its new path
    r = subprocess.run([str(python), "-m", "snakemake", "-n", f"{RUN_PATH.format(seed=0)}/summary.json", "--cores",
                        "2", "--configfile", str(config)], cwd=workdir, capture_output=True, text=True)
    out = r.stdout + r.stderr
    assert r.returncode == 0 and "Nothing to be done" in out, out[-3000:]


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("trackio") is not None, reason="trackio is installed here")
def test_a_backend_that_is_not_installed_stops_the_workflow_before_any_job(one_cell):
    workdir, config = one_cell
    r = snakemake(workdir, f"{RUN_PATH.format(seed=2)}/summary.json", "--config", "tracking={backend: trackio}",
                  config=config)
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "Traceback" not in out, out[-3000:]
    assert "tracking backend trackio needs the trackio package, which is not installed: pip install trackio" in out
    assert not (workdir / RUN_PATH.format(seed=2)).exists()
