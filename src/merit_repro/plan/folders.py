"""The folders the workflow writes (`results`, `figures`) are its own: each holds a record that says so. A folder
without one is the workflow's only where its content shows it, and a folder that could hold a file the workflow would
overwrite unknowingly is refused before any job, naming the files.

    <folder>/.merit_repro_folder.json   what the folder is, its role, when and how it was claimed, and the
                                        entries found in it then that are not the workflow's (`found`)

A folder without a record is claimed when it is new or empty, or when every file in it is shown to be the workflow's
by the hashes the workflow keeps: the result files (and weights) a run's summary.json under runs/ records as they are,
the token files a corpus's meta.json under data/ records as they are (results copied without their record), or a
folder of the workflow's inside it with a record of its own (another config's). Names alone show nothing: a
`tables/`, a `README.md` or a run's `train.log` may be anyone's. The project's other tools write beside the workflow (`SIDE_TOOLS`), never
where it writes, so their files need no proof.

Anything else is refused. With `adopt_folders` a folder is claimed beside such files as long as none lies where the
workflow writes (`LAYOUT`), so that the workflow never overwrites a file it did not write; the record keeps them.
Nothing here follows a symlink or opens a special file: either is someone else's.
"""

import datetime
import os
import stat
from pathlib import Path

from merit_repro.data.marker import VERIFIED_MARKER, read_marker
from merit_repro.plan import paths
from merit_repro.plan.records import WEIGHTS, check_weights, file_problems
from merit_repro.utils import UserError, atomic_write_json, read_plain_json, sha256_file

RECORD = ".merit_repro_folder.json"
RECORD_BYTES = 1 << 16   # a record is a few hundred bytes; anything larger is not one
WHAT = "an output folder of the merit_repro workflow"
PLACEHOLDERS = (".gitkeep",)   # a clone's empty paper_figures/ keeps one
# Where the workflow writes in a results folder: paths.py's folders, the bundles' (made and rebuilt) and the logs
RESULTS_WRITES = (paths.DATA, paths.RUNS, paths.TUNING, paths.ZEROSHOT, "zeroshot_tasks", paths.TABLES, "logs",
                  "benchmarks", "bundle", "from_bundle", paths.ORIGIN)
# What the project's other tools write in a results folder, never the workflow: scripts/gpu_check.sh's default
# --out and the pilot scripts' folder
SIDE_TOOLS = ("gpu_check.json", "pilot")
INDEX_FILES = ("README.md", "claims.csv")   # written together by the figures_readme rule
ARTIFACT_SUFFIXES = (".csv", ".md", ".tex", ".json", ".png", ".pdf")
LAYOUT = {
    "results": f"{', '.join(name + '/' for name in RESULTS_WRITES)}",
    "figures": f"{', '.join(INDEX_FILES)} and <artifact>/<experiment>{{{','.join(ARTIFACT_SUFFIXES)}}}",
    # a stopped run's copy (merit_repro.report.partial, scripts/mechanism_gpu.sh --out)
    "partial": "cells/, figures/, partial.csv, partial.md and the bundle",
}
SHOWN = 3   # entries a refusal names
ADOPT = "--config adopt_folders=True"   # Snakemake's --config reads only True and False as booleans


def plan_claims(folders, artifacts, adopt=False):
    """{folder: the record to write when a run starts} for each role's folder ({role: folder}) that is not yet
    the workflow's; a folder whose record says so needs none. UserError (one line) when the folders overlap or
    one holds files the workflow cannot show to be its own."""
    check_apart(folders)
    claims = {}
    for role, folder in folders.items():
        try:
            record = claim_for(folder, role, artifacts, adopt)
        except OSError as err:   # a folder on the way that cannot be read (its permissions)
            raise UserError(f"{role} folder {folder} cannot be read ({shown(str(err))[:300]}): choose a folder "
                            f"whose every entry you can read (--config {role}=PATH)") from None
        if record:
            claims[folder] = record
    return claims


def check_apart(folders):
    """Two roles never share a folder, nor does one lie inside the other's."""
    (role_a, a), (role_b, b) = folders.items()
    try:
        apart = not overlap(a, b)
    except (OSError, RuntimeError) as err:   # a symlink loop on the way
        raise UserError(f"{role_a} ({a}) or {role_b} ({b}) cannot be resolved ({shown(str(err))}): choose folders "
                        f"reached without a symlink loop (--config {role_a}=PATH)") from None
    if not apart:
        raise UserError(f"{role_a} ({a}) and {role_b} ({b}) overlap: give each a folder of its own, neither inside "
                        f"the other (--config {role_b}=PATH)")


def overlap(a, b):
    """Whether folders a and b are one, or one lies inside the other, their links resolved (OSError or
    RuntimeError for a symlink loop on the way)."""
    first, second = Path(a).resolve(), Path(b).resolve()
    return first == second or first.is_relative_to(second) or second.is_relative_to(first)


def claim_for(folder, role, artifacts, adopt=False):
    """The record that claims folder for role, or None when it is the workflow's already; UserError naming what
    it holds, and the fix, when it holds files the workflow cannot show to be its own."""
    folder = Path(folder)
    check_place(folder, role)
    if os.path.lexists(folder / RECORD):
        check_record(folder, role)
        return None
    if not folder.exists():
        return record(role, "new")
    files = sorted(unproven(folder, role, artifacts))
    if "./" in files:
        raise OSError(f"{folder} is not readable")
    if not files:
        return record(role, "its content shown to be the workflow's" if has_output(folder) else "empty")
    in_the_way = [name for name in files if lies_where_written(name, role, artifacts)]
    if in_the_way or not adopt:
        raise UserError(refusal(folder, role, files, in_the_way))
    return record(role, "adopted (adopt_folders: true)", top_level(files))


def check_place(folder, role, named=None, fix=None):
    """A folder can be made at folder: nothing on its way is a file, and it is not a link to nowhere. named: how a
    refusal names it, fix: what it says to do (a workflow folder's, by default)."""
    named = named or f"{role} folder {folder}"
    fix = fix or f"choose a folder for {role} (--config {role}=PATH)"
    for above in (folder, *folder.parents):
        if above.is_symlink() and not above.exists():
            raise UserError(f"{named}: {above} is a symlink to nothing: remove it, or {fix}")
        if above.exists() and not above.is_dir():
            where = "is a file" if above == folder else f"lies under {above}, which is a file"
            raise UserError(f"{named} {where}: {fix}")


def check_record(folder, role, name=RECORD, fix=None):
    """folder's record (its file `name`) is readable and of role; fix: what a refusal says to do (a workflow
    folder's, by default)."""
    path = folder / name
    fix = fix or f"choose another folder for {role} (--config {role}=PATH)"
    try:
        recorded = read_record(path)["role"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise UserError(f"{path} is damaged ({shown(str(err))}): remove it if {folder} holds only the workflow's "
                        f"files, else {fix}") from None
    if recorded != role:
        raise UserError(f"{folder} is the workflow's {shown(str(recorded))} folder ({name}), not a {role} folder: "
                        f"{fix}")


def read_record(path):
    """A folder's record as a dict: a plain file of at most RECORD_BYTES, never a link or a special file."""
    content = read_plain_json(path, RECORD_BYTES)
    if not isinstance(content, dict):
        raise TypeError("not a JSON object")
    return content


def refusal(folder, role, files, in_the_way):
    more = ", ..." if len(files) > SHOWN else ""
    what = (f"{role} folder {folder} holds {len(files)} file(s) the workflow cannot show it wrote "
            f"({', '.join(map(shown, files[:SHOWN]))}{more})")
    fix = f"choose a new or empty folder for {role} (--config {role}=PATH)"
    if in_the_way:
        return f"{what}, and it would overwrite {', '.join(map(shown, in_the_way[:SHOWN]))}: {fix}, or move them away"
    return f"{what}: {fix}, or let the workflow write beside them ({ADOPT})"


def shown(text):
    """text with its control characters escaped (a file's name may hold a newline), as a refusal shows it."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def record(role, how, found=()):
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    return {"what": WHAT, "role": role, "created": now, "claimed": how, "layout": LAYOUT[role], "found": list(found)}


def claim(claims, name=RECORD, fix=None):
    """Write the records of plan_claims (each as the folder's file `name`): when a run starts, never in a dry run.
    A record that another run wrote since the plan is kept, and must be of the same role."""
    for folder, content in claims.items():
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        draft = folder / f".{name}.{os.getpid()}"
        atomic_write_json(draft, content)
        try:
            os.link(draft, folder / name)   # fails where a record is: never two claims of one folder
        except FileExistsError:
            check_record(folder, content["role"], name, fix)
        finally:
            draft.unlink()


# ---------------------------------------------------------------- what a folder holds


def unproven(folder, role, artifacts):
    """The paths (relative to folder, '/'-separated) of the entries that nothing shows to be the workflow's: files,
    links and special files, and folders that cannot be read."""
    top = Path(folder)
    for path in walk(top, role, artifacts):
        yield (path.relative_to(top).as_posix() if path != top else ".") + ("/" if is_real_dir(path) else "")


def walk(top, role, artifacts):
    """The entries under top not shown to be the workflow's, without following a link; iterative, so that no
    depth of folders exhausts the stack."""
    stack = [(top, 0)]
    while stack:
        folder, depth = stack.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name, reverse=True)
        except OSError:
            yield folder
            continue
        for entry in entries:
            path = Path(entry.path)
            if depth == 0 and (entry.name in PLACEHOLDERS or role == "results" and entry.name in SIDE_TOOLS):
                continue
            if not entry.is_dir(follow_symlinks=False):
                yield path
            elif nested_workflow_folder(path, top, role, artifacts):
                continue
            elif role == "results" and (own := shown_names(path, path.relative_to(top).parts)) is not None:
                yield from (Path(e.path) for e in sorted(os.scandir(path), key=lambda e: e.name) if e.name not in own)
            else:
                stack.append((path, depth + 1))


def nested_workflow_folder(path, top, role, artifacts):
    """Another config's output folder inside this one (results/mechanism, a rebuild's under from_bundle/): its
    record reads as one, and it does not lie where this folder's workflow writes, where a record of anyone's making
    would shield anything."""
    try:
        if read_record(path / RECORD)["role"] not in LAYOUT:
            return False
    except (OSError, ValueError, KeyError, TypeError):
        return False
    first = path.relative_to(top).parts[0]
    return first == "from_bundle" or not lies_where_written(first, role, artifacts)


def is_real_dir(path):
    return path.is_dir() and not path.is_symlink()


def shown_names(path, parts):
    """The names in a run's folder (runs/<cell>/) or a corpus's (data/<corpus>/) whose sha256 its records hold and
    match, with the record itself; None for any other folder, or where a record does not match. A file no record
    hashes (train.log, cell.yaml, a checkpoint) shows nothing, whatever its name."""
    try:
        if parts[0] == paths.RUNS and len(parts) > 1:
            return run_files_shown(path)
        if parts[0] == paths.DATA and len(parts) == 2:
            return corpus_files_shown(path)
    except (OSError, ValueError, TypeError):   # a record of odd kinds shows nothing
        return None
    return None


def run_files_shown(path):
    """{summary.json and the files it records, model.pt with them when it records its weights} when each is a plain
    file as recorded; else None."""
    summary = json_or_none(path / paths.SUMMARY)
    recorded = summary.get("files") if isinstance(summary, dict) else None
    if not isinstance(recorded, dict) or not recorded or not set(recorded) <= set(paths.VOUCHED) \
            or not all(isinstance(want, dict) for want in recorded.values()):
        return None
    if not all(is_plain_file(path / name) for name in recorded) or file_problems(path, summary):
        return None
    names = {paths.SUMMARY, *recorded}
    if not isinstance(summary.get("weights"), dict) or not is_plain_file(path / WEIGHTS):
        return names   # (before its hash: a FIFO or a link to /dev/zero would never end)
    try:
        check_weights(path, summary)
    except UserError:
        return None
    return names | {WEIGHTS}


def corpus_files_shown(path):
    """{meta.json and the token files it records} when each token file's sha256 is as recorded; else None."""
    meta = json_or_none(path / "meta.json")
    files = (meta.get("splits") or meta.get("files")) if isinstance(meta, dict) else None
    if not isinstance(files, dict) or not files or not all(isinstance(e, dict) for e in files.values()):
        return None
    names = {e.get("file"): e.get("sha256") for e in files.values() if isinstance(e.get("file"), str)}
    if len(names) != len(files):
        return None
    for name, digest in names.items():
        if Path(name).name != name or "\0" in name or not is_plain_file(path / name) \
                or sha256_file(path / name) != digest:
            return None
    return {"meta.json", *names} | ({VERIFIED_MARKER} if is_marker_of(path, names) else set())


def is_marker_of(corpus, names):
    """Whether the corpus folder's marker is data.marker's fingerprints of these token files (a damaged one reads as
    none: {}), which it writes again whenever they are not."""
    marks = read_marker(corpus)
    return bool(marks) and set(marks) <= set(names)


def is_plain_file(path):
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def json_or_none(path, limit=1 << 24):
    """A JSON file's content, or None where it is missing, not a plain file, larger than limit or not JSON."""
    try:
        return read_plain_json(path, limit)
    except (OSError, ValueError):
        return None


def has_output(folder):
    return any(entry.name not in PLACEHOLDERS for entry in os.scandir(folder))


def top_level(files):
    """The top-level entries of the relative paths ('name/' for a folder), as a record's `found` lists them."""
    return sorted({name.split("/")[0] + ("/" if "/" in name else "") for name in files})


def lies_where_written(name, role, artifacts):
    """Whether a path (relative to a role's folder) lies where the workflow writes, so that it could overwrite it;
    names compared as a case-insensitive file system (macOS's, by default) would: readme.md is README.md there."""
    first = name.split("/")[0].casefold()
    places = RESULTS_WRITES if role == "results" else (*INDEX_FILES, *artifacts)
    return first in {place.casefold() for place in places}
