"""Named model sizes, torch-free (the report and cost code read them without importing torch)."""

import math

# The paper's model sizes, plus small ones for CPU demos. Context 1024 and vocab 50304 by default. An entry's
# "family" picks its class (model.build_config): none is GPT-2 (model.GPTConfig), "llama" is llama.LlamaConfig.
MODEL_SIZES = {
    "gpt2-small": dict(n_layer=12, n_head=12, n_embd=768),
    "gpt2-medium": dict(n_layer=24, n_head=16, n_embd=1024),
    "gpt2-large": dict(n_layer=36, n_head=20, n_embd=1280),
    "demo-tiny": dict(n_layer=2, n_head=2, n_embd=64, block_size=128),     # 0.12M params with a byte vocabulary
    "demo-small": dict(n_layer=4, n_head=2, n_embd=48, block_size=128),    # 0.13M: deeper at the same cost
    "demo-medium": dict(n_layer=4, n_head=2, n_embd=64, block_size=128),   # 0.22M
    # The rebuttal's C4 Llamas: GaLore/C-Optim's configs/llama_{100m,250m,350m}.json, sequence length 256
    "llama-100m": dict(family="llama", n_layer=12, n_head=10, n_embd=640, intermediate_size=1708, block_size=256),
    "llama-250m": dict(family="llama", n_layer=24, n_head=16, n_embd=768, intermediate_size=2560, block_size=256),
    "llama-350m": dict(family="llama", n_layer=24, n_head=16, n_embd=1024, intermediate_size=2736, block_size=256),
    "demo-llama": dict(family="llama", n_layer=2, n_head=2, n_embd=64, intermediate_size=172, block_size=128),  # 0.13M
}


def padded_vocab_size(vocab_size, multiple=64):
    return multiple * math.ceil(vocab_size / multiple)
