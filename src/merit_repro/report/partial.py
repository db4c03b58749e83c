"""What a run stopped at any minute returns: every cell that had finished, copied off, and a table of them.

A GPU machine lent for a few minutes is taken back when its time is up (a `timeout` kills the run), and what was not
copied off it by then is lost with it. So while the workflow trains, scripts/mechanism_gpu.sh --out DIR runs this
every few seconds: each finished cell (a run folder under runs/ holding summary.json, which the trainer writes last)
is copied to DIR/cells/<cell path>/ (its result files: summary.json, metrics.csv, mal.csv, diagnostics.csv,
eval.json; never checkpoints or weights), and

    DIR/partial.csv   one row per finished cell: its coordinates, status, final val loss, peak MAL, steps, seconds
    DIR/partial.md    a line saying how many cells had finished when, and whether the run may still be going, was
                      stopped, failed or finished; the rows; and per (model, tokens, optimizer, batch) and LR, the
                      mean final loss and the geometric-mean peak MAL over its seeds

are written again. With --state finished, the config's figures folder and its bundle are copied too (DIR/figures/,
DIR/<bundle>.tar.gz).

    python -m merit_repro.report.partial --results RESULTS --out DIR [--state running|stopped|failed|finished]
    python -m merit_repro.report.partial --configfile FILE --out DIR [--state ...]   # the config's folders

Cheap and idempotent: a cell whose copy holds its summary.json as it is now is not copied again. Every file is
written atomically (a temporary file renamed over it), a cell's summary.json last, so that a kill mid-write leaves
the previous version and a copied cell with a summary.json is whole. Nothing follows a symlink or opens a special
file; neither pandas nor torch is imported.
"""

import argparse
import csv
import io
import json
import math
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

from merit_repro.config import configfiles
from merit_repro.plan import folders, paths
from merit_repro.plan.records import summary_problems
from merit_repro.utils import UserError, atomic_write_bytes, cli, current_umask, one_line, open_plain, read_plain_bytes

SUMMARY_BYTES = 1 << 20   # a summary is a few kB
MAL_BYTES = 1 << 28
COLUMNS = ["model", "tokens", "optimizer", "batch", "lr", "seed", "status", "final_val_loss", "peak_mal", "steps",
           "train_seconds"]
CELL = re.compile(r"(?P<model>[^/]+)/(?P<tokens>[^/]+)/(?P<optimizer>[^/]+)/bs(?P<batch>[0-9]+)/lr(?P<lr>[^/]+)/"
                  r"seed(?P<seed>[0-9]+)")   # paths.cell_path
STATES = {"running": "the run may still be going", "stopped": "the run was stopped", "failed": "the run failed",
          "finished": "the run finished"}
CELLS, FIGURES = "cells", "figures"
ROLE = "partial"   # the role its --out folder's record names
OUT_RECORD = "partial.json"


def finished_cells(results):
    """[(cell path, coordinates)] of each run folder under results/runs holding a summary.json; a linked folder is
    listed by os.walk, never entered."""
    top, found = Path(results) / paths.RUNS, []
    for folder, dirs, files in os.walk(top):
        cell = Path(folder).relative_to(top).as_posix()
        if cell.count("/") == 5:   # model/tokens/optimizer/bs/lr/seed: nothing deeper is a cell
            dirs.clear()
            match = CELL.fullmatch(cell)
            if match and paths.SUMMARY in files:
                found.append((cell, {**match.groupdict(), "batch": int(match["batch"]), "seed": int(match["seed"])}))
    return found


def read_summary(run):
    """(bytes, content) of a run's summary.json, a ValueError or OSError saying why it cannot be a row."""
    data = read_plain_bytes(run / paths.SUMMARY, SUMMARY_BYTES)
    try:
        summary = json.loads(data)
    except RecursionError:
        raise ValueError("nested too deep") from None
    problems = summary_problems(summary) if isinstance(summary, dict) and "config" in summary else ["not a run summary"]
    if problems:
        raise ValueError("; ".join(problems[:3]))
    return data, summary


def copy_plain(src, dest):
    """src to dest by way of a temporary file beside it; a ValueError for a link or special file."""
    with open_plain(src) as f:
        fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".tmp")
        try:
            os.fchmod(fd, 0o666 & ~current_umask())
            with os.fdopen(fd, "wb") as out:
                shutil.copyfileobj(f, out)
            os.replace(tmp, dest)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def copy_cell(run, copy, summary_data):
    """A finished run's result files into copy, summary.json last (and dropped first, so that a copy cut short has
    none); nothing when the copy holds this summary already. Notes on the files not copied."""
    try:
        if read_plain_bytes(copy / paths.SUMMARY, SUMMARY_BYTES) == summary_data:
            return []
    except (OSError, ValueError):
        pass
    copy.mkdir(parents=True, exist_ok=True)
    (copy / paths.SUMMARY).unlink(missing_ok=True)
    notes = []
    for name in paths.VOUCHED:
        try:
            copy_plain(run / name, copy / name)
        except FileNotFoundError:
            (copy / name).unlink(missing_ok=True)
        except (OSError, ValueError) as err:
            notes.append(f"{name} not copied ({one_line(err)})")
    atomic_write_bytes(copy / paths.SUMMARY, summary_data)
    return notes


def number(text):
    """A MAL as report.mal reads it: a missing or non-finite logit is the largest spike, +inf."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        return math.inf
    return math.inf if math.isnan(value) or value == -math.inf else value


def peak_mal(path):
    """The largest MAL of a run's mal.csv, None without a probe (or a readable file)."""
    try:
        rows = csv.DictReader(io.StringIO(read_plain_bytes(path, MAL_BYTES).decode()))
        return max((number(row.get("mal")) for row in rows), default=None)
    except (OSError, ValueError, csv.Error):
        return None


def lr_order(lr):
    try:
        return float(lr)
    except ValueError:
        return math.inf


def cell_order(found):
    _, c = found
    return c["model"], c["tokens"], c["optimizer"], c["batch"], lr_order(c["lr"]), c["seed"]


def geomean(values):
    values = [v for v in values if isinstance(v, (int, float)) and v > 0]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def fmt(value, spec):
    return "–" if value is None else "inf" if value == math.inf else format(value, spec)


def lr_table(rows):
    """Per LR of one group: seeds, those not ok, the mean final loss of the ok ones, the geometric-mean peak MAL."""
    lines = ["| lr | seeds | not ok | mean final val loss | geo-mean peak MAL |", "|---|---|---|---|---|"]
    for lr in sorted({r["lr"] for r in rows}, key=lr_order):
        at = [r for r in rows if r["lr"] == lr]
        losses = [r["final_val_loss"] for r in at if r["status"] == "ok" and r["final_val_loss"] is not None]
        loss = sum(losses) / len(losses) if losses else None
        lines.append(f"| {lr} | {len(at)} | {sum(r['status'] != 'ok' for r in at)} | {fmt(loss, '.4f')} | "
                     f"{fmt(geomean([r['peak_mal'] for r in at]), '.4g')} |")
    return lines


def markdown(rows, header, notes):
    spec = {"final_val_loss": ".4f", "peak_mal": ".4g", "train_seconds": ".1f"}
    lines = [header, "", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(fmt(r[c], spec[c]) if c in spec else str(r[c]) for c in COLUMNS) + " |" for r in rows]
    groups = {}
    for r in rows:
        groups.setdefault((r["model"], r["tokens"], r["optimizer"], r["batch"]), []).append(r)
    for (model, tokens, optimizer, batch), at in groups.items():
        lines += ["", f"## {model}, {tokens} tokens, {optimizer}, batch {batch}", "", *lr_table(at)]
    if notes:
        lines += ["", "Not in the table or not copied:", "", *(f"- {note}" for note in notes)]
    return "\n".join(lines) + "\n"


def to_csv(rows):
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(COLUMNS)
    writer.writerows([["" if r[c] is None else r[c] for c in COLUMNS] for r in rows])
    return text.getvalue()


def copy_tree(src, dest):
    """src's plain files (no link followed) as dest, put in place whole."""
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}."))
    os.chmod(tmp, 0o777 & ~current_umask())
    for folder, _, files in os.walk(src):
        inside = tmp / Path(folder).relative_to(src)
        inside.mkdir(exist_ok=True)
        for name in files:
            try:
                copy_plain(Path(folder) / name, inside / name)
            except ValueError:
                pass   # a link or special file: not the workflow's
    if dest.exists():
        old = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}.old."))
        os.replace(dest, old / dest.name)
        os.replace(tmp, dest)
        shutil.rmtree(old)
    else:
        os.replace(tmp, dest)


def update(results, out, state="running", figures=None, bundle=None):
    """Copy the finished cells of results into out and write the partial report there; the rows."""
    rows, notes = [], []
    for cell, coords in sorted(finished_cells(results), key=cell_order):
        run, copy = Path(results) / paths.RUNS / cell, out / CELLS / cell
        try:
            data, summary = read_summary(run)
        except (OSError, ValueError, TypeError) as err:
            notes.append(f"{cell}: summary.json skipped ({one_line(err)[:200]})")
            continue
        notes += [f"{cell}: {note}" for note in copy_cell(run, copy, data)]
        rows.append({**coords, **{k: summary[k] for k in ("status", "final_val_loss", "steps", "train_seconds")},
                     "peak_mal": peak_mal(copy / "mal.csv")})
    extra = []
    if state == "finished":
        if figures and Path(figures).is_dir():
            copy_tree(Path(figures), out / FIGURES)
            extra.append(f"the report: {FIGURES}/ (a copy of {figures})")
        if bundle and Path(bundle).is_file():
            copy_plain(Path(bundle), out / Path(bundle).name)
            extra.append(f"the bundle: {Path(bundle).name}")
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    header = f"partial: {counted(rows)} finished at {when}, {STATES[state]}" + "".join(f"; {e}" for e in extra)
    atomic_write_bytes(out / "partial.csv", to_csv(rows).encode())
    atomic_write_bytes(out / "partial.md", markdown(rows, header, notes).encode())
    return rows


def counted(rows):
    return f"{len(rows)} cell{'' if len(rows) == 1 else 's'}"


OUT_FIX = "give --out a new or empty folder"


def check_out(out, workflow_folders):
    """A UserError when out cannot be a folder (a file, on a file's path, a link to nowhere) or overlaps a folder
    the workflow writes ({role: folder})."""
    folders.check_place(out, ROLE, named=f"--out {out}", fix="give a folder (it is made when missing)")
    for role, folder in workflow_folders.items():
        try:
            apart = not folders.overlap(out, folder)
        except (OSError, RuntimeError) as err:   # a symlink loop on the way
            why = folders.shown(str(err))
            raise UserError(f"--out {out} or the {role} folder {folder} cannot be resolved ({why}): give --out a "
                            "folder reached without a symlink loop") from None
        if not apart:
            raise UserError(f"--out {out} and the {role} folder {folder} overlap: give --out a folder of its own, "
                            "outside the workflow's")


def claim_out(out):
    """out is this report's by its record (OUT_RECORD, plan.folders' record of role "partial"), written when out was
    new or empty, as plan.folders claims (never two claims of one folder); a folder holding anything else is refused,
    naming it, so that no file of someone else's is overwritten. (A visible file: a stopped run's copy is read by
    people, and its record says what it is.)"""
    if os.path.lexists(out / OUT_RECORD):
        folders.check_record(out, ROLE, OUT_RECORD, OUT_FIX)
        return
    found = sorted(p.name for p in out.iterdir() if p.name not in folders.PLACEHOLDERS) if out.is_dir() else []
    if found:
        more = ", ..." if len(found) > folders.SHOWN else ""
        raise UserError(f"--out {out} holds {len(found)} entr{'y' if len(found) == 1 else 'ies'} this report did not "
                        f"write ({', '.join(map(folders.shown, found[:folders.SHOWN]))}{more}): {OUT_FIX}")
    folders.claim({out: folders.record(ROLE, "empty" if out.is_dir() else "new")}, OUT_RECORD, OUT_FIX)


def config_folders(configfile):
    """(results, figures, bundle) of a workflow config file: its folders (the schema's defaults where it sets none)
    and the bundle `snakemake bundle` writes for it."""
    from merit_repro.bundle import default_name   # here only: the other modes never need it

    (config,) = configfiles.check([configfile])
    if not isinstance(config, dict):
        raise UserError(f"{configfile} is not a workflow config (a YAML mapping)")
    results, figures = (config.get(key, configfiles.schema_defaults(key)) for key in ("results", "figures"))
    name = config.get("bundle_name") or default_name(configfile)
    if not all(isinstance(v, str) and v for v in (results, figures, name)):
        raise UserError(f"{configfile}: results, figures and bundle_name must be strings")
    return results, figures, paths.bundle(results, name)


def stop(signum, _frame):
    """A `timeout`'s TERM ends the command through the atomic writes' clean-up: no temporary file left behind."""
    raise SystemExit(128 + signum)


@cli
def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m merit_repro.report.partial", description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--results", help="a results folder (its runs/)")
    source.add_argument("--configfile", help="a workflow config: its results and figures folders and its bundle")
    parser.add_argument("--out", required=True, help="the folder to copy into (made when missing)")
    parser.add_argument("--state", choices=STATES, default="running", help="what the header line says of the run")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if args.results:
        if not Path(args.results).is_dir():
            raise UserError(f"--results {args.results}: no such folder: give the results folder of a run")
        results, figures, bundle = args.results, None, None
    else:   # the config's results folder is made by its first job: none yet is no cell yet
        results, figures, bundle = config_folders(args.configfile)
    check_out(out, {"results": results, **({"figures": figures} if figures else {})})
    claim_out(out)
    rows = update(results, out, args.state, figures, bundle)
    if args.state != "running":
        print(f"partial report: {counted(rows)} finished, copied to {out} ({STATES[args.state]})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, stop)
    sys.exit(main())
