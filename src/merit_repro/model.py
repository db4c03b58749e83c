"""GPT-2 as in nanoGPT (the authors trained "a vanilla implementation of GPT-2 (nanoGPT)").

Pre-LayerNorm blocks, GELU MLP, learned positions, lm_head tied to the token embedding,
bias=False, dropout 0, vocabulary padded to a multiple of 64. Additions for this paper:
optional QK-LayerNorm (Figure 6b) and the max-attention-logit (MAL) probe.
"""

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
from torch.nn import functional as F

from .sizes import MODEL_SIZES, padded_vocab_size  # noqa: F401  (re-exported)


@dataclass
class GPTConfig:
    block_size: int = 1024
    vocab_size: int = 50304
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    qk_norm: bool = False
    bias: bool = False

    @classmethod
    def named(cls, name, **overrides):
        if name not in MODEL_SIZES:
            raise ValueError(f"Unknown model {name!r}; known models: {', '.join(MODEL_SIZES)} "
                             "(or give n_layer/n_head/n_embd in the config)")
        return cls(**{**MODEL_SIZES[name], **overrides})

    def __post_init__(self):
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd={self.n_embd} is not divisible by n_head={self.n_head}")


class LayerNorm(nn.Module):
    """LayerNorm with an optional bias (torch's has no bias=False before 2.1)."""

    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


def max_attention_logit(q, k):
    """Per (batch, head): max over causal query/key pairs of q·k / sqrt(d_head), in float32."""
    with torch.autocast(device_type=q.device.type, enabled=False):
        q, k = q.float(), k.float()
        logits = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))
        t = q.size(-2)
        causal = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
        return logits.masked_fill(~causal, -math.inf).amax(dim=(-2, -1))


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


class GPT(nn.Module):
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
        self.apply(self._init_weights)
        for name, p in self.named_parameters():  # GPT-2's scaled init of residual projections
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def num_params(self, non_embedding=False):
        """Parameters counted once (tied weights once); non_embedding drops the position table."""
        n = sum(p.numel() for p in self.parameters())
        return n - self.transformer.wpe.weight.numel() if non_embedding else n

    def forward(self, idx, targets=None, mal=None):
        """Logits (and mean cross-entropy when targets are given). mal: list to receive (B, H) per layer."""
        B, T = idx.size()
        if T > self.config.block_size:
            raise ValueError(f"sequence length {T} exceeds block_size {self.config.block_size}")
        pos = torch.arange(T, dtype=torch.long, device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x, mal)
        x = self.transformer.ln_f(x)
        logits = self.lm_head(x)
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss

    @torch.no_grad()
    def probe_attention(self, idx):
        """The MAL probe on a fixed batch: (n_layer, n_head) max attention logits, and per layer and
        head ‖W_q‖_max and ‖W_k‖_max (the rows of c_attn that produce that head's q and k)."""
        mal = []
        self(idx, mal=mal)
        mal = torch.stack([m.amax(dim=0) for m in mal])
        C, H = self.config.n_embd, self.config.n_head
        w = torch.stack([blk.attn.c_attn.weight.detach() for blk in self.transformer.h])  # (L, 3C, C)
        per_head = w.abs().view(len(self.transformer.h), 3, H, C // H * C).amax(dim=-1)
        return mal.float(), per_head[:, 0].float(), per_head[:, 1].float()

    def flops_per_token(self, seq_len=None):
        """Training FLOPs per token: 6N for the weights plus the attention scores (PaLM appendix B)."""
        cfg = self.config
        t = seq_len or cfg.block_size
        return 6 * self.num_params(non_embedding=True) + 12 * cfg.n_layer * cfg.n_embd * t

    def config_dict(self):
        return asdict(self.config)
