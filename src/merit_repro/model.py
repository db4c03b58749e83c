"""GPT-2 as in nanoGPT (the authors trained "a vanilla implementation of GPT-2 (nanoGPT)").

Pre-LayerNorm blocks, GELU MLP, learned positions, lm_head tied to the token embedding,
bias=False, dropout 0, vocabulary padded to a multiple of 64. Additions for this paper:
optional QK-LayerNorm (Figure 6b) and the max-attention-logit (MAL) probe.

``LanguageModel`` is what the trainer, evaluator and MAL probe use of a model, shared with the Llama family
(llama.py); ``build_config``/``build_model`` make either from a named size (sizes.MODEL_SIZES) or a saved
``config_dict()``.
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
    family: str = "gpt2"

    @classmethod
    def named(cls, name, **overrides):
        config = build_config(name, **overrides)
        if not isinstance(config, cls):
            raise ValueError(f"{name!r} is a {config.family} model, not GPT-2; build it with model.build_config")
        return config

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


def max_attention_logit(q, k):
    """Per (batch, head): max over causal query/key pairs of q·k / sqrt(d_head), in float32."""
    with torch.autocast(device_type=q.device.type, enabled=False):
        q, k = q.float(), k.float()
        logits = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))
        t = q.size(-2)
        causal = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
        return logits.masked_fill(~causal, -math.inf).amax(dim=(-2, -1))


def init_weights(module):
    """normal(0, 0.02) for every Linear and Embedding, zero biases (GPT-2's and HF Llama's initializer_range)."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)


class LanguageModel(nn.Module):
    """What the trainer, evaluator and MAL probe use of a model, beyond forward(idx, targets=None, mal=None)
    -> (logits, loss). A subclass has ``config`` (n_layer, n_head, n_embd, block_size), ``qk_weights()`` and
    ``lookup_tables()``."""

    def qk_weights(self):
        """(W_q, W_k), each (n_layer, n_embd, n_embd): the rows producing head h are h*d..(h+1)*d."""
        raise NotImplementedError

    def lookup_tables(self):
        """The embedding tables only looked up, never multiplied: num_params(non_embedding=True) drops them."""
        raise NotImplementedError

    def output(self, x, targets=None):
        """(logits, mean cross-entropy or None) from the final normalised hidden states."""
        logits = self.lm_head(x)
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    def num_params(self, non_embedding=False):
        """Parameters counted once (tied weights once); non_embedding drops the lookup-only tables."""
        n = sum(p.numel() for p in self.parameters())
        return n - sum(t.numel() for t in self.lookup_tables()) if non_embedding else n

    @torch.no_grad()
    def probe_attention(self, idx):
        """The MAL probe on a fixed batch: (n_layer, n_head) max attention logits (max over the batch), and per
        layer and head ‖W_q‖_max and ‖W_k‖_max (the max-abs entry of the rows that produce that head's q and k)."""
        mal = []
        self(idx, mal=mal)
        mal = torch.stack([m.amax(dim=0) for m in mal])
        wq, wk = (w.detach().abs().view(w.size(0), self.config.n_head, -1).amax(dim=-1) for w in self.qk_weights())
        return mal.float(), wq.float(), wk.float()

    def flops_per_token(self, seq_len=None):
        """Training FLOPs per token: 6N for the weights (N = num_params(non_embedding=True), the matmul weights
        lm_head included) plus the attention scores 12·L·C·T (PaLM appendix B)."""
        cfg = self.config
        t = seq_len or cfg.block_size
        return 6 * self.num_params(non_embedding=True) + 12 * cfg.n_layer * cfg.n_embd * t

    def config_dict(self):
        return asdict(self.config)   # with its family: config_from_dict rebuilds the right class


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


# ---------------------------------------------------------------- by name or saved config


def config_from_dict(d):
    """The config a ``config_dict()`` (or a named size's entry) describes; no family is GPT-2 (older summaries)."""
    from .llama import LlamaConfig   # here: llama.py imports this module

    families = {"gpt2": GPTConfig, "llama": LlamaConfig}
    family = d.get("family", "gpt2")
    if family not in families:
        raise ValueError(f"Unknown model family {family!r}; known families: {', '.join(families)}")
    return families[family](**d)


def build_config(name, **overrides):
    """The config of the named size (sizes.MODEL_SIZES), of its family's class, with overrides."""
    if name not in MODEL_SIZES:
        raise ValueError(f"Unknown model {name!r}; known models: {', '.join(MODEL_SIZES)} "
                         "(or give n_layer/n_head/n_embd in the config)")
    return config_from_dict({**MODEL_SIZES[name], **overrides})


def build_model(config):
    """A GPT or a Llama, by the config's family."""
    from .llama import Llama

    return Llama(config) if config.family == "llama" else GPT(config)
