"""The folders the workflow writes (`results`, `figures`) are its own: each holds a record that says so, and a
folder holding files the workflow did not write is refused before any job, never written into.

    <folder>/.merit_repro_folder.json   what the folder is, its role, when and how it was claimed, and the
                                        entries found in it then that are not the workflow's (`found`)

A folder is claimed when it is new or empty, or when everything in it is laid out as the workflow lays out that
role (a folder an earlier version made, before records); with `adopt_folders` also when it holds other files, as
long as none lies where the workflow writes. The workflow writes only the layout below, so the files of a claimed
folder are told apart by it: the layout's are the workflow's, `found` lists the rest.
"""

import datetime
from pathlib import Path

from merit_repro.plan import paths
from merit_repro.utils import UserError, atomic_write_json, read_json

RECORD = ".merit_repro_folder.json"
WHAT = "an output folder of the merit_repro workflow"
PLACEHOLDERS = (".gitkeep",)   # a clone's empty paper_figures/ keeps one
# Top-level folders of a results folder: paths.py's, the bundles' (made and rebuilt) and the pilot scripts'
RESULTS_FOLDERS = (paths.DATA, paths.RUNS, paths.TUNING, paths.ZEROSHOT, "zeroshot_tasks", paths.TABLES, "logs",
                   "benchmarks", "bundle", "from_bundle", "origin", "pilot")
RESULTS_FILES = ("gpu_check.json",)   # scripts/gpu_check.sh's default --out
INDEX_FILES = ("README.md", "claims.csv")   # written together by the figures_readme rule
ARTIFACT_SUFFIXES = (".csv", ".md", ".tex", ".json", ".png", ".pdf")
LAYOUT = {
    "results": f"{', '.join(name + '/' for name in RESULTS_FOLDERS)} and {', '.join(RESULTS_FILES)}",
    "figures": f"{', '.join(INDEX_FILES)} and <artifact>/<experiment>{{{','.join(ARTIFACT_SUFFIXES)}}}",
}
SHOWN = 3   # entries a refusal names


def plan_claims(folders, artifacts, adopt=False):
    """{folder: the record to write when a run starts} for each role's folder ({role: folder}) that is not yet
    the workflow's; a folder whose record says so needs none. UserError (one line) when the folders overlap or
    one holds files the workflow did not write."""
    check_apart(folders)
    claims = {}
    for role, folder in folders.items():
        record = claim_for(folder, role, artifacts, adopt)
        if record:
            claims[folder] = record
    return claims


def check_apart(folders):
    """Two roles never share a folder, nor does one lie inside the other's."""
    (role_a, a), (role_b, b) = folders.items()
    first, second = Path(a).resolve(), Path(b).resolve()
    if first == second or first.is_relative_to(second) or second.is_relative_to(first):
        raise UserError(f"{role_a} ({a}) and {role_b} ({b}) overlap: give each a folder of its own, neither inside "
                        f"the other (--config {role_b}=PATH)")


def claim_for(folder, role, artifacts, adopt=False):
    """The record that claims folder for role, or None when it is the workflow's already; UserError naming what
    it holds, and the fix, when it holds files the workflow did not write."""
    folder = Path(folder)
    if (folder / RECORD).exists():
        check_record(folder, role)
        return None
    if not folder.exists():
        return record(role, "new")
    if not folder.is_dir():
        raise UserError(f"{role} folder {folder} is a file: choose a folder for {role} (--config {role}=PATH)")
    found = sorted(foreign_entries(folder, role, artifacts))
    if not found:
        return record(role, "laid out by the workflow" if has_output(folder) else "empty")
    in_the_way = [name for name in found if name.rstrip("/") in written_names(role, artifacts)]
    if in_the_way or not adopt:
        raise UserError(refusal(folder, role, found, in_the_way))
    return record(role, "adopted (adopt_folders: true)", found)


def check_record(folder, role):
    try:
        recorded = read_json(folder / RECORD)["role"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise UserError(f"{folder / RECORD} is damaged ({err}): remove it if {folder} holds only the workflow's "
                        f"files, else choose another folder for {role}") from None
    if recorded != role:
        raise UserError(f"{folder} is the workflow's {recorded} folder ({RECORD}), not a {role} folder: choose "
                        f"another folder for {role} (--config {role}=PATH)")


def refusal(folder, role, found, in_the_way):
    more = ", ..." if len(found) > SHOWN else ""
    what = f"{role} folder {folder} holds files the workflow did not write ({', '.join(found[:SHOWN])}{more})"
    fix = f"choose a new or empty folder for {role} (--config {role}=PATH)"
    if in_the_way:
        return f"{what}, and it would overwrite {', '.join(in_the_way[:SHOWN])}: {fix}, or move them away"
    return f"{what}: {fix}, or let the workflow write beside them (--config adopt_folders=true)"


def record(role, how, found=()):
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    return {"what": WHAT, "role": role, "created": now, "claimed": how, "layout": LAYOUT[role], "found": list(found)}


def claim(claims):
    """Write the records of plan_claims: when a run starts, never in a dry run."""
    for folder, content in claims.items():
        Path(folder).mkdir(parents=True, exist_ok=True)
        atomic_write_json(Path(folder) / RECORD, content)


# ---------------------------------------------------------------- the layout


def written_names(role, artifacts):
    """The names the workflow writes at the top of a folder of role."""
    return set(RESULTS_FOLDERS + RESULTS_FILES) if role == "results" else set(INDEX_FILES) | set(artifacts)


def foreign_entries(folder, role, artifacts, nested=True):
    """The top-level entries of folder that are not the workflow's ("name/" for a folder), one by one; with
    nested, a folder laid out as one of the workflow's counts as its own (one level deep, not further)."""
    for path in Path(folder).iterdir():
        if not is_ours(path, role, artifacts, nested):
            yield f"{path.name}/" if path.is_dir() else path.name


def has_output(folder):
    return any(path.name not in PLACEHOLDERS for path in Path(folder).iterdir())


def is_ours(path, role, artifacts, nested):
    if path.name in PLACEHOLDERS or in_layout(path, role, artifacts):
        return True
    return path.is_dir() and is_workflow_folder(path, artifacts, nested)


def in_layout(path, role, artifacts):
    if role == "results":
        return path.name in (RESULTS_FOLDERS if path.is_dir() else RESULTS_FILES)
    if path.name in INDEX_FILES:   # a README.md alone may be anyone's
        return path.is_file() and all((path.parent / name).is_file() for name in INDEX_FILES)
    return path.name in artifacts and path.is_dir() and is_artifact_folder(path)


def is_workflow_folder(path, artifacts, nested):
    """A folder of the workflow's inside this one (another config's, as paper_figures/mechanism is): its record
    says so, or (nested) it is laid out as one, with something in it."""
    if (path / RECORD).exists():
        return True
    return nested and has_output(path) and any(
        next(foreign_entries(path, role, artifacts, nested=False), None) is None for role in LAYOUT
    )


def is_artifact_folder(path):
    return all(p.is_file() and p.suffix in ARTIFACT_SUFFIXES for p in path.iterdir())
