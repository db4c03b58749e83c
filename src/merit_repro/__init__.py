"""Reproduction of MERIT (ICML 2025): optimizers, GPT-2 training with the MAL probe, and the workflow's tables
and figures. The package imports nothing heavy here; import its modules directly."""

__version__ = "0.1.0"
