"""What the trainer, the evaluator and the MAL probe use of a model, shared by GPT-2 (gpt.py) and Llama
(llama.py): the loss head, parameter and FLOP counts, and the max-attention-logit (MAL) probe.

The MAL of a head is the largest causal pre-softmax logit q·k / sqrt(d_head) over a fixed probe batch: the
quantity the paper tracks (its Figure 2 and MAL tables). Each attention module appends it per (batch, head)
when forward is given a ``mal`` list, from exactly the q and k its softmax sees.
"""

import math
from dataclasses import asdict

import torch
import torch.nn as nn
from torch.nn import functional as F


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
        return asdict(self.config)   # with its family: models.config_from_dict rebuilds the right class
