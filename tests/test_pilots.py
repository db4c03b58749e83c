"""Pilots fix settings before the runs they judge: the mechanism pilot's rule, its seeds, and the config it set."""

import importlib.util
from pathlib import Path

import pandas as pd
import pytest

from merit_repro.config import configfiles
from merit_repro.train.pilot import refuse_reporting_seeds
from merit_repro.utils import UserError

REPO = Path(__file__).resolve().parents[1]


def load_script(name):
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_score_is_the_peak_mal_at_the_lr_tuning_would_choose():
    pilot = load_script("mechanism_pilot")
    runs = pd.DataFrame([
        # lr 8e-3 has the lowest loss on one seed but diverged on the other: out, as tuning rules it out
        dict(lr="8e-3", seed=200, ok=True, final_val_loss=2.0, peak_mal=90.0),
        dict(lr="8e-3", seed=201, ok=False, final_val_loss=None, peak_mal=400.0),
        dict(lr="4e-3", seed=200, ok=True, final_val_loss=2.5, peak_mal=10.0),
        dict(lr="4e-3", seed=201, ok=True, final_val_loss=2.6, peak_mal=14.0),
        dict(lr="2e-3", seed=200, ok=True, final_val_loss=2.7, peak_mal=5.0),
        dict(lr="2e-3", seed=201, ok=True, final_val_loss=2.7, peak_mal=5.0),
    ])
    assert pilot.score(runs) == (12.0, "4e-3", pytest.approx(2.55))
    assert pilot.score(runs[runs.lr == "8e-3"]) == (None, None, None)


def test_the_projection_counts_every_optimizer_batch_and_seed():
    pilot = load_script("mechanism_pilot")
    config = configfiles.load(REPO / "config" / "mechanism.yaml")
    # 3 optimizers x (5 AdamW LRs + 4 claim seeds) cells per batch, at 1000 tokens/s and half that, on 2 cores (the
    # pilot's projection, for issue 31's design of 3 optimizers at 2 batches)
    minutes = pilot.projected_minutes(config, "mechanism", 60_000, 1000.0)
    assert minutes == pytest.approx(27 * 60_000 * (1 + pilot.SMALL_BATCH_SLOWDOWN) / 1000 / 2 / 60)


def test_a_pilot_refuses_seeds_that_choose_or_report():
    config = configfiles.load(REPO / "config" / "mechanism.yaml")
    with pytest.raises(UserError, match=r"pilot seeds \[0, 3\] are grid or claim seeds"):
        refuse_reporting_seeds(config, [0, 3, 200])
    refuse_reporting_seeds(config, [200, 201])


def pilot_error(name, argv, capsys):
    """The one error line a pilot script prints before training anything (and its exit code 2)."""
    code = load_script(name).main(argv)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


@pytest.mark.parametrize("name, config", [("mechanism_pilot", "mechanism.yaml"), ("pilot_target", "config.yaml")])
def test_a_pilot_refuses_bad_input_in_one_line(tmp_path, capsys, name, config):
    text = (REPO / "config" / config).read_text()
    (tmp_path / "twice.yaml").write_text(text + "\nresults: elsewhere\n")
    (tmp_path / "empty.yaml").write_text("{}\n")
    assert "duplicate key results" in pilot_error(name, ["--configfile", str(tmp_path / "twice.yaml")], capsys)
    assert f"No such file or directory: {tmp_path / 'none.yaml'}" in pilot_error(
        name, ["--configfile", str(tmp_path / "none.yaml")], capsys)
    assert "invalid workflow config" in pilot_error(name, ["--configfile", str(tmp_path / "empty.yaml")], capsys)
    base = ["--configfile", str(REPO / "config" / config)]
    assert "--jobs 0 must be a finite number > 0" in pilot_error(name, [*base, "--jobs", "0"], capsys)
    assert "--seeds -1 must be a finite number >= 0" in pilot_error(name, [*base, "--seeds", "-1"], capsys)
    assert "are grid or claim seeds" in pilot_error(name, [*base, "--seeds", "1"], capsys)


def test_the_mechanism_pilot_refuses_bad_candidates_in_one_line(capsys):
    base = ["--configfile", str(REPO / "config" / "mechanism.yaml")]
    for flag, value, says in [("--contexts", "-64", "--contexts -64 must be a finite number > 0"),
                              ("--tokens", "0", "--tokens 0 must be a finite number > 0"),
                              ("--budget-minutes", "nan", "--budget-minutes nan must be a finite number > 0"),
                              ("--experiment", "none", "has no experiment 'none'")]:
        assert says in pilot_error("mechanism_pilot", [*base, flag, value], capsys)


def test_the_mechanism_config_records_its_pilot():
    """The setting the pilot chose is still the config's, with its rule beside it (a dry run of the config:
    tests/test_mechanism_configs.py)."""
    text = (REPO / "config" / "mechanism.yaml").read_text()
    assert "scripts/mechanism_pilot.py" in text and "pilot seeds 200-201" in text
    config = configfiles.load(REPO / "config" / "mechanism.yaml")
    assert config["cell_defaults"]["block_size"] == 64 and config["experiments"]["mechanism"]["tokens"] == 2 ** 21
