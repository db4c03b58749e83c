"""The language models: GPT-2 (nanoGPT) and Llama, each with the MAL probe, built by name.

``build_config(name, **overrides)`` gives the config of a named size (``merit_repro.config.registry.MODEL_SIZES``)
of its family's class; ``build_model(config)`` the model; ``config_from_dict`` rebuilds a saved ``config_dict()``.
"""

from merit_repro.config.registry import MODEL_SIZES, padded_vocab_size

from .base import LanguageModel, max_attention_logit
from .gpt import GPT, GPTConfig
from .llama import Llama, LlamaConfig

__all__ = ["GPT", "GPTConfig", "LanguageModel", "Llama", "LlamaConfig", "MODEL_SIZES", "build_config", "build_model",
           "config_from_dict", "max_attention_logit", "padded_vocab_size"]


def config_from_dict(d):
    """The config a ``config_dict()`` (or a named size's entry) describes; no family is GPT-2 (the sizes' entries)."""
    families = {"gpt2": GPTConfig, "llama": LlamaConfig}
    family = d.get("family", "gpt2")
    if family not in families:
        raise ValueError(f"Unknown model family {family!r}; known families: {', '.join(families)}")
    return families[family](**d)


def build_config(name, **overrides):
    """The config of the named size (config.registry.MODEL_SIZES), of its family's class, with overrides."""
    if name not in MODEL_SIZES:
        raise ValueError(f"Unknown model {name!r}; known models: {', '.join(MODEL_SIZES)} "
                         "(or give n_layer/n_head/n_embd in the config)")
    return config_from_dict({**MODEL_SIZES[name], **overrides})


def build_model(config):
    """A GPT or a Llama, by the config's family."""
    return Llama(config) if config.family == "llama" else GPT(config)
