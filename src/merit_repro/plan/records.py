"""What a run's summary.json vouches for: the row count and sha256 of each result file, and the fingerprint of
each corpus the run read. The trainer writes these records, and the tuning, collect, scoring and bundle steps
check them.

- ``vouch(run_dir)``: the records of a finished run's result files; ``file_problems`` finds a file cut short,
  edited or missing since.
- ``fingerprint(meta)``: a corpus's identity (what was asked, the sha256 of every token file), recorded in
  summary.json and in every checkpoint; a run refuses to resume or count as complete on another.
"""

import json
from pathlib import Path

from merit_repro.utils import UserError, sha256_bytes, sha256_file

from .paths import SUMMARY, VOUCHED


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


WEIGHTS = "model.pt"


def weights_record(run_dir):
    """{size, sha256} of a run's final weights, which summary.json records beside its result files."""
    path = Path(run_dir) / WEIGHTS
    return {"size": path.stat().st_size, "sha256": sha256_file(path)}


def check_weights(run_dir, summary):
    """A UserError naming model.pt when it is not the file the run's summary.json records (another cell's weights
    copied in, a truncated copy); runs from before the record are let through."""
    want = summary.get("weights")
    if not isinstance(want, dict):
        return
    path = Path(run_dir) / WEIGHTS
    size = path.stat().st_size
    if size != want.get("size") or sha256_file(path) != want.get("sha256"):
        raise UserError(f"{path} is not the weights this run saved ({size:,} bytes; summary.json records "
                        f"{want.get('size')} bytes, sha256 {str(want.get('sha256'))[:12]}): another run's or a damaged "
                        "copy; retrain the cell or copy its own model.pt back")


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
    path = Path(run_dir) / SUMMARY
    try:
        summary = json.loads(path.read_text())
        if not isinstance(summary, dict) or not {"status", "config"} <= set(summary):
            raise ValueError("it is not a run summary of merit_repro.train")
    except (ValueError, UnicodeDecodeError) as err:
        raise UserError(f"{path} cannot be read as a run summary ({str(err).splitlines()[0][:120]}); delete it "
                        "to retrain the cell") from None
    return summary
