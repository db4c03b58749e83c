"""Two looks at the claim seeds, in an artifact's record: which verdicts the first look settled.

With ``second_look_seeds``, every statement is judged first on the claim seeds (merit_repro.report.second_look),
each look at half the report's alpha. A statement the first look decided keeps that verdict, and so does one that
no seed could decide (a tuning failure, a missing result): both are its first look's record, rows and all. A
statement left undecided for want of seeds (``claims.SEED_LIMITED``) had every group behind it trained at the
second-look seeds too, and is judged again on all of them. Either way its verdict is false with probability at
most alpha/2 + alpha/2, whatever the two looks share.
"""

from merit_repro.config.registry import ARTIFACTS
from merit_repro.utils import UserError

REDO = "delete the first look's record (results/tuning/_second_look.json) and run the workflow again"

FIRST, SECOND = 1, 2


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
    each look tests at now, which the first look's must be."""
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
    statements, rows, again = [], [], 0
    for b, (s, r) in zip(before, now):
        if b["statement"]["needs_seeds"]:
            again += 1
            statements.append({**s, "look": SECOND})
            rows += [{**x, "look": SECOND} for x in r]
        else:
            statements.append({**b["statement"], "look": FIRST})
            rows += [{**x, "look": FIRST} for x in b["rows"]]
    seeds = ", ".join(map(str, first_look["seeds"]))
    note = (f"two looks at the claim seeds, each at alpha {first_look['alpha']:g}: {len(now) - again} statement(s) "
            f"kept the first look's verdict, {again} left undecided for want of seeds were judged again with the "
            f"second-look seeds ({seeds}) in every group behind them; the table and figure show every seed a group "
            "has, a kept statement's rows its first look's")
    return {**record, "statements": statements, "rows": rows, "notes": [*record.get("notes", []), note]}
