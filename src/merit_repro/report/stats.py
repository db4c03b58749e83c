"""The statistics under every verdict: estimates over claim seeds, their combinations, and the test of a
difference, from the seeds alone (no verdict rules: merit_repro.report.claims reads these).

An ``Estimate`` is one optimizer's result at its first-choice LR in one setting: its claim seeds' mean, sd,
count and per-seed values; estimates combine linearly (``a - b``), so a trend or a growing gap is one estimate
too. A constant (n = 0) is a target or an offset, without noise.

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

Holm's step-down correction and Benjamini-Hochberg's procedure are here too, for every family the verdicts
correct over.
"""

import dataclasses
import itertools
import math
from dataclasses import dataclass, field

# scipy.special's Student t (what scipy.stats.t computes with) imports in half the time of scipy.stats, which every
# artifact job of the workflow would otherwise pay.
from scipy.special import stdtr, stdtrit

from merit_repro.plan.tuning import SELECTION_METRIC

# Why a comparison has no test (the verdict is then inconclusive, for this reason)
TOO_FEW, DIVERGED, MISSING, NON_FINITE = "too few seeds", "tuning failure: diverged", "missing", "non-finite value"
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


def benjamini_hochberg(ps, alpha):
    """How many of the p-values the Benjamini–Hochberg procedure keeps at false-discovery rate alpha."""
    ranked = sorted(ps)
    kept = [i + 1 for i, p in enumerate(ranked) if p <= alpha * (i + 1) / len(ranked)]
    return max(kept, default=0)
