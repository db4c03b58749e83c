"""Corpora and tokenizers to token memmaps (python -m merit_repro.data), and batch sampling from them."""
