"""The paper's claims as tests with a stated margin: held, did not hold, or inconclusive, and why.

A claim compares optimizers' best-LR results; lower is better for every metric used here
(validation loss, LAMBADA perplexity, peak MAL, steps to a target). An ``Estimate`` is one
optimizer's result in one setting: the mean over the seeds run at its best LR, their standard
deviation and count, whether that best LR is on an edge of its grid, and whether the optimizer
diverged at every LR (its value is then +inf: it lost).

Comparing a subject ``a`` with a reference ``b`` (``d = a - b``):

    tolerance = report.tolerance x |b|     the smallest difference treated as real (for steps: the
                                           evaluation interval, their resolution)
    noise     = report.noise_z x sqrt(sd_a²/n_a + sd_b²/n_b)     only when both sides have >= 2 seeds
    margin    = max(tolerance, noise)
    better when d < -margin, worse when d > margin, otherwise a tie.

A best LR on a grid edge is a tuning failure: it leaves a comparison undecided where more tuning
of that side could change it (the subject's edge unless the subject is already better, the
reference's edge unless the subject is already worse). A missing result leaves it undecided.

``beats``: held when the subject is better than every reference, did not hold when it is worse
than any, inconclusive otherwise. ``matches`` (no worse than): held when better or tied within the
tolerance, did not hold when worse, inconclusive when tied only because the noise is larger than
the tolerance. A claim made in several settings (models, batch sizes) holds when every part holds,
does not hold when any part does not, and is inconclusive otherwise.
"""

import math
from dataclasses import dataclass, field

HELD, NOT_HELD, INCONCLUSIVE, DESCRIPTIVE = "held", "did not hold", "inconclusive", "descriptive"


@dataclass
class Margins:
    noise_z: float = 2.0
    tolerance: float = 0.005

    @classmethod
    def from_report(cls, report):
        return cls(report.get("noise_z", cls.noise_z), report.get("tolerance", cls.tolerance))


@dataclass
class Estimate:
    label: str
    mean: float | None          # None: missing; inf: diverged at every LR
    std: float = 0.0
    n: int = 0
    at_edge: bool = False
    lr: str | None = None
    inf_text: str = "diverged at every LR"   # what an infinite value means here

    @property
    def missing(self):
        return self.mean is None or (isinstance(self.mean, float) and math.isnan(self.mean))

    @property
    def diverged(self):
        return not self.missing and math.isinf(self.mean)

    def text(self, digits=3):
        if self.missing:
            return f"{self.label} missing"
        if self.diverged:
            return f"{self.label} {self.inf_text}"
        spread = f" ± {self.std:.{digits}f}" if self.n > 1 else ""
        edge = f", best LR {self.lr} on the grid edge" if self.at_edge else ""
        return f"{self.label} {self.mean:.{digits}f}{spread} (n={self.n}{edge})"


@dataclass
class Comparison:
    subject: Estimate
    reference: Estimate
    outcome: str                # better | worse | tie | undecided
    difference: float | None = None
    margin: float | None = None
    noise: float | None = None
    tolerance: float | None = None
    why: str = ""

    def text(self, digits=3):
        return f"{self.subject.text(digits)} vs {self.reference.text(digits)}: {self.why}"


def compare(a, b, margins, floor=None):
    """a against b (lower is better); floor replaces the relative tolerance (e.g. an evaluation interval)."""
    if a.missing or b.missing:
        return Comparison(a, b, "undecided", why="a result is missing")
    if a.diverged and b.diverged:
        return Comparison(a, b, "undecided", why=f"both {a.inf_text}")
    if a.diverged or b.diverged:
        loser, outcome = (a, "worse") if a.diverged else (b, "better")
        return _edge(Comparison(a, b, outcome, why=f"{outcome}: {loser.label} {loser.inf_text}"))
    d = a.mean - b.mean
    tolerance = floor if floor is not None else margins.tolerance * abs(b.mean)
    noise = None
    if a.n >= 2 and b.n >= 2:
        noise = margins.noise_z * math.sqrt(a.std ** 2 / a.n + b.std ** 2 / b.n)
    margin = max(tolerance, noise or 0.0)
    basis = (f"{margins.noise_z:g} standard errors of the seeds" if noise is not None and noise > tolerance
             else "the tolerance")
    if d < -margin:
        outcome, why = "better", f"better by {-d:.4g} > margin {margin:.4g} ({basis})"
    elif d > margin:
        outcome, why = "worse", f"worse by {d:.4g} > margin {margin:.4g} ({basis})"
    else:
        outcome, why = "tie", f"difference {d:+.4g} within the margin {margin:.4g} ({basis})"
    return _edge(Comparison(a, b, outcome, d, margin, noise, tolerance, why))


def _edge(c):
    """Undecided where more tuning of a side whose best LR is on its grid edge could change the outcome."""
    for side, unless in ((c.subject, "better"), (c.reference, "worse")):
        if side.at_edge and c.outcome != unless:
            c.outcome = "undecided"
            c.why += f"; but {side.label}'s best LR {side.lr} is on its grid edge (a tuning failure)"
            break
    return c


@dataclass
class Verdict:
    result: str
    setting: str = ""
    comparisons: list = field(default_factory=list)
    parts: list = field(default_factory=list)
    note: str = ""

    def reasons(self):
        if self.parts:
            return [r for part in self.parts for r in part.reasons()]
        prefix = f"{self.setting}: " if self.setting else ""
        lines = [f"{prefix}{c.text()}" for c in self.comparisons]
        return lines + ([f"{prefix}{self.note}"] if self.note else [])

    def to_dict(self):
        return {"result": self.result, "reasons": self.reasons(),
                "comparisons": [_comparison_dict(c) for c in self.all_comparisons()]}

    def all_comparisons(self):
        return [c for part in self.parts for c in part.all_comparisons()] if self.parts else list(self.comparisons)


def _estimate_dict(e):
    state = "missing" if e.missing else e.inf_text if e.diverged else "ok"
    return {"label": e.label, "mean": e.mean if state == "ok" else None, "std": e.std, "n": e.n,
            "at_edge": e.at_edge, "lr": e.lr, "state": state}


def _comparison_dict(c):
    return {"subject": _estimate_dict(c.subject), "reference": _estimate_dict(c.reference), "outcome": c.outcome,
            "difference": c.difference, "margin": c.margin, "noise": c.noise, "tolerance": c.tolerance, "why": c.why}


def beats(subject, references, margins, setting="", floor=None):
    """The subject is better than every reference."""
    if not references:
        return Verdict(INCONCLUSIVE, setting, note="nothing to compare with")
    comparisons = [compare(subject, r, margins, floor) for r in references]
    outcomes = {c.outcome for c in comparisons}
    result = NOT_HELD if "worse" in outcomes else HELD if outcomes == {"better"} else INCONCLUSIVE
    return Verdict(result, setting, comparisons)


def matches(subject, reference, margins, setting="", floor=None):
    """The subject is no worse than the reference (better, or tied within the tolerance)."""
    c = compare(subject, reference, margins, floor)
    noise_dominates = c.noise is not None and c.noise > c.tolerance
    if c.outcome == "worse":
        result = NOT_HELD
    elif c.outcome == "better" or (c.outcome == "tie" and not noise_dominates):
        result = HELD
    else:
        result = INCONCLUSIVE
    return Verdict(result, setting, [c])


def combine(parts, setting=""):
    """One verdict from the verdicts of several settings."""
    if not parts:
        return Verdict(INCONCLUSIVE, setting, note="no setting to test")
    results = {p.result for p in parts}
    result = NOT_HELD if NOT_HELD in results else HELD if results == {HELD} else INCONCLUSIVE
    return Verdict(result, setting, parts=list(parts))
