"""What a run's summary.json vouches for: the row count and sha256 of each result file, and the fingerprint of
each corpus the run read. The trainer writes these records, and the tuning, collect, scoring and bundle steps
check them.

- ``vouch(run_dir)``: the records of a finished run's result files; ``file_problems`` finds a file cut short,
  edited or missing since.
- ``fingerprint(meta)``: a corpus's identity (what was asked, the sha256 of every token file), recorded in
  summary.json and in every checkpoint; a run refuses to resume or count as complete on another.
- ``SUMMARY_TYPES``, ``EVAL_TYPES``, ``DECISION_TYPES``, ``NUMERIC_CSV``: the kinds of the values the steps after
  training read from a run's records and a group's tuning decisions, in one place; ``kind_problems`` and
  ``record_problems`` name what a record holds of another kind.
"""

import io
import json
import re
from dataclasses import fields
from pathlib import Path

from merit_repro.utils import UserError, sha256_bytes, sha256_file

from .cell import CellConfig, type_problems
from .paths import SECOND_LOOK, SUMMARY, VOUCHED


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
    """summary.json of a run as a dict whose values are of the kinds its readers take, or a UserError naming the file,
    the keys and the fix."""
    path = Path(run_dir) / SUMMARY
    try:
        summary = json.loads(path.read_text())
        if not isinstance(summary, dict) or not {"status", "config"} <= set(summary):
            raise ValueError("it is not a run summary of merit_repro.train")
        problems = summary_problems(summary)
        if problems:
            raise ValueError("; ".join(problems[:5]))
    except (ValueError, UnicodeDecodeError, RecursionError) as err:
        raise UserError(f"{path} cannot be read as a run summary ({str(err).splitlines()[0][:300]}); delete it "
                        "to retrain the cell") from None
    return summary


# ---------------------------------------------------------------- the kinds of the values records hold

# What tuning, collect, the tables, scoring, export and bundles read from a record, and of which kind. A record that
# hashes right can still hold a list as an LR or a string as a loss (edited by hand, forged in a bundle): it is
# refused where it is read, naming its key, not deep in a table job with a traceback. A spec is a type, a Text or a
# tuple of them (a bool is never a number: JSON's true is not a loss); a dict of key: spec (an object; Maybe(spec):
# a key an older record may lack; {str: spec}: any keys); or [spec] (a list of them).


class Maybe:
    """A key a record may lack; of spec when it has it."""

    def __init__(self, spec):
        self.spec = spec


class Text:
    """A string that pattern matches whole, e.g. a number as paths and tables write it."""

    def __init__(self, pattern, example):
        self.pattern, self.example = re.compile(pattern), example


NULL = type(None)
NUMBER_OR_NULL = (int, float, NULL)
NUMBER_TEXT = Text(r"[0-9]+(\.[0-9]+)?(e-?[0-9]+)?", "6e-4")   # plan.tuning.canonical: an LR, a token budget
MODEL_CONFIG_TYPES = {"family": Maybe(str), "n_layer": int, "n_head": int, "n_embd": int, "block_size": int,
                      "vocab_size": int, "qk_norm": Maybe(bool), "bias": Maybe(bool)}
SUMMARY_TYPES = {   # its "config" is a CellConfig's: config_problems checks it by the dataclass's own types
    "status": str, "config": dict, "model_config": MODEL_CONFIG_TYPES,
    "final_val_loss": NUMBER_OR_NULL, "best_val_loss": NUMBER_OR_NULL, "steps": (int, NULL), "planned_steps": int,
    "tokens_per_s": NUMBER_OR_NULL, "train_seconds": NUMBER_OR_NULL, "loss_spikes": Maybe((int, NULL)),
    "warmup_rule": Maybe(str), "warmup_steps": Maybe(int), "probe_steps": Maybe([int]),   # recorded since 2026-12-07
    "git_commit": Maybe((str, NULL)), "data_fingerprint": Maybe({str: (str, NULL)}),
    "files": Maybe({str: {"sha256": str, "rows": Maybe(int)}}), "weights": Maybe({"size": int, "sha256": str}),
}
EVAL_TYPES = {"val_loss": Maybe(NUMBER_OR_NULL), "lambada_ppl": Maybe(NUMBER_OR_NULL),
              "lambada_acc": Maybe(NUMBER_OR_NULL)}
DECISION_TYPES = {   # a tuning round or final decision (plan.tuning.annotate)
    "group": {"experiment": str, "model": str, "tokens": NUMBER_TEXT, "optimizer": str, "batch": int},
    "cells": [{"lr": NUMBER_TEXT, "seed": int, "lr_origin": str, "seed_origin": str}],
    "done": bool, "best_lr": (NUMBER_TEXT, NULL), "at_edge": bool, "status": str, "extensions": [NUMBER_TEXT],
    "table": [{"lr": NUMBER_TEXT, "selection_loss": NUMBER_OR_NULL, "diverged_seeds": [int], "disqualified": bool}],
    "rivals": Maybe([NUMBER_TEXT]), "second_look": Maybe([int]),
}
GROUP_TYPES = DECISION_TYPES["group"]
LOOK_TYPES = {   # the first of two looks at the claim seeds (report.second_look), as the artifacts read it
    "alpha": (int, float), "seeds": [int], "groups": [GROUP_TYPES],
    "statements": {str: [{"statement": {"claim": str, "where": str, "settings": int, "needs_seeds": [[(str, int)]]},
                          "rows": [{"claim": str}]}]},
}
DECISION_FILE = r"(round[0-9]+|final|looked)\.json"   # the tuning decisions of a group's folder
# Run files of numbers only (a missing value empty, a non-finite one nan or inf), with the columns the report reads.
NUMERIC_CSV = {"mal.csv": ("step", "layer", "mal"), "metrics.csv": ("step", "val_loss")}
RECORD_TYPES = {SUMMARY: SUMMARY_TYPES, "eval.json": EVAL_TYPES, SECOND_LOOK: LOOK_TYPES}


def _describe(kind):
    names = {int: "a whole number", float: "a number", str: "a string", bool: "true or false", NULL: "null",
             dict: "an object", list: "a list"}
    return f"a string such as {kind.example!r}" if isinstance(kind, Text) else names.get(kind, kind.__name__)


def _show(value):
    return {dict: "an object", list: "a list"}.get(type(value)) or json.dumps(value)[:40]


def _is(value, kind):
    if isinstance(kind, Text):
        return isinstance(value, str) and kind.pattern.fullmatch(value) is not None
    return isinstance(value, kind) and not (isinstance(value, bool) and kind is not bool)


def kind_problems(value, spec, where=""):
    """Phrases naming each place in value that is not of spec (see above); empty when all are."""
    def at(key):
        return f"{where}.{key}" if where else str(key)
    if isinstance(spec, dict):
        if not isinstance(value, dict):
            return [f"{where or 'it'} is {_show(value)}, not an object"]
        if list(spec) == [str]:
            return [p for key, item in value.items() for p in kind_problems(item, spec[str], at(key))]
        missing = [f"{at(key)} is missing" for key, sub in spec.items()
                   if key not in value and not isinstance(sub, Maybe)]
        return missing + [p for key, sub in spec.items() if key in value
                          for p in kind_problems(value[key], getattr(sub, "spec", sub), at(key))]
    if isinstance(spec, list):
        if not isinstance(value, list):
            return [f"{where or 'it'} is {_show(value)}, not a list"]
        return [p for i, item in enumerate(value) for p in kind_problems(item, spec[0], f"{where}[{i}]")]
    kinds = spec if isinstance(spec, tuple) else (spec,)
    if any(_is(value, kind) for kind in kinds):
        return []
    wanted = [_describe(k) for k in kinds if not (k is int and float in kinds)]
    return [f"{where or 'it'} is {_show(value)}, not {' or '.join(wanted)}"]


def config_problems(config):
    """The cell config's keys whose values are not of CellConfig's types (keys it does not know are left to the
    readers that compare configs)."""
    known = {f.name for f in fields(CellConfig)}
    return [f"config.{message}" for _, message in type_problems(CellConfig(**{k: v for k, v in config.items()
                                                                                if k in known}))]


def summary_problems(summary):
    """What in a parsed summary.json is not of the kind its readers take (SUMMARY_TYPES, the cell config's types)."""
    return kind_problems(summary, SUMMARY_TYPES) or config_problems(summary["config"])


def csv_problems(name, data):
    """What in a numeric run file (NUMERIC_CSV) is not a number as pandas reads it (as the tables and figures do), or
    which columns the report reads it lacks."""
    import pandas as pd   # here only: the plan's other readers stay light

    try:
        frame = pd.read_csv(io.BytesIO(data))
    except (ValueError, UnicodeDecodeError) as err:   # pandas' ParserError and EmptyDataError are ValueErrors
        return [f"it is not a CSV file ({str(err).splitlines()[0][:80]})"]
    missing = [c for c in NUMERIC_CSV[name] if c not in frame.columns]
    if missing:
        return [f"its header lacks {', '.join(missing)}"]
    problems = []
    for column in frame.columns:
        values = frame[column]
        if len(values) and values.dtype.kind not in "iuf":
            bad = values[pd.to_numeric(values, errors="coerce").isna() & values.notna()]
            problems.append(f"its column {column} holds {str(bad.iloc[0] if len(bad) else values.iloc[0])[:40]!r}, "
                            "not a number")
    return problems


def read_typed(path, spec, what, fix):
    """The JSON file at path, checked against spec (kind_problems); a UserError naming the file, what is wrong with
    it and the fix when it cannot be read or holds values of another kind."""
    try:
        value = json.loads(Path(path).read_text())
        problems = kind_problems(value, spec)
    except (ValueError, UnicodeDecodeError, OSError, RecursionError) as err:
        problems = [str(err).splitlines()[0][:120] if str(err) else type(err).__name__]
    if problems:
        raise UserError(f"{path} cannot be read as {what} ({'; '.join(problems[:3])}); {fix}")
    return value


def record_problems(name, data):
    """What makes the run file or tuning decision of this name (a bundle member) unfit for its readers: not JSON, or
    values of another kind (RECORD_TYPES, DECISION_TYPES, NUMERIC_CSV). Files no step parses are not checked."""
    base = name.rsplit("/", 1)[-1]
    if base in NUMERIC_CSV:
        return csv_problems(base, data)
    spec = RECORD_TYPES.get(base, DECISION_TYPES if re.fullmatch(DECISION_FILE, base) else None)
    if spec is None:
        return []
    try:
        value = json.loads(data)
    except (ValueError, RecursionError) as err:
        return [f"it is not JSON ({str(err)[:80]})"]
    return summary_problems(value) if spec is SUMMARY_TYPES else kind_problems(value, spec)
