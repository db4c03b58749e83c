"""The paper's statements as tests: held, did not hold, inconclusive, or not tested at this scale.

Every statement is "the subject is lower than the reference" (lower is better for every metric
used here: validation loss, LAMBADA perplexity, peak MAL) or "the subject is no worse than the
reference" (the headline). An ``Estimate`` is one optimizer's best-LR result in one setting: the
mean over its claim seeds, their standard deviation and count, whether its best LR is on an edge
of its grid, and whether it diverged at every LR (its value is then +inf: it lost). Estimates
combine linearly (``a - b``), so a trend ("AdamW degrades from the smallest to the largest
batch") or a growing gap is one estimate with its own standard error.

For a difference d = subject - reference, a sum of independent seed means sum_i c_i x_i:

    se         = sqrt(sum_i c_i² s_i² / n_i)
    df         = se⁴ / sum_i (c_i² s_i² / n_i)² / df_i         Welch–Satterthwaite (df_i = n_i - 1)
    noise      = t(1 - alpha / (2 k), df) x se                  two-sided, Bonferroni over the k settings
    tolerance  = report.tolerance x the reference's scale       the smallest difference treated as real
    margin     = max(noise, tolerance)
    better when d < -margin, worse when d > margin, otherwise a tie.

A side with one seed has no spread of its own: it takes the pooled seed standard deviation of its
experiment's groups (same metric, df = sum of their n - 1), said in ``basis``; without one the
comparison is inconclusive. ``lower`` is held when better, did not hold when worse. ``no_worse``
(non-inferiority) is held when d + noise < tolerance (confidently within the tolerance), did not
hold when worse. A statement made in k settings (``statement``) tests each at alpha / k, holds
when every setting holds and does not hold when any does not, so with every optimizer equal it
is held or did-not-hold at most alpha of the time (benchmarks/claims_calibration.py shows it).

A best LR on a grid edge is a tuning failure: it leaves a comparison undecided where more tuning
of that side could change it. A missing result leaves it undecided.
"""

import dataclasses
import math
from dataclasses import dataclass, field

HELD, NOT_HELD, INCONCLUSIVE, NOT_TESTED, DESCRIPTIVE = (
    "held", "did not hold", "inconclusive", "not tested at this scale", "descriptive")
LOWER, NO_WORSE = "lower", "no worse"


# ---------------------------------------------------------------- Student's t


def _betacf(a, b, x):
    """Continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for num in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _incomplete_beta(a, b, x):
    if x <= 0.0 or x >= 1.0:
        return max(0.0, min(1.0, x))
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t, df):
    """P(T <= t) for Student's t with df (> 0, not necessarily whole) degrees of freedom."""
    tail = 0.5 * _incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_pdf(t, df):
    return math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
                    - (df + 1) / 2 * math.log1p(t * t / df))


def t_quantile(p, df):
    """The t with P(T <= t) = p (0.5 <= p < 1): Newton's method on t_cdf inside a bisection bracket."""
    if not 0.5 <= p < 1.0 or df <= 0:
        raise ValueError(f"t_quantile needs 0.5 <= p < 1 and df > 0 (got p={p}, df={df})")
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        lo, hi = hi, hi * 2.0
    t = 0.5 * (lo + hi)
    for _ in range(100):
        error = t_cdf(t, df) - p
        lo, hi = (t, hi) if error < 0 else (lo, t)
        step = t - error / t_pdf(t, df)
        new = step if lo < step < hi else 0.5 * (lo + hi)
        if abs(new - t) < 1e-12 * max(1.0, t):
            return new
        t = new
    return t


def t_critical(alpha, df):
    """Two-sided critical value: |T| > t_critical(alpha, df) with probability alpha."""
    return t_quantile(1.0 - alpha / 2.0, df)


# ---------------------------------------------------------------- estimates


@dataclass
class Stats:
    """The level of each statement and the smallest relative difference treated as real (the config's report
    block; its defaults are the schema's)."""
    alpha: float
    tolerance: float

    @classmethod
    def from_report(cls, report):
        return cls(float(report["alpha"]), float(report["tolerance"]))


@dataclass
class Estimate:
    label: str
    mean: float | None          # None: missing; inf: diverged at every LR
    std: float = 0.0
    n: int = 0                  # seeds; 0 with a mean: a constant (a target), no noise
    at_edge: bool = False
    lr: str | None = None
    inf_text: str = "diverged at every LR"   # what an infinite value means here
    parts: tuple = ()           # a linear combination: ((coefficient, Estimate), ...)

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
        return dataclasses.replace(self, label=f"{self.label}@{batch}")

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
    subject: Estimate
    reference: Estimate
    outcome: str                # better | worse | tie | undecided
    difference: float | None = None
    margin: float | None = None
    se: float | None = None
    df: float | None = None
    noise: float | None = None
    tolerance: float | None = None
    basis: str = ""
    why: str = ""
    edge_rises: bool = False    # a reference-side best LR on its grid edge: more tuning could raise d

    def text(self, digits=3):
        return f"{self.subject.text(digits)} vs {self.reference.text(digits)}: {self.why}"


def welch(leaves, pooled=None):
    """(se, df, notes) of a sum of independent seed means; None for se when a one-seed term has no pooled
    noise to stand in for its spread. The one-seed terms share one pooled estimate, so they enter
    Welch–Satterthwaite as a single term with the pooled df, not as independent ones."""
    variances, shared, notes = [], 0.0, []
    for c, e in leaves:
        if e.n == 0:            # a constant
            continue
        if e.n == 1:
            if pooled is None:
                return None, None, [f"{e.label} has one seed and there is no pooled seed noise to weigh it"]
            shared += c * c * pooled.std ** 2
            notes.append(f"{e.label} (n=1) takes the experiment's pooled seed sd {pooled.std:.3g} (df {pooled.df})")
        else:
            variances.append((c * c * e.std ** 2 / e.n, e.n - 1))
    if shared:
        variances.append((shared, pooled.df))
    total = sum(v for v, _ in variances)
    if total <= 0:
        return 0.0, math.inf, notes
    df = total ** 2 / sum(v * v / d for v, d in variances if v > 0)
    return math.sqrt(total), df, notes


def _scale(estimate):
    finite = [abs(e.mean) for _, e in estimate.leaves() if not e.missing and math.isfinite(e.mean)]
    return sum(finite) / len(finite) if finite else 0.0


def compare(a, b, stats, tests=1, floor=None, pooled=None):
    """a against b (lower is better), tested at alpha / tests; floor replaces the relative tolerance (e.g. an
    evaluation interval); pooled: the experiment's Pooled seed noise for one-seed sides."""
    if a.missing or b.missing:
        return Comparison(a, b, "undecided", why="a result is missing")
    if a.diverged and b.diverged:
        return Comparison(a, b, "undecided", why=f"both {a.inf_text}")
    if a.diverged or b.diverged:
        if a.parts or b.parts:
            return Comparison(a, b, "undecided", why="a part diverged at every LR, so the trend has no value")
        loser, outcome = (a, "worse") if a.diverged else (b, "better")
        return _edge(Comparison(a, b, outcome, basis="divergence", why=f"{outcome}: {loser.label} {loser.inf_text}"))
    leaves = a.leaves() + b.leaves(-1.0)
    d = a.mean - b.mean
    tolerance = floor if floor is not None else stats.tolerance * _scale(b)
    se, df, notes = welch(leaves, pooled)
    if se is None:
        return _edge(Comparison(a, b, "undecided", d, tolerance=tolerance, basis="no noise estimate",
                                why=f"difference {d:+.4g}, but {notes[0]}"))
    level = stats.alpha / tests
    crit = t_critical(level, df) if se > 0 and math.isfinite(df) else 0.0
    noise = crit * se
    margin = max(tolerance, noise)
    test = (f"Welch t({df:.1f}) = {crit:.2f} at alpha {level:.3g}" + (f" (alpha {stats.alpha:g} / {tests} settings)"
                                                                        if tests > 1 else "") + f" x se {se:.3g}")
    basis = "; ".join([test if noise >= tolerance else f"the tolerance {tolerance:.3g} (above {test})"] + notes)
    if d < -margin:
        outcome, why = "better", f"better by {-d:.4g} > margin {margin:.4g}"
    elif d > margin:
        outcome, why = "worse", f"worse by {d:.4g} > margin {margin:.4g}"
    else:
        outcome, why = "tie", f"difference {d:+.4g} within the margin {margin:.4g}"
    return _edge(Comparison(a, b, outcome, d, margin, se, df, noise, tolerance, basis, f"{why} ({basis})"))


def _edge(c):
    """A best LR on its grid edge is a tuning failure: more tuning could only lower that side's value, so d
    could fall (an edge term entering d with +) or rise (with -). An outcome such a change could overturn
    becomes undecided; a tie stays a tie, with the edge said (``edge_rises`` for the no-worse rule)."""
    leaves = c.subject.leaves() + c.reference.leaves(-1.0)
    falls = [e for k, e in leaves if e.at_edge and k > 0]
    rises = [e for k, e in leaves if e.at_edge and k < 0]
    c.edge_rises = bool(rises)
    blocking = rises if c.outcome == "better" else falls if c.outcome == "worse" else falls + rises
    if blocking and c.outcome != "undecided":
        c.outcome = c.outcome if c.outcome == "tie" else "undecided"
        c.why += f"; but {blocking[0].label}'s best LR {blocking[0].lr} is on its grid edge (a tuning failure)"
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


@dataclass
class Row:
    claim: str
    kind: str
    setting: Setting
    comparison: Comparison | None
    verdict: str
    tests: int

    def reason(self):
        s = self.setting
        where = f"{s.model} at batch {s.batch}" if s.batch != "" else s.model
        text = self.comparison.text() if self.comparison else f"{s.subject.text()} vs {s.reference.text()}"
        extra = "".join(f"; {x}" for x in (s.not_tested, s.note) if x)
        return f"{where}: {text}{extra}"

    def to_dict(self):
        s, c = self.setting, self.comparison
        subject, reference = _side(s.subject), _side(s.reference)
        return _json_safe({"claim": self.claim, "kind": self.kind, "model": s.model, "batch": s.batch,
                "subject": s.subject.label, "reference": s.reference.label,
                "subject_mean": subject["mean"], "subject_sd": subject["sd"], "subject_n": subject["n"],
                "subject_lr": s.subject.lr, "reference_mean": reference["mean"], "reference_sd": reference["sd"],
                "reference_n": reference["n"], "reference_lr": s.reference.lr,
                "difference": c.difference if c else None, "se": c.se if c else None, "df": c.df if c else None,
                "margin": c.margin if c else None, "noise": c.noise if c else None,
                "tolerance": c.tolerance if c else None, "tests": self.tests,
                "basis": s.not_tested or (c.basis or c.why if c else ""), "verdict": self.verdict,
                "why": self.reason()})


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


def _row_verdict(c, kind):
    """lower: held when better, did not hold when worse. no worse (non-inferiority): held when the upper
    confidence bound d + noise is inside the tolerance, did not hold when the lower bound d - noise is
    beyond it (or the subject diverged everywhere)."""
    if kind == LOWER:
        return HELD if c.outcome == "better" else NOT_HELD if c.outcome == "worse" else INCONCLUSIVE
    if c.outcome == "undecided":
        return INCONCLUSIVE
    if c.difference is None:    # decided by divergence
        return HELD if c.outcome == "better" else NOT_HELD
    noise = c.noise or 0.0
    if c.difference + noise < c.tolerance and not c.edge_rises:
        return HELD
    if c.difference - noise > c.tolerance and c.outcome == "worse":
        return NOT_HELD
    return INCONCLUSIVE


@dataclass
class Statement:
    """One statement of the paper over its settings: a row each, and one verdict."""
    claim: str
    kind: str
    rows: list = field(default_factory=list)
    result: str = INCONCLUSIVE

    def reasons(self):
        return [r.reason() for r in self.rows]

    def to_dict(self):
        where = [f"{r.setting.model} bs{r.setting.batch}" for r in self.rows]
        return {"claim": self.claim, "kind": self.kind, "result": self.result, "settings": len(self.rows),
                "where": where[0] if len(where) == 1 else f"{len(where)} settings", "reasons": self.reasons()}


def statement(claim, settings, stats, kind=LOWER, pooled=None):
    """Test a statement in each of its settings at alpha / k (k: the settings that can test it) and combine."""
    testable = [s for s in settings if not s.not_tested]
    rows = []
    for s in settings:   # a setting that cannot test the statement keeps its comparison for the record
        c = compare(s.subject, s.reference, stats, max(1, len(testable)), s.floor, pooled)
        rows.append(Row(claim, kind, s, c, NOT_TESTED if s.not_tested else _row_verdict(c, kind),
                        0 if s.not_tested else len(testable)))
    return Statement(claim, kind, rows, combine([r.verdict for r in rows]))


def combine(verdicts):
    """Held when every testable setting holds, did not hold when any does not, not tested when none can test."""
    tested = [v for v in verdicts if v != NOT_TESTED]
    if not tested:
        return NOT_TESTED if verdicts else INCONCLUSIVE
    if NOT_HELD in tested:
        return NOT_HELD
    return HELD if set(tested) == {HELD} else INCONCLUSIVE
