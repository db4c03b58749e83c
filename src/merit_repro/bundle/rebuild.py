"""What a bundle is rebuilt into: its config (checked against the one a rebuild runs), its files unpacked under a
folder (never over a different local file), merged into a results tree, and the rebuild's tables audited against the
bundle's own."""

import csv
import json
import os
import tarfile
import tempfile
from collections import Counter
from pathlib import Path


from merit_repro.config import configfiles, optimizer_sources
from merit_repro.plan import paths
from merit_repro.plan.records import fingerprint
from merit_repro.utils import UserError, sha256_bytes

from .pack import NOT_IDENTITY, ORIGIN
from .safetar import CONFIG, MANIFEST, config_text, plain, read


def rebuild_config(manifest):
    """The config a rebuild uses, as `inspect --config` prints it: the manifest's, through the safe dumper, without
    the keys that say where to write (NOT_IDENTITY), and refused if it is not plain data by the checks a config
    file gets (configfiles.problems: a template switch, a tag), since Snakemake would act on them when loading it."""
    config = {k: v for k, v in manifest["config"].items() if k not in NOT_IDENTITY}
    if "__use_yte__" in config:   # never the user's own template, so MERIT_ALLOW_CONFIG_TEMPLATES does not apply
        raise UserError("the bundle's config holds __use_yte__, which makes Snakemake run it as a template (code); "
                        "it is not printed")
    text = config_text(config).decode()
    with tempfile.TemporaryDirectory() as tmp:
        probe = Path(tmp) / "config.yaml"
        probe.write_text(text, encoding="utf-8")
        problems = [str(p).replace(str(probe), "the bundle's config") for p in configfiles.problems(probe)]
    if problems:
        raise UserError("the bundle's config is not plain data, so it is not printed: " + "; ".join(problems[:5]))
    return text


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
    """The manifest of the bundle at path once it verifies and was made with this config; else a UserError. The
    config's optimizers from outside that name no version take the bundle's (written in when its runs trained), so
    the config they trained with compares equal and the rebuild needs none of their packages."""
    manifest, _ = read(path)
    optimizer_sources.with_versions_of(config, manifest.get("config") or {})
    differences = config_differences(manifest.get("config") or {}, config)
    if differences:
        more = f" (the first 10 of {len(differences)})" if len(differences) > 10 else ""
        raise UserError(f"bundle {path} was made with another config than the one asked for{more}: "
                        + "; ".join(differences[:10]) + f". Rebuild with its own config (python -m "
                        f"merit_repro.bundle inspect {path} --config > bundle.yaml; snakemake --configfile "
                        f"bundle.yaml --config bundle={path}), or merge its runs into yours (python -m "
                        f"merit_repro.bundle merge {path})")
    return manifest


def rebuild_folder(path, results):
    """Where a rebuild from the bundle at path keeps its runs: its own folder under results, named by the
    bundle and its manifest, so it never mixes with local runs or with another bundle's."""
    with tarfile.open(path, mode="r:gz") as tar:
        digest = sha256_bytes(tar.extractfile(MANIFEST).read())[:12]
    return f"{results}/from_bundle/{Path(path).name.removesuffix('.tar.gz')}-{digest}"


def destination(name, corpora):
    """Where a member goes under the results folder (None: left out). The bundle's own tables, manifest and
    config go to origin/, to compare with what the rebuild makes; corpora's meta.json only when asked."""
    if name in (CONFIG, MANIFEST) or name.startswith("tables/"):
        return f"{ORIGIN}/{name}"
    if name.startswith("data/"):
        return name if corpora else None
    return name


def blocking(targets, into):
    """What stops files being written at targets under into: a file where a folder goes, a folder where a file goes."""
    folders = {p for t in targets for p in t.parents if p.is_relative_to(into)}
    return sorted({str(p) for p in folders if p.exists() and not p.is_dir()} | {str(t) for t in targets if t.is_dir()})


def unpack(path, into, corpora=True):
    """Write the bundle's files under into (see destination); a file already there with other content is
    never overwritten: UserError naming them, before anything is written. Returns (written, already there)."""
    manifest, files = read(path)
    files[MANIFEST] = (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode()
    into = Path(into)
    plan = {into / dest: data for name, data in files.items() if (dest := destination(name, corpora))}
    in_the_way = blocking(plan, into)
    if in_the_way:
        raise UserError(f"{len(in_the_way)} path(s) under {into} are in the way of the bundle's files (a file where "
                        "a folder goes, or a folder where a file goes): " + ", ".join(in_the_way[:10])
                        + "; move them away or unpack into another folder")
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


def audit(results):
    """Lines saying the rebuilt tables under results equal the bundle's own (origin/tables); a UserError naming the
    first rows that differ otherwise: the report must follow from the bundle's runs as its sender's did."""
    results, problems, lines = Path(results), [], []
    for name in paths.TABLE_FILES:
        ours, theirs = results / paths.TABLES / name, results / ORIGIN / paths.TABLES / name
        if not theirs.is_file():
            problems.append(f"the bundle has no tables/{name} to compare with")
            continue
        a, b = table_rows(ours), table_rows(theirs)
        added = [c for c in a[0] if c not in b[0]] if a and b and set(b[0]) < set(a[0]) else []
        if added:   # a bundle made before these columns were written: compared on its own
            a = [[row[a[0].index(c)] for c in b[0]] for row in a]
        rows = [i for i in range(max(len(a), len(b))) if i >= len(a) or i >= len(b) or a[i] != b[i]]
        if rows:
            shown = "; ".join(f"row {i}: rebuilt {','.join(a[i]) if i < len(a) else '(none)'!r}, bundle's "
                              f"{','.join(b[i]) if i < len(b) else '(none)'!r}" for i in rows[:3])
            problems.append(f"tables/{name} differs from the bundle's in {len(rows)} row(s) ({shown})")
        else:
            lines.append(f"tables/{name}: {len(a) - 1} rows, identical to the bundle's"
                         + (f" in its columns (the rebuild adds {', '.join(added)})" if added else ""))
    if problems:
        raise UserError("the report rebuilt from the bundle's runs is not the bundle's own: " + "; ".join(problems)
                        + ". The runs or the sender's tables were changed, or this checkout computes otherwise "
                        "(compare its commit and lock hash with `inspect`)")
    return lines


def table_rows(path):
    """A CSV table's rows, header first, each a list of its fields as written."""
    with open(path, newline="") as f:
        return list(csv.reader(f))


def describe(manifest, files):
    """Lines saying what a verified bundle holds (read checked its summaries' kinds)."""
    runs = {name.rsplit("/", 1)[0]: json.loads(data) for name, data in files.items()
            if name.startswith("runs/") and name.endswith("/summary.json")}
    cells = [summary["config"] for summary in runs.values()]
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

