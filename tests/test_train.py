import math
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml
from helpers import CELL, cell_file, in_process_run, kill_after_rows, launch, read_rows, run_cli, slow_trainer_env

from merit_repro.data.tokens import prepare


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
    assert {(r["layer"], r["head"]) for r in mal} == {("1", "1"), ("1", "2"), ("2", "1"), ("2", "2")}   # 1-based
    log = (run / "train.log").read_text()
    assert log.startswith("# merit_repro.train") and "# versions:" in log and "# device:" in log


def test_rerun_of_complete_cell_is_a_no_op(reference_run):
    config, run = reference_run
    before = (run / "metrics.csv").stat().st_mtime_ns
    r = run_cli(config, run)
    assert r.returncode == 0 and "already complete" in r.stdout
    assert (run / "metrics.csv").stat().st_mtime_ns == before


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_killed_run_resumes_to_identical_metrics(tmp_path, reference_run, sig):
    config, ref = reference_run
    out = tmp_path / "run"
    code = kill_after_rows(run_cli(config, out, wait=False), out / "metrics.csv", 14, sig)
    if sig == signal.SIGTERM:
        assert code == 143 and "checkpoint saved" in (out / "train.log").read_text()
    assert (out / "ckpt.pt").exists()
    if sig == signal.SIGKILL:  # as Snakemake does with the declared outputs of a failed job
        for name in ["metrics.csv", "mal.csv", "diagnostics.csv"]:
            (out / name).unlink()
    import torch

    stored = torch.load(out / "ckpt.pt", weights_only=True)["loop"]
    r = run_cli(config, out)
    assert r.returncode == 0, r.stderr
    assert "resuming from step" in (out / "train.log").read_text()
    for name in ["metrics.csv", "mal.csv", "diagnostics.csv"]:
        assert read_rows(out / name) == read_rows(ref / name), name
    assert comparable_summary(out) == comparable_summary(ref)   # loop state: first loss, best val loss, spikes
    assert (out / "eval.json").read_text() == (ref / "eval.json").read_text()
    resumed = yaml.safe_load((out / "summary.json").read_text())
    assert resumed["train_seconds"] > stored["train_seconds"] > 0   # the timers went on from the checkpoint


def torchrun(config, out, *extra, env=None, grace=()):
    """The cell on 2 CPU processes (gloo) through merit_repro.launch.torchrun, as the launcher runs a multi-GPU cell."""
    cmd = [sys.executable, "-m", "merit_repro.launch.torchrun", "--standalone", "--nproc_per_node", "2", *grace,
           "-m", "merit_repro.train", "--config", str(config), "--out", str(out), *extra]
    return subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})


DDP_CELL = dict(tokens=8 * 32 * 10, eval_every=5, mal_every=5)


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory, data_dir):
    tmp = tmp_path_factory.mktemp("ddp")
    config = cell_file(tmp, data_dir, **DDP_CELL)
    r = torchrun(config, tmp / "ddp")
    assert r.returncode == 0, r.stderr[-3000:]
    return config, tmp / "ddp"


@pytest.mark.slow
def test_micro_batches_and_two_processes_match_one_device(tmp_path, data_dir, ddp_run):
    config, ddp = ddp_run
    for out, extra in [("single", []), ("micro", ["--set", "micro_batch_size=2"])]:
        r = run_cli(config, tmp_path / out, *extra)
        assert r.returncode == 0, r.stderr
    summary = yaml.safe_load((ddp / "summary.json").read_text())
    assert summary["world_size"] == 2
    for name, columns in [("metrics.csv", ["step", "tokens", "lr", "train_loss", "val_loss", "grad_norm",
                                            "clip_fraction", "floor_fraction"]),
                          ("mal.csv", ["step", "layer", "head", "mal", "wq_max", "wk_max"])]:
        expected = read_rows(tmp_path / "single" / name)
        for variant, folder in [("micro", tmp_path / "micro"), ("ddp", ddp)]:
            rows = read_rows(folder / name)
            assert len(rows) == len(expected), (variant, name)
            for got, want in zip(rows, expected):
                for key in columns:
                    if want[key] == "":
                        assert got[key] == "", (variant, name, key, got["step"])
                    else:
                        assert float(got[key]) == pytest.approx(float(want[key]), rel=2e-4, abs=1e-7), \
                            (variant, name, key, got["step"])


@pytest.mark.slow
def test_a_stopped_ddp_cell_exits_75_through_torchrun_with_its_checkpoint_and_resumes_exactly(tmp_path, ddp_run):
    """Every rank waits for rank 0's checkpoint, also one slower than the 30 s torchrun's agent gives the other
    ranks once one has exited non-zero (fixed: not the signal's --shutdown-timeout, cut to 5 s here), after which
    it kills rank 0 mid-save; and the stop code comes out of torchrun; the resumed run is the uninterrupted one."""
    config, ddp = ddp_run
    out = tmp_path / "run"
    r = torchrun(config, out, "--stop-at", str(time.time()), env=slow_trainer_env(tmp_path, save_seconds=33),
                 grace=["--shutdown-timeout", "5"])
    assert r.returncode == 75, r.stderr[-3000:]
    assert "[test] saving 33 s slower" in r.stdout
    assert (out / "ckpt.pt").exists() and "time budget of this job reached" in (out / "train.log").read_text()
    r = torchrun(config, out)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "resuming from step 1" in (out / "train.log").read_text()
    for name in ["metrics.csv", "mal.csv", "diagnostics.csv"]:
        assert read_rows(out / name) == read_rows(ddp / name), name


@pytest.mark.slow
def test_two_nodes_meeting_at_a_rendezvous_train_as_two_ranks_on_one_node(tmp_path, ddp_run):
    """The multi-node launch without its srun: two torchruns of one rank each (the two "nodes" share this host)
    meet at the c10d rendezvous on the first host, as merit_repro.launch.torchrun.multi_node_command has them
    do, and train the cell as the standalone two-rank run does."""
    import socket

    from merit_repro.launch.torchrun import multi_node_command

    config, ddp = ddp_run
    with socket.socket() as s:   # a free port for this test's rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "two-nodes"
    command = multi_node_command(2, 1, 1, ["-m", "merit_repro.train", "--config", str(config), "--out", str(out)],
                                 "7", "127.0.0.1")
    command = command[command.index(sys.executable):]   # what srun runs on each node
    command[command.index("--rdzv-endpoint") + 1] = f"127.0.0.1:{port}"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    nodes = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
             for _ in range(2)]
    outputs = [node.communicate(timeout=300)[0] for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], outputs[0][-3000:] + outputs[1][-3000:]
    summary = yaml.safe_load((out / "summary.json").read_text())
    assert summary["world_size"] == 2
    for name in ["metrics.csv", "mal.csv", "diagnostics.csv"]:
        assert read_rows(out / name) == read_rows(ddp / name), name


@pytest.mark.slow
def test_a_ddp_cell_trains_on_a_host_whose_name_does_not_resolve(tmp_path, ddp_run):
    """torchrun's one-node rendezvous looks the host's name up unless told its address, and hangs where the name
    does not resolve; the launcher's cell runs its ranks on the loopback (merit_repro.launch.torchrun.on_loopback,
    GLOO_SOCKET_IFNAME) and trains as anywhere else."""
    import json
    import shlex
    import shutil

    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare to give this process a host name of its own")
    config, ddp = ddp_run
    cell = {**yaml.safe_load(config.read_text()), "device": "cpu"}
    out = tmp_path / "run"
    script = (f"hostname merit-test-unresolvable-host && exec {shlex.quote(sys.executable)} -m merit_repro.launch "
              f"--cell {shlex.quote(json.dumps(cell))} --out {shlex.quote(str(out))} --gpus 2")
    env = {**os.environ, "MERIT_GPUS": "2", "MERIT_GPU_LOCK_DIR": str(tmp_path / "locks"), "OMP_NUM_THREADS": "1"}
    r = subprocess.run(["unshare", "-u", "sh", "-c", script], capture_output=True, text=True, env=env, timeout=240)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    for name in ["metrics.csv", "mal.csv", "diagnostics.csv"]:
        assert read_rows(out / name) == read_rows(ddp / name), name


def test_torchrun_passes_the_agreed_stop_code_on():
    from merit_repro.launch.torchrun import on_loopback, stop_code, with_grace

    assert stop_code([75, 75]) == 75 and stop_code([143, -15]) == 143 and stop_code([130]) == 130
    assert stop_code([75, 1]) == 1 and stop_code([75, 143]) == 1 and stop_code([1, -15]) == 1
    assert with_grace(["-m", "x"], environ={})[:2] == ["--shutdown-timeout", "600"]
    assert with_grace(["--shutdown-timeout=5", "-m", "x"], environ={}) == ["--shutdown-timeout=5", "-m", "x"]
    assert with_grace(["-m", "x"], environ={"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "900"}) == ["-m", "x"]
    assert with_grace(["-m", "x"], supported=False, environ={}) == ["-m", "x"]   # an older torch: warned
    assert on_loopback(["--standalone", "-m", "x"])[:2] == ["--local-addr", "127.0.0.1"]
    assert on_loopback(["--nnodes", "2", "-m", "x"]) == ["--nnodes", "2", "-m", "x"]   # nodes meet by their names
    assert on_loopback(["--standalone", "--local-addr=10.0.0.1", "-m", "x"])[0] == "--standalone"


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


@pytest.mark.slow
def test_checkpoint_of_another_cell_is_not_overwritten(tmp_path, data_dir):
    config = cell_file(tmp_path, data_dir, keep_checkpoint=True, tokens=8 * 32 * 4)
    assert run_cli(config, tmp_path / "run").returncode == 0
    (tmp_path / "run" / "summary.json").unlink()
    r = run_cli(config, tmp_path / "run", "--set", "lr=1e-3")
    assert r.returncode == 2 and "checkpoint of a different cell" in r.stderr


@pytest.mark.slow
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
    r = subprocess.run([sys.executable, "-m", "merit_repro.train.evaluate", "--run", str(tmp_path / "run"), "--lambada-dir",
                        str(tmp_path / "lambada"), "--out", str(tmp_path / "again.json")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    again = json.loads((tmp_path / "again.json").read_text())
    assert again["val_loss"] == pytest.approx(in_cell["val_loss"], rel=1e-5)
    assert again["lambada_ppl"] == pytest.approx(in_cell["lambada_ppl"], rel=1e-5)


# ---------------------------------------------------------------- the workflow's launcher and its warm trainer


def comparable_summary(run):
    import json

    summary = json.loads((run / "summary.json").read_text())
    for key in ("train_seconds", "timed_steps", "startup_seconds", "eval_seconds", "mal_probe_seconds",
                "checkpoint_seconds", "tokens_per_s", "peak_memory_bytes", "git_commit"):
        summary.pop(key)
    # metrics.csv holds tokens/s, so its checksum differs between identical runs; its row count does not
    summary["files"] = {name: record.get("rows", record["sha256"]) for name, record in summary["files"].items()}
    return summary


@pytest.mark.slow
def test_warm_trainer_gives_the_same_run_as_a_fresh_process(tmp_path, data_dir, warm_dir):
    fresh = launch(warm_dir, data_dir, tmp_path / "fresh", warm=False)
    warm = launch(warm_dir, data_dir, tmp_path / "warm", warm=True)
    assert fresh.returncode == 0 and warm.returncode == 0, warm.stdout + warm.stderr
    assert "forked from the warm trainer" in warm.stdout and "forked" not in fresh.stdout
    for name in ["metrics.csv", "mal.csv", "diagnostics.csv"]:
        assert read_rows(tmp_path / "warm" / name) == read_rows(tmp_path / "fresh" / name), name
    assert comparable_summary(tmp_path / "warm") == comparable_summary(tmp_path / "fresh")
    assert (tmp_path / "warm" / "eval.json").read_text() == (tmp_path / "fresh" / "eval.json").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_killed_launcher_leaves_a_checkpoint_that_resumes_exactly(tmp_path, data_dir, reference_run, sig, warm_dir):
    """SIGTERM is forwarded to the forked trainer; a SIGKILLed launcher closes the connection, and the trainer
    stops as on SIGTERM. Either way a checkpoint is written and a rerun resumes to the uninterrupted run."""
    _, ref = reference_run
    out = tmp_path / "run"
    launch(warm_dir, data_dir, tmp_path / "warm-up", warm=True, tokens=8 * 32 * 2)   # the server is up
    launcher = launch(warm_dir, data_dir, out, warm=True, wait=False)
    code = kill_after_rows(launcher, out / "metrics.csv", 14, sig)
    launcher.stdout.close()   # the reader of the trainer's output is gone too: it must still checkpoint
    assert code == (143 if sig == signal.SIGTERM else -9)
    deadline = time.time() + 30
    while "checkpoint saved" not in (out / "train.log").read_text() and time.time() < deadline:
        time.sleep(0.1)
    assert "checkpoint saved" in (out / "train.log").read_text()
    time.sleep(0.5)   # the forked trainer has written its checkpoint and is exiting
    r = launch(warm_dir, data_dir, out, warm=True)
    assert r.returncode == 0, r.stdout
    assert "resuming from step" in (out / "train.log").read_text()
    for name in ["metrics.csv", "mal.csv", "diagnostics.csv"]:
        assert read_rows(out / name) == read_rows(ref / name), name


# ---------------------------------------------------------------- checks against independent computations


def schedule(step, peak, steps, warmup_frac, min_frac):
    """The LR schedule written out again from its definition: linear warmup over round(warmup_frac x steps)
    updates, then cosine from the peak to min_frac x peak at the last update."""
    warm = max(1, round(warmup_frac * steps)) if warmup_frac > 0 else 0
    if step < warm:
        return peak * (step + 1) / warm
    progress = (step - warm) / max(1, steps - 1 - warm)
    return min_frac * peak + (peak - min_frac * peak) * (1 + math.cos(math.pi * progress)) / 2


def test_the_optimizer_gets_the_scheduled_lr_every_step(reference_run):
    _, run = reference_run
    rows = read_rows(run / "metrics.csv")
    steps = len(rows) - 1
    for row in rows[1:]:   # row k logs update k-1
        assert float(row["lr"]) == pytest.approx(schedule(int(row["step"]) - 1, 3e-3, steps, 0.02, 0.1), rel=1e-9)


def test_clipping_bounds_the_gradient_the_optimizer_sees(tmp_path, data_dir):
    import torch

    run = in_process_run(tmp_path, data_dir, grad_clip=0.05, tokens=8 * 32 * 6, optimizer="adamw")
    seen, step = [], run.optimizer.step

    def measured_step(*args, **kwargs):
        seen.append(torch.sqrt(sum((p.grad.double() ** 2).sum() for p in run.model.parameters())).item())
        return step(*args, **kwargs)
    run.optimizer.step = measured_step
    run.run()
    before = [float(r["grad_norm"]) for r in read_rows(tmp_path / "run" / "metrics.csv")[1:]]
    assert min(before) > 0.05                       # the raw gradients were larger than the clip ...
    assert max(seen) == pytest.approx(0.05, rel=1e-4) and max(seen) <= 0.05 * (1 + 1e-5)   # ... and clipped


def test_validation_loss_is_cross_entropy_over_windows_spread_over_the_split(tmp_path, data_dir):
    import json

    import numpy as np
    import torch
    import torch.nn.functional as F

    from merit_repro.models import GPT, GPTConfig

    out = tmp_path / "run"
    assert run_cli(cell_file(tmp_path, data_dir, tokens=8 * 32 * 6, save_model=True), out).returncode == 0
    summary = json.loads((out / "summary.json").read_text())
    model = GPT(GPTConfig(**summary["model_config"]))
    model.load_state_dict(torch.load(out / "model.pt", weights_only=True))
    model.eval()
    val = np.fromfile(data_dir / "val.bin", dtype=np.uint8).astype(np.int64)
    block, n_windows = CELL["block_size"], CELL["eval_tokens"] // CELL["block_size"]
    stride = (len(val) - 1) // n_windows
    total = 0.0
    with torch.no_grad():
        for i in range(n_windows):
            window = torch.from_numpy(val[i * stride: i * stride + block + 1])
            logits, _ = model(window[None, :-1])
            total += F.cross_entropy(logits[0], window[1:], reduction="sum").item()
    evaluation = json.loads((out / "eval.json").read_text())
    assert evaluation["val_tokens"] == n_windows * block
    assert evaluation["val_loss"] == pytest.approx(total / (n_windows * block), rel=1e-5)


def test_lambada_perplexity_by_hand(tmp_path):
    import json

    import torch

    from merit_repro.data.tokens import prepare
    from merit_repro.models import GPT, GPTConfig
    from merit_repro.train.evaluate import lambada

    texts = ["to be or not to be that is the question", "all the world is a stage", "brevity is the soul of wit"]
    (tmp_path / "l.jsonl").write_text("\n".join(json.dumps({"text": t}) for t in texts))
    prepare(f"lambada:{tmp_path / 'l.jsonl'}", "bytes", tmp_path / "lambada")
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=1, n_head=1, n_embd=16, block_size=64, vocab_size=256)).eval()
    nll, correct = [], 0
    for text in texts:
        context, word = text.rsplit(" ", 1)
        ids = list((context + " " + word).encode())
        n_target = len((" " + word).encode())
        with torch.no_grad():
            logits, _ = model(torch.tensor(ids[:-1])[None])
        logp = torch.log_softmax(logits[0].double(), -1)
        targets = range(len(ids) - n_target, len(ids))   # the target's tokens, each predicted from the one before
        nll.append(-sum(logp[t - 1, ids[t]].item() for t in targets))
        correct += all(logp[t - 1].argmax().item() == ids[t] for t in targets)
    got = lambada(model, tmp_path / "lambada", 64, "cpu")
    assert got["lambada_ppl"] == pytest.approx(math.exp(sum(nll) / len(nll)), rel=1e-5)
    assert got["lambada_acc"] == correct / len(texts)


@pytest.mark.slow
def test_fewer_log_points_change_nothing_but_the_timing(tmp_path, data_dir):
    """log_every only decides how often losses are read back from the device: MAL probes between log points
    (every 3 steps, log points every 7) are taken at their own step, and the run is the same."""
    for log_every in (1, 7):
        config = cell_file(tmp_path, data_dir, log_every=log_every, mal_every=3, tokens=8 * 32 * 20)
        assert run_cli(config, tmp_path / f"log{log_every}").returncode == 0
    mal = read_rows(tmp_path / "log7" / "mal.csv")
    assert sorted({int(r["step"]) for r in mal}) == [0, 3, 6, 9, 12, 15, 18, 20]
    for name in ["metrics.csv", "mal.csv", "diagnostics.csv"]:
        assert read_rows(tmp_path / "log7" / name) == read_rows(tmp_path / "log1" / name), name


def test_mal_probes_are_taken_at_their_steps_through_a_stop_and_resume(tmp_path, data_dir):
    """mal_probes: 5 over 20 steps probes after steps 4, 8, ..., 20 (and 0). A run stopped by a signal right after
    its probe of step 8, then resumed, takes each probe once, at its step, as the run without a stop does."""
    from merit_repro.train import loop

    cell = dict(mal_probes=5, tokens=8 * 32 * 20)
    in_process_run(tmp_path / "twin", data_dir, **cell).run()
    run = in_process_run(tmp_path, data_dir, **cell)
    record = run.record

    def record_then_stop(row, evaluate):
        if row["step"] == 7:
            run.stops.signal = signal.SIGTERM   # seen at the next step's stop check, after its probe
        return record(row, evaluate)
    run.record = record_then_stop
    with pytest.raises(loop.Stop):
        run.run()
    assert {int(r["step"]) for r in read_rows(tmp_path / "run" / "mal.csv")} == {0, 4, 8}
    in_process_run(tmp_path, data_dir, **cell).run()
    mal = read_rows(tmp_path / "run" / "mal.csv")
    assert sorted({int(r["step"]) for r in mal}) == run.cfg.probe_steps() == [0, 4, 8, 12, 16, 20]
    assert mal == read_rows(tmp_path / "twin" / "run" / "mal.csv")


def test_tokens_per_second_counts_training_only(tmp_path, data_dir, monkeypatch):
    """Checkpoints (made slow here), the first step (compilation on a GPU), evaluation and the probe are
    off the training clock."""
    from merit_repro.train import checkpoint

    real_save = checkpoint.save
    monkeypatch.setattr(checkpoint, "save", lambda *args: (time.sleep(0.3), real_save(*args)))
    run = in_process_run(tmp_path, data_dir, checkpoint_every=3)
    t0 = time.perf_counter()
    summary = run.run()
    wall = time.perf_counter() - t0
    assert summary["checkpoint_seconds"] >= 13 * 0.3 and summary["startup_seconds"] > 0
    assert summary["train_seconds"] < wall - summary["checkpoint_seconds"] - summary["eval_seconds"]
    assert summary["timed_steps"] == 39
    assert summary["tokens_per_s"] == pytest.approx(39 * 8 * 32 / summary["train_seconds"])


def test_checkpoints_are_also_written_by_wall_time(tmp_path, data_dir, monkeypatch):
    from merit_repro.train import checkpoint

    saved = []
    monkeypatch.setattr(checkpoint, "save", lambda path, cfg, fingerprints, step, *rest: saved.append(step))
    run = in_process_run(tmp_path, data_dir, checkpoint_every=10**6, checkpoint_every_minutes=1e-9)
    run.run()
    assert saved == list(range(1, 40))   # after every step but the last: the interval is shorter than a step


def test_a_log_deleted_during_the_run_is_written_again_whole(tmp_path, data_dir, monkeypatch):
    """As a workflow manager cleaning up a job it thinks failed: the CSV files vanish mid-run, and neither
    the files nor the checkpoints' copies of them lose their header or earlier rows."""
    in_process_run(tmp_path / "twin", data_dir).run()
    ref = tmp_path / "twin" / "run"
    run = in_process_run(tmp_path, data_dir, checkpoint_every=5, keep_checkpoint=True)
    record, deleted = run.record, []

    def record_and_delete(row, *args, **kwargs):
        if row["step"] in (12, 27):
            for name in ("metrics.csv", "mal.csv", "diagnostics.csv"):
                (tmp_path / "run" / name).unlink(missing_ok=True)
            deleted.append(row["step"])
        return record(row, *args, **kwargs)
    monkeypatch.setattr(run, "record", record_and_delete)
    run.run()
    assert deleted == [12, 27]   # the files did vanish mid-run
    for name in ["metrics.csv", "mal.csv", "diagnostics.csv"]:
        assert read_rows(tmp_path / "run" / name) == read_rows(ref / name), name
    import torch

    logs = torch.load(tmp_path / "run" / "ckpt.pt", weights_only=True)["logs"]
    assert logs["metrics"].startswith("step,tokens,lr") and logs["metrics"].count("\n") == 36 + 1


@pytest.mark.parametrize("change", ["rewritten", "truncated"])
def test_a_corpus_changed_mid_run_stops_it_with_one_line(tmp_path, data_dir, monkeypatch, capsys, change):
    """train.bin rewritten in place (same size) or truncated after the first log point: the run stops with one
    error line naming the file, instead of finishing `ok` on other tokens."""
    import shutil

    from merit_repro.train import loop

    corpus = tmp_path / "corpus"
    shutil.copytree(data_dir, corpus)
    train_bin, real_flush = corpus / "train.bin", loop.Run.flush

    def flush_then_change(self, *args):
        data = train_bin.read_bytes()
        train_bin.write_bytes(data[::-1] if change == "rewritten" else data[: len(data) // 2])
        return real_flush(self, *args)
    monkeypatch.setattr(loop.Run, "flush", flush_then_change)
    config, out = cell_file(tmp_path, corpus, tokens=8 * 32 * 4), tmp_path / "run"
    assert loop.main(["--config", str(config), "--out", str(out)]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and f"error: {train_bin} changed while this run was training on it" in lines[0], lines
    assert "restart the run" in lines[0] and not (out / "summary.json").exists()
