"""The Llama family (merit_repro.models.llama): shapes and sizes, RoPE, the MAL probe, QK-norm, training, the factory."""
import csv
import json
import math

import pytest
import torch

from merit_repro.models import GPT, build_config, build_model, config_from_dict
from merit_repro.models.llama import Llama, LlamaConfig, apply_rope, rope_tables
from merit_repro.optim import build, param_groups


def tiny(**overrides):
    torch.manual_seed(0)
    return Llama(LlamaConfig(**{**dict(n_layer=2, n_head=2, n_embd=16, intermediate_size=40, block_size=8,
                                       vocab_size=64), **overrides}))


# C-Optim's (GaLore's) configs/llama_*.json: layers, hidden, heads, intermediate, and the json's vocab_size
# (32100, T5's tokenizer with its 100 sentinels, for 100M; 32000 for 250M and 350M).
C_OPTIM = {"llama-100m": (12, 640, 10, 1708, 32100, 100.12),
           "llama-250m": (24, 768, 16, 2560, 32000, 247.37),
           "llama-350m": (24, 1024, 16, 2736, 32000, 367.97)}


@pytest.mark.parametrize("name", C_OPTIM)
def test_named_sizes_have_c_optims_parameter_counts(name):
    L, C, H, inter, V, millions = C_OPTIM[name]
    with torch.device("meta"):
        model = build_model(build_config(name, vocab_size=V))
    cfg = model.config
    assert isinstance(model, Llama) and (cfg.n_layer, cfg.n_embd, cfg.n_head, cfg.intermediate_size) == (L, C, H, inter)
    assert cfg.block_size == 256 and cfg.norm_eps == 1e-6 and cfg.rope_theta == 10000.0
    # embedding + L x (q, k, v, o; gate, up, down; 2 RMSNorms) + final RMSNorm + untied lm_head
    expected = V * C + L * (4 * C * C + 3 * C * inter + 2 * C) + C + V * C
    print(f"{name}: {model.num_params() / 1e6:.2f}M parameters with vocab {V}")
    assert model.num_params() == expected and round(expected / 1e6, 2) == millions
    assert model.num_params(non_embedding=True) == expected - V * C   # the input table only: lm_head is a matmul
    assert model.flops_per_token() == 6 * (expected - V * C) + 12 * L * C * 256


def test_attention_is_causal_and_shapes():
    model = tiny()
    x = torch.randint(0, 64, (2, 8))
    logits, loss = model(x, x)
    assert logits.shape == (2, 8, 64) and loss.ndim == 0
    assert model.lm_head.weight is not model.embed_tokens.weight   # untied
    for t in range(8):
        y = x.clone()
        y[:, t] = (y[:, t] + 1) % 64
        with torch.no_grad():
            a, b = model(x)[0], model(y)[0]
        assert torch.equal(a[:, :t], b[:, :t]) and not torch.allclose(a[:, t:], b[:, t:])


def rotation(t, d, theta=10000.0):
    """The explicit (d, d) RoPE rotation at position t, rotate_half layout: pair i is dims (i, i + d/2)."""
    R = torch.zeros(d, d, dtype=torch.float64)
    for i in range(d // 2):
        a = t * theta ** (-2 * i / d)
        R[i, i], R[i, i + d // 2] = math.cos(a), -math.sin(a)
        R[i + d // 2, i], R[i + d // 2, i + d // 2] = math.sin(a), math.cos(a)
    return R


def direct_rope(x):
    """x (..., T, d) rotated position by position with explicit 2x2 rotations."""
    T, d = x.shape[-2:]
    return torch.stack([x[..., t, :].double() @ rotation(t, d).T for t in range(T)], dim=-2).to(x.dtype)


def test_rope_is_pairwise_rotation_and_relative():
    torch.manual_seed(0)
    T, d = 12, 8
    x = torch.randn(3, T, d)
    cos, sin = rope_tables(T, d, 10000.0, x.device)
    assert torch.allclose(apply_rope(x, cos, sin), direct_rope(x), atol=1e-6)
    # the same q and k at every position: q_m·k_n after RoPE depends on m - n only
    q, k = torch.randn(d).expand(T, d), torch.randn(d).expand(T, d)
    scores = apply_rope(q, cos, sin) @ apply_rope(k, cos, sin).T
    for offset in range(-T + 1, T):
        diagonal = scores.diagonal(-offset)   # entries (m, m - offset)
        assert torch.allclose(diagonal, diagonal[0].expand_as(diagonal), atol=1e-5)


def direct_max_attention_logits(model, idx):
    """Per layer and head, the max over causal pairs of q·k/sqrt(d), q and k rotated with explicit matrices."""
    cfg = model.config
    d = cfg.n_embd // cfg.n_head
    B, T = idx.shape
    x = model.embed_tokens(idx)
    out = torch.full((cfg.n_layer, cfg.n_head), -math.inf)
    for layer, block in enumerate(model.layers):
        h = block.input_layernorm(x)
        attn = block.self_attn
        q, k = (proj(h).view(B, T, cfg.n_head, d).transpose(1, 2) for proj in (attn.q_proj, attn.k_proj))
        if cfg.qk_norm:
            q, k = attn.q_norm(q), attn.k_norm(k)
        q, k = direct_rope(q), direct_rope(k)
        for head in range(cfg.n_head):
            for b in range(B):
                for i in range(T):
                    for j in range(i + 1):
                        out[layer, head] = max(out[layer, head], (q[b, head, i] @ k[b, head, j]).item() / math.sqrt(d))
        x = block(x, *rope_tables(T, d, cfg.rope_theta, x.device))
    return out


@pytest.mark.parametrize("qk_norm", [False, True])
def test_mal_probe_sees_the_logits_after_rope(qk_norm):
    model = tiny(qk_norm=qk_norm)
    with torch.no_grad():   # large, uneven logits, as after training
        for block in model.layers:
            for proj in (block.self_attn.q_proj, block.self_attn.k_proj):
                proj.weight.mul_(torch.rand_like(proj.weight) * 40)
            if qk_norm:   # uneven per-dim scales do not commute with the rotation: the order is tested
                block.self_attn.q_norm.weight.uniform_(0.5, 3)
    idx = torch.randint(0, 64, (2, 8))
    mal, wq, wk = model.probe_attention(idx)
    with torch.no_grad():
        expected = direct_max_attention_logits(model, idx)
    assert mal.shape == (2, 2) and torch.allclose(mal, expected, rtol=1e-5, atol=1e-5)
    attn = model.layers[1].self_attn
    assert wq[1, 1] == attn.q_proj.weight[8:16].abs().max() and wk[1, 0] == attn.k_proj.weight[:8].abs().max()


def test_qk_norm_makes_q_and_k_unit_rms_per_head_before_rope():
    model = tiny(qk_norm=True)
    seen = []
    for block in model.layers:
        for norm in (block.self_attn.q_norm, block.self_attn.k_norm):
            norm.register_forward_hook(lambda module, args, out: seen.append(out))
    with torch.no_grad():
        model(torch.randint(0, 64, (2, 8)))
    assert len(seen) == 4 and all(out.shape == (2, 2, 8, 8) for out in seen)   # (B, H, T, head_dim)
    for out in seen:
        assert torch.allclose(out.pow(2).mean(-1).sqrt(), torch.ones(2, 2, 8), atol=1e-3)


def test_merit_steps_reduce_the_loss_and_norms_are_not_decayed():
    model = build_model(build_config("demo-llama", vocab_size=64, block_size=16))
    groups = param_groups(model, 0.1)
    no_decay = {id(p) for g in groups if g["weight_decay"] == 0.0 for p in g["params"]}
    norms = {n for n, p in model.named_parameters() if id(p) in no_decay}
    assert norms == {n for n in dict(model.named_parameters()) if n.endswith("layernorm.weight")} | {"norm.weight"}
    opt = build("merit", groups, lr=1e-2, betas=(0.9, 0.95), eps=1e-6)
    torch.manual_seed(1)
    x, y = torch.randint(0, 64, (8, 16)), torch.randint(0, 64, (8, 16))
    losses = []
    for _ in range(8):
        _, loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    assert losses[0] == pytest.approx(math.log(64), rel=0.05) and losses[-1] < losses[0] - 0.3


def test_factory_round_trips_through_config_dict():
    model = build_model(build_config("demo-llama", vocab_size=256))
    saved = json.loads(json.dumps(model.config_dict()))   # as summary.json holds it
    assert saved["family"] == "llama" and saved["intermediate_size"] == 172
    again = build_model(config_from_dict(saved))
    assert isinstance(again, Llama) and again.config == model.config
    again.load_state_dict(model.state_dict())
    x = torch.randint(0, 256, (1, 16))
    assert torch.equal(again(x)[0], model(x)[0])
    gpt = build_config("demo-tiny", vocab_size=256)
    assert isinstance(build_model(gpt), GPT) and config_from_dict(build_model(gpt).config_dict()) == gpt
    assert config_from_dict({k: v for k, v in vars(gpt).items() if k != "family"}) == gpt   # a summary of old
    overridden = build_config("llama-100m", n_layer=3, n_head=4, n_embd=128)
    assert (overridden.n_layer, overridden.n_head, overridden.n_embd, overridden.intermediate_size) == (3, 4, 128, 1708)


@pytest.mark.slow
def test_a_llama_cell_trains_through_the_trainer_and_evaluates_again(tmp_path, data_dir):
    from merit_repro.plan.cell import CellConfig
    from merit_repro.train.evaluate import main as evaluate
    from merit_repro.train.loop import Run

    cell = dict(model="demo-llama", block_size=32, batch_size=8, tokens=8 * 32 * 20, eval_every=10, mal_every=10,
                eval_tokens=2048, mal_batch=2, lr=3e-3, data_dir=str(data_dir), device="cpu", save_model=True)
    summary = Run(CellConfig.from_dict(cell).validate(), tmp_path / "run").run()
    assert summary["status"] == "ok" and summary["steps"] == 20
    assert summary["final_val_loss"] < summary["initial_val_loss"]
    assert summary["model_config"]["family"] == "llama" and summary["model_config"]["intermediate_size"] == 172
    with open(tmp_path / "run" / "metrics.csv") as f:
        assert [r["step"] for r in csv.DictReader(f)] == [str(s) for s in range(21)]
    with open(tmp_path / "run" / "mal.csv") as f:
        mal = list(csv.DictReader(f))
    assert {r["step"] for r in mal} == {"0", "10", "20"} and len(mal) == 3 * 2 * 2
    assert {(r["layer"], r["head"]) for r in mal} == {("1", "1"), ("1", "2"), ("2", "1"), ("2", "2")}
    assert all(math.isfinite(float(r["mal"])) for r in mal)
    assert evaluate(["--run", str(tmp_path / "run"), "--device", "cpu", "--out", str(tmp_path / "again.json")]) == 0
    again = json.loads((tmp_path / "again.json").read_text())
    assert again["val_loss"] == pytest.approx(summary["final_val_loss"], rel=1e-5)
