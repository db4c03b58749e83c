"""The mechanism configs (issues 43, 55): the CPU one and the one-GPU one plan the design their artifact reads (warmup
rules, the QK-norm control, probes at the same tokens, curve seeds at the large batch), their dry runs, the GPU runner's
arguments, the GPU price and its slot."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from merit_repro.config import configfiles
from merit_repro.plan import cost, grid
from merit_repro.plan.cell import CellConfig
from merit_repro.plan.validate import validate

REPO = Path(__file__).resolve().parents[1]
CONFIGS = {"mechanism.yaml": (8, 64), "mechanism_gpu.yaml": (16, 128)}   # small, large batch
RUNNER = REPO / "scripts" / "mechanism_gpu.sh"


def cells_of(config):
    """{(model, optimizer, batch): the CellConfig of its first grid cell}."""
    return {(g.model, g.optimizer, g.batch): CellConfig.from_dict(grid.cell_config(config, g.model, g.tokens,
                                                                                   g.optimizer, g.batch, g.lrs[0], 0))
            for g in grid.experiment_groups(config, "mechanism")}


@pytest.mark.parametrize("name", CONFIGS)
def test_the_design_the_artifact_reads(name):
    """Short rule at both batches for AdamW, MERIT at the large one; the long rule at the large one with the small
    batch's warmup steps, the QK-norm control for AdamW alone; 64 probes at the same token positions at both batches;
    curve seeds at AdamW's and MERIT's large-batch groups, fresh; no seed of the issue-43 runs (0-4)."""
    small, large = CONFIGS[name]
    config = validate(configfiles.load(REPO / "config" / name))
    spec = config["experiments"]["mechanism"]
    short, long, control = spec["models"]
    cells = cells_of(config)
    assert sorted(cells) == sorted([(short, "adamw", small), (short, "adamw", large), (short, "merit", large),
                                    (long, "adamw", large), (long, "merit", large), (control, "adamw", large)])
    assert cells[(long, "adamw", large)].lr_warmup_steps == cells[(short, "adamw", small)].lr_warmup_steps
    assert cells[(short, "adamw", large)].lr_warmup_steps < cells[(short, "adamw", small)].lr_warmup_steps
    assert cells[(control, "adamw", large)].qk_norm and not cells[(short, "adamw", large)].qk_norm
    at = lambda cfg: [s * cfg.tokens_per_step for s in cfg.probe_steps()]  # noqa: E731
    assert at(cells[(short, "adamw", small)]) == at(cells[(short, "adamw", large)])
    assert len(at(cells[(short, "adamw", small)])) == 65
    assert spec["artifacts"][0] == "mal_vs_lr"
    assert spec["curve"]["batch_sizes"] == {short: {"adamw": [large], "merit": [large]}}
    assert {2, 4} <= set(spec["curve"]["multiples"])
    seeds = grid.grid_seeds(config, "mechanism") + grid.claim_seeds(config, "mechanism") + spec["curve"]["seeds"]
    assert not set(seeds) & set(range(5)) and len(set(seeds)) == len(seeds)


@pytest.mark.slow
@pytest.mark.parametrize("name", CONFIGS)
def test_a_dry_run_plans_the_grid(tmp_path, name):
    config = validate(configfiles.load(REPO / "config" / name))
    grid_cells = len(grid.experiment_cells(config, "mechanism"))
    gpus = ["--resources", "gpu=12"] if "gpu" in name else []
    r = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "2", *gpus, "--configfile",
                        f"config/{name}", "--config", f"results={tmp_path}/results", f"figures={tmp_path}/figures"],
                       cwd=REPO,
                       capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert len(re.findall(r"rule train:", out)) == grid_cells
    assert len(re.findall(r"gpu=1,", out)) == (grid_cells if gpus else 0)


def test_the_gpu_config_prices_within_ten_gpu_minutes_at_gpt2_smalls_flop_rate(capsys):
    """The issue's price: GPT-2 Small's measured 450k tokens/s as a FLOP rate (a floor for so small a model: the
    config's header gives the rate measured with 12 cells side by side)."""
    args = ["--configfile", str(REPO / "config" / "mechanism_gpu.yaml"), "--rate-of", "gpt2-small=450000"]
    assert cost.main(args) == 0
    out = capsys.readouterr().out
    grid_minutes, tuning_minutes = map(float, re.search(r"GPU-minutes: ([0-9.]+), \+ tuning at most ([0-9.]+)",
                                                        out).groups())
    assert "385 TFLOP/s per GPU (gpt2-small's 450,000 tokens/s at context 1024, by FLOPs)" in out
    assert grid_minutes + tuning_minutes < 10
    assert cost.main([*args[:3], "gpt2-tiny=fast"]) == 2
    assert capsys.readouterr().err.strip().startswith("error: --rate-of 'gpt2-tiny=fast' must be SIZE=TOKENS_PER_S")


def test_the_gpu_config_trains_within_its_slot(capsys):
    """At the seconds a cell measured on an H200 with 12 side by side (scaled to the config's 2^22 tokens: the
    config's header), every planned cell trains in under 4 minutes of the slot's 5, without extensions."""
    config = validate(configfiles.load(REPO / "config" / "mechanism_gpu.yaml"))
    assert config["tuning"]["max_extensions"] == 0 and config["experiments"]["mechanism"]["tokens"] == 2 ** 22
    args = ["--configfile", str(REPO / "config" / "mechanism_gpu.yaml"), "--slots", "12", "--cell-seconds", "16=58",
            "128=33"]
    assert cost.main(args) == 0
    out = capsys.readouterr().out
    cells, seconds = map(int, re.search(r"# (\d+) cells, .* = (\d+) s of training", out).groups())
    assert cells == 53 and seconds < 240, out
    assert cost.main([*args[:-1]]) == 2
    assert "give BATCH=SECONDS for every batch" in capsys.readouterr().err
    assert cost.main([*args[:4]]) == 2
    assert "give --slots and --cell-seconds together" in capsys.readouterr().err


def runner(*args):
    return subprocess.run(["bash", str(RUNNER), *args], capture_output=True, text=True, timeout=60)


def test_the_gpu_runner_parses_and_says_how_to_use_it():
    assert subprocess.run(["bash", "-n", str(RUNNER)]).returncode == 0
    r = runner("--help")
    assert r.returncode == 0 and "--cells-per-gpu" in r.stdout and "MERIT_CELLS_PER_GPU=12" in r.stdout
    for args, says in [(["--cells-per-gpu", "0"], "--cells-per-gpu 0 must be a whole number >= 1"),
                       (["--gpus", "two"], "--gpus two must be a whole number >= 1"),
                       (["--cores"], "--cores needs a value"), (["--bogus"], "unknown argument --bogus")]:
        r = runner(*args)
        lines = [line for line in r.stderr.splitlines() if line.strip()]
        assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], args


@pytest.mark.parametrize("args, refused, most", [
    (["--cells-per-gpu", "4611686018427387904", "--gpus", "4"], "--cells-per-gpu 4611686018427387904", 64),
    (["--cells-per-gpu", "12", "--gpus", "65"], "--gpus 65", 64), (["--cells-per-gpu", "65"], "--cells-per-gpu 65", 64),
    (["--cells-per-gpu", "\u00b2"], "--cells-per-gpu \u00b2", 64), (["--cores", "9" * 30], f"--cores {'9' * 30}", 4096),
])
def test_the_gpu_runner_refuses_counts_out_of_range_before_any_arithmetic(args, refused, most):
    """--cells-per-gpu 4611686018427387904 --gpus 4 used to pass: bash's product wrapped to --resources gpu=0."""
    r = runner(*args, "--dry-run")
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode == 2 and lines == [f"error: {refused} must be a whole number >= 1 and <= {most}: give one in "
                                           "that range"], r.stderr


def test_batch_sizes_per_model_and_optimizer_name_only_the_experiments_optimizers():
    """An optimizer a model's batch sizes leave out trains nothing there; one they name must be the experiment's
    (a misspelt name would otherwise train nothing, silently)."""
    config = configfiles.load(REPO / "config" / "mechanism.yaml")
    spec = config["experiments"]["mechanism"]
    assert grid.batch_list(spec, "mech-M-qk", "merit") == [] and grid.batch_list(spec, "mech-M-qk", "adamw") == [64]
    assert grid.batch_list(spec, "mech-M", "merit") == [64]
    spec["batch_sizes"]["mech-M-qk"] = {"adamW": [64]}
    with pytest.raises(ValueError, match=r"experiments.mechanism.batch_sizes.mech-M-qk.adamW: 'adamW' is not one of "
                                         r"the experiment's optimizers \(adamw, merit\)"):
        validate(config)


@pytest.mark.slow
def test_the_gpu_runners_dry_run_prints_the_plan_and_its_slot_price(tmp_path):
    r = subprocess.run(["bash", str(RUNNER), "--dry-run", "--no-setup", "--", "--config",
                        f"results={tmp_path}/results", f"figures={tmp_path}/figures"], capture_output=True, text=True,
                       timeout=300, env={**os.environ, "PYTHON": sys.executable})
    assert r.returncode == 0, r.stderr[-3000:]
    assert "This was a dry-run" in r.stdout + r.stderr
    seconds = int(re.search(r"# 53 cells, .* = (\d+) s of training", r.stdout)[1])
    assert seconds < 240
