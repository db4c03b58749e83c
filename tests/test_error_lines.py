"""One `error:` line naming the file for each way input or the machine goes wrong (garbage, full or read-only
disks, missing GPUs); files honour the umask; the warm trainer is a fresh process."""

import errno
import json
import os
import stat
import subprocess
import sys

import pytest
from helpers import CELL, cell_file, cli_error, in_process_run, launch

from merit_repro.data import __main__ as data_cli
from merit_repro.train import loop
from merit_repro.utils import UserError, atomic_write_bytes


def test_garbage_in_a_summary_is_named_on_rerun(tmp_path, data_dir, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "summary.json").write_text("{not json")
    line = cli_error(loop.main, ["--config", str(cell_file(tmp_path, data_dir)), "--out", str(out)], capsys)
    assert f"{out / 'summary.json'} cannot be read as a run summary" in line and "delete it" in line
    from merit_repro.plan import tuning

    with pytest.raises(UserError, match="summary.json cannot be read as a run summary"):
        tuning.read_results({("1e-3", 0): out})


@pytest.mark.slow
def test_a_full_disk_during_a_checkpoint_is_named(tmp_path, data_dir, capsys, monkeypatch):
    from merit_repro.train import checkpoint

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
    monkeypatch.setattr(checkpoint, "open", full_disk_open, raising=False)
    config = cell_file(tmp_path, data_dir, checkpoint_every=5)
    line = cli_error(loop.main, ["--config", str(config), "--out", str(tmp_path / "run")], capsys)
    assert line.startswith("error: the disk is full (No space left on device) writing ") and "ckpt.pt" in line
    assert not list((tmp_path / "run").glob(".ckpt.pt*"))


def test_a_full_disk_during_prepare_is_named(tmp_path, capsys, monkeypatch):
    from merit_repro.data.tokenizers import ByteTokenizer

    def no_space(self, texts, num_threads=1):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(ByteTokenizer, "encode_ordinary_batch", no_space)
    line = cli_error(data_cli.main, ["prepare", "--dataset", "shakespeare", "--tokenizer", "bytes",
                                 "--out", str(tmp_path / "out")], capsys)
    assert line.startswith("error: the disk is full") and "train.bin" in line


def test_an_out_folder_on_a_read_only_file_system_is_named(tmp_path, data_dir, capsys, monkeypatch):
    import pathlib

    def read_only(self, *args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system", str(self))
    monkeypatch.setattr(pathlib.Path, "mkdir", read_only)
    line = cli_error(loop.main, ["--config", str(cell_file(tmp_path, data_dir)), "--out", str(tmp_path / "ro")],
                     capsys)
    assert line.startswith("error: the file system is read-only") and str(tmp_path / "ro") in line


@pytest.mark.slow
def test_launch_with_gpus_on_a_machine_without_them_is_one_line(tmp_path, data_dir):
    import torch

    if torch.cuda.device_count() >= 2:
        pytest.skip("this machine has the GPUs")
    cell = json.dumps({**CELL, "data_dir": str(data_dir)})
    env = {k: v for k, v in os.environ.items() if k not in ("MERIT_GPUS", "CUDA_VISIBLE_DEVICES", "SLURM_JOB_ID")}
    r = subprocess.run([sys.executable, "-m", "merit_repro.launch", "--cell", cell, "--out", str(tmp_path / "run"),
                        "--gpus", "2"], capture_output=True, text=True, env=env)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode == 2 and len(lines) == 1 and "this cell needs 2 GPUs but 0 are visible" in lines[0], r.stderr


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o027, 0o640), (0o077, 0o600)])
def test_files_honour_the_umask(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        atomic_write_bytes(tmp_path / "summary.json", b"{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "summary.json").stat().st_mode) == mode


@pytest.mark.slow
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

    from merit_repro.launch import warmstart

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
    from merit_repro.launch import warmstart

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (tmp_path / f"merit-repro-{os.getuid()}").symlink_to(elsewhere)
    monkeypatch.setattr("tempfile.gettempdir", lambda: str(tmp_path))
    monkeypatch.setattr(warmstart, "MAX_FOLDER_CHARS", 4096)   # however long tmp_path is (a worker's is longer)
    with pytest.raises(PermissionError, match="is not a private folder of this user"):
        warmstart.socket_path()


def test_in_process_runs_still_train(tmp_path, data_dir):
    """The shape checks let every named size through unchanged (n_layer etc. null: the size's own)."""
    run = in_process_run(tmp_path, data_dir, tokens=8 * 32 * 2)
    assert run.model_config.n_layer == 2 and run.run()["status"] == "ok"


@pytest.mark.parametrize("blocker", ["runs/T/4096/adamw/bs8/lr1e-3/seed0", "runs/T",
                                     "runs/T/4096/adamw/bs8/lr1e-3/seed0/eval.json"])
def test_a_merge_onto_a_file_where_a_run_goes_writes_nothing(tmp_path, capsys, blocker):
    """A file where a run's folder goes (or a folder where its file goes): refused before origin/ is written."""
    from synthetic import make_bundle

    from merit_repro import bundle

    path, _ = make_bundle(tmp_path)
    local = tmp_path / "local"
    (local / "data/d").mkdir(parents=True)
    (local / "data/d/meta.json").write_bytes((tmp_path / "b/results/data/d/meta.json").read_bytes())
    (local / blocker).parent.mkdir(parents=True, exist_ok=True)
    if blocker.endswith(".json"):
        (local / blocker).mkdir()
    else:
        (local / blocker).write_text("in the way\n")
    line = cli_error(bundle.main, ["merge", str(path), "--results", str(local)], capsys)
    assert str(local / blocker) in line and "move them away" in line, line
    assert not (local / "origin").exists() and not (local / "tuning").exists()


@pytest.mark.parametrize("flags, says", [
    (["--time-budget-seconds", "inf"], "--time-budget-seconds inf must be a finite number >= 0"),
    (["--time-budget-seconds", "nan"], "--time-budget-seconds nan must be a finite number >= 0"),
    (["--time-budget-seconds", "-60"], "--time-budget-seconds -60 must be a finite number >= 0"),
    (["--signal-lead-seconds", "-1"], "--signal-lead-seconds -1 must be a finite number >= 0"),
    (["--cell", "[1]"], "--cell '[1]' is not a JSON object"),
    (["--cell", "null"], "--cell 'null' is not a JSON object"),
    (["--cell", "{bad"], "--cell is not JSON"),
    (["--cell", "[" * 100_000 + "]" * 100_000], "--cell is nested too deeply to read"),
    (["--cell", '{"model": 3}'], "invalid cell config: model=3 must be str"),
])
def test_launch_refuses_bad_flags_in_one_line_before_training(tmp_path, capsys, flags, says):
    from merit_repro.launch import launcher

    argv = ["--cell", '{"model": "demo-tiny"}', "--out", str(tmp_path / "run"), *flags]
    assert says in cli_error(launcher.main, argv, capsys)


def test_a_task_yaml_nested_too_deeply_is_named(tmp_path):
    from merit_repro.evals import tasks

    (tmp_path / "deep.yaml").write_text("task: " + "[" * 20_000 + "]" * 20_000 + "\n")
    with pytest.raises(UserError, match=f"zero-shot task file {tmp_path / 'deep.yaml'} is nested too deeply"):
        tasks.refuse_duplicate_names([tmp_path])


def test_a_json_file_nested_too_deeply_is_named(tmp_path):
    from merit_repro.data import tokens

    (tmp_path / "meta.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(UserError, match=f"{tmp_path / 'meta.json'} is nested too deeply to read"):
        tokens.verify(tmp_path)


def test_deep_overrides_tracking_settings_gpu_checks_and_decisions_are_named(tmp_path, monkeypatch):
    from merit_repro.plan import cost, tuning
    from merit_repro.plan.cell import load_cell_config
    from merit_repro.train import tracking

    with pytest.raises(UserError, match="override lr is nested too deeply"):
        load_cell_config(overrides=["lr=" + "[" * 5000])
    monkeypatch.setenv(tracking.ENV, '{"a":' * 5000)
    with pytest.raises(UserError, match=f"{tracking.ENV} is nested too deeply"):
        tracking.from_environment(tmp_path, {})
    (tmp_path / "check.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(UserError, match="--from-gpu-check .* is nested too deeply"):
        cost.gpu_check_rate(tmp_path / "check.json", {})
    with pytest.raises(UserError, match="cannot be read as a tuning decision"):
        tuning.read_decision(tmp_path / "check.json")


def test_a_check_that_ends_in_a_traceback_is_one_line_with_its_log(tmp_path):
    """The workflow's preflight: the exception line, and the file holding the command and the whole traceback."""
    from merit_repro.utils import failure_line

    stderr = "Traceback (most recent call last):\n  File \"x.py\", line 1\n    boom()\nRuntimeError: boom\n"
    log = tmp_path / "logs" / "preflight" / "optimizer_check.log"
    line = failure_line("the optimizer check", ["python", "-m", "merit_repro.optim.check", "--settings", "[{}]"],
                        stderr, log)
    assert line == f"the optimizer check failed (RuntimeError: boom); its command and full output are in {log}"
    assert log.read_text() == "$ python -m merit_repro.optim.check --settings '[{}]'\n" + stderr
