"""What the report may trust: run files vouched for by their summary, the corpus a run was trained on, and
the check that the runs a report reads are exactly the configured cells, each complete.

- ``vouch(run_dir)``: the row count and sha256 of each result file, recorded in summary.json by the
  trainer; ``file_problems`` finds a file cut short, edited or missing since.
- ``fingerprint(meta)``: a corpus's identity (what was asked, the sha256 of every token file), recorded
  in summary.json and in every checkpoint; a run refuses to resume or count as complete on another.
- ``check_runs``: the collect step's gate. Every cell a tuned group kept must be a cell of the config
  (its grid, an extension, a grid or claim seed), trained with the config's settings on the corpus
  there now, complete and intact; otherwise one error names every bad run and how to retrain it.

Standard library only: the collect step and the trainer share it.
"""

import hashlib
import json
from pathlib import Path

VOUCHED = ("metrics.csv", "mal.csv", "diagnostics.csv", "eval.json")


def sha256_bytes(data):
    return hashlib.sha256(data).hexdigest()


def file_record(path):
    """{rows (CSV files: lines after the header), sha256} of a result file."""
    path = Path(path)
    data = path.read_bytes()
    record = {"sha256": sha256_bytes(data)}
    if path.suffix == ".csv":
        record["rows"] = max(0, data.count(b"\n") - 1)
    return record


def vouch(run_dir, names=VOUCHED):
    return {name: file_record(Path(run_dir) / name) for name in names}


def file_problems(run_dir, summary):
    """What no longer matches the records in summary.json, one line per file."""
    recorded = summary.get("files")
    if not isinstance(recorded, dict) or not recorded:
        return ["its summary.json records no row counts or checksums (written before they were recorded)"]
    problems = []
    for name, want in sorted(recorded.items()):
        path = Path(run_dir) / name
        if not path.is_file():
            problems.append(f"{name} is missing")
            continue
        got = file_record(path)
        if got != want:
            rows = f"{got['rows']} rows where summary.json vouches for {want.get('rows')}" if "rows" in got \
                and got["rows"] != want.get("rows") else "other content than summary.json vouches for"
            problems.append(f"{name} has {rows} (sha256 {got['sha256'][:12]}, recorded {str(want.get('sha256'))[:12]})")
    return problems


def fingerprint(meta):
    """A prepared corpus's identity: what was asked and the sha256 of each of its files (not where, when or
    with which library versions it was prepared)."""
    files = meta.get("splits") or meta.get("files") or {}
    identity = {"request": meta.get("request"), "files": {k: v.get("sha256") for k, v in sorted(files.items())}}
    return sha256_bytes(json.dumps(identity, sort_keys=True).encode())[:16]


def corpus_fingerprint(data_dir):
    """The fingerprint of the corpus prepared in data_dir now, or None when there is none."""
    meta = Path(data_dir) / "meta.json"
    try:
        return fingerprint(json.loads(meta.read_text()))
    except (OSError, ValueError, AttributeError):
        return None


def cell_fingerprints(settings):
    """{role: fingerprint} of the corpora a cell reads (its training data; LAMBADA when it evaluates on it)."""
    dirs = {"data": settings.get("data_dir"), "lambada": settings.get("lambada_dir")}
    return {role: corpus_fingerprint(d) for role, d in dirs.items() if d}


def read_summary(run_dir):
    """summary.json of a run as a dict, or a UserError naming the file and the fix."""
    from .utils import UserError

    path = Path(run_dir) / "summary.json"
    try:
        summary = json.loads(path.read_text())
        if not isinstance(summary, dict) or not {"status", "config"} <= set(summary):
            raise ValueError("it is not a run summary of merit_repro.train")
    except (ValueError, UnicodeDecodeError) as err:
        raise UserError(f"{path} cannot be read as a run summary ({str(err).splitlines()[0][:120]}); delete it "
                        "to retrain the cell") from None
    return summary


def cell_problems(run_dir, expected_settings, result_keys):
    """Why the run in run_dir is not the complete, intact run of the cell with expected_settings (empty
    when it is). result_keys(settings) -> the settings that change the result."""
    from .utils import UserError

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
    lrs, seeds = set(spec["lrs"]) | set(extensions), set(spec["grid_seeds"]) | set(spec["claim_seeds"])
    for cell in decision.get("cells", []):
        if cell["lr"] not in lrs or cell["seed"] not in seeds:
            problems.append(f"it kept lr {cell['lr']} seed {cell['seed']}, which is not in its grid "
                            f"{sorted(lrs, key=float)} x seeds {sorted(seeds)}")
    return problems


def check_runs(groups, result_keys, retrain):
    """Raise UserError naming every bad group and run. groups: [(decision, spec, cells)], with cells:
    [(run_dir, expected settings)]; retrain(run_dir) -> how to retrain that run."""
    from .utils import UserError

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
