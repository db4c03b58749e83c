"""The parts of GPU training that can be exercised without a GPU: the memory fit, device pools, RNG restore."""

import gc
import weakref

import pytest
import torch

from merit_repro.launch.gpu_slots import cells_per_gpu, device_pool
from merit_repro.models import GPT, GPTConfig
from merit_repro.train import checkpoint, memory
from merit_repro.utils import UserError

GiB = 2**30


def injected(oom_above, bytes_per_sequence, tried):
    """A measurement that runs out of memory above a chosen micro-batch and is linear below it."""
    def peak_bytes(micro):
        tried.append(micro)
        return None if micro > oom_above else micro * bytes_per_sequence
    return peak_bytes


def test_the_fit_takes_the_largest_divisor_that_leaves_the_headroom():
    tried = []
    micro = memory.largest_fitting(memory.divisors_of(480), injected(40, GiB, tried), limit_bytes=36 * GiB,
                                   extra_bytes=10 * GiB)
    assert micro == 24   # 40 and 30 do not run out, but with the optimizer state they pass the limit
    assert tried == [1, 2, 24]   # (36 - 10) / 1 GiB a sequence: 26, whose largest divisor of 480 below is 24


def test_no_fitting_micro_batch_is_a_clear_error():
    with pytest.raises(UserError, match="no micro-batch fits.*tried.*1: out of memory"):
        memory.largest_fitting([4, 2, 1], injected(0, GiB, []), limit_bytes=GiB, extra_bytes=0)


def test_a_failed_attempt_is_freed_before_the_next(monkeypatch):
    """What an attempt that ran out of memory allocated is gone when the next, smaller one starts."""
    model = GPT(GPTConfig.named("demo-tiny", block_size=16, vocab_size=64))
    alive = []

    def forward_out_of_memory(x, y):
        activations = torch.empty(1024, 1024)
        alive.append(weakref.ref(activations))
        raise torch.OutOfMemoryError("injected")

    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device: None)
    monkeypatch.setattr(model, "forward", forward_out_of_memory)
    assert memory.peak_bytes_of_step(model, 8, 16, "cpu", None) is None
    gc.disable()   # freed by reference counting, not by a later collection
    try:
        assert alive and alive[0]() is None
    finally:
        gc.enable()


def test_optimizer_state_step_buffers_and_ddp_buckets_are_counted():
    model = GPT(GPTConfig.named("demo-tiny", block_size=16, vocab_size=64))
    param_bytes = sum(p.numel() * 4 for p in model.parameters())
    assert memory.unmeasured_bytes(model, 1) == 4 * param_bytes
    assert memory.unmeasured_bytes(model, 2) == 5 * param_bytes


@pytest.mark.parametrize("env, pool", [
    ({"CUDA_VISIBLE_DEVICES": "2,3,5,7", "MERIT_GPUS": "2"}, ["2", "3"]),
    ({"CUDA_VISIBLE_DEVICES": "2,3,5,7", "MERIT_GPUS": "5,7"}, ["5", "7"]),
    ({"CUDA_VISIBLE_DEVICES": "2,3,5,7"}, ["2", "3", "5", "7"]),
    ({"MERIT_GPUS": "3"}, ["0", "1", "2"]),
    ({"MERIT_GPUS": "1,4"}, ["1", "4"]),
    ({"CUDA_VISIBLE_DEVICES": ""}, []),
])
def test_the_gpu_pool_stays_within_the_visible_devices(monkeypatch, env, pool):
    for key in ("CUDA_VISIBLE_DEVICES", "MERIT_GPUS"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert device_pool() == pool


def test_in_a_scheduler_job_only_its_own_devices_count(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setenv("MERIT_GPUS", "8")   # exported from a workstation session
    assert device_pool(scheduler=True) == ["0"]


def test_a_loaded_optimizer_state_keeps_step_beside_its_parameter_and_owns_it():
    """torch's load_state_dict leaves `step` where it was saved (the CPU, or a memory-mapped file)."""
    from merit_repro.optim import build

    p = torch.nn.Parameter(torch.ones(3, 2))
    p.grad = torch.ones(3, 2)
    saved = build("merit", [p], lr=1e-3)
    saved.step()
    state = saved.state_dict()
    loaded = build("merit", [p], lr=1e-3)
    loaded.load_state_dict(state)
    step = loaded.state[p]["step"]
    assert step.device == p.device and step.dtype == torch.float32 and float(step) == 1.0
    assert step.untyped_storage().data_ptr() != state["state"][0]["step"].untyped_storage().data_ptr()


@pytest.mark.parametrize("spec, message", [("5", "more GPUs than CUDA_VISIBLE_DEVICES"), ("0,3", "outside")])
def test_a_gpu_pool_outside_the_visible_devices_is_refused(monkeypatch, spec, message):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    monkeypatch.setenv("MERIT_GPUS", spec)
    with pytest.raises(UserError, match=message):
        device_pool()


@pytest.mark.parametrize("value", ["\u00b2", "\u0663", "12\u00b2", "65", "0", "9" * 5000, "twelve"])
def test_a_gpu_share_that_is_not_ascii_digits_up_to_64_names_its_variable(monkeypatch, value):
    """'\u00b2' passes str.isdigit and then failed in int() without naming the variable; 65 or a 5000-digit count passed
    (the jobs would each try that many lock files)."""
    monkeypatch.setenv("MERIT_CELLS_PER_GPU", value)
    with pytest.raises(UserError) as err:
        cells_per_gpu()
    assert str(err.value) == (f"MERIT_CELLS_PER_GPU={value!r} must be a whole number >= 1 and <= 64: set it to how "
                              "many cells share one GPU, e.g. 12")
    monkeypatch.setenv("MERIT_CELLS_PER_GPU", "64")
    assert cells_per_gpu() == 64


@pytest.mark.parametrize("value", ["\u00b2", "65", "9" * 13])
def test_a_gpu_count_that_is_not_ascii_digits_up_to_64_names_its_variable(monkeypatch, value):
    """MERIT_GPUS='\u00b2' failed in int(); a count of 10^12 without CUDA_VISIBLE_DEVICES built that many ids."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("MERIT_GPUS", value)
    with pytest.raises(UserError, match=rf"^MERIT_GPUS={value!r} must be a whole number >= 1 and <= 64"):
        device_pool()
    monkeypatch.setenv("MERIT_GPUS", ",".join(map(str, range(65))))
    with pytest.raises(UserError, match="MERIT_GPUS names 65 devices"):
        device_pool()


@pytest.mark.parametrize("saved, index, restored", [
    (torch.tensor([7]), 3, 7),                        # this device's own state
    ([torch.tensor([1]), torch.tensor([2])], 1, 2),   # an older checkpoint with every device's
    ([torch.tensor([1]), torch.tensor([2])], 5, 2),   # ... resumed on more GPUs than it was saved with
])
def test_each_rank_restores_its_own_cuda_generator_whatever_the_gpu_count(monkeypatch, saved, index, restored):
    calls = []
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device: calls.append((int(state[0]), device)))
    state = {**checkpoint.rng_state(torch.device("cpu")), "cuda": saved}
    device = torch.device("cuda", index)
    checkpoint.set_rng_state(state, device)
    assert calls == [(restored, device)]


def test_a_checkpoint_saved_when_data_dir_was_part_of_a_cell_still_resumes(tmp_path):
    """Checkpoints from before data_dir became a location (its corpus's fingerprint is checked instead) record
    it in their config; they resume, as do those saved before optimizer_source was a key, and a checkpoint of
    another cell is still refused."""
    from merit_repro.plan.cell import CellConfig, identity
    from merit_repro.utils import UserError

    cfg = CellConfig(model="demo-tiny", optimizer="adamw", lr=1e-3, batch_size=8, tokens=4096.0, seed=0,
                     data_dir="results/data/x", tokenizer="bytes")
    path = tmp_path / "ckpt.pt"
    rest = {key: {} for key in checkpoint.KEYS}
    torch.save({**rest, "config": {**identity(cfg), "data_dir": "results/data/x"},
                "data_fingerprint": {"data": "f"}, "step": 3}, path)
    assert checkpoint.load(path, cfg, {"data": "f"}, mmap=False)["step"] == 3
    before_sources = {k: v for k, v in identity(cfg).items() if k != "optimizer_source"}   # saved before it was a key
    torch.save({**rest, "config": before_sources, "data_fingerprint": {"data": "f"}, "step": 3}, path)
    assert checkpoint.load(path, cfg, {"data": "f"}, mmap=False)["step"] == 3
    torch.save({**rest, "config": {**identity(cfg), "lr": 2e-3}, "data_fingerprint": {"data": "f"}, "step": 3},
               path)
    with pytest.raises(UserError, match=r"a checkpoint of a different cell \(keys \['lr'\] differ\)"):
        checkpoint.load(path, cfg, {"data": "f"}, mmap=False)


@pytest.mark.parametrize("spec, says", [("0,0", "names '0' twice"), ("2 3", "names '2 3', not a device"),
                                        ("1.5", "names '1.5', not a device"), (",,,", "names no device")])
def test_device_ids_that_are_no_devices_or_repeat_are_refused(monkeypatch, spec, says):
    """MERIT_GPUS=0,0 made a pool of one device twice: a two-GPU job waited for ever on its own lock."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    monkeypatch.setenv("MERIT_GPUS", spec)
    with pytest.raises(UserError, match=f"^MERIT_GPUS={spec!r} {says}: give device numbers"):
        device_pool()
