"""Every number in the report comes from complete runs of the configured cells on the data they claim:
run files vouched for by their summary, the corpus in every cell's identity, config files read as data,
and one `error:` line for each way input goes wrong."""

import errno
import json
import os
import shutil
import stat
import subprocess
import sys
import time

import pytest
import yaml

from merit_repro import configfiles, data, integrity, memory, train
from merit_repro.cell import CellConfig
from merit_repro.utils import UserError, atomic_write_bytes
from test_train import TINY, cell_file, in_process_run, launch, run_cli, warm_dir  # noqa: F401 (a fixture)

SCHEMA = os.path.join(os.path.dirname(__file__), "..", "workflow", "schemas", "config.schema.yaml")


def cli_error(main, argv, capsys):
    """The one `error:` line a CLI main prints for bad input (and its exit code 2)."""
    code = main(argv)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, data_dir):
    """One complete cell on a private copy of the demo corpus (the tests prepare that copy again)."""
    tmp = tmp_path_factory.mktemp("finished")
    corpus = tmp / "corpus"
    shutil.copytree(data_dir, corpus)
    r = run_cli(cell_file(tmp, corpus), tmp / "run")
    assert r.returncode == 0, r.stderr
    return tmp / "run", corpus


def private_copy(finished_run, tmp_path):
    run, corpus = finished_run
    shutil.copytree(corpus, tmp_path / "corpus")
    shutil.copytree(run, tmp_path / "run")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    settings = {**summary["config"], "data_dir": str(tmp_path / "corpus")}
    return tmp_path / "run", tmp_path / "corpus", settings


def result_keys(settings):
    from merit_repro.cell import result_settings

    return {k: v for k, v in result_settings(settings).items() if k != "data_dir"}


# ---------------------------------------------------------------- run files that prove their completeness


def test_summary_vouches_for_every_run_file(finished_run):
    run, _ = finished_run
    summary = json.loads((run / "summary.json").read_text())
    assert set(summary["files"]) == set(integrity.VOUCHED)
    assert summary["files"]["metrics.csv"]["rows"] == 41 and summary["files"] == integrity.vouch(run)
    assert integrity.file_problems(run, summary) == []


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


# ---------------------------------------------------------------- the corpus is part of a cell's identity


def prepare_again(corpus):
    data.prepare("shakespeare", "bytes", corpus, max_train_tokens=50_000, force=True)


def trained_on_a_copy(tmp_path, data_dir, capsys, **overrides):
    """A complete cell (trained in this process) on a private copy of the demo corpus: (config, run, corpus)."""
    corpus = tmp_path / "corpus"
    shutil.copytree(data_dir, corpus)
    config, out = cell_file(tmp_path, corpus, tokens=8 * 32 * 10, **overrides), tmp_path / "run"
    assert train.main(["--config", str(config), "--out", str(out)]) == 0
    capsys.readouterr()
    return config, out, corpus


def test_a_finished_cell_refuses_a_corpus_prepared_again(tmp_path, data_dir, capsys):
    config, run, corpus = trained_on_a_copy(tmp_path, data_dir, capsys)
    then = json.loads((run / "summary.json").read_text())["data_fingerprint"]
    assert train.main(["--config", str(config), "--out", str(run)]) == 0   # the same corpus: complete
    assert "already complete" in capsys.readouterr().out
    prepare_again(corpus)
    now = integrity.cell_fingerprints({"data_dir": str(corpus)})
    line = cli_error(train.main, ["--config", str(config), "--out", str(run)], capsys)
    assert str(then) in line and str(now) in line and f"delete {run}" in line


def test_a_checkpoint_refuses_to_resume_on_a_corpus_prepared_again(tmp_path, data_dir, capsys):
    config, out, corpus = trained_on_a_copy(tmp_path, data_dir, capsys, keep_checkpoint=True, checkpoint_every=4)
    (out / "summary.json").unlink()   # as if it had stopped after its last checkpoint
    prepare_again(corpus)
    line = cli_error(train.main, ["--config", str(config), "--out", str(out)], capsys)
    assert "ckpt.pt was trained on corpus" in line and "resuming would mix two corpora" in line


def test_data_verify_reads_every_byte(tmp_path, data_dir, capsys):
    corpus = tmp_path / "corpus"
    shutil.copytree(data_dir, corpus)
    data.verify(corpus)   # leaves its size+mtime marker
    path = corpus / "train.bin"
    st = path.stat()
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    path.write_bytes(bytes(raw))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))   # same size, same mtime
    line = cli_error(data.main, ["verify", str(corpus)], capsys)
    assert "does not match the sha256" in line and str(path) in line


def test_a_read_only_corpus_can_be_verified_and_trained_on(tmp_path, data_dir, monkeypatch):
    corpus = tmp_path / "corpus"
    shutil.copytree(data_dir, corpus)
    (corpus / data.VERIFIED_MARKER).unlink(missing_ok=True)

    def read_only(path, *args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system", str(path))
    monkeypatch.setattr(data, "atomic_write_json", read_only)
    assert data.verify(corpus)["splits"]["train"]["tokens"] > 0
    assert not (corpus / data.VERIFIED_MARKER).exists()


# ---------------------------------------------------------------- config files that are data


def test_config_files_with_duplicates_aliases_tags_or_templates_are_refused(tmp_path, monkeypatch):
    cases = {"dup": "a: 1\nb: {c: 2, c: 3}\n",
             "alias": "a: &x [1, 2]\nb: *x\n",
             "bomb": "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
                 f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8)),
             "tag": "a: !!python/object/apply:os.system [echo PWNED]\n",
             "yte": "__use_yte__: true\na: ?1 + 1\n"}
    paths = {}
    for name, text in cases.items():
        paths[name] = tmp_path / f"{name}.yaml"
        paths[name].write_text(text)
    start = time.perf_counter()
    found = {name: configfiles.problems(path) for name, path in paths.items()}
    assert time.perf_counter() - start < 5   # the alias bomb is refused before anything expands it
    assert found["dup"] == [f"{paths['dup']}, line 2: duplicate key b.c (first at line 2); YAML would keep only the "
                            "last one: keep one"]
    assert "line 1: YAML anchors and aliases are refused" in found["alias"][0]
    assert "line 1: YAML anchors and aliases are refused" in found["bomb"][0]
    assert "asks for a Python object" in found["tag"][0]
    assert "__use_yte__ makes Snakemake run the file" in found["yte"][0]
    latin1 = tmp_path / "latin1.yaml"
    latin1.write_bytes("name: caf\xe9\n".encode("latin-1"))
    assert configfiles.problems(latin1) == [f"{latin1}: not UTF-8 text (invalid continuation byte at byte 9); save it "
                                            "as UTF-8"]
    monkeypatch.setenv(configfiles.ALLOW_TEMPLATES, "1")
    assert configfiles.problems(paths["yte"]) == []


def test_the_project_configs_are_plain_data():
    root = os.path.join(os.path.dirname(__file__), "..")
    for path in ["config/config.yaml", "config/paper.yaml", "tests/workflow_config.yaml", SCHEMA,
                 "profiles/default/config.yaml", "profiles/slurm/config.yaml"]:
        assert configfiles.problems(os.path.join(root, path)) == [], path


def tiny_config():
    from test_workflow import TINY as TINY_WORKFLOW

    return yaml.safe_load(TINY_WORKFLOW.read_text())


@pytest.mark.parametrize("edit, message", [
    (lambda c: c["models"].update({"L" * 300: c["models"]["T"]}), "models: 'LLLL"),
    (lambda c: c["data"].update({"sh{x}": c["data"]["shakespeare-bytes"]}), "data: 'sh{x}' does not match"),
    (lambda c: c["data"].update({False: c["data"]["shakespeare-bytes"]}), "data: False is not of type 'string'"),
    (lambda c: c.update(results="res{model}"), "results: 'res{model}' does not match"),
    (lambda c: c["experiments"]["sweep"]["paper"].update(batch_sizes={8: "lots"}),
     "experiments.sweep.paper.batch_sizes.8: 'lots' is not of type 'integer'"),
    (lambda c: c["experiments"]["sweep"]["paper"].update(tokens="lots"),
     "experiments.sweep.paper.tokens: 'lots' is not of type 'number', 'null'"),
    (lambda c: c["experiments"]["sweep"].update(tokens=float("inf")), "experiments.sweep.tokens: inf is greater than"),
    (lambda c: c["experiments"]["sweep"].update(seeds=[2**63]), "experiments.sweep.seeds.0: 9223372036854775808 is greater"),
    (lambda c: c["experiments"]["sweep"].update(batch_sizes=[10**12]), "experiments.sweep.batch_sizes.0: 1000000000000 is greater"),
])
def test_the_schema_names_each_bad_key_in_one_line(edit, message):
    config = tiny_config()
    edit(config)
    found = configfiles.schema_problems(config, SCHEMA)
    assert len(found) == 1 and found[0].startswith(message) and "\n" not in found[0], found


@pytest.mark.parametrize("overrides, message", [
    ({"n_layer": 0}, "n_layer=0 must be >= 1"), ({"n_head": 0}, "n_head=0 must be >= 1"),
    ({"n_layer": -2}, "n_layer=-2 must be >= 1"), ({"n_embd": 65}, "n_embd=65 is not divisible by n_head=2"),
    ({"tokens": float("nan")}, "tokens=nan must be a finite number"),
    ({"tokens": float("inf")}, "tokens=inf must be a finite number"),
    ({"seed": -1}, "seed=-1 must be in [0, 2**63)"), ({"seed": 10**23}, "seed=100000000000000000000000 must be in"),
    ({"batch_size": 10**12}, "batch_size=1000000000000 is more sequences"),
])
def test_a_cell_names_each_bad_shape_and_number(overrides, message):
    problems = CellConfig.from_dict({**TINY, **overrides}).problems()
    assert [m for _, m in problems] == [message] or any(m.startswith(message) for _, m in problems), problems


def test_the_workflow_preflight_covers_the_grid_numbers():
    from merit_repro import grid

    config = tiny_config()
    config["experiments"]["sweep"]["tokens"] = float("nan")
    with pytest.raises(ValueError, match=r"experiments.sweep.tokens=nan must be a finite number"):
        grid.validate(config)
    config = tiny_config()
    config["models"]["T"]["n_layer"] = 0
    with pytest.raises(ValueError, match=r"models.T.n_layer: n_layer=0 must be >= 1"):
        grid.validate(config)
    config = tiny_config()
    config["models"]["T"]["n_layers"] = 4   # a typo of n_layer used to be a TypeError while Snakemake parsed
    with pytest.raises(ValueError, match=r"models.T.n_layers is not a cell setting; known settings: batch_size"):
        grid.validate(config)


def test_a_huge_batch_is_split_into_micro_batches_at_once():
    start = time.perf_counter()
    assert memory.divisors_of(2 * 3**20)[:2] == [2 * 3**20, 3**20] and memory.divisors_of(1) == [1]
    assert time.perf_counter() - start < 1


@pytest.mark.parametrize("setting, message", [
    ("n_layer=-2", "n_layer=-2 must be >= 1"), ("seed=-1", "seed=-1 must be in"), ("tokens=.nan", "tokens=nan must"),
    ("tokens=1e400", "tokens=inf must be a finite number"), ("seed=1e23", "seed='1e23' must be int"),
    ("batch_size=1000000000000", "batch_size=1000000000000 is more sequences"),
])
def test_the_trainer_refuses_bad_numbers_in_one_line(tmp_path, data_dir, capsys, setting, message):
    line = cli_error(train.main, ["--config", str(cell_file(tmp_path, data_dir)), "--out", str(tmp_path / "run"),
                                  "--set", setting], capsys)
    assert message in line and not (tmp_path / "run").exists()


# ---------------------------------------------------------------- one error line, naming the file


def test_garbage_in_a_summary_is_named_on_rerun(tmp_path, data_dir, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "summary.json").write_text("{not json")
    line = cli_error(train.main, ["--config", str(cell_file(tmp_path, data_dir)), "--out", str(out)], capsys)
    assert f"{out / 'summary.json'} cannot be read as a run summary" in line and "delete it" in line
    from merit_repro import tuning

    with pytest.raises(UserError, match="summary.json cannot be read as a run summary"):
        tuning.read_results({("1e-3", 0): out})


def test_a_full_disk_during_a_checkpoint_is_named(tmp_path, data_dir, capsys, monkeypatch):
    import merit_repro.utils as utils

    real_open = open

    def full_disk_open(path, mode="r", *args, **kwargs):
        f = real_open(path, mode, *args, **kwargs)
        if "ckpt.pt" in str(path) and "w" in mode:
            def write(data, f=f):
                raise OSError(errno.ENOSPC, "No space left on device")
            return type("Full", (), {"write": staticmethod(write), "__enter__": lambda self: self,
                                     "__exit__": lambda self, *a: f.close(), "flush": f.flush,
                                     "fileno": f.fileno})()
        return f
    monkeypatch.setattr(utils, "open", full_disk_open, raising=False)
    config = cell_file(tmp_path, data_dir, checkpoint_every=5)
    line = cli_error(train.main, ["--config", str(config), "--out", str(tmp_path / "run")], capsys)
    assert line.startswith("error: the disk is full (No space left on device) writing ") and "ckpt.pt" in line
    assert not list((tmp_path / "run").glob(".ckpt.pt*"))


def test_a_full_disk_during_prepare_is_named(tmp_path, capsys, monkeypatch):
    from merit_repro.tokenizers import ByteTokenizer

    def no_space(self, texts, num_threads=1):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(ByteTokenizer, "encode_ordinary_batch", no_space)
    line = cli_error(data.main, ["prepare", "--dataset", "shakespeare", "--tokenizer", "bytes",
                                 "--out", str(tmp_path / "out")], capsys)
    assert line.startswith("error: the disk is full") and "train.bin" in line


def test_an_out_folder_on_a_read_only_file_system_is_named(tmp_path, data_dir, capsys, monkeypatch):
    import pathlib

    def read_only(self, *args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system", str(self))
    monkeypatch.setattr(pathlib.Path, "mkdir", read_only)
    line = cli_error(train.main, ["--config", str(cell_file(tmp_path, data_dir)), "--out", str(tmp_path / "ro")],
                     capsys)
    assert line.startswith("error: the file system is read-only") and str(tmp_path / "ro") in line


def test_launch_with_gpus_on_a_machine_without_them_is_one_line(tmp_path, data_dir):
    import torch

    if torch.cuda.device_count() >= 2:
        pytest.skip("this machine has the GPUs")
    cell = json.dumps({**TINY, "data_dir": str(data_dir)})
    env = {k: v for k, v in os.environ.items() if k not in ("MERIT_GPUS", "CUDA_VISIBLE_DEVICES", "SLURM_JOB_ID")}
    r = subprocess.run([sys.executable, "-m", "merit_repro.launch", "--cell", cell, "--out", str(tmp_path / "run"),
                        "--gpus", "2"], capture_output=True, text=True, env=env)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode == 2 and len(lines) == 1 and "this cell needs 2 GPUs but 0 are visible" in lines[0], r.stderr


# ---------------------------------------------------------------- files honour the umask; the warm trainer is a fresh process


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o027, 0o640), (0o077, 0o600)])
def test_files_honour_the_umask(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        atomic_write_bytes(tmp_path / "summary.json", b"{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "summary.json").stat().st_mode) == mode


def test_the_warm_trainer_takes_the_launchers_umask(tmp_path, data_dir, warm_dir):
    """The same warm server forks both trainers: each writes its files with its own launcher's umask."""
    modes = {}
    for umask in (0o077, 0o022):
        old = os.umask(umask)
        try:
            r = launch(warm_dir, data_dir, tmp_path / f"run{umask:o}", warm=True, tokens=8 * 32 * 4)
        finally:
            os.umask(old)
        assert r.returncode == 0 and "forked from the warm trainer" in r.stdout, r.stdout + r.stderr
        modes[umask] = {name: stat.S_IMODE((tmp_path / f"run{umask:o}" / name).stat().st_mode)
                        for name in ("summary.json", "eval.json", "cell.yaml", "metrics.csv")}
    assert set(modes[0o077].values()) == {0o600} and set(modes[0o022].values()) == {0o644}, modes


def test_a_forked_trainer_takes_the_launchers_limits_or_declines(monkeypatch):
    import resource

    from merit_repro import warmstart

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    request = warmstart.process_limits()
    request["rlimits"]["RLIMIT_NOFILE"] = [min(soft, 64), hard]
    pid = os.fork()
    if pid == 0:   # the child, as the server forks it
        ok = warmstart.adopt_limits(request) is None and resource.getrlimit(resource.RLIMIT_NOFILE)[0] == min(soft, 64)
        os._exit(0 if ok else 1)
    assert os.waitpid(pid, 0)[1] == 0

    def refused(which, limits):
        raise ValueError("not allowed to raise maximum limit")
    monkeypatch.setattr(resource, "setrlimit", refused)
    old = os.umask(0o022)
    try:
        assert "not allowed" in warmstart.adopt_limits(request)
    finally:
        os.umask(old)


def test_the_socket_folder_is_checked_without_following_a_symlink(tmp_path, monkeypatch):
    from merit_repro import warmstart

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (tmp_path / f"merit-repro-{os.getuid()}").symlink_to(elsewhere)
    monkeypatch.setattr("tempfile.gettempdir", lambda: str(tmp_path))
    with pytest.raises(PermissionError, match="is not a private folder of this user"):
        warmstart.socket_path()


# ---------------------------------------------------------------- the report's needs, before any training


def test_steps_to_target_without_merit_is_made(tmp_path):
    from synthetic import build, make_artifact

    config = tiny_config()
    config["experiments"] = {"sweep": {**config["experiments"]["sweep"], "optimizers": ["adamw"],
                                       "lr_grid": {"adamw": [3e-3]}, "artifacts": ["steps_to_target"]}}
    paths = build(tmp_path, config, lambda group, lr, seed: 3.0 + 0.01 * seed)
    verdict = make_artifact(paths, config, "steps_to_target", "sweep")
    assert verdict["artifact"] == "steps_to_target" and (tmp_path / "paper_figures" / "steps_to_target").is_dir()


def test_in_process_runs_still_train(tmp_path, data_dir):
    """The shape checks let every named size through unchanged (n_layer etc. null: the size's own)."""
    run = in_process_run(tmp_path, data_dir, tokens=8 * 32 * 2)
    assert run.model_config.n_layer == 2 and run.run()["status"] == "ok"


def test_a_cell_file_with_a_duplicate_key_is_refused(tmp_path, capsys):
    cell = tmp_path / "cell.yaml"
    cell.write_text("model: demo-tiny\nlr: 1.0e-3\nlr: 2.0e-3\n")
    line = cli_error(train.main, ["--config", str(cell), "--out", str(tmp_path / "run")], capsys)
    assert f"{cell}, line 3: duplicate key lr (first at line 2)" in line and not (tmp_path / "run").exists()


def test_the_cost_tool_reads_a_config_as_the_workflow_does(tmp_path, capsys):
    from merit_repro import cost

    from test_workflow import TINY as TINY_WORKFLOW

    bad = tmp_path / "bad.yaml"
    bad.write_text(TINY_WORKFLOW.read_text().replace("results: results", "results: res{model}"))
    line = cli_error(cost.main, ["--configfile", str(bad)], capsys)
    assert "results: 'res{model}' does not match" in line


@pytest.mark.parametrize("damage", ["metrics.csv cut", "eval.json garbage"])
def test_a_finished_run_with_damaged_files_is_not_complete(tmp_path, data_dir, capsys, damage):
    config, run, corpus = trained_on_a_copy(tmp_path, data_dir, capsys)
    if damage == "metrics.csv cut":
        (run / "metrics.csv").write_text("".join((run / "metrics.csv").read_text().splitlines(keepends=True)[:5]))
    else:
        (run / "eval.json").write_bytes(b"\x00garbage")
    line = cli_error(train.main, ["--config", str(config), "--out", str(run)], capsys)
    name = damage.split()[0]
    assert f"{run} is a finished run whose files no longer match its summary.json ({name} has" in line
    assert f"delete {run / 'summary.json'} to retrain the cell" in line


def test_a_corpus_prepared_with_other_options_than_the_config_is_refused(tmp_path):
    from merit_repro import grid

    config = {**tiny_config(), "results": str(tmp_path / "results")}
    grid.validate(config)   # nothing prepared yet
    data.prepare("shakespeare", "bytes", tmp_path / "results" / "data" / "shakespeare-bytes", max_train_tokens=50_000)
    with pytest.raises(ValueError, match=r"data.shakespeare-bytes: .* was prepared with .*'max_train_tokens': 50000.* but "
                                         r"the config asks for .*'max_train_tokens': None"):
        grid.validate(config)
    config["data"]["shakespeare-bytes"]["max_train_tokens"] = 50_000
    grid.validate(config)


def test_a_number_yaml_reads_as_text_gets_the_fix():
    config = tiny_config()
    config["experiments"]["sweep"]["batch_sizes"] = [4, "1e12"]
    found = configfiles.schema_problems(config, SCHEMA)
    assert found == ["experiments.sweep.batch_sizes.1: '1e12' is not of type 'integer' (YAML reads 1e12 as text: "
                     "write it with a dot and a signed exponent, e.g. 1.0e+12)"], found
