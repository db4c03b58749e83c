"""Results bundles (merit_repro.bundle) on a results tree made here: the same runs give the same bytes, a
bundle that does not verify or is another config's is refused naming what differs, unpacking never overwrites.
The workflow's bundle -> rebuild round trip is in test_workflow.py."""

import errno
import gzip
import hashlib
import io
import json
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml
from synthetic import BUNDLE_CONFIG, make_bundle, make_tree

from merit_repro import bundle
from merit_repro.utils import UserError


def rewrite(path, edit):
    """The bundle at path with edit({name: bytes}) applied to its members, manifest kept."""
    with tarfile.open(path, "r:gz") as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar}
    edit(files)
    bundle.write_tar(path, files)


def test_a_bundle_holds_the_small_files_and_the_same_runs_give_the_same_bytes(tmp_path):
    first, manifest = make_bundle(tmp_path, "one.tar.gz")
    second, _ = make_bundle(tmp_path, "two.tar.gz")
    assert first.read_bytes() == second.read_bytes()
    names = set(manifest["files"])
    assert "runs/T/4096/adamw/bs8/lr1e-3/seed0/train.log" in names and "tuning/e/T/adamw/bs8/round0.json" in names
    assert "data/d/meta.json" in names and "tables/runs.csv" in names and bundle.CONFIG in names
    assert not any(n.endswith(".pt") for n in names)
    assert manifest["schema"] == bundle.SCHEMA_VERSION and manifest["commit"] == "abc123"
    assert manifest["config"] == BUNDLE_CONFIG and set(manifest["data"]) == {"data/d"}
    with gzip.open(first) as gz:   # no time or owner of its own in the members
        assert {(m.mtime, m.uid, m.uname) for m in tarfile.open(fileobj=io.BytesIO(gz.read()))} == {(0, 0, "")}


def test_an_unfinished_run_is_not_bundled(tmp_path):
    results, decisions = make_tree(tmp_path)
    (results / "runs/T/4096/adamw/bs8/lr2e-3/seed0/mal.csv").unlink()
    with pytest.raises(UserError, match="lr2e-3/seed0 lacks mal.csv: a bundle holds finished runs only"):
        bundle.create(tmp_path / "b.tar.gz", results, decisions, [], BUNDLE_CONFIG, "abc", None)


def test_a_tampered_file_is_refused_naming_it(tmp_path, capsys):
    path, _ = make_bundle(tmp_path)
    edited = b'{"val_loss": 2.6}'   # one character changed: the size alone cannot tell
    rewrite(path, lambda f: f.update({"runs/T/4096/adamw/bs8/lr1e-3/seed0/eval.json": edited}))
    with pytest.raises(UserError, match=r"does not verify.*runs/T/4096/adamw/bs8/lr1e-3/seed0/eval.json does not "
                                        r"match its manifest entry"):
        bundle.read(path)
    assert bundle.main(["inspect", str(path)]) == 2   # one `error:` line, like every CLI of the package
    assert "eval.json does not match its manifest entry" in capsys.readouterr().err


@pytest.mark.parametrize("edit, message", [
    (lambda f: f.pop("tables/runs.csv"), "tables/runs.csv is in the manifest but not in the bundle"),
    (lambda f: f.update({"tables/extra.csv": b"x"}), "tables/extra.csv is in the bundle but not in the manifest"),
    (lambda f: f.update({bundle.MANIFEST: json.dumps({"schema": 99, "commit": "c0ffee"}).encode()}),
     "has bundle schema 99, which this version does not know .* at its commit c0ffee"),
    (lambda f: f.pop(bundle.MANIFEST), "has no MANIFEST.json"),
])
def test_a_bundle_that_does_not_verify_is_refused(tmp_path, edit, message):
    path, _ = make_bundle(tmp_path)
    rewrite(path, edit)
    with pytest.raises(UserError, match=message):
        bundle.read(path)


def test_a_member_outside_the_bundle_is_refused(tmp_path):
    path, _ = make_bundle(tmp_path)
    rewrite(path, lambda f: f.update({"../escape.txt": b"x"}))
    with pytest.raises(UserError, match="member '../escape.txt' is not a plain file inside the bundle"):
        bundle.read(path)


def test_not_a_bundle_is_named(tmp_path):
    (tmp_path / "x.tar.gz").write_text("hello")
    with pytest.raises(UserError, match="is not a results bundle"):
        bundle.read(tmp_path / "x.tar.gz")
    with pytest.raises(UserError, match="does not exist; make one with `snakemake --cores 1 bundle`"):
        bundle.read(tmp_path / "missing.tar.gz")


def test_another_config_is_refused_naming_what_differs(tmp_path):
    path, _ = make_bundle(tmp_path)
    rebuilt = bundle.check_for_rebuild(path, {**BUNDLE_CONFIG, "results": "elsewhere", "bundle": str(path)})
    assert rebuilt["commit"] == "abc123"
    other = {**BUNDLE_CONFIG, "experiments": {"e": {"lr_grid": {"adamw": [1e-3, 4e-3]}}}, "seeds": [0, 1]}
    with pytest.raises(UserError, match=r"another config than the one asked for: experiments.e.lr_grid.adamw is "
                                        r"\[0.001, 0.002\] there, \[0.001, 0.004\] here; seeds is only here"):
        bundle.check_for_rebuild(path, other)


def test_unpacking_never_overwrites_and_keeps_the_origins_tables_apart(tmp_path):
    path, manifest = make_bundle(tmp_path)
    into = tmp_path / "rebuild"
    assert bundle.unpack(path, into) == (len(manifest["files"]) + 1, 0)
    assert (into / "runs/T/4096/adamw/bs8/lr1e-3/seed0/metrics.csv").is_file()
    assert (into / "origin/tables/runs.csv").is_file() and not (into / "tables").exists()
    assert json.loads((into / "origin" / bundle.MANIFEST).read_text()) == manifest
    assert bundle.unpack(path, into) == (0, len(manifest["files"]) + 1)   # again: everything already there
    (into / "runs/T/4096/adamw/bs8/lr1e-3/seed0/metrics.csv").write_text("mine\n")
    with pytest.raises(UserError, match="1 file.* differ from the bundle's and are not overwritten: .*lr1e-3/seed0/"
                                        "metrics.csv"):
        bundle.unpack(path, into)
    assert (into / "runs/T/4096/adamw/bs8/lr1e-3/seed0/metrics.csv").read_text() == "mine\n"


def test_merging_needs_the_same_corpus_prepared_here(tmp_path):
    path, _ = make_bundle(tmp_path)
    local = tmp_path / "local"
    with pytest.raises(UserError, match="data/d/meta.json is missing: prepare it first"):
        bundle.merge(path, local)
    (local / "data/d").mkdir(parents=True)
    (local / "data/d/meta.json").write_text(json.dumps({"request": {"dataset": "other"}, "splits": {}}))
    with pytest.raises(UserError, match="holds corpus .*, the bundle's runs read"):
        bundle.merge(path, local)
    (local / "data/d/meta.json").write_bytes((tmp_path / "b/results/data/d/meta.json").read_bytes())
    bundle.merge(path, local)
    assert (local / "tuning/e/T/adamw/bs8/final.json").is_file()


def test_inspect_says_what_a_bundle_holds(tmp_path, capsys):
    path, _ = make_bundle(tmp_path)
    assert bundle.main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "made at commit abc123" in out and "cells: 2 (2 ok)" in out and "optimizers: adamw" in out
    assert "verifies:" in out and "tables: runs.csv" in out
    assert bundle.main(["inspect", str(path), "--config"]) == 0
    assert "alpha: 0.05" in capsys.readouterr().out


@pytest.mark.parametrize("name", [".", "runs/.", "./runs/x"])
def test_a_member_named_by_a_dot_is_refused(tmp_path, name):
    path, _ = make_bundle(tmp_path)
    rewrite(path, lambda f: f.update({name: b"x"}))
    with pytest.raises(UserError, match="is not a plain file inside the bundle"):
        bundle.read(path)


def forge(path, edit):
    """What a hostile sender can do: edit({name: bytes}) the members, then write a manifest whose hashes and
    sizes match the edited files, so that only the bundle's rules, not its hashes, can refuse it."""
    with tarfile.open(path, "r:gz") as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar}
    manifest = json.loads(files.pop(bundle.MANIFEST))
    edit(files, manifest)
    manifest["files"] = {n: {"sha256": hashlib.sha256(d).hexdigest(), "size": len(d)} for n, d in files.items()}
    files[bundle.MANIFEST] = json.dumps(manifest).encode()
    bundle.write_tar(path, files)


@pytest.mark.parametrize("members", [
    {"zeroshot_tasks/pwn.py": b"import os", "zeroshot_tasks/0_next_line.yaml": b"task: next_line"},
    {"aaa": b"x", "aaa/b": b"y"},
    {"runs/T/4096/adamw/bs8/lr1e-3/seed0/model.pt": b"weights"},
    {"README.md": b"# overwritten"},
])
def test_a_member_a_bundle_is_not_made_of_is_refused_even_when_its_manifest_lists_it(tmp_path, members):
    path, _ = make_bundle(tmp_path)
    forge(path, lambda files, manifest: files.update(members))
    with pytest.raises(UserError) as err:
        bundle.read(path)
    for name in members:
        assert f"member {name!r} is not a file a bundle is made of" in str(err.value)
    assert not (tmp_path / "into").exists()
    with pytest.raises(UserError):
        bundle.unpack(path, tmp_path / "into")
    assert not (tmp_path / "into").exists()


def test_a_member_larger_than_its_manifest_says_is_refused_before_it_is_read(tmp_path, monkeypatch):
    path, _ = make_bundle(tmp_path)
    name = "runs/T/4096/adamw/bs8/lr1e-3/seed0/metrics.csv"
    rewrite(path, lambda f: f.update({name: b"0" * 100_000}))
    read_sizes = []
    real = tarfile.TarFile.extractfile
    monkeypatch.setattr(tarfile.TarFile, "extractfile",
                        lambda self, info: read_sizes.append(info.size) or real(self, info))
    with pytest.raises(UserError, match=f"{name} is 100,000 bytes, its manifest says"):
        bundle.read(path)
    assert 100_000 not in read_sizes


@pytest.mark.parametrize("edit, message", [
    (lambda m: m["files"].update({"tables/runs.csv": 7}), "files\\['tables/runs.csv'\\] is not"),
    (lambda m: m.update(data=["d"]), "'data' is not an object"),
    (lambda m: m.update(config="results: /"), "'config' is not a mapping"),
    (lambda m: m.update(files=[]), "'files' is not an object"),
    (lambda m: m["files"]["tables/runs.csv"].update(size=2 ** 33), "its files add up to more than"),
    (lambda m: m.update(data={"../../etc": "x"}), "'data' is not an object of data/<corpus>"),
])
def test_a_malformed_manifest_is_one_error_line(tmp_path, capsys, edit, message):
    path, _ = make_bundle(tmp_path)

    def malform(files):
        manifest = json.loads(files[bundle.MANIFEST])
        edit(manifest)
        files[bundle.MANIFEST] = json.dumps(manifest).encode()
    rewrite(path, malform)
    assert bundle.main(["inspect", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and re.search(message, err), err


def test_a_summary_that_is_not_json_is_one_error_line(tmp_path, capsys):
    path, _ = make_bundle(tmp_path)
    forge(path, lambda files, manifest: files.update({"runs/T/4096/adamw/bs8/lr1e-3/seed0/summary.json": b"{oops"}))
    assert bundle.main(["inspect", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "lr1e-3/seed0/summary.json: it is not JSON" in err


def test_inspect_config_prints_the_manifests_config_as_data_without_locations(tmp_path, capsys):
    path, _ = make_bundle(tmp_path)
    raw = b"__use_yte__: true\nresults: ?? __import__('os').system('touch pwned')\n"
    forge(path, lambda files, manifest: files.update({bundle.CONFIG: raw}))   # a config.yaml not the manifest's
    with pytest.raises(UserError, match="config.yaml is not the manifest's config"):
        bundle.read(path)

    def relocate(files, manifest):
        manifest["config"] = {**manifest["config"], "figures": ".", "results": "/", "bundle_name": "x"}
        files[bundle.CONFIG] = bundle.config_text(manifest["config"])
    path, _ = make_bundle(tmp_path, "c.tar.gz")
    forge(path, relocate)
    assert bundle.main(["inspect", str(path), "--config"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed == {k: v for k, v in BUNDLE_CONFIG.items() if k != "results"}   # no key that says where to write

    def template(files, manifest):
        manifest["config"] = {**manifest["config"], "__use_yte__": True}
        files[bundle.CONFIG] = bundle.config_text(manifest["config"])
    path, _ = make_bundle(tmp_path, "t.tar.gz")
    forge(path, template)
    assert bundle.main(["inspect", str(path), "--config"]) == 2
    assert "__use_yte__" in capsys.readouterr().err


def test_the_audit_names_rows_a_rebuild_computes_otherwise(tmp_path):
    path, _ = make_bundle(tmp_path)
    into = tmp_path / "rebuild"
    bundle.unpack(path, into)
    (into / "tables").mkdir()
    (into / "tables/runs.csv").write_bytes((into / "origin/tables/runs.csv").read_bytes())
    with pytest.raises(UserError, match="the bundle has no tables/cells.csv to compare with"):
        bundle.audit(into)
    for name in ("cells.csv", "best_lr.csv"):   # the test tree's bundle has runs.csv only: give it the others
        (into / "origin/tables" / name).write_text("a\n1\n")
        (into / "tables" / name).write_text("a\n1\n")
    assert bundle.audit(into)[0] == "tables/runs.csv: 1 rows, identical to the bundle's"
    (into / "tables/runs.csv").write_text("model,warmup_steps,lr\nT,3,1e-3\n")   # a column added since the bundle
    assert bundle.audit(into)[0] == ("tables/runs.csv: 1 rows, identical to the bundle's in its columns (the rebuild "
                                     "adds warmup_steps)")
    (into / "tables/runs.csv").write_text("model,lr\nT,9e-3\n")
    with pytest.raises(UserError, match=r"tables/runs.csv differs from the bundle's in 1 row\(s\) \(row 1: rebuilt "
                                        r"'T,9e-3', bundle's 'T,1e-3'\)"):
        bundle.audit(into)


def test_a_config_file_name_with_braces_names_its_bundle_plainly():
    assert bundle.default_name("config/my{x}.yaml") == "my_x_"
    assert bundle.default_name("_x.yaml") == "config_x" and bundle.default_name(None) == "results"


def test_a_long_header_is_refused_before_tarfile_reads_it(tmp_path):
    """A GNU long name's body is read whole while tarfile lists the members: one of 2 MB is refused first."""
    path = tmp_path / "long.tar.gz"
    bundle.write_tar(path, {"a" * 2_000_000: b"x"})
    with pytest.raises(UserError, match="is not a results bundle .*a header of 2,000,001 bytes"):
        bundle.read(path)


def test_a_bundles_template_is_never_printed_even_where_templates_are_allowed(tmp_path, monkeypatch, capsys):
    def template(files, manifest):
        manifest["config"] = {**manifest["config"], "__use_yte__": True}
        files[bundle.CONFIG] = bundle.config_text(manifest["config"])
    path, _ = make_bundle(tmp_path)
    forge(path, template)
    monkeypatch.setenv("MERIT_ALLOW_CONFIG_TEMPLATES", "1")
    assert bundle.main(["inspect", str(path), "--config"]) == 2
    assert "__use_yte__" in capsys.readouterr().err


RUN = "runs/T/4096/adamw/bs8/lr1e-3/seed0/"
FINAL = "tuning/e/T/adamw/bs8/final.json"


def edit_record(name, change):
    """A forge edit: the JSON record name with change(record) applied."""
    def edit(files, manifest):
        record = json.loads(files[name])
        change(record)
        files[name] = json.dumps(record).encode()
    return edit


@pytest.mark.parametrize("edit, message", [
    (edit_record(RUN + "summary.json", lambda s: s["config"].update(lr=[1e-3, 2e-3])),
     "summary.json: config.lr=[0.001, 0.002] must be float or int"),
    (edit_record(RUN + "summary.json", lambda s: s.update(final_val_loss="2.5")),
     'summary.json: final_val_loss is "2.5", not a number or null'),
    (edit_record(RUN + "summary.json", lambda s: s.update(train_seconds={"s": 1})),
     "summary.json: train_seconds is an object, not a number or null"),
    (edit_record(RUN + "eval.json", lambda e: e.update(lambada_ppl=[1])), "eval.json: lambada_ppl is a list"),
    (edit_record(FINAL, lambda d: d["cells"][0].update(lr="../../../../etc")),
     'final.json: cells[0].lr is "../../../../etc", not a string such as \'6e-4\''),
    (edit_record(FINAL, lambda d: d["cells"][0].update(lr=[1e-3])), "final.json: cells[0].lr is a list"),
    (edit_record(FINAL, lambda d: d.update(best_lr={"lr": 1})), "final.json: best_lr is an object"),
    (edit_record(FINAL, lambda d: d["group"].update(batch="8")), 'final.json: group.batch is "8", not a whole number'),
    (lambda files, manifest: files.update({RUN + "mal.csv": b"step,layer,head,mal\n8,1,1,high\n"}),
     "mal.csv: its column mal holds 'high', not a number"),
])
def test_a_bundle_whose_records_hold_values_of_other_kinds_is_one_error_line(tmp_path, capsys, edit, message):
    """Its hashes verify (the sender recomputed them): the kinds of its records' values are what refuses it, at
    inspect, unpack and rebuild, before collect_runs or an artifact job would fail on them with a traceback."""
    path, _ = make_bundle(tmp_path)
    forge(path, edit)
    assert bundle.main(["inspect", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "verifies, but its records" in err, err
    assert message in err, err
    with pytest.raises(UserError, match=re.escape(message)):
        bundle.check_for_rebuild(path, BUNDLE_CONFIG)
    with pytest.raises(UserError):
        bundle.unpack(path, tmp_path / "into")
    assert not (tmp_path / "into").exists()


def zeros_as_gzip(size, chunk=2 ** 20):
    """size zero bytes as concatenated gzip members (one gzip stream to a reader): a GiB in about a MB."""
    return gzip.compress(bytes(chunk), mtime=0) * (size // chunk)


def test_a_decompression_bomb_is_refused_from_its_headers_before_anything_is_read(tmp_path, monkeypatch, capsys):
    """A 2 MB bundle whose manifest lists two 1 GiB members (each within the per-member cap, both within the total)
    is refused from the first one's header: nothing is extracted, and the 2 GiB are not even skipped over."""
    names = [RUN + "metrics.csv", RUN + "mal.csv"]
    manifest = json.dumps({"schema": bundle.SCHEMA_VERSION, "commit": "c", "config": {}, "data": {},
                           "files": {n: {"sha256": "0" * 64, "size": 2 ** 30} for n in names}}).encode()
    head = tarfile.TarInfo(bundle.MANIFEST)
    head.size = len(manifest)
    parts = [gzip.compress(head.tobuf(tarfile.GNU_FORMAT) + manifest + bytes(-len(manifest) % 512), mtime=0)]
    for name in names:
        info = tarfile.TarInfo(name)
        info.size = 2 ** 30
        parts += [gzip.compress(info.tobuf(tarfile.GNU_FORMAT), mtime=0), zeros_as_gzip(2 ** 30)]
    path = tmp_path / "bomb.tar.gz"
    path.write_bytes(b"".join(parts) + gzip.compress(bytes(1024), mtime=0))
    assert path.stat().st_size < 3 * 2 ** 20
    real = tarfile.TarFile.extractfile

    def extract_small_only(self, info):
        assert info.size < 2 ** 20, f"{info.name} ({info.size:,} bytes) was extracted"
        return real(self, info)
    monkeypatch.setattr(tarfile.TarFile, "extractfile", extract_small_only)
    assert bundle.main(["inspect", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "a decompression bomb, not results" in err and str(path) in err, err


@pytest.mark.parametrize("manifest, message", [
    (b"[" * 100_000 + b"]" * 100_000, "its MANIFEST.json cannot be read"),
    (None, "'config' nests more than 64 lists and mappings deep"),
])
def test_a_manifest_nested_deep_is_one_error_line(tmp_path, capsys, manifest, message):
    path, _ = make_bundle(tmp_path)

    def nest(files):
        if manifest is not None:
            files[bundle.MANIFEST] = manifest
            return
        record, deep = json.loads(files[bundle.MANIFEST]), {}
        for _ in range(400):   # parses as JSON; the YAML dumper that writes config.yaml would overflow on it
            deep = {"x": deep}
        record["config"]["deep"] = deep
        files[bundle.MANIFEST] = json.dumps(record).encode()
    rewrite(path, nest)
    assert bundle.main(["inspect", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and message in err, err


def no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_while_packing_is_one_error_line_and_leaves_nothing(tmp_path, monkeypatch):
    results, decisions = make_tree(tmp_path / "b")
    out = tmp_path / "bundle" / "b.tar.gz"
    real, added = tarfile.TarFile.addfile, []

    def fills_up(self, info, fileobj=None):
        added.append(info.name)
        return no_space() if len(added) > 3 else real(self, info, fileobj)
    monkeypatch.setattr(tarfile.TarFile, "addfile", fills_up)
    with pytest.raises(UserError, match=f"cannot write the bundle {re.escape(str(out))}: No space left on device; "
                                        "free space there"):
        bundle.create(out, results, decisions, [results / "data/d"], BUNDLE_CONFIG, "abc", None)
    assert list(out.parent.iterdir()) == []   # neither the bundle nor its temporary file


def test_the_bundle_rule_ends_a_full_disk_in_one_error_line(tmp_path):
    """workflow/scripts/make_bundle.py as Snakemake runs it, on a disk that fills up at the bundle's fsync."""
    results, decisions = make_tree(tmp_path / "b")
    out, log = tmp_path / "bundle" / "b.tar.gz", tmp_path / "bundle.log"
    script = Path(__file__).resolve().parents[1] / "workflow" / "scripts" / "make_bundle.py"
    driver = f"""
import errno, os, runpy, types
def no_space(fd):
    raise OSError(errno.ENOSPC, "No space left on device")
os.fsync = no_space
snakemake = types.SimpleNamespace(
    log=[{str(log)!r}], output=[{str(out)!r}],
    input=types.SimpleNamespace(decisions={list(decisions)!r}, data=[{str(results / "data/d/meta.json")!r}]),
    params=types.SimpleNamespace(results={str(results)!r}, config={json.dumps(BUNDLE_CONFIG)!r}, lock=None))
runpy.run_path({str(script)!r}, init_globals={{"snakemake": snakemake}}, run_name="__main__")
"""
    r = subprocess.run([sys.executable, "-c", driver], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith(f"error: cannot write the bundle {out}: "), r.stderr
    assert log.read_text() == r.stderr and list(out.parent.iterdir()) == []
