"""One training cell, resumably (python -m merit_repro.train): the loop, checkpoints, run files, divergence,
the memory fit, ranks and stops, evaluation and live tracking."""
