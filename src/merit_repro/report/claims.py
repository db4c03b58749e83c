"""The paper's statements as tests: held, did not hold, equivalent, inconclusive (with why), not tested at
this scale, or descriptive.

Every statement is about d = subject - reference, lower is better for every metric used here
(validation loss, LAMBADA perplexity, peak MAL, zero-shot error). ``lower``: the subject is lower;
``no worse``: non-inferiority (the headline, and an ordering whose printed gap is below the tolerance:
what the paper shows there is no worse, not better); ``descriptive``: an ordering the paper prints but
does not claim, computed and never judged. An ``Estimate`` is one optimizer's result at its first-choice LR in one
setting: its claim seeds' mean, sd, count and per-seed values; estimates combine linearly (``a - b``), so
a trend or a growing gap is one estimate too.

The test fits the design, fixed before the runs:

    paired     every noisy term has the same claim seeds: a seed's runs are one independent draw (within a (model,
               batch) they share initialisation and batch order, across them nothing), so the per-seed contrasts
               c_s are independent draws at any correlation between the terms, within a setting or across batches
               and models; d = mean(c), se = sd(c) / sqrt(n), df = n - 1.
    Welch      otherwise: se = sqrt(sum c_i² s_i² / n_i), df = min(n_i - 1) over the terms (Hsu's
               conservative df: Welch–Satterthwaite's df exceeds alpha at 3 seeds with unequal spreads).
    A side with one seed takes its experiment's pooled seed sd (df: the pool's); a zero spread never
    decides (no noise estimate). A source of noise the seeds do not sample (zero-shot items) adds its variance.

Each verdict is false on one side of the tolerance only, so each is a one-sided test at alpha: with
q = t(1 - alpha, df) the interval is d ± q se (1 - 2 alpha coverage, its ends the one-sided bounds), and the
tolerance tol = report.tolerance x the reference's scale (or an absolute floor). A setting's verdict:

    lower       held means lower: the interval is below 0 (a one-sided test of d < 0 at alpha), and so that a
                difference too small to matter is never reported as held, the point estimate d < -tol; equivalent
                when the interval lies within ± tol (TOST);
    no worse    held when the interval is below +tol (non-inferiority).

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

import dataclasses
import itertools
import math
from dataclasses import dataclass, field

# scipy.special's Student t (what scipy.stats.t computes with) imports in half the time of scipy.stats, which every
# artifact job of the workflow would otherwise pay.
from scipy.special import stdtr, stdtrit

from merit_repro.plan.tuning import SELECTION_METRIC

HELD, NOT_HELD, EQUIVALENT, INCONCLUSIVE, NOT_TESTED, DESCRIPTIVE = (
    "held", "did not hold", "equivalent", "inconclusive", "not tested at this scale", "descriptive")
DECIDED = (HELD, NOT_HELD, EQUIVALENT)
LOWER, NO_WORSE = "lower", "no worse"
# Where a statement comes from: the paper, or a comparison a config adds (an optimizer from outside against AdamW,
# MERIT against it); the report counts and corrects the two families apart.
PAPER, ADDED = "paper", "added by the config"
TOO_FEW, WITHIN, EDGE, DIVERGED, MISSING, NON_FINITE, HOLM, MIXED, CLOSE_CALL = (
    "too few seeds", "within margin", "tuning failure: grid edge", "tuning failure: diverged", "missing",
    "non-finite value", "not after Holm's correction", "settings disagree: held in some, equivalent in others",
    "LR choice a close call")
# Why a statement stays undecided that more claim seeds could decide (a second look's seeds go to its groups)
SEED_LIMITED = (TOO_FEW, WITHIN, HOLM)
# What a decided verdict is about: the optimizers (it holds at every rival LR of a close call, or it is inconclusive).
ABOUT_OPTIMIZERS = "the optimizers"
PAIRED, WELCH, ONE_SAMPLE = "paired t", "Welch t (Hsu df)", "one-sample t"
# A spread this small relative to the values is floating-point rounding, not seed noise.
ZERO_SPREAD = 1e-9


def t_critical(alpha, df):
    """Two-sided critical value: |T| > t_critical(alpha, df) with probability alpha."""
    return float(stdtrit(df, 1.0 - alpha / 2.0))


def t_one_sided(alpha, df):
    """One-sided critical value: T > t_one_sided(alpha, df) with probability alpha. Every verdict is one-sided (held,
    did not hold and equivalent are each false on one side of the tolerance only), so each is tested at alpha, and
    the interval the verdict reads is the 1 - 2 alpha one (90% at alpha 0.05)."""
    return float(stdtrit(df, 1.0 - alpha))


def t_cdf(t, df):
    return float(stdtr(df, t))


# ---------------------------------------------------------------- estimates


@dataclass
class Stats:
    """The level of each setting's test and the smallest relative difference treated as real, per metric (the
    config's report block; its defaults are the schema's)."""
    alpha: float
    tolerance: float
    tolerances: dict = field(default_factory=dict)
    looks: int = 1              # 2 with a second look of claim seeds: alpha is this look's share of the report's

    @classmethod
    def from_report(cls, report, looks=1, look=2):
        """The report block's stats; with two looks at the claim seeds, look 1 tests at report.first_look_share of its
        alpha and look 2 at the rest (a union bound: a verdict is false at either look with probability at most
        alpha, whatever the looks share)."""
        share = float(report.get("first_look_share", 0.5)) if looks > 1 else 1.0
        return cls(float(report["alpha"]) * (share if look == 1 else 1.0 - share if looks > 1 else 1.0),
                   float(report["tolerance"]), {k: float(v) for k, v in (report.get("tolerances") or {}).items()},
                   looks)

    def of(self, metric):
        """These stats with the metric's own tolerance."""
        return dataclasses.replace(self, tolerance=self.tolerances.get(metric, self.tolerance))


@dataclass
class Estimate:
    label: str
    mean: float | None          # None: missing; inf: a tuning failure (diverged), said in inf_text
    std: float = 0.0
    n: int = 0                  # seeds; 0 with a mean: a constant (a target), no noise
    at_edge: bool = False
    lr: str | None = None
    inf_text: str = "diverged at every LR"   # what an infinite value means here
    failure: str = "tuning failure: diverged"   # ... and the inconclusive reason it gives
    parts: tuple = ()           # a linear combination: ((coefficient, Estimate), ...)
    values: dict | None = None  # {seed: value} of the claim seeds, for paired tests
    setting: tuple | None = None   # (model, batch): runs at one seed share initialisation and batch order there
    metric: str | None = None   # what it measures: an edge moves only the metric tuning selects on one way
    rivals: tuple = ()          # LRs whose grid-seed loss is within the seed noise of the chosen one's (close calls)
    group: tuple | None = None  # (model, optimizer, batch): the tuned group whose claim seeds it reads
    alternatives: tuple = ()    # the same estimate at each rival LR its claim seeds trained at (same label, its lr)

    @property
    def uncovered(self):
        """The rival LRs without claim seeds to test at: a verdict they could overturn cannot be decided."""
        tested = {a.lr for a in self.alternatives}
        return tuple(lr for lr in self.rivals if lr not in tested)

    @property
    def missing(self):
        if self.parts and any(e.missing for _, e in self.parts):
            return True
        return self.mean is None or (isinstance(self.mean, float) and math.isnan(self.mean))

    @property
    def diverged(self):
        return not self.missing and math.isinf(self.mean)

    def leaves(self, coefficient=1.0):
        if not self.parts:
            return [(coefficient, self)]
        return [leaf for c, e in self.parts for leaf in e.leaves(coefficient * c)]

    def __sub__(self, other):
        parts = ((1.0, self), (-1.0, other))
        mean = None if self.missing or other.missing else self.mean - other.mean
        if mean is not None and math.isnan(mean):   # inf - inf: no value
            mean = None
        return Estimate(f"{self.label} - {other.label}", mean, parts=parts)

    def at(self, batch):
        """A copy labelled with its batch size (for statements across batches)."""
        return dataclasses.replace(self, label=f"{self.label}@{batch}",
                                   alternatives=tuple(a.at(batch) for a in self.alternatives))

    def text(self, digits=3):
        if self.missing:
            return f"{self.label} missing"
        if self.diverged:
            return f"{self.label} {self.inf_text}"
        if self.parts or self.n == 0:
            return f"{self.label} {self.mean:+.{digits}f}" if self.parts else f"{self.label} {self.mean:.{digits}f}"
        spread = f" ± {self.std:.{digits}f}" if self.n > 1 else ""
        edge = f", best LR {self.lr} on the grid edge" if self.at_edge else ""
        return f"{self.label} {self.mean:.{digits}f}{spread} (n={self.n}{edge})"


def of_values(label, values, setting=None, at_edge=False, lr=None, metric=None, rivals=(), group=None,
              alternatives=()):
    """An estimate from its claim seeds' values ({seed: value}); a non-finite value at any seed makes it
    a non-finite estimate (never dropped), said with its count."""
    xs = list(values.values())
    bad = [s for s, x in values.items() if not math.isfinite(x)]
    if bad:
        return Estimate(label, math.inf, at_edge=at_edge, lr=lr, failure=NON_FINITE, metric=metric, rivals=rivals,
                        group=group, alternatives=alternatives,
                        inf_text=f"non-finite at {len(bad)} of {len(xs)} claim seeds (seeds {', '.join(map(str, bad))})")
    return Estimate(label, sum(xs) / len(xs), _sd(xs), len(xs), at_edge, lr, values=dict(values), setting=setting,
                    metric=metric, rivals=rivals, group=group, alternatives=alternatives)


def combination(template, leaves):
    """template (an estimate, maybe a linear combination) with its leaves, in leaves() order, replaced by leaves."""
    it = iter(leaves)

    def rebuild(e):
        if not e.parts:
            return next(it)
        parts = tuple((c, rebuild(x)) for c, x in e.parts)
        missing = any(x.missing for _, x in parts)
        mean = None if missing else sum(c * x.mean for c, x in parts)
        return dataclasses.replace(e, parts=parts, mean=None if mean is None or math.isnan(mean) else mean)
    return rebuild(template)


def at_rivals(a, b, varied):
    """Every (a', b') with the leaves that varied(coefficient, leaf) selects at any of their rival LRs (the others at
    their chosen LR), the all-chosen pair left out: the comparisons an intersection-union test adds to the choice's."""
    leaves = a.leaves() + b.leaves(-1.0)
    options = [[e, *(e.alternatives if varied(k, e) else ())] for k, e in leaves]
    n = len(a.leaves())
    for combo in itertools.product(*options):
        if all(x is e for x, (_, e) in zip(combo, leaves)):
            continue
        yield combination(a, combo[:n]), combination(b, combo[n:])


@dataclass
class Pooled:
    """The seed standard deviation pooled over an experiment's groups, for sides with one seed."""
    std: float
    df: int

    @classmethod
    def of(cls, estimates):
        """Pool sum (n-1) s² / sum (n-1) over the estimates with at least two seeds (None if there are none)."""
        usable = [e for e in estimates if not e.missing and not e.diverged and e.n >= 2 and not e.parts]
        df = sum(e.n - 1 for e in usable)
        if not df:
            return None
        return cls(math.sqrt(sum((e.n - 1) * e.std ** 2 for e in usable) / df), df)


@dataclass
class Comparison:
    """d = subject - reference with its test: se, df, the two-sided interval at alpha, and why it stops
    short of a test (``failure``: one of the inconclusive reasons) when it does."""
    subject: Estimate
    reference: Estimate
    difference: float | None = None
    se: float | None = None
    df: float | None = None
    tolerance: float | None = None
    test: str = ""
    basis: str = ""
    correlation: float | None = None
    failure: str = ""           # missing | tuning failure: diverged | too few seeds ('' when testable)
    detail: str = ""
    falls: list = field(default_factory=list)   # grid-edge terms whose further tuning could lower d
    rises: list = field(default_factory=list)   # ... or raise it

    @property
    def testable(self):
        return not self.failure

    def p_below(self, x):
        """The one-sided p of 'd < x' (below alpha when the interval at 1 - 2 alpha lies below x)."""
        return t_cdf((self.difference - x) / self.se, self.df)

    def p_above(self, x):
        return t_cdf((x - self.difference) / self.se, self.df)

    def interval(self, alpha):
        """The interval the verdicts read: each of its ends is a one-sided bound at alpha (1 - 2 alpha coverage)."""
        if not self.testable:
            return None, None
        half = t_one_sided(alpha, self.df) * self.se
        return self.difference - half, self.difference + half


def _scale(estimate):
    finite = [abs(e.mean) for _, e in estimate.leaves() if not e.missing and math.isfinite(e.mean)]
    return sum(finite) / len(finite) if finite else 0.0


def paired_contrast(leaves):
    """The per-seed contrasts of a combination whose noisy terms all have the same claim seeds (see the module
    docstring), or None. Each seed's runs are one independent draw whatever they share (initialisation and batch
    order within a model and batch, nothing across them), so the contrasts are independent draws too and the
    paired t is exact at any correlation between the terms: across batches and models as within them."""
    terms = [(c, e) for c, e in leaves if e.n != 0]
    if len(terms) < 2 or any(e.values is None for _, e in terms):   # one noisy term: a one-sample test
        return None
    seeds = set(terms[0][1].values)
    if len(seeds) < 2 or any(set(e.values) != seeds for _, e in terms):
        return None
    constant = sum(c * e.mean for c, e in leaves if e.n == 0)
    return [constant + sum(c * e.values[s] for c, e in terms) for s in sorted(seeds)]


def _correlation(leaves):
    """The seeds' Pearson correlation between the two noisy terms of a difference, or the mean over the settings
    of a contrast of differences (two terms each); None for other shapes or a constant side."""
    noisy = [e for _, e in leaves if e.n]
    by_setting = {}
    for e in noisy:
        by_setting.setdefault(e.setting, []).append(e)
    pairs = [noisy] if len(noisy) == 2 else list(by_setting.values())
    rs = []
    for pair in pairs:
        if len(pair) != 2:
            return None
        seeds = sorted(pair[0].values)
        x, y = ([e.values[s] for s in seeds] for e in pair)
        if min(_sd(x), _sd(y)) <= 0:
            return None
        rs.append(_pearson(x, y))
    return sum(rs) / len(rs) if rs else None


def _pearson(x, y):
    mx, my = sum(x) / len(x), sum(y) / len(y)
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y))
    return sxy / math.sqrt(sum((a - mx) ** 2 for a in x) * sum((b - my) ** 2 for b in y))


def _sd(xs):
    m = sum(xs) / len(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0


def welch(leaves, pooled=None):
    """(se, df, notes) of a sum of independent seed means, with Hsu's df (the smallest of the terms'); None
    for se when a one-seed term has no pooled noise to stand in for its spread. The one-seed terms share one
    pooled estimate, so they are a single term with the pooled df."""
    terms, shared, notes = [], 0.0, []
    for c, e in leaves:
        if e.n == 0:            # a constant
            continue
        if e.n == 1:
            if pooled is None:
                return None, None, [f"{e.label} has one seed and there is no pooled seed noise to weigh it"]
            shared += c * c * pooled.std ** 2
            notes.append(f"{e.label} (n=1) takes the experiment's pooled seed sd {pooled.std:.3g} (df {pooled.df})")
        else:
            terms.append((c * c * e.std ** 2 / e.n, e.n - 1))
    if shared:
        terms.append((shared, pooled.df))
    total = sum(v for v, _ in terms)
    df = min((d for v, d in terms if v > 0), default=math.inf)
    return math.sqrt(total), df, notes


def edge_terms(leaves):
    """{"falls": the grid-edge terms whose further tuning could lower d, "rises": ... raise it}. Tuning minimises
    SELECTION_METRIC, so more of it can only lower that metric at an edge term: d moves one way, by the term's
    sign. Any other metric (peak MAL, perplexity, zero-shot error, steps to a target) can move either way with the
    LR, so its edge terms could move d both ways and block every verdict."""
    falls, rises = [], []
    for k, e in leaves:
        if e.at_edge:
            if e.metric == SELECTION_METRIC:
                (falls if k > 0 else rises).append(e)
            else:
                falls.append(e)
                rises.append(e)
    return {"falls": falls, "rises": rises}


def compare(a, b, stats, floor=None, pooled=None, extra_variance=0.0):
    """d = a - b and its test (lower is better); floor replaces the relative tolerance (e.g. an evaluation
    interval); pooled: the experiment's Pooled seed noise for one-seed sides; extra_variance: the variance of d from
    a source the seeds do not sample (zero-shot items), added to the seed noise's se²."""
    leaves = a.leaves() + b.leaves(-1.0)
    edges = edge_terms(leaves)
    gone = next((e for _, e in leaves if e.missing), None)
    if gone is not None:   # (a difference of two infinite values is missing too: its diverged terms say why, below)
        return Comparison(a, b, failure=MISSING, detail=f"{gone.label} has no result", **edges)
    failed = [e for _, e in leaves if e.diverged]
    if failed:
        return Comparison(a, b, failure=failed[0].failure, detail="; ".join(f"{e.label} {e.inf_text}" for e in failed),
                          **edges)
    d = a.mean - b.mean
    tolerance = floor if floor is not None else stats.tolerance * _scale(b)
    contrasts = paired_contrast(leaves)
    if contrasts is not None:
        n = len(contrasts)
        se, df, notes = _sd(contrasts) / math.sqrt(n), n - 1, []
        d = sum(contrasts) / n
        test, correlation = PAIRED, _correlation(leaves)
        basis = f"paired t on {n} per-seed differences" + (f", seeds' correlation r = {correlation:.2f}"
                                                          if correlation is not None else "")
    else:
        se, df, notes = welch(leaves, pooled)
        constant = all(e.n == 0 for k, e in b.leaves(-1.0)) or all(e.n == 0 for k, e in a.leaves())
        test, correlation = (ONE_SAMPLE if constant else WELCH), None
        basis = "; ".join([f"{test}, df {df:g}" if se else test] + notes)
    c = Comparison(a, b, d, se, df, tolerance, test, basis, correlation, **edges)
    if se is None:
        c.failure, c.detail = TOO_FEW, notes[0]
    elif se <= ZERO_SPREAD * max(_scale(a), _scale(b), abs(d), 1e-12):
        c.failure, c.detail = TOO_FEW, "no seed spread (every seed gave the same difference): no noise to test against"
    elif extra_variance:   # the seeds' noise is estimated; the items' adds to it (df stays the seeds')
        c.se = math.sqrt(se * se + extra_variance)
        c.basis += f"; item sampling adds sd {math.sqrt(extra_variance):.3g} to the difference's se"
    return c


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


def holm(ps, alpha):
    """Which of the p-values Holm's step-down procedure rejects at family level alpha."""
    order = sorted(range(len(ps)), key=lambda i: ps[i])
    rejected = [False] * len(ps)
    for step, i in enumerate(order):
        if ps[i] > alpha / (len(ps) - step):
            break
        rejected[i] = True
    return rejected


def holm_adjusted(ps):
    """Holm's adjusted p-values (the smallest family level at which each is rejected), in the order given."""
    order = sorted(range(len(ps)), key=lambda i: ps[i])
    adjusted, running = [1.0] * len(ps), 0.0
    for step, i in enumerate(order):
        running = max(running, min(1.0, (len(ps) - step) * ps[i]))
        adjusted[i] = running
    return adjusted


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


def benjamini_hochberg(ps, alpha):
    """How many of the p-values the Benjamini–Hochberg procedure keeps at false-discovery rate alpha."""
    ranked = sorted(ps)
    kept = [i + 1 for i, p in enumerate(ranked) if p <= alpha * (i + 1) / len(ranked)]
    return max(kept, default=0)
