"""The collect step's gate: the runs a report reads are exactly the configured cells, each complete.

Every cell a tuned group kept must be a cell of the config (its grid, an extension, a grid or claim seed),
trained with the config's settings on the corpus there now, complete and intact (``merit_repro.plan.records``);
otherwise one error names every bad run and how to retrain it.
"""

from pathlib import Path

from merit_repro.plan.records import cell_fingerprints, file_problems, read_summary
from merit_repro.plan.tuning import SECOND_LOOK, curve_lrs
from merit_repro.utils import UserError


def cell_problems(run_dir, expected_settings, result_keys):
    """Why the run in run_dir is not the complete, intact run of the cell with expected_settings (empty
    when it is). result_keys(settings) -> the settings that change the result."""
    if not (Path(run_dir) / "summary.json").is_file():
        return ["it has no summary.json (never finished)"]
    try:
        summary = read_summary(run_dir)
    except UserError as err:
        return [str(err)]
    problems = []
    try:
        ran, want = result_keys(summary["config"]), result_keys(expected_settings)
    except (TypeError, ValueError, AttributeError) as err:
        return [f"its summary.json holds no cell config of this version ({err})"]
    changed = sorted(k for k in set(ran) | set(want) if ran.get(k) != want.get(k))
    if changed:
        problems.append("it was trained with other settings than the config gives the cell: "
                        + ", ".join(f"{k} {ran.get(k)!r} (config: {want.get(k)!r})" for k in changed[:6]))
    for role, now in cell_fingerprints(expected_settings).items():
        then = (summary.get("data_fingerprint") or {}).get(role)
        if then != now:
            problems.append(f"it was trained on corpus {then} but {expected_settings[f'{role}_dir']} now holds {now}")
    return problems + file_problems(run_dir, summary)


def decision_problems(decision, spec):
    """Cells a tuned group kept that its configured spec cannot have asked for (a stale decision file)."""
    group = dict(spec["group"])
    if decision.get("group") != group:
        return [f"its decision is for group {decision.get('group')}, not {group}"]
    extensions = decision.get("extensions") or []
    problems = []
    if len(extensions) > spec["max_extensions"]:
        problems.append(f"its decision has {len(extensions)} grid extensions, more than max_extensions="
                        f"{spec['max_extensions']}")
    lrs = set(spec["lrs"]) | set(extensions)
    seeds = set(spec["grid_seeds"]) | set(spec["claim_seeds"]) | set(spec.get("second_look_seeds", []))
    curve = set(curve_lrs(spec, decision.get("best_lr")))
    for cell in decision.get("cells", []):
        if cell["seed"] in spec.get("curve_seeds", []):
            if cell["lr"] not in curve:
                problems.append(f"its curve seed {cell['seed']} trained lr {cell['lr']}, not one of "
                                f"{', '.join(sorted(curve, key=float)) or 'no LR'} (its curve multiples of the chosen "
                                f"LR {decision.get('best_lr')})")
        elif cell["lr"] not in lrs or cell["seed"] not in seeds:
            problems.append(f"it kept lr {cell['lr']} seed {cell['seed']}, which is not in its grid "
                            f"{sorted(lrs, key=float)} x seeds {sorted(seeds)}")
        elif cell.get("seed_origin") == SECOND_LOOK and cell["lr"] not in [decision.get("best_lr"),
                                                                             *(decision.get("rivals") or [])]:
            problems.append(f"its second look trained lr {cell['lr']}, not its chosen LR {decision.get('best_lr')} "
                            "or a rival of it")
    return problems


def check_runs(groups, result_keys, retrain):
    """Raise UserError naming every bad group and run. groups: [(decision, spec, cells)], with cells:
    [(run_dir, expected settings)]; retrain(run_dir) -> how to retrain that run."""
    bad = []
    for decision, spec, cells in groups:
        for problem in decision_problems(decision, spec):
            bad.append(f"tuning of {'/'.join(str(v) for v in spec['group'].values())}: {problem}; delete its "
                       "tuning folder and run the workflow again")
        for run_dir, settings in cells:
            problems = cell_problems(run_dir, settings, result_keys)
            if problems:
                bad.append(f"{run_dir}: {'; '.join(problems)}; {retrain(run_dir)}")
    bad = sorted(set(bad))   # a cell shared by several experiments is named once
    if bad:
        more = f" (the first 20 of {len(bad)})" if len(bad) > 20 else ""
        raise UserError(f"{len(bad)} run(s) or tuning decision(s) are not the configured cells' complete runs, so no "
                        f"table is made from them{more}: " + " | ".join(bad[:20]))
