"""MAL and loss against the LR (merit_repro.report.artifacts.mal_vs_lr) on synthetic results whose answer is known:
S1-S4 both ways, the mechanism line from their verdicts, the curves over every LR and seed, the paper apart."""

import math
import zlib

import pandas as pd
import pytest
from synthetic import build, make_artifact, make_report

from merit_repro.report.artifacts.mal_vs_lr import mechanism

LRS = [1.0e-3, 2.0e-3, 4.0e-3, 8.0e-3, 1.6e-2]
CONFIG = {
    "data": {"d": {"dataset": "shakespeare", "tokenizer": "bytes"}},
    "models": {"T": {"model": "demo-tiny", "data": "d", "paper_model": "gpt2-medium", "warmup_frac": 0.1},
               "T-long": {"model": "demo-tiny", "data": "d", "paper_model": "gpt2-medium", "warmup_steps": 3},
               "T-qk": {"model": "demo-tiny", "data": "d", "paper_model": "gpt2-medium", "qk_norm": True,
                        "warmup_frac": 0.1}},
    "cell_defaults": {"block_size": 32},
    "seeds": [0], "claim_seeds": [1, 2, 3], "tuning": {"max_extensions": 1},
    "report": {"dpi": 30, "alpha": 0.05, "tolerance": 0.005, "mal_threshold": 100},
    "experiments": {"mech": {
        "models": ["T", "T-long", "T-qk"], "tokens": 4096, "optimizers": ["adamw", "merit"],
        "batch_sizes": {"T": [4, 8], "T-long": [8], "T-qk": {"adamw": [8]}},
        "lr_grid": {"T": {"adamw": LRS, "merit": [1.0e-2, 2.0e-2, 4.0e-2]},
                    "T-long": {"adamw": LRS, "merit": [1.0e-2, 2.0e-2, 4.0e-2]}, "T-qk": {"adamw": LRS}},
        "allow_unequal_lr_grids": True, "artifacts": ["mal_vs_lr"], "paper": {"batch_sizes": {4: 512, 8: 4096}}}},
}
# Where each group's loss is lowest, and that lowest loss (AdamW's gap to MERIT: 0.1 under the short warmup)
BEST = {("T", "adamw", 4): 2e-3, ("T", "adamw", 8): 8e-3, ("T-long", "adamw", 8): 8e-3, ("T-qk", "adamw", 8): 8e-3}
LEVEL = {("T", "adamw", 8): 3.0, ("T-long", "adamw", 8): 2.92, ("T-qk", "adamw", 8): 2.89, "merit": 2.9}


def noise(group, seed, size):
    """Each group's own seed noise (a seed's runs share nothing here), so paired differences have a spread."""
    return size * (zlib.crc32(f"{group.model}/{group.optimizer}/{group.batch}/{seed}".encode()) % 1000 / 500 - 1)


def loss(best=None, level=None):
    best, level = {**BEST, **(best or {})}, {**LEVEL, **(level or {})}

    def value(group, lr, seed):
        key = (group.model, group.optimizer, group.batch)
        at = level.get(key, level["merit"] if group.optimizer == "merit" else 2.8)
        bowl = 0.05 * math.log(float(lr) / best.get(key, 2e-2)) ** 2
        return at + bowl + noise(group, seed, 0.003)
    return value


def mal(merit=5.0, large_batch_factor=1.0):
    """AdamW's peak MAL grows with the LR alone (times large_batch_factor at the large batch); MERIT's is flat."""
    def value(group, lr, seed):
        if group.optimizer == "merit":
            return merit * math.exp(noise(group, seed, 0.005))
        factor = large_batch_factor if group.batch == 8 else 1.0
        return 10.0 * (float(lr) / 1e-3) ** 2 * factor * math.exp(noise(group, seed, 0.005))
    return value


def artifact(tmp_path, landscape=None, peak=None):
    paths = build(tmp_path, CONFIG, landscape or loss(), peak_mal=peak or mal())
    return make_artifact(paths, CONFIG, "mal_vs_lr", "mech"), paths


def results(v):
    """{S-label and rule: verdict}, e.g. {"S1 short": "held", "S4b": "held"}."""
    out = {}
    for s in v["statements"]:
        label, rule = s["claim"].split(" ", 1)
        per_rule = label in ("S1", "S2", "S3")
        out[label + (f" {rule[1:].split()[0]}" if per_rule else "")] = s["result"]
    return out


@pytest.mark.slow
def test_a_mechanism_that_holds_under_both_warmups_is_supported(tmp_path):
    v, paths = artifact(tmp_path)
    found = results(v)
    assert found == {"S1 short": "held", "S2 short": "equivalent", "S3 short": "held", "S1 long": "held",
                     "S2 long": "equivalent", "S3 long": "held", "S4a": "held", "S4b": "held", "S4c": "held"}, found
    assert v["recap"].startswith("The mechanism (S1 and S3 under both warmup rules, and S4; fixed before the runs): "
                                 "supported.")
    table = pd.read_csv(paths["runs"].parents[2] / "paper_figures" / "mal_vs_lr" / "mech.csv", dtype={"lr": str})
    ours = table[table.model.isin(["T", "T-long", "T-qk"])]
    # every LR each group trained, each over the seeds it has; the tuned one marked and holding its claim seeds too
    assert len(ours) == 5 * 4 + 3 * 3   # AdamW at 4 and 8, long, QK-norm; MERIT's three groups
    tuned = ours[(ours.model == "T") & (ours.optimizer == "adamw") & (ours.batch == 8) & (ours.tuned == "yes")]
    assert list(tuned.lr) == ["8e-3"] and tuned.seeds.iloc[0] == "0 1 2 3"
    assert tuned.warmup.iloc[0] == "warmup_frac 0.1: 2 steps at batch 8"
    assert set(ours[ours.model == "T-long"].warmup) == {"warmup_steps 3: 3 steps at batch 8"}
    assert {"mal_first_quarter_max", "mal_last_quarter_mean", "n_layers_peak_mal_over_300"} <= set(table.columns)
    # our model stands in for GPT-2 Medium: the paper's peak MAL (at its tuned LRs only) in rows of its own
    paper = table[table.model == "paper: gpt2-medium"]
    assert sorted(paper["adamw peak_mal"]) == [326, 1152] and ours["peak_mal (paper)"].isna().all()
    assert (paths["runs"].parents[2] / "paper_figures" / "mal_vs_lr" / "mech.png").exists()


@pytest.mark.slow
def test_each_statement_the_other_way(tmp_path):
    # the long warmup's tuned LR is the small batch's: its MAL is no higher there (S1 long is equivalent: against)
    v, _ = artifact(tmp_path / "warmup", loss(best={("T-long", "adamw", 8): 2e-3}))
    found = results(v)
    assert found["S1 short"] == "held" and found["S1 long"] == "equivalent"
    assert "): depends on warmup." in v["recap"]
    # the large batch's MAL is half the small batch's at every matched LR: batch matters (S2 held, not equivalent)
    # and MERIT's MAL is above AdamW's (S3 did not hold): not supported
    v, _ = artifact(tmp_path / "batch", peak=mal(merit=5000.0, large_batch_factor=0.5))
    found = results(v)
    assert found["S2 short"] == "held" and found["S3 short"] == "did not hold" == found["S3 long"]
    assert "): not supported." in v["recap"]
    # the long warmup does not shrink AdamW's gap, and the control stays behind MERIT
    v, _ = artifact(tmp_path / "gap", loss(level={("T-long", "adamw", 8): 3.1, ("T-qk", "adamw", 8): 3.0}))
    found = results(v)
    assert found["S4a"] == "held" and found["S4b"] == "did not hold" and found["S4c"] == "did not hold"
    assert "): not supported." in v["recap"]


def test_the_mechanism_line_reads_only_the_verdicts():
    def line(**verdicts):
        names = {"S1s": "S1 (short warmup, T)", "S1l": "S1 (long warmup, T-long)", "S3s": "S3 (short warmup, T)",
                 "S3l": "S3 (long warmup, T-long)", "S4a": "S4a (short warmup)", "S4b": "S4b (long against short",
                 "S4c": "S4c (AdamW + QK-norm, short warmup)"}
        found = [{"claim": f"{names[k]}): text", "result": v} for k, v in verdicts.items()]
        return mechanism(found).split(": ", 1)[1].split(".")[0]
    held = dict(S1s="held", S1l="held", S3s="held", S3l="held", S4a="held", S4b="held", S4c="held")
    assert line(**held) == "supported"
    assert line(**{**held, "S3l": "did not hold"}) == "depends on warmup"
    assert line(**{**held, "S1l": "equivalent"}) == "depends on warmup"
    assert line(**{**held, "S1l": "inconclusive"}) == "inconclusive"
    assert line(**{**held, "S4c": "did not hold"}) == "not supported"
    assert line(**{**held, "S1s": "did not hold", "S1l": "did not hold"}) == "not supported"
    assert line(**{k: v for k, v in held.items() if k != "S4b"}) == "inconclusive"


@pytest.mark.slow
def test_the_index_carries_the_mechanism_line(tmp_path):
    paths = build(tmp_path, CONFIG, loss(), peak_mal=mal())
    make_report(paths, CONFIG, tmp_path / "figures")
    index = (tmp_path / "figures" / "README.md").read_text()
    assert index.count("**The mechanism (S1 and S3 under both warmup rules, and S4; fixed before the runs): "
                       "supported.") == 2   # beside the summary, and in the artifact's own section
