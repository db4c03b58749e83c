"""The GPU check (merit_repro.gpu_check): what needs CUDA is marked and skipped without it; the rest
runs here on the CPU with small sizes, so that the check itself is tested."""

import subprocess
import sys

import pytest
import torch

from merit_repro import gpu_check
from merit_repro.hardware import mfu, peak_flops
from merit_repro.model import GPTConfig

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_without_cuda_it_says_so_and_exits_cleanly():
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible")
    r = subprocess.run([sys.executable, "-m", "merit_repro.gpu_check"], capture_output=True, text=True)
    assert r.returncode == 0 and "no CUDA device is visible" in r.stdout


def test_optimizer_checks_pass_on_the_cpu_and_would_catch_a_mismatch(monkeypatch):
    rows = gpu_check.check_optimizers(torch.device("cpu"), steps=5, scale=8)
    assert rows and all(ok for *_, ok in rows), [r for r in rows if not r[3]]
    real = gpu_check.run_optimizer
    monkeypatch.setattr(gpu_check, "run_optimizer", lambda name, w, g, device, dtype, foreach: {
        n: v * (1.01 if foreach else 1.0) for n, v in real(name, w, g, device, dtype, foreach).items()})
    assert not all(ok for *_, ok in gpu_check.check_optimizers(torch.device("cpu"), steps=5, scale=8))


def test_the_whole_check_runs_on_a_small_model_on_the_cpu():
    """Everything but torch.compile (minutes per shape on a CPU; it runs on the CUDA machine)."""
    config = GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=32, vocab_size=256)
    rows = gpu_check.run(torch.device("cpu"), config, steps=4, batch=2, per_device_batch=8, compiled_too=False, scale=8)
    assert all(ok for *_, ok in rows), [r for r in rows if not r[3]]
    checks = " | ".join(r[0] for r in rows)
    assert "eager" in checks and "merit step vs fused AdamW" in checks and "micro-batch" in checks


def test_mfu_uses_the_devices_own_peak():
    assert peak_flops("NVIDIA H100 80GB HBM3") == 989e12 and peak_flops("NVIDIA H100 PCIe") == 756e12
    assert peak_flops("NVIDIA A100-SXM4-80GB") == 312e12 and peak_flops("Some Future GPU") is None
    assert peak_flops("NVIDIA H100 80GB HBM3", override=5e14) == 5e14
    assert mfu(1000.0, 1e9, 1e13, devices=2) == pytest.approx(0.05) and mfu(1000.0, 1e9, None) is None


@cuda
def test_gpu_check_passes_on_this_cuda_device():
    r = subprocess.run([sys.executable, "-m", "merit_repro.gpu_check", "--steps", "10"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
