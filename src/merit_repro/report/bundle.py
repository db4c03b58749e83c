"""Results bundles: the small files a report is made from, packed with a manifest of their hashes, so the
report can be rebuilt and audited anywhere without training anything.

    python -m merit_repro.report.bundle inspect PATH [--config]     # what it holds, whether it verifies
    python -m merit_repro.report.bundle unpack PATH --into DIR      # its files under DIR (the workflow's rebuild)
    python -m merit_repro.report.bundle merge PATH --results DIR    # its runs into a local results tree, to train beside

A bundle is a gzipped tar whose members are paths under the results folder (``runs/<cell>/`` small files,
``tuning/<group>/`` decisions, ``data/<corpus>/meta.json``, ``tables/*.csv``), the effective config
(``config.yaml``) and ``MANIFEST.json``: schema version, git commit, effective config, the lock file's sha256,
the corpora's fingerprints, and the sha256 and size of every other member. Members are sorted and carry no
time, owner or mode of their own, so the same runs give the same bytes. Checkpoints and weights never go in.
"""

import argparse
import gzip
import io
import json
import os
import sys
import tarfile
import tempfile
from collections import Counter
from pathlib import Path, PurePosixPath

import yaml

from merit_repro.plan import paths
from merit_repro.plan.records import fingerprint
from merit_repro.utils import UserError, cli, sha256_bytes

SCHEMA_VERSION = 1
MANIFEST = "MANIFEST.json"
CONFIG = "config.yaml"
# Where and how the workflow runs, not what it computes: a rebuild may set these differently.
NOT_IDENTITY = ("results", "figures", "bundle", "bundle_name", "tracking", "max_job_minutes")
ORIGIN = "origin"   # the bundle's own tables, manifest and config, under the rebuild's results folder


def plain(obj):
    """obj as JSON has it (tuples as lists, keys as strings): how a config is compared and stored."""
    return json.loads(json.dumps(obj, sort_keys=True, default=str))


# ---------------------------------------------------------------- making one


def member_paths(results, decisions):
    """Paths (relative to results) of what a bundle of these tuned groups holds. decisions: {final.json path:
    its decision}; every cell a group kept brings its run files, every group its tuning rounds (a group that
    adopts another's rounds, see grid.tuning_owners, has none of its own: they come with that group)."""
    results = Path(results)
    members = {p.relative_to(results) for p in (results / paths.TABLES).glob("*.csv")}
    members |= {p.relative_to(results) for p in (results / paths.ZEROSHOT).rglob("*.json")}   # Table 1's scores
    for final, decision in decisions.items():
        group = Path(final)
        members |= {p.relative_to(results) for p in [group, *group.parent.glob("round*.json")]}
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
    files[CONFIG] = yaml.safe_dump(plain(config), sort_keys=True).encode()
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
    """A gzipped tar of {name: bytes}, byte-for-byte the same for the same files; written atomically."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
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


# ---------------------------------------------------------------- reading and checking one


def read(path):
    """(manifest, {name: bytes}) of the bundle at path, every file checked against the manifest; a UserError
    names every problem otherwise."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"bundle {path} does not exist; make one with `snakemake --cores 1 bundle`")
    files, bad = {}, []
    try:
        with tarfile.open(path, mode="r:gz") as tar:
            for info in tar:
                name = PurePosixPath(info.name)
                if (not info.isfile() or name.is_absolute() or not name.parts or str(name) != info.name
                        or {".", ".."} & set(name.parts)):
                    bad.append(f"member {info.name!r} is not a plain file inside the bundle")
                    continue
                files[info.name] = tar.extractfile(info).read()
    except (tarfile.TarError, OSError, EOFError) as err:
        raise UserError(f"{path} is not a results bundle (a gzipped tar): {err}") from None
    if MANIFEST not in files:
        raise UserError(f"{path} has no {MANIFEST}: it is not a results bundle of this project")
    try:
        manifest = json.loads(files.pop(MANIFEST))
        schema = manifest.get("schema")
    except (ValueError, AttributeError) as err:
        raise UserError(f"{path}: its {MANIFEST} cannot be read ({err})") from None
    if schema != SCHEMA_VERSION:
        raise UserError(f"{path} has bundle schema {schema!r}, which this version does not know (it reads schema "
                        f"{SCHEMA_VERSION}); inspect it with the project at its commit {manifest.get('commit')}")
    listed = manifest.get("files") or {}
    for name in sorted(set(listed) - set(files)):
        bad.append(f"{name} is in the manifest but not in the bundle")
    for name in sorted(set(files) - set(listed)):
        bad.append(f"{name} is in the bundle but not in the manifest")
    for name in sorted(set(files) & set(listed)):
        got, want = files[name], listed[name]
        if len(got) != want.get("size") or sha256_bytes(got) != want.get("sha256"):
            bad.append(f"{name} does not match its manifest entry ({len(got)} bytes, sha256 {sha256_bytes(got)[:12]}; "
                       f"manifest: {want.get('size')} bytes, sha256 {str(want.get('sha256'))[:12]})")
    if bad:
        more = f" (the first 20 of {len(bad)})" if len(bad) > 20 else ""
        raise UserError(f"{path} does not verify, so nothing is taken from it{more}: " + "; ".join(bad[:20]))
    return manifest, files


def config_differences(theirs, ours, prefix=""):
    """Key paths whose values differ between two configs (the keys in NOT_IDENTITY aside, at the top)."""
    theirs, ours = plain(theirs), plain(ours)
    if not (isinstance(theirs, dict) and isinstance(ours, dict)):
        return [] if theirs == ours else [f"{prefix or 'config'} is {theirs!r} there, {ours!r} here"]
    out = []
    for key in sorted(set(theirs) | set(ours)):
        if not prefix and key in NOT_IDENTITY:
            continue
        where = f"{prefix}.{key}" if prefix else key
        if key not in ours or key not in theirs:
            out.append(f"{where} is {'only in the bundle' if key not in ours else 'only here'}")
        else:
            out += config_differences(theirs[key], ours[key], where)
    return out


def check_for_rebuild(path, config):
    """The manifest of the bundle at path once it verifies and was made with this config; else a UserError."""
    manifest, _ = read(path)
    differences = config_differences(manifest.get("config") or {}, config)
    if differences:
        more = f" (the first 10 of {len(differences)})" if len(differences) > 10 else ""
        raise UserError(f"bundle {path} was made with another config than the one asked for{more}: "
                        + "; ".join(differences[:10]) + f". Rebuild with its own config (python -m "
                        f"merit_repro.report.bundle inspect {path} --config > bundle.yaml; snakemake --configfile "
                        f"bundle.yaml --config bundle={path}), or merge its runs into yours (python -m "
                        f"merit_repro.report.bundle merge {path})")
    return manifest


def rebuild_folder(path, results):
    """Where a rebuild from the bundle at path keeps its runs: its own folder under results, named by the
    bundle and its manifest, so it never mixes with local runs or with another bundle's."""
    with tarfile.open(path, mode="r:gz") as tar:
        digest = sha256_bytes(tar.extractfile(MANIFEST).read())[:12]
    return f"{results}/from_bundle/{Path(path).name.removesuffix('.tar.gz')}-{digest}"


# ---------------------------------------------------------------- taking files out


def destination(name, corpora):
    """Where a member goes under the results folder (None: left out). The bundle's own tables, manifest and
    config go to origin/, to compare with what the rebuild makes; corpora's meta.json only when asked."""
    if name in (CONFIG, MANIFEST) or name.startswith("tables/"):
        return f"{ORIGIN}/{name}"
    if name.startswith("data/"):
        return name if corpora else None
    return name


def unpack(path, into, corpora=True):
    """Write the bundle's files under into (see destination); a file already there with other content is
    never overwritten: UserError naming them, before anything is written. Returns (written, already there)."""
    manifest, files = read(path)
    files[MANIFEST] = (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode()
    into = Path(into)
    plan = {into / dest: data for name, data in files.items() if (dest := destination(name, corpora))}
    clashes = [str(p) for p, data in plan.items() if p.is_file() and p.read_bytes() != data]
    if clashes:
        raise UserError(f"{len(clashes)} file(s) under {into} differ from the bundle's and are not overwritten: "
                        + ", ".join(sorted(clashes)[:10]) + "; move them away or unpack into another folder")
    written = 0
    for target, data in sorted(plan.items()):
        if target.is_file():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.unpacking")
        tmp.write_bytes(data)
        os.replace(tmp, target)
        written += 1
    return written, len(plan) - written


def merge(path, results):
    """Add the bundle's runs and tuning decisions to a local results tree, so the workflow trains only the
    cells it lacks. The corpora must be prepared here first, and be the ones the bundle's runs read."""
    manifest, _ = read(path)
    problems = []
    for folder, theirs in sorted(manifest.get("data", {}).items()):
        meta = Path(results) / folder / "meta.json"
        if not meta.is_file():
            problems.append(f"{meta} is missing: prepare it first (snakemake --cores 1 {meta})")
        elif (ours := fingerprint(json.loads(meta.read_text()))) != theirs:
            problems.append(f"{meta.parent} holds corpus {ours}, the bundle's runs read {theirs}")
    if problems:
        raise UserError(f"cannot merge {path} into {results}: " + "; ".join(problems))
    return unpack(path, results, corpora=False)


# ---------------------------------------------------------------- what one holds


def describe(manifest, files):
    """Lines saying what a verified bundle holds."""
    runs = {name.rsplit("/", 1)[0]: json.loads(data) for name, data in files.items()
            if name.startswith("runs/") and name.endswith("/summary.json")}
    cells = [summary.get("config", {}) for summary in runs.values()]
    size = sum(len(d) for d in files.values())

    def values(key):
        return ", ".join(str(v) for v in sorted({c.get(key) for c in cells}, key=lambda v: (str(type(v)), v)))

    status = Counter(summary.get("status") for summary in runs.values())
    config = manifest.get("config") or {}
    return [
        f"bundle schema {manifest['schema']}, made at commit {manifest.get('commit')}",
        f"verifies: {len(manifest['files'])} files, {size:,} bytes, every sha256 and size as its manifest says",
        f"lock file sha256: {manifest.get('lock_sha256')}",
        f"experiments: {', '.join(sorted(config.get('experiments', {})))}",
        f"cells: {len(runs)} ({', '.join(f'{n} {s}' for s, n in sorted(status.items(), key=str))})",
        f"models: {values('model')}",
        f"optimizers: {values('optimizer')}",
        f"batch sizes: {values('batch_size')}",
        f"tokens: {values('tokens')}",
        f"seeds: {values('seed')}",
        "corpora: " + ", ".join(f"{k} ({v})" for k, v in sorted(manifest.get("data", {}).items())),
        f"tables: {', '.join(sorted(n.removeprefix('tables/') for n in files if n.startswith('tables/')))}",
    ]


@cli
def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m merit_repro.report.bundle", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    inspect = sub.add_parser("inspect", help="what a bundle holds and whether it verifies")
    inspect.add_argument("path")
    inspect.add_argument("--config", action="store_true", help="print the bundle's effective config (YAML) instead")
    take = sub.add_parser("unpack", help="write a bundle's files under a folder (what the workflow's rebuild does)")
    take.add_argument("path")
    take.add_argument("--into", required=True)
    join = sub.add_parser("merge", help="add a bundle's runs to a local results tree, to train the rest beside them")
    join.add_argument("path")
    join.add_argument("--results", default="results")
    args = parser.parse_args(argv)
    if args.command == "inspect":
        manifest, files = read(args.path)
        print(files[CONFIG].decode() if args.config else "\n".join(describe(manifest, files)), end="" if
              args.config else "\n")
    elif args.command == "unpack":
        written, kept = unpack(args.path, args.into)
        print(f"unpacked {args.path} into {args.into}: {written} files written, {kept} already there")
    else:
        written, kept = merge(args.path, args.results)
        print(f"merged {args.path} into {args.results}: {written} files written, {kept} already there; "
              "`snakemake` now trains only the cells the bundle lacks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
