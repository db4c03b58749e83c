"""The LR choice's noise: one grid seed's close calls get claim seeds at their rival LRs in tuning, a verdict must hold
at every rival that could overturn it (an intersection-union test), the close-call noise is a group's own spread (not
the experiment's pool), and the report reads each verdict with its multiplicity."""

import dataclasses
import math

import pytest

from merit_repro.plan.tuning import SELECTION_METRIC, choice_margin, choice_sd, decide, t_cdf, t_quantile, tune
from merit_repro.report.artifacts.index import bh_families, not_kept
from merit_repro.report.claims import CLOSE_CALL, HELD, INCONCLUSIVE, NOT_HELD, Setting, statement
from merit_repro.report.stats import Stats, of_values

S = Stats(alpha=0.05, tolerance=0.005)
SPEC = dict(lrs=["1e-3", "2e-3", "4e-3"], grid_seeds=[0], claim_seeds=[1, 2, 3], max_extensions=2,
            extension_factor=2.0, extensions=[], group={}, lr_choice_noise=1.0, max_rivals=2)


def landscape(losses, spread):
    """loss(lr, seed): losses[lr] on the grid seed, and the claim seeds spread by +-spread around it."""
    return lambda lr, seed: losses[lr] + (0.0 if seed == 0 else spread * (seed - 2))


def train_on(loss):
    return lambda cells: {(lr, seed): loss(lr, seed) for lr, seed in cells}


def test_a_close_call_trains_the_claim_seeds_at_its_rival_and_a_clear_choice_does_not():
    close = tune(SPEC, train_on(landscape({"1e-3": 3.10, "2e-3": 3.00, "4e-3": 3.005}, 0.01)))
    assert close["done"] and close["best_lr"] == "2e-3" and close["rivals"] == ["4e-3"]
    assert {(c[0], c[1]) for c in close["cells"]} >= {("4e-3", s) for s in (1, 2, 3)}
    assert close["choice_sd"] == pytest.approx(0.01)   # its own claim seeds, pooled over the choice and the rival
    clear = tune(SPEC, train_on(landscape({"1e-3": 3.10, "2e-3": 3.00, "4e-3": 3.05}, 0.01)))
    assert clear["rivals"] == [] and not any(c[0] != "2e-3" and c[1] != 0 for c in clear["cells"])


def test_a_rival_whose_seeds_widen_the_spread_can_bring_in_another():
    """The sd that judges close calls is the group's own, over every LR it has claim seeds at: a rival's noisy seeds
    widen it, and an LR inside the wider margin becomes a rival too."""
    grid = {"1e-3": 3.03, "2e-3": 3.00, "4e-3": 3.005}
    noisy = lambda lr, seed: grid[lr] + (0.0 if seed == 0 else (0.005 if lr == "2e-3" else 0.04) * (seed - 2))  # noqa: E731
    record = tune(SPEC, train_on(noisy))
    assert record["rivals"] == ["1e-3", "4e-3"] and record["choice_sd"] > 0.02


def test_the_margin_is_a_student_t_quantile_at_the_spreads_df():
    """A few claim seeds' sd is often an underestimate: the margin takes the t quantile of the normal level
    lr_choice_noise sds stand for (t_cdf in closed form, as scipy.stats.t computes it)."""
    scipy_stats = pytest.importorskip("scipy.stats")
    for df in (1, 2, 3, 4, 7, 30):
        for t in (-4.0, -1.0, 0.0, 0.5, 1.3, 6.0):
            assert t_cdf(t, df) == pytest.approx(scipy_stats.t.cdf(t, df), abs=1e-12)
        assert t_quantile(0.9, df) == pytest.approx(scipy_stats.t.ppf(0.9, df), abs=1e-9)
    assert choice_margin(0.01, 2, 1, 1.0) == pytest.approx(scipy_stats.t.ppf(scipy_stats.norm.cdf(1.0), 2) * 0.01
                                                           * math.sqrt(2))
    assert choice_margin(0.01, 1000, 1, 1.0) == pytest.approx(0.01 * math.sqrt(2), rel=1e-3)


def test_the_groups_own_spread_is_pooled_over_its_lrs():
    results = {("2e-3", 1): 1.0, ("2e-3", 2): 2.0, ("2e-3", 3): 3.0, ("4e-3", 1): 5.0, ("4e-3", 2): 7.0,
               ("1e-3", 1): 9.0}
    sd, df = choice_sd(results, ["1e-3", "2e-3", "4e-3"], [1, 2, 3])
    assert df == 3 and sd == pytest.approx(math.sqrt((2.0 + 2.0) / 3))


def test_the_round_names_the_rivals_and_their_seeds():
    results = {(lr, 0): v for lr, v in {"1e-3": 3.10, "2e-3": 3.00, "4e-3": 3.005}.items()}
    results.update({("2e-3", s): 3.0 + 0.01 * (s - 2) for s in (1, 2, 3)})
    record = decide(SPEC, results)
    assert not record["done"] and "4e-3" in record["action"] and record["rivals"] == ["4e-3"]


def values(mean, spread=0.01, seeds=(1, 2, 3)):
    return {s: mean + spread * (s - 2) for s in seeds}


def term(label, mean, lr="2e-3", rivals=(), alternatives=(), batch=16, spread=0.01):
    return of_values(label, values(mean, spread), ("S", batch), False, lr, SELECTION_METRIC, tuple(rivals),
                     ("S", "adamw", batch), tuple(alternatives))


def test_a_refutation_from_a_close_call_reads_inconclusive():
    """The across-batches null: AdamW at 16 chose a neighbour of its optimum (its grid seed put it ahead), so its
    claim seeds sit high; at its rival LR, where it is as good as at 64, "AdamW degrades" is not refuted. a22f99b's
    rules said "did not hold" (at the chosen LRs)."""
    rival = term("adamw", 3.00, lr="4e-3", batch=16)
    small = term("adamw", 3.06, rivals=["4e-3"], alternatives=[rival], batch=16)
    large = term("adamw", 3.00, batch=64, spread=0.0)
    s = statement("AdamW degrades", [Setting("S", "16->64", small.at(16), large.at(64))], S)
    row = s.rows[0]
    assert s.result == INCONCLUSIVE and row.why == CLOSE_CALL
    assert row.detail.startswith(f"{NOT_HELD} at the chosen LRs")
    assert s.needs_seeds()   # the rival has claim seeds: more seeds could decide it
    # where the rival is as bad as the choice, the refutation stands, tested at both
    bad = term("adamw", 3.06, lr="4e-3", batch=16)
    small = term("adamw", 3.06, rivals=["4e-3"], alternatives=[bad], batch=16)
    s = statement("AdamW degrades", [Setting("S", "16->64", small.at(16), large.at(64))], S)
    assert s.result == NOT_HELD and "at every rival LR" in s.rows[0].detail


def test_a_rival_that_only_the_reference_side_has_does_not_block_a_refutation():
    """Only a term whose lowering would overturn the verdict is tested at its rivals: for did not hold (d > 0), the
    subject's. The reference's rival (4e-3) cannot lower the reference enough to matter in that direction."""
    small = term("adamw", 3.06, batch=16)
    rival = term("adamw", 3.20, lr="4e-3", batch=64, spread=0.0)
    large = term("adamw", 3.00, rivals=["4e-3"], alternatives=[rival], batch=64, spread=0.0)
    s = statement("AdamW degrades", [Setting("S", "16->64", small.at(16), large.at(64))], S)
    assert s.result == NOT_HELD and s.rows[0].against_side == []


def test_a_rival_without_claim_seeds_leaves_the_verdict_it_could_overturn_undecided():
    small = term("adamw", 3.06, rivals=["4e-3"], batch=16)   # a rival the report found, no claim seeds there
    large = term("adamw", 3.00, batch=64, spread=0.0)
    s = statement("AdamW degrades", [Setting("S", "16->64", small.at(16), large.at(64))], S)
    assert s.result == INCONCLUSIVE and s.rows[0].why == CLOSE_CALL and "no claim seeds" in s.rows[0].detail
    assert not s.needs_seeds()   # more claim seeds at the choice cannot settle a rival nobody trained
    # the same rival could overturn the held verdict of the reverse statement (it could lower the reference) ...
    assert statement("x", [Setting("S", "16->64", large.at(64), small.at(16))], S).rows[0].why == CLOSE_CALL
    # ... but not one it cannot move the wrong way (it can only make the subject's side better)
    better = dataclasses.replace(small, mean=2.9, values=values(2.9))
    assert statement("x", [Setting("S", "16->64", better.at(16), large.at(64))], S).result == HELD


def test_the_close_call_noise_is_the_groups_own(tmp_path):
    """One noisy group among quiet ones: the pool of every group's claim seeds would judge its choice by the quiet
    groups' noise; its own spread (in best_lr.csv from tuning) finds the rival the pool misses."""
    from synthetic import PAPER_NUMBERS, build
    from merit_repro.report.artifacts import load_context

    config = {"data": {"d": {"dataset": "shakespeare", "tokenizer": "bytes"}},
              "models": {"S": {"model": "demo-tiny", "data": "d"}}, "seeds": [0], "claim_seeds": [1, 2, 3],
              "tuning": {"max_extensions": 0, "lr_choice_noise": 1.0},
              "experiments": {"e": {"models": ["S"], "tokens": 65536, "optimizers": ["adamw", "lamb", "merit"],
                                    "batch_sizes": [64], "lr_grid": {o: [1e-3, 2e-3, 4e-3] for o in
                                                                     ("adamw", "lamb", "merit")}}}}
    noisy, quiet = {"1e-3": 3.10, "2e-3": 3.00, "4e-3": 3.035}, {"1e-3": 3.10, "2e-3": 3.00, "4e-3": 3.025}

    def loss(group, lr, seed):
        spread, grid = (0.03, noisy) if group.optimizer == "adamw" else (0.001, quiet)
        return grid[lr] + (0.0 if seed == 0 else spread * (seed - 2))
    paths = build(tmp_path, config, loss)
    ctx = load_context("e", config, paths["runs"], paths["cells"], paths["best_lr"], PAPER_NUMBERS)
    pooled, pooled_df = ctx._choice_noise[1]
    assert 0.025 < choice_margin(pooled, pooled_df, 1, 1.0) < 0.035   # the pool's margin: between the two gaps
    assert ctx.rivals("S", "adamw", 64) == ("4e-3",)     # own sd 0.03: its gap 0.035 is within 1 sd x sqrt 2
    assert ctx.rivals("S", "merit", 64) == ()            # quiet: its own sd 0.001 says its gap 0.025 is clear
    e = ctx.estimate("S", "adamw", 64)
    assert [a.lr for a in e.alternatives] == ["4e-3"] and e.alternatives[0].n == 3


def report_of(*statements):
    return [{"experiment": "e", "artifact": "a", "statements": [s.to_dict() for s in statements],
             "rows": [r.to_dict() for s in statements for r in s.rows]}]


def test_benjamini_hochberg_counts_one_test_once_whatever_its_labels():
    """The same comparison stated by two artifacts under other labels (mal_tables' MERIT vs AdamW, mal_vs_lr's S3) is
    one test: keyed on its groups, LRs, metric and seeds, not on its words."""
    a = of_values("merit", values(3.00), ("S", 64), False, "2e-3", SELECTION_METRIC, (), ("S", "merit", 64))
    b = of_values("adamw", values(3.10), ("S", 64), False, "2e-3", SELECTION_METRIC, (), ("S", "adamw", 64))
    renamed = [of_values(f"log {x.label} (S3)", x.values, x.setting, False, x.lr, x.metric, (), x.group) for x in (a, b)]
    one = statement("MERIT below AdamW", [Setting("S", "64", a, b)], S)
    two = statement("S3: MERIT's below AdamW's", [Setting("S, every layer", "64", *renamed)], S)
    assert one.test_key() == two.test_key()
    families = bh_families([{**s.to_dict(), "test": ("e", s.test_key())} for s in (one, two)], 0.05)
    assert len(families[HELD][0]) == 1


def test_a_refutation_that_benjamini_hochberg_does_not_keep_is_marked():
    """Refutations get a report-wide line of their own: one refutation at p near alpha among many nulls is not kept."""
    def setting(mean_a, mean_b, batch, spread=0.01):
        x = of_values("x", values(mean_a, spread), ("S", batch), False, "1e-3", SELECTION_METRIC, (), ("S", "x", batch))
        y = of_values("y", values(mean_b, 0.0), ("S", batch), False, "1e-3", SELECTION_METRIC, (), ("S", "y", batch))
        return Setting("S", str(batch), x, y)
    strong = statement("strong", [setting(3.2, 3.0, 1)], S)
    weak = statement("weak", [setting(3.0 + 0.021, 3.0, 2, spread=0.0115)], S)   # refuted at alpha, p about 0.044
    nulls = [statement(f"null {i}", [setting(3.0, 3.0 + 0.001 * (i % 2), 10 + i)], S) for i in range(8)]
    assert strong.result == NOT_HELD and weak.result == NOT_HELD and weak.p_against > 0.01
    dropped = not_kept(report_of(strong, weak, *nulls), 0.05)
    assert ("e", weak.test_key()) in dropped and ("e", strong.test_key()) not in dropped


def test_close_calls_beyond_max_rivals_are_recorded_untrained():
    """A bounded budget (config/gpu1.yaml: max_rivals 0) trains the closest rivals only; the others stay close calls
    with no claim seeds, and the report reads the verdicts they could overturn as undecided."""
    flat = landscape({"1e-3": 3.004, "2e-3": 3.00, "4e-3": 3.002}, 0.01)
    one = tune({**SPEC, "max_rivals": 1}, train_on(flat))
    assert one["rivals"] == ["4e-3"] and one["close_calls"] == ["1e-3", "4e-3"]   # the closest first
    none = tune({**SPEC, "max_rivals": 0}, train_on(flat))
    assert none["rivals"] == [] and none["close_calls"] == ["1e-3", "4e-3"]
    assert {c[0] for c in none["cells"] if c[1] != 0} == {"2e-3"}


def test_the_texts_name_the_settings_holm_ran_over():
    """A setting without a result takes no part in Holm's correction, and the words do not count it."""
    from merit_repro.report.stats import Estimate

    def setting(batch, a, b):
        x = of_values("x", values(a), ("S", batch), False, "1e-3", SELECTION_METRIC, (), ("S", "x", batch))
        y = of_values("y", values(b, 0.0), ("S", batch), False, "1e-3", SELECTION_METRIC, (), ("S", "y", batch))
        return Setting("S", str(batch), x, y)
    missing = Setting("S", "99", Estimate("x", None), Estimate("y", None))
    s = statement("x lower", [setting(1, 3.2, 3.0), setting(2, 3.0, 3.01), missing], S)
    assert s.rows[0].verdict == NOT_HELD and s.rows[0].tests == 3
    assert "Holm's correction over the statement's 2 testable settings" in s.rows[0].detail
