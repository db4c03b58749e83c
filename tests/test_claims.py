"""Verdicts with margins (merit_repro.claims): every branch, on hand-made estimates."""

import math

import pytest

from merit_repro.claims import HELD, INCONCLUSIVE, NOT_HELD, Estimate, Margins, beats, combine, compare, matches

M = Margins(noise_z=2.0, tolerance=0.005)


def est(label, mean, std=0.0, n=1, at_edge=False):
    return Estimate(label, mean, std, n, at_edge, "1e-3")


def test_a_one_seed_gap_within_the_tolerance_is_a_tie():
    c = compare(est("merit", 3.2801), est("lamb", 3.2802), M)
    assert c.outcome == "tie" and c.margin == pytest.approx(0.005 * 3.2802)
    assert beats(est("merit", 3.2801), [est("lamb", 3.2802)], M).result == INCONCLUSIVE


def test_one_seed_gaps_beyond_the_tolerance_decide():
    assert compare(est("merit", 3.20), est("lamb", 3.30), M).outcome == "better"
    assert compare(est("merit", 3.30), est("lamb", 3.20), M).outcome == "worse"


def test_seed_noise_widens_the_margin():
    a, b = est("merit", 3.20, std=0.08, n=3), est("lamb", 3.30, std=0.08, n=3)
    c = compare(a, b, M)
    assert c.noise == pytest.approx(2 * math.sqrt(2 * 0.08 ** 2 / 3)) and c.outcome == "tie"
    assert "standard errors" in c.why
    assert beats(a, [b], M).result == INCONCLUSIVE
    quiet = compare(est("merit", 3.20, 0.01, 3), est("lamb", 3.30, 0.01, 3), M)
    assert quiet.outcome == "better" and quiet.margin == pytest.approx(0.005 * 3.30)


def test_noise_needs_two_seeds_on_both_sides():
    assert compare(est("merit", 3.2, 0.5, 3), est("lamb", 3.3, 0.0, 1), M).noise is None


def test_beats_held_did_not_hold_and_mixed():
    merit = est("merit", 3.0)
    assert beats(merit, [est("adamw", 3.3), est("lamb", 3.2)], M).result == HELD
    assert beats(merit, [est("adamw", 3.3), est("lamb", 2.9)], M).result == NOT_HELD
    assert beats(merit, [est("adamw", 3.3), est("lamb", 3.001)], M).result == INCONCLUSIVE


def test_a_grid_edge_blocks_only_what_more_tuning_could_change():
    edge = lambda label, mean: est(label, mean, at_edge=True)  # noqa: E731
    # the subject on its edge: a win stands (more tuning only helps it), a loss does not
    assert beats(edge("merit", 3.0), [est("lamb", 3.3)], M).result == HELD
    assert beats(edge("merit", 3.5), [est("lamb", 3.3)], M).result == INCONCLUSIVE
    # the reference on its edge: a loss stands, a win does not
    assert beats(est("merit", 3.5), [edge("lamb", 3.3)], M).result == NOT_HELD
    verdict = beats(est("merit", 3.0), [edge("lamb", 3.3)], M)
    assert verdict.result == INCONCLUSIVE and "grid edge" in verdict.reasons()[0]


def test_diverged_everywhere_loses_explicitly():
    assert beats(est("merit", math.inf), [est("lamb", 3.3)], M).result == NOT_HELD
    verdict = beats(est("merit", 3.0), [est("adamw", 3.1), est("lamb", math.inf)], M)
    assert verdict.result == HELD and "lamb diverged at every LR" in " ".join(verdict.reasons())
    assert beats(est("merit", math.inf), [est("lamb", math.inf)], M).result == INCONCLUSIVE


def test_missing_results_are_inconclusive():
    verdict = beats(est("merit", 3.0), [est("adamw", None)], M)
    assert verdict.result == INCONCLUSIVE and "missing" in verdict.reasons()[0]
    assert beats(est("merit", 3.0), [], M).result == INCONCLUSIVE


def test_matches_is_no_worse_than():
    ref = est("adamw", 3.00, 0.002, 3)
    assert matches(est("merit", 3.01, 0.002, 3), ref, M).result == HELD           # within the tolerance
    assert matches(est("merit", 2.90, 0.002, 3), ref, M).result == HELD           # better
    assert matches(est("merit", 3.10, 0.002, 3), ref, M).result == NOT_HELD       # worse
    noisy = matches(est("merit", 3.01, 0.2, 3), est("adamw", 3.00, 0.2, 3), M)
    assert noisy.result == INCONCLUSIVE                                            # the noise hides any gap


def test_steps_use_the_evaluation_interval_as_tolerance():
    c = compare(est("merit", 96.0), est("lamb", 100.0), M, floor=8)
    assert c.outcome == "tie" and c.margin == 8
    assert compare(est("merit", 80.0), est("lamb", 100.0), M, floor=8).outcome == "better"


def test_combine_parts():
    held, failed, open_ = (beats(est("merit", a), [est("lamb", b)], M) for a, b in ((3.0, 3.3), (3.3, 3.0), (3.0, 3.0)))
    assert combine([held, held]).result == HELD
    assert combine([held, open_]).result == INCONCLUSIVE
    assert combine([held, open_, failed]).result == NOT_HELD
    assert len(combine([held, failed]).reasons()) == 2
