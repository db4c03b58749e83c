"""Llama as GaLore/C-Optim pre-train it on C4 (HF LlamaForCausalLM, their configs/llama_*.json): the rebuttal's
Llama-100M/250M/350M.

Pre-RMSNorm blocks (eps 1e-6), SwiGLU MLP, rotary position embeddings (theta 10000, HF's rotate_half layout:
dims i and i + d/2 form pair i), no biases, lm_head untied from the input embedding, HF's module names
(q_proj ... down_proj). Optional QK-norm: RMSNorm over head_dim on q and k before RoPE. Init: normal(0, 0.02)
for every Linear and Embedding (initializer_range 0.02), and no scaled init of residual projections (HF Llama
has none). The interface (forward, probe_attention, flops_per_token, num_params, config_dict) is base.LanguageModel's.
"""

from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.nn import functional as F

from .base import LanguageModel, init_weights, max_attention_logit


@dataclass
class LlamaConfig:
    block_size: int = 256
    vocab_size: int = 32000
    n_layer: int = 12
    n_head: int = 10
    n_embd: int = 640
    intermediate_size: int = 1708
    qk_norm: bool = False
    rope_theta: float = 10000.0
    norm_eps: float = 1e-6
    family: str = "llama"

    def __post_init__(self):
        if self.n_embd % self.n_head or (self.n_embd // self.n_head) % 2:
            raise ValueError(f"n_embd={self.n_embd} / n_head={self.n_head} must be an even head size (RoPE pairs)")
        if self.family != "llama":
            raise ValueError(f"LlamaConfig is the llama family, not {self.family!r}")


class RMSNorm(nn.Module):
    """HF's LlamaRMSNorm: normalised in float32, back to the input's dtype, then scaled."""

    def __init__(self, ndim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.eps = eps

    def forward(self, x):
        x32 = x.float()
        return self.weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x)


def rope_tables(seq_len, head_dim, theta, device):
    """cos and sin, (seq_len, head_dim) in float32: position t rotates pair i by t·theta^(-2i/head_dim)."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(seq_len, device=device, dtype=torch.float32), inv_freq)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x, cos, sin):
    """x (..., T, head_dim) rotated pairwise by its position's angles (HF's apply_rotary_pos_emb)."""
    return x * cos.to(x.dtype) + rotate_half(x) * sin.to(x.dtype)


class Attention(nn.Module):
    def __init__(self, config):
        super().__init__()
        C = config.n_embd
        self.n_head, self.head_dim = config.n_head, C // config.n_head
        self.q_proj = nn.Linear(C, C, bias=False)
        self.k_proj = nn.Linear(C, C, bias=False)
        self.v_proj = nn.Linear(C, C, bias=False)
        self.o_proj = nn.Linear(C, C, bias=False)
        self.q_norm = RMSNorm(self.head_dim, config.norm_eps) if config.qk_norm else None
        self.k_norm = RMSNorm(self.head_dim, config.norm_eps) if config.qk_norm else None

    def forward(self, x, cos, sin, mal=None):
        B, T, C = x.size()
        q, k, v = (proj(x).view(B, T, self.n_head, self.head_dim).transpose(1, 2)
                   for proj in (self.q_proj, self.k_proj, self.v_proj))
        if self.q_norm is not None:   # QK-norm over head_dim, before the rotation
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if mal is not None:   # after RoPE: the probe sees the logits the softmax sees
            mal.append(max_attention_logit(q, k))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class SwiGLU(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.gate_proj = nn.Linear(config.n_embd, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.n_embd, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.n_embd, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.input_layernorm = RMSNorm(config.n_embd, config.norm_eps)
        self.self_attn = Attention(config)
        self.post_attention_layernorm = RMSNorm(config.n_embd, config.norm_eps)
        self.mlp = SwiGLU(config)

    def forward(self, x, cos, sin, mal=None):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mal)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(LanguageModel):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.n_embd)
        self.layers = nn.ModuleList([Block(config) for _ in range(config.n_layer)])
        self.norm = RMSNorm(config.n_embd, config.norm_eps)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)   # untied
        self.apply(init_weights)

    def lookup_tables(self):
        return [self.embed_tokens.weight]   # the untied lm_head is a matmul: counted in 6N

    def qk_weights(self):
        return (torch.stack([blk.self_attn.q_proj.weight for blk in self.layers]),
                torch.stack([blk.self_attn.k_proj.weight for blk in self.layers]))

    def forward(self, idx, targets=None, mal=None):
        """Logits (and mean cross-entropy when targets are given). mal: list to receive (B, H) per layer, the
        max causal logit q·k/sqrt(d) with q and k after QK-norm and RoPE, as the softmax sees them."""
        B, T = idx.size()
        if T > self.config.block_size:
            raise ValueError(f"sequence length {T} exceeds block_size {self.config.block_size}")
        cos, sin = rope_tables(T, self.config.n_embd // self.config.n_head, self.config.rope_theta, idx.device)
        x = self.embed_tokens(idx)
        for block in self.layers:
            x = block(x, cos, sin, mal)
        return self.output(self.norm(x), targets)
