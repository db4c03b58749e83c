import math

import pytest
import torch

from merit_repro.models import MODEL_SIZES, GPT, GPTConfig, build_config, build_model, padded_vocab_size
from merit_repro.plan import flops
from merit_repro.plan.cell import CellConfig


@pytest.mark.parametrize("name,millions", [("gpt2-small", 124), ("gpt2-medium", 355), ("gpt2-large", 774)])
def test_gpt2_parameter_counts(name, millions):
    with torch.device("meta"):
        model = GPT(GPTConfig.named(name, vocab_size=50257))
    # bias=False drops GPT-2's ~0.1% of bias parameters; the sizes stay the paper's 124M/355M/774M
    assert model.num_params() / 1e6 == pytest.approx(millions, rel=0.005)


def test_vocab_padding_and_shapes():
    assert padded_vocab_size(50257) == 50304 and padded_vocab_size(256) == 256
    model = GPT(GPTConfig.named("demo-tiny", vocab_size=256))
    x = torch.randint(0, 256, (3, 16))
    logits, loss = model(x, x)
    assert logits.shape == (3, 16, 256) and loss.ndim == 0
    assert model.lm_head.weight is model.transformer.wte.weight


def naive_max_attention_logits(model, idx):
    """Per layer and head, loop over every causal (query, key) pair of the first sequence set."""
    cfg = model.config
    d = cfg.n_embd // cfg.n_head
    x = model.transformer.wte(idx) + model.transformer.wpe(torch.arange(idx.size(1)))
    out = torch.full((cfg.n_layer, cfg.n_head), -math.inf)
    for layer, block in enumerate(model.transformer.h):
        qkv = block.ln_1(x) @ block.attn.c_attn.weight.T
        for h in range(cfg.n_head):
            q = qkv[..., h * d:(h + 1) * d]
            k = qkv[..., cfg.n_embd + h * d: cfg.n_embd + (h + 1) * d]
            if cfg.qk_norm:
                q, k = block.attn.q_norm(q), block.attn.k_norm(k)
            for b in range(idx.size(0)):
                for i in range(idx.size(1)):
                    for j in range(i + 1):
                        out[layer, h] = max(out[layer, h], (q[b, i] @ k[b, j]).item() / math.sqrt(d))
        x = block(x)
    return out


@pytest.mark.parametrize("qk_norm", [False, True])
def test_mal_probe_matches_naive_computation(qk_norm):
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=2, n_head=2, n_embd=16, block_size=8, vocab_size=64, qk_norm=qk_norm))
    with torch.no_grad():  # make the logits large and uneven, as after training
        for block in model.transformer.h:
            block.attn.c_attn.weight.mul_(torch.rand_like(block.attn.c_attn.weight) * 40)
            if qk_norm:
                block.attn.q_norm.weight.uniform_(0.5, 3)
    idx = torch.randint(0, 64, (2, 8))
    mal, wq, wk = model.probe_attention(idx)
    with torch.no_grad():
        expected = naive_max_attention_logits(model, idx)
    assert torch.allclose(mal, expected, rtol=1e-5, atol=1e-5)
    w = model.transformer.h[1].attn.c_attn.weight
    assert wq[1, 1] == w[8:16].abs().max() and wk[1, 0] == w[16:24].abs().max()


def test_lr_schedule_warmup_then_cosine_to_min():
    cfg = CellConfig(lr=1e-3, batch_size=1, block_size=1, tokens=100, warmup_frac=0.1, min_lr_frac=0.1)
    assert cfg.steps == 100 and cfg.lr_warmup_steps == 10
    assert cfg.lr_at(0) == pytest.approx(1e-4)
    assert cfg.lr_at(9) == pytest.approx(1e-3)
    assert cfg.lr_at(99) == pytest.approx(1e-4)
    mid = 10 + (99 - 10) / 2
    assert cfg.lr_at(int(mid)) == pytest.approx(1e-4 + 0.5 * (1 + math.cos(math.pi * (int(mid) - 10) / 89)) * 9e-4)
    lrs = [cfg.lr_at(s) for s in range(10, 100)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:]))


def test_attention_is_causal():
    """Changing the tokens after position t leaves every output up to t unchanged (and changes the rest)."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=2, n_head=2, n_embd=16, block_size=12, vocab_size=64))
    x = torch.randint(0, 64, (2, 12))
    y = x.clone()
    y[:, 7:] = (y[:, 7:] + 1 + torch.randint(0, 62, y[:, 7:].shape)) % 64
    with torch.no_grad():
        a, _ = model(x)
        b, _ = model(y)
    assert torch.equal(a[:, :7], b[:, :7])
    assert not torch.allclose(a[:, 7:], b[:, 7:])


def test_no_warmup_means_the_peak_lr_from_the_first_step():
    cfg = CellConfig(lr=1e-3, batch_size=1, block_size=1, tokens=100, warmup_frac=0.0, min_lr_frac=0.1)
    assert cfg.lr_warmup_steps == 0 and cfg.lr_at(0) == pytest.approx(1e-3)


@pytest.mark.parametrize("name", sorted(MODEL_SIZES))
@pytest.mark.parametrize("qk_norm", [False, True])
def test_the_torch_free_counts_are_the_built_models(name, qk_norm):
    """plan.flops counts from the shape (the cost estimate and wall-time requests import no torch); the trainer
    counts on the model it builds. Both must agree, for every named size, with QK-norm and without."""
    settings = {"model": name, "tokenizer": "gpt2", "block_size": 256, "qk_norm": qk_norm}
    with torch.device("meta"):
        model = build_model(build_config(name, block_size=256, vocab_size=50304, qk_norm=qk_norm))
    assert flops.of_cell(settings) == (model.flops_per_token(), model.num_params())
