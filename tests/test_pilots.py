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


def test_the_premise_is_the_rise_over_half_to_four_times_the_lr_tuning_would_choose():
    pilot = load_script("mechanism_pilot")
    rows = []
    # lr 1.6e-2 has the lowest loss on one seed but diverged on the other: out, as tuning rules it out; LR* is 4e-3
    for lr, losses, mals, ok in [("1e-3", (2.9, 2.9), (4.0, 4.0), True), ("2e-3", (2.7, 2.7), (5.0, 20.0), True),
                                 ("4e-3", (2.5, 2.6), (10.0, 14.0), True), ("8e-3", (2.6, 2.7), (60.0, 60.0), True),
                                 ("1.6e-2", (2.0, None), (90.0, 400.0), False),
                                 ("3.2e-2", (2.8, 2.9), (1000.0, 1000.0), True)]:
        rows += [dict(lr=lr, seed=200 + i, ok=ok or i == 0, final_val_loss=x, peak_mal=m)
                 for i, (x, m) in enumerate(zip(losses, mals))]
    found = pilot.premise(pd.DataFrame(rows), ["1e-3", "2e-3", "4e-3", "8e-3", "1.6e-2", "3.2e-2"])
    # from LR*/2 = 2e-3 (geometric mean of 5 and 20: 10) to the highest finished LR up to 4 x LR*: 8e-3 (60)
    assert (found["best_lr"], found["low_lr"], found["high_lr"]) == ("4e-3", "2e-3", "8e-3")
    assert found["rise"] == pytest.approx(6.0) and not found["premise"]
    # with 8e-3 at 200 the rise is 20x: the premise holds
    rows = [r if r["lr"] != "8e-3" else {**r, "peak_mal": 200.0} for r in rows]
    assert pilot.premise(pd.DataFrame(rows), ["1e-3", "4e-3", "8e-3"])["premise"]
    # but not when LR* is the top of the range: what lies above it went unseen
    top = [r for r in rows if r["lr"] in ("1e-3", "2e-3", "4e-3")]
    assert not pilot.premise(pd.DataFrame(top), ["1e-3", "2e-3", "4e-3"])["premise"]


def test_the_projection_counts_every_planned_cell():
    """By hand from config/mechanism.yaml: AdamW at batch 8: 6 grid LRs + 3 claim seeds; at 64, AdamW: 6 + 5 (long) +
    4 (QK-norm) grid LRs, 3 x 3 claim seeds, 6 curve cells; MERIT: 5 + 3 grid LRs, 2 x 3 claim seeds, 6 curve cells."""
    pilot = load_script("mechanism_pilot")
    config = configfiles.load(REPO / "config" / "mechanism.yaml")
    config.setdefault("results", "results")
    planned = pilot.planned_cells(config, "mechanism")
    assert planned.count(("adamw", 8)) == 9 and planned.count(("adamw", 64)) == 15 + 9 + 6
    assert planned.count(("merit", 64)) == 8 + 6 + 6 and len(planned) == 59
    minutes = pilot.projected_minutes(planned, 40.0, 64, 2)
    assert minutes == pytest.approx((9 * 40 * 1.3 + 30 * 40 + 20 * 40 * 1.25) / 2 / 60)


def test_a_pilot_refuses_seeds_that_choose_or_report():
    config = configfiles.load(REPO / "config" / "mechanism.yaml")
    with pytest.raises(UserError, match=r"pilot seeds \[10, 14\] are grid, claim or curve seeds"):
        refuse_reporting_seeds(config, [10, 14, 200])
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
    taken = "11" if name == "mechanism_pilot" else "1"
    assert "are grid, claim or curve seeds" in pilot_error(name, [*base, "--seeds", taken], capsys)


def test_the_mechanism_pilot_refuses_bad_candidates_in_one_line(capsys):
    base = ["--configfile", str(REPO / "config" / "mechanism.yaml")]
    for flag, value, says in [("--geometries", "4x5x48@64", "geometry '4x5x48@64' is not LAYERSxHEADSxWIDTH@CONTEXT"),
                              ("--geometries", "4x2x48", "geometry '4x2x48' is not LAYERSxHEADSxWIDTH@CONTEXT"),
                              ("--lrs", "0", "--lrs 0 must be a finite number > 0"),
                              ("--lrs", "20", "--lrs 20 must be at most 10"),
                              ("--jobs", "1000", "--jobs 1000 must be at most 64"),
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
