"""Verdicts (merit_repro.report.claims): the paired and Welch tests by hand, one-sided tests at alpha, the
multiplicity rule on each side, equivalence, grid edges per metric, the reasons an inconclusive verdict gives, and
the false-verdict rate of each verdict with every optimizer equal."""

import math
import random

import pytest

from merit_repro.report.claims import (
    DESCRIPTIVE,
    EDGE,
    EQUIVALENT,
    HELD,
    HOLM,
    INCONCLUSIVE,
    MIXED,
    NOT_HELD,
    NOT_TESTED,
    NO_WORSE,
    WITHIN,
    Setting,
    statement,
)
from merit_repro.report.stats import (
    DIVERGED,
    MISSING,
    NON_FINITE,
    PAIRED,
    TOO_FEW,
    WELCH,
    Estimate,
    Pooled,
    Stats,
    benjamini_hochberg,
    compare,
    holm,
    of_values,
    t_cdf,
    t_critical,
    t_one_sided,
)
from merit_repro.plan.tuning import SELECTION_METRIC

S = Stats(alpha=0.05, tolerance=0.005)


def est(label, mean, std=0.0, n=1, at_edge=False, metric=SELECTION_METRIC):
    return Estimate(label, mean, std, n, at_edge, "1e-3", metric=metric)


def seeds(label, values, setting=("S", 64), at_edge=False):
    """An estimate from per-seed values at seeds 1, 2, ... in one (model, batch)."""
    return of_values(label, dict(enumerate(values, 1)), setting, at_edge, "1e-3")


def verdict(subject, reference, kind=None, stats=S):
    return statement("a", [Setting("S", "64", subject, reference)], stats, **({"kind": kind} if kind else {})).rows[0]


@pytest.mark.parametrize("df,expected", [(1, 12.7062), (2, 4.3027), (4, 2.7764), (10, 2.2281), (30, 2.0423),
                                         (1e7, 1.9600)])
def test_t_critical_values_from_the_tables(df, expected):
    assert t_critical(0.05, df) == pytest.approx(expected, abs=1e-4)


def test_t_cdf_is_symmetric():
    assert t_cdf(0.0, 3.5) == pytest.approx(0.5)
    assert t_cdf(-1.3, 3.5) == pytest.approx(1 - t_cdf(1.3, 3.5))


def test_welch_by_hand_takes_hsus_degrees_of_freedom():
    """The qknorm case: MERIT better than AdamW+QK-norm by 0.233 at 3 seeds each, different models (Welch)."""
    a, b = est("merit", 2.677, 0.064, 3), est("adamw+qknorm", 2.910, 0.151, 3)
    c = compare(a, b, S)
    assert c.test == WELCH and c.se == pytest.approx(math.sqrt(0.064 ** 2 / 3 + 0.151 ** 2 / 3))
    assert c.df == 2                                   # Welch–Satterthwaite would say 2.7 and exceed alpha
    low, high = c.interval(0.05)
    assert high - c.difference == pytest.approx(2.9200 * c.se, rel=1e-4)   # t(0.95, 2): one-sided at alpha
    assert verdict(a, b).verdict == INCONCLUSIVE and verdict(a, b).why == TOO_FEW


def test_paired_by_hand_on_the_per_seed_differences():
    a = seeds("merit", [3.00, 3.10, 2.95])
    b = seeds("lamb", [3.05, 3.16, 2.99])
    c = compare(a, b, S)
    diffs = [-0.05, -0.06, -0.04]
    assert c.test == PAIRED and c.df == 2 and c.difference == pytest.approx(-0.05)
    assert c.se == pytest.approx(0.01 / math.sqrt(3)) and c.correlation > 0.99
    row = verdict(a, b)
    assert row.verdict == HELD and row.p_value < 0.05
    # the same values as independent groups: Welch cannot see it through the seeds' shared noise
    welch = compare(est("merit", a.mean, a.std, 3), est("lamb", b.mean, b.std, 3), S)
    assert welch.test == WELCH and welch.se > 5 * c.se
    assert sum(diffs) / 3 == pytest.approx(c.difference)


def test_pairing_needs_the_same_seeds_in_any_setting():
    """Each seed's runs are one independent draw, whatever they share: a per-seed contrast across batches (or
    models) is as exact as within one; other seeds, or sides without per-seed values, fall back to Welch."""
    a = seeds("adamw@16", [2.50, 2.55, 2.45], ("S", 16))
    b = seeds("adamw@64", [2.90, 2.98, 2.85], ("S", 64))
    c = compare(a, b, S)
    contrasts = [2.50 - 2.90, 2.55 - 2.98, 2.45 - 2.85]
    sd = math.sqrt(sum((x - sum(contrasts) / 3) ** 2 for x in contrasts) / 2)
    assert c.test == PAIRED and c.df == 2 and c.se == pytest.approx(sd / math.sqrt(3))
    assert c.correlation == pytest.approx(0.9912, abs=1e-3)
    other = of_values("x", {1: 3.0, 2: 3.1, 4: 3.2}, ("S", 64))
    assert compare(seeds("y", [3.0, 3.1, 3.2]), other, S).test == WELCH    # other seeds
    assert compare(a, est("b", 2.9, 0.05, 3), S).test == WELCH              # no per-seed values


def test_a_growing_gap_is_paired_on_per_seed_contrasts():
    m64, a64 = seeds("merit@64", [2.70, 2.80, 2.60], ("S", 64)), seeds("adamw@64", [3.00, 3.12, 2.91], ("S", 64))
    m16, a16 = seeds("merit@16", [2.50, 2.52, 2.47], ("S", 16)), seeds("adamw@16", [2.50, 2.53, 2.46], ("S", 16))
    c = compare(m64 - a64, m16 - a16, S)
    contrasts = [(2.70 - 3.00) - (2.50 - 2.50), (2.80 - 3.12) - (2.52 - 2.53), (2.60 - 2.91) - (2.47 - 2.46)]
    mean = sum(contrasts) / 3
    sd = math.sqrt(sum((x - mean) ** 2 for x in contrasts) / 2)
    assert c.test == PAIRED and c.difference == pytest.approx(mean) and c.se == pytest.approx(sd / math.sqrt(3))


def test_zero_spread_never_decides():
    a, b = seeds("a", [9.0, 9.0, 9.0]), seeds("b", [10.0, 10.0, 10.0])
    row = verdict(a, b)
    assert row.verdict == INCONCLUSIVE and row.why == TOO_FEW and "no seed spread" in row.detail
    shifted = verdict(seeds("a", [3.0, 3.1, 3.2]), seeds("b", [3.5, 3.6, 3.7]))   # constant differences
    assert shifted.verdict == INCONCLUSIVE and shifted.why == TOO_FEW
    assert verdict(est("a", 9.0, 0.0, 3), est("b", 10.0, 0.0, 3)).why == TOO_FEW


def test_a_one_seed_side_takes_the_pooled_noise_or_has_too_few_seeds():
    a, b = est("merit", 3.2, 0.3, 3), est("lamb", 3.3, 0.0, 1)
    alone = verdict(a, b)
    assert alone.verdict == INCONCLUSIVE and alone.why == TOO_FEW and "one seed" in alone.detail
    pooled = Pooled.of([a, est("adamw", 3.4, 0.1, 3)])
    assert pooled.df == 4 and pooled.std == pytest.approx(math.sqrt((2 * 0.09 + 2 * 0.01) / 4))
    c = compare(a, b, S, pooled=pooled)
    assert c.se == pytest.approx(math.sqrt(0.09 / 3 + pooled.std ** 2)) and c.df == 2 and "pooled seed sd" in c.basis


def test_a_constant_reference_is_a_one_sample_test():
    c = compare(est("merit", 3.20, 0.02, 3), Estimate("target", 3.33, n=0), S)
    assert c.se == pytest.approx(0.02 / math.sqrt(3)) and c.df == 2 and c.test == "one-sample t"


def test_held_is_tested_at_alpha_in_every_setting_whatever_their_number():
    """Intersection–union: the same setting is held alone and inside a statement over three."""
    q = lambda m, sd=0.05: est("x", m, sd, 3)  # noqa: E731
    one = Setting("S", "64", q(3.0), q(3.2))           # d = -0.2, se 0.041: p about 0.04 on the two-sided scale
    alone = statement("a", [one], S)
    together = statement("a", [one, Setting("S", "16", q(3.0, 0.01), q(3.3, 0.01)),
                               Setting("S", "32", q(3.0, 0.01), q(3.3, 0.01))], S)
    assert alone.rows[0].verdict == together.rows[0].verdict == HELD and together.result == HELD
    assert alone.rows[0].p_value == together.rows[0].p_value
    assert together.p_value == max(r.p_value for r in together.rows)
    open_ = statement("a", [one, Setting("S", "16", q(3.0), q(3.01))], S)     # held in one setting only
    assert [r.verdict for r in open_.rows] == [HELD, INCONCLUSIVE] and open_.result == INCONCLUSIVE


def test_did_not_hold_is_holm_corrected_over_the_settings():
    q = lambda m, sd=0.05: est("x", m, sd, 3)  # noqa: E731
    worse = Setting("S", "64", q(3.2), q(3.0))         # p above about 0.04: fails at alpha, not at alpha / 3
    assert statement("a", [worse], S).result == NOT_HELD
    mixed = statement("a", [worse, Setting("S", "16", q(3.0), q(3.01)), Setting("S", "32", q(3.0), q(3.01))], S)
    assert mixed.rows[0].verdict == INCONCLUSIVE and mixed.result == INCONCLUSIVE
    clear = Setting("S", "64", q(3.5, 0.01), q(3.0, 0.01))
    assert statement("a", [clear, Setting("S", "16", q(3.0), q(3.01))], S).result == NOT_HELD


def test_holm_and_benjamini_hochberg_by_hand():
    assert holm([0.01, 0.04, 0.03], 0.05) == [True, False, False]      # 0.01 <= 0.05/3; 0.03 > 0.05/2
    assert holm([0.01, 0.02, 0.04], 0.05) == [True, True, True]
    assert benjamini_hochberg([0.01, 0.04, 0.03, 0.5], 0.05) == 1       # 0.03 > 0.05 * 2/4 ... only 0.01 ≤ 0.0125
    assert benjamini_hochberg([0.01, 0.02, 0.03, 0.04], 0.05) == 4


def test_equivalent_when_the_interval_lies_within_the_tolerance():
    a, b = seeds("merit", [3.000, 3.100, 2.950]), seeds("lamb", [3.001, 3.099, 2.951])
    row = verdict(a, b)
    assert row.verdict == EQUIVALENT and statement("a", [Setting("S", "64", a, b)], S).result == EQUIVALENT
    wide = verdict(seeds("merit", [3.00, 3.10, 2.95]), seeds("lamb", [3.00, 3.07, 2.99]))
    assert wide.verdict == INCONCLUSIVE and wide.why == WITHIN


def test_no_worse_needs_confidence_within_the_tolerance():
    ref = est("adamw", 3.00, 0.002, 3)
    result = lambda subject: verdict(subject, ref, NO_WORSE).verdict  # noqa: E731
    assert result(est("merit", 3.005, 0.002, 3)) == HELD       # within the tolerance (0.015), confidently
    assert result(est("merit", 2.90, 0.002, 3)) == HELD
    assert result(est("merit", 3.10, 0.002, 3)) == NOT_HELD
    assert result(est("merit", 3.01, 0.2, 3)) == INCONCLUSIVE  # the noise hides any gap
    edge = verdict(est("merit", 3.00, 0.001, 3, at_edge=True), ref, NO_WORSE)
    assert edge.verdict == HELD    # more tuning of the subject could only lower it


def test_every_verdict_is_a_one_sided_test_at_alpha():
    """d = -0.05 with se 0.02 at df 2: t = -2.5 is beyond t(0.95, 2) = 2.92? No: held needs t below -2.92, so the
    same data holds at se 0.015 (t = -3.33) and not at 0.02; the interval printed is the 90% one the verdict read."""
    assert t_one_sided(0.05, 2) == pytest.approx(2.9200, abs=1e-4)
    assert t_critical(0.10, 2) == pytest.approx(t_one_sided(0.05, 2))
    def row(se):
        sd = se * math.sqrt(3)
        return verdict(seeds("merit", [3.0 - 0.05 + sd, 3.0 - 0.05, 3.0 - 0.05 - sd]), seeds("adamw", [3.0, 3.0, 3.0]))
    held, undecided = row(0.015), row(0.02)
    assert held.verdict == HELD and undecided.verdict == INCONCLUSIVE
    assert held.p_value == pytest.approx(t_cdf(-0.05 / 0.015, 2)) and "90% interval" in held.detail
    low, high = held.comparison.interval(0.05)
    assert high == pytest.approx(-0.05 + 2.9200 * 0.015, rel=1e-4) and f"{high:+.4g}" in held.detail
    # the two-sided 95% interval of the old rule would not have held at se 0.015 (t = 3.33 < 4.30)
    assert -0.05 + t_critical(0.05, 2) * 0.015 > 0


def test_held_in_some_settings_and_equivalent_in_others_is_inconclusive():
    """'MERIT is below AdamW at every size' with a clear gap at one size and none at the other is neither held (one
    size is within the tolerance) nor equivalent (one is confidently beyond it)."""
    gap = Setting("S", "64", seeds("merit", [2.90, 2.9005, 2.8995]), seeds("adamw", [3.0, 3.0, 3.0]))
    same = Setting("M", "64", seeds("merit", [3.0, 3.0005, 2.9995], ("M", 64)), seeds("adamw", [3.0, 3.0, 3.0], ("M", 64)))
    assert [r.verdict for r in statement("a", [gap], S).rows] == [HELD]
    assert [r.verdict for r in statement("a", [same], S).rows] == [EQUIVALENT]
    both = statement("MERIT is below AdamW at every size", [gap, same], S)
    assert both.result == INCONCLUSIVE and MIXED in both.why
    assert statement("a", [same, same], S).result == EQUIVALENT


def test_an_edge_blocks_both_ways_for_a_metric_tuning_does_not_select_on():
    """More tuning only lowers the validation loss; peak MAL (or perplexity, zero-shot error) can move either way
    with the LR, so any of its terms on a grid edge blocks every verdict."""
    def mal(label, m, edge=False):
        return est(label, m, 0.01, 3, at_edge=edge, metric="peak_mal")
    blocked = verdict(mal("merit", 3.0, edge=True), mal("adamw", 3.3))
    assert blocked.verdict == INCONCLUSIVE and blocked.why == EDGE and "either way" in blocked.detail
    assert blocked.p_value == 1.0   # the held test's own p: it cannot hold at any level
    assert verdict(mal("merit", 3.5), mal("adamw", 3.3, edge=True)).why == EDGE
    assert verdict(mal("merit", 3.5, edge=True), mal("adamw", 3.3)).why == EDGE
    assert verdict(mal("merit", 3.0), mal("adamw", 3.3)).verdict == HELD
    # the loss itself: an edge on the subject cannot undo a held
    assert verdict(est("merit", 3.0, 0.01, 3, at_edge=True), est("adamw", 3.3, 0.01, 3)).verdict == HELD


def test_an_edge_that_blocks_every_verdict_sends_no_seeds_and_says_tuning_would():
    """A peak-MAL term on its grid edge blocks held and did not hold (and equivalent) at once: however many seeds,
    the statement stays undecided, so the first look must not send its groups to the second look for 'too few
    seeds'; the reason names the edge and says a wider grid, not seeds, could decide it."""
    def mal(label, m, sd, edge=False):
        shift = {"merit": [-1, 0, 1], "adamw": [0, 1, -1]}[label]
        return of_values(label, {s: m + sd * shift[s - 1] for s in (1, 2, 3)}, ("S", 64), edge, "1e-3", "peak_mal",
                         (), ("S", label, 64))
    noisy = statement("MERIT's peak MAL below AdamW's", [Setting("S", "64", mal("merit", 3.0, 0.5, edge=True),
                                                                 mal("adamw", 3.3, 0.5))], S)
    row = noisy.rows[0]
    assert row.verdict == INCONCLUSIVE and row.why == EDGE, row.detail
    assert "no number of seeds decides it" in row.detail and noisy.needs_seeds() == []
    no_edge = statement("same, off the edge", [Setting("S", "64", mal("merit", 3.0, 0.5), mal("adamw", 3.3, 0.5))], S)
    assert no_edge.rows[0].why == TOO_FEW and no_edge.needs_seeds()


def test_a_row_holm_left_undecided_names_holm():
    """Two settings: one confidently on the other side at alpha alone (t = 3.46, p = 0.037), not after Holm (alpha / 2)."""
    other = Setting("S", "64", seeds("merit", [3.03, 3.06, 3.09]), seeds("adamw", [3.0, 3.0, 3.0]))
    null = Setting("M", "64", seeds("merit", [3.0, 3.1, 2.9], ("M", 64)), seeds("adamw", [3.0, 3.0, 3.0], ("M", 64)))
    alone = statement("a", [other], S).rows[0]
    assert alone.verdict == NOT_HELD and "Holm" not in alone.detail
    row = statement("a", [other, null], S).rows[0]
    assert row.verdict == INCONCLUSIVE and row.why == HOLM and "Holm's correction over the statement's 2" in row.detail


def test_grid_edges_block_only_what_more_tuning_could_change():
    edge = lambda label, mean: est(label, mean, 0.01, 3, at_edge=True)  # noqa: E731
    ok = lambda label, mean: est(label, mean, 0.01, 3)  # noqa: E731
    assert verdict(edge("merit", 3.0), ok("lamb", 3.3)).verdict == HELD
    blocked = verdict(edge("merit", 3.5), ok("lamb", 3.3))
    assert blocked.verdict == INCONCLUSIVE and blocked.why == EDGE and "did not hold by the test" in blocked.detail
    assert verdict(ok("merit", 3.5), edge("lamb", 3.3)).verdict == NOT_HELD
    assert verdict(ok("merit", 3.0), edge("lamb", 3.3)).why == EDGE


def test_tuning_failures_and_missing_results_are_inconclusive_with_their_reason():
    everywhere = Estimate("merit", math.inf, inf_text="diverged at every LR (9 diverged runs over 3 LRs)")
    row = verdict(everywhere, est("lamb", 3.3, 0.1, 3))
    assert row.verdict == INCONCLUSIVE and row.why == DIVERGED and "9 diverged runs" in row.detail
    assert verdict(est("merit", 3.0, 0.1, 3), everywhere).why == DIVERGED      # never a win by default
    assert verdict(est("merit", 3.0, 0.1, 3), est("adamw", None)).why == MISSING
    spiked = of_values("adamw", {1: 12.0, 2: math.inf, 3: 30.0})
    assert spiked.diverged and "1 of 3 claim seeds" in spiked.inf_text
    assert verdict(seeds("merit", [2.0, 2.5, 3.0]), spiked).why == NON_FINITE
    # a rise between two non-finite values (inf - inf: no value) is the divergence, not a crash or "missing"
    rise = spiked - of_values("adamw", {1: math.inf, 2: 3.0, 3: 4.0})
    assert verdict(seeds("merit", [0.1, 0.2, 0.3]), rise).why == NON_FINITE


def test_inconclusive_says_too_few_seeds_or_within_margin():
    noisy = verdict(est("merit", 3.0, 0.2, 3), est("lamb", 3.1, 0.2, 3))
    assert noisy.verdict == INCONCLUSIVE and noisy.why == TOO_FEW        # 0.1 is beyond the tolerance 0.0155
    close = verdict(est("merit", 3.0, 0.2, 3), est("lamb", 3.005, 0.2, 3))
    assert close.verdict == INCONCLUSIVE and close.why == WITHIN


def test_descriptive_rows_are_computed_never_judged():
    s = statement("ordering at a small batch", [Setting("S", "16", est("a", 3.0, 0.01, 3), est("b", 3.3, 0.01, 3),
                                                        kind=DESCRIPTIVE)], S)
    row = s.rows[0].to_dict()
    assert s.result == DESCRIPTIVE and row["verdict"] == DESCRIPTIVE and row["p_value"] < 0.05
    assert row["ci_high"] < 0 and s.p_value is None


def test_a_row_states_its_test_interval_and_p_value():
    row = statement("a", [Setting("S", "64", seeds("merit", [3.0, 3.1, 2.95]), seeds("lamb", [3.05, 3.16, 2.99]))],
                    S).rows[0].to_dict()
    assert row["test"] == PAIRED and row["ci_low"] < row["difference"] < row["ci_high"] < 0
    assert row["why"] == "" and row["verdict"] == HELD and "paired t on 3 per-seed differences" in row["basis"]
    assert row["correlation"] > 0.99 and 0 < row["p_value"] < 0.05


def test_statements_not_tested_keep_their_comparison():
    q = lambda m: est("x", m, 0.01, 3)  # noqa: E731
    untested = statement("a", [Setting("S", "64", q(3.3), q(3.0), not_tested="too few tokens")], S)
    assert untested.result == NOT_TESTED and untested.rows[0].comparison.difference == pytest.approx(0.3)
    row = untested.rows[0].to_dict()
    assert row["verdict"] == NOT_TESTED and row["basis"] == "too few tokens"


def test_a_grid_edge_inside_a_trend_counts_with_its_sign():
    """MERIT's advantage at 64 is merit@64 - adamw@64: more tuning of an AdamW on its edge could shrink it."""
    q = lambda label, m, edge=False: est(label, m, 0.01, 3, at_edge=edge)  # noqa: E731
    gap_small = q("merit@16", 2.5) - q("adamw@16", 2.5)
    row = verdict(q("merit@64", 2.7) - q("adamw@64", 3.0, edge=True), gap_small)
    assert row.why == EDGE and "adamw@64" in row.detail
    assert verdict(q("merit@64", 2.7, edge=True) - q("adamw@64", 3.0), gap_small).verdict == HELD


def false_verdicts(settings, n=3, sd=(0.1, 0.1), experiments=2000, seed=0):
    """The larger of the shares of statements over `settings` settings that come out held, and did not hold, with
    every optimizer equal: each verdict is false on its own side, each a one-sided test at alpha."""
    rng = random.Random(seed)
    wrong = {HELD: 0, NOT_HELD: 0}
    for _ in range(experiments):
        rows = [Setting("S", str(k), *(est(label, *_sample(rng, n, s)) for label, s in zip(("merit", "adamw"), sd)))
                for k in range(settings)]
        result = statement("null", rows, S).result
        wrong[result] = wrong.get(result, 0) + 1
    return max(wrong[HELD], wrong[NOT_HELD]) / experiments


def _sample(rng, n, sd):
    xs = [rng.gauss(3.0, sd) for _ in range(n)]
    mean = sum(xs) / n
    return mean, math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1)), n


@pytest.mark.parametrize("settings,sd", [(1, (0.1, 0.1)), (2, (0.1, 0.1)), (3, (0.1, 0.1)), (1, (0.225, 0.041)),
                                         (1, (0.6, 0.1))])
def test_with_every_optimizer_equal_false_verdicts_stay_within_alpha(settings, sd):
    assert false_verdicts(settings, sd=sd) <= S.alpha
