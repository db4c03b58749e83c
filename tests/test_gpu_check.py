"""The GPU check (merit_repro.gpu_check): every part but the workflow and torchrun runs here on the CPU at
small sizes, so the check itself is tested; how the workflow's and torchrun's results are judged is tested
on made-up results (their CPU runs take a minute each: `python -m merit_repro.gpu_check --device cpu`)."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
import yaml

from merit_repro.gpu_check import __main__ as check
from merit_repro.gpu_check import common, host_syncs, parity, reference
from merit_repro.gpu_check import ddp as ddp_part  # ddp() below makes torchrun results
from merit_repro.gpu_check import workflow as workflow_part  # snakemake's validate reads a global `workflow`
from merit_repro.train.hardware import mfu, peak_flops

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
CPU = torch.device("cpu")


@pytest.fixture
def no_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_without_any_gpu_it_says_so_and_exits_cleanly(monkeypatch, capsys, no_cuda):
    monkeypatch.setattr(check, "nvidia_smi_gpus", lambda: [])
    assert check.main([]) == 0
    assert "no CUDA device is visible" in capsys.readouterr().out


@pytest.mark.parametrize("cuda_version, says", [(None, "CPU-only build"), ("12.8", "cannot use it")])
def test_a_gpu_that_torch_cannot_use_fails_in_one_line(monkeypatch, capsys, no_cuda, cuda_version, says):
    monkeypatch.setattr(check, "nvidia_smi_gpus", lambda: ["GPU 0: NVIDIA H200 (UUID: GPU-0)"])
    monkeypatch.setattr(torch.version, "cuda", cuda_version)
    assert check.main([]) == 1
    out = capsys.readouterr().out
    assert len(out.strip().splitlines()) == 1 and "NVIDIA H200" in out and says in out


def test_the_script_needs_the_venv(tmp_path):
    (tmp_path / "scripts").mkdir()
    shutil.copy(Path(common.REPO) / "scripts" / "gpu_check.sh", tmp_path / "scripts")
    r = subprocess.run(["bash", str(tmp_path / "scripts" / "gpu_check.sh")], capture_output=True, text=True)
    assert r.returncode == 1 and "bash scripts/setup.sh" in r.stderr


NVIDIA_SMI = """#!/bin/sh
echo "| NVIDIA-SMI 570.86.15    Driver Version: 570.86.15    CUDA Version: $FAKE_CUDA |"
"""


def sourced(tmp_path, command, cuda):
    """`command` after sourcing scripts/gpu_check.sh (its functions, nothing run), with an nvidia-smi whose driver
    supports CUDA `cuda`."""
    (tmp_path / "nvidia-smi").write_text(NVIDIA_SMI)
    (tmp_path / "nvidia-smi").chmod(0o755)
    script = Path(common.REPO) / "scripts" / "gpu_check.sh"
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}", "FAKE_CUDA": cuda}
    return subprocess.run(["bash", "-c", f"source {script}; {command}"], capture_output=True, text=True, env=env)


@pytest.mark.parametrize("cuda, wheel", [("13.1", "cu130"), ("12.9", "cu128"), ("12.6", "cu126"), ("12.5", ""),
                                         ("11.4", "")])
def test_the_script_picks_the_newest_torch_build_the_driver_supports(tmp_path, cuda, wheel):
    r = sourced(tmp_path, "wheel_for $(driver_cuda)", cuda)
    assert r.returncode == 0 and r.stdout.strip() == wheel


def test_the_script_installs_the_torch_that_setup_pins(tmp_path):
    r = sourced(tmp_path, f"cd {common.REPO} && torch_requirement", "12.8")
    assert r.returncode == 0 and r.stdout.strip() == f"torch=={torch.__version__.split('+')[0]}"


def test_a_driver_older_than_every_build_is_one_error_line_before_any_install(tmp_path):
    r = sourced(tmp_path, "set_up", "11.4")
    assert r.returncode == 1 and r.stderr.count("\n") == 1
    assert r.stderr.startswith("error: the driver supports CUDA 11.4, older than every torch build tried")


@pytest.mark.slow
def test_every_part_but_workflow_and_torchrun_passes_on_the_cpu_in_one_table(tmp_path, capsys):
    out = tmp_path / "check.json"
    assert check.main(["--device", "cpu", "--parts", "2,4,5,6,7", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    for part in (2, 4, 5, 6, 7):
        assert f"[gpu_check] part {part}: " in printed and " s)" in printed
    assert printed.count("part  result  check") == 1   # one table, at the end
    result = json.loads(out.read_text())
    assert result["passed"] and {r["part"] for r in result["rows"]} == {2, 4, 5, 6, 7}
    skipped = [r["check"] for r in result["rows"] if r["result"] == "skip"]
    assert len(skipped) == 1 and "torch.compile" in skipped[0]   # no compile on the CPU
    checks = " | ".join(r["check"] for r in result["rows"])
    for expected in ("bf16 autocast vs fp32", "merit multi-tensor step", "lamb multi-tensor step", "micro-batch fitted",
                     "MERIT steps of 2 x 48", "eager: tokens/s, MFU", "vs float64 reference", "MAL probe"):
        assert expected in checks


def test_the_tier_part_measures_a_trainer_cell_and_prices_the_one_gpu_config(tmp_path):
    """Part 8 on the CPU: a demo-sized cell through merit_repro.launch, its tokens/s into merit_repro.plan.cost for
    config/gpu1.yaml (millions of GPU-hours at a CPU's rate: reported, judged only on CUDA)."""
    from merit_repro.gpu_check import tier

    rows = tier.part_tier(common.Plan.cpu(), torch.device("cpu"), tmp_path)
    assert [r[3] for r in rows] == [True, None, True, None], rows   # the ratio to the plain loop: judged on CUDA
    assert "tok/s" in rows[0][1] and "compile: False" in rows[0][0]
    assert "plain loop" in rows[3][0] and " / " in rows[3][1]
    hours, tuning = (float(v.replace(",", "")) for v in next(r for r in rows if "GPU-hours" in r[0])[1]
                     .split(" = ")[0].split(" + "))
    assert hours > 24 and tuning > 0


def speed_row(model, mode, tokens_per_s):
    return dict(part=6, check=f"{model} {mode}: tokens/s, MFU, peak GiB (5 steps of 8 x 1024)", limit="finite loss",
                value=f"{tokens_per_s:,.0f}, 40.0%, 9.1", result="ok")


def test_the_cost_tool_prices_a_config_at_the_checks_rate_of_its_largest_model(tmp_path, capsys):
    """merit_repro.plan.cost --from-gpu-check: part 6's tokens/s of the architecture of the config's largest model,
    eager unless the config compiles it, the same bill as --tokens-per-s-per-gpu at that rate."""
    from merit_repro.plan import cost

    table = tmp_path / "check.json"
    table.write_text(json.dumps({"device": "NVIDIA H200 (139 GiB) x 1", "parts": [6, 8], "rows": [
        speed_row("gpt2-small", "eager", 250_000), speed_row("gpt2-small", "compiled", 400_000),
        speed_row("gpt2-large", "eager", 40_000),
        dict(part=8, check="a config/gpu1.yaml cell through merit_repro.launch (compile: True): tokens/s",
             value="300,000 tok/s, MFU 31.0%", limit="exit 0, status ok", result="ok")]}))

    def bill(*args):
        assert cost.main(["--configfile", *args]) == 0
        out = capsys.readouterr().out
        return out.splitlines()[0], [line for line in out.splitlines() if line.startswith("total")][0]

    for config, rate, measured in [("config/gpu1.yaml", 250_000, "gpt2-small eager"),
                                   ("config/paper.yaml", 40_000, "gpt2-large eager")]:
        header, total = bill(f"{common.REPO}/{config}", "--from-gpu-check", str(table))
        assert f"at {rate:,} tokens/s per GPU ({measured} on NVIDIA H200" in header, header
        assert total == bill(f"{common.REPO}/{config}", "--tokens-per-s-per-gpu", str(rate))[1]
    compiled = tmp_path / "gpu1_compiled.yaml"
    compiled.write_text((common.REPO / "config/gpu1.yaml").read_text().replace("  compile: false", "  compile: true"))
    assert "at 400,000 tokens/s per GPU (gpt2-small compiled" in bill(str(compiled), "--from-gpu-check", str(table))[0]


def test_the_tier_is_judged_on_the_cell_and_on_the_day():
    from merit_repro.gpu_check import tier

    ok = {"status": "ok", "tokens_per_s": 300000.0, "mfu": 0.31, "config": {"compile": True}}
    assert [r[3] for r in tier.judge_tier(0, ok, (15.0, 8.0), "cuda")] == [True, True]
    assert [r[3] for r in tier.judge_tier(0, ok, (20.0, 8.0), "cuda")] == [True, False]
    assert [r[3] for r in tier.judge_tier(1, None, None, "cuda", "error: x")] == [False]


def test_a_part_that_raises_is_a_failed_row_and_the_others_still_run(monkeypatch, tmp_path, capsys):
    def broken(plan, device, workdir):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(check, "PARTS", {1: ("broken", broken),
                                             2: ("fine", lambda plan, device, workdir: [("fine", "1", "1", True)])})
    assert check.main(["--device", "cpu", "--out", str(tmp_path / "check.json")]) == 1
    rows = json.loads((tmp_path / "check.json").read_text())["rows"]
    assert [(r["part"], r["result"]) for r in rows] == [(1, "FAIL"), (2, "ok")] and "illegal memory" in rows[0]["value"]
    kept = capsys.readouterr().out.split("work folder kept: ")[1].strip()   # kept for the logs of what failed
    shutil.rmtree(kept)


@pytest.mark.slow
def test_an_optimizer_mismatch_fails_the_check(monkeypatch):
    real = reference.run_optimizer
    def off_by_a_percent(name, w, g, device, dtype, foreach):   # LAMB's multi-tensor path only
        return {n: v * (1.01 if foreach and name == "lamb" else 1.0)
                for n, v in real(name, w, g, device, dtype, foreach).items()}

    monkeypatch.setattr(reference, "run_optimizer", off_by_a_percent)
    rows = reference.check_optimizers(CPU, steps=3, scale=8)
    failed = [r for r in rows if not r[3]]
    assert failed and all("lamb" in r[1] for r in failed), rows


def test_a_host_sync_in_a_step_fails_the_check(monkeypatch):
    from merit_repro.optim import base

    real = base.multi_tensor_step

    def syncing_step(params, *args, **kwargs):
        real(params, *args, **kwargs)
        params[0].sum().item()   # a read-back, as a stray .item() or `if tensor:` would do

    monkeypatch.setattr(base, "multi_tensor_step", syncing_step)
    rows = host_syncs.part_host_syncs(common.Plan.cpu(), CPU, None)
    syncing = [r for r in rows if "multi-tensor step" in r[0]]
    assert len(syncing) == 4 and not any(r[3] for r in syncing) and all("_local_scalar_dense" in r[1] for r in syncing)


@pytest.mark.slow
def test_the_compiled_steps_compile_match_the_eager_ones_and_are_timed():
    """Part 4 with torch.compile (on CUDA unless --quick; here on the CPU's tiny model): a row per compiled step."""
    from helpers import inductor_builds

    inductor_builds()
    plan = common.Plan.cpu()
    plan.compile = True
    compiled = [r for r in host_syncs.part_host_syncs(plan, CPU, None) if "compiled step" in r[0]]
    assert [r[0].split()[0] for r in compiled] == ["merit", "lamb"] and all(r[3] for r in compiled), compiled
    assert all("x (" in r[1] and "compiled in" in r[1] for r in compiled), compiled


def test_parity_is_judged_at_every_step():
    eager = [10.8, 10.2, 9.6, 9.1]
    ok = parity.judge_parity(eager, [x + 0.005 for x in eager], [x - 0.01 for x in eager], compile_seconds=40.0)
    assert [r[3] for r in ok] == [True, True, True]
    drifted = parity.judge_parity(eager, eager[:-1] + [9.2], [x + 0.2 for x in eager], compile_seconds=40.0)
    assert [r[3] for r in drifted] == [True, False, False]
    broken = parity.judge_parity([10.8, float("nan")], None, [10.8, 10.5])
    assert [r[3] for r in broken] == [False, None, False]   # compile not run: skipped, not passed


def summary(device="cuda:0 NVIDIA H200 (140 GiB), CUDA 12.8", status="ok", world_size=1, loss=2.5):
    return {"device": device, "status": status, "world_size": world_size, "final_val_loss": loss}


def test_the_tiny_gpu_workflow_config_is_valid():
    from snakemake.utils import validate as fill_schema_defaults

    from merit_repro.config import configfiles
    from merit_repro.plan import grid
    from merit_repro.plan.validate import validate

    config = configfiles.load(workflow_part.WORKFLOW_CONFIG)   # as data, then the schema
    fill_schema_defaults(config, str(configfiles.SCHEMA))   # the defaults, as the workflow fills them
    validate(config)
    assert len(grid.all_groups(config)) * 2 == workflow_part.expected_cells(config)   # grid seed + claim seed per group


def test_the_workflow_passes_only_with_exit_0_and_every_run_on_cuda(tmp_path):
    path, config = workflow_part.workflow_config(torch.device("cuda"), tmp_path)
    assert yaml.safe_load(path.read_text())["results"] == str(tmp_path / "results")
    assert all(m["gpus"] == 1 for m in config["models"].values())
    assert all(m["gpus"] == 0 for m in workflow_part.workflow_config(CPU, tmp_path)[1]["models"].values())
    expected = workflow_part.expected_cells(config)
    assert expected == 4   # 2 optimizers x (grid seed + claim seed)
    assert all(r[3] for r in workflow_part.judge_workflow(0, [summary()] * 4, expected, "cuda"))
    on_cpu = workflow_part.judge_workflow(0, [summary()] * 3 + [summary(device="cpu x86_64")], expected, "cuda")
    assert [r[3] for r in on_cpu] == [True, False]
    failed = workflow_part.judge_workflow(1, [summary()] * 2, expected, "cuda", "Error in rule train")
    assert [r[3] for r in failed] == [False, False] and "Error in rule train" in failed[0][1]


def ddp(code=0, world_size=2, ckpt=False, log="", loss=2.5, device="cpu x86_64"):
    return {"code": code, "summary": summary(device, world_size=world_size, loss=loss) if code == 0 else None,
            "ckpt": ckpt, "log": log, "stderr": "" if code in (0, 75) else "[torchrun] ranks exited with [1]"}


def test_torchrun_runs_are_judged_on_codes_checkpoint_resumption_and_loss():
    good = dict(full=ddp(), stopped=ddp(75, ckpt=True), resumed=ddp(log="# resuming from step 1 in ..."))
    assert all(r[3] for r in ddp_part.judge_ddp(2, "cpu", **good))
    one_gpu = ddp_part.judge_ddp(2, "cuda", full=ddp(device="cuda:0 H200"), stopped=ddp(75, ckpt=True),
                                  resumed=ddp(device="cuda:0 H200", log="resuming from step 1"), shared=True)
    assert [r[3] for r in one_gpu] == [True, True, True, True, None]   # two ranks on one GPU; NCCL: skipped
    assert "2 processes, gloo, one GPU shared" in one_gpu[0][0]
    for change, failing in [(dict(stopped=ddp(1)), 1), (dict(stopped=ddp(75)), 1), (dict(resumed=ddp()), 2),
                            (dict(resumed=ddp(log="resuming from step 1", loss=2.6)), 3),
                            (dict(full=ddp(world_size=1)), 0)]:
        rows = ddp_part.judge_ddp(2, "cpu", **{**good, **change})
        assert [i for i, r in enumerate(rows) if not r[3]] == [failing], (change, rows)


def test_mfu_uses_the_devices_own_peak():
    assert peak_flops("NVIDIA H100 80GB HBM3") == 989e12 and peak_flops("NVIDIA H100 PCIe") == 756e12
    assert peak_flops("NVIDIA H200") == 989e12 and peak_flops("NVIDIA A100-SXM4-80GB") == 312e12
    assert peak_flops("Some Future GPU") is None and peak_flops("NVIDIA H100 80GB HBM3", override=5e14) == 5e14
    assert mfu(1000.0, 1e9, 1e13, devices=2) == pytest.approx(0.05) and mfu(1000.0, 1e9, None) is None


@cuda
def test_gpu_check_passes_on_this_cuda_device(tmp_path):
    assert check.main(["--quick", "--out", str(tmp_path / "check.json")]) == 0


def test_sourcing_the_script_leaves_the_shells_options_alone(tmp_path):
    """Sourced for its functions, it sets no errexit, nounset or pipefail in the shell that sources it."""
    r = sourced(tmp_path, "set -o | grep -E '^(errexit|nounset|pipefail) '", "12.8")
    assert r.returncode == 0 and sorted(r.stdout.split()) == sorted(["errexit", "off", "nounset", "off", "pipefail",
                                                                     "off"]), r.stdout
