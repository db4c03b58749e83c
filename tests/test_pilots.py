"""Pilots fix settings before the runs they judge: the mechanism pilot's rule, its seeds, and the config it set."""

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from merit_repro.config import configfiles
from merit_repro.train.pilot import refuse_reporting_seeds

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
    # 3 optimizers x (3 LRs + 3 claim seeds) cells per batch, at 1000 tokens/s and half that, on 2 cores
    minutes = pilot.projected_minutes(config, "mechanism", 60_000, 1000.0)
    assert minutes == pytest.approx(18 * 60_000 * (1 + pilot.SMALL_BATCH_SLOWDOWN) / 1000 / 2 / 60)


def test_a_pilot_refuses_seeds_that_choose_or_report():
    config = configfiles.load(REPO / "config" / "mechanism.yaml")
    with pytest.raises(SystemExit, match=r"error: pilot seeds \[0, 3\] are grid or claim seeds"):
        refuse_reporting_seeds(config, [0, 3, 200])
    refuse_reporting_seeds(config, [200, 201])


@pytest.mark.slow
def test_the_mechanism_config_records_its_pilot_and_plans(tmp_path):
    """The setting the pilot chose is the config's, with its rule beside it; a dry run plans its grid."""
    text = (REPO / "config" / "mechanism.yaml").read_text()
    assert "scripts/mechanism_pilot.py" in text and "pilot seeds 200-201" in text
    config = configfiles.load(REPO / "config" / "mechanism.yaml")
    assert config["experiments"]["mechanism"]["optimizers"] == ["adamw", "lamb", "merit"]
    r = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--configfile", "config/mechanism.yaml", "--config",
                        f"results={tmp_path}/results", f"figures={tmp_path}/figures"], cwd=REPO,
                       capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert len(re.findall(r"rule train:", out)) == 18
