import csv
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from merit_repro.data import prepare
from merit_repro.runfiles import TIMING_COLUMNS

TINY = dict(model="demo-tiny", block_size=32, batch_size=8, tokens=8 * 32 * 40, eval_every=10, mal_every=10,
            eval_tokens=2048, mal_batch=2, checkpoint_every=3, lr=3e-3)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("data") / "shakespeare-bytes"
    prepare("shakespeare", "bytes", out)
    return out


def cell_file(tmp_path, data_dir, **overrides):
    path = tmp_path / f"cell-{len(list(tmp_path.glob('cell-*')))}.yaml"
    path.write_text(yaml.safe_dump({**TINY, "data_dir": str(data_dir), **overrides}))
    return path


def run_cli(config, out, *extra, wait=True, env=None):
    cmd = [sys.executable, "-m", "merit_repro.train", "--config", str(config), "--out", str(out), *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    if not wait:
        return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    return subprocess.run(cmd, capture_output=True, text=True, env=env)


def read_rows(path, drop=TIMING_COLUMNS):
    with open(path) as f:
        return [{k: v for k, v in row.items() if k not in drop} for row in csv.DictReader(f)]


def rows_written(path):
    return max(0, len(path.read_text().splitlines()) - 1) if path.exists() else 0


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory, data_dir):
    tmp = tmp_path_factory.mktemp("ref")
    config = cell_file(tmp, data_dir)
    r = run_cli(config, tmp / "run")
    assert r.returncode == 0, r.stderr
    return config, tmp / "run"


def test_outputs_and_summary(reference_run):
    _, run = reference_run
    for name in ["metrics.csv", "mal.csv", "diagnostics.csv", "summary.json", "eval.json", "train.log"]:
        assert (run / name).exists(), name
    assert not (run / "ckpt.pt").exists()  # deleted once complete
    summary = yaml.safe_load((run / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["steps"] == 40 and summary["tokens"] == 40 * 8 * 32
    assert summary["final_val_loss"] < 5.0 and summary["config"]["optimizer"] == "merit"
    rows = read_rows(run / "metrics.csv")
    assert [r["step"] for r in rows] == [str(s) for s in range(41)]
    assert [r["step"] for r in rows if r["val_loss"]] == ["0", "10", "20", "30", "40"]
    assert rows[10]["clip_fraction"] != "" and rows[10]["floor_fraction"] != ""
    mal = read_rows(run / "mal.csv")
    assert {r["step"] for r in mal} == {"0", "10", "20", "30", "40"} and len(mal) == 5 * 2 * 2
    log = (run / "train.log").read_text()
    assert log.startswith("# merit_repro.train") and "# versions:" in log and "# device:" in log


def test_rerun_of_complete_cell_is_a_no_op(reference_run):
    config, run = reference_run
    before = (run / "metrics.csv").stat().st_mtime_ns
    r = run_cli(config, run)
    assert r.returncode == 0 and "already complete" in r.stdout
    assert (run / "metrics.csv").stat().st_mtime_ns == before


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_killed_run_resumes_to_identical_metrics(tmp_path, reference_run, sig):
    config, ref = reference_run
    out = tmp_path / "run"
    proc = run_cli(config, out, wait=False)
    deadline = time.time() + 120
    while rows_written(out / "metrics.csv") < 14 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert proc.poll() is None, "the run finished before it could be killed"
    proc.send_signal(sig)
    code = proc.wait(60)
    if sig == signal.SIGTERM:
        assert code == 143 and "checkpoint saved" in (out / "train.log").read_text()
    assert (out / "ckpt.pt").exists()
    if sig == signal.SIGKILL:  # as Snakemake does with the declared outputs of a failed job
        for name in ["metrics.csv", "mal.csv", "diagnostics.csv"]:
            (out / name).unlink()
    r = run_cli(config, out)
    assert r.returncode == 0, r.stderr
    assert "resuming from step" in (out / "train.log").read_text()
    for name in ["metrics.csv", "mal.csv", "diagnostics.csv"]:
        assert read_rows(out / name) == read_rows(ref / name), name


def test_micro_batches_and_two_processes_match_one_device(tmp_path, data_dir):
    config = cell_file(tmp_path, data_dir, tokens=8 * 32 * 10, eval_every=5)
    for out, extra in [("single", []), ("micro", ["--set", "micro_batch_size=2"])]:
        r = run_cli(config, tmp_path / out, *extra)
        assert r.returncode == 0, r.stderr
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "merit_repro.train", "--config", str(config), "--out", str(tmp_path / "ddp")]
    r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    summary = yaml.safe_load((tmp_path / "ddp" / "summary.json").read_text())
    assert summary["world_size"] == 2
    expected = read_rows(tmp_path / "single" / "metrics.csv")
    for variant in ["micro", "ddp"]:
        rows = read_rows(tmp_path / variant / "metrics.csv")
        for got, want in zip(rows, expected):
            for key in ["train_loss", "grad_norm"]:
                if want[key]:
                    assert float(got[key]) == pytest.approx(float(want[key]), rel=2e-4), (variant, key, got["step"])
        assert float(rows[10]["val_loss"]) == pytest.approx(float(expected[10]["val_loss"]), rel=2e-4)


def test_divergence_ends_the_cell_with_status_and_exit_zero(tmp_path, data_dir):
    config = cell_file(tmp_path, data_dir, optimizer="adamw", lr=50.0, warmup_frac=0.0)
    r = run_cli(config, tmp_path / "run")
    assert r.returncode == 0, r.stderr
    summary = yaml.safe_load((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "diverged" and summary["final_val_loss"] is None
    assert summary["steps"] < 40 and not (tmp_path / "run" / "ckpt.pt").exists()


@pytest.mark.parametrize("overrides,message", [
    (dict(block_size=10**6, tokens=1e7, batch_size=8), "block_size=1000000 is larger than the val split"),
    (dict(micro_batch_size=3), "not divisible by micro_batch_size=3"),
    (dict(model="gpt5"), "model='gpt5' is unknown"),
    (dict(optimizer="sgd"), "optimizer='sgd' is unknown"),
    (dict(tokenizer="gpt2"), "prepared with tokenizer 'bytes'"),
    (dict(tokens=10), "less than one step"),
    (dict(learning_rate=1.0), "unknown cell config keys"),
])
def test_bad_input_fails_before_training(tmp_path, data_dir, overrides, message):
    config = cell_file(tmp_path, data_dir, **overrides)
    r = run_cli(config, tmp_path / "run")
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert not (tmp_path / "run" / "metrics.csv").exists()


def test_checkpoint_of_another_cell_is_not_overwritten(tmp_path, data_dir):
    config = cell_file(tmp_path, data_dir, keep_checkpoint=True, tokens=8 * 32 * 4)
    assert run_cli(config, tmp_path / "run").returncode == 0
    (tmp_path / "run" / "summary.json").unlink()
    r = run_cli(config, tmp_path / "run", "--set", "lr=1e-3")
    assert r.returncode == 2 and "checkpoint of a different cell" in r.stderr


def test_lambada_in_the_cell_and_evaluate_cli_from_saved_weights(tmp_path, data_dir):
    import json

    src = tmp_path / "lambada.jsonl"
    src.write_text("\n".join(json.dumps({"text": t}) for t in ["to be or not to be that is the question",
                                                               "all the world is a stage"]))
    prepare(f"lambada:{src}", "bytes", tmp_path / "lambada")
    config = cell_file(tmp_path, data_dir, tokens=8 * 32 * 6, save_model=True, lambada_dir=str(tmp_path / "lambada"))
    r = run_cli(config, tmp_path / "run")
    assert r.returncode == 0, r.stderr
    in_cell = json.loads((tmp_path / "run" / "eval.json").read_text())
    assert in_cell["lambada_examples"] == 2 and in_cell["lambada_ppl"] > 1
    r = subprocess.run([sys.executable, "-m", "merit_repro.evaluate", "--run", str(tmp_path / "run"), "--lambada-dir",
                        str(tmp_path / "lambada"), "--out", str(tmp_path / "again.json")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    again = json.loads((tmp_path / "again.json").read_text())
    assert again["val_loss"] == pytest.approx(in_cell["val_loss"], rel=1e-5)
    assert again["lambada_ppl"] == pytest.approx(in_cell["lambada_ppl"], rel=1e-5)
