"""Two looks at the claim seeds, in an artifact's record: which verdicts the first look settled.

With ``second_look_seeds``, every statement is judged first on the claim seeds (merit_repro.report.second_look),
the first look at ``report.first_look_share`` of the report's alpha, the second at the rest. A statement the first
look decided keeps that verdict, and so does one that no seed could decide (a tuning failure, a missing result):
both are its first look's record, rows and all. A statement left undecided for want of seeds (``claims.SEED_LIMITED``,
or a close call tested at every rival LR) had every group behind it trained at the second-look seeds too, at the
chosen LR and its rivals, and is judged again on all of them, except a comparison the first look settled in another
statement, which keeps its first look's row wherever it is stated (one comparison, one set of seeds). Either way
its verdict is false with probability at most the first look's alpha + the second's, whatever the two looks share.
"""

from merit_repro.config.registry import ARTIFACTS
from merit_repro.report.claims import DESCRIPTIVE, EQUIVALENT, HELD, INCONCLUSIVE, MIXED, NOT_TESTED, combine
from merit_repro.utils import UserError

REDO = "delete the first look's record (results/tuning/_second_look.json) and run the workflow again"

FIRST, SECOND = 1, 2
# A row's place in its own statement, kept when its numbers and verdict are another statement's first look's
PLACE = ("claim", "model", "batch", "subject", "reference", "origin", "tests")


def by_statement(record):
    """[(statement, its rows)] of an artifact's record (merit_repro.report.artifacts.context.record), whose rows
    are its statements' rows in order, ``settings`` of them each."""
    rows, out = iter(record["rows"]), []
    for s in record["statements"]:
        out.append((s, [next(rows) for _ in range(s["settings"])]))
    return out


def looked(record):
    """What the first look keeps of an artifact's record: each statement with its rows."""
    return [{"statement": s, "rows": rows} for s, rows in by_statement(record)]


def settle(record, first_look, artifact, experiment, alpha):
    """The record of an artifact made after the second look: each statement the first look settled as it was
    then, each it sent to the second look as judged now, with the look that decided it (``look``). alpha: the level
    the config gives the first look now, which the first look's record must have been judged at."""
    if ARTIFACTS[artifact].needs_zeroshot:   # not looked at first (zero-shot scores only the claim seeds): judged once
        return record
    before = first_look["statements"].get(f"{artifact}/{experiment}")
    if before is None or first_look["alpha"] != alpha:
        raise UserError(f"{artifact}/{experiment} was not judged at the first look at the claim seeds, or at another "
                        f"alpha ({first_look['alpha']:g}, now {alpha:g}): {REDO}")
    now = by_statement(record)
    if [(b["statement"]["claim"], b["statement"]["where"]) for b in before] != [(s["claim"], s["where"])
                                                                                for s, _ in now]:
        raise UserError(f"{artifact}/{experiment} states other statements than at the first look at the claim "
                        f"seeds (the config changed since?): {REDO}")
    kept = kept_rows(first_look, experiment)
    statements, rows, again = [], [], 0
    for b, (s, r) in zip(before, now):
        if b["statement"]["needs_seeds"]:
            again += 1
            found = [{**kept[x["key"]], **{k: x[k] for k in PLACE if k in x}, "look": FIRST} if x.get("key") in kept
                     else {**x, "look": SECOND} for x in r]
            replaced = any(x["look"] == FIRST for x in found)
            statements.append({**s, **(recombined(found) if replaced else {}), "look": SECOND})
            rows += found
        else:
            statements.append({**b["statement"], "look": FIRST})
            rows += [{**x, "look": FIRST} for x in b["rows"]]
    seeds = ", ".join(map(str, first_look["seeds"]))
    note = (f"two looks at the claim seeds, the first at alpha {first_look['alpha']:g}, the second at the rest of the "
            f"report's alpha: {len(now) - again} statement(s) "
            f"kept the first look's verdict, {again} left undecided for want of seeds were judged again with the "
            f"second-look seeds ({seeds}) in every group behind them; the table and figure show every seed a group "
            "has, a kept statement's rows its first look's, and a comparison the first look settled in any statement "
            "is printed with its first look's seeds and verdict wherever it is stated again")
    return {**record, "statements": statements, "rows": rows, "notes": [*record.get("notes", []), note]}


def kept_rows(first_look, experiment):
    """{comparison key: its row} of every tested row of the statements the first look settled, over every artifact of
    the experiment: a comparison is printed with one set of seeds, the first look's, wherever it is stated again."""
    found = {}
    for key, items in first_look["statements"].items():
        if key.split("/", 1)[1] != experiment:
            continue
        for item in items:
            if not item["statement"]["needs_seeds"]:
                found.update({r["key"]: r for r in item["rows"] if r.get("key")
                              and r["verdict"] not in (DESCRIPTIVE, NOT_TESTED)})
    return found


def recombined(rows):
    """A statement's verdict and its p-values again, from its rows (some settled at the first look, the rest judged on
    every seed): each row's verdict stands at the look that made it, so the union bound over the looks holds."""
    judged = [r for r in rows if r["verdict"] != DESCRIPTIVE]
    verdicts = [r["verdict"] for r in judged]
    whys = [r["why"] for r in judged if r["why"]]
    if {HELD, EQUIVALENT} <= set(verdicts):
        whys.append(MIXED)
    result = combine(verdicts) if verdicts else DESCRIPTIVE
    tested = [r for r in judged if r["verdict"] != NOT_TESTED]

    def largest(key):
        return None if not tested or any(r.get(key) is None for r in tested) else max(r[key] for r in tested)
    against = [r["p_against"] for r in tested if r.get("p_against") is not None]
    return {"result": result, "why": "; ".join(dict.fromkeys(whys)) if result == INCONCLUSIVE else "",
            "p_value": largest("p_value"), "p_against": min(against) if against else None,
            "p_equivalent": largest("p_equivalent"), "reasons": [r["reason"] for r in rows]}
