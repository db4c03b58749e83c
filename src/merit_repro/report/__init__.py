"""From finished runs to the paper's tables and figures: integrity checks, tables, claims (the only place
that decides), figures, results bundles, and one module per paper artifact. Never imports torch."""
