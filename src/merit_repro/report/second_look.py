"""The first of two looks at the claim seeds (``second_look_seeds``): every statement judged on the claim seeds, and
the groups whose statements it leaves undecided for want of seeds.

Once every group is tuned and its claim seeds trained, the workflow's ``second_look`` checkpoint judges every
artifact's statements as the report would (``looks.FIRST``, at ``report.first_look_share`` of the report's alpha)
and writes results/tuning/_second_look.json: each statement's record, and the groups behind every statement left
inconclusive for a reason more seeds can change (``claims.Statement.needs_seeds``). Each of those groups trains the
second-look seeds at its first-choice LR and its rivals (``tuning.with_second_look``); the artifacts then keep the
first look's verdicts and judge the rest again on all the seeds, at the rest of alpha (``artifacts.looks.settle``).
The zero-shot artifact is judged once, on the claim seeds its scores cover, at the full alpha.
"""

import json
import tempfile
from collections import Counter
from pathlib import Path

from merit_repro.config.configfiles import with_defaults
from merit_repro.config.registry import ARTIFACTS
from merit_repro.plan import paths
from merit_repro.plan.grid import experiment_artifacts, second_look_seeds
from merit_repro.plan.records import LOOK_TYPES, read_typed
from merit_repro.plan.tuning import with_second_look, write_json
from merit_repro.report.artifacts import ARTIFACT_FUNCTIONS, load_context
from merit_repro.report.artifacts.looks import REDO, looked
from merit_repro.report.stats import Stats
from merit_repro.report.tables import best_lr_table, runs_table
from merit_repro.utils import UserError, one_line


def looked_artifacts(config, name):
    """The artifacts of an experiment the first look judges: every one but those reading zero-shot scores."""
    return [a for a in experiment_artifacts(config, name) if not ARTIFACTS[a].needs_zeroshot]


def first_look(config, decisions, results, paper_csv, mal_threshold):
    """The first look's record: {alpha, seeds, statements: {artifact/experiment: [{statement, rows}]}, groups:
    [the tuned groups (decision["group"]) that train the second-look seeds]}. decisions: the groups' final ones."""
    runs, cells = runs_table(decisions, results, mal_threshold)
    best = best_lr_table(decisions, runs)
    statements = {}
    with tempfile.TemporaryDirectory() as tmp:   # through CSV files: the artifacts read the kinds the tables give
        tables = {name: Path(tmp) / f"{name}.csv" for name in ("runs", "cells", "best")}
        for frame, name in ((runs, "runs"), (cells, "cells"), (best, "best")):
            frame.to_csv(tables[name], index=False)
        for name in sorted(config["experiments"]):
            for artifact in looked_artifacts(config, name):
                ctx = load_context(name, config, tables["runs"], tables["cells"], tables["best"], paper_csv, results,
                                   drawing=False, look=1)
                _, record = ARTIFACT_FUNCTIONS[artifact](ctx, Path(tmp) / artifact)
                statements[f"{artifact}/{name}"] = looked(record)
    wanted = {(key.split("/", 1)[1], *map(str, g)) for key, items in statements.items() for item in items
              for g in item["statement"]["needs_seeds"]}
    groups = sorted((d["group"] for d in decisions   # in an order of their own, not the decisions' order
                     if (d["group"]["experiment"], d["group"]["model"], d["group"]["optimizer"], str(d["group"]["batch"]))
                     in wanted), key=lambda g: (g["experiment"], g["model"], g["optimizer"], g["batch"]))
    alpha = Stats.from_report(with_defaults(config, "report"), looks=2, look=1).alpha
    return {"alpha": alpha, "seeds": second_look_seeds(config), "statements": statements, "groups": groups}


def write_first_look(config, decisions, results, paper_csv, mal_threshold, out):
    """The first look's record -> out; what it decided, in words."""
    record = first_look(config, decisions, results, paper_csv, mal_threshold)
    write_json(out, record)
    judged = [i["statement"] for items in record["statements"].values() for i in items]
    again = sum(bool(s["needs_seeds"]) for s in judged)
    return (f"first look at the claim seeds (alpha {record['alpha']:g}): {len(judged) - again} of {len(judged)} "
            f"statements settled; {again} undecided for want of seeds send {len(record['groups'])} group(s) to the "
            f"second look (seeds {record['seeds']})")


def audit_first_look(config, decisions, results, paper_csv, mal_threshold, path, looked=None):
    """Lines saying a bundle's first look (path) is the one its runs give, and that each group's decision holds every
    seed it sent (looked: the bundle's looked.json decisions); a UserError naming what differs otherwise: a rebuilt
    report keeps the first look's verdicts, so they must follow from the runs as the tables must, and a bundle that
    leaves out seeds the look sent would report on the seeds its sender chose."""
    theirs = read_first_look(path)
    if looked is not None:
        check_looked(decisions, looked, theirs)
    ours = json.loads(json.dumps(first_look(config, decisions, results, paper_csv, mal_threshold)))   # as written
    differ = [f"the statements of {key}" for key in sorted(set(ours["statements"]) | set(theirs["statements"]))
              if ours["statements"].get(key) != theirs["statements"].get(key)]
    differ += [f"its {key}" for key in ("alpha", "seeds", "groups") if ours[key] != theirs[key]]
    if differ:
        raise UserError(f"the bundle's first look at the claim seeds ({path}) is not the one its runs give: "
                        f"{'; '.join(differ[:5])} differ. The bundle was changed, or this checkout computes otherwise "
                        "(compare its commit and lock hash with `inspect`)")
    judged = sum(len(items) for items in ours["statements"].values())
    return [f"first look: {judged} statements and the {len(ours['groups'])} group(s) it sent to the second look, "
            "identical to the bundle's"]


def check_looked(decisions, looked, look):
    """UserError naming each group whose looked decision is not its final one with the cells the first look sent
    (tuning.with_second_look): seeds left out, seeds added, or the group missing."""
    theirs = {group_key(d): d for d in looked}
    problems = [f"{group_name({'group': json.loads(key)})} has more than one decision"
                for kind in (looked, decisions) for key, n in Counter(map(group_key, kind)).items() if n > 1]
    problems += [problem for final in sorted(decisions, key=group_key)
                 if (problem := looked_problem(final, theirs.get(group_key(final)), look))]
    if problems:
        raise UserError("the bundle's decisions do not hold the seeds its first look sent to the second look: "
                        f"{'; '.join(problems[:5])}{' ...' if len(problems) > 5 else ''}. A report on other seeds than "
                        "the look sent is not this run's report: ask its sender for the bundle `snakemake bundle` made")


def looked_problem(final, got, look):
    """How a group's looked decision (got) differs from the one its final decision and the look give ('' if not)."""
    name = group_name(final)
    lrs = {c["lr"] for c in final["cells"]}
    if not {final["best_lr"], *final.get("rivals", [])} <= lrs | {None}:
        return f"{name}'s final decision names LRs it trained no cells at (best_lr, rivals)"
    want = json.loads(json.dumps(with_second_look(final, look)))   # as written
    if got == want:
        return ""
    if got is None:
        return f"{name} has no looked decision"
    missing, extra = sorted(cell_keys(want) - cell_keys(got)), sorted(cell_keys(got) - cell_keys(want))
    parts = [f"{verb} {', '.join(f'seed {seed} at lr {lr}' for lr, seed in cells)}"
             for verb, cells in (("lacks", missing), ("adds", extra)) if cells]
    return f"{name} {' and '.join(parts) or 'differs from its final decision with the second look'}"


def group_name(decision):
    g = decision["group"]
    return one_line(paths.group_path(g["experiment"], g["model"], g["optimizer"], g["batch"]))


def group_key(decision):
    return json.dumps(decision["group"], sort_keys=True)


def cell_keys(decision):
    return {(c["lr"], c["seed"]) for c in decision["cells"]}


def read_first_look(path):
    """The first look's record, checked as its readers need it (UserError naming the file and the fix)."""
    return read_typed(path, LOOK_TYPES, "the first look at the claim seeds", REDO)
