"""Making a bundle: the members of the tuned groups' runs, decisions, tables and corpora, written as a gzipped tar
whose bytes depend only on its content."""

import gzip
import io
import json
import os
import re
import tarfile
import tempfile
from pathlib import Path, PurePosixPath

from merit_repro.plan import paths
from merit_repro.plan.records import fingerprint
from merit_repro.utils import UserError, sha256_bytes

from .safetar import CONFIG, MANIFEST, SCHEMA_VERSION, config_text, plain


# Where and how the workflow runs, not what it computes: a rebuild may set these differently.
NOT_IDENTITY = ("results", "figures", "adopt_folders", "bundle", "bundle_name", "tracking", "max_job_minutes",
                "signal_lead_seconds", "gpus_per_node", "cores_per_gpu", "mem_mb_per_gpu")   # where it ran, job sizes


ORIGIN = paths.ORIGIN


def default_name(configfile):
    """The bundle's file name when bundle_name is not set: the config file's stem, with any character a bundle name
    may not hold (the schema's letters, digits, _ . -; braces would be wildcards) replaced by _."""
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", Path(configfile).stem)[:64] if configfile else "results"
    return stem if re.match(r"[A-Za-z0-9]", stem) else f"config{stem}"[:64]


def member_paths(results, decisions):
    """Paths (relative to results) of what a bundle of these tuned groups holds. decisions: {final.json path:
    its decision}; every cell a group kept brings its run files, every group its tuning rounds (a group that
    adopts another's rounds, see grid.tuning_owners, has none of its own: they come with that group)."""
    results = Path(results)
    members = {p.relative_to(results) for p in (results / paths.TABLES).glob("*.csv")}
    members |= {p.relative_to(results) for p in (results / paths.ZEROSHOT).rglob("*.json")}   # Table 1's scores
    for final, decision in decisions.items():   # final.json, or looked.json with the second look's cells
        group = Path(final)
        members |= {p.relative_to(results) for p in [group, *group.parent.glob("round*.json"),
                                                     *group.parent.glob("final.json")]}
        if decision.get("second_look") is not None:
            members.add(Path(paths.second_look(results)).relative_to(results))
        g = decision["group"]
        for c in decision["cells"]:
            run = Path(paths.run_dir(results, g["model"], g["tokens"], g["optimizer"], g["batch"], c["lr"], c["seed"]))
            missing = [n for n in paths.RUN_FILES if not (run / n).is_file()]
            if missing:
                raise UserError(f"{run} lacks {', '.join(missing)}: a bundle holds finished runs only; run the "
                                "workflow to the end first")
            members |= {(run / n).relative_to(results) for n in paths.RUN_FILES + paths.RUN_LOGS if (run / n).is_file()}
    return sorted(members, key=str)


def create(out, results, decisions, corpora, config, commit, lock_file):
    """Write the bundle of the tuned groups' runs to out; corpora: the data folders (under results) they read.
    Returns the manifest."""
    results = Path(results)
    members = member_paths(results, decisions) + sorted({Path(d).relative_to(results) / "meta.json" for d in corpora})
    files = {str(PurePosixPath(*p.parts)): (results / p).read_bytes() for p in members}
    files[CONFIG] = config_text(config)
    manifest = {
        "schema": SCHEMA_VERSION, "commit": commit, "config": plain(config),
        "lock_sha256": sha256_bytes(Path(lock_file).read_bytes()) if lock_file and Path(lock_file).is_file() else None,
        "data": {str(Path(d).relative_to(results)): fingerprint(json.loads((Path(d) / "meta.json").read_text()))
                 for d in sorted(corpora)},
        "files": {name: {"sha256": sha256_bytes(data), "size": len(data)} for name, data in sorted(files.items())},
    }
    files[MANIFEST] = (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode()
    write_tar(out, files)
    return manifest


def write_tar(out, files):
    """A gzipped tar of {name: bytes}, byte-for-byte the same for the same files; written atomically. A failed
    write (a full disk) is a UserError naming out, and leaves neither out nor a temporary file."""
    out = Path(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        _write_tar_atomically(out, files)
    except OSError as err:
        raise UserError(f"cannot write the bundle {out}: {err.strerror or err}; free space there (or set results "
                        "elsewhere) and make it again; nothing was left at that path") from None


def _write_tar_atomically(out, files):
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.")
    try:
        with os.fdopen(fd, "wb") as raw:
            with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz, \
                    tarfile.open(fileobj=gz, mode="w", format=tarfile.GNU_FORMAT) as tar:
                for name in sorted(files):
                    info = tarfile.TarInfo(name)
                    info.size, info.mtime, info.mode = len(files[name]), 0, 0o644
                    tar.addfile(info, io.BytesIO(files[name]))
            raw.flush()
            os.fsync(raw.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise

