"""The GPU check's plain loop (merit_repro.gpu_check.plain_loop) on the CPU, and part 8's rows that set the trainer's
tokens/s against it: judged on a GPU, reported on the CPU."""

import math
from dataclasses import asdict

import pytest
import torch

from merit_repro.gpu_check import common, tier
from merit_repro.gpu_check.plain_loop import plain_loop
from merit_repro.models import build_config
from merit_repro.plan.cell import CellConfig
from merit_repro.train.timing import autocast

CPU = torch.device("cpu")


def summary(micro_batch=2, accum=2, **config):
    """A trainer summary.json's keys that the plain loop reads, for a tiny cell."""
    cfg = CellConfig(data_dir="unused", model="demo-tiny", block_size=16, batch_size=micro_batch * accum,
                     tokens=10**4, optimizer="merit", lr=1e-3, device="cpu", **config)
    model = build_config("demo-tiny", block_size=16, vocab_size=64, n_layer=1)
    return {"config": cfg.to_dict(), "model_config": asdict(model), "micro_batch_size": micro_batch,
            "grad_accum": accum}


def test_the_plain_loop_trains_the_cell_of_a_summary_and_leaves_the_threads_as_they_were():
    threads = torch.get_num_threads()
    result = plain_loop(summary(), CPU, steps=3, threads=1)
    assert torch.get_num_threads() == threads
    assert result["tokens_per_s"] > 0 and math.isfinite(result["loss"])
    assert (result["micro_batch"], result["accum"], result["mfu"]) == (2, 2, None)   # no peak FLOP/s on a CPU


def test_the_plain_loop_uses_the_cells_optimizer():
    unknown = summary()
    unknown["config"]["optimizer"] = "sgdx"
    with pytest.raises(ValueError, match="Unknown optimizer 'sgdx'"):
        plain_loop(unknown, CPU, steps=2)
    with pytest.raises(ValueError, match="at least 2"):
        plain_loop(summary(), CPU, steps=1)


def test_an_accumulated_step_is_the_step_on_the_whole_batch_and_clips():
    """Micro-batches' losses over their number: two halves step as the whole batch does; a clip slows the step."""
    config = build_config("demo-tiny", block_size=8, vocab_size=32, n_layer=1)
    x, y = common.random_batch(config, 4, CPU, seed=0)
    after = {}
    for name, micro_batches, clip in (("whole", [(x, y)], 0.0), ("halves", [(x[:2], y[:2]), (x[2:], y[2:])], 0.0),
                                      ("clipped", [(x, y)], 1e-3)):
        model = common.new_model(config, CPU)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        loss = common.accumulated_step(model, model, opt, micro_batches, autocast(CPU, False), clip)
        after[name] = (loss, torch.cat([p.detach().flatten() for p in model.parameters()]))
    start = torch.cat([p.detach().flatten() for p in common.new_model(config, CPU).parameters()])
    torch.testing.assert_close(after["halves"][0], after["whole"][0])
    torch.testing.assert_close(after["halves"][1], after["whole"][1])
    moved = {name: (p - start).norm() for name, (_, p) in after.items()}
    assert 0 < moved["clipped"] < moved["whole"]


TRAINER = {"status": "ok", "tokens_per_s": 98000.0, "mfu": 0.38, "config": {"compile": True}}


def plain(tokens_per_s=100000.0, loss=10.9):
    return {"tokens_per_s": tokens_per_s, "mfu": 0.39, "loss": loss, "micro_batch": 64, "accum": 2}


def test_the_trainer_is_judged_against_the_plain_loop_on_a_gpu():
    rows = tier.judge_tier(0, TRAINER, (15.0, 8.0), "cuda", plain=plain())
    assert [r[3] for r in rows] == [True, True, True, True]
    assert "micro-batch 64 x 2" in rows[2][0] and "100,000 tok/s" in rows[2][1]
    assert rows[3][1] == "98,000 / 100,000 = 0.980" and rows[3][2] == f">= {tier.TRAINER_RATIO}"
    assert [r[3] for r in tier.judge_tier(0, TRAINER, (15.0, 8.0), "cuda", plain=plain(110000.0))][2:] == [True, False]


def test_on_the_cpu_the_ratio_is_reported_not_judged():
    rows = tier.judge_tier(0, TRAINER, (1e6, 1e5), "cpu", plain=plain(200000.0))
    assert [r[3] for r in rows] == [True, None, True, None] and rows[3][1].endswith("= 0.490")


def test_a_plain_loop_that_failed_is_a_failed_row_without_a_ratio():
    rows = tier.judge_tier(0, TRAINER, (15.0, 8.0), "cuda", plain="OutOfMemoryError: CUDA out of memory")
    assert [r[3] for r in rows] == [True, True, False] and rows[2][1].startswith("OutOfMemoryError")
    assert [r[3] for r in tier.judge_tier(0, TRAINER, (15.0, 8.0), "cuda", plain=plain(loss=math.nan))][2:] == \
        [False, True]
    assert len(tier.judge_tier(1, None, None, "cuda", "error: x")) == 1   # no trainer cell: no plain loop
