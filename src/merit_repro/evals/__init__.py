"""Evaluation beyond validation loss: lm-evaluation-harness on a run's model (Table 1), local tasks, and
export of a run to a HuggingFace model."""
