"""Results bundles: the small files a report is made from, packed with a manifest of their hashes, so the
report can be rebuilt and audited anywhere without training anything.

    python -m merit_repro.report.bundle inspect PATH [--config]     # what it holds, whether it verifies
    python -m merit_repro.report.bundle unpack PATH --into DIR      # its files under DIR (the workflow's rebuild)
    python -m merit_repro.report.bundle merge PATH --results DIR    # its runs into a local results tree, to train beside
    python -m merit_repro.report.bundle audit --results DIR         # a rebuild's tables against the bundle's own

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
import re
import sys
import tarfile
import tempfile
from collections import Counter
from pathlib import Path, PurePosixPath

import yaml

from merit_repro.config import configfiles, optimizer_sources
from merit_repro.plan import paths
from merit_repro.plan.records import fingerprint, record_problems
from merit_repro.utils import UserError, cli, sha256_bytes

SCHEMA_VERSION = 1
MANIFEST = "MANIFEST.json"
CONFIG = "config.yaml"
# Where and how the workflow runs, not what it computes: a rebuild may set these differently.
NOT_IDENTITY = ("results", "figures", "adopt_folders", "bundle", "bundle_name", "tracking", "max_job_minutes",
                "signal_lead_seconds", "gpus_per_node", "cores_per_gpu", "mem_mb_per_gpu")   # where it ran, job sizes
ORIGIN = paths.ORIGIN


def default_name(configfile):
    """The bundle's file name when bundle_name is not set: the config file's stem, with any character a bundle name
    may not hold (the schema's letters, digits, _ . -; braces would be wildcards) replaced by _."""
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", Path(configfile).stem)[:64] if configfile else "results"
    return stem if re.match(r"[A-Za-z0-9]", stem) else f"config{stem}"[:64]


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


# ---------------------------------------------------------------- reading and checking one


# The members a bundle is made of (names as member_paths and create write them): run files of cells, tuning
# rounds and decisions, zero-shot result JSONs, tables, corpora's meta.json, the config and the manifest. No
# other name is read: a bundle carries data, never code (a task folder) or a location.
_SEGMENT = r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}"
MEMBER_PATTERNS = [re.compile(p) for p in (
    rf"{paths.RUNS}/{_SEGMENT}/{_SEGMENT}/{_SEGMENT}/bs{_SEGMENT}/lr{_SEGMENT}/seed{_SEGMENT}/"
    rf"({'|'.join(re.escape(n) for n in paths.RUN_FILES + paths.RUN_LOGS)})",
    rf"{paths.TUNING}/{_SEGMENT}/{_SEGMENT}/{_SEGMENT}/bs{_SEGMENT}/(round[0-9]{{1,4}}|final|looked)\.json",
    rf"{paths.TUNING}/{re.escape(paths.SECOND_LOOK)}",
    rf"{paths.ZEROSHOT}/{_SEGMENT}/{_SEGMENT}/{_SEGMENT}/bs{_SEGMENT}\.json",
    rf"{paths.TABLES}/{_SEGMENT}\.csv",
    rf"{paths.DATA}/{_SEGMENT}/meta\.json",
    re.escape(CONFIG), re.escape(MANIFEST))]
MAX_MANIFEST_BYTES = 64 * 2 ** 20
MAX_MEMBER_BYTES = 2 ** 30   # a paper-scale run's mal.csv is tens of MB; a member this large is not a run file
MAX_BUNDLE_BYTES = 2 ** 32   # all members together (a paper-scale bundle: under 1 GB before gzip), held in memory
MAX_HEADER_BYTES = 2 ** 20   # a long name or PAX header: tarfile reads its whole body while listing the members
# gzip gains 2-4x on a bundle's CSV, JSON and logs (a demo bundle's run files: 2-4x), a run's diagnostics.csv of
# repeated names and zeros perhaps 30x; DEFLATE's ceiling, ~1000x, takes runs of one byte. Members adding up to more
# than this many times the bundle's own size are a decompression bomb, not results: refused from their headers.
MAX_EXPANSION = 200
MAX_CONFIG_DEPTH = 64   # lists and mappings in a config (a real one: under 10); deeper ones overflow the YAML dumper


class _CappedTarInfo(tarfile.TarInfo):
    """TarInfo whose long-name and PAX headers are refused above MAX_HEADER_BYTES before tarfile reads them."""

    def _proc_gnulong(self, tar):
        self._refuse_large()
        return super()._proc_gnulong(tar)

    def _proc_pax(self, tar):
        self._refuse_large()
        return super()._proc_pax(tar)

    def _refuse_large(self):
        if self.size > MAX_HEADER_BYTES:
            raise tarfile.TarError(f"a header of {self.size:,} bytes, more than any member name needs")


def is_member(name):
    """True for a name a bundle is made of (MEMBER_PATTERNS)."""
    return any(p.fullmatch(name) for p in MEMBER_PATTERNS)


def _file_entry(entry):
    return (isinstance(entry, dict) and isinstance(entry.get("size"), int) and entry["size"] >= 0
            and isinstance(entry.get("sha256"), str) and re.fullmatch(r"[0-9a-f]{64}", entry["sha256"]) is not None)


def _manifest_problems(manifest):
    """What makes a parsed MANIFEST.json unusable, as short phrases (empty: its shape is right)."""
    if not isinstance(manifest, dict):
        return [f"it is a {type(manifest).__name__}, not a JSON object"]
    out = []
    files = manifest.get("files")
    if not isinstance(files, dict):
        out.append("'files' is not an object of name: {sha256, size}")
    else:
        out += [f"files[{name!r}] is not {{sha256: 64 hex digits, size: a whole number}}"
                for name, entry in files.items() if not _file_entry(entry)]
        if sum(e["size"] for e in files.values() if _file_entry(e)) > MAX_BUNDLE_BYTES:
            out.append(f"its files add up to more than {MAX_BUNDLE_BYTES:,} bytes, more than any results bundle")
    if not isinstance(manifest.get("config"), dict):
        out.append("'config' is not a mapping")
    elif _nests_deeper(manifest["config"], MAX_CONFIG_DEPTH):
        out.append(f"'config' nests more than {MAX_CONFIG_DEPTH} lists and mappings deep, deeper than any config")
    data = manifest.get("data", {})
    if not isinstance(data, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and re.fullmatch(rf"{paths.DATA}/{_SEGMENT}", k)
            and isinstance(files, dict) and f"{k}/meta.json" in files for k, v in data.items()):
        out.append("'data' is not an object of data/<corpus>: fingerprint, each with its meta.json in the bundle")
    if not isinstance(manifest.get("commit"), (str, type(None))):
        out.append("'commit' is not a string")
    return out


def _nests_deeper(value, levels):
    """Whether value nests more than levels lists and mappings deep (never recursing past levels)."""
    if not isinstance(value, (dict, list)):
        return False
    items = value.values() if isinstance(value, dict) else value
    return levels == 0 or any(_nests_deeper(item, levels - 1) for item in items)


def _read_manifest(path, tar, info):
    if info is None:
        raise UserError(f"{path} has no {MANIFEST}: it is not a results bundle of this project")
    if info.size > MAX_MANIFEST_BYTES:
        raise UserError(f"{path}: its {MANIFEST} is {info.size:,} bytes, more than a manifest can be "
                        f"({MAX_MANIFEST_BYTES:,}); it is not a results bundle of this project")
    try:
        manifest = json.loads(tar.extractfile(info).read())
    except (ValueError, RecursionError) as err:   # RecursionError: lists or objects nested thousands deep
        raise UserError(f"{path}: its {MANIFEST} cannot be read ({str(err)[:120]})") from None
    schema = manifest.get("schema") if isinstance(manifest, dict) else None
    if schema != SCHEMA_VERSION:
        commit = manifest.get("commit") if isinstance(manifest, dict) else None
        raise UserError(f"{path} has bundle schema {schema!r}, which this version does not know (it reads schema "
                        f"{SCHEMA_VERSION}); inspect it with the project at its commit {commit}")
    problems = _manifest_problems(manifest)
    if problems:
        raise UserError(f"{path}: its {MANIFEST} is malformed: " + "; ".join(problems[:5]))
    return manifest


def _headers(path, tar):
    """The members' headers (long ones refused), refused as soon as their sizes add up past MAX_EXPANSION times the
    bundle's size or MAX_BUNDLE_BYTES: before the data of the member that passes it is read or skipped over."""
    size = path.stat().st_size
    budget = min(MAX_BUNDLE_BYTES, MAX_EXPANSION * size)
    members, total = [], 0
    for info in tar:
        total += info.size
        if total > budget:
            raise UserError(f"{path} is not a results bundle: its members add up to more than {budget:,} bytes (at "
                            f"most {MAX_EXPANSION}x its own {size:,}, and {MAX_BUNDLE_BYTES:,} in all): a "
                            "decompression bomb, not results; nothing was extracted from it")
        members.append(info)
    return members


def read(path):
    """(manifest, {name: bytes}) of the bundle at path. Only members a bundle is made of are read (is_member),
    each after its tar header's size matches the manifest's, then checked against its sha256; the config member
    must be the manifest's config; then the records the report reads must hold values of the kinds it reads
    (merit_repro.plan.records). A UserError names every problem otherwise, before anything is used."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"bundle {path} does not exist; make one with `snakemake --cores 1 bundle`")
    files, bad = {}, []
    try:
        with tarfile.open(path, mode="r:gz", tarinfo=_CappedTarInfo) as tar:
            members = _headers(path, tar)   # no member's data is read yet
            manifest = _read_manifest(path, tar, next((m for m in members if m.name == MANIFEST), None))
            listed = manifest["files"]
            seen = Counter(m.name for m in members)
            for info in members:
                name = PurePosixPath(info.name)
                if (not info.isfile() or name.is_absolute() or not name.parts or str(name) != info.name
                        or {".", ".."} & set(name.parts)):
                    bad.append(f"member {info.name!r} is not a plain file inside the bundle")
                elif seen[info.name] > 1:
                    bad.append(f"member {info.name!r} appears {seen[info.name]} times")
                elif not is_member(info.name):
                    bad.append(f"member {info.name!r} is not a file a bundle is made of (run files, tuning "
                               "decisions, zero-shot results, tables, corpora's meta.json)")
                elif info.name == MANIFEST:
                    continue
                elif info.name not in listed:
                    bad.append(f"{info.name} is in the bundle but not in the manifest")
                elif info.size > MAX_MEMBER_BYTES:
                    bad.append(f"{info.name} is {info.size:,} bytes, more than any file a bundle is made of")
                elif info.size != listed[info.name]["size"]:
                    bad.append(f"{info.name} is {info.size:,} bytes, its manifest says {listed[info.name]['size']:,}")
                else:
                    files[info.name] = tar.extractfile(info).read()
    except (tarfile.TarError, OSError, EOFError) as err:
        raise UserError(f"{path} is not a results bundle (a gzipped tar): {err}") from None
    for name in sorted(set(listed) - set(seen)):
        bad.append(f"{name} is in the manifest but not in the bundle")
    for name in sorted(set(files) & set(listed)):
        got, want = files[name], listed[name]
        if sha256_bytes(got) != want["sha256"]:
            bad.append(f"{name} does not match its manifest entry (sha256 {sha256_bytes(got)[:12]}; manifest: "
                       f"{want['sha256'][:12]})")
    if CONFIG in files and files[CONFIG] != config_text(manifest["config"]):
        bad.append(f"{CONFIG} is not the manifest's config")
    if bad:
        more = f" (the first 20 of {len(bad)})" if len(bad) > 20 else ""
        raise UserError(f"{path} does not verify, so nothing is taken from it{more}: " + "; ".join(bad[:20]))
    check_records(path, files)
    return manifest, files


def check_records(path, files):
    """UserError naming every record of a verified bundle whose values are not of the kinds the rebuild reads (a
    list as an LR, a string as a loss): its hashes vouch only that they are the sender's files."""
    bad = [f"{name}: {', '.join(problems[:4])}" for name, data in sorted(files.items())
           if (problems := record_problems(name, data))]
    if bad:
        more = f" (the first 10 of {len(bad)})" if len(bad) > 10 else ""
        raise UserError(f"{path} verifies, but its records hold values of other kinds than this version's runs and "
                        f"tuning decisions{more}, so nothing is taken from it: " + "; ".join(bad[:10]) + ". Ask its "
                        "sender for a bundle that `snakemake bundle` made, or inspect it with the project at its "
                        "commit")


def config_text(config):
    """The config as a bundle stores it (config.yaml): plain YAML through the safe dumper."""
    return yaml.safe_dump(plain(config), sort_keys=True).encode()


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
        a, b = ours.read_text().splitlines(), theirs.read_text().splitlines()
        rows = [i for i in range(max(len(a), len(b))) if i >= len(a) or i >= len(b) or a[i] != b[i]]
        if rows:
            shown = "; ".join(f"row {i}: rebuilt {a[i] if i < len(a) else '(none)'!r}, bundle's "
                              f"{b[i] if i < len(b) else '(none)'!r}" for i in rows[:3])
            problems.append(f"tables/{name} differs from the bundle's in {len(rows)} row(s) ({shown})")
        else:
            lines.append(f"tables/{name}: {len(a) - 1} rows, identical to the bundle's")
    if problems:
        raise UserError("the report rebuilt from the bundle's runs is not the bundle's own: " + "; ".join(problems)
                        + ". The runs or the sender's tables were changed, or this checkout computes otherwise "
                        "(compare its commit and lock hash with `inspect`)")
    return lines


# ---------------------------------------------------------------- what one holds


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
    check = sub.add_parser("audit", help="compare a rebuild's tables with the bundle's own (the workflow does)")
    check.add_argument("--results", required=True, help="the rebuild's results folder (results/from_bundle/...)")
    args = parser.parse_args(argv)
    if args.command == "audit":
        print("\n".join(audit(args.results)))
        return 0
    if args.command == "inspect":
        manifest, files = read(args.path)
        print(rebuild_config(manifest) if args.config else "\n".join(describe(manifest, files)),
              end="" if args.config else "\n")
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
