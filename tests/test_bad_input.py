"""Bad input never runs code, never corrupts a run, and always gets one `error:` line naming what is wrong."""

import errno
import json
import os
import pickle
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
import yaml
from helpers import WORKFLOW, cell_file, copy_workflow, dump_config, rows_written, run_cli, snakemake

from merit_repro.data import batches
from merit_repro.data.tokens import DataError, prepare
from merit_repro.train.runfiles import CsvLog
from merit_repro.train.checkpoint import atomic_torch_save


def one_error_line(result):
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.stderr, result.stderr
    return lines[0]


# ---------------------------------------------------------------- nothing from input runs as code


class Planted:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.slow
def test_a_planted_pickle_as_checkpoint_runs_nothing(tmp_path, data_dir):
    out, marker = tmp_path / "run", tmp_path / "PWNED"
    out.mkdir()
    with open(out / "ckpt.pt", "wb") as f:
        pickle.dump({"config": Planted(marker)}, f)
    line = one_error_line(run_cli(cell_file(tmp_path, data_dir), out))
    assert not marker.exists()
    assert "ckpt.pt holds objects other than tensors" in line and "delete it to start the cell over" in line


@pytest.mark.slow
def test_a_truncated_checkpoint_names_the_file(tmp_path, data_dir):
    config, out = cell_file(tmp_path, data_dir, keep_checkpoint=True, checkpoint_every=5), tmp_path / "run"
    assert run_cli(config, out).returncode == 0
    (out / "summary.json").unlink()   # as if the run had stopped after its last checkpoint
    ckpt = out / "ckpt.pt"
    ckpt.write_bytes(ckpt.read_bytes()[: ckpt.stat().st_size // 2])
    line = one_error_line(run_cli(config, out))
    assert str(ckpt) in line and "delete it" in line


@pytest.mark.slow
def test_the_dataset_string_never_reaches_a_shell(tmp_path):
    workdir = copy_workflow(tmp_path / "wf")
    config = yaml.safe_load(WORKFLOW.read_text())
    config["data"]["shakespeare-bytes"]["dataset"] = "textfile:x || touch PWNED #"
    (tmp_path / "bad.yaml").write_text(dump_config(config))
    r = snakemake(workdir, "results/data/shakespeare-bytes/meta.json", config=tmp_path / "bad.yaml")
    assert r.returncode != 0
    assert not list(workdir.rglob("PWNED")) and not (tmp_path / "PWNED").exists()
    log = (workdir / "results" / "logs" / "data" / "shakespeare-bytes.log").read_text()
    assert "error: textfile:x || touch PWNED # does not exist" in log


@pytest.mark.slow
def test_paths_with_spaces(tmp_path):
    workdir = copy_workflow(tmp_path / "a folder with spaces")
    config = yaml.safe_load(WORKFLOW.read_text())
    config.update(results="my results", figures="my figures", claim_seeds=[1])
    config["experiments"] = {"one": {"models": ["T"], "tokens": 2048, "optimizers": ["adamw"], "batch_sizes": [8],
                                     "lr_grid": {"adamw": [3.0e-3]}, "artifacts": ["lr_sensitivity"]}}
    (workdir / "spaced config.yaml").write_text(dump_config(config))
    r = snakemake(workdir, config=workdir / "spaced config.yaml")
    assert r.returncode == 0, r.stderr[-3000:]
    assert (workdir / "my figures" / "lr_sensitivity" / "one.png").exists()
    assert (workdir / "my results" / "runs" / "T" / "2048" / "adamw" / "bs8" / "lr3e-3" / "seed0" / "summary.json").exists()


# ---------------------------------------------------------------- runs are never corrupted


@pytest.mark.slow
def test_a_second_trainer_on_the_same_cell_stops_at_once(tmp_path, data_dir):
    config, out = cell_file(tmp_path, data_dir, tokens=8 * 32 * 400), tmp_path / "run"
    first = run_cli(config, out, wait=False)
    deadline = time.time() + 60
    while rows_written(out / "metrics.csv") < 3 and time.time() < deadline:
        time.sleep(0.05)
    start = time.time()
    second = run_cli(config, out)
    line = one_error_line(second)
    assert f"pid {first.pid}" in line and "is being trained by" in line and time.time() - start < 20
    assert first.wait(120) == 0
    steps = [int(row.split(",")[0]) for row in (out / "metrics.csv").read_text().splitlines()[1:]]
    assert steps == list(range(401))   # one header, no step written twice


def test_a_full_disk_leaves_no_temporary_checkpoint(tmp_path, monkeypatch):
    def no_space(obj, f):
        f.write(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(torch, "save", no_space)
    with pytest.raises(OSError):
        atomic_torch_save({"x": torch.zeros(3)}, tmp_path / "ckpt.pt")
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    atomic_torch_save({"x": torch.zeros(3)}, tmp_path / "ckpt.pt")   # the next try works
    assert torch.load(tmp_path / "ckpt.pt", weights_only=True)["x"].shape == (3,)


def test_a_full_disk_leaves_no_temporary_token_file(tmp_path, monkeypatch):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(6):
        (corpus / f"doc{i}.txt").write_text(f"document {i} " * 200)
    from merit_repro.data.tokenizers import ByteTokenizer

    def no_space(self, texts, num_threads=1):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(ByteTokenizer, "encode_ordinary_batch", no_space)
    with pytest.raises(OSError):
        prepare(f"textfile:{corpus}", "bytes", tmp_path / "out")
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.endswith(".tmp")]
    monkeypatch.undo()
    assert prepare(f"textfile:{corpus}", "bytes", tmp_path / "out")["splits"]["train"]["tokens"] > 0


def test_a_failed_log_restart_leaves_no_temporary_file(tmp_path, monkeypatch):
    log = CsvLog(tmp_path / "metrics.csv", ["step"])
    monkeypatch.setattr("pathlib.Path.write_text", lambda self, text: (_ for _ in ()).throw(OSError(errno.ENOSPC, "full")))
    with pytest.raises(OSError):
        log.start()
    assert list(tmp_path.iterdir()) == []


def test_prepare_notices_a_changed_source_and_a_corrupted_split(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(6):
        (corpus / f"doc{i}.txt").write_text(f"document {i} " * 200)
    out = tmp_path / "out"
    prepare(f"textfile:{corpus}", "bytes", out)
    prepare(f"textfile:{corpus}", "bytes", out)   # same source, intact: nothing to do
    (corpus / "doc3.txt").write_text("edited " * 300)
    with pytest.raises(DataError, match="source of .* changed since it was prepared"):
        prepare(f"textfile:{corpus}", "bytes", out)
    prepare(f"textfile:{corpus}", "bytes", out, force=True)
    train = out / "train.bin"
    stat = train.stat()
    tokens = bytearray(train.read_bytes())
    tokens[len(tokens) // 2] ^= 0xFF   # same size, and the same mtime too
    train.write_bytes(bytes(tokens))
    os.utime(train, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    with pytest.raises(DataError, match="does not match the sha256"):
        prepare(f"textfile:{corpus}", "bytes", out)


@pytest.mark.slow
def test_results_are_strict_json(tmp_path, data_dir):
    out = tmp_path / "run"
    assert run_cli(cell_file(tmp_path, data_dir, optimizer="adamw", lr=50.0, warmup_frac=0.0), out).returncode == 0

    def refuse(name):
        raise ValueError(f"{name} is not JSON")
    for name in ("eval.json", "summary.json"):
        json.loads((out / name).read_text(), parse_constant=refuse)


# ---------------------------------------------------------------- one error line, before any work


@pytest.mark.slow
def test_train_cli_errors(tmp_path, data_dir):
    assert "No such file or directory" in one_error_line(run_cli(tmp_path / "missing.yaml", tmp_path / "a"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("lr: [1, 2\n")
    assert f"{bad}, line 2: not valid YAML (expected ',' or ']'" in one_error_line(run_cli(bad, tmp_path / "b"))
    line = one_error_line(run_cli(cell_file(tmp_path, data_dir), tmp_path / "c", "--set", "batch_size=big"))
    assert "batch_size='big' must be int" in line
    assert "betas" in one_error_line(run_cli(cell_file(tmp_path, data_dir, betas=[0.9]), tmp_path / "d"))
    assert not (tmp_path / "c" / "metrics.csv").exists()


def test_data_cli_names_a_file_that_is_not_utf8(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "good.txt").write_text("fine text " * 50)
    (corpus / "latin1.txt").write_bytes("caf\xe9 ".encode("latin-1") * 50)
    r = subprocess.run([sys.executable, "-m", "merit_repro.data", "prepare", "--dataset", f"textfile:{corpus}",
                        "--tokenizer", "bytes", "--out", str(tmp_path / "out")], capture_output=True, text=True)
    assert "latin1.txt is not UTF-8 text" in one_error_line(r)


def test_cost_cli_errors(tmp_path):
    cost = [sys.executable, "-m", "merit_repro.plan.cost", "--configfile"]
    assert "missing.yaml" in one_error_line(subprocess.run(cost + [str(tmp_path / "missing.yaml")],
                                                            capture_output=True, text=True))
    config = yaml.safe_load(WORKFLOW.read_text())
    config["experiments"]["sweep"]["lr_grid"]["adamw"] = [3e-3, -1.0]
    (tmp_path / "c.yaml").write_text(dump_config(config))
    line = one_error_line(subprocess.run(cost + [str(tmp_path / "c.yaml")], capture_output=True, text=True))
    assert "experiments.sweep.lr_grid.adamw[1]=-1.0 must be a number > 0" in line
    line = one_error_line(subprocess.run(cost + [str(WORKFLOW), "--cores", "0"], capture_output=True, text=True))
    assert "--cores 0 must be > 0" in line


def test_cost_from_a_gpu_check_errors(tmp_path):
    """--from-gpu-check: a file that is not JSON, JSON that is not a check's table, a table without the tokens/s of
    the config's largest model (a failed speed row is none)."""
    cost = [sys.executable, "-m", "merit_repro.plan.cost", "--configfile", str(WORKFLOW), "--from-gpu-check"]
    speed = {"part": 6, "check": "demo-tiny eager: tokens/s, MFU, peak GiB (3 steps of 4 x 64)", "limit": "finite loss"}
    files = {"table.txt": "part  result  check\n", "other.json": json.dumps({"rows": 3}),
             "no_rate.json": json.dumps({"device": "cpu", "rows": [
                 {**speed, "value": "RuntimeError: out of memory", "result": "FAIL"},
                 {**speed, "check": "gpt2-small eager: tokens/s", "value": "1,000, 1%, 2", "result": "ok"}]})}
    says = {"table.txt": "table.txt is not JSON", "other.json": "other.json is not a GPU check's table",
            "no_rate.json": "no_rate.json has no tokens/s of demo-tiny (the config's largest model, T-qk); its part 6 "
                            "measured gpt2-small eager"}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
        line = one_error_line(subprocess.run(cost + [str(tmp_path / name)], capture_output=True, text=True))
        assert says[name] in line, line
    line = one_error_line(subprocess.run(cost + [str(tmp_path / "none.json")], capture_output=True, text=True))
    assert "none.json" in line


def test_the_validation_offsets_sample_the_whole_split():
    offsets = batches.validation_offsets(100_000, 64, 4096)
    assert len(offsets) == 64 and offsets[-1] > 90_000 and (np.diff(offsets) >= 64).all()


@pytest.mark.slow
def test_an_optimizer_check_that_crashes_stops_the_workflow_in_one_line(tmp_path):
    """A setting the optimizer's own class refuses with a RuntimeError (not a named hyperparameter problem): the
    preflight prints the exception line and where the whole traceback is, not a cut-off traceback."""
    workdir = copy_workflow(tmp_path / "wf")
    config = yaml.safe_load(WORKFLOW.read_text())
    config["optimizers"]["adam2"] = {"class": "torch.optim.Adam", "fused": True, "foreach": True}
    config["experiments"]["sweep"]["optimizers"].append("adam2")
    config["experiments"]["sweep"]["lr_grid"]["adam2"] = [1e-3]
    (tmp_path / "crash.yaml").write_text(dump_config(config))
    r = snakemake(workdir, "results/data/shakespeare-bytes/meta.json", config=tmp_path / "crash.yaml")
    errors = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    log = workdir / "results" / "logs" / "preflight" / "optimizer_check.log"
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert errors == [f"error: the optimizer check failed (RuntimeError: `fused` and `foreach` cannot be `True` "
                      f"together.); its command and full output are in results/logs/preflight/optimizer_check.log"]
    assert log.read_text().startswith("$ ") and "Traceback" in log.read_text()


def test_the_cost_tool_never_prices_from_an_impossible_rate(tmp_path):
    """A non-finite or physically impossible rate, MFU or core count is refused in one line naming the flag: a cost
    computed from it would print 0 GPU-hours."""
    cost = [sys.executable, "-m", "merit_repro.plan.cost", "--configfile", str(WORKFLOW)]
    check = tmp_path / "check.json"
    check.write_text(json.dumps({"device": "gpu", "rows": [
        {"part": 6, "check": "demo-tiny eager: tokens/s, MFU, peak GiB", "value": "9" * 400 + ", 1%, 2",
         "result": "ok"}]}))
    for flags, says in ((["--tokens-per-s-per-gpu", "inf"], "--tokens-per-s-per-gpu inf tokens/s"),
                        (["--peak-flops", "inf"], "--peak-flops inf must be a finite number"),
                        (["--cpu-flops", "inf"], "--cpu-flops inf must be a finite number"),
                        (["--rate-of", "gpt2-small=1e308"], "--rate-of 1e+308 tokens/s of gpt2-small"),
                        (["--mfu", "5"], "--mfu 5 must be a finite number > 0 and at most 1"),
                        (["--from-gpu-check", str(check)], f"--from-gpu-check {check}: inf tokens/s")):
        line = one_error_line(subprocess.run(cost + flags, capture_output=True, text=True))
        assert says in line, line
    ok = subprocess.run(cost + ["--tokens-per-s-per-gpu", "180000"], capture_output=True, text=True)
    assert ok.returncode == 0 and "total" in ok.stdout
