"""GPT-2 as in nanoGPT (the authors trained "a vanilla implementation of GPT-2 (nanoGPT)").

Pre-LayerNorm blocks, GELU MLP, learned positions, lm_head tied to the token embedding,
bias=False, dropout 0, vocabulary padded to a multiple of 64. Additions for this paper:
optional QK-LayerNorm (Figure 6b) and the max-attention-logit (MAL) probe.

The probe and the counts are ``base.LanguageModel``'s, shared with the Llama family (llama.py).
"""

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.nn import functional as F

from merit_repro.config.registry import MODEL_SIZES

from .base import LanguageModel, init_weights, max_attention_logit


@dataclass
class GPTConfig:
    block_size: int = 1024
    vocab_size: int = 50304
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    qk_norm: bool = False
    bias: bool = False
    family: str = "gpt2"

    @classmethod
    def named(cls, name, **overrides):
        """The named GPT-2 size (merit_repro.config.registry.MODEL_SIZES) with overrides."""
        if name not in MODEL_SIZES or MODEL_SIZES[name].get("family", "gpt2") != "gpt2":
            gpt2 = [n for n, size in MODEL_SIZES.items() if size.get("family", "gpt2") == "gpt2"]
            raise ValueError(f"{name!r} is not a GPT-2 size; known sizes: {', '.join(gpt2)}")
        return cls(**{**MODEL_SIZES[name], **overrides})

    def __post_init__(self):
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd={self.n_embd} is not divisible by n_head={self.n_head}")
        if self.family != "gpt2":
            raise ValueError(f"GPTConfig is the gpt2 family, not {self.family!r}")


class LayerNorm(nn.Module):
    """LayerNorm with an optional bias (torch's has no bias=False before 2.1)."""

    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.n_head = config.n_head
        self.head_dim = config.n_embd // config.n_head
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.q_norm = LayerNorm(self.head_dim, config.bias) if config.qk_norm else None
        self.k_norm = LayerNorm(self.head_dim, config.bias) if config.qk_norm else None

    def forward(self, x, mal=None):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, self.head_dim).transpose(1, 2) for t in (q, k, v))
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if mal is not None:  # the probe sees exactly the q and k that attention uses
            mal.append(max_attention_logit(q, k))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = LayerNorm(config.n_embd, config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = LayerNorm(config.n_embd, config.bias)
        self.mlp = MLP(config)

    def forward(self, x, mal=None):
        x = x + self.attn(self.ln_1(x), mal)
        return x + self.mlp(self.ln_2(x))


class GPT(LanguageModel):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            wpe=nn.Embedding(config.block_size, config.n_embd),
            h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f=LayerNorm(config.n_embd, config.bias),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying
        self.apply(init_weights)
        for name, p in self.named_parameters():  # GPT-2's scaled init of residual projections
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    def lookup_tables(self):
        return [self.transformer.wpe.weight]   # the token table is also the (tied) lm_head: counted in 6N

    def qk_weights(self):
        w = torch.stack([blk.attn.c_attn.weight for blk in self.transformer.h])  # (L, 3C, C): q, k, v rows
        C = self.config.n_embd
        return w[:, :C], w[:, C:2 * C]

    def forward(self, idx, targets=None, mal=None):
        """Logits (and mean cross-entropy when targets are given). mal: list to receive (B, H) per layer."""
        B, T = idx.size()
        if T > self.config.block_size:
            raise ValueError(f"sequence length {T} exceeds block_size {self.config.block_size}")
        pos = torch.arange(T, dtype=torch.long, device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x, mal)
        return self.output(self.transformer.ln_f(x), targets)
