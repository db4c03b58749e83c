"""The paper's statements as tests: held, did not hold, equivalent, inconclusive (with why), not tested at
this scale, or descriptive.

Every statement is about d = subject - reference, lower is better for every metric used here
(validation loss, LAMBADA perplexity, peak MAL, zero-shot error). ``lower``: the subject is lower;
``no worse``: non-inferiority (the headline, and an ordering whose printed gap is below the tolerance:
what the paper shows there is no worse, not better); ``descriptive``: an ordering the paper prints but
does not claim, computed and never judged.

The statistics (``Estimate``, the paired and Welch tests, the one-sided intervals) are
merit_repro.report.stats.

What a verdict claims is false when the truth is on the other side of its test's null: held (lower) when d >= 0,
did not hold when d <= 0 (no worse: d <= tol), equivalent when |d| >= tol; benchmarks/claims_calibration.py and
claims_production.py count false verdicts by these truths.

Where a term's LR choice was a close call (``Estimate.rivals``: another LR whose grid-seed loss is within the seed
noise of the chosen one's, where another grid seed could have chosen it), the claim seeds trained there too
(``Estimate.alternatives``) and a verdict must hold at every rival LR of the terms that could overturn it, as at the
choice: held at every rival of a term whose lowering would raise d, did not hold at every rival of one whose lowering
would lower d (for the metric tuning selects on; for any other metric every term either way), each at alpha (an
intersection-union test: the true best LR among the choice and its rivals, the verdict holds there). One that holds
at the choice but not at a rival, or whose rival has no claim seeds, is inconclusive: ``LR choice a close call``.

A statement over k settings holds when every setting holds, each at alpha (an intersection–union test:
a false held stays below alpha without a correction), and is equivalent when every setting is. It did not hold
when a setting is confidently on the other side (lower: d > tol and the interval above 0; no worse: above +tol)
after Holm's correction over the k settings, the side that needs one. Otherwise it is inconclusive, with
why: ``too few seeds`` (the difference is beyond the tolerance but the noise covers it, or there is no
noise estimate), ``within margin`` (within the tolerance, not confidently), ``not after Holm's correction``,
``settings disagree`` (held in some, equivalent in others), ``tuning failure: grid edge`` (a best LR on its
grid's edge that more tuning could move across the verdict: for the metric tuning selects on, by the term's
sign; for any other, either way), ``tuning failure: diverged`` (every LR diverged, or claim seeds diverged at the
chosen LR: counted, never averaged away), ``missing``, ``non-finite value`` (a peak MAL that overflowed at some
seed, kept, not dropped), ``LR choice a close call`` (above). benchmarks/claims_calibration.py shows each rule's false-verdict rate, through this module and through the whole
report path.
"""

import math
from dataclasses import dataclass, field

from merit_repro.plan.tuning import SELECTION_METRIC

from .stats import TOO_FEW, Comparison, Estimate, at_rivals, compare, holm, holm_adjusted

HELD, NOT_HELD, EQUIVALENT, INCONCLUSIVE, NOT_TESTED, DESCRIPTIVE = (
    "held", "did not hold", "equivalent", "inconclusive", "not tested at this scale", "descriptive")
DECIDED = (HELD, NOT_HELD, EQUIVALENT)
LOWER, NO_WORSE = "lower", "no worse"
# Where a statement comes from: the paper, or a comparison a config adds (an optimizer from outside against AdamW,
# MERIT against it); the report counts and corrects the two families apart.
PAPER, ADDED = "paper", "added by the config"
WITHIN, EDGE, HOLM, MIXED, CLOSE_CALL = (
    "within margin", "tuning failure: grid edge", "not after Holm's correction",
    "settings disagree: held in some, equivalent in others", "LR choice a close call")
# Why a statement stays undecided that more claim seeds could decide (a second look's seeds go to its groups)
SEED_LIMITED = (TOO_FEW, WITHIN, HOLM)
# What a decided verdict is about: the optimizers (it holds at every rival LR of a close call, or it is inconclusive).
ABOUT_OPTIMIZERS = "the optimizers"


# ---------------------------------------------------------------- statements


@dataclass
class Setting:
    """One setting of a statement: the subject and reference there, and a note for the reader."""
    model: str
    batch: str
    subject: Estimate
    reference: Estimate
    note: str = ""
    not_tested: str = ""        # why this setting cannot test the statement at this scale (kept for the record)
    floor: float | None = None
    kind: str | None = None     # this setting's kind, when not the statement's
    extra_variance: float = 0.0   # variance of d from a source the seeds do not sample (the evaluation items)


@dataclass
class Row:
    claim: str
    kind: str
    setting: Setting
    comparison: Comparison
    verdict: str
    tests: int
    alpha: float
    p_value: float | None = None   # the evidence for the statement here (below alpha: this setting holds)
    why: str = ""                  # an inconclusive verdict's reason
    detail: str = ""               # the verdict in words
    for_side: list = field(default_factory=list)       # (where, Comparison) at the rival LRs that could overturn held
    against_side: list = field(default_factory=list)   # ... a did-not-hold
    holm_over: int = 0                 # the settings Holm's correction ran over: those with a test (a comparison)
    p_against: float | None = None     # did-not-hold's p here, Holm-adjusted over the statement's settings
    p_equivalent: float | None = None  # equivalence's (TOST) p here

    def evidence(self, chosen_only=False):
        """This setting's Evidence: at the chosen LRs, and unless chosen_only at every rival LR that could overturn it."""
        extra = lambda side: [] if chosen_only else [c for _, c in side]  # noqa: E731
        return Evidence.of(self.kind, [self.comparison, *extra(self.for_side)],
                           [self.comparison, *extra(self.against_side)])

    def rival_comparisons(self, verdict):
        return {HELD: self.for_side, NOT_HELD: self.against_side,
                EQUIVALENT: self.for_side + self.against_side}.get(verdict, [])

    def rival_words(self, verdict):
        """The comparisons at the rival LRs a verdict had to hold at, in words: all of them where it did, the first it
        did not hold at otherwise."""
        found = self.rival_comparisons(verdict)
        words = []
        for where, c in found:
            if not c.testable:
                words.append(f"{where}: {c.detail}")
            else:
                low, high = c.interval(self.alpha)
                words.append(f"{where}: difference {c.difference:+.4g}, interval [{low:+.4g}, {high:+.4g}]")
        if self.verdict == INCONCLUSIVE:
            return "not at every rival LR of a close call (an intersection-union test: the verdict must hold at each) " \
                   f"({'; '.join(words)})"
        return f"and at every rival LR of a close call ({'; '.join(words)})"

    @property
    def key(self):
        """The comparison's identity: its kind, each term's coefficient, group, LR and metric (or a constant's value),
        and the tolerance; not its words, nor its seeds (a comparison is printed with one set of seeds: looks.settle)."""
        def term(k, e):
            who = f"{'/'.join(map(str, e.group))}@{e.lr}" if e.group else f"{e.label}={e.mean!r}"
            return f"{k:+g}*{who}:{e.metric}"
        c = self.comparison
        terms = ",".join(sorted(term(k, e) for k, e in c.subject.leaves() + c.reference.leaves(-1.0)))
        return f"{self.kind}:{terms}:{c.tolerance!r}"

    def close_calls(self):
        """The terms whose LR choice was a close call: an LR within the seed noise of the chosen one."""
        c = self.comparison
        return [e for _, e in c.subject.leaves() + c.reference.leaves() if e.rivals]

    @property
    def lr_choice(self):
        close = self.close_calls()
        if not close:
            return "clear: every other grid LR was worse than the choice by more than the seed noise"
        return "close: " + "; ".join(
            f"{e.label}'s grid seeds put {', '.join(e.rivals)} within the seed noise of its choice {e.lr}"
            + (f" (no claim seeds at {', '.join(e.uncovered)})" if e.uncovered else " (claim seeds there too)")
            for e in close)

    @property
    def about(self):
        """A decided verdict held at every rival LR that could overturn it: it is about the optimizers."""
        return ABOUT_OPTIMIZERS

    def reason(self):
        s, c = self.setting, self.comparison
        where = f"{s.model} at batch {s.batch}" if s.batch != "" else s.model
        extra = "".join(f"; {x}" for x in (s.not_tested, s.note) if x)
        return f"{where}: {c.subject.text()} vs {c.reference.text()}: {self.detail}{extra}"

    def to_dict(self):
        s, c = self.setting, self.comparison
        subject, reference = _side(s.subject), _side(s.reference)
        low, high = c.interval(self.alpha)
        return _json_safe({"claim": self.claim, "kind": self.kind, "model": s.model, "batch": s.batch,
                "subject": s.subject.label, "reference": s.reference.label,
                "subject_mean": subject["mean"], "subject_sd": subject["sd"], "subject_n": subject["n"],
                "subject_lr": s.subject.lr, "reference_mean": reference["mean"], "reference_sd": reference["sd"],
                "reference_n": reference["n"], "reference_lr": s.reference.lr,
                "difference": c.difference if c.testable else None, "se": c.se if c.testable else None,
                "df": c.df if c.testable else None, "test": c.test if c.testable else "", "p_value": self.p_value,
                "ci_low": low, "ci_high": high, "correlation": c.correlation,
                "margin": None if high is None else max(high - c.difference, c.tolerance),
                "tolerance": c.tolerance, "tests": self.tests,
                "basis": s.not_tested or c.basis or c.detail, "verdict": self.verdict, "why": self.why,
                "about": self.about if self.verdict in DECIDED else "", "lr_choice": self.lr_choice,
                "p_against": self.p_against, "p_equivalent": self.p_equivalent, "key": self.key,
                "reason": self.reason()})


def _json_safe(row):
    """Non-finite numbers (an infinite df, a diverged side) as None: the row goes to strict JSON and CSV."""
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in row.items()}


def _side(e):
    """A side's columns: a seed mean's sd and n; a combination's standard error as its sd, and no n."""
    if e.parts:
        se = math.sqrt(sum(c * c * x.std ** 2 / x.n for c, x in e.leaves() if x.n > 1)) if not e.missing else None
        return {"mean": finite_mean(e), "sd": se, "n": None}
    return {"mean": finite_mean(e), "sd": e.std if e.n > 1 else None, "n": e.n}


def finite_mean(e):
    """An estimate's mean, or None when it is missing or diverged."""
    return e.mean if not e.missing and not e.diverged else None


def evidence(c, kind):
    """(p for the statement, p against it, the edge terms that could overturn a held, ... a did-not-hold,
    the point estimate's condition for held, for did-not-hold): the tests of one setting, by kind."""
    d, tol = c.difference, c.tolerance
    if kind == NO_WORSE:
        return c.p_below(tol), c.p_above(tol), c.rises, c.falls, True, True
    return c.p_below(0.0), c.p_above(0.0), c.rises, c.falls, d < -tol, d > tol


@dataclass
class Evidence:
    """One setting's tests, read by the verdict rules: for the statement (held), against it (did not hold), and
    equivalence, each the largest p (and every point estimate on its side) over the comparisons it must hold at."""
    p_for: float
    p_against: float
    point_for: bool
    point_against: bool
    p_equivalent: float

    @classmethod
    def of(cls, kind, for_side, against_side):
        """for_side: the comparisons a held verdict must hold at (the choice's, and those at the rival LRs of the terms
        that could overturn it), against_side: a did-not-hold's; an untestable one gives p = 1 on its side."""
        def worst(comps, side):
            ps, points = [], []
            for c in comps:
                if not c.testable:
                    return 1.0, False
                p_for, p_against, _, _, point_for, point_against = evidence(c, kind)
                ps.append(p_for if side == "for" else p_against)
                points.append(point_for if side == "for" else point_against)
            return max(ps), all(points)
        p_for, point_for = worst(for_side, "for")
        p_against, point_against = worst(against_side, "against")
        # TOST: d < +tol must hold wherever a term that could raise d is at a rival, d > -tol wherever one could lower it
        upper = max((c.p_below(c.tolerance) if c.testable else 1.0) for c in for_side)
        lower = max((c.p_above(-c.tolerance) if c.testable else 1.0) for c in against_side)
        return cls(p_for, p_against, point_for, point_against, max(upper, lower) if kind == LOWER else 1.0)


def _verdict(kind, alpha, ev, against_rejected, c):
    """(verdict, the grid-edge terms that block it) from a setting's evidence."""
    if ev.p_for < alpha and ev.point_for:
        return HELD, c.rises
    if against_rejected and ev.point_against:
        return NOT_HELD, c.falls
    if kind == LOWER and ev.p_equivalent < alpha:
        return EQUIVALENT, c.falls + c.rises
    return INCONCLUSIVE, []


def judge(row, against_rejected, chosen_against_rejected):
    """A tested row's verdict and why, given whether Holm rejected its 'against' null (over the comparisons at the
    rival LRs too, and at the chosen LRs alone)."""
    c, kind, alpha = row.comparison, row.kind, row.alpha
    if not c.testable:
        row.verdict, row.why, row.detail = INCONCLUSIVE, c.failure, c.detail
        return
    ev, chosen = row.evidence(), row.evidence(chosen_only=True)
    # The p of the held verdict's own test: the largest of its one-sided t's (at the choice and at every rival that
    # could overturn it) where every point estimate is on the statement's side and no grid edge could overturn it,
    # 1 where it cannot hold at any level.
    row.p_value = ev.p_for if ev.point_for and not c.rises else 1.0
    row.p_equivalent = ev.p_equivalent if kind == LOWER else None
    low, high = c.interval(alpha)
    test = "non-inferiority: " if kind == NO_WORSE else ""
    words = (f"{test}difference {c.difference:+.4g}, {1 - 2 * alpha:.0%} interval [{low:+.4g}, {high:+.4g}] (each end "
             f"a one-sided test at {alpha:g}), tolerance ± {c.tolerance:.3g} ({c.basis})")
    holm = f"Holm's correction over the statement's {row.holm_over} testable settings" if row.holm_over > 1 else ""
    verdict, blockers = _verdict(kind, alpha, ev, against_rejected, c)
    at_choice, choice_blockers = _verdict(kind, alpha, chosen, chosen_against_rejected, c)
    if verdict == INCONCLUSIVE and at_choice != INCONCLUSIVE and not choice_blockers:
        row.verdict, row.why = INCONCLUSIVE, CLOSE_CALL
        row.detail = f"{at_choice} at the chosen LRs, {row.rival_words(at_choice)}; at the chosen LRs: {words}"
        return
    blockers = blockers or (choice_blockers if verdict == INCONCLUSIVE else [])
    if not blockers and verdict == INCONCLUSIVE and c.falls and c.rises:
        blockers = c.falls + c.rises   # edges block every verdict: more tuning could decide it, never more seeds
    if blockers:
        e = blockers[0]
        row.verdict, row.why = INCONCLUSIVE, EDGE
        either = "" if e.metric == SELECTION_METRIC else " (more tuning could move this metric either way)"
        shown = verdict if verdict != INCONCLUSIVE else at_choice
        cure = "; no number of seeds decides it, a wider grid could" if shown == INCONCLUSIVE else ""
        row.detail = (f"{shown} by the test, but {e.label}'s best LR {e.lr} is on its grid edge{either}{cure}; "
                      f"{words}")
        return
    row.verdict = verdict
    if verdict == NOT_HELD and holm:
        words += f"; decided after {holm}"
    if verdict in DECIDED and row.rival_comparisons(verdict):
        words += f"; {row.rival_words(verdict)}"
    if verdict == INCONCLUSIVE:
        if ev.point_against and ev.p_against < alpha and holm:
            row.why, words = HOLM, f"on the other side at {alpha:g} in this setting, but not after {holm}; {words}"
        else:
            row.why = TOO_FEW if abs(c.difference) > c.tolerance else WITHIN
    row.detail = f"{verdict}: {words}" if verdict != INCONCLUSIVE else f"{row.why}: {words}"


@dataclass
class Statement:
    """One statement of the paper over its settings: a row each, and one verdict."""
    claim: str
    kind: str
    rows: list = field(default_factory=list)
    result: str = INCONCLUSIVE
    origin: str = PAPER

    def reasons(self):
        return [r.reason() for r in self.rows]

    @property
    def p_value(self):
        """The intersection–union p of held: the largest of the tested settings' (None when one has none)."""
        ps = [r.p_value for r in self.rows if r.verdict not in (NOT_TESTED, DESCRIPTIVE)]
        return max(ps) if ps and None not in ps else None

    @property
    def p_against(self):
        """The p of did not hold: the smallest of the settings' Holm-adjusted ones (any setting against it refutes it)."""
        ps = [r.p_against for r in self.rows if r.verdict not in (NOT_TESTED, DESCRIPTIVE) and r.p_against is not None]
        return min(ps) if ps else None

    @property
    def p_equivalent(self):
        """The intersection–union p of equivalent: the largest of the settings' TOST p (None when one has none)."""
        ps = [r.p_equivalent for r in self.rows if r.verdict not in (NOT_TESTED, DESCRIPTIVE)]
        return max(ps) if ps and None not in ps else None

    @property
    def why(self):
        if self.result != INCONCLUSIVE:
            return ""
        whys = [r.why for r in self.rows if r.why]
        if {HELD, EQUIVALENT} <= {r.verdict for r in self.rows}:
            whys.append(MIXED)
        return "; ".join(dict.fromkeys(whys))

    @property
    def about(self):
        """What a decided verdict is about: the optimizers (it held at every rival LR of a close call it rests on)."""
        return ABOUT_OPTIMIZERS

    def needs_seeds(self):
        """The groups (model, optimizer, batch) behind every term of an undecided statement that more claim seeds
        could decide (a setting inconclusive for want of seeds, or a close call tested at every rival LR), or none: a
        second look trains them all, at the chosen LR and its rivals, so that its test of the statement reads the same
        seeds in every term, as if the look had been certain."""
        def seed_limited(r):
            if r.why in SEED_LIMITED:
                return True
            return r.why == CLOSE_CALL and not any(c.failure == CLOSE_CALL for _, c in r.for_side + r.against_side)
        if self.result != INCONCLUSIVE or not any(seed_limited(r) for r in self.rows):
            return []
        judged = [r for r in self.rows if r.verdict not in (NOT_TESTED, DESCRIPTIVE)]
        return sorted({e.group for r in judged for c in (r.comparison.subject, r.comparison.reference)
                       for _, e in c.leaves() if e.n and e.group}, key=repr)

    def test_key(self):
        """The test's identity: the same comparisons of the same groups on the same metric, whichever artifact states
        them and however it names them (mal_tables' "M" is mal_vs_step's "M, layers 1-4"): the summary's
        Benjamini–Hochberg lines count each distinct test once."""
        return "|".join(r.key for r in self.rows if r.kind != DESCRIPTIVE)

    def to_dict(self):
        where = [f"{r.setting.model} bs{r.setting.batch}" for r in self.rows]
        return _json_safe({"claim": self.claim, "kind": self.kind, "origin": self.origin, "result": self.result,
                           "why": self.why, "about": self.about if self.result in DECIDED else "",
                           "p_value": self.p_value, "p_against": self.p_against, "p_equivalent": self.p_equivalent, "settings": len(self.rows), "test_key": self.test_key(),
                           "needs_seeds": [list(g) for g in self.needs_seeds()],
                           "where": where[0] if len(where) == 1 else f"{len(where)} settings",
                           "reasons": self.reasons()})


def statement(claim, settings, stats, kind=LOWER, pooled=None):
    """Test a statement in each of its settings (held at alpha each; did not hold after Holm over the k
    settings that can test it) and combine. A setting may carry its own kind (``Setting.kind``): an ordering
    the paper prints there but does not claim is descriptive, one whose printed gap is below the tolerance
    is tested as non-inferiority (``NO_WORSE``). Where a term's LR choice was a close call, each verdict must hold at
    every rival LR of the terms that could overturn it too (``rival_sides``)."""
    rows = [Row(claim, s.kind or kind, s, compare(s.subject, s.reference, stats, s.floor, pooled, s.extra_variance), "",
                0, stats.alpha) for s in settings]
    for r in rows:
        if r.kind == DESCRIPTIVE:
            describe(r)
        elif r.comparison.testable:
            r.for_side, r.against_side = rival_sides(r.setting, stats, pooled, r.comparison.tolerance)
    testable = [r for r in rows if not r.setting.not_tested and r.kind != DESCRIPTIVE]
    decidable = [r for r in testable if r.comparison.testable]
    against = [r.evidence().p_against for r in decidable]
    rejected = {id(r): x for r, x in zip(decidable, holm(against, stats.alpha))}
    chosen = holm([r.evidence(chosen_only=True).p_against for r in decidable], stats.alpha)
    chosen_rejected = {id(r): x for r, x in zip(decidable, chosen)}
    for r, p in zip(decidable, holm_adjusted(against)):
        r.p_against = p if r.evidence().point_against and not r.comparison.falls else 1.0
    for r in rows:
        if r.kind == DESCRIPTIVE:
            continue
        r.tests, r.holm_over = len(testable), len(decidable)
        judge(r, rejected.get(id(r), False), chosen_rejected.get(id(r), False))
        if r.setting.not_tested:
            r.verdict, r.why, r.tests = NOT_TESTED, "", 0
    judged = [r.verdict for r in rows if r.kind != DESCRIPTIVE]
    kinds = {r.kind for r in rows if r.kind != DESCRIPTIVE}
    return Statement(claim, kinds.pop() if len(kinds) == 1 else kind if kinds else DESCRIPTIVE, rows,
                     combine(judged) if judged else DESCRIPTIVE)


def rival_sides(setting, stats, pooled, tolerance):
    """([(where, Comparison)] at the rival LRs that could overturn a held verdict, ... a did-not-hold): a term whose
    lowering would raise d (the reference's, for the metric tuning selects on) at each of its rival LRs, the other
    terms at their choice; for any other metric every term, either way. A rival without claim seeds gives an
    untestable comparison (a close call no seed can settle)."""
    a, b = setting.subject, setting.reference
    leaves = a.leaves() + b.leaves(-1.0)
    sides = []
    for sign in (-1, 1):   # held's overturning terms, then did-not-hold's
        def varied(k, e, sign=sign):
            return e.metric != SELECTION_METRIC or k * sign > 0
        found = [(f"{e.label} at {', '.join(e.uncovered)}",
                  Comparison(a, b, failure=CLOSE_CALL, detail=f"no claim seeds at {e.label}'s rival LR "
                                                              f"{', '.join(e.uncovered)} to test at"))
                 for k, e in leaves if varied(k, e) and e.uncovered]
        for a2, b2 in at_rivals(a, b, varied):
            moved = [f"{x.label} at {x.lr}" for (_, x), (_, y) in zip(a2.leaves() + b2.leaves(-1.0), leaves)
                     if x is not y]
            found.append((", ".join(moved), compare(a2, b2, stats, tolerance, pooled, setting.extra_variance)))
        sides.append(found)
    return sides[0], sides[1]


def describe(row):
    """A descriptive row: the comparison's numbers, never a verdict."""
    c = row.comparison
    row.verdict, row.tests = DESCRIPTIVE, 0
    row.p_value = c.p_below(0.0) if c.testable else None
    row.detail = (f"not a statement of the paper: difference {c.difference:+.4g} ({c.basis})" if c.testable
                  else f"not a statement of the paper; {c.failure}: {c.detail}")


def combine(verdicts):
    """Held when every testable setting holds, did not hold when any does not (Holm-corrected), equivalent when
    every one is equivalent, not tested when none can test; otherwise inconclusive. Held in some settings and
    equivalent in others is neither: "lower everywhere" is not shown where a setting is only shown within the
    tolerance (it may be above 0 there), and "within the tolerance everywhere" is false where one is confidently
    beyond it."""
    tested = [v for v in verdicts if v != NOT_TESTED]
    if not tested:
        return NOT_TESTED if verdicts else INCONCLUSIVE
    if NOT_HELD in tested:
        return NOT_HELD
    if set(tested) in ({HELD}, {EQUIVALENT}):
        return tested[0]
    return INCONCLUSIVE


