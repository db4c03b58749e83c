"""What a bundle is and how one is read without trusting it: the members it may hold (by name patterns, never code
or a location), caps on every size a hostile archive could inflate, the manifest's shape, every member's hash."""

import json
import re
import tarfile
from collections import Counter
from pathlib import Path, PurePosixPath

import yaml

from merit_repro.plan import paths
from merit_repro.plan.records import record_problems
from merit_repro.utils import UserError, sha256_bytes

SCHEMA_VERSION = 1
MANIFEST = "MANIFEST.json"
CONFIG = "config.yaml"


def plain(obj):
    """obj as JSON has it (tuples as lists, keys as strings): how a config is compared and stored."""
    return json.loads(json.dumps(obj, sort_keys=True, default=str))


def config_text(config):
    """The config as a bundle stores it (config.yaml): plain YAML through the safe dumper."""
    return yaml.safe_dump(plain(config), sort_keys=True).encode()


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

