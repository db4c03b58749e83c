"""Two looks at the claim seeds (second_look_seeds): the first look judges every statement on the claim seeds and
sends the groups behind those undecided for want of seeds to a second look; the report keeps every other verdict as
the first look decided it, each look at half of alpha."""

import copy
import json

import pytest
from helpers import tiny_config
from synthetic import CLEAR, PAPER_NUMBERS, build, demo_config, landscape, look_twice

from merit_repro.plan import grid, tuning
from merit_repro.plan.tuning import write_json
from merit_repro.plan.validate import validate
from merit_repro.report.artifacts import make
from merit_repro.report.artifacts.looks import settle
from merit_repro.report.claims import Setting, statement
from merit_repro.report.stats import Stats, of_values
from merit_repro.report.integrity import decision_problems
from merit_repro.report.second_look import audit_first_look, check_looked
from merit_repro.utils import UserError

SECOND = [4, 5, 6]


def one(items, text, batch):
    found = [i for i in items if text in i["statement"]["claim"] and i["statement"]["where"].endswith(f"bs{batch}")]
    assert len(found) == 1, [i["statement"]["claim"] for i in items]
    return found[0]


def statement_of(verdict, text, batch):
    return one([{"statement": s} for s in verdict["statements"]], text, batch)["statement"]


@pytest.fixture(scope="module")
def looked(tmp_path_factory):
    """A sweep where MERIT vs AdamW is clear at batch 64 and MERIT vs LAMB is within the claim seeds' noise, taken
    through both looks as the workflow does."""
    tmp = tmp_path_factory.mktemp("looks")
    config = {**demo_config(), "second_look_seeds": SECOND}
    config["report"] = {**config.get("report", {}), "first_look_share": 0.5}   # an even split: each look at 0.025
    base = copy.deepcopy(CLEAR)
    base["merit"][64] = 3.18
    loss = landscape(base, noise=0.05)
    build(tmp, config, loss)
    results = tmp / "results"
    config["results"] = str(results)
    finals = [json.loads(p.read_text()) for p in sorted((results / "tuning").rglob("final.json"))]
    record, decisions, paths = look_twice(results, config, loss)
    verdict = make("val_loss_vs_batch", "sweep", config, paths["runs"], paths["cells"], paths["best_lr"],
                   PAPER_NUMBERS, tmp / "paper_figures" / "val_loss_vs_batch" / "sweep", record)
    return config, record, decisions, verdict, finals


def test_the_first_look_settles_what_it_decides_and_sends_only_what_seeds_could_decide(looked):
    _, record, decisions, _, _ = looked
    assert record["alpha"] == 0.025 and record["seeds"] == SECOND   # each look at half of alpha
    items = record["statements"]["val_loss_vs_batch/sweep"]
    clear, close = one(items, "MERIT vs AdamW", 64)["statement"], one(items, "MERIT vs LAMB", 64)["statement"]
    assert clear["result"] == "held" and clear["needs_seeds"] == []
    assert close["result"] == "inconclusive" and "too few seeds" in close["why"]
    assert sorted(map(tuple, close["needs_seeds"])) == [("S", "lamb", 64), ("S", "merit", 64)]
    sent = {(g["optimizer"], g["batch"]) for g in record["groups"]}
    assert {("lamb", 64), ("merit", 64)} <= sent
    for d in decisions:   # the second look's seeds at the chosen LR (and its rivals) of each group it sent, nowhere else
        added = [c for c in d["cells"] if c["seed_origin"] == tuning.SECOND_LOOK]
        in_sent = (d["group"]["optimizer"], d["group"]["batch"]) in sent
        lrs = [d["best_lr"], *d["rivals"]]
        assert [(c["lr"], c["seed"]) for c in added] == ([(lr, s) for lr in lrs for s in SECOND] if in_sent else [])
        assert d["second_look"] == [c["seed"] for c in added]


def test_the_report_keeps_the_first_looks_verdicts_and_judges_the_rest_on_every_seed(looked):
    _, record, _, verdict, _ = looked
    clear, close = statement_of(verdict, "MERIT vs AdamW", 64), statement_of(verdict, "MERIT vs LAMB", 64)
    assert clear["look"] == 1 and close["look"] == 2
    kept, again = (next(r for r in verdict["rows"] if r["claim"].startswith(text) and r["batch"] == "64")
                   for text in ("MERIT vs AdamW", "MERIT vs LAMB"))
    # the settled statement is the first look's record: its rows read the claim seeds only, though MERIT's group
    # has the second look's seeds too; the one judged again reads all six
    assert kept["look"] == 1 and kept["subject_n"] == 3 and kept["verdict"] == "held"
    assert again["look"] == 2 and again["subject_n"] == 6 and again["reference_n"] == 6 and again["test"] == "paired t"
    assert "90%" not in again["reason"] and "95% interval" in again["reason"]   # 1 - 2 x 0.025
    assert any("two looks at the claim seeds" in n for n in verdict["notes"])


def test_a_record_with_other_statements_is_refused(looked):
    _, record, _, verdict, _ = looked
    changed = copy.deepcopy(record)
    changed["statements"]["val_loss_vs_batch/sweep"][0]["statement"]["claim"] = "another statement"
    with pytest.raises(UserError, match="other statements than at the first look"):
        settle(verdict, changed, "val_loss_vs_batch", "sweep", 0.025)
    with pytest.raises(UserError, match="at another alpha"):   # the report's alpha changed since the first look
        settle(verdict, record, "val_loss_vs_batch", "sweep", 0.05)
    with pytest.raises(UserError, match="was not judged at the first look"):
        settle(verdict, record, "mal_tables", "other", 0.025)
    assert settle(verdict, record, "zeroshot", "sweep", 0.025) is verdict   # not looked at first: judged once


def test_the_collect_step_takes_second_look_seeds_at_the_chosen_lr_only(looked):
    config, _, decisions, _, _ = looked
    d = next(d for d in decisions if d["second_look"])
    group = next(g for g in grid.all_groups(config).values() if g.optimizer == d["group"]["optimizer"]
                 and g.batch == d["group"]["batch"])
    spec = grid.group_expectation(config, group)["spec"]
    assert decision_problems(d, spec) == []
    moved = copy.deepcopy(d)
    moved["rivals"] = []   # then no LR but the chosen one may have second-look seeds
    other = next(lr for lr in spec["lrs"] if lr != d["best_lr"])
    next(c for c in moved["cells"] if c["seed_origin"] == tuning.SECOND_LOOK)["lr"] = other
    assert any("its second look trained lr" in p for p in decision_problems(moved, spec))
    assert any("not in its grid" in p for p in decision_problems(d, {**spec, "second_look_seeds": []}))


def test_the_looks_split_alpha_as_the_config_says():
    """report.first_look_share (0.2 by default, from benchmarks/claims_power.py part 4): the first look at 0.01, the
    second at 0.04, their sum the report's alpha; one look takes it whole."""
    from merit_repro.config.configfiles import schema_defaults
    from merit_repro.report.stats import Stats

    report = schema_defaults("report")
    first, second = (Stats.from_report(report, 2, look).alpha for look in (1, 2))
    assert first == pytest.approx(0.01) and second == pytest.approx(0.04) and Stats.from_report(report).alpha == 0.05
    assert Stats.from_report({**report, "first_look_share": 0.5}, 2, 1).alpha == pytest.approx(0.025)


def test_second_look_seeds_must_be_new_seeds():
    config = tiny_config()
    config["second_look_seeds"] = grid.claim_seeds(config, next(iter(config["experiments"])))[:1]
    with pytest.raises(ValueError, match="second_look_seeds: .* are also seeds or claim seeds"):
        validate(config)


def test_a_second_look_trains_every_group_of_a_statement_it_judges_again():
    """Held at one batch, too few seeds at the other: the statement is judged again as a whole, so every group behind
    it trains the second-look seeds (its terms then share their seeds, and the test is the one fixed in advance)."""
    def est(name, batch, values):
        return of_values(name, dict(enumerate(values, 1)), ("S", batch), group=("S", name, batch))
    clear = Setting("S", "8", est("merit", 8, [2.0, 2.1, 2.2]), est("adamw", 8, [2.5, 2.61, 2.69]))
    noisy = Setting("S", "64", est("merit", 64, [2.0, 2.1, 2.2]), est("adamw", 64, [2.0, 2.2, 2.21]))
    s = statement("MERIT is lower at every batch", [clear, noisy], Stats(0.025, 0.005, looks=2))
    assert [r.verdict for r in s.rows] == ["held", "inconclusive"] and s.rows[1].why == "too few seeds"
    assert s.needs_seeds() == [("S", "adamw", 64), ("S", "adamw", 8), ("S", "merit", 64), ("S", "merit", 8)]
    decided = statement("MERIT is lower at 8", [clear], Stats(0.025, 0.005, looks=2))
    assert decided.result == "held" and decided.needs_seeds() == []


def test_a_bundles_first_look_must_be_the_one_its_runs_give(looked, tmp_path):
    config, record, _, _, finals = looked
    path = tmp_path / "_second_look.json"
    write_json(path, record)
    assert "identical to the bundle's" in audit_first_look(config, finals, config["results"], PAPER_NUMBERS, 100,
                                                           path)[0]
    forged = copy.deepcopy(record)
    one(forged["statements"]["val_loss_vs_batch/sweep"], "MERIT vs LAMB", 64)["statement"]["result"] = "held"
    write_json(path, forged)
    with pytest.raises(UserError, match="the statements of val_loss_vs_batch/sweep differ"):
        audit_first_look(config, finals, config["results"], PAPER_NUMBERS, 100, path)


def test_a_bundle_that_drops_seeds_the_first_look_sent_is_refused(looked, tmp_path):
    """A rebuild recomputes each group's looked decision from its final one and the first look: a looked.json that
    leaves out one group's second-look runs (its tables made again to match) names the group and the seeds."""
    config, record, decisions, _, finals = looked
    path = tmp_path / "_second_look.json"
    write_json(path, record)
    assert audit_first_look(config, finals, config["results"], PAPER_NUMBERS, 100, path, decisions)
    sent = next(d for d in decisions if d["second_look"])
    cherry_picked = [{**d, "cells": [c for c in d["cells"] if c["seed"] != SECOND[0]]} if d is sent else d
                     for d in decisions]
    g = sent["group"]
    with pytest.raises(UserError, match=rf"{g['model']}/{g['optimizer']}/bs{g['batch']} lacks seed {SECOND[0]} at lr"):
        audit_first_look(config, finals, config["results"], PAPER_NUMBERS, 100, path, cherry_picked)
    with pytest.raises(UserError, match="has no looked decision"):
        audit_first_look(config, finals, config["results"], PAPER_NUMBERS, 100, path, decisions[1:])
    with pytest.raises(UserError, match="has more than one decision"):   # the last of two would win silently
        audit_first_look(config, finals, config["results"], PAPER_NUMBERS, 100, path, [*cherry_picked, sent])
    looked_at = next(f for f in finals if f["group"] == sent["group"])
    for forged in ({"best_lr": "9e-9"}, {"rivals": ["9e-9"]}):   # kinds read_decision takes, LRs no cell has
        with pytest.raises(UserError, match="names LRs it trained no cells at"):
            check_looked([{**looked_at, **forged}], decisions, record)


def test_a_comparison_the_first_look_settled_is_printed_with_its_seeds_wherever_it_is_stated_again():
    """loss_curves' "MERIT vs AdamW at every model size" shares its S row with val_loss_vs_batch's "MERIT vs AdamW at
    64", which the first look settled on seeds 1-3: judged again on seeds 1-6 for its M row, it prints the S row as
    the first look did (one comparison, one set of seeds, one verdict), and its verdict is combined from both looks'."""
    from merit_repro.plan.tuning import SELECTION_METRIC
    from merit_repro.report.artifacts.looks import FIRST, SECOND, looked, settle
    from merit_repro.report.claims import HELD, Setting, statement
    from merit_repro.report.stats import Stats, of_values
    from merit_repro.report.artifacts.context import record as record_of

    stats = Stats(alpha=0.025, tolerance=0.005)

    def est(model, opt, mean, seeds, spread):
        values = {s: mean + spread * ((s % 3) - 1) * (1 + (opt == "merit")) for s in seeds}
        return of_values(opt, values, (model, 64), False, "2e-3", SELECTION_METRIC, (), (model, opt, 64))
    first, every = [1, 2, 3], [1, 2, 3, 4, 5, 6]
    s_row = lambda seeds: Setting("S", "64", est("S", "merit", 3.0, seeds, 0.01), est("S", "adamw", 3.2, seeds, 0.01))  # noqa: E731
    m_row = lambda seeds, gap: Setting("M", "64", est("M", "merit", 3.0, seeds, 0.05), est("M", "adamw", 3.0 + gap, seeds, 0.05))  # noqa: E731
    kept = statement("MERIT vs AdamW: lower", [s_row(first)], stats)
    together_first = statement("MERIT vs AdamW at every model size", [s_row(first), m_row(first, 0.05)], stats)
    together_now = statement("MERIT vs AdamW at every model size", [s_row(every), m_row(every, 0.2)], stats)
    assert kept.result == HELD and together_first.needs_seeds()
    look = {"alpha": 0.025, "seeds": [4, 5, 6], "groups": [],
            "statements": {"val_loss_vs_batch/e": looked(record_of("x", [kept])),
                           "loss_curves/e": looked(record_of("x", [together_first]))}}
    settled = settle(record_of("x", [together_now]), look, "loss_curves", "e", 0.025)
    s, m = settled["rows"]
    theirs = kept.rows[0].to_dict()
    assert s["look"] == FIRST and s["subject_n"] == 3 and s["claim"] == together_now.claim and s["tests"] == 2
    assert all(s[k] == theirs[k] for k in ("subject_mean", "reference_mean", "difference", "p_value", "verdict"))
    assert m["look"] == SECOND and m["subject_n"] == 6
    assert settled["statements"][0]["result"] == (HELD if m["verdict"] == HELD else "inconclusive")
    assert settled["statements"][0]["reasons"][0] == kept.rows[0].reason()
