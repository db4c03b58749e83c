"""A run's MAL in phases (merit_repro.report.mal) on hand-made mal.csv rows, and its columns in runs.csv."""
import json
import math

import pandas as pd
import pytest

from merit_repro.report.mal import MAL_LEVELS, mal_phases
from merit_repro.report.tables import RUN_COLUMNS, summarise_run

# A run of 8 planned steps probed after steps 0, 2, 4, 6, 8; two layers of two heads. Max over heads, per step:
#   layer 1: 2, 5, 20, 9, 7      layer 2: 1, 4, 3, 40, 50      the run (max over layers): 2, 5, 20, 40, 50
# The first quarter of the tokens is steps 0-2, the last quarter steps 6-8 (both ends in).
HEADS = {0: [(1, 2), (1, 1)], 2: [(5, 3), (2, 4)], 4: [(20, 1), (3, 3)], 6: [(8, 9), (40, 1)], 8: [(7, 6), (50, 2)]}


def rows(heads=HEADS):
    return pd.DataFrame([dict(step=step, layer=layer, head=head, mal=value, wq_max=1.0, wk_max=1.0)
                         for step, layers in heads.items() for layer, values in enumerate(layers, start=1)
                         for head, value in enumerate(values, start=1)])


def test_peak_first_quarter_and_last_quarter_per_layer_and_per_run():
    per_layer, run = mal_phases(rows(), steps=8)
    assert per_layer.loc[1].tolist() == [20, 5, 8] and per_layer.loc[2].tolist() == [50, 4, 45]
    assert list(per_layer.columns) == ["peak", "first_quarter_max", "last_quarter_mean"]
    assert run == dict(peak_mal=50, peak_mal_layer=2, peak_mal_step=8, n_layers=2, mal_first_quarter_max=5,
                       mal_last_quarter_mean=45, n_layers_peak_mal_over_10=2, n_layers_peak_mal_over_30=1,
                       n_layers_peak_mal_over_100=0, n_layers_peak_mal_over_300=0)


def test_the_quarters_are_shares_of_the_planned_steps():
    """The same probes in a run planned for 16 steps: steps 0-4 are its first quarter, 12-16 its last (none)."""
    per_layer, run = mal_phases(rows(), steps=16)
    assert per_layer["first_quarter_max"].tolist() == [20, 4] and run["mal_first_quarter_max"] == 20
    assert per_layer["last_quarter_mean"].isna().all() and math.isnan(run["mal_last_quarter_mean"])


def test_a_non_finite_logit_is_the_largest_spike_in_every_summary():
    heads = {**HEADS, 8: [(7, 6), (float("nan"), 2)]}
    per_layer, run = mal_phases(rows(heads), steps=8)
    assert per_layer.loc[2, "peak"] == per_layer.loc[2, "last_quarter_mean"] == math.inf
    assert run["peak_mal"] == run["mal_last_quarter_mean"] == math.inf and run["peak_mal_step"] == 8
    assert run["n_layers_peak_mal_over_300"] == 1


def test_the_levels_are_fixed_and_each_has_a_runs_column():
    assert MAL_LEVELS == (10, 30, 100, 300)
    assert {f"n_layers_peak_mal_over_{v}" for v in MAL_LEVELS} | {"mal_first_quarter_max", "mal_last_quarter_mean"} \
        <= set(RUN_COLUMNS)


def test_a_runs_row_carries_the_phases_beside_the_columns_it_had(tmp_path):
    rows().to_csv(tmp_path / "mal.csv", index=False)
    (tmp_path / "summary.json").write_text(json.dumps(dict(
        status="ok", final_val_loss=2.0, best_val_loss=2.0, steps=8, planned_steps=8, tokens_per_s=1.0,
        train_seconds=1.0, loss_spikes=0, warmup_rule="warmup_frac 0.02", warmup_steps=1, probe_steps=[0, 4, 8])))
    (tmp_path / "eval.json").write_text("{}")
    row = summarise_run(tmp_path, {"model": "T"}, mal_threshold=30)
    assert (row["warmup_rule"], row["warmup_steps"], row["probes"]) == ("warmup_frac 0.02", 1, 3)
    assert row["peak_mal"] == 50 and row["n_layers_mal_over_threshold"] == 1 and row["n_layers"] == 2
    assert row["mal_first_quarter_max"] == 5 and row["mal_last_quarter_mean"] == pytest.approx(45)


def test_a_run_recorded_before_its_schedule_was_has_it_from_its_own_config(tmp_path):
    """A summary.json written before the trainer recorded its warmup and probe steps (a bundle of then)."""
    rows().to_csv(tmp_path / "mal.csv", index=False)
    (tmp_path / "summary.json").write_text(json.dumps(dict(
        status="ok", final_val_loss=2.0, best_val_loss=2.0, steps=8, planned_steps=8, tokens_per_s=1.0,
        train_seconds=1.0, loss_spikes=0, config={"batch_size": 8, "block_size": 32, "tokens": 2048, "warmup_steps": 3,
                                                  "mal_every": 4})))
    (tmp_path / "eval.json").write_text("{}")
    row = summarise_run(tmp_path, {"model": "T"}, mal_threshold=30)
    assert (row["warmup_rule"], row["warmup_steps"], row["probes"]) == ("warmup_steps 3", 3, 3)   # steps 0, 4, 8
