"""Verdicts (merit_repro.report.claims): Student's t, Welch's margin by hand, one-seed sides, statements over
settings, and the false-verdict rate with every optimizer equal."""

import math
import random

import pytest

from merit_repro.report.claims import (
    HELD,
    INCONCLUSIVE,
    NO_WORSE,
    NOT_HELD,
    NOT_TESTED,
    Estimate,
    Pooled,
    Setting,
    Stats,
    compare,
    statement,
    t_cdf,
    t_critical,
)

S = Stats(alpha=0.05, tolerance=0.005)


def est(label, mean, std=0.0, n=1, at_edge=False):
    return Estimate(label, mean, std, n, at_edge, "1e-3")


@pytest.mark.parametrize("df,expected", [(1, 12.7062), (2, 4.3027), (4, 2.7764), (10, 2.2281), (30, 2.0423),
                                         (1e7, 1.9600)])
def test_t_critical_values_from_the_tables(df, expected):
    assert t_critical(0.05, df) == pytest.approx(expected, abs=1e-4)


def test_t_cdf_is_symmetric_and_fractional_df_lies_between():
    assert t_cdf(0.0, 3.5) == pytest.approx(0.5)
    assert t_cdf(-1.3, 3.5) == pytest.approx(1 - t_cdf(1.3, 3.5))
    assert t_critical(0.05, 4) > t_critical(0.05, 4.5) > t_critical(0.05, 5)


def test_welch_margin_by_hand():
    """The issue's case: qknorm, MERIT better than AdamW+QK-norm by 0.233 at 3 seeds each."""
    a, b = est("merit", 2.677, 0.064, 3), est("adamw+qknorm", 2.910, 0.151, 3)
    va, vb = 0.064 ** 2 / 3, 0.151 ** 2 / 3
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va ** 2 / 2 + vb ** 2 / 2)
    c = compare(a, b, S)
    assert c.se == pytest.approx(se) and c.df == pytest.approx(df)
    assert c.margin == pytest.approx(t_critical(0.05, df) * se) and c.margin == pytest.approx(0.321, abs=1e-3)  # the issue: 0.321
    assert c.outcome == "tie"    # 2 standard errors (0.189) would have called it
    assert "Welch t(2.7)" in c.basis


def test_the_tolerance_binds_when_the_seeds_agree():
    c = compare(est("merit", 3.20, 0.001, 3), est("lamb", 3.30, 0.001, 3), S)
    assert c.outcome == "better" and c.margin == pytest.approx(0.005 * 3.30) and "the tolerance" in c.basis
    assert compare(est("merit", 3.2801, 0.0, 3), est("lamb", 3.2802, 0.0, 3), S).outcome == "tie"


def test_a_one_seed_side_takes_the_pooled_noise_or_is_undecided():
    a, b = est("merit", 3.2, 0.3, 3), est("lamb", 3.3, 0.0, 1)
    alone = compare(a, b, S)
    assert alone.outcome == "undecided" and "one seed" in alone.why
    pooled = Pooled.of([a, est("adamw", 3.4, 0.1, 3)])
    assert pooled.df == 4 and pooled.std == pytest.approx(math.sqrt((2 * 0.09 + 2 * 0.01) / 4))
    c = compare(a, b, S, pooled=pooled)
    va, vb = 0.09 / 3, pooled.std ** 2
    assert c.se == pytest.approx(math.sqrt(va + vb))
    assert c.df == pytest.approx((va + vb) ** 2 / (va ** 2 / 2 + vb ** 2 / 4))
    assert c.outcome == "tie" and "pooled seed sd" in c.basis


def test_a_constant_reference_is_a_one_sample_test():
    target = Estimate("target", 3.33, n=0)
    c = compare(est("merit", 3.20, 0.02, 3), target, S)
    assert c.se == pytest.approx(0.02 / math.sqrt(3)) and c.df == pytest.approx(2)
    assert c.outcome == "better"


def test_a_trend_is_a_contrast_with_its_own_standard_error():
    small, large = est("adamw@16", 2.50, 0.02, 3), est("adamw@64", 2.93, 0.04, 3)
    c = compare(small, large, S)
    assert c.outcome == "better"                      # degrades: lower at the small batch
    gap_large = est("merit@64", 2.68, 0.06, 3) - large
    gap_small = est("merit@16", 2.48, 0.02, 3) - small
    g = compare(gap_large, gap_small, S)
    assert g.difference == pytest.approx((2.68 - 2.93) - (2.48 - 2.50))
    assert g.se == pytest.approx(math.sqrt((0.06 ** 2 + 0.04 ** 2 + 0.02 ** 2 + 0.02 ** 2) / 3))


def test_grid_edges_block_only_what_more_tuning_could_change():
    edge = lambda label, mean: est(label, mean, 0.01, 3, at_edge=True)  # noqa: E731
    ok = lambda label, mean: est(label, mean, 0.01, 3)  # noqa: E731
    assert compare(edge("merit", 3.0), ok("lamb", 3.3), S).outcome == "better"
    assert compare(edge("merit", 3.5), ok("lamb", 3.3), S).outcome == "undecided"
    assert compare(ok("merit", 3.5), edge("lamb", 3.3), S).outcome == "worse"
    c = compare(ok("merit", 3.0), edge("lamb", 3.3), S)
    assert c.outcome == "undecided" and "grid edge" in c.why


def test_diverged_everywhere_loses_explicitly_and_missing_is_undecided():
    assert compare(est("merit", math.inf), est("lamb", 3.3, 0.1, 3), S).outcome == "worse"
    assert compare(est("merit", 3.0, 0.1, 3), est("lamb", math.inf), S).outcome == "better"
    assert compare(est("merit", math.inf), est("lamb", math.inf), S).outcome == "undecided"
    assert compare(est("merit", 3.0, 0.1, 3), est("adamw", None), S).outcome == "undecided"
    trend = est("merit", 3.0, 0.1, 3) - est("adamw", math.inf)
    assert compare(trend, est("x", 0.0, 0.1, 3) - est("y", 0.0, 0.1, 3), S).outcome == "undecided"


def test_statements_both_ways_inconclusive_and_not_tested():
    q = lambda m: est("x", m, 0.01, 3)  # noqa: E731
    held = statement("a", [Setting("S", "64", q(3.0), q(3.3))], S)
    failed = statement("a", [Setting("S", "64", q(3.3), q(3.0))], S)
    tied = statement("a", [Setting("S", "64", q(3.0), q(3.001))], S)
    assert (held.result, failed.result, tied.result) == (HELD, NOT_HELD, INCONCLUSIVE)
    untested = statement("a", [Setting("S", "64", q(3.3), q(3.0), not_tested="too few tokens")], S)
    assert untested.result == NOT_TESTED and untested.rows[0].comparison.outcome == "worse"  # kept for the record
    row = untested.rows[0].to_dict()
    assert row["verdict"] == NOT_TESTED and row["basis"] == "too few tokens"


def test_a_statement_over_settings_tests_each_at_alpha_over_k():
    q = lambda m: est("x", m, 0.05, 3)  # noqa: E731
    settings = [Setting("S", str(b), q(3.0), q(3.2)) for b in (16, 32, 64)]
    s = statement("a", settings, S)
    assert all(r.tests == 3 for r in s.rows)
    assert s.rows[0].comparison.margin == pytest.approx(t_critical(0.05 / 3, 4) * 0.05 * math.sqrt(2 / 3))
    mixed = statement("a", settings[:2] + [Setting("S", "64", q(3.4), q(3.0))], S)
    assert mixed.result == NOT_HELD
    open_ = statement("a", settings[:2] + [Setting("S", "64", q(3.0), q(3.0))], S)
    assert [r.verdict for r in open_.rows] == [HELD, HELD, INCONCLUSIVE] and open_.result == INCONCLUSIVE


def test_no_worse_needs_confidence_within_the_tolerance():
    ref = est("adamw", 3.00, 0.002, 3)
    verdict = lambda subject: statement("m", [Setting("S", "64", subject, ref)], S, NO_WORSE).result  # noqa: E731
    assert verdict(est("merit", 3.005, 0.002, 3)) == HELD       # within the tolerance (0.015), confidently
    assert verdict(est("merit", 2.90, 0.002, 3)) == HELD
    assert verdict(est("merit", 3.10, 0.002, 3)) == NOT_HELD
    assert verdict(est("merit", 3.01, 0.2, 3)) == INCONCLUSIVE  # the noise hides any gap


def false_verdicts(settings, n=3, sd=0.1, experiments=2000, seed=0):
    """Share of statements over `settings` settings that come out held or did-not-hold with every optimizer equal."""
    rng = random.Random(seed)
    wrong = 0
    for _ in range(experiments):
        rows = []
        for k in range(settings):
            sides = []
            for label in ("merit", "adamw"):
                xs = [rng.gauss(3.0, sd) for _ in range(n)]
                mean = sum(xs) / n
                sides.append(est(label, mean, math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1)), n))
            rows.append(Setting("S", str(k), *sides))
        wrong += statement("null", rows, S).result in (HELD, NOT_HELD)
    return wrong / experiments


@pytest.mark.parametrize("settings", [1, 2, 3])
def test_with_every_optimizer_equal_false_verdicts_stay_within_alpha(settings):
    assert false_verdicts(settings) <= S.alpha


def test_one_seed_sides_share_their_pooled_estimate_in_the_df():
    pooled = Pooled(std=0.1, df=4)
    c = compare(est("merit", 3.0), est("lamb", 3.3), S, pooled=pooled)
    assert c.df == pytest.approx(4) and c.se == pytest.approx(0.1 * math.sqrt(2))


def test_a_grid_edge_inside_a_trend_counts_with_its_sign():
    """MERIT's advantage at 64 is merit@64 - adamw@64: more tuning of an AdamW on its edge could shrink it."""
    q = lambda label, m, edge=False: est(label, m, 0.01, 3, at_edge=edge)  # noqa: E731
    gap_large = q("merit@64", 2.7) - q("adamw@64", 3.0, edge=True)
    gap_small = q("merit@16", 2.5) - q("adamw@16", 2.5)
    c = compare(gap_large, gap_small, S)
    assert c.outcome == "undecided" and "adamw@64" in c.why
    gap_large = q("merit@64", 2.7, edge=True) - q("adamw@64", 3.0)
    assert compare(gap_large, gap_small, S).outcome == "better"    # more tuning of MERIT only widens the gap


def test_no_worse_fails_only_when_confidently_beyond_the_tolerance():
    ref = est("adamw", 3.00, 0.0, 3)
    # d = 0.03, noise = t(0.975, 2) x 0.0093 = 0.040: the interval reaches inside the tolerance (0.015)
    unsure = statement("m", [Setting("S", "64", est("merit", 3.03, 0.0161, 3), ref)], S, NO_WORSE)
    assert unsure.result == INCONCLUSIVE
    sure = statement("m", [Setting("S", "64", est("merit", 3.10, 0.0161, 3), ref)], S, NO_WORSE)
    assert sure.result == NOT_HELD
    edge = statement("m", [Setting("S", "64", est("merit", 3.00, 0.001, 3, at_edge=True), ref)], S, NO_WORSE)
    assert edge.result == HELD    # more tuning of the subject could only lower it
